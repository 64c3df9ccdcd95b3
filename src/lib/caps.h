/* caps.h - leave a process with no privilege at all before it runs user code.
 * Used by sbx-init for every command it starts (statically linked: no libcap). */
#ifndef SBX_CAPS_H
#define SBX_CAPS_H

#include <sys/types.h>

/* Become uid/gid (supplementary groups: just gid), with every capability
 * set empty (permitted, effective, inheritable, ambient, bounding) and the
 * securebits locked so that even uid 0 regains nothing on execve.
 * Async-signal-safe (raw syscalls only).  Returns 0 or -errno. */
int sbx_caps_drop_to(uid_t uid, gid_t gid);

/* Template build steps (sbxd's `run` steps, which install packages and add
 * users): as sbx_caps_drop_to, but uid 0 keeps the capabilities a
 * container's root has by default (chown, dac_override, fowner, fsetid,
 * kill, setgid, setuid, setpcap, net_bind_service, sys_chroot, setfcap,
 * audit_write), in the bounding set and through execve.  They act only
 * inside the sandbox's user namespace: on its own files, never on the
 * host's (whose owners it does not map) nor through read-only mounts.
 * no_new_privs stays set.  Another uid: exactly sbx_caps_drop_to. */
int sbx_caps_drop_to_builder(uid_t uid, gid_t gid);

#endif
