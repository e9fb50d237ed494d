/*
 * kb_host_int.h -- what the files of broker/host share: the host and per-plugin structs, the
 * host threads' queues, and the kbx functions each file contributes to the table. Internal to
 * kb_host.
 *
 * Objects whose pointers round-trip through a plugin carry a magic number that is checked on
 * every entry and cleared when they are freed (STYLE.md point 16). A wrong magic is a plugin
 * bug: it is logged with the plugin's name and the call fails (KBX_ERR_INVALID) or, where the
 * function cannot fail, does nothing.
 *
 * @thread as stated per function
 */
#ifndef KB_HOST_INT_H
#define KB_HOST_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_apisvc.h"
#include "kb_host.h"
#include "kb_metrics.h"
#include "kbx.h"
#include "kbx_loader.h"

#define KB_HOST_MAGIC     0x6b627868u /* "kbxh" */
#define KB_THREAD_MAGIC   0x6b627474u /* "kbtt" */
#define KB_LATCH_MAGIC    0x6b62746cu /* "kbtl" */
#define KB_TIMER_MAGIC    0x6b62746du /* "kbtm" */
#define KB_METRIC_MAGIC   0x6b62746eu /* "kbtn" */
#define KB_RPCREG_MAGIC   0x6b627472u /* "kbtr" */
#define KB_TOKEN_MAGIC    0x6b62746bu /* "kbtk" */
#define KB_TOKEN_DEAD     0x6b62745au /* "kbtZ": consumed or cancelled, quarantined */
#define KB_LISTENER_MAGIC 0x6b627469u /* "kbti" */
#define KB_PART_MAGIC     0x6b627470u /* "kbtp" */
#define KB_DEAD_MAGIC     0u

/* ---- logging (kb_host_log.c, the one file that includes broker/util/kb_log.h; the storage
 * engine's kb_log.h shares its include guard) ---------------------------------------------- */

#define KB_HLOG_ERROR 0
#define KB_HLOG_WARN  1
#define KB_HLOG_INFO  2
#define KB_HLOG_DEBUG 3
#define KB_HLOG_TRACE 4

/** Whether kbroker's log threshold lets @p lvl (KB_HLOG_*) through. */
int kb_hlog_enabled(int lvl);
/** One line of component "host". */
void kb_hlog(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** One line on behalf of a plugin: "[plugin] component: msg" (control characters blanked). */
void kb_hlog_plugin(int lvl, const char *plugin, const char *component, const char *msg);

/* ---- host thread queues (kb_host_ev.c) ----------------------------------------------------- */

typedef struct kb_hev_s kb_hev_t;
typedef struct kb_hq_s kb_hq_t;
typedef struct kbx_listener kb_hlistener_t; /* defined in kb_kbx_listen.c */

/** Runs (@p run) or drops (@p run false: the queue is being torn down) an item, and frees it.
 *  @thread the queue's thread (or the stopping thread when dropping) */
typedef void(kb_hev_fn)(kb_hq_t *q, kb_hev_t *ev, bool run);

struct kb_hev_s {
    kb_hev_t *next;
    kb_hev_fn *fn;
    struct kbx_host *owner;   /**< plugin the item belongs to, or NULL */
    kb_hlistener_t *listener; /**< listener deliveries: the listener */
    _Atomic bool ready;       /**< false: a placeholder still being filled (the thread waits) */
};

/** A FIFO served by one host thread. */
struct kb_hq_s {
    const char *name;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /**< items, readiness, stop */
    pthread_cond_t idle_cv; /**< cur_listener changed */
    kb_hev_t *head, *tail;
    bool stop, started;
    pthread_t thr;
    kb_hlistener_t *cur_listener; /**< listener whose callback runs now (event queue) */
};

int kb_hq_init(kb_hq_t *q, const char *name);
int kb_hq_start(kb_hq_t *q);
/** Append @p ev (ev->ready as set by the caller). @thread any */
void kb_hq_push(kb_hq_t *q, kb_hev_t *ev);
/** Mark a placeholder filled and wake the thread. @thread any */
void kb_hq_set_ready(kb_hq_t *q, kb_hev_t *ev);
/** Stop the thread after the items queued so far have run, join it. Items pushed afterwards
 *  are dropped. @thread main */
void kb_hq_stop(kb_hq_t *q);
void kb_hq_destroy(kb_hq_t *q);
/** True on the queue's own thread. */
bool kb_hq_on_thread(const kb_hq_t *q);
/** Detach the items right after the current one that belong to @p l and satisfy @p same (the
 *  contiguous run only), in order; NULL-terminated list through ->next. @thread q's thread */
kb_hev_t *kb_hq_take_run(kb_hq_t *q, kb_hlistener_t *l,
                         bool (*same)(const kb_hev_t *a, const kb_hev_t *b), const kb_hev_t *first);
/** Drop every queued item of listener @p l, then wait until its callback is not running
 *  (unless called from the queue's thread). @thread any */
void kb_hq_forget_listener(kb_hq_t *q, kb_hlistener_t *l);
/** Set/clear the listener whose callback runs (event thread). */
void kb_hq_set_current(kb_hq_t *q, kb_hlistener_t *l);

/* ---- local requests (kb_kbx_local.c): the thread "kb-kbx-local" ---------------------------- */

typedef struct kb_lreq_s kb_lreq_t;

/** The local request thread: starts queued requests (their handlers run here), delivers the
 *  results to the plugins' callbacks, and cancels waiting requests at their deadline or when
 *  their plugin is being unloaded. */
typedef struct kb_hlocal_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;                /**< CLOCK_MONOTONIC: work, a nearer deadline, stop */
    kb_lreq_t *in_head, *in_tail;     /**< submitted, not started */
    kb_lreq_t *done_head, *done_tail; /**< finished, callback not yet called */
    kb_lreq_t *live;                  /**< started and not finished (deferred, mostly) */
    bool stop, started;
    pthread_t thr;
    /* broker_request to other brokers: a kc_ client driven by "kb-kbx-peer" */
    struct kc_client_s *kc;
    kb_lreq_t *remote; /**< sent to another broker, not answered yet */
    bool peer_closed;  /**< mu: no new remote request (the channel is closing) */
    _Atomic bool peer_stop;
    bool peer_started;
    pthread_t peer_thr;
} kb_hlocal_t;

int kb_hlocal_init(kb_hlocal_t *l);
/** Start the thread. @thread main */
int kb_hlocal_start(kb_host_t *h);
/** Cancel what still waits (KBX_ERR_SHUTDOWN), deliver every result, join the thread. Requests
 *  submitted afterwards are refused. @thread main */
void kb_hlocal_stop(kb_host_t *h);
void kb_hlocal_destroy(kb_hlocal_t *l);
/** @p host is being unloaded: its local requests that wait are cancelled (KBX_ERR_SHUTDOWN to
 *  its callback, the handler owners' cancel callbacks run), now and whenever one of its later
 *  requests waits. Returns at once; the callbacks follow on "kb-kbx-local" (fini waits for
 *  them). @thread main, before the plugin's fini */
void kb_hlocal_cancel_plugin(kb_host_t *h, struct kbx_host *host);

/* ---- timers (kb_kbx_timer.c) ---------------------------------------------------------------- */

typedef struct kb_htimers_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /**< CLOCK_MONOTONIC: heap head changed, stop */
    pthread_cond_t done_cv; /**< the running callback returned */
    struct kbx_timer **heap;
    size_t n, cap;
    struct kbx_timer *running; /**< callback in progress, or NULL */
    bool stop, started;
    pthread_t thr;
} kb_htimers_t;

int kb_htimers_init(kb_htimers_t *t);
int kb_htimers_start(kb_htimers_t *t);
void kb_htimers_stop(kb_htimers_t *t);

/* ---- plugin records (kb_kbx_records.c) ------------------------------------------------------ */

typedef struct kb_hrec_s {
    int32_t type;
    uint8_t *key;
    size_t key_len;
    uint8_t *value; /**< NULL: deleted (only in deltas, never stored) */
    size_t value_len;
} kb_hrec_t;

/** The pre-cluster record file, read once for its migration into the metadata log. */
typedef struct kb_hrecords_s {
    pthread_mutex_t mu;
    char *path;   /**< <first log dir>/kbroker-plugin-records */
    kb_hrec_t *v; /**< its records until kb_hrecords_migrate */
    size_t n, cap;
} kb_hrecords_t;

/** Read the old file (absent: nothing). 0 or -1 with @p errstr (corrupt). */
int kb_hrecords_open(kb_hrecords_t *r, const char *dir, char *errstr, size_t errstr_size);
void kb_hrecords_close(kb_hrecords_t *r);
void kb_hrec_free_array(kb_hrec_t *v, size_t n);
struct kb_host_s;
/** On a node with the controller role: commit the old file's records whose (type, key) the
 *  image lacks, rename the file `.migrated`; elsewhere leave it (logged). Frees the file's
 *  records. 0 or -1 with @p errstr. @thread main, before any plugin loads */
int kb_hrecords_migrate(struct kb_host_s *h, char *errstr, size_t errstr_size);

/* ---- requests to the controller (kb_kbx_ctrl.c): a broker-only node's epoch bumps and plugin
 * record writes ----------------------------------------------------------------------------- */

typedef struct kb_hctrl_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /**< CLOCK_MONOTONIC: inflight dropped */
    struct kb_hbump_s *waiters; /**< bumps waiting for their epoch to be applied here */
    int inflight;               /**< requests sent to the controller, not answered yet */
    int64_t seen; /**< the highest metadata offset of a change the listener has seen */
    bool stopping, inited;
    kb_meta_listener_t *ml; /**< registered before any plugin's listener (runs after them) */
} kb_hctrl_t;

/** Init and register the waiters' metadata listener: before any plugin loads. 0 or -1. */
int kb_hctrl_init(kb_host_t *h);
/** End every waiting bump (KBX_ERR_SHUTDOWN), wait for the controller's outstanding answers,
 *  unregister the listener. After the plugins are unloaded, before the event queue stops. */
void kb_hctrl_stop(kb_host_t *h);
void kb_hctrl_destroy(kb_host_t *h);
/** leader_epoch_bump through the controller (a broker-only node; on the event thread): the
 *  request is sent and KBX_OK returned, after which @p done follows exactly once and the
 *  caller's operation count is released by the completion; or a KBX_ERR_* (nothing started:
 *  KBX_ERR_UNSUPPORTED without a controller channel, KBX_ERR_NETWORK while the controller is
 *  down, logged). */
int32_t kb_hctrl_bump(kbx_host_t *host, const kp_uuid_t *id, int32_t partition, int32_t min_epoch,
                      int64_t deadline_ms, kbx_done_fn done, void *arg);
/** controller_write through the controller (a broker-only node; on the event thread): takes
 *  @p recs (freed by it) and returns KBX_OK, after which @p done follows exactly once once this
 *  node applied the records (and the caller's operation count is released); or a KBX_ERR_*
 *  (nothing started, @p recs still the caller's). */
int32_t kb_hctrl_write(kbx_host_t *host, kb_hrec_t *recs, size_t n, int64_t deadline_ms,
                       kbx_done_fn done, void *arg);

/* ---- the host and its plugins ---------------------------------------------------------------- */

/** One loaded plugin: the kbx_host_t its init received. */
struct kbx_host {
    uint32_t magic;
    kb_host_t *h;
    char name[64]; /**< file stem until init returned, then the descriptor's name */
    char *path;
    char *flag;
    kbx_loaded_t *loaded;
    _Atomic bool dead;     /**< fini returned: its callbacks never run again */
    _Atomic bool stopping; /**< being unloaded: its waiting local requests are cancelled */
    _Atomic int64_t mem_bytes, mem_allocs;
    kb_gauge_t *m_bytes, *m_allocs;
    /* handles the plugin holds, for the report after fini */
    _Atomic int n_threads, n_latches, n_timers, n_metrics, n_rpcs, n_tokens, n_listeners, n_parts,
        n_ops;
    struct kbx_host *next;
};

struct kb_host_s {
    kb_broker_t *kb;
    kb_apisvc_t *api;
    kb_meta_t *meta;
    kbx_api_t table;
    pthread_mutex_t mu;       /**< plugins, metrics list */
    struct kbx_host *plugins; /**< load order (newest last) */
    kb_hq_t ev;               /**< "kb-kbx-event" */
    kb_hlocal_t local;        /**< "kb-kbx-local" */
    kb_htimers_t timers;      /**< "kb-kbx-timer" */
    kb_hrecords_t rec;
    kb_hctrl_t ctrl;
    pthread_mutex_t met_mu;         /**< metrics list; taken before the registry's mutex */
    struct kbx_metric *metrics;     /**< registered kbx metrics (under met_mu) */
    struct kbx_listener *listeners; /**< every kbx listener (under mu) */
    pthread_rwlock_t authz_rw;
    kb_host_authz_fn *authz;
    void *authz_opaque;
    _Atomic int64_t md_seq; /**< metadata_offset handed to listeners */
    _Atomic int32_t local_corr;
    char local_listener[64]; /**< listener name local requests claim */
    void *collector;         /**< kb_metrics collector of the per-plugin gauges */
    /* retired RPC tokens, kept a while so a late touch by a plugin is caught (kb_kbx_rpc.c) */
    pthread_mutex_t tok_mu;
    void *tok_ring[256];
    size_t tok_pos;
};

/** Check a handle the plugin passed in: logs "[plugin] bad <what> handle" and returns false. */
bool kb_host_check(kbx_host_t *host, const void *obj, uint32_t magic, const char *what);
/** A plugin's host handle, or NULL (logged) when @p host is not one. */
kbx_host_t *kb_host_from(kbx_host_t *host, const char *fn);
/** Log a plugin misuse (ERROR, naming the plugin). */
void kb_host_misuse(kbx_host_t *host, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int64_t kb_host_now_ms(void);

/* ---- the kbx functions, by file -------------------------------------------------------------- */

/* kb_kbx_core.c: host info, fatal, log, memory, clocks, threads, latches, config, authorize */
void kb_kbx_core_fill(kbx_api_t *t);
/* kb_kbx_timer.c */
void kb_kbx_timer_fill(kbx_api_t *t);
/* kb_kbx_metric.c */
void kb_kbx_metric_fill(kbx_api_t *t);
/** Remove every metric @p host left registered. */
void kb_kbx_metric_drop_all(kb_host_t *h, kbx_host_t *host);
/* kb_kbx_rpc.c */
void kb_kbx_rpc_fill(kbx_api_t *t);
/* kb_kbx_listen.c (also controller_write fan-out) */
void kb_kbx_listen_fill(kbx_api_t *t);
/** Unregister every listener @p host left behind (after its fini). */
void kb_kbx_listen_drop_all(kb_host_t *h, kbx_host_t *host);
/* kb_kbx_part.c: partitions, logs, ISR wait, epoch bump */
void kb_kbx_part_fill(kbx_api_t *t);
/* kb_kbx_records.c: controller_write */
void kb_kbx_records_fill(kbx_api_t *t);
/* kb_kbx_local.c: local_request, broker_request */
void kb_kbx_local_fill(kbx_api_t *t);

/** An asynchronous operation's completion on the event thread: @p done(@p arg, status) unless
 *  the plugin is gone. Used by the operations that have nothing to run first. */
int32_t kb_host_post_done(kbx_host_t *host, kbx_done_fn done, void *arg, int32_t status);

#endif /* KB_HOST_INT_H */
