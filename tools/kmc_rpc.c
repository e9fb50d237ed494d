/*
 * kmc_rpc.c -- kafka-mirrors over kp_client (see kmc_rpc.h).
 */
#include "kmc_rpc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kmc_args.h"
#include "kp_msgs.h"

/* Read-only mirror RPCs (ListMirrors, DescribeMirrors). */
#define KMC_KEY_LIST     98
#define KMC_KEY_DESCRIBE 99

/* Most memory a decoded answer may take (DescribeMirrors of many partitions fits easily). */
#define KMC_ARENA_LIMIT (256u * 1024 * 1024)

/* The outcome of one request, filled by its callback. */
typedef struct kmc_res {
    bool done;
    int err;
    int16_t ver;
    kmc_body_t *body;
    kmc_conn_t *cn;
} kmc_res_t;

static int64_t kmc_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int kmc_rpc_fail(char *errstr, size_t errstr_size, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int kmc_rpc_fail(char *errstr, size_t errstr_size, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return rc;
}

/* Keep the client's warnings: they say why a connection failed ("Connection refused"). */
static void kmc_rpc_log(void *opaque, int level, const char *msg)
{
    kmc_conn_t *cn = opaque;

    if (level <= KC_LOG_WARN)
        snprintf(cn->last_log, sizeof(cn->last_log), "%s", msg);
    if (getenv("KMC_DEBUG") != NULL)
        fprintf(stderr, "kafka-mirrors: client[%d]: %s\n", level, msg);
}

static void kmc_rpc_on_resp(kc_client_t *c, int err, int16_t ver, const uint8_t *body, size_t len,
                            void *opaque)
{
    kmc_res_t *r = opaque;

    (void)c;
    r->done = true;
    r->err = err;
    r->ver = ver;
    if (err == KC_E_OK) {
        kmc_body_t *b = malloc(sizeof(*b) + (len ? len : 1));
        if (b == NULL) {
            r->err = KC_E_NOMEM;
            return;
        }
        b->len = len;
        if (len)
            memcpy(b->data, body, len);
        b->next = r->cn->bodies;
        r->cn->bodies = b;
        r->body = b;
    }
}

/* Split "h:p,h:p" into cn->addrs (for messages; the client parses the list itself). */
static int kmc_rpc_split(kmc_conn_t *cn, const char *list, char *errstr, size_t errstr_size)
{
    const char *s = list;

    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        while (n && (*s == ' ' || *s == '\t')) {
            s++;
            n--;
        }
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n == 0 || memchr(s, ':', n) == NULL)
            return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_USAGE,
                                "--bootstrap-server: '%.*s' is not host:port (expected "
                                "HOST:PORT[,HOST:PORT...])",
                                (int)(n > 80 ? 80 : n), s);
        if (cn->naddrs == KMC_MAX_BOOTSTRAP)
            return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_USAGE,
                                "--bootstrap-server: more than %d addresses", KMC_MAX_BOOTSTRAP);
        /* ":9091" (the seed's spelling) is this host, as the Java clients read it. */
        if (s[0] == ':') {
            if (asprintf(&cn->addrs[cn->naddrs], "localhost%.*s", (int)n, s) < 0)
                cn->addrs[cn->naddrs] = NULL;
        } else {
            cn->addrs[cn->naddrs] = strndup(s, n);
        }
        if (cn->addrs[cn->naddrs] == NULL)
            return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE, "out of memory");
        cn->naddrs++;
        if (e == NULL)
            break;
        s = e + 1;
    }
    if (cn->naddrs == 0)
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_USAGE,
                            "--bootstrap-server: no address given");
    return KMC_EXIT_OK;
}

int kmc_conn_open(kmc_conn_t *cn, const char *bootstrap, const kmc_client_conf_t *cc,
                  int32_t timeout_ms, char *errstr, size_t errstr_size)
{
    kc_opts_t o;
    char err[256];
    kmc_res_t probes[KMC_MAX_BOOTSTRAP];
    int64_t ids[KMC_MAX_BOOTSTRAP];
    kp_ApiVersionsRequest_t av;
    int64_t deadline;
    int rc, chosen = -1;

    memset(cn, 0, sizeof(*cn));
    kp_arena_init(&cn->ar, KMC_ARENA_LIMIT);
    cn->node = -1;
    cn->request_timeout_ms = cc->request_timeout_ms > 0 ? cc->request_timeout_ms : timeout_ms;
    cn->connect_timeout_ms = cc->connect_timeout_ms > 0 ? cc->connect_timeout_ms : timeout_ms;
    rc = kmc_rpc_split(cn, bootstrap, errstr, errstr_size);
    if (rc != KMC_EXIT_OK)
        return rc;

    kc_opts_init(&o);
    o.client_id = cc->client_id != NULL ? cc->client_id : "kafka-mirrors";
    o.software_name = "kafka-mirrors";
    o.software_version = KMC_VERSION;
    o.connect_timeout_ms = cn->connect_timeout_ms;
    o.request_timeout_ms = cn->request_timeout_ms;
    o.reconnect_backoff_ms = 100;
    o.reconnect_backoff_max_ms = 1000;
    o.log_cb = kmc_rpc_log;
    o.log_opaque = cn;
    o.log_level = getenv("KMC_DEBUG") != NULL ? KC_LOG_DEBUG : KC_LOG_WARN;
    cn->c = kc_client_new(&o, err, sizeof(err));
    if (cn->c == NULL)
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                            "cannot start the client: %s", err);
    for (int i = 0; i < cn->naddrs; i++)
        if (kc_client_add_bootstrap(cn->c, cn->addrs[i]) != 0)
            return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_USAGE,
                                "--bootstrap-server: '%.200s' is not host:port", cn->addrs[i]);

    /* An ApiVersions to every bootstrap address at once; the first answer wins. */
    kp_msg_init(&kp_ApiVersionsRequest_desc, &av);
    av.ClientSoftwareName = kp_str("kafka-mirrors");
    av.ClientSoftwareVersion = kp_str(KMC_VERSION);
    memset(probes, 0, sizeof(probes));
    for (int i = 0; i < cn->naddrs; i++) {
        probes[i].cn = cn;
        ids[i] = kc_request_msg(cn->c, KC_NODE_BOOTSTRAP(i), &kp_ApiVersionsRequest_desc, 3, &av,
                                cn->connect_timeout_ms, 0, kmc_rpc_on_resp, &probes[i]);
        if (ids[i] < 0) {
            probes[i].done = true;
            probes[i].err = (int)ids[i];
        }
    }
    deadline = kmc_now_ms() + cn->connect_timeout_ms + 1000;
    for (;;) {
        int ndone = 0;
        for (int i = 0; i < cn->naddrs; i++) {
            if (probes[i].done && probes[i].err == KC_E_OK && chosen < 0)
                chosen = i;
            ndone += probes[i].done;
        }
        if (chosen >= 0 || ndone == cn->naddrs || kmc_now_ms() > deadline)
            break;
        kc_client_poll(cn->c, 100);
    }
    /* Cancel the other probes and run their callbacks (they point at this stack frame). */
    for (int i = 0; i < cn->naddrs; i++)
        if (!probes[i].done)
            kc_cancel(cn->c, ids[i]);
    /* Every accepted request is called back exactly once, a cancelled one at the next poll. */
    for (;;) {
        bool all = true;
        for (int i = 0; i < cn->naddrs; i++)
            all = all && probes[i].done;
        if (all)
            break;
        kc_client_poll(cn->c, 50);
    }
    if (chosen < 0) {
        int err0 = probes[0].err;
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                            "cannot reach the cluster at %s: %s%s%s. Check --bootstrap-server "
                            "(a PLAINTEXT listener of a destination broker) and that the "
                            "brokers are running",
                            bootstrap, err0 ? kc_err_str(err0) : "no answer",
                            cn->last_log[0] ? "; last error: " : "", cn->last_log);
    }
    cn->node = KC_NODE_BOOTSTRAP(chosen);
    snprintf(cn->addr, sizeof(cn->addr), "%s", cn->addrs[chosen]);
    return KMC_EXIT_OK;
}

int kmc_conn_check_api(kmc_conn_t *cn, const kp_msg_desc_t *req, char *errstr, size_t errstr_size)
{
    int16_t lo, hi;
    const kp_api_info_t *api = kp_api_lookup(req->api_key);

    if (kc_client_api_range(cn->c, cn->node, req->api_key, &lo, &hi) == 0 && lo <= req->max_ver &&
        hi >= req->min_ver)
        return KMC_EXIT_OK;
    if (kc_client_api_range(cn->c, cn->node, req->api_key, &lo, &hi) == 0)
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                            "the broker at %s serves %s (key %d) only in versions %d-%d, and "
                            "kafka-mirrors speaks %d-%d: use a kafka-mirrors of the same kmirror "
                            "release as the brokers",
                            cn->addr, api ? api->name : "the API", req->api_key, lo, hi,
                            req->min_ver, req->max_ver);
    return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                        "the broker at %s does not support the mirror APIs (its ApiVersions lacks "
                        "key %d, %s): load kmirror.so on every broker with mirror.enable=true "
                        "(plugin.paths=/path/to/kmirror.so in server.properties) and restart them",
                        cn->addr, req->api_key, api ? api->name : "?");
}

int kmc_conn_call(kmc_conn_t *cn, const kp_msg_desc_t *req_desc, const void *req,
                  const kp_msg_desc_t *resp_desc, void *resp, int32_t timeout_ms, char *errstr,
                  size_t errstr_size)
{
    kmc_res_t r = {.cn = cn};
    const kp_api_info_t *api = kp_api_lookup(req_desc->api_key);
    const char *name = api ? api->name : "request";
    int64_t id, deadline;
    kp_reader_t rd;
    int derr;

    if (timeout_ms <= 0)
        timeout_ms = cn->request_timeout_ms;
    id = kc_request_msg(cn->c, cn->node, req_desc, -1, req, timeout_ms, 0, kmc_rpc_on_resp, &r);
    if (id < 0)
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE, "%s to %s not sent: %s",
                            name, cn->addr, kc_err_str((int)id));
    /* The client enforces the deadline; ours is only a guard against a lost callback. */
    deadline = kmc_now_ms() + timeout_ms + 5000;
    while (!r.done && kmc_now_ms() < deadline)
        kc_client_poll(cn->c, 100);
    if (!r.done) {
        kc_cancel(cn->c, id);
        while (!r.done)
            kc_client_poll(cn->c, 100);
    }
    if (r.err == KC_E_NO_VERSION) {
        return kmc_conn_check_api(cn, req_desc, errstr, errstr_size) != KMC_EXIT_OK
                   ? KMC_EXIT_UNREACHABLE
                   : kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                                  "%s: no version in common with the broker at %s", name, cn->addr);
    }
    if (r.err != KC_E_OK) {
        bool mutation = req_desc->api_key != KMC_KEY_LIST && req_desc->api_key != KMC_KEY_DESCRIBE;
        bool unknown = mutation && (r.err == KC_E_TIMED_OUT || r.err == KC_E_TRANSPORT);
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_UNREACHABLE,
                            "%s to the broker at %s failed: %s%s%s%s%s", name, cn->addr,
                            kc_err_str(r.err), cn->last_log[0] ? " (" : "", cn->last_log,
                            cn->last_log[0] ? ")" : "",
                            unknown ? ". The request may have been applied all the same: check "
                                      "with --describe or --list before sending it again"
                                    : "");
    }
    kp_reader_init(&rd, r.body->data, r.body->len);
    kp_msg_init(resp_desc, resp);
    derr = kp_msg_decode(resp_desc, &rd, &cn->ar, resp, r.ver);
    if (derr != 0)
        return kmc_rpc_fail(errstr, errstr_size, KMC_EXIT_PROTOCOL,
                            "the broker at %s sent a %s v%d that cannot be decoded (%s): is it "
                            "running the same kmirror release as kafka-mirrors?",
                            cn->addr, resp_desc->name, r.ver, kp_err_str(derr));
    return KMC_EXIT_OK;
}

void kmc_conn_wait(kmc_conn_t *cn, int ms)
{
    int64_t until = kmc_now_ms() + ms;

    for (int64_t now = kmc_now_ms(); now < until; now = kmc_now_ms())
        kc_client_poll(cn->c, (int)(until - now));
}

void kmc_conn_reset(kmc_conn_t *cn)
{
    while (cn->bodies != NULL) {
        kmc_body_t *b = cn->bodies;
        cn->bodies = b->next;
        free(b);
    }
    kp_arena_free(&cn->ar);
    kp_arena_init(&cn->ar, KMC_ARENA_LIMIT);
}

void kmc_conn_close(kmc_conn_t *cn)
{
    if (cn->c != NULL)
        kc_client_destroy(cn->c);
    cn->c = NULL;
    while (cn->bodies != NULL) {
        kmc_body_t *b = cn->bodies;
        cn->bodies = b->next;
        free(b);
    }
    for (int i = 0; i < cn->naddrs; i++) {
        free(cn->addrs[i]);
        cn->addrs[i] = NULL;
    }
    cn->naddrs = 0;
    kp_arena_free(&cn->ar);
}

char *kmc_conn_str(kmc_conn_t *cn, kp_str_t s)
{
    char *d;

    if (s.len < 0 || s.ptr == NULL)
        return NULL;
    d = kp_arena_alloc(&cn->ar, (size_t)s.len + 1);
    if (d == NULL)
        return NULL;
    memcpy(d, s.ptr, (size_t)s.len);
    d[s.len] = '\0';
    return d;
}
