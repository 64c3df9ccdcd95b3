/* files.c - see files.h. */
#define _GNU_SOURCE
#include "files.h"
#include "../lib/caps.h"
#include "../lib/control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define IO_CHUNK (512u << 10)
#define LIST_MAX_ENTRIES 100000
#define LIST_MAX_DEPTH 16
#define SIZELESS_MAX (16u << 20) /* largest file without a size (procfs) we read */

static int conn = -1;

static _Noreturn void fail(int e, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t) n < sizeof msg - 64)
        snprintf(msg + n, sizeof msg - (size_t) n, ": %s", strerror(e));
    sbx_buf b = { 0 };
    sbx_buf_put_error(&b, e, msg);
    sbx_ctl_send(conn, SBX_MSG_ERROR, b.data, b.len);
    _exit(0);
}

static void send_buf(uint32_t type, sbx_buf *b)
{
    if (b->failed || sbx_ctl_send(conn, type, b->data, b->len) < 0)
        _exit(1); /* sbxd went away: nobody to tell */
    sbx_buf_free(b);
}

/* `path` made absolute against `cwd` and cleaned lexically ("a/./b/../c"
 * is "a/c"), the way the result is reported back. */
static void clean_path(const char *cwd, const char *path, char *out, size_t size)
{
    char tmp[PATH_MAX * 2];
    if (path[0] == '/')
        snprintf(tmp, sizeof tmp, "%s", path);
    else
        snprintf(tmp, sizeof tmp, "%s/%s", cwd, path);
    size_t o = 0;
    out[o++] = '/';
    for (char *save = NULL, *tok = strtok_r(tmp, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
        if (strcmp(tok, ".") == 0)
            continue;
        if (strcmp(tok, "..") == 0) {
            /* back to the previous '/', never above the root */
            while (o > 1 && out[o - 1] != '/')
                o--;
            if (o > 1)
                o--;
            continue;
        }
        size_t n = strlen(tok);
        if (o + n + 2 >= size)
            break;
        if (o > 1)
            out[o++] = '/';
        memcpy(out + o, tok, n);
        o += n;
    }
    out[o] = '\0';
}

static uint32_t file_type(mode_t m)
{
    return S_ISREG(m) ? SBX_FT_FILE : S_ISDIR(m) ? SBX_FT_DIR : S_ISLNK(m) ? SBX_FT_SYMLINK : SBX_FT_OTHER;
}

static void put_entry(sbx_buf *b, const char *abs, const char *name, const struct stat *st)
{
    char target[PATH_MAX] = "";
    if (S_ISLNK(st->st_mode)) {
        ssize_t n = readlink(abs, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
    }
    sbx_entry e = {
        .name = name, .path = abs, .target = target, .type = file_type(st->st_mode),
        .mode = st->st_mode & 07777, .size = (uint64_t) st->st_size,
        .mtime = st->st_mtim.tv_sec, .mtime_nsec = (uint32_t) st->st_mtim.tv_nsec,
    };
    sbx_entry_encode(b, &e);
}

static const char *base_name(const char *abs)
{
    const char *s = strrchr(abs, '/');
    return s && s[1] ? s + 1 : "/";
}

/* mkdir -p of every component of `abs` (absolute, cleaned) but the last
 * when `skip_last`. */
static int make_parents(const char *abs, int skip_last, int *created)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", abs);
    size_t len = strlen(buf);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        if (buf[i] == '\0' && skip_last)
            break;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) == 0) {
            if (created)
                (*created)++;
        } else if (errno != EEXIST) {
            return -errno;
        } else {
            struct stat st;
            if (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode))
                return -ENOTDIR;
        }
        buf[i] = c;
    }
    return 0;
}

static void op_read(const char *abs)
{
    /* O_NONBLOCK: a FIFO planted at the path must not hang the worker
     * (it is refused below as not a regular file). */
    int fd = open(abs, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        fail(errno, "%s", abs);
    struct stat st;
    if (fstat(fd, &st) < 0)
        fail(errno, "%s", abs);
    if (S_ISDIR(st.st_mode))
        fail(EISDIR, "%s", abs);
    if (!S_ISREG(st.st_mode))
        fail(EINVAL, "%s is not a regular file", abs);
    fcntl(fd, F_SETFL, 0);
    if (st.st_size == 0) {
        /* procfs and sysfs-like files say 0 and have content: read it all
         * first (bounded) so the size announced is the size sent */
        size_t cap = 1u << 16, n = 0;
        uint8_t *all = malloc(cap);
        for (;;) {
            if (!all)
                fail(ENOMEM, "read %s", abs);
            ssize_t r = read(fd, all + n, cap - n);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                fail(errno, "read %s", abs);
            if (r == 0)
                break;
            n += (size_t) r;
            if (n == cap) {
                if (cap >= SIZELESS_MAX)
                    fail(EFBIG, "%s reports no size and has more than %u bytes", abs, SIZELESS_MAX);
                all = realloc(all, cap *= 2);
            }
        }
        sbx_buf b = { 0 };
        sbx_buf_put_u64(&b, n);
        sbx_buf_put_str(&b, abs);
        send_buf(SBX_MSG_OK, &b);
        for (size_t off = 0; off < n; off += IO_CHUNK)
            if (sbx_ctl_send(conn, SBX_MSG_DATA, all + off, n - off < IO_CHUNK ? n - off : IO_CHUNK) < 0)
                _exit(1);
        sbx_ctl_send(conn, SBX_MSG_DATA_END, NULL, 0);
        return;
    }
    sbx_buf b = { 0 };
    sbx_buf_put_u64(&b, (uint64_t) st.st_size);
    sbx_buf_put_str(&b, abs);
    send_buf(SBX_MSG_OK, &b);
    static uint8_t buf[IO_CHUNK];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail(errno, "read %s", abs);
        if (n == 0)
            break;
        if (sbx_ctl_send(conn, SBX_MSG_DATA, buf, (size_t) n) < 0)
            _exit(1);
    }
    sbx_ctl_send(conn, SBX_MSG_DATA_END, NULL, 0);
}

static void op_write(const char *abs, uint32_t mode)
{
    if (strcmp(abs, "/") == 0)
        fail(EISDIR, "/");
    int r = make_parents(abs, 1, NULL);
    if (r < 0)
        fail(-r, "create the parent directories of %s", abs);
    struct stat st;
    if (lstat(abs, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            fail(EISDIR, "%s", abs);
        if (mode == UINT32_MAX && S_ISREG(st.st_mode))
            mode = st.st_mode & 07777;
    }
    if (mode == UINT32_MAX)
        mode = 0644;
    /* Written next to the target and renamed over it at the end: a failed
     * or interrupted upload leaves the old file (or none), never half a
     * file, and readers never see a partial one.  Everything happens
     * relative to the parent directory opened once, so a parent swapped
     * for a symlink mid-transfer changes nothing: the file lands in the
     * directory that was opened, and a failure removes the temporary file
     * from there. */
    const char *slash = strrchr(abs, '/');
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", slash == abs ? 1 : (int) (slash - abs), abs);
    const char *name = slash + 1;
    int dfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        fail(errno, "%s", parent);
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".sbx-upload-%d", (int) getpid());
    int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST && unlinkat(dfd, tmp, 0) == 0)
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        fail(errno, "create %s", abs);
    sbx_ctl_send(conn, SBX_MSG_OK, NULL, 0);
    uint64_t size = 0;
    static uint8_t buf[SBX_CTL_MAX_FRAME];
    for (;;) {
        uint32_t type;
        size_t len;
        r = sbx_ctl_recv_buf(conn, &type, buf, sizeof buf, &len);
        if (r <= 0 || (type != SBX_MSG_DATA && type != SBX_MSG_DATA_END)) {
            unlinkat(dfd, tmp, 0);
            _exit(1); /* upload abandoned: the old file stays */
        }
        if (type == SBX_MSG_DATA_END)
            break;
        for (size_t off = 0; off < len;) {
            ssize_t w = write(fd, buf + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                int e = errno;
                unlinkat(dfd, tmp, 0);
                fail(e, "write %s", abs);
            }
            off += (size_t) w;
        }
        size += len;
    }
    if (fchmod(fd, mode & 07777) < 0 || close(fd) < 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        fail(e, "write %s", abs);
    }
    if (renameat(dfd, tmp, dfd, name) < 0) {
        int e = errno;
        unlinkat(dfd, tmp, 0);
        fail(e, "replace %s", abs);
    }
    sbx_buf b = { 0 };
    sbx_buf_put_u64(&b, size);
    sbx_buf_put_str(&b, abs);
    send_buf(SBX_MSG_OK, &b);
}

static void op_stat(const char *abs)
{
    struct stat st;
    if (lstat(abs, &st) < 0)
        fail(errno, "%s", abs);
    sbx_buf b = { 0 };
    put_entry(&b, abs, base_name(abs), &st);
    send_buf(SBX_MSG_OK, &b);
}

static unsigned listed;

static void list_dir(const char *abs, uint32_t depth)
{
    DIR *d = opendir(abs);
    if (!d)
        return; /* unreadable subdirectory: listed, not descended into */
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (++listed > LIST_MAX_ENTRIES) {
            closedir(d);
            fail(E2BIG, "more than %d entries under the listed directory", LIST_MAX_ENTRIES);
        }
        char child[PATH_MAX];
        int n = snprintf(child, sizeof child, "%s/%s", strcmp(abs, "/") ? abs : "", e->d_name);
        struct stat st;
        if (n < 0 || (size_t) n >= sizeof child || lstat(child, &st) < 0)
            continue;
        sbx_buf b = { 0 };
        put_entry(&b, child, e->d_name, &st);
        send_buf(SBX_MSG_ENTRY, &b);
        if (S_ISDIR(st.st_mode) && depth > 1)
            list_dir(child, depth - 1);
    }
    closedir(d);
}

static void op_list(const char *abs, uint32_t depth)
{
    struct stat st;
    if (stat(abs, &st) < 0)
        fail(errno, "%s", abs);
    if (!S_ISDIR(st.st_mode))
        fail(ENOTDIR, "%s", abs);
    DIR *d = opendir(abs);
    if (!d)
        fail(errno, "%s", abs);
    closedir(d);
    if (depth < 1)
        depth = 1;
    if (depth > LIST_MAX_DEPTH)
        depth = LIST_MAX_DEPTH;
    list_dir(abs, depth);
    sbx_ctl_send(conn, SBX_MSG_DATA_END, NULL, 0);
}

static void op_mkdir(const char *abs, uint32_t parents)
{
    int created = 0;
    if (parents) {
        int r = make_parents(abs, 0, &created);
        if (r < 0)
            fail(-r, "%s", abs);
    } else if (mkdir(abs, 0755) == 0) {
        created = 1;
    } else {
        struct stat st;
        if (errno != EEXIST || stat(abs, &st) < 0 || !S_ISDIR(st.st_mode))
            fail(errno == EEXIST ? EEXIST : errno, "%s", abs);
    }
    sbx_buf b = { 0 };
    sbx_buf_put_u32(&b, created > 0);
    sbx_buf_put_str(&b, abs);
    send_buf(SBX_MSG_OK, &b);
}

/* rm -r without following symlinks; returns 0 or -errno (first failure). */
static int remove_tree(const char *abs)
{
    struct stat st;
    if (lstat(abs, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode))
        return unlink(abs) < 0 ? -errno : 0;
    DIR *d = opendir(abs);
    if (!d)
        return -errno;
    int ret = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char child[PATH_MAX];
        int n = snprintf(child, sizeof child, "%s/%s", strcmp(abs, "/") ? abs : "", e->d_name);
        if (n < 0 || (size_t) n >= sizeof child) {
            ret = -ENAMETOOLONG;
            continue;
        }
        int r = remove_tree(child);
        if (r < 0 && ret == 0)
            ret = r;
    }
    closedir(d);
    if (rmdir(abs) < 0 && ret == 0)
        ret = -errno;
    return ret;
}

static void op_remove(const char *abs, uint32_t recursive)
{
    struct stat st;
    if (lstat(abs, &st) < 0)
        fail(errno, "%s", abs);
    if (strcmp(abs, "/") == 0)
        fail(EBUSY, "/");
    int r = 0;
    if (!S_ISDIR(st.st_mode))
        r = unlink(abs) < 0 ? -errno : 0;
    else if (recursive)
        r = remove_tree(abs);
    else
        r = rmdir(abs) < 0 ? -errno : 0;
    if (r < 0)
        fail(-r, "remove %s", abs);
    sbx_ctl_send(conn, SBX_MSG_OK, NULL, 0);
}

/* rename(2), or for a regular file across mounts (/tmp is its own), copy
 * then unlink. */
static void op_move(const char *from, const char *to)
{
    if (rename(from, to) == 0)
        goto done;
    if (errno != EXDEV)
        fail(errno, "move %s to %s", from, to);
    struct stat st;
    if (lstat(from, &st) < 0)
        fail(errno, "%s", from);
    if (!S_ISREG(st.st_mode))
        fail(EXDEV, "move %s to %s (only regular files move across file systems)", from, to);
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        fail(errno, "%s", from);
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777);
    if (out < 0)
        fail(errno, "%s", to);
    static uint8_t buf[IO_CHUNK];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail(errno, "read %s", from);
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t) (n - off));
            if (w < 0) {
                int e = errno;
                unlink(to);
                fail(e, "write %s", to);
            }
            off += w;
        }
    }
    if (close(out) < 0 || unlink(from) < 0)
        fail(errno, "move %s to %s", from, to);
done:;
    sbx_buf b = { 0 };
    sbx_buf_put_str(&b, to);
    send_buf(SBX_MSG_OK, &b);
}

static void op_statfs(void)
{
    struct statvfs s;
    if (statvfs("/", &s) < 0)
        fail(errno, "statfs /");
    sbx_buf b = { 0 };
    sbx_buf_put_u64(&b, (uint64_t) (s.f_blocks - s.f_bfree) * s.f_frsize);
    sbx_buf_put_u64(&b, (uint64_t) s.f_blocks * s.f_frsize);
    send_buf(SBX_MSG_OK, &b);
}

_Noreturn void sbx_files_serve(int fd, uint32_t type, const uint8_t *payload, size_t len)
{
    conn = fd;
    sbx_reader r = { payload, payload + len, false };
    uint32_t uid = sbx_read_u32(&r), gid = sbx_read_u32(&r);
    const char *home = sbx_read_str(&r);
    if (r.bad || uid >= 65536 || gid >= 65536 || home[0] != '/')
        fail(EPROTO, "bad file request");
    int e = -sbx_caps_drop_to(uid, gid);
    if (e > 0)
        fail(e, "become uid %u", (unsigned) uid);
    umask(022);
    if (chdir(home) < 0)
        home = "/";
    char abs[PATH_MAX], abs2[PATH_MAX];
    const char *p1 = type == SBX_MSG_STATFS ? "/" : sbx_read_str(&r);
    if (!r.bad && !p1[0])
        fail(EINVAL, "empty path");
    clean_path(home, p1, abs, sizeof abs);
    switch (type) {
    case SBX_MSG_FILE_READ:
        op_read(abs);
        break;
    case SBX_MSG_FILE_WRITE: {
        uint32_t mode = sbx_read_u32(&r);
        if (!r.bad)
            op_write(abs, mode);
        break;
    }
    case SBX_MSG_FILE_STAT:
        op_stat(abs);
        break;
    case SBX_MSG_FILE_LIST: {
        uint32_t depth = sbx_read_u32(&r);
        if (!r.bad)
            op_list(abs, depth);
        break;
    }
    case SBX_MSG_FILE_MKDIR: {
        uint32_t parents = sbx_read_u32(&r);
        if (!r.bad)
            op_mkdir(abs, parents);
        break;
    }
    case SBX_MSG_FILE_REMOVE: {
        uint32_t rec = sbx_read_u32(&r);
        if (!r.bad)
            op_remove(abs, rec);
        break;
    }
    case SBX_MSG_FILE_MOVE: {
        const char *to = sbx_read_str(&r);
        if (!r.bad && !to[0])
            fail(EINVAL, "empty destination path");
        clean_path(home, to, abs2, sizeof abs2);
        if (!r.bad)
            op_move(abs, abs2);
        break;
    }
    case SBX_MSG_STATFS:
        op_statfs();
        break;
    default:
        r.bad = true;
    }
    if (r.bad)
        fail(EPROTO, "bad file request");
    _exit(0);
}
