/*
 * json_check.h -- a strict JSON syntax checker for the printer tests (RFC 8259 grammar; one
 * value, nothing after it). Not a parser: it only says whether the text is well formed.
 */
#ifndef JSON_CHECK_H
#define JSON_CHECK_H

#include <stddef.h>
#include <string.h>

typedef struct json_cur_s {
    const char *p, *end;
    int depth;
} json_cur_t;

static int json_value(json_cur_t *c);

static inline void json_ws(json_cur_t *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static inline int json_lit(json_cur_t *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

static inline int json_string(json_cur_t *c)
{
    if (c->p >= c->end || *c->p != '"')
        return 0;
    c->p++;
    while (c->p < c->end) {
        unsigned char ch = (unsigned char)*c->p++;
        if (ch == '"')
            return 1;
        if (ch < 0x20)
            return 0;
        if (ch == '\\') {
            if (c->p >= c->end)
                return 0;
            ch = (unsigned char)*c->p++;
            if (ch == 'u') {
                int i;
                for (i = 0; i < 4; i++, c->p++)
                    if (c->p >= c->end || !strchr("0123456789abcdefABCDEF", *c->p) || !*c->p)
                        return 0;
            } else if (!strchr("\"\\/bfnrt", ch) || !ch) {
                return 0;
            }
        }
    }
    return 0;
}

static inline int json_digits(json_cur_t *c)
{
    const char *s = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
        c->p++;
    return c->p > s;
}

static inline int json_number(json_cur_t *c)
{
    if (c->p < c->end && *c->p == '-')
        c->p++;
    if (c->p < c->end && *c->p == '0')
        c->p++;
    else if (!json_digits(c))
        return 0;
    if (c->p < c->end && *c->p == '.') {
        c->p++;
        if (!json_digits(c))
            return 0;
    }
    if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
        c->p++;
        if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
            c->p++;
        if (!json_digits(c))
            return 0;
    }
    return 1;
}

static inline int json_container(json_cur_t *c, char close, int object)
{
    c->p++;
    if (++c->depth > 64)
        return 0;
    json_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        c->depth--;
        return 1;
    }
    for (;;) {
        json_ws(c);
        if (object) {
            if (!json_string(c))
                return 0;
            json_ws(c);
            if (c->p >= c->end || *c->p != ':')
                return 0;
            c->p++;
        }
        if (!json_value(c))
            return 0;
        json_ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == close) {
            c->p++;
            c->depth--;
            return 1;
        }
        return 0;
    }
}

static int json_value(json_cur_t *c)
{
    json_ws(c);
    if (c->p >= c->end)
        return 0;
    switch (*c->p) {
    case '{':
        return json_container(c, '}', 1);
    case '[':
        return json_container(c, ']', 0);
    case '"':
        return json_string(c);
    case 't':
        return json_lit(c, "true");
    case 'f':
        return json_lit(c, "false");
    case 'n':
        return json_lit(c, "null");
    default:
        return json_number(c);
    }
}

/** 1 if @p s (len bytes) is exactly one well-formed JSON value. */
static inline int json_valid(const char *s, size_t len)
{
    json_cur_t c = {s, s + len, 0};
    if (!json_value(&c))
        return 0;
    json_ws(&c);
    return c.p == c.end;
}

#endif /* JSON_CHECK_H */
