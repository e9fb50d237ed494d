/*
 * test_metrics.c -- CUnit tests of the metrics registry, the Prometheus exposition and the
 * GET /metrics endpoint. Label: unit.
 */
#include <CUnit/Basic.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kb_metrics.h"
#include "kb_metrics_http.h"
#include "kbt_client.h"

static void test_counters_gauges(void)
{
    kb_metrics_t *m = kb_metrics_new();
    const char *l1[] = {"api", "Produce", NULL};
    const char *l2[] = {"api", "Fetch", NULL};
    const char *lbad[] = {"other", "x", NULL};
    kb_counter_t *c1 = kb_metrics_counter(m, "kb_test_requests_total", "Requests.", l1);
    kb_counter_t *c2 = kb_metrics_counter(m, "kb_test_requests_total", "Requests.", l2);
    kb_gauge_t *g = kb_metrics_gauge(m, "kb_test_connections", "Conns.", NULL);
    char *txt;

    CU_ASSERT_PTR_NOT_NULL_FATAL(c1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_PTR_NOT_EQUAL(c1, c2);
    /* get-or-create returns the same child */
    CU_ASSERT_PTR_EQUAL(kb_metrics_counter(m, "kb_test_requests_total", "x", l1), c1);
    /* type and label mismatches and bad names are refused */
    CU_ASSERT_PTR_NULL(kb_metrics_gauge(m, "kb_test_requests_total", "x", l1));
    CU_ASSERT_PTR_NULL(kb_metrics_counter(m, "kb_test_requests_total", "x", lbad));
    CU_ASSERT_PTR_NULL(kb_metrics_counter(m, "bad-name", "x", NULL));
    kb_counter_add(c1, 3);
    kb_counter_add(c2, 1);
    kb_gauge_set(g, 5);
    kb_gauge_add(g, -2);
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "# HELP kb_test_requests_total Requests.\n"
                                       "# TYPE kb_test_requests_total counter\n"
                                       "kb_test_requests_total{api=\"Produce\"} 3\n"
                                       "kb_test_requests_total{api=\"Fetch\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(txt, "# TYPE kb_test_connections gauge\nkb_test_connections 3\n"));
    free(txt);
    kb_metrics_free(m);
}

static void test_histogram(void)
{
    static const double b[] = {0.1, 1, 10};
    kb_metrics_t *m = kb_metrics_new();
    const char *l[] = {"api", "Fetch", NULL};
    kb_histo_t *h = kb_metrics_histogram(m, "kb_test_latency_seconds", "Latency.", b, 3, l);
    char *txt;
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    kb_histo_observe(h, 0.05);
    kb_histo_observe(h, 0.1); /* le is inclusive */
    kb_histo_observe(h, 5);
    kb_histo_observe(h, 100);
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt,
                                  "kb_test_latency_seconds_bucket{api=\"Fetch\",le=\"0.1\"} 2\n"
                                  "kb_test_latency_seconds_bucket{api=\"Fetch\",le=\"1\"} 2\n"
                                  "kb_test_latency_seconds_bucket{api=\"Fetch\",le=\"10\"} 3\n"
                                  "kb_test_latency_seconds_bucket{api=\"Fetch\",le=\"+Inf\"} 4\n"
                                  "kb_test_latency_seconds_sum{api=\"Fetch\"} 105.15\n"
                                  "kb_test_latency_seconds_count{api=\"Fetch\"} 4\n"));
    free(txt);
    kb_metrics_free(m);
}

static void test_fgauge_and_remove(void)
{
    static const double b[] = {1};
    kb_metrics_t *m = kb_metrics_new();
    const char *l1[] = {"mirror", "a", NULL};
    const char *l2[] = {"mirror", "b", NULL};
    kb_fgauge_t *g1 = kb_metrics_fgauge(m, "km_test_ratio", "Ratio.", l1);
    kb_fgauge_t *g2 = kb_metrics_fgauge(m, "km_test_ratio", "Ratio.", l2);
    kb_histo_t *h = kb_metrics_histogram(m, "km_test_h", "H.", b, 1, NULL);
    char *txt;
    CU_ASSERT_PTR_NOT_NULL_FATAL(g1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g2);
    /* an fgauge family is not an int gauge family */
    CU_ASSERT_PTR_NULL(kb_metrics_gauge(m, "km_test_ratio", "x", l1));
    kb_fgauge_set(g1, 0.125);
    kb_fgauge_set(g2, -3);
    kb_histo_observe(h, 0.5);
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "# TYPE km_test_ratio gauge\n"
                                       "km_test_ratio{mirror=\"a\"} 0.125\n"
                                       "km_test_ratio{mirror=\"b\"} -3\n"));
    free(txt);
    kb_metrics_remove(m, g1);
    kb_metrics_remove(m, h);
    kb_metrics_remove(m, h); /* unknown now: ignored */
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_PTR_NULL(strstr(txt, "mirror=\"a\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "km_test_ratio{mirror=\"b\"} -3\n"));
    CU_ASSERT_PTR_NULL(strstr(txt, "km_test_h"));
    free(txt);
    /* the same series can be created again after removal */
    g1 = kb_metrics_fgauge(m, "km_test_ratio", "Ratio.", l1);
    CU_ASSERT_PTR_NOT_NULL(g1);
    kb_metrics_free(m);
}

static void collect(void *opaque, kb_metrics_emit_t *em)
{
    int *calls = opaque;
    const char *l1[] = {"mirror", "m\"1\\\n", NULL};
    const char *l2[] = {"mirror", "m2", NULL};
    (*calls)++;
    kb_metrics_emit(em, "km_test_lag", "Lag.", KB_METRIC_GAUGE, l1, 42);
    kb_metrics_emit(em, "km_test_lag", "Lag.", KB_METRIC_GAUGE, l2, 0.25);
    kb_metrics_emit(em, "bad name", "x", KB_METRIC_GAUGE, NULL, 1);
}

static void test_collector(void)
{
    kb_metrics_t *m = kb_metrics_new();
    int calls = 0;
    void *h = kb_metrics_collector_add(m, collect, &calls);
    char *txt = kb_metrics_render(m, NULL);
    CU_ASSERT_EQUAL(calls, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(txt);
    /* HELP/TYPE once, label values escaped */
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "# HELP km_test_lag Lag.\n# TYPE km_test_lag gauge\n"
                                       "km_test_lag{mirror=\"m\\\"1\\\\\\n\"} 42\n"
                                       "km_test_lag{mirror=\"m2\"} 0.25\n"));
    CU_ASSERT_PTR_NULL(strstr(txt, "bad name"));
    free(txt);
    kb_metrics_collector_remove(m, h);
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_EQUAL(calls, 1);
    free(txt);
    kb_metrics_free(m);
}

typedef struct hammer_s {
    kb_counter_t *c;
    kb_histo_t *h;
} hammer_t;

static void *hammer(void *arg)
{
    hammer_t *hm = arg;
    for (int i = 0; i < 100000; i++) {
        kb_counter_add(hm->c, 1);
        kb_histo_observe(hm->h, 1.0);
    }
    return NULL;
}

static void test_concurrent_updates(void)
{
    static const double b[] = {0.5, 2};
    kb_metrics_t *m = kb_metrics_new();
    hammer_t hm = {kb_metrics_counter(m, "kb_test_hammer_total", "x", NULL),
                   kb_metrics_histogram(m, "kb_test_hammer_seconds", "x", b, 2, NULL)};
    pthread_t t[4];
    char *txt;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, &hm);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    txt = kb_metrics_render(m, NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "kb_test_hammer_total 400000\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "kb_test_hammer_seconds_sum 400000\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "kb_test_hammer_seconds_count 400000\n"));
    free(txt);
    kb_metrics_free(m);
}

/* Send raw text, read until the server closes; returns a malloc'd response. */
static char *http_get(int port, const char *req)
{
    int fd = kbt_connect(port);
    char *out = calloc(1, 65536);
    size_t got = 0;
    if (fd < 0 || !out)
        return out;
    kbt_send_all(fd, req, strlen(req));
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;
        if (poll(&pfd, 1, 5000) <= 0)
            break;
        n = recv(fd, out + got, 65535 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    return out;
}

static void test_http(void)
{
    kb_metrics_t *m = kb_metrics_new();
    char err[256];
    kb_metrics_http_t *h;
    char *r;
    kb_counter_add(kb_metrics_counter(m, "kb_test_http_total", "x", NULL), 7);
    h = kb_metrics_http_start(m, "127.0.0.1", 0, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT(kb_metrics_http_port(h) > 0);
    r = http_get(kb_metrics_http_port(h), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    CU_ASSERT(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "Content-Type: text/plain; version=0.0.4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "\r\n\r\n# HELP kb_test_http_total"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "kb_test_http_total 7\n"));
    free(r);
    r = http_get(kb_metrics_http_port(h), "GET /nope HTTP/1.1\r\n\r\n");
    CU_ASSERT(strncmp(r, "HTTP/1.1 404", 12) == 0);
    free(r);
    r = http_get(kb_metrics_http_port(h), "POST /metrics HTTP/1.1\r\n\r\n");
    CU_ASSERT(strncmp(r, "HTTP/1.1 405", 12) == 0);
    free(r);
    kb_metrics_http_stop(h);
    kb_metrics_free(m);
}

int main(void)
{
    CU_pSuite s;
    unsigned failed;
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    s = CU_add_suite("metrics", NULL, NULL);
    CU_add_test(s, "counters and gauges", test_counters_gauges);
    CU_add_test(s, "histogram", test_histogram);
    CU_add_test(s, "float gauges and removal", test_fgauge_and_remove);
    CU_add_test(s, "collectors", test_collector);
    CU_add_test(s, "concurrent updates", test_concurrent_updates);
    CU_add_test(s, "HTTP endpoint", test_http);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
