/*
 * kb_glog.h -- the process logger (broker/util/kb_log.h) for broker/group, component "group".
 *
 * broker/util/kb_log.h and the storage engine's kb_log.h share an include guard, so files that
 * see the storage headers (through kb_part.h) cannot include the logger; they log through these
 * wrappers, defined in kb_glog.c, the one file here that includes the logger.
 *
 * @thread any
 */
#ifndef KB_GLOG_H
#define KB_GLOG_H

#define KB_GLOG_ERROR 0
#define KB_GLOG_WARN  1
#define KB_GLOG_INFO  2
#define KB_GLOG_DEBUG 3
#define KB_GLOG_TRACE 4

/** Whether @p lvl passes the threshold. */
int kb_glog_enabled(int lvl);

/** Write one line at @p lvl. */
void kb_glog_write(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define kb_glog(lvl, ...)                                                                          \
    do {                                                                                           \
        if (kb_glog_enabled(lvl))                                                                  \
            kb_glog_write((lvl), __VA_ARGS__);                                                     \
    } while (0)

#define kb_glog_error(...) kb_glog(KB_GLOG_ERROR, __VA_ARGS__)
#define kb_glog_warn(...)  kb_glog(KB_GLOG_WARN, __VA_ARGS__)
#define kb_glog_info(...)  kb_glog(KB_GLOG_INFO, __VA_ARGS__)
#define kb_glog_debug(...) kb_glog(KB_GLOG_DEBUG, __VA_ARGS__)

#endif /* KB_GLOG_H */
