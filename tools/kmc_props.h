/*
 * kmc_props.h -- Java .properties files, as the Kafka tools read --command-config and
 * --mirror-config: comments (# and !), "key=value", "key: value" and "key value", backslash
 * escapes (\t \n \r \f \uXXXX, any other character as itself), line continuations. Values are
 * trimmed at both ends (Kafka trims config values before parsing them).
 *
 * Owner: the caller owns a kmc_props_t and frees it with kmc_props_free().
 */
#ifndef KMC_PROPS_H
#define KMC_PROPS_H

#include <stddef.h>

/** Largest file accepted. */
#define KMC_PROPS_MAX_BYTES (1024 * 1024)

typedef struct kmc_prop {
    char *key;
    char *value;
    int line; /**< first physical line of the entry (1-based) */
} kmc_prop_t;

typedef struct kmc_props {
    kmc_prop_t *v; /**< in file order; a key may repeat (the last one wins) */
    size_t n, cap;
} kmc_props_t;

/**
 * Parse @p len bytes of @p text, appending to @p p (zeroed or from an earlier call). @p origin
 * names the source in messages. Returns 0, or -1 with "ORIGIN line N: what" in @p errstr (a
 * NUL byte, a bad \u escape, an empty key, out of memory); values never appear in messages.
 * @thread any
 */
int kmc_props_parse(kmc_props_t *p, const char *text, size_t len, const char *origin, char *errstr,
                    size_t errstr_size);

/** Read and parse file @p path (at most KMC_PROPS_MAX_BYTES). Returns 0 or -1 with errstr. */
int kmc_props_load(kmc_props_t *p, const char *path, char *errstr, size_t errstr_size);

/** The last entry with @p key, or NULL. */
const kmc_prop_t *kmc_props_get(const kmc_props_t *p, const char *key);

/** True if entry @p i is the last one with its key (the one that counts). */
int kmc_props_is_last(const kmc_props_t *p, size_t i);

void kmc_props_free(kmc_props_t *p);

#endif /* KMC_PROPS_H */
