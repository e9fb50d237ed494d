/*
 * kp_vectors -- codec vector files shared with the Java oracle (docs/codec.md).
 *
 *   kp_vectors check FILE                       decode every vector, require every byte consumed,
 *                                               re-encode, require identical bytes
 *   kp_vectors dump FILE [--seed N] [--count K] K random vectors per (api, kind, version) we
 *                                               claim, with the JSON column ("-" = stdout)
 *
 * Line format: <api_key> <kind> <version> <hex-bytes> [<json>], kind one of request, response,
 * reqheader, respheader (api_key -1 for headers), record: a KRaft metadata record value
 * (api_key = the record type; the hex is the whole framed value, kp_mrec.h; the JSON is the
 * record's), or the name of a standalone message (`data` schema file, api_key -1), e.g.
 * DefaultPrincipalData. An empty body is written "-" (an empty
 * column, or the JSON directly in column 4, is accepted too). Blank lines and lines starting
 * with '#' are ignored. check prints one line per failure and "N passed, N failed"; it exits 1
 * on any failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_mrec.h"
#include "kp_msgs.h"

static void usage(void)
{
    fprintf(stderr, "usage: kp_vectors check FILE\n"
                    "       kp_vectors dump FILE [--seed N] [--count K]\n");
    exit(2);
}

static const kp_msg_desc_t *find_desc(int key, const char *kind)
{
    const kp_api_info_t *a;
    if (strcmp(kind, "reqheader") == 0)
        return key == -1 ? kp_msg_lookup("RequestHeader") : NULL;
    if (strcmp(kind, "respheader") == 0)
        return key == -1 ? kp_msg_lookup("ResponseHeader") : NULL;
    if (key == -1) {
        /* a standalone message (`data` schema file): the kind is its name */
        size_t i;
        for (i = 0; i < kp_datas_cnt; i++)
            if (strcmp(kp_datas[i]->name, kind) == 0)
                return kp_datas[i];
        return NULL;
    }
    if (key < 0 || key > 32767)
        return NULL;
    if (strcmp(kind, "record") == 0) {
        const kp_record_info_t *ri = kp_record_lookup((int16_t)key);
        return ri ? ri->desc : NULL;
    }
    a = kp_api_lookup((int16_t)key);
    if (!a)
        return NULL;
    if (strcmp(kind, "request") == 0)
        return a->req;
    if (strcmp(kind, "response") == 0)
        return a->resp;
    return NULL;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Splits off the next whitespace-separated token of *s; NULL at the end. */
static char *next_tok(char **s)
{
    char *p = *s, *t;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p)
        return NULL;
    t = p;
    while (*p && *p != ' ' && *p != '\t')
        p++;
    if (*p)
        *p++ = '\0';
    *s = p;
    return t;
}

/* A framed metadata record value: kp_mrec_decode must give the line's type and version, and
 * kp_mrec_encode/kp_mrec_size must reproduce the bytes. Returns 1 if it passed. */
static int check_record(const char *where, const kp_msg_desc_t *d, int type, int16_t ver,
                        const uint8_t *buf, size_t n, kp_arena_t *ar, kp_writer_t *wr)
{
    kp_mrec_t m;
    int err = kp_mrec_decode(buf, n, ar, &m);
    if (err) {
        printf("FAIL %s %s v%d: record decode: %s (%s)\n", where, d->name, ver, kp_err_name(err),
               m.errstr ? m.errstr : "");
        return 0;
    }
    if (m.type != (uint32_t)type || m.ver != (uint32_t)ver) {
        printf("FAIL %s %s v%d: the frame says type %lu version %lu\n", where, d->name, ver,
               (unsigned long)m.type, (unsigned long)m.ver);
        return 0;
    }
    if ((err = kp_mrec_encode(wr, (int16_t)type, ver, m.rec)) != 0) {
        printf("FAIL %s %s v%d: record re-encode: %s\n", where, d->name, ver, kp_err_name(err));
        return 0;
    }
    if (wr->len != n || (n > 0 && memcmp(wr->buf, buf, n) != 0)) {
        size_t at = 0;
        while (at < n && at < wr->len && wr->buf[at] == buf[at])
            at++;
        printf("FAIL %s %s v%d: record re-encoding differs at byte %zu (%zu bytes, input %zu)\n",
               where, d->name, ver, at, wr->len, n);
        return 0;
    }
    if (kp_mrec_size((int16_t)type, ver, m.rec) != n) {
        printf("FAIL %s %s v%d: kp_mrec_size says %zu, encoding has %zu\n", where, d->name, ver,
               kp_mrec_size((int16_t)type, ver, m.rec), n);
        return 0;
    }
    return 1;
}

static int check_line(const char *where, char *line, int *failed)
{
    char *s = line, *tk, *tkind, *tv, *thex, *end;
    const kp_msg_desc_t *d;
    long key, ver;
    size_t hlen, n, i;
    uint8_t *buf = NULL;
    kp_reader_t rd;
    kp_writer_t wr;
    kp_arena_t ar;
    void *msg = NULL;
    int ok = 0, err;

    tk = next_tok(&s);
    tkind = next_tok(&s);
    tv = next_tok(&s);
    thex = next_tok(&s);
    if (!tk || !tkind || !tv) {
        printf("FAIL %s: malformed line (want: api_key kind version hex [json])\n", where);
        goto fail;
    }
    if (!thex || thex[0] == '{' || thex[0] == '[' || strcmp(thex, "-") == 0)
        thex = "";
    errno = 0;
    key = strtol(tk, &end, 10);
    if (errno || *end || key < -1 || key > 32767) {
        printf("FAIL %s: bad api_key '%s'\n", where, tk);
        goto fail;
    }
    ver = strtol(tv, &end, 10);
    if (errno || *end || ver < 0 || ver > 32767) {
        printf("FAIL %s: bad version '%s'\n", where, tv);
        goto fail;
    }
    d = find_desc((int)key, tkind);
    if (!d) {
        printf("FAIL %s: no message for api_key %ld kind %s\n", where, key, tkind);
        goto fail;
    }
    if (ver < d->min_ver || ver > d->max_ver) {
        printf("FAIL %s %s v%ld: version outside %d-%d\n", where, d->name, ver, d->min_ver,
               d->max_ver);
        goto fail;
    }
    hlen = strlen(thex);
    if (hlen % 2) {
        printf("FAIL %s %s v%ld: odd number of hex digits\n", where, d->name, ver);
        goto fail;
    }
    n = hlen / 2;
    buf = malloc(n ? n : 1);
    msg = calloc(1, d->struct_size);
    if (!buf || !msg) {
        printf("FAIL %s: out of memory\n", where);
        goto fail;
    }
    for (i = 0; i < n; i++) {
        int hi = hexval(thex[2 * i]), lo = hexval(thex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            printf("FAIL %s %s v%ld: bad hex digit\n", where, d->name, ver);
            goto fail;
        }
        buf[i] = (uint8_t)(hi << 4 | lo);
    }
    kp_arena_init(&ar, 0);
    kp_writer_init(&wr);
    if (strcmp(tkind, "record") == 0) {
        ok = check_record(where, d, (int)key, (int16_t)ver, buf, n, &ar, &wr);
        kp_writer_free(&wr);
        kp_arena_free(&ar);
        free(buf);
        free(msg);
        if (!ok)
            (*failed)++;
        return ok;
    }
    kp_reader_init(&rd, buf, n);
    err = kp_msg_decode(d, &rd, &ar, msg, (int16_t)ver);
    if (err) {
        printf("FAIL %s %s v%ld: decode: %s (%s) at byte %zu\n", where, d->name, ver,
               kp_err_name(err), rd.errstr ? rd.errstr : "", rd.pos);
    } else if (rd.pos != n) {
        printf("FAIL %s %s v%ld: decode consumed %zu of %zu bytes\n", where, d->name, ver, rd.pos,
               n);
    } else if ((err = kp_msg_encode(d, &wr, msg, (int16_t)ver)) != 0) {
        printf("FAIL %s %s v%ld: re-encode: %s\n", where, d->name, ver, kp_err_name(err));
    } else if (wr.len != n || (n > 0 && memcmp(wr.buf, buf, n) != 0)) {
        size_t at = 0;
        while (at < n && at < wr.len && wr.buf[at] == buf[at])
            at++;
        printf("FAIL %s %s v%ld: re-encoding differs at byte %zu (%zu bytes, input %zu)\n", where,
               d->name, ver, at, wr.len, n);
    } else if (kp_msg_size(d, msg, (int16_t)ver) != n) {
        printf("FAIL %s %s v%ld: size function says %zu, encoding has %zu\n", where, d->name, ver,
               kp_msg_size(d, msg, (int16_t)ver), n);
    } else {
        ok = 1;
    }
    kp_writer_free(&wr);
    kp_arena_free(&ar);
    free(buf);
    free(msg);
    if (!ok)
        (*failed)++;
    return ok;
fail:
    free(buf);
    free(msg);
    (*failed)++;
    return 0;
}

static int cmd_check(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    char *line = NULL, where[512];
    size_t cap = 0;
    ssize_t len;
    int passed = 0, failed = 0;
    long lineno = 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    if (!f) {
        fprintf(stderr, "kp_vectors: %s: %s\n", path, strerror(errno));
        printf("0 passed, 1 failed\n");
        return 1;
    }
    while ((len = getline(&line, &cap, f)) >= 0) {
        char *p = line;
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '#')
            continue;
        snprintf(where, sizeof(where), "%s:%ld", base, lineno);
        if (check_line(where, p, &failed))
            passed++;
    }
    free(line);
    if (f != stdin)
        fclose(f);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static int dump_one(FILE *out, int key, const char *kind, const kp_msg_desc_t *d, int16_t ver,
                    uint64_t seed, int count)
{
    int i;
    for (i = 0; i < count; i++) {
        kp_arena_t ar;
        kp_writer_t wr;
        void *msg = calloc(1, d->struct_size);
        /* One stream per (message, version, index): vectors do not shift when others change. */
        uint64_t rng = seed ^ ((uint64_t)(uint16_t)key << 48) ^ ((uint64_t)d->id << 32) ^
                       ((uint64_t)(uint16_t)ver << 16) ^ (uint64_t)i;
        int err;
        size_t k;
        if (!msg)
            return -1;
        kp_arena_init(&ar, 0);
        kp_writer_init(&wr);
        err = kp_msg_fill_random(d, msg, &ar, ver, &rng);
        if (!err && strcmp(kind, "record") == 0)
            err = kp_mrec_encode(&wr, (int16_t)key, ver, msg);
        else if (!err)
            err = kp_msg_encode(d, &wr, msg, ver);
        if (err) {
            fprintf(stderr, "kp_vectors: %s v%d: %s\n", d->name, ver, kp_err_name(err));
        } else {
            fprintf(out, "%d %s %d ", key, kind, ver);
            if (wr.len == 0)
                fputc('-', out);
            for (k = 0; k < wr.len; k++)
                fprintf(out, "%02x", wr.buf[k]);
            fputc(' ', out);
            kp_msg_print(d, out, msg, ver, KP_PRINT_UNREDACTED);
            fputc('\n', out);
        }
        kp_writer_free(&wr);
        kp_arena_free(&ar);
        free(msg);
        if (err)
            return -1;
    }
    return 0;
}

static int cmd_dump(const char *path, uint64_t seed, int count)
{
    FILE *out = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    static const char *const hdrs[2][2] = {{"RequestHeader", "reqheader"},
                                           {"ResponseHeader", "respheader"}};
    size_t i;
    int rc = 0, h;
    long n = 0;
    if (!out) {
        fprintf(stderr, "kp_vectors: %s: %s\n", path, strerror(errno));
        return 1;
    }
    for (h = 0; h < 2; h++) {
        const kp_msg_desc_t *d = kp_msg_lookup(hdrs[h][0]);
        int16_t v;
        for (v = d ? d->min_ver : 1; d && v <= d->max_ver; v++, n += count)
            rc |= dump_one(out, -1, hdrs[h][1], d, v, seed, count);
    }
    for (i = 0; i < kp_apis_cnt; i++) {
        const kp_api_info_t *a = &kp_apis[i];
        int16_t v;
        for (v = a->min_ver; v <= a->max_ver; v++, n += 2L * count) {
            rc |= dump_one(out, a->key, "request", a->req, v, seed, count);
            rc |= dump_one(out, a->key, "response", a->resp, v, seed, count);
        }
    }
    for (i = 0; i < kp_datas_cnt; i++) {
        const kp_msg_desc_t *d = kp_datas[i];
        int16_t v;
        for (v = d->min_ver; v <= d->max_ver; v++, n += count)
            rc |= dump_one(out, -1, d->name, d, v, seed, count);
    }
    for (i = 0; i < kp_records_cnt; i++) {
        const kp_record_info_t *ri = &kp_records[i];
        int16_t v;
        for (v = ri->min_ver; v <= ri->max_ver; v++, n += count)
            rc |= dump_one(out, ri->type, "record", ri->desc, v, seed, count);
    }
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "kp_vectors: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(stderr, "kp_vectors: wrote %ld vectors\n", n);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    if (strcmp(argv[1], "check") == 0) {
        if (argc != 3)
            usage();
        return cmd_check(argv[2]);
    }
    if (strcmp(argv[1], "dump") == 0) {
        uint64_t seed = 1;
        int count = 1, i;
        for (i = 3; i < argc; i++) {
            char *end;
            if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
                seed = strtoull(argv[++i], &end, 0);
                if (*end)
                    usage();
            } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
                long c = strtol(argv[++i], &end, 0);
                if (*end || c < 1 || c > 100000)
                    usage();
                count = (int)c;
            } else {
                usage();
            }
        }
        return cmd_dump(argv[2], seed, count);
    }
    usage();
    return 2;
}
