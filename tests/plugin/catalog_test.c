/*
 * catalog_test.c - catalog/: mirror-name rules, the definition value format (round trip, every
 * truncation, versions, hostile counts), the catalog built from metadata deltas and leadership
 * changes (mirrors, topics with mirror.name and their desired state, brokers, snapshots that
 * sweep), subscriber events, secrets never logged, allocation failures, and the host-callback
 * path through a running plugin.
 */
#include <string.h>

#include "catalog/km_catalog.h"
#include "core/km_plugin.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"
#include "util/km_mem.h"

static fakehost_t *ct_fh;
static km_plugin_t ct_cm;

static const kbx_uuid_t CT_ID1 = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
static const kbx_uuid_t CT_ID2 = {{0xb0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
static const uint8_t CT_MID[16] = {0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static int ct_setup(void)
{
    ct_fh = fakehost_new(NULL);
    if (ct_fh == NULL)
        return -1;
    memset(&ct_cm, 0, sizeof(ct_cm));
    ct_cm.ref.magic = KM_PLUGIN_MAGIC;
    ct_cm.ref.api = fakehost_api(ct_fh);
    ct_cm.ref.host = fakehost_host(ct_fh);
    return 0;
}

static int ct_teardown(void)
{
    char err[512] = "";
    int rc = fakehost_check_clean(ct_fh, err, sizeof(err));

    if (rc != 0)
        fprintf(stderr, "leftovers: %s\n", err);
    fakehost_free(ct_fh);
    return rc;
}

/* ---- events recorded by a subscriber ---- */
typedef struct ct_events {
    int mirror_put, mirror_del, topic, part;
    char last_topic[64];
    km_desired_t last_old_desired;
    km_cat_part_t last_old_part;
} ct_events_t;

static void ct_on_mirror(void *arg, const char *name, const km_mirror_def_t *def)
{
    ct_events_t *ev = arg;

    (void)name;
    if (def != NULL)
        ev->mirror_put++;
    else
        ev->mirror_del++;
}

static void ct_on_topic(void *arg, const km_cat_topic_t *t, const char *old_mirror,
                        km_desired_t old_desired)
{
    ct_events_t *ev = arg;

    (void)old_mirror;
    ev->topic++;
    snprintf(ev->last_topic, sizeof(ev->last_topic), "%s", t->name);
    ev->last_old_desired = old_desired;
}

static void ct_on_part(void *arg, const km_cat_topic_t *t, int32_t p, const km_cat_part_t *old)
{
    ct_events_t *ev = arg;

    (void)t;
    (void)p;
    ev->part++;
    ev->last_old_part = *old;
}

static const km_catalog_ops_t ct_ops = {
    .on_mirror = ct_on_mirror,
    .on_topic = ct_on_topic,
    .on_partition = ct_on_part,
};

static void ct_test_names(void)
{
    char err[160], base[64];
    km_desired_t d;

    CU_ASSERT_TRUE(km_catalog_mirror_name_valid("dc-east_1.prod", 14, err, sizeof(err)));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("", 0, err, sizeof(err)));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid(".", 1, err, sizeof(err)));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("..", 2, err, sizeof(err)));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("a b", 3, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "character 1"));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("m.paused", 8, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, ".paused"));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("m.stopped", 9, err, sizeof(err)));
    CU_ASSERT_FALSE(km_catalog_mirror_name_valid("m.removed", 9, err, sizeof(err)));
    CU_ASSERT_TRUE(km_catalog_mirror_name_valid("m.pausedx", 9, err, sizeof(err)));
    {
        char longname[251];
        memset(longname, 'x', 250);
        longname[250] = '\0';
        CU_ASSERT_FALSE(km_catalog_mirror_name_valid(longname, 250, err, sizeof(err)));
        CU_ASSERT_TRUE(km_catalog_mirror_name_valid(longname, 249, err, sizeof(err)));
    }
    CU_ASSERT_TRUE(km_catalog_parse_mirror_name("m1", base, sizeof(base), &d));
    CU_ASSERT_STRING_EQUAL(base, "m1");
    CU_ASSERT_EQUAL(d, KM_DESIRED_RUNNING);
    CU_ASSERT_TRUE(km_catalog_parse_mirror_name("m1.paused", base, sizeof(base), &d));
    CU_ASSERT_STRING_EQUAL(base, "m1");
    CU_ASSERT_EQUAL(d, KM_DESIRED_PAUSED);
    CU_ASSERT_TRUE(km_catalog_parse_mirror_name("m1.stopped", base, sizeof(base), &d));
    CU_ASSERT_EQUAL(d, KM_DESIRED_STOPPED);
    CU_ASSERT_TRUE(km_catalog_parse_mirror_name("m1.removed", base, sizeof(base), &d));
    CU_ASSERT_EQUAL(d, KM_DESIRED_STOPPED);
    CU_ASSERT_FALSE(km_catalog_parse_mirror_name(".paused", base, sizeof(base), &d));
    CU_ASSERT_FALSE(km_catalog_parse_mirror_name("abcdef", base, 4, &d));
    CU_ASSERT_STRING_EQUAL(km_catalog_desired_name(KM_DESIRED_PAUSED), "PAUSED");
}

static uint8_t *ct_encode(size_t *len, const char *scid)
{
    static const char *const keys[] = {"bootstrap.servers", "sasl.jaas.config", "client.id"};
    static const char *const values[] = {"127.0.0.1:9092", "top-secret-jaas", NULL};
    uint8_t *buf = NULL;

    CU_ASSERT_EQUAL(
        km_catalog_def_encode(&ct_cm, CT_MID, 1234567, scid, keys, values, 3, &buf, len), KM_OK);
    return buf;
}

static void ct_test_def_format(void)
{
    km_mirror_def_t *def = NULL;
    char err[160];
    size_t len;
    uint8_t *buf = ct_encode(&len, "src-cluster");

    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    /* Layout: versions first (format 1, readers of 1). */
    CU_ASSERT_EQUAL(buf[0], 0);
    CU_ASSERT_EQUAL(buf[1], 1);
    CU_ASSERT_EQUAL(buf[2], 0);
    CU_ASSERT_EQUAL(buf[3], 1);
    CU_ASSERT_EQUAL(memcmp(buf + 4, CT_MID, 16), 0);
    CU_ASSERT_EQUAL_FATAL(km_catalog_def_decode(&ct_cm, "m1", buf, len, &def, err, sizeof(err)),
                          KM_OK);
    CU_ASSERT_STRING_EQUAL(def->name, "m1");
    CU_ASSERT_EQUAL(memcmp(def->mirror_id, CT_MID, 16), 0);
    CU_ASSERT_EQUAL(def->creation_time_ms, 1234567);
    CU_ASSERT_STRING_EQUAL(def->source_cluster_id, "src-cluster");
    CU_ASSERT_EQUAL_FATAL(def->nconfig, 3);
    CU_ASSERT_STRING_EQUAL(def->keys[0], "bootstrap.servers");
    CU_ASSERT_STRING_EQUAL(def->values[1], "top-secret-jaas");
    CU_ASSERT_PTR_NULL(def->values[2]);
    km_catalog_def_free(&ct_cm, def);

    /* Every truncation is refused, never misread. */
    for (size_t n = 0; n < len; n++) {
        def = NULL;
        CU_ASSERT_EQUAL(km_catalog_def_decode(&ct_cm, "m1", buf, n, &def, err, sizeof(err)),
                        KM_ERR_INVALID);
        CU_ASSERT_PTR_NULL(def);
    }
    /* A newer writer's extra bytes are ignored when it says old readers may read it. */
    {
        uint8_t *ext = km_malloc(&ct_cm, len + 5);
        memcpy(ext, buf, len);
        memset(ext + len, 0x7f, 5);
        ext[1] = 2; /* format 2, min reader 1 */
        CU_ASSERT_EQUAL(km_catalog_def_decode(&ct_cm, "m1", ext, len + 5, &def, err, sizeof(err)),
                        KM_OK);
        km_catalog_def_free(&ct_cm, def);
        ext[3] = 2; /* min reader 2: refused */
        CU_ASSERT_EQUAL(km_catalog_def_decode(&ct_cm, "m1", ext, len + 5, &def, err, sizeof(err)),
                        KM_ERR_INVALID);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "readers of format 2"));
        km_free(&ct_cm, ext);
    }
    /* A count far beyond the bytes left. */
    {
        size_t at = 4 + 16 + 8 + 2 + strlen("src-cluster");
        uint8_t save[4];
        memcpy(save, buf + at, 4);
        buf[at] = 0x7f;
        CU_ASSERT_EQUAL(km_catalog_def_decode(&ct_cm, "m1", buf, len, &def, err, sizeof(err)),
                        KM_ERR_INVALID);
        memcpy(buf + at, save, 4);
        /* A NUL inside a string. */
        buf[at + 4 + 2] = '\0';
        CU_ASSERT_EQUAL(km_catalog_def_decode(&ct_cm, "m1", buf, len, &def, err, sizeof(err)),
                        KM_ERR_INVALID);
    }
    km_free(&ct_cm, buf);
    /* Encoding refuses what int16 lengths cannot carry. */
    {
        static char big[40000];
        const char *k[] = {"client.id"};
        const char *v[] = {big};
        memset(big, 'x', sizeof(big) - 1);
        CU_ASSERT_EQUAL(km_catalog_def_encode(&ct_cm, CT_MID, 0, NULL, k, v, 1, &buf, &len),
                        KM_ERR_INVALID);
        CU_ASSERT_PTR_NULL(buf);
    }
}

/* A snapshot: two topics, one more, mirror.name on two, a definition, two brokers. */
static void ct_apply_snapshot(km_catalog_t *cat, bool with_pay)
{
    kbx_topic_change_t t1 = {sizeof(t1), KBX_TOPIC_CREATED, CT_ID1, "orders", 3, 0};
    kbx_topic_change_t t2 = {sizeof(t2), KBX_TOPIC_CREATED, CT_ID2, "pay", 1, 0};
    kbx_topic_change_t t3 = {sizeof(t3), KBX_TOPIC_CREATED, {{9}}, "plain", 2, 0};
    const kbx_topic_change_t *tv[] = {&t1, &t2, &t3};
    kbx_config_change_t c1 = {sizeof(c1), 2, "orders", "mirror.name", "m1"};
    kbx_config_change_t c2 = {sizeof(c2), 2, "pay", "mirror.name", "m1.paused"};
    kbx_config_change_t c3 = {sizeof(c3), 2, "plain", "retention.ms", "1000"};
    const kbx_config_change_t *cv[] = {&c1, &c2, &c3};
    kbx_broker_change_t b1 = {sizeof(b1), 1, KBX_BROKER_REGISTERED, 0, NULL};
    kbx_broker_change_t b2 = {sizeof(b2), 2, KBX_BROKER_REGISTERED, 0, NULL};
    const kbx_broker_change_t *bv[] = {&b1, &b2};
    size_t len;
    uint8_t *val = ct_encode(&len, "src");
    kbx_record_t r1 = {sizeof(r1), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)"m1", 2, val, len};
    kbx_record_t r2 = {sizeof(r2), 7, (const uint8_t *)"x", 1, val, len}; /* not ours */
    const kbx_record_t *rv[] = {&r1, &r2};
    kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                              .flags = KBX_DELTA_SNAPSHOT,
                              .metadata_offset = 10,
                              .topics = tv,
                              .configs = cv,
                              .brokers = bv,
                              .records = rv,
                              .topic_count = with_pay ? 3 : 1,
                              .config_count = with_pay ? 3 : 1,
                              .broker_count = 2,
                              .record_count = 2};

    if (!with_pay) {
        tv[0] = &t1;
        cv[0] = &c1;
    }
    CU_ASSERT_EQUAL(km_catalog_apply_delta(cat, &d), KM_OK);
    km_free(&ct_cm, val);
}

static void ct_test_deltas(void)
{
    km_catalog_t cat;
    ct_events_t ev;
    const km_mirror_def_t *def;
    const km_cat_topic_t *t;
    const int32_t *brokers;
    size_t nb;

    memset(&ev, 0, sizeof(ev));
    km_catalog_init(&ct_cm, &cat);
    CU_ASSERT_FALSE(km_catalog_ready(&cat));
    CU_ASSERT_EQUAL(km_catalog_subscribe(&cat, &ct_ops, &ev), KM_OK);
    ct_apply_snapshot(&cat, true);
    CU_ASSERT_TRUE(km_catalog_ready(&cat));
    CU_ASSERT_EQUAL(km_catalog_offset(&cat), 10);
    CU_ASSERT_EQUAL(km_catalog_mirror_count(&cat), 1);
    def = km_catalog_mirror_find(&cat, "m1");
    CU_ASSERT_PTR_NOT_NULL_FATAL(def);
    CU_ASSERT_TRUE(def->conf_ok);
    CU_ASSERT_EQUAL_FATAL(def->conf.bootstrap_servers.n, 1);
    CU_ASSERT_STRING_EQUAL(def->conf.bootstrap_servers.v[0], "127.0.0.1:9092");
    CU_ASSERT_STRING_EQUAL(def->source_cluster_id, "src");
    CU_ASSERT_EQUAL(km_catalog_mirror_topic_count(&cat, "m1"), 2);
    t = km_catalog_topic_find(&cat, "orders");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->partition_count, 3);
    CU_ASSERT_EQUAL(memcmp(&t->id, &CT_ID1, 16), 0);
    CU_ASSERT_STRING_EQUAL(t->mirror, "m1");
    CU_ASSERT_EQUAL(t->desired, KM_DESIRED_RUNNING);
    t = km_catalog_topic_find(&cat, "pay");
    CU_ASSERT_EQUAL(t->desired, KM_DESIRED_PAUSED);
    t = km_catalog_topic_find(&cat, "plain");
    CU_ASSERT_PTR_NULL(t->mirror);
    CU_ASSERT_EQUAL(t->desired, KM_DESIRED_NONE);
    brokers = km_catalog_brokers(&cat, &nb);
    CU_ASSERT_EQUAL(nb, 2);
    CU_ASSERT(brokers[0] + brokers[1] == 3);
    CU_ASSERT_EQUAL(ev.mirror_put, 1);
    CU_ASSERT_EQUAL(ev.topic, 2);
    /* The secret went into the definition, never into a log line. */
    CU_ASSERT_FALSE(fakehost_log_contains(ct_fh, "top-secret-jaas"));

    /* A delta: pay stopped, orders deleted, a broker fenced, the mirror deleted. */
    {
        kbx_config_change_t c = {sizeof(c), 2, "pay", "mirror.name", "m1.stopped"};
        const kbx_config_change_t *cv[] = {&c};
        kbx_topic_change_t td = {sizeof(td), KBX_TOPIC_DELETED, CT_ID1, "orders", 0, 0};
        const kbx_topic_change_t *tv[] = {&td};
        kbx_broker_change_t b = {sizeof(b), 2, KBX_BROKER_FENCED, 0, NULL};
        const kbx_broker_change_t *bv[] = {&b};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                                  .metadata_offset = 11,
                                  .configs = cv,
                                  .config_count = 1,
                                  .brokers = bv,
                                  .broker_count = 1};

        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_EQUAL(ev.topic, 3);
        CU_ASSERT_STRING_EQUAL(ev.last_topic, "pay");
        CU_ASSERT_EQUAL(ev.last_old_desired, KM_DESIRED_PAUSED);
        CU_ASSERT_EQUAL(km_catalog_topic_find(&cat, "pay")->desired, KM_DESIRED_STOPPED);
        brokers = km_catalog_brokers(&cat, &nb);
        CU_ASSERT_EQUAL(nb, 1);
        CU_ASSERT_EQUAL(brokers[0], 1);

        /* Leadership of an orders partition, then its deletion. */
        {
            kbx_leadership_change_t l = {sizeof(l), KBX_ROLE_LEADER, CT_ID1, "orders", 1, 1, 5, 7};
            const kbx_leadership_change_t *lv[] = {&l};
            CU_ASSERT_EQUAL(km_catalog_apply_leadership(&cat, lv, 1), KM_OK);
            CU_ASSERT_EQUAL(ev.part, 1);
            CU_ASSERT_EQUAL(ev.last_old_part.role, 0);
            t = km_catalog_topic_find(&cat, "orders");
            CU_ASSERT_EQUAL(t->parts[1].role, KBX_ROLE_LEADER);
            CU_ASSERT_EQUAL(t->parts[1].leader_epoch, 5);
            /* The same again is no event. */
            CU_ASSERT_EQUAL(km_catalog_apply_leadership(&cat, lv, 1), KM_OK);
            CU_ASSERT_EQUAL(ev.part, 1);
        }
        /* CreatePartitions 3 -> 5: the leadership of partition 4 arrives before the topic's
         * new count (a subscriber ignores it then: beyond the count); the count's delta tells
         * the subscribers again about the local replicas it adds (4), not about the others. */
        {
            kbx_leadership_change_t l = {sizeof(l), KBX_ROLE_LEADER, CT_ID1, "orders", 4, 1, 0, 0};
            const kbx_leadership_change_t *lv[] = {&l};
            kbx_topic_change_t tg = {sizeof(tg), 0, CT_ID1, "orders", 5, 0};
            const kbx_topic_change_t *tgv[] = {&tg};
            kbx_metadata_delta_t dg = {.struct_size = sizeof(dg), .topics = tgv, .topic_count = 1};
            CU_ASSERT_EQUAL(km_catalog_apply_leadership(&cat, lv, 1), KM_OK);
            CU_ASSERT_EQUAL(ev.part, 2);
            CU_ASSERT_EQUAL(km_catalog_topic_find(&cat, "orders")->partition_count, 3);
            CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &dg), KM_OK);
            CU_ASSERT_EQUAL(km_catalog_topic_find(&cat, "orders")->partition_count, 5);
            CU_ASSERT_EQUAL(ev.part, 3);
            CU_ASSERT_EQUAL(ev.last_old_part.role, KBX_ROLE_LEADER);
            CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &dg), KM_OK); /* same count: none */
            CU_ASSERT_EQUAL(ev.part, 3);
        }
        d.configs = NULL;
        d.config_count = 0;
        d.brokers = NULL;
        d.broker_count = 0;
        d.topics = tv;
        d.topic_count = 1;
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_PTR_NULL(km_catalog_topic_find(&cat, "orders"));
        CU_ASSERT_EQUAL(ev.part, 5); /* the replicas went (partitions 1 and 4) */
        CU_ASSERT_EQUAL(ev.last_old_part.role, KBX_ROLE_LEADER);
        CU_ASSERT_EQUAL(ev.topic, 4); /* and the association */
        CU_ASSERT_EQUAL(km_catalog_mirror_topic_count(&cat, "m1"), 1);
    }
    /* mirror.support.unclean.leader.election: kept per topic, a change is a topic event. */
    {
        kbx_config_change_t c = {sizeof(c), 2, "pay", KM_CATALOG_ULE_KEY, "TRUE"};
        const kbx_config_change_t *cv[] = {&c};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .configs = cv, .config_count = 1};

        CU_ASSERT_FALSE(km_catalog_topic_find(&cat, "pay")->unclean_election);
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_TRUE(km_catalog_topic_find(&cat, "pay")->unclean_election);
        CU_ASSERT_EQUAL(ev.topic, 5);
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK); /* same value: no event */
        CU_ASSERT_EQUAL(ev.topic, 5);
        c.value = NULL; /* deleted */
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_FALSE(km_catalog_topic_find(&cat, "pay")->unclean_election);
        CU_ASSERT_EQUAL(ev.topic, 6);
        CU_ASSERT_EQUAL(km_catalog_topic_find(&cat, "pay")->desired, KM_DESIRED_STOPPED);
    }
    {
        kbx_record_t r = {sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)"m1", 2, NULL, 0};
        const kbx_record_t *rv[] = {&r};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .records = rv, .record_count = 1};
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_EQUAL(km_catalog_mirror_count(&cat), 0);
        CU_ASSERT_EQUAL(ev.mirror_del, 1);
    }
    /* A corrupt definition is logged and ignored. */
    {
        kbx_record_t r = {sizeof(r), KM_CATALOG_RECORD_MIRROR,    (const uint8_t *)"bad",
                          3,         (const uint8_t *)"\x00\x01", 2};
        const kbx_record_t *rv[] = {&r};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d), .records = rv, .record_count = 1};
        CU_ASSERT_EQUAL(km_catalog_apply_delta(&cat, &d), KM_OK);
        CU_ASSERT_EQUAL(km_catalog_mirror_count(&cat), 0);
        CU_ASSERT_TRUE(fakehost_log_contains(ct_fh, "mirror bad: definition record (2 bytes) "
                                                    "ignored"));
    }
    km_catalog_destroy(&cat);
}

static void ct_test_snapshot_sweeps(void)
{
    km_catalog_t cat;

    km_catalog_init(&ct_cm, &cat);
    ct_apply_snapshot(&cat, true);
    CU_ASSERT_PTR_NOT_NULL(km_catalog_topic_find(&cat, "pay"));
    {
        /* A topic known only from the leadership listener survives the sweep. */
        kbx_leadership_change_t l = {sizeof(l), KBX_ROLE_FOLLOWER, CT_ID2, "early", 0, 2, 1, 1};
        const kbx_leadership_change_t *lv[] = {&l};
        CU_ASSERT_EQUAL(km_catalog_apply_leadership(&cat, lv, 1), KM_OK);
    }
    ct_apply_snapshot(&cat, false);
    CU_ASSERT_PTR_NULL(km_catalog_topic_find(&cat, "pay"));
    CU_ASSERT_PTR_NULL(km_catalog_topic_find(&cat, "plain"));
    CU_ASSERT_PTR_NOT_NULL(km_catalog_topic_find(&cat, "orders"));
    CU_ASSERT_PTR_NOT_NULL(km_catalog_topic_find(&cat, "early"));
    CU_ASSERT_EQUAL(km_catalog_mirror_count(&cat), 1);
    km_catalog_destroy(&cat);
}

static void ct_test_alloc_failures(void)
{
    static const char *const keys[] = {"bootstrap.servers"};
    static const char *const values[] = {"h:1"};
    int64_t n;

    for (n = 0; n < 5000; n++) {
        uint64_t before = fakehost_alloc_failures(ct_fh);
        km_catalog_t cat;
        uint8_t *val = NULL;
        size_t len = 0;
        km_err_t rc;
        char err[256];

        km_catalog_init(&ct_cm, &cat);
        fakehost_fail_alloc(ct_fh, n, false);
        rc = km_catalog_def_encode(&ct_cm, CT_MID, 1, "s", keys, values, 1, &val, &len);
        if (rc == KM_OK) {
            kbx_record_t r = {sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)"m", 1, val,
                              len};
            const kbx_record_t *rv[] = {&r};
            kbx_topic_change_t t1 = {sizeof(t1), KBX_TOPIC_CREATED, CT_ID1, "orders", 3, 0};
            const kbx_topic_change_t *tv[] = {&t1};
            kbx_config_change_t c1 = {sizeof(c1), 2, "orders", "mirror.name", "m"};
            const kbx_config_change_t *cv[] = {&c1};
            kbx_leadership_change_t l = {sizeof(l), KBX_ROLE_LEADER, CT_ID1, "orders", 2, 1, 1, 1};
            const kbx_leadership_change_t *lv[] = {&l};
            kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                                      .flags = KBX_DELTA_SNAPSHOT,
                                      .topics = tv,
                                      .configs = cv,
                                      .records = rv,
                                      .topic_count = 1,
                                      .config_count = 1,
                                      .record_count = 1};
            rc = km_catalog_apply_delta(&cat, &d);
            if (rc == KM_OK)
                rc = km_catalog_apply_leadership(&cat, lv, 1);
            km_free(&ct_cm, val);
        }
        fakehost_fail_alloc(ct_fh, -1, false);
        CU_ASSERT(rc == KM_OK || rc == KM_ERR_NOMEM);
        km_catalog_destroy(&cat);
        CU_ASSERT_EQUAL_FATAL(fakehost_check_clean(ct_fh, err, sizeof(err)), 0);
        if (fakehost_alloc_failures(ct_fh) == before) {
            CU_ASSERT_EQUAL(rc, KM_OK); /* nothing failed: everything was applied */
            break;
        }
    }
    CU_ASSERT(n > 5 && n < 5000);
}

/* The host-callback path: a running plugin copies a delta, posts it and applies it. */
static void ct_test_through_plugin(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    const kbx_plugin_desc_t *desc = kbx_plugin_entry();
    void *ctx = NULL;
    km_plugin_t *cm;
    char err[256];
    size_t len;
    uint8_t *val = NULL;

    CU_ASSERT_PTR_NOT_NULL_FATAL(fh);
    fakehost_config_set(fh, "mirror.enable", "true");
    fakehost_partition_add(fh, &CT_ID1, "orders", 0, 3, true, KBX_WRITE_PENDING);
    CU_ASSERT_EQUAL_FATAL(desc->init(fakehost_api(fh), fakehost_host(fh), &ctx, err, sizeof(err)),
                          0);
    cm = ctx;
    fakehost_run_until_idle(fh);
    {
        static const char *const keys[] = {"bootstrap.servers"};
        static const char *const values[] = {"h:1"};
        CU_ASSERT_EQUAL_FATAL(
            km_catalog_def_encode(cm, CT_MID, 1, "s", keys, values, 1, &val, &len), KM_OK);
    }
    {
        kbx_record_t r = {sizeof(r), KM_CATALOG_RECORD_MIRROR, (const uint8_t *)"m", 1, val, len};
        const kbx_record_t *rv[] = {&r};
        kbx_config_change_t c1 = {sizeof(c1), 2, "orders", "mirror.name", "m.paused"};
        const kbx_config_change_t *cv[] = {&c1};
        kbx_metadata_delta_t d = {.struct_size = sizeof(d),
                                  .metadata_offset = 77,
                                  .configs = cv,
                                  .records = rv,
                                  .config_count = 1,
                                  .record_count = 1};
        fakehost_publish_delta(fh, &d);
    }
    km_free(cm, val);
    /* Copied: the caller's buffers are gone before the loop applies it. */
    fakehost_run_until_idle(fh);
    CU_ASSERT_PTR_NOT_NULL(km_catalog_mirror_find(&cm->catalog, "m"));
    CU_ASSERT_EQUAL(km_catalog_offset(&cm->catalog), 77);
    CU_ASSERT_EQUAL(km_catalog_topic_find(&cm->catalog, "orders")->desired, KM_DESIRED_PAUSED);
    /* The leadership snapshot of the fake host reached the catalog. */
    CU_ASSERT_EQUAL(km_catalog_topic_find(&cm->catalog, "orders")->parts[0].role, KBX_ROLE_LEADER);
    desc->fini(ctx);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, err, sizeof(err)), 0);
    fakehost_free(fh);
}

static CU_TestInfo ct_tests[] = {
    {"mirror names and mirror.name suffixes", ct_test_names},
    {"definition value format", ct_test_def_format},
    {"deltas, leadership and events", ct_test_deltas},
    {"a snapshot sweeps what it no longer has", ct_test_snapshot_sweeps},
    {"allocation failures", ct_test_alloc_failures},
    {"through a running plugin", ct_test_through_plugin},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo ct_suites[] = {
    {"catalog", ct_setup, ct_teardown, NULL, NULL, ct_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(ct_suites);
}
