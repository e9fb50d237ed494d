#include "kb_config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kb_err.h"
#include "kb_props.h"

typedef struct kb_conf_raw_s {
    char *key;
    char *value;
    char *origin;
} kb_conf_raw_t;

typedef struct kb_conf_errs_s {
    char **v;
    size_t cnt, cap;
} kb_conf_errs_t;

struct kb_config_priv_s {
    kb_conf_raw_t *raw; /* given keys, last value wins */
    size_t raw_cnt, raw_cap;
    bool *isset;         /* per kb_config_defs[] entry */
    kb_conf_errs_t load; /* from loading files and --override syntax; kept across finalize */
    kb_conf_errs_t val;  /* from the last finalize */
};

/* ---------------------------------------------------------------- helpers */

static void *kb_config_field(kb_config_t *cfg, const kb_conf_def_t *d)
{
    return (char *)cfg + d->off;
}

static const void *kb_config_cfield(const kb_config_t *cfg, const kb_conf_def_t *d)
{
    return (const char *)cfg + d->off;
}

static void kb_config_errs_add(kb_conf_errs_t *e, const char *msg)
{
    if (e->cnt == e->cap) {
        size_t ncap = e->cap ? e->cap * 2 : 8;
        char **n = realloc(e->v, ncap * sizeof(*n));
        if (!n)
            return;
        e->v = n;
        e->cap = ncap;
    }
    e->v[e->cnt] = strdup(msg);
    if (e->v[e->cnt])
        e->cnt++;
}

static void kb_config_errs_clear(kb_conf_errs_t *e)
{
    for (size_t i = 0; i < e->cnt; i++)
        free(e->v[i]);
    e->cnt = 0;
}

/* A validation error (forgotten by the next finalize). */
static void kb_config_errf(kb_config_t *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void kb_config_errf(kb_config_t *cfg, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    kb_config_errs_add(&cfg->priv->val, buf);
}

/* A loading error (kept: the input it describes is gone). */
static void kb_config_load_errf(kb_config_t *cfg, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void kb_config_load_errf(kb_config_t *cfg, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    kb_config_errs_add(&cfg->priv->load, buf);
}

/* Trim leading and trailing blanks in place (Kafka trims values before parsing them). */
static char *kb_config_trim(char *s)
{
    char *e;
    while (*s && isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

const kb_conf_def_t *kb_config_def(const char *name)
{
    for (size_t i = 0; i < kb_config_defs_cnt; i++)
        if (strcmp(kb_config_defs[i].name, name) == 0)
            return &kb_config_defs[i];
    return NULL;
}

static const char *kb_config_type_name(kb_conf_type_t t)
{
    switch (t) {
    case KB_CT_BOOL:
        return "boolean";
    case KB_CT_INT:
        return "int";
    case KB_CT_LONG:
        return "long";
    case KB_CT_DOUBLE:
        return "double";
    case KB_CT_STRING:
        return "string";
    case KB_CT_LIST:
        return "list";
    case KB_CT_PASSWORD:
        return "password";
    }
    return "?";
}

static void kb_config_choices_str(const kb_conf_def_t *d, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const char *const *c = d->choices; c && *c && n < size; c++) {
        int r = snprintf(buf + n, size - n, "%s%s", c == d->choices ? "" : ", ", *c);
        if (r < 0)
            break;
        n += (size_t)r;
    }
}

/* Look @p s up in d->choices case-insensitively; returns the canonical spelling or NULL. */
static const char *kb_config_choice(const kb_conf_def_t *d, const char *s)
{
    for (const char *const *c = d->choices; *c; c++)
        if (strcasecmp(*c, s) == 0)
            return *c;
    return NULL;
}

/* ---------------------------------------------------------------- parsing one value */

static int kb_config_parse_int64(const char *s, int64_t *out, bool *overflow)
{
    const char *p = s;
    char *end;
    long long v;

    *overflow = false;
    if (*p == '+' || *p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return -1;
    for (; *p; p++)
        if (!isdigit((unsigned char)*p))
            return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno == ERANGE) {
        *overflow = true;
        return -1;
    }
    *out = v;
    return 0;
}

/* Parse @p text (already trimmed) for @p d into the config field. On failure, writes the
 * reason (without the key name) into @p why. Returns 0 or -1. */
static int kb_config_parse_value(kb_config_t *cfg, const kb_conf_def_t *d, const char *text,
                                 char *why, size_t whysz)
{
    void *fld = kb_config_field(cfg, d);
    char chbuf[256];

    switch (d->type) {
    case KB_CT_BOOL:
        if (strcasecmp(text, "true") == 0)
            *(bool *)fld = true;
        else if (strcasecmp(text, "false") == 0)
            *(bool *)fld = false;
        else {
            snprintf(why, whysz, "'%s' is not a boolean (true or false)", text);
            return -1;
        }
        return 0;
    case KB_CT_INT:
    case KB_CT_LONG: {
        int64_t v;
        bool ovf;
        bool isint = d->type == KB_CT_INT;
        if (kb_config_parse_int64(text, &v, &ovf) != 0) {
            if (ovf)
                snprintf(why, whysz, "'%s' is out of range, allowed %lld..%lld", text,
                         (long long)d->min, (long long)d->max);
            else
                snprintf(why, whysz, "'%s' is not an integer", text);
            return -1;
        }
        if (isint && (v < INT32_MIN || v > INT32_MAX)) {
            snprintf(why, whysz, "'%s' does not fit in a 32-bit int, allowed %lld..%lld", text,
                     (long long)d->min, (long long)d->max);
            return -1;
        }
        if (v < d->min || v > d->max) {
            snprintf(why, whysz, "%lld is out of range, allowed %lld..%lld", (long long)v,
                     (long long)d->min, (long long)d->max);
            return -1;
        }
        if (isint)
            *(int32_t *)fld = (int32_t)v;
        else
            *(int64_t *)fld = v;
        return 0;
    }
    case KB_CT_DOUBLE: {
        char *end;
        double v;
        errno = 0;
        v = strtod(text, &end);
        if (!*text || *end || errno == ERANGE || isnan(v)) {
            snprintf(why, whysz, "'%s' is not a number", text);
            return -1;
        }
        if (v < d->dmin || v > d->dmax) {
            snprintf(why, whysz, "%s is out of range, allowed %g..%g", text, d->dmin, d->dmax);
            return -1;
        }
        *(double *)fld = v;
        return 0;
    }
    case KB_CT_STRING:
    case KB_CT_PASSWORD: {
        const char *val = text;
        char *dup;
        if (d->choices && *text) {
            val = kb_config_choice(d, text);
            if (!val) {
                kb_config_choices_str(d, chbuf, sizeof(chbuf));
                snprintf(why, whysz, "'%s' is not one of: %s", text, chbuf);
                return -1;
            }
        }
        dup = strdup(val);
        if (!dup) {
            snprintf(why, whysz, "out of memory");
            return -1;
        }
        free(*(char **)fld);
        *(char **)fld = dup;
        return 0;
    }
    case KB_CT_LIST: {
        /* Normalise "a , b,c" to "a,b,c"; reject empty elements; check choices. */
        size_t tlen = strlen(text);
        char *work = strdup(text), *out = malloc(tlen + 1), *save = NULL, *tok;
        size_t n = 0;
        int bad = 0;
        if (!work || !out) {
            free(work);
            free(out);
            snprintf(why, whysz, "out of memory");
            return -1;
        }
        out[0] = '\0';
        if (*text) {
            /* strtok_r would merge empty elements; walk by hand. */
            char *p = work;
            for (;;) {
                char *comma = strchr(p, ',');
                const char *val;
                if (comma)
                    *comma = '\0';
                tok = kb_config_trim(p);
                if (!*tok) {
                    snprintf(why, whysz, "'%s' has an empty list element", text);
                    bad = 1;
                    break;
                }
                val = tok;
                if (d->choices) {
                    val = kb_config_choice(d, tok);
                    if (!val) {
                        kb_config_choices_str(d, chbuf, sizeof(chbuf));
                        snprintf(why, whysz, "'%s' is not one of: %s", tok, chbuf);
                        bad = 1;
                        break;
                    }
                }
                n += (size_t)sprintf(out + n, "%s%s", n ? "," : "", val);
                if (!comma)
                    break;
                p = comma + 1;
            }
        }
        (void)save;
        free(work);
        if (bad) {
            free(out);
            return -1;
        }
        free(*(char **)fld);
        *(char **)fld = out;
        return 0;
    }
    }
    snprintf(why, whysz, "unknown type");
    return -1;
}

/* ---------------------------------------------------------------- life cycle */

static void kb_config_clear_values(kb_config_t *cfg)
{
    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        const kb_conf_def_t *d = &kb_config_defs[i];
        if (d->type == KB_CT_STRING || d->type == KB_CT_LIST || d->type == KB_CT_PASSWORD) {
            char **sp = kb_config_field(cfg, d);
            free(*sp);
            *sp = NULL;
        }
    }
    free(cfg->lst);
    cfg->lst = NULL;
    cfg->lst_cnt = 0;
    free(cfg->adv);
    cfg->adv = NULL;
    cfg->adv_cnt = 0;
}

kb_config_t *kb_config_new(void)
{
    kb_config_t *cfg = calloc(1, sizeof(*cfg));
    if (!cfg)
        return NULL;
    cfg->priv = calloc(1, sizeof(*cfg->priv));
    if (!cfg->priv)
        goto free_cfg;
    cfg->priv->isset = calloc(kb_config_defs_cnt, sizeof(*cfg->priv->isset));
    if (!cfg->priv->isset)
        goto free_priv;
    /* Apply the defaults. node.id is missing, so this finalize reports an error; forget it
     * until the caller's own finalize. */
    kb_config_finalize(cfg);
    kb_config_errs_clear(&cfg->priv->val);
    return cfg;
free_priv:
    free(cfg->priv);
free_cfg:
    free(cfg);
    return NULL;
}

void kb_config_free(kb_config_t *cfg)
{
    struct kb_config_priv_s *p;
    if (!cfg)
        return;
    p = cfg->priv;
    kb_config_clear_values(cfg);
    for (size_t i = 0; i < p->raw_cnt; i++) {
        free(p->raw[i].key);
        free(p->raw[i].value);
        free(p->raw[i].origin);
    }
    free(p->raw);
    kb_config_errs_clear(&p->load);
    free(p->load.v);
    kb_config_errs_clear(&p->val);
    free(p->val.v);
    free(p->isset);
    free(p);
    free(cfg);
}

int kb_config_set(kb_config_t *cfg, const char *key, const char *value, const char *origin)
{
    struct kb_config_priv_s *p = cfg->priv;
    kb_conf_raw_t *r = NULL;
    char *k, *v, *o;

    for (size_t i = 0; i < p->raw_cnt; i++)
        if (strcmp(p->raw[i].key, key) == 0)
            r = &p->raw[i];
    k = strdup(key);
    v = strdup(value);
    o = strdup(origin ? origin : "");
    if (!k || !v || !o)
        goto nomem;
    if (!r) {
        if (p->raw_cnt == p->raw_cap) {
            size_t ncap = p->raw_cap ? p->raw_cap * 2 : 32;
            kb_conf_raw_t *n = realloc(p->raw, ncap * sizeof(*n));
            if (!n)
                goto nomem;
            p->raw = n;
            p->raw_cap = ncap;
        }
        r = &p->raw[p->raw_cnt++];
    } else {
        free(r->key);
        free(r->value);
        free(r->origin);
    }
    r->key = k;
    r->value = v;
    r->origin = o;
    return 0;
nomem:
    free(k);
    free(v);
    free(o);
    return KB_E_NOMEM;
}

int kb_config_set_kv(kb_config_t *cfg, const char *kv, const char *origin)
{
    const char *eq = strchr(kv, '=');
    char *key;
    int r;

    if (!eq || eq == kv) {
        kb_config_load_errf(cfg, "%s: '%s' is not key=value", origin, kv);
        return KB_E_INVALID;
    }
    key = strndup(kv, (size_t)(eq - kv));
    if (!key)
        return KB_E_NOMEM;
    r = kb_config_set(cfg, kb_config_trim(key), eq + 1, origin);
    free(key);
    return r;
}

typedef struct kb_config_load_ctx_s {
    kb_config_t *cfg;
    const char *path;
} kb_config_load_ctx_t;

static int kb_config_load_cb(void *opaque, const char *key, const char *value, int lineno)
{
    kb_config_load_ctx_t *lc = opaque;
    char origin[512];
    snprintf(origin, sizeof(origin), "%s line %d", lc->path, lineno);
    return kb_config_set(lc->cfg, key, value, origin);
}

int kb_config_load_file(kb_config_t *cfg, const char *path)
{
    kb_config_load_ctx_t lc = {cfg, path};
    char err[512];
    int r = kb_props_load_file(path, kb_config_load_cb, &lc, err, sizeof(err));
    if (r)
        kb_config_load_errf(cfg, "%s", err[0] ? err : kb_err_str(r));
    return r;
}

/* ---------------------------------------------------------------- listeners */

/* Parse "NAME://host:port" into @p l. Returns 0 or -1 with the reason in @p why. */
static int kb_config_parse_listener(const char *s, kb_config_listener_t *l, char *why, size_t whysz)
{
    const char *sep = strstr(s, "://"), *hp, *colon;
    size_t nlen, hlen;
    char *end;
    long port;

    memset(l, 0, sizeof(*l));
    if (!sep || sep == s) {
        snprintf(why, whysz, "'%s' is not NAME://host:port", s);
        return -1;
    }
    nlen = (size_t)(sep - s);
    if (nlen >= sizeof(l->name)) {
        snprintf(why, whysz, "listener name in '%s' is too long", s);
        return -1;
    }
    for (size_t i = 0; i < nlen; i++) {
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') {
            snprintf(why, whysz, "listener name in '%s' may hold only letters, digits, _ and -", s);
            return -1;
        }
        l->name[i] = (char)toupper((unsigned char)s[i]);
    }
    hp = sep + 3;
    if (*hp == '[') {
        const char *rb = strchr(hp, ']');
        if (!rb || rb[1] != ':') {
            snprintf(why, whysz, "'%s': bad [IPv6]:port", s);
            return -1;
        }
        hlen = (size_t)(rb - hp - 1);
        if (hlen >= sizeof(l->host))
            goto toolong;
        memcpy(l->host, hp + 1, hlen);
        colon = rb + 1;
    } else {
        colon = strrchr(hp, ':');
        if (!colon) {
            snprintf(why, whysz, "'%s' has no port", s);
            return -1;
        }
        hlen = (size_t)(colon - hp);
        if (hlen >= sizeof(l->host))
            goto toolong;
        memcpy(l->host, hp, hlen);
        if (memchr(l->host, ':', hlen)) {
            snprintf(why, whysz, "'%s': write an IPv6 host as [addr]", s);
            return -1;
        }
    }
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port < 0 || port > 65535) {
        snprintf(why, whysz, "'%s': port must be 0..65535", s);
        return -1;
    }
    l->port = (int)port;
    return 0;
toolong:
    snprintf(why, whysz, "'%s': host name too long", s);
    return -1;
}

/* Parse a listener list into a new array. Reports errors for @p key. */
static int kb_config_parse_listener_list(kb_config_t *cfg, const char *key, const char *list,
                                         kb_config_listener_t **outp, size_t *cntp)
{
    kb_config_listener_t *out;
    size_t cnt = 0, cap = 1;
    char *work, *p;
    int bad = 0;

    *outp = NULL;
    *cntp = 0;
    for (const char *c = list; *c; c++)
        cap += *c == ',';
    out = calloc(cap, sizeof(*out));
    work = strdup(list);
    if (!out || !work) {
        free(out);
        free(work);
        return -1;
    }
    for (p = work; *p;) {
        char *comma = strchr(p, ','), why[512];
        if (comma)
            *comma = '\0';
        if (kb_config_parse_listener(p, &out[cnt], why, sizeof(why)) != 0) {
            kb_config_errf(cfg, "%s: %s", key, why);
            bad = 1;
        } else {
            for (size_t i = 0; i < cnt; i++) {
                if (strcmp(out[i].name, out[cnt].name) == 0) {
                    kb_config_errf(cfg, "%s: listener name %s appears twice", key, out[i].name);
                    bad = 1;
                }
            }
            cnt++;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    free(work);
    if (bad) {
        free(out);
        return -1;
    }
    *outp = out;
    *cntp = cnt;
    return 0;
}

/* Find NAME's protocol in "NAME:PROTO,..." (names compared case-insensitively). */
static int kb_config_lookup_protocol(const char *map, const char *name, char *proto, size_t sz)
{
    const char *p = map;
    size_t nlen = strlen(name);
    while (*p) {
        const char *comma = strchr(p, ','), *colon = strchr(p, ':');
        size_t elen = comma ? (size_t)(comma - p) : strlen(p);
        if (colon && colon < p + elen && (size_t)(colon - p) == nlen &&
            strncasecmp(p, name, nlen) == 0) {
            size_t plen = elen - nlen - 1;
            if (plen >= sz)
                plen = sz - 1;
            memcpy(proto, colon + 1, plen);
            proto[plen] = '\0';
            return 0;
        }
        p += elen;
        if (*p == ',')
            p++;
    }
    return -1;
}

static void kb_config_check_listeners(kb_config_t *cfg)
{
    static const char *const valid_protocols[] = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL",
                                                  NULL};
    const char *map =
        cfg->listener_security_protocol_map ? cfg->listener_security_protocol_map : "";
    bool map_ok = true;

    /* The map itself: NAME:PROTOCOL pairs with known protocols. */
    for (const char *p = map; *p;) {
        const char *comma = strchr(p, ','), *colon = strchr(p, ':');
        size_t elen = comma ? (size_t)(comma - p) : strlen(p);
        char proto[64] = "";
        bool known = false;
        if (!colon || colon >= p + elen || colon == p) {
            kb_config_errf(cfg, "listener.security.protocol.map: '%.*s' is not NAME:PROTOCOL",
                           (int)elen, p);
            map_ok = false;
        } else {
            size_t plen = elen - (size_t)(colon - p) - 1;
            snprintf(proto, sizeof(proto), "%.*s", (int)plen, colon + 1);
            for (const char *const *v = valid_protocols; *v; v++)
                known |= strcasecmp(*v, proto) == 0;
            if (!known) {
                kb_config_errf(cfg,
                               "listener.security.protocol.map: '%s' is not one of: PLAINTEXT, "
                               "SSL, SASL_PLAINTEXT, SASL_SSL",
                               proto);
                map_ok = false;
            }
        }
        p += elen;
        if (*p == ',')
            p++;
    }

    if (kb_config_parse_listener_list(cfg, "listeners", cfg->listeners ? cfg->listeners : "",
                                      &cfg->lst, &cfg->lst_cnt) != 0)
        return;
    if (cfg->lst_cnt == 0)
        kb_config_errf(cfg, "listeners: at least one listener is required");
    for (size_t i = 0; i < cfg->lst_cnt && map_ok; i++) {
        kb_config_listener_t *l = &cfg->lst[i];
        if (kb_config_lookup_protocol(map, l->name, l->protocol, sizeof(l->protocol)) != 0) {
            kb_config_errf(cfg,
                           "listeners: listener %s has no entry in "
                           "listener.security.protocol.map",
                           l->name);
            continue;
        }
        for (char *c = l->protocol; *c; c++)
            *c = (char)toupper((unsigned char)*c);
        if (strcmp(l->protocol, "PLAINTEXT") != 0)
            kb_config_errf(cfg,
                           "listeners: listener %s uses %s; kbroker serves only PLAINTEXT so far",
                           l->name, l->protocol);
        for (size_t j = 0; j < i; j++)
            if (l->port != 0 && cfg->lst[j].port == l->port &&
                strcmp(cfg->lst[j].host, l->host) == 0)
                kb_config_errf(cfg, "listeners: %s and %s both use port %d", cfg->lst[j].name,
                               l->name, l->port);
    }
    if (cfg->inter_broker_listener_name) {
        bool found = false;
        for (size_t i = 0; i < cfg->lst_cnt; i++)
            found |= strcasecmp(cfg->lst[i].name, cfg->inter_broker_listener_name) == 0;
        if (!found)
            kb_config_errf(cfg, "inter.broker.listener.name: '%s' is not one of the listeners",
                           cfg->inter_broker_listener_name);
    }
    if (cfg->controller_listener_names && *cfg->controller_listener_names) {
        for (const char *p = cfg->controller_listener_names; *p;) {
            const char *comma = strchr(p, ',');
            size_t elen = comma ? (size_t)(comma - p) : strlen(p);
            bool found = false;
            for (size_t i = 0; i < cfg->lst_cnt; i++)
                found |=
                    strlen(cfg->lst[i].name) == elen && strncasecmp(cfg->lst[i].name, p, elen) == 0;
            /* A broker-only process names the controllers' listener without having it. */
            if (!found && kb_config_has_role(cfg, "controller"))
                kb_config_errf(cfg, "controller.listener.names: '%.*s' is not one of the listeners",
                               (int)elen, p);
            p += elen;
            if (*p == ',')
                p++;
        }
    }

    /* advertised.listeners: given, or listeners minus the controller listeners. */
    if (kb_config_is_set(cfg, "advertised.listeners")) {
        if (kb_config_parse_listener_list(cfg, "advertised.listeners", cfg->advertised_listeners,
                                          &cfg->adv, &cfg->adv_cnt) != 0)
            return;
        for (size_t i = 0; i < cfg->adv_cnt; i++) {
            kb_config_listener_t *a = &cfg->adv[i];
            bool found = false;
            for (size_t j = 0; j < cfg->lst_cnt; j++) {
                if (strcmp(cfg->lst[j].name, a->name) == 0) {
                    found = true;
                    memcpy(a->protocol, cfg->lst[j].protocol, sizeof(a->protocol));
                }
            }
            if (!found)
                kb_config_errf(cfg, "advertised.listeners: %s is not one of the listeners",
                               a->name);
            if (strcmp(a->host, "0.0.0.0") == 0 || strcmp(a->host, "::") == 0)
                kb_config_errf(cfg,
                               "advertised.listeners: %s advertises the non-routable address "
                               "%s",
                               a->name, a->host);
        }
    } else {
        cfg->adv = calloc(cfg->lst_cnt ? cfg->lst_cnt : 1, sizeof(*cfg->adv));
        if (!cfg->adv)
            return;
        for (size_t i = 0; i < cfg->lst_cnt; i++) {
            if (cfg->controller_listener_names &&
                kb_props_list_has(cfg->controller_listener_names, cfg->lst[i].name, true))
                continue;
            cfg->adv[cfg->adv_cnt] = cfg->lst[i];
            cfg->adv_cnt++;
        }
    }
    for (size_t i = 0; i < cfg->adv_cnt; i++) {
        kb_config_listener_t *a = &cfg->adv[i];
        if (a->host[0] == '\0' || strcmp(a->host, "0.0.0.0") == 0 || strcmp(a->host, "::") == 0) {
            if (gethostname(a->host, sizeof(a->host) - 1) != 0)
                snprintf(a->host, sizeof(a->host), "localhost");
        }
    }
}

static void kb_config_check_metrics_listener(kb_config_t *cfg)
{
    const char *s = cfg->metrics_listener ? cfg->metrics_listener : "";
    kb_config_listener_t l;
    char buf[600], why[512];

    cfg->metrics_host[0] = '\0';
    cfg->metrics_port = -1;
    if (!*s)
        return;
    if (strncasecmp(s, "http://", 7) != 0) {
        kb_config_errf(cfg, "metrics.listener: '%s' is not http://host:port", s);
        return;
    }
    /* Reuse the listener parser: "http://h:p" has the same shape as "NAME://h:p". */
    snprintf(buf, sizeof(buf), "%s", s);
    if (buf[strlen(buf) - 1] == '/')
        buf[strlen(buf) - 1] = '\0';
    if (kb_config_parse_listener(buf, &l, why, sizeof(why)) != 0) {
        kb_config_errf(cfg, "metrics.listener: %s", why);
        return;
    }
    memcpy(cfg->metrics_host, l.host, sizeof(cfg->metrics_host));
    cfg->metrics_port = l.port;
}

/* process.roles, controller.quorum.voters and controller.listener.names (design C1): one voter,
 * ID@host:port; a controller must be that voter; a broker-only process needs the voter and the
 * name of the controllers' listener. */
static void kb_config_check_roles(kb_config_t *cfg)
{
    const char *v = cfg->controller_quorum_voters ? cfg->controller_quorum_voters : "";
    bool ctrl = kb_config_has_role(cfg, "controller"), brk = kb_config_has_role(cfg, "broker");
    kb_config_listener_t l;
    char buf[600], why[512], *end;
    const char *at;
    long id;

    cfg->voter_id = -1;
    cfg->voter_host[0] = '\0';
    cfg->voter_port = -1;
    if (*v) {
        if (strchr(v, ',')) {
            kb_config_errf(cfg,
                           "controller.quorum.voters: '%s' names more than one voter; kbroker "
                           "has one fixed controller (ID@host:port)",
                           v);
            return;
        }
        at = strchr(v, '@');
        errno = 0;
        id = strtol(v, &end, 10);
        if (!at || end != at || at == v || errno || id < 0 || id > INT32_MAX) {
            kb_config_errf(cfg, "controller.quorum.voters: '%s' is not ID@host:port", v);
            return;
        }
        snprintf(buf, sizeof(buf), "V://%s", at + 1);
        if (kb_config_parse_listener(buf, &l, why, sizeof(why)) != 0 || l.port == 0 || !l.host[0]) {
            kb_config_errf(cfg, "controller.quorum.voters: '%s' is not ID@host:port", v);
            return;
        }
        cfg->voter_id = (int32_t)id;
        memcpy(cfg->voter_host, l.host, sizeof(cfg->voter_host));
        cfg->voter_port = l.port;
    }
    if (ctrl && cfg->voter_id >= 0 && cfg->node_id >= 0 && cfg->voter_id != cfg->node_id)
        kb_config_errf(cfg,
                       "controller.quorum.voters: voter %d is not this node (node.id %d), but "
                       "process.roles includes controller",
                       cfg->voter_id, cfg->node_id);
    if (brk && !ctrl) {
        if (cfg->voter_id < 0)
            kb_config_errf(cfg, "controller.quorum.voters: required when process.roles is broker "
                                "(the controller to register with, ID@host:port)");
        if (!cfg->controller_listener_names || !*cfg->controller_listener_names)
            kb_config_errf(cfg, "controller.listener.names: required when process.roles is "
                                "broker");
    }
    if (cfg->broker_heartbeat_interval_ms >= cfg->broker_session_timeout_ms)
        kb_config_errf(cfg,
                       "broker.heartbeat.interval.ms: %d is not below broker.session.timeout.ms "
                       "%d",
                       cfg->broker_heartbeat_interval_ms, cfg->broker_session_timeout_ms);
}

/* ---------------------------------------------------------------- finalize */

/* True if @p name was given but its value was rejected (already reported). */
static bool kb_config_is_bad(const kb_config_t *cfg, const char *name)
{
    return kb_config_raw(cfg, name) && !kb_config_is_set(cfg, name);
}

int kb_config_finalize(kb_config_t *cfg)
{
    struct kb_config_priv_s *p = cfg->priv;
    char why[768];

    /* Forget the errors and values of an earlier finalize; keep the loading errors. */
    kb_config_errs_clear(&p->val);
    kb_config_clear_values(cfg);
    memset(p->isset, 0, kb_config_defs_cnt * sizeof(*p->isset));

    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        const kb_conf_def_t *d = &kb_config_defs[i];
        if (!d->dflt) {
            /* null default: numeric fields read as 0 and callers check kb_config_is_set() */
            continue;
        }
        if (kb_config_parse_value(cfg, d, d->dflt, why, sizeof(why)) != 0)
            kb_config_errf(cfg, "%s: bad built-in default: %s", d->name, why);
    }

    for (size_t i = 0; i < p->raw_cnt; i++) {
        const kb_conf_raw_t *r = &p->raw[i];
        const kb_conf_def_t *d = kb_config_def(r->key);
        char *val;
        if (!d) {
            if (strncmp(r->key, "mirror.", 7) == 0)
                continue; /* the plugin's; it validates them */
            kb_config_errf(cfg, "%s: unknown configuration key (%s)", r->key, r->origin);
            continue;
        }
        val = strdup(r->value);
        if (!val)
            return KB_E_NOMEM;
        if (kb_config_parse_value(cfg, d, kb_config_trim(val), why, sizeof(why)) != 0)
            kb_config_errf(cfg, "%s: %s (%s)", d->name, why, r->origin);
        else
            p->isset[d - kb_config_defs] = true;
        free(val);
    }

    /* node.id and its older name. */
    if (kb_config_is_set(cfg, "broker.id")) {
        if (!kb_config_is_set(cfg, "node.id"))
            cfg->node_id = cfg->broker_id;
        else if (cfg->node_id != cfg->broker_id)
            kb_config_errf(cfg, "broker.id: %d differs from node.id %d", cfg->broker_id,
                           cfg->node_id);
    }
    cfg->broker_id = cfg->node_id;
    if (cfg->node_id < 0 && !kb_config_is_bad(cfg, "node.id") &&
        !kb_config_is_bad(cfg, "broker.id"))
        kb_config_errf(cfg, "node.id: required, a non-negative integer (or set broker.id)");
    if (!cfg->process_roles || !*cfg->process_roles)
        kb_config_errf(cfg, "process.roles: at least one of broker, controller is required");

    /* Derived values. */
    cfg->eff_log_dirs = (cfg->log_dirs && *cfg->log_dirs) ? cfg->log_dirs : cfg->log_dir;
    if (!cfg->eff_log_dirs || !*cfg->eff_log_dirs)
        kb_config_errf(cfg, "log.dirs: no log directory (set log.dirs or log.dir)");
    cfg->eff_log_roll_ms = kb_config_is_set(cfg, "log.roll.ms")
                               ? cfg->log_roll_ms
                               : (int64_t)cfg->log_roll_hours * 3600000;
    if (kb_config_is_set(cfg, "log.retention.ms"))
        cfg->eff_log_retention_ms = cfg->log_retention_ms;
    else if (kb_config_is_set(cfg, "log.retention.minutes"))
        cfg->eff_log_retention_ms = (int64_t)cfg->log_retention_minutes * 60000;
    else
        cfg->eff_log_retention_ms = (int64_t)cfg->log_retention_hours * 3600000;
    if (cfg->eff_log_retention_ms < 0)
        cfg->eff_log_retention_ms = -1;

    /* Cross-key checks. */
    if (cfg->group_min_session_timeout_ms > cfg->group_max_session_timeout_ms)
        kb_config_errf(cfg,
                       "group.min.session.timeout.ms: %d is larger than "
                       "group.max.session.timeout.ms %d",
                       cfg->group_min_session_timeout_ms, cfg->group_max_session_timeout_ms);
    if (cfg->log_cleaner_enable && cfg->log_cleaner_threads > 0 &&
        cfg->log_cleaner_dedupe_buffer_size / cfg->log_cleaner_threads <= 1024 * 1024)
        kb_config_errf(cfg,
                       "log.cleaner.dedupe.buffer.size: %lld is too small for %d cleaner "
                       "thread(s), more than 1 MiB per thread is required",
                       (long long)cfg->log_cleaner_dedupe_buffer_size, cfg->log_cleaner_threads);
    if (cfg->transaction_state_log_min_isr > cfg->transaction_state_log_replication_factor)
        kb_config_errf(cfg,
                       "transaction.state.log.min.isr: %d is larger than "
                       "transaction.state.log.replication.factor %d",
                       cfg->transaction_state_log_min_isr,
                       cfg->transaction_state_log_replication_factor);
    kb_config_check_listeners(cfg);
    kb_config_check_roles(cfg);
    kb_config_check_metrics_listener(cfg);
    return kb_config_error_cnt(cfg) ? KB_E_INVALID : 0;
}

size_t kb_config_error_cnt(const kb_config_t *cfg)
{
    return cfg->priv->load.cnt + cfg->priv->val.cnt;
}

const char *kb_config_error(const kb_config_t *cfg, size_t i)
{
    const struct kb_config_priv_s *p = cfg->priv;
    if (i < p->load.cnt)
        return p->load.v[i];
    i -= p->load.cnt;
    return i < p->val.cnt ? p->val.v[i] : NULL;
}

bool kb_config_is_set(const kb_config_t *cfg, const char *name)
{
    const kb_conf_def_t *d = kb_config_def(name);
    return d && cfg->priv->isset[d - kb_config_defs];
}

/* ---------------------------------------------------------------- accessors */

int64_t kb_config_int(const kb_config_t *cfg, const char *name)
{
    const kb_conf_def_t *d = kb_config_def(name);
    if (!d)
        return 0;
    if (d->type == KB_CT_INT)
        return *(const int32_t *)kb_config_cfield(cfg, d);
    if (d->type == KB_CT_LONG)
        return *(const int64_t *)kb_config_cfield(cfg, d);
    return 0;
}

bool kb_config_bool(const kb_config_t *cfg, const char *name)
{
    const kb_conf_def_t *d = kb_config_def(name);
    return d && d->type == KB_CT_BOOL && *(const bool *)kb_config_cfield(cfg, d);
}

double kb_config_double(const kb_config_t *cfg, const char *name)
{
    const kb_conf_def_t *d = kb_config_def(name);
    return (d && d->type == KB_CT_DOUBLE) ? *(const double *)kb_config_cfield(cfg, d) : 0.0;
}

const char *kb_config_str(const kb_config_t *cfg, const char *name)
{
    const kb_conf_def_t *d = kb_config_def(name);
    if (!d || (d->type != KB_CT_STRING && d->type != KB_CT_LIST && d->type != KB_CT_PASSWORD))
        return NULL;
    return *(char *const *)kb_config_cfield(cfg, d);
}

const char *kb_config_raw(const kb_config_t *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->priv->raw_cnt; i++)
        if (strcmp(cfg->priv->raw[i].key, key) == 0)
            return cfg->priv->raw[i].value;
    return NULL;
}

static int kb_config_raw_cmp(const void *a, const void *b)
{
    const kb_conf_raw_t *const *ra = a, *const *rb = b;
    return strcmp((*ra)->key, (*rb)->key);
}

int kb_config_foreach_prefix(const kb_config_t *cfg, const char *prefix,
                             int (*fn)(void *opaque, const char *key, const char *value),
                             void *opaque)
{
    struct kb_config_priv_s *p = cfg->priv;
    const kb_conf_raw_t **v;
    size_t n = 0, plen = strlen(prefix);
    int r = 0;

    v = calloc(p->raw_cnt ? p->raw_cnt : 1, sizeof(*v));
    if (!v)
        return KB_E_NOMEM;
    for (size_t i = 0; i < p->raw_cnt; i++)
        if (strncmp(p->raw[i].key, prefix, plen) == 0)
            v[n++] = &p->raw[i];
    qsort(v, n, sizeof(*v), kb_config_raw_cmp);
    for (size_t i = 0; i < n && r == 0; i++)
        r = fn(opaque, v[i]->key, v[i]->value);
    free(v);
    return r;
}

bool kb_config_has_role(const kb_config_t *cfg, const char *role)
{
    return cfg->process_roles && kb_props_list_has(cfg->process_roles, role, false);
}

/* ---------------------------------------------------------------- printing */

static void kb_config_valid_str(const kb_conf_def_t *d, char *buf, size_t size)
{
    switch (d->type) {
    case KB_CT_INT:
    case KB_CT_LONG:
        if (d->max == INT32_MAX || d->max == INT64_MAX)
            snprintf(buf, size, ">= %lld", (long long)d->min);
        else
            snprintf(buf, size, "%lld..%lld", (long long)d->min, (long long)d->max);
        break;
    case KB_CT_DOUBLE:
        snprintf(buf, size, "%g..%g", d->dmin, d->dmax);
        break;
    case KB_CT_BOOL:
        snprintf(buf, size, "true, false");
        break;
    default:
        if (d->choices)
            kb_config_choices_str(d, buf, size);
        else
            buf[0] = '\0';
    }
}

void kb_config_print_table(FILE *out, const char *format)
{
    bool md = format && strcmp(format, "markdown") == 0;
    if (md) {
        fprintf(out, "| key | type | default | valid values | dynamic | description |\n");
        fprintf(out, "|---|---|---|---|---|---|\n");
    }
    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        const kb_conf_def_t *d = &kb_config_defs[i];
        char valid[256];
        const char *dflt = d->dflt ? d->dflt : "null";
        const char *note =
            (d->flags & KB_CF_NOEFFECT) ? " (Accepted; no effect in kbroker yet.)" : "";
        const char *mine = (d->flags & KB_CF_KBROKER) ? " (kbroker only.)" : "";
        kb_config_valid_str(d, valid, sizeof(valid));
        if (md) {
            fprintf(out, "| `%s` | %s | `%s` | %s | %s | %s%s%s |\n", d->name,
                    kb_config_type_name(d->type), *dflt ? dflt : "\"\"", valid,
                    (d->flags & KB_CF_DYNAMIC) ? "yes (Kafka)" : "no", d->doc, note, mine);
        } else {
            fprintf(out, "%s (%s, default %s%s%s%s)\n    %s%s%s\n", d->name,
                    kb_config_type_name(d->type), *dflt ? dflt : "\"\"", valid[0] ? ", valid " : "",
                    valid, (d->flags & KB_CF_DYNAMIC) ? ", dynamic in Kafka" : "", d->doc, note,
                    mine);
        }
    }
    if (!md)
        fprintf(out, "mirror.* (other than mirror.enable)\n    Passed to the mirror plugin, "
                     "which validates them.\n");
}

void kb_config_print_values(const kb_config_t *cfg, FILE *out)
{
    for (size_t i = 0; i < kb_config_defs_cnt; i++) {
        const kb_conf_def_t *d = &kb_config_defs[i];
        const void *f = kb_config_cfield(cfg, d);
        bool set = cfg->priv->isset[i];
        if (!d->dflt && !set) {
            fprintf(out, "%s=null\n", d->name);
            continue;
        }
        switch (d->type) {
        case KB_CT_BOOL:
            fprintf(out, "%s=%s\n", d->name, *(const bool *)f ? "true" : "false");
            break;
        case KB_CT_INT:
            fprintf(out, "%s=%d\n", d->name, *(const int32_t *)f);
            break;
        case KB_CT_LONG:
            fprintf(out, "%s=%lld\n", d->name, (long long)*(const int64_t *)f);
            break;
        case KB_CT_DOUBLE:
            fprintf(out, "%s=%g\n", d->name, *(const double *)f);
            break;
        case KB_CT_PASSWORD:
            fprintf(out, "%s=[hidden]\n", d->name);
            break;
        default: {
            const char *s = *(char *const *)f;
            fprintf(out, "%s=%s\n", d->name, s ? s : "null");
        }
        }
    }
}
