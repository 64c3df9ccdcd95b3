/* cgroup.h - resource limits for a sandbox on cgroup v2, v1 and hybrid hosts.
 *
 * Layout, nested under the caller's own cgroup in each hierarchy used:
 *
 *     <own>/sbx-<id>/          the sandbox; its cgroup namespace root
 *     <own>/sbx-<id>/init      sbx-init only: outside the workload's limits,
 *                              so a fork bomb or an OOM in the workload
 *                              cannot take PID 1 down with it
 *     <own>/sbx-<id>/work      every user process; memory, CPU, pids limits
 *
 * Moving a task between cgroups is slow on v1 (every write to cgroup.procs
 * waits for an RCU grace period, ~1 ms each, one per hierarchy), so the
 * sandbox is arranged to need no migration on the critical path: the
 * outside moves the sandbox's first process into `work` while that process
 * builds its root file system; the command inherits `work` by fork; and
 * sbx-init then moves itself to `init` through cgroup.procs fds opened
 * here (handed to init over the control socket).  The kernel checks migration permission against the credentials a
 * file was opened with, so init can do that from inside its user namespace
 * without ever being able to open a cgroup file itself. */
#ifndef SBX_CGROUP_H
#define SBX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define SBX_CG_MAX_HIER 4

typedef enum { SBX_CG_V1 = 1, SBX_CG_V2 = 2 } sbx_cg_mode;

typedef struct sbx_cg_limits {
    uint64_t memory_bytes;
    uint32_t millicpus;
    uint32_t pids;
} sbx_cg_limits;

typedef struct sbx_cgroup {
    sbx_cg_mode mode;
    int n;                         /* hierarchies in use (v2: 1) */
    char *dir[SBX_CG_MAX_HIER];    /* absolute path of <own>/sbx-<id> */
    char *ctrl[SBX_CG_MAX_HIER];   /* v1: our controllers in each hierarchy ("memory", "cpu,pids") */
    int init_procs[SBX_CG_MAX_HIER + 1]; /* cgroup.procs fds, -1 terminated; */
    int work_procs[SBX_CG_MAX_HIER + 1]; /* init's travel into the sandbox */
    int memory_index;              /* which dir[] holds the memory controller */
    uint64_t memory_limit;
    uint32_t pids;
} sbx_cgroup;

/* Where the cgroups of this host live, found once per process. */
typedef struct sbx_cg_host {
    sbx_cg_mode mode;
    int n;
    char *base[SBX_CG_MAX_HIER]; /* the caller's own cgroup directory, per hierarchy */
    char *ctrl[SBX_CG_MAX_HIER]; /* v1: our controllers in each ("memory", "cpu,pids") */
} sbx_cg_host;

/* Inspect /proc/self/mountinfo and /proc/self/cgroup.  `parent_override`
 * (SBX_CGROUP_PARENT) names a cgroup path to nest under instead of our own. */
int sbx_cg_host_detect(sbx_cg_host *host, const char *parent_override, sbx_error *err);

/* Pure parsing step of detection, for unit tests: given the two files'
 * contents, fill host (v1 if memory, cpu and pids are all on v1
 * hierarchies, else v2 if a cgroup2 mount exists). */
int sbx_cg_host_parse(sbx_cg_host *host, const char *mountinfo, const char *proc_cgroup,
                      const char *parent_override, sbx_error *err);
void sbx_cg_host_free(sbx_cg_host *host);

/* Pausing (sbxd): on cgroup v1, also nest sandboxes in the freezer
 * hierarchy, as one more hierarchy (its directory must exist: our own
 * cgroup, or parent_override's).  Returns 1 if pausing is possible (always
 * on v2, where cgroup.freeze is built in), 0 if not (err says why).  Costs
 * one more cgroup migration per sandbox on v1, so `sbx run` does not. */
int sbx_cg_host_add_freezer(sbx_cg_host *host, const char *parent_override, sbx_error *err);

/* cgroup v1 switches its freezer on and off with a static key: freezing
 * the first cgroup of the host costs ~4 ms of code patching, thawing the
 * last ~1.5 ms.  An empty cgroup of ours kept frozen holds the key on, and
 * a pause or resume then costs ~0.1 ms.  hold: make it (and remove those
 * that sbxd processes no longer alive left); release: remove ours.  No-ops
 * without a v1 freezer. */
void sbx_cg_host_hold_freezer(const sbx_cg_host *host);
void sbx_cg_host_release_freezer(const sbx_cg_host *host);

/* Make the host ready to nest sandboxes.  On v2, enable the memory, cpu and
 * pids controllers for our cgroup's children, first moving this process
 * into a leaf "sbx-self" if it is the only one there (v2 allows controllers
 * only below process-free cgroups).  Call before starting any helper
 * process, which would share our cgroup.  No-op on v1. */
int sbx_cg_host_prepare(const sbx_cg_host *host, sbx_error *err);

/* Create <own>/sbx-<id>/{init,work}, set the limits on work, open the
 * cgroup.procs fds. */
struct sbx_reaper;
/* Each directory is announced to `reaper` (if not NULL) before it is made. */
int sbx_cgroup_create(sbx_cgroup *cg, const sbx_cg_host *host, const char *id,
                      const sbx_cg_limits *limits, struct sbx_reaper *reaper, sbx_error *err);

/* Move process `pid` (of our pid namespace) into <sbx>/work. */
int sbx_cgroup_enter_work(const sbx_cgroup *cg, pid_t pid, sbx_error *err);

/* Forget cg without touching the cgroups (fds closed, memory freed). */
void sbx_cgroup_release(sbx_cgroup *cg);

/* Close this process's copies of the procs fds. */
void sbx_cgroup_close_fds(sbx_cgroup *cg);

/* sbx-init has left `work` (it says so with its STARTED frame): the pids
 * limit, one higher until now to count init, becomes exact. */
int sbx_cgroup_init_left(const sbx_cgroup *cg, sbx_error *err);

/* Set the workload's limits anew (a warm-pool sandbox taking its user's
 * limits), after sbx-init left `work`: the pids limit is exact. */
int sbx_cgroup_set_limits(const sbx_cgroup *cg, const sbx_cg_limits *limits, sbx_error *err);

/* Fill cg for an existing sandbox's cgroups (sbxd re-attaching after a
 * restart): paths only, no descriptors, nothing created. */
int sbx_cgroup_open(sbx_cgroup *cg, const sbx_cg_host *host, const char *id, sbx_error *err);

typedef struct sbx_cg_stats {
    double cpu_seconds;        /* every process of the sandbox, living or reaped */
    uint64_t memory_bytes, memory_peak_bytes, memory_limit_bytes;
    uint32_t processes;        /* in the workload (work) */
} sbx_cg_stats;
/* Resource use, read from the kernel on the host side (never from the
 * sandbox): memory and pids from the cgroup files; CPU time as the sum of
 * utime+stime+cutime+cstime over the sandbox's processes, which counts each
 * exited process once (in its reaper's cutime) and needs no cpuacct
 * hierarchy on v1. */
int sbx_cgroup_stats(const sbx_cgroup *cg, sbx_cg_stats *st);

/* Number of OOM kills in the workload so far (0 if unknown). */
uint64_t sbx_cgroup_oom_kills(const sbx_cgroup *cg);

/* Freeze (true) or thaw the workload (`work`: every user process and the
 * zygote; sbx-init stays awake to answer).  Returns when the kernel says
 * the cgroup is frozen (or thawed), or -1 with err: ENOTSUP without a
 * freezer, ETIMEDOUT if freezing did not complete within 5 s (the cgroup is
 * thawed again). */
int sbx_cgroup_freeze(const sbx_cgroup *cg, bool frozen, sbx_error *err);

/* Thaw, kill whatever is left, wait for the cgroups to empty, remove them. */
int sbx_cgroup_destroy(sbx_cgroup *cg, sbx_error *err);

#endif
