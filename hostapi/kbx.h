/*
 * kbx.h - the kmirror broker extension ABI ("kbx").
 *
 * This header is the whole contract between a Kafka-protocol broker (the host) and a plugin
 * shared object such as kmirror.so. It depends only on <stddef.h>, <stdint.h> and <stdbool.h>
 * and is written in C99 so that any host toolchain can include it.
 *
 * Shape (see docs/abi.md for the long form):
 *   - The plugin exports exactly one symbol, the function kbx_plugin_entry(), which returns a
 *     const kbx_plugin_desc_t *. The host validates the descriptor's first three members
 *     (struct_size, abi_major, abi_minor) before it reads anything else.
 *   - The host calls desc->init() with a const kbx_api_t * table of function pointers and an
 *     opaque kbx_host_t * handle. Every host service is reached through that table; the plugin
 *     never links against host symbols.
 *   - Every struct that crosses the boundary starts with uint32_t struct_size, uses fixed-width
 *     members only (no enum, no bool, no bitfields), has explicit padding, and only ever grows
 *     at the end. Arrays of such structs are passed as arrays of pointers so elements can grow.
 *   - Structs the plugin passes in (ops, descriptors): the host reads min(its size, struct_size)
 *     bytes and treats missing trailing members as zero/NULL. Structs the host fills (out
 *     parameters): the caller sets struct_size; the host writes no more than that many bytes.
 *
 * Versioning: KBX_ABI_MAJOR / KBX_ABI_MINOR. A host loads a plugin only if the majors are equal
 * and the plugin's minor is <= the host's minor. A minor release only appends members (to
 * kbx_api_t and to the structs); it never changes what an existing member means. A plugin that
 * uses a member added after x.0 tests KBX_API_HAS(api, member) first.
 *
 * Threads: every function states "@thread". "any" means any thread, including host callback
 * threads and host-lent threads. Host callbacks (RPC handlers, listeners, completions, timers)
 * run on host threads; they must not block and should only copy what they need and enqueue it.
 *
 * Ownership: pointers the host passes into a callback are borrowed until the callback returns.
 * Pointers the plugin passes to the host are copied by the host before the call returns, unless
 * the function says otherwise. Memory is never freed across the boundary except through the
 * mem_* functions of this table.
 *
 * Errors: functions return int32_t, KBX_OK (0) on success, a negative KBX_ERR_* otherwise.
 *
 * Change log
 *   1.0  First version: host info, fatal hook, logging, allocator, clocks, host-lent threads,
 *        latches, timers, metrics, broker config lookup, RPC handler registration with deferred
 *        responses, metadata and leadership listeners, partition log operations for mirrored
 *        partitions, ISR-truncation wait, leader-epoch bump, controller record writes, local and
 *        inter-broker request channels, authorization.
 *   1.1  log_open_txns() lists a replica's ongoing transactions (producer id and epoch, first
 *        offset, coordinator epoch) for the ABORT markers of a mirror failover;
 *        kbx_log_offsets_t.last_pid_reset_offset (offset of the newest MIRROR_PID_RESET batch)
 *        so a failover that resumes after a crash appends the reset exactly once.
 *   1.2  kbx_rpc_ops_t.config_resource_type: a plugin serves one config resource type of
 *        DescribeConfigs / IncrementalAlterConfigs (kmirror: the MIRROR resource).
 */
#ifndef KBX_H
#define KBX_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KBX_ABI_MAJOR 1
#define KBX_ABI_MINOR 2

/* ---------------------------------------------------------------------------------------------
 * Error codes (int32_t, negative). KBX_ERR_MAP(X) lists them with a description, for tables.
 * ------------------------------------------------------------------------------------------- */
#define KBX_OK              0
#define KBX_ERR_INVALID     (-1)  /**< invalid argument or malformed input */
#define KBX_ERR_NOMEM       (-2)  /**< allocation failed */
#define KBX_ERR_NOT_FOUND   (-3)  /**< no such key, partition, broker or handle */
#define KBX_ERR_NOT_LEADER  (-4)  /**< this broker is not the partition leader */
#define KBX_ERR_FENCED      (-5)  /**< the partition's leader epoch moved past the handle's */
#define KBX_ERR_CORRUPT     (-6)  /**< record batch framing or CRC is invalid */
#define KBX_ERR_OFFSET      (-7)  /**< offset out of range or batches out of order */
#define KBX_ERR_UNSUPPORTED (-8)  /**< the host does not support this request */
#define KBX_ERR_TIMEOUT     (-9)  /**< the operation timed out */
#define KBX_ERR_EXISTS      (-10) /**< already registered */
#define KBX_ERR_CANCELLED   (-11) /**< the operation or token was cancelled */
#define KBX_ERR_SHUTDOWN    (-12) /**< the host is shutting down */
#define KBX_ERR_IO          (-13) /**< storage error */
#define KBX_ERR_NETWORK     (-14) /**< the target broker or controller is unreachable */
#define KBX_ERR_STATE       (-15) /**< not allowed in the partition's current write mode */

#define KBX_ERR_MAP(X)                                                                             \
    X(KBX_OK, "success")                                                                           \
    X(KBX_ERR_INVALID, "invalid argument")                                                         \
    X(KBX_ERR_NOMEM, "out of memory")                                                              \
    X(KBX_ERR_NOT_FOUND, "not found")                                                              \
    X(KBX_ERR_NOT_LEADER, "this broker is not the partition leader")                               \
    X(KBX_ERR_FENCED, "partition leader epoch changed (handle fenced)")                            \
    X(KBX_ERR_CORRUPT, "record batch framing or CRC is invalid")                                   \
    X(KBX_ERR_OFFSET, "offset out of range or out of order")                                       \
    X(KBX_ERR_UNSUPPORTED, "not supported by this host")                                           \
    X(KBX_ERR_TIMEOUT, "timed out")                                                                \
    X(KBX_ERR_EXISTS, "already registered")                                                        \
    X(KBX_ERR_CANCELLED, "cancelled")                                                              \
    X(KBX_ERR_SHUTDOWN, "host is shutting down")                                                   \
    X(KBX_ERR_IO, "storage error")                                                                 \
    X(KBX_ERR_NETWORK, "broker or controller unreachable")                                         \
    X(KBX_ERR_STATE, "not allowed in the partition's write mode")

/* ---------------------------------------------------------------------------------------------
 * Opaque host handles. The plugin never dereferences them.
 * ------------------------------------------------------------------------------------------- */
typedef struct kbx_host kbx_host_t;           /**< one broker instance hosting one plugin */
typedef struct kbx_thread kbx_thread_t;       /**< a host-lent thread */
typedef struct kbx_latch kbx_latch_t;         /**< a wait/wake primitive */
typedef struct kbx_timer kbx_timer_t;         /**< a host timer */
typedef struct kbx_metric kbx_metric_t;       /**< a metric in the host's registry */
typedef struct kbx_rpc_reg kbx_rpc_reg_t;     /**< an RPC handler registration */
typedef struct kbx_token kbx_token_t;         /**< a deferred-response token */
typedef struct kbx_listener kbx_listener_t;   /**< a metadata or leadership listener */
typedef struct kbx_partition kbx_partition_t; /**< a local replica bound to a leader epoch */

/* ---------------------------------------------------------------------------------------------
 * Constants
 * ------------------------------------------------------------------------------------------- */

/** Log levels for log_enabled()/log_write(). */
#define KBX_LOG_ERROR 1
#define KBX_LOG_WARN  2
#define KBX_LOG_INFO  3
#define KBX_LOG_DEBUG 4
#define KBX_LOG_TRACE 5

/** Return values of a kbx_thread_fn. */
#define KBX_THREAD_CONTINUE 0 /**< call the function again */
#define KBX_THREAD_EXIT     1 /**< the thread ends; thread_join() returns */

/** kbx_metric_desc_t.type */
#define KBX_METRIC_COUNTER   1 /**< metric_record() adds the value (>= 0) */
#define KBX_METRIC_GAUGE     2 /**< metric_record() sets the value */
#define KBX_METRIC_HISTOGRAM 3 /**< metric_record() observes one sample */

/** Return values of kbx_rpc_ops_t.handle (besides a negative KBX_ERR_*). */
#define KBX_RPC_DONE    0 /**< complete_response() was called before handle returned */
#define KBX_RPC_PENDING 1 /**< the plugin will call complete_response() later */

/** kbx_topic_change_t.flags */
#define KBX_TOPIC_CREATED    0x1u /**< the topic is new (or this is a snapshot) */
#define KBX_TOPIC_DELETED    0x2u /**< the topic was deleted */
#define KBX_TOPIC_PARTITIONS 0x4u /**< partition_count changed */

/** kbx_broker_change_t.flags */
#define KBX_BROKER_REGISTERED   0x1u /**< registered and not fenced */
#define KBX_BROKER_UNREGISTERED 0x2u /**< left the cluster */
#define KBX_BROKER_FENCED       0x4u /**< registered but fenced */

/** kbx_metadata_delta_t.flags */
#define KBX_DELTA_SNAPSHOT 0x1u /**< the delta describes the whole image, not a change */

/** kbx_leadership_change_t.role */
#define KBX_ROLE_LEADER   1 /**< this broker became (or stays) the leader */
#define KBX_ROLE_FOLLOWER 2 /**< this broker is a follower */
#define KBX_ROLE_REMOVED  3 /**< this broker no longer hosts a replica */

/** partition_set_write_mode() modes. They apply to the leader's client write path only. */
#define KBX_WRITE_PENDING                                                                          \
    0                         /**< client writes get a retriable error (host default for topics    \
                                   with mirror.name) */
#define KBX_WRITE_READ_ONLY 1 /**< client writes get READ_ONLY_TOPIC (not retriable) */
#define KBX_WRITE_WRITABLE  2 /**< client writes are accepted; log_append() is refused */

/** kbx_control_batch_t.control_type. 7 is provisional (KIP-1279), see proto's table. */
#define KBX_CONTROL_ABORT            0
#define KBX_CONTROL_COMMIT           1
#define KBX_CONTROL_MIRROR_PID_RESET 7

/** wait_isr_truncation() flags */
#define KBX_ISR_WAIT_ALL_REPLICAS 0x1u /**< wait for every assigned replica, not only the ISR */

/** authorize() results (besides a negative KBX_ERR_*). */
#define KBX_AUTHZ_DENIED  0
#define KBX_AUTHZ_ALLOWED 1

/* ---------------------------------------------------------------------------------------------
 * Callback function types
 * ------------------------------------------------------------------------------------------- */

/** Body of a host-lent thread. Called repeatedly until it returns KBX_THREAD_EXIT. Each call
 *  does a bounded amount of work and may block in latch_wait(). @thread the lent thread */
typedef int32_t (*kbx_thread_fn)(void *arg);

/** Timer expiry. @thread host timer thread; must not block. */
typedef void (*kbx_timer_fn)(void *arg);

/** Completion of an asynchronous host operation. status is KBX_OK or a negative KBX_ERR_*.
 *  @thread a host thread; never the thread that started the operation before that call
 *  returned; must not block. */
typedef void (*kbx_done_fn)(void *arg, int32_t status);

/** Completion of a request sent through local_request()/broker_request(). On KBX_OK, body/len
 *  is the response body after the response header (it may still carry Kafka error codes);
 *  otherwise body is NULL. body is borrowed until the callback returns.
 *  @thread a host thread; same rules as kbx_done_fn. */
typedef void (*kbx_response_fn)(void *arg, int32_t status, const uint8_t *body, size_t len);

/** One broker configuration entry, for config_foreach(). key and value are borrowed.
 *  @thread the thread that called config_foreach(). */
typedef void (*kbx_config_fn)(void *arg, const char *key, const char *value);

/* ---------------------------------------------------------------------------------------------
 * Structs crossing the boundary. Sizes and offsets are pinned by tests/loader/abi_layout_test.c
 * (LP64). Never reorder, retype or remove a member; retire it under a _deprecated_ name.
 * ------------------------------------------------------------------------------------------- */

/** A Kafka topic id. */
typedef struct kbx_uuid {
    uint8_t bytes[16];
} kbx_uuid_t;

/** Facts about the host, filled by host_info(). */
typedef struct kbx_host_info {
    uint32_t struct_size; /**< set by the caller */
    int32_t broker_id;    /**< this broker's node id */
    char cluster_id[48];  /**< NUL-terminated cluster id ("" if not known yet) */
    char software[64];    /**< NUL-terminated host name and version, e.g. "kbroker 0.1.0" */
} kbx_host_info_t;

/** Describes a metric for metric_register(). All strings are copied by the host. */
typedef struct kbx_metric_desc {
    uint32_t struct_size;
    int32_t type;                    /**< KBX_METRIC_* */
    const char *group;               /**< e.g. "kafka.server.mirror" */
    const char *name;                /**< e.g. "FailedPartitionsCount" */
    const char *help;                /**< one-line description, may be NULL */
    const char *const *label_keys;   /**< label_count keys (may be NULL if 0) */
    const char *const *label_values; /**< label_count values */
    uint32_t label_count;
    uint32_t _pad0;
} kbx_metric_desc_t;

/** A request handed to kbx_rpc_ops_t.handle. Borrowed until handle returns. */
typedef struct kbx_rpc_request {
    uint32_t struct_size;
    int16_t api_key;
    int16_t api_version;
    int32_t correlation_id;
    int32_t _pad0;
    const char *client_id;   /**< NULL when the header carried a null client id */
    const char *principal;   /**< authenticated principal, e.g. "User:alice" */
    const char *client_host; /**< peer address as text */
    const char *listener;    /**< name of the listener the request arrived on */
    const uint8_t *body;     /**< request body after the request header */
    uint64_t body_len;
} kbx_rpc_request_t;

/** RPC handler ops, registered with rpc_register(); keep them static const.
 *  The host checks api_version against [min_version, max_version] before calling handle and
 *  closes the connection on other versions (as Kafka does for unknown versions). The host adds
 *  the response header (correlation id; header tagged fields from first_flexible_version on)
 *  and advertises the range in ApiVersions. */
typedef struct kbx_rpc_ops {
    uint32_t struct_size;
    int16_t api_key;
    int16_t min_version;
    int16_t max_version;
    int16_t first_flexible_version; /**< -1 if no version is flexible */
    uint32_t _pad0;
    /** Handle one request. The plugin either calls complete_response(token) before returning
     *  KBX_RPC_DONE, or returns KBX_RPC_PENDING and completes it later from any thread; it may
     *  store a per-request pointer in *token_ctx, which the host passes back to cancel.
     *  A negative return makes the host close the connection (token consumed).
     *  req is borrowed until return. @thread host request thread; must not block. */
    int32_t (*handle)(void *plugin_ctx, const kbx_rpc_request_t *req, kbx_token_t *token,
                      void **token_ctx);
    /** The client went away while the token was pending. Called at most once, never after
     *  complete_response() returned for this token. When cancel returns the token is gone and
     *  the plugin must not touch it. A complete_response() that races with cancel (it was
     *  entered after the host decided to cancel) returns KBX_ERR_CANCELLED and is harmless;
     *  the plugin makes its completion path and cancel mutually exclusive (one lock) so that
     *  it never calls complete_response after cancel returned. May be NULL: the host then
     *  keeps a disconnected client's token until complete_response, which discards it.
     *  @thread host network thread; must not block. */
    void (*cancel)(void *plugin_ctx, kbx_token_t *token, void *token_ctx);
    /** 1.2. 0: api_key is an API of the plugin's own (the key must be free). Non-zero, with
     *  api_key DescribeConfigs (32) or IncrementalAlterConfigs (44): the config resource type
     *  (Kafka's ConfigResource numbering; e.g. the provisional MIRROR type) whose resources the
     *  plugin serves in that API, which the host keeps serving for every other type. A request
     *  whose resources are all of this type, in a version within [min_version, max_version],
     *  goes to handle whole, on the broker that received it (never forwarded to the
     *  controller); the plugin answers every resource. Any other request (another type, mixed
     *  types, no resource, another version) is the host's, which answers resources of this type
     *  as it answers unknown types. One registration per (api_key, type) pair: KBX_ERR_EXISTS. */
    int32_t config_resource_type;
    uint32_t _pad1;
} kbx_rpc_ops_t;

/** A topic in a metadata delta. */
typedef struct kbx_topic_change {
    uint32_t struct_size;
    uint32_t flags; /**< KBX_TOPIC_* */
    kbx_uuid_t topic_id;
    const char *name;
    int32_t partition_count; /**< current count; 0 for a deleted topic */
    int32_t _pad0;
} kbx_topic_change_t;

/** A configuration change in a metadata delta (any config resource, Kafka's resource type
 *  numbering: 2 topic, 4 broker, ...; the provisional MIRROR type is in proto's table). */
typedef struct kbx_config_change {
    uint32_t struct_size;
    int32_t resource_type;
    const char *resource_name; /**< topic name, broker id as text, mirror name, ... */
    const char *key;
    const char *value; /**< NULL when the key was removed */
} kbx_config_change_t;

/** A broker in a metadata delta. */
typedef struct kbx_broker_change {
    uint32_t struct_size;
    int32_t broker_id;
    uint32_t flags; /**< KBX_BROKER_* */
    int32_t _pad0;
    const char *rack; /**< may be NULL */
} kbx_broker_change_t;

/** A plugin record (written with controller_write()) in a metadata delta, or one record to
 *  write. The controller keeps the latest value per (record_type, key). */
typedef struct kbx_record {
    uint32_t struct_size;
    int32_t record_type; /**< plugin-defined */
    const uint8_t *key;
    uint64_t key_len;
    const uint8_t *value; /**< NULL: delete the key */
    uint64_t value_len;
} kbx_record_t;

/** A metadata delta delivered to kbx_metadata_ops_t.on_delta. Everything is borrowed. */
typedef struct kbx_metadata_delta {
    uint32_t struct_size;
    uint32_t flags;          /**< KBX_DELTA_* */
    int64_t metadata_offset; /**< offset of the last metadata record included */
    const kbx_topic_change_t *const *topics;
    const kbx_config_change_t *const *configs;
    const kbx_broker_change_t *const *brokers;
    const kbx_record_t *const *records;
    uint32_t topic_count;
    uint32_t config_count;
    uint32_t broker_count;
    uint32_t record_count;
} kbx_metadata_delta_t;

/** Metadata listener ops. The first on_delta after registration has KBX_DELTA_SNAPSHOT and
 *  describes the whole current image. */
typedef struct kbx_metadata_ops {
    uint32_t struct_size;
    uint32_t _pad0;
    /** @thread host metadata thread; must not block; delta borrowed until return. */
    void (*on_delta)(void *plugin_ctx, const kbx_metadata_delta_t *delta);
} kbx_metadata_ops_t;

/** One partition whose local role or leader epoch changed. */
typedef struct kbx_leadership_change {
    uint32_t struct_size;
    int32_t role; /**< KBX_ROLE_* */
    kbx_uuid_t topic_id;
    const char *topic_name;
    int32_t partition;
    int32_t leader_id;
    int32_t leader_epoch;
    int32_t partition_epoch;
} kbx_leadership_change_t;

/** Leadership listener ops. The first call after registration lists every local replica. */
typedef struct kbx_leadership_ops {
    uint32_t struct_size;
    uint32_t _pad0;
    /** @thread host metadata thread; must not block; changes borrowed until return. */
    void (*on_change)(void *plugin_ctx, const kbx_leadership_change_t *const *changes,
                      uint32_t count);
} kbx_leadership_ops_t;

/** Offsets of a local replica, filled by log_offsets(). */
typedef struct kbx_log_offsets {
    uint32_t struct_size; /**< set by the caller */
    int32_t leader_epoch; /**< the partition's current leader epoch */
    int64_t log_start_offset;
    int64_t last_stable_offset;
    int64_t high_watermark;
    int64_t log_end_offset;
    int32_t latest_cached_epoch; /**< newest epoch in the epoch cache, -1 if empty */
    int32_t _pad0;
    /** 1.1: offset of the newest MIRROR_PID_RESET control batch in the log, -1 if none. A 1.0
     *  host does not write it: callers check KBX_API_HAS(api, log_open_txns) first. */
    int64_t last_pid_reset_offset;
} kbx_log_offsets_t;

/** Result of log_append()/log_append_control(). */
typedef struct kbx_append_result {
    uint32_t struct_size; /**< set by the caller */
    int32_t batch_count;
    int64_t first_offset;
    int64_t last_offset;
    int64_t log_end_offset;
} kbx_append_result_t;

/** A control batch for log_append_control(); the host builds and frames it. */
typedef struct kbx_control_batch {
    uint32_t struct_size;
    int16_t control_type;   /**< KBX_CONTROL_* */
    int16_t producer_epoch; /**< -1 for MIRROR_PID_RESET */
    int64_t producer_id;    /**< -1 for MIRROR_PID_RESET */
    int32_t coordinator_epoch;
    int32_t leader_epoch; /**< partition leader epoch stamped into the batch */
    int64_t timestamp_ms; /**< -1: the host's wall clock */
} kbx_control_batch_t;

/** One ongoing (open) transaction of a local replica, passed to a kbx_open_txn_fn (1.1). */
typedef struct kbx_open_txn {
    uint32_t struct_size;
    int16_t producer_epoch; /**< the producer's current epoch */
    int16_t _pad0;
    int64_t producer_id;
    int64_t first_offset;      /**< offset of the transaction's first batch in this log */
    int32_t coordinator_epoch; /**< of the producer's last transaction marker, -1 if none */
    int32_t _pad1;
} kbx_open_txn_t;

/** Called once per open transaction by log_open_txns(); txn is borrowed until return.
 *  @thread the caller of log_open_txns(). */
typedef void (*kbx_open_txn_fn)(void *arg, const kbx_open_txn_t *txn);

/* ---------------------------------------------------------------------------------------------
 * The host API table. Append-only; the host fills every 1.0 member.
 * ------------------------------------------------------------------------------------------- */
typedef struct kbx_api {
    uint32_t struct_size; /**< sizeof the host's table */
    uint16_t abi_major;   /**< the host's KBX_ABI_MAJOR */
    uint16_t abi_minor;   /**< the host's KBX_ABI_MINOR */

    /* --- host ----------------------------------------------------------------------------- */

    /** Fill *info (up to info->struct_size bytes). @thread any. Returns KBX_OK or
     *  KBX_ERR_INVALID. */
    int32_t (*host_info)(kbx_host_t *host, kbx_host_info_t *info);

    /** The plugin found its own state corrupt and cannot continue. The host logs msg with
     *  file:line and stops the broker (or, in a test host, fails the test). Does not return.
     *  Strings borrowed. @thread any. */
    void (*fatal)(kbx_host_t *host, const char *file, int32_t line, const char *msg);

    /* --- logging -------------------------------------------------------------------------- */

    /** Nonzero if messages of level (KBX_LOG_*) for component would be written. @thread any */
    int32_t (*log_enabled)(kbx_host_t *host, int32_t level, const char *component);

    /** Write one preformatted line (no trailing newline) to the broker log. component is a
     *  short tag such as "kmirror.coord". Strings borrowed. @thread any */
    void (*log_write)(kbx_host_t *host, int32_t level, const char *component, const char *msg);

    /* --- memory: counted in the host; free only with mem_free ------------------------------- */

    /** malloc(3) semantics; NULL on failure. @thread any */
    void *(*mem_alloc)(kbx_host_t *host, size_t size);
    /** calloc(3) semantics (overflow-checked); NULL on failure. @thread any */
    void *(*mem_calloc)(kbx_host_t *host, size_t nmemb, size_t size);
    /** realloc(3) semantics; on failure ptr stays valid and NULL is returned. @thread any */
    void *(*mem_realloc)(kbx_host_t *host, void *ptr, size_t size);
    /** free(3) semantics (NULL is fine) for memory from mem_*. @thread any */
    void (*mem_free)(kbx_host_t *host, void *ptr);

    /* --- clocks --------------------------------------------------------------------------- */

    /** Monotonic time in nanoseconds (arbitrary origin). @thread any */
    int64_t (*clock_monotonic_ns)(kbx_host_t *host);
    /** Wall-clock time in milliseconds since the Unix epoch. @thread any */
    int64_t (*clock_wall_ms)(kbx_host_t *host);

    /* --- host-lent threads and latches ---------------------------------------------------- */

    /** Start a host thread called name (copied) that calls fn(arg) until it returns
     *  KBX_THREAD_EXIT. *out is owned by the plugin until thread_join(). A test host may run
     *  fn as a stepped task instead of on an OS thread: fn must not assume it runs in parallel
     *  with its starter. @thread any. Errors: KBX_ERR_NOMEM, KBX_ERR_SHUTDOWN. */
    int32_t (*thread_start)(kbx_host_t *host, const char *name, kbx_thread_fn fn, void *arg,
                            kbx_thread_t **out);
    /** Wait until the thread's fn returned KBX_THREAD_EXIT, then free the handle. The plugin
     *  first makes fn return EXIT (stop flag + latch_set). Must not be called from the thread
     *  itself. @thread any other. Errors: KBX_ERR_INVALID. */
    int32_t (*thread_join)(kbx_host_t *host, kbx_thread_t *thread);

    /** Create a latch (a one-bit event, initially clear). *out is owned by the plugin until
     *  latch_destroy(). @thread any. Errors: KBX_ERR_NOMEM. */
    int32_t (*latch_create)(kbx_host_t *host, kbx_latch_t **out);
    /** Set the latch and wake its waiter. Never blocks. @thread any */
    void (*latch_set)(kbx_host_t *host, kbx_latch_t *latch);
    /** Wait until the latch is set or timeout_ms passed (0: poll; < 0: no timeout), then clear
     *  it. Returns KBX_OK if it was set, KBX_ERR_TIMEOUT otherwise. Wake-ups can be early: the
     *  caller re-checks its own condition. At most one thread waits on a latch at a time.
     *  @thread any (normally a host-lent thread). */
    int32_t (*latch_wait)(kbx_host_t *host, kbx_latch_t *latch, int64_t timeout_ms);
    /** Destroy a latch nobody waits on. @thread any */
    void (*latch_destroy)(kbx_host_t *host, kbx_latch_t *latch);

    /* --- timers --------------------------------------------------------------------------- */

    /** Call fn(arg) after delay_ms, then every period_ms if period_ms > 0. *out is owned by
     *  the plugin until timer_cancel(), which must be called even for a one-shot timer that
     *  fired. @thread any. Errors: KBX_ERR_NOMEM, KBX_ERR_INVALID. */
    int32_t (*timer_start)(kbx_host_t *host, int64_t delay_ms, int64_t period_ms, kbx_timer_fn fn,
                           void *arg, kbx_timer_t **out);
    /** Cancel and free a timer. On return fn is not running and will not run again (when
     *  called from fn itself, only the latter). @thread any */
    void (*timer_cancel)(kbx_host_t *host, kbx_timer_t *timer);

    /* --- metrics -------------------------------------------------------------------------- */

    /** Register a metric in the host's registry (desc copied). *out is owned by the plugin
     *  until metric_unregister(). @thread any. Errors: KBX_ERR_NOMEM, KBX_ERR_INVALID,
     *  KBX_ERR_EXISTS (same group, name and labels already registered). */
    int32_t (*metric_register)(kbx_host_t *host, const kbx_metric_desc_t *desc, kbx_metric_t **out);
    /** Record a value: counter adds, gauge sets, histogram observes. @thread any */
    void (*metric_record)(kbx_host_t *host, kbx_metric_t *metric, double value);
    /** Remove and free a metric. @thread any */
    void (*metric_unregister)(kbx_host_t *host, kbx_metric_t *metric);

    /* --- broker configuration ------------------------------------------------------------- */

    /** Look up a broker configuration key (server.properties plus dynamic broker configs) and
     *  copy its value, NUL-terminated and truncated to size, into buf (buf may be NULL if size
     *  is 0). Returns the full length of the value like snprintf, or KBX_ERR_NOT_FOUND when the
     *  key is not set. Secrets are returned as stored; the plugin never logs them.
     *  @thread any */
    int32_t (*config_get)(kbx_host_t *host, const char *key, char *buf, size_t size);
    /** Call fn for every set broker key that starts with prefix (borrowed strings), in no
     *  particular order. Returns the number of keys or a negative KBX_ERR_*. @thread any */
    int32_t (*config_foreach)(kbx_host_t *host, const char *prefix, kbx_config_fn fn, void *arg);

    /* --- RPC handlers --------------------------------------------------------------------- */

    /** Handle ops->api_key on every listener. ops is copied (min of the sizes); plugin_ctx is
     *  passed to its callbacks. *out is owned by the plugin until rpc_unregister().
     *  @thread any. Errors: KBX_ERR_EXISTS (key taken), KBX_ERR_INVALID, KBX_ERR_NOMEM. */
    int32_t (*rpc_register)(kbx_host_t *host, const kbx_rpc_ops_t *ops, void *plugin_ctx,
                            kbx_rpc_reg_t **out);
    /** Stop routing the key to the plugin. On return no handle call is running or will start.
     *  Pending tokens stay valid: the plugin still completes them (or they are cancelled).
     *  @thread any but a handler. */
    void (*rpc_unregister)(kbx_host_t *host, kbx_rpc_reg_t *reg);
    /** Send the response body (after the response header, which the host writes) for token
     *  and consume the token. bytes are copied. Exactly once per token that was not cancelled.
     *  Returns KBX_OK, or KBX_ERR_CANCELLED when it raced with cancel (see kbx_rpc_ops_t).
     *  @thread any. */
    int32_t (*complete_response)(kbx_host_t *host, kbx_token_t *token, const uint8_t *bytes,
                                 size_t len);

    /* --- listeners -------------------------------------------------------------------------- */

    /** Subscribe to metadata deltas (topics, configs, brokers, plugin records). ops copied.
     *  *out owned by the plugin until listener_unregister(). @thread any. Errors: NOMEM. */
    int32_t (*metadata_listen)(kbx_host_t *host, const kbx_metadata_ops_t *ops, void *plugin_ctx,
                               kbx_listener_t **out);
    /** Subscribe to changes of this broker's replicas' roles and leader epochs. As above. */
    int32_t (*leadership_listen)(kbx_host_t *host, const kbx_leadership_ops_t *ops,
                                 void *plugin_ctx, kbx_listener_t **out);
    /** Unsubscribe and free. On return no callback of this listener is running or will run.
     *  Must not be called from that listener's callback. @thread any */
    void (*listener_unregister)(kbx_host_t *host, kbx_listener_t *listener);

    /* --- partition logs (local replicas) --------------------------------------------------- */

    /** Get a handle on the local replica of (topic_id, partition) bound to leader_epoch (-1:
     *  the current one). Every later call on the handle fails with KBX_ERR_FENCED once the
     *  partition's leader epoch differs from the bound one; acquire again after a change.
     *  *out is owned by the plugin until partition_release(). @thread any.
     *  Errors: KBX_ERR_NOT_FOUND (no local replica), KBX_ERR_FENCED, KBX_ERR_NOMEM. */
    int32_t (*partition_acquire)(kbx_host_t *host, const kbx_uuid_t *topic_id, int32_t partition,
                                 int32_t leader_epoch, kbx_partition_t **out);
    /** Release a handle. @thread any */
    void (*partition_release)(kbx_host_t *host, kbx_partition_t *part);

    /** Fill *out (up to out->struct_size bytes) with log start, LSO, HW, LEO and epochs.
     *  Works on followers too. @thread any. Errors: KBX_ERR_FENCED, KBX_ERR_NOT_FOUND. */
    int32_t (*log_offsets)(kbx_host_t *host, kbx_partition_t *part, kbx_log_offsets_t *out);

    /** Append fetched record batches (magic 2) as they are: offsets, partition leader epochs,
     *  producer ids and CRCs are kept. The host validates framing and CRC of every batch,
     *  requires the first base offset >= the log end offset and increasing offsets, updates the
     *  epoch cache and producer state as a follower append does, and copies the bytes before
     *  returning. Leader only; refused in KBX_WRITE_WRITABLE. out may be NULL.
     *  @thread any. Errors: KBX_ERR_CORRUPT, KBX_ERR_OFFSET, KBX_ERR_NOT_LEADER,
     *  KBX_ERR_FENCED, KBX_ERR_STATE, KBX_ERR_IO, KBX_ERR_INVALID (not magic 2). */
    int32_t (*log_append)(kbx_host_t *host, kbx_partition_t *part, const uint8_t *batches,
                          size_t len, kbx_append_result_t *out);

    /** Build a control batch from *batch and append it at the log end (any write mode). For
     *  KBX_CONTROL_MIRROR_PID_RESET every replica expires all producer state before it.
     *  Leader only. out may be NULL. @thread any. Errors: as log_append, plus KBX_ERR_INVALID.
     */
    int32_t (*log_append_control)(kbx_host_t *host, kbx_partition_t *part,
                                  const kbx_control_batch_t *batch, kbx_append_result_t *out);

    /** Remove every record at offset >= offset (no-op if offset >= LEO), trim the epoch cache
     *  and producer state, and lower the high watermark if needed. Whole record batches are
     *  removed, as in Kafka: an offset inside a batch removes that whole batch, so the log
     *  then ends at the batch's base offset (the new LEO, which log_offsets reports, is below
     *  offset; never below the log start). Followers truncate to the same place, and
     *  wait_isr_truncation(offset) covers it. Leader only.
     *  @thread any. Errors: KBX_ERR_OFFSET (below log start), NOT_LEADER, FENCED, IO. */
    int32_t (*log_truncate)(kbx_host_t *host, kbx_partition_t *part, int64_t offset);

    /** Epoch-cache lookup exactly as Kafka answers OffsetsForLeaderEpoch: epoch == the newest
     *  cached epoch gives (epoch, LEO); epoch -1 or newer than every cached epoch gives
     *  (-1, -1); epoch older than every cached epoch gives (epoch, start offset of the oldest);
     *  otherwise (largest cached epoch <= epoch, start offset of the next larger epoch).
     *  @thread any. Errors: KBX_ERR_FENCED, KBX_ERR_NOT_FOUND. */
    int32_t (*log_epoch_end_offset)(kbx_host_t *host, kbx_partition_t *part, int32_t epoch,
                                    int32_t *out_epoch, int64_t *out_end_offset);

    /** Raise the log start offset (as DeleteRecords does) to offset <= HW; empty logs may be
     *  moved to any offset (the new LEO). Leader only. @thread any.
     *  Errors: KBX_ERR_OFFSET, NOT_LEADER, FENCED, IO. */
    int32_t (*log_set_start)(kbx_host_t *host, kbx_partition_t *part, int64_t offset);

    /** Set how the leader answers client writes (KBX_WRITE_*). Not persisted: a new leader
     *  starts with KBX_WRITE_PENDING for every topic that has mirror.name.
     *  @thread any. Errors: KBX_ERR_INVALID, NOT_LEADER, FENCED. */
    int32_t (*partition_set_write_mode)(kbx_host_t *host, kbx_partition_t *part, int32_t mode);

    /* --- asynchronous cluster operations ----------------------------------------------------
     * Each returns KBX_OK when started; then done/cb runs exactly once, within timeout_ms plus
     * scheduling delay (status KBX_ERR_TIMEOUT), or with KBX_ERR_SHUTDOWN when the host stops.
     * On an error return the callback never runs. Borrowed inputs are copied before return. */

    /** Complete once every ISR member (every assigned replica with KBX_ISR_WAIT_ALL_REPLICAS)
     *  holds no record at or above offset that differs from the leader's log, i.e. followers
     *  truncated after the leader's log_truncate(offset). Leader only. @thread any. */
    int32_t (*wait_isr_truncation)(kbx_host_t *host, kbx_partition_t *part, int64_t offset,
                                   uint32_t flags, int64_t timeout_ms, kbx_done_fn done, void *arg);

    /** Ask the controller to raise the partition's leader epoch to at least min_epoch (and at
     *  least by one). Completes when this broker has applied the new epoch; the handle is then
     *  fenced and the leadership listener reports the new epoch. @thread any. */
    int32_t (*leader_epoch_bump)(kbx_host_t *host, kbx_partition_t *part, int32_t min_epoch,
                                 int64_t timeout_ms, kbx_done_fn done, void *arg);

    /** Append plugin records atomically to the cluster metadata log through the controller.
     *  They reach every broker's metadata listeners as kbx_metadata_delta_t.records.
     *  @thread any. */
    int32_t (*controller_write)(kbx_host_t *host, const kbx_record_t *const *records,
                                uint32_t count, int64_t timeout_ms, kbx_done_fn done, void *arg);

    /* --- request channels --------------------------------------------------------------------
     * body is an encoded Kafka request body (no header); the host adds the header, applies its
     * own version and flexible-header rules, and copies body before returning. */

    /** Send a request to this broker's own cluster as the broker's internal principal, as if
     *  received on an internal listener (forwarded to the controller where needed). Used for
     *  admin actions: CreateTopics, IncrementalAlterConfigs, CreateAcls, OffsetCommit, ...
     *  @thread any. */
    int32_t (*local_request)(kbx_host_t *host, int16_t api_key, int16_t api_version,
                             const uint8_t *body, size_t len, int64_t timeout_ms,
                             kbx_response_fn cb, void *arg);

    /** Send a request to broker broker_id of this cluster over the inter-broker listener.
     *  @thread any. Errors at start: KBX_ERR_NOT_FOUND (unknown broker). */
    int32_t (*broker_request)(kbx_host_t *host, int32_t broker_id, int16_t api_key,
                              int16_t api_version, const uint8_t *body, size_t len,
                              int64_t timeout_ms, kbx_response_fn cb, void *arg);

    /* --- authorization ---------------------------------------------------------------------- */

    /** Ask the broker's authorizer whether principal (from client_host, may be NULL) may do
     *  operation (Kafka AclOperation code) on the resource (Kafka resource type code, literal
     *  name). Returns KBX_AUTHZ_ALLOWED, KBX_AUTHZ_DENIED or a negative KBX_ERR_*. Strings
     *  borrowed. @thread any; may take a short lock. */
    int32_t (*authorize)(kbx_host_t *host, const char *principal, const char *client_host,
                         int32_t resource_type, const char *resource_name, int32_t operation);

    /* --- 1.1 -------------------------------------------------------------------------------- */

    /** Call fn(arg, txn) for every transaction of the local replica that is still open (a
     *  transactional batch with no COMMIT/ABORT marker or MIRROR_PID_RESET after it), in no
     *  particular order, after the host released its own locks. Works on followers too.
     *  Returns the number of transactions or a negative KBX_ERR_*. @thread any.
     *  Errors: KBX_ERR_FENCED, KBX_ERR_NOT_FOUND, KBX_ERR_NOMEM, KBX_ERR_INVALID. */
    int32_t (*log_open_txns)(kbx_host_t *host, kbx_partition_t *part, kbx_open_txn_fn fn,
                             void *arg);
} kbx_api_t;

/** Size of kbx_api_t in ABI 1.0 (everything up to authorize). */
#define KBX_API_SIZE_1_0 (offsetof(kbx_api_t, authorize) + sizeof(void (*)(void)))
/** Size of kbx_api_t in ABI 1.1 (everything up to log_open_txns). */
#define KBX_API_SIZE_1_1 (offsetof(kbx_api_t, log_open_txns) + sizeof(void (*)(void)))

/** True when api provides member: it lies inside api->struct_size and is not NULL. */
#define KBX_API_HAS(api, member)                                                                   \
    ((api) != NULL &&                                                                              \
     offsetof(kbx_api_t, member) + sizeof((api)->member) <= (size_t)(api)->struct_size &&          \
     (api)->member != NULL)

/* ---------------------------------------------------------------------------------------------
 * The plugin descriptor
 * ------------------------------------------------------------------------------------------- */

/** Set up the plugin for host. On success store the plugin context in *plugin_ctx (passed to
 *  every callback and to fini) and return 0. On failure write a NUL-terminated reason into
 *  errbuf (caller-owned, errbuf_size bytes), undo everything and return a negative code.
 *  api and host stay valid until fini returns. @thread host main thread. */
typedef int32_t (*kbx_plugin_init_fn)(const kbx_api_t *api, kbx_host_t *host, void **plugin_ctx,
                                      char *errbuf, size_t errbuf_size);

/** Tear the plugin down: unregister handlers, drain, join lent threads, unregister listeners,
 *  free. When it returns nothing of the plugin runs. @thread host main thread. */
typedef void (*kbx_plugin_fini_fn)(void *plugin_ctx);

typedef struct kbx_plugin_desc {
    uint32_t struct_size; /**< sizeof(kbx_plugin_desc_t) as the plugin was built */
    uint16_t abi_major;   /**< KBX_ABI_MAJOR the plugin was built against */
    uint16_t abi_minor;   /**< KBX_ABI_MINOR the plugin was built against */
    const char *name;     /**< e.g. "kmirror" */
    const char *version;  /**< e.g. "0.1.0" */
    const char *build_id; /**< e.g. a git sha; may be "" */
    kbx_plugin_init_fn init;
    kbx_plugin_fini_fn fini;
} kbx_plugin_desc_t;

/** Size of kbx_plugin_desc_t in ABI 1.0 (everything up to fini). */
#define KBX_PLUGIN_DESC_SIZE_1_0 (offsetof(kbx_plugin_desc_t, fini) + sizeof(void (*)(void)))

/** Name of the one symbol a plugin exports. */
#define KBX_PLUGIN_ENTRY_SYMBOL "kbx_plugin_entry"

/** The plugin's entry point: returns its static descriptor (never NULL). @thread host main. */
const kbx_plugin_desc_t *kbx_plugin_entry(void);

typedef const kbx_plugin_desc_t *(*kbx_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* KBX_H */
