/* gen-seccomp - compile sbx's seccomp policy to classic BPF at build time.
 *
 * libseccomp builds and optimises the filter here, once; the output is a C
 * array that sbx-init (static, without libseccomp) loads with a single
 * seccomp(2) call.  Compiling at start-up would cost every sandbox a
 * millisecond or so and pull libseccomp into PID 1.
 *
 * The policy is in the spirit of Docker's default profile, as a deny list:
 * everything not named below is allowed. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

/* Denied with EPERM: kernel keyring, BPF, perf, userfaultfd, tracing other
 * processes, kernel modules and kexec, every way to mount, swap, reboot,
 * the kernel log, file-handle tricks, io_uring (a syscall bypass), and
 * namespace changes. */
static const char *const deny_eperm[] = {
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
    "mount", "umount2", "pivot_root", "chroot",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "swapon", "swapoff", "reboot", "syslog",
    "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "unshare", "setns",
    "acct", "quotactl", "quotactl_fd", "lookup_dcookie", "nfsservctl", "uselib", "vhangup",
    "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "fanotify_init",
};

static void rule(scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned n, const struct scmp_arg_cmp *args)
{
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR)
        return; /* not a syscall on this architecture */
    int r = seccomp_rule_add_array(ctx, action, nr, n, args);
    if (r < 0) {
        fprintf(stderr, "gen-seccomp: rule %s: %s\n", name, strerror(-r));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen-seccomp OUTPUT.c\n");
        return 2;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return 1;
    /* Syscalls of a foreign architecture (i386 via int 0x80, x32) could
     * bypass rules written for the native numbers: kill the process. */
    seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);

    for (size_t i = 0; i < sizeof deny_eperm / sizeof *deny_eperm; i++)
        rule(ctx, SCMP_ACT_ERRNO(EPERM), deny_eperm[i], 0, NULL);

    /* clone3 passes its flags in memory that BPF cannot read: answer ENOSYS
     * so glibc falls back to clone(2), whose flags we can check. */
    rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", 0, NULL);
    const unsigned long ns_flags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
                                   CLONE_NEWNET | CLONE_NEWCGROUP;
    /* One rule per flag: libseccomp has no "masked not equal". */
    for (int bit = 0; bit < 64; bit++) {
        unsigned long f = 1UL << bit;
        if (!(ns_flags & f))
            continue;
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, f, f);
        rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", 1, &a);
    }

    /* Sockets that reach below IP or into the kernel: packet capture and
     * injection, raw IP, the kernel crypto API, VM sockets. */
    static const int bad_families[] = { AF_PACKET, AF_ALG, AF_VSOCK, AF_KEY };
    for (size_t i = 0; i < sizeof bad_families / sizeof *bad_families; i++) {
        struct scmp_arg_cmp a = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) bad_families[i], 0);
        rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 1, &a);
        rule(ctx, SCMP_ACT_ERRNO(EPERM), "socketpair", 1, &a);
    }
    /* Raw IP only: netlink sockets are SOCK_RAW too, and `ip addr` or
     * if_nameindex() need them (they see only the sandbox's own netns). */
    static const int ip_families[] = { AF_INET, AF_INET6 };
    for (size_t i = 0; i < sizeof ip_families / sizeof *ip_families; i++) {
        struct scmp_arg_cmp raw[2] = {
            SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t) ip_families[i], 0),
            SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW),
        };
        rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", 2, raw);
    }

    /* Typing into a terminal that is not ours (TIOCSTI) or console tricks. */
    static const unsigned long bad_ioctls[] = { TIOCSTI, TIOCLINUX };
    for (size_t i = 0; i < sizeof bad_ioctls / sizeof *bad_ioctls; i++) {
        struct scmp_arg_cmp a = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, bad_ioctls[i]);
        rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", 1, &a);
    }

    /* Export as BPF into a memfd, then print it as C. */
    int fd = memfd_create("bpf", MFD_CLOEXEC);
    if (fd < 0 || seccomp_export_bpf(ctx, fd) < 0) {
        fprintf(stderr, "gen-seccomp: export failed\n");
        return 1;
    }
    off_t len = lseek(fd, 0, SEEK_END);
    lseek(fd, 0, SEEK_SET);
    struct sock_filter *prog = malloc((size_t) len);
    if (!prog || read(fd, prog, (size_t) len) != len)
        return 1;
    FILE *out = fopen(argv[1], "w");
    if (!out)
        return 1;
    size_t n = (size_t) len / sizeof *prog;
    fprintf(out, "/* Generated by tools/gen-seccomp.c at build time. Do not edit. */\n"
                 "#include \"seccomp.h\"\n\n"
                 "const struct sock_filter sbx_seccomp_filter[] = {\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "    { 0x%04x, %u, %u, 0x%08x },\n", prog[i].code, prog[i].jt, prog[i].jf, prog[i].k);
    fprintf(out, "};\n\nconst unsigned short sbx_seccomp_filter_len = %zu;\n", n);
    fclose(out);
    free(prog);
    close(fd);
    seccomp_release(ctx);
    return 0;
}
