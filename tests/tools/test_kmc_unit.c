/*
 * test_kmc_unit.c -- kafka-mirrors' pure parts (docs/cli.md): argument parsing, .properties
 * parsing, mirror-name rules, --mirror-config and --command-config checks (secrets never echoed),
 * and the exact text-table and JSON output for known rows (goldens written by hand).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/Basic.h>

#include "kmc_args.h"
#include "kmc_conf.h"
#include "kmc_fmt.h"
#include "kmc_props.h"
#include "kp_errcode.h"

/* ---- helpers ------------------------------------------------------------------------------ */

#define ARGV(...) ((char *[]){"kafka-mirrors", __VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){"kafka-mirrors", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(a, err, ...)                                                                         \
    kmc_args_parse((a), ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), err, sizeof(err))

static void expect_str(const char *got, const char *want)
{
    CU_ASSERT_STRING_EQUAL(got, want);
    if (strcmp(got, want) != 0)
        fprintf(stderr, "\n--- got:\n%s\n--- want:\n%s\n---\n", got, want);
}

static void expect_usage(int rc, const char *err, const char *want)
{
    CU_ASSERT_EQUAL(rc, -1);
    expect_str(err, want);
}

/* Capture what @p fn prints into a string (freed by the caller). */
typedef struct capture {
    char *buf;
    size_t len;
    FILE *f;
} capture_t;

static FILE *cap_open(capture_t *c)
{
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c->f);
    return c->f;
}

static char *cap_close(capture_t *c)
{
    fclose(c->f);
    return c->buf;
}

/* ---- arguments ---------------------------------------------------------------------------- */

static void test_args_actions(void)
{
    kmc_args_t a;
    char err[512];

    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--create", "--mirror", "m1",
                          "--mirror-config", "f.properties"),
                    0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_CREATE);
    expect_str(a.bootstrap, "h:1");
    expect_str(a.mirror, "m1");
    expect_str(a.mirror_config, "f.properties");
    CU_ASSERT_EQUAL(a.timeout_ms, KMC_DEFAULT_TIMEOUT_MS);

    /* The seed's spelling: --add, options after the action, --opt=value. */
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server=:9091", "--add", "--topic", ".*", "--mirror",
                          "my-mirror"),
                    0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_START);
    expect_str(a.action_flag, "--add");
    expect_str(kmc_action_name(a.action), "start");
    expect_str(a.bootstrap, ":9091");
    CU_ASSERT_EQUAL(a.ntopics, 1);
    expect_str(a.topics[0], ".*");

    CU_ASSERT_EQUAL(PARSE(&a, err, "--start", "--mirror=m", "--topic", "a.*", "--topics", "b",
                          "--exclude", "a-private", "--bootstrap-server", "h:1", "--json",
                          "--timeout-ms", "2500"),
                    0);
    CU_ASSERT_EQUAL(a.ntopics, 2);
    expect_str(a.topics[1], "b");
    CU_ASSERT_EQUAL(a.nexcludes, 1);
    expect_str(a.excludes[0], "a-private");
    CU_ASSERT(a.json);
    CU_ASSERT_EQUAL(a.timeout_ms, 2500);

    CU_ASSERT_EQUAL(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--remove", "--mirror", "m", "--topic", "t"),
        0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_STOP);
    CU_ASSERT_EQUAL(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--recover", "--mirror", "m", "--topic", "t"),
        0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_RECOVER);
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--describe"), 0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_DESCRIBE);
    CU_ASSERT_PTR_NULL(a.mirror);
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--describe", "--mirror", "m",
                          "--topic", "x", "--failed", "--json"),
                    0);
    CU_ASSERT(a.failed);
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--stop", "--mirror", "m",
                          "--topic", ".*", "--wait"),
                    0);
    CU_ASSERT(a.wait);
    CU_ASSERT_EQUAL(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--command-config", "c.properties"),
        0);
    expect_str(a.command_config, "c.properties");
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--delete", "--mirror", "m"), 0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_DELETE);

    /* --help and --version need nothing else and win over errors. */
    CU_ASSERT_EQUAL(PARSE(&a, err, "--bogus", "--help"), 0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_HELP);
    CU_ASSERT_EQUAL(PARSE(&a, err, "--version"), 0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_VERSION);
}

static void test_args_alter(void)
{
    kmc_args_t a;
    kmc_cfg_op_t *ops = NULL;
    size_t n = 0;
    char err[512];

    CU_ASSERT_EQUAL(PARSE(&a, err, "--bootstrap-server", "h:1", "--alter", "--mirror", "m",
                          "--add-config", "topics.exclude=x.*,bootstrap.servers=[h1:1,h2:2]",
                          "--delete-config", "sync.acls.interval.ms"),
                    0);
    CU_ASSERT_EQUAL(a.action, KMC_ACT_ALTER);
    CU_ASSERT_EQUAL_FATAL(
        kmc_cfg_ops_parse(a.add_config, a.delete_config, &ops, &n, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(n, 3);
    expect_str(ops[0].key, "topics.exclude");
    expect_str(ops[0].value, "x.*");
    expect_str(ops[1].key, "bootstrap.servers");
    expect_str(ops[1].value, "h1:1,h2:2");
    expect_str(ops[2].key, "sync.acls.interval.ms");
    CU_ASSERT_PTR_NULL(ops[2].value);
    kmc_cfg_ops_free(ops, n);
    /* a value may contain '=' */
    CU_ASSERT_EQUAL_FATAL(kmc_cfg_ops_parse("client.id=a=b", NULL, &ops, &n, err, sizeof(err)), 0);
    expect_str(ops[0].value, "a=b");
    kmc_cfg_ops_free(ops, n);

    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--alter", "--mirror", "m"), err,
                 "--alter needs --add-config K=V[,K=V...] and/or --delete-config K[,K...]");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--alter", "--add-config", "a=b"), err,
                 "--alter needs --mirror");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--add-config", "a=b"), err,
                 "--add-config cannot be used with --list");
    CU_ASSERT_EQUAL(kmc_cfg_ops_parse("a=1,b", NULL, &ops, &n, err, sizeof(err)), -1);
    expect_str(err, "--add-config: 'b' is not KEY=VALUE");
    CU_ASSERT_EQUAL(kmc_cfg_ops_parse("a=1,,b=2", NULL, &ops, &n, err, sizeof(err)), -1);
    expect_str(err, "--add-config: an empty item");
    CU_ASSERT_EQUAL(kmc_cfg_ops_parse("a=1", "a", &ops, &n, err, sizeof(err)), -1);
    expect_str(err, "a is changed twice");
    CU_ASSERT_PTR_NULL(ops);
    CU_ASSERT_EQUAL(n, 0);
}

static void test_args_errors(void)
{
    kmc_args_t a;
    char err[512];
    char *one[] = {"kafka-mirrors", NULL};

    expect_usage(kmc_args_parse(&a, 1, one, err, sizeof(err)), err,
                 "no action: give one of --create, --start (--add), --stop (--remove), --pause, "
                 "--resume, --recover, --delete, --list, --describe, --alter (see --help)");
    expect_usage(PARSE(&a, err, "--list"), err,
                 "--bootstrap-server HOST:PORT[,HOST:PORT...] is required (any broker of the "
                 "destination cluster)");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--describe"), err,
                 "only one action at a time: --list and --describe");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--add", "--mirror", "m"), err,
                 "--add needs --topic");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--create", "--mirror", "m"), err,
                 "--create needs --mirror-config");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--pause", "--topic", "t"), err,
                 "--pause needs --mirror");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--mirror", "m"), err,
                 "--mirror cannot be used with --list");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--stop", "--mirror", "m", "--topic",
                       "t", "--exclude", "x"),
                 err, "--exclude cannot be used with --stop");
    expect_usage(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--delete", "--mirror", "m", "--topic", "t"),
        err, "--topic cannot be used with --delete");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--failed"), err,
                 "--failed cannot be used with --list");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--describe", "--wait"), err,
                 "--wait cannot be used with --describe");
    expect_usage(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--create", "--mirror", "m", "--mirror-config"),
        err, "--mirror-config needs a value");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--delete", "--mirror="), err,
                 "--mirror needs a non-empty value");
    expect_usage(
        PARSE(&a, err, "--bootstrap-server", "h:1", "--delete", "--mirror", "a", "--mirror", "b"),
        err, "--mirror given more than once");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--timeout-ms", "0"), err,
                 "--timeout-ms: '0' is not a number of milliseconds in 1..3600000");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--timeout-ms", "5s"), err,
                 "--timeout-ms: '5s' is not a number of milliseconds in 1..3600000");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "--verbose"), err,
                 "unknown option --verbose (see --help)");
    expect_usage(PARSE(&a, err, "--bootstrap-server", "h:1", "--list", "extra"), err,
                 "unexpected argument 'extra' (options take the form --name VALUE; see --help)");
}

/* ---- properties --------------------------------------------------------------------------- */

static void test_props(void)
{
    const char *text = "# comment\n"
                       "! also a comment\n"
                       "\n"
                       "   bootstrap.servers = a:1,b:2  \n"
                       "client.id:cli\r\n"
                       "key\\ with\\ spaces value with spaces\n"
                       "multi = one, \\\n"
                       "        two, \\\n"
                       "   three\n"
                       "esc=tab\\there\\u00e9\\\\end\n"
                       "empty=\n"
                       "client.id=again\n"
                       "last.line.no.newline=x";
    kmc_props_t p = {0};
    char err[256];

    CU_ASSERT_EQUAL_FATAL(kmc_props_parse(&p, text, strlen(text), "f", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL_FATAL(p.n, 8);
    expect_str(p.v[0].key, "bootstrap.servers");
    expect_str(p.v[0].value, "a:1,b:2");
    CU_ASSERT_EQUAL(p.v[0].line, 4);
    expect_str(p.v[1].key, "client.id");
    expect_str(p.v[1].value, "cli");
    expect_str(p.v[2].key, "key with spaces");
    expect_str(p.v[2].value, "value with spaces");
    expect_str(p.v[3].key, "multi");
    expect_str(p.v[3].value, "one, two, three");
    CU_ASSERT_EQUAL(p.v[3].line, 7);
    expect_str(p.v[4].value, "tab\there\xc3\xa9\\end");
    CU_ASSERT_EQUAL(p.v[4].line, 10);
    expect_str(p.v[5].value, "");
    /* A repeated key: the last one counts. */
    expect_str(kmc_props_get(&p, "client.id")->value, "again");
    CU_ASSERT_FALSE(kmc_props_is_last(&p, 1));
    CU_ASSERT_TRUE(kmc_props_is_last(&p, 6));
    expect_str(p.v[7].value, "x");
    CU_ASSERT_PTR_NULL(kmc_props_get(&p, "nope"));
    kmc_props_free(&p);

    CU_ASSERT_EQUAL(kmc_props_parse(&p, "a=1\nb=\\u12x4\n", 13, "f.properties", err, sizeof(err)),
                    -1);
    expect_str(err, "f.properties line 2: malformed \\uXXXX escape (four hexadecimal digits "
                    "expected)");
    kmc_props_free(&p);
    CU_ASSERT_EQUAL(kmc_props_parse(&p, "a=1\n\n=v\n", 8, "f", err, sizeof(err)), -1);
    expect_str(err, "f line 3: empty key");
    kmc_props_free(&p);
    CU_ASSERT_EQUAL(kmc_props_parse(&p, "a=1\nb=\0\n", 8, "f", err, sizeof(err)), -1);
    expect_str(err, "f line 2: NUL byte: not a text properties file");
    kmc_props_free(&p);
    CU_ASSERT_EQUAL(kmc_props_load(&p, "/nonexistent/x.properties", err, sizeof(err)), -1);
    expect_str(err, "/nonexistent/x.properties: cannot open: No such file or directory");
    kmc_props_free(&p);
}

/* ---- mirror names and configs ------------------------------------------------------------- */

static void test_mirror_names(void)
{
    char long_name[260];

    CU_ASSERT_PTR_NULL(kmc_mirror_name_invalid("my-mirror"));
    CU_ASSERT_PTR_NULL(kmc_mirror_name_invalid("dc1.to_dc2-A"));
    CU_ASSERT_PTR_NULL(kmc_mirror_name_invalid("paused"));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid(""));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("."));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid(".."));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("a b"));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("a/b"));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("m.paused"));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("m.stopped"));
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid("m.removed"));
    memset(long_name, 'a', 249);
    long_name[249] = '\0';
    CU_ASSERT_PTR_NULL(kmc_mirror_name_invalid(long_name));
    long_name[249] = 'a';
    long_name[250] = '\0';
    CU_ASSERT_PTR_NOT_NULL(kmc_mirror_name_invalid(long_name));
}

/* Check @p text as a --mirror-config; returns the rc and leaves the message in err. */
static int mconf(const char *text, kmc_mirror_conf_t *mc, char *err, size_t n)
{
    kmc_props_t p = {0};
    int rc = kmc_props_parse(&p, text, strlen(text), "m.properties", err, n);

    if (rc == 0)
        rc = kmc_mirror_conf_check(&p, "m.properties", mc, NULL, err, n);
    /* mc's values point into p: copy what the test looks at first. */
    if (rc == 0) {
        for (size_t i = 0; i < mc->n; i++)
            mc->v[i].value = strdup(mc->v[i].value);
        mc->bootstrap = mc->bootstrap ? "set" : NULL;
    }
    kmc_props_free(&p);
    return rc;
}

static void mconf_free(kmc_mirror_conf_t *mc)
{
    for (size_t i = 0; i < mc->n; i++)
        free((char *)mc->v[i].value);
    kmc_mirror_conf_free(mc);
}

static void test_mirror_config(void)
{
    kmc_mirror_conf_t mc;
    char err[512];

    CU_ASSERT_EQUAL_FATAL(mconf("bootstrap.servers=src1:9092,src2:9092\n"
                                "mirror.topics.include=orders.*\n"
                                "sasl.password=hunter2\n"
                                "fetch.max.bytes=2097152\n",
                                &mc, err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL_FATAL(mc.n, 4);
    expect_str(mc.v[0].name, "bootstrap.servers");
    /* Old names are sent under the table's name. */
    expect_str(mc.v[1].name, "topics.include");
    expect_str(mc.v[1].value, "orders.*");
    CU_ASSERT_FALSE(mc.v[1].sensitive);
    expect_str(mc.v[2].name, "sasl.password");
    CU_ASSERT_TRUE(mc.v[2].sensitive);
    CU_ASSERT_PTR_NOT_NULL(mc.bootstrap);
    mconf_free(&mc);

    CU_ASSERT_EQUAL(mconf("fetch.max.bytes=2097152\n", &mc, err, sizeof(err)), -1);
    expect_str(err, "m.properties: bootstrap.servers: required but not set");
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nfetch.max.byte=1\n", &mc, err, sizeof(err)), -1);
    expect_str(err, "m.properties line 2: fetch.max.byte: unknown mirror configuration key (the "
                    "per-mirror keys are listed in docs/config.md, \"Per-mirror settings\")");
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nfetch.max.bytes=12\n", &mc, err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "m.properties line 2: fetch.max.bytes"));
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\ntopics.include=(orders\n", &mc, err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "m.properties line 2: topics.include"));
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nsecurity.protocol=SASL_SSL\n"
                          "sasl.username=u\nsasl.password=hunter2\n",
                          &mc, err, sizeof(err)),
                    -1);
    expect_str(err, "m.properties line 2: security.protocol=SASL_SSL: mirrors reach their source "
                    "cluster over PLAINTEXT only for now (kmirror's client has no TLS or SASL "
                    "yet); use a PLAINTEXT listener of the source");
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\ntopics.include=a\nmirror.topics.include=b\n", &mc,
                          err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "both given"));
    /* A bad enum value: key and line named. */
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nssl.keystore.type=JKS\n", &mc, err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "m.properties line 2: ssl.keystore.type"));
    /* Secrets never appear in a message, whatever fails around them. */
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nsasl.password=Hunter2Secret\n"
                          "sasl.jaas.config=Hunter2Secret\nfetch.max.bytes=12\n",
                          &mc, err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 4: fetch.max.bytes"));
    CU_ASSERT_PTR_NULL(strstr(err, "Hunter2"));
    CU_ASSERT_EQUAL(mconf("sasl.password=Hunter2Secret\n", &mc, err, sizeof(err)), -1);
    expect_str(err, "m.properties: bootstrap.servers: required but not set");
    CU_ASSERT_EQUAL(mconf("bootstrap.servers=a:1\nsecurity.protocol=PLAINTEXT\n"
                          "reconnect.backoff.ms=5000\nreconnect.backoff.max.ms=10\n",
                          &mc, err, sizeof(err)),
                    -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "reconnect.backoff.ms"));
    /* A repeated key: the last value is used, one entry sent. */
    CU_ASSERT_EQUAL_FATAL(
        mconf("bootstrap.servers=a:1\nbootstrap.servers=b:2\n", &mc, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(mc.n, 1);
    expect_str(mc.v[0].value, "b:2");
    mconf_free(&mc);
}

static void test_client_config(void)
{
    kmc_props_t p = {0};
    kmc_client_conf_t cc = {0};
    char err[512];
    const char *ok = "security.protocol=plaintext\nclient.id=ops\nrequest.timeout.ms=5000\n"
                     "socket.connection.setup.timeout.ms=700\nsasl.jaas.config=secret\n"
                     "retries=3\n";
    capture_t cap;
    char *warn;

    CU_ASSERT_EQUAL_FATAL(kmc_props_parse(&p, ok, strlen(ok), "c", err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(kmc_client_conf_apply(&p, "c", &cc, cap_open(&cap), err, sizeof(err)), 0);
    warn = cap_close(&cap);
    expect_str(cc.client_id, "ops");
    CU_ASSERT_EQUAL(cc.request_timeout_ms, 5000);
    CU_ASSERT_EQUAL(cc.connect_timeout_ms, 700);
    expect_str(warn, "kafka-mirrors: warning: c line 5: sasl.jaas.config is ignored: "
                     "kafka-mirrors speaks PLAINTEXT only for now\n"
                     "kafka-mirrors: warning: c line 6: retries is not used by kafka-mirrors\n");
    CU_ASSERT_PTR_NULL(strstr(warn, "secret"));
    free(warn);
    kmc_props_free(&p);

    CU_ASSERT_EQUAL_FATAL(kmc_props_parse(&p, "security.protocol=SSL\n", 22, "c", err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(kmc_client_conf_apply(&p, "c", &cc, NULL, err, sizeof(err)), -1);
    expect_str(err, "c line 1: security.protocol=SSL: kafka-mirrors speaks PLAINTEXT only for "
                    "now (no TLS or SASL yet); point --bootstrap-server at a PLAINTEXT listener "
                    "of the destination cluster");
    kmc_props_free(&p);
    CU_ASSERT_EQUAL_FATAL(kmc_props_parse(&p, "request.timeout.ms=-1\n", 22, "c", err, sizeof(err)),
                          0);
    CU_ASSERT_EQUAL(kmc_client_conf_apply(&p, "c", &cc, NULL, err, sizeof(err)), -1);
    expect_str(err, "c line 1: request.timeout.ms: '-1' is not a number of milliseconds in "
                    "1..3600000");
    kmc_props_free(&p);
}

/* ---- output ------------------------------------------------------------------------------- */

static void test_fmt_list(void)
{
    const kmc_list_row_t rows[] = {
        {"dc1-to-dc2", 12, "Q7uXyRkTS1y9rK2n0aM7Fw", "dc1-a:9092,dc1-b:9092"},
        {"m", 0, "", "src:1"},
    };
    capture_t cap;
    char *out;

    kmc_fmt_list_text(cap_open(&cap), rows, 2);
    out = cap_close(&cap);
    expect_str(out, "MIRROR      TOPICS  SOURCE-CLUSTER-ID       SOURCE-BOOTSTRAP-SERVERS\n"
                    "dc1-to-dc2  12      Q7uXyRkTS1y9rK2n0aM7Fw  dc1-a:9092,dc1-b:9092\n"
                    "m           0       -                       src:1\n");
    free(out);

    kmc_fmt_list_json(cap_open(&cap), rows, 2);
    out = cap_close(&cap);
    expect_str(out, "{\"mirrors\":[{\"mirror\":\"dc1-to-dc2\",\"topicCount\":12,"
                    "\"sourceClusterId\":\"Q7uXyRkTS1y9rK2n0aM7Fw\",\"sourceBootstrap\":"
                    "\"dc1-a:9092,dc1-b:9092\"},{\"mirror\":\"m\",\"topicCount\":0,"
                    "\"sourceClusterId\":null,\"sourceBootstrap\":\"src:1\"}]}\n");
    free(out);

    kmc_fmt_list_json(cap_open(&cap), NULL, 0);
    out = cap_close(&cap);
    expect_str(out, "{\"mirrors\":[]}\n");
    free(out);
}

static void test_fmt_describe(void)
{
    kmc_part_row_t p1[] = {
        {"orders", 0, "MIRRORING", 1500, 1450, -1, -1, 0, NULL},
        {"orders", 1, "FAILED", 10, 10, -1, -1, 3, "connection refused\nby src"},
        {"orders", 2, "STOPPED", 700, 700, 4, 700, -1, "source topic deleted"},
        {"payments", 0, "PREPARING", -1, 0, -1, -1, 0, NULL},
    };
    kmc_sync_row_t s1[] = {
        {"configs", true, 12, 2, "orders: DescribeConfigs failed", 1767225601000, 1767225600000},
        {"groups", false, 0, 0, NULL, -1, -1},
    };
    kmc_mirror_desc_t m[] = {
        {"m1", "src:9092", "abc", 0, NULL, p1, 4, s1, 2},
        {"m2", NULL, NULL, 0, NULL, NULL, 0, NULL, 0},
        {"zz", NULL, NULL, KP_ERR_UNKNOWN_CLUSTER_MIRROR, "no mirror zz", NULL, 0, NULL, 0},
    };
    capture_t cap;
    char *out;

    CU_ASSERT_EQUAL(kmc_fmt_lag(1500, 1450), 50);
    CU_ASSERT_EQUAL(kmc_fmt_lag(10, 12), 0);
    CU_ASSERT_EQUAL(kmc_fmt_lag(-1, 12), -1);
    CU_ASSERT_EQUAL(kmc_fmt_lag(5, -1), -1);

    kmc_fmt_describe_text(cap_open(&cap), m, 3);
    out = cap_close(&cap);
    expect_str(out, "MIRROR  TOPIC     PARTITION  STATE      SOURCE-OFFSET  DEST-OFFSET  LAG  "
                    "LAST-EPOCH  LAST-OFFSET  ERROR\n"
                    "m1      orders    0          MIRRORING  1500           1450         50   "
                    "-           -            -\n"
                    "m1      orders    1          FAILED     10             10           0    "
                    "-           -            [retry 3] connection refused?by src\n"
                    "m1      orders    2          STOPPED    700            700          0    "
                    "4           700          [not retryable] source topic deleted\n"
                    "m1      payments  0          PREPARING  -              0            -    "
                    "-           -            -\n"
                    "m2      -         -          -          -              -            -    "
                    "-           -            -\n"
                    "\n"
                    "MIRROR  SYNC     ENABLED  RUNS  ERRORS  LAST-SYNC             "
                    "LAST-ERROR-TIME       LAST-ERROR\n"
                    "m1      configs  yes      12    2       2026-01-01T00:00:00Z  "
                    "2026-01-01T00:00:01Z  orders: DescribeConfigs failed\n"
                    "m1      groups   no       0     0       -                     "
                    "-                     -\n");
    free(out);

    kmc_fmt_describe_json(cap_open(&cap), m, 3, NULL);
    out = cap_close(&cap);
    expect_str(out,
               "{\"mirrors\":["
               "{\"mirror\":\"m1\",\"sourceBootstrap\":\"src:9092\",\"sourceClusterId\":\"abc\","
               "\"errorCode\":0,\"errorName\":null,\"errorMessage\":null,\"partitions\":["
               "{\"topic\":\"orders\",\"partition\":0,\"state\":\"MIRRORING\",\"sourceOffset\":"
               "1500,\"destinationOffset\":1450,\"lag\":50,\"lastMirroredEpoch\":null,"
               "\"lastMirroredOffset\":null,\"retryAttempt\":0,\"retryable\":true,"
               "\"errorMessage\":null},"
               "{\"topic\":\"orders\",\"partition\":1,\"state\":\"FAILED\",\"sourceOffset\":10,"
               "\"destinationOffset\":10,\"lag\":0,\"lastMirroredEpoch\":null,"
               "\"lastMirroredOffset\":null,\"retryAttempt\":3,\"retryable\":true,"
               "\"errorMessage\":\"connection refused\\nby src\"},"
               "{\"topic\":\"orders\",\"partition\":2,\"state\":\"STOPPED\",\"sourceOffset\":700,"
               "\"destinationOffset\":700,\"lag\":0,\"lastMirroredEpoch\":4,"
               "\"lastMirroredOffset\":700,\"retryAttempt\":-1,\"retryable\":false,"
               "\"errorMessage\":\"source topic deleted\"},"
               "{\"topic\":\"payments\",\"partition\":0,\"state\":\"PREPARING\",\"sourceOffset\":"
               "null,\"destinationOffset\":0,\"lag\":null,\"lastMirroredEpoch\":null,"
               "\"lastMirroredOffset\":null,\"retryAttempt\":0,\"retryable\":true,"
               "\"errorMessage\":null}],\"sync\":["
               "{\"kind\":\"configs\",\"enabled\":true,\"runs\":12,\"errors\":2,"
               "\"lastSyncTimeMs\":1767225600000,\"lastErrorTimeMs\":1767225601000,"
               "\"lastError\":\"orders: DescribeConfigs failed\"},"
               "{\"kind\":\"groups\",\"enabled\":false,\"runs\":0,\"errors\":0,"
               "\"lastSyncTimeMs\":null,\"lastErrorTimeMs\":null,\"lastError\":null}]},"
               "{\"mirror\":\"m2\",\"sourceBootstrap\":null,\"sourceClusterId\":null,"
               "\"errorCode\":0,\"errorName\":null,\"errorMessage\":null,\"partitions\":[],"
               "\"sync\":[]},"
               "{\"mirror\":\"zz\",\"sourceBootstrap\":null,\"sourceClusterId\":null,"
               "\"errorCode\":137,\"errorName\":\"UNKNOWN_CLUSTER_MIRROR\",\"errorMessage\":"
               "\"no mirror zz\",\"partitions\":[],\"sync\":[]}],\"warning\":null}\n");
    free(out);

    kmc_fmt_describe_json(cap_open(&cap), m + 1, 1, "partial answer: broker 2 could not be asked");
    out = cap_close(&cap);
    expect_str(
        out, "{\"mirrors\":[{\"mirror\":\"m2\",\"sourceBootstrap\":null,"
             "\"sourceClusterId\":null,\"errorCode\":0,\"errorName\":null,"
             "\"errorMessage\":null,\"partitions\":[],\"sync\":[]}],\"warning\":\"partial answer: "
             "broker 2 could not be asked\"}\n");
    free(out);
}

static void test_fmt_results(void)
{
    const kmc_topic_result_t r[] = {
        {"orders", 0, NULL},
        {"audit", KP_ERR_MIRROR_TOPIC_ALREADY_PAUSED, "topic audit is already paused"},
        {"x\"y", KP_ERR_TOPIC_NOT_IN_CLUSTER_MIRROR, NULL},
    };
    capture_t cap;
    char *out;

    kmc_fmt_results_text(cap_open(&cap), r, 3);
    out = cap_close(&cap);
    expect_str(out, "TOPIC   RESULT\n"
                    "orders  OK\n"
                    "audit   MIRROR_TOPIC_ALREADY_PAUSED: topic audit is already paused\n"
                    "x\"y     TOPIC_NOT_IN_CLUSTER_MIRROR\n");
    free(out);

    kmc_fmt_results_json(cap_open(&cap), "pause", "m1", 0, NULL, r, 3);
    out = cap_close(&cap);
    expect_str(out, "{\"action\":\"pause\",\"mirror\":\"m1\",\"errorCode\":0,\"errorName\":null,"
                    "\"errorMessage\":null,\"topics\":["
                    "{\"topic\":\"orders\",\"errorCode\":0,\"errorName\":null,\"errorMessage\":"
                    "null},"
                    "{\"topic\":\"audit\",\"errorCode\":140,\"errorName\":"
                    "\"MIRROR_TOPIC_ALREADY_PAUSED\",\"errorMessage\":\"topic audit is already "
                    "paused\"},"
                    "{\"topic\":\"x\\\"y\",\"errorCode\":139,\"errorName\":"
                    "\"TOPIC_NOT_IN_CLUSTER_MIRROR\",\"errorMessage\":null}]}\n");
    free(out);

    kmc_fmt_results_json(cap_open(&cap), "create", "m1", KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS,
                         "exists", NULL, 0);
    out = cap_close(&cap);
    expect_str(out, "{\"action\":\"create\",\"mirror\":\"m1\",\"errorCode\":149,\"errorName\":"
                    "\"CLUSTER_MIRROR_ALREADY_EXISTS\",\"errorMessage\":\"exists\",\"topics\":[]}"
                    "\n");
    free(out);

    kmc_fmt_json_str(cap_open(&cap), "a\x01\t\\");
    out = cap_close(&cap);
    expect_str(out, "\"a\\u0001\\t\\\\\"");
    free(out);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;

    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("kmc_unit", NULL, NULL);
    CU_add_test(s, "arguments: actions and options", test_args_actions);
    CU_add_test(s, "arguments: usage errors", test_args_errors);
    CU_add_test(s, "arguments: --alter and its config lists", test_args_alter);
    CU_add_test(s, "properties files", test_props);
    CU_add_test(s, "mirror names", test_mirror_names);
    CU_add_test(s, "--mirror-config checks", test_mirror_config);
    CU_add_test(s, "--command-config", test_client_config);
    CU_add_test(s, "--list output", test_fmt_list);
    CU_add_test(s, "--describe output", test_fmt_describe);
    CU_add_test(s, "per-topic results output", test_fmt_results);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
