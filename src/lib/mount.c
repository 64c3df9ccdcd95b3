/* mount.c - build the sandbox root; see mount.h for the picture. */
#define _GNU_SOURCE
#include "mount.h"
#include "cleanup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STAGING "/tmp"
#define ROOT STAGING "/root"

static int sys_openat2(int dirfd, const char *path, uint64_t flags, uint64_t mode)
{
    struct open_how how = {
        .flags = flags,
        .mode = mode,
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    return (int) syscall(SYS_openat2, dirfd, path, &how, sizeof how);
}

int sbx_check_sandbox_path(const char *path, const char *what, sbx_error *err)
{
    if (!path || path[0] != '/')
        return sbx_error_set(err, 0, "%s '%s' must be an absolute path inside the sandbox", what, path ? path : "");
    if (strlen(path) >= PATH_MAX)
        return sbx_error_set(err, 0, "%s is too long", what);
    /* Only plain components: "." and ".." would let "/./.sbx/init" slip
     * past the reserved-prefix check below. */
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return sbx_error_set(err, 0, "%s '%s' must not contain '.' or '..' components", what, path);
        p += n;
    }
    static const char *const reserved[] = { "/proc", "/dev", "/.sbx" };
    const char *q = path;
    while (*q == '/')
        q++;
    if (*q == '\0')
        return sbx_error_set(err, 0, "%s '%s' cannot be the sandbox root", what, path);
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        size_t n = strlen(reserved[i]) - 1;
        if (strncmp(q, reserved[i] + 1, n) == 0 && (q[n] == '/' || q[n] == '\0'))
            return sbx_error_set(err, 0, "%s '%s' is inside %s, which sbx manages", what, path, reserved[i]);
    }
    return 0;
}

/* Open (creating as needed) `path` under rootfd, resolving it as if rootfd
 * were "/".  Returns an O_PATH fd to the final component. */
static int ensure_in_root(int rootfd, const char *path, bool is_dir, sbx_error *err)
{
    char buf[PATH_MAX];
    while (*path == '/')
        path++;
    if (snprintf(buf, sizeof buf, "%s", path) >= (int) sizeof buf)
        return sbx_error_set(err, ENAMETOOLONG, "%s", path);
    size_t len = strlen(buf);
    /* walk prefixes: mkdir what is missing, each resolved inside the root */
    for (size_t i = 0; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        bool last = buf[i] == '\0';
        char saved = buf[i];
        buf[i] = '\0';
        int fd = sys_openat2(rootfd, buf, O_PATH | O_CLOEXEC | (last && !is_dir ? 0 : O_DIRECTORY), 0);
        if (fd < 0 && errno == ENOENT) {
            /* create the missing component under its (resolved) parent */
            char *slash = strrchr(buf, '/');
            _cleanup_close_ int parent = -1;
            const char *name = buf;
            if (slash) {
                *slash = '\0';
                parent = sys_openat2(rootfd, buf, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
                *slash = '/';
                name = slash + 1;
            } else {
                parent = dup(rootfd);
            }
            if (parent < 0)
                return sbx_error_set(err, errno, "resolve parent of /%s", buf);
            int r;
            if (last && !is_dir) {
                int cfd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
                r = cfd < 0 ? -1 : 0;
                if (cfd >= 0)
                    close(cfd);
            } else {
                r = mkdirat(parent, name, 0755);
            }
            if (r < 0 && errno != EEXIST)
                return sbx_error_set(err, errno, "create mount point /%s", buf);
            fd = sys_openat2(rootfd, buf, O_PATH | O_CLOEXEC | (last && !is_dir ? 0 : O_DIRECTORY), 0);
        }
        if (fd < 0)
            return sbx_error_set(err, errno, "resolve /%s in the sandbox", buf);
        buf[i] = saved;
        if (last)
            return fd;
        close(fd);
    }
    return sbx_error_set(err, EINVAL, "empty path");
}

/* A host mount tree cloned and ready to attach (see bind_into). */
struct tree {
    int fd;
    bool is_dir;
};

/* Clone the host mount tree at `src`, read-only if asked, always nosuid, and
 * nodev unless it is a device node.  The new mount API makes the read-only
 * flag recursive and needs no remount dance for locked flags. */
static int clone_tree(const char *src, bool readonly, struct tree *out, sbx_error *err)
{
    struct stat st;
    if (stat(src, &st) < 0)
        return sbx_error_set(err, errno, "bind source %s", src);
    int tree = (int) open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0)
        return sbx_error_set(err, errno, "clone mount tree of %s", src);
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_NOSUID | (readonly ? MOUNT_ATTR_RDONLY : 0) };
    if (!S_ISCHR(st.st_mode))
        attr.attr_set |= MOUNT_ATTR_NODEV;
    if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof attr) < 0) {
        close(tree);
        return sbx_error_set(err, errno, "set mount attributes of %s", src);
    }
    out->fd = tree;
    out->is_dir = S_ISDIR(st.st_mode);
    return 0;
}

/* Attach a cloned tree at `dest` inside the root; consumes t->fd. */
static int attach_tree(int rootfd, struct tree *t, const char *dest, sbx_error *err)
{
    _cleanup_close_ int tree = steal_fd(&t->fd);
    _cleanup_close_ int target = ensure_in_root(rootfd, dest, t->is_dir, err);
    if (target < 0)
        return -1;
    if (move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        return sbx_error_set(err, errno, "mount on %s", dest);
    return 0;
}

static int bind_into(int rootfd, const char *src, const char *dest, bool readonly, sbx_error *err)
{
    struct tree t;
    if (clone_tree(src, readonly, &t, err) < 0)
        return -1;
    return attach_tree(rootfd, &t, dest, err);
}

static int mount_at(int rootfd, const char *dest, const char *fstype, unsigned long flags, const char *data,
                    sbx_error *err)
{
    _cleanup_close_ int target = ensure_in_root(rootfd, dest, true, err);
    if (target < 0)
        return -1;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", target);
    if (mount(fstype, path, fstype, flags, data) < 0)
        return sbx_error_set(err, errno, "mount %s on %s", fstype, dest);
    return 0;
}

static int remount_readonly(int rootfd, const char *dest, sbx_error *err)
{
    _cleanup_close_ int target = sys_openat2(rootfd, dest, O_PATH | O_CLOEXEC, 0);
    if (target < 0)
        return sbx_error_set(err, errno, "resolve %s", dest);
    struct mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };
    if (mount_setattr(target, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0)
        return sbx_error_set(err, errno, "make %s read-only", dest);
    return 0;
}

/* /proc paths that reveal host kernel state or allow host-wide changes.
 * Docker and crun mask the same set. */
static const char *const proc_masked_files[] = {
    "proc/kcore", "proc/keys", "proc/key-users", "proc/timer_list", "proc/sched_debug",
    "proc/latency_stats", "proc/kallsyms", "proc/kpagecount", "proc/kpageflags", "proc/kpagecgroup",
};
static const char *const proc_masked_dirs[] = { "proc/acpi", "proc/scsi", "proc/asound", "proc/driver" };
static const char *const proc_readonly[] = { "proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus", "proc/fs" };

static int setup_proc(int rootfd, sbx_error *err)
{
    if (mount_at(rootfd, "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, err) < 0)
        return -1;
    for (size_t i = 0; i < sizeof proc_masked_files / sizeof *proc_masked_files; i++) {
        if (faccessat(rootfd, proc_masked_files[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (bind_into(rootfd, "/dev/null", proc_masked_files[i], true, err) < 0)
            return sbx_error_wrap(err, "mask /%s", proc_masked_files[i]);
    }
    for (size_t i = 0; i < sizeof proc_masked_dirs / sizeof *proc_masked_dirs; i++) {
        if (faccessat(rootfd, proc_masked_dirs[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        if (mount_at(rootfd, proc_masked_dirs[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                     "size=4k,mode=0555", err) < 0)
            return -1;
    }
    for (size_t i = 0; i < sizeof proc_readonly / sizeof *proc_readonly; i++) {
        if (faccessat(rootfd, proc_readonly[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0)
            continue;
        /* bind the path onto itself, then make that mount read-only */
        char src[PATH_MAX];
        snprintf(src, sizeof src, ROOT "/%s", proc_readonly[i]);
        if (bind_into(rootfd, src, proc_readonly[i], true, err) < 0)
            return -1;
    }
    return 0;
}

static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom", "tty" };

static int setup_dev(int rootfd, uint64_t shm_bytes, sbx_error *err)
{
    if (mount_at(rootfd, "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755", err) < 0)
        return -1;
    _cleanup_close_ int dev = sys_openat2(rootfd, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (dev < 0)
        return sbx_error_set(err, errno, "open /dev");
    for (size_t i = 0; i < sizeof dev_nodes / sizeof *dev_nodes; i++) {
        char src[32], dst[32];
        snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
        snprintf(dst, sizeof dst, "dev/%s", dev_nodes[i]);
        if (bind_into(rootfd, src, dst, false, err) < 0)
            return -1;
    }
    if (mount_at(rootfd, "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5",
                 err) < 0)
        return -1;
    char shm[64];
    snprintf(shm, sizeof shm, "size=%" PRIu64 ",mode=1777", shm_bytes);
    if (mount_at(rootfd, "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, shm, err) < 0)
        return -1;
    static const char *const links[][2] = {
        { "pts/ptmx", "ptmx" },           { "/proc/self/fd", "fd" },       { "/proc/self/fd/0", "stdin" },
        { "/proc/self/fd/1", "stdout" }, { "/proc/self/fd/2", "stderr" },
    };
    for (size_t i = 0; i < sizeof links / sizeof *links; i++)
        if (symlinkat(links[i][0], dev, links[i][1]) < 0)
            return sbx_error_set(err, errno, "symlink /dev/%s", links[i][1]);
    return remount_readonly(rootfd, "dev", err);
}

/* Per-sandbox files: the hostname must resolve (many programs look it up). */
static int write_identity(int rootfd, const char *hostname, sbx_error *err)
{
    char hosts[512];
    snprintf(hosts, sizeof hosts,
             "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", hostname);
    const struct {
        const char *path, *content;
    } files[] = { { "etc/hosts", hosts }, { "etc/hostname", hostname } };
    for (size_t i = 0; i < 2; i++) {
        _cleanup_close_ int fd = sys_openat2(rootfd, files[i].path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return sbx_error_set(err, errno, "write /%s", files[i].path);
        size_t n = strlen(files[i].content);
        if (write(fd, files[i].content, n) != (ssize_t) n)
            return sbx_error_set(err, errno, "write /%s", files[i].path);
        if (i == 1 && write(fd, "\n", 1) != 1)
            return sbx_error_set(err, errno, "write /%s", files[i].path);
    }
    return 0;
}

#define MAX_TREES 512

int sbx_rootfs_setup(const sbx_rootfs_plan *plan, sbx_rootfs_become_fn become, void *arg, sbx_error *err)
{
    /* Nothing we mount may propagate back to the host, nor host mounts in. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return sbx_error_set(err, errno, "make mounts private");

    /* Take hold of every host path first: the writable layer is mounted on
     * /tmp below and would hide a template or a bind source living there. */
    _cleanup_close_ int lower = open(plan->lowerdir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (lower < 0)
        return sbx_error_set(err, errno, "open template %s", plan->lowerdir);
    /* the layers over the template's root (top first), held like it */
    int layers[SBX_MAX_LAYERS];
    size_t n_layers = 0;
    for (const char *p = plan->layer; p && *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        char path[PATH_MAX];
        if (len >= sizeof path || n_layers == SBX_MAX_LAYERS) {
            for (size_t i = 0; i < n_layers; i++)
                close(layers[i]);
            return sbx_error_set(err, E2BIG, "too many layers (at most %d)", SBX_MAX_LAYERS);
        }
        memcpy(path, p, len);
        path[len] = '\0';
        if ((layers[n_layers] = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
            int e = errno;
            for (size_t i = 0; i < n_layers; i++)
                close(layers[i]);
            return sbx_error_set(err, e, "open layer %s", path);
        }
        n_layers++;
        p = end ? end + 1 : p + len;
    }
    size_t n_trees = 1 + plan->n_tpl_binds + plan->n_user_binds;
    if (n_trees > MAX_TREES)
        return sbx_error_set(err, 0, "too many bind mounts");
    struct tree trees[MAX_TREES];
    size_t k = 0;
    int ret = -1;
    _cleanup_close_ int rootfd = -1;
    for (size_t i = 0; i < plan->n_tpl_binds; i++, k++)
        if (clone_tree(plan->tpl_binds[i].host, plan->tpl_binds[i].readonly, &trees[k], err) < 0)
            goto out;
    if (clone_tree(plan->init_path, true, &trees[k++], err) < 0)
        goto out;
    for (size_t i = 0; i < plan->n_user_binds; i++, k++) {
        const sbx_bind *b = &plan->user_binds[i];
        if (clone_tree(b->host, b->readonly, &trees[k], err) < 0) {
            sbx_error_wrap(err, "%s %s:%s", b->readonly ? "--ro-bind" : "--bind", b->host, b->dest);
            goto out;
        }
    }

    if (become(arg, err) < 0)
        goto out;

    /* The writable layer.  Its size is the --disk limit: writes past it get
     * ENOSPC inside and never touch the host's disk.  Inodes are bounded
     * too, one per 8 KiB, so a file-creation storm hits ENOSPC as well. */
    char opts[128];
    uint64_t inodes = plan->disk_bytes / 8192;
    if (inodes < 1024)
        inodes = 1024;
    snprintf(opts, sizeof opts, "size=%" PRIu64 ",nr_inodes=%" PRIu64 ",mode=0755", plan->disk_bytes, inodes);
    if (mount("sbx", STAGING, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0) {
        sbx_error_set(err, errno, "mount the writable layer (tmpfs on " STAGING ")");
        goto out;
    }
    if (mkdir(STAGING "/upper", 0755) < 0 || mkdir(STAGING "/work", 0755) < 0 || mkdir(ROOT, 0755) < 0) {
        sbx_error_set(err, errno, "prepare the writable layer");
        goto out;
    }
    if (plan->upper_fd && (*plan->upper_fd = open(STAGING "/upper", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
        sbx_error_set(err, errno, "open the writable layer");
        goto out;
    }
    char ovl[1280], lowers[1024] = "";
    /* layers lie over the root: each holds what a build step or a
     * snapshotted sandbox had changed, whiteouts included */
    for (size_t i = 0; i < n_layers; i++) {
        size_t l = strlen(lowers);
        snprintf(lowers + l, sizeof lowers - l, "/proc/self/fd/%d:", layers[i]);
    }
    size_t ll = strlen(lowers);
    snprintf(lowers + ll, sizeof lowers - ll, "/proc/self/fd/%d", lower);
    snprintf(ovl, sizeof ovl, "lowerdir=%s,upperdir=" STAGING "/upper,workdir=" STAGING "/work", lowers);
    /* userxattr: inside a user namespace overlayfs must keep its metadata
     * in user.* xattrs (and logs a warning per mount if not told so);
     * kernels before 5.11 lack the option. */
    size_t ol = strlen(ovl);
    snprintf(ovl + ol, sizeof ovl - ol, ",userxattr");
    if (mount("overlay", ROOT, "overlay", MS_NOSUID | MS_NODEV, ovl) < 0) {
        ovl[ol] = '\0';
        if (mount("overlay", ROOT, "overlay", MS_NOSUID | MS_NODEV, ovl) < 0) {
            sbx_error_set(err, errno, "mount the root overlay (template %s)", plan->lowerdir);
            goto out;
        }
    }

    rootfd = open(ROOT, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0) {
        sbx_error_set(err, errno, "open " ROOT);
        goto out;
    }
    size_t t = 0;
    for (size_t i = 0; i < plan->n_tpl_binds; i++, t++)
        if (attach_tree(rootfd, &trees[t], plan->tpl_binds[i].dest, err) < 0) {
            sbx_error_wrap(err, "template mount %s", plan->tpl_binds[i].host);
            goto out;
        }
    /* User binds go before sbx's own mounts: even one that reached /.sbx,
     * /proc or /dev through a symlink would end up underneath them. */
    size_t init_tree = t++;
    for (size_t i = 0; i < plan->n_user_binds; i++, t++) {
        const sbx_bind *b = &plan->user_binds[i];
        if (attach_tree(rootfd, &trees[t], b->dest, err) < 0) {
            sbx_error_wrap(err, "%s %s:%s", b->readonly ? "--ro-bind" : "--bind", b->host, b->dest);
            goto out;
        }
    }
    if (attach_tree(rootfd, &trees[init_tree], SBX_INIT_IN_SANDBOX, err) < 0)
        goto out;
    if (write_identity(rootfd, plan->hostname, err) < 0)
        goto out;
    if (setup_proc(rootfd, err) < 0)
        goto out;
    if (setup_dev(rootfd, plan->shm_bytes, err) < 0)
        goto out;
    ret = 0;
out:
    for (size_t i = 0; i < k; i++)
        if (trees[i].fd >= 0)
            close(trees[i].fd);
    for (size_t i = 0; i < n_layers; i++)
        close(layers[i]);
    if (ret < 0)
        return ret;

    /* Enter the new root.  pivot_root(".", ".") stacks the old root on top
     * of the new one; detaching it leaves nothing of the host reachable. */
    if (chdir(ROOT) < 0)
        return sbx_error_set(err, errno, "chdir " ROOT);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return sbx_error_set(err, errno, "pivot_root");
    if (umount2(".", MNT_DETACH) < 0)
        return sbx_error_set(err, errno, "detach the host root");
    if (chdir("/") < 0)
        return sbx_error_set(err, errno, "chdir /");
    return 0;
}
