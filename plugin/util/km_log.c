#include "util/km_log.h"

#include <stdarg.h>
#include <stdio.h>

#include "core/km_plugin_types.h"

#define KM_LOG_LINE_MAX 1024

bool km_log_enabled(km_plugin_t *cm, int32_t level, const char *component)
{
    return cm->ref.api->log_enabled(cm->ref.host, level, component) != 0;
}

void km_log_emit(km_plugin_t *cm, int32_t level, const char *component, const char *fmt, ...)
{
    char line[KM_LOG_LINE_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    cm->ref.api->log_write(cm->ref.host, level, component, line);
}

void km_bug(km_plugin_t *cm, const char *file, int line, const char *what)
{
    km_log_emit(cm, KBX_LOG_ERROR, "kmirror.bug", "%s at %s:%d", what, file, line);
    cm->ref.api->fatal(cm->ref.host, file, line, what);
    /* The host broke its contract (fatal returned). Going on would corrupt state. */
    __builtin_trap();
}
