/*
 * kmc_args.h -- command-line parsing of kafka-mirrors (docs/cli.md).
 *
 * Pure: no I/O, no allocation. Strings in kmc_args_t point into argv.
 */
#ifndef KMC_ARGS_H
#define KMC_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Exit codes of kafka-mirrors (docs/cli.md "Exit codes"). */
#define KMC_EXIT_OK          0 /**< every item succeeded */
#define KMC_EXIT_FAILED      1 /**< the request, or one of its items, failed (Kafka error) */
#define KMC_EXIT_USAGE       2 /**< bad arguments or a bad --mirror-config/--command-config */
#define KMC_EXIT_UNREACHABLE 3 /**< no broker answered, or the broker lacks the mirror APIs */
#define KMC_EXIT_PROTOCOL    4 /**< the broker's answer could not be decoded */

typedef enum kmc_action {
    KMC_ACT_NONE = 0,
    KMC_ACT_CREATE,
    KMC_ACT_START,
    KMC_ACT_STOP,
    KMC_ACT_PAUSE,
    KMC_ACT_RESUME,
    KMC_ACT_RECOVER,
    KMC_ACT_DELETE,
    KMC_ACT_LIST,
    KMC_ACT_DESCRIBE,
    KMC_ACT_ALTER,
    KMC_ACT_HELP,
    KMC_ACT_VERSION,
} kmc_action_t;

/** Most --topic / --exclude options accepted in one command. */
#define KMC_MAX_PATTERNS 64

/** Default for --timeout-ms. */
#define KMC_DEFAULT_TIMEOUT_MS 30000

typedef struct kmc_args {
    kmc_action_t action;
    const char *action_flag; /**< the action as written ("--add"), for messages */
    const char *bootstrap;   /**< --bootstrap-server */
    const char *command_config;
    const char *mirror;
    const char *mirror_config;
    const char *topics[KMC_MAX_PATTERNS]; /**< --topic (regular expressions), in order */
    int ntopics;
    const char *excludes[KMC_MAX_PATTERNS]; /**< --exclude */
    int nexcludes;
    bool json;
    bool failed;               /**< --failed (describe: only FAILED partitions and errors) */
    bool wait;                 /**< --wait: until the topics' partitions reach the action's state */
    const char *add_config;    /**< --alter: --add-config k=v[,k=v...] (a list value in [a,b]) */
    const char *delete_config; /**< --alter: --delete-config k[,k...] */
    int32_t timeout_ms;        /**< --timeout-ms, or KMC_DEFAULT_TIMEOUT_MS */
    bool timeout_set;
} kmc_args_t;

/**
 * Parse argv (argv[0] is the program). Returns 0, or -1 with a one-line message in @p errstr
 * (a usage error: exit KMC_EXIT_USAGE). --help and --version win over everything else.
 * @thread any
 */
int kmc_args_parse(kmc_args_t *a, int argc, char **argv, char *errstr, size_t errstr_size);

/** One change of --alter. */
typedef struct kmc_cfg_op {
    char *key;
    char *value; /**< NULL for a delete */
} kmc_cfg_op_t;

/**
 * Split --add-config and --delete-config (either may be NULL) into operations: items are
 * separated by commas outside square brackets; an --add-config item is KEY=VALUE, and a VALUE
 * written [a,b] stands for "a,b" (a list, as kafka-configs writes it). A key twice is refused.
 * *@p ops is malloc'd (kmc_cfg_ops_free). Returns 0 or -1 with a message (a usage error).
 * @thread any
 */
int kmc_cfg_ops_parse(const char *add, const char *del, kmc_cfg_op_t **ops, size_t *n, char *errstr,
                      size_t errstr_size);

void kmc_cfg_ops_free(kmc_cfg_op_t *ops, size_t n);

/** The action's canonical name ("start" for --add/--start). @thread any */
const char *kmc_action_name(kmc_action_t act);

/** Print the --help text. @thread any */
void kmc_args_usage(FILE *out);

#endif /* KMC_ARGS_H */
