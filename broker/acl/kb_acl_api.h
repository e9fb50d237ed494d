/*
 * kb_acl_api.h -- the ACL APIs of kbroker on a kb_acl_t: DescribeAcls (29), CreateAcls (30),
 * DeleteAcls (31), every version the codec has (1-3).
 *
 * Answers are Apache Kafka 4.x's: without an authorizer (authorizer.class.name empty) every
 * request gets SECURITY_DISABLED; CreateAcls checks each binding (kb_acl_validate) and answers
 * per creation; DeleteAcls answers per filter with the bindings it removed. The handlers do not
 * check the caller's own permissions yet (enforcement comes with the security work).
 *
 * @thread handler threads; registration on any thread.
 */
#ifndef KB_ACL_API_H
#define KB_ACL_API_H

#include "kb_acl.h"
#include "kb_api.h"

/** Register the three APIs with @p acl as their state. 0 or a KB_E_* of kb_api_register (the
 *  ones already registered are unregistered again). */
int kb_acl_api_register(kb_acl_t *acl, kb_api_registry_t *reg);

/** Unregister them (waits for running handlers). */
void kb_acl_api_unregister(kb_api_registry_t *reg);

#endif /* KB_ACL_API_H */
