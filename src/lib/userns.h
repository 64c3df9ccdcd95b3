/* userns.h - the sandbox's user namespace: uid/gid maps. */
#ifndef SBX_USERNS_H
#define SBX_USERNS_H

#include <sys/types.h>
#include "error.h"

/* Map sandbox ids 0..SBX_UID_COUNT-1 of process `pid` to host ids
 * base..base+SBX_UID_COUNT-1.  Written by the privileged parent, so no
 * "setgroups deny" is needed and sandbox root keeps setgroups(2). */
int sbx_userns_write_maps(pid_t pid, uid_t base, sbx_error *err);

/* Pick the uid base: SBX_UID_BASE from the environment, else the first
 * /etc/subuid range of user "sbx" if it is large enough, else the default.
 * Refuses a range that would include host uid 0. */
int sbx_userns_uid_base(uid_t *out, sbx_error *err);

#endif
