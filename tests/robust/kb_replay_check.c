/*
 * kb_replay_check.c -- decode every request frame that kbroker recorded under KM_RECORD_DIR
 * (format: broker/net/kb_netrec.h) with the generated codec.
 *
 *   kb_replay_check [-v] [--suites FILE] DIR|FILE...
 *
 * For each record: the API key must be known to the codec and the version within the codec's
 * range; the request header (v1/v2 as the codec says) must decode and repeat the key and the
 * version; the body must decode with all bytes consumed. An ApiVersions request newer than the
 * codec passes on its header alone (the broker answers it without reading the body), and is
 * counted separately. Bytes after a complete body pass too, as Apache Kafka (and kbroker) ignore
 * them, but only when the decoded body re-encodes to exactly the bytes before them; each such
 * frame gets a "note" line and is counted separately (librdkafka 2.16 sends a few Metadata v13
 * requests with three extra bytes). One FAIL line per bad record, then "N passed, N failed".
 * Suites: with --suites FILE, or when a directory holds suites.log, lines "<suite> start <ms>"
 * and "<suite> end <ms>" (wall clock, ms since the epoch; tests/clients/run-all.sh writes them)
 * attribute every frame by its receive time to the suite running then, and a per-suite
 * "suite <name>: N passed, N failed" line comes before the total ("(none)" for the rest).
 * Exit status: 0 when nothing failed, 1 when something did, 2 on usage or I/O errors (an
 * unreadable directory or file, a file that is not a recording).
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kb_netrec.h"
#include "kp_msgs.h"
#include "kr_util.h"

#define MAX_SUITES 64

typedef struct suite_s {
    char name[64];
    int64_t start, end; /* end INT64_MAX while open */
    unsigned long passed, failed;
} suite_t;

static struct {
    bool verbose;
    unsigned long passed, failed, apiv_newer, files, truncated, trailing;
    int io_errors;
    suite_t suites[MAX_SUITES + 1]; /* the last slot: frames outside every suite */
    int nsuites;
    bool have_suites;
} st;

/* Read "<suite> start|end <ms>" lines. Returns 0, or -1 if the file cannot be read. */
static int load_suites(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[256], name[64], what[16];
    long long ms;
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        suite_t *su = NULL;
        if (sscanf(line, "%63s %15s %lld", name, what, &ms) != 3)
            continue;
        for (int i = st.nsuites - 1; i >= 0 && !su; i--)
            if (strcmp(st.suites[i].name, name) == 0 && st.suites[i].end == INT64_MAX)
                su = &st.suites[i];
        if (strcmp(what, "start") == 0 && st.nsuites < MAX_SUITES) {
            su = &st.suites[st.nsuites++];
            snprintf(su->name, sizeof(su->name), "%s", name);
            su->start = ms;
            su->end = INT64_MAX;
        } else if (strcmp(what, "end") == 0 && su) {
            su->end = ms;
        }
    }
    fclose(f);
    snprintf(st.suites[MAX_SUITES].name, sizeof(st.suites[MAX_SUITES].name), "(none)");
    st.have_suites = true;
    return 0;
}

/* The suite running at @p ms (the last one started, if they overlap). */
static suite_t *suite_at(int64_t ms)
{
    for (int i = st.nsuites - 1; i >= 0; i--)
        if (ms >= st.suites[i].start && ms <= st.suites[i].end)
            return &st.suites[i];
    return &st.suites[MAX_SUITES];
}

static int16_t rd16(const uint8_t *p)
{
    return (int16_t)(((unsigned)p[0] << 8) | p[1]);
}

static int32_t rd32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static int64_t rd64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)(uint32_t)rd32(p) << 32) | (uint32_t)rd32(p + 4));
}

/* Check one recorded frame. Returns NULL if it decodes, else a static/buffered reason. */
static const char *check_frame(int16_t key, int16_t ver, const uint8_t *f, size_t len,
                               int32_t *corr, char *why, size_t whylen)
{
    const kp_api_info_t *api;
    kp_RequestHeader_t hdr;
    kp_reader_t rd;
    kp_arena_t ar;
    int16_t hv;
    const char *res = NULL;
    size_t hdr_end = 0;
    void *msg;

    *corr = -1;
    if (len < 4)
        return "frame shorter than an API key and version";
    if (len >= 8)
        *corr = rd32(f + 4);
    api = kp_api_lookup(key);
    if (!api)
        return "API key unknown to the codec";
    if (ver < api->min_ver || (ver > api->max_ver && key != KP_APIKEY_ApiVersions)) {
        snprintf(why, whylen, "version outside the codec's range %d..%d", api->min_ver,
                 api->max_ver);
        return why;
    }
    hv = kp_request_header_version(key, ver);
    kp_arena_init(&ar, len * 32 + (1u << 20));
    kp_reader_init(&rd, f, len);
    kp_RequestHeader_init(&hdr);
    if (kp_RequestHeader_decode(&rd, &ar, &hdr, hv) != 0) {
        snprintf(why, whylen, "request header v%d does not decode: %s", hv,
                 rd.errstr ? rd.errstr : kp_err_str(rd.err));
        res = why;
        goto out;
    }
    if (hdr.RequestApiKey != key || hdr.RequestApiVersion != ver) {
        res = "header disagrees with the recorded key/version";
        goto out;
    }
    if (ver > api->max_ver) {
        st.apiv_newer++; /* the broker answers these from the header alone */
        goto out;
    }
    hdr_end = rd.pos;
    msg = kp_arena_calloc(&ar, 1, api->req->struct_size);
    if (!msg) {
        res = "out of memory";
        goto out;
    }
    kp_msg_init(api->req, msg);
    if (kp_msg_decode(api->req, &rd, &ar, msg, ver) != 0) {
        snprintf(why, whylen, "%s v%d body does not decode at byte %zu: %s", api->req->name, ver,
                 rd.pos, rd.errstr ? rd.errstr : kp_err_str(rd.err));
        res = why;
    } else if (kp_reader_remaining(&rd) != 0) {
        size_t body_len = rd.pos - hdr_end;
        kp_writer_t wr;
        kp_writer_init(&wr);
        if (kp_msg_encode(api->req, &wr, msg, ver) != 0 || wr.len != body_len ||
            memcmp(wr.buf, f + hdr_end, body_len) != 0) {
            snprintf(why, whylen, "%zu byte(s) left after the %s v%d body",
                     kp_reader_remaining(&rd), api->req->name, ver);
            res = why;
        } else {
            st.trailing++;
            printf("note %s v%d correlation id %d client id '%.*s': %zu byte(s) after a complete "
                   "body, ignored as Apache Kafka ignores them\n",
                   api->name, ver, *corr, hdr.ClientId.len > 0 ? (int)hdr.ClientId.len : 0,
                   hdr.ClientId.len > 0 ? hdr.ClientId.ptr : "", kp_reader_remaining(&rd));
        }
        kp_writer_free(&wr);
    } else if (st.verbose) {
        printf("ok   %s v%d correlation id %d client id '%.*s' (%zu bytes)\n", api->name, ver,
               *corr, hdr.ClientId.len > 0 ? (int)hdr.ClientId.len : 0,
               hdr.ClientId.len > 0 ? hdr.ClientId.ptr : "", len);
    }
out:
    kp_arena_free(&ar);
    return res;
}

static void check_file(const char *path)
{
    size_t len, pos;
    char *buf = kr_read_file(path, &len);
    unsigned long idx = 0;
    const uint8_t *p = (const uint8_t *)buf;

    if (!buf) {
        fprintf(stderr, "kb_replay_check: cannot read %s: %s\n", path, strerror(errno));
        st.io_errors++;
        return;
    }
    if (len < KB_NETREC_MAGIC_LEN || memcmp(buf, KB_NETREC_MAGIC, KB_NETREC_MAGIC_LEN) != 0) {
        fprintf(stderr, "kb_replay_check: %s is not a request recording\n", path);
        st.io_errors++;
        free(buf);
        return;
    }
    st.files++;
    for (pos = KB_NETREC_MAGIC_LEN; pos < len; idx++) {
        int16_t key, ver;
        int32_t flen, corr;
        int64_t ms;
        const char *why;
        char tmp[256];
        const kp_api_info_t *api;

        if (len - pos < KB_NETREC_REC_HDR_LEN) {
            printf("FAIL %s #%lu: record header cut short (%zu bytes left)\n", path, idx,
                   len - pos);
            st.failed++;
            break;
        }
        key = rd16(p + pos);
        ver = rd16(p + pos + 2);
        flen = rd32(p + pos + 4);
        ms = rd64(p + pos + 8);
        pos += KB_NETREC_REC_HDR_LEN;
        if (key == KB_NETREC_END) {
            st.truncated++;
            printf("note %s: the recording stopped at its size limit after %lu frame(s)\n", path,
                   idx);
            break;
        }
        if (flen < 0 || (size_t)flen > len - pos) {
            printf("FAIL %s #%lu: record length %d runs past the end of the file\n", path, idx,
                   flen);
            st.failed++;
            break;
        }
        why = check_frame(key, ver, p + pos, (size_t)flen, &corr, tmp, sizeof(tmp));
        api = kp_api_lookup(key);
        if (why) {
            printf("FAIL %s #%lu: %s(%d) v%d correlation id %d, %d bytes, at %lld%s%s: %s\n", path,
                   idx, api ? api->name : "?", key, ver, corr, flen, (long long)ms,
                   st.have_suites ? " in " : "", st.have_suites ? suite_at(ms)->name : "", why);
            st.failed++;
            if (st.have_suites)
                suite_at(ms)->failed++;
        } else {
            st.passed++;
            if (st.have_suites)
                suite_at(ms)->passed++;
        }
        pos += (size_t)flen;
    }
    free(buf);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    char slog[4096];

    snprintf(slog, sizeof(slog), "%s/suites.log", dir);
    if (!st.have_suites && access(slog, R_OK) == 0 && load_suites(slog) != 0)
        st.io_errors++;

    if (!d) {
        fprintf(stderr, "kb_replay_check: cannot open %s: %s\n", dir, strerror(errno));
        st.io_errors++;
        return;
    }
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 4, ".rec") != 0)
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap ? cap * 2 : 64) * sizeof(*nn));
            if (!nn)
                break;
            names = nn;
            cap = cap ? cap * 2 : 64;
        }
        names[n] = malloc(strlen(dir) + l + 2);
        if (names[n])
            sprintf(names[n++], "%s/%s", dir, de->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(*names), by_name);
    for (size_t i = 0; i < n; i++) {
        check_file(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv)
{
    int nargs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (strcmp(argv[i], "-v") == 0) {
            st.verbose = true;
            continue;
        }
        if (strcmp(argv[i], "--suites") == 0 && i + 1 < argc) {
            if (load_suites(argv[++i]) != 0) {
                fprintf(stderr, "kb_replay_check: cannot read %s: %s\n", argv[i], strerror(errno));
                return 2;
            }
            continue;
        }
        if (argv[i][0] == '-') {
            fprintf(stderr, "usage: kb_replay_check [-v] [--suites FILE] DIR|FILE...\n");
            return 2;
        }
        nargs++;
        if (stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            check_dir(argv[i]);
        else
            check_file(argv[i]);
    }
    if (nargs == 0) {
        fprintf(stderr, "usage: kb_replay_check [-v] [--suites FILE] DIR|FILE...\n");
        return 2;
    }
    for (int i = 0; st.have_suites && i <= MAX_SUITES; i++) {
        const suite_t *su = &st.suites[i];
        if (i >= st.nsuites && i != MAX_SUITES)
            continue;
        if (i == MAX_SUITES && su->passed + su->failed == 0)
            continue;
        printf("suite %s: %lu passed, %lu failed\n", su->name, su->passed, su->failed);
    }
    if (st.apiv_newer)
        printf("note: %lu ApiVersions request(s) newer than the codec: header checked only\n",
               st.apiv_newer);
    if (st.trailing)
        printf("note: %lu request(s) with bytes after a complete body (ignored, as Apache Kafka "
               "does)\n",
               st.trailing);
    printf("%lu file(s)%s\n", st.files, st.truncated ? ", some cut at their size limit" : "");
    printf("%lu passed, %lu failed\n", st.passed, st.failed);
    return st.io_errors ? 2 : st.failed ? 1 : 0;
}
