#include "kp_state.h"

#include <stdlib.h>
#include <string.h>

#include "kp_murmur2.h"
#include "kp_reader.h"
#include "mirror_state.pb-c.h"

typedef Kmirror__State__StateValue pb_value_t;
typedef Kmirror__State__LastMirrorEpoch pb_lme_t;
typedef Kmirror__State__PartitionState pb_partition_t;
typedef Kmirror__State__Mirror pb_mirror_t;
typedef Kmirror__State__SyncedTopicConfigs pb_topic_configs_t;
typedef Kmirror__State__AclBinding pb_acl_t;
typedef Kmirror__State__SyncedAcls pb_acls_t;

/* The oneof field number of each record type's body is 15 + type (see the .proto). */
#define KP_STATE_ONEOF_BASE 15

static inline int kp_state_fail(const char **errstr, int err, const char *why)
{
    if (errstr)
        *errstr = why;
    return err;
}

/* ---- partition states -------------------------------------------------------------------- */

static const struct {
    int value;
    const char *name;
} kp_state_pstates[] = {
    {KP_PSTATE_UNKNOWN, "UNKNOWN"},
    {KP_PSTATE_PREPARING, "PREPARING"},
    {KP_PSTATE_EPOCH_FENCING, "EPOCH_FENCING"},
    {KP_PSTATE_MIRRORING, "MIRRORING"},
    {KP_PSTATE_PAUSING, "PAUSING"},
    {KP_PSTATE_PAUSED, "PAUSED"},
    {KP_PSTATE_STOPPING, "STOPPING"},
    {KP_PSTATE_STOPPED, "STOPPED"},
    {KP_PSTATE_FAILED, "FAILED"},
};

const char *kp_state_pstate_name(int state)
{
    size_t i;
    for (i = 0; i < sizeof(kp_state_pstates) / sizeof(kp_state_pstates[0]); i++)
        if (kp_state_pstates[i].value == state)
            return kp_state_pstates[i].name;
    return NULL;
}

int kp_state_pstate_from_name(const char *name)
{
    size_t i;
    if (!name)
        return -2;
    /* Older names of the same step (the KIP's wiki and prototype). */
    if (strcmp(name, "LOG_TRUNCATION") == 0 || strcmp(name, "LOG_ALIGNMENT") == 0)
        return KP_PSTATE_PREPARING;
    for (i = 0; i < sizeof(kp_state_pstates) / sizeof(kp_state_pstates[0]); i++)
        if (strcmp(kp_state_pstates[i].name, name) == 0)
            return kp_state_pstates[i].value;
    return -2;
}

/* ---- keys -------------------------------------------------------------------------------- */

static bool kp_state_type_known(int type)
{
    return type >= 1 && type <= KP_STATE_REC_MAX;
}

bool kp_state_key_has_topic(int type)
{
    return type == KP_STATE_REC_LAST_MIRROR_EPOCH || type == KP_STATE_REC_PARTITION_STATE ||
           type == KP_STATE_REC_SYNCED_TOPIC_CONFIGS;
}

bool kp_state_key_has_partition(int type)
{
    return type == KP_STATE_REC_LAST_MIRROR_EPOCH || type == KP_STATE_REC_PARTITION_STATE;
}

static bool kp_state_uuid_is_zero(const kp_uuid_t *u)
{
    static const kp_uuid_t zero;
    return memcmp(u->b, zero.b, sizeof(zero.b)) == 0;
}

size_t kp_state_key_size(const kp_state_key_t *key)
{
    size_t n;
    if (!kp_state_type_known(key->type))
        return 0;
    n = 2 + 2 + (key->mirror.len > 0 ? (size_t)key->mirror.len : 0);
    if (kp_state_key_has_topic(key->type))
        n += 16;
    if (kp_state_key_has_partition(key->type))
        n += 4;
    return n;
}

int kp_state_key_encode(kp_writer_t *wr, const kp_state_key_t *key)
{
    if (!kp_state_type_known(key->type))
        return KP_E_UNSUPPORTED;
    if (key->mirror.len < 1 || key->mirror.len > KP_STATE_MIRROR_NAME_MAX || !key->mirror.ptr)
        return KP_E_INVALID;
    if (kp_state_key_has_topic(key->type) && kp_state_uuid_is_zero(&key->topicId))
        return KP_E_INVALID;
    if (kp_state_key_has_partition(key->type) && key->partition < 0)
        return KP_E_INVALID;
    kp_write_int16(wr, key->type);
    kp_write_int16(wr, (int16_t)key->mirror.len);
    kp_write_raw(wr, key->mirror.ptr, (size_t)key->mirror.len);
    if (kp_state_key_has_topic(key->type))
        kp_write_uuid(wr, &key->topicId);
    if (kp_state_key_has_partition(key->type))
        kp_write_int32(wr, key->partition);
    return wr->err;
}

int kp_state_key_parse(const void *buf, size_t len, kp_state_key_t *key, const char **errstr)
{
    kp_reader_t rd;
    int16_t nlen;

    memset(key, 0, sizeof(*key));
    key->mirror = KP_STR_NULL;
    kp_reader_init(&rd, buf, len);
    key->type = kp_read_int16(&rd);
    if (rd.err)
        return kp_state_fail(errstr, KP_E_TRUNCATED, "key shorter than its record type");
    if (key->type < 0)
        return kp_state_fail(errstr, KP_E_CORRUPT, "negative record type");
    if (!kp_state_type_known(key->type))
        return kp_state_fail(errstr, KP_E_UNSUPPORTED, "unknown record type (newer writer?)");
    nlen = kp_read_int16(&rd);
    if (rd.err)
        return kp_state_fail(errstr, KP_E_TRUNCATED, "key ends before the mirror name length");
    if (nlen < 1 || nlen > KP_STATE_MIRROR_NAME_MAX)
        return kp_state_fail(errstr, KP_E_CORRUPT, "mirror name length out of range");
    key->mirror.ptr = (const char *)kp_read_raw(&rd, (size_t)nlen);
    if (!key->mirror.ptr) {
        key->mirror = KP_STR_NULL;
        return kp_state_fail(errstr, KP_E_TRUNCATED, "key ends inside the mirror name");
    }
    key->mirror.len = nlen;
    if (kp_state_key_has_topic(key->type)) {
        kp_read_uuid(&rd, &key->topicId);
        if (rd.err)
            return kp_state_fail(errstr, KP_E_TRUNCATED, "key ends inside the topic id");
        if (kp_state_uuid_is_zero(&key->topicId))
            return kp_state_fail(errstr, KP_E_CORRUPT, "zero topic id");
    }
    if (kp_state_key_has_partition(key->type)) {
        key->partition = kp_read_int32(&rd);
        if (rd.err)
            return kp_state_fail(errstr, KP_E_TRUNCATED, "key ends inside the partition");
        if (key->partition < 0)
            return kp_state_fail(errstr, KP_E_CORRUPT, "negative partition");
    }
    if (kp_reader_remaining(&rd))
        return kp_state_fail(errstr, KP_E_TRAILING, "bytes after the key");
    return 0;
}

int32_t kp_state_mirror_partition(kp_str_t mirror, int32_t num_partitions)
{
    if (mirror.len < 0 || (mirror.len > 0 && !mirror.ptr))
        return -1;
    return kp_murmur2_partition(mirror.ptr, (size_t)mirror.len, num_partitions);
}

int32_t kp_state_key_partition(const kp_state_key_t *key, int32_t num_partitions)
{
    uint8_t buf[KP_STATE_KEY_MAX_SIZE];
    kp_writer_t wr;

    if (!kp_state_key_has_partition(key->type)) {
        if (!kp_state_type_known(key->type))
            return -1;
        return kp_state_mirror_partition(key->mirror, num_partitions);
    }
    kp_writer_init_fixed(&wr, buf, sizeof(buf));
    if (kp_state_key_encode(&wr, key))
        return -1;
    return kp_murmur2_partition(wr.buf, wr.len, num_partitions);
}

/* ---- values: C <-> protobuf --------------------------------------------------------------- */

void kp_state_value_init(kp_state_value_t *v, int16_t type)
{
    memset(v, 0, sizeof(*v));
    v->type = type;
    v->format_version = KP_STATE_FORMAT_VERSION;
    v->min_reader_version = KP_STATE_FORMAT_MIN_READER_VERSION;
    switch (type) {
    case KP_STATE_REC_LAST_MIRROR_EPOCH:
        v->u.lme.last_mirror_epoch = -1;
        v->u.lme.last_mirror_offset = -1;
        v->u.lme.source_cluster_id = KP_STR_NULL;
        v->u.lme.update_time_ms = -1;
        break;
    case KP_STATE_REC_PARTITION_STATE:
        v->u.partition.state = KP_PSTATE_UNKNOWN;
        v->u.partition.leader_epoch = -1;
        v->u.partition.last_mirrored_epoch = -1;
        v->u.partition.last_mirrored_offset = -1;
        v->u.partition.error_message = KP_STR_NULL;
        v->u.partition.previous_state = -1;
        v->u.partition.update_time_ms = -1;
        v->u.partition.source_cluster_id = KP_STR_NULL;
        break;
    case KP_STATE_REC_MIRROR:
        v->u.mirror.creation_time_ms = -1;
        v->u.mirror.source_cluster_id = KP_STR_NULL;
        v->u.mirror.update_time_ms = -1;
        break;
    case KP_STATE_REC_SYNCED_TOPIC_CONFIGS:
        v->u.topic_configs.topic_name = KP_STR_NULL;
        v->u.topic_configs.update_time_ms = -1;
        break;
    case KP_STATE_REC_SYNCED_ACLS:
        v->u.acls.update_time_ms = -1;
        break;
    default:
        break;
    }
}

/*
 * Encoding needs NUL-terminated copies of our length-delimited strings and pointer arrays for
 * repeated fields. They come from one scratch block list allocated through the hook.
 */
typedef struct kp_state_scratch_s {
    const kp_alloc_t *al;
    void *blocks[64];
    size_t n;
    int err;
} kp_state_scratch_t;

static void *kp_state_scratch_alloc(kp_state_scratch_t *sc, size_t n)
{
    void *p;
    if (sc->err)
        return NULL;
    if (sc->n == sizeof(sc->blocks) / sizeof(sc->blocks[0])) {
        sc->err = KP_E_NOMEM;
        return NULL;
    }
    p = sc->al && sc->al->alloc ? sc->al->alloc(sc->al->opaque, n ? n : 1) : malloc(n ? n : 1);
    if (!p) {
        sc->err = KP_E_NOMEM;
        return NULL;
    }
    sc->blocks[sc->n++] = p;
    return p;
}

static void kp_state_scratch_free(kp_state_scratch_t *sc)
{
    while (sc->n > 0) {
        void *p = sc->blocks[--sc->n];
        if (sc->al && sc->al->free)
            sc->al->free(sc->al->opaque, p);
        else
            free(p);
    }
}

/*
 * Total string bytes (with NULs) of a value, so all its strings fit one scratch block.
 * Returns SIZE_MAX for a string with a NUL byte inside (not representable in protobuf-c's
 * char * strings) or a bad length.
 */
static size_t kp_state_str_need(kp_str_t s)
{
    if (s.len < 0)
        return 0;
    if (s.len > 0 && (!s.ptr || memchr(s.ptr, 0, (size_t)s.len)))
        return SIZE_MAX;
    return (size_t)s.len + 1;
}

typedef struct kp_state_strpool_s {
    char *p;
    size_t left;
} kp_state_strpool_t;

/* NULL for a null string. The pool was sized by kp_state_str_need(). */
static char *kp_state_cstr(kp_state_strpool_t *sp, kp_str_t s)
{
    char *c;
    if (s.len < 0)
        return NULL;
    c = sp->p;
    if (s.len > 0)
        memcpy(c, s.ptr, (size_t)s.len);
    c[s.len] = '\0';
    sp->p += (size_t)s.len + 1;
    sp->left -= (size_t)s.len + 1;
    return c;
}

static size_t kp_state_add(size_t a, size_t b)
{
    return (a == SIZE_MAX || b == SIZE_MAX || a > SIZE_MAX - 1 - b) ? SIZE_MAX : a + b;
}

/* Bytes of string storage value @p v needs, SIZE_MAX if it cannot be encoded. */
static size_t kp_state_value_str_need(const kp_state_value_t *v)
{
    size_t n = 0;
    int32_t i;

    switch (v->type) {
    case KP_STATE_REC_LAST_MIRROR_EPOCH:
        n = kp_state_str_need(v->u.lme.source_cluster_id);
        break;
    case KP_STATE_REC_PARTITION_STATE:
        n = kp_state_add(kp_state_str_need(v->u.partition.error_message),
                         kp_state_str_need(v->u.partition.source_cluster_id));
        break;
    case KP_STATE_REC_MIRROR:
        n = kp_state_str_need(v->u.mirror.source_cluster_id);
        break;
    case KP_STATE_REC_SYNCED_TOPIC_CONFIGS:
        if (v->u.topic_configs.key_cnt < 0 ||
            (v->u.topic_configs.key_cnt > 0 && !v->u.topic_configs.keys))
            return SIZE_MAX;
        n = kp_state_str_need(v->u.topic_configs.topic_name);
        for (i = 0; i < v->u.topic_configs.key_cnt; i++) {
            if (v->u.topic_configs.keys[i].len < 0)
                return SIZE_MAX; /* repeated strings cannot be null */
            n = kp_state_add(n, kp_state_str_need(v->u.topic_configs.keys[i]));
        }
        break;
    case KP_STATE_REC_SYNCED_ACLS:
        if (v->u.acls.cnt < 0 || (v->u.acls.cnt > 0 && !v->u.acls.v))
            return SIZE_MAX;
        for (i = 0; i < v->u.acls.cnt; i++) {
            const kp_state_acl_t *a = &v->u.acls.v[i];
            n = kp_state_add(n, kp_state_str_need(a->resource_name));
            n = kp_state_add(n, kp_state_str_need(a->principal));
            n = kp_state_add(n, kp_state_str_need(a->host));
        }
        break;
    default:
        break;
    }
    return n;
}

int kp_state_value_encode(kp_writer_t *wr, const kp_state_value_t *v, const kp_alloc_t *al)
{
    pb_value_t env = KMIRROR__STATE__STATE_VALUE__INIT;
    pb_lme_t lme = KMIRROR__STATE__LAST_MIRROR_EPOCH__INIT;
    pb_partition_t ps = KMIRROR__STATE__PARTITION_STATE__INIT;
    pb_mirror_t mi = KMIRROR__STATE__MIRROR__INIT;
    pb_topic_configs_t tc = KMIRROR__STATE__SYNCED_TOPIC_CONFIGS__INIT;
    pb_acls_t acls = KMIRROR__STATE__SYNCED_ACLS__INIT;
    kp_state_scratch_t sc = {al, {0}, 0, 0};
    kp_state_strpool_t sp = {NULL, 0};
    size_t need, size;
    int32_t i;
    int rc = 0;

    if (!kp_state_type_known(v->type))
        return KP_E_UNSUPPORTED;
    need = kp_state_value_str_need(v);
    if (need == SIZE_MAX)
        return KP_E_INVALID;
    sp.p = kp_state_scratch_alloc(&sc, need);
    sp.left = need;

    env.has_format_version = 1;
    env.format_version = KP_STATE_FORMAT_VERSION;
    env.has_min_reader_version = 1;
    env.min_reader_version = KP_STATE_FORMAT_MIN_READER_VERSION;
    env.value_case = (Kmirror__State__StateValue__ValueCase)(KP_STATE_ONEOF_BASE + v->type);

    switch (v->type) {
    case KP_STATE_REC_LAST_MIRROR_EPOCH: {
        const kp_state_lme_t *s = &v->u.lme;
        lme.has_last_mirror_epoch = 1;
        lme.last_mirror_epoch = s->last_mirror_epoch;
        lme.has_last_mirror_offset = 1;
        lme.last_mirror_offset = s->last_mirror_offset;
        lme.has_update_time_ms = 1;
        lme.update_time_ms = s->update_time_ms;
        if (!sc.err)
            lme.source_cluster_id = kp_state_cstr(&sp, s->source_cluster_id);
        env.last_mirror_epoch = &lme;
        break;
    }
    case KP_STATE_REC_PARTITION_STATE: {
        const kp_state_partition_t *s = &v->u.partition;
        ps.has_state = 1;
        ps.state = s->state;
        ps.has_state_epoch = 1;
        ps.state_epoch = s->state_epoch;
        ps.has_leader_epoch = 1;
        ps.leader_epoch = s->leader_epoch;
        ps.has_last_mirrored_epoch = 1;
        ps.last_mirrored_epoch = s->last_mirrored_epoch;
        ps.has_last_mirrored_offset = 1;
        ps.last_mirrored_offset = s->last_mirrored_offset;
        ps.has_retry_attempt = 1;
        ps.retry_attempt = s->retry_attempt;
        ps.has_non_retryable = 1;
        ps.non_retryable = s->non_retryable;
        ps.has_previous_state = 1;
        ps.previous_state = s->previous_state;
        ps.has_update_time_ms = 1;
        ps.update_time_ms = s->update_time_ms;
        if (!sc.err) {
            ps.error_message = kp_state_cstr(&sp, s->error_message);
            ps.source_cluster_id = kp_state_cstr(&sp, s->source_cluster_id);
        }
        env.partition_state = &ps;
        break;
    }
    case KP_STATE_REC_MIRROR: {
        const kp_state_mirror_t *s = &v->u.mirror;
        if (s->has_mirror_id) {
            mi.has_mirror_id = 1;
            mi.mirror_id.len = sizeof(s->mirror_id.b);
            mi.mirror_id.data = (uint8_t *)(uintptr_t)s->mirror_id.b;
        }
        mi.has_creation_time_ms = 1;
        mi.creation_time_ms = s->creation_time_ms;
        mi.has_update_time_ms = 1;
        mi.update_time_ms = s->update_time_ms;
        if (!sc.err)
            mi.source_cluster_id = kp_state_cstr(&sp, s->source_cluster_id);
        env.mirror = &mi;
        break;
    }
    case KP_STATE_REC_SYNCED_TOPIC_CONFIGS: {
        const kp_state_topic_configs_t *s = &v->u.topic_configs;
        tc.has_update_time_ms = 1;
        tc.update_time_ms = s->update_time_ms;
        tc.n_config_keys = (size_t)s->key_cnt;
        tc.config_keys = kp_state_scratch_alloc(&sc, sizeof(char *) * (size_t)s->key_cnt);
        if (!sc.err) {
            tc.topic_name = kp_state_cstr(&sp, s->topic_name);
            for (i = 0; i < s->key_cnt; i++)
                tc.config_keys[i] = kp_state_cstr(&sp, s->keys[i]);
        }
        env.synced_topic_configs = &tc;
        break;
    }
    case KP_STATE_REC_SYNCED_ACLS: {
        const kp_state_acls_t *s = &v->u.acls;
        pb_acl_t *pa = kp_state_scratch_alloc(&sc, sizeof(*pa) * (size_t)s->cnt);
        acls.n_bindings = (size_t)s->cnt;
        acls.bindings = kp_state_scratch_alloc(&sc, sizeof(*acls.bindings) * (size_t)s->cnt);
        acls.has_update_time_ms = 1;
        acls.update_time_ms = s->update_time_ms;
        for (i = 0; !sc.err && i < s->cnt; i++) {
            const kp_state_acl_t *a = &s->v[i];
            pb_acl_t init = KMIRROR__STATE__ACL_BINDING__INIT;
            pa[i] = init;
            pa[i].has_resource_type = 1;
            pa[i].resource_type = a->resource_type;
            pa[i].resource_name = kp_state_cstr(&sp, a->resource_name);
            pa[i].has_pattern_type = 1;
            pa[i].pattern_type = a->pattern_type;
            pa[i].principal = kp_state_cstr(&sp, a->principal);
            pa[i].host = kp_state_cstr(&sp, a->host);
            pa[i].has_operation = 1;
            pa[i].operation = a->operation;
            pa[i].has_permission_type = 1;
            pa[i].permission_type = a->permission_type;
            acls.bindings[i] = &pa[i];
        }
        env.synced_acls = &acls;
        break;
    }
    default:
        break;
    }
    if (sc.err) {
        rc = sc.err;
        goto out_scratch;
    }
    size = protobuf_c_message_get_packed_size(&env.base);
    if (kp_writer_reserve(wr, size)) {
        rc = wr->err;
        goto out_scratch;
    }
    wr->len += protobuf_c_message_pack(&env.base, wr->buf + wr->len);

out_scratch:
    kp_state_scratch_free(&sc);
    return rc;
}

/* ---- values: protobuf -> C --------------------------------------------------------------- */

typedef struct kp_state_dec_s {
    kp_arena_t *ar;
    int err;
    const char *why;
} kp_state_dec_t;

static void kp_state_dec_fail(kp_state_dec_t *d, int err, const char *why)
{
    if (!d->err) {
        d->err = err;
        d->why = why;
    }
}

/* Copy a protobuf-c string (NULL = absent) into the arena. */
static kp_str_t kp_state_dec_str(kp_state_dec_t *d, const char *s)
{
    kp_str_t out = KP_STR_NULL;
    size_t n;
    char *c;

    if (!s || d->err)
        return out;
    n = strlen(s);
    if (n > INT32_MAX) {
        kp_state_dec_fail(d, KP_E_TOO_LARGE, "string too long");
        return out;
    }
    c = kp_arena_alloc(d->ar, n + 1);
    if (!c) {
        kp_state_dec_fail(d, KP_E_NOMEM, "arena limit reached");
        return out;
    }
    memcpy(c, s, n + 1);
    out.ptr = c;
    out.len = (int32_t)n;
    return out;
}

static int8_t kp_state_dec_i8(kp_state_dec_t *d, int32_t v, const char *what)
{
    if (v < INT8_MIN || v > INT8_MAX)
        kp_state_dec_fail(d, KP_E_CORRUPT, what);
    return (int8_t)v;
}

static void kp_state_dec_lme(kp_state_dec_t *d, const pb_lme_t *m, kp_state_lme_t *s)
{
    /* protobuf-c fills absent optional fields with their declared defaults. */
    s->last_mirror_epoch = m->last_mirror_epoch;
    s->last_mirror_offset = m->last_mirror_offset;
    s->source_cluster_id = kp_state_dec_str(d, m->source_cluster_id);
    s->update_time_ms = m->update_time_ms;
}

static void kp_state_dec_partition(kp_state_dec_t *d, const pb_partition_t *m,
                                   kp_state_partition_t *s)
{
    s->state = kp_state_dec_i8(d, m->state, "state outside int8");
    s->state_epoch = m->state_epoch;
    s->leader_epoch = m->leader_epoch;
    s->last_mirrored_epoch = m->last_mirrored_epoch;
    s->last_mirrored_offset = m->last_mirrored_offset;
    s->error_message = kp_state_dec_str(d, m->error_message);
    if (m->retry_attempt < INT16_MIN || m->retry_attempt > INT16_MAX)
        kp_state_dec_fail(d, KP_E_CORRUPT, "retry attempt outside int16");
    s->retry_attempt = (int16_t)m->retry_attempt;
    s->non_retryable = m->non_retryable != 0;
    s->previous_state = kp_state_dec_i8(d, m->previous_state, "previous state outside int8");
    s->update_time_ms = m->update_time_ms;
    s->source_cluster_id = kp_state_dec_str(d, m->source_cluster_id);
}

static void kp_state_dec_mirror(kp_state_dec_t *d, const pb_mirror_t *m, kp_state_mirror_t *s)
{
    if (m->has_mirror_id) {
        if (m->mirror_id.len != sizeof(s->mirror_id.b))
            kp_state_dec_fail(d, KP_E_CORRUPT, "mirror id is not 16 bytes");
        else
            memcpy(s->mirror_id.b, m->mirror_id.data, sizeof(s->mirror_id.b));
        s->has_mirror_id = true;
    }
    s->creation_time_ms = m->creation_time_ms;
    s->source_cluster_id = kp_state_dec_str(d, m->source_cluster_id);
    s->update_time_ms = m->update_time_ms;
}

static void kp_state_dec_topic_configs(kp_state_dec_t *d, const pb_topic_configs_t *m,
                                       kp_state_topic_configs_t *s)
{
    size_t i;
    s->topic_name = kp_state_dec_str(d, m->topic_name);
    s->update_time_ms = m->update_time_ms;
    if (m->n_config_keys > KP_MAX_ARRAY) {
        kp_state_dec_fail(d, KP_E_TOO_LARGE, "too many config keys");
        return;
    }
    if (m->n_config_keys == 0)
        return;
    s->keys = kp_arena_calloc(d->ar, m->n_config_keys, sizeof(*s->keys));
    if (!s->keys) {
        kp_state_dec_fail(d, KP_E_NOMEM, "arena limit reached");
        return;
    }
    for (i = 0; i < m->n_config_keys && !d->err; i++)
        s->keys[i] = kp_state_dec_str(d, m->config_keys[i]);
    s->key_cnt = (int32_t)m->n_config_keys;
}

static void kp_state_dec_acls(kp_state_dec_t *d, const pb_acls_t *m, kp_state_acls_t *s)
{
    size_t i;
    s->update_time_ms = m->update_time_ms;
    if (m->n_bindings > KP_MAX_ARRAY) {
        kp_state_dec_fail(d, KP_E_TOO_LARGE, "too many ACL bindings");
        return;
    }
    if (m->n_bindings == 0)
        return;
    s->v = kp_arena_calloc(d->ar, m->n_bindings, sizeof(*s->v));
    if (!s->v) {
        kp_state_dec_fail(d, KP_E_NOMEM, "arena limit reached");
        return;
    }
    for (i = 0; i < m->n_bindings && !d->err; i++) {
        const pb_acl_t *b = m->bindings[i];
        kp_state_acl_t *a = &s->v[i];
        a->resource_type = kp_state_dec_i8(d, b->resource_type, "ACL enum outside int8");
        a->resource_name = kp_state_dec_str(d, b->resource_name);
        a->pattern_type = kp_state_dec_i8(d, b->pattern_type, "ACL enum outside int8");
        a->principal = kp_state_dec_str(d, b->principal);
        a->host = kp_state_dec_str(d, b->host);
        a->operation = kp_state_dec_i8(d, b->operation, "ACL enum outside int8");
        a->permission_type = kp_state_dec_i8(d, b->permission_type, "ACL enum outside int8");
    }
    s->cnt = (int32_t)m->n_bindings;
}

int kp_state_value_decode(const void *buf, size_t len, kp_arena_t *ar, kp_state_value_t *v,
                          const kp_alloc_t *al, const char **errstr)
{
    ProtobufCAllocator pa;
    pb_value_t *env;
    kp_state_dec_t d = {ar, 0, NULL};

    memset(v, 0, sizeof(*v));
    if (!buf && len)
        return kp_state_fail(errstr, KP_E_INVALID, "no value bytes");
    if (al && al->alloc && al->free) {
        pa.alloc = al->alloc;
        pa.free = al->free;
        pa.allocator_data = al->opaque;
    }
    /* protobuf-c reports every failure as NULL: malformed input or no memory alike. */
    env = kmirror__state__state_value__unpack(al && al->alloc && al->free ? &pa : NULL, len,
                                              buf ? buf : (const void *)"");
    if (!env)
        return kp_state_fail(errstr, KP_E_CORRUPT, "value is not a valid protobuf envelope");

    if (!env->has_format_version || env->format_version == 0) {
        kp_state_dec_fail(&d, KP_E_CORRUPT, "value has no format version");
        goto out;
    }
    v->format_version = env->format_version;
    v->min_reader_version = env->has_min_reader_version ? env->min_reader_version : 1;
    if (v->min_reader_version > KP_STATE_FORMAT_VERSION) {
        kp_state_dec_fail(&d, KP_E_UNSUPPORTED, "value needs a newer reader format");
        goto out;
    }
    switch (env->value_case) {
    case KMIRROR__STATE__STATE_VALUE__VALUE_LAST_MIRROR_EPOCH:
        kp_state_value_init(v, KP_STATE_REC_LAST_MIRROR_EPOCH);
        kp_state_dec_lme(&d, env->last_mirror_epoch, &v->u.lme);
        break;
    case KMIRROR__STATE__STATE_VALUE__VALUE_PARTITION_STATE:
        kp_state_value_init(v, KP_STATE_REC_PARTITION_STATE);
        kp_state_dec_partition(&d, env->partition_state, &v->u.partition);
        break;
    case KMIRROR__STATE__STATE_VALUE__VALUE_MIRROR:
        kp_state_value_init(v, KP_STATE_REC_MIRROR);
        kp_state_dec_mirror(&d, env->mirror, &v->u.mirror);
        break;
    case KMIRROR__STATE__STATE_VALUE__VALUE_SYNCED_TOPIC_CONFIGS:
        kp_state_value_init(v, KP_STATE_REC_SYNCED_TOPIC_CONFIGS);
        kp_state_dec_topic_configs(&d, env->synced_topic_configs, &v->u.topic_configs);
        break;
    case KMIRROR__STATE__STATE_VALUE__VALUE_SYNCED_ACLS:
        kp_state_value_init(v, KP_STATE_REC_SYNCED_ACLS);
        kp_state_dec_acls(&d, env->synced_acls, &v->u.acls);
        break;
    default:
        /* A body in a oneof member we do not know shows up as an unknown field. */
        if (env->base.n_unknown_fields > 0)
            kp_state_dec_fail(&d, KP_E_UNSUPPORTED, "value body of an unknown record type");
        else
            kp_state_dec_fail(&d, KP_E_CORRUPT, "value has no body");
        break;
    }
    v->format_version = env->format_version;
    v->min_reader_version = env->has_min_reader_version ? env->min_reader_version : 1;

out:
    kmirror__state__state_value__free_unpacked(env, al && al->alloc && al->free ? &pa : NULL);
    if (d.err) {
        memset(v, 0, sizeof(*v));
        return kp_state_fail(errstr, d.err, d.why);
    }
    return 0;
}

/* ---- records ----------------------------------------------------------------------------- */

int kp_state_record_parse(kp_bytes_t key, kp_bytes_t value, kp_arena_t *ar, kp_state_record_t *rec,
                          const kp_alloc_t *al, const char **errstr)
{
    int rc;

    memset(rec, 0, sizeof(*rec));
    if (key.len < 0)
        return kp_state_fail(errstr, KP_E_CORRUPT, "record without a key");
    rc = kp_state_key_parse(key.ptr, (size_t)key.len, &rec->key, errstr);
    if (rc)
        return rc;
    if (value.len < 0) {
        rec->tombstone = true;
        return 0;
    }
    rc = kp_state_value_decode(value.ptr, (size_t)value.len, ar, &rec->value, al, errstr);
    if (rc)
        return rc;
    if (rec->value.type != rec->key.type)
        return kp_state_fail(errstr, KP_E_CORRUPT, "value body does not match the key's type");
    return 0;
}
