/*
 * kafka-mirrors -- the operator CLI of kmirror (docs/cli.md).
 *
 * One action per run: parse and validate locally (exit 2 on any problem, before connecting),
 * connect to the first bootstrap broker that answers (exit 3 if none, or if it lacks the
 * mirror APIs), send the mirror RPC(s), print a table or JSON, and exit 1 if the request or
 * any of its items failed.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kmc_args.h"
#include "kmc_conf.h"
#include "kmc_fmt.h"
#include "kmc_props.h"
#include "kmc_rpc.h"
#include "kp_errcode.h"
#include "kp_msgs.h"
#include "util/km_pattern.h"

#define KMC_ERRLEN 2048

/* Everything one run needs. */
typedef struct kmc_run {
    kmc_args_t a;
    kmc_conn_t cn;
    km_plugin_t *cm; /* for km_pattern (the broker's own pattern rules) */
    km_pattern_t *topic_re[KMC_MAX_PATTERNS];
    char err[KMC_ERRLEN];
} kmc_run_t;

static void kmc_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void kmc_error(const char *fmt, ...)
{
    va_list ap;

    fflush(stdout); /* what was printed so far comes first, also when both go to one file */
    fputs("kafka-mirrors: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- regular expressions ------------------------------------------------------------------ */

/* Compile @p re with the plugin's own pattern rules (km_pattern: anchored at both ends, so it
 * must match the whole topic name; the same limits), as the broker will (docs/design.md M9). */
static km_pattern_t *kmc_re_compile(kmc_run_t *run, const char *opt, const char *re)
{
    km_pattern_t *p = NULL;
    char why[256];
    km_err_t err = km_pattern_compile(run->cm, re, strlen(re), &p, why, sizeof(why));

    if (err != KM_OK) {
        snprintf(run->err, sizeof(run->err), "%s '%.200s': %s", opt, re,
                 err == KM_ERR_NOMEM ? "out of memory" : why);
        return NULL;
    }
    return p;
}

/* Does @p name match any --topic? A pattern too expensive for the name (a PCRE2 limit) counts
 * as no match, with a warning: the broker would refuse it too. */
static bool kmc_re_any(kmc_run_t *run, const char *name)
{
    for (int i = 0; i < run->a.ntopics; i++) {
        bool m = false;
        if (km_pattern_match(run->topic_re[i], name, strlen(name), &m) != KM_OK)
            kmc_error("warning: --topic '%s' is too expensive to match against '%s'",
                      run->a.topics[i], name);
        else if (m)
            return true;
    }
    return false;
}

/* ---- errors from the broker --------------------------------------------------------------- */

/* What the operator can do about @p code (NULL: nothing specific). */
static const char *kmc_hint(const kmc_run_t *run, int16_t code, char *buf, size_t n)
{
    const char *m = run->a.mirror ? run->a.mirror : "NAME";

    switch (code) {
    case KP_ERR_UNKNOWN_CLUSTER_MIRROR:
        snprintf(buf, n, "mirror %s not found: list mirrors with --list", m);
        return buf;
    case KP_ERR_CLUSTER_MIRROR_ALREADY_EXISTS:
        snprintf(buf, n,
                 "mirror %s already exists: look at it with --describe --mirror %s, or --delete "
                 "it first",
                 m, m);
        return buf;
    case KP_ERR_INVALID_CLUSTER_MIRROR_NAME:
        return "mirror names follow topic-name rules ([a-zA-Z0-9._-], at most 249 characters) "
               "and may not end in .paused, .stopped or .removed";
    case KP_ERR_TOPIC_ALREADY_IN_CLUSTER_MIRROR:
        return "the topic already belongs to a mirror: see --describe";
    case KP_ERR_TOPIC_NOT_IN_CLUSTER_MIRROR:
        snprintf(buf, n,
                 "the topic is not in mirror %s: see its topics with --describe --mirror %s", m, m);
        return buf;
    case KP_ERR_MIRROR_TOPIC_ALREADY_PAUSED:
        return "the topic is already paused; --resume resumes it";
    case KP_ERR_MIRROR_TOPIC_NOT_PAUSED:
        return "only paused topics can be resumed; FAILED partitions are retried with --recover";
    case KP_ERR_MIRROR_TOPIC_BEING_STOPPED:
        snprintf(buf, n,
                 "the topic is being stopped; wait until --describe --mirror %s shows it STOPPED",
                 m);
        return buf;
    case KP_ERR_CLUSTER_MIRROR_NOT_EMPTY:
    case KP_ERR_MIRROR_TOPIC_NOT_STOPPED:
        snprintf(buf, n,
                 "a mirror can be deleted only when every topic is STOPPED: run --stop --mirror "
                 "%s --topic '.*' and wait until --describe --mirror %s shows STOPPED everywhere",
                 m, m);
        return buf;
    case KP_ERR_INVALID_CLUSTER_MIRROR_STATES:
        snprintf(buf, n,
                 "the partitions are not in a state that allows this: look at them with "
                 "--describe --mirror %s",
                 m);
        return buf;
    case KP_ERR_CLUSTER_MIRROR_AUTHORIZATION_FAILED:
    case KP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case KP_ERR_TOPIC_AUTHORIZATION_FAILED:
        return "the principal of this connection lacks the ACL for this operation (see "
               "docs/cli.md, \"Permissions\")";
    case KP_ERR_INVALID_CONFIG:
        if (run->a.action == KMC_ACT_ALTER)
            return "fix --add-config / --delete-config (keys and values in docs/config.md, "
                   "\"Per-mirror settings\")";
        return "fix the --mirror-config file (keys and values in docs/config.md, \"Per-mirror "
               "settings\")";
    case KP_ERR_INVALID_REGULAR_EXPRESSION:
        return "the broker refused the regular expression (whole-name PCRE2 patterns)";
    case KP_ERR_NOT_CONTROLLER:
    case KP_ERR_COORDINATOR_NOT_AVAILABLE:
    case KP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case KP_ERR_REQUEST_TIMED_OUT:
        return "a transient condition of the cluster (the controller or a coordinator is not "
               "available); try again, with a larger --timeout-ms if it persists";
    case KP_ERR_UNSUPPORTED_VERSION:
        return "the broker does not accept this request version: use a kafka-mirrors of the "
               "same kmirror release as the brokers";
    default:
        return NULL;
    }
}

/* Text from the broker, for the terminal: control characters become '?'. */
static const char *kmc_safe(const char *s, size_t len, char *buf, size_t n)
{
    size_t i;

    for (i = 0; i < len && i + 1 < n; i++)
        buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    buf[i] = '\0';
    return buf;
}

/* Report a Kafka error of the whole request (@p what: "CreateMirror"). */
static void kmc_report(const kmc_run_t *run, const char *what, int16_t code, kp_str_t msg)
{
    char hint[512], sm[1024];
    const char *h = kmc_hint(run, code, hint, sizeof(hint));

    if (msg.len > 0)
        kmc_error("%s failed: %s: %s", what, kp_errcode_name(code),
                  kmc_safe(msg.ptr, (size_t)msg.len, sm, sizeof(sm)));
    else
        kmc_error("%s failed: %s (%s)", what, kp_errcode_name(code), kp_errcode_msg(code));
    if (h != NULL)
        kmc_error("hint: %s", h);
}

/* Report the per-mirror error of a DescribeMirrors answer (@p msg may be NULL). */
static void kmc_report_mirror(const kmc_run_t *run, const char *mirror, int16_t code,
                              const char *msg)
{
    char sm[1024], sn[300], hint[512];
    const char *h;

    kmc_error("mirror %s: %s%s%s", kmc_safe(mirror, strlen(mirror), sn, sizeof(sn)),
              kp_errcode_name(code), msg ? ": " : "",
              msg ? kmc_safe(msg, strlen(msg), sm, sizeof(sm)) : "");
    if (code == KP_ERR_UNKNOWN_CLUSTER_MIRROR)
        kmc_error("hint: mirror %s not found: list mirrors with --list", sn);
    else if ((h = kmc_hint(run, code, hint, sizeof(hint))) != NULL)
        kmc_error("hint: %s", h);
}

/* Hints for the distinct per-topic error codes of @p r, once each. */
static void kmc_report_items(const kmc_run_t *run, const kmc_topic_result_t *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char hint[512];
        const char *h;
        bool seen = false;
        if (r[i].error_code == 0)
            continue;
        for (size_t k = 0; k < i; k++)
            seen = seen || r[k].error_code == r[i].error_code;
        if (seen)
            continue;
        h = kmc_hint(run, r[i].error_code, hint, sizeof(hint));
        if (h != NULL)
            kmc_error("hint: %s: %s", kp_errcode_name(r[i].error_code), h);
    }
}

/* Errors after which sending the same request again is safe and may work. */
static bool kmc_retriable(int16_t code)
{
    return code == KP_ERR_NOT_CONTROLLER || code == KP_ERR_COORDINATOR_NOT_AVAILABLE ||
           code == KP_ERR_COORDINATOR_LOAD_IN_PROGRESS;
}

static int64_t kmc_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Send, and send again while the top-level error (*@p ec after decoding) is one the cluster
 * recovers from by itself (NOT_CONTROLLER while the controller is away, ...), until the
 * timeout. Nothing was applied when those are returned, so the retry is safe.
 */
static int kmc_call(kmc_run_t *run, const kp_msg_desc_t *reqd, const void *req,
                    const kp_msg_desc_t *respd, void *resp, const int16_t *ec, int32_t timeout_ms)
{
    int64_t deadline = kmc_now_ms() + run->a.timeout_ms;
    int backoff = 200;

    for (;;) {
        int rc =
            kmc_conn_call(&run->cn, reqd, req, respd, resp, timeout_ms, run->err, sizeof(run->err));
        if (rc != KMC_EXIT_OK || !kmc_retriable(*ec) || kmc_now_ms() + backoff > deadline)
            return rc;
        if (getenv("KMC_DEBUG") != NULL)
            kmc_error("%s: %s, retrying in %d ms", reqd->name, kp_errcode_name(*ec), backoff);
        kmc_conn_wait(&run->cn, backoff);
        backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
    }
}

/* Check that the broker serves the API, send, decode (kmc_call); a failure is reported here.
 * Returns the exit code. */
static int kmc_send(kmc_run_t *run, const kp_msg_desc_t *reqd, const void *req,
                    const kp_msg_desc_t *respd, void *resp, const int16_t *ec, int32_t timeout_ms)
{
    int rc = kmc_conn_check_api(&run->cn, reqd, run->err, sizeof(run->err));

    if (rc == KMC_EXIT_OK)
        rc = kmc_call(run, reqd, req, respd, resp, ec, timeout_ms);
    if (rc != KMC_EXIT_OK)
        kmc_error("%s", run->err);
    return rc;
}

/* An answer without error that still lacks part of the cluster (DescribeMirrors fan-out). */
static void kmc_warn_partial(const char *warning)
{
    char sm[1024];

    kmc_error("warning: the answer is incomplete: %s",
              kmc_safe(warning, strlen(warning), sm, sizeof(sm)));
    kmc_error("hint: a broker of the cluster did not report its partitions; check that every "
              "broker is up and run the command again");
}

/* ---- DescribeMirrors into rows -------------------------------------------------------------- */

static int kmc_part_cmp(const void *x, const void *y)
{
    const kmc_part_row_t *a = x, *b = y;
    int c = strcmp(a->topic, b->topic);

    if (c != 0)
        return c;
    return (a->partition > b->partition) - (a->partition < b->partition);
}

static int kmc_mirror_cmp(const void *x, const void *y)
{
    const kmc_mirror_desc_t *a = x, *b = y;

    return strcmp(a->mirror, b->mirror);
}

static bool kmc_is_failed(const kmc_part_row_t *p)
{
    return strcmp(p->state, "FAILED") == 0 || (p->error != NULL && p->error[0] != '\0');
}

/*
 * Describe @p mirror (NULL: all) into @p *out (sorted by mirror, topic, partition; strings in
 * the connection's arena). Partitions are filtered by --topic when @p filter and by --failed.
 * Returns an exit code; a top-level error is reported here. @p *warning: the broker's message
 * when it answered without error but incompletely (a broker of the cluster did not report its
 * partitions), else NULL.
 */
static int kmc_describe_rows(kmc_run_t *run, const char *mirror, bool filter,
                             kmc_mirror_desc_t **out, size_t *nout, const char **warning)
{
    kp_DescribeMirrorsRequest_t req;
    kp_DescribeMirrorsResponse_t resp;
    kp_str_t name = kp_str(mirror);
    kmc_mirror_desc_t *md;
    int rc;

    kp_msg_init(&kp_DescribeMirrorsRequest_desc, &req);
    if (mirror != NULL) {
        req.MirrorNames.cnt = 1;
        req.MirrorNames.v = &name;
    } else {
        req.MirrorNames.cnt = -1;
    }
    rc = kmc_send(run, &kp_DescribeMirrorsRequest_desc, &req, &kp_DescribeMirrorsResponse_desc,
                  &resp, &resp.ErrorCode, 0);
    if (rc != KMC_EXIT_OK)
        return rc;
    if (resp.ErrorCode != 0) {
        kmc_report(run, "DescribeMirrors", resp.ErrorCode, resp.ErrorMessage);
        return KMC_EXIT_FAILED;
    }
    *warning = resp.ErrorMessage.len > 0 ? kmc_conn_str(&run->cn, resp.ErrorMessage) : NULL;
    *nout = resp.Mirrors.cnt > 0 ? (size_t)resp.Mirrors.cnt : 0;
    md = kp_arena_calloc(&run->cn.ar, *nout ? *nout : 1, sizeof(*md));
    if (md == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    for (size_t i = 0; i < *nout; i++) {
        const kp_DescribeMirrorsResponse_DescribedMirror_t *dm = &resp.Mirrors.v[i];
        size_t np = 0;

        md[i].mirror = kmc_conn_str(&run->cn, dm->MirrorName);
        if (md[i].mirror == NULL)
            md[i].mirror = "";
        md[i].source_bootstrap = kmc_conn_str(&run->cn, dm->SourceBootstrap);
        md[i].source_cluster_id = kmc_conn_str(&run->cn, dm->SourceClusterId);
        md[i].error_code = dm->ErrorCode;
        md[i].error_message = kmc_conn_str(&run->cn, dm->ErrorMessage);
        for (int32_t t = 0; t < dm->Topics.cnt; t++)
            np += dm->Topics.v[t].Partitions.cnt > 0 ? (size_t)dm->Topics.v[t].Partitions.cnt : 0;
        md[i].parts = kp_arena_calloc(&run->cn.ar, np ? np : 1, sizeof(*md[i].parts));
        if (md[i].parts == NULL) {
            kmc_error("out of memory");
            return KMC_EXIT_PROTOCOL;
        }
        for (int32_t t = 0; t < dm->Topics.cnt; t++) {
            const kp_DescribeMirrorsResponse_TopicResult_t *tr = &dm->Topics.v[t];
            char *topic = kmc_conn_str(&run->cn, tr->TopicName);
            if (topic == NULL)
                topic = "";
            if (filter && run->a.ntopics > 0 && !kmc_re_any(run, topic))
                continue;
            for (int32_t p = 0; p < tr->Partitions.cnt; p++) {
                const kp_DescribeMirrorsResponse_PartitionDetail_t *pd = &tr->Partitions.v[p];
                kmc_part_row_t *row = &md[i].parts[md[i].nparts];
                row->topic = topic;
                row->partition = pd->PartitionIndex;
                row->state = kmc_conn_str(&run->cn, pd->StateValue);
                if (row->state == NULL || row->state[0] == '\0')
                    row->state = "UNKNOWN";
                row->source_offset = pd->SourceOffset;
                row->dest_offset = pd->DestinationOffset;
                row->last_epoch = pd->LastMirrorEpoch;
                row->last_offset = pd->LastMirrorOffset;
                row->retry = pd->RetryAttempt;
                row->error = kmc_conn_str(&run->cn, pd->ErrorMessage);
                if (filter && run->a.failed && !kmc_is_failed(row))
                    continue;
                md[i].nparts++;
            }
        }
        qsort(md[i].parts, md[i].nparts, sizeof(*md[i].parts), kmc_part_cmp);
        if (dm->SyncStatus.cnt > 0) {
            md[i].sync =
                kp_arena_calloc(&run->cn.ar, (size_t)dm->SyncStatus.cnt, sizeof(*md[i].sync));
            if (md[i].sync == NULL) {
                kmc_error("out of memory");
                return KMC_EXIT_PROTOCOL;
            }
        }
        for (int32_t k = 0; k < dm->SyncStatus.cnt; k++) {
            const kp_DescribeMirrorsResponse_SyncKindStatus_t *ss = &dm->SyncStatus.v[k];
            kmc_sync_row_t *r = &md[i].sync[md[i].nsync++];
            r->kind = kmc_conn_str(&run->cn, ss->Kind);
            if (r->kind == NULL)
                r->kind = "";
            r->enabled = ss->Enabled;
            r->runs = ss->Runs;
            r->errors = ss->Errors;
            r->last_error = kmc_conn_str(&run->cn, ss->LastError);
            r->last_error_ms = ss->LastErrorTimeMs;
            r->last_sync_ms = ss->LastSyncTimeMs;
        }
    }
    qsort(md, *nout, sizeof(*md), kmc_mirror_cmp);
    *out = md;
    return KMC_EXIT_OK;
}

/* ---- actions ------------------------------------------------------------------------------ */

static int kmc_do_list(kmc_run_t *run)
{
    kp_ListMirrorsRequest_t req;
    kp_ListMirrorsResponse_t resp;
    kmc_list_row_t *rows;
    size_t n;
    int rc;

    kp_msg_init(&kp_ListMirrorsRequest_desc, &req);
    rc = kmc_send(run, &kp_ListMirrorsRequest_desc, &req, &kp_ListMirrorsResponse_desc, &resp,
                  &resp.ErrorCode, 0);
    if (rc != KMC_EXIT_OK)
        return rc;
    if (resp.ErrorCode != 0) {
        kmc_report(run, "ListMirrors", resp.ErrorCode, resp.ErrorMessage);
        return KMC_EXIT_FAILED;
    }
    n = resp.Mirrors.cnt > 0 ? (size_t)resp.Mirrors.cnt : 0;
    rows = kp_arena_calloc(&run->cn.ar, n ? n : 1, sizeof(*rows));
    if (rows == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    for (size_t i = 0; i < n; i++) {
        const kp_ListMirrorsResponse_ListedMirror_t *m = &resp.Mirrors.v[i];
        rows[i].mirror = kmc_conn_str(&run->cn, m->MirrorName);
        if (rows[i].mirror == NULL)
            rows[i].mirror = "";
        rows[i].topic_count = m->TopicCount;
        rows[i].source_cluster_id = kmc_conn_str(&run->cn, m->SourceClusterId);
        rows[i].source_bootstrap = kmc_conn_str(&run->cn, m->SourceBootstrap);
    }
    /* Sorted by name: stable output for scripts and people alike. */
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && strcmp(rows[k - 1].mirror, rows[k].mirror) > 0; k--) {
            kmc_list_row_t t = rows[k];
            rows[k] = rows[k - 1];
            rows[k - 1] = t;
        }
    if (run->a.json)
        kmc_fmt_list_json(stdout, rows, n);
    else if (n == 0)
        printf("No mirrors. Create one with --create --mirror NAME --mirror-config FILE.\n");
    else
        kmc_fmt_list_text(stdout, rows, n);
    return KMC_EXIT_OK;
}

static void kmc_describe_config(kmc_run_t *run, const char *mirror);

static int kmc_do_describe(kmc_run_t *run)
{
    kmc_mirror_desc_t *md = NULL;
    size_t n = 0, nerr = 0;
    const char *warning = NULL;
    int rc = kmc_describe_rows(run, run->a.mirror, true, &md, &n, &warning);
    bool found = run->a.mirror == NULL;

    if (rc != KMC_EXIT_OK)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (run->a.mirror != NULL && strcmp(md[i].mirror, run->a.mirror) == 0)
            found = true;
        if (md[i].error_code != 0) {
            rc = KMC_EXIT_FAILED;
            nerr++;
        }
    }
    if (run->a.json)
        kmc_fmt_describe_json(stdout, md, n, warning);
    else if (n == 0 && run->a.mirror == NULL)
        printf("No mirrors. Create one with --create --mirror NAME --mirror-config FILE.\n");
    else if (n > nerr)
        kmc_fmt_describe_text(stdout, md, n);
    if (!run->a.json && found && run->a.mirror != NULL)
        kmc_describe_config(run, run->a.mirror);
    for (size_t i = 0; i < n; i++)
        if (md[i].error_code != 0)
            kmc_report_mirror(run, md[i].mirror, md[i].error_code, md[i].error_message);
    if (!found) {
        kmc_error("mirror %s not found: list mirrors with --list", run->a.mirror);
        rc = KMC_EXIT_FAILED;
    }
    if (warning != NULL) {
        kmc_warn_partial(warning);
        rc = KMC_EXIT_FAILED;
    }
    return rc;
}

/* The provisional config resource type of a mirror (docs/provisional.md). */
#define KMC_MIRROR_RESOURCE KP_CONFIG_RESOURCE_TYPE_MIRROR

/* --describe --mirror M: the keys set on the mirror (DescribeConfigs of its config resource),
 * secrets shown as "(sensitive)". Skipped when the broker does not serve DescribeConfigs; a
 * failure is a warning (the partition table was printed already). */
static void kmc_describe_config(kmc_run_t *run, const char *mirror)
{
    kp_DescribeConfigsRequest_t req;
    kp_DescribeConfigsRequest_DescribeConfigsResource_t res;
    kp_DescribeConfigsResponse_t resp;
    const kp_DescribeConfigsResponse_DescribeConfigsResult_t *r;
    char err[512];

    if (kmc_conn_check_api(&run->cn, &kp_DescribeConfigsRequest_desc, err, sizeof(err)) !=
        KMC_EXIT_OK)
        return;
    kp_msg_init(&kp_DescribeConfigsRequest_desc, &req);
    kp_DescribeConfigsRequest_DescribeConfigsResource_init(&res);
    res.ResourceType = KMC_MIRROR_RESOURCE;
    res.ResourceName = kp_str(mirror);
    res.ConfigurationKeys.cnt = -1;
    req.Resources.v = &res;
    req.Resources.cnt = 1;
    if (kmc_conn_call(&run->cn, &kp_DescribeConfigsRequest_desc, &req,
                      &kp_DescribeConfigsResponse_desc, &resp, 0, err,
                      sizeof(err)) != KMC_EXIT_OK) {
        kmc_error("the configuration of mirror %s: %s", mirror, err);
        return;
    }
    if (resp.Results.cnt != 1) {
        kmc_error("the configuration of mirror %s: the broker answered %d resources", mirror,
                  (int)resp.Results.cnt);
        return;
    }
    r = &resp.Results.v[0];
    if (r->ErrorCode != 0) {
        kmc_report(run, "DescribeConfigs", r->ErrorCode, r->ErrorMessage);
        return;
    }
    printf("\nCONFIG of mirror %s (keys set on the mirror; the rest have their defaults, "
           "docs/config.md)\n",
           mirror);
    for (int32_t i = 0; i < r->Configs.cnt; i++) {
        const kp_DescribeConfigsResponse_DescribeConfigsResourceResult_t *c = &r->Configs.v[i];
        if (c->ConfigSource == 5) /* DEFAULT_CONFIG */
            continue;
        printf("  %s=%s\n", kmc_conn_str(&run->cn, c->Name),
               c->IsSensitive ? "(sensitive)" : kmc_conn_str(&run->cn, c->Value));
    }
}

/* --alter: IncrementalAlterConfigs (SET / DELETE) of the mirror's config resource. */
static int kmc_do_alter(kmc_run_t *run)
{
    kmc_cfg_op_t *ops = NULL;
    size_t n = 0;
    kp_IncrementalAlterConfigsRequest_t req;
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_t res;
    kp_IncrementalAlterConfigsRequest_AlterableConfig_t *cfg = NULL;
    kp_IncrementalAlterConfigsResponse_t resp;
    const kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_t *r;
    int rc;

    if (kmc_cfg_ops_parse(run->a.add_config, run->a.delete_config, &ops, &n, run->err,
                          sizeof(run->err)) != 0) {
        kmc_error("%s", run->err);
        return KMC_EXIT_USAGE;
    }
    rc = kmc_conn_check_api(&run->cn, &kp_IncrementalAlterConfigsRequest_desc, run->err,
                            sizeof(run->err));
    if (rc != KMC_EXIT_OK) {
        kmc_error("%s", run->err);
        goto out;
    }
    cfg = calloc(n ? n : 1, sizeof(*cfg));
    if (cfg == NULL) {
        kmc_error("out of memory");
        rc = KMC_EXIT_USAGE;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        kp_IncrementalAlterConfigsRequest_AlterableConfig_init(&cfg[i]);
        cfg[i].Name = kp_str(ops[i].key);
        cfg[i].ConfigOperation = ops[i].value != NULL ? 0 : 1; /* SET : DELETE */
        cfg[i].Value = ops[i].value != NULL ? kp_str(ops[i].value) : KP_STR_NULL;
    }
    kp_msg_init(&kp_IncrementalAlterConfigsRequest_desc, &req);
    kp_IncrementalAlterConfigsRequest_AlterConfigsResource_init(&res);
    res.ResourceType = KMC_MIRROR_RESOURCE;
    res.ResourceName = kp_str(run->a.mirror);
    res.Configs.v = cfg;
    res.Configs.cnt = (int32_t)n;
    req.Resources.v = &res;
    req.Resources.cnt = 1;
    rc = kmc_conn_call(&run->cn, &kp_IncrementalAlterConfigsRequest_desc, &req,
                       &kp_IncrementalAlterConfigsResponse_desc, &resp, 0, run->err,
                       sizeof(run->err));
    if (rc != KMC_EXIT_OK) {
        kmc_error("%s", run->err);
        goto out;
    }
    if (resp.Responses.cnt != 1) {
        kmc_error("IncrementalAlterConfigs: the broker answered %d resources",
                  (int)resp.Responses.cnt);
        rc = KMC_EXIT_PROTOCOL;
        goto out;
    }
    r = &resp.Responses.v[0];
    if (run->a.json)
        kmc_fmt_results_json(stdout, "alter", run->a.mirror, r->ErrorCode,
                             kmc_conn_str(&run->cn, r->ErrorMessage), NULL, 0);
    if (r->ErrorCode != 0) {
        kmc_report(run, "IncrementalAlterConfigs", r->ErrorCode, r->ErrorMessage);
        rc = KMC_EXIT_FAILED;
        goto out;
    }
    if (!run->a.json)
        printf("Altered the configuration of mirror %s (%zu change%s). Show it with --describe "
               "--mirror %s.\n",
               run->a.mirror, n, n == 1 ? "" : "s", run->a.mirror);
out:
    free(cfg);
    kmc_cfg_ops_free(ops, n);
    return rc;
}

static int kmc_do_create(kmc_run_t *run)
{
    kmc_props_t props = {0};
    kmc_mirror_conf_t mc;
    kp_CreateMirrorRequest_t req;
    kp_CreateMirrorResponse_t resp;
    kp_CreateMirrorRequest_ClusterMirrorConfig_t *cfg = NULL;
    int rc;

    /* Validated before connecting (kmc_main_prepare); loaded again here to build the request. */
    if (kmc_props_load(&props, run->a.mirror_config, run->err, sizeof(run->err)) != 0 ||
        kmc_mirror_conf_check(&props, run->a.mirror_config, &mc, NULL, run->err,
                              sizeof(run->err)) != 0) {
        kmc_error("%s", run->err);
        kmc_props_free(&props);
        return KMC_EXIT_USAGE;
    }
    kp_msg_init(&kp_CreateMirrorRequest_desc, &req);
    req.MirrorName = kp_str(run->a.mirror);
    cfg = calloc(mc.n ? mc.n : 1, sizeof(*cfg));
    if (cfg == NULL) {
        kmc_error("out of memory");
        rc = KMC_EXIT_USAGE;
        goto out;
    }
    for (size_t i = 0; i < mc.n; i++) {
        kp_CreateMirrorRequest_ClusterMirrorConfig_init(&cfg[i]);
        cfg[i].Name = kp_str(mc.v[i].name);
        cfg[i].Value = kp_str(mc.v[i].value);
    }
    req.Config.cnt = (int32_t)mc.n;
    req.Config.v = cfg;
    rc = kmc_send(run, &kp_CreateMirrorRequest_desc, &req, &kp_CreateMirrorResponse_desc, &resp,
                  &resp.ErrorCode, 0);
    if (rc != KMC_EXIT_OK)
        goto out;
    if (run->a.json) {
        char *msg = kmc_conn_str(&run->cn, resp.ErrorMessage);
        kmc_fmt_results_json(stdout, "create", run->a.mirror, resp.ErrorCode, msg, NULL, 0);
    }
    if (resp.ErrorCode != 0) {
        kmc_report(run, "CreateMirror", resp.ErrorCode, resp.ErrorMessage);
        rc = KMC_EXIT_FAILED;
        goto out;
    }
    if (!run->a.json) {
        printf("Created mirror %s (source bootstrap.servers=%s).\n", run->a.mirror,
               mc.bootstrap ? mc.bootstrap : "?");
        printf("Next: kafka-mirrors --bootstrap-server %s --start --mirror %s --topic 'REGEX'\n",
               run->a.bootstrap, run->a.mirror);
    }
out:
    free(cfg);
    kmc_mirror_conf_free(&mc);
    kmc_props_free(&props);
    return rc;
}

static int kmc_do_delete(kmc_run_t *run)
{
    kp_DeleteMirrorRequest_t req;
    kp_DeleteMirrorResponse_t resp;
    int rc;

    kp_msg_init(&kp_DeleteMirrorRequest_desc, &req);
    req.MirrorName = kp_str(run->a.mirror);
    rc = kmc_send(run, &kp_DeleteMirrorRequest_desc, &req, &kp_DeleteMirrorResponse_desc, &resp,
                  &resp.ErrorCode, 0);
    if (rc != KMC_EXIT_OK)
        return rc;
    if (run->a.json)
        kmc_fmt_results_json(stdout, "delete", run->a.mirror, resp.ErrorCode,
                             kmc_conn_str(&run->cn, resp.ErrorMessage), NULL, 0);
    if (resp.ErrorCode != 0) {
        kmc_report(run, "DeleteMirror", resp.ErrorCode, resp.ErrorMessage);
        return KMC_EXIT_FAILED;
    }
    if (!run->a.json)
        printf("Deleted mirror %s.\n", run->a.mirror);
    return KMC_EXIT_OK;
}

/* Print per-topic results; exit 1 when the request or any topic failed. */
static int kmc_results(kmc_run_t *run, const char *what, int16_t ec, kp_str_t emsg,
                       const kmc_topic_result_t *r, size_t n)
{
    bool bad = ec != 0;

    for (size_t i = 0; i < n; i++)
        bad = bad || r[i].error_code != 0;
    if (run->a.json)
        kmc_fmt_results_json(stdout, kmc_action_name(run->a.action), run->a.mirror, ec,
                             kmc_conn_str(&run->cn, emsg), r, n);
    else if (n > 0)
        kmc_fmt_results_text(stdout, r, n);
    if (ec != 0)
        kmc_report(run, what, ec, emsg);
    kmc_report_items(run, r, n);
    return bad ? KMC_EXIT_FAILED : KMC_EXIT_OK;
}

/* ---- --wait ------------------------------------------------------------------------------- */

/* The state the partitions of the acted-on topics end in. */
static const char *kmc_wait_target(kmc_action_t act)
{
    switch (act) {
    case KMC_ACT_STOP:
        return "STOPPED";
    case KMC_ACT_PAUSE:
        return "PAUSED";
    default:
        return "MIRRORING";
    }
}

/* Partitions seen in a state other than FAILED during a wait. */
typedef struct kmc_seen {
    char *topic; /* points into the wait's names */
    int32_t partition;
} kmc_seen_t;

static bool kmc_seen_has(const kmc_seen_t *s, size_t n, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < n; i++)
        if (s[i].partition == partition && strcmp(s[i].topic, topic) == 0)
            return true;
    return false;
}

static bool kmc_name_in(const char *name, char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/*
 * After a successful mutation: poll DescribeMirrors (every 500 ms, up to --timeout-ms) until
 * every partition of the topics that succeeded in @p r is in the action's final state. A
 * partition that turns FAILED for good (RetryAttempt -1) during the wait ends it at once; one
 * that was FAILED before and stays so (the broker has not acted yet) only runs into the
 * timeout. Prints the topics' rows at the end (text mode). Returns the exit code.
 */
static int kmc_wait(kmc_run_t *run, const kmc_topic_result_t *r, size_t n)
{
    const char *target = kmc_wait_target(run->a.action);
    int64_t deadline = kmc_now_ms() + run->a.timeout_ms;
    char **names = calloc(n ? n : 1, sizeof(*names));
    kmc_seen_t *seen = NULL;
    size_t nn = 0, nseen = 0, seencap = 0;
    int rc = KMC_EXIT_OK;

    if (names == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    /* Copied: the answers they come from are dropped between polls. */
    for (size_t i = 0; i < n; i++)
        if (r[i].error_code == 0 && r[i].topic != NULL && !kmc_name_in(r[i].topic, names, nn))
            if ((names[nn] = strdup(r[i].topic)) != NULL)
                nn++;
    if (nn == 0)
        goto out;
    if (!run->a.json)
        printf("Waiting up to %d ms for every partition of %zu topic%s to be %s.\n",
               (int)run->a.timeout_ms, nn, nn == 1 ? "" : "s", target);
    kmc_conn_reset(&run->cn);
    for (;;) {
        kmc_mirror_desc_t *md = NULL, *m = NULL, view;
        const char *warning = NULL, *why = NULL;
        size_t nm = 0, nparts = 0, ndone = 0;
        bool timed_out;

        rc = kmc_describe_rows(run, run->a.mirror, false, &md, &nm, &warning);
        if (rc != KMC_EXIT_OK)
            goto out;
        for (size_t i = 0; i < nm; i++)
            if (strcmp(md[i].mirror, run->a.mirror) == 0)
                m = &md[i];
        if (m == NULL || m->error_code != 0) {
            kmc_error("mirror %s disappeared while waiting", run->a.mirror);
            rc = KMC_EXIT_FAILED;
            goto out;
        }
        /* The rows of the waited-for topics only (rows are sorted; filter in place). */
        view = *m;
        view.nparts = 0;
        for (size_t k = 0; k < m->nparts; k++)
            if (kmc_name_in(m->parts[k].topic, names, nn))
                view.parts[view.nparts++] = m->parts[k];
        for (size_t k = 0; k < view.nparts; k++) {
            const kmc_part_row_t *p = &view.parts[k];
            bool failed = strcmp(p->state, "FAILED") == 0;
            nparts++;
            if (strcmp(p->state, target) == 0)
                ndone++;
            if (failed && p->retry < 0 && why == NULL &&
                kmc_seen_has(seen, nseen, p->topic, p->partition))
                why = p->topic;
            if (!failed && !kmc_seen_has(seen, nseen, p->topic, p->partition)) {
                if (nseen == seencap) {
                    size_t cap = seencap ? seencap * 2 : 64;
                    kmc_seen_t *ns = realloc(seen, cap * sizeof(*ns));
                    if (ns == NULL) {
                        kmc_error("out of memory");
                        rc = KMC_EXIT_PROTOCOL;
                        goto out;
                    }
                    seen = ns;
                    seencap = cap;
                }
                for (size_t i = 0; i < nn; i++)
                    if (strcmp(names[i], p->topic) == 0)
                        seen[nseen].topic = names[i];
                seen[nseen++].partition = p->partition;
            }
        }
        /* Every topic must show partitions (a new mirror topic appears a moment later). */
        for (size_t i = 0; i < nn; i++) {
            bool shown = false;
            for (size_t k = 0; k < view.nparts && !shown; k++)
                shown = strcmp(view.parts[k].topic, names[i]) == 0;
            if (!shown)
                nparts++; /* counts as not done */
        }
        timed_out = kmc_now_ms() >= deadline;
        if ((warning == NULL && ndone == nparts) || why != NULL || timed_out) {
            if (!run->a.json && view.nparts > 0)
                kmc_fmt_describe_text(stdout, &view, 1);
            if (warning == NULL && ndone == nparts) {
                if (!run->a.json)
                    printf("All %zu partitions are %s.\n", nparts, target);
                rc = KMC_EXIT_OK;
            } else if (why != NULL) {
                kmc_error("a partition of topic %s is FAILED and will not be retried (see the "
                          "table)",
                          why);
                kmc_error("hint: fix the cause, then --recover --mirror %s --topic '%s'",
                          run->a.mirror, why);
                rc = KMC_EXIT_FAILED;
            } else {
                kmc_error("%zu of %zu partitions are %s after %d ms; the change goes on in the "
                          "broker: follow it with --describe --mirror %s",
                          ndone, nparts, target, (int)run->a.timeout_ms, run->a.mirror);
                rc = KMC_EXIT_FAILED;
            }
            goto out;
        }
        kmc_conn_reset(&run->cn);
        kmc_conn_wait(&run->cn, 500);
    }
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    free(seen);
    return rc;
}

static int kmc_do_start(kmc_run_t *run)
{
    kp_StartMirrorTopicsRequest_t req;
    kp_StartMirrorTopicsResponse_t resp;
    kp_str_t inc[KMC_MAX_PATTERNS], exc[KMC_MAX_PATTERNS];
    kmc_topic_result_t *r;
    size_t n;
    int rc;

    kp_msg_init(&kp_StartMirrorTopicsRequest_desc, &req);
    req.MirrorName = kp_str(run->a.mirror);
    /* The broker resolves the patterns against the source's topic list (it holds the source
     * connection settings) and keeps them in the mirror's topics.include/topics.exclude
     * (design M14). */
    req.Topics.cnt = 0;
    for (int i = 0; i < run->a.ntopics; i++)
        inc[i] = kp_str(run->a.topics[i]);
    for (int i = 0; i < run->a.nexcludes; i++)
        exc[i] = kp_str(run->a.excludes[i]);
    req.IncludePatterns.cnt = run->a.ntopics;
    req.IncludePatterns.v = inc;
    req.ExcludePatterns.cnt = run->a.nexcludes;
    req.ExcludePatterns.v = run->a.nexcludes ? exc : NULL;
    req.TimeoutMs = run->a.timeout_ms;
    rc = kmc_send(run, &kp_StartMirrorTopicsRequest_desc, &req, &kp_StartMirrorTopicsResponse_desc,
                  &resp, &resp.ErrorCode, run->a.timeout_ms + 5000);
    if (rc != KMC_EXIT_OK)
        return rc;
    n = resp.Topics.cnt > 0 ? (size_t)resp.Topics.cnt : 0;
    r = kp_arena_calloc(&run->cn.ar, n ? n : 1, sizeof(*r));
    if (r == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    for (size_t i = 0; i < n; i++) {
        r[i].topic = kmc_conn_str(&run->cn, resp.Topics.v[i].TopicName);
        r[i].error_code = resp.Topics.v[i].ErrorCode;
        r[i].error_message = kmc_conn_str(&run->cn, resp.Topics.v[i].ErrorMessage);
    }
    rc = kmc_results(run, "StartMirrorTopics", resp.ErrorCode, resp.ErrorMessage, r, n);
    if (rc == KMC_EXIT_OK && !run->a.json) {
        if (n == 0)
            printf("No topic of the source of mirror %s matches the pattern now; nothing was "
                   "started (the pattern is kept in the mirror's topics.include).\n",
                   run->a.mirror);
        else if (!run->a.wait)
            printf("Follow their progress with --describe --mirror %s.\n", run->a.mirror);
    }
    if (rc == KMC_EXIT_OK && run->a.wait)
        rc = kmc_wait(run, r, n);
    return rc;
}

/* Names of the topics of @p m matching --topic (all of a mirror's topics for --stop patterns);
 * with @p failed_only, only topics with a FAILED partition. Sorted, distinct. */
static size_t kmc_pick_topics(kmc_run_t *run, const kmc_mirror_desc_t *m, bool failed_only,
                              const char **names)
{
    size_t n = 0;

    for (size_t k = 0; k < m->nparts; k++) {
        const kmc_part_row_t *p = &m->parts[k];
        if (n > 0 && strcmp(names[n - 1], p->topic) == 0)
            continue; /* rows are sorted by topic */
        if (!kmc_re_any(run, p->topic))
            continue;
        if (failed_only) {
            bool any = false;
            for (size_t j = 0; j < m->nparts; j++)
                any = any || (strcmp(m->parts[j].topic, p->topic) == 0 &&
                              strcmp(m->parts[j].state, "FAILED") == 0);
            if (!any)
                continue;
        }
        names[n++] = p->topic;
    }
    return n;
}

/*
 * The topic lists of StopMirrorTopics, PauseMirrorTopics and ResumeMirrorTopics differ only in
 * their generated types, and their per-topic results in field names: one macro each.
 * KMC_TOPICS_SET: fill req.Topics with the @p nt names (ok = false when out of memory).
 */
#define KMC_TOPICS_SET(run, req, T, names, nt, ok)                                                 \
    do {                                                                                           \
        T##_t *tm_ = kp_arena_calloc(&(run)->cn.ar, (nt) ? (nt) : 1, sizeof(*tm_));                \
        for (size_t i_ = 0; tm_ != NULL && i_ < (nt); i_++) {                                      \
            T##_init(&tm_[i_]);                                                                    \
            tm_[i_].TopicName = kp_str((names)[i_]);                                               \
        }                                                                                          \
        (req).Topics.cnt = (int32_t)(nt);                                                          \
        (req).Topics.v = tm_;                                                                      \
        (ok) = tm_ != NULL;                                                                        \
    } while (0)

/* KMC_RESULTS_GET: copy resp.Topics into r[0..nres) (r = NULL when out of memory); NAME is the
 * topic field, MSG(i) the message of result i. */
#define KMC_RESULTS_GET(run, resp, NAME, MSG, r, nres)                                             \
    do {                                                                                           \
        (nres) = (resp).Topics.cnt > 0 ? (size_t)(resp).Topics.cnt : 0;                            \
        (r) = kp_arena_calloc(&(run)->cn.ar, (nres) ? (nres) : 1, sizeof(*(r)));                   \
        for (size_t i_ = 0; (r) != NULL && i_ < (nres); i_++) {                                    \
            (r)[i_].topic = kmc_conn_str(&(run)->cn, (resp).Topics.v[i_].NAME);                    \
            (r)[i_].error_code = (resp).Topics.v[i_].ErrorCode;                                    \
            (r)[i_].error_message = kmc_conn_str(&(run)->cn, MSG(i_));                             \
        }                                                                                          \
    } while (0)

/* stop, pause, resume, recover: resolve --topic against the mirror's topics, then send. */
static int kmc_do_topics(kmc_run_t *run)
{
    kmc_mirror_desc_t *md = NULL, *m = NULL;
    const char *warning = NULL;
    size_t nm = 0, nt, nres;
    const char **names;
    kp_str_t pats[KMC_MAX_PATTERNS];
    kmc_topic_result_t *r;
    int16_t ec;
    kp_str_t emsg;
    const char *what;
    bool ok = true;
    int rc;

    rc = kmc_describe_rows(run, run->a.mirror, false, &md, &nm, &warning);
    if (rc != KMC_EXIT_OK)
        return rc;
    if (warning != NULL) {
        /* Topics whose partitions are all on the silent broker are missing from the list. */
        kmc_warn_partial(warning);
        kmc_error("the topics matching --topic may be incomplete; nothing was sent");
        return KMC_EXIT_FAILED;
    }
    for (size_t i = 0; i < nm; i++)
        if (strcmp(md[i].mirror, run->a.mirror) == 0)
            m = &md[i];
    if (m == NULL || m->error_code != 0) {
        kmc_report_mirror(run, run->a.mirror,
                          m != NULL ? m->error_code : KP_ERR_UNKNOWN_CLUSTER_MIRROR,
                          m != NULL ? m->error_message : "the broker did not describe it");
        return KMC_EXIT_FAILED;
    }
    names = kp_arena_calloc(&run->cn.ar, m->nparts ? m->nparts : 1, sizeof(*names));
    if (names == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    nt = kmc_pick_topics(run, m, run->a.action == KMC_ACT_RECOVER, names);
    if (nt == 0 && run->a.action == KMC_ACT_RECOVER) {
        if (run->a.json)
            kmc_fmt_results_json(stdout, "recover", run->a.mirror, 0, NULL, NULL, 0);
        else
            printf("Nothing to recover: no topic of mirror %s matching the pattern has a FAILED "
                   "partition.\n",
                   run->a.mirror);
        return KMC_EXIT_OK;
    }
    if (nt == 0 && run->a.action != KMC_ACT_STOP) {
        kmc_error("no topic of mirror %s matches %s'%s'%s: see its topics with --describe "
                  "--mirror %s",
                  run->a.mirror, run->a.ntopics > 1 ? "any of " : "", run->a.topics[0],
                  run->a.ntopics > 1 ? ", ..." : "", run->a.mirror);
        if (run->a.json)
            kmc_fmt_results_json(stdout, kmc_action_name(run->a.action), run->a.mirror, 0, NULL,
                                 NULL, 0);
        return KMC_EXIT_FAILED;
    }

    if (run->a.action == KMC_ACT_STOP) {
        kp_StopMirrorTopicsRequest_t req;
        kp_StopMirrorTopicsResponse_t resp;

        kp_msg_init(&kp_StopMirrorTopicsRequest_desc, &req);
        req.MirrorName = kp_str(run->a.mirror);
        KMC_TOPICS_SET(run, req, kp_StopMirrorTopicsRequest_TopicMetadata, names, nt, ok);
        /* The patterns too: the broker selects the mirror's topics by them as well, and they
         * leave topics.include and join topics.exclude (design M11, M14). */
        for (int i = 0; i < run->a.ntopics; i++)
            pats[i] = kp_str(run->a.topics[i]);
        req.Patterns.cnt = run->a.ntopics;
        req.Patterns.v = pats;
        what = "StopMirrorTopics";
        if (ok)
            rc = kmc_send(run, &kp_StopMirrorTopicsRequest_desc, &req,
                          &kp_StopMirrorTopicsResponse_desc, &resp, &resp.ErrorCode, 0);
        if (!ok || rc != KMC_EXIT_OK)
            goto fail;
        ec = resp.ErrorCode;
        emsg = resp.ErrorMessage;
#define KMC_MSG_(i) resp.Topics.v[i].ErrorMessage
        KMC_RESULTS_GET(run, resp, Name, KMC_MSG_, r, nres);
    } else if (run->a.action == KMC_ACT_PAUSE) {
        kp_PauseMirrorTopicsRequest_t req;
        kp_PauseMirrorTopicsResponse_t resp;

        kp_msg_init(&kp_PauseMirrorTopicsRequest_desc, &req);
        req.MirrorName = kp_str(run->a.mirror);
        KMC_TOPICS_SET(run, req, kp_PauseMirrorTopicsRequest_TopicMetadata, names, nt, ok);
        what = "PauseMirrorTopics";
        if (ok)
            rc = kmc_send(run, &kp_PauseMirrorTopicsRequest_desc, &req,
                          &kp_PauseMirrorTopicsResponse_desc, &resp, &resp.ErrorCode, 0);
        if (!ok || rc != KMC_EXIT_OK)
            goto fail;
        ec = resp.ErrorCode;
        emsg = resp.ErrorMessage;
        KMC_RESULTS_GET(run, resp, TopicName, KMC_MSG_, r, nres);
#undef KMC_MSG_
    } else {
        /* --resume, and --recover: a FAILED partition is retried through
         * ResumeMirrorTopics (resume_mirror_topics.kps; docs/cli.md "Recover"). Its results
         * carry no message (the seed's layout). */
        kp_ResumeMirrorTopicsRequest_t req;
        kp_ResumeMirrorTopicsResponse_t resp;

        kp_msg_init(&kp_ResumeMirrorTopicsRequest_desc, &req);
        req.MirrorName = kp_str(run->a.mirror);
        KMC_TOPICS_SET(run, req, kp_ResumeMirrorTopicsRequest_TopicMetadata, names, nt, ok);
        what = "ResumeMirrorTopics";
        if (ok)
            rc = kmc_send(run, &kp_ResumeMirrorTopicsRequest_desc, &req,
                          &kp_ResumeMirrorTopicsResponse_desc, &resp, &resp.ErrorCode, 0);
        if (!ok || rc != KMC_EXIT_OK)
            goto fail;
        ec = resp.ErrorCode;
        emsg = resp.ErrorMessage;
#define KMC_NOMSG_(i) KP_STR_NULL
        KMC_RESULTS_GET(run, resp, Name, KMC_NOMSG_, r, nres);
#undef KMC_NOMSG_
    }
    if (r == NULL) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    rc = kmc_results(run, what, ec, emsg, r, nres);
    if (rc == KMC_EXIT_OK && !run->a.json) {
        if (run->a.action == KMC_ACT_STOP && nt == 0)
            printf("No topic of mirror %s matches the pattern; nothing was stopped (the pattern "
                   "moved to the mirror's topics.exclude).\n",
                   run->a.mirror);
        else if (run->a.action == KMC_ACT_STOP && !run->a.wait)
            printf("The topics become writable once every partition is STOPPED: watch with "
                   "--describe --mirror %s.\n",
                   run->a.mirror);
    }
    if (rc == KMC_EXIT_OK && run->a.wait)
        rc = kmc_wait(run, r, nres);
    return rc;
fail:
    if (!ok) {
        kmc_error("out of memory");
        return KMC_EXIT_PROTOCOL;
    }
    return rc;
}

/* ---- main --------------------------------------------------------------------------------- */

/* Everything that can be checked without the cluster. Returns an exit code. */
static int kmc_main_prepare(kmc_run_t *run, kmc_props_t *cprops, kmc_client_conf_t *cc)
{
    const kmc_args_t *a = &run->a;

    run->cm = kmc_conf_plugin_new();
    if (run->cm == NULL) {
        snprintf(run->err, sizeof(run->err), "out of memory");
        return KMC_EXIT_USAGE;
    }
    for (int i = 0; i < a->ntopics; i++) {
        run->topic_re[i] = kmc_re_compile(run, "--topic", a->topics[i]);
        if (run->topic_re[i] == NULL)
            return KMC_EXIT_USAGE;
    }
    for (int i = 0; i < a->nexcludes; i++) {
        km_pattern_t *re = kmc_re_compile(run, "--exclude", a->excludes[i]);
        if (re == NULL)
            return KMC_EXIT_USAGE;
        km_pattern_free(re);
    }
    if (a->action == KMC_ACT_CREATE) {
        const char *why = kmc_mirror_name_invalid(a->mirror);
        kmc_props_t props = {0};
        kmc_mirror_conf_t mc;
        int rc;
        if (why != NULL) {
            snprintf(run->err, sizeof(run->err), "--mirror '%.260s': invalid mirror name: %s",
                     a->mirror, why);
            return KMC_EXIT_USAGE;
        }
        rc = kmc_props_load(&props, a->mirror_config, run->err, sizeof(run->err));
        if (rc == 0)
            rc = kmc_mirror_conf_check(&props, a->mirror_config, &mc, stderr, run->err,
                                       sizeof(run->err));
        if (rc == 0)
            kmc_mirror_conf_free(&mc);
        kmc_props_free(&props);
        if (rc != 0)
            return KMC_EXIT_USAGE;
    }
    if (a->command_config != NULL) {
        if (kmc_props_load(cprops, a->command_config, run->err, sizeof(run->err)) != 0 ||
            kmc_client_conf_apply(cprops, a->command_config, cc, stderr, run->err,
                                  sizeof(run->err)) != 0)
            return KMC_EXIT_USAGE;
    }
    return KMC_EXIT_OK;
}

int main(int argc, char **argv)
{
    static kmc_run_t run;
    kmc_props_t cprops = {0};
    kmc_client_conf_t cc = {0};
    int rc;

    if (kmc_args_parse(&run.a, argc, argv, run.err, sizeof(run.err)) != 0) {
        kmc_error("%s", run.err);
        fputs("Run 'kafka-mirrors --help' for the usage.\n", stderr);
        return KMC_EXIT_USAGE;
    }
    if (run.a.action == KMC_ACT_HELP) {
        kmc_args_usage(stdout);
        return KMC_EXIT_OK;
    }
    if (run.a.action == KMC_ACT_VERSION) {
        printf("kafka-mirrors %s (kmirror, build %s)\n", KMC_VERSION, KMC_BUILD_ID);
        return KMC_EXIT_OK;
    }
    rc = kmc_main_prepare(&run, &cprops, &cc);
    if (rc == KMC_EXIT_OK) {
        rc = kmc_conn_open(&run.cn, run.a.bootstrap, &cc, run.a.timeout_ms, run.err,
                           sizeof(run.err));
        if (rc != KMC_EXIT_OK) {
            kmc_error("%s", run.err);
        } else {
            switch (run.a.action) {
            case KMC_ACT_CREATE:
                rc = kmc_do_create(&run);
                break;
            case KMC_ACT_START:
                rc = kmc_do_start(&run);
                break;
            case KMC_ACT_STOP:
            case KMC_ACT_PAUSE:
            case KMC_ACT_RESUME:
            case KMC_ACT_RECOVER:
                rc = kmc_do_topics(&run);
                break;
            case KMC_ACT_DELETE:
                rc = kmc_do_delete(&run);
                break;
            case KMC_ACT_LIST:
                rc = kmc_do_list(&run);
                break;
            case KMC_ACT_DESCRIBE:
                rc = kmc_do_describe(&run);
                break;
            case KMC_ACT_ALTER:
                rc = kmc_do_alter(&run);
                break;
            default:
                rc = KMC_EXIT_USAGE;
                break;
            }
        }
    } else {
        kmc_error("%s", run.err);
    }
    kmc_conn_close(&run.cn);
    for (int i = 0; i < run.a.ntopics; i++)
        km_pattern_free(run.topic_re[i]);
    kmc_conf_plugin_free(run.cm);
    kmc_props_free(&cprops);
    if (fflush(stdout) != 0 && rc == KMC_EXIT_OK)
        rc = KMC_EXIT_FAILED;
    return rc;
}
