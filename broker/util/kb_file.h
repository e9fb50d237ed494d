/*
 * kb_file.h -- small whole-file helpers for kbroker's own state files (ACL store, meta.properties,
 * metadata snapshots, and anything else written as one piece).
 *
 * @thread any
 */
#ifndef KB_FILE_H
#define KB_FILE_H

#include <stddef.h>
#include <stdint.h>

/**
 * Replace @p path (inside directory @p dir) by @p len bytes, crash-safely: write `<path>.tmp`,
 * fsync it, rename it over @p path, fsync @p dir. After a crash the file is either the old or
 * the new one. The temp file is removed on failure.
 * @return 0, or -1 with errno set.
 */
int kb_file_write_atomic(const char *dir, const char *path, const void *buf, size_t len);

/**
 * kb_file_write_atomic() with the temp file named @p tmp (NULL: `<path>.tmp`). When everything
 * but the final fsync of @p dir succeeded it returns 1 (errno set): @p path is the new file, but
 * its rename may not survive a crash; the caller decides whether that is an error.
 * @return 0, 1, or -1 with errno set (the old file in place, the temp file removed).
 */
int kb_file_write_atomic_tmp(const char *dir, const char *path, const char *tmp, const void *buf,
                             size_t len);

/**
 * Read all of @p path into a new buffer (*bufp, free() it; one spare byte allocated) of *lenp
 * bytes. @return 0, or -1 with errno set (ENOENT: no such file).
 */
int kb_file_read_all(const char *path, uint8_t **bufp, size_t *lenp);

#endif /* KB_FILE_H */
