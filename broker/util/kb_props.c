#include "kb_props.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kb_err.h"

typedef struct kb_props_sbuf_s {
    char *p;
    size_t len, cap;
} kb_props_sbuf_t;

static int kb_props_sbuf_put(kb_props_sbuf_t *sb, char c)
{
    if (sb->len + 1 >= sb->cap) {
        size_t ncap = sb->cap ? sb->cap * 2 : 256;
        char *np = realloc(sb->p, ncap);
        if (!np)
            return KB_E_NOMEM;
        sb->p = np;
        sb->cap = ncap;
    }
    sb->p[sb->len++] = c;
    sb->p[sb->len] = '\0';
    return 0;
}

static int kb_props_is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\f';
}

static int kb_props_hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Read the 4 hex digits of a \uXXXX escape starting at s[*i] (after the 'u'). */
static long kb_props_u4(const char *s, size_t n, size_t *i)
{
    long v = 0;
    if (*i + 4 > n)
        return -1;
    for (int k = 0; k < 4; k++) {
        int h = kb_props_hex(s[*i + (size_t)k]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    *i += 4;
    return v;
}

static int kb_props_put_utf8(kb_props_sbuf_t *out, unsigned long cp)
{
    int r = 0;
    if (cp < 0x80) {
        r |= kb_props_sbuf_put(out, (char)cp);
    } else if (cp < 0x800) {
        r |= kb_props_sbuf_put(out, (char)(0xC0 | (cp >> 6)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        r |= kb_props_sbuf_put(out, (char)(0xE0 | (cp >> 12)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | ((cp >> 6) & 0x3F)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | (cp & 0x3F)));
    } else {
        r |= kb_props_sbuf_put(out, (char)(0xF0 | (cp >> 18)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | ((cp >> 12) & 0x3F)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | ((cp >> 6) & 0x3F)));
        r |= kb_props_sbuf_put(out, (char)(0x80 | (cp & 0x3F)));
    }
    return r ? KB_E_NOMEM : 0;
}

/* Undo the escapes of s[0..n) into out (Properties.loadConvert). Returns 0, KB_E_PARSE with a
 * static description in *why, or KB_E_NOMEM. */
static int kb_props_unescape(const char *s, size_t n, kb_props_sbuf_t *out, const char **why)
{
    out->len = 0;
    if (kb_props_sbuf_put(out, 'x'))
        return KB_E_NOMEM;
    out->len = 0;
    out->p[0] = '\0';
    for (size_t i = 0; i < n;) {
        char c = s[i++];
        if (c != '\\' || i >= n) {
            if (kb_props_sbuf_put(out, c))
                return KB_E_NOMEM;
            continue;
        }
        c = s[i++];
        if (c == 'u') {
            long cp = kb_props_u4(s, n, &i);
            if (cp < 0) {
                *why = "malformed \\uxxxx escape";
                return KB_E_PARSE;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                long lo = -1;
                if (i + 2 <= n && s[i] == '\\' && s[i + 1] == 'u') {
                    i += 2;
                    lo = kb_props_u4(s, n, &i);
                }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    *why = "\\u escape with an unpaired UTF-16 surrogate";
                    return KB_E_PARSE;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                *why = "\\u escape with an unpaired UTF-16 surrogate";
                return KB_E_PARSE;
            }
            if (cp == 0) {
                *why = "\\u0000 is not allowed";
                return KB_E_PARSE;
            }
            if (kb_props_put_utf8(out, (unsigned long)cp))
                return KB_E_NOMEM;
            continue;
        }
        switch (c) {
        case 't':
            c = '\t';
            break;
        case 'r':
            c = '\r';
            break;
        case 'n':
            c = '\n';
            break;
        case 'f':
            c = '\f';
            break;
        default:
            break;
        }
        if (kb_props_sbuf_put(out, c))
            return KB_E_NOMEM;
    }
    return 0;
}

/* Split one logical line into key and value and hand them to the callback. */
static int kb_props_emit(const char *line, size_t lim, int lineno, kb_props_cb *cb, void *opaque,
                         kb_props_sbuf_t *kbuf, kb_props_sbuf_t *vbuf, char *errstr,
                         size_t errstr_size)
{
    size_t keylen = 0, vstart = lim;
    int has_sep = 0, bs = 0, r;
    const char *why = NULL;

    while (keylen < lim) {
        char c = line[keylen];
        if ((c == '=' || c == ':') && !bs) {
            vstart = keylen + 1;
            has_sep = 1;
            break;
        }
        if (kb_props_is_blank(c) && !bs) {
            vstart = keylen + 1;
            break;
        }
        bs = (c == '\\') ? !bs : 0;
        keylen++;
    }
    while (vstart < lim) {
        char c = line[vstart];
        if (!kb_props_is_blank(c)) {
            if (!has_sep && (c == '=' || c == ':'))
                has_sep = 1;
            else
                break;
        }
        vstart++;
    }
    r = kb_props_unescape(line, keylen, kbuf, &why);
    if (!r)
        r = kb_props_unescape(line + vstart, lim - vstart, vbuf, &why);
    if (r == KB_E_PARSE)
        snprintf(errstr, errstr_size, "line %d: %s", lineno, why);
    else if (r == KB_E_NOMEM)
        snprintf(errstr, errstr_size, "out of memory");
    if (r)
        return r;
    return cb(opaque, kbuf->p, vbuf->p, lineno);
}

int kb_props_parse(const char *buf, size_t len, kb_props_cb *cb, void *opaque, char *errstr,
                   size_t errstr_size)
{
    kb_props_sbuf_t raw = {0}, kbuf = {0}, vbuf = {0};
    size_t pos = 0;
    int lineno = 1, r = 0;

    if (errstr_size)
        errstr[0] = '\0';
    while (pos < len && r == 0) {
        int start_line, bs = 0;

        while (pos < len && kb_props_is_blank(buf[pos]))
            pos++;
        if (pos >= len)
            break;
        if (buf[pos] == '\n' || buf[pos] == '\r') {
            if (buf[pos] == '\r' && pos + 1 < len && buf[pos + 1] == '\n')
                pos++;
            pos++;
            lineno++;
            continue;
        }
        if (buf[pos] == '#' || buf[pos] == '!') {
            /* A comment line never continues, whatever it ends with. */
            while (pos < len && buf[pos] != '\n' && buf[pos] != '\r')
                pos++;
            continue;
        }
        start_line = lineno;
        raw.len = 0;
        while (pos < len) {
            char c = buf[pos];
            if (c == '\n' || c == '\r') {
                pos++;
                if (c == '\r' && pos < len && buf[pos] == '\n')
                    pos++;
                lineno++;
                if (!bs)
                    break;
                /* Continuation: drop the backslash and the next line's leading blanks. */
                raw.len--;
                bs = 0;
                while (pos < len && kb_props_is_blank(buf[pos]))
                    pos++;
                continue;
            }
            if (c == '\0') {
                snprintf(errstr, errstr_size, "line %d: NUL byte in properties text", lineno);
                r = KB_E_PARSE;
                goto out;
            }
            if (kb_props_sbuf_put(&raw, c)) {
                snprintf(errstr, errstr_size, "out of memory");
                r = KB_E_NOMEM;
                goto out;
            }
            bs = (c == '\\') ? !bs : 0;
            pos++;
        }
        if (bs) /* a lone backslash at end of input continues into nothing: dropped */
            raw.len--;
        if (raw.len == 0)
            continue;
        r = kb_props_emit(raw.p, raw.len, start_line, cb, opaque, &kbuf, &vbuf, errstr,
                          errstr_size);
    }
out:
    free(raw.p);
    free(kbuf.p);
    free(vbuf.p);
    return r;
}

int kb_props_load_file(const char *path, kb_props_cb *cb, void *opaque, char *errstr,
                       size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    char *data = NULL;
    size_t len = 0, cap = 0;
    int r;

    if (!f) {
        snprintf(errstr, errstr_size, "%s: %s", path, strerror(errno));
        return KB_E_IO;
    }
    for (;;) {
        size_t n;
        if (cap - len < 4096) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nd = realloc(data, ncap);
            if (!nd) {
                snprintf(errstr, errstr_size, "%s: out of memory", path);
                r = KB_E_NOMEM;
                goto close_file;
            }
            data = nd;
            cap = ncap;
        }
        n = fread(data + len, 1, cap - len, f);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(f)) {
        snprintf(errstr, errstr_size, "%s: read error", path);
        r = KB_E_IO;
        goto close_file;
    }
    r = kb_props_parse(data, len, cb, opaque, errstr, errstr_size);
    if (r == KB_E_PARSE) {
        /* Prefix the path: "FILE: line N: ..." */
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s: %s", path, errstr);
        snprintf(errstr, errstr_size, "%s", tmp);
    }
close_file:
    free(data);
    fclose(f);
    return r;
}

bool kb_props_list_has(const char *list, const char *item, bool nocase)
{
    size_t ilen;

    if (!list || !item)
        return false;
    ilen = strlen(item);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");

        if (n == ilen && (nocase ? strncasecmp(p, item, n) : strncmp(p, item, n)) == 0)
            return true;
        p += n;
        if (*p == ',')
            p++;
    }
    return false;
}
