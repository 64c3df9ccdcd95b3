/* caps.c - see caps.h. */
#define _GNU_SOURCE
#include "caps.h"

#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int sbx_caps_drop_to(uid_t uid, gid_t gid)
{
    /* Bounding set first: it needs CAP_SETPCAP, which we still hold. */
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            return -errno;
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return -errno;
    /* NOROOT: uid 0 gets no capabilities from execve.  NO_SETUID_FIXUP is
     * not set, so the setresuid below to a non-zero uid clears the permitted
     * set by itself; the capset after it makes uid 0 equally powerless. */
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP_LOCKED |
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
    struct __user_cap_data_struct data[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
    if (syscall(SYS_capset, &hdr, data) < 0)
        return -errno;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    return 0;
}
