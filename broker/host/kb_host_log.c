/*
 * kb_host_log.c -- kbroker's logger for the files of broker/host. This is the one file here that
 * includes broker/util/kb_log.h: the storage engine's kb_log.h (reached through kb_part.h) has
 * the same include guard.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../util/kb_log.h" /* by path: broker/storage/kb_log.h comes first on the include path */

/* kb_host_int.h cannot be included here (it pulls in the storage headers); these prototypes
 * repeat its logging section. */
int kb_hlog_enabled(int lvl);
void kb_hlog(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kb_hlog_plugin(int lvl, const char *plugin, const char *component, const char *msg);

_Static_assert(KB_LOG_ERROR == 0 && KB_LOG_TRACE == 4, "KB_HLOG_* mirror kb_log_level_t");

int kb_hlog_enabled(int lvl)
{
    return kb_log_enabled(lvl);
}

void kb_hlog(int lvl, const char *fmt, ...)
{
    va_list ap;
    if (!kb_log_enabled(lvl))
        return;
    va_start(ap, fmt);
    kb_log_vwrite((kb_log_level_t)lvl, "host", fmt, ap);
    va_end(ap);
}

void kb_hlog_plugin(int lvl, const char *plugin, const char *component, const char *msg)
{
    char line[4096];
    size_t n;

    if (!kb_log_enabled(lvl))
        return;
    snprintf(line, sizeof(line), "%s", msg ? msg : "(null)");
    /* One event per line: a plugin's newlines and control characters would forge lines. */
    n = strlen(line);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = ' ';
    if (component && component[0] && strcmp(component, plugin) != 0)
        kb_log_write((kb_log_level_t)lvl, plugin, "%s: %s", component, line);
    else
        kb_log_write((kb_log_level_t)lvl, plugin, "%s", line);
}
