/*
 * kb_file.c -- whole-file helpers (kb_file.h).
 */
#include "kb_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int kb_file_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc, e;
    if (fd < 0)
        return -1;
    rc = fsync(fd);
    e = errno;
    close(fd);
    errno = e;
    return rc;
}

int kb_file_write_atomic(const char *dir, const char *path, const void *buf, size_t len)
{
    return kb_file_write_atomic_tmp(dir, path, NULL, buf, len) == 0 ? 0 : -1;
}

int kb_file_write_atomic_tmp(const char *dir, const char *path, const char *tmp_name,
                             const void *buf, size_t len)
{
    char tmp[4200];
    const uint8_t *p = buf;
    int fd, e;
    int tn = tmp_name ? snprintf(tmp, sizeof(tmp), "%s", tmp_name)
                      : snprintf(tmp, sizeof(tmp), "%s.tmp", path);

    if (tn < 0 || (size_t)tn >= sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            e = n < 0 ? errno : ENOSPC;
            goto fail_fd;
        }
        p += n;
        len -= (size_t)n;
    }
    if (fsync(fd) != 0) {
        e = errno;
        goto fail_fd;
    }
    if (close(fd) != 0) {
        e = errno;
        goto fail_tmp;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        goto fail_tmp;
    }
    /* The rename is only durable once the directory is. */
    return kb_file_fsync_dir(dir) == 0 ? 0 : 1;
fail_fd:
    close(fd);
fail_tmp:
    unlink(tmp);
    errno = e;
    return -1;
}

int kb_file_read_all(const char *path, uint8_t **bufp, size_t *lenp)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint8_t *buf;
    size_t got = 0;
    int e;

    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_size < 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        errno = ENOMEM;
        return -1;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            e = n < 0 ? errno : EIO; /* shrank underneath us */
            free(buf);
            close(fd);
            errno = e;
            return -1;
        }
        got += (size_t)n;
    }
    close(fd);
    *bufp = buf;
    *lenp = got;
    return 0;
}
