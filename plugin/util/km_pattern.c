/*
 * km_pattern.c - PCRE2 topic patterns, anchored at both ends, with match/depth/heap limits.
 * Every PCRE2 allocation goes through the plugin allocator (km_malloc), so the host counts it
 * and the fake host can fail it.
 */
#include "util/km_pattern.h"

#include <stdio.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "util/km_mem.h"

#define KM_PATTERN_MAGIC 0x4b4d5054u /* "KMPT" */

struct km_pattern {
    uint32_t magic;
    km_plugin_t *cm;
    pcre2_general_context *gctx;
    pcre2_code *code;
    pcre2_match_context *mctx;
    pcre2_match_data *md;
    char *src;
};

static void *km_pattern_pcre_malloc(PCRE2_SIZE size, void *data)
{
    return km_malloc(data, size);
}

static void km_pattern_pcre_free(void *ptr, void *data)
{
    km_free(data, ptr);
}

void km_pattern_free(km_pattern_t *p)
{
    km_plugin_t *cm;

    if (p == NULL)
        return;
    cm = p->cm;
    pcre2_match_data_free(p->md);
    pcre2_match_context_free(p->mctx);
    pcre2_code_free(p->code);
    pcre2_general_context_free(p->gctx);
    km_free(cm, p->src);
    p->magic = 0;
    km_free(cm, p);
}

km_err_t km_pattern_compile(km_plugin_t *cm, const char *re, size_t len, km_pattern_t **out,
                            char *errstr, size_t errstr_size)
{
    pcre2_compile_context *cctx = NULL;
    PCRE2_SIZE erroff = 0;
    PCRE2_UCHAR msg[160];
    km_pattern_t *p;
    int errcode = 0;
    km_err_t err = KM_ERR_NOMEM;

    *out = NULL;
    if (errstr_size > 0)
        errstr[0] = '\0';
    if (re == NULL || len == 0) {
        snprintf(errstr, errstr_size, "empty regular expression");
        return KM_ERR_INVALID;
    }
    if (len > KM_PATTERN_MAX_LEN) {
        snprintf(errstr, errstr_size, "regular expression longer than %u bytes",
                 KM_PATTERN_MAX_LEN);
        return KM_ERR_INVALID;
    }
    p = km_calloc(cm, 1, sizeof(*p));
    if (p == NULL)
        return KM_ERR_NOMEM;
    p->magic = KM_PATTERN_MAGIC;
    p->cm = cm;
    p->src = km_strndup(cm, re, len);
    if (p->src == NULL)
        goto fail;
    p->gctx = pcre2_general_context_create(km_pattern_pcre_malloc, km_pattern_pcre_free, cm);
    if (p->gctx == NULL)
        goto fail;
    cctx = pcre2_compile_context_create(p->gctx);
    if (cctx == NULL)
        goto fail;
    /* Java's matches(): the whole subject. ANCHORED pins the start, ENDANCHORED the end, so
     * "a|b" means "^(?:a|b)$" and not "^a|b$". */
    p->code = pcre2_compile((PCRE2_SPTR)re, len, PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_UTF,
                            &errcode, &erroff, cctx);
    if (p->code == NULL) {
        if (errcode == PCRE2_ERROR_HEAP_FAILED || errcode == PCRE2_ERROR_NOMEMORY)
            goto fail;
        if (pcre2_get_error_message(errcode, msg, sizeof(msg)) < 0)
            snprintf((char *)msg, sizeof(msg), "PCRE2 error %d", errcode);
        snprintf(errstr, errstr_size, "invalid regular expression at offset %zu: %s",
                 (size_t)erroff, (const char *)msg);
        err = KM_ERR_INVALID;
        goto fail;
    }
    p->mctx = pcre2_match_context_create(p->gctx);
    if (p->mctx == NULL)
        goto fail;
    pcre2_set_match_limit(p->mctx, KM_PATTERN_MATCH_LIMIT);
    pcre2_set_depth_limit(p->mctx, KM_PATTERN_DEPTH_LIMIT);
    pcre2_set_heap_limit(p->mctx, KM_PATTERN_HEAP_LIMIT_KIB);
    p->md = pcre2_match_data_create_from_pattern(p->code, p->gctx);
    if (p->md == NULL)
        goto fail;
    pcre2_compile_context_free(cctx);
    *out = p;
    return KM_OK;

fail:
    pcre2_compile_context_free(cctx);
    km_pattern_free(p);
    if (err == KM_ERR_NOMEM)
        snprintf(errstr, errstr_size, "out of memory compiling a regular expression");
    return err;
}

km_err_t km_pattern_match(km_pattern_t *p, const char *s, size_t n, bool *matched)
{
    int rc;

    if (p == NULL || p->magic != KM_PATTERN_MAGIC || (s == NULL && n > 0))
        return KM_ERR_INVALID;
    rc = pcre2_match(p->code, (PCRE2_SPTR)(s != NULL ? s : ""), n, 0, 0, p->md, p->mctx);
    if (rc >= 0) {
        *matched = true;
        return KM_OK;
    }
    switch (rc) {
    case PCRE2_ERROR_NOMATCH:
    case PCRE2_ERROR_PARTIAL:
        *matched = false;
        return KM_OK;
    case PCRE2_ERROR_NOMEMORY:
        return KM_ERR_NOMEM;
    case PCRE2_ERROR_MATCHLIMIT:
    case PCRE2_ERROR_DEPTHLIMIT:
    case PCRE2_ERROR_HEAPLIMIT:
        return KM_ERR_LIMIT;
    default:
        /* Invalid UTF-8 in a subject (a topic name is ASCII by Kafka's rules) and the like:
         * the name cannot be matched, which is not a match. */
        *matched = false;
        return KM_OK;
    }
}

const char *km_pattern_source(const km_pattern_t *p)
{
    return p != NULL ? p->src : "";
}

bool km_pattern_internal_topic(const char *name)
{
    return name != NULL && name[0] == '_' && name[1] == '_';
}

km_err_t km_pattern_select(km_pattern_t *const *include, size_t ninclude,
                           km_pattern_t *const *exclude, size_t nexclude, const char *name,
                           bool *selected)
{
    size_t n = strlen(name);
    bool m = false;
    km_err_t err;

    *selected = false;
    if (km_pattern_internal_topic(name))
        return KM_OK;
    for (size_t i = 0; i < ninclude && !m; i++) {
        if (include[i] == NULL)
            continue;
        err = km_pattern_match(include[i], name, n, &m);
        if (err != KM_OK)
            return err;
    }
    if (!m)
        return KM_OK;
    for (size_t i = 0; i < nexclude; i++) {
        bool x = false;
        if (exclude[i] == NULL)
            continue;
        err = km_pattern_match(exclude[i], name, n, &x);
        if (err != KM_OK)
            return err;
        if (x)
            return KM_OK;
    }
    *selected = true;
    return KM_OK;
}
