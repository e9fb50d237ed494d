/*
 * kb_apilog.c -- the logger wrappers of kb_apilog.h. This file includes the process logger by
 * path (see the header for why) and nothing of the storage engine.
 */
#include "kb_apilog.h"

#include <stdarg.h>

/* The logger's own macros take over in this file. */
#undef kb_log_error
#undef kb_log_warn
#undef kb_log_info
#undef kb_log_debug
#undef kb_log_trace

#include "../util/kb_log.h"

int kb_alog_enabled(int lvl)
{
    return kb_log_enabled(lvl);
}

void kb_alog_write(int lvl, const char *comp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_log_vwrite((kb_log_level_t)lvl, comp, fmt, ap);
    va_end(ap);
}
