/*
 * kb_log.h -- process logger of kbroker: one line per call on stderr, with a UTC timestamp,
 * the level and the component:
 *
 *     2026-05-01T12:00:00.123Z INFO  [net] listening on PLAINTEXT://127.0.0.1:9092
 *
 * The level check happens before formatting. A line is written with one write(2), so lines
 * of concurrent threads never interleave. A sink can replace stderr (tests, the plugin host
 * logger bridge).
 *
 * @thread any
 */
#ifndef KB_LOG_H
#define KB_LOG_H

#include <stdarg.h>
#include <stdatomic.h>

typedef enum kb_log_level_e {
    KB_LOG_ERROR = 0,
    KB_LOG_WARN = 1,
    KB_LOG_INFO = 2,
    KB_LOG_DEBUG = 3,
    KB_LOG_TRACE = 4,
} kb_log_level_t;

/** Current threshold; messages with a level above it are dropped. Internal, use the macros. */
extern _Atomic int kb_log_threshold;

/** Receives every formatted line (without the trailing newline) instead of stderr. */
typedef void(kb_log_sink_fn)(void *opaque, kb_log_level_t lvl, const char *line);

void kb_log_set_level(kb_log_level_t lvl);
kb_log_level_t kb_log_get_level(void);

/** Parse "error|warn|info|debug|trace" (case-insensitive). Returns 0 or -1. */
int kb_log_level_parse(const char *s, kb_log_level_t *out);
const char *kb_log_level_name(kb_log_level_t lvl);

/** Install a sink (NULL restores stderr). Call before threads start or while logging is idle. */
void kb_log_set_sink(kb_log_sink_fn *fn, void *opaque);

void kb_log_write(kb_log_level_t lvl, const char *comp, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kb_log_vwrite(kb_log_level_t lvl, const char *comp, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#define kb_log_enabled(lvl)                                                                        \
    ((int)(lvl) <= atomic_load_explicit(&kb_log_threshold, memory_order_relaxed))

#define kb_log(lvl, comp, ...)                                                                     \
    do {                                                                                           \
        if (kb_log_enabled(lvl))                                                                   \
            kb_log_write((lvl), (comp), __VA_ARGS__);                                              \
    } while (0)

#define kb_log_error(comp, ...) kb_log(KB_LOG_ERROR, comp, __VA_ARGS__)
#define kb_log_warn(comp, ...)  kb_log(KB_LOG_WARN, comp, __VA_ARGS__)
#define kb_log_info(comp, ...)  kb_log(KB_LOG_INFO, comp, __VA_ARGS__)
#define kb_log_debug(comp, ...) kb_log(KB_LOG_DEBUG, comp, __VA_ARGS__)
#define kb_log_trace(comp, ...) kb_log(KB_LOG_TRACE, comp, __VA_ARGS__)

#endif /* KB_LOG_H */
