/*
 * kb_glog.c -- logger wrappers of broker/group (kb_glog.h).
 */
#include "kb_glog.h"

#include <stdarg.h>

#include "kb_log.h"

int kb_glog_enabled(int lvl)
{
    return kb_log_enabled(lvl);
}

void kb_glog_write(int lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kb_log_vwrite((kb_log_level_t)lvl, "group", fmt, ap);
    va_end(ap);
}
