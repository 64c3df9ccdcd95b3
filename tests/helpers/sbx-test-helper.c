/* sbx-test-helper - run INSIDE sandboxes by the integration tests.
 *
 * In the style of bubblewrap's tests/try-syscall.c and crun's tests/init.c:
 * one static binary with small subcommands that probe what the sandbox
 * allows and push on its limits, printing machine-readable lines.
 *
 *   try-syscall NAME...  one line per NAME: "NAME OK", "NAME EPERM", ...,
 *                        "NAME KILLED-SIGSYS" if the attempt killed its
 *                        process (each attempt runs in a forked child)
 *   caps                 Cap*, NoNewPrivs and Seccomp lines of /proc/self/status
 *   fds [FILE]           "fds 0 1 2" then "fd N TARGET" per open fd (to FILE,
 *                        opened after listing, if given)
 *   forkbomb [MAX]       fork sleeping children until fork fails (or MAX)
 *   memhog MIB           allocate and touch MIB MiB
 *   fill-disk PATH [MAX_MIB]  write 1 MiB chunks until a write fails
 *   inodes DIR [MAX]     create empty files until creation fails
 *   spin [SECONDS]       busy loop forever, or for SECONDS (wall) and then
 *                        print "cpu_ms N wall_ms M"
 *   flood BYTES          write BYTES bytes (byte k is k % 256) to stdout
 *   sleep SECONDS        sleep (fractions allowed)
 *
 * Every argument given to a probed syscall is harmless: nothing here can
 * change the host even if the sandbox let it through (wrong reboot magic,
 * invalid kexec flags, non-existent paths and modules).  Where the kernel
 * offers a choice, the arguments are ones that would *succeed* (or fail with
 * something other than EPERM) without the seccomp filter, so that "EPERM"
 * really means "the filter said no". */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/bpf.h>
#include <linux/kcmp.h>
#include <linux/keyctl.h>
#include <linux/mount.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/sched.h>
#include <linux/userfaultfd.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif
#ifndef AF_KEY
#define AF_KEY 15
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

#define MIB (1024UL * 1024UL)

/* ------------------------------------------------------------------ */
/* small utilities                                                      */

static const char *errno_name(int e)
{
    static char buf[32];
    if (e == 0)
        return "OK";
    const char *n = strerrorname_np(e);
    if (n)
        return n;
    snprintf(buf, sizeof buf, "E%d", e);
    return buf;
}

static const char *signal_name(int sig)
{
    static char buf[32];
    const char *n = sigabbrev_np(sig);
    if (n)
        snprintf(buf, sizeof buf, "SIG%s", n);
    else
        snprintf(buf, sizeof buf, "SIG%d", sig);
    return buf;
}

static _Noreturn void die_usage(const char *msg)
{
    fprintf(stderr, "sbx-test-helper: %s\n", msg);
    exit(2);
}

static unsigned long parse_ulong(const char *s, const char *what)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end)
        die_usage(what);
    return v;
}

/* Result of an attempt: 0 if the call succeeded, else the errno. */
static int result_of(long r)
{
    return r < 0 ? errno : 0;
}

static int close_result(long fd)
{
    if (fd < 0)
        return errno;
    close((int) fd);
    return 0;
}

static pid_t fork_sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            pause();
    }
    return pid;
}

static void kill_and_reap(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------ */
/* try-syscall: one attempt per name                                    */

static int try_getpid(void)
{
    return result_of(syscall(SYS_getpid));
}

static int try_keyctl(void)
{
    /* create=0: look up, never create, the session keyring */
    return result_of(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, 0));
}

static int try_add_key(void)
{
    /* into the process keyring: gone with this (forked) process */
    return result_of(syscall(SYS_add_key, "user", "sbx-test-key", "x", 1, KEY_SPEC_PROCESS_KEYRING));
}

static int try_request_key(void)
{
    return result_of(syscall(SYS_request_key, "user", "sbx-test-no-such-key", NULL, 0));
}

static int try_bpf(void)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return close_result(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
}

static int try_perf_event_open(void)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    return close_result(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

static int try_userfaultfd(void)
{
    /* user-mode-only faults are allowed to everyone by the kernel */
    return close_result(syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
}

/* PTRACE_ATTACH to a child of ours: the kernel allows it (same uid, a
 * descendant), so only seccomp can refuse. */
static int try_ptrace_child(void)
{
    pid_t child = fork_sleeper();
    if (child < 0)
        return errno;
    int e = 0;
    if (ptrace(PTRACE_ATTACH, child, NULL, NULL) < 0) {
        e = errno;
    } else {
        int st;
        waitpid(child, &st, __WALL);
        ptrace(PTRACE_DETACH, child, NULL, NULL);
    }
    kill_and_reap(child);
    return e;
}

static int try_ptrace_init(void)
{
    if (ptrace(PTRACE_ATTACH, 1, NULL, NULL) < 0)
        return errno;
    int st;
    waitpid(1, &st, __WALL);
    ptrace(PTRACE_DETACH, 1, NULL, NULL);
    return 0;
}

/* Both: the first result other than EPERM wins (OK above all). */
static int try_ptrace(void)
{
    int a = try_ptrace_child();
    int b = try_ptrace_init();
    if (a == 0 || b == 0)
        return 0;
    return a != EPERM ? a : b;
}

static int try_process_vm_readv(void)
{
    static volatile char src[16] = "sbx";
    char dst[16];
    struct iovec local = { dst, sizeof dst };
    struct iovec remote = { (void *) src, sizeof src };
    return result_of(syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0));
}

static int try_process_vm_writev(void)
{
    static volatile char dst[16];
    char src[16] = "sbx";
    struct iovec local = { src, sizeof src };
    struct iovec remote = { (void *) dst, sizeof dst };
    return result_of(syscall(SYS_process_vm_writev, getpid(), &local, 1, &remote, 1, 0));
}

static int try_kexec_load(void)
{
    /* no segments and an invalid architecture in the flags: EINVAL at best */
    return result_of(syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0xdead0000UL));
}

static int try_kexec_file_load(void)
{
    /* bad fds and undefined flags */
    return result_of(syscall(SYS_kexec_file_load, -1, -1, 0UL, "", 0xdead0000UL));
}

static int try_init_module(void)
{
    static const char junk[16] = "not an ELF";
    return result_of(syscall(SYS_init_module, junk, sizeof junk, ""));
}

static int try_finit_module(void)
{
    return result_of(syscall(SYS_finit_module, -1, "", 0));
}

static int try_delete_module(void)
{
    return result_of(syscall(SYS_delete_module, "sbx_test_no_such_module", O_NONBLOCK));
}

static int try_mount(void)
{
    long r = syscall(SYS_mount, "sbx-test", "/tmp", "tmpfs", 0UL, "size=4k");
    if (r == 0)
        umount2("/tmp", MNT_DETACH);
    return result_of(r);
}

static int try_umount2(void)
{
    /* Without the filter: ENOENT (the path is looked up first). */
    return result_of(syscall(SYS_umount2, "/sbx-test-no-such-mount", 0));
}

static int try_open_tree(void)
{
    /* Without OPEN_TREE_CLONE this is an O_PATH open: allowed by the kernel. */
    return close_result(syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLOEXEC));
}

static int try_move_mount(void)
{
    return result_of(syscall(SYS_move_mount, -1, "", -1, "/sbx-test-no-such-dir", 0));
}

static int try_fsopen(void)
{
    return close_result(syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC));
}

static int try_fspick(void)
{
    return close_result(syscall(SYS_fspick, AT_FDCWD, "/", FSPICK_CLOEXEC));
}

static int try_fsmount(void)
{
    return close_result(syscall(SYS_fsmount, -1, FSMOUNT_CLOEXEC, 0));
}

static int try_mount_setattr(void)
{
    /* an empty change: the kernel accepts it as a no-op */
    struct mount_attr attr;
    memset(&attr, 0, sizeof attr);
    return result_of(syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &attr, sizeof attr));
}

static int try_pivot_root(void)
{
    return result_of(syscall(SYS_pivot_root, "/sbx-test-no-such-dir", "/sbx-test-no-such-dir"));
}

static int try_swapon(void)
{
    return result_of(syscall(SYS_swapon, "/sbx-test-no-such-swap", 0));
}

static int try_swapoff(void)
{
    return result_of(syscall(SYS_swapoff, "/sbx-test-no-such-swap"));
}

static int try_reboot(void)
{
    /* magic numbers deliberately wrong: could never reboot */
    return result_of(syscall(SYS_reboot, 0x12345678, 0x87654321, LINUX_REBOOT_CMD_CAD_OFF, NULL));
}

static int try_syslog(void)
{
    return result_of(syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0));
}

static int try_open_by_handle_at(void)
{
    struct {
        struct file_handle fh;
        unsigned char bytes[MAX_HANDLE_SZ];
    } h;
    memset(&h, 0, sizeof h);
    h.fh.handle_bytes = 8;
    return close_result(syscall(SYS_open_by_handle_at, AT_FDCWD, &h.fh, O_RDONLY | O_CLOEXEC));
}

static int try_name_to_handle_at(void)
{
    struct {
        struct file_handle fh;
        unsigned char bytes[MAX_HANDLE_SZ];
    } h;
    int mount_id;
    memset(&h, 0, sizeof h);
    h.fh.handle_bytes = MAX_HANDLE_SZ;
    return result_of(syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &h.fh, &mount_id, 0));
}

static int try_io_uring_setup(void)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    return close_result(syscall(SYS_io_uring_setup, 1, &p));
}

static int try_unshare(unsigned long flags)
{
    return result_of(syscall(SYS_unshare, flags));
}

static int try_unshare_user(void)
{
    return try_unshare(CLONE_NEWUSER);
}

static int try_unshare_net(void)
{
    return try_unshare(CLONE_NEWNET);
}

static int try_unshare_mount(void)
{
    return try_unshare(CLONE_NEWNS);
}

static int try_unshare_pid(void)
{
    return try_unshare(CLONE_NEWPID);
}

static int try_setns(void)
{
    /* Without the filter: EBADF. */
    return result_of(syscall(SYS_setns, -1, 0));
}

/* Raw clone, fork-like (no new stack): the child leaves at once. */
static int try_clone(unsigned long flags)
{
    long r = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
    if (r == 0)
        _exit(0);
    if (r < 0)
        return errno;
    waitpid((pid_t) r, NULL, 0);
    return 0;
}

static int try_clone_newuser(void)
{
    return try_clone(CLONE_NEWUSER);
}

static int try_clone_newns(void)
{
    return try_clone(CLONE_NEWNS);
}

static int try_clone_newnet(void)
{
    return try_clone(CLONE_NEWNET);
}

static int try_clone3(void)
{
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    long r = syscall(SYS_clone3, &args, sizeof args);
    if (r == 0)
        _exit(0);
    if (r < 0)
        return errno;
    waitpid((pid_t) r, NULL, 0);
    return 0;
}

static int try_socket(int family, int type, int proto)
{
    return close_result(socket(family, type | SOCK_CLOEXEC, proto));
}

static int try_socket_packet(void)
{
    return try_socket(AF_PACKET, SOCK_DGRAM, 0);
}

static int try_socket_raw(void)
{
    return try_socket(AF_INET, SOCK_RAW, 1 /* IPPROTO_ICMP */);
}

static int try_socket_alg(void)
{
    return try_socket(AF_ALG, SOCK_SEQPACKET, 0);
}

static int try_socket_vsock(void)
{
    return try_socket(AF_VSOCK, SOCK_STREAM, 0);
}

static int try_socket_key(void)
{
    return try_socket(AF_KEY, SOCK_RAW, 2 /* PF_KEY_V2 */);
}

static int try_socket_inet_stream(void)
{
    return try_socket(AF_INET, SOCK_STREAM, 0);
}

static int try_socket_unix(void)
{
    return try_socket(AF_UNIX, SOCK_STREAM, 0);
}

static int try_socket_netlink(void)
{
    /* what getifaddrs(3), `ip` and `ss` use */
    return try_socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */);
}

static int try_socketpair_alg(void)
{
    int sv[2];
    if (socketpair(AF_ALG, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return errno;
    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* TIOCSTI on a terminal that is our controlling terminal: the kernel allows
 * it (dev.tty.legacy_tiocsti=1), so only seccomp can refuse.  We make a new
 * session and open a fresh pty, which becomes our controlling tty. */
static int try_ioctl_tiocsti(void)
{
    /* closing the pty below hangs up our own session */
    signal(SIGHUP, SIG_IGN);
    if (setsid() < 0)
        return errno;
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return errno;
    if (grantpt(m) < 0 || unlockpt(m) < 0)
        return errno;
    const char *name = ptsname(m);
    if (!name)
        return errno;
    int s = open(name, O_RDWR | O_CLOEXEC); /* no O_NOCTTY: becomes our ctty */
    if (s < 0)
        return errno;
    char c = 'x';
    int e = result_of(ioctl(s, TIOCSTI, &c));
    close(s);
    close(m);
    return e;
}

static int try_chroot(void)
{
    return result_of(syscall(SYS_chroot, "/"));
}

static int try_sethostname(void)
{
    return result_of(sethostname("sbx-test", 8));
}

static int try_setuid0(void)
{
    return result_of(syscall(SYS_setuid, 0));
}

static int try_mknod_char(void)
{
    long r = syscall(SYS_mknodat, AT_FDCWD, "/tmp/x", (mode_t) (S_IFCHR | 0666), (dev_t) makedev(1, 3));
    if (r == 0)
        unlink("/tmp/x");
    return result_of(r);
}

static int try_kcmp(void)
{
    return result_of(syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, 0, 0));
}

static int try_pidfd_getfd(void)
{
    int pfd = (int) syscall(SYS_pidfd_open, getpid(), 0);
    if (pfd < 0)
        return errno;
    int e = close_result(syscall(SYS_pidfd_getfd, pfd, 0, 0));
    close(pfd);
    return e;
}

static int try_acct(void)
{
    return result_of(syscall(SYS_acct, NULL)); /* NULL: turn accounting off */
}

static int try_settimeofday(void)
{
    /* NULL time and zone: nothing to set */
    return result_of(syscall(SYS_settimeofday, NULL, NULL));
}

static int try_clock_settime(void)
{
    return result_of(syscall(SYS_clock_settime, CLOCK_MONOTONIC /* never settable: EINVAL */, NULL));
}

static int try_iopl(void)
{
    return result_of(syscall(SYS_iopl, 0)); /* level 0: no access */
}

static int try_ioperm(void)
{
    return result_of(syscall(SYS_ioperm, 0x80, 1, 0)); /* turn_on=0: drop access */
}

static int try_fanotify_init(void)
{
    /* FAN_CLASS_NOTIF | FAN_REPORT_FID: allowed without privileges (5.13+) */
    return close_result(syscall(SYS_fanotify_init, FAN_CLASS_NOTIF | FAN_REPORT_FID | FAN_CLOEXEC, O_RDONLY));
}

/* x32 ABI: getpid with the x32 bit set (x32 getpid is 39). */
static int try_x32(void)
{
    return result_of(syscall(__X32_SYSCALL_BIT | 39));
}

/* i386 ABI through int $0x80 (i386 getpid is 20). */
static int try_i386(void)
{
#if defined(__x86_64__)
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory", "r8", "r9", "r10", "r11");
    if (ret < 0 && ret > -4096) {
        errno = (int) -ret;
        return errno;
    }
    return 0;
#else
    return ENOSYS;
#endif
}

struct probe {
    const char *name;
    int (*fn)(void);
};

static const struct probe probes[] = {
    { "getpid", try_getpid },
    { "keyctl", try_keyctl },
    { "add_key", try_add_key },
    { "request_key", try_request_key },
    { "bpf", try_bpf },
    { "perf_event_open", try_perf_event_open },
    { "userfaultfd", try_userfaultfd },
    { "ptrace", try_ptrace },
    { "ptrace-child", try_ptrace_child },
    { "ptrace-init", try_ptrace_init },
    { "process_vm_readv", try_process_vm_readv },
    { "process_vm_writev", try_process_vm_writev },
    { "kexec_load", try_kexec_load },
    { "kexec_file_load", try_kexec_file_load },
    { "init_module", try_init_module },
    { "finit_module", try_finit_module },
    { "delete_module", try_delete_module },
    { "mount", try_mount },
    { "umount2", try_umount2 },
    { "open_tree", try_open_tree },
    { "move_mount", try_move_mount },
    { "fsopen", try_fsopen },
    { "fspick", try_fspick },
    { "fsmount", try_fsmount },
    { "mount_setattr", try_mount_setattr },
    { "pivot_root", try_pivot_root },
    { "swapon", try_swapon },
    { "swapoff", try_swapoff },
    { "reboot", try_reboot },
    { "syslog", try_syslog },
    { "open_by_handle_at", try_open_by_handle_at },
    { "name_to_handle_at", try_name_to_handle_at },
    { "io_uring_setup", try_io_uring_setup },
    { "unshare-user", try_unshare_user },
    { "unshare-net", try_unshare_net },
    { "unshare-mount", try_unshare_mount },
    { "unshare-pid", try_unshare_pid },
    { "setns", try_setns },
    { "clone-newuser", try_clone_newuser },
    { "clone-newns", try_clone_newns },
    { "clone-newnet", try_clone_newnet },
    { "clone3", try_clone3 },
    { "socket-packet", try_socket_packet },
    { "socket-raw", try_socket_raw },
    { "socket-alg", try_socket_alg },
    { "socket-vsock", try_socket_vsock },
    { "socket-key", try_socket_key },
    { "socket-inet-stream", try_socket_inet_stream },
    { "socket-unix", try_socket_unix },
    { "socket-netlink", try_socket_netlink },
    { "socketpair-alg", try_socketpair_alg },
    { "ioctl-tiocsti", try_ioctl_tiocsti },
    { "chroot", try_chroot },
    { "sethostname", try_sethostname },
    { "setuid0", try_setuid0 },
    { "mknod-char", try_mknod_char },
    { "kcmp", try_kcmp },
    { "pidfd_getfd", try_pidfd_getfd },
    { "acct", try_acct },
    { "settimeofday", try_settimeofday },
    { "clock_settime", try_clock_settime },
    { "iopl", try_iopl },
    { "ioperm", try_ioperm },
    { "fanotify_init", try_fanotify_init },
    { "x32", try_x32 },
    { "i386", try_i386 },
};

/* Run one probe in a forked child, so that a probe that succeeds (a new
 * namespace, a ptrace attachment) or gets killed cannot affect the next. */
static void run_probe(const struct probe *p)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        printf("%s HELPER-ERROR-%s\n", p->name, errno_name(errno));
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        printf("%s HELPER-ERROR-%s\n", p->name, errno_name(errno));
        close(pipefd[0]);
        close(pipefd[1]);
        return;
    }
    if (pid == 0) {
        close(pipefd[0]);
        int e = p->fn();
        ssize_t w = write(pipefd[1], &e, sizeof e);
        _exit(w == (ssize_t) sizeof e ? 0 : 1);
    }
    close(pipefd[1]);
    int e = -1;
    ssize_t n;
    do
        n = read(pipefd[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(pipefd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (n == (ssize_t) sizeof e)
        printf("%s %s\n", p->name, errno_name(e));
    else if (WIFSIGNALED(st))
        printf("%s KILLED-%s\n", p->name, signal_name(WTERMSIG(st)));
    else
        printf("%s HELPER-ERROR-exit-%d\n", p->name, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    fflush(stdout);
}

static int cmd_try_syscall(int argc, char **argv)
{
    int ret = 0;
    if (argc < 1)
        die_usage("try-syscall NAME...");
    for (int i = 0; i < argc; i++) {
        const struct probe *found = NULL;
        for (size_t j = 0; j < sizeof probes / sizeof *probes; j++)
            if (strcmp(probes[j].name, argv[i]) == 0)
                found = &probes[j];
        if (!found) {
            printf("%s UNKNOWN\n", argv[i]);
            ret = 2;
            continue;
        }
        run_probe(found);
    }
    return ret;
}

static int cmd_list_syscalls(void)
{
    for (size_t j = 0; j < sizeof probes / sizeof *probes; j++)
        printf("%s\n", probes[j].name);
    return 0;
}

/* ------------------------------------------------------------------ */
/* caps, fds                                                            */

static int cmd_caps(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) {
        perror("sbx-test-helper: /proc/self/status");
        return 1;
    }
    static const char *const keys[] = { "CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:", "NoNewPrivs:",
                                        "Seccomp:" };
    char line[512];
    while (fgets(line, sizeof line, f)) {
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            if (strncmp(line, keys[i], strlen(keys[i])) == 0) {
                fputs(line, stdout);
                break;
            }
        }
    }
    fclose(f);
    return 0;
}

/* List our open fds ("fds 0 1 2", then "fd N TARGET" lines) on stdout, or
 * into FILE: it is opened only after the listing, so that the listing is of
 * the fds we were started with even when stdout is closed. */
static int cmd_fds(int argc, char **argv)
{
    if (argc > 1)
        die_usage("fds [FILE]");
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        perror("sbx-test-helper: /proc/self/fd");
        return 1;
    }
    int self = dirfd(d);
    int fds[1024];
    char targets[1024][128];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < sizeof fds / sizeof *fds) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        int fd = atoi(e->d_name);
        if (fd == self)
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t len = readlink(path, targets[n], sizeof targets[n] - 1);
        if (len < 0)
            snprintf(targets[n], sizeof targets[n], "?(%s)", errno_name(errno));
        else
            targets[n][len] = '\0';
        fds[n++] = fd;
    }
    closedir(d);
    /* sort (insertion sort: a handful of entries) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
            int t = fds[j];
            fds[j] = fds[j - 1];
            fds[j - 1] = t;
            char tmp[128];
            memcpy(tmp, targets[j], sizeof tmp);
            memcpy(targets[j], targets[j - 1], sizeof tmp);
            memcpy(targets[j - 1], tmp, sizeof tmp);
        }
    FILE *out = stdout;
    if (argc == 1) {
        out = fopen(argv[0], "we");
        if (!out) {
            perror(argv[0]);
            return 1;
        }
    }
    fprintf(out, "fds");
    for (size_t i = 0; i < n; i++)
        fprintf(out, " %d", fds[i]);
    fprintf(out, "\n");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "fd %d %s\n", fds[i], targets[i]);
    if (out != stdout && fclose(out) != 0) {
        perror(argv[0]);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* resource pressure                                                    */

static int cmd_forkbomb(int argc, char **argv)
{
    unsigned long max = argc > 0 ? parse_ulong(argv[0], "forkbomb [MAX]") : 4096;
    pid_t *kids = calloc(max ? max : 1, sizeof *kids);
    if (!kids)
        die_usage("out of memory");
    unsigned long n = 0;
    int e = 0;
    while (n < max) {
        pid_t pid = fork_sleeper();
        if (pid < 0) {
            e = errno;
            break;
        }
        kids[n++] = pid;
    }
    printf("forks %lu errno %s\n", n, e ? errno_name(e) : "NONE");
    fflush(stdout);
    for (unsigned long i = 0; i < n; i++)
        kill(kids[i], SIGKILL);
    for (unsigned long i = 0; i < n; i++)
        while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR)
            ;
    free(kids);
    return 0;
}

static int cmd_memhog(int argc, char **argv)
{
    if (argc != 1)
        die_usage("memhog MIB");
    unsigned long want = parse_ulong(argv[0], "memhog MIB");
    for (unsigned long i = 0; i < want; i++) {
        char *p = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            printf("memhog failed at %lu MiB errno %s\n", i, errno_name(errno));
            return 1;
        }
        /* touch every page with non-zero data */
        for (size_t off = 0; off < MIB; off += 4096)
            p[off] = (char) (i | 1);
        if ((i + 1) % 16 == 0 || i + 1 == want) {
            printf("memhog %lu MiB\n", i + 1);
            fflush(stdout);
        }
    }
    printf("memhog done %lu MiB\n", want);
    return 0;
}

static int cmd_fill_disk(int argc, char **argv)
{
    if (argc < 1 || argc > 2)
        die_usage("fill-disk PATH [MAX_MIB]");
    unsigned long max_mib = argc > 1 ? parse_ulong(argv[1], "fill-disk PATH [MAX_MIB]") : 65536;
    int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        printf("wrote 0 errno %s\n", errno_name(errno));
        return 1;
    }
    char *buf = malloc(MIB);
    if (!buf)
        die_usage("out of memory");
    memset(buf, 'd', MIB);
    unsigned long long total = 0;
    int e = 0;
    while (total < (unsigned long long) max_mib * MIB) {
        size_t off = 0;
        while (off < MIB) {
            ssize_t w = write(fd, buf + off, MIB - off);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                e = errno;
                break;
            }
            off += (size_t) w;
            total += (unsigned long long) w;
        }
        if (e)
            break;
    }
    if (!e && close(fd) < 0)
        e = errno;
    else if (e)
        close(fd);
    printf("wrote %llu errno %s\n", total, e ? errno_name(e) : "NONE");
    free(buf);
    return 0;
}

static int cmd_inodes(int argc, char **argv)
{
    if (argc < 1 || argc > 2)
        die_usage("inodes DIR [MAX]");
    unsigned long max = argc > 1 ? parse_ulong(argv[1], "inodes DIR [MAX]") : 10000000;
    int dfd = open(argv[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        printf("created 0 errno %s\n", errno_name(errno));
        return 1;
    }
    unsigned long n = 0;
    int e = 0;
    while (n < max) {
        char name[32];
        snprintf(name, sizeof name, "f%lu", n);
        int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
            e = errno;
            break;
        }
        close(fd);
        n++;
    }
    close(dfd);
    printf("created %lu errno %s\n", n, e ? errno_name(e) : "NONE");
    return 0;
}

static double elapsed_s(const struct timespec *a, const struct timespec *b)
{
    return (double) (b->tv_sec - a->tv_sec) + (double) (b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Forever, or for SECONDS of wall time, then report the CPU time we got. */
static int cmd_spin(int argc, char **argv)
{
    volatile unsigned long x = 0;
    if (argc == 0)
        for (;;)
            x++;
    char *end;
    double limit = strtod(argv[0], &end);
    if (end == argv[0] || *end || limit <= 0)
        die_usage("spin [SECONDS]");
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        for (int i = 0; i < 100000; i++)
            x++;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (elapsed_s(&start, &now) < limit);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6 + (double) ru.ru_stime.tv_sec +
                 (double) ru.ru_stime.tv_usec / 1e6;
    printf("cpu_ms %.0f wall_ms %.0f\n", cpu * 1000, elapsed_s(&start, &now) * 1000);
    return 0;
}

static int cmd_flood(int argc, char **argv)
{
    if (argc != 1)
        die_usage("flood BYTES");
    unsigned long long want = strtoull(argv[0], NULL, 10);
    static unsigned char buf[1 << 16];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char) (i & 0xff);
    unsigned long long done = 0;
    while (done < want) {
        /* keep the k % 256 pattern across partial writes */
        size_t start = (size_t) (done % sizeof buf);
        size_t len = sizeof buf - start;
        if (len > want - done)
            len = (size_t) (want - done);
        ssize_t w = write(STDOUT_FILENO, buf + start, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "sbx-test-helper: flood: write after %llu bytes: %s\n", done, strerror(errno));
            return 1;
        }
        done += (unsigned long long) w;
    }
    return 0;
}

static int cmd_sleep(int argc, char **argv)
{
    if (argc != 1)
        die_usage("sleep SECONDS");
    char *end;
    double s = strtod(argv[0], &end);
    if (end == argv[0] || *end || s < 0)
        die_usage("sleep SECONDS");
    struct timespec ts = { (time_t) s, (long) ((s - (double) (time_t) s) * 1e9) };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: sbx-test-helper COMMAND [ARGS...]\n"
                 "  try-syscall NAME...    list-syscalls\n"
                 "  caps                   fds [FILE]\n"
                 "  forkbomb [MAX]         memhog MIB\n"
                 "  fill-disk PATH [MAX_MIB]\n"
                 "  inodes DIR [MAX]       spin [SECONDS]\n"
                 "  flood BYTES            sleep SECONDS\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int n = argc - 2;
    char **args = argv + 2;
    if (strcmp(cmd, "try-syscall") == 0)
        return cmd_try_syscall(n, args);
    if (strcmp(cmd, "list-syscalls") == 0)
        return cmd_list_syscalls();
    if (strcmp(cmd, "caps") == 0)
        return cmd_caps();
    if (strcmp(cmd, "fds") == 0)
        return cmd_fds(n, args);
    if (strcmp(cmd, "forkbomb") == 0)
        return cmd_forkbomb(n, args);
    if (strcmp(cmd, "memhog") == 0)
        return cmd_memhog(n, args);
    if (strcmp(cmd, "fill-disk") == 0)
        return cmd_fill_disk(n, args);
    if (strcmp(cmd, "inodes") == 0)
        return cmd_inodes(n, args);
    if (strcmp(cmd, "spin") == 0)
        return cmd_spin(n, args);
    if (strcmp(cmd, "flood") == 0)
        return cmd_flood(n, args);
    if (strcmp(cmd, "sleep") == 0)
        return cmd_sleep(n, args);
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
