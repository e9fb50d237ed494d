/*
 * kb_acl_int.h -- structures shared by the files of broker/acl only.
 */
#ifndef KB_ACL_INT_H
#define KB_ACL_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kb_acl.h"
#include "kp_writer.h"

#define KB_ACL_MAGIC      0x6b61636cu /* "kacl" */
#define KB_ACL_DEAD_MAGIC 0x6b616364u

/** Longest string the store accepts for a name, principal or host. Kafka strings are at most
 *  32767 bytes on the wire; this only bounds what a corrupt file can make us allocate. */
#define KB_ACL_MAX_STR 32767
/** Most bindings a store file may hold (bounds allocation from a corrupt count). */
#define KB_ACL_MAX_BINDINGS 10000000

struct kb_acl_s {
    uint32_t magic;
    pthread_rwlock_t rw; /**< guards v/cnt/cap */
    pthread_mutex_t wmu; /**< serialises create/delete (persist, then apply) */
    kb_acl_binding_t *v; /**< the image, in creation order */
    size_t cnt, cap;
    char *dir; /**< NULL: in memory only */
    bool enabled;
    bool allow_if_no_acl;
    kb_acl_commit_fn *commit; /**< set: changes go through it (the metadata log), not the file */
    void *commit_opaque;
    char **super; /**< super.users principals */
    size_t super_cnt;
};

/* kb_acl.c */
/** Deep copy of @p src into @p dst. 0 or KB_E_NOMEM (dst zeroed then). */
int kb_acl_binding_copy(kb_acl_binding_t *dst, const kb_acl_binding_t *src);
void kb_acl_binding_clear(kb_acl_binding_t *b);
/** Same content (everything but the id). */
bool kb_acl_binding_same(const kb_acl_binding_t *a, const kb_acl_binding_t *b);
/** Whether @p id is all zero (no binding has that id). */
bool kb_acl_id_is_zero(const uint8_t id[16]);

/* kb_acl_store.c */
/** The store file's bytes for @p n bindings appended to @p wr. 0 or KB_E_NOMEM. */
int kb_acl_store_encode(kp_writer_t *wr, const kb_acl_binding_t *const *v, size_t n);
/**
 * Parse a store file's bytes (untrusted) into @p out (owned bindings). 0, or KB_E_PARSE /
 * KB_E_NOMEM with a message starting with @p path in @p errstr (the list is then empty).
 */
int kb_acl_store_parse(const uint8_t *buf, size_t len, const char *path, kb_acl_list_t *out,
                       char *errstr, size_t errstr_size);
/**
 * Write @p n bindings (the pointers of @p v) as the store of @p dir, atomically.
 * 0 or KB_E_NOMEM / KB_E_IO (logged with the file name).
 */
int kb_acl_store_write(const char *dir, const kb_acl_binding_t *const *v, size_t n);
/**
 * Read the store of @p dir into @p out (owned bindings). 0 (also when there is no file: empty
 * list), or KB_E_IO / KB_E_PARSE / KB_E_NOMEM with a message naming the file in @p errstr.
 */
int kb_acl_store_read(const char *dir, kb_acl_list_t *out, char *errstr, size_t errstr_size);

#endif /* KB_ACL_INT_H */
