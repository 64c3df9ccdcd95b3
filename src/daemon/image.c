/* image.c - image archives to directory trees; see image.h for the rules.
 *
 * libarchive only *reads* here.  Its archive_write_disk would extract, but it
 * resolves paths on the host (its "secure" flags refuse symlinks on the way
 * instead of following them inside the tree, and know nothing of whiteouts or
 * shifted owners), so every file system operation is ours: each entry's
 * parent directory is opened with openat2(RESOLVE_IN_ROOT) and the entry is
 * made with an *at() call on that descriptor, one path component, never
 * following a symlink at the last step. */
#define _GNU_SOURCE
#include "image.h"
#include "cleanup.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ID_COUNT 65536   /* ids the sandbox's user namespace maps (SBX_UID_COUNT) */
#define ID_NOBODY 65534  /* where ids outside it go */
#define JSON_MAX (16 << 20) /* index, manifest and config documents: real ones are kilobytes */
#define INDEX_DEPTH 4    /* image indexes pointing at image indexes */
#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#elif defined(__riscv) && __riscv_xlen == 64
#define HOST_ARCH "riscv64"
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_ARCH "ppc64le"
#elif defined(__s390x__)
#define HOST_ARCH "s390x"
#elif defined(__i386__)
#define HOST_ARCH "386"
#else
#define HOST_ARCH "amd64" /* an image for this machine must then be the only one in its index */
#endif

static void archive_freep(struct archive **a)
{
    if (*a)
        archive_read_free(*a);
}
static void md_ctx_freep(EVP_MD_CTX **c)
{
    EVP_MD_CTX_free(*c);
}
#define _cleanup_archive_ __attribute__((cleanup(archive_freep)))
#define _cleanup_json_ __attribute__((cleanup(json_decrefp))) /* jansson's own helper */

/* Open `path` below root as if root were "/": "..", absolute symlinks and
 * ".." in symlink targets all stop at root.  Magic links (/proc/self/...)
 * are refused: nothing in an image may hand us a host object. */
static int open_in_root(int root, const char *path, int flags)
{
    struct open_how how = {
        .flags = (uint64_t) (flags | O_CLOEXEC),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    return (int) syscall(SYS_openat2, root, path[0] ? path : ".", &how, sizeof how);
}

/* ---- removing trees ---------------------------------------------------- */

static DIR *opendir_at(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    DIR *d = fdopendir(fd);
    if (!d)
        close(fd);
    return d;
}

/* Remove everything below the directory d (which is closed).  Never follows a
 * symlink: a symlink is unlinked like a file, and only what unlinkat() calls
 * a directory (EISDIR) is entered, O_NOFOLLOW, relative to its parent.  It
 * climbs back through "..", so it holds one descriptor whatever the depth: an
 * image can nest directories deeper than a path can name (symlinks on the
 * way) and deeper than the descriptors we may open.  Nothing else writes in
 * the tree while we do, so ".." is the directory we came from. */
static int empty_dir(DIR *d)
{
    size_t depth = 0;
    while (d) {
        bool descended = false, saw = false;
        struct dirent *e;
        rewinddir(d);
        for (;;) {
            errno = 0; /* readdir's NULL is an error only if it sets errno */
            if (!(e = readdir(d)))
                break;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            saw = true;
            int fd = dirfd(d);
            if (unlinkat(fd, e->d_name, 0) == 0 || errno == ENOENT)
                continue;
            if (errno != EISDIR)
                goto fail;
            if (unlinkat(fd, e->d_name, AT_REMOVEDIR) == 0)
                continue;
            if (errno != ENOTEMPTY && errno != EEXIST)
                goto fail;
            DIR *sub = opendir_at(fd, e->d_name);
            if (!sub)
                goto fail;
            closedir(d);
            d = sub;
            depth++;
            descended = true;
            break;
        }
        if (descended)
            continue;
        if (errno)
            goto fail;
        /* readdir may or may not show entries unlinked while it runs: the
         * directory is empty only after a pass that saw nothing. */
        if (saw)
            continue;
        if (depth == 0)
            break;
        DIR *up = opendir_at(dirfd(d), "..");
        if (!up)
            goto fail;
        closedir(d);
        d = up;
        depth--;
    }
    if (d)
        closedir(d);
    return 0;
fail:;
    int saved = errno;
    closedir(d);
    errno = saved;
    return -1;
}

/* Remove name under dirfd, whatever it is (a directory with its content).
 * A missing name is fine.  0, or -1 with errno. */
static int remove_at(int dirfd, const char *name)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return 0;
    if (errno != EISDIR)
        return -1;
    DIR *d = opendir_at(dirfd, name);
    if (!d || empty_dir(d) < 0)
        return -1;
    return unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* ---- names ------------------------------------------------------------- */

/* Clean an archive name into "a/b/c": leading "/" and "./", empty and "."
 * components dropped ("" is the root itself).  A ".." component is -EINVAL:
 * it could only climb out (RESOLVE_IN_ROOT would stop it, but a name that
 * tries is a broken or hostile archive, and it would also defeat the split
 * into parent and last component). */
static int clean_path(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = in;;) {
        while (*p == '/')
            p++;
        size_t len = strcspn(p, "/");
        if (len == 0)
            break;
        if (len == 2 && p[0] == '.' && p[1] == '.')
            return -EINVAL;
        if (!(len == 1 && p[0] == '.')) {
            if (n + len + 2 > cap)
                return -ENAMETOOLONG;
            if (n)
                out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
        }
        p += len;
    }
    out[n] = '\0';
    return 0;
}

/* Split a cleaned path in place into its directory ("" for the root) and
 * last component. */
static void split_path(char *path, const char **dir, const char **base)
{
    char *slash = strrchr(path, '/');
    if (slash) {
        *slash = '\0';
        *dir = path;
        *base = slash + 1;
    } else {
        *dir = "";
        *base = path;
    }
}

/* ---- one layer --------------------------------------------------------- */

struct dir_time {
    char *path;
    struct timespec ts[2];
};

typedef struct layer {
    int root;                   /* "/" for every path in the archive */
    const sbx_extract_opts *o;
    const char *kind, *name;    /* "layer sha256:...", "archive /path": for errors */
    uint64_t *written;          /* regular-file bytes so far, shared by the layers of an import */
    bool outer;                 /* the outer archive of an image: plain files for us, no owners or whiteouts */
    bool whiteouts;
    struct dir_time *dirs;      /* set after the pass: files made in a directory change its mtime */
    size_t n_dirs, cap_dirs;
} layer;

static void layer_free_dirs(layer *l)
{
    for (size_t i = 0; i < l->n_dirs; i++)
        free(l->dirs[i].path);
    free(l->dirs);
    l->dirs = NULL;
    l->n_dirs = l->cap_dirs = 0;
}

/* "layer NAME: entry 'ENTRY': what[: strerror]" */
__attribute__((format(printf, 5, 6))) static int entry_error(const layer *l, sbx_error *err, int errnum,
                                                             const char *entry, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sbx_error_set(err, errnum, "%s %s: entry '%.200s': %s", l->kind, l->name, entry, what);
}

static int take_bytes(const layer *l, uint64_t n)
{
    uint64_t max = l->o->max_bytes;
    if (max && (n > max || *l->written > max - n))
        return -1;
    *l->written += n;
    return 0;
}

static uid_t shift_id(const layer *l, la_int64_t id)
{
    return l->o->uid_base + (uid_t) (id < 0 || id >= ID_COUNT ? ID_NOBODY : id);
}

/* Open the directory `dir` (a cleaned path, "" = root) inside the root,
 * creating what is missing (0755, the sandbox's root).  Each missing
 * component is made under the descriptor of its parent as resolved in the
 * root, so a symlink on the way is followed inside, never out.  Returns an
 * O_PATH descriptor, or -1 with errno. */
static int open_parent(const layer *l, const char *dir)
{
    int fd = open_in_root(l->root, dir, O_PATH | O_DIRECTORY);
    if (fd >= 0 || errno != ENOENT)
        return fd;
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    _cleanup_close_ int prev = open_in_root(l->root, "", O_PATH | O_DIRECTORY);
    if (prev < 0)
        return -1;
    size_t start = 0;
    for (size_t i = 0;; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        int cur = open_in_root(l->root, buf, O_PATH | O_DIRECTORY);
        if (cur < 0 && errno == ENOENT) {
            const char *name = buf + start;
            if (mkdirat(prev, name, 0755) == 0) {
                uid_t owner = l->o->uid_base;
                if (!l->outer && fchownat(prev, name, owner, owner, AT_SYMLINK_NOFOLLOW) < 0)
                    return -1;
            } else if (errno != EEXIST) {
                return -1;
            }
            /* EEXIST: a dangling symlink; resolving again says ENOENT */
            cur = open_in_root(l->root, buf, O_PATH | O_DIRECTORY);
        }
        if (cur < 0)
            return -1;
        close(prev);
        prev = cur;
        if (saved == '\0')
            return steal_fd(&prev);
        buf[i] = saved;
        start = i + 1;
    }
}

static void entry_times(struct archive_entry *e, struct timespec ts[2])
{
    ts[1] = (struct timespec) { .tv_nsec = UTIME_NOW };
    if (archive_entry_mtime_is_set(e))
        ts[1] = (struct timespec) { archive_entry_mtime(e), archive_entry_mtime_nsec(e) };
    ts[0] = ts[1];
    if (archive_entry_atime_is_set(e))
        ts[0] = (struct timespec) { archive_entry_atime(e), archive_entry_atime_nsec(e) };
}

/* Owner first: chown clears setuid and setgid, so the mode comes after. */
static int set_owner_mode(const layer *l, int fd, struct archive_entry *e, mode_t outer_mode)
{
    if (l->outer)
        return fchmod(fd, outer_mode);
    if (fchown(fd, shift_id(l, archive_entry_uid(e)), shift_id(l, archive_entry_gid(e))) < 0)
        return -1;
    return fchmod(fd, archive_entry_perm(e) & 07777);
}

static int write_data(const layer *l, struct archive *a, struct archive_entry *e, int fd, const char *entry,
                      sbx_error *err)
{
    /* The declared size was taken from the budget before the file was
     * made; data past it (a sparse map that says more) costs extra. */
    la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
    if (size < 0)
        size = 0;
    for (;;) {
        const void *buf;
        size_t len;
        la_int64_t off;
        int r = archive_read_data_block(a, &buf, &len, &off);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return entry_error(l, err, 0, entry, "read: %s", archive_error_string(a));
        if (off < 0 || (uint64_t) len > (uint64_t) (INT64_MAX - off))
            return entry_error(l, err, EINVAL, entry, "bad data offset");
        la_int64_t end = off + (la_int64_t) len;
        if (end > size) {
            if (take_bytes(l, (uint64_t) (end - size)) < 0)
                return entry_error(l, err, EFBIG, entry, "more than the limit of %" PRIu64 " bytes",
                                   l->o->max_bytes);
            size = end;
        }
        for (const char *p = buf; len > 0;) {
            ssize_t w = pwrite(fd, p, len, off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                return entry_error(l, err, errno, entry, "write");
            p += w;
            off += w;
            len -= (size_t) w;
        }
    }
    if (ftruncate(fd, size) < 0) /* trailing holes of a sparse file */
        return entry_error(l, err, errno, entry, "truncate");
    return 0;
}

static int remember_dir_time(layer *l, const char *path, struct archive_entry *e)
{
    if (l->n_dirs == l->cap_dirs) {
        size_t cap = l->cap_dirs ? l->cap_dirs * 2 : 64;
        struct dir_time *d = realloc(l->dirs, cap * sizeof *d);
        if (!d)
            return -1;
        l->dirs = d;
        l->cap_dirs = cap;
    }
    char *p = strdup(path);
    if (!p)
        return -1;
    l->dirs[l->n_dirs].path = p;
    entry_times(e, l->dirs[l->n_dirs].ts);
    l->n_dirs++;
    return 0;
}

/* Set the directories' times once nothing more is written in them.  A
 * directory a later entry replaced is skipped (O_NOFOLLOW: never through a
 * symlink that took its place). */
static void apply_dir_times(layer *l)
{
    for (size_t i = l->n_dirs; i-- > 0;) {
        _cleanup_close_ int fd = open_in_root(l->root, l->dirs[i].path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (fd >= 0)
            futimens(fd, l->dirs[i].ts);
    }
    layer_free_dirs(l);
}

/* The root entry ("./" in most tarballs): its mode, owner and time go to the
 * root directory itself. */
static int put_root(layer *l, struct archive_entry *e, const char *entry, sbx_error *err)
{
    if (archive_entry_filetype(e) != AE_IFDIR || archive_entry_hardlink(e))
        return entry_error(l, err, EINVAL, entry, "the root must be a directory");
    _cleanup_close_ int fd = openat(l->root, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || set_owner_mode(l, fd, e, 0700) < 0)
        return entry_error(l, err, errno, entry, "set owner and mode of the root");
    if (!l->outer && remember_dir_time(l, "", e) < 0)
        return entry_error(l, err, ENOMEM, entry, "remember");
    return 0;
}

static int put_hardlink(layer *l, int parent, const char *base, struct archive_entry *e, const char *entry,
                        sbx_error *err)
{
    char target[PATH_MAX];
    int r = clean_path(archive_entry_hardlink(e), target, sizeof target);
    if (r < 0 || target[0] == '\0')
        return entry_error(l, err, r == -ENAMETOOLONG ? ENAMETOOLONG : 0, entry,
                           "unsafe hard link target '%.200s'", archive_entry_hardlink(e));
    /* O_NOFOLLOW: a hard link to a symlink links the symlink itself. */
    _cleanup_close_ int t = open_in_root(l->root, target, O_PATH | O_NOFOLLOW);
    if (t < 0)
        return entry_error(l, err, errno, entry, "hard link target '%.200s'", target);
    struct stat st;
    if (fstat(t, &st) < 0)
        return entry_error(l, err, errno, entry, "hard link target '%.200s'", target);
    if (S_ISDIR(st.st_mode))
        return entry_error(l, err, EPERM, entry, "hard link target '%.200s' is a directory", target);
    if (remove_at(parent, base) < 0)
        return entry_error(l, err, errno, entry, "remove the existing entry");
    /* linkat(t, "", AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH; the
     * descriptor's /proc link names the very inode we resolved in root. */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", t);
    if (linkat(AT_FDCWD, proc, parent, base, AT_SYMLINK_FOLLOW) < 0)
        return entry_error(l, err, errno, entry, "hard link to '%.200s'", target);
    /* The link shares the target's inode: its own owner, mode and time in
     * the archive are not applied (as tar does). */
    return 0;
}

/* Write one entry (not a whiteout).  path is the cleaned name, modified. */
static int put_entry(layer *l, struct archive *a, struct archive_entry *e, char *path, const char *entry,
                     sbx_error *err)
{
    mode_t type = archive_entry_filetype(e);
    bool hardlink = archive_entry_hardlink(e) != NULL;
    if (!hardlink && (type == AE_IFCHR || type == AE_IFBLK || type == AE_IFSOCK))
        return 0; /* a 0/0 char device is an overlay whiteout; no device belongs in a template */
    if (l->outer && !hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        return 0;
    if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO)
        return entry_error(l, err, EINVAL, entry, "unknown file type %o", (unsigned) type);
    if (path[0] == '\0')
        return put_root(l, e, entry, err);

    /* Pay for the file before making it. */
    if (!hardlink && type == AE_IFREG) {
        la_int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        if (size > 0 && take_bytes(l, (uint64_t) size) < 0)
            return entry_error(l, err, EFBIG, entry, "more than the limit of %" PRIu64 " bytes", l->o->max_bytes);
    }

    char full[PATH_MAX];
    snprintf(full, sizeof full, "%s", path);
    const char *dir, *base;
    split_path(path, &dir, &base);
    _cleanup_close_ int parent = open_parent(l, dir);
    if (parent < 0)
        return entry_error(l, err, errno, entry, "open parent directory '/%s' in the tree", dir);
    if (hardlink)
        return put_hardlink(l, parent, base, e, entry, err);

    /* Replace whatever is there, except a directory by a directory. */
    struct stat st;
    bool exists = fstatat(parent, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (exists && !(type == AE_IFDIR && S_ISDIR(st.st_mode))) {
        if (remove_at(parent, base) < 0)
            return entry_error(l, err, errno, entry, "remove the existing entry");
        exists = false;
    }

    struct timespec ts[2];
    entry_times(e, ts);
    uid_t uid = shift_id(l, archive_entry_uid(e)), gid = shift_id(l, archive_entry_gid(e));
    switch (type) {
    case AE_IFREG: {
        _cleanup_close_ int fd = openat(parent, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return entry_error(l, err, errno, entry, "create file");
        if (write_data(l, a, e, fd, entry, err) < 0)
            return -1;
        if (set_owner_mode(l, fd, e, 0600) < 0)
            return entry_error(l, err, errno, entry, "set owner and mode");
        if (!l->outer && futimens(fd, ts) < 0)
            return entry_error(l, err, errno, entry, "set times");
        return 0;
    }
    case AE_IFDIR: {
        if (!exists && mkdirat(parent, base, 0700) < 0)
            return entry_error(l, err, errno, entry, "create directory");
        _cleanup_close_ int fd = openat(parent, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || set_owner_mode(l, fd, e, 0700) < 0)
            return entry_error(l, err, errno, entry, "set owner and mode");
        if (!l->outer && remember_dir_time(l, full, e) < 0)
            return entry_error(l, err, ENOMEM, entry, "remember");
        return 0;
    }
    case AE_IFLNK: {
        const char *target = archive_entry_symlink(e);
        /* Kept verbatim: it is resolved in root (here) or in the sandbox. */
        if (!target || symlinkat(target, parent, base) < 0)
            return entry_error(l, err, target ? errno : EINVAL, entry, "create symlink");
        if (l->outer)
            return 0;
        if (fchownat(parent, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
            return entry_error(l, err, errno, entry, "set owner");
        if (utimensat(parent, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
            return entry_error(l, err, errno, entry, "set times");
        return 0;
    }
    default: /* AE_IFIFO */
        /* fchmodat follows a symlink, but `base` is the FIFO made just now
         * in a directory only we write to. */
        if (mkfifoat(parent, base, 0600) < 0 || fchownat(parent, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
            fchmodat(parent, base, archive_entry_perm(e) & 07777, 0) < 0 ||
            utimensat(parent, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
            return entry_error(l, err, errno, entry, "create FIFO");
        return 0;
    }
}

/* Apply one whiteout to what lower layers left.  The directory is resolved in
 * root like any other path (following symlinks inside, as docker and
 * containerd do): `escape/.wh.etc` with `escape -> /` removes the tree's own
 * /etc, never the host's. */
static int apply_whiteout(const layer *l, char *path, const char *entry, sbx_error *err)
{
    const char *dir, *base;
    split_path(path, &dir, &base);
    if (strncmp(base, WH_PREFIX, strlen(WH_PREFIX)) != 0)
        return 0;
    const char *name = base + strlen(WH_PREFIX);
    bool opaque = strcmp(base, WH_OPAQUE) == 0;
    if (!opaque && strncmp(name, WH_PREFIX, strlen(WH_PREFIX)) == 0)
        return 0; /* AUFS bookkeeping (.wh..wh.plnk, .wh..wh.aufs), not a whiteout */
    if (!opaque && (name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0))
        return entry_error(l, err, 0, entry, "unsafe whiteout");
    _cleanup_close_ int fd = open_in_root(l->root, dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        return 0; /* nothing below to hide */
    if (fd < 0)
        return entry_error(l, err, errno, entry, "open directory '/%s' in the tree", dir);
    if (opaque) {
        DIR *d = fdopendir(fd);
        if (!d)
            return entry_error(l, err, errno, entry, "opaque whiteout");
        fd = -1; /* the DIR owns it now */
        if (empty_dir(d) < 0)
            return entry_error(l, err, errno, entry, "opaque whiteout: empty '/%s'", dir);
        return 0;
    }
    if (remove_at(fd, name) < 0)
        return entry_error(l, err, errno, entry, "whiteout: remove '%s'", name);
    return 0;
}

/* One read of the archive: the whiteouts, or everything else. */
static int layer_pass(layer *l, int fd, bool whiteout_pass, sbx_error *err)
{
    if (lseek(fd, 0, SEEK_SET) < 0)
        return sbx_error_set(err, errno, "%s %s: rewind", l->kind, l->name);
    _cleanup_archive_ struct archive *a = archive_read_new();
    if (!a)
        return sbx_error_set(err, ENOMEM, "%s %s", l->kind, l->name);
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_empty(a);
    if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK)
        return sbx_error_set(err, 0, "%s %s: %s", l->kind, l->name, archive_error_string(a));
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return sbx_error_set(err, 0, "%s %s: %s", l->kind, l->name, archive_error_string(a));
        const char *entry = archive_entry_pathname(e);
        if (!entry)
            entry = archive_entry_pathname_utf8(e);
        if (!entry)
            return sbx_error_set(err, EINVAL, "%s %s: an entry without a readable name", l->kind, l->name);
        char path[PATH_MAX];
        int c = clean_path(entry, path, sizeof path);
        if (c == -ENAMETOOLONG)
            return sbx_error_set(err, ENAMETOOLONG, "%s %s: entry '%.200s...'", l->kind, l->name, entry);
        if (c < 0)
            return sbx_error_set(err, 0, "unsafe path in %s %s: '%.200s'", l->kind, l->name, entry);
        const char *last = strrchr(path, '/');
        last = last ? last + 1 : path;
        bool is_whiteout = l->whiteouts && strncmp(last, WH_PREFIX, strlen(WH_PREFIX)) == 0;
        if (whiteout_pass ? is_whiteout && apply_whiteout(l, path, entry, err) < 0
                          : !is_whiteout && put_entry(l, a, e, path, entry, err) < 0)
            return -1;
    }
    return 0;
}

/* Extract the archive open on fd into l->root: whiteouts first, then the
 * rest, so a layer's whiteouts never touch its own files. */
static int extract_layer(layer *l, int fd, sbx_error *err)
{
    if (l->whiteouts && layer_pass(l, fd, true, err) < 0)
        return -1;
    int r = layer_pass(l, fd, false, err);
    if (r == 0)
        apply_dir_times(l);
    layer_free_dirs(l);
    return r;
}

static int check_opts(const sbx_extract_opts *o, sbx_error *err)
{
    if (!o)
        return sbx_error_set(err, EINVAL, "no extract options");
    /* uid_base 0 would leave files owned by host root */
    if (o->uid_base == 0 || o->uid_base > (uid_t) -1 - ID_COUNT)
        return sbx_error_set(err, EINVAL, "uid base %u is not a sandbox id range", (unsigned) o->uid_base);
    return 0;
}

int sbx_tar_extract(const char *tar_path, int dest_fd, const sbx_extract_opts *o, sbx_error *err)
{
    if (check_opts(o, err) < 0)
        return -1;
    _cleanup_close_ int fd = open(tar_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "open %s", tar_path);
    uint64_t written = 0;
    layer l = { .root = dest_fd, .o = o, .kind = "layer", .name = tar_path, .written = &written,
                .whiteouts = o->whiteouts };
    return extract_layer(&l, fd, err);
}

/* ---- blobs and JSON ---------------------------------------------------- */

/* sha256 of what fd holds, as 64 lowercase hex digits; leaves fd at offset 0. */
static int sha256_fd(int fd, char hex[65])
{
    __attribute__((cleanup(md_ctx_freep))) EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
        return -(errno = ENOMEM);
    _cleanup_free_ unsigned char *buf = malloc(64 * 1024);
    if (!buf)
        return -(errno = ENOMEM);
    for (;;) {
        ssize_t n = read(fd, buf, 64 * 1024);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t) n);
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != 32)
        return -(errno = EIO);
    for (unsigned i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return lseek(fd, 0, SEEK_SET) < 0 ? -1 : 0;
}

static bool is_hex64(const char *s, size_t len)
{
    if (len != 64)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* "sha256:<64 hex>" -> the hex; anything else is refused (it also names a
 * file below blobs/, so it must not be able to say "../"). */
static int digest_hex(const char *digest, char hex[65], sbx_error *err)
{
    if (!digest || strncmp(digest, "sha256:", 7) != 0 || !is_hex64(digest + 7, strlen(digest + 7)))
        return sbx_error_set(err, EINVAL, "unsupported or malformed digest '%.100s' (want sha256:<64 hex>)",
                             digest ? digest : "(none)");
    memcpy(hex, digest + 7, 65);
    return 0;
}

/* Open a file of the unpacked outer archive (resolved in its root) and check
 * that its sha256 is want_hex and, if want_size >= 0, its size.  Returns the
 * descriptor at offset 0. */
static int open_verified(int dir, const char *path, const char *want_hex, json_int_t want_size, const char *what,
                         sbx_error *err)
{
    _cleanup_close_ int fd = open_in_root(dir, path, O_RDONLY);
    if (fd < 0)
        return sbx_error_set(err, errno, "%s: open %s in the archive", what, path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return sbx_error_set(err, errno, "%s: stat %s", what, path);
    if (!S_ISREG(st.st_mode))
        return sbx_error_set(err, EINVAL, "%s: %s is not a regular file", what, path);
    if (want_size >= 0 && st.st_size != want_size)
        return sbx_error_set(err, EINVAL, "%s: %s has %lld bytes, its descriptor says %lld", what, path,
                             (long long) st.st_size, (long long) want_size);
    char hex[65];
    if (sha256_fd(fd, hex) < 0)
        return sbx_error_set(err, errno, "%s: read %s", what, path);
    if (strcmp(hex, want_hex) != 0)
        return sbx_error_set(err, EINVAL, "%s: sha256 mismatch: %s is sha256:%s (a corrupt or altered archive)", what,
                             path, hex);
    return steal_fd(&fd);
}

/* A blob of an OCI layout, checked against its descriptor. */
static int open_blob(int dir, json_t *desc, const char *what, sbx_error *err)
{
    const char *digest = json_string_value(json_object_get(desc, "digest"));
    char hex[65], path[128];
    if (digest_hex(digest, hex, err) < 0)
        return sbx_error_wrap(err, "%s", what);
    json_t *size = json_object_get(desc, "size");
    snprintf(path, sizeof path, "blobs/sha256/%s", hex);
    return open_verified(dir, path, hex, json_is_integer(size) ? json_integer_value(size) : -1, what, err);
}

static json_t *load_json_fd(int fd, const char *what, sbx_error *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0) {
        sbx_error_set(err, errno, "%s", what);
        return NULL;
    }
    if (st.st_size > JSON_MAX) {
        sbx_error_set(err, EFBIG, "%s: %lld bytes is too large for a JSON document", what, (long long) st.st_size);
        return NULL;
    }
    _cleanup_free_ char *buf = malloc((size_t) st.st_size + 1);
    if (!buf) {
        sbx_error_set(err, ENOMEM, "%s", what);
        return NULL;
    }
    size_t n = 0;
    while (n < (size_t) st.st_size) {
        ssize_t r = read(fd, buf + n, (size_t) st.st_size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            sbx_error_set(err, r < 0 ? errno : EIO, "%s: read", what);
            return NULL;
        }
        n += (size_t) r;
    }
    json_error_t je;
    json_t *j = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        sbx_error_set(err, EINVAL, "%s: invalid JSON: %s (line %d)", what, je.text, je.line);
    return j;
}

static json_t *load_json_at(int dir, const char *path, sbx_error *err)
{
    _cleanup_close_ int fd = open_in_root(dir, path, O_RDONLY);
    if (fd < 0) {
        sbx_error_set(err, errno, "open %s in the archive", path);
        return NULL;
    }
    return load_json_fd(fd, path, err);
}

/* ---- the image config -------------------------------------------------- */

void sbx_image_config_free(sbx_image_config *c)
{
    if (!c)
        return;
    json_decref(c->env);
    json_decref(c->cmd);
    memset(c, 0, sizeof *c);
}

/* Append the strings of `from` (an array or null) to `to`. */
static int append_strings(json_t *to, json_t *from, const char *field, sbx_error *err)
{
    if (!from || json_is_null(from))
        return 0;
    if (!json_is_array(from))
        return sbx_error_set(err, EINVAL, "image config: %s is not an array", field);
    size_t i;
    json_t *v;
    json_array_foreach(from, i, v) {
        if (!json_is_string(v))
            return sbx_error_set(err, EINVAL, "image config: %s[%zu] is not a string", field, i);
        json_array_append(to, v);
    }
    return 0;
}

static int copy_string(char *out, size_t cap, json_t *v, const char *field, sbx_error *err)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return sbx_error_set(err, EINVAL, "image config: %s is not a string", field);
    if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
        return sbx_error_set(err, EINVAL, "image config: %s is too long or has a NUL byte", field);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int read_config(json_t *doc, sbx_image_config *cfg, sbx_error *err)
{
    if (!cfg)
        return 0;
    json_t *c = json_object_get(doc, "config");
    if (!c || json_is_null(c))
        return 0;
    if (!json_is_object(c))
        return sbx_error_set(err, EINVAL, "image config: config is not an object");
    _cleanup_json_ json_t *env = json_array();
    _cleanup_json_ json_t *cmd = json_array();
    if (!env || !cmd)
        return sbx_error_set(err, ENOMEM, "image config");
    if (append_strings(env, json_object_get(c, "Env"), "Env", err) < 0 ||
        append_strings(cmd, json_object_get(c, "Entrypoint"), "Entrypoint", err) < 0 ||
        append_strings(cmd, json_object_get(c, "Cmd"), "Cmd", err) < 0 ||
        copy_string(cfg->workdir, sizeof cfg->workdir, json_object_get(c, "WorkingDir"), "WorkingDir", err) < 0 ||
        copy_string(cfg->user, sizeof cfg->user, json_object_get(c, "User"), "User", err) < 0)
        return -1;
    if (json_array_size(env))
        cfg->env = steal_pointer(&env);
    if (json_array_size(cmd))
        cfg->cmd = steal_pointer(&cmd);
    return 0;
}

/* ---- image layouts ----------------------------------------------------- */

static bool media_type_is(json_t *doc_or_desc, const char *a, const char *b)
{
    const char *mt = json_string_value(json_object_get(doc_or_desc, "mediaType"));
    return mt && (strcmp(mt, a) == 0 || strcmp(mt, b) == 0);
}

static bool is_index(json_t *desc, json_t *doc)
{
    static const char oci[] = "application/vnd.oci.image.index.v1+json";
    static const char docker[] = "application/vnd.docker.distribution.manifest.list.v2+json";
    if (media_type_is(desc, oci, docker) || media_type_is(doc, oci, docker))
        return true;
    /* mediaType is optional in an OCI index: "manifests" without "layers" */
    return json_is_array(json_object_get(doc, "manifests")) && !json_object_get(doc, "layers");
}

/* Which manifest of an index: the only one, else linux on this machine's
 * architecture (attestation manifests say "unknown/unknown"). */
static json_t *pick_manifest(json_t *index, const char *where, sbx_error *err)
{
    json_t *list = json_object_get(index, "manifests");
    size_t n = json_array_size(list);
    if (n == 0) {
        sbx_error_set(err, EINVAL, "%s lists no manifests", where);
        return NULL;
    }
    if (n == 1)
        return json_array_get(list, 0);
    size_t i;
    json_t *d;
    json_array_foreach(list, i, d) {
        json_t *p = json_object_get(d, "platform");
        const char *os = json_string_value(json_object_get(p, "os"));
        const char *arch = json_string_value(json_object_get(p, "architecture"));
        if (os && arch && strcmp(os, "linux") == 0 && strcmp(arch, HOST_ARCH) == 0)
            return d;
    }
    sbx_error_set(err, ENOENT, "%s lists %zu manifests and none for linux/%s", where, n, HOST_ARCH);
    return NULL;
}

typedef struct import {
    int tmp;                   /* the unpacked outer archive */
    int dest;
    const sbx_extract_opts *o;
    uint64_t written;          /* bytes of the layers */
    sbx_image_config *cfg;
} import;

static int apply_layer(import *im, int fd, const char *name, sbx_error *err)
{
    layer l = { .root = im->dest, .o = im->o, .kind = "layer", .name = name, .written = &im->written,
                .whiteouts = true };
    return extract_layer(&l, fd, err);
}

static int import_oci(import *im, sbx_error *err)
{
    _cleanup_json_ json_t *doc = load_json_at(im->tmp, "index.json", err);
    if (!doc)
        return -1;
    char where[128] = "index.json";
    for (int depth = 0;; depth++) {
        if (depth > INDEX_DEPTH)
            return sbx_error_set(err, ELOOP, "image indexes nested more than %d deep", INDEX_DEPTH);
        json_t *desc = pick_manifest(doc, where, err);
        if (!desc)
            return -1;
        const char *digest = json_string_value(json_object_get(desc, "digest"));
        char what[128];
        snprintf(what, sizeof what, "manifest %.90s", digest ? digest : "(no digest)");
        _cleanup_close_ int fd = open_blob(im->tmp, desc, what, err);
        if (fd < 0)
            return -1;
        json_t *next = load_json_fd(fd, what, err);
        if (!next)
            return -1;
        bool index = is_index(desc, next);
        json_decref(doc);
        doc = next;
        snprintf(where, sizeof where, "%s", what);
        if (!index)
            break;
    }

    json_t *config = json_object_get(doc, "config");
    json_t *layers = json_object_get(doc, "layers");
    if (!json_is_object(config) || !json_is_array(layers))
        return sbx_error_set(err, EINVAL, "%s is not an image manifest (no config or layers)", where);
    if (json_object_get(config, "mediaType") &&
        !media_type_is(config, "application/vnd.oci.image.config.v1+json",
                       "application/vnd.docker.container.image.v1+json"))
        return sbx_error_set(err, EINVAL, "%s: config of type %s is not a container image", where,
                             json_string_value(json_object_get(config, "mediaType")));
    {
        char what[128];
        snprintf(what, sizeof what, "config %.90s", json_string_value(json_object_get(config, "digest")) ?: "");
        _cleanup_close_ int fd = open_blob(im->tmp, config, what, err);
        if (fd < 0)
            return -1;
        _cleanup_json_ json_t *c = load_json_fd(fd, what, err);
        if (!c || read_config(c, im->cfg, err) < 0)
            return -1;
    }
    size_t i;
    json_t *desc;
    json_array_foreach(layers, i, desc) {
        const char *digest = json_string_value(json_object_get(desc, "digest"));
        char what[128];
        snprintf(what, sizeof what, "layer %.90s", digest ? digest : "(no digest)");
        /* Checked before a byte of it is applied. */
        _cleanup_close_ int fd = open_blob(im->tmp, desc, what, err);
        if (fd < 0 || apply_layer(im, fd, digest, err) < 0)
            return -1;
    }
    return 0;
}

/* The sha256 a classic archive's file name promises: "<hex>.json" for the
 * config, ".../sha256/<hex>" for a Docker >= 25 blob. */
static bool name_digest(const char *path, char hex[65])
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strcspn(base, ".");
    if (!is_hex64(base, len) || (base[len] && strcmp(base + len, ".json") != 0))
        return false;
    memcpy(hex, base, 64);
    hex[64] = '\0';
    return true;
}

static int import_docker(import *im, sbx_error *err)
{
    _cleanup_json_ json_t *doc = load_json_at(im->tmp, "manifest.json", err);
    if (!doc)
        return -1;
    if (!json_is_array(doc) || json_array_size(doc) != 1)
        return sbx_error_set(err, EINVAL, "manifest.json must list exactly one image (it lists %zu)",
                             json_array_size(doc));
    json_t *m = json_array_get(doc, 0);
    const char *config_path = json_string_value(json_object_get(m, "Config"));
    json_t *layers = json_object_get(m, "Layers");
    if (!config_path || !json_is_array(layers))
        return sbx_error_set(err, EINVAL, "manifest.json: no Config or Layers");

    char path[PATH_MAX], hex[65];
    if (clean_path(config_path, path, sizeof path) < 0)
        return sbx_error_set(err, EINVAL, "manifest.json: unsafe Config path '%.200s'", config_path);
    if (!name_digest(path, hex))
        return sbx_error_set(err, EINVAL, "manifest.json: Config '%.200s' is not named by its sha256, cannot verify",
                             config_path);
    _cleanup_json_ json_t *config = NULL;
    {
        _cleanup_close_ int fd = open_verified(im->tmp, path, hex, -1, "config", err);
        if (fd < 0 || !(config = load_json_fd(fd, config_path, err)) || read_config(config, im->cfg, err) < 0)
            return -1;
    }
    /* A layer.tar is the uncompressed layer: its sha256 is the diff_id. */
    json_t *diff_ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
    if (json_array_size(diff_ids) != json_array_size(layers))
        return sbx_error_set(err, EINVAL, "config %.200s: %zu diff_ids for %zu layers", config_path,
                             json_array_size(diff_ids), json_array_size(layers));
    size_t i;
    json_t *v;
    json_array_foreach(layers, i, v) {
        const char *lp = json_string_value(v);
        if (!lp || clean_path(lp, path, sizeof path) < 0 || path[0] == '\0')
            return sbx_error_set(err, EINVAL, "manifest.json: unsafe layer path '%.200s'", lp ? lp : "(not a string)");
        /* Docker >= 25 names blobs (maybe compressed) by their own digest */
        if (strncmp(path, "blobs/sha256/", 13) == 0) {
            if (!name_digest(path, hex))
                return sbx_error_set(err, EINVAL, "manifest.json: layer '%.200s' has no digest name", lp);
        } else if (digest_hex(json_string_value(json_array_get(diff_ids, i)), hex, err) < 0) {
            return sbx_error_wrap(err, "config %.200s: diff_ids[%zu]", config_path, i);
        }
        char what[PATH_MAX + 16];
        snprintf(what, sizeof what, "layer %s", path);
        _cleanup_close_ int fd = open_verified(im->tmp, path, hex, -1, what, err);
        if (fd < 0 || apply_layer(im, fd, path, err) < 0)
            return -1;
    }
    return 0;
}

enum kind { KIND_ROOTFS, KIND_OCI, KIND_DOCKER };

/* Look at the outer archive's names (headers only) to tell what it is. */
static int archive_kind(int fd, const char *archive_path, enum kind *out, sbx_error *err)
{
    _cleanup_archive_ struct archive *a = archive_read_new();
    if (!a)
        return sbx_error_set(err, ENOMEM, "archive %s", archive_path);
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    archive_read_support_format_empty(a);
    if (archive_read_open_fd(a, fd, 64 * 1024) != ARCHIVE_OK)
        return sbx_error_set(err, 0, "archive %s: %s", archive_path, archive_error_string(a));
    bool layout = false, index = false, manifest = false;
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF)
            break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
            return sbx_error_set(err, 0, "archive %s: %s", archive_path, archive_error_string(a));
        char path[PATH_MAX];
        const char *name = archive_entry_pathname(e);
        if (!name || clean_path(name, path, sizeof path) < 0)
            continue; /* the extraction will say what is wrong with it */
        layout |= strcmp(path, "oci-layout") == 0;
        index |= strcmp(path, "index.json") == 0;
        manifest |= strcmp(path, "manifest.json") == 0;
    }
    *out = layout && index ? KIND_OCI : manifest ? KIND_DOCKER : KIND_ROOTFS;
    return lseek(fd, 0, SEEK_SET) < 0 ? sbx_error_set(err, errno, "archive %s: rewind", archive_path) : 0;
}

/* The temporary directory the outer archive is unpacked in, next to dest so
 * it is on the same file system and under the same (root-only) parent. */
typedef struct tmpdir {
    int parent;
    char name[NAME_MAX + 1];
} tmpdir;

static void tmpdir_remove(tmpdir *t)
{
    if (t->parent < 0)
        return;
    if (t->name[0])
        remove_at(t->parent, t->name);
    close(t->parent);
    t->parent = -1;
}

static int tmpdir_make(tmpdir *t, const char *dest, sbx_error *err)
{
    char dir[PATH_MAX], templ[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", dest);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        dir[--n] = '\0';
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    if (snprintf(templ, sizeof templ, ".%.200s.import-XXXXXX", base) >= (int) sizeof templ)
        return sbx_error_set(err, ENAMETOOLONG, "%s", dest);
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    t->parent = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (t->parent < 0)
        return sbx_error_set(err, errno, "open %s", dir);
    char full[PATH_MAX * 2];
    snprintf(full, sizeof full, "%s/%s", dir, templ);
    if (!mkdtemp(full))
        return sbx_error_set(err, errno, "create a temporary directory next to %s", dest);
    snprintf(t->name, sizeof t->name, "%s", strrchr(full, '/') + 1);
    return 0;
}

static int dir_is_empty(int fd, bool *empty)
{
    int rfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return -1;
    DIR *d = fdopendir(rfd);
    if (!d) {
        close(rfd);
        return -1;
    }
    *empty = true;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            *empty = false;
    closedir(d);
    return 0;
}

static int import_archive(const char *archive_path, const char *dest, const sbx_extract_opts *o,
                          sbx_image_config *cfg, sbx_error *err)
{
    if (check_opts(o, err) < 0)
        return -1;
    _cleanup_close_ int dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dest_fd < 0)
        return sbx_error_set(err, errno, "open %s", dest);
    bool empty;
    if (dir_is_empty(dest_fd, &empty) < 0)
        return sbx_error_set(err, errno, "read %s", dest);
    if (!empty)
        return sbx_error_set(err, ENOTEMPTY, "import into %s", dest);
    /* dest is the image's "/": the sandbox's root owns it, as root owns "/"
     * in the image (layers seldom carry a "./" entry to say so). */
    if (fchown(dest_fd, o->uid_base, o->uid_base) < 0 || fchmod(dest_fd, 0755) < 0)
        return sbx_error_set(err, errno, "set the owner of %s", dest);
    _cleanup_close_ int fd = open(archive_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sbx_error_set(err, errno, "open %s", archive_path);
    enum kind kind = KIND_ROOTFS;
    if (archive_kind(fd, archive_path, &kind, err) < 0)
        return -1;

    import im = { .tmp = -1, .dest = dest_fd, .o = o, .cfg = cfg };
    if (kind == KIND_ROOTFS) {
        layer l = { .root = dest_fd, .o = o, .kind = "layer", .name = archive_path, .written = &im.written,
                    .whiteouts = o->whiteouts };
        return extract_layer(&l, fd, err);
    }

    __attribute__((cleanup(tmpdir_remove))) tmpdir t = { .parent = -1 };
    if (tmpdir_make(&t, dest, err) < 0)
        return -1;
    _cleanup_close_ int tmp = openat(t.parent, t.name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (tmp < 0)
        return sbx_error_set(err, errno, "open the temporary directory %s", t.name);
    /* The outer archive gets its own budget of the same size: compressed
     * blobs, unpacked before the first layer is. */
    uint64_t outer_bytes = 0;
    layer outer = { .root = tmp, .o = o, .kind = "archive", .name = archive_path, .written = &outer_bytes,
                    .outer = true };
    if (extract_layer(&outer, fd, err) < 0)
        return -1;
    im.tmp = tmp;
    if (kind == KIND_OCI)
        return import_oci(&im, err) < 0 ? sbx_error_wrap(err, "OCI image %s", archive_path) : 0;
    return import_docker(&im, err) < 0 ? sbx_error_wrap(err, "docker image %s", archive_path) : 0;
}

int sbx_image_import(const char *archive_path, const char *dest, const sbx_extract_opts *o, sbx_image_config *cfg,
                     sbx_error *err)
{
    if (cfg)
        memset(cfg, 0, sizeof *cfg);
    int r = import_archive(archive_path, dest, o, cfg, err);
    if (r < 0)
        sbx_image_config_free(cfg);
    return r;
}
