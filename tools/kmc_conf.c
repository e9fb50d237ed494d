/*
 * kmc_conf.c -- mirror names, --mirror-config and --command-config (see kmc_conf.h).
 *
 * The per-mirror keys are checked by the plugin's own config engine (plugin/core/km_config),
 * linked from km_plugin_static. It allocates through the instance's host API table, so the CLI
 * gives it a minimal instance whose table only has the four memory functions.
 */
#include "kmc_conf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/km_config.h"
#include "core/km_plugin_types.h"

static int kmc_conf_fail(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int kmc_conf_fail(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return -1;
}

const char *kmc_mirror_name_invalid(const char *name)
{
    static const char *const suffixes[] = {".paused", ".stopped", ".removed"};
    size_t n = strlen(name);

    if (n == 0)
        return "the name is empty";
    if (n > KMC_MIRROR_NAME_MAX)
        return "the name is longer than 249 characters";
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return "'.' and '..' are not allowed";
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return "only ASCII letters, digits, '.', '_' and '-' are allowed";
    }
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        size_t sl = strlen(suffixes[i]);
        if (n >= sl && strcmp(name + n - sl, suffixes[i]) == 0)
            return "the suffixes .paused, .stopped and .removed are reserved (they mark a "
                   "topic's mirror state)";
    }
    return NULL;
}

/* ---- a minimal plugin instance for the config engine ------------------------------------- */

static void *kmc_conf_alloc(kbx_host_t *host, size_t size)
{
    (void)host;
    return malloc(size ? size : 1);
}

static void *kmc_conf_calloc(kbx_host_t *host, size_t nmemb, size_t size)
{
    (void)host;
    return calloc(nmemb ? nmemb : 1, size ? size : 1);
}

static void *kmc_conf_realloc(kbx_host_t *host, void *ptr, size_t size)
{
    (void)host;
    return realloc(ptr, size ? size : 1);
}

static void kmc_conf_free(kbx_host_t *host, void *ptr)
{
    (void)host;
    free(ptr);
}

static const kbx_api_t kmc_conf_api = {
    .struct_size = sizeof(kbx_api_t),
    .abi_major = KBX_ABI_MAJOR,
    .abi_minor = KBX_ABI_MINOR,
    .mem_alloc = kmc_conf_alloc,
    .mem_calloc = kmc_conf_calloc,
    .mem_realloc = kmc_conf_realloc,
    .mem_free = kmc_conf_free,
};

km_plugin_t *kmc_conf_plugin_new(void)
{
    km_plugin_t *cm = calloc(1, sizeof(*cm));

    if (cm != NULL) {
        cm->ref.magic = KM_PLUGIN_MAGIC;
        cm->ref.api = &kmc_conf_api;
    }
    return cm;
}

void kmc_conf_plugin_free(km_plugin_t *cm)
{
    if (cm != NULL)
        cm->ref.magic = 0;
    free(cm);
}

/* ---- --mirror-config ---------------------------------------------------------------------- */

int kmc_mirror_conf_check(const kmc_props_t *p, const char *path, kmc_mirror_conf_t *out,
                          FILE *warn, char *errstr, size_t errstr_size)
{
    const km_config_scope_t *scope = &km_config_mirror_scope;
    km_plugin_t *cm;
    void *conf;
    char err[512];
    int rc = -1;

    memset(out, 0, sizeof(*out));
    cm = kmc_conf_plugin_new();
    conf = calloc(1, scope->struct_size);
    out->v = calloc(p->n ? p->n : 1, sizeof(*out->v));
    if (cm == NULL || conf == NULL || out->v == NULL) {
        kmc_conf_plugin_free(cm);
        free(conf);
        kmc_mirror_conf_free(out);
        return kmc_conf_fail(errstr, errstr_size, "out of memory");
    }
    if (km_config_init(cm, scope, conf, err, sizeof(err)) != KM_OK) {
        kmc_conf_fail(errstr, errstr_size, "internal error in the mirror config table: %s", err);
        free(conf);
        kmc_conf_plugin_free(cm);
        kmc_mirror_conf_free(out);
        return -1;
    }

    for (size_t i = 0; i < p->n; i++) {
        const kmc_prop_t *e = &p->v[i];
        const km_config_def_t *def = km_config_find(scope, e->key);

        if (def == NULL) {
            kmc_conf_fail(errstr, errstr_size,
                          "%s line %d: %.100s: unknown mirror configuration key (the per-mirror "
                          "keys are listed in docs/config.md, \"Per-mirror settings\")",
                          path, e->line, e->key);
            goto out;
        }
        if (!kmc_props_is_last(p, i)) {
            if (warn != NULL)
                fprintf(warn,
                        "kafka-mirrors: warning: %s line %d: %s is given again later; the last "
                        "value is used\n",
                        path, e->line, e->key);
            continue;
        }
        for (size_t k = 0; k < out->n; k++) {
            if (strcmp(out->v[k].name, def->name) == 0) {
                kmc_conf_fail(errstr, errstr_size,
                              "%s line %d: %s and its other name %s are both given; keep one", path,
                              e->line, def->name, def->alias ? def->alias : def->name);
                goto out;
            }
        }
        if (km_config_set(cm, scope, conf, e->key, e->value, err, sizeof(err)) != KM_OK) {
            kmc_conf_fail(errstr, errstr_size, "%s line %d: %s", path, e->line, err);
            goto out;
        }
        if (strcmp(def->name, "security.protocol") == 0 && strcasecmp(e->value, "PLAINTEXT") != 0) {
            kmc_conf_fail(errstr, errstr_size,
                          "%s line %d: security.protocol=%s: mirrors reach their source cluster "
                          "over PLAINTEXT only for now (kmirror's client has no TLS or SASL "
                          "yet); use a PLAINTEXT listener of the source",
                          path, e->line, e->value);
            goto out;
        }
        out->v[out->n].name = def->name;
        out->v[out->n].value = e->value;
        out->v[out->n].sensitive = (def->flags & KM_CF_SENSITIVE) != 0;
        if (strcmp(def->name, "bootstrap.servers") == 0)
            out->bootstrap = e->value;
        out->n++;
    }
    if (km_config_check(scope, conf, err, sizeof(err)) != KM_OK) {
        kmc_conf_fail(errstr, errstr_size, "%s: %s", path, err);
        goto out;
    }
    rc = 0;
out:
    km_config_free(cm, scope, conf);
    free(conf);
    kmc_conf_plugin_free(cm);
    if (rc != 0)
        kmc_mirror_conf_free(out);
    return rc;
}

void kmc_mirror_conf_free(kmc_mirror_conf_t *mc)
{
    free(mc->v);
    memset(mc, 0, sizeof(*mc));
}

/* ---- --command-config --------------------------------------------------------------------- */

static int kmc_conf_ms(const kmc_prop_t *e, const char *path, int32_t *out, char *errstr,
                       size_t errstr_size)
{
    char *end;
    long long v = strtoll(e->value, &end, 10);

    if (e->value[0] == '\0' || *end != '\0' || v < 1 || v > 3600000)
        return kmc_conf_fail(errstr, errstr_size,
                             "%s line %d: %s: '%.40s' is not a number of milliseconds in "
                             "1..3600000",
                             path, e->line, e->key, e->value);
    *out = (int32_t)v;
    return 0;
}

int kmc_client_conf_apply(const kmc_props_t *p, const char *path, kmc_client_conf_t *cc, FILE *warn,
                          char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < p->n; i++) {
        const kmc_prop_t *e = &p->v[i];

        if (!kmc_props_is_last(p, i))
            continue;
        if (strcmp(e->key, "security.protocol") == 0) {
            if (strcasecmp(e->value, "PLAINTEXT") != 0)
                return kmc_conf_fail(errstr, errstr_size,
                                     "%s line %d: security.protocol=%.40s: kafka-mirrors speaks "
                                     "PLAINTEXT only for now (no TLS or SASL yet); point "
                                     "--bootstrap-server at a PLAINTEXT listener of the "
                                     "destination cluster",
                                     path, e->line, e->value);
        } else if (strcmp(e->key, "client.id") == 0) {
            cc->client_id = e->value;
        } else if (strcmp(e->key, "request.timeout.ms") == 0 ||
                   strcmp(e->key, "default.api.timeout.ms") == 0) {
            if (kmc_conf_ms(e, path, &cc->request_timeout_ms, errstr, errstr_size))
                return -1;
        } else if (strcmp(e->key, "socket.connection.setup.timeout.ms") == 0) {
            if (kmc_conf_ms(e, path, &cc->connect_timeout_ms, errstr, errstr_size))
                return -1;
        } else if (strncmp(e->key, "sasl.", 5) == 0 || strncmp(e->key, "ssl.", 4) == 0) {
            if (warn != NULL)
                fprintf(warn,
                        "kafka-mirrors: warning: %s line %d: %s is ignored: kafka-mirrors "
                        "speaks PLAINTEXT only for now\n",
                        path, e->line, e->key);
        } else if (warn != NULL) {
            fprintf(warn,
                    "kafka-mirrors: warning: %s line %d: %.100s is not used by kafka-mirrors\n",
                    path, e->line, e->key);
        }
    }
    return 0;
}
