/*
 * kb_acl_mrec.h -- the ACL image fed by KRaft metadata records (docs/design.md C2).
 *
 * AccessControlEntryRecord (type 18) adds a binding with the record's id, and
 * RemoveAccessControlEntryRecord (type 19) removes the binding with that id: the same
 * kb_acl_apply_add() / kb_acl_apply_remove() the store's users call, so a broker replaying the
 * metadata log builds the image the controller's CreateAcls / DeleteAcls made. The controller
 * side writes its bindings with kb_acl_mrec_from_binding().
 *
 * @thread any (the image has its own locks)
 */
#ifndef KB_ACL_MREC_H
#define KB_ACL_MREC_H

#include "kb_acl.h"
#include "kp_mrec.h"

/**
 * Apply one decoded metadata record to the image. Records of other types are ignored (0).
 * @return 0, KB_E_EXISTS (the id or the same binding is there already), KB_E_NOT_FOUND (remove
 *         of an unknown id), KB_E_INVALID (a binding CreateAcls would refuse, a zero id, a
 *         string with a NUL byte), KB_E_NOMEM. The image is unchanged on every error.
 */
int kb_acl_mrec_apply(kb_acl_t *acl, const kp_mrec_t *m);

/** The AccessControlEntryRecord of binding @p b (strings borrowed from @p b). */
void kb_acl_mrec_from_binding(const kb_acl_binding_t *b, kp_AccessControlEntryRecord_t *rec);

#endif /* KB_ACL_MREC_H */
