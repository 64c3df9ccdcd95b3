/* seccomp.h - the sandbox's syscall filter, compiled at build time by
 * tools/gen-seccomp.c (see there for the policy). */
#ifndef SBX_SECCOMP_H
#define SBX_SECCOMP_H

#include <linux/filter.h>

extern const struct sock_filter sbx_seccomp_filter[];
extern const unsigned short sbx_seccomp_filter_len;

/* Install the filter on the calling thread.  Requires no_new_privs.
 * Async-signal-safe.  Returns 0 or -errno. */
int sbx_seccomp_load(void);

#endif
