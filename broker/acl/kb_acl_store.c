/*
 * kb_acl_store.c -- the durable ACL store, `<first log dir>/kbroker-acls`.
 *
 * Layout (big-endian): magic "KBAC", int16 format version (1), uint32 CRC-32C of the payload,
 * int32 payload length, payload. Payload: int32 binding count, then per binding: 16-byte id,
 * int8 resource type, int8 pattern type, int8 operation, int8 permission, then the resource
 * name, the principal and the host as int16-length strings.
 *
 * The whole image is rewritten on every change with kb_file_write_atomic() (broker/util): a temp
 * file, fsync, rename over the old file, fsync of the directory. A crash leaves either the old or
 * the new file. Nothing read back is trusted: lengths, counts and values are checked, the
 * payload must be consumed exactly, and every binding must pass CreateAcls validation.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb_acl_int.h"
#include "kb_err.h"
#include "kb_file.h"
#include "kb_log.h"
#include "kp_crc32c.h"
#include "kp_errcode.h"
#include "kp_reader.h"
#include "kp_writer.h"

#define KB_ACL_STORE_MAGIC   "KBAC"
#define KB_ACL_STORE_VERSION 1
#define KB_ACL_STORE_HDR     14 /* magic 4, version 2, crc 4, length 4 */

static void kb_acl_store_wstr(kp_writer_t *wr, const char *s)
{
    size_t n = strlen(s);
    kp_write_int16(wr, (int16_t)n);
    kp_write_raw(wr, s, n);
}

int kb_acl_store_encode(kp_writer_t *wr, const kb_acl_binding_t *const *v, size_t n)
{
    kp_writer_t pl;
    int rc = 0;

    kp_writer_init(&pl);
    kp_write_int32(&pl, (int32_t)n);
    for (size_t i = 0; i < n; i++) {
        kp_write_raw(&pl, v[i]->id, 16);
        kp_write_int8(&pl, v[i]->restype);
        kp_write_int8(&pl, v[i]->pattern);
        kp_write_int8(&pl, v[i]->op);
        kp_write_int8(&pl, v[i]->perm);
        kb_acl_store_wstr(&pl, v[i]->name);
        kb_acl_store_wstr(&pl, v[i]->principal);
        kb_acl_store_wstr(&pl, v[i]->host);
    }
    if (!pl.err) {
        kp_write_raw(wr, KB_ACL_STORE_MAGIC, 4);
        kp_write_int16(wr, KB_ACL_STORE_VERSION);
        kp_write_uint32(wr, kp_crc32c(0, pl.buf, pl.len));
        kp_write_int32(wr, (int32_t)pl.len);
        kp_write_raw(wr, pl.buf, pl.len);
    }
    if (pl.err || wr->err)
        rc = KB_E_NOMEM;
    kp_writer_free(&pl);
    return rc;
}

int kb_acl_store_write(const char *dir, const kb_acl_binding_t *const *v, size_t n)
{
    char path[4096];
    kp_writer_t wr;
    int rc;

    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, KB_ACL_FILE) >= sizeof(path))
        return KB_E_INVALID;
    kp_writer_init(&wr);
    rc = kb_acl_store_encode(&wr, v, n);
    if (rc == 0 && kb_file_write_atomic(dir, path, wr.buf, wr.len) != 0) {
        kb_log_error("acl", "cannot write %s: %s (the ACL change is not applied)", path,
                     strerror(errno));
        rc = KB_E_IO;
    }
    kp_writer_free(&wr);
    return rc;
}

/* A NUL-terminated copy of an int16-length string; NULL on a short or bad read (reader
 * failed) or on a string holding a NUL. */
static char *kb_acl_store_rstr(kp_reader_t *rd)
{
    int16_t n = kp_read_int16(rd);
    const uint8_t *p;
    char *s;
    if (rd->err)
        return NULL;
    if (n < 0) {
        kp_reader_fail(rd, KP_E_CORRUPT, "negative string length");
        return NULL;
    }
    p = kp_read_raw(rd, (size_t)n);
    if (!p)
        return NULL;
    if (memchr(p, '\0', (size_t)n)) {
        kp_reader_fail(rd, KP_E_CORRUPT, "string with a NUL byte");
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (!s) {
        kp_reader_fail(rd, KP_E_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(s, p, (size_t)n);
    s[n] = '\0';
    return s;
}

int kb_acl_store_parse(const uint8_t *buf, size_t len, const char *path, kb_acl_list_t *out,
                       char *errstr, size_t errstr_size)
{
    kp_reader_t rd;
    uint32_t crc;
    int32_t plen, n;
    int rc = KB_E_PARSE;

    out->v = NULL;
    out->cnt = 0;
    if (len < KB_ACL_STORE_HDR || memcmp(buf, KB_ACL_STORE_MAGIC, 4) != 0) {
        snprintf(errstr, errstr_size, "%s: not a kbroker ACL file (the file is corrupt)", path);
        return rc;
    }
    kp_reader_init(&rd, buf, len);
    kp_reader_skip(&rd, 4);
    if (kp_read_int16(&rd) != KB_ACL_STORE_VERSION) {
        snprintf(errstr, errstr_size, "%s: unknown format version", path);
        return rc;
    }
    crc = kp_read_uint32(&rd);
    plen = kp_read_int32(&rd);
    if (plen < 0 || (size_t)plen != kp_reader_remaining(&rd) ||
        kp_crc32c(0, buf + KB_ACL_STORE_HDR, (size_t)plen) != crc) {
        snprintf(errstr, errstr_size,
                 "%s: checksum or length mismatch (the file is corrupt or truncated)", path);
        return rc;
    }
    n = kp_read_int32(&rd);
    /* 23 bytes is the smallest binding; the count must fit the payload. */
    if (rd.err || n < 0 || n > KB_ACL_MAX_BINDINGS || (size_t)n > kp_reader_remaining(&rd) / 23) {
        snprintf(errstr, errstr_size, "%s: bad binding count (the file is corrupt)", path);
        return rc;
    }
    out->v = calloc((size_t)n + 1, sizeof(*out->v));
    if (!out->v) {
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        return KB_E_NOMEM;
    }
    for (int32_t i = 0; i < n; i++) {
        kb_acl_binding_t *b = &out->v[out->cnt];
        const uint8_t *id = kp_read_raw(&rd, 16);
        char msg[300] = "";
        if (id)
            memcpy(b->id, id, 16);
        b->restype = kp_read_int8(&rd);
        b->pattern = kp_read_int8(&rd);
        b->op = kp_read_int8(&rd);
        b->perm = kp_read_int8(&rd);
        b->name = kb_acl_store_rstr(&rd);
        b->principal = kb_acl_store_rstr(&rd);
        b->host = kb_acl_store_rstr(&rd);
        out->cnt++; /* owned from here on, freed with the list */
        if (rd.err) {
            snprintf(errstr, errstr_size, "%s: binding %d: %s (the file is corrupt)", path, (int)i,
                     rd.errstr ? rd.errstr : "malformed");
            goto out;
        }
        if (kb_acl_id_is_zero(b->id) || kb_acl_validate(b, msg, sizeof(msg)) != KP_ERR_NONE) {
            snprintf(errstr, errstr_size, "%s: binding %d: %s (the file is corrupt)", path, (int)i,
                     msg[0] ? msg : "zero id");
            goto out;
        }
        for (size_t k = 0; k + 1 < out->cnt; k++)
            if (!memcmp(out->v[k].id, b->id, 16) || kb_acl_binding_same(&out->v[k], b)) {
                snprintf(errstr, errstr_size, "%s: binding %d is a duplicate (the file is corrupt)",
                         path, (int)i);
                goto out;
            }
    }
    if (kp_reader_remaining(&rd) != 0) {
        snprintf(errstr, errstr_size, "%s: trailing bytes (the file is corrupt)", path);
        goto out;
    }
    rc = 0;
out:
    if (rc)
        kb_acl_list_free(out);
    return rc;
}

int kb_acl_store_read(const char *dir, kb_acl_list_t *out, char *errstr, size_t errstr_size)
{
    char path[4096];
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc;

    out->v = NULL;
    out->cnt = 0;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, KB_ACL_FILE) >= sizeof(path)) {
        snprintf(errstr, errstr_size, "%s: directory name too long", dir);
        return KB_E_INVALID;
    }
    if (kb_file_read_all(path, &buf, &len) != 0) {
        int e = errno;
        if (e == ENOENT)
            return 0;
        snprintf(errstr, errstr_size, "%s: cannot read: %s", path, strerror(e));
        return e == ENOMEM ? KB_E_NOMEM : KB_E_IO;
    }
    rc = kb_acl_store_parse(buf, len, path, out, errstr, errstr_size);
    if (rc == 0)
        kb_log_info("acl", "loaded %zu ACL bindings from %s", out->cnt, path);
    free(buf);
    return rc;
}
