/*
 * kb_main.c -- the kbroker executable: configuration, logging, metrics, modules, the network
 * server, signals and an orderly exit.
 *
 * Exit codes: 0 clean stop on SIGTERM/SIGINT, 1 start-up failure, 2 usage or configuration
 * error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kb_broker.h"
#include "kb_config.h"
#include "kb_err.h"
#include "kb_log.h"
#include "kb_metrics.h"
#include "kb_metrics_http.h"
#include "kb_net.h"

#ifndef KB_VERSION
#define KB_VERSION "0.0.0"
#endif

static void kb_main_usage(FILE *out)
{
    fprintf(out, "usage: kbroker --config FILE [--override key=value]...\n"
                 "       kbroker --config FILE --check-config   validate, print the values, exit\n"
                 "       kbroker --help-config [text|markdown]  describe every configuration key\n"
                 "       kbroker --version\n"
                 "\n"
                 "Runs until SIGTERM or SIGINT, then drains in-flight requests and exits 0.\n"
                 "Exit codes: 0 clean stop, 1 start-up failure, 2 usage or configuration error.\n");
}

/* ---- process metrics, through the collector API (the way plugin metrics join) ---- */

typedef struct kb_main_proc_s {
    double start_time;
    char node_id[16];
} kb_main_proc_t;

static void kb_main_collect(void *opaque, kb_metrics_emit_t *em)
{
    kb_main_proc_t *pm = opaque;
    const char *info_labels[] = {"version", KB_VERSION, "node_id", pm->node_id, NULL};
    struct rusage ru;
    long pages = 0, rss = 0;
    FILE *f;

    kb_metrics_emit(em, "kbroker_info", "Constant 1, labelled with the version and node id.",
                    KB_METRIC_GAUGE, info_labels, 1);
    kb_metrics_emit(em, "process_start_time_seconds", "Start time since the epoch.",
                    KB_METRIC_GAUGE, NULL, pm->start_time);
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        kb_metrics_emit(em, "process_cpu_seconds_total", "User and system CPU time.",
                        KB_METRIC_COUNTER, NULL,
                        (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                            ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
    f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) == 2)
            kb_metrics_emit(em, "process_resident_memory_bytes", "Resident memory.",
                            KB_METRIC_GAUGE, NULL, (double)rss * (double)sysconf(_SC_PAGESIZE));
        fclose(f);
    }
}

/* ---- start-up helpers ---- */

static int kb_main_load_config(kb_config_t *cfg, const char *path, char **overrides,
                               int n_overrides)
{
    /* An unreadable file is reported alone: the missing keys would only be noise. */
    if (kb_config_load_file(cfg, path) != KB_E_IO) {
        for (int i = 0; i < n_overrides; i++)
            kb_config_set_kv(cfg, overrides[i], "--override");
        kb_config_finalize(cfg);
    }
    if (kb_config_error_cnt(cfg) > 0) {
        for (size_t i = 0; i < kb_config_error_cnt(cfg); i++)
            fprintf(stderr, "kbroker: configuration error: %s\n", kb_config_error(cfg, i));
        fprintf(stderr, "kbroker: see kbroker --help-config for every key\n");
        return -1;
    }
    return 0;
}

static void kb_main_server_conf(const kb_config_t *cfg, kb_server_conf_t *sc,
                                kb_net_listener_t *lst)
{
    kb_server_conf_defaults(sc);
    for (size_t i = 0; i < cfg->lst_cnt; i++) {
        lst[i].name = cfg->lst[i].name;
        lst[i].host = cfg->lst[i].host;
        lst[i].port = cfg->lst[i].port;
    }
    sc->listeners = lst;
    sc->listener_cnt = cfg->lst_cnt;
    sc->num_network_threads = cfg->num_network_threads;
    sc->num_io_threads = cfg->num_io_threads;
    sc->queued_max_requests = cfg->queued_max_requests;
    sc->socket_request_max_bytes = cfg->socket_request_max_bytes;
    sc->max_inflight_per_conn = cfg->connection_max_inflight_requests;
    sc->connections_max_idle_ms = cfg->connections_max_idle_ms;
    sc->socket_send_buffer_bytes = cfg->socket_send_buffer_bytes;
    sc->socket_receive_buffer_bytes = cfg->socket_receive_buffer_bytes;
    sc->listen_backlog = cfg->socket_listen_backlog_size;
}

/* Every partition keeps its active segment's files open and every connection a socket: raise
 * the soft limit on open files to the hard one (as the JVM does for Kafka) and say what it is,
 * so that "Too many open files" later in the log can be read against it. */
#define KB_MAIN_NOFILE_LOW 4096
static void kb_main_nofile(void)
{
    struct rlimit rl;
    rlim_t was;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    was = rl.rlim_cur;
    if (rl.rlim_cur != rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = was;
    }
    if (rl.rlim_cur == RLIM_INFINITY)
        kb_log_info("main", "open files limit: unlimited");
    else if (rl.rlim_cur < KB_MAIN_NOFILE_LOW)
        kb_log_warn("main",
                    "open files limit is %llu (hard limit %llu): each partition keeps its segment "
                    "files open, so a few hundred partitions may exhaust it (\"Too many open "
                    "files\"); raise it (ulimit -n) before starting kbroker",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
    else
        kb_log_info("main", "open files limit: %llu%s", (unsigned long long)rl.rlim_cur,
                    rl.rlim_cur != was ? " (raised to the hard limit)" : "");
}

int main(int argc, char **argv)
{
    const char *config_path = NULL;
    char **overrides = NULL;
    int n_overrides = 0, check_only = 0, rc = 1, sig = 0, n_init = 0;
    kb_config_t *cfg = NULL;
    kb_metrics_t *metrics = NULL;
    kb_metrics_http_t *mhttp = NULL;
    kb_api_registry_t *reg = NULL;
    kb_server_t *srv = NULL;
    kb_broker_t kb = {0};
    void *mstate[64] = {0};
    kb_main_proc_t pm;
    kb_net_listener_t *nl = NULL;
    kb_server_conf_t sc;
    sigset_t sigs;
    char err[1024];
    kb_log_level_t lvl;
    size_t n_mod = 0;

    overrides = calloc((size_t)argc, sizeof(*overrides));
    if (!overrides)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0 && i + 1 < argc) {
            config_path = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            config_path = a + 9;
        } else if (strcmp(a, "--override") == 0 && i + 1 < argc) {
            overrides[n_overrides++] = argv[++i];
        } else if (strncmp(a, "--override=", 11) == 0) {
            overrides[n_overrides++] = argv[i] + 11;
        } else if (strcmp(a, "--help-config") == 0) {
            const char *fmt = (i + 1 < argc && argv[i + 1][0] != '-') ? argv[++i] : "text";
            kb_config_print_table(stdout, fmt);
            free(overrides);
            return 0;
        } else if (strcmp(a, "--check-config") == 0) {
            check_only = 1;
        } else if (strcmp(a, "--version") == 0) {
            printf("kbroker %s\n", KB_VERSION);
            free(overrides);
            return 0;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            kb_main_usage(stdout);
            free(overrides);
            return 0;
        } else if (a[0] != '-' && !config_path) {
            config_path = a; /* kafka-server-start style: the properties file as argument */
        } else {
            fprintf(stderr, "kbroker: unknown argument '%s'\n", a);
            kb_main_usage(stderr);
            free(overrides);
            return 2;
        }
    }
    if (!config_path) {
        fprintf(stderr, "kbroker: --config FILE is required\n");
        kb_main_usage(stderr);
        free(overrides);
        return 2;
    }

    cfg = kb_config_new();
    if (!cfg) {
        free(overrides);
        return 1;
    }
    if (kb_main_load_config(cfg, config_path, overrides, n_overrides) != 0) {
        rc = 2;
        goto out;
    }
    if (check_only) {
        kb_config_print_values(cfg, stdout);
        rc = 0;
        goto out;
    }
    if (kb_log_level_parse(cfg->log_level, &lvl) == 0)
        kb_log_set_level(lvl);

    /* Signals are taken synchronously by this thread; every thread created below inherits
     * the mask, so SIGTERM/SIGINT never interrupt a network or handler thread. */
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    kb_log_info("main", "kbroker %s starting (node.id=%d, process.roles=%s, config %s)", KB_VERSION,
                cfg->node_id, cfg->process_roles, config_path);
    kb_main_nofile();

    metrics = kb_metrics_new();
    reg = kb_api_registry_new();
    nl = calloc(cfg->lst_cnt ? cfg->lst_cnt : 1, sizeof(*nl));
    if (!metrics || !reg || !nl) {
        kb_log_error("main", "out of memory");
        goto out;
    }
    pm.start_time = (double)time(NULL);
    snprintf(pm.node_id, sizeof(pm.node_id), "%d", cfg->node_id);
    kb_metrics_collector_add(metrics, kb_main_collect, &pm);
    if (cfg->metrics_port >= 0) {
        mhttp =
            kb_metrics_http_start(metrics, cfg->metrics_host, cfg->metrics_port, err, sizeof(err));
        if (!mhttp) {
            kb_log_error("main", "metrics.listener: %s", err);
            goto out;
        }
        kb_log_info("main", "metrics on http://%s:%d/metrics",
                    cfg->metrics_host[0] ? cfg->metrics_host : "*", kb_metrics_http_port(mhttp));
    }

    kb.cfg = cfg;
    kb.metrics = metrics;
    kb.reg = reg;
    for (n_mod = 0; kb_modules[n_mod]; n_mod++)
        ;
    if (n_mod > sizeof(mstate) / sizeof(mstate[0]))
        n_mod = sizeof(mstate) / sizeof(mstate[0]);
    for (n_init = 0; (size_t)n_init < n_mod; n_init++) {
        const kb_module_t *m = kb_modules[n_init];
        err[0] = '\0';
        if (m->init && m->init(&kb, &mstate[n_init], err, sizeof(err)) != 0) {
            kb_log_error("main", "module %s failed to start: %s", m->name,
                         err[0] ? err : "no reason given");
            goto out_modules;
        }
    }

    kb_main_server_conf(cfg, &sc, nl);
    srv = kb_server_new(&sc, reg, metrics, err, sizeof(err));
    if (!srv) {
        kb_log_error("main", "%s", err);
        goto out_modules;
    }
    kb.srv = srv;
    if (kb_server_start(srv) != 0) {
        kb_log_error("main", "cannot start the network server");
        goto out_server;
    }
    for (size_t i = 0; i < n_mod; i++) {
        const kb_module_t *m = kb_modules[i];
        if (m->start && m->start(&kb, mstate[i]) != 0) {
            kb_log_error("main", "module %s failed to start", m->name);
            goto out_server;
        }
    }

    /* The readiness line: actual ports (port 0 listeners get theirs from the kernel). */
    {
        char lbuf[1024];
        size_t off = 0;
        lbuf[0] = '\0';
        for (size_t i = 0; i < cfg->lst_cnt && off < sizeof(lbuf); i++) {
            const kb_config_listener_t *l = &cfg->lst[i];
            int r = snprintf(lbuf + off, sizeof(lbuf) - off, "%s%s://%s:%d", i ? "," : "", l->name,
                             l->host, kb_server_listener_port(srv, l->name));
            if (r > 0)
                off += (size_t)r;
        }
        printf("kbroker started (node.id=%d, listeners=%s)\n", cfg->node_id, lbuf);
        fflush(stdout);
        kb_log_info("main", "kbroker started (node.id=%d, listeners=%s)", cfg->node_id, lbuf);
    }

    for (;;) {
        if (sigwait(&sigs, &sig) == 0)
            break;
    }
    kb_log_info("main", "received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = 0;

out_server:
    if (srv && kb_server_stop(srv, cfg->shutdown_timeout_ms) != 0)
        kb_log_warn("main", "in-flight requests did not finish within shutdown.timeout.ms");
out_modules:
    for (size_t i = (size_t)n_init; i-- > 0;)
        if (kb_modules[i]->stop)
            kb_modules[i]->stop(&kb, mstate[i]);
    for (size_t i = (size_t)n_init; i-- > 0;)
        if (kb_modules[i]->fini)
            kb_modules[i]->fini(&kb, mstate[i]);
    kb_server_free(srv);
out:
    kb_metrics_http_stop(mhttp);
    kb_api_registry_free(reg);
    kb_metrics_free(metrics);
    if (rc == 0 && !check_only)
        kb_log_info("main", "kbroker stopped");
    free(nl);
    kb_config_free(cfg);
    free(overrides);
    return rc;
}
