/*
 * kmc_fmt.c -- text tables and JSON of kafka-mirrors (see kmc_fmt.h).
 */
#include "kmc_fmt.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kp_errcode.h"

#define KMC_FMT_MAXCOLS 10

/* A table of copied cells; kmc_table_print() prints and frees it. */
typedef struct kmc_table {
    size_t ncols, nrows, cap;
    char **cells; /* nrows * ncols */
} kmc_table_t;

/* A number as text in @p buf, or "-" for -1 (unknown). */
static const char *kmc_fmt_num(char *buf, size_t n, int64_t v)
{
    if (v < 0)
        return "-";
    snprintf(buf, n, "%" PRId64, v);
    return buf;
}

static void kmc_table_row(kmc_table_t *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        char **nc = realloc(t->cells, cap * t->ncols * sizeof(*nc));
        if (nc == NULL)
            return; /* out of memory: the row is dropped */
        t->cells = nc;
        t->cap = cap;
    }
    for (size_t c = 0; c < t->ncols; c++)
        t->cells[t->nrows * t->ncols + c] = strdup(cells[c] != NULL ? cells[c] : "-");
    t->nrows++;
}

/* Print @p s with control characters (and DEL) replaced: broker text is not trusted. */
static size_t kmc_fmt_safe(FILE *out, const char *s)
{
    size_t n = 0;

    for (; *s; s++, n++)
        fputc(((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s, out);
    return n;
}

static void kmc_table_print(FILE *out, kmc_table_t *t)
{
    size_t w[KMC_FMT_MAXCOLS] = {0};

    for (size_t i = 0; i < t->nrows * t->ncols; i++) {
        size_t l = t->cells[i] != NULL ? strlen(t->cells[i]) : 1;
        if (l > w[i % t->ncols])
            w[i % t->ncols] = l;
    }
    for (size_t r = 0; r < t->nrows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            const char *cell = t->cells[r * t->ncols + c];
            size_t l = kmc_fmt_safe(out, cell != NULL ? cell : "?");
            if (c + 1 < t->ncols)
                fprintf(out, "%*s", (int)(w[c] - l + 2), "");
        }
        fputc('\n', out);
    }
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    memset(t, 0, sizeof(*t));
}

int64_t kmc_fmt_lag(int64_t source_offset, int64_t dest_offset)
{
    if (source_offset < 0 || dest_offset < 0)
        return -1;
    return source_offset > dest_offset ? source_offset - dest_offset : 0;
}

void kmc_fmt_json_str(FILE *out, const char *s)
{
    if (s == NULL) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '\r')
            fputs("\\r", out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A number, or null for -1 (unknown / none). */
static void kmc_fmt_json_num(FILE *out, int64_t v)
{
    if (v < 0)
        fputs("null", out);
    else
        fprintf(out, "%" PRId64, v);
}

static const char *kmc_fmt_nonempty(const char *s)
{
    return s != NULL && *s != '\0' ? s : NULL;
}

/* ---- list --------------------------------------------------------------------------------- */

void kmc_fmt_list_text(FILE *out, const kmc_list_row_t *rows, size_t n)
{
    kmc_table_t t = {.ncols = 4};
    const char *hdr[] = {"MIRROR", "TOPICS", "SOURCE-CLUSTER-ID", "SOURCE-BOOTSTRAP-SERVERS"};

    kmc_table_row(&t, hdr);
    for (size_t i = 0; i < n; i++) {
        char nb[24];
        const char *cells[4] = {rows[i].mirror, kmc_fmt_num(nb, sizeof(nb), rows[i].topic_count),
                                kmc_fmt_nonempty(rows[i].source_cluster_id),
                                kmc_fmt_nonempty(rows[i].source_bootstrap)};
        kmc_table_row(&t, cells);
    }
    kmc_table_print(out, &t);
}

void kmc_fmt_list_json(FILE *out, const kmc_list_row_t *rows, size_t n)
{
    fputs("{\"mirrors\":[", out);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",{\"mirror\":" : "{\"mirror\":", out);
        kmc_fmt_json_str(out, rows[i].mirror);
        fprintf(out, ",\"topicCount\":%" PRId32 ",\"sourceClusterId\":", rows[i].topic_count);
        kmc_fmt_json_str(out, kmc_fmt_nonempty(rows[i].source_cluster_id));
        fputs(",\"sourceBootstrap\":", out);
        kmc_fmt_json_str(out, kmc_fmt_nonempty(rows[i].source_bootstrap));
        fputc('}', out);
    }
    fputs("]}\n", out);
}

/* ---- describe ----------------------------------------------------------------------------- */

static void kmc_fmt_sync_text(FILE *out, const kmc_mirror_desc_t *m, size_t n);

/* The ERROR cell: "[retry N] message", "[not retryable] message", or "-". */
static const char *kmc_fmt_error_cell(const kmc_part_row_t *p, char *buf, size_t n)
{
    if (p->error == NULL || p->error[0] == '\0') {
        if (p->retry < 0)
            return "[not retryable]";
        return "-";
    }
    if (p->retry < 0)
        snprintf(buf, n, "[not retryable] %s", p->error);
    else if (p->retry > 0)
        snprintf(buf, n, "[retry %d] %s", (int)p->retry, p->error);
    else
        snprintf(buf, n, "%s", p->error);
    return buf;
}

void kmc_fmt_describe_text(FILE *out, const kmc_mirror_desc_t *m, size_t n)
{
    kmc_table_t t = {.ncols = 10};
    const char *hdr[] = {"MIRROR",      "TOPIC", "PARTITION",  "STATE",       "SOURCE-OFFSET",
                         "DEST-OFFSET", "LAG",   "LAST-EPOCH", "LAST-OFFSET", "ERROR"};

    kmc_table_row(&t, hdr);
    for (size_t i = 0; i < n; i++) {
        if (m[i].error_code != 0)
            continue;
        if (m[i].nparts == 0) {
            const char *cells[10] = {m[i].mirror};
            kmc_table_row(&t, cells);
            continue;
        }
        for (size_t k = 0; k < m[i].nparts; k++) {
            const kmc_part_row_t *p = &m[i].parts[k];
            char nb[6][24], eb[1024];
            const char *cells[10] = {
                m[i].mirror,
                p->topic,
                kmc_fmt_num(nb[0], sizeof(nb[0]), p->partition),
                p->state,
                kmc_fmt_num(nb[1], sizeof(nb[1]), p->source_offset),
                kmc_fmt_num(nb[2], sizeof(nb[2]), p->dest_offset),
                kmc_fmt_num(nb[3], sizeof(nb[3]), kmc_fmt_lag(p->source_offset, p->dest_offset)),
                kmc_fmt_num(nb[4], sizeof(nb[4]), p->last_epoch),
                kmc_fmt_num(nb[5], sizeof(nb[5]), p->last_offset),
                kmc_fmt_error_cell(p, eb, sizeof(eb)),
            };
            kmc_table_row(&t, cells);
        }
    }
    kmc_table_print(out, &t);
    kmc_fmt_sync_text(out, m, n);
}

/* A wall-clock ms as "2026-01-31T12:00:00Z" (UTC), or NULL ("-") for -1. */
static const char *kmc_fmt_time(char *buf, size_t n, int64_t ms)
{
    time_t secs;
    struct tm tm;

    if (ms < 0)
        return NULL;
    secs = (time_t)(ms / 1000);
    if (gmtime_r(&secs, &tm) == NULL || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        return NULL;
    return buf;
}

static void kmc_fmt_sync_text(FILE *out, const kmc_mirror_desc_t *m, size_t n)
{
    kmc_table_t t = {.ncols = 8};
    const char *hdr[] = {"MIRROR", "SYNC",      "ENABLED",         "RUNS",
                         "ERRORS", "LAST-SYNC", "LAST-ERROR-TIME", "LAST-ERROR"};
    bool any = false;

    for (size_t i = 0; i < n; i++)
        any = any || (m[i].error_code == 0 && m[i].nsync > 0);
    if (!any)
        return;
    kmc_table_row(&t, hdr);
    for (size_t i = 0; i < n; i++) {
        if (m[i].error_code != 0)
            continue;
        for (size_t k = 0; k < m[i].nsync; k++) {
            const kmc_sync_row_t *r = &m[i].sync[k];
            char nb[2][24], tb[2][32];
            const char *cells[8] = {
                m[i].mirror,
                r->kind,
                r->enabled ? "yes" : "no",
                kmc_fmt_num(nb[0], sizeof(nb[0]), r->runs),
                kmc_fmt_num(nb[1], sizeof(nb[1]), r->errors),
                kmc_fmt_time(tb[0], sizeof(tb[0]), r->last_sync_ms),
                kmc_fmt_time(tb[1], sizeof(tb[1]), r->last_error_ms),
                kmc_fmt_nonempty(r->last_error),
            };
            kmc_table_row(&t, cells);
        }
    }
    fputc('\n', out);
    kmc_table_print(out, &t);
}

void kmc_fmt_describe_json(FILE *out, const kmc_mirror_desc_t *m, size_t n, const char *warning)
{
    fputs("{\"mirrors\":[", out);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",{\"mirror\":" : "{\"mirror\":", out);
        kmc_fmt_json_str(out, m[i].mirror);
        fputs(",\"sourceBootstrap\":", out);
        kmc_fmt_json_str(out, kmc_fmt_nonempty(m[i].source_bootstrap));
        fputs(",\"sourceClusterId\":", out);
        kmc_fmt_json_str(out, kmc_fmt_nonempty(m[i].source_cluster_id));
        fprintf(out, ",\"errorCode\":%d,\"errorName\":", (int)m[i].error_code);
        kmc_fmt_json_str(out, m[i].error_code ? kp_errcode_name(m[i].error_code) : NULL);
        fputs(",\"errorMessage\":", out);
        kmc_fmt_json_str(out, m[i].error_message);
        fputs(",\"partitions\":[", out);
        for (size_t k = 0; k < m[i].nparts; k++) {
            const kmc_part_row_t *p = &m[i].parts[k];
            fputs(k ? ",{\"topic\":" : "{\"topic\":", out);
            kmc_fmt_json_str(out, p->topic);
            fprintf(out, ",\"partition\":%d,\"state\":", (int)p->partition);
            kmc_fmt_json_str(out, p->state);
            fputs(",\"sourceOffset\":", out);
            kmc_fmt_json_num(out, p->source_offset);
            fputs(",\"destinationOffset\":", out);
            kmc_fmt_json_num(out, p->dest_offset);
            fputs(",\"lag\":", out);
            kmc_fmt_json_num(out, kmc_fmt_lag(p->source_offset, p->dest_offset));
            fputs(",\"lastMirroredEpoch\":", out);
            kmc_fmt_json_num(out, p->last_epoch);
            fputs(",\"lastMirroredOffset\":", out);
            kmc_fmt_json_num(out, p->last_offset);
            fprintf(out, ",\"retryAttempt\":%d,\"retryable\":%s,\"errorMessage\":", (int)p->retry,
                    p->retry < 0 ? "false" : "true");
            kmc_fmt_json_str(out, p->error);
            fputc('}', out);
        }
        fputs("],\"sync\":[", out);
        for (size_t k = 0; k < m[i].nsync; k++) {
            const kmc_sync_row_t *r = &m[i].sync[k];
            fputs(k ? ",{\"kind\":" : "{\"kind\":", out);
            kmc_fmt_json_str(out, r->kind);
            fprintf(out, ",\"enabled\":%s,\"runs\":%" PRId64 ",\"errors\":%" PRId64,
                    r->enabled ? "true" : "false", r->runs, r->errors);
            fputs(",\"lastSyncTimeMs\":", out);
            kmc_fmt_json_num(out, r->last_sync_ms);
            fputs(",\"lastErrorTimeMs\":", out);
            kmc_fmt_json_num(out, r->last_error_ms);
            fputs(",\"lastError\":", out);
            kmc_fmt_json_str(out, r->last_error);
            fputc('}', out);
        }
        fputs("]}", out);
    }
    fputs("],\"warning\":", out);
    kmc_fmt_json_str(out, warning);
    fputs("}\n", out);
}

/* ---- mutating actions --------------------------------------------------------------------- */

void kmc_fmt_results_text(FILE *out, const kmc_topic_result_t *r, size_t n)
{
    kmc_table_t t = {.ncols = 2};
    const char *hdr[] = {"TOPIC", "RESULT"};

    kmc_table_row(&t, hdr);
    for (size_t i = 0; i < n; i++) {
        char buf[1024];
        const char *cells[2] = {r[i].topic, "OK"};
        const char *msg = r[i].error_message;
        if (r[i].error_code != 0) {
            if (msg != NULL && *msg != '\0')
                snprintf(buf, sizeof(buf), "%s: %s", kp_errcode_name(r[i].error_code), msg);
            else
                snprintf(buf, sizeof(buf), "%s", kp_errcode_name(r[i].error_code));
            cells[1] = buf;
        }
        kmc_table_row(&t, cells);
    }
    kmc_table_print(out, &t);
}

void kmc_fmt_results_json(FILE *out, const char *action, const char *mirror, int16_t error_code,
                          const char *error_message, const kmc_topic_result_t *r, size_t n)
{
    fputs("{\"action\":", out);
    kmc_fmt_json_str(out, action);
    fputs(",\"mirror\":", out);
    kmc_fmt_json_str(out, mirror);
    fprintf(out, ",\"errorCode\":%d,\"errorName\":", (int)error_code);
    kmc_fmt_json_str(out, error_code ? kp_errcode_name(error_code) : NULL);
    fputs(",\"errorMessage\":", out);
    kmc_fmt_json_str(out, error_message);
    fputs(",\"topics\":[", out);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",{\"topic\":" : "{\"topic\":", out);
        kmc_fmt_json_str(out, r[i].topic);
        fprintf(out, ",\"errorCode\":%d,\"errorName\":", (int)r[i].error_code);
        kmc_fmt_json_str(out, r[i].error_code ? kp_errcode_name(r[i].error_code) : NULL);
        fputs(",\"errorMessage\":", out);
        kmc_fmt_json_str(out, r[i].error_message);
        fputc('}', out);
    }
    fputs("]}\n", out);
}
