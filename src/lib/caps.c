/* caps.c - see caps.h. */
#define _GNU_SOURCE
#include "caps.h"

#include <errno.h>
#include <stdint.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What docker's root keeps (moby's oci/caps/defaults.go), but mknod and
 * net_raw: device nodes are useless here and raw sockets are for a
 * network a build does not have. */
#define BUILDER_CAPS                                                                                                   \
    ((1ULL << CAP_CHOWN) | (1ULL << CAP_DAC_OVERRIDE) | (1ULL << CAP_FOWNER) | (1ULL << CAP_FSETID) |                \
     (1ULL << CAP_KILL) | (1ULL << CAP_SETGID) | (1ULL << CAP_SETUID) | (1ULL << CAP_SETPCAP) |                      \
     (1ULL << CAP_NET_BIND_SERVICE) | (1ULL << CAP_SYS_CHROOT) | (1ULL << CAP_SETFCAP) | (1ULL << CAP_AUDIT_WRITE))

static int drop_to(uid_t uid, gid_t gid, uint64_t keep)
{
    /* Bounding set first: it needs CAP_SETPCAP, which we still hold. */
    for (int cap = 0; cap <= 63; cap++) {
        if (keep & (1ULL << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -errno;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    /* NOROOT: uid 0 gets no capabilities from execve.  NO_SETUID_FIXUP is
     * not set, so the setresuid below to a non-zero uid clears the permitted
     * set by itself; the capset after it makes uid 0 equally powerless. */
    unsigned long bits = (keep ? 0 : SECBIT_NOROOT) | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
                         SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    if (prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) < 0)
        return -errno;
    gid_t groups[1] = { gid };
    if (syscall(SYS_setgroups, 1, groups) < 0)
        return -errno;
    if (syscall(SYS_setresgid, gid, gid, gid) < 0)
        return -errno;
    if (syscall(SYS_setresuid, uid, uid, uid) < 0)
        return -errno;
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    /* keep: uid 0 regains the bounding set at every execve anyway (no
     * NOROOT); holding it now as well changes nothing for the exec */
    struct __user_cap_data_struct data[2] = { { (uint32_t) keep, (uint32_t) keep, 0 },
                                              { (uint32_t) (keep >> 32), (uint32_t) (keep >> 32), 0 } };
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -errno;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    return 0;
}

int sbx_caps_drop_to(uid_t uid, gid_t gid)
{
    return drop_to(uid, gid, 0);
}

int sbx_caps_drop_to_builder(uid_t uid, gid_t gid)
{
    return drop_to(uid, gid, uid == 0 ? BUILDER_CAPS : 0);
}
