/*
 * km_pattern.h - topic-name patterns (docs/design.md M9): PCRE2 regular expressions matched
 * against the whole name (anchored at both ends, as Java's Matcher.matches()), with match and
 * depth limits so that a runaway pattern fails cleanly instead of burning a thread.
 *
 * Differences from Kafka's RE2/J patterns: PCRE2 syntax (a superset for the common forms:
 * classes, alternation, repetition, non-capturing groups); back-references and lookaround are
 * accepted by PCRE2 but bounded by the limits below; a subject that exceeds a limit is an error
 * (KM_ERR_LIMIT), never a silent "no match".
 *
 * Owner: whoever compiled the pattern (km_pattern_free). A compiled pattern carries its own
 * match data, so one pattern is used by one thread at a time (the coordinator loop).
 */
#ifndef KM_PATTERN_H
#define KM_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

#include "util/km_err.h"
#include "util/km_types.h"

/** Backtracking steps allowed per match (PCRE2 match limit). */
#define KM_PATTERN_MATCH_LIMIT 200000u
/** Nested backtracking depth allowed per match (PCRE2 depth limit). */
#define KM_PATTERN_DEPTH_LIMIT 2000u
/** Heap memory (KiB) a match may use for backtracking frames. */
#define KM_PATTERN_HEAP_LIMIT_KIB 4096u
/** Longest pattern accepted (bytes). */
#define KM_PATTERN_MAX_LEN 4096u

typedef struct km_pattern km_pattern_t;

/**
 * Compile re (len bytes, borrowed, need not be NUL-terminated) into *out.
 * A syntax error writes "invalid regular expression at offset N: <PCRE2's reason>" into
 * errstr (the pattern itself is not echoed: the caller names it if it wants to).
 * @return KM_OK; KM_ERR_INVALID (syntax error, empty or too long: errstr says which);
 *         KM_ERR_NOMEM
 * @thread any
 */
km_err_t km_pattern_compile(km_plugin_t *cm, const char *re, size_t len, km_pattern_t **out,
                            char *errstr, size_t errstr_size);

/**
 * Does the whole of s (n bytes) match p? *matched is set on KM_OK only.
 * @return KM_OK; KM_ERR_LIMIT (a match, depth or heap limit was hit: the pattern is too
 *         expensive for this subject); KM_ERR_NOMEM
 * @thread one thread at a time per pattern
 */
km_err_t km_pattern_match(km_pattern_t *p, const char *s, size_t n, bool *matched);

/** The source text of p (NUL-terminated, owned by p). @thread any */
const char *km_pattern_source(const km_pattern_t *p);

/** Free p (NULL is fine). @thread any */
void km_pattern_free(km_pattern_t *p);

/**
 * True if a topic name is internal and never mirrored, whatever the patterns say: it starts
 * with "__" (Kafka's internal topics, __mirror_state, __cluster_metadata).
 * @thread any
 */
bool km_pattern_internal_topic(const char *name);

/**
 * Topic selection as the mirror filters define it: not internal, matched by at least one of
 * include[0..ninclude), and matched by none of exclude[0..nexclude) (exclude wins). NULL
 * entries are skipped.
 * @return KM_OK with *selected set, or the first km_pattern_match error
 * @thread one thread at a time per pattern
 */
km_err_t km_pattern_select(km_pattern_t *const *include, size_t ninclude,
                           km_pattern_t *const *exclude, size_t nexclude, const char *name,
                           bool *selected);

#endif /* KM_PATTERN_H */
