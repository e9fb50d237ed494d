/*
 * kb_props.h -- a reader for Java ".properties" text, as Kafka reads its server.properties
 * (java.util.Properties.load semantics):
 *
 *   - `#` or `!` as the first non-blank character of a line starts a comment line;
 *   - the key ends at the first unescaped `=`, `:` or blank; blanks around the separator are
 *     skipped, and a blank may itself be the separator (`key value`);
 *   - an odd number of backslashes at the end of a line continues the line; leading blanks of
 *     the continuation are dropped;
 *   - escapes `\t \n \r \f \uXXXX` (UTF-16, surrogate pairs combined, written as UTF-8) and
 *     `\x` = `x` for any other character;
 *   - lines end with LF, CR or CR LF; the last key wins when one repeats (the callback sees all).
 *
 * Bytes are passed through unchanged otherwise (Java reads files as ISO-8859-1; we keep UTF-8,
 * which is what people mean). Trailing blanks of a value are kept, as Java does; Kafka trims
 * values when it parses them, and so does kb_config.
 *
 * @thread any (no shared state)
 */
#ifndef KB_PROPS_H
#define KB_PROPS_H

#include <stdbool.h>
#include <stddef.h>

/** Called once per key/value pair in file order. @p lineno is the line where the pair starts.
 *  The strings are valid only during the call. Return 0 to continue, anything else stops the
 *  parse and becomes its result. */
typedef int(kb_props_cb)(void *opaque, const char *key, const char *value, int lineno);

/**
 * Parse @p len bytes of properties text.
 * @return 0, a callback's non-zero result, KB_E_PARSE (with "line N: ..." in @p errstr) or
 *         KB_E_NOMEM.
 */
int kb_props_parse(const char *buf, size_t len, kb_props_cb *cb, void *opaque, char *errstr,
                   size_t errstr_size);

/** Read and parse the file at @p path. KB_E_IO (with the path and strerror) if unreadable. */
int kb_props_load_file(const char *path, kb_props_cb *cb, void *opaque, char *errstr,
                       size_t errstr_size);

/** Whether the comma-separated list @p list (a list-typed value, items trimmed; NULL: empty)
 *  holds @p item (NULL: never); compared case-insensitively when @p nocase (listener names). */
bool kb_props_list_has(const char *list, const char *item, bool nocase);

#endif /* KB_PROPS_H */
