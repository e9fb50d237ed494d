/*
 * kb_acl_mrec.c -- AccessControlEntryRecord / RemoveAccessControlEntryRecord into the ACL image
 * (kb_acl_mrec.h).
 */
#include "kb_acl_mrec.h"

#include <stdlib.h>
#include <string.h>

#include "kb_err.h"

/* A NUL-terminated copy of a record string; NULL for null, NUL bytes or out of memory (*bad set
 * for the first two). */
static char *kb_acl_mrec_str(kp_str_t s, bool *bad)
{
    char *p;
    if (s.len < 0 || (s.len > 0 && memchr(s.ptr, '\0', (size_t)s.len))) {
        *bad = true;
        return NULL;
    }
    p = malloc((size_t)s.len + 1);
    if (p) {
        if (s.len > 0)
            memcpy(p, s.ptr, (size_t)s.len);
        p[s.len] = '\0';
    }
    return p;
}

static int kb_acl_mrec_add(kb_acl_t *acl, const kp_AccessControlEntryRecord_t *r)
{
    kb_acl_binding_t b = {0};
    bool bad = false;
    int rc;

    memcpy(b.id, r->Id.b, 16);
    b.restype = r->ResourceType;
    b.pattern = r->PatternType;
    b.op = r->Operation;
    b.perm = r->PermissionType;
    b.name = kb_acl_mrec_str(r->ResourceName, &bad);
    b.principal = kb_acl_mrec_str(r->Principal, &bad);
    b.host = kb_acl_mrec_str(r->Host, &bad);
    if (bad)
        rc = KB_E_INVALID;
    else if (!b.name || !b.principal || !b.host)
        rc = KB_E_NOMEM;
    else
        rc = kb_acl_apply_add(acl, &b); /* validates and copies */
    free(b.name);
    free(b.principal);
    free(b.host);
    return rc;
}

int kb_acl_mrec_apply(kb_acl_t *acl, const kp_mrec_t *m)
{
    if (!m->rec)
        return KB_E_INVALID;
    if (m->type == KP_RECTYPE_AccessControlEntryRecord)
        return kb_acl_mrec_add(acl, m->rec);
    if (m->type == KP_RECTYPE_RemoveAccessControlEntryRecord) {
        const kp_RemoveAccessControlEntryRecord_t *r = m->rec;
        return kb_acl_apply_remove(acl, r->Id.b);
    }
    return 0;
}

void kb_acl_mrec_from_binding(const kb_acl_binding_t *b, kp_AccessControlEntryRecord_t *rec)
{
    kp_AccessControlEntryRecord_init(rec);
    memcpy(rec->Id.b, b->id, 16);
    rec->ResourceType = b->restype;
    rec->ResourceName = (kp_str_t){b->name, (int32_t)strlen(b->name)};
    rec->PatternType = b->pattern;
    rec->Principal = (kp_str_t){b->principal, (int32_t)strlen(b->principal)};
    rec->Host = (kp_str_t){b->host, (int32_t)strlen(b->host)};
    rec->Operation = b->op;
    rec->PermissionType = b->perm;
}
