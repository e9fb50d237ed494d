/*
 * test_recorder.c -- ctest robust_recorder: kbroker's request recorder (KM_RECORD_DIR,
 * broker/net/kb_netrec.h) and kb_replay_check.
 *
 *   test_recorder KBROKER KB_REPLAY_CHECK WORKDIR
 *
 * Run 1 (default limit), one connection after the other, each waited for:
 *   conn 1: ApiVersions v0, v3, v4 and v9 (too new: answered with UNSUPPORTED_VERSION)
 *   conn 2: an unknown API key (the broker closes)            -> 1 failure
 *   conn 3: ApiVersions v3 whose body is cut short             -> 1 failure
 *   conn 4: a 2-byte frame                                      -> 1 failure
 * kb_replay_check must print "4 passed, 3 failed" (exit 1) for the directory, and "4 passed,
 * 0 failed" (exit 0) for conn 1's file alone; with a suites.log bracketing conn 1 as suite
 * "good" and conns 2-4 as "bad", "suite good: 4 passed, 0 failed" and "suite bad: 0 passed,
 * 3 failed".
 * Run 2 (KM_RECORD_MAX_BYTES=130): five ApiVersions v0 requests of 29 recorded bytes each
 * (16-byte record header + 13-byte frame) on one connection; the file keeps four and an end
 * marker (8 + 4 * 29 + 16 bytes), all five are answered.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kr_util.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

#define DEADLINE_MS 15000

/* ApiVersions request frame of version @p ver (the v3+ body optionally cut by @p cut bytes). */
static void apiv_frame(kp_writer_t *wr, int16_t ver, int32_t corr, size_t cut)
{
    kp_ApiVersionsRequest_t rq;
    size_t at = kr_req_begin(wr, KP_APIKEY_ApiVersions, ver, corr, "rec");
    kp_ApiVersionsRequest_init(&rq);
    rq.ClientSoftwareName = kp_str("kb-recorder-test");
    rq.ClientSoftwareVersion = kp_str("1.0");
    kp_ApiVersionsRequest_encode(wr, &rq, ver > 5 ? 5 : ver);
    wr->len -= cut;
    kr_req_end(wr, at);
}

/* Send @p wr on a new connection; read @p answers responses (checking correlation ids from
 * @p corr0 on), then, if @p expect_close, wait for the broker to close. */
static void exchange(int port, kp_writer_t *wr, int answers, int32_t corr0, int expect_close,
                     const char *what)
{
    int fd = kr_connect("127.0.0.1", port, DEADLINE_MS);
    int64_t dl = kr_now_ms() + DEADLINE_MS;
    CHECK(fd >= 0, "%s: connect", what);
    if (fd < 0)
        return;
    CHECK(kr_send_all(fd, wr->buf, wr->len, dl) == 0, "%s: send", what);
    for (int i = 0; i < answers; i++) {
        uint8_t *buf = NULL;
        size_t len = 0;
        kr_rx_t r = kr_recv_frame(fd, &buf, &len, dl);
        kp_reader_t body;
        CHECK(r == KR_RX_FRAME, "%s: answer %d missing (%d)", what, i, r);
        if (r != KR_RX_FRAME)
            break;
        /* ApiVersions answers always use response header v0 */
        CHECK(kr_resp_open(buf, len, KP_APIKEY_ApiVersions, 0, corr0 + i, &body) == 0,
              "%s: answer %d has the wrong correlation id", what, i);
        free(buf);
    }
    if (expect_close)
        CHECK(kr_wait_closed(fd, dl), "%s: the broker did not close the connection", what);
    close(fd);
}

/* Run the checker on @p arg; returns its exit status and its stdout in @p out. */
static int run_checker(const char *checker, const char *arg, char *out, size_t outlen)
{
    int p[2], st;
    size_t got = 0;
    pid_t pid;
    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl(checker, checker, arg, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    for (;;) {
        ssize_t n = read(p[0], out + got, outlen - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    out[got] = '\0';
    close(p[0]);
    if (waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void clean_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        char path[1200];
        if (strstr(de->d_name, ".rec") || strcmp(de->d_name, "suites.log") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Append "<suite> <what> <now>" to @p dir/suites.log, as tests/clients/run-all.sh does. */
static void suite_mark(const char *dir, const char *suite, const char *what)
{
    char path[800];
    FILE *f;
    snprintf(path, sizeof(path), "%s/suites.log", dir);
    f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "%s %s %lld\n", suite, what, (long long)wall_ms());
    fclose(f);
}

/* The recording file of connection @p conn_id of broker @p pid. */
static void rec_path(char *out, size_t len, const char *dir, pid_t pid, int conn_id)
{
    snprintf(out, len, "%s/kbroker-%d-conn-%d.rec", dir, (int)pid, conn_id);
}

static void stop_broker(kr_broker_t *b)
{
    int st;
    kill(b->pid, SIGTERM);
    st = kr_broker_wait(b, 30000);
    CHECK(st == 0, "kbroker exit status %d after SIGTERM", st);
    CHECK(kr_broker_sanitizer_findings(b) == 0, "sanitizer findings in the broker");
}

int main(int argc, char **argv)
{
    char dir[600], recdir[700], err[512], out[8192], path[900];
    kr_broker_t b;
    kp_writer_t wr;
    pid_t pid;
    int st;

    if (argc != 4) {
        fprintf(stderr, "usage: test_recorder KBROKER KB_REPLAY_CHECK WORKDIR\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "%s", argv[3]);
    snprintf(recdir, sizeof(recdir), "%s/rec", dir);
    mkdir(dir, 0755);
    mkdir(recdir, 0755);
    clean_dir(recdir);
    kp_writer_init(&wr);

    /* ---- run 1 */
    setenv("KM_RECORD_DIR", recdir, 1);
    unsetenv("KM_RECORD_MAX_BYTES");
    snprintf(path, sizeof(path), "%s/run1", dir);
    if (kr_broker_start(&b, argv[1], path, NULL, 60000, err, sizeof(err)) != 0) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    pid = b.pid;
    suite_mark(recdir, "good", "start");
    wr.len = 0;
    apiv_frame(&wr, 0, 10, 0);
    apiv_frame(&wr, 3, 11, 0);
    apiv_frame(&wr, 4, 12, 0);
    apiv_frame(&wr, 9, 13, 0);
    exchange(b.port, &wr, 4, 10, 0, "conn 1 (valid ApiVersions)");
    suite_mark(recdir, "good", "end");
    {
        /* suites.log has millisecond resolution: let the clock move on so that the two
         * suites do not share a millisecond */
        int64_t t = wall_ms();
        while (wall_ms() <= t + 1)
            poll(NULL, 0, 1);
    }
    suite_mark(recdir, "bad", "start");
    wr.len = 0;
    {
        size_t at = kr_req_begin(&wr, 9999, 0, 20, "rec");
        kp_write_int32(&wr, 42);
        kr_req_end(&wr, at);
    }
    exchange(b.port, &wr, 0, 0, 1, "conn 2 (unknown key)");
    wr.len = 0;
    apiv_frame(&wr, 3, 30, 5);
    exchange(b.port, &wr, 0, 0, 1, "conn 3 (cut body)");
    wr.len = 0;
    kp_write_int32(&wr, 2);
    kp_write_int16(&wr, 18);
    exchange(b.port, &wr, 0, 0, 1, "conn 4 (2-byte frame)");
    suite_mark(recdir, "bad", "end");
    stop_broker(&b);

    st = run_checker(argv[2], recdir, out, sizeof(out));
    printf("--- kb_replay_check %s (exit %d):\n%s", recdir, st, out);
    CHECK(st == 1, "checker exit status %d, want 1", st);
    CHECK(strstr(out, "\n4 passed, 3 failed\n") != NULL,
          "checker totals (want 4 passed, 3 failed)");
    CHECK(strstr(out, "API key unknown to the codec") != NULL, "unknown key not reported");
    CHECK(strstr(out, "frame shorter than an API key and version") != NULL,
          "2-byte frame not reported");
    CHECK(strstr(out, "header checked only") != NULL, "ApiVersions v9 note missing");
    CHECK(strstr(out, "\nsuite good: 4 passed, 0 failed\n") != NULL &&
              strstr(out, "\nsuite bad: 0 passed, 3 failed\n") != NULL,
          "per-suite totals from suites.log");
    rec_path(path, sizeof(path), recdir, pid, 1);
    st = run_checker(argv[2], path, out, sizeof(out));
    printf("--- kb_replay_check %s (exit %d):\n%s", path, st, out);
    CHECK(st == 0 && strstr(out, "\n4 passed, 0 failed\n"), "conn 1 alone must pass");

    /* ---- run 2: size limit */
    clean_dir(recdir);
    setenv("KM_RECORD_MAX_BYTES", "130", 1);
    snprintf(path, sizeof(path), "%s/run2", dir);
    if (kr_broker_start(&b, argv[1], path, NULL, 60000, err, sizeof(err)) != 0) {
        fprintf(stderr, "FAIL: %s\n", err);
        return 1;
    }
    pid = b.pid;
    wr.len = 0;
    for (int i = 0; i < 5; i++)
        apiv_frame(&wr, 0, 40 + i, 0);
    exchange(b.port, &wr, 5, 40, 0, "run 2 (5 requests, limit 130 bytes)");
    stop_broker(&b);
    rec_path(path, sizeof(path), recdir, pid, 1);
    {
        struct stat sb;
        CHECK(stat(path, &sb) == 0 && sb.st_size == 8 + 4 * 29 + 16,
              "run 2 file size %lld, want %d", (long long)sb.st_size, 8 + 4 * 29 + 16);
    }
    st = run_checker(argv[2], recdir, out, sizeof(out));
    printf("--- kb_replay_check %s (exit %d):\n%s", recdir, st, out);
    CHECK(st == 0 && strstr(out, "\n4 passed, 0 failed\n") && strstr(out, "size limit"),
          "run 2: want 4 passed and the size-limit note");

    kp_writer_free(&wr);
    if (failures) {
        printf("test_recorder: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_recorder: PASSED\n");
    return 0;
}
