/* seccomp.c - load the pre-compiled filter. */
#include "seccomp.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include <unistd.h>

int sbx_seccomp_load(void)
{
    struct sock_fprog prog = {
        .len = sbx_seccomp_filter_len,
        .filter = (struct sock_filter *) sbx_seccomp_filter,
    };
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return -errno;
    return 0;
}
