/*
 * km_fetch_int.h - structs shared inside plugin/fetch/ only.
 *
 * Locking: one manager mutex (fm->lock) guards the registry (mirrors, partitions, fetchers),
 * every partition's control fields (ctl, owner, inbox link) and status, and the mirrors' fetch
 * settings. The fetch state of a partition (position, epochs, session membership) belongs to
 * the fetcher thread that owns it and is touched without the lock; ownership moves between
 * threads only under the lock (through the receiving thread's inbox). The manager's counters
 * have a leaf lock of their own (fm->stats_lock), the only lock the Fetch encode callback takes.
 */
#ifndef KM_FETCH_INT_H
#define KM_FETCH_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "fetch/km_fetch.h"
#include "kc_client.h"
#include "kp_arena.h"
#include "kp_msgs.h"

#define KM_FETCH_MGR_MAGIC  0x4b4d464du /* "KMFM" */
#define KM_FETCH_PART_MAGIC 0x4b4d4650u /* "KMFP" */
#define KM_FETCHER_MAGIC    0x4b4d4654u /* "KMFT" */
#define KM_FMIRROR_MAGIC    0x4b4d4652u /* "KMFR" */
#define KM_FW_CID_MAX       128         /* source cluster ids (Kafka's are 22 characters) */

typedef struct km_fetcher km_fetcher_t;

/** Control requests from the owner (km_fetch_part_t.ctl). */
#define KM_FCTL_ADOPT  0x1u /* the receiving thread takes the partition into its set */
#define KM_FCTL_REMOVE 0x2u
#define KM_FCTL_PAUSE  0x4u
#define KM_FCTL_RESUME 0x8u

typedef struct km_fmirror {
    uint32_t magic;
    struct km_fmirror *next;
    char *name;
    char *bootstrap; /* host:port,host:port */
    char *client_id;
    int32_t request_timeout_ms;
    int32_t connect_timeout_ms;
    int32_t reconnect_backoff_ms;
    int32_t reconnect_backoff_max_ms;
    int32_t retry_backoff_ms;
    int32_t socket_recv_buffer;
    int32_t socket_send_buffer;
    /* fetch.* (dynamic; read under fm->lock) */
    int32_t fetch_wait_max_ms;
    int32_t fetch_backoff_ms;
    int32_t fetch_min_bytes;
    int32_t fetch_response_max_bytes;
    int32_t fetch_max_bytes;
    uint32_t conn_gen; /* + 1 when a connection setting changed: threads reconnect */
    int32_t nparts;
    int64_t lag_sum;
    kbx_metric_t *m_bytes;
    kbx_metric_t *m_records;
    kbx_metric_t *m_lag;
    kbx_metric_t *m_errors;
    kbx_metric_t *m_received; /* Fetch response bytes as received (framing included) */

    /* the source cluster id the mirror was created against, "" unknown (under fm->lock) */
    char cluster_id[KM_FW_CID_MAX];
} km_fmirror_t;

struct km_fetch_part {
    uint32_t magic;
    atomic_int refs;
    km_fetch_mgr_t *fm;
    km_fmirror_t *mirror;
    void *opaque;
    char *topic;
    kbx_uuid_t src_topic_id;
    bool src_id_known;
    int32_t partition;
    int32_t fetcher_idx;
    kbx_uuid_t dst_topic_id;

    /* under fm->lock */
    struct km_fetch_part *reg_next;
    km_fetcher_t *owner; /* thread that owns it or whose inbox holds it */
    struct km_fetch_part *inbox_next;
    bool in_inbox;
    uint32_t ctl;
    int32_t resume_epoch;
    km_fetch_done_fn rm_done;
    void *rm_arg;
    bool removing;
    km_fetch_status_t st;
    int64_t lag_counted; /* this partition's share of mirror->lag_sum */

    /* owned by the fetcher thread that holds it */
    struct km_fetch_part *t_next;
    struct km_fetch_part **t_pprev;
    km_fetcher_t *t_owner;            /* the thread whose list holds it, NULL in transit */
    struct km_fetch_part *hid_next;   /* t->by_id chain */
    struct km_fetch_part *hname_next; /* t->by_name chain */
    uint32_t hid, hname;              /* their hashes */
    bool hid_in;
    kbx_partition_t *dst;
    int32_t dst_epoch;
    int32_t state; /* KM_FETCH_ST_* */
    int64_t fetch_offset;
    int32_t lfe;        /* last fetched epoch */
    int32_t src_epoch;  /* source leader epoch, -1 unknown */
    int32_t src_leader; /* source leader id, -1 unknown */
    int64_t hw;
    int64_t retry_at_ns;
    int32_t backoff_ms;
    int32_t retries;
    int32_t next_state; /* after BACKOFF */
    bool incl;          /* in the request being built */
    bool validated;     /* divergence checked since the last (re)start / leader change */
    bool need_ofle;     /* OffsetsForLeaderEpoch needed before fetching (Fetch < v12) */
    bool rpc_busy;      /* a ListOffsets / OffsetsForLeaderEpoch is in flight */
    bool src_no_id;     /* the source has no topic id for it (Metadata < v10 or a zero id):
                           its thread fetches below v13 (topic names) */
    int32_t oor_step;   /* 0 none, 1 earliest asked, 2 latest asked */
    int64_t oor_earliest;
    int64_t start_pending; /* >= 0: the local log start to raise to once the HW allows (the
                              source's, after a restart at the base of the batch holding it) */
    int64_t progress_ns;   /* when the last APPENDED event was posted; 0: the next append posts
                              one (new position, or another event since: design M106) */
    bool in_session;
    int64_t sent_offset;
    int32_t sent_epoch;
    int32_t sent_lfe;

    /* consecutive Metadata answers without the source topic (its id known), the first's time */
    int32_t gone_count;
    int64_t gone_since_ns;
};

/** A partition a session still holds after it left this thread: forgotten next request. */
typedef struct km_fforget {
    char *topic;
    kbx_uuid_t topic_id;
    int32_t partition;
} km_fforget_t;

struct km_fetcher {
    uint32_t magic;
    km_fetch_mgr_t *fm;
    km_fmirror_t *mirror;
    km_fetcher_t *next; /* fm->fetchers */
    int32_t broker;     /* source broker id, -1: the lookup thread */
    int32_t idx;
    char name[64];
    char host[256]; /* the broker's address, when known */
    int32_t port;
    uint32_t conn_gen; /* of the mirror's settings this client was made with */
    kbx_thread_t *thread;
    kbx_latch_t *latch;
    kc_client_t *kc;
    atomic_int stop;
    /* gauges (labels mirror, source_broker, fetcher; not for the lookup thread): the session id
     * and epoch of the last Fetch sent (0 and 0 for a full one); recorded under fm->lock */
    kbx_metric_t *m_sess_id;
    kbx_metric_t *m_sess_epoch;
    uint64_t test_fetches; /* Fetch requests built (KMIRROR_TEST_FETCH_NO_SESSION only) */

    /* under fm->lock */
    km_fetch_part_t *inbox;
    bool reap_keep; /* km_fetch_reap: a registered partition names this thread its owner */

    /* owned by the thread */
    km_fetch_part_t *parts;
    size_t nparts;
    km_fetch_part_t **by_id;   /* (source topic id, partition) -> partition, for v13+ answers */
    km_fetch_part_t **by_name; /* (source topic name, partition) -> partition */
    size_t nbuckets;           /* of both, a power of two */
    km_fforget_t *forget;
    size_t nforget, cap_forget;
    km_fforget_t *forget_sent;
    size_t nforget_sent;
    int32_t sess_id;
    int32_t sess_epoch;
    bool sess_ids; /* the session was built with topic ids (v13+) */
    bool fetch_busy;
    int16_t fetch_ver; /* last negotiated Fetch version, -1 unknown */
    int64_t fetch_backoff_until_ns;
    bool md_busy;
    int64_t md_next_ns; /* periodic refresh */
    bool md_wanted;
    int64_t md_backoff_until_ns;
    kp_arena_t rq_ar;
    kp_FetchRequest_t rq;
    /* fetch settings copied at each request */
    char cluster_id[KM_FW_CID_MAX];
    int32_t fetch_wait_max_ms, fetch_backoff_ms, fetch_min_bytes, fetch_response_max_bytes,
        fetch_max_bytes, request_timeout_ms, retry_backoff_ms;
};

struct km_fetch_mgr {
    uint32_t magic;
    atomic_int refs; /* the owner + events/completions in the coordinator queue */
    atomic_bool dead;
    km_plugin_t *cm;
    km_fetch_opts_t opts;
    pthread_mutex_t lock;
    km_fmirror_t *mirrors;
    km_fetch_part_t *parts;
    km_fetcher_t *fetchers;
    bool stopping; /* destroy began: no new thread */
    /* The counters have their own leaf lock: the Fetch request is encoded by a callback that
     * kc_ runs with the client's lock held, and taking fm->lock there deadlocked against the
     * lookup thread, which holds fm->lock while it sets a fetcher's broker address
     * (kc_client_node_set takes that client's lock; seen with 2,000 partitions). */
    pthread_mutex_t stats_lock;
    km_fetch_counters_t counters;
};

#endif /* KM_FETCH_INT_H */
