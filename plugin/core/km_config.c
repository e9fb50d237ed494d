/*
 * km_config.c - the configuration engine: parse, validate, store, free. The tables themselves
 * are in km_config_tables.c.
 */
#define KM_LOG_COMPONENT "kmirror.config"
#include "core/km_config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/km_plugin_types.h"
#include "util/km_log.h"
#include "util/km_mem.h"

/* A parsed value before it is stored. */
typedef struct km_config_value {
    bool b;
    int64_t i;
    double d;
    char *s;
    km_strlist_t list;
} km_config_value_t;

__attribute__((format(printf, 3, 4))) static void km_config_errf(char *errstr, size_t size,
                                                                 const char *fmt, ...)
{
    va_list ap;

    if (errstr == NULL || size == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(errstr, size, fmt, ap);
    va_end(ap);
}

/* What may be echoed back in a message. */
static const char *km_config_shown(const km_config_def_t *def, const char *value)
{
    return (def->flags & KM_CF_SENSITIVE) != 0 || def->type == KM_CT_PASSWORD ? "<hidden>" : value;
}

static void km_config_trim(const char *s, size_t n, const char **out, size_t *out_len)
{
    while (n > 0 && isspace((unsigned char)*s))
        s++, n--;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    *out = s;
    *out_len = n;
}

const km_config_def_t *km_config_find(const km_config_scope_t *scope, const char *key)
{
    size_t i;

    for (i = 0; i < scope->ndefs; i++) {
        const km_config_def_t *def = &scope->defs[i];
        if (strcmp(def->name, key) == 0 || (def->alias != NULL && strcmp(def->alias, key) == 0))
            return def;
    }
    return NULL;
}

static void km_config_list_free(km_plugin_t *cm, km_strlist_t *l)
{
    size_t i;

    for (i = 0; i < l->n; i++)
        km_free(cm, l->v[i]);
    km_free(cm, l->v);
    l->v = NULL;
    l->n = 0;
}

static void km_config_value_free(km_plugin_t *cm, km_config_value_t *v)
{
    km_free(cm, v->s);
    v->s = NULL;
    km_config_list_free(cm, &v->list);
}

static km_err_t km_config_parse_int(const km_config_def_t *def, const char *s, size_t n,
                                    km_config_value_t *out, char *errstr, size_t errstr_size)
{
    char buf[32];
    char *end;
    long long v;

    if (n == 0 || n >= sizeof(buf)) {
        km_config_errf(errstr, errstr_size, "%s: '%.*s' is not an integer", def->name,
                       (int)(n < 40 ? n : 40), s);
        return KM_ERR_CONFIG;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (*end != '\0') {
        km_config_errf(errstr, errstr_size, "%s: '%s' is not an integer", def->name, buf);
        return KM_ERR_CONFIG;
    }
    if (errno == ERANGE || v > def->max) {
        km_config_errf(errstr, errstr_size, "%s: %s is above the maximum %lld", def->name, buf,
                       (long long)def->max);
        return KM_ERR_CONFIG;
    }
    if (v < def->min && !((def->flags & KM_CF_NEG1_AUTO) != 0 && v == -1)) {
        km_config_errf(errstr, errstr_size, "%s: %s is below the minimum %lld%s", def->name, buf,
                       (long long)def->min,
                       (def->flags & KM_CF_NEG1_AUTO) != 0 ? " (or -1 for automatic)" : "");
        return KM_ERR_CONFIG;
    }
    out->i = v;
    return KM_OK;
}

static km_err_t km_config_parse_double(const km_config_def_t *def, const char *s, size_t n,
                                       km_config_value_t *out, char *errstr, size_t errstr_size)
{
    char buf[64];
    char *end;
    double v;

    if (n == 0 || n >= sizeof(buf)) {
        km_config_errf(errstr, errstr_size, "%s: '%.*s' is not a number", def->name,
                       (int)(n < 40 ? n : 40), s);
        return KM_ERR_CONFIG;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    v = strtod(buf, &end);
    if (*end != '\0' || !isfinite(v)) {
        km_config_errf(errstr, errstr_size, "%s: '%s' is not a number", def->name, buf);
        return KM_ERR_CONFIG;
    }
    if (v < def->dmin) {
        km_config_errf(errstr, errstr_size, "%s: %s is below the minimum %g", def->name, buf,
                       def->dmin);
        return KM_ERR_CONFIG;
    }
    if (v > def->dmax) {
        km_config_errf(errstr, errstr_size, "%s: %s is above the maximum %g", def->name, buf,
                       def->dmax);
        return KM_ERR_CONFIG;
    }
    out->d = v;
    return KM_OK;
}

static km_err_t km_config_parse_enum(km_plugin_t *cm, const km_config_def_t *def, const char *s,
                                     size_t n, km_config_value_t *out, char *errstr,
                                     size_t errstr_size)
{
    const char *a = def->allowed, *bar;
    char shown[256];
    size_t alen, off = 0;

    for (;;) {
        bar = strchr(a, '|');
        alen = bar != NULL ? (size_t)(bar - a) : strlen(a);
        if (alen == n && strncasecmp(a, s, n) == 0) {
            /* Store the table's spelling. */
            out->s = km_strndup(cm, a, alen);
            return out->s != NULL ? KM_OK : KM_ERR_NOMEM;
        }
        if (bar == NULL)
            break;
        a = bar + 1;
    }
    for (a = def->allowed; off < sizeof(shown);) {
        bar = strchr(a, '|');
        alen = bar != NULL ? (size_t)(bar - a) : strlen(a);
        off += (size_t)snprintf(shown + off, sizeof(shown) - off, "%s%s%.*s%s",
                                a == def->allowed ? "" : ", ", alen == 0 ? "\"" : "", (int)alen, a,
                                alen == 0 ? "\"" : "");
        if (bar == NULL)
            break;
        a = bar + 1;
    }
    if (km_config_shown(def, s) != s)
        km_config_errf(errstr, errstr_size, "%s: '%s' is not one of %s", def->name,
                       km_config_shown(def, s), shown);
    else
        km_config_errf(errstr, errstr_size, "%s: '%.*s' is not one of %s", def->name,
                       (int)(n < 60 ? n : 60), s, shown);
    return KM_ERR_CONFIG;
}

static void *km_config_pcre_malloc(PCRE2_SIZE size, void *data)
{
    return km_malloc(data, size);
}

static void km_config_pcre_free(void *ptr, void *data)
{
    km_free(data, ptr);
}

static km_err_t km_config_check_regex(km_plugin_t *cm, const km_config_def_t *def, const char *s,
                                      size_t n, char *errstr, size_t errstr_size)
{
    pcre2_general_context *gctx;
    pcre2_compile_context *cctx;
    pcre2_code *code;
    PCRE2_SIZE erroff = 0;
    PCRE2_UCHAR msg[160];
    int errcode = 0;
    km_err_t err = KM_OK;

    if (n > KM_CONFIG_REGEX_MAX) {
        km_config_errf(errstr, errstr_size,
                       "%s: the regular expression is longer than %d characters", def->name,
                       KM_CONFIG_REGEX_MAX);
        return KM_ERR_CONFIG;
    }
    gctx = pcre2_general_context_create(km_config_pcre_malloc, km_config_pcre_free, cm);
    if (gctx == NULL)
        return KM_ERR_NOMEM;
    cctx = pcre2_compile_context_create(gctx);
    if (cctx == NULL) {
        err = KM_ERR_NOMEM;
        goto free_gctx;
    }
    code = pcre2_compile((PCRE2_SPTR)s, n, 0, &errcode, &erroff, cctx);
    if (code == NULL) {
        /* Running out of memory is a compile "error" in PCRE2, but not the user's fault. */
        if (errcode == PCRE2_ERROR_HEAP_FAILED || errcode == PCRE2_ERROR_NOMEMORY) {
            err = KM_ERR_NOMEM;
            goto free_cctx;
        }
        if (pcre2_get_error_message(errcode, msg, sizeof(msg)) < 0)
            snprintf((char *)msg, sizeof(msg), "error %d", errcode);
        km_config_errf(errstr, errstr_size, "%s: invalid regular expression at offset %zu: %s",
                       def->name, (size_t)erroff, (const char *)msg);
        err = KM_ERR_CONFIG;
        goto free_cctx;
    }
    pcre2_code_free(code);
free_cctx:
    pcre2_compile_context_free(cctx);
free_gctx:
    pcre2_general_context_free(gctx);
    return err;
}

static km_err_t km_config_check_hostport(const km_config_def_t *def, const char *e, char *errstr,
                                         size_t errstr_size)
{
    const char *colon = strrchr(e, ':'), *p;
    long port = 0;

    if (colon == NULL || colon == e || colon[1] == '\0') {
        km_config_errf(errstr, errstr_size, "%s: '%s' is not host:port", def->name, e);
        return KM_ERR_CONFIG;
    }
    if (e[0] == '[' && colon[-1] != ']') {
        km_config_errf(errstr, errstr_size, "%s: '%s' is not [ipv6-address]:port", def->name, e);
        return KM_ERR_CONFIG;
    }
    for (p = colon + 1; *p != '\0'; p++) {
        if (!isdigit((unsigned char)*p) || port > 65535) {
            port = -1;
            break;
        }
        port = port * 10 + (*p - '0');
    }
    if (port < 1 || port > 65535) {
        km_config_errf(errstr, errstr_size, "%s: '%s' has no valid port (1-65535)", def->name, e);
        return KM_ERR_CONFIG;
    }
    return KM_OK;
}

static km_err_t km_config_parse_list(km_plugin_t *cm, const km_config_def_t *def, const char *s,
                                     size_t n, km_config_value_t *out, char *errstr,
                                     size_t errstr_size)
{
    size_t count = 1, i, pos = 0;
    km_err_t err;

    if (n == 0) {
        if (def->type == KM_CT_HOSTPORT_LIST) {
            km_config_errf(errstr, errstr_size, "%s: needs at least one host:port", def->name);
            return KM_ERR_CONFIG;
        }
        return KM_OK; /* the empty list */
    }
    for (i = 0; i < n; i++)
        count += s[i] == ',';
    out->list.v = km_calloc(cm, count, sizeof(*out->list.v));
    if (out->list.v == NULL)
        return KM_ERR_NOMEM;
    for (i = 0; i < count; i++) {
        const char *comma = memchr(s + pos, ',', n - pos);
        size_t elen = comma != NULL ? (size_t)(comma - (s + pos)) : n - pos;
        const char *e;
        size_t tlen;

        km_config_trim(s + pos, elen, &e, &tlen);
        if (tlen == 0) {
            km_config_errf(errstr, errstr_size, "%s: entry %zu of the list is empty", def->name,
                           i + 1);
            err = KM_ERR_CONFIG;
            goto free_list;
        }
        out->list.v[i] = km_strndup(cm, e, tlen);
        if (out->list.v[i] == NULL) {
            err = KM_ERR_NOMEM;
            goto free_list;
        }
        out->list.n = i + 1;
        if (def->type == KM_CT_HOSTPORT_LIST) {
            err = km_config_check_hostport(def, out->list.v[i], errstr, errstr_size);
            if (err != KM_OK)
                goto free_list;
        }
        pos += elen + 1;
    }
    return KM_OK;

free_list:
    km_config_list_free(cm, &out->list);
    return err;
}

/* Parse value for def into *out (which owns any memory on success). */
static km_err_t km_config_parse(km_plugin_t *cm, const km_config_def_t *def, const char *value,
                                km_config_value_t *out, char *errstr, size_t errstr_size)
{
    const char *s;
    size_t n;
    km_err_t err;

    memset(out, 0, sizeof(*out));
    km_config_trim(value, strlen(value), &s, &n);
    switch (def->type) {
    case KM_CT_BOOL:
        if (n == 4 && strncasecmp(s, "true", 4) == 0) {
            out->b = true;
            return KM_OK;
        }
        if (n == 5 && strncasecmp(s, "false", 5) == 0)
            return KM_OK;
        km_config_errf(errstr, errstr_size, "%s: '%.*s' is not a boolean (use true or false)",
                       def->name, (int)(n < 40 ? n : 40), s);
        return KM_ERR_CONFIG;
    case KM_CT_INT:
    case KM_CT_LONG:
        return km_config_parse_int(def, s, n, out, errstr, errstr_size);
    case KM_CT_DOUBLE:
        return km_config_parse_double(def, s, n, out, errstr, errstr_size);
    case KM_CT_ENUM:
        return km_config_parse_enum(cm, def, s, n, out, errstr, errstr_size);
    case KM_CT_REGEX:
        err = km_config_check_regex(cm, def, s, n, errstr, errstr_size);
        if (err != KM_OK)
            return err;
        /* stored as a string */
        __attribute__((fallthrough));
    case KM_CT_STRING:
    case KM_CT_PASSWORD:
        out->s = km_strndup(cm, s, n);
        return out->s != NULL ? KM_OK : KM_ERR_NOMEM;
    case KM_CT_LIST:
    case KM_CT_HOSTPORT_LIST:
        return km_config_parse_list(cm, def, s, n, out, errstr, errstr_size);
    }
    km_config_errf(errstr, errstr_size, "%s: unknown type in the config table", def->name);
    return KM_ERR_CONFIG;
}

/* Move *v into conf (freeing what was there). */
static void km_config_store(km_plugin_t *cm, const km_config_def_t *def, void *conf,
                            km_config_value_t *v)
{
    void *field;

    if (def->offset == KM_CONFIG_NO_FIELD) {
        km_config_value_free(cm, v);
        return;
    }
    field = (char *)conf + def->offset;
    switch (def->type) {
    case KM_CT_BOOL: {
        bool *b = field;
        *b = v->b;
        break;
    }
    case KM_CT_INT: {
        int32_t *i = field;
        *i = (int32_t)v->i;
        break;
    }
    case KM_CT_LONG: {
        int64_t *l = field;
        *l = v->i;
        break;
    }
    case KM_CT_DOUBLE: {
        double *d = field;
        *d = v->d;
        break;
    }
    case KM_CT_STRING:
    case KM_CT_PASSWORD:
    case KM_CT_ENUM:
    case KM_CT_REGEX: {
        char **s = field;
        km_free(cm, *s);
        *s = v->s;
        v->s = NULL;
        break;
    }
    case KM_CT_LIST:
    case KM_CT_HOSTPORT_LIST: {
        km_strlist_t *l = field;
        km_config_list_free(cm, l);
        *l = v->list;
        v->list.v = NULL;
        v->list.n = 0;
        break;
    }
    }
}

km_err_t km_config_validate(km_plugin_t *cm, const km_config_def_t *def, const char *value,
                            char *errstr, size_t errstr_size)
{
    km_config_value_t v;
    km_err_t err;

    err = km_config_parse(cm, def, value, &v, errstr, errstr_size);
    if (err == KM_OK)
        km_config_value_free(cm, &v);
    return err;
}

static km_err_t km_config_apply(km_plugin_t *cm, const km_config_def_t *def, void *conf,
                                const char *value, char *errstr, size_t errstr_size)
{
    km_config_value_t v;
    km_err_t err;

    if (value == NULL) {
        memset(&v, 0, sizeof(v));
        km_config_store(cm, def, conf, &v);
        return KM_OK;
    }
    err = km_config_parse(cm, def, value, &v, errstr, errstr_size);
    if (err != KM_OK)
        return err;
    km_config_store(cm, def, conf, &v);
    return KM_OK;
}

void km_config_free(km_plugin_t *cm, const km_config_scope_t *scope, void *conf)
{
    size_t i;
    km_config_value_t none;

    for (i = 0; i < scope->ndefs; i++) {
        memset(&none, 0, sizeof(none));
        if (scope->defs[i].offset != KM_CONFIG_NO_FIELD)
            km_config_store(cm, &scope->defs[i], conf, &none);
    }
    memset(conf, 0, scope->struct_size);
}

km_err_t km_config_init(km_plugin_t *cm, const km_config_scope_t *scope, void *conf, char *errstr,
                        size_t errstr_size)
{
    size_t i;
    km_err_t err;

    memset(conf, 0, scope->struct_size);
    for (i = 0; i < scope->ndefs; i++) {
        const km_config_def_t *def = &scope->defs[i];
        err = km_config_apply(cm, def, conf, def->dflt, errstr, errstr_size);
        if (err != KM_OK)
            goto free_conf;
    }
    return KM_OK;

free_conf:
    km_config_free(cm, scope, conf);
    return err;
}

km_err_t km_config_set(km_plugin_t *cm, const km_config_scope_t *scope, void *conf, const char *key,
                       const char *value, char *errstr, size_t errstr_size)
{
    const km_config_def_t *def = km_config_find(scope, key);

    if (def == NULL) {
        km_config_errf(errstr, errstr_size, "%s: unknown %s configuration key", key, scope->name);
        return KM_ERR_CONFIG;
    }
    return km_config_apply(cm, def, conf, value != NULL ? value : def->dflt, errstr, errstr_size);
}

km_err_t km_config_check(const km_config_scope_t *scope, const void *conf, char *errstr,
                         size_t errstr_size)
{
    size_t i;

    for (i = 0; i < scope->ndefs; i++) {
        const km_config_def_t *def = &scope->defs[i];
        const void *field;
        bool unset = false;

        if ((def->flags & KM_CF_REQUIRED) == 0 || def->offset == KM_CONFIG_NO_FIELD)
            continue;
        field = (const char *)conf + def->offset;
        if (def->type == KM_CT_LIST || def->type == KM_CT_HOSTPORT_LIST) {
            const km_strlist_t *l = field;
            unset = l->n == 0;
        } else if (def->type != KM_CT_BOOL && def->type != KM_CT_INT && def->type != KM_CT_LONG &&
                   def->type != KM_CT_DOUBLE) {
            char *const *s = field;
            unset = *s == NULL || **s == '\0';
        }
        if (unset) {
            km_config_errf(errstr, errstr_size, "%s: required but not set", def->name);
            return KM_ERR_CONFIG;
        }
    }
    return scope->check != NULL ? scope->check(conf, errstr, errstr_size) : KM_OK;
}

/* --- broker configuration from the host -------------------------------------------------- */

/* *out gets a km_malloc'd copy of the host's value, or NULL when the key is not set. */
static km_err_t km_config_host_get(km_plugin_t *cm, const char *key, char **out)
{
    char small[256];
    int32_t n;

    *out = NULL;
    n = cm->ref.api->config_get(cm->ref.host, key, small, sizeof(small));
    if (n == KBX_ERR_NOT_FOUND)
        return KM_OK;
    if (n < 0)
        return KM_ERR_HOST;
    if ((size_t)n < sizeof(small)) {
        *out = km_strdup(cm, small);
        return *out != NULL ? KM_OK : KM_ERR_NOMEM;
    }
    *out = km_malloc(cm, (size_t)n + 1);
    if (*out == NULL)
        return KM_ERR_NOMEM;
    if (cm->ref.api->config_get(cm->ref.host, key, *out, (size_t)n + 1) != n) {
        /* Changed between the two calls: treat as a host error rather than guess. */
        km_free(cm, *out);
        *out = NULL;
        return KM_ERR_HOST;
    }
    return KM_OK;
}

static void km_config_warn_unknown(void *arg, const char *key, const char *value)
{
    km_plugin_t *cm = arg;

    if (km_config_find(&km_config_broker_scope, key) == NULL)
        km_log_warn(cm, "unknown broker setting %s is ignored", key);
}

static km_err_t km_config_check_enable(km_plugin_t *cm, char *errstr, size_t errstr_size)
{
    const km_config_def_t *def = km_config_find(&km_config_broker_scope, "mirror.enable");
    km_config_value_t v;
    char *value;
    km_err_t err;

    err = km_config_host_get(cm, def->name, &value);
    if (err != KM_OK) {
        km_config_errf(errstr, errstr_size, "cannot read %s: %s", def->name, km_err_str(err));
        return err;
    }
    if (value == NULL) {
        km_config_errf(errstr, errstr_size,
                       "mirror.enable is not set: the mirror feature is off and kmirror does not "
                       "start (set mirror.enable=true)");
        return KM_ERR_DISABLED;
    }
    err = km_config_parse(cm, def, value, &v, errstr, errstr_size);
    km_free(cm, value);
    if (err != KM_OK)
        return err;
    if (!v.b) {
        km_config_errf(errstr, errstr_size,
                       "mirror.enable is false: the mirror feature is off and kmirror does not "
                       "start (set mirror.enable=true)");
        return KM_ERR_DISABLED;
    }
    return KM_OK;
}

km_err_t km_config_load_broker(km_plugin_t *cm, km_broker_config_t *conf, char *errstr,
                               size_t errstr_size)
{
    const km_config_scope_t *scope = &km_config_broker_scope;
    char *value = NULL, *old = NULL;
    size_t i;
    km_err_t err;

    /* The feature flag first, so a disabled plugin says exactly that. */
    err = km_config_check_enable(cm, errstr, errstr_size);
    if (err != KM_OK)
        return err;
    err = km_config_init(cm, scope, conf, errstr, errstr_size);
    if (err != KM_OK)
        return err;
    for (i = 0; i < scope->ndefs; i++) {
        const km_config_def_t *def = &scope->defs[i];

        err = km_config_host_get(cm, def->name, &value);
        if (err == KM_OK && def->alias != NULL)
            err = km_config_host_get(cm, def->alias, &old);
        if (err != KM_OK) {
            km_config_errf(errstr, errstr_size, "cannot read %s: %s", def->name, km_err_str(err));
            goto free_values;
        }
        if (value != NULL && old != NULL && strcmp(value, old) != 0) {
            km_config_errf(errstr, errstr_size,
                           "%s and its old name %s are both set, to different values", def->name,
                           def->alias);
            err = KM_ERR_CONFIG;
            goto free_values;
        }
        if (value == NULL && old != NULL) {
            km_log_info(cm, "%s is an old name, use %s", def->alias, def->name);
            value = old;
            old = NULL;
        }
        if (value != NULL) {
            err = km_config_apply(cm, def, conf, value, errstr, errstr_size);
            if (err != KM_OK)
                goto free_values;
        }
        km_free(cm, value);
        km_free(cm, old);
        value = NULL;
        old = NULL;
    }
    if (cm->ref.api->config_foreach(cm->ref.host, "mirror.", km_config_warn_unknown, cm) < 0)
        km_log_warn(cm, "could not list the broker's mirror.* settings");
    err = km_config_check(scope, conf, errstr, errstr_size);
    if (err != KM_OK)
        goto free_conf;
    return KM_OK;

free_values:
    km_free(cm, value);
    km_free(cm, old);
free_conf:
    km_config_free(cm, scope, conf);
    return err;
}
