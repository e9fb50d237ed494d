/*
 * test_config.c -- CUnit tests of the .properties reader (kb_props) and the configuration
 * table and validation (kb_config). Label: unit.
 */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_config.h"
#include "kb_err.h"
#include "kb_file.h"
#include "kb_props.h"

/* ------------------------------------------------------------------ helpers */

typedef struct kv_list_s {
    int n;
    char key[32][128];
    char val[32][256];
    int line[32];
} kv_list_t;

static int collect(void *opaque, const char *key, const char *value, int lineno)
{
    kv_list_t *l = opaque;
    if (l->n < 32) {
        snprintf(l->key[l->n], sizeof(l->key[0]), "%s", key);
        snprintf(l->val[l->n], sizeof(l->val[0]), "%s", value);
        l->line[l->n] = lineno;
        l->n++;
    }
    return 0;
}

static int parse(const char *text, kv_list_t *l, char *err, size_t errsz)
{
    memset(l, 0, sizeof(*l));
    return kb_props_parse(text, strlen(text), collect, l, err, errsz);
}

/* Find the value of key in l, or NULL (last one wins). */
static const char *get(const kv_list_t *l, const char *key)
{
    const char *v = NULL;
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->key[i], key) == 0)
            v = l->val[i];
    return v;
}

static char *write_tmp(const char *text)
{
    static char path[64];
    int fd;
    snprintf(path, sizeof(path), "/tmp/kbt_cfg_XXXXXX");
    fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        close(fd);
        return NULL;
    }
    close(fd);
    return path;
}

/* A config from properties text plus overrides; finalized. */
static kb_config_t *cfg_from(const char *text, const char *const *overrides)
{
    kb_config_t *cfg = kb_config_new();
    char *path = write_tmp(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    kb_config_load_file(cfg, path);
    unlink(path);
    for (int i = 0; overrides && overrides[i]; i++)
        kb_config_set_kv(cfg, overrides[i], "--override");
    kb_config_finalize(cfg);
    return cfg;
}

/* True if some error starts with @p prefix and contains @p needle (may be NULL). */
static int has_error(const kb_config_t *cfg, const char *prefix, const char *needle)
{
    for (size_t i = 0; i < kb_config_error_cnt(cfg); i++) {
        const char *e = kb_config_error(cfg, i);
        if (strncmp(e, prefix, strlen(prefix)) == 0 && (!needle || strstr(e, needle)))
            return 1;
    }
    return 0;
}

static void dump_errors(const kb_config_t *cfg)
{
    for (size_t i = 0; i < kb_config_error_cnt(cfg); i++)
        fprintf(stderr, "    config error: %s\n", kb_config_error(cfg, i));
}

#define BASE "node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs=/tmp/kbt-logs\n"

/* ------------------------------------------------------------------ properties */

static void test_props_separators(void)
{
    kv_list_t l;
    char err[256];
    CU_ASSERT_EQUAL(parse("a=1\nb: 2\nc 3\n  d   =   4\ne\t:\t5\nf\n=g\n", &l, err, sizeof(err)),
                    0);
    CU_ASSERT_STRING_EQUAL(get(&l, "a"), "1");
    CU_ASSERT_STRING_EQUAL(get(&l, "b"), "2");
    CU_ASSERT_STRING_EQUAL(get(&l, "c"), "3");
    CU_ASSERT_STRING_EQUAL(get(&l, "d"), "4");
    CU_ASSERT_STRING_EQUAL(get(&l, "e"), "5");
    CU_ASSERT_STRING_EQUAL(get(&l, "f"), "");
    /* "=g" alone: empty key, value g (as java.util.Properties) */
    CU_ASSERT_STRING_EQUAL(get(&l, ""), "g");
    /* only the first separator splits */
    CU_ASSERT_EQUAL(parse("url=http://h:1/x=y\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "url"), "http://h:1/x=y");
    /* key = value with ':' after blanks: the ':' is the separator, '=' then belongs to value */
    CU_ASSERT_EQUAL(parse("k : =v\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "k"), "=v");
}

static void test_props_comments_blank(void)
{
    kv_list_t l;
    char err[256];
    CU_ASSERT_EQUAL(parse("# comment\n! bang comment\n\n   \n  # indented\na=1 # not a comment\n",
                          &l, err, sizeof(err)),
                    0);
    CU_ASSERT_EQUAL(l.n, 1);
    CU_ASSERT_STRING_EQUAL(get(&l, "a"), "1 # not a comment");
    CU_ASSERT_EQUAL(l.line[0], 6);
    /* a comment ending in a backslash does not continue */
    CU_ASSERT_EQUAL(parse("# c \\\nb=2\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_EQUAL(l.n, 1);
    CU_ASSERT_STRING_EQUAL(get(&l, "b"), "2");
}

static void test_props_continuation(void)
{
    kv_list_t l;
    char err[256];
    CU_ASSERT_EQUAL(parse("list=a,\\\n    b,\\\n\tc\nnext=1\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "list"), "a,b,c");
    CU_ASSERT_STRING_EQUAL(get(&l, "next"), "1");
    CU_ASSERT_EQUAL(l.line[1], 4);
    /* an even number of backslashes does not continue: value ends in one backslash */
    CU_ASSERT_EQUAL(parse("p=c:\\\\\nq=1\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "p"), "c:\\");
    CU_ASSERT_STRING_EQUAL(get(&l, "q"), "1");
    /* continuation into end of input, and across CRLF */
    CU_ASSERT_EQUAL(parse("r=x\\", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "r"), "x");
    CU_ASSERT_EQUAL(parse("s=1,\\\r\n 2\r\nt=3\rlast=4", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "s"), "1,2");
    CU_ASSERT_STRING_EQUAL(get(&l, "t"), "3");
    CU_ASSERT_STRING_EQUAL(get(&l, "last"), "4");
}

static void test_props_escapes(void)
{
    kv_list_t l;
    char err[256];
    CU_ASSERT_EQUAL(parse("a\\=b\\:c\\ d=v\\tw\\nx\\\\y\\z\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(l.key[0], "a=b:c d");
    CU_ASSERT_STRING_EQUAL(l.val[0], "v\tw\nx\\yz");
    CU_ASSERT_EQUAL(parse("u=caf\\u00e9 \\u20AC \\uD83D\\uDE00\n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "u"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* trailing blanks of a value are kept by the reader (kb_config trims) */
    CU_ASSERT_EQUAL(parse("t=x  \n", &l, err, sizeof(err)), 0);
    CU_ASSERT_STRING_EQUAL(get(&l, "t"), "x  ");
}

static void test_props_errors(void)
{
    kv_list_t l;
    char err[256];
    CU_ASSERT_EQUAL(parse("a=1\nb=\\u12G4\n", &l, err, sizeof(err)), KB_E_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "\\uxxxx"));
    CU_ASSERT_EQUAL(parse("c=\\uD800x\n", &l, err, sizeof(err)), KB_E_PARSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "surrogate"));
    CU_ASSERT_EQUAL(parse("d=\\u00", &l, err, sizeof(err)), KB_E_PARSE);
    {
        const char nul[] = "e=1\nf=a\0b\n";
        memset(&l, 0, sizeof(l));
        CU_ASSERT_EQUAL(kb_props_parse(nul, sizeof(nul) - 1, collect, &l, err, sizeof(err)),
                        KB_E_PARSE);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "line 2"));
    }
    CU_ASSERT_EQUAL(
        kb_props_load_file("/nonexistent/kbt.properties", collect, &l, err, sizeof(err)), KB_E_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/kbt.properties"));
}

/* kb_props_list_has: whole items only, case as asked, NULL list or item never matches. */
static void test_props_list_has(void)
{
    CU_ASSERT_TRUE(kb_props_list_has("broker,controller", "controller", false));
    CU_ASSERT_TRUE(kb_props_list_has("broker,controller", "broker", false));
    CU_ASSERT_FALSE(kb_props_list_has("broker,controller", "Broker", false));
    CU_ASSERT_TRUE(kb_props_list_has("CONTROLLER,INTERNAL", "internal", true));
    CU_ASSERT_FALSE(kb_props_list_has("CONTROLLER,INTERNAL", "CONTROL", true));
    CU_ASSERT_FALSE(kb_props_list_has("CONTROL", "CONTROLLER", true));
    CU_ASSERT_FALSE(kb_props_list_has("", "x", true));
    CU_ASSERT_FALSE(kb_props_list_has(NULL, "x", true));
    CU_ASSERT_FALSE(kb_props_list_has("x", NULL, true));
    CU_ASSERT_TRUE(kb_props_list_has("a,,b", "", false));  /* an empty item is an item */
    CU_ASSERT_FALSE(kb_props_list_has("a,b,", "", false)); /* a trailing comma is not */
}

/* ------------------------------------------------------------------ config */

static void test_config_defaults(void)
{
    kb_config_t *cfg = kb_config_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(cfg);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    /* node.id is the one required key */
    CU_ASSERT_EQUAL(kb_config_finalize(cfg), KB_E_INVALID);
    CU_ASSERT(has_error(cfg, "node.id:", "required"));
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 1);
    CU_ASSERT_EQUAL(cfg->num_partitions, 1);
    CU_ASSERT_EQUAL(cfg->log_segment_bytes, 1073741824);
    CU_ASSERT_EQUAL(cfg->num_network_threads, 3);
    CU_ASSERT_EQUAL(cfg->num_io_threads, 8);
    CU_ASSERT_EQUAL(cfg->socket_request_max_bytes, 104857600);
    CU_ASSERT_EQUAL(cfg->eff_log_retention_ms, 168LL * 3600000);
    CU_ASSERT_EQUAL(cfg->eff_log_roll_ms, 168LL * 3600000);
    CU_ASSERT_STRING_EQUAL(cfg->eff_log_dirs, "/tmp/kafka-logs");
    CU_ASSERT_EQUAL(cfg->lst_cnt, 1);
    CU_ASSERT_EQUAL(cfg->lst[0].port, 9092);
    CU_ASSERT_STRING_EQUAL(cfg->lst[0].protocol, "PLAINTEXT");
    CU_ASSERT(cfg->auto_create_topics_enable);
    CU_ASSERT(!cfg->unclean_leader_election_enable);
    CU_ASSERT_DOUBLE_EQUAL(cfg->log_cleaner_min_cleanable_ratio, 0.5, 1e-9);
    CU_ASSERT_EQUAL(cfg->metrics_port, -1);
    kb_config_free(cfg);
}

static void test_config_minimal_valid(void)
{
    kb_config_t *cfg = cfg_from(BASE, NULL);
    if (kb_config_error_cnt(cfg))
        dump_errors(cfg);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL(cfg->node_id, 1);
    CU_ASSERT_EQUAL(cfg->broker_id, 1);
    CU_ASSERT_STRING_EQUAL(cfg->eff_log_dirs, "/tmp/kbt-logs");
    CU_ASSERT_STRING_EQUAL(cfg->lst[0].host, "127.0.0.1");
    CU_ASSERT_EQUAL(cfg->lst[0].port, 0);
    CU_ASSERT_EQUAL(cfg->adv_cnt, 1);
    CU_ASSERT(kb_config_is_set(cfg, "node.id"));
    CU_ASSERT(!kb_config_is_set(cfg, "num.partitions"));
    /* typed accessors by name */
    CU_ASSERT_EQUAL(kb_config_int(cfg, "num.io.threads"), 8);
    CU_ASSERT_EQUAL(kb_config_int(cfg, "log.retention.bytes"), -1);
    CU_ASSERT(kb_config_bool(cfg, "log.cleaner.enable"));
    CU_ASSERT_DOUBLE_EQUAL(kb_config_double(cfg, "log.cleaner.min.cleanable.ratio"), 0.5, 1e-9);
    CU_ASSERT_STRING_EQUAL(kb_config_str(cfg, "log.cleanup.policy"), "delete");
    CU_ASSERT_PTR_NULL(kb_config_str(cfg, "num.io.threads")); /* wrong type */
    CU_ASSERT_EQUAL(kb_config_int(cfg, "no.such.key"), 0);
    /* default process.roles: a self-contained node, broker and controller */
    CU_ASSERT(kb_config_has_role(cfg, "broker"));
    CU_ASSERT(kb_config_has_role(cfg, "controller"));
    CU_ASSERT_EQUAL(cfg->broker_heartbeat_interval_ms, 2000);
    CU_ASSERT_EQUAL(cfg->broker_session_timeout_ms, 9000);
    CU_ASSERT_EQUAL(cfg->voter_id, -1);
    kb_config_free(cfg);
}

struct invalid_case {
    const char *line;   /* appended to BASE */
    const char *prefix; /* the error must start with this (the key) */
    const char *needle; /* and contain this */
};

static void test_config_invalid_classes(void)
{
    static const struct invalid_case cases[] = {
        {"log.segment.bytes=abc", "log.segment.bytes:", "'abc' is not an integer"},
        {"log.segment.bytes=12.5", "log.segment.bytes:", "is not an integer"},
        {"num.network.threads=0", "num.network.threads:", "allowed 1..1024"},
        {"num.partitions=99999999999", "num.partitions:", "32-bit"},
        {"log.retention.bytes=99999999999999999999", "log.retention.bytes:", "out of range"},
        {"auto.create.topics.enable=yes", "auto.create.topics.enable:", "true or false"},
        {"log.cleaner.min.cleanable.ratio=1.5", "log.cleaner.min.cleanable.ratio:", "allowed 0..1"},
        {"log.cleaner.min.cleanable.ratio=half",
         "log.cleaner.min.cleanable.ratio:", "not a number"},
        {"log.cleanup.policy=delete,shred", "log.cleanup.policy:", "'shred' is not one of"},
        {"log.cleanup.policy=delete,,compact", "log.cleanup.policy:", "empty list element"},
        {"process.roles=broker,router", "process.roles:", "broker, controller"},
        {"compression.type=brotli", "compression.type:", "is not one of"},
        {"log.level=loud", "log.level:", "is not one of"},
        {"no.such.key=1", "no.such.key:", "unknown configuration key"},
        {"listeners=PLAINTEXT//127.0.0.1:9092", "listeners:", "NAME://host:port"},
        {"listeners=PLAINTEXT://127.0.0.1:99999", "listeners:", "0..65535"},
        {"listeners=PLAINTEXT://127.0.0.1", "listeners:", "no port"},
        {"listeners=FOO://127.0.0.1:1", "listeners:", "listener.security.protocol.map"},
        {"listeners=SSL://127.0.0.1:1", "listeners:", "only PLAINTEXT"},
        {"listeners=PLAINTEXT://:1,PLAINTEXT://:2", "listeners:", "appears twice"},
        {"listeners=A://:7,B://:7\nlistener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT",
         "listeners:", "both use port 7"},
        {"listener.security.protocol.map=PLAINTEXT:TLS",
         "listener.security.protocol.map:", "not one of"},
        {"controller.quorum.voters=1@h:1,2@h:2", "controller.quorum.voters:", "more than one"},
        {"controller.quorum.voters=1@h", "controller.quorum.voters:", "ID@host:port"},
        {"controller.quorum.voters=x@h:1", "controller.quorum.voters:", "ID@host:port"},
        {"controller.quorum.voters=2@h:1", "controller.quorum.voters:", "is not this node"},
        {"process.roles=broker", "controller.quorum.voters:", "required"},
        {"process.roles=broker\ncontroller.quorum.voters=2@h:1",
         "controller.listener.names:", "required"},
        {"broker.heartbeat.interval.ms=9000", "broker.heartbeat.interval.ms:", "is not below"},
        {"advertised.listeners=OTHER://h:1", "advertised.listeners:", "not one of the listeners"},
        {"advertised.listeners=PLAINTEXT://0.0.0.0:1", "advertised.listeners:", "non-routable"},
        {"inter.broker.listener.name=INTERNAL", "inter.broker.listener.name:", "not one of"},
        {"metrics.listener=127.0.0.1:9404", "metrics.listener:", "http://host:port"},
        {"metrics.listener=http://127.0.0.1", "metrics.listener:", "no port"},
        {"group.min.session.timeout.ms=9000\ngroup.max.session.timeout.ms=8000",
         "group.min.session.timeout.ms:", "larger than"},
        {"broker.id=2", "broker.id:", "differs from node.id"},
        {"log.cleaner.dedupe.buffer.size=1048576", "log.cleaner.dedupe.buffer.size:", "1 MiB"},
        {"transaction.state.log.min.isr=4", "transaction.state.log.min.isr:", "larger than"},
        {"mirror.enable=maybe", "mirror.enable:", "true or false"},
        {"node.id=-1", "node.id:", "required"},
        {"node.id=-2", "node.id:", "allowed -1.."},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[1024];
        kb_config_t *cfg;
        snprintf(text, sizeof(text), BASE "%s\n", cases[i].line);
        cfg = cfg_from(text, NULL);
        if (!has_error(cfg, cases[i].prefix, cases[i].needle)) {
            fprintf(stderr, "\n  case '%s': expected '%s ... %s', got:\n", cases[i].line,
                    cases[i].prefix, cases[i].needle);
            dump_errors(cfg);
            CU_FAIL("missing or wrong error");
        }
        CU_ASSERT_EQUAL(kb_config_finalize(cfg), KB_E_INVALID);
        kb_config_free(cfg);
    }
}

static void test_config_error_names_origin(void)
{
    kb_config_t *cfg = cfg_from(BASE "# c\nlog.segment.bytes=abc\nnum.io.threads=0\n", NULL);
    /* every bad key is reported, each with its line */
    CU_ASSERT(has_error(cfg, "log.segment.bytes: 'abc' is not an integer", "line 5)"));
    CU_ASSERT(has_error(cfg, "num.io.threads: 0 is out of range", "line 6)"));
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 2);
    kb_config_free(cfg);
}

static void test_config_overrides(void)
{
    static const char *const ov[] = {"num.partitions=5", " log.retention.hours = 2 ", NULL};
    static const char *const bad_ov[] = {"num.partitions=x", NULL};
    static const char *const fix_ov[] = {"num.partitions=7", NULL};
    static const char *const no_eq[] = {"num.partitions", NULL};
    kb_config_t *cfg = cfg_from(BASE "num.partitions=3\n", ov);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL(cfg->num_partitions, 5);
    CU_ASSERT_EQUAL(cfg->eff_log_retention_ms, 2LL * 3600000);
    kb_config_free(cfg);

    /* an invalid override is reported as such */
    cfg = cfg_from(BASE "num.partitions=3\n", bad_ov);
    CU_ASSERT(has_error(cfg, "num.partitions: 'x' is not an integer", "--override"));
    kb_config_free(cfg);

    /* an invalid file value replaced by a valid override is fine (the last one wins) */
    cfg = cfg_from(BASE "num.partitions=x\n", fix_ov);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL(cfg->num_partitions, 7);
    kb_config_free(cfg);

    cfg = cfg_from(BASE, no_eq);
    CU_ASSERT(has_error(cfg, "--override:", "not key=value"));
    kb_config_free(cfg);

    /* within one file the last occurrence wins too */
    cfg = cfg_from(BASE "num.partitions=2\nnum.partitions=4\n", NULL);
    CU_ASSERT_EQUAL(cfg->num_partitions, 4);
    kb_config_free(cfg);
}

static void test_config_derived(void)
{
    kb_config_t *cfg;

    cfg = cfg_from(BASE "log.retention.minutes=30\n", NULL);
    CU_ASSERT_EQUAL(cfg->eff_log_retention_ms, 30LL * 60000);
    kb_config_free(cfg);
    cfg = cfg_from(BASE "log.retention.minutes=30\nlog.retention.ms=1234\n", NULL);
    CU_ASSERT_EQUAL(cfg->eff_log_retention_ms, 1234);
    kb_config_free(cfg);
    cfg = cfg_from(BASE "log.retention.hours=-1\n", NULL);
    CU_ASSERT_EQUAL(cfg->eff_log_retention_ms, -1);
    kb_config_free(cfg);
    cfg = cfg_from(BASE "log.roll.hours=2\n", NULL);
    CU_ASSERT_EQUAL(cfg->eff_log_roll_ms, 2LL * 3600000);
    kb_config_free(cfg);
    cfg = cfg_from(BASE "log.roll.hours=2\nlog.roll.ms=500\n", NULL);
    CU_ASSERT_EQUAL(cfg->eff_log_roll_ms, 500);
    kb_config_free(cfg);
    cfg = cfg_from("node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dir=/tmp/one\n", NULL);
    CU_ASSERT_STRING_EQUAL(cfg->eff_log_dirs, "/tmp/one");
    kb_config_free(cfg);
    /* broker.id alone sets node.id */
    cfg = cfg_from("broker.id=7\nlisteners=PLAINTEXT://127.0.0.1:0\n", NULL);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL(cfg->node_id, 7);
    kb_config_free(cfg);
    /* lists are normalised; choices matched case-insensitively and stored canonically */
    cfg = cfg_from(BASE "log.cleanup.policy = Compact , DELETE \nlog.level=DEBUG\n", NULL);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_STRING_EQUAL(cfg->log_cleanup_policy, "compact,delete");
    CU_ASSERT_STRING_EQUAL(cfg->log_level, "debug");
    kb_config_free(cfg);
    /* metrics.listener */
    cfg = cfg_from(BASE "metrics.listener=http://127.0.0.1:9404/\n", NULL);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_STRING_EQUAL(cfg->metrics_host, "127.0.0.1");
    CU_ASSERT_EQUAL(cfg->metrics_port, 9404);
    kb_config_free(cfg);
}

static void test_config_listeners(void)
{
    kb_config_t *cfg = cfg_from(
        "node.id=1\nprocess.roles=broker,controller\n"
        "listeners=plaintext://:9092,CONTROLLER://127.0.0.1:9093,V6://[::1]:9094\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,V6:plaintext\n"
        "controller.listener.names=CONTROLLER\n",
        NULL);
    if (kb_config_error_cnt(cfg))
        dump_errors(cfg);
    CU_ASSERT_EQUAL_FATAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL_FATAL(cfg->lst_cnt, 3);
    CU_ASSERT_STRING_EQUAL(cfg->lst[0].name, "PLAINTEXT");
    CU_ASSERT_STRING_EQUAL(cfg->lst[0].host, "");
    CU_ASSERT_STRING_EQUAL(cfg->lst[2].host, "::1");
    CU_ASSERT_STRING_EQUAL(cfg->lst[2].protocol, "PLAINTEXT");
    /* advertised by default: without the controller listener, empty host filled in */
    CU_ASSERT_EQUAL_FATAL(cfg->adv_cnt, 2);
    CU_ASSERT_STRING_EQUAL(cfg->adv[0].name, "PLAINTEXT");
    CU_ASSERT(cfg->adv[0].host[0] != '\0');
    CU_ASSERT_STRING_EQUAL(cfg->adv[1].name, "V6");
    CU_ASSERT(kb_config_has_role(cfg, "controller"));
    kb_config_free(cfg);

    /* a broker-only node of a cluster: the controller from controller.quorum.voters */
    cfg = cfg_from("node.id=2\nprocess.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:0\n"
                   "log.dirs=/tmp/kbt-logs\ncontroller.quorum.voters=1@[::1]:9093\n"
                   "controller.listener.names=CONTROLLER\n",
                   NULL);
    if (kb_config_error_cnt(cfg))
        dump_errors(cfg);
    CU_ASSERT_EQUAL_FATAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT(!kb_config_has_role(cfg, "controller"));
    CU_ASSERT_EQUAL(cfg->voter_id, 1);
    CU_ASSERT_STRING_EQUAL(cfg->voter_host, "::1");
    CU_ASSERT_EQUAL(cfg->voter_port, 9093);
    kb_config_free(cfg);
}

static int count_mirror(void *opaque, const char *key, const char *value)
{
    int *n = opaque;
    (*n)++;
    if (*n == 1)
        CU_ASSERT_STRING_EQUAL(key, "mirror.a.key");
    if (*n == 2)
        CU_ASSERT_STRING_EQUAL(key, "mirror.enable");
    if (*n == 3) {
        CU_ASSERT_STRING_EQUAL(key, "mirror.state.topic.num.partitions");
        CU_ASSERT_STRING_EQUAL(value, "5");
    }
    return 0;
}

static void test_config_mirror_passthrough(void)
{
    kb_config_t *cfg = cfg_from(BASE "mirror.enable=true\nmirror.state.topic.num.partitions=5\n"
                                     "mirror.a.key=anything goes\n",
                                NULL);
    int n = 0;
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT(cfg->mirror_enable);
    CU_ASSERT_STRING_EQUAL(kb_config_raw(cfg, "mirror.a.key"), "anything goes");
    CU_ASSERT_EQUAL(kb_config_foreach_prefix(cfg, "mirror.", count_mirror, &n), 0);
    CU_ASSERT_EQUAL(n, 3); /* mirror.enable is listed too (it is a given key) */
    kb_config_free(cfg);
}

static void test_config_kafka_sample(void)
{
    /* The single-node Apache Kafka 4.x config of kafka-peers.md loads unchanged. */
    kb_config_t *cfg =
        cfg_from("process.roles=broker,controller\nnode.id=1\n"
                 "controller.quorum.voters=1@127.0.0.1:19093\n"
                 "listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
                 "advertised.listeners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\n"
                 "inter.broker.listener.name=PLAINTEXT\ncontroller.listener.names=CONTROLLER\n"
                 "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n"
                 "log.dirs=/tmp/k4-n1\nnum.partitions=1\noffsets.topic.replication.factor=1\n"
                 "transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n"
                 "share.coordinator.state.topic.replication.factor=1\n"
                 "share.coordinator.state.topic.min.isr=1\n"
                 "log.cleaner.dedupe.buffer.size=2097152\ngroup.initial.rebalance.delay.ms=0\n"
                 "group.min.session.timeout.ms=0\noffsets.topic.num.partitions=5\n"
                 "transaction.state.log.num.partitions=5\nnum.network.threads=2\nnum.io.threads=2\n"
                 "background.threads=2\nnum.recovery.threads.per.data.dir=1\n"
                 "auto.create.topics.enable=false\n",
                 NULL);
    if (kb_config_error_cnt(cfg))
        dump_errors(cfg);
    CU_ASSERT_EQUAL(kb_config_error_cnt(cfg), 0);
    CU_ASSERT_EQUAL(cfg->num_network_threads, 2);
    CU_ASSERT_EQUAL(cfg->adv_cnt, 2);
    kb_config_free(cfg);
}

static void test_config_table(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    /* every key is unique and has a description */
    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        CU_ASSERT_PTR_NOT_NULL(kb_config_defs[i].doc);
        for (size_t j = i + 1; j < kb_config_defs_cnt; j++)
            CU_ASSERT(strcmp(kb_config_defs[i].name, kb_config_defs[j].name) != 0);
    }
    kb_config_print_table(f, "markdown");
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "| `log.segment.bytes` | int | `1073741824` |"));
    free(buf);
    f = open_memstream(&buf, &len);
    kb_config_print_table(f, "text");
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "num.io.threads (int, default 8"));
    free(buf);
}

/* kb_file_write_atomic(_tmp): the new bytes replace the old, no temp file is left, a named temp
 * file is used and removed, and a failed write leaves the old file as it was. */
static void test_file_write_atomic(void)
{
    char dir[] = "/tmp/kbfile.XXXXXX", path[128], tmp[160], missing[160];
    uint8_t *buf = NULL;
    size_t len = 0;
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/state", dir);
    snprintf(tmp, sizeof(tmp), "%s/state.part", dir);
    snprintf(missing, sizeof(missing), "%s/no/such/dir/state.part", dir);
    CU_ASSERT_EQUAL(kb_file_write_atomic(dir, path, "one", 3), 0);
    CU_ASSERT_EQUAL(kb_file_read_all(path, &buf, &len), 0);
    CU_ASSERT(len == 3 && buf && !memcmp(buf, "one", 3));
    free(buf);
    snprintf(tmp, sizeof(tmp), "%s/state.tmp", dir);
    CU_ASSERT_EQUAL(access(tmp, F_OK), -1);
    snprintf(tmp, sizeof(tmp), "%s/state.part", dir);
    CU_ASSERT_EQUAL(kb_file_write_atomic_tmp(dir, path, tmp, "second", 6), 0);
    CU_ASSERT_EQUAL(access(tmp, F_OK), -1);
    CU_ASSERT_EQUAL(kb_file_read_all(path, &buf, &len), 0);
    CU_ASSERT(len == 6 && buf && !memcmp(buf, "second", 6));
    free(buf);
    /* the temp file cannot be created: an error, the file as it was */
    CU_ASSERT_EQUAL(kb_file_write_atomic_tmp(dir, path, missing, "third", 5), -1);
    CU_ASSERT_EQUAL(kb_file_read_all(path, &buf, &len), 0);
    CU_ASSERT(len == 6 && buf && !memcmp(buf, "second", 6));
    free(buf);
    /* the directory to fsync does not exist: replaced, but reported (1; -1 for the plain one) */
    snprintf(missing, sizeof(missing), "%s/no-such-dir", dir);
    CU_ASSERT_EQUAL(kb_file_write_atomic_tmp(missing, path, NULL, "fourth", 6), 1);
    CU_ASSERT_EQUAL(kb_file_write_atomic(missing, path, "fifth", 5), -1);
    CU_ASSERT_EQUAL(kb_file_read_all(path, &buf, &len), 0);
    CU_ASSERT(len == 5 && buf && !memcmp(buf, "fifth", 5));
    free(buf);
    unlink(path);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("props", NULL, NULL);
    CU_add_test(s, "separators", test_props_separators);
    CU_add_test(s, "comments and blank lines", test_props_comments_blank);
    CU_add_test(s, "line continuation", test_props_continuation);
    CU_add_test(s, "escapes", test_props_escapes);
    CU_add_test(s, "errors", test_props_errors);
    CU_add_test(s, "list has", test_props_list_has);
    s = CU_add_suite("config", NULL, NULL);
    CU_add_test(s, "defaults", test_config_defaults);
    CU_add_test(s, "minimal valid", test_config_minimal_valid);
    CU_add_test(s, "invalid classes name the key", test_config_invalid_classes);
    CU_add_test(s, "errors carry their origin", test_config_error_names_origin);
    CU_add_test(s, "overrides win", test_config_overrides);
    CU_add_test(s, "derived values", test_config_derived);
    CU_add_test(s, "listeners", test_config_listeners);
    CU_add_test(s, "mirror.* pass-through", test_config_mirror_passthrough);
    CU_add_test(s, "Kafka sample config", test_config_kafka_sample);
    CU_add_test(s, "table", test_config_table);
    s = CU_add_suite("file", NULL, NULL);
    CU_add_test(s, "atomic writes", test_file_write_atomic);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
