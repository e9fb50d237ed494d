#include "kb_resp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kb_err.h"

/* Appends of at most this many bytes are merged into the tail's owned buffer. */
#define KB_RESP_MERGE_MAX 4096
#define KB_RESP_CHUNK     8192

kb_resp_t *kb_resp_new(void)
{
    return calloc(1, sizeof(kb_resp_t));
}

void kb_seg_free(kb_seg_t *seg)
{
    if (!seg)
        return;
    if (seg->release)
        seg->release(seg->opaque);
    free(seg->owned);
    free(seg);
}

void kb_resp_free(kb_resp_t *resp)
{
    if (!resp)
        return;
    for (kb_seg_t *s = resp->head, *n; s; s = n) {
        n = s->next;
        kb_seg_free(s);
    }
    free(resp);
}

static kb_seg_t *kb_resp_push(kb_resp_t *resp)
{
    kb_seg_t *s = calloc(1, sizeof(*s));
    if (!s) {
        resp->err = KB_E_NOMEM;
        return NULL;
    }
    s->fd = -1;
    if (resp->tail)
        resp->tail->next = s;
    else
        resp->head = s;
    resp->tail = s;
    resp->nseg++;
    return s;
}

int kb_resp_append_copy(kb_resp_t *resp, const void *p, size_t len)
{
    kb_seg_t *t = resp->tail;
    if (resp->err)
        return resp->err;
    if (len == 0)
        return 0;
    /* Small appends go into the tail's chunk while it has room. */
    if (t && t->kind == KB_SEG_MEM && t->owned_cap && t->ptr == t->owned &&
        t->len + len <= t->owned_cap) {
        memcpy(t->owned + t->len, p, len);
        t->len += len;
        resp->len += len;
        return 0;
    }
    t = kb_resp_push(resp);
    if (!t)
        return resp->err;
    if (len <= KB_RESP_MERGE_MAX) {
        t->owned = malloc(KB_RESP_CHUNK);
        t->owned_cap = KB_RESP_CHUNK;
    } else {
        t->owned = malloc(len);
    }
    if (!t->owned) {
        resp->err = KB_E_NOMEM;
        return resp->err;
    }
    memcpy(t->owned, p, len);
    t->ptr = t->owned;
    t->len = len;
    t->kind = KB_SEG_MEM;
    resp->len += len;
    return 0;
}

int kb_resp_append_mem(kb_resp_t *resp, const void *p, size_t len, kb_resp_release_fn *release,
                       void *opaque)
{
    kb_seg_t *s;
    if (resp->err || !(s = kb_resp_push(resp))) {
        if (release)
            release(opaque);
        return resp->err;
    }
    s->kind = KB_SEG_MEM;
    s->ptr = p;
    s->len = len;
    s->release = release;
    s->opaque = opaque;
    resp->len += len;
    return 0;
}

int kb_resp_append_file(kb_resp_t *resp, int fd, off_t off, size_t len, kb_resp_release_fn *release,
                        void *opaque)
{
    kb_seg_t *s;
    if (fd < 0 || off < 0) {
        if (release)
            release(opaque);
        resp->err = KB_E_INVALID;
        return resp->err;
    }
    if (resp->err || !(s = kb_resp_push(resp))) {
        if (release)
            release(opaque);
        return resp->err;
    }
    s->kind = KB_SEG_FILE;
    s->fd = fd;
    s->off = off;
    s->len = len;
    s->release = release;
    s->opaque = opaque;
    resp->len += len;
    return 0;
}

int kb_resp_append_writer(kb_resp_t *resp, kp_writer_t *wr)
{
    kb_seg_t *s;
    size_t len = 0;
    uint8_t *buf;

    if (wr->err) {
        resp->err = KB_E_INVALID;
        return resp->err;
    }
    if (resp->err)
        return resp->err;
    if (wr->len == 0)
        return 0;
    if (wr->fixed || wr->len <= 512)
        return kb_resp_append_copy(resp, wr->buf, wr->len);
    if (!(s = kb_resp_push(resp)))
        return resp->err;
    buf = kp_writer_steal(wr, &len);
    s->kind = KB_SEG_MEM;
    s->owned = buf;
    s->ptr = buf;
    s->len = len;
    resp->len += len;
    return 0;
}

kb_resp_t *kb_resp_from_writer(kp_writer_t *wr)
{
    kb_resp_t *resp = kb_resp_new();
    if (!resp)
        return NULL;
    if (kb_resp_append_writer(resp, wr) != 0) {
        kb_resp_free(resp);
        return NULL;
    }
    return resp;
}

int kb_resp_flatten(const kb_resp_t *resp, uint8_t **out, size_t *outlen)
{
    size_t o = 0;
    uint8_t *buf;

    *out = NULL;
    *outlen = 0;
    if (resp->err)
        return resp->err;
    buf = malloc(resp->len ? resp->len : 1);
    if (!buf)
        return KB_E_NOMEM;
    for (const kb_seg_t *s = resp->head; s; s = s->next) {
        if (s->len > resp->len - o) {
            free(buf); /* segments longer than the total: a broken response */
            return KB_E_IO;
        }
        if (s->kind == KB_SEG_MEM) {
            memcpy(buf + o, s->ptr, s->len);
        } else {
            size_t got = 0;
            while (got < s->len) {
                ssize_t n = pread(s->fd, buf + o + got, s->len - got, s->off + (off_t)got);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    free(buf);
                    return KB_E_IO;
                }
                got += (size_t)n;
            }
        }
        o += s->len;
    }
    *out = buf;
    *outlen = o;
    return 0;
}
