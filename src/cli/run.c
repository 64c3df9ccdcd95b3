/* run.c - `sbx run`: one ephemeral sandbox per command, no daemon.
 *
 * Parse options into a spec, create the sandbox (libsbx), pass stdio
 * through untouched (the sandbox inherits our fds 0-2), forward signals,
 * enforce --timeout, and turn how the command ended into our exit status. */
#define _GNU_SOURCE
#include "cli.h"
#include "../lib/cleanup.h"
#include "../lib/control.h"
#include "../lib/mount.h"
#include "../lib/parse.h"
#include "../lib/sandbox.h"
#include "../lib/spec.h"
#include "../lib/template.h"
#include "../lib/userns.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ENV 4096
#define MAX_BINDS 256
#define STOP_GRACE_MS 10000 /* after a forwarded SIGINT/SIGTERM, how long until we kill */

static void run_usage(FILE *out)
{
    char mem[32], disk[32], shm[32];
    fprintf(out,
            "usage: sbx run [OPTIONS] [--] CMD [ARGS...]\n"
            "\n"
            "Run CMD in a fresh sandbox and remove the sandbox when CMD ends. stdin, stdout and\n"
            "stderr pass through; the exit status is CMD's (128+N if killed by signal N).\n"
            "\n"
            "Resources:\n"
            "  --memory SIZE        memory limit, no swap (default %s); e.g. 512M, 2G\n"
            "  --cpus N             CPU quota in vCPUs, fractions allowed (default %.1f)\n"
            "  --pids N             max processes and threads (default %d)\n"
            "  --disk SIZE          writable layer size (default %s); writes past it get ENOSPC.\n"
            "                       The layer is memory-backed (tmpfs): its pages count toward --memory\n"
            "  --shm-size SIZE      /dev/shm size (default %s)\n"
            "  --timeout DURATION   kill the sandbox after DURATION (default: none); e.g. 30s, 5m\n"
            "\n"
            "Command:\n"
            "  -e, --env KEY=VALUE  set an environment variable (KEY alone: take the host's value)\n"
            "  -w, --workdir DIR    working directory (default: the user's home)\n"
            "  -u, --user NAME|UID  run as this user (default: user, uid 1000, home /home/user)\n"
            "\n"
            "File system and network:\n"
            "  --template NAME      root file system template (default: base, the host's /usr)\n"
            "  --ro-bind HOST:PATH  show host directory or file HOST read-only at PATH\n"
            "  --bind HOST:PATH     same, writable (writes land on the host as uid %u+N)\n"
            "  --net none           network: loopback only (the only mode for now)\n"
            "  --hostname NAME      hostname (default: sbx-<short id>)\n"
            "\n"
            "Exit status: CMD's own; 123 killed for exceeding --memory; 124 --timeout expired;\n"
            "125 sbx itself failed; 126 CMD could not be executed; 127 CMD not found.\n"
            "\n"
            "Environment: SBX_HOME (state and templates, default %s), SBX_UID_BASE,\n"
            "SBX_CGROUP_PARENT (cgroup v2: a delegated cgroup to nest under), SBX_INIT.\n",
            sbx_format_size(SBX_DEFAULT_MEMORY, mem, sizeof mem), SBX_DEFAULT_MILLICPUS / 1000.0, SBX_DEFAULT_PIDS,
            sbx_format_size(SBX_DEFAULT_DISK, disk, sizeof disk), sbx_format_size(SBX_DEFAULT_SHM, shm, sizeof shm),
            SBX_DEFAULT_UID_BASE, SBX_DEFAULT_HOME);
}

enum {
    OPT_MEMORY = 256, OPT_CPUS, OPT_PIDS, OPT_DISK, OPT_SHM, OPT_TIMEOUT, OPT_TEMPLATE, OPT_NET,
    OPT_RO_BIND, OPT_BIND, OPT_HOSTNAME, OPT_HELP,
};

static const struct option run_options[] = {
    { "memory", required_argument, NULL, OPT_MEMORY },
    { "cpus", required_argument, NULL, OPT_CPUS },
    { "pids", required_argument, NULL, OPT_PIDS },
    { "disk", required_argument, NULL, OPT_DISK },
    { "shm-size", required_argument, NULL, OPT_SHM },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "env", required_argument, NULL, 'e' },
    { "workdir", required_argument, NULL, 'w' },
    { "user", required_argument, NULL, 'u' },
    { "template", required_argument, NULL, OPT_TEMPLATE },
    { "net", required_argument, NULL, OPT_NET },
    { "ro-bind", required_argument, NULL, OPT_RO_BIND },
    { "bind", required_argument, NULL, OPT_BIND },
    { "hostname", required_argument, NULL, OPT_HOSTNAME },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 },
};

struct run_opts {
    sbx_spec spec;
    const char *user;
    const char *user_env[MAX_ENV];
    size_t n_user_env;
    sbx_bind binds[MAX_BINDS];
};

static int fail(const sbx_error *err)
{
    sbx_error_print(err, stderr);
    return SBX_EXIT_FAILURE;
}

static int parse_bind(const char *arg, bool readonly, sbx_bind *out, sbx_error *err)
{
    const char *opt = readonly ? "--ro-bind" : "--bind";
    const char *colon = strchr(arg, ':');
    char host[PATH_MAX];
    size_t hl = colon ? (size_t) (colon - arg) : strlen(arg);
    if (hl == 0 || hl >= sizeof host)
        return sbx_error_set(err, 0, "%s '%s': expected HOST:SANDBOX_PATH", opt, arg);
    memcpy(host, arg, hl);
    host[hl] = '\0';
    const char *dest = colon ? colon + 1 : host;
    char *real = realpath(host, NULL);
    if (!real)
        return sbx_error_set(err, errno, "%s: host path %s", opt, host);
    if (sbx_check_sandbox_path(dest, opt, err) < 0) {
        free(real);
        return -1;
    }
    out->host = real; /* lives until exit */
    out->dest = strdup(dest);
    out->readonly = readonly;
    return out->dest ? 0 : sbx_error_set(err, ENOMEM, "%s", opt);
}

static int parse_options(int argc, char **argv, struct run_opts *o, sbx_error *err)
{
    sbx_spec *s = &o->spec;
    int c;
    optind = 1;
    opterr = 0;
    /* "+": stop at the first non-option, so `sbx run ls -l` works too;
     * ":": report a missing value as ':' rather than '?' */
    while ((c = getopt_long(argc, argv, "+:e:w:u:h", run_options, NULL)) != -1) {
        uint64_t v;
        switch (c) {
        case OPT_MEMORY:
            if (sbx_parse_size(optarg, &s->memory_bytes, err) < 0)
                return sbx_error_wrap(err, "--memory");
            if (s->memory_bytes < (4ULL << 20))
                return sbx_error_set(err, 0, "--memory %s: must be at least 4M", optarg);
            break;
        case OPT_CPUS:
            if (sbx_parse_cpus(optarg, &s->millicpus, err) < 0)
                return sbx_error_wrap(err, "--cpus");
            break;
        case OPT_PIDS:
            if (sbx_parse_uint(optarg, 4194304, &v, err) < 0)
                return sbx_error_wrap(err, "--pids");
            if (v < 1)
                return sbx_error_set(err, 0, "--pids %s: must be at least 1", optarg);
            s->pids = (uint32_t) v;
            break;
        case OPT_DISK:
            if (sbx_parse_size(optarg, &s->disk_bytes, err) < 0)
                return sbx_error_wrap(err, "--disk");
            if (s->disk_bytes < (1ULL << 20))
                return sbx_error_set(err, 0, "--disk %s: must be at least 1M", optarg);
            break;
        case OPT_SHM:
            if (sbx_parse_size(optarg, &s->shm_bytes, err) < 0)
                return sbx_error_wrap(err, "--shm-size");
            break;
        case OPT_TIMEOUT:
            if (sbx_parse_duration(optarg, &s->timeout_ms, err) < 0)
                return sbx_error_wrap(err, "--timeout");
            break;
        case 'e':
            if (o->n_user_env >= MAX_ENV)
                return sbx_error_set(err, 0, "too many -e options (at most %d)", MAX_ENV);
            if (optarg[0] == '=' || optarg[0] == '\0')
                return sbx_error_set(err, 0, "-e '%s': expected KEY=VALUE or KEY", optarg);
            o->user_env[o->n_user_env++] = optarg;
            break;
        case 'w':
            if (sbx_check_sandbox_path(optarg, "-w", err) < 0 && strcmp(optarg, "/") != 0)
                return -1;
            s->cwd = optarg;
            break;
        case 'u':
            o->user = optarg;
            break;
        case OPT_TEMPLATE:
            if (!sbx_template_name_valid(optarg))
                return sbx_error_set(err, 0, "--template '%s': invalid name", optarg);
            s->template_name = optarg;
            break;
        case OPT_NET:
            if (strcmp(optarg, "none") != 0)
                return sbx_error_set(err, 0, "--net %s: unsupported network mode (only 'none' for now)", optarg);
            break;
        case OPT_RO_BIND:
        case OPT_BIND:
            if (s->n_binds >= MAX_BINDS)
                return sbx_error_set(err, 0, "too many bind mounts (at most %d)", MAX_BINDS);
            if (parse_bind(optarg, c == OPT_RO_BIND, &o->binds[s->n_binds], err) < 0)
                return -1;
            s->n_binds++;
            break;
        case OPT_HOSTNAME: {
            size_t n = strlen(optarg);
            if (n == 0 || n > 63 || strspn(optarg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.") != n)
                return sbx_error_set(err, 0, "--hostname '%s': use 1-63 letters, digits, '-' or '.'", optarg);
            snprintf(s->hostname, sizeof s->hostname, "%s", optarg);
            break;
        }
        case 'h':
        case OPT_HELP:
            run_usage(stdout);
            exit(0);
        case ':':
            if (optopt && optopt < 256) {
                const char *name = "";
                for (const struct option *lo = run_options; lo->name; lo++)
                    if (lo->val == optopt)
                        name = lo->name;
                return sbx_error_set(err, 0, "option -%c/--%s needs a value (see `sbx run --help`)", optopt, name);
            }
            return sbx_error_set(err, 0, "option %s needs a value (see `sbx run --help`)", argv[optind - 1]);
        default:
            if (optopt && optopt < 256)
                return sbx_error_set(err, 0, "unknown option '-%c' (see `sbx run --help`)", optopt);
            return sbx_error_set(err, 0, "unknown option '%.64s' (see `sbx run --help`)", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return sbx_error_set(err, 0, "missing command: sbx run [OPTIONS] -- CMD [ARGS...]");
    if (argv[optind][0] == '\0')
        return sbx_error_set(err, 0, "empty command name");
    s->argv = argv + optind;
    s->binds = o->binds;
    return 0;
}

/* The command's environment: a clean default set, then -e in order.
 * Nothing of the host's environment leaks in unless asked by name. */
static char **build_env(struct run_opts *o, sbx_error *err)
{
    static char *env[MAX_ENV + 16];
    size_t n = 0;
    char *buf;
    const sbx_spec *s = &o->spec;
#define ADD(...)                                                                                                       \
    do {                                                                                                               \
        if (asprintf(&buf, __VA_ARGS__) < 0)                                                                           \
            return sbx_error_set(err, ENOMEM, "environment"), NULL;                                                    \
        env[n++] = buf;                                                                                                \
    } while (0)
    ADD("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    ADD("HOME=%s", s->home);
    ADD("USER=%s", s->user_name);
    ADD("LOGNAME=%s", s->user_name);
    ADD("HOSTNAME=%s", s->hostname);
    ADD("LANG=C.UTF-8");
    const char *term = getenv("TERM");
    if (term)
        ADD("TERM=%s", term);
    for (size_t i = 0; i < o->n_user_env; i++) {
        const char *kv = o->user_env[i];
        const char *eq = strchr(kv, '=');
        size_t klen = eq ? (size_t) (eq - kv) : strlen(kv);
        if (!eq) {
            const char *hv = getenv(kv);
            if (!hv)
                continue; /* like docker: KEY alone and unset on the host means "not set" */
            ADD("%s=%s", kv, hv);
        } else {
            ADD("%s", kv);
        }
        /* a later setting of the same key replaces the earlier one */
        for (size_t j = 0; j + 1 < n; j++) {
            if (strncmp(env[j], env[n - 1], klen + 1) == 0) {
                free(env[j]);
                env[j] = env[n - 1];
                n--;
                break;
            }
        }
    }
#undef ADD
    env[n] = NULL;
    return env;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

struct outcome {
    bool exited;
    sbx_exit ex;
    bool exec_failed;
    int exec_stage;
    bool timed_out;
    int ignored_signal; /* forwarded, not obeyed within STOP_GRACE_MS: we killed */
};

/* Watch the control socket, signals and the clock until sbx-init ends. */
static void supervise(sbx_sandbox *sb, int sigfd, uint64_t timeout_ms, struct outcome *out)
{
    uint64_t start = now_ms();
    uint64_t kill_at = timeout_ms ? start + timeout_ms : 0;
    uint32_t grace_signal = 0;
    struct pollfd pfd[2] = { { sb->ctl_fd, POLLIN, 0 }, { sigfd, POLLIN, 0 } };
    for (;;) {
        int wait = -1;
        if (kill_at) {
            uint64_t now = now_ms();
            if (now >= kill_at) {
                if (grace_signal)
                    out->ignored_signal = (int) grace_signal;
                else
                    out->timed_out = true;
                kill(sb->init_pid, SIGKILL);
                return;
            }
            wait = (int) (kill_at - now);
        }
        int r = poll(pfd, 2, wait);
        if (r < 0 && errno != EINTR)
            return;
        if (r <= 0)
            continue;
        if (pfd[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sigfd, &si, sizeof si) == (ssize_t) sizeof si) {
                uint32_t sig = si.ssi_signo;
                sbx_ctl_send(sb->ctl_fd, SBX_MSG_SIGNAL, &sig, sizeof sig);
                /* The command gets a grace period to exit on its own. */
                uint64_t grace = now_ms() + STOP_GRACE_MS;
                if (!kill_at || grace < kill_at) {
                    kill_at = grace;
                    grace_signal = sig;
                }
            }
        }
        if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            uint32_t type;
            uint8_t *payload = NULL;
            size_t len;
            r = sbx_ctl_recv(sb->ctl_fd, &type, &payload, &len);
            if (r <= 0)
                return; /* init is gone */
            sbx_reader rd = { payload, payload + len, false };
            if (type == SBX_MSG_STARTED) {
                /* sbx-init has left the workload's cgroup */
                sbx_error e = { 0 };
                if (sbx_cgroup_init_left(&sb->cg, &e) < 0)
                    fprintf(stderr, "sbx: warning: %s\n", e.msg);
            } else if (type == SBX_MSG_EXIT) {
                sbx_read_u32(&rd); /* pid */
                uint32_t code = sbx_read_u32(&rd), sig = sbx_read_u32(&rd);
                /* from inside the sandbox: only values a wait status can hold */
                out->exited = !rd.bad && code <= 255 && sig < 65 && !(code && sig);
                out->ex.exit_code = (int) code;
                out->ex.signal = (int) sig;
            } else if (type == SBX_MSG_EXEC_FAILED) {
                out->ex.exec_errno = (int) (sbx_read_u32(&rd) & 0xfff);
                out->exec_stage = (int) (sbx_read_u32(&rd) & 0xf);
                snprintf(out->ex.message, sizeof out->ex.message, "%s", sbx_read_str(&rd));
                out->exec_failed = !rd.bad;
            }
            free(payload);
        }
    }
}

/* What run() allocates, released by sbx_cmd_run on every path. */
struct run_res {
    char **env;
    sbx_cg_host host;
};

static int run(int argc, char **argv, struct run_res *res)
{
    static struct run_opts o;
    sbx_error err = { 0 };
    sbx_spec_init(&o.spec);
    sbx_spec *spec = &o.spec;
    if (parse_options(argc, argv, &o, &err) < 0)
        return fail(&err);

    if (geteuid() != 0) {
        sbx_error_set(&err, 0, "sbx run needs root: it maps the sandbox to an unprivileged uid range and creates "
                               "cgroups (try sudo)");
        return fail(&err);
    }
    const char *home = getenv("SBX_HOME");
    if (home && *home)
        spec->sbx_home = home;
    if (sbx_userns_uid_base(&spec->uid_base, &err) < 0)
        return fail(&err);

    /* identity */
    uint8_t rnd[SBX_ID_LEN / 2];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t) sizeof rnd) {
        sbx_error_set(&err, errno, "getrandom");
        return fail(&err);
    }
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(spec->id + 2 * i, 3, "%02x", rnd[i]);
    if (!spec->hostname[0])
        snprintf(spec->hostname, sizeof spec->hostname, "sbx-%.*s", SBX_SHORT_ID, spec->id);

    sbx_template tpl;
    if (sbx_template_open(&tpl, spec->sbx_home, spec->template_name, spec->uid_base, &err) < 0)
        return fail(&err);
    sbx_user user;
    /* the template's defaults, unless the command line says otherwise */
    if (sbx_template_lookup_user(&tpl, o.user ? o.user : tpl.user[0] ? tpl.user : "user", &user, &err) < 0)
        return fail(&err);
    spec->uid = user.uid;
    spec->gid = user.gid;
    spec->home = user.home;
    spec->user_name = user.name;
    bool cwd_is_default = !spec->cwd;
    if (cwd_is_default)
        spec->cwd = tpl.workdir[0] ? tpl.workdir : user.home;
    char **env = res->env = build_env(&o, &err);
    if (!env)
        return fail(&err);

    char init_path[PATH_MAX];
    if (sbx_find_init(init_path, sizeof init_path, &err) < 0)
        return fail(&err);
    sbx_cg_host *host = &res->host;
    if (sbx_cg_host_detect(host, getenv("SBX_CGROUP_PARENT"), &err) < 0 || sbx_cg_host_prepare(host, &err) < 0)
        return fail(&err);

    /* Signals we forward are taken through a signalfd; the sandbox's first
     * process restores the mask before exec. */
    sigset_t mask;
    sigemptyset(&mask);
    int fwd[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH };
    for (size_t i = 0; i < sizeof fwd / sizeof *fwd; i++)
        sigaddset(&mask, fwd[i]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    _cleanup_close_ int sigfd = signalfd(-1, &mask, SFD_CLOEXEC);
    if (sigfd < 0) {
        sbx_error_set(&err, errno, "signalfd");
        return fail(&err);
    }

    sbx_sandbox sb;
    if (sbx_sandbox_start(&sb, spec, &tpl, host, init_path, true, &err) < 0)
        return fail(&err);

    sbx_buf req = { 0 };
    uint32_t flags = SBX_EXEC_MAIN | (cwd_is_default ? SBX_EXEC_CWD_OPTIONAL : 0);
    sbx_exec_req_encode(&req, spec->uid, spec->gid, flags, 0, spec->cwd, spec->argv, env);
    if (req.failed) {
        sbx_error_set(&err, E2BIG, "command line and environment");
        sbx_sandbox_destroy(&sb, NULL);
        return fail(&err);
    }
    sbx_ctl_send(sb.ctl_fd, SBX_MSG_EXEC, req.data, req.len);
    sbx_buf_free(&req);

    struct outcome out = { 0 };
    supervise(&sb, sigfd, spec->timeout_ms, &out);

    uint64_t ooms = sbx_cgroup_oom_kills(&sb.cg);
    sbx_error derr = { 0 };
    int destroyed = sbx_sandbox_destroy(&sb, &derr);
    if (destroyed < 0)
        fprintf(stderr, "sbx: warning: cleanup: %s\n", derr.msg);

    char buf[64];
    if (out.timed_out) {
        fprintf(stderr, "sbx: killed: timeout after %s\n", sbx_format_duration(spec->timeout_ms, buf, sizeof buf));
        return SBX_EXIT_TIMEOUT;
    }
    if (out.ignored_signal) {
        fprintf(stderr, "sbx: killed: the command did not exit within %ds of %s\n", STOP_GRACE_MS / 1000,
                strsignal(out.ignored_signal));
        return 128 + SIGKILL;
    }
    if (out.exec_failed) {
        fprintf(stderr, "sbx: %s\n", out.ex.message);
        if (out.exec_stage == 0)
            return SBX_EXIT_FAILURE;
        if (out.ex.exec_errno == ENOENT && out.exec_stage == 3)
            return SBX_EXIT_NOT_FOUND;
        return SBX_EXIT_CANNOT_EXEC;
    }
    if (!out.exited) {
        fprintf(stderr, "sbx: the sandbox ended before reporting the command's status\n");
        return SBX_EXIT_FAILURE;
    }
    if (out.ex.signal == SIGKILL && ooms > 0) {
        fprintf(stderr, "sbx: killed: out of memory (limit %s)\n",
                sbx_format_size(spec->memory_bytes, buf, sizeof buf));
        return SBX_EXIT_OOM;
    }
    if (ooms > 0)
        fprintf(stderr, "sbx: note: the out-of-memory killer ended %" PRIu64 " process(es) in the sandbox (limit %s)\n",
                ooms, sbx_format_size(spec->memory_bytes, buf, sizeof buf));
    if (out.ex.signal)
        return 128 + out.ex.signal;
    return out.ex.exit_code;
}

int sbx_cmd_run(int argc, char **argv)
{
    struct run_res res = { 0 };
    int status = run(argc, argv, &res);
    for (char **e = res.env; e && *e; e++)
        free(*e);
    sbx_cg_host_free(&res.host);
    return status;
}
