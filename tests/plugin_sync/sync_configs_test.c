/*
 * sync_configs_test.c - the topic-config sync's diff (plugin/sync/km_sync_cfgplan.c): which
 * source keys are copied (topic overrides only, never sensitive, never excluded), SET only
 * when the destination differs, DELETE only of remembered keys the source dropped, keys only
 * set on the destination never touched, the new remembered set and whether it changed.
 */
#include <stdarg.h>
#include <string.h>

#include "core/km_config.h"
#include "fh_cunit.h"
#include "sync/km_sync_cfgplan.h"

#define OVR 1 /* DYNAMIC_TOPIC_CONFIG */
#define DYN 2 /* DYNAMIC_BROKER_CONFIG */
#define DEF 5 /* DEFAULT_CONFIG */

static km_cfgentry_t ent(const char *name, const char *value, int8_t source)
{
    km_cfgentry_t e;

    memset(&e, 0, sizeof(e));
    e.name = kp_str(name);
    e.value = kp_str(value);
    e.source = source;
    return e;
}

static km_cfgentry_t secret(const char *name, int8_t source)
{
    km_cfgentry_t e = ent(name, NULL, source);

    e.sensitive = true;
    return e;
}

/* the n views equal the NULL-terminated list of names, in order */
static bool same(const kp_str_t *v, size_t n, ...)
{
    va_list ap;
    const char *s;
    size_t i = 0;
    bool ok = true;

    va_start(ap, n);
    while ((s = va_arg(ap, const char *)) != NULL) {
        if (i >= n || !kp_str_eq(v[i], s))
            ok = false;
        i++;
    }
    va_end(ap);
    return ok && i == n;
}

/* a destination topic's answer: every key it knows, most at their defaults */
#define DST_DEFAULTS(...)                                                                          \
    ent("retention.ms", "604800000", DEF), ent("cleanup.policy", "delete", DEF),                   \
        ent("max.message.bytes", "1048588", DEF), ent("segment.ms", "604800000", DEF),             \
        ent("min.insync.replicas", "2", DYN), ent("compression.type", "producer", DEF)

static void test_copy_overrides_only(void)
{
    km_cfgentry_t src[] = {
        ent("retention.ms", "3600000", OVR),
        ent("cleanup.policy", "compact", OVR),
        ent("max.message.bytes", "2000000", OVR),
        ent("segment.ms", "604800000", DEF),
        ent("compression.type", "lz4", DYN), /* a broker setting of the source: not copied */
        secret("some.password", OVR),
        ent("min.insync.replicas", "1", OVR),
    };
    km_cfgentry_t dst[] = {DST_DEFAULTS()};
    km_cfgplan_t p;
    kp_arena_t ar;

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 7, dst, 6, NULL, 0, NULL, &ar, &p), KM_OK);
    CU_ASSERT(
        same(p.set_names, p.nset, "retention.ms", "cleanup.policy", "max.message.bytes", NULL));
    CU_ASSERT(same(p.set_values, p.nset, "3600000", "compact", "2000000", NULL));
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT(same(p.keep, p.nkeep, "retention.ms", "cleanup.policy", "max.message.bytes", NULL));
    CU_ASSERT_EQUAL(p.nunknown, 0); /* the secret has no value: never a candidate */
    CU_ASSERT_TRUE(p.keep_changed);
    kp_arena_free(&ar);
}

static void test_only_changed_keys(void)
{
    km_cfgentry_t src[] = {ent("retention.ms", "3600000", OVR),
                           ent("cleanup.policy", "compact", OVR),
                           ent("max.message.bytes", "2000000", OVR)};
    /* retention.ms equal and an override: nothing to write; cleanup.policy differs;
     * max.message.bytes equal but only the destination's default: SET (pin it) */
    km_cfgentry_t dst[] = {ent("retention.ms", "3600000", OVR),
                           ent("cleanup.policy", "delete", OVR),
                           ent("max.message.bytes", "2000000", DEF)};
    kp_str_t rem[] = {kp_str("retention.ms"), kp_str("cleanup.policy"),
                      kp_str("max.message.bytes")};
    km_cfgplan_t p;
    kp_arena_t ar;

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 3, dst, 3, rem, 3, NULL, &ar, &p), KM_OK);
    CU_ASSERT(same(p.set_names, p.nset, "cleanup.policy", "max.message.bytes", NULL));
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT_EQUAL(p.nkeep, 3);
    CU_ASSERT_FALSE(p.keep_changed);

    /* everything equal: no write, nothing to remember anew */
    dst[1] = ent("cleanup.policy", "compact", OVR);
    dst[2] = ent("max.message.bytes", "2000000", OVR);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 3, dst, 3, rem, 3, NULL, &ar, &p), KM_OK);
    CU_ASSERT_EQUAL(p.nset, 0);
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT_FALSE(p.keep_changed);
    kp_arena_free(&ar);
}

static void test_delete_remembered_only(void)
{
    /* the source dropped retention.ms (now its default); segment.ms is a destination-only
     * override (never remembered); cleanup.policy was remembered and is still set */
    km_cfgentry_t src[] = {ent("retention.ms", "604800000", DEF),
                           ent("cleanup.policy", "compact", OVR)};
    km_cfgentry_t dst[] = {ent("retention.ms", "3600000", OVR),
                           ent("cleanup.policy", "compact", OVR), ent("segment.ms", "60000", OVR),
                           ent("max.message.bytes", "1048588", DEF)};
    /* max.message.bytes: remembered, gone from the source, already back to default here */
    kp_str_t rem[] = {kp_str("retention.ms"), kp_str("cleanup.policy"),
                      kp_str("max.message.bytes")};
    km_cfgplan_t p;
    kp_arena_t ar;

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 2, dst, 4, rem, 3, NULL, &ar, &p), KM_OK);
    CU_ASSERT_EQUAL(p.nset, 0);
    CU_ASSERT(same(p.del, p.ndel, "retention.ms", NULL)); /* never segment.ms */
    CU_ASSERT(same(p.keep, p.nkeep, "cleanup.policy", NULL));
    CU_ASSERT_TRUE(p.keep_changed);

    /* without a record (not the coordinator, or a fresh one) nothing is ever deleted */
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 2, dst, 4, NULL, 0, NULL, &ar, &p), KM_OK);
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT_EQUAL(p.nset, 0);
    CU_ASSERT_TRUE(p.keep_changed);
    kp_arena_free(&ar);
}

static void test_exclusions(void)
{
    char *ex[] = {"segment.*", "retention.bytes", ""};
    km_strlist_t extra = {.v = ex, .n = 3};
    km_cfgentry_t src[] = {
        ent("mirror.name", "x", OVR),
        ent("mirror.support.unclean.leader.election", "true", OVR),
        ent("leader.replication.throttled.replicas", "*", OVR),
        ent("remote.storage.enable", "true", OVR),
        ent("remote.log.copy.disable", "true", OVR),
        ent("segment.ms", "1000", OVR),
        ent("segment.bytes", "1000000", OVR),
        ent("retention.bytes", "100", OVR),
        ent("retention.ms", "5", OVR),
    };
    km_cfgentry_t dst[] = {
        ent("leader.replication.throttled.replicas", "", DEF),
        ent("remote.storage.enable", "false", DEF),
        ent("remote.log.copy.disable", "false", DEF),
        ent("segment.ms", "604800000", DEF),
        ent("segment.bytes", "1073741824", DEF),
        ent("retention.bytes", "-1", DEF),
        ent("retention.ms", "604800000", DEF),
        ent("mirror.support.unclean.leader.election", "false", DEF),
    };
    /* segment.ms was synced before the operator excluded it: forgotten, not deleted */
    kp_str_t rem[] = {kp_str("segment.ms")};
    km_cfgplan_t p;
    kp_arena_t ar;

    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("mirror.name"), NULL));
    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("min.insync.replicas"), NULL));
    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("follower.replication.throttled.replicas"), NULL));
    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("remote.log.delete.on.disable"), NULL));
    CU_ASSERT_FALSE(km_sync_cfg_excluded(kp_str("remote.log"), NULL)); /* prefix "remote.log." */
    CU_ASSERT_FALSE(km_sync_cfg_excluded(kp_str("retention.ms"), NULL));
    CU_ASSERT_FALSE(km_sync_cfg_excluded(kp_str("min.insync.replica"), NULL)); /* exact */
    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("retention.bytes"), &extra));
    CU_ASSERT_FALSE(km_sync_cfg_excluded(kp_str("retention.bytes.x"), &extra));
    CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str("segment.jitter.ms"), &extra));

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 9, dst, 8, rem, 1, &extra, &ar, &p), KM_OK);
    CU_ASSERT(same(p.set_names, p.nset, "retention.ms", NULL));
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT(same(p.keep, p.nkeep, "retention.ms", NULL));
    CU_ASSERT_TRUE(p.keep_changed);

    /* the operator's list extends the built-in one: without it segment.* is copied */
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 9, dst, 8, rem, 1, NULL, &ar, &p), KM_OK);
    CU_ASSERT(same(p.set_names, p.nset, "segment.ms", "segment.bytes", "retention.bytes",
                   "retention.ms", NULL));
    CU_ASSERT(same(p.keep, p.nkeep, "segment.ms", "segment.bytes", "retention.bytes",
                   "retention.ms", NULL));
    CU_ASSERT_TRUE(p.keep_changed);
    kp_arena_free(&ar);
}

static void test_unknown_and_duplicates(void)
{
    /* a source key the destination does not know is reported, not written (it would fail
     * the whole topic's IncrementalAlterConfigs); duplicates count once */
    km_cfgentry_t src[] = {ent("retention.ms", "10", OVR), ent("new.kafka.key", "x", OVR),
                           ent("retention.ms", "20", OVR), ent("cleanup.policy", "compact", OVR)};
    km_cfgentry_t dst[] = {ent("retention.ms", "1", DEF), ent("cleanup.policy", "delete", DEF),
                           ent("retention.ms", "10", OVR)};
    kp_str_t rem[] = {kp_str("cleanup.policy"), kp_str("retention.ms"), kp_str("cleanup.policy"),
                      kp_str("")};
    km_cfgplan_t p;
    kp_arena_t ar;

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 4, dst, 3, rem, 4, NULL, &ar, &p), KM_OK);
    CU_ASSERT(same(p.set_names, p.nset, "retention.ms", "cleanup.policy", NULL));
    CU_ASSERT(same(p.set_values, p.nset, "10", "compact", NULL));
    CU_ASSERT(same(p.unknown, p.nunknown, "new.kafka.key", NULL));
    CU_ASSERT_EQUAL(p.ndel, 0);
    CU_ASSERT(same(p.keep, p.nkeep, "retention.ms", "cleanup.policy", NULL));
    CU_ASSERT_FALSE(p.keep_changed); /* {cleanup.policy, retention.ms} either way */
    kp_arena_free(&ar);
}

static void test_source_resets_to_dynamic_or_sensitive(void)
{
    /* a remembered key whose source value is now a broker-level one, or turned sensitive, is
     * no longer the topic's: deleted on the destination */
    km_cfgentry_t src[] = {ent("retention.ms", "100", DYN), secret("cleanup.policy", OVR)};
    km_cfgentry_t dst[] = {ent("retention.ms", "100", OVR), ent("cleanup.policy", "compact", OVR)};
    kp_str_t rem[] = {kp_str("retention.ms"), kp_str("cleanup.policy")};
    km_cfgplan_t p;
    kp_arena_t ar;

    kp_arena_init(&ar, 0);
    CU_ASSERT_EQUAL_FATAL(km_sync_cfgplan_make(src, 2, dst, 2, rem, 2, NULL, &ar, &p), KM_OK);
    CU_ASSERT_EQUAL(p.nset, 0);
    CU_ASSERT(same(p.del, p.ndel, "retention.ms", "cleanup.policy", NULL));
    CU_ASSERT_EQUAL(p.nkeep, 0);
    CU_ASSERT_TRUE(p.keep_changed);
    kp_arena_free(&ar);
}

static void test_arena_limit(void)
{
    km_cfgentry_t src[] = {ent("retention.ms", "10", OVR)};
    km_cfgplan_t p;
    kp_arena_t ar;
    void *fill;

    kp_arena_init(&ar, 64);
    fill = kp_arena_alloc(&ar, 64);
    CU_ASSERT_PTR_NOT_NULL(fill);
    CU_ASSERT_EQUAL(km_sync_cfgplan_make(src, 1, src, 1, NULL, 0, NULL, &ar, &p), KM_ERR_NOMEM);
    kp_arena_free(&ar);
}

/* docs/config.md (generated from the table's doc) names every built-in entry */
static void test_builtin_list_documented(void)
{
    const km_config_def_t *def =
        km_config_find(&km_config_mirror_scope, "topic.properties.exclude");
    const char *const *b;
    size_t n;

    CU_ASSERT_PTR_NOT_NULL_FATAL(def);
    CU_ASSERT_STRING_EQUAL(def->dflt, "");
    b = km_sync_cfg_builtin_excludes(&n);
    CU_ASSERT(n >= 10);
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_PTR_NOT_NULL(strstr(def->doc, b[i]));
        CU_ASSERT_TRUE(km_sync_cfg_excluded(kp_str(b[i]), NULL));
    }
}

static CU_TestInfo sc_tests[] = {
    {"the built-in list is the documented one", test_builtin_list_documented},
    {"topic overrides copied; defaults, broker values, secrets, excluded keys not",
     test_copy_overrides_only},
    {"only keys that differ (or are not overrides) are written", test_only_changed_keys},
    {"only remembered keys the source dropped are deleted", test_delete_remembered_only},
    {"built-in and operator exclusions (exact and prefix*)", test_exclusions},
    {"keys unknown to the destination, duplicate names", test_unknown_and_duplicates},
    {"source value no longer the topic's: deleted", test_source_resets_to_dynamic_or_sensitive},
    {"arena limit gives KM_ERR_NOMEM", test_arena_limit},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo sc_suites[] = {
    {"sync_configs", NULL, NULL, NULL, NULL, sc_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(sc_suites);
}
