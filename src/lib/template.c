/* template.c - template lookup and the generated `base` template. */
#define _GNU_SOURCE
#include "template.h"
#include "cleanup.h"
#include "fsutil.h"

#include <ctype.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bump when the generated tree changes: older trees are regenerated. */
#define BASE_VERSION "4"

int sbx_template_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 64 || name[0] == '.' || name[0] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char) name[i]) && name[i] != '.' && name[i] != '_' && name[i] != '-')
            return 0;
    return 1;
}

static const char passwd_txt[] = "root:x:0:0:root:/root:/bin/bash\n"
                                 "user:x:1000:1000:user:/home/user:/bin/bash\n"
                                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
static const char group_txt[] = "root:x:0:\ntty:x:5:\nusers:x:100:user\nuser:x:1000:\nnogroup:x:65534:\n";
static const char nsswitch_txt[] = "passwd:     files\ngroup:      files\nshadow:     files\n"
                                   "hosts:      files dns\nnetworks:   files\nprotocols:  files\n"
                                   "services:   files\nethers:     files\nrpc:        files\n";
static const char resolv_txt[] = "# sbx: this sandbox has no network (--net none); names resolve from /etc/hosts only\n"
                                 "options timeout:1 attempts:1\n";
static const char shells_txt[] = "/bin/sh\n/bin/bash\n/usr/bin/sh\n/usr/bin/bash\n";
static const char profile_txt[] = "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n";

/* Host paths the base template shows read-only, if the host has them. */
static const char *const base_host_paths[] = {
    "/usr", "/etc/ssl", "/etc/alternatives", "/etc/ld.so.cache",
};

struct entry {
    const char *path;
    char kind; /* d dir, f file, l symlink, m empty file (mount point) */
    mode_t mode;
    uid_t owner; /* sandbox uid */
    const char *arg; /* file content or link target */
};

static const struct entry base_tree[] = {
    { "usr", 'd', 0755, 0, NULL },
    { "bin", 'l', 0, 0, "usr/bin" },
    { "sbin", 'l', 0, 0, "usr/sbin" },
    { "lib", 'l', 0, 0, "usr/lib" },
    { "lib64", 'l', 0, 0, "usr/lib64" },
    { "etc", 'd', 0755, 0, NULL },
    { "etc/ssl", 'd', 0755, 0, NULL },
    { "etc/alternatives", 'd', 0755, 0, NULL },
    { "etc/ld.so.cache", 'm', 0644, 0, NULL },
    { "etc/passwd", 'f', 0644, 0, passwd_txt },
    { "etc/group", 'f', 0644, 0, group_txt },
    { "etc/nsswitch.conf", 'f', 0644, 0, nsswitch_txt },
    { "etc/resolv.conf", 'f', 0644, 0, resolv_txt },
    { "etc/shells", 'f', 0644, 0, shells_txt },
    { "etc/profile", 'f', 0644, 0, profile_txt },
    /* etc/hosts and etc/hostname are written per sandbox (mount.c): not
     * having them here saves a copy-up on every start */
    { "etc/os-release", 'l', 0, 0, "../usr/lib/os-release" },
    { "etc/mtab", 'l', 0, 0, "../proc/self/mounts" },
    { "etc/localtime", 'l', 0, 0, "../usr/share/zoneinfo/Etc/UTC" },
    { "root", 'd', 0700, 0, NULL },
    { "home", 'd', 0755, 0, NULL },
    { "home/user", 'd', 0755, 1000, NULL },
    { "tmp", 'd', 01777, 0, NULL },
    { "var", 'd', 0755, 0, NULL },
    { "var/tmp", 'd', 01777, 0, NULL },
    { "run", 'd', 0755, 0, NULL },
    { "opt", 'd', 0755, 0, NULL },
    { "mnt", 'd', 0755, 0, NULL },
    { "proc", 'd', 0555, 0, NULL },
    { "dev", 'd', 0755, 0, NULL },
    { "sys", 'd', 0555, 0, NULL },
    { ".sbx", 'd', 0755, 0, NULL },
    { ".sbx/init", 'm', 0755, 0, NULL },
};

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void) st;
    (void) flag;
    (void) ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int generate_base(const char *dir, uid_t uid_base, sbx_error *err)
{
    char p[PATH_MAX];
    if (mkdir(dir, 0755) < 0)
        return sbx_error_set(err, errno, "create %s", dir);
    snprintf(p, sizeof p, "%s/rootfs", dir);
    if (mkdir(p, 0755) < 0 || lchown(p, uid_base, uid_base) < 0)
        return sbx_error_set(err, errno, "create %s", p);
    for (size_t i = 0; i < sizeof base_tree / sizeof *base_tree; i++) {
        const struct entry *e = &base_tree[i];
        snprintf(p, sizeof p, "%s/rootfs/%s", dir, e->path);
        int r = 0;
        switch (e->kind) {
        case 'd':
            r = mkdir(p, e->mode) < 0 || chmod(p, e->mode) < 0 ? -errno : 0;
            break;
        case 'f':
            r = sbx_create_file(p, e->arg, e->mode);
            break;
        case 'm': {
            int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, e->mode);
            r = fd < 0 ? -errno : 0;
            if (fd >= 0)
                close(fd);
            break;
        }
        case 'l':
            r = symlink(e->arg, p) < 0 ? -errno : 0;
            break;
        }
        if (r < 0)
            return sbx_error_set(err, -r, "create %s", p);
        if (lchown(p, uid_base + e->owner, uid_base + e->owner) < 0)
            return sbx_error_set(err, errno, "chown %s", p);
    }
    snprintf(p, sizeof p, "%s/version", dir);
    char version[64];
    snprintf(version, sizeof version, "%s %u\n", BASE_VERSION, (unsigned) uid_base);
    int r = sbx_create_file(p, version, 0644);
    if (r < 0)
        return sbx_error_set(err, -r, "write %s", p);
    return 0;
}

/* Make sure <home>/templates/base is current.  Concurrent first runs each
 * build a private copy and rename it into place; the loser discards its
 * copy.  An outdated tree is swapped out atomically (RENAME_EXCHANGE). */
static int ensure_base(const char *home, uid_t uid_base, sbx_error *err)
{
    char dir[PATH_MAX], ver[PATH_MAX], want[64], have[64];
    snprintf(dir, sizeof dir, "%s/templates/base", home);
    snprintf(ver, sizeof ver, "%s/version", dir);
    snprintf(want, sizeof want, "%s %u\n", BASE_VERSION, (unsigned) uid_base);
    if (sbx_read_file(ver, have, sizeof have) > 0 && strcmp(have, want) == 0)
        return 0;

    char tdir[PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/templates", home);
    int r = sbx_mkdir_p(tdir, 0755);
    if (r < 0)
        return sbx_error_set(err, -r, "create %s (set SBX_HOME to a writable directory)", tdir);
    char tmp[PATH_MAX];
    /* private to this thread: sbxd's threads may all make their first
     * sandbox at once (a name per process made them destroy each other's
     * copy: found by sbx fuzz) */
    snprintf(tmp, sizeof tmp, "%s/.base.tmp.%d.%ld", tdir, (int) getpid(), (long) syscall(SYS_gettid));
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (generate_base(tmp, uid_base, err) < 0) {
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        return sbx_error_wrap(err, "generate the base template");
    }
    if (rename(tmp, dir) == 0)
        return 0;
    if (errno == ENOTEMPTY || errno == EEXIST) {
        if (sbx_read_file(ver, have, sizeof have) > 0 && strcmp(have, want) == 0) {
            nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* another run won the race */
            return 0;
        }
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
            nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS); /* tmp now holds the old tree */
            return 0;
        }
    }
    int e = errno;
    nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return sbx_error_set(err, e, "install the base template at %s", dir);
}

static int open_base(sbx_template *tpl, const char *home, uid_t uid_base, sbx_error *err)
{
    if (ensure_base(home, uid_base, err) < 0)
        return -1;
    tpl->n_binds = 0;
    for (size_t i = 0; i < sizeof base_host_paths / sizeof *base_host_paths; i++) {
        if (access(base_host_paths[i], F_OK) < 0)
            continue;
        tpl->binds[tpl->n_binds++] = (sbx_bind){ base_host_paths[i], base_host_paths[i], true };
    }
    snprintf(tpl->rootfs, sizeof tpl->rootfs, "%s/templates/base/rootfs", home);
    tpl->root_base = true;
    return 0;
}

/* Parse the lines of a `stack` (see template.h) into tpl; `origin` names
 * where they come from, for messages.  0, or -1 with err. */
static int parse_stack(sbx_template *tpl, char *text, const char *origin, const char *home, uid_t uid_base,
                       sbx_error *err)
{
    size_t n_layers = 0;
    bool have_root = false;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *val = strchr(line, ' ');
        if (!val)
            return sbx_error_set(err, EINVAL, "%s: bad line '%s'", origin, line);
        *val++ = '\0';
        if (strcmp(line, "root") == 0) {
            if (strcmp(val, "base") == 0) {
                if (open_base(tpl, home, uid_base, err) < 0)
                    return -1;
            } else {
                snprintf(tpl->rootfs, sizeof tpl->rootfs, "%s", val);
            }
            have_root = true;
        } else if (strcmp(line, "layer") == 0) {
            size_t l = strlen(tpl->layers);
            if (++n_layers > SBX_TEMPLATE_MAX_LAYERS || strchr(val, ':') ||
                snprintf(tpl->layers + l, sizeof tpl->layers - l, "%s%s", l ? ":" : "", val) >=
                    (int) (sizeof tpl->layers - l))
                return sbx_error_set(err, E2BIG, "%s: too many layers, or a bad one", origin);
        } else if (strcmp(line, "user") == 0) {
            snprintf(tpl->user, sizeof tpl->user, "%s", val);
        } else if (strcmp(line, "workdir") == 0) {
            snprintf(tpl->workdir, sizeof tpl->workdir, "%s", val);
        } else if (strcmp(line, "id") == 0) {
            snprintf(tpl->id, sizeof tpl->id, "%s", val);
        } /* other keys: from a newer sbx, not needed to mount */
    }
    if (!have_root)
        return sbx_error_set(err, EINVAL, "%s: no root", origin);
    return 0;
}

/* Read templates/<name>/stack.  0, or -1 with err. */
static int read_stack(sbx_template *tpl, const char *path, const char *home, uid_t uid_base, sbx_error *err)
{
    _cleanup_free_ char *text = sbx_read_file_alloc(path, NULL);
    if (!text)
        return sbx_error_set(err, errno, "read %s", path);
    return parse_stack(tpl, text, path, home, uid_base, err);
}

static bool build_name(const char *name)
{
    return strncmp(name, SBX_BUILD_TEMPLATE_PREFIX, strlen(SBX_BUILD_TEMPLATE_PREFIX)) == 0 &&
           sbx_template_name_valid(name + 1);
}

/* The root must be there: a missing one is an unknown template. */
static int check_rootfs(const sbx_template *tpl, const char *name, sbx_error *err)
{
    struct stat st;
    if (stat(tpl->rootfs, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sbx_error_set(err, 0, "template '%s' not found (no directory %s)", name, tpl->rootfs);
        if (err)
            err->errno_ = ENOENT; /* callers tell "unknown" from other failures; the message says it already */
        return -1;
    }
    return 0;
}

int sbx_template_open(sbx_template *tpl, const char *home, const char *name, uid_t uid_base, sbx_error *err)
{
    memset(tpl, 0, sizeof *tpl);
    if (!build_name(name) && !sbx_template_name_valid(name))
        return sbx_error_set(err, 0, "invalid template name '%s': use 1-64 letters, digits, '.', '_' or '-'", name);
    snprintf(tpl->name, sizeof tpl->name, "%s", name);
    if (strcmp(name, "base") == 0)
        return open_base(tpl, home, uid_base, err);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/templates/%s/stack", home, name);
    if (access(path, F_OK) == 0) {
        if (read_stack(tpl, path, home, uid_base, err) < 0)
            return sbx_error_wrap(err, "template '%s'", name);
    } else if (snprintf(tpl->rootfs, sizeof tpl->rootfs, "%s/templates/%s/rootfs", home, name) >=
               (int) sizeof tpl->rootfs) {
        return sbx_error_set(err, ENAMETOOLONG, "template path");
    }
    return check_rootfs(tpl, name, err);
}

int sbx_template_open_stack(sbx_template *tpl, const char *home, const char *name, const char *stack, uid_t uid_base,
                            sbx_error *err)
{
    memset(tpl, 0, sizeof *tpl);
    if (!build_name(name) && !sbx_template_name_valid(name))
        return sbx_error_set(err, 0, "invalid template name '%s': use 1-64 letters, digits, '.', '_' or '-'", name);
    snprintf(tpl->name, sizeof tpl->name, "%s", name);
    _cleanup_free_ char *text = strdup(stack);
    if (!text)
        return sbx_error_set(err, ENOMEM, "template '%s'", name);
    char origin[120];
    snprintf(origin, sizeof origin, "the recorded stack of template '%s'", name);
    if (parse_stack(tpl, text, origin, home, uid_base, err) < 0)
        return -1;
    return check_rootfs(tpl, name, err);
}

char *sbx_template_stack_text(const sbx_template *tpl)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    if (tpl->id[0])
        fprintf(f, "id %s\n", tpl->id);
    if (tpl->root_base)
        fprintf(f, "root base\n");
    else
        fprintf(f, "root %s\n", tpl->rootfs);
    for (const char *p = tpl->layers; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        fprintf(f, "layer %.*s\n", (int) n, p);
        p = end ? end + 1 : p + n;
    }
    if (tpl->user[0])
        fprintf(f, "user %s\n", tpl->user);
    if (tpl->workdir[0])
        fprintf(f, "workdir %s\n", tpl->workdir);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

int sbx_template_read_id(const char *home, const char *name, char out[33])
{
    out[0] = '\0';
    if (!sbx_template_name_valid(name))
        return -1;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/templates/%s/stack", home, name);
    _cleanup_free_ char *text = sbx_read_file_alloc(path, NULL);
    if (!text)
        return errno == ENOENT ? 0 : -1; /* base and hand-made templates: no id */
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (strncmp(line, "id ", 3) == 0) {
            snprintf(out, 33, "%s", line + 3);
            break;
        }
    }
    return 0;
}

int sbx_template_find(const sbx_template *tpl, const char *rel, char *out, size_t len)
{
    while (*rel == '/')
        rel++;
    for (const char *p = tpl->layers; *p;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t) (end - p) : strlen(p);
        if ((size_t) snprintf(out, len, "%.*s/%s", (int) n, p, rel) < len && faccessat(AT_FDCWD, out, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
            return 0;
        p = end ? end + 1 : p + n;
    }
    if ((size_t) snprintf(out, len, "%s/%s", tpl->rootfs, rel) < len && faccessat(AT_FDCWD, out, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    return -1;
}

int sbx_passwd_find(const char *passwd, const char *who, sbx_user *out)
{
    bool numeric = *who && strspn(who, "0123456789") == strlen(who);
    const char *line = passwd;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t) (nl - line) : strlen(line);
        char buf[1024];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            char *f[7] = { 0 };
            char *p = buf;
            int n = 0;
            for (; n < 7 && p; n++) {
                f[n] = p;
                p = strchr(p, ':');
                if (p)
                    *p++ = '\0';
            }
            /* a uid or gid that is not a number in the sandbox's range
             * makes the line unusable, never "0" */
            bool ids_ok = n == 7 && *f[2] && *f[3] && strspn(f[2], "0123456789") == strlen(f[2]) &&
                          strspn(f[3], "0123456789") == strlen(f[3]) && strlen(f[2]) <= 5 && strlen(f[3]) <= 5 &&
                          strtoul(f[2], NULL, 10) < SBX_UID_COUNT && strtoul(f[3], NULL, 10) < SBX_UID_COUNT;
            if (ids_ok && (numeric ? strcmp(f[2], who) == 0 : strcmp(f[0], who) == 0)) {
                out->uid = (uid_t) strtoul(f[2], NULL, 10);
                out->gid = (gid_t) strtoul(f[3], NULL, 10);
                snprintf(out->name, sizeof out->name, "%s", f[0]);
                snprintf(out->home, sizeof out->home, "%s", f[5][0] == '/' ? f[5] : "/");
                return 1;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

/* A file of the template as the sandbox would see it, from the top layer
 * that has it (NULL if none, or over 1 MiB).  Every path is resolved with
 * the layer as its root: an imported image's /etc/passwd may be a symlink
 * (to /etc/shadow, say), and it must mean the image's file, never the
 * host's.  (A symlink into another layer is not followed: a simplification
 * that can only miss a file.) */
static char *read_in_layers(const sbx_template *tpl, const char *rel)
{
    char dirs[SBX_TEMPLATE_MAX_LAYERS + 1][4096];
    size_t n = 0;
    for (const char *p = tpl->layers; *p && n < SBX_TEMPLATE_MAX_LAYERS;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        snprintf(dirs[n++], sizeof dirs[0], "%.*s", (int) len, p);
        p = end ? end + 1 : p + len;
    }
    snprintf(dirs[n++], sizeof dirs[0], "%s", tpl->rootfs);
    for (size_t i = 0; i < n; i++) {
        _cleanup_close_ int root = open(dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            continue;
        struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
        _cleanup_close_ int fd = (int) syscall(SYS_openat2, root, rel, &how, sizeof how);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > (1 << 20))
            continue;
        char *buf = malloc((size_t) st.st_size + 1);
        ssize_t got = buf ? read(fd, buf, (size_t) st.st_size) : -1;
        if (got < 0) {
            free(buf);
            continue;
        }
        buf[got] = '\0';
        return buf;
    }
    return NULL;
}

int sbx_template_lookup_user(const sbx_template *tpl, const char *who, sbx_user *out, sbx_error *err)
{
    _cleanup_free_ char *passwd = read_in_layers(tpl, "etc/passwd");
    if (passwd && sbx_passwd_find(passwd, who, out))
        return 0;
    bool numeric = *who && strspn(who, "0123456789") == strlen(who);
    if (numeric) {
        unsigned long v = strtoul(who, NULL, 10);
        if (strlen(who) > 5 || v >= SBX_UID_COUNT)
            return sbx_error_set(err, 0, "invalid --user '%s': uid must be below %d", who, SBX_UID_COUNT);
        out->uid = (uid_t) v;
        out->gid = (gid_t) v;
        snprintf(out->name, sizeof out->name, "%s", who);
        snprintf(out->home, sizeof out->home, "/");
        return 0;
    }
    return sbx_error_set(err, 0, "unknown user '%s' in template '%s' (not in its /etc/passwd)", who, tpl->name);
}
