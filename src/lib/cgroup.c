/* cgroup.c - see cgroup.h for the layout and the reasoning behind it. */
#define _GNU_SOURCE
#include "cgroup.h"
#include "cleanup.h"
#include "fsutil.h"
#include "reaper.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const v1_controllers[] = { "memory", "cpu", "pids" };
/* The same three, as cgroup v2's subtree_control wants them. */
#define V2_ENABLE "+memory +cpu +pids"
#define N_V1 (sizeof v1_controllers / sizeof v1_controllers[0])

/* Does the comma-separated list contain `word` as a whole element? */
static bool list_has(const char *list, size_t len, const char *word)
{
    size_t wl = strlen(word);
    const char *p = list, *end = list + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t) (end - p));
        size_t el = comma ? (size_t) (comma - p) : (size_t) (end - p);
        if (el == wl && memcmp(p, word, wl) == 0)
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

/* Does the space-separated list (cgroup.subtree_control) contain `word`? */
static bool words_have(const char *list, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += wl) {
        bool start = p == list || p[-1] == ' ';
        bool end = p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n';
        if (start && end)
            return true;
    }
    return false;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_octal(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' &&
            p[3] <= '7') {
            *o++ = (char) ((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

struct cg_mount {
    char root[PATH_MAX];
    char point[PATH_MAX];
};

/* Find the mount of fstype (and, for v1, carrying `controller`). */
static bool find_mount(const char *mountinfo, const char *fstype, const char *controller, struct cg_mount *out)
{
    const char *line = mountinfo;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t) (nl - line) : strlen(line);
        char buf[PATH_MAX * 2 + 512];
        if (len < sizeof buf) {
            memcpy(buf, line, len);
            buf[len] = '\0';
            char *sep = strstr(buf, " - ");
            if (sep) {
                *sep = '\0';
                char *post = sep + 3;
                char *fs = strtok(post, " ");
                strtok(NULL, " "); /* source */
                char *superopts = strtok(NULL, " ");
                char *f[5] = { 0 };
                char *save = NULL, *tok = strtok_r(buf, " ", &save);
                for (int i = 0; i < 5 && tok; i++, tok = strtok_r(NULL, " ", &save))
                    f[i] = tok;
                if (fs && f[4] && strcmp(fs, fstype) == 0 &&
                    (!controller || (superopts && list_has(superopts, strlen(superopts), controller)))) {
                    snprintf(out->root, sizeof out->root, "%s", f[3]);
                    snprintf(out->point, sizeof out->point, "%s", f[4]);
                    unescape_octal(out->root);
                    unescape_octal(out->point);
                    return true;
                }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

/* Our path in the hierarchy that has `controller` (v1), or "0::" (v2 when
 * controller is NULL). */
static bool find_own_path(const char *proc_cgroup, const char *controller, char *out, size_t cap)
{
    const char *line = proc_cgroup;
    while (line && *line) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t) (nl - line) : strlen(line);
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t) (c1 + 1 - line)) : NULL;
        if (c2) {
            const char *list = c1 + 1;
            size_t list_len = (size_t) (c2 - list);
            bool match = controller ? list_has(list, list_len, controller)
                                    : (list_len == 0 && c1 - line == 1 && line[0] == '0');
            if (match) {
                size_t pl = len - (size_t) (c2 + 1 - line);
                if (pl >= cap)
                    return false;
                memcpy(out, c2 + 1, pl);
                out[pl] = '\0';
                return true;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return false;
}

/* Directory of cgroup `path` (as /proc/self/cgroup shows it) on mount m. */
static char *join_cgroup_dir(const struct cg_mount *m, const char *path)
{
    size_t rl = strlen(m->root);
    const char *rel = path;
    /* A bind-mounted sub-hierarchy (mount root != "/") shows our path
     * relative to the hierarchy; strip the part the mount already covers. */
    if (rl > 1 && strncmp(path, m->root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0'))
        rel = path + rl;
    char *out = NULL;
    if (asprintf(&out, "%s%s%s", m->point, (*rel == '/' || *rel == '\0') ? "" : "/",
                 strcmp(rel, "/") == 0 ? "" : rel) < 0)
        return NULL;
    return out;
}

void sbx_cg_host_free(sbx_cg_host *host)
{
    for (int i = 0; i < host->n; i++) {
        free(host->base[i]);
        free(host->ctrl[i]);
    }
    memset(host, 0, sizeof *host);
}

int sbx_cg_host_parse(sbx_cg_host *host, const char *mountinfo, const char *proc_cgroup,
                      const char *parent_override, sbx_error *err)
{
    memset(host, 0, sizeof *host);
    struct cg_mount m;
    char own[PATH_MAX];
    if (parent_override && parent_override[0] != '/')
        return sbx_error_set(err, 0, "cgroup parent '%s' must be an absolute cgroup path", parent_override);

    /* v1 (legacy or hybrid): every controller we limit must be on a v1
     * hierarchy.  Co-mounted controllers (cpu,cpuacct) share a directory. */
    size_t found = 0;
    for (size_t i = 0; i < N_V1; i++) {
        if (!find_mount(mountinfo, "cgroup", v1_controllers[i], &m))
            break;
        if (!parent_override && !find_own_path(proc_cgroup, v1_controllers[i], own, sizeof own))
            break;
        char *dir = join_cgroup_dir(&m, parent_override ? parent_override : own);
        if (!dir)
            break;
        int dup = -1;
        for (int j = 0; j < host->n; j++)
            if (strcmp(host->base[j], dir) == 0)
                dup = j;
        if (dup >= 0) {
            /* co-mounted controllers share a directory: remember them all,
             * so every limit is written there ("memory,pids") */
            char *list = NULL;
            free(dir);
            if (asprintf(&list, "%s,%s", host->ctrl[dup], v1_controllers[i]) < 0)
                break;
            free(host->ctrl[dup]);
            host->ctrl[dup] = list;
        } else {
            host->base[host->n] = dir;
            host->ctrl[host->n] = strdup(v1_controllers[i]);
            host->n++;
        }
        found++;
    }
    if (found == N_V1) {
        host->mode = SBX_CG_V1;
        return 0;
    }
    sbx_cg_host_free(host);

    if (find_mount(mountinfo, "cgroup2", NULL, &m)) {
        if (!parent_override && !find_own_path(proc_cgroup, NULL, own, sizeof own))
            return sbx_error_set(err, 0, "cgroup v2 is mounted at %s but /proc/self/cgroup has no '0::' entry",
                                 m.point);
        host->base[0] = join_cgroup_dir(&m, parent_override ? parent_override : own);
        host->ctrl[0] = NULL;
        host->n = 1;
        host->mode = SBX_CG_V2;
        return host->base[0] ? 0 : sbx_error_set(err, ENOMEM, "cgroup path");
    }
    return sbx_error_set(err, 0,
                         "no usable cgroups: sbx needs the memory, cpu and pids controllers on cgroup v1 "
                         "hierarchies or a cgroup v2 mount (is /sys/fs/cgroup mounted?)");
}

int sbx_cg_host_detect(sbx_cg_host *host, const char *parent_override, sbx_error *err)
{
    _cleanup_free_ char *mi = sbx_read_file_alloc("/proc/self/mountinfo", NULL);
    if (!mi)
        return sbx_error_set(err, errno, "read /proc/self/mountinfo");
    _cleanup_free_ char *pc = sbx_read_file_alloc("/proc/self/cgroup", NULL);
    if (!pc)
        return sbx_error_set(err, errno, "read /proc/self/cgroup");
    if (sbx_cg_host_parse(host, mi, pc, parent_override, err) < 0)
        return -1;
    /* A process that sbx_cg_host_prepare moved into its leaf "sbx-self"
     * earlier (sbxd before a restart) nests sandboxes where it did then. */
    size_t bl = host->mode == SBX_CG_V2 && host->base[0] ? strlen(host->base[0]) : 0;
    if (!parent_override && bl > 9 && strcmp(host->base[0] + bl - 9, "/sbx-self") == 0)
        host->base[0][bl - 9] = '\0';
    return 0;
}

int sbx_cg_host_add_freezer(sbx_cg_host *host, const char *parent_override, sbx_error *err)
{
    if (host->mode == SBX_CG_V2)
        return 1;
    for (int i = 0; i < host->n; i++)
        if (host->ctrl[i] && list_has(host->ctrl[i], strlen(host->ctrl[i]), "freezer"))
            return 1;
    _cleanup_free_ char *mi = sbx_read_file_alloc("/proc/self/mountinfo", NULL);
    _cleanup_free_ char *pc = sbx_read_file_alloc("/proc/self/cgroup", NULL);
    struct cg_mount m;
    char own[PATH_MAX];
    if (!mi || !pc || !find_mount(mi, "cgroup", "freezer", &m)) {
        sbx_error_set(err, 0, "no cgroup v1 freezer hierarchy is mounted");
        return 0;
    }
    if (!parent_override && !find_own_path(pc, "freezer", own, sizeof own)) {
        sbx_error_set(err, 0, "/proc/self/cgroup names no freezer cgroup");
        return 0;
    }
    char *dir = join_cgroup_dir(&m, parent_override ? parent_override : own);
    struct stat st;
    if (!dir || stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        sbx_error_set(err, ENOENT, "freezer cgroup %s", dir ? dir : "(none)");
        free(dir);
        return 0;
    }
    for (int i = 0; i < host->n; i++)
        if (strcmp(host->base[i], dir) == 0) { /* co-mounted with one we use */
            char *list = NULL;
            free(dir);
            if (asprintf(&list, "%s,freezer", host->ctrl[i]) < 0)
                return sbx_error_set(err, ENOMEM, "cgroup controllers"), 0;
            free(host->ctrl[i]);
            host->ctrl[i] = list;
            return 1;
        }
    if (host->n == SBX_CG_MAX_HIER) {
        free(dir);
        sbx_error_set(err, 0, "too many cgroup hierarchies");
        return 0;
    }
    host->base[host->n] = dir;
    host->ctrl[host->n] = strdup("freezer");
    host->n++;
    return 1;
}

#define HOLD_PREFIX ".sbx-freezer-hold-"

static const char *host_freezer_base(const sbx_cg_host *host)
{
    for (int i = 0; host->mode == SBX_CG_V1 && i < host->n; i++)
        if (host->ctrl[i] && list_has(host->ctrl[i], strlen(host->ctrl[i]), "freezer"))
            return host->base[i];
    return NULL;
}

static void remove_hold(const char *dir)
{
    char state[PATH_MAX];
    snprintf(state, sizeof state, "%s/freezer.state", dir);
    sbx_write_file(state, "THAWED");
    rmdir(dir);
}

void sbx_cg_host_hold_freezer(const sbx_cg_host *host)
{
    const char *base = host_freezer_base(host);
    if (!base)
        return;
    DIR *d = opendir(base);
    struct dirent *e;
    while (d && (e = readdir(d))) { /* left by an sbxd that was killed */
        if (strncmp(e->d_name, HOLD_PREFIX, strlen(HOLD_PREFIX)) != 0)
            continue;
        long pid = strtol(e->d_name + strlen(HOLD_PREFIX), NULL, 10);
        if (pid > 0 && kill((pid_t) pid, 0) < 0 && errno == ESRCH) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
            remove_hold(dir);
        }
    }
    if (d)
        closedir(d);
    char dir[PATH_MAX], state[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/" HOLD_PREFIX "%d", base, (int) getpid());
    snprintf(state, sizeof state, "%s/freezer.state", dir);
    if (mkdir(dir, 0755) == 0 || errno == EEXIST)
        sbx_write_file(state, "FROZEN"); /* best effort: only speed depends on it */
}

void sbx_cg_host_release_freezer(const sbx_cg_host *host)
{
    const char *base = host_freezer_base(host);
    if (!base)
        return;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/" HOLD_PREFIX "%d", base, (int) getpid());
    remove_hold(dir);
}

static int write_at(sbx_error *err, const char *dir, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int write_at(sbx_error *err, const char *dir, const char *file, const char *fmt, ...)
{
    char path[PATH_MAX], value[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int r = sbx_write_file(path, value);
    if (r < 0)
        return sbx_error_set(err, -r, "write '%s' to %s", value, path);
    return 0;
}

/* cgroup v2 forbids controllers in the subtree of a cgroup that holds
 * processes.  If our own cgroup holds nobody but us (e.g. a systemd scope
 * started with Delegate=yes for sbx), move ourselves into a leaf "sbx-self"
 * so the controllers can be enabled.  systemd removes the leaf with the scope. */
static int v2_enable_controllers(const char *parent, sbx_error *err)
{
    char path[PATH_MAX], buf[4096];
    snprintf(path, sizeof path, "%s/cgroup.subtree_control", parent);
    ssize_t n = sbx_read_file(path, buf, sizeof buf);
    if (n < 0)
        return sbx_error_set(err, (int) -n, "read %s", path);
    bool have = true;
    for (size_t i = 0; i < N_V1; i++)
        if (!words_have(buf, v1_controllers[i]))
            have = false;
    if (have)
        return 0;
    int r = sbx_write_file(path, V2_ENABLE);
    if (r == 0)
        return 0;
    if (r != -EBUSY)
        return sbx_error_set(err, -r, "enable memory, cpu and pids controllers in %s (are they delegated to this cgroup?)",
                             path);
    char procs[PATH_MAX];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", parent);
    n = sbx_read_file(procs, buf, sizeof buf);
    char self[32];
    snprintf(self, sizeof self, "%d\n", (int) getpid());
    if (n < 0 || strcmp(buf, self) != 0)
        return sbx_error_set(err, 0,
                             "cgroup v2: cannot nest sandbox cgroups under %s: it holds other processes, and v2 "
                             "allows controllers only below process-free cgroups. Run sbx in a delegated cgroup "
                             "of its own (e.g. `systemd-run --scope -p Delegate=yes sbx run ...`) or set "
                             "SBX_CGROUP_PARENT to one",
                             parent);
    char leaf[PATH_MAX];
    snprintf(leaf, sizeof leaf, "%s/sbx-self", parent);
    if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
        return sbx_error_set(err, errno, "mkdir %s", leaf);
    if (write_at(err, leaf, "cgroup.procs", "0") < 0)
        return -1;
    r = sbx_write_file(path, V2_ENABLE);
    if (r < 0)
        return sbx_error_set(err, -r, "enable controllers in %s", path);
    return 0;
}

static int open_procs(const char *dir, const char *sub, bool cloexec, sbx_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s/cgroup.procs", dir, sub);
    int fd = open(path, O_WRONLY | (cloexec ? O_CLOEXEC : 0));
    if (fd < 0)
        return sbx_error_set(err, errno, "open %s", path);
    return fd;
}

/* `ctrls` lists the controllers of this hierarchy that we limit. */
/* init_room: 1 while sbx-init is still in work (a new sandbox: it leaves
 * once the command runs, and sbx_cgroup_init_left() then sets the exact
 * limit), 0 once it has left. */
static int set_limits_v1(const char *dir, const char *ctrls, const sbx_cg_limits *l, uint32_t init_room,
                         sbx_error *err)
{
    char work[PATH_MAX];
    size_t cl = strlen(ctrls);
    snprintf(work, sizeof work, "%s/work", dir);
    if (list_has(ctrls, cl, "memory")) {
        /* memsw exists only with swap accounting; where it does, memory plus
         * swap gets the same limit: no swap for the sandbox.  The kernel
         * wants memory <= memsw at every step: raising a limit (a pooled
         * sandbox given more) needs memsw first, lowering needs it last. */
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/memory.memsw.limit_in_bytes", work);
        bool memsw = access(p, F_OK) == 0;
        char mem[32];
        snprintf(mem, sizeof mem, "%" PRIu64, l->memory_bytes);
        if (memsw)
            sbx_write_file(p, mem); /* may fail when lowering: done again below */
        if (write_at(err, work, "memory.limit_in_bytes", "%" PRIu64, l->memory_bytes) < 0)
            return -1;
        if (memsw && write_at(err, work, "memory.memsw.limit_in_bytes", "%" PRIu64, l->memory_bytes) < 0)
            return -1;
        snprintf(p, sizeof p, "%s/memory.swappiness", work);
        sbx_write_file(p, "0"); /* best effort: refused on some kernels */
    }
    if (list_has(ctrls, cl, "cpu")) {
        if (write_at(err, work, "cpu.cfs_period_us", "100000") < 0 ||
            write_at(err, work, "cpu.cfs_quota_us", "%" PRIu32, l->millicpus * 100) < 0)
            return -1;
    }
    if (list_has(ctrls, cl, "pids")) {
        if (write_at(err, work, "pids.max", "%" PRIu32, l->pids + init_room) < 0)
            return -1;
    }
    return 0;
}

static int set_limits_v2(const char *dir, const sbx_cg_limits *l, uint32_t init_room, sbx_error *err)
{
    char work[PATH_MAX], p[PATH_MAX];
    snprintf(work, sizeof work, "%s/work", dir);
    if (write_at(err, work, "memory.max", "%" PRIu64, l->memory_bytes) < 0)
        return -1;
    snprintf(p, sizeof p, "%s/memory.swap.max", work);
    if (access(p, F_OK) == 0 && write_at(err, work, "memory.swap.max", "0") < 0)
        return -1;
    if (write_at(err, work, "cpu.max", "%" PRIu32 " 100000", l->millicpus * 100) < 0 ||
        write_at(err, work, "pids.max", "%" PRIu32, l->pids + init_room) < 0) /* see set_limits_v1 */
        return -1;
    return 0;
}

int sbx_cg_host_prepare(const sbx_cg_host *host, sbx_error *err)
{
    return host->mode == SBX_CG_V2 ? v2_enable_controllers(host->base[0], err) : 0;
}

int sbx_cgroup_create(sbx_cgroup *cg, const sbx_cg_host *host, const char *id, const sbx_cg_limits *limits,
                      sbx_reaper *reaper, sbx_error *err)
{
    memset(cg, 0, sizeof *cg);
    cg->mode = host->mode;
    cg->memory_limit = limits->memory_bytes;
    cg->pids = limits->pids;
    cg->memory_index = 0;
    for (int i = 0; i <= SBX_CG_MAX_HIER; i++)
        cg->init_procs[i] = cg->work_procs[i] = -1;

    for (int i = 0; i < host->n; i++) {
        if (asprintf(&cg->dir[i], "%s/sbx-%s", host->base[i], id) < 0) {
            cg->dir[i] = NULL;
            goto fail_nomem;
        }
        cg->ctrl[i] = host->ctrl[i] ? strdup(host->ctrl[i]) : NULL;
        cg->n = i + 1;
        if (host->ctrl[i] && list_has(host->ctrl[i], strlen(host->ctrl[i]), "memory"))
            cg->memory_index = i;
        sbx_reaper_add_dir(reaper, cg->dir[i]);
        if (mkdir(cg->dir[i], 0755) < 0) {
            sbx_error_set(err, errno, "create cgroup %s", cg->dir[i]);
            cg->n = i; /* not ours to remove */
            goto fail;
        }
        if (host->mode == SBX_CG_V2 && write_at(err, cg->dir[i], "cgroup.subtree_control", V2_ENABLE) < 0)
            goto fail;
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/init", cg->dir[i]);
        sbx_reaper_add_dir(reaper, sub);
        if (mkdir(sub, 0755) < 0) {
            sbx_error_set(err, errno, "create cgroup %s", sub);
            goto fail;
        }
        snprintf(sub, sizeof sub, "%s/work", cg->dir[i]);
        sbx_reaper_add_dir(reaper, sub);
        if (mkdir(sub, 0755) < 0) {
            sbx_error_set(err, errno, "create cgroup %s", sub);
            goto fail;
        }
        int r = host->mode == SBX_CG_V2 ? set_limits_v2(cg->dir[i], limits, 1, err)
                                        : set_limits_v1(cg->dir[i], host->ctrl[i], limits, 1, err);
        if (r < 0)
            goto fail;
        if ((cg->init_procs[i] = open_procs(cg->dir[i], "init", true, err)) < 0 ||
            (cg->work_procs[i] = open_procs(cg->dir[i], "work", true, err)) < 0)
            goto fail;
    }
    return 0;

fail_nomem:
    sbx_error_set(err, ENOMEM, "cgroup path");
fail:
    sbx_cgroup_destroy(cg, NULL);
    return -1;
}

int sbx_cgroup_open(sbx_cgroup *cg, const sbx_cg_host *host, const char *id, sbx_error *err)
{
    memset(cg, 0, sizeof *cg);
    cg->mode = host->mode;
    for (int i = 0; i <= SBX_CG_MAX_HIER; i++)
        cg->init_procs[i] = cg->work_procs[i] = -1;
    for (int i = 0; i < host->n; i++) {
        if (asprintf(&cg->dir[i], "%s/sbx-%s", host->base[i], id) < 0) {
            cg->dir[i] = NULL;
            sbx_cgroup_destroy(cg, NULL);
            return sbx_error_set(err, ENOMEM, "cgroup path");
        }
        cg->ctrl[i] = host->ctrl[i] ? strdup(host->ctrl[i]) : NULL;
        cg->n = i + 1;
        if (host->ctrl[i] && list_has(host->ctrl[i], strlen(host->ctrl[i]), "memory"))
            cg->memory_index = i;
    }
    return 0;
}

static uint64_t read_u64_at(const char *dir, const char *file)
{
    char path[PATH_MAX], buf[64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (sbx_read_file(path, buf, sizeof buf) <= 0)
        return 0;
    if (strncmp(buf, "max", 3) == 0)
        return UINT64_MAX;
    return strtoull(buf, NULL, 10);
}

/* utime+stime+cutime+cstime of every process listed in dir/cgroup.procs. */
static double cpu_of(const char *dir, uint32_t *count)
{
    static long hz;
    if (!hz)
        hz = sysconf(_SC_CLK_TCK);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    _cleanup_free_ char *procs = sbx_read_file_alloc(path, NULL);
    double total = 0;
    for (char *save = NULL, *t = procs ? strtok_r(procs, "\n", &save) : NULL; t; t = strtok_r(NULL, "\n", &save)) {
        char buf[1024];
        snprintf(path, sizeof path, "/proc/%ld/stat", strtol(t, NULL, 10));
        ssize_t n = sbx_read_file(path, buf, sizeof buf);
        if (n <= 0)
            continue;
        /* fields after "(comm)": state ppid pgrp session tty tpgid flags
         * minflt cminflt majflt cmajflt utime stime cutime cstime */
        const char *rp = strrchr(buf, ')');
        unsigned long long ut, st, cut, cst;
        if (!rp || sscanf(rp + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &ut, &st,
                          &cut, &cst) != 4)
            continue;
        total += (double) (ut + st + cut + cst) / (double) hz;
        if (count)
            (*count)++;
    }
    return total;
}

int sbx_cgroup_stats(const sbx_cgroup *cg, sbx_cg_stats *st)
{
    memset(st, 0, sizeof *st);
    if (cg->n == 0)
        return -ENOENT;
    char work[PATH_MAX], init[PATH_MAX];
    const char *mdir = cg->dir[cg->memory_index];
    snprintf(work, sizeof work, "%s/work", mdir);
    snprintf(init, sizeof init, "%s/init", mdir);
    uint32_t n = 0;
    st->cpu_seconds = cpu_of(work, &n) + cpu_of(init, NULL);
    if (cg->mode == SBX_CG_V2) {
        st->memory_bytes = read_u64_at(work, "memory.current");
        st->memory_peak_bytes = read_u64_at(work, "memory.peak");
        st->memory_limit_bytes = read_u64_at(work, "memory.max");
    } else {
        st->memory_bytes = read_u64_at(work, "memory.usage_in_bytes");
        st->memory_peak_bytes = read_u64_at(work, "memory.max_usage_in_bytes");
        st->memory_limit_bytes = read_u64_at(work, "memory.limit_in_bytes");
    }
    st->processes = n;
    return 0;
}

int sbx_cgroup_enter_work(const sbx_cgroup *cg, pid_t pid, sbx_error *err)
{
    char buf[16];
    int n = snprintf(buf, sizeof buf, "%d", (int) pid);
    for (int i = 0; cg->work_procs[i] >= 0; i++) {
        if (pwrite(cg->work_procs[i], buf, (size_t) n, 0) < 0)
            return sbx_error_set(err, errno, "move process %d into %s/work", (int) pid, cg->dir[i]);
    }
    return 0;
}

void sbx_cgroup_close_fds(sbx_cgroup *cg)
{
    for (int i = 0; i < SBX_CG_MAX_HIER; i++) {
        if (cg->init_procs[i] >= 0)
            close(cg->init_procs[i]);
        if (cg->work_procs[i] >= 0)
            close(cg->work_procs[i]);
        cg->init_procs[i] = cg->work_procs[i] = -1;
    }
}

void sbx_cgroup_release(sbx_cgroup *cg)
{
    sbx_cgroup_close_fds(cg);
    for (int i = 0; i < SBX_CG_MAX_HIER; i++) {
        free(cg->dir[i]);
        free(cg->ctrl[i]);
        cg->dir[i] = cg->ctrl[i] = NULL;
    }
    cg->n = 0;
}

int sbx_cgroup_set_limits(const sbx_cgroup *cg, const sbx_cg_limits *limits, sbx_error *err)
{
    for (int i = 0; i < cg->n; i++) { /* sbx-init has left work by now: no room for it */
        int r = cg->mode == SBX_CG_V2 ? set_limits_v2(cg->dir[i], limits, 0, err)
                                      : set_limits_v1(cg->dir[i], cg->ctrl[i] ? cg->ctrl[i] : "", limits, 0, err);
        if (r < 0)
            return -1;
    }
    return 0;
}

int sbx_cgroup_init_left(const sbx_cgroup *cg, sbx_error *err)
{
    for (int i = 0; i < cg->n; i++) {
        if (cg->mode == SBX_CG_V1 && !list_has(cg->ctrl[i], strlen(cg->ctrl[i]), "pids"))
            continue;
        char work[PATH_MAX];
        snprintf(work, sizeof work, "%s/work", cg->dir[i]);
        if (write_at(err, work, "pids.max", "%" PRIu32, cg->pids) < 0)
            return -1;
    }
    return 0;
}

uint64_t sbx_cgroup_oom_kills(const sbx_cgroup *cg)
{
    if (cg->n == 0)
        return 0;
    char path[PATH_MAX], buf[2048];
    snprintf(path, sizeof path, "%s/work/%s", cg->dir[cg->memory_index],
             cg->mode == SBX_CG_V2 ? "memory.events" : "memory.oom_control");
    if (sbx_read_file(path, buf, sizeof buf) < 0)
        return 0;
    const char *p = strstr(buf, "oom_kill ");
    if (!p)
        return 0;
    return strtoull(p + 9, NULL, 10);
}

/* Kill every process listed in dir/cgroup.procs; returns how many were listed. */
static int kill_procs(const char *dir)
{
    char path[PATH_MAX], buf[8192];
    snprintf(path, sizeof path, "%s/cgroup.procs", dir);
    if (sbx_read_file(path, buf, sizeof buf) <= 0)
        return 0;
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, "\n", &save); t; t = strtok_r(NULL, "\n", &save)) {
        pid_t pid = (pid_t) strtol(t, NULL, 10);
        if (pid > 0) {
            kill(pid, SIGKILL);
            n++;
        }
    }
    return n;
}

/* rmdir, retrying while the kernel still counts exiting tasks (EBUSY). */
static int rmdir_retry(const char *dir, bool kill_first)
{
    struct timespec delay = { 0, 1000000 }; /* 1 ms, doubling, ~4 s in all */
    for (int attempt = 0; attempt < 12; attempt++) {
        if (rmdir(dir) == 0 || errno == ENOENT)
            return 0;
        if (errno != EBUSY)
            return -errno;
        if (kill_first)
            kill_procs(dir);
        nanosleep(&delay, NULL);
        if (delay.tv_nsec < 500000000)
            delay.tv_nsec *= 2;
    }
    return -EBUSY;
}

/* The work directory of the hierarchy holding the v1 freezer, or NULL. */
static const char *freezer_dir(const sbx_cgroup *cg)
{
    for (int i = 0; i < cg->n; i++)
        if (cg->mode == SBX_CG_V1 && cg->ctrl[i] && list_has(cg->ctrl[i], strlen(cg->ctrl[i]), "freezer"))
            return cg->dir[i];
    return NULL;
}

/* Has the kernel finished freezing (or thawing) `work`? */
static bool freeze_done(const sbx_cgroup *cg, bool frozen)
{
    char path[PATH_MAX], buf[256];
    if (cg->mode == SBX_CG_V2) {
        snprintf(path, sizeof path, "%s/work/cgroup.events", cg->dir[0]);
        if (sbx_read_file(path, buf, sizeof buf) < 0)
            return false;
        const char *f = strstr(buf, "frozen ");
        return f && (f[7] == '1') == frozen;
    }
    snprintf(path, sizeof path, "%s/work/freezer.state", freezer_dir(cg));
    if (sbx_read_file(path, buf, sizeof buf) < 0)
        return false;
    return strncmp(buf, frozen ? "FROZEN" : "THAWED", 6) == 0;
}

int sbx_cgroup_freeze(const sbx_cgroup *cg, bool frozen, sbx_error *err)
{
    if (cg->n == 0)
        return sbx_error_set(err, ENOTSUP, "no cgroups");
    char work[PATH_MAX];
    if (cg->mode == SBX_CG_V2) {
        snprintf(work, sizeof work, "%s/work", cg->dir[0]);
        if (write_at(err, work, "cgroup.freeze", frozen ? "1" : "0") < 0)
            return -1;
    } else {
        const char *dir = freezer_dir(cg);
        if (!dir)
            return sbx_error_set(err, ENOTSUP, "pausing needs the cgroup v1 freezer hierarchy (not mounted, or "
                                               "not found when sbxd started)");
        snprintf(work, sizeof work, "%s/work", dir);
        if (write_at(err, work, "freezer.state", frozen ? "FROZEN" : "THAWED") < 0)
            return -1;
    }
    /* Freezing completes once every task has reached the refrigerator: a
     * task in an uninterruptible sleep (I/O) delays it; give up after 5 s
     * rather than leave the sandbox half frozen. */
    char state_file[PATH_MAX];
    snprintf(state_file, sizeof state_file, "%s/freezer.state", work);
    for (int i = 0; i < 5000; i++) {
        if (freeze_done(cg, frozen))
            return 0;
        struct timespec ts = { 0, i < 100 ? 100 * 1000 : 1000 * 1000 };
        nanosleep(&ts, NULL);
        /* v1 re-walks the tasks on every write: one that a fork or an exec
         * let slip past the first walk is caught by a later one */
        if (cg->mode == SBX_CG_V1 && i % 100 == 99)
            sbx_write_file(state_file, frozen ? "FROZEN" : "THAWED");
    }
    char stuck[256] = "";
    if (frozen) { /* name a task that did not freeze, for whoever debugs it */
        char path[PATH_MAX], procs[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", work);
        ssize_t n = sbx_read_file(path, procs, sizeof procs);
        for (char *t = n > 0 ? strtok(procs, "\n") : NULL; t; t = strtok(NULL, "\n")) {
            char st[512];
            snprintf(path, sizeof path, "/proc/%s/stat", t);
            if (sbx_read_file(path, st, sizeof st) > 0 && !strstr(st, ") D ")) {
                snprintf(stuck, sizeof stuck, " (pid %s is not frozen: %.120s)", t, st);
                break;
            }
        }
    }
    if (frozen) {
        sbx_error e2 = { 0 };
        sbx_cgroup_freeze(cg, false, &e2);
    }
    return sbx_error_set(err, ETIMEDOUT, "the sandbox's processes did not %s within 5 s%s",
                         frozen ? "freeze" : "thaw", stuck);
}

int sbx_cgroup_destroy(sbx_cgroup *cg, sbx_error *err)
{
    int ret = 0;
    sbx_cgroup_close_fds(cg);
    /* A frozen task cannot die (v1 keeps even SIGKILL pending until thaw):
     * thaw a paused sandbox first.  Harmless when it is not frozen. */
    if (cg->mode == SBX_CG_V2 || freezer_dir(cg)) {
        sbx_error ignored = { 0 };
        char work[PATH_MAX];
        snprintf(work, sizeof work, "%s/work", cg->mode == SBX_CG_V2 ? cg->dir[0] : freezer_dir(cg));
        write_at(&ignored, work, cg->mode == SBX_CG_V2 ? "cgroup.freeze" : "freezer.state",
                 cg->mode == SBX_CG_V2 ? "0" : "THAWED");
    }
    for (int i = 0; i < cg->n; i++) {
        if (!cg->dir[i])
            continue;
        char sub[PATH_MAX];
        if (cg->mode == SBX_CG_V2) {
            snprintf(sub, sizeof sub, "%s/cgroup.kill", cg->dir[i]);
            sbx_write_file(sub, "1"); /* kernels before 5.14 lack it: kill_procs below */
        }
        static const char *const subs[] = { "work", "init" };
        for (size_t s = 0; s < 2; s++) {
            snprintf(sub, sizeof sub, "%s/%s", cg->dir[i], subs[s]);
            int r = rmdir_retry(sub, true);
            if (r < 0 && ret == 0)
                ret = sbx_error_set(err, -r, "remove cgroup %s", sub);
        }
        int r = rmdir_retry(cg->dir[i], true);
        if (r < 0 && ret == 0)
            ret = sbx_error_set(err, -r, "remove cgroup %s", cg->dir[i]);
    }
    for (int i = 0; i < SBX_CG_MAX_HIER; i++) {
        free(cg->dir[i]);
        free(cg->ctrl[i]);
        cg->dir[i] = cg->ctrl[i] = NULL;
    }
    cg->n = 0;
    return ret;
}
