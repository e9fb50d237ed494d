/*
 * km_mconf.c - changes to a mirror's configuration (see km_mconf.h; design M114).
 */
#include "catalog/km_mconf.h"

#include <stdio.h>
#include <string.h>

#include "core/km_plugin_types.h"
#include "kp_errcode.h"
#include "util/km_mem.h"

/* The position of @p def's entry in the key list (its name or its alias), or n. */
static size_t km_mconf_pos(const char *const *keys, size_t n, const km_config_def_t *def)
{
    for (size_t i = 0; i < n; i++)
        if (km_config_find(&km_config_mirror_scope, keys[i]) == def)
            return i;
    return n;
}

/* The effective value of @p def for a key list: the given one, else the default (may be NULL). */
static const char *km_mconf_effective(const char *const *keys, const char *const *values, size_t n,
                                      const km_config_def_t *def)
{
    size_t i = km_mconf_pos(keys, n, def);
    return i < n ? values[i] : def->dflt;
}

static bool km_mconf_same(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

int16_t km_mconf_validate(km_plugin_t *cm, const char *const *keys, const char *const *values,
                          size_t n, km_mirror_config_t *conf, char *msg, size_t msg_size)
{
    km_err_t e;

    if (km_config_init(cm, &km_config_mirror_scope, conf, msg, msg_size) != KM_OK)
        return KP_ERR_UNKNOWN_SERVER_ERROR;
    for (size_t i = 0; i < n; i++) {
        const km_config_def_t *def = km_config_find(&km_config_mirror_scope, keys[i]);
        if (def != NULL && km_mconf_pos(keys, i, def) < i) {
            snprintf(msg, msg_size, "%s is given twice", def->name);
            goto invalid;
        }
        e = km_config_set(cm, &km_config_mirror_scope, conf, keys[i], values[i], msg, msg_size);
        if (e == KM_ERR_NOMEM) {
            km_config_free(cm, &km_config_mirror_scope, conf);
            snprintf(msg, msg_size, "out of memory");
            return KP_ERR_UNKNOWN_SERVER_ERROR;
        }
        if (e != KM_OK)
            goto invalid;
    }
    if (strcmp(conf->security_protocol, "PLAINTEXT") != 0) {
        snprintf(msg, msg_size,
                 "security.protocol=%s is not supported yet: the source connection supports "
                 "PLAINTEXT only (TLS and SASL are later work)",
                 conf->security_protocol);
        goto invalid;
    }
    if (km_config_check(&km_config_mirror_scope, conf, msg, msg_size) != KM_OK)
        goto invalid;
    return 0;

invalid:
    km_config_free(cm, &km_config_mirror_scope, conf);
    return KP_ERR_INVALID_CONFIG;
}

void km_mconf_result_free(km_plugin_t *cm, km_mconf_result_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        km_free(cm, r->keys[i]);
        km_free(cm, r->values[i]);
    }
    km_free(cm, r->keys);
    km_free(cm, r->values);
    memset(r, 0, sizeof(*r));
}

/* Check one operation on its own (the key list is checked as a whole afterwards). */
static int16_t km_mconf_check_op(const km_mconf_op_t *ops, size_t k, const km_config_def_t **defp,
                                 char *msg, size_t msg_size)
{
    const km_mconf_op_t *o = &ops[k];
    const km_config_def_t *def;

    if (o->key == NULL) {
        snprintf(msg, msg_size, "a config name is null");
        return KP_ERR_INVALID_REQUEST;
    }
    if (o->op < KM_MCONF_OP_SET || o->op > KM_MCONF_OP_SUBTRACT) {
        snprintf(msg, msg_size, "%s: unknown config operation %d", o->key, (int)o->op);
        return KP_ERR_INVALID_REQUEST;
    }
    def = km_config_find(&km_config_mirror_scope, o->key);
    if (def == NULL) {
        snprintf(msg, msg_size, "%s: unknown mirror configuration key", o->key);
        return KP_ERR_INVALID_CONFIG;
    }
    for (size_t j = 0; j < k; j++) {
        if (ops[j].key != NULL && km_config_find(&km_config_mirror_scope, ops[j].key) == def) {
            snprintf(msg, msg_size, "%s is changed twice in one request", def->name);
            return KP_ERR_INVALID_REQUEST;
        }
    }
    if (o->op == KM_MCONF_OP_APPEND || o->op == KM_MCONF_OP_SUBTRACT) {
        snprintf(msg, msg_size, "%s: only SET and DELETE are supported for mirror configs",
                 def->name);
        return KP_ERR_INVALID_CONFIG;
    }
    if (o->op == KM_MCONF_OP_SET && o->value == NULL) {
        snprintf(msg, msg_size, "%s: SET needs a value (DELETE restores the default)", def->name);
        return KP_ERR_INVALID_CONFIG;
    }
    *defp = def;
    return 0;
}

int16_t km_mconf_alter(km_plugin_t *cm, const char *const *keys, const char *const *values,
                       size_t n, const km_mconf_op_t *ops, size_t nops, km_mconf_result_t *out,
                       char *msg, size_t msg_size)
{
    km_mirror_config_t conf;
    size_t cap = n + nops;
    int16_t ec;

    memset(out, 0, sizeof(*out));
    for (size_t k = 0; k < nops; k++) {
        const km_config_def_t *def = NULL;
        if ((ec = km_mconf_check_op(ops, k, &def, msg, msg_size)) != 0)
            return ec;
    }
    out->keys = km_calloc(cm, cap + 1, sizeof(*out->keys));
    out->values = km_calloc(cm, cap + 1, sizeof(*out->values));
    if (out->keys == NULL || out->values == NULL)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        out->keys[i] = km_strdup(cm, keys[i]);
        out->values[i] = values[i] != NULL ? km_strdup(cm, values[i]) : NULL;
        out->n++;
        if (out->keys[i] == NULL || (values[i] != NULL && out->values[i] == NULL))
            goto nomem;
    }
    for (size_t k = 0; k < nops; k++) {
        const km_config_def_t *def = km_config_find(&km_config_mirror_scope, ops[k].key);
        size_t i = km_mconf_pos((const char *const *)out->keys, out->n, def);
        const char *before = km_mconf_effective(keys, values, n, def);
        const char *after;

        if (ops[k].op == KM_MCONF_OP_DELETE) {
            if (i < out->n) {
                km_free(cm, out->keys[i]);
                km_free(cm, out->values[i]);
                memmove(&out->keys[i], &out->keys[i + 1], (out->n - i - 1) * sizeof(char *));
                memmove(&out->values[i], &out->values[i + 1], (out->n - i - 1) * sizeof(char *));
                out->n--;
                out->changed = true;
            }
        } else {
            char *kc = km_strdup(cm, ops[k].key), *vc = km_strdup(cm, ops[k].value);
            if (kc == NULL || vc == NULL) {
                km_free(cm, kc);
                km_free(cm, vc);
                goto nomem;
            }
            if (i < out->n) {
                out->changed |= !km_mconf_same(out->values[i], vc);
                km_free(cm, out->keys[i]);
                km_free(cm, out->values[i]);
            } else {
                out->n++;
                out->changed = true;
            }
            out->keys[i] = kc;
            out->values[i] = vc;
        }
        after = km_mconf_effective((const char *const *)out->keys, (const char *const *)out->values,
                                   out->n, def);
        if ((def->flags & KM_CF_DYNAMIC) == 0 && !km_mconf_same(before, after))
            out->reconnect = true;
    }
    ec = km_mconf_validate(cm, (const char *const *)out->keys, (const char *const *)out->values,
                           out->n, &conf, msg, msg_size);
    if (ec != 0) {
        km_mconf_result_free(cm, out);
        return ec;
    }
    km_config_free(cm, &km_config_mirror_scope, &conf);
    return 0;

nomem:
    km_mconf_result_free(cm, out);
    snprintf(msg, msg_size, "out of memory");
    return KP_ERR_UNKNOWN_SERVER_ERROR;
}

size_t km_mconf_describe(const char *const *keys, const char *const *values, size_t n,
                         km_mconf_entry_t *out, size_t cap)
{
    size_t m = 0;

    for (size_t d = 0; d < km_config_mirror_scope.ndefs && m < cap; d++) {
        const km_config_def_t *def = &km_config_mirror_scope.defs[d];
        size_t i = km_mconf_pos(keys, n, def);
        km_mconf_entry_t *e = &out[m++];

        e->def = def;
        e->is_default = i == n;
        e->sensitive = (def->flags & KM_CF_SENSITIVE) != 0;
        e->value = e->sensitive ? NULL : i < n ? values[i] : def->dflt;
    }
    return m;
}
