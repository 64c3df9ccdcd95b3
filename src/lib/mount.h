/* mount.h - the sandbox's root file system, built inside its new mount
 * namespace by the user-namespace root, then entered with pivot_root.
 *
 *   /tmp (of the private mount namespace) <- tmpfs, size = --disk: the
 *        writable layer (upper/, work/) and the mount point root/
 *   root/ <- overlay: template rootfs (read-only) under upper/
 *   root/usr, root/etc/ssl, ... <- read-only binds of host paths the
 *        template asks for (the `base` template is the host's /usr)
 *   root/.sbx/init <- sbx-init, read-only
 *   root/proc <- proc of the new pid namespace, with masked and
 *        read-only paths
 *   root/dev <- small tmpfs: null zero full random urandom tty bound from
 *        the host, devpts (new instance), shm tmpfs (size-limited), then
 *        remounted read-only
 *   user --bind / --ro-bind mounts
 *
 * Mount points are resolved with openat2(RESOLVE_IN_ROOT), so a symlink in a
 * template or a `..` in a destination can never place a mount outside the
 * new root. */
#ifndef SBX_MOUNT_H
#define SBX_MOUNT_H

#include <stdint.h>
#include <stddef.h>

#include "error.h"
#include "spec.h"

typedef struct sbx_rootfs_plan {
    const char *lowerdir;       /* template rootfs (host path) */
    const char *layer;          /* layers above it (snapshots', then the template's): host paths joined by
                                 * ':', top first; or NULL */
    int *upper_fd;              /* if not NULL: gets an O_PATH fd of the upper directory */
    const sbx_bind *tpl_binds;  /* template's host binds */
    size_t n_tpl_binds;
    const sbx_bind *user_binds;
    size_t n_user_binds;
    const char *init_path;      /* host path of sbx-init */
    uint64_t disk_bytes;
    uint64_t shm_bytes;
    const char *hostname;
} sbx_rootfs_plan;

/* Snapshot layers a sandbox may stack over its template, and the most
 * lower directories of one overlay (those and the template's). */
#define SBX_MAX_SNAPSHOT_DEPTH 8
#define SBX_MAX_LAYERS (SBX_MAX_SNAPSHOT_DEPTH + 32)

/* Where sbx-init appears inside every sandbox. */
#define SBX_INIT_IN_SANDBOX "/.sbx/init"

/* Build the root and pivot into it.  Runs in the sandbox's first process,
 * before exec of sbx-init, in two phases:
 *   1. take hold of every host path (template, bind sources, sbx-init)
 *      while the process still has the caller's host uid, so a path only
 *      the caller can read (under /root, say) works;
 *   2. `become(arg)` switches to the sandbox's root (it waits for the uid
 *      map and calls setresuid), and everything is built as that user.
 * `become` returns < 0 with err set to stop. */
typedef int (*sbx_rootfs_become_fn)(void *arg, sbx_error *err);
int sbx_rootfs_setup(const sbx_rootfs_plan *plan, sbx_rootfs_become_fn become, void *arg, sbx_error *err);

/* Validate a sandbox-side path for --bind/-w: absolute, no "..", no NUL,
 * not "/" nor under /proc, /dev or /.sbx.  Pure; unit-tested. */
int sbx_check_sandbox_path(const char *path, const char *what, sbx_error *err);

#endif
