/* fsutil.c - see fsutil.h. */
#define _GNU_SOURCE
#include "fsutil.h"
#include "cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_fd_all(int fd, const char *content)
{
    size_t n = strlen(content);
    while (n > 0) {
        ssize_t w = write(fd, content, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        content += w;
        n -= (size_t) w;
    }
    return 0;
}

int sbx_write_file_at(int dirfd, const char *name, const char *content)
{
    _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    return write_fd_all(fd, content);
}

int sbx_write_file(const char *path, const char *content)
{
    return sbx_write_file_at(AT_FDCWD, path, content);
}

ssize_t sbx_read_file(const char *path, char *buf, size_t cap)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t) r;
    }
    buf[got] = '\0';
    return (ssize_t) got;
}

char *sbx_read_file_alloc(const char *path, size_t *len)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    size_t cap = 4096, got = 0;
    _cleanup_free_ char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (got + 1 >= cap) {
            if (cap >= (1u << 20)) {
                errno = EFBIG;
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                return NULL;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return NULL;
        }
        if (r == 0)
            break;
        got += (size_t) r;
    }
    buf[got] = '\0';
    if (len)
        *len = got;
    return steal_pointer(&buf);
}

int sbx_create_file(const char *path, const char *content, mode_t mode)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int) getpid()) >= (int) sizeof tmp)
        return -ENAMETOOLONG;
    _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return -errno;
    int r = write_fd_all(fd, content);
    if (r == 0 && fchmod(fd, mode) < 0)
        r = -errno;
    if (r == 0 && rename(tmp, path) < 0)
        r = -errno;
    if (r < 0)
        unlink(tmp);
    return r;
}

int sbx_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, mode) < 0 && errno != EEXIST)
                return -errno;
            *p = c;
            if (c == '\0')
                break;
        }
    }
    return 0;
}

unsigned long long sbx_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
    ssize_t n = sbx_read_file(path, buf, sizeof buf);
    if (n <= 0)
        return 0;
    const char *rp = strrchr(buf, ')');
    unsigned long long st;
    /* field 22 is the 20th after "(comm)" */
    if (!rp || sscanf(rp + 1,
                      " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                      &st) != 1)
        return 0;
    return st;
}
