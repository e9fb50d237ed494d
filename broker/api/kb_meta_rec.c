/*
 * kb_meta_rec.c -- metadata records in Kafka's KRaft framing (see kb_meta_rec.h), through the
 * generated codec of proto/schema/metadata and proto/runtime/kp_mrec.
 */
#include "kb_meta_rec.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kp_arena.h"
#include "kb_err.h"
#include "kp_err.h"
#include "kp_mrec.h"

void kb_mrec_init(kb_mrec_t *r, int16_t type)
{
    memset(r, 0, sizeof(*r));
    r->type = type;
    r->partition = -1;
    r->leader = type == KB_MREC_PARTITION_CHANGE ? KB_MREC_NO_LEADER_CHANGE : -1;
    r->leader_epoch = -1;
    r->partition_epoch = -1;
    r->broker_epoch = -1;
    if (type == KB_MREC_PARTITION_CHANGE)
        r->nreplicas = r->nisr = -1;
}

void kb_mrec_clear(kb_mrec_t *r)
{
    free(r->name);
    free(r->replicas);
    free(r->isr);
    free(r->resource_name);
    free(r->key);
    free(r->value);
    free(r->endpoints);
    free(r->rack);
    free(r->acl_name);
    free(r->acl_principal);
    free(r->acl_host);
    free(r->pkey);
    free(r->pvalue);
    kb_mrec_init(r, r->type);
}

int kb_mrec_plugin_copy(kb_mrec_t *dst, const kb_mrec_t *src)
{
    kb_mrec_init(dst, src->type);
    dst->version = src->version;
    dst->plugin_type = src->plugin_type;
    dst->pkey_len = src->pkey_len;
    dst->has_pvalue = src->has_pvalue;
    dst->pvalue_len = src->has_pvalue ? src->pvalue_len : 0;
    dst->pkey = malloc(src->pkey_len ? src->pkey_len : 1);
    if (dst->pkey && src->pkey_len)
        memcpy(dst->pkey, src->pkey, src->pkey_len);
    if (src->has_pvalue) {
        dst->pvalue = malloc(src->pvalue_len ? src->pvalue_len : 1);
        if (dst->pvalue && src->pvalue_len)
            memcpy(dst->pvalue, src->pvalue, src->pvalue_len);
    }
    if (!dst->pkey || (src->has_pvalue && !dst->pvalue)) {
        kb_mrec_clear(dst);
        return KB_E_NOMEM;
    }
    return 0;
}

int kb_mrec_acl_copy(kb_mrec_t *dst, const kb_mrec_t *src)
{
    kb_mrec_init(dst, src->type);
    dst->version = src->version;
    dst->acl_id = src->acl_id;
    dst->acl_restype = src->acl_restype;
    dst->acl_pattern = src->acl_pattern;
    dst->acl_op = src->acl_op;
    dst->acl_perm = src->acl_perm;
    if ((src->acl_name && !(dst->acl_name = strdup(src->acl_name))) ||
        (src->acl_principal && !(dst->acl_principal = strdup(src->acl_principal))) ||
        (src->acl_host && !(dst->acl_host = strdup(src->acl_host)))) {
        kb_mrec_clear(dst);
        return KB_E_NOMEM;
    }
    return 0;
}

const char *kb_mrec_type_name(int16_t type)
{
    switch (type) {
    case KB_MREC_TOPIC:
        return "TopicRecord";
    case KB_MREC_PARTITION:
        return "PartitionRecord";
    case KB_MREC_CONFIG:
        return "ConfigRecord";
    case KB_MREC_PARTITION_CHANGE:
        return "PartitionChangeRecord";
    case KB_MREC_REMOVE_TOPIC:
        return "RemoveTopicRecord";
    case KB_MREC_PRODUCER_IDS:
        return "ProducerIdsRecord";
    case KB_MREC_REGISTER_BROKER:
        return "RegisterBrokerRecord";
    case KB_MREC_UNREGISTER_BROKER:
        return "UnregisterBrokerRecord";
    case KB_MREC_FENCE_BROKER:
        return "FenceBrokerRecord";
    case KB_MREC_UNFENCE_BROKER:
        return "UnfenceBrokerRecord";
    case KB_MREC_BROKER_CHANGE:
        return "BrokerRegistrationChangeRecord";
    case KB_MREC_ACL:
        return "AccessControlEntryRecord";
    case KB_MREC_REMOVE_ACL:
        return "RemoveAccessControlEntryRecord";
    case KB_MREC_PLUGIN:
        return "KbrokerPluginRecord";
    default: {
        const kp_record_info_t *i = kp_record_lookup(type);
        return i ? i->name : "unknown";
    }
    }
}

/* ---- encoding (the generated codec, proto/schema/metadata) ---------------------------------- */

static kp_str_t kb_mrec_str(const char *s)
{
    return s ? (kp_str_t){s, (int32_t)strlen(s)} : KP_STR_NULL;
}

int kb_mrec_encode(const kb_mrec_t *r, kp_writer_t *wr)
{
    switch (r->type) {
    case KB_MREC_TOPIC: {
        kp_TopicRecord_t m;
        kp_TopicRecord_init(&m);
        m.Name = kb_mrec_str(r->name ? r->name : "");
        m.TopicId = r->topic_id;
        return kp_mrec_encode(wr, KP_RECTYPE_TopicRecord, 0, &m);
    }
    case KB_MREC_PARTITION: {
        kp_PartitionRecord_t m;
        kp_PartitionRecord_init(&m);
        m.PartitionId = r->partition;
        m.TopicId = r->topic_id;
        m.Replicas.v = r->replicas;
        m.Replicas.cnt = r->nreplicas > 0 ? r->nreplicas : 0;
        m.Isr.v = r->isr;
        m.Isr.cnt = r->nisr > 0 ? r->nisr : 0;
        m.RemovingReplicas.cnt = 0;
        m.AddingReplicas.cnt = 0;
        m.Leader = r->leader;
        m.LeaderEpoch = r->leader_epoch;
        m.PartitionEpoch = r->partition_epoch;
        return kp_mrec_encode(wr, KP_RECTYPE_PartitionRecord, 0, &m);
    }
    case KB_MREC_CONFIG: {
        kp_ConfigRecord_t m;
        kp_ConfigRecord_init(&m);
        m.ResourceType = r->resource_type;
        m.ResourceName = kb_mrec_str(r->resource_name ? r->resource_name : "");
        m.Name = kb_mrec_str(r->key ? r->key : "");
        m.Value = kb_mrec_str(r->value);
        return kp_mrec_encode(wr, KP_RECTYPE_ConfigRecord, 0, &m);
    }
    case KB_MREC_PARTITION_CHANGE: {
        kp_PartitionChangeRecord_t m;
        kp_rawtag_t tag;
        uint8_t epoch[4];
        kp_PartitionChangeRecord_init(&m);
        m.PartitionId = r->partition;
        m.TopicId = r->topic_id;
        m.Isr.v = r->isr;
        m.Isr.cnt = r->nisr >= 0 ? r->nisr : -1;
        m.Leader = r->leader;
        m.Replicas.v = r->replicas;
        m.Replicas.cnt = r->nreplicas >= 0 ? r->nreplicas : -1;
        if (r->leader_epoch >= 0) {
            /* kbroker's tagged field, which Kafka's decoders keep as unknown */
            epoch[0] = (uint8_t)((uint32_t)r->leader_epoch >> 24);
            epoch[1] = (uint8_t)((uint32_t)r->leader_epoch >> 16);
            epoch[2] = (uint8_t)((uint32_t)r->leader_epoch >> 8);
            epoch[3] = (uint8_t)r->leader_epoch;
            tag.tag = KB_MREC_TAG_LEADER_EPOCH;
            tag.data = (kp_bytes_t){epoch, 4};
            m._unknown_tags.v = &tag;
            m._unknown_tags.cnt = 1;
        }
        return kp_mrec_encode(wr, KP_RECTYPE_PartitionChangeRecord, 0, &m);
    }
    case KB_MREC_REMOVE_TOPIC: {
        kp_RemoveTopicRecord_t m;
        kp_RemoveTopicRecord_init(&m);
        m.TopicId = r->topic_id;
        return kp_mrec_encode(wr, KP_RECTYPE_RemoveTopicRecord, 0, &m);
    }
    case KB_MREC_PRODUCER_IDS: {
        kp_ProducerIdsRecord_t m;
        kp_ProducerIdsRecord_init(&m);
        m.BrokerId = r->broker_id;
        m.BrokerEpoch = r->broker_epoch;
        m.NextProducerId = r->next_producer_id;
        return kp_mrec_encode(wr, KP_RECTYPE_ProducerIdsRecord, 0, &m);
    }
    case KB_MREC_REGISTER_BROKER: {
        kp_RegisterBrokerRecord_t m;
        kp_RegisterBrokerRecord_BrokerEndpoint_t ep[KB_MREC_MAX_ENDPOINTS];
        kp_RegisterBrokerRecord_init(&m);
        m.BrokerId = r->broker_id;
        m.IncarnationId = r->incarnation;
        m.BrokerEpoch = r->broker_epoch;
        for (int32_t i = 0; i < r->nendpoints && i < KB_MREC_MAX_ENDPOINTS; i++) {
            kp_RegisterBrokerRecord_BrokerEndpoint_init(&ep[i]);
            ep[i].Name = kb_mrec_str(r->endpoints[i].name);
            ep[i].Host = kb_mrec_str(r->endpoints[i].host);
            ep[i].Port = (uint16_t)r->endpoints[i].port;
            ep[i].SecurityProtocol = r->endpoints[i].security_protocol;
        }
        m.EndPoints.v = ep;
        m.EndPoints.cnt =
            r->nendpoints < KB_MREC_MAX_ENDPOINTS ? r->nendpoints : KB_MREC_MAX_ENDPOINTS;
        m.Rack.ptr = r->rack;
        m.Rack.len = r->rack ? (int32_t)strlen(r->rack) : -1;
        m.Fenced = r->fenced != 0;
        return kp_mrec_encode(wr, KP_RECTYPE_RegisterBrokerRecord, 1, &m);
    }
    case KB_MREC_UNREGISTER_BROKER: {
        kp_UnregisterBrokerRecord_t m;
        kp_UnregisterBrokerRecord_init(&m);
        m.BrokerId = r->broker_id;
        m.BrokerEpoch = r->broker_epoch;
        return kp_mrec_encode(wr, KP_RECTYPE_UnregisterBrokerRecord, 0, &m);
    }
    case KB_MREC_BROKER_CHANGE: {
        kp_BrokerRegistrationChangeRecord_t m;
        kp_BrokerRegistrationChangeRecord_init(&m);
        m.BrokerId = r->broker_id;
        m.BrokerEpoch = r->broker_epoch;
        m.Fenced = r->fenced;
        return kp_mrec_encode(wr, KP_RECTYPE_BrokerRegistrationChangeRecord, 0, &m);
    }
    case KB_MREC_ACL: {
        kp_AccessControlEntryRecord_t m;
        if (!r->acl_name || !r->acl_principal || !r->acl_host)
            return kp_writer_fail(wr, KP_E_INVALID);
        kp_AccessControlEntryRecord_init(&m);
        m.Id = r->acl_id;
        m.ResourceType = r->acl_restype;
        m.ResourceName = kb_mrec_str(r->acl_name);
        m.PatternType = r->acl_pattern;
        m.Principal = kb_mrec_str(r->acl_principal);
        m.Host = kb_mrec_str(r->acl_host);
        m.Operation = r->acl_op;
        m.PermissionType = r->acl_perm;
        return kp_mrec_encode(wr, KP_RECTYPE_AccessControlEntryRecord, 0, &m);
    }
    case KB_MREC_REMOVE_ACL: {
        kp_RemoveAccessControlEntryRecord_t m;
        kp_RemoveAccessControlEntryRecord_init(&m);
        m.Id = r->acl_id;
        return kp_mrec_encode(wr, KP_RECTYPE_RemoveAccessControlEntryRecord, 0, &m);
    }
    case KB_MREC_PLUGIN: {
        kp_KbrokerPluginRecord_t m;
        if ((!r->pkey && r->pkey_len) || r->pkey_len > KB_MREC_PLUGIN_MAX ||
            (r->has_pvalue &&
             ((!r->pvalue && r->pvalue_len) || r->pvalue_len > KB_MREC_PLUGIN_MAX)))
            return kp_writer_fail(wr, KP_E_INVALID);
        kp_KbrokerPluginRecord_init(&m);
        m.RecordType = r->plugin_type;
        m.Key.ptr = r->pkey;
        m.Key.len = (int32_t)r->pkey_len;
        m.Value.ptr = r->has_pvalue ? r->pvalue : NULL;
        m.Value.len = r->has_pvalue ? (int32_t)r->pvalue_len : -1;
        return kp_mrec_encode(wr, KP_RECTYPE_KbrokerPluginRecord, 0, &m);
    }
    default:
        return kp_writer_fail(wr, KP_E_INVALID);
    }
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* A string as a malloc'd C string (NULL for null). An embedded NUL is refused: names and
 * config values are C strings everywhere else. 0 or -1 with @p err. */
static int kb_mrec_cstr(kp_str_t s, char **out, const char *what, char *err, size_t err_size)
{
    *out = NULL;
    if (s.len < 0)
        return 0;
    if (memchr(s.ptr, '\0', (size_t)s.len)) {
        snprintf(err, err_size, "%s with a NUL byte", what);
        return -1;
    }
    if (!(*out = malloc((size_t)s.len + 1))) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    memcpy(*out, s.ptr, (size_t)s.len);
    (*out)[s.len] = '\0';
    return 0;
}

/* A copy of an int32 array (*n = -1 and NULL for null). 0 or -1 with @p err. */
static int kb_mrec_ints(const int32_t *v, int32_t cnt, int32_t **out, int32_t *n, char *err,
                        size_t err_size)
{
    *out = NULL;
    *n = cnt < 0 ? -1 : cnt;
    if (cnt < 0)
        return 0;
    if (cnt > KB_MREC_MAX_REPLICAS) {
        snprintf(err, err_size, "too many replicas (%" PRId32 ")", cnt);
        return -1;
    }
    if (!(*out = malloc(((size_t)cnt + 1) * sizeof(**out)))) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    if (cnt)
        memcpy(*out, v, (size_t)cnt * sizeof(**out));
    return 0;
}

static int kb_mrec_from(kb_mrec_t *r, const kp_mrec_t *m, char *err, size_t err_size)
{
    switch (r->type) {
    case KB_MREC_TOPIC: {
        const kp_TopicRecord_t *t = m->rec;
        r->topic_id = t->TopicId;
        return kb_mrec_cstr(t->Name, &r->name, "topic name", err, err_size);
    }
    case KB_MREC_PARTITION: {
        const kp_PartitionRecord_t *p = m->rec;
        r->partition = p->PartitionId;
        r->topic_id = p->TopicId;
        r->leader = p->Leader;
        r->leader_epoch = p->LeaderEpoch;
        r->partition_epoch = p->PartitionEpoch;
        if (kb_mrec_ints(p->Replicas.v, p->Replicas.cnt, &r->replicas, &r->nreplicas, err,
                         err_size) != 0)
            return -1;
        return kb_mrec_ints(p->Isr.v, p->Isr.cnt, &r->isr, &r->nisr, err, err_size);
    }
    case KB_MREC_CONFIG: {
        const kp_ConfigRecord_t *c = m->rec;
        r->resource_type = c->ResourceType;
        if (kb_mrec_cstr(c->ResourceName, &r->resource_name, "resource name", err, err_size) ||
            kb_mrec_cstr(c->Name, &r->key, "config name", err, err_size) ||
            kb_mrec_cstr(c->Value, &r->value, "config value", err, err_size))
            return -1;
        if (!r->resource_name || !r->key) {
            snprintf(err, err_size, "null resource or config name");
            return -1;
        }
        return 0;
    }
    case KB_MREC_PARTITION_CHANGE: {
        const kp_PartitionChangeRecord_t *c = m->rec;
        r->partition = c->PartitionId;
        r->topic_id = c->TopicId;
        r->leader = c->Leader;
        for (uint32_t i = 0; i < c->_unknown_tags.cnt; i++) {
            const kp_rawtag_t *t = &c->_unknown_tags.v[i];
            const uint8_t *d = t->data.ptr;
            if (t->tag != KB_MREC_TAG_LEADER_EPOCH)
                continue;
            if (t->data.len != 4) {
                snprintf(err, err_size, "kbroker leader epoch field of %" PRId32 " bytes",
                         t->data.len);
                return -1;
            }
            r->leader_epoch = (int32_t)((uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 |
                                        (uint32_t)d[2] << 8 | (uint32_t)d[3]);
            if (r->leader_epoch < 0) {
                snprintf(err, err_size, "negative leader epoch");
                return -1;
            }
        }
        if (kb_mrec_ints(c->Replicas.v, c->Replicas.cnt, &r->replicas, &r->nreplicas, err,
                         err_size) != 0)
            return -1;
        return kb_mrec_ints(c->Isr.v, c->Isr.cnt, &r->isr, &r->nisr, err, err_size);
    }
    case KB_MREC_REMOVE_TOPIC:
        r->topic_id = ((const kp_RemoveTopicRecord_t *)m->rec)->TopicId;
        return 0;
    case KB_MREC_PRODUCER_IDS: {
        const kp_ProducerIdsRecord_t *p = m->rec;
        r->broker_id = p->BrokerId;
        r->broker_epoch = p->BrokerEpoch;
        r->next_producer_id = p->NextProducerId;
        return 0;
    }
    case KB_MREC_REGISTER_BROKER: {
        const kp_RegisterBrokerRecord_t *b = m->rec;
        r->broker_id = b->BrokerId;
        r->broker_epoch = b->BrokerEpoch;
        r->incarnation = b->IncarnationId;
        r->fenced = b->Fenced ? 1 : 0;
        if (b->EndPoints.cnt > KB_MREC_MAX_ENDPOINTS) {
            snprintf(err, err_size, "too many endpoints (%" PRId32 ")", b->EndPoints.cnt);
            return -1;
        }
        r->nendpoints = b->EndPoints.cnt > 0 ? b->EndPoints.cnt : 0;
        if (!(r->endpoints = calloc((size_t)r->nendpoints + 1, sizeof(*r->endpoints)))) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        for (int32_t i = 0; i < r->nendpoints; i++) {
            const kp_RegisterBrokerRecord_BrokerEndpoint_t *e = &b->EndPoints.v[i];
            kb_mendpoint_t *o = &r->endpoints[i];
            if (e->Name.len < 0 || (size_t)e->Name.len >= sizeof(o->name) || e->Host.len < 0 ||
                (size_t)e->Host.len >= sizeof(o->host) ||
                (e->Name.len > 0 && memchr(e->Name.ptr, '\0', (size_t)e->Name.len)) ||
                (e->Host.len > 0 && memchr(e->Host.ptr, '\0', (size_t)e->Host.len))) {
                snprintf(err, err_size, "bad endpoint %" PRId32 " of broker %" PRId32, i,
                         b->BrokerId);
                return -1;
            }
            if (e->Name.len > 0)
                memcpy(o->name, e->Name.ptr, (size_t)e->Name.len);
            if (e->Host.len > 0)
                memcpy(o->host, e->Host.ptr, (size_t)e->Host.len);
            o->port = e->Port;
            o->security_protocol = e->SecurityProtocol;
        }
        return kb_mrec_cstr(b->Rack, &r->rack, "rack", err, err_size);
    }
    case KB_MREC_UNREGISTER_BROKER: {
        const kp_UnregisterBrokerRecord_t *u = m->rec;
        r->broker_id = u->BrokerId;
        r->broker_epoch = u->BrokerEpoch;
        return 0;
    }
    case KB_MREC_FENCE_BROKER: {
        const kp_FenceBrokerRecord_t *f = m->rec;
        r->broker_id = f->Id;
        r->broker_epoch = f->Epoch;
        r->fenced = 1;
        r->type = KB_MREC_BROKER_CHANGE; /* applied as Kafka 4.x's form */
        return 0;
    }
    case KB_MREC_UNFENCE_BROKER: {
        const kp_UnfenceBrokerRecord_t *f = m->rec;
        r->broker_id = f->Id;
        r->broker_epoch = f->Epoch;
        r->fenced = -1;
        r->type = KB_MREC_BROKER_CHANGE;
        return 0;
    }
    case KB_MREC_BROKER_CHANGE: {
        const kp_BrokerRegistrationChangeRecord_t *c = m->rec;
        r->broker_id = c->BrokerId;
        r->broker_epoch = c->BrokerEpoch;
        r->fenced = c->Fenced;
        return 0;
    }
    case KB_MREC_ACL: {
        const kp_AccessControlEntryRecord_t *a = m->rec;
        r->acl_id = a->Id;
        r->acl_restype = a->ResourceType;
        r->acl_pattern = a->PatternType;
        r->acl_op = a->Operation;
        r->acl_perm = a->PermissionType;
        if (kb_mrec_cstr(a->ResourceName, &r->acl_name, "resource name", err, err_size) ||
            kb_mrec_cstr(a->Principal, &r->acl_principal, "principal", err, err_size) ||
            kb_mrec_cstr(a->Host, &r->acl_host, "host", err, err_size))
            return -1;
        if (!r->acl_name || !r->acl_principal || !r->acl_host) {
            snprintf(err, err_size, "null resource name, principal or host");
            return -1;
        }
        return 0;
    }
    case KB_MREC_REMOVE_ACL:
        r->acl_id = ((const kp_RemoveAccessControlEntryRecord_t *)m->rec)->Id;
        return 0;
    case KB_MREC_PLUGIN: {
        const kp_KbrokerPluginRecord_t *pr = m->rec;
        if (pr->Key.len < 0 || pr->Key.len > KB_MREC_PLUGIN_MAX ||
            pr->Value.len > KB_MREC_PLUGIN_MAX) {
            snprintf(err, err_size, "plugin record key or value of a bad size");
            return -1;
        }
        r->plugin_type = pr->RecordType;
        r->pkey_len = (size_t)pr->Key.len;
        r->has_pvalue = pr->Value.len >= 0;
        r->pvalue_len = r->has_pvalue ? (size_t)pr->Value.len : 0;
        r->pkey = malloc(r->pkey_len ? r->pkey_len : 1);
        if (r->pkey && r->pkey_len)
            memcpy(r->pkey, pr->Key.ptr, r->pkey_len);
        if (r->has_pvalue && (r->pvalue = malloc(r->pvalue_len ? r->pvalue_len : 1)) &&
            r->pvalue_len)
            memcpy(r->pvalue, pr->Value.ptr, r->pvalue_len);
        if (!r->pkey || (r->has_pvalue && !r->pvalue)) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        return 0;
    }
    default:
        return 0; /* a type kbroker does not apply: only its type is kept */
    }
}

int kb_mrec_decode(kb_mrec_t *r, const void *buf, size_t len, char *err, size_t err_size)
{
    kp_arena_t ar;
    kp_mrec_t m;
    int rc;

    kb_mrec_init(r, -1);
    kp_arena_init(&ar, 0);
    rc = kp_mrec_decode(buf, len, &ar, &m);
    if (rc != 0) {
        if (rc == KP_E_UNSUPPORTED && m.frame_ver != KP_MREC_FRAME_VERSION)
            snprintf(err, err_size, "unknown frame version %u", m.frame_ver);
        else if (rc == KP_E_UNSUPPORTED && !m.info)
            snprintf(err, err_size, "unknown record type %u", m.type);
        else
            snprintf(err, err_size, "%s v%u: %s", m.info ? m.info->name : "record", m.ver,
                     m.errstr ? m.errstr : kp_err_str(rc));
        kp_arena_free(&ar);
        return -1;
    }
    kb_mrec_init(r, (int16_t)m.type);
    r->version = (int16_t)m.ver;
    rc = kb_mrec_from(r, &m, err, err_size);
    kp_arena_free(&ar);
    if (rc != 0) {
        char e[200];
        snprintf(e, sizeof(e), "%s", err);
        snprintf(err, err_size, "%s v%u: %s", m.info->name, m.ver, e);
        kb_mrec_clear(r);
        return -1;
    }
    return 0;
}
