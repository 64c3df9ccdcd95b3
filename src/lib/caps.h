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

#endif
