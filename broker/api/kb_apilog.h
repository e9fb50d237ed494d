/*
 * kb_apilog.h -- the process logger (broker/util/kb_log.h) for the files of broker/api.
 *
 * broker/util/kb_log.h (the logger) and broker/storage/kb_log.h (a partition log) share the
 * include guard KB_LOG_H, so a file that needs the storage engine cannot include the logger.
 * These wrappers are defined in kb_apilog.c, the one file here that includes the logger alone.
 *
 * @thread any
 */
#ifndef KB_APILOG_H
#define KB_APILOG_H

#define KB_ALOG_ERROR 0
#define KB_ALOG_WARN  1
#define KB_ALOG_INFO  2
#define KB_ALOG_DEBUG 3
#define KB_ALOG_TRACE 4

/** Whether @p lvl passes the threshold. */
int kb_alog_enabled(int lvl);

/** Write one line at @p lvl for component @p comp. */
void kb_alog_write(int lvl, const char *comp, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define kb_alog(lvl, comp, ...)                                                                    \
    do {                                                                                           \
        if (kb_alog_enabled(lvl))                                                                  \
            kb_alog_write((lvl), (comp), __VA_ARGS__);                                             \
    } while (0)

#define kb_log_error(comp, ...) kb_alog(KB_ALOG_ERROR, comp, __VA_ARGS__)
#define kb_log_warn(comp, ...)  kb_alog(KB_ALOG_WARN, comp, __VA_ARGS__)
#define kb_log_info(comp, ...)  kb_alog(KB_ALOG_INFO, comp, __VA_ARGS__)
#define kb_log_debug(comp, ...) kb_alog(KB_ALOG_DEBUG, comp, __VA_ARGS__)
#define kb_log_trace(comp, ...) kb_alog(KB_ALOG_TRACE, comp, __VA_ARGS__)

#endif /* KB_APILOG_H */
