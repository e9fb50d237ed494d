/*
 * kmc_args.c -- command-line parsing of kafka-mirrors.
 *
 * Every option takes its value as the next argument or after '=' (--mirror=m1). Exactly one
 * action; options that the action does not use are refused rather than ignored, so a typo in a
 * script fails loudly instead of doing something else.
 */
#include "kmc_args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Which options an action takes: bits of KMC_O_*. */
#define KMC_O_MIRROR        0x01u
#define KMC_O_MIRROR_CONFIG 0x02u
#define KMC_O_TOPIC         0x04u
#define KMC_O_EXCLUDE       0x08u
#define KMC_O_FAILED        0x10u
#define KMC_O_WAIT          0x20u
#define KMC_O_ADD_CONFIG    0x40u
#define KMC_O_DELETE_CONFIG 0x80u

typedef struct kmc_action_def {
    const char *flag;
    const char *alias;
    kmc_action_t act;
    uint32_t allowed;  /**< KMC_O_* the action accepts */
    uint32_t required; /**< KMC_O_* the action needs */
} kmc_action_def_t;

static const kmc_action_def_t kmc_actions[] = {
    {"--create", NULL, KMC_ACT_CREATE, KMC_O_MIRROR | KMC_O_MIRROR_CONFIG,
     KMC_O_MIRROR | KMC_O_MIRROR_CONFIG},
    {"--start", "--add", KMC_ACT_START, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_EXCLUDE | KMC_O_WAIT,
     KMC_O_MIRROR | KMC_O_TOPIC},
    {"--stop", "--remove", KMC_ACT_STOP, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_WAIT,
     KMC_O_MIRROR | KMC_O_TOPIC},
    {"--pause", NULL, KMC_ACT_PAUSE, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_WAIT,
     KMC_O_MIRROR | KMC_O_TOPIC},
    {"--resume", NULL, KMC_ACT_RESUME, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_WAIT,
     KMC_O_MIRROR | KMC_O_TOPIC},
    {"--recover", NULL, KMC_ACT_RECOVER, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_WAIT,
     KMC_O_MIRROR | KMC_O_TOPIC},
    {"--delete", NULL, KMC_ACT_DELETE, KMC_O_MIRROR, KMC_O_MIRROR},
    {"--list", NULL, KMC_ACT_LIST, 0, 0},
    {"--describe", NULL, KMC_ACT_DESCRIBE, KMC_O_MIRROR | KMC_O_TOPIC | KMC_O_FAILED, 0},
    {"--alter", NULL, KMC_ACT_ALTER, KMC_O_MIRROR | KMC_O_ADD_CONFIG | KMC_O_DELETE_CONFIG,
     KMC_O_MIRROR},
};

#define KMC_NACTIONS (sizeof(kmc_actions) / sizeof(kmc_actions[0]))

static const struct {
    uint32_t bit;
    const char *flag;
} kmc_option_names[] = {
    {KMC_O_MIRROR, "--mirror"},         {KMC_O_MIRROR_CONFIG, "--mirror-config"},
    {KMC_O_TOPIC, "--topic"},           {KMC_O_EXCLUDE, "--exclude"},
    {KMC_O_FAILED, "--failed"},         {KMC_O_WAIT, "--wait"},
    {KMC_O_ADD_CONFIG, "--add-config"}, {KMC_O_DELETE_CONFIG, "--delete-config"},
};

static int kmc_args_fail(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int kmc_args_fail(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(errstr, errstr_size, fmt, ap);
    va_end(ap);
    return -1;
}

const char *kmc_action_name(kmc_action_t act)
{
    switch (act) {
    case KMC_ACT_CREATE:
        return "create";
    case KMC_ACT_START:
        return "start";
    case KMC_ACT_STOP:
        return "stop";
    case KMC_ACT_PAUSE:
        return "pause";
    case KMC_ACT_RESUME:
        return "resume";
    case KMC_ACT_RECOVER:
        return "recover";
    case KMC_ACT_DELETE:
        return "delete";
    case KMC_ACT_LIST:
        return "list";
    case KMC_ACT_DESCRIBE:
        return "describe";
    case KMC_ACT_ALTER:
        return "alter";
    case KMC_ACT_HELP:
        return "help";
    case KMC_ACT_VERSION:
        return "version";
    case KMC_ACT_NONE:
        break;
    }
    return "none";
}

static const kmc_action_def_t *kmc_args_action_def(kmc_action_t act)
{
    for (size_t i = 0; i < KMC_NACTIONS; i++)
        if (kmc_actions[i].act == act)
            return &kmc_actions[i];
    return NULL;
}

/* Does @p arg name option @p name, as "--name" or "--name=value"? Sets *val for the latter. */
static bool kmc_args_is(const char *arg, const char *name, const char **val)
{
    size_t n = strlen(name);

    *val = NULL;
    if (strncmp(arg, name, n) != 0)
        return false;
    if (arg[n] == '\0')
        return true;
    if (arg[n] == '=') {
        *val = arg + n + 1;
        return true;
    }
    return false;
}

/* The value of an option: after '=' or the next argument. */
static int kmc_args_value(int argc, char **argv, int *i, const char *name, const char *inl,
                          const char **out, char *errstr, size_t errstr_size)
{
    if (inl != NULL) {
        *out = inl;
    } else {
        if (*i + 1 >= argc)
            return kmc_args_fail(errstr, errstr_size, "%s needs a value", name);
        *out = argv[++*i];
    }
    if (**out == '\0')
        return kmc_args_fail(errstr, errstr_size, "%s needs a non-empty value", name);
    return 0;
}

static int kmc_args_once(const char *prev, const char *name, char *errstr, size_t errstr_size)
{
    if (prev != NULL)
        return kmc_args_fail(errstr, errstr_size, "%s given more than once", name);
    return 0;
}

static int kmc_args_check(kmc_args_t *a, uint32_t given, char *errstr, size_t errstr_size)
{
    const kmc_action_def_t *d;

    if (a->action == KMC_ACT_NONE)
        return kmc_args_fail(errstr, errstr_size,
                             "no action: give one of --create, --start (--add), --stop "
                             "(--remove), --pause, --resume, --recover, --delete, --list, "
                             "--describe, --alter (see --help)");
    if (a->bootstrap == NULL)
        return kmc_args_fail(errstr, errstr_size,
                             "--bootstrap-server HOST:PORT[,HOST:PORT...] is required (any "
                             "broker of the destination cluster)");
    d = kmc_args_action_def(a->action);
    for (size_t i = 0; i < sizeof(kmc_option_names) / sizeof(kmc_option_names[0]); i++) {
        uint32_t bit = kmc_option_names[i].bit;
        if ((given & bit) && !(d->allowed & bit))
            return kmc_args_fail(errstr, errstr_size, "%s cannot be used with %s",
                                 kmc_option_names[i].flag, a->action_flag);
        if (!(given & bit) && (d->required & bit))
            return kmc_args_fail(errstr, errstr_size, "%s needs %s", a->action_flag,
                                 kmc_option_names[i].flag);
    }
    if (a->action == KMC_ACT_ALTER && !(given & (KMC_O_ADD_CONFIG | KMC_O_DELETE_CONFIG)))
        return kmc_args_fail(errstr, errstr_size,
                             "--alter needs --add-config K=V[,K=V...] and/or --delete-config "
                             "K[,K...]");
    return 0;
}

void kmc_cfg_ops_free(kmc_cfg_op_t *ops, size_t n)
{
    for (size_t i = 0; ops != NULL && i < n; i++) {
        free(ops[i].key);
        free(ops[i].value);
    }
    free(ops);
}

/* Append the items of @p list (delete: keys only) to @p ops. */
static int kmc_cfg_ops_add(const char *list, bool del, kmc_cfg_op_t **ops, size_t *n, size_t *cap,
                           char *errstr, size_t errstr_size)
{
    const char *p = list;

    while (*p != '\0') {
        const char *start = p, *eq = NULL;
        int depth = 0;
        size_t len;
        kmc_cfg_op_t *op;

        for (; *p != '\0' && (*p != ',' || depth > 0); p++) {
            if (*p == '[')
                depth++;
            else if (*p == ']' && depth > 0)
                depth--;
            else if (*p == '=' && eq == NULL && !del)
                eq = p;
        }
        len = (size_t)(p - start);
        if (*p == ',')
            p++;
        if (len == 0)
            return kmc_args_fail(errstr, errstr_size, "%s: an empty item",
                                 del ? "--delete-config" : "--add-config");
        if (!del && (eq == NULL || eq == start))
            return kmc_args_fail(errstr, errstr_size, "--add-config: '%.*s' is not KEY=VALUE",
                                 (int)(len > 60 ? 60 : len), start);
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 8;
            kmc_cfg_op_t *nv = realloc(*ops, nc * sizeof(*nv));
            if (nv == NULL)
                return kmc_args_fail(errstr, errstr_size, "out of memory");
            *ops = nv;
            *cap = nc;
        }
        op = &(*ops)[*n];
        if (del) {
            op->key = strndup(start, len);
            op->value = NULL;
        } else {
            const char *v = eq + 1;
            size_t vlen = (size_t)(start + len - v);
            if (vlen >= 2 && v[0] == '[' && v[vlen - 1] == ']') {
                v++;
                vlen -= 2;
            }
            op->key = strndup(start, (size_t)(eq - start));
            op->value = strndup(v, vlen);
        }
        if (op->key == NULL || (!del && op->value == NULL)) {
            free(op->key);
            free(op->value);
            return kmc_args_fail(errstr, errstr_size, "out of memory");
        }
        (*n)++;
        for (size_t i = 0; i + 1 < *n; i++)
            if (strcmp((*ops)[i].key, op->key) == 0)
                return kmc_args_fail(errstr, errstr_size, "%.100s is changed twice", op->key);
    }
    return 0;
}

int kmc_cfg_ops_parse(const char *add, const char *del, kmc_cfg_op_t **ops, size_t *n, char *errstr,
                      size_t errstr_size)
{
    size_t cap = 0;

    *ops = NULL;
    *n = 0;
    if ((add != NULL && kmc_cfg_ops_add(add, false, ops, n, &cap, errstr, errstr_size) != 0) ||
        (del != NULL && kmc_cfg_ops_add(del, true, ops, n, &cap, errstr, errstr_size) != 0)) {
        kmc_cfg_ops_free(*ops, *n);
        *ops = NULL;
        *n = 0;
        return -1;
    }
    return 0;
}

int kmc_args_parse(kmc_args_t *a, int argc, char **argv, char *errstr, size_t errstr_size)
{
    uint32_t given = 0;
    bool help = false, version = false;
    const char *v;

    memset(a, 0, sizeof(*a));
    a->timeout_ms = KMC_DEFAULT_TIMEOUT_MS;
    errstr[0] = '\0';

    /* --help / --version win, wherever they are. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            help = true;
        else if (strcmp(argv[i], "--version") == 0)
            version = true;
    }
    if (help || version) {
        a->action = help ? KMC_ACT_HELP : KMC_ACT_VERSION;
        a->action_flag = help ? "--help" : "--version";
        return 0;
    }

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool matched = false;

        for (size_t k = 0; k < KMC_NACTIONS; k++) {
            const kmc_action_def_t *d = &kmc_actions[k];
            if (strcmp(arg, d->flag) != 0 && (d->alias == NULL || strcmp(arg, d->alias) != 0))
                continue;
            if (a->action != KMC_ACT_NONE)
                return kmc_args_fail(errstr, errstr_size, "only one action at a time: %s and %s",
                                     a->action_flag, arg);
            a->action = d->act;
            a->action_flag = arg;
            matched = true;
            break;
        }
        if (matched)
            continue;

        if (kmc_args_is(arg, "--bootstrap-server", &v)) {
            if (kmc_args_once(a->bootstrap, "--bootstrap-server", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--bootstrap-server", v, &a->bootstrap, errstr,
                               errstr_size))
                return -1;
        } else if (kmc_args_is(arg, "--command-config", &v)) {
            if (kmc_args_once(a->command_config, "--command-config", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--command-config", v, &a->command_config, errstr,
                               errstr_size))
                return -1;
        } else if (kmc_args_is(arg, "--mirror-config", &v)) {
            if (kmc_args_once(a->mirror_config, "--mirror-config", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--mirror-config", v, &a->mirror_config, errstr,
                               errstr_size))
                return -1;
            given |= KMC_O_MIRROR_CONFIG;
        } else if (kmc_args_is(arg, "--mirror", &v)) {
            if (kmc_args_once(a->mirror, "--mirror", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--mirror", v, &a->mirror, errstr, errstr_size))
                return -1;
            given |= KMC_O_MIRROR;
        } else if (kmc_args_is(arg, "--topic", &v) || kmc_args_is(arg, "--topics", &v)) {
            if (a->ntopics == KMC_MAX_PATTERNS)
                return kmc_args_fail(errstr, errstr_size, "at most %d --topic options",
                                     KMC_MAX_PATTERNS);
            if (kmc_args_value(argc, argv, &i, "--topic", v, &a->topics[a->ntopics], errstr,
                               errstr_size))
                return -1;
            a->ntopics++;
            given |= KMC_O_TOPIC;
        } else if (kmc_args_is(arg, "--exclude", &v)) {
            if (a->nexcludes == KMC_MAX_PATTERNS)
                return kmc_args_fail(errstr, errstr_size, "at most %d --exclude options",
                                     KMC_MAX_PATTERNS);
            if (kmc_args_value(argc, argv, &i, "--exclude", v, &a->excludes[a->nexcludes], errstr,
                               errstr_size))
                return -1;
            a->nexcludes++;
            given |= KMC_O_EXCLUDE;
        } else if (kmc_args_is(arg, "--add-config", &v)) {
            if (kmc_args_once(a->add_config, "--add-config", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--add-config", v, &a->add_config, errstr,
                               errstr_size))
                return -1;
            given |= KMC_O_ADD_CONFIG;
        } else if (kmc_args_is(arg, "--delete-config", &v)) {
            if (kmc_args_once(a->delete_config, "--delete-config", errstr, errstr_size) ||
                kmc_args_value(argc, argv, &i, "--delete-config", v, &a->delete_config, errstr,
                               errstr_size))
                return -1;
            given |= KMC_O_DELETE_CONFIG;
        } else if (kmc_args_is(arg, "--timeout-ms", &v)) {
            const char *t;
            char *end;
            long long n;
            if (a->timeout_set)
                return kmc_args_fail(errstr, errstr_size, "--timeout-ms given more than once");
            if (kmc_args_value(argc, argv, &i, "--timeout-ms", v, &t, errstr, errstr_size))
                return -1;
            errno = 0;
            n = strtoll(t, &end, 10);
            if (errno != 0 || *end != '\0' || n < 1 || n > 3600000)
                return kmc_args_fail(errstr, errstr_size,
                                     "--timeout-ms: '%.40s' is not a number of milliseconds "
                                     "in 1..3600000",
                                     t);
            a->timeout_ms = (int32_t)n;
            a->timeout_set = true;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (strcmp(arg, "--wait") == 0) {
            a->wait = true;
            given |= KMC_O_WAIT;
        } else if (strcmp(arg, "--failed") == 0) {
            a->failed = true;
            given |= KMC_O_FAILED;
        } else if (arg[0] == '-') {
            return kmc_args_fail(errstr, errstr_size, "unknown option %.60s (see --help)", arg);
        } else {
            return kmc_args_fail(errstr, errstr_size,
                                 "unexpected argument '%.60s' (options take the form --name "
                                 "VALUE; see --help)",
                                 arg);
        }
    }
    return kmc_args_check(a, given, errstr, errstr_size);
}

void kmc_args_usage(FILE *out)
{
    fputs("Usage: kafka-mirrors --bootstrap-server HOST:PORT[,HOST:PORT...] ACTION [OPTIONS]\n"
          "\n"
          "Manage KIP-1279 cluster mirrors on a destination cluster whose brokers run kmirror.\n"
          "Requests go to any broker of the destination cluster, which forwards them as needed.\n"
          "\n"
          "Actions (exactly one):\n"
          "  --create   --mirror NAME --mirror-config FILE\n"
          "                 create a mirror; FILE is a properties file with the source cluster's\n"
          "                 client settings (bootstrap.servers is required; see docs/config.md)\n"
          "  --start | --add     --mirror NAME --topic REGEX [--exclude REGEX]\n"
          "                 start mirroring the source topics whose whole name matches REGEX\n"
          "                 (the broker resolves it against the source's topic list and keeps\n"
          "                 it in the mirror's topics.include)\n"
          "  --stop | --remove   --mirror NAME --topic REGEX\n"
          "                 stop mirroring (failover): the topics become writable once STOPPED;\n"
          "                 REGEX moves to the mirror's topics.exclude\n"
          "  --pause    --mirror NAME --topic REGEX   stop fetching; the topics stay read-only\n"
          "  --resume   --mirror NAME --topic REGEX   resume paused topics from their log end\n"
          "  --recover  --mirror NAME --topic REGEX   retry FAILED partitions (cause fixed)\n"
          "  --delete   --mirror NAME                 delete an empty or fully stopped mirror\n"
          "  --list                                   list mirrors\n"
          "  --describe [--mirror NAME] [--topic REGEX] [--failed]\n"
          "                 state, offsets, lag and errors of every mirrored partition (with\n"
          "                 --mirror also the keys set on the mirror, secrets hidden)\n"
          "  --alter    --mirror NAME [--add-config K=V[,K=V...]] [--delete-config K[,K...]]\n"
          "                 change the mirror's configuration (a list value as K=[a,b]);\n"
          "                 filters and sync settings apply on the next run, connection\n"
          "                 settings reconnect the mirror's fetchers\n"
          "  --help, --version\n"
          "\n"
          "Options:\n"
          "  --bootstrap-server LIST  destination brokers, host:port[,host:port...]\n"
          "  --command-config FILE    client properties (security.protocol=PLAINTEXT only,\n"
          "                           client.id, request.timeout.ms,\n"
          "                           socket.connection.setup.timeout.ms)\n"
          "  --topic REGEX            repeatable; a regular expression (PCRE2) matching whole\n"
          "                           topic names; --topics is the same option\n"
          "  --exclude REGEX          repeatable, --start only: never mirror matching topics\n"
          "  --json                   machine-readable output (field names in docs/cli.md)\n"
          "  --failed                 --describe only: only partitions that are FAILED or report\n"
          "                           an error\n"
          "  --wait                   --start/--stop/--pause/--resume/--recover: then wait until\n"
          "                           every partition of the topics is MIRRORING (STOPPED,\n"
          "                           PAUSED), up to --timeout-ms; exit 1 if not, or if one fails\n"
          "                           for good\n"
          "  --timeout-ms N           per request, for connecting, and for --wait (default 30000)\n"
          "\n"
          "Exit codes: 0 ok; 1 the request or one of its items failed (the Kafka error is\n"
          "printed); 2 usage or configuration-file error; 3 no broker reachable, or the broker\n"
          "lacks the mirror APIs; 4 the broker's answer could not be decoded.\n",
          out);
}
