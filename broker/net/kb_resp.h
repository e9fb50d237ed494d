/*
 * kb_resp.h -- a response body as a chain of segments: memory buffers and file ranges
 * (fd + offset + length), so that Fetch can send record batches from segment files with
 * sendfile(2) without copying them through user space.
 *
 * The network layer writes the size prefix and the response header itself; a handler builds
 * only the body. A response has exactly one owner: the handler until it hands it over
 * (returning KB_API_RESPOND or kb_req_complete()), then the network layer, which calls each
 * segment's release callback once the segment is written or dropped.
 *
 * @thread any (a response is used by one thread at a time)
 */
#ifndef KB_RESP_H
#define KB_RESP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kp_writer.h"

/** Called once when a segment is done (written or dropped); @p opaque as given. */
typedef void(kb_resp_release_fn)(void *opaque);

typedef enum kb_seg_kind_e {
    KB_SEG_MEM = 0,  /**< bytes in memory */
    KB_SEG_FILE = 1, /**< a range of an open file */
} kb_seg_kind_t;

/** One segment. Internal layout, exposed for the writer in the network layer. */
typedef struct kb_seg_s {
    struct kb_seg_s *next;
    kb_seg_kind_t kind;
    const uint8_t *ptr; /**< MEM: first byte not yet written */
    size_t len;         /**< bytes not yet written */
    int fd;             /**< FILE: the file (borrowed; kept open until release) */
    off_t off;          /**< FILE: offset of the first byte not yet written */
    kb_resp_release_fn *release;
    void *opaque;
    uint8_t *owned;   /**< MEM: buffer owned by the segment (freed with free()), or NULL */
    size_t owned_cap; /**< MEM: room in @p owned for merging small appends; 0 = none */
} kb_seg_t;

typedef struct kb_resp_s {
    kb_seg_t *head, *tail;
    size_t len;  /**< total body bytes */
    size_t nseg; /**< number of segments */
    int err;     /**< sticky: 0 or a kb_err_t; a failed append leaves the response unusable */
} kb_resp_t;

/** A new empty response, or NULL. */
kb_resp_t *kb_resp_new(void);

/** Release every segment and free @p resp. NULL-safe. */
void kb_resp_free(kb_resp_t *resp);

/** Append a copy of @p len bytes. Small appends are merged into one buffer. 0 or kb_err_t. */
int kb_resp_append_copy(kb_resp_t *resp, const void *p, size_t len);

/** Append @p len bytes at @p p without copying; @p release (may be NULL) runs when they are
 *  written or dropped, and @p p must stay valid until then. 0 or kb_err_t (on failure
 *  @p release has already been called). */
int kb_resp_append_mem(kb_resp_t *resp, const void *p, size_t len, kb_resp_release_fn *release,
                       void *opaque);

/** Append @p len bytes of the open file @p fd from @p off (sent with sendfile). @p fd must stay
 *  open and the range unchanged until @p release runs. 0 or kb_err_t (on failure @p release
 *  has already been called). */
int kb_resp_append_file(kb_resp_t *resp, int fd, off_t off, size_t len, kb_resp_release_fn *release,
                        void *opaque);

/** Append what @p wr holds, taking its buffer (the writer is reset). 0 or kb_err_t (also when
 *  the writer itself has an error). */
int kb_resp_append_writer(kb_resp_t *resp, kp_writer_t *wr);

/** A response holding the bytes of @p wr (taken), or NULL; convenience for handlers. */
kb_resp_t *kb_resp_from_writer(kp_writer_t *wr);

/** Total body length. */
static inline size_t kb_resp_len(const kb_resp_t *resp)
{
    return resp->len;
}

/**
 * Copy the whole body into one buffer: memory segments are copied, file segments read with
 * pread(2). @p resp is not changed (its segments are released by kb_resp_free() as usual).
 * @param out     out: a malloc'd buffer of *@p outlen bytes (at least 1 byte allocated), owned by
 *                the caller; NULL on failure
 * @return 0, KB_E_NOMEM, KB_E_IO (a file could not be read or is shorter than its range), or
 *         the response's sticky error.
 */
int kb_resp_flatten(const kb_resp_t *resp, uint8_t **out, size_t *outlen);

/* ---- used by the network layer ---- */

/** Release one detached segment (calls its release callback and frees it). */
void kb_seg_free(kb_seg_t *seg);

#endif /* KB_RESP_H */
