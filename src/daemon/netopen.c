/* netopen.c - network mode "open": the internet through a user-space
 * network stack, the deny list enforced in the sandbox's own kernel
 * namespace.
 *
 * slirp4netns (Debian's) gives the sandbox's network namespace a tap
 * device (10.0.2.100/24, gateway 10.0.2.2, DNS 10.0.2.3) and makes its
 * connections from sbxd's namespace as ordinary sockets of an
 * unprivileged-looking process: no veth, no NAT rules, no routes on the
 * host.  --disable-host-loopback keeps 10.0.2.2 from reaching the host's
 * 127.0.0.1; --enable-sandbox drops its capabilities.  It runs until sbxd
 * closes its --exit-fd: when the sandbox ends, its policy changes, or sbxd
 * dies (fail closed: a restarted sbxd starts a new one).
 *
 * Before slirp4netns starts, sbxd installs an nftables table in the
 * sandbox's namespace (libnftables, from a thread that entered it): the
 * policy's deny CIDRs, then its allow CIDRs, then every private,
 * loopback, link-local, reserved range (egress.c's list) are rejected
 * with "administratively prohibited", which a connect() reports at once.
 * The sandbox's processes have no CAP_NET_ADMIN: they cannot change it.
 * Domain rules need names, which only the proxy sees: open mode takes
 * CIDR rules only. */
#define _GNU_SOURCE
#include "netopen.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct nft_args {
    const char *ruleset;
    int err;
    char msg[512];
};

/* In the sandbox's namespace (sbx_netns_run): libnftables talks netlink
 * from the calling thread's namespace. */
static void nft_in_netns(void *arg)
{
    struct nft_args *a = arg;
    struct nft_ctx *nft = nft_ctx_new(NFT_CTX_DEFAULT);
    if (!nft) {
        a->err = ENOMEM;
        snprintf(a->msg, sizeof a->msg, "nftables context");
        return;
    }
    nft_ctx_buffer_error(nft);
    if (nft_run_cmd_from_buffer(nft, a->ruleset) != 0) {
        a->err = EINVAL;
        const char *e = nft_ctx_get_error_buffer(nft);
        snprintf(a->msg, sizeof a->msg, "nftables: %s", e && *e ? e : "failed");
        a->msg[strcspn(a->msg, "\n")] = '\0';
    }
    nft_ctx_free(nft);
}

static int run_nft(pid_t pid, const char *ruleset, sbx_error *err)
{
    struct nft_args a = { .ruleset = ruleset };
    int e = sbx_netns_run(pid, nft_in_netns, &a);
    if (e)
        return sbx_error_set(err, e, "enter the sandbox's network namespace");
    return a.err ? sbx_error_set(err, 0, "%s", a.msg) : 0;
}

static void rule(FILE *f, const char *cidr, const char *verdict)
{
    fprintf(f, "    %s daddr %s %s\n", strchr(cidr, ':') ? "ip6" : "ip", cidr, verdict);
}

/* The table for policy p, replacing any earlier one in one transaction. */
static char *ruleset(const sbx_net_policy *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    static const char reject[] = "reject with icmpx type admin-prohibited";
    fprintf(f, "table inet sbx\ndelete table inet sbx\ntable inet sbx {\n  chain out {\n"
               "    type filter hook output priority 0; policy accept;\n"
               "    oifname \"lo\" accept\n"
               "    ip daddr 10.0.2.3 meta l4proto { tcp, udp } th dport 53 accept\n");
    size_t n;
    const char *const *deny = sbx_net_policy_cidrs(p, false, &n);
    for (size_t i = 0; i < n; i++)
        rule(f, deny[i], reject);
    const char *const *allow = sbx_net_policy_cidrs(p, true, &n);
    for (size_t i = 0; i < n; i++)
        rule(f, allow[i], "accept");
    const char *const *special = sbx_net_special_ranges(&n);
    for (size_t i = 0; i < n; i++)
        rule(f, special[i], reject);
    fprintf(f, "  }\n}\n");
    fclose(f);
    return text;
}

int sbx_netopen_start(pid_t pid, const sbx_net_policy *p, pid_t *slirp_pid, int *exit_fd, sbx_error *err)
{
    char *rs = ruleset(p);
    if (!rs)
        return sbx_error_set(err, ENOMEM, "nftables rules");
    int r = run_nft(pid, rs, err);
    free(rs);
    if (r < 0)
        return sbx_error_wrap(err, "the sandbox's firewall");
    if (*slirp_pid > 0)
        return 0; /* a new policy for a network that is up */
    int ex[2], ready[2];
    if (pipe2(ex, O_CLOEXEC) < 0)
        return sbx_error_set(err, errno, "pipe");
    if (pipe2(ready, O_CLOEXEC) < 0) {
        close(ex[0]);
        close(ex[1]);
        return sbx_error_set(err, errno, "pipe");
    }
    char target[16], exit_arg[32], ready_arg[32];
    snprintf(target, sizeof target, "%d", (int) pid);
    snprintf(exit_arg, sizeof exit_arg, "--exit-fd=3");
    snprintf(ready_arg, sizeof ready_arg, "--ready-fd=4");
    char *const argv[] = { "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                           "--enable-sandbox", exit_arg, ready_arg, target, "eth0", NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, ex[0], 3);
    posix_spawn_file_actions_adddup2(&fa, ready[1], 4);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0); /* it chats about tap fds */
    /* a test may let slirp4netns reach the host's loopback (10.0.2.2):
     * the only way a test can see traffic go through without leaving the
     * machine */
    char *const *args = argv;
    char *test_argv[] = { "slirp4netns", "--configure", "--mtu=65520", "--enable-sandbox", exit_arg, ready_arg,
                          target, "eth0", NULL };
    const char *t = getenv("SBX_TEST_OPEN_HOST_LOOPBACK");
    if (t && strcmp(t, "1") == 0)
        args = test_argv;
    pid_t child;
    int e = posix_spawnp(&child, "slirp4netns", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(ex[0]);
    close(ready[1]);
    if (e) {
        close(ex[1]);
        close(ready[0]);
        return sbx_error_set(err, e, "run slirp4netns (Debian package slirp4netns)");
    }
    /* it writes "1" once the interface is up */
    struct pollfd pf = { ready[0], POLLIN, 0 };
    char c = 0;
    bool ok = poll(&pf, 1, 10000) == 1 && read(ready[0], &c, 1) == 1 && c == '1';
    close(ready[0]);
    if (!ok) {
        close(ex[1]);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return sbx_error_set(err, EIO, "slirp4netns did not bring the sandbox's network up");
    }
    *slirp_pid = child;
    *exit_fd = ex[1];
    return 0;
}

void sbx_netopen_stop(pid_t pid, pid_t slirp_pid, int exit_fd)
{
    if (exit_fd >= 0)
        close(exit_fd); /* slirp4netns ends on it */
    if (slirp_pid > 0) {
        for (int i = 0; i < 200; i++) { /* 2 s, then no more patience */
            if (waitpid(slirp_pid, NULL, WNOHANG) != 0)
                break;
            if (i == 199) {
                kill(slirp_pid, SIGKILL);
                waitpid(slirp_pid, NULL, 0);
            }
            usleep(10000);
        }
    }
    if (pid > 0) {
        sbx_error ignored = { 0 };
        run_nft(pid, "table inet sbx\ndelete table inet sbx\n", &ignored); /* gone with its netns otherwise */
    }
}
