/*
 * config_test.c - the config tables and engine: defaults, every class of invalid value
 * rejected with the key named, aliases, secrets never echoed, broker keys read from the host.
 */
#include <math.h>
#include <string.h>

#include "core/km_config.h"
#include "core/km_plugin_types.h"
#include "fakehost.h"
#include "fh_cunit.h"

static fakehost_t *ct_fh;
static km_plugin_t ct_cm;

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
    int rc = fakehost_check_clean(ct_fh, NULL, 0);

    fakehost_free(ct_fh);
    return rc;
}

/* Set key=value on a fresh mirror config and expect refusal with exactly msg. */
static void ct_mirror_rejects(const char *key, const char *value, const char *msg)
{
    km_mirror_config_t mc;
    char err[256] = "";

    CU_ASSERT_EQUAL_FATAL(km_config_init(&ct_cm, &km_config_mirror_scope, &mc, err, sizeof(err)),
                          KM_OK);
    CU_ASSERT_EQUAL(
        km_config_set(&ct_cm, &km_config_mirror_scope, &mc, key, value, err, sizeof(err)),
        KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, msg);
    if (strcmp(err, msg) != 0)
        fprintf(stderr, "\n    got:  %s\n    want: %s\n", err, msg);
    km_config_free(&ct_cm, &km_config_mirror_scope, &mc);
}

static void ct_test_defaults(void)
{
    km_broker_config_t bc;
    km_mirror_config_t mc;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(km_config_init(&ct_cm, &km_config_broker_scope, &bc, err, sizeof(err)),
                          KM_OK);
    CU_ASSERT_FALSE(bc.enable);
    CU_ASSERT_EQUAL(bc.state_topic_num_partitions, 50);
    CU_ASSERT_EQUAL(bc.state_topic_replication_factor, -1);
    CU_ASSERT_EQUAL(bc.num_fetchers_per_source_broker, 1);
    CU_ASSERT_EQUAL(bc.failed_retry_max_attempts, 20);
    CU_ASSERT_EQUAL(bc.replication_throttled_rate, -1);
    km_config_free(&ct_cm, &km_config_broker_scope, &bc);

    CU_ASSERT_EQUAL_FATAL(km_config_init(&ct_cm, &km_config_mirror_scope, &mc, err, sizeof(err)),
                          KM_OK);
    CU_ASSERT_STRING_EQUAL(mc.security_protocol, "PLAINTEXT");
    CU_ASSERT_STRING_EQUAL(mc.topics_exclude, "__.*");
    CU_ASSERT_STRING_EQUAL(mc.topics_include, "");
    CU_ASSERT_EQUAL(mc.ssl_enabled_protocols.n, 2);
    CU_ASSERT_EQUAL(mc.topic_properties_exclude.n, 0); /* extends a built-in list */
    CU_ASSERT_EQUAL(mc.fetch_max_bytes, 1048576);
    CU_ASSERT_PTR_NULL(mc.sasl_password);
    CU_ASSERT_EQUAL(mc.bootstrap_servers.n, 0);
    /* bootstrap.servers is required */
    CU_ASSERT_EQUAL(km_config_check(&km_config_mirror_scope, &mc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "bootstrap.servers: required but not set");
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "bootstrap.servers",
                                  " a:9092 , [::1]:9093,b.example:1", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_EQUAL(mc.bootstrap_servers.n, 3);
    CU_ASSERT_STRING_EQUAL(mc.bootstrap_servers.v[1], "[::1]:9093");
    CU_ASSERT_EQUAL(km_config_check(&km_config_mirror_scope, &mc, err, sizeof(err)), KM_OK);
    /* enum values are stored in the table's spelling; NULL restores the default */
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "security.protocol",
                                  "sasl_ssl", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_STRING_EQUAL(mc.security_protocol, "SASL_SSL");
    CU_ASSERT_EQUAL(km_config_check(&km_config_mirror_scope, &mc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "security.protocol: SASL_SSL needs sasl.jaas.config, or "
                                "sasl.username and sasl.password");
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "security.protocol", NULL,
                                  err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_STRING_EQUAL(mc.security_protocol, "PLAINTEXT");
    /* old (mirror.-prefixed) spelling sets the same key */
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "mirror.topics.include",
                                  "orders\\..*", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_STRING_EQUAL(mc.topics_include, "orders\\..*");
    km_config_free(&ct_cm, &km_config_mirror_scope, &mc);
}

static void ct_test_invalid_values(void)
{
    ct_mirror_rejects("fetch.min.bytes", "0", "fetch.min.bytes: 0 is below the minimum 1");
    ct_mirror_rejects("fetch.min.bytes", "2147483648",
                      "fetch.min.bytes: 2147483648 is above the maximum 2147483647");
    ct_mirror_rejects("connections.max.idle.ms", "99999999999999999999",
                      "connections.max.idle.ms: 99999999999999999999 is above the maximum "
                      "9223372036854775807");
    ct_mirror_rejects("request.timeout.ms", "30s", "request.timeout.ms: '30s' is not an integer");
    ct_mirror_rejects("request.timeout.ms", "", "request.timeout.ms: '' is not an integer");
    ct_mirror_rejects("socket.receive.buffer.bytes", "0",
                      "socket.receive.buffer.bytes: 0 is below the minimum 1024 (or -1 for "
                      "automatic)");
    ct_mirror_rejects("security.protocol", "TLS",
                      "security.protocol: 'TLS' is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
                      "SASL_SSL");
    ct_mirror_rejects("ssl.endpoint.identification.algorithm", "none",
                      "ssl.endpoint.identification.algorithm: 'none' is not one of https, \"\"");
    ct_mirror_rejects("topics.include", "orders(",
                      "topics.include: invalid regular expression at offset 7: missing closing "
                      "parenthesis");
    ct_mirror_rejects("bootstrap.servers", "", "bootstrap.servers: needs at least one host:port");
    ct_mirror_rejects("bootstrap.servers", "a:9092,,b:9092",
                      "bootstrap.servers: entry 2 of the list is empty");
    ct_mirror_rejects("bootstrap.servers", "a9092", "bootstrap.servers: 'a9092' is not host:port");
    ct_mirror_rejects("bootstrap.servers", "a:0",
                      "bootstrap.servers: 'a:0' has no valid port (1-65535)");
    ct_mirror_rejects("bootstrap.servers", "a:99999",
                      "bootstrap.servers: 'a:99999' has no valid port (1-65535)");
    ct_mirror_rejects("bootstrap.servers", "[::1:9092",
                      "bootstrap.servers: '[::1:9092' is not [ipv6-address]:port");
    ct_mirror_rejects("acls.include", "TOPIC;*, ", "acls.include: entry 2 of the list is empty");
    ct_mirror_rejects("no.such.key", "1", "no.such.key: unknown mirror configuration key");
    ct_mirror_rejects("ssl.engine.factory.class", "x",
                      "ssl.engine.factory.class: unknown mirror configuration key");
}

static void ct_test_long_regex(void)
{
    char big[KM_CONFIG_REGEX_MAX + 2];

    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ct_mirror_rejects("groups.include", big,
                      "groups.include: the regular expression is longer than 4096 characters");
}

static void ct_test_cross_checks(void)
{
    km_mirror_config_t mc;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(km_config_init(&ct_cm, &km_config_mirror_scope, &mc, err, sizeof(err)),
                          KM_OK);
    km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "bootstrap.servers", "a:1", err,
                  sizeof(err));
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "reconnect.backoff.ms",
                                  "5000", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT_EQUAL(km_config_check(&km_config_mirror_scope, &mc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "reconnect.backoff.ms: 5000 is above reconnect.backoff.max.ms "
                                "(1000)");
    km_config_free(&ct_cm, &km_config_mirror_scope, &mc);
}

static void ct_test_secrets_hidden(void)
{
    const km_config_def_t *def;
    size_t i;

    /* Every password-typed or secret-looking key is marked sensitive. */
    for (i = 0; i < km_config_mirror_scope.ndefs; i++) {
        def = &km_config_mirror_scope.defs[i];
        if (def->type == KM_CT_PASSWORD || strstr(def->name, "password") != NULL ||
            strcmp(def->name, "sasl.jaas.config") == 0 ||
            strcmp(def->name, "ssl.keystore.key") == 0)
            CU_ASSERT((def->flags & KM_CF_SENSITIVE) != 0 && def->type == KM_CT_PASSWORD);
    }
    /* A refused sensitive value is never echoed (test table entry reuses the engine). */
    {
        static const km_config_def_t secret = {.name = "x.secret",
                                               .type = KM_CT_ENUM,
                                               .allowed = "a|b",
                                               .flags = KM_CF_SENSITIVE,
                                               .offset = KM_CONFIG_NO_FIELD};
        char err[256];

        CU_ASSERT_EQUAL(km_config_validate(&ct_cm, &secret, "hunter2", err, sizeof(err)),
                        KM_ERR_CONFIG);
        CU_ASSERT_PTR_NULL(strstr(err, "hunter2"));
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "x.secret: '<hidden>'"));
    }
}

/* The engine is generic: a test table covers the types no real key uses yet (double). */
typedef struct ct_conf {
    double ratio;
    bool flag;
} ct_conf_t;

static const km_config_def_t ct_defs[] = {
    {.name = "ratio",
     .type = KM_CT_DOUBLE,
     .dflt = "0.5",
     .dmin = 0,
     .dmax = 1,
     .offset = offsetof(ct_conf_t, ratio)},
    {.name = "flag", .type = KM_CT_BOOL, .dflt = "TRUE", .offset = offsetof(ct_conf_t, flag)},
};
static const km_config_scope_t ct_scope = {
    .name = "test", .defs = ct_defs, .ndefs = 2, .struct_size = sizeof(ct_conf_t)};

static void ct_test_double_bool(void)
{
    ct_conf_t c;
    char err[256];

    CU_ASSERT_EQUAL_FATAL(km_config_init(&ct_cm, &ct_scope, &c, err, sizeof(err)), KM_OK);
    CU_ASSERT(fabs(c.ratio - 0.5) < 1e-12);
    CU_ASSERT_TRUE(c.flag);
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &ct_scope, &c, "ratio", " 0.25 ", err, sizeof(err)),
                    KM_OK);
    CU_ASSERT(fabs(c.ratio - 0.25) < 1e-12);
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &ct_scope, &c, "ratio", "1.5", err, sizeof(err)),
                    KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "ratio: 1.5 is above the maximum 1");
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &ct_scope, &c, "ratio", "-0.1", err, sizeof(err)),
                    KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "ratio: -0.1 is below the minimum 0");
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &ct_scope, &c, "ratio", "nan", err, sizeof(err)),
                    KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "ratio: 'nan' is not a number");
    CU_ASSERT_EQUAL(km_config_set(&ct_cm, &ct_scope, &c, "flag", "1", err, sizeof(err)),
                    KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "flag: '1' is not a boolean (use true or false)");
    CU_ASSERT_TRUE(c.flag); /* unchanged after a refusal */
    km_config_free(&ct_cm, &ct_scope, &c);
}

/* Broker keys read through the host's config_get. */
static km_err_t ct_load(fakehost_t *fh, km_broker_config_t *bc, char *err, size_t n)
{
    km_plugin_t cm;

    memset(&cm, 0, sizeof(cm));
    cm.ref.magic = KM_PLUGIN_MAGIC;
    cm.ref.api = fakehost_api(fh);
    cm.ref.host = fakehost_host(fh);
    return km_config_load_broker(&cm, bc, err, n);
}

static void ct_broker_rejects(const char *key, const char *value, const char *msg)
{
    fakehost_t *fh = fakehost_new(NULL);
    km_broker_config_t bc;
    char err[256] = "";

    fakehost_config_set(fh, "mirror.enable", "true");
    fakehost_config_set(fh, key, value);
    CU_ASSERT_EQUAL(ct_load(fh, &bc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, msg);
    if (strcmp(err, msg) != 0)
        fprintf(stderr, "\n    got:  %s\n    want: %s\n", err, msg);
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

static void ct_test_broker_from_host(void)
{
    fakehost_t *fh = fakehost_new(NULL);
    km_broker_config_t bc;
    char err[256] = "", longval[600];

    ct_broker_rejects("mirror.state.topic.num.partitions", "0",
                      "mirror.state.topic.num.partitions: 0 is below the minimum 1");
    ct_broker_rejects("mirror.topic.num.partitions", "0",
                      "mirror.state.topic.num.partitions: 0 is below the minimum 1");
    ct_broker_rejects("mirror.state.topic.replication.factor", "0",
                      "mirror.state.topic.replication.factor: 0 is below the minimum 1 (or -1 "
                      "for automatic)");
    ct_broker_rejects("mirror.num.fetchers.per.source.broker", "65",
                      "mirror.num.fetchers.per.source.broker: 65 is above the maximum 64");
    ct_broker_rejects("mirror.failed.retry.initial.backoff.ms", "400000",
                      "mirror.failed.retry.initial.backoff.ms: 400000 is above "
                      "mirror.failed.retry.max.backoff.ms (300000)");

    fakehost_config_set(fh, "mirror.enable", "TRUE");
    fakehost_config_set(fh, "mirror.topic.num.partitions", "7"); /* old name alone: used */
    fakehost_config_set(fh, "mirror.state.topic.replication.factor", "-1");
    fakehost_config_set(fh, "mirror.enabel", "true"); /* typo: warned */
    CU_ASSERT_EQUAL_FATAL(ct_load(fh, &bc, err, sizeof(err)), KM_OK);
    CU_ASSERT_TRUE(bc.enable);
    CU_ASSERT_EQUAL(bc.state_topic_num_partitions, 7);
    CU_ASSERT_EQUAL(bc.state_topic_replication_factor, -1);
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "mirror.topic.num.partitions is an old name"));
    CU_ASSERT_TRUE(fakehost_log_contains(fh, "unknown broker setting mirror.enabel is ignored"));
    {
        km_plugin_t cm = {
            .ref = {.magic = KM_PLUGIN_MAGIC, .api = fakehost_api(fh), .host = fakehost_host(fh)}};
        km_config_free(&cm, &km_config_broker_scope, &bc);
    }
    /* Both names, different values: refused. The same value twice is fine. */
    fakehost_config_set(fh, "mirror.state.topic.num.partitions", "8");
    CU_ASSERT_EQUAL(ct_load(fh, &bc, err, sizeof(err)), KM_ERR_CONFIG);
    CU_ASSERT_STRING_EQUAL(err, "mirror.state.topic.num.partitions and its old name "
                                "mirror.topic.num.partitions are both set, to different values");
    /* A value longer than the first read buffer is read in a second call. */
    fakehost_config_set(fh, "mirror.topic.num.partitions", NULL);
    memset(longval, ' ', sizeof(longval) - 3);
    memcpy(longval + sizeof(longval) - 3, "7", 2);
    fakehost_config_set(fh, "mirror.state.topic.num.partitions", longval);
    CU_ASSERT_EQUAL(ct_load(fh, &bc, err, sizeof(err)), KM_OK);
    CU_ASSERT_EQUAL(bc.state_topic_num_partitions, 7);
    {
        km_plugin_t cm = {
            .ref = {.magic = KM_PLUGIN_MAGIC, .api = fakehost_api(fh), .host = fakehost_host(fh)}};
        km_config_free(&cm, &km_config_broker_scope, &bc);
    }
    CU_ASSERT_EQUAL(fakehost_check_clean(fh, NULL, 0), 0);
    fakehost_free(fh);
}

/* Every allocation point in mirror-config parsing fails cleanly (regex, lists, strings). */
static void ct_test_alloc_failures(void)
{
    km_mirror_config_t mc;
    char err[256];
    int64_t n;
    km_err_t rc;

    for (n = 0;; n++) {
        fakehost_fail_alloc(ct_fh, n, false);
        rc = km_config_init(&ct_cm, &km_config_mirror_scope, &mc, err, sizeof(err));
        if (rc == KM_OK) {
            rc = km_config_set(&ct_cm, &km_config_mirror_scope, &mc, "topics.include", "a|b(c)*",
                               err, sizeof(err));
            km_config_free(&ct_cm, &km_config_mirror_scope, &mc);
        }
        CU_ASSERT_EQUAL(fakehost_live_allocs(ct_fh), 0);
        if (rc == KM_OK)
            break;
        if (rc != KM_ERR_NOMEM)
            fprintf(stderr, "\n    round %lld: %s (%s)\n", (long long)n, km_err_name(rc), err);
        CU_ASSERT_EQUAL_FATAL(rc, KM_ERR_NOMEM);
        CU_ASSERT_FATAL(n < 10000);
    }
    fakehost_fail_alloc(ct_fh, -1, false);
    CU_ASSERT(n > 10); /* the loop really walked through allocation points */
}

static CU_TestInfo ct_tests[] = {
    {"defaults, required keys, enum spelling, aliases", ct_test_defaults},
    {"invalid values name the key and what is allowed", ct_test_invalid_values},
    {"overlong regular expression", ct_test_long_regex},
    {"cross-key checks", ct_test_cross_checks},
    {"secrets are marked and never echoed", ct_test_secrets_hidden},
    {"double and bool types", ct_test_double_bool},
    {"broker keys from the host", ct_test_broker_from_host},
    {"allocation failures in parsing", ct_test_alloc_failures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo ct_suites[] = {
    {"config", ct_setup, ct_teardown, NULL, NULL, ct_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fh_cunit_run(ct_suites);
}
