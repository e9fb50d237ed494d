/*
 * km_log.h - logging and assertions through the host.
 *
 * A .c file may define KM_LOG_COMPONENT ("kmirror.core", ...) before including this header.
 * km_log() checks the level before formatting. Never pass secrets: password-type config
 * values are redacted by the config module and must not be formatted here.
 */
#ifndef KM_LOG_H
#define KM_LOG_H

#include <stdbool.h>

#include "util/km_types.h"

#ifndef KM_LOG_COMPONENT
#define KM_LOG_COMPONENT "kmirror"
#endif

/** True if level is enabled for component. @thread any */
bool km_log_enabled(km_plugin_t *cm, int32_t level, const char *component);

/** Format and write one line through the host. Use the km_log* macros. @thread any */
void km_log_emit(km_plugin_t *cm, int32_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define km_log(cm, level, ...)                                                                     \
    do {                                                                                           \
        if (km_log_enabled((cm), (level), KM_LOG_COMPONENT))                                       \
            km_log_emit((cm), (level), KM_LOG_COMPONENT, __VA_ARGS__);                             \
    } while (0)
#define km_log_error(cm, ...) km_log((cm), KBX_LOG_ERROR, __VA_ARGS__)
#define km_log_warn(cm, ...)  km_log((cm), KBX_LOG_WARN, __VA_ARGS__)
#define km_log_info(cm, ...)  km_log((cm), KBX_LOG_INFO, __VA_ARGS__)
#define km_log_debug(cm, ...) km_log((cm), KBX_LOG_DEBUG, __VA_ARGS__)

/**
 * Report a bug that would corrupt memory or persisted state if we went on: log through the
 * host, then call the host's fatal hook. Does not return. @thread any
 */
__attribute__((noreturn)) void km_bug(km_plugin_t *cm, const char *file, int line,
                                      const char *what);

/** Always compiled in; only for conditions that must never happen. Never for input checks. */
#define KM_BUG_ON(cm, cond)                                                                        \
    do {                                                                                           \
        if (__builtin_expect(!!(cond), 0))                                                         \
            km_bug((cm), __FILE__, __LINE__, "BUG_ON(" #cond ")");                                 \
    } while (0)

/** Expensive checks, debug builds only. */
#ifndef NDEBUG
#define KM_DASSERT(cm, cond) KM_BUG_ON((cm), !(cond))
#else
#define KM_DASSERT(cm, cond) ((void)0)
#endif

/** Check the magic number of an object that came back from the host. */
#define KM_CHECK_OBJ(cm, obj, magic_value)                                                         \
    KM_BUG_ON((cm), (obj) == NULL || (obj)->magic != (magic_value))

/**
 * Check the plugin context a host callback got. When it is not ours there is no host handle
 * to report through, so this is the one place that traps directly.
 */
#define KM_CHECK_PLUGIN(cm)                                                                        \
    do {                                                                                           \
        if (__builtin_expect((cm) == NULL || (cm)->ref.magic != KM_PLUGIN_MAGIC, 0))               \
            __builtin_trap();                                                                      \
    } while (0)

#endif /* KM_LOG_H */
