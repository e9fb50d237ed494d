/*
 * kb_meta_int.h -- internals shared by kb_meta.c (the image, its apply path and the controller's
 * mutations) and kb_meta_log.c (the metadata log: replay, commit, migration of the old
 * snapshot). Not for other components: they use kb_meta.h.
 *
 * @thread see kb_meta.h (change_mu serialises mutations and applies, rw guards the tables)
 */
#ifndef KB_META_INT_H
#define KB_META_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_log.h"
#include "kb_meta.h"
#include "kb_meta_rec.h"

#define KB_META_MAX_PART 100000

/** The replication state of one partition in the image. */
typedef struct kb_mpart_s {
    int32_t *replicas;
    int32_t nreplicas;
    int32_t *isr;
    int32_t nisr;
    int32_t leader;
    int32_t leader_epoch;
    int32_t partition_epoch;
    bool opening; /* local, its log open queued in the delta being applied (under rw) */
} kb_mpart_t;

typedef struct kb_mtopic_s {
    struct kb_mtopic_s *next_name, *next_id;
    char *name;
    kp_uuid_t id;
    bool internal;
    bool reconf;    /* a config of it changed in the batch being applied */
    int32_t nparts; /* partitions visible in the image */
    int32_t cap;    /* allocated entries of pi and parts */
    kb_mpart_t *pi;
    kb_kv_t *cfg;
    size_t cfg_cnt;
    kb_part_t **parts; /* NULL entries when no partition manager is attached or a log failed */
} kb_mtopic_t;

struct kb_meta_listener_s {
    kb_meta_listener_t *next;
    kb_meta_listen_fn *fn;
    void *opaque;
};

struct kb_meta_s {
    const kb_config_t *cfg;
    kb_partmgr_t *pm;
    char cluster_id[64];
    int32_t node_id;
    char node_id_str[16];
    char *dir;     /* first log dir (where the old snapshot lived) */
    char *mdir;    /* metadata.log.dir */
    kb_log_t *log; /* __cluster_metadata-0 */
    pthread_mutex_t change_mu;
    pthread_rwlock_t rw;
    kb_mtopic_t **by_name, **by_id;
    size_t nbuckets, ntopics;
    kb_kv_t *dyn_node, *dyn_dflt;
    size_t dyn_node_cnt, dyn_dflt_cnt;
    int64_t offset;                 /* log offset of the last applied record, -1 before the first */
    int64_t pid_persisted;          /* first producer id not covered by a committed block (image) */
    int64_t pid_next;               /* controller: next id to hand out */
    kb_meta_listener_t *listeners;  /* under change_mu */
    int32_t remote;                 /* broker-only node: the controller's id, else -1 (ctrl) */
    kb_meta_assign_fn *assign;      /* the controller's replica assignment (ctrl), or NULL */
    kb_meta_broker_t *brokers;      /* registered brokers, sorted by id (under rw) */
    kb_meta_pid_source_fn *pid_src; /* broker-only node: blocks from the controller (ctrl) */
    void *pid_src_opaque;
    kb_meta_internal_creator_fn *icreate; /* broker-only node: asks the controller (ctrl) */
    void *icreate_opaque;
    pthread_mutex_t pid_mu; /* the block below (never held with change_mu) */
    int64_t blk_next, blk_end;
    size_t nbrokers;
    kb_mrec_t *acls; /* AccessControlEntryRecords in the image, in creation order (under rw) */
    size_t nacls;
    kb_mrec_t *precs; /* KbrokerPluginRecords: the latest per (type, key), first-write order
                         (under rw; kbx controller_write) */
    size_t nprecs;
    void *assign_opaque;
    kb_mtopic_t *staged; /* controller: logs opened ahead of a commit, taken over by apply */
    int64_t snap_end;    /* end offset (exclusive) of the newest snapshot, -1 none */
    int64_t snap_bytes;  /* log bytes committed or replayed after it */
    bool log_ok;         /* the log was replayed and the image matches it (snapshots allowed) */
};

/* kb_meta.c */
void kb_mtopic_free(kb_mtopic_t *t);
/** Apply every record of the record batches in @p buf (control batches skipped, records at or
 *  below meta->offset skipped), batch by batch: the image under the write lock, then the local
 *  partitions and the listeners. change_mu held. 0, or -1 with @p err naming the offset. */
int kb_meta_apply_buf(kb_meta_t *meta, const uint8_t *buf, size_t len, char *err, size_t err_size);
/** Apply a snapshot's batches to the empty image; the metadata offset becomes @p end - 1.
 *  change_mu held. 0 or -1 with @p err. */
int kb_meta_apply_snapshot(kb_meta_t *meta, const uint8_t *buf, size_t len, int64_t end, char *err,
                           size_t err_size);
/** The records that rebuild the current image (topics, partitions, configs, dynamic broker
 *  configs, the producer-id block): a malloc'd array (kb_meta_recs_free). 0 or KB_E_NOMEM. */
int kb_meta_image_records(kb_meta_t *meta, kb_mrec_t **out, size_t *cnt);
void kb_meta_recs_free(kb_mrec_t *recs, size_t cnt);

/* kb_meta_log.c */
/** Open the metadata log in meta->mdir and replay it into the (empty) image; migrate an old
 *  `kbroker-metadata` snapshot first. 0, or -1 with @p err. */
int kb_meta_log_open(kb_meta_t *meta, char *err, size_t err_size);
/** Commit @p recs as one record batch: append, fsync, then apply. change_mu held. 0, or
 *  KB_E_IO / KB_E_NOMEM (nothing applied; the log is as before). */
int kb_meta_log_commit(kb_meta_t *meta, const kb_mrec_t *recs, size_t n);
/** A remote controller's batches: the new ones (from the log end on) are appended as they are
 *  and fsynced, then every record above meta->offset is applied. change_mu held. 0, KB_E_IO,
 *  or KB_E_INVALID with @p err (corrupt batch, a gap or overlap with the log end, a record that
 *  cannot be decoded or applied). */
int kb_meta_log_append_remote(kb_meta_t *meta, const uint8_t *buf, size_t len, char *err,
                              size_t err_size);
/** Write a snapshot of the image at the metadata offset (change_mu held): 0 or KB_E_IO. */
int kb_meta_log_snapshot(kb_meta_t *meta);
void kb_meta_log_close(kb_meta_t *meta);

#endif /* KB_META_INT_H */
