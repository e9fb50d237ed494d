/*
 * abi_layout_test.c - pins the layout of every struct in kbx.h (LP64) and checks the
 * version/size helpers. If a _Static_assert here fires, an ABI struct changed shape: that is
 * only allowed by appending members (and updating the sizes below), never by reordering.
 */
#include <string.h>

#include "fh_cunit.h"
#include "kbx.h"
#include "kbx_loader.h"

_Static_assert(sizeof(void *) == 8 && sizeof(size_t) == 8, "layout pinned for LP64 targets");

#define KBX_AT(type, member, off) _Static_assert(offsetof(type, member) == (off), #type "." #member)
#define KBX_SIZE(type, n)         _Static_assert(sizeof(type) == (n), "sizeof " #type)

KBX_SIZE(kbx_uuid_t, 16);

KBX_AT(kbx_host_info_t, struct_size, 0);
KBX_AT(kbx_host_info_t, broker_id, 4);
KBX_AT(kbx_host_info_t, cluster_id, 8);
KBX_AT(kbx_host_info_t, software, 56);
KBX_SIZE(kbx_host_info_t, 120);

KBX_AT(kbx_metric_desc_t, type, 4);
KBX_AT(kbx_metric_desc_t, group, 8);
KBX_AT(kbx_metric_desc_t, name, 16);
KBX_AT(kbx_metric_desc_t, help, 24);
KBX_AT(kbx_metric_desc_t, label_keys, 32);
KBX_AT(kbx_metric_desc_t, label_values, 40);
KBX_AT(kbx_metric_desc_t, label_count, 48);
KBX_AT(kbx_metric_desc_t, _pad0, 52);
KBX_SIZE(kbx_metric_desc_t, 56);

KBX_AT(kbx_rpc_request_t, api_key, 4);
KBX_AT(kbx_rpc_request_t, api_version, 6);
KBX_AT(kbx_rpc_request_t, correlation_id, 8);
KBX_AT(kbx_rpc_request_t, _pad0, 12);
KBX_AT(kbx_rpc_request_t, client_id, 16);
KBX_AT(kbx_rpc_request_t, principal, 24);
KBX_AT(kbx_rpc_request_t, client_host, 32);
KBX_AT(kbx_rpc_request_t, listener, 40);
KBX_AT(kbx_rpc_request_t, body, 48);
KBX_AT(kbx_rpc_request_t, body_len, 56);
KBX_SIZE(kbx_rpc_request_t, 64);

KBX_AT(kbx_rpc_ops_t, api_key, 4);
KBX_AT(kbx_rpc_ops_t, min_version, 6);
KBX_AT(kbx_rpc_ops_t, max_version, 8);
KBX_AT(kbx_rpc_ops_t, first_flexible_version, 10);
KBX_AT(kbx_rpc_ops_t, _pad0, 12);
KBX_AT(kbx_rpc_ops_t, handle, 16);
KBX_AT(kbx_rpc_ops_t, cancel, 24);
KBX_AT(kbx_rpc_ops_t, config_resource_type, 32);
KBX_AT(kbx_rpc_ops_t, _pad1, 36);
KBX_SIZE(kbx_rpc_ops_t, 40);

KBX_AT(kbx_topic_change_t, flags, 4);
KBX_AT(kbx_topic_change_t, topic_id, 8);
KBX_AT(kbx_topic_change_t, name, 24);
KBX_AT(kbx_topic_change_t, partition_count, 32);
KBX_AT(kbx_topic_change_t, _pad0, 36);
KBX_SIZE(kbx_topic_change_t, 40);

KBX_AT(kbx_config_change_t, resource_type, 4);
KBX_AT(kbx_config_change_t, resource_name, 8);
KBX_AT(kbx_config_change_t, key, 16);
KBX_AT(kbx_config_change_t, value, 24);
KBX_SIZE(kbx_config_change_t, 32);

KBX_AT(kbx_broker_change_t, broker_id, 4);
KBX_AT(kbx_broker_change_t, flags, 8);
KBX_AT(kbx_broker_change_t, _pad0, 12);
KBX_AT(kbx_broker_change_t, rack, 16);
KBX_SIZE(kbx_broker_change_t, 24);

KBX_AT(kbx_record_t, record_type, 4);
KBX_AT(kbx_record_t, key, 8);
KBX_AT(kbx_record_t, key_len, 16);
KBX_AT(kbx_record_t, value, 24);
KBX_AT(kbx_record_t, value_len, 32);
KBX_SIZE(kbx_record_t, 40);

KBX_AT(kbx_metadata_delta_t, flags, 4);
KBX_AT(kbx_metadata_delta_t, metadata_offset, 8);
KBX_AT(kbx_metadata_delta_t, topics, 16);
KBX_AT(kbx_metadata_delta_t, configs, 24);
KBX_AT(kbx_metadata_delta_t, brokers, 32);
KBX_AT(kbx_metadata_delta_t, records, 40);
KBX_AT(kbx_metadata_delta_t, topic_count, 48);
KBX_AT(kbx_metadata_delta_t, config_count, 52);
KBX_AT(kbx_metadata_delta_t, broker_count, 56);
KBX_AT(kbx_metadata_delta_t, record_count, 60);
KBX_SIZE(kbx_metadata_delta_t, 64);

KBX_AT(kbx_metadata_ops_t, _pad0, 4);
KBX_AT(kbx_metadata_ops_t, on_delta, 8);
KBX_SIZE(kbx_metadata_ops_t, 16);

KBX_AT(kbx_leadership_change_t, role, 4);
KBX_AT(kbx_leadership_change_t, topic_id, 8);
KBX_AT(kbx_leadership_change_t, topic_name, 24);
KBX_AT(kbx_leadership_change_t, partition, 32);
KBX_AT(kbx_leadership_change_t, leader_id, 36);
KBX_AT(kbx_leadership_change_t, leader_epoch, 40);
KBX_AT(kbx_leadership_change_t, partition_epoch, 44);
KBX_SIZE(kbx_leadership_change_t, 48);

KBX_AT(kbx_leadership_ops_t, _pad0, 4);
KBX_AT(kbx_leadership_ops_t, on_change, 8);
KBX_SIZE(kbx_leadership_ops_t, 16);

KBX_AT(kbx_log_offsets_t, leader_epoch, 4);
KBX_AT(kbx_log_offsets_t, log_start_offset, 8);
KBX_AT(kbx_log_offsets_t, last_stable_offset, 16);
KBX_AT(kbx_log_offsets_t, high_watermark, 24);
KBX_AT(kbx_log_offsets_t, log_end_offset, 32);
KBX_AT(kbx_log_offsets_t, latest_cached_epoch, 40);
KBX_AT(kbx_log_offsets_t, _pad0, 44);
KBX_AT(kbx_log_offsets_t, last_pid_reset_offset, 48); /* 1.1 */
KBX_SIZE(kbx_log_offsets_t, 56);

KBX_AT(kbx_open_txn_t, producer_epoch, 4); /* 1.1 */
KBX_AT(kbx_open_txn_t, _pad0, 6);
KBX_AT(kbx_open_txn_t, producer_id, 8);
KBX_AT(kbx_open_txn_t, first_offset, 16);
KBX_AT(kbx_open_txn_t, coordinator_epoch, 24);
KBX_AT(kbx_open_txn_t, _pad1, 28);
KBX_SIZE(kbx_open_txn_t, 32);

KBX_AT(kbx_append_result_t, batch_count, 4);
KBX_AT(kbx_append_result_t, first_offset, 8);
KBX_AT(kbx_append_result_t, last_offset, 16);
KBX_AT(kbx_append_result_t, log_end_offset, 24);
KBX_SIZE(kbx_append_result_t, 32);

KBX_AT(kbx_control_batch_t, control_type, 4);
KBX_AT(kbx_control_batch_t, producer_epoch, 6);
KBX_AT(kbx_control_batch_t, producer_id, 8);
KBX_AT(kbx_control_batch_t, coordinator_epoch, 16);
KBX_AT(kbx_control_batch_t, leader_epoch, 20);
KBX_AT(kbx_control_batch_t, timestamp_ms, 24);
KBX_SIZE(kbx_control_batch_t, 32);

KBX_AT(kbx_plugin_desc_t, struct_size, 0);
KBX_AT(kbx_plugin_desc_t, abi_major, 4);
KBX_AT(kbx_plugin_desc_t, abi_minor, 6);
KBX_AT(kbx_plugin_desc_t, name, 8);
KBX_AT(kbx_plugin_desc_t, version, 16);
KBX_AT(kbx_plugin_desc_t, build_id, 24);
KBX_AT(kbx_plugin_desc_t, init, 32);
KBX_AT(kbx_plugin_desc_t, fini, 40);
KBX_SIZE(kbx_plugin_desc_t, 48);
_Static_assert(KBX_PLUGIN_DESC_SIZE_1_0 == 48, "1.0 descriptor size");

/* The API table: the order below IS the ABI. Append new members at the end only. */
KBX_AT(kbx_api_t, struct_size, 0);
KBX_AT(kbx_api_t, abi_major, 4);
KBX_AT(kbx_api_t, abi_minor, 6);
#define KBX_FN(member, index) KBX_AT(kbx_api_t, member, 8 + 8 * (index))
KBX_FN(host_info, 0);
KBX_FN(fatal, 1);
KBX_FN(log_enabled, 2);
KBX_FN(log_write, 3);
KBX_FN(mem_alloc, 4);
KBX_FN(mem_calloc, 5);
KBX_FN(mem_realloc, 6);
KBX_FN(mem_free, 7);
KBX_FN(clock_monotonic_ns, 8);
KBX_FN(clock_wall_ms, 9);
KBX_FN(thread_start, 10);
KBX_FN(thread_join, 11);
KBX_FN(latch_create, 12);
KBX_FN(latch_set, 13);
KBX_FN(latch_wait, 14);
KBX_FN(latch_destroy, 15);
KBX_FN(timer_start, 16);
KBX_FN(timer_cancel, 17);
KBX_FN(metric_register, 18);
KBX_FN(metric_record, 19);
KBX_FN(metric_unregister, 20);
KBX_FN(config_get, 21);
KBX_FN(config_foreach, 22);
KBX_FN(rpc_register, 23);
KBX_FN(rpc_unregister, 24);
KBX_FN(complete_response, 25);
KBX_FN(metadata_listen, 26);
KBX_FN(leadership_listen, 27);
KBX_FN(listener_unregister, 28);
KBX_FN(partition_acquire, 29);
KBX_FN(partition_release, 30);
KBX_FN(log_offsets, 31);
KBX_FN(log_append, 32);
KBX_FN(log_append_control, 33);
KBX_FN(log_truncate, 34);
KBX_FN(log_epoch_end_offset, 35);
KBX_FN(log_set_start, 36);
KBX_FN(partition_set_write_mode, 37);
KBX_FN(wait_isr_truncation, 38);
KBX_FN(leader_epoch_bump, 39);
KBX_FN(controller_write, 40);
KBX_FN(local_request, 41);
KBX_FN(broker_request, 42);
KBX_FN(authorize, 43);
KBX_FN(log_open_txns, 44); /* 1.1 */
KBX_SIZE(kbx_api_t, 8 + 8 * 45);
_Static_assert(KBX_API_SIZE_1_0 == 8 + 8 * 44, "1.0 table size");
_Static_assert(KBX_API_SIZE_1_1 == 8 + 8 * 45, "1.1 table size");

/* --- runtime checks of the helpers ------------------------------------------------------- */

static int32_t abi_test_log_enabled(kbx_host_t *host, int32_t level, const char *component)
{
    return 1;
}

static void abi_test_api_has(void)
{
    kbx_api_t api;

    memset(&api, 0, sizeof(api));
    api.struct_size = sizeof(api);
    CU_ASSERT_FALSE(KBX_API_HAS(&api, log_enabled)); /* NULL member */
    api.log_enabled = abi_test_log_enabled;
    CU_ASSERT_TRUE(KBX_API_HAS(&api, log_enabled));
    /* An older (smaller) table does not have a member beyond its size, even if the bytes
     * there happen to be non-NULL. */
    api.struct_size = (uint32_t)offsetof(kbx_api_t, log_enabled);
    CU_ASSERT_FALSE(KBX_API_HAS(&api, log_enabled));
    api.struct_size = (uint32_t)(offsetof(kbx_api_t, log_enabled) + sizeof(api.log_enabled));
    CU_ASSERT_TRUE(KBX_API_HAS(&api, log_enabled));
    CU_ASSERT_FALSE(KBX_API_HAS((const kbx_api_t *)NULL, log_enabled));
}

static void abi_test_cancel(void *ctx, kbx_token_t *token, void *token_ctx)
{
}

static void abi_test_ops_copy(void)
{
    kbx_rpc_ops_t src, dst;
    unsigned char big[sizeof(kbx_rpc_ops_t) + 16];

    memset(&src, 0xab, sizeof(src));
    src.struct_size = (uint32_t)offsetof(kbx_rpc_ops_t, cancel); /* an "older" plugin */
    src.cancel = abi_test_cancel;
    CU_ASSERT_EQUAL(kbx_ops_copy(&dst, sizeof(dst), &src), offsetof(kbx_rpc_ops_t, cancel));
    CU_ASSERT_PTR_NULL(dst.cancel); /* missing trailing member reads as NULL */
    CU_ASSERT_EQUAL(dst.api_key, src.api_key);
    CU_ASSERT_EQUAL(dst.struct_size, offsetof(kbx_rpc_ops_t, cancel));

    /* A "newer" plugin with a bigger struct: the host takes only what it knows. */
    memset(big, 0x11, sizeof(big));
    src.struct_size = sizeof(big);
    memcpy(big, &src.struct_size, sizeof(src.struct_size));
    CU_ASSERT_EQUAL(kbx_ops_copy(&dst, sizeof(dst), big), sizeof(dst));
    CU_ASSERT_EQUAL(dst.struct_size, sizeof(dst));

    CU_ASSERT_EQUAL(kbx_ops_copy(&dst, sizeof(dst), NULL), 0);
    CU_ASSERT_PTR_NULL(dst.handle);
}

static void abi_test_err_str(void)
{
    CU_ASSERT_STRING_EQUAL(kbx_err_str(KBX_OK), "success");
    CU_ASSERT_STRING_EQUAL(kbx_err_str(KBX_ERR_FENCED),
                           "partition leader epoch changed (handle fenced)");
    CU_ASSERT_STRING_EQUAL(kbx_err_str(-999), "unknown error");
}

static CU_TestInfo abi_tests[] = {
    {"KBX_API_HAS", abi_test_api_has},
    {"kbx_ops_copy", abi_test_ops_copy},
    {"kbx_err_str", abi_test_err_str},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo abi_suites[] = {
    {"abi", NULL, NULL, NULL, NULL, abi_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(abi_suites);
}
