/*
 * kmc_props.c -- Java .properties parsing (see kmc_props.h).
 */
#include "kmc_props.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing byte buffer for one key or value. */
typedef struct kmc_buf {
    char *p;
    size_t n, cap;
} kmc_buf_t;

static int kmc_buf_put(kmc_buf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        char *np;
        while (cap < b->n + n + 1)
            cap *= 2;
        np = realloc(b->p, cap);
        if (np == NULL)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static int kmc_props_fail(char *errstr, size_t errstr_size, const char *origin, int line,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int kmc_props_fail(char *errstr, size_t errstr_size, const char *origin, int line,
                          const char *fmt, ...)
{
    va_list ap;
    int off = snprintf(errstr, errstr_size, "%s line %d: ", origin, line);

    if (off < 0 || (size_t)off >= errstr_size)
        return -1;
    va_start(ap, fmt);
    vsnprintf(errstr + off, errstr_size - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

static bool kmc_props_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\f';
}

/* Append code point @p cp as UTF-8. */
static int kmc_props_utf8(kmc_buf_t *b, unsigned cp)
{
    char u[3];
    size_t n;

    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    }
    return kmc_buf_put(b, u, n);
}

/*
 * Decode one logical line @p s[0..n) (continuations already joined, escapes still in place)
 * into key and value.
 */
static int kmc_props_entry(const char *s, size_t n, kmc_buf_t *key, kmc_buf_t *val, bool *bad_u)
{
    size_t i = 0;
    kmc_buf_t *cur = key;
    bool in_key = true;

    *bad_u = false;
    while (i < n) {
        char c = s[i];
        if (in_key && (c == '=' || c == ':' || kmc_props_ws(c))) {
            /* End of key: whitespace, then at most one separator, then whitespace. */
            while (i < n && kmc_props_ws(s[i]))
                i++;
            if (i < n && (s[i] == '=' || s[i] == ':'))
                i++;
            while (i < n && kmc_props_ws(s[i]))
                i++;
            in_key = false;
            cur = val;
            continue;
        }
        if (c == '\\' && i + 1 < n) {
            char e = s[i + 1];
            char out = e;
            i += 2;
            if (e == 'u') {
                unsigned cp = 0;
                if (i + 4 > n) {
                    *bad_u = true;
                    return 0;
                }
                for (int k = 0; k < 4; k++) {
                    char h = s[i + (size_t)k];
                    cp <<= 4;
                    if (h >= '0' && h <= '9')
                        cp |= (unsigned)(h - '0');
                    else if (h >= 'a' && h <= 'f')
                        cp |= (unsigned)(h - 'a' + 10);
                    else if (h >= 'A' && h <= 'F')
                        cp |= (unsigned)(h - 'A' + 10);
                    else {
                        *bad_u = true;
                        return 0;
                    }
                }
                i += 4;
                if (kmc_props_utf8(cur, cp))
                    return -1;
                continue;
            }
            if (e == 't')
                out = '\t';
            else if (e == 'n')
                out = '\n';
            else if (e == 'r')
                out = '\r';
            else if (e == 'f')
                out = '\f';
            if (kmc_buf_put(cur, &out, 1))
                return -1;
            continue;
        }
        if (c == '\\') { /* a lone backslash at the very end: dropped, as Java does */
            i++;
            continue;
        }
        if (kmc_buf_put(cur, &c, 1))
            return -1;
        i++;
    }
    return 0;
}

static int kmc_props_add(kmc_props_t *p, kmc_buf_t *key, kmc_buf_t *val, int line)
{
    kmc_prop_t *e;
    size_t a = 0, b = val->n;

    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        kmc_prop_t *nv = realloc(p->v, cap * sizeof(*nv));
        if (nv == NULL)
            return -1;
        p->v = nv;
        p->cap = cap;
    }
    while (a < b && (kmc_props_ws(val->p[a]) || val->p[a] == '\r' || val->p[a] == '\n'))
        a++;
    while (b > a && (kmc_props_ws(val->p[b - 1]) || val->p[b - 1] == '\r' || val->p[b - 1] == '\n'))
        b--;
    e = &p->v[p->n];
    e->key = key->p;
    e->value = malloc(b - a + 1);
    if (e->value == NULL)
        return -1;
    if (b > a)
        memcpy(e->value, val->p + a, b - a);
    e->value[b - a] = '\0';
    e->line = line;
    key->p = NULL;
    key->n = key->cap = 0;
    p->n++;
    return 0;
}

int kmc_props_parse(kmc_props_t *p, const char *text, size_t len, const char *origin, char *errstr,
                    size_t errstr_size)
{
    size_t pos = 0;
    int line = 0;
    kmc_buf_t logical = {0}, key = {0}, val = {0};
    int rc = -1;

    if (memchr(text, '\0', len) != NULL) {
        const char *z = memchr(text, '\0', len);
        int zl = 1;
        for (const char *q = text; q < z; q++)
            zl += *q == '\n';
        return kmc_props_fail(errstr, errstr_size, origin, zl,
                              "NUL byte: not a text properties file");
    }
    while (pos < len) {
        int first_line;
        bool cont = true, comment_checked = false, bad_u;

        logical.n = 0;
        first_line = line + 1;
        while (cont && pos < len) {
            size_t end = pos, s, e, bs = 0;
            while (end < len && text[end] != '\n' && text[end] != '\r')
                end++;
            line++;
            s = pos;
            e = end;
            /* Next physical line: \n, \r or \r\n. */
            pos = end;
            if (pos < len)
                pos += (text[pos] == '\r' && pos + 1 < len && text[pos + 1] == '\n') ? 2 : 1;
            /* Leading whitespace: always skipped (also on continuation lines). */
            while (s < e && kmc_props_ws(text[s]))
                s++;
            if (!comment_checked) {
                if (s == e || text[s] == '#' || text[s] == '!') {
                    cont = false; /* blank or comment: never continues */
                    s = e;
                    break;
                }
                comment_checked = true;
            }
            /* An odd number of trailing backslashes continues the line. */
            for (size_t q = e; q > s && text[q - 1] == '\\'; q--)
                bs++;
            cont = bs % 2 == 1;
            if (cont)
                e--;
            if (kmc_buf_put(&logical, text + s, e - s))
                goto nomem;
        }
        if (logical.n == 0)
            continue;
        key.n = 0;
        val.n = 0;
        if (key.p)
            key.p[0] = '\0';
        if (kmc_buf_put(&key, "", 0) || kmc_buf_put(&val, "", 0))
            goto nomem;
        if (kmc_props_entry(logical.p, logical.n, &key, &val, &bad_u))
            goto nomem;
        if (bad_u) {
            kmc_props_fail(errstr, errstr_size, origin, first_line,
                           "malformed \\uXXXX escape (four hexadecimal digits expected)");
            goto out;
        }
        if (key.n == 0) {
            kmc_props_fail(errstr, errstr_size, origin, first_line, "empty key");
            goto out;
        }
        if (kmc_props_add(p, &key, &val, first_line))
            goto nomem;
    }
    rc = 0;
    goto out;
nomem:
    kmc_props_fail(errstr, errstr_size, origin, line, "out of memory");
out:
    free(logical.p);
    free(key.p);
    free(val.p);
    return rc;
}

int kmc_props_load(kmc_props_t *p, const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;
    int rc;

    if (f == NULL) {
        snprintf(errstr, errstr_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    buf = malloc(KMC_PROPS_MAX_BYTES + 1);
    if (buf == NULL) {
        fclose(f);
        snprintf(errstr, errstr_size, "%s: out of memory", path);
        return -1;
    }
    n = fread(buf, 1, KMC_PROPS_MAX_BYTES + 1, f);
    if (ferror(f)) {
        snprintf(errstr, errstr_size, "%s: read error: %s", path, strerror(errno));
        rc = -1;
    } else if (n > KMC_PROPS_MAX_BYTES) {
        snprintf(errstr, errstr_size, "%s: larger than %d bytes: not a properties file", path,
                 KMC_PROPS_MAX_BYTES);
        rc = -1;
    } else {
        rc = kmc_props_parse(p, buf, n, path, errstr, errstr_size);
    }
    free(buf);
    fclose(f);
    return rc;
}

const kmc_prop_t *kmc_props_get(const kmc_props_t *p, const char *key)
{
    for (size_t i = p->n; i > 0; i--)
        if (strcmp(p->v[i - 1].key, key) == 0)
            return &p->v[i - 1];
    return NULL;
}

int kmc_props_is_last(const kmc_props_t *p, size_t i)
{
    for (size_t k = i + 1; k < p->n; k++)
        if (strcmp(p->v[k].key, p->v[i].key) == 0)
            return 0;
    return 1;
}

void kmc_props_free(kmc_props_t *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->v[i].key);
        free(p->v[i].value);
    }
    free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
}
