/*
 * mconf_test.c - mirror config changes (plugin/catalog/km_mconf.c): IncrementalAlterConfigs
 * SET/DELETE applied to a definition's key list and validated as CreateMirror does, which
 * changes need the source connections rebuilt, and the DescribeConfigs view (secrets hidden).
 */
#include <string.h>

#include "catalog/km_mconf.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "kp_errcode.h"

static fakehost_t *mt_fh;
static km_plugin_t mt_cm;

/* The stored key list of a mirror as CreateMirror wrote it. */
static const char *const mt_keys[] = {"bootstrap.servers", "topics.include", "sasl.password"};
static const char *const mt_values[] = {"127.0.0.1:9092", "a-.*", "hunter2-secret"};
#define MT_N 3

static int mt_setup(void)
{
    mt_fh = fakehost_new(NULL);
    if (mt_fh == NULL)
        return -1;
    memset(&mt_cm, 0, sizeof(mt_cm));
    mt_cm.ref.magic = KM_PLUGIN_MAGIC;
    mt_cm.ref.api = fakehost_api(mt_fh);
    mt_cm.ref.host = fakehost_host(mt_fh);
    return 0;
}

static int mt_teardown(void)
{
    int rc = fakehost_check_clean(mt_fh, NULL, 0);
    fakehost_free(mt_fh);
    return rc;
}

static int16_t mt_alter(const km_mconf_op_t *ops, size_t nops, km_mconf_result_t *r, char *msg,
                        size_t msg_size)
{
    return km_mconf_alter(&mt_cm, mt_keys, mt_values, MT_N, ops, nops, r, msg, msg_size);
}

static const char *mt_get(const km_mconf_result_t *r, const char *key)
{
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->keys[i], key) == 0)
            return r->values[i];
    return NULL;
}

/* One operation refused with @p ec and exactly @p want as the message. */
static void mt_refused(const km_mconf_op_t *ops, size_t nops, int16_t ec, const char *want)
{
    km_mconf_result_t r;
    char msg[256] = "";
    CU_ASSERT_EQUAL(mt_alter(ops, nops, &r, msg, sizeof(msg)), ec);
    CU_ASSERT_STRING_EQUAL(msg, want);
    if (strcmp(msg, want) != 0)
        fprintf(stderr, "\n    got:  %s\n    want: %s\n", msg, want);
    CU_ASSERT_EQUAL(r.n, 0);
    CU_ASSERT_PTR_NULL(r.keys);
}

static void mt_test_filters(void)
{
    km_mconf_result_t r;
    char msg[256];
    km_mconf_op_t set_ex[] = {{"topics.exclude", "a-skip.*", KM_MCONF_OP_SET},
                              {"sync.topic.configs.interval.ms", "1000", KM_MCONF_OP_SET}};
    km_mconf_op_t same[] = {{"topics.include", "a-.*", KM_MCONF_OP_SET}};
    km_mconf_op_t del[] = {{"topics.include", NULL, KM_MCONF_OP_DELETE},
                           {"groups.include", NULL, KM_MCONF_OP_DELETE}};
    km_mconf_op_t alias[] = {{"mirror.topics.include", "b-.*", KM_MCONF_OP_SET}};

    /* filter and sync keys: changed, applied without reconnecting; the rest is kept */
    CU_ASSERT_EQUAL_FATAL(mt_alter(set_ex, 2, &r, msg, sizeof(msg)), 0);
    CU_ASSERT(r.changed);
    CU_ASSERT_FALSE(r.reconnect);
    CU_ASSERT_EQUAL(r.n, 5);
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "topics.exclude"), "a-skip.*");
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "sync.topic.configs.interval.ms"), "1000");
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "bootstrap.servers"), "127.0.0.1:9092");
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "sasl.password"), "hunter2-secret");
    km_mconf_result_free(&mt_cm, &r);
    CU_ASSERT_EQUAL(r.n, 0);

    /* the same value again: no change */
    CU_ASSERT_EQUAL_FATAL(mt_alter(same, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT_FALSE(r.changed);
    CU_ASSERT_EQUAL(r.n, MT_N);
    km_mconf_result_free(&mt_cm, &r);

    /* DELETE removes the entry (the default applies); deleting an unset key changes nothing */
    CU_ASSERT_EQUAL_FATAL(mt_alter(del, 2, &r, msg, sizeof(msg)), 0);
    CU_ASSERT(r.changed);
    CU_ASSERT_EQUAL(r.n, MT_N - 1);
    CU_ASSERT_PTR_NULL(mt_get(&r, "topics.include"));
    km_mconf_result_free(&mt_cm, &r);

    /* an alias replaces its key's entry, under the name the operation used */
    CU_ASSERT_EQUAL_FATAL(mt_alter(alias, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT_EQUAL(r.n, MT_N);
    CU_ASSERT_PTR_NULL(mt_get(&r, "topics.include"));
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "mirror.topics.include"), "b-.*");
    km_mconf_result_free(&mt_cm, &r);
}

static void mt_test_connection(void)
{
    km_mconf_result_t r;
    char msg[256];
    km_mconf_op_t boot[] = {{"bootstrap.servers", "127.0.0.1:9093,127.0.0.1:9094", 0}};
    km_mconf_op_t boot_same[] = {{"bootstrap.servers", "127.0.0.1:9092", KM_MCONF_OP_SET}};
    km_mconf_op_t timeout[] = {{"request.timeout.ms", "30000", KM_MCONF_OP_SET}};
    km_mconf_op_t timeout2[] = {{"request.timeout.ms", "45000", KM_MCONF_OP_SET}};

    CU_ASSERT_EQUAL_FATAL(mt_alter(boot, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT(r.changed);
    CU_ASSERT(r.reconnect);
    CU_ASSERT_STRING_EQUAL(mt_get(&r, "bootstrap.servers"), "127.0.0.1:9093,127.0.0.1:9094");
    km_mconf_result_free(&mt_cm, &r);
    CU_ASSERT_EQUAL_FATAL(mt_alter(boot_same, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT_FALSE(r.changed);
    CU_ASSERT_FALSE(r.reconnect);
    km_mconf_result_free(&mt_cm, &r);
    /* setting a connection key to its default: stored, but the effective value is the same */
    CU_ASSERT_EQUAL_FATAL(mt_alter(timeout, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT(r.changed);
    CU_ASSERT_FALSE(r.reconnect);
    km_mconf_result_free(&mt_cm, &r);
    CU_ASSERT_EQUAL_FATAL(mt_alter(timeout2, 1, &r, msg, sizeof(msg)), 0);
    CU_ASSERT(r.reconnect);
    km_mconf_result_free(&mt_cm, &r);
}

static void mt_test_refused(void)
{
    km_mconf_op_t unknown[] = {{"no.such.key", "1", KM_MCONF_OP_SET}};
    km_mconf_op_t bad_long[] = {{"sync.topic.configs.interval.ms", "-5", KM_MCONF_OP_SET}};
    km_mconf_op_t bad_regex[] = {{"topics.exclude", "(", KM_MCONF_OP_SET}};
    km_mconf_op_t no_boot[] = {{"bootstrap.servers", NULL, KM_MCONF_OP_DELETE}};
    km_mconf_op_t twice[] = {{"topics.exclude", "x", KM_MCONF_OP_SET},
                             {"mirror.topics.exclude", "y", KM_MCONF_OP_SET}};
    km_mconf_op_t append[] = {{"acls.include", "x", KM_MCONF_OP_APPEND}};
    km_mconf_op_t badop[] = {{"topics.exclude", "x", 7}};
    km_mconf_op_t null_set[] = {{"topics.exclude", NULL, KM_MCONF_OP_SET}};
    km_mconf_op_t sasl[] = {{"security.protocol", "SASL_PLAINTEXT", KM_MCONF_OP_SET}};
    km_mconf_result_t r;
    char msg[256] = "";

    mt_refused(unknown, 1, KP_ERR_INVALID_CONFIG, "no.such.key: unknown mirror configuration key");
    mt_refused(no_boot, 1, KP_ERR_INVALID_CONFIG, "bootstrap.servers: required but not set");
    mt_refused(twice, 2, KP_ERR_INVALID_REQUEST, "topics.exclude is changed twice in one request");
    mt_refused(append, 1, KP_ERR_INVALID_CONFIG,
               "acls.include: only SET and DELETE are supported for mirror configs");
    mt_refused(badop, 1, KP_ERR_INVALID_REQUEST, "topics.exclude: unknown config operation 7");
    mt_refused(null_set, 1, KP_ERR_INVALID_CONFIG,
               "topics.exclude: SET needs a value (DELETE restores the default)");
    mt_refused(sasl, 1, KP_ERR_INVALID_CONFIG,
               "security.protocol=SASL_PLAINTEXT is not supported yet: the source connection "
               "supports PLAINTEXT only (TLS and SASL are later work)");
    /* bad values: the config engine's message, naming the key */
    CU_ASSERT_EQUAL(mt_alter(bad_long, 1, &r, msg, sizeof(msg)), KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "sync.topic.configs.interval.ms"));
    CU_ASSERT_EQUAL(r.n, 0);
    CU_ASSERT_EQUAL(mt_alter(bad_regex, 1, &r, msg, sizeof(msg)), KP_ERR_INVALID_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "topics.exclude"));
    CU_ASSERT_EQUAL(r.n, 0);
}

static void mt_test_validate(void)
{
    const char *const keys[] = {"bootstrap.servers", "topics.exclude", "mirror.topics.exclude"};
    const char *const values[] = {"h:1", "a", "b"};
    km_mirror_config_t conf;
    char msg[256];

    CU_ASSERT_EQUAL(km_mconf_validate(&mt_cm, keys, values, 3, &conf, msg, sizeof(msg)),
                    KP_ERR_INVALID_CONFIG);
    CU_ASSERT_STRING_EQUAL(msg, "topics.exclude is given twice");
    CU_ASSERT_EQUAL_FATAL(km_mconf_validate(&mt_cm, keys, values, 2, &conf, msg, sizeof(msg)), 0);
    CU_ASSERT_STRING_EQUAL(conf.topics_exclude, "a");
    km_config_free(&mt_cm, &km_config_mirror_scope, &conf);
}

static void mt_test_describe(void)
{
    km_mconf_entry_t e[256];
    size_t n = km_mconf_describe(mt_keys, mt_values, MT_N, e, 256);
    bool boot = false, pw = false, ex = false;

    CU_ASSERT_EQUAL(n, km_config_mirror_scope.ndefs);
    for (size_t i = 0; i < n; i++) {
        const char *name = e[i].def->name;
        if (e[i].value != NULL)
            CU_ASSERT_PTR_NULL(strstr(e[i].value, "hunter2"));
        if (strcmp(name, "bootstrap.servers") == 0) {
            boot = true;
            CU_ASSERT_FALSE(e[i].is_default);
            CU_ASSERT_STRING_EQUAL(e[i].value, "127.0.0.1:9092");
        } else if (strcmp(name, "sasl.password") == 0) {
            pw = true;
            CU_ASSERT(e[i].sensitive);
            CU_ASSERT_FALSE(e[i].is_default);
            CU_ASSERT_PTR_NULL(e[i].value);
        } else if (strcmp(name, "topics.exclude") == 0) {
            ex = true;
            CU_ASSERT(e[i].is_default);
            CU_ASSERT_STRING_EQUAL(e[i].value, "__.*");
        }
    }
    CU_ASSERT(boot && pw && ex);
    CU_ASSERT_EQUAL(km_mconf_describe(mt_keys, mt_values, MT_N, e, 2), 2);
}

static CU_TestInfo mt_tests[] = {
    {"filter and sync keys change without reconnecting; DELETE; aliases", mt_test_filters},
    {"connection keys need a reconnect only when their effective value changes",
     mt_test_connection},
    {"unknown keys, bad values, required keys, operations refused with a message", mt_test_refused},
    {"a complete key list checked as CreateMirror does", mt_test_validate},
    {"DescribeConfigs view: effective values, defaults, secrets hidden", mt_test_describe},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo mt_suites[] = {
    {"mconf", mt_setup, mt_teardown, NULL, NULL, mt_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(mt_suites);
}
