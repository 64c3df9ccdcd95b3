/* registry.c - see registry.h. */
#define _GNU_SOURCE
#include "registry.h"
#include "egress.h"
#include "../lib/fsutil.h"
#include "../lib/mount.h"
#include "agent.h"
#include "layers.h"
#include "../lib/cleanup.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int pidfd_open_(pid_t pid)
{
    return (int) syscall(SYS_pidfd_open, pid, 0);
}

int sbx_reg_init(sbx_registry *reg, sbx_store *store, sbx_spawner *sp, const sbx_cg_host *host, const char *home,
                 uid_t uid_base, sbx_error *err)
{
    memset(reg, 0, sizeof *reg);
    pthread_mutex_init(&reg->lock, NULL);
    reg->store = store;
    reg->spawner = sp;
    reg->host = host;
    reg->home = home;
    reg->uid_base = uid_base;
    snprintf(reg->run_dir, sizeof reg->run_dir, "%s/run", home);
    if (mkdir(reg->run_dir, 0700) < 0 && errno != EEXIST)
        return sbx_error_set(err, errno, "mkdir %s", reg->run_dir);
    /* the control sockets are root's only */
    if (chmod(reg->run_dir, 0700) < 0)
        return sbx_error_set(err, errno, "chmod %s", reg->run_dir);
    return 0;
}

static void box_free(sbx_box *b)
{
    pthread_mutex_destroy(&b->pause_lock);
    if (b->pidfd >= 0)
        close(b->pidfd);
    sbx_cgroup_release(&b->cg);
    json_decref(b->envs);
    free(b);
}

static void add(sbx_registry *reg, sbx_box *b)
{
    pthread_mutex_lock(&reg->lock);
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 64;
        sbx_box **nb = realloc(reg->boxes, cap * sizeof *nb);
        if (nb) {
            reg->boxes = nb;
            reg->cap = cap;
        }
    }
    if (reg->n < reg->cap) {
        b->refs++; /* the registry's own */
        reg->boxes[reg->n++] = b;
    }
    pthread_mutex_unlock(&reg->lock);
}

sbx_box *sbx_reg_get(sbx_registry *reg, const char *id, const char *key_id)
{
    sbx_box *found = NULL;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->n; i++) {
        sbx_box *b = reg->boxes[i];
        if (strcmp(b->id, id) == 0 && (!key_id || strcmp(b->key_id, key_id) == 0)) {
            b->refs++;
            found = b;
            break;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return found;
}

void sbx_reg_put(sbx_registry *reg, sbx_box *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&reg->lock);
    bool last = --b->refs == 0;
    pthread_mutex_unlock(&reg->lock);
    if (last)
        box_free(b);
}

size_t sbx_reg_count(sbx_registry *reg, const char *key_id)
{
    size_t n = 0;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->n; i++)
        if (!key_id || strcmp(reg->boxes[i]->key_id, key_id) == 0)
            n++;
    pthread_mutex_unlock(&reg->lock);
    return n;
}

sbx_box **sbx_reg_snapshot(sbx_registry *reg, size_t *n)
{
    pthread_mutex_lock(&reg->lock);
    sbx_box **v = malloc((reg->n + 1) * sizeof *v);
    *n = 0;
    for (size_t i = 0; v && i < reg->n; i++) {
        reg->boxes[i]->refs++;
        v[(*n)++] = reg->boxes[i];
    }
    pthread_mutex_unlock(&reg->lock);
    return v;
}

/* Remove from the list; returns true if it was there (this caller owns the
 * registry's reference now). */
static bool unlist(sbx_registry *reg, sbx_box *b)
{
    bool was = false;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < reg->n; i++) {
        if (reg->boxes[i] == b) {
            reg->boxes[i] = reg->boxes[--reg->n];
            b->gone = true;
            was = true;
            break;
        }
    }
    pthread_mutex_unlock(&reg->lock);
    return was;
}

static void sock_path(const sbx_registry *reg, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%s/%.12s.sock", reg->run_dir, id);
}

/* Kill sbx-init (and with it the sandbox) and wait for it to be gone. */
static void kill_init(int pidfd, pid_t pid, uint64_t start)
{
    if (pidfd >= 0) {
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
        struct pollfd p = { pidfd, POLLIN, 0 };
        poll(&p, 1, 5000);
    } else if (pid > 0 && start && sbx_proc_start_time(pid) == start) {
        kill(pid, SIGKILL);
    }
}

static void cleanup(sbx_registry *reg, const char *id, int pidfd, pid_t pid, uint64_t start)
{
    kill_init(pidfd, pid, start);
    sbx_cgroup cg;
    sbx_error err = { 0 };
    if (sbx_cgroup_open(&cg, reg->host, id, &err) == 0) {
        /* kills anything left (a process that escaped the pid namespace
         * cannot exist, but the cgroup is the last word) */
        if (sbx_cgroup_destroy(&cg, &err) < 0)
            sbx_log("warn", "event=cleanup sandbox=%s error=\"%s\"", id, err.msg);
    }
    char path[300];
    sock_path(reg, id, path, sizeof path);
    unlink(path);
    sbx_store_box_set_cleaned(reg->store, id);
}

int sbx_reg_create(sbx_registry *reg, sbx_box_row *row, sbx_error *err)
{
    sbx_box *b = calloc(1, sizeof *b);
    /* 14 KiB: not on a request thread's stack */
    _cleanup_free_ sbx_spawn_req *req = calloc(1, sizeof *req);
    if (!b || !req) {
        free(b);
        return sbx_error_set(err, ENOMEM, "sandbox");
    }
    b->pidfd = -1;
    snprintf(b->id, sizeof b->id, "%s", row->id);
    snprintf(b->key_id, sizeof b->key_id, "%s", row->key_id);
    snprintf(b->hostname, sizeof b->hostname, "sbx-%.*s", SBX_SHORT_ID, row->id);
    sock_path(reg, row->id, b->sock, sizeof b->sock);
    b->envs = json_incref(row->envs);
    b->disk_bytes = row->disk_mb << 20;
    b->millicpus = row->millicpus;
    b->expires_at = row->expires_at;
    b->timeout_s = row->timeout_s;
    b->pause_on_timeout = strcmp(row->on_timeout, "pause") == 0;
    pthread_mutex_init(&b->pause_lock, NULL);
    /* From reading the stack until the sandbox is in the registry (where a
     * sweep of unused layers sees what it mounts), no layer of it may go. */
    sbx_layers_use_lock();
    /* The template version: the one the caller pinned (the snapshot's, for
     * a sandbox made from one), else the template as installed now. */
    bool have_stack = row->stack && row->stack[0];
    if ((have_stack ? sbx_template_open_stack(&b->tpl, reg->home, row->template_name, row->stack, reg->uid_base, err)
                    : sbx_template_open(&b->tpl, reg->home, row->template_name, reg->uid_base, err)) < 0)
        goto fail;
    if (!have_stack) { /* what the spawner mounts and the row records: one version */
        free(row->stack);
        row->stack = sbx_template_stack_text(&b->tpl);
        snprintf(row->template_id, sizeof row->template_id, "%s", b->tpl.id);
    }
    if (!row->stack || strlen(row->stack) >= sizeof req->stack) {
        sbx_error_set(err, row->stack ? E2BIG : ENOMEM, "template '%s': its stack", row->template_name);
        goto fail;
    }

    snprintf(req->id, sizeof req->id, "%s", row->id);
    snprintf(req->template_name, sizeof req->template_name, "%s", row->template_name);
    snprintf(req->sock_path, sizeof req->sock_path, "%s", b->sock);
    snprintf(req->stack, sizeof req->stack, "%s", row->stack);
    /* the snapshot's layer, then the layers of the snapshots below it */
    char snap[33];
    snprintf(snap, sizeof snap, "%s", row->snapshot_id);
    for (int depth = 0; snap[0]; depth++) {
        sbx_snap_row sr;
        size_t l = strlen(req->layer);
        if (depth == SBX_MAX_SNAPSHOT_DEPTH || sbx_store_snap_get(reg->store, snap, NULL, &sr) != 1) {
            sbx_error_set(err, ENOENT, "snapshot %s: %s", snap,
                          depth == SBX_MAX_SNAPSHOT_DEPTH ? "more than 8 layers deep" : "not found");
            goto fail;
        }
        snprintf(req->layer + l, sizeof req->layer - l, "%s%s/snapshots/%s", l ? ":" : "", reg->home, snap);
        snprintf(snap, sizeof snap, "%s", sr.parent_id);
        sbx_snap_row_free(&sr);
    }
    req->memory_bytes = row->memory_mb << 20;
    req->disk_bytes = b->disk_bytes;
    req->millicpus = row->millicpus;
    req->pids = row->pids;
    /* Recorded before it exists: if sbxd dies during the create, the
     * restart finds a "running" row without a live init and cleans up the
     * cgroups by id, instead of leaking them unrecorded. */
    row->init_pid = 0;
    row->init_start = 0;
    if (sbx_store_box_insert(reg->store, row, err) < 0)
        goto fail;
    sbx_spawn_reply rep;
    if (sbx_spawner_create(reg->spawner, req, &rep, err) < 0) {
        sbx_store_box_delete(reg->store, row->id);
        goto fail;
    }
    b->init_pid = rep.pid;
    b->pidfd = pidfd_open_(rep.pid);
    row->init_pid = rep.pid;
    row->init_start = rep.start_time;
    if (sbx_cgroup_open(&b->cg, reg->host, row->id, err) < 0 ||
        sbx_store_box_set_init(reg->store, row->id, rep.pid, rep.start_time) != 1) {
        cleanup(reg, row->id, b->pidfd, rep.pid, rep.start_time);
        sbx_store_box_delete(reg->store, row->id);
        if (!err->msg[0])
            sbx_error_set(err, EIO, "record sandbox %s", row->id);
        goto fail;
    }
    add(reg, b);
    sbx_layers_use_unlock();
    sbx_store_event(reg->store, row->id, row->key_id, "created", row->template_name);
    return 0;
fail:
    sbx_layers_use_unlock();
    box_free(b);
    return -1;
}

int sbx_reg_claim(sbx_registry *reg, sbx_box *b, const sbx_box_row *row, sbx_error *err)
{
    sbx_cg_limits l = { .memory_bytes = row->memory_mb << 20, .millicpus = row->millicpus, .pids = row->pids };
    if (sbx_cgroup_set_limits(&b->cg, &l, err) < 0)
        return -1;
    if (sbx_store_box_claim(reg->store, row) != 1)
        return sbx_error_set(err, EIO, "claim pooled sandbox %s", row->id);
    pthread_mutex_lock(&reg->lock);
    snprintf(b->key_id, sizeof b->key_id, "%s", row->key_id);
    json_decref(b->envs);
    b->envs = json_incref(row->envs);
    b->millicpus = row->millicpus;
    b->expires_at = row->expires_at;
    b->timeout_s = row->timeout_s;
    b->pause_on_timeout = strcmp(row->on_timeout, "pause") == 0;
    pthread_mutex_unlock(&reg->lock);
    sbx_store_event(reg->store, row->id, row->key_id, "created", row->template_name);
    return 0;
}

void sbx_reg_sample(sbx_registry *reg, sbx_box *b, int64_t now_ms)
{
    sbx_cg_stats st;
    if (sbx_cgroup_stats(&b->cg, &st) < 0)
        return;
    /* CPU time only grows; a process that was never reaped before the
     * sample (killed with the sandbox) can make the sum dip: keep the max. */
    if (st.cpu_seconds > b->cpu_seconds)
        b->cpu_seconds = st.cpu_seconds;
    if (b->last_sample_ms)
        b->gib_seconds += (double) st.memory_bytes / (1024.0 * 1024 * 1024) * (double) (now_ms - b->last_sample_ms) /
                          1000.0;
    b->last_sample_ms = now_ms;
    sbx_store_box_set_usage(reg->store, b->id, b->cpu_seconds, b->gib_seconds);
}

int sbx_reg_end(sbx_registry *reg, sbx_box *b, const char *state, const char *reason)
{
    int64_t now = sbx_now_wall_ms();
    if (sbx_store_box_end(reg->store, b->id, state, reason, now) != 1)
        return 0;
    if (!unlist(reg, b))
        return 0;
    sbx_reg_sample(reg, b, now);
    /* the pid namespace dies with its init: nothing in the sandbox runs on */
    if (b->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, b->pidfd, SIGKILL, NULL, 0);
    sbx_egress_forget(b->id); /* its listeners: nothing more gets out */
    sbx_store_event(reg->store, b->id, b->key_id, state, reason);
    sbx_log("info", "event=ended sandbox=%s state=%s reason=\"%s\"", b->id, state, reason ? reason : "");
    pthread_mutex_lock(&reg->lock);
    bool queued = reg->reaper_running;
    if (queued) { /* the registry's reference goes with it */
        b->reap_next = NULL;
        if (reg->reap_tail)
            reg->reap_tail->reap_next = b;
        else
            reg->reap_head = b;
        reg->reap_tail = b;
        pthread_cond_signal(&reg->reap_cond);
    }
    pthread_mutex_unlock(&reg->lock);
    if (!queued) { /* before start or after stop: do it here */
        cleanup(reg, b->id, b->pidfd, b->init_pid, 0);
        sbx_reg_put(reg, b);
    }
    return 1;
}

/* Tell sbx-init that the sandbox's clock stops (before the freeze) or runs
 * again (after the thaw), so that commands' own timeouts count only the
 * time they could run.  sbx-init is in `init`, never frozen, so it would
 * otherwise see a paused command overstay its deadline and kill it at the
 * resume.  Best effort: a sandbox whose sbx-init predates CLOCK (protocol
 * 2, re-attached after an upgrade) still pauses, with the old behaviour. */
static void command_clock(sbx_box *b, bool running)
{
    uint32_t v = running;
    uint8_t *reply = NULL;
    size_t len;
    sbx_error e = { 0 };
    if (sbx_agent_call(b->sock, SBX_MSG_CLOCK, &v, sizeof v, &reply, &len, NULL, &e) < 0)
        sbx_log("warn", "event=command_clock sandbox=%s running=%d error=\"%s\"", b->id, running, e.msg);
    free(reply);
}

int sbx_reg_pause(sbx_registry *reg, sbx_box *b, bool pause, int64_t remaining_ms, sbx_error *err)
{
    pthread_mutex_lock(&b->pause_lock);
    pthread_mutex_lock(&reg->lock);
    bool is = b->paused, gone = b->gone;
    int64_t exp = b->expires_at, left = b->paused_remaining_ms;
    pthread_mutex_unlock(&reg->lock);
    int ret = 0;
    int64_t now = sbx_now_wall_ms();
    if (gone) {
        ret = sbx_error_set(err, ESRCH, "sandbox %s has ended", b->id);
    } else if (is == pause) {
        ret = 0; /* already so */
    } else if (pause) {
        /* the clock stops: what is left of the timeout waits for the resume */
        int64_t remaining = remaining_ms > 0 ? remaining_ms : exp > now ? exp - now : 1000;
        command_clock(b, false);
        if (sbx_cgroup_freeze(&b->cg, true, err) < 0) {
            command_clock(b, true);
            ret = -1;
        } else if (sbx_store_box_pause(reg->store, b->id, remaining) != 1) {
            sbx_error e2 = { 0 };
            sbx_cgroup_freeze(&b->cg, false, &e2);
            command_clock(b, true);
            ret = sbx_error_set(err, ESRCH, "sandbox %s has ended", b->id);
        } else {
            pthread_mutex_lock(&reg->lock);
            b->paused = true;
            b->expires_at = 0;
            b->paused_remaining_ms = remaining;
            pthread_mutex_unlock(&reg->lock);
            sbx_store_event(reg->store, b->id, b->key_id, "paused", NULL);
            ret = 1;
        }
    } else {
        int64_t exp2 = now + (left > 0 ? left : b->timeout_s * 1000);
        if (sbx_cgroup_freeze(&b->cg, false, err) < 0) {
            ret = -1;
        } else if (sbx_store_box_resume(reg->store, b->id, exp2) != 1) {
            ret = sbx_error_set(err, ESRCH, "sandbox %s has ended", b->id);
        } else {
            pthread_mutex_lock(&reg->lock);
            b->paused = false;
            b->expires_at = exp2;
            b->paused_remaining_ms = 0;
            pthread_mutex_unlock(&reg->lock);
            command_clock(b, true);
            sbx_store_event(reg->store, b->id, b->key_id, "resumed", NULL);
            ret = 1;
        }
    }
    pthread_mutex_unlock(&b->pause_lock);
    return ret;
}

static void *reaper(void *arg)
{
    sbx_registry *reg = arg;
    pthread_mutex_lock(&reg->lock);
    for (;;) {
        sbx_box *b = reg->reap_head;
        if (!b) {
            if (reg->reaper_stop)
                break;
            pthread_cond_wait(&reg->reap_cond, &reg->lock);
            continue;
        }
        reg->reap_head = b->reap_next;
        if (!reg->reap_head)
            reg->reap_tail = NULL;
        pthread_mutex_unlock(&reg->lock);
        cleanup(reg, b->id, b->pidfd, b->init_pid, 0);
        sbx_reg_put(reg, b);
        pthread_mutex_lock(&reg->lock);
    }
    pthread_mutex_unlock(&reg->lock);
    return NULL;
}

int sbx_reg_start_reaper(sbx_registry *reg, sbx_error *err)
{
    pthread_cond_init(&reg->reap_cond, NULL);
    int r = pthread_create(&reg->reaper, NULL, reaper, reg);
    if (r)
        return sbx_error_set(err, r, "start the reaper thread");
    pthread_mutex_lock(&reg->lock);
    reg->reaper_running = true;
    pthread_mutex_unlock(&reg->lock);
    return 0;
}

void sbx_reg_stop_reaper(sbx_registry *reg)
{
    pthread_mutex_lock(&reg->lock);
    bool was = reg->reaper_running;
    reg->reaper_running = false; /* from now on sbx_reg_end cleans up itself */
    reg->reaper_stop = true;
    pthread_cond_signal(&reg->reap_cond);
    pthread_mutex_unlock(&reg->lock);
    if (was)
        pthread_join(reg->reaper, NULL);
}

/* Re-attach one sandbox recorded as running. */
static void reattach(sbx_registry *reg, sbx_box_row *row)
{
    sbx_error err = { 0 };
    const char *why = NULL;
    int pidfd = -1;
    if (row->init_pid <= 0 || sbx_proc_start_time(row->init_pid) != row->init_start) {
        why = "sbx-init ended while sbxd was down";
    } else if ((pidfd = pidfd_open_(row->init_pid)) < 0) {
        why = "sbx-init ended while sbxd was down";
    } else {
        char path[300];
        sock_path(reg, row->id, path, sizeof path);
        uint8_t *reply;
        size_t len;
        if (sbx_agent_call(path, SBX_MSG_PING, NULL, 0, &reply, &len, NULL, &err) < 0)
            why = "sbx-init did not answer after an sbxd restart";
        else
            free(reply);
    }
    if (why) {
        sbx_store_box_end(reg->store, row->id, "failed", why, sbx_now_wall_ms());
        cleanup(reg, row->id, pidfd, row->init_pid, row->init_start);
        if (pidfd >= 0)
            close(pidfd);
        sbx_store_event(reg->store, row->id, row->key_id, "failed", why);
        sbx_log("warn", "event=reconcile sandbox=%s result=failed reason=\"%s\"", row->id, why);
        return;
    }
    sbx_box *b = calloc(1, sizeof *b);
    if (!b) {
        close(pidfd);
        return;
    }
    snprintf(b->id, sizeof b->id, "%s", row->id);
    snprintf(b->key_id, sizeof b->key_id, "%s", row->key_id);
    snprintf(b->hostname, sizeof b->hostname, "sbx-%.*s", SBX_SHORT_ID, row->id);
    sock_path(reg, row->id, b->sock, sizeof b->sock);
    b->pidfd = pidfd;
    b->init_pid = row->init_pid;
    b->envs = json_incref(row->envs);
    b->disk_bytes = row->disk_mb << 20;
    b->millicpus = row->millicpus;
    b->expires_at = row->expires_at;
    b->cpu_seconds = row->cpu_seconds;
    b->gib_seconds = row->gib_seconds;
    b->timeout_s = row->timeout_s;
    b->pause_on_timeout = strcmp(row->on_timeout, "pause") == 0;
    /* a paused sandbox stayed frozen while sbxd was away (the kernel keeps
     * the cgroup frozen): it stays paused */
    b->paused = strcmp(row->state, "paused") == 0;
    b->paused_remaining_ms = row->paused_remaining_ms;
    pthread_mutex_init(&b->pause_lock, NULL);
    /* the version it was made on (rows from before stacks were recorded:
     * the template as it is now) */
    bool have_stack = row->stack && row->stack[0];
    if ((have_stack ? sbx_template_open_stack(&b->tpl, reg->home, row->template_name, row->stack, reg->uid_base, &err)
                    : sbx_template_open(&b->tpl, reg->home, row->template_name, reg->uid_base, &err)) < 0 ||
        sbx_cgroup_open(&b->cg, reg->host, row->id, &err) < 0) {
        sbx_log("warn", "event=reconcile sandbox=%s error=\"%s\"", row->id, err.msg);
        box_free(b);
        sbx_store_box_end(reg->store, row->id, "failed", "cannot re-attach after an sbxd restart", sbx_now_wall_ms());
        cleanup(reg, row->id, -1, row->init_pid, row->init_start);
        return;
    }
    add(reg, b);
    sbx_log("info", "event=reconcile sandbox=%s result=reattached pid=%d%s", row->id, (int) row->init_pid,
            b->paused ? " paused=1" : "");
}

void sbx_reg_reconcile(sbx_registry *reg)
{
    sbx_box_row *rows;
    size_t n;
    /* the pool is refilled by this run, with its own configuration */
    sbx_store_box_drain_pool(reg->store, sbx_now_wall_ms());
    if (sbx_store_box_list(reg->store, NULL, "live", &rows, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            reattach(reg, &rows[i]);
            sbx_box_row_free(&rows[i]);
        }
        free(rows);
    }
    if (sbx_store_box_list_uncleaned(reg->store, &rows, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            cleanup(reg, rows[i].id, -1, rows[i].init_pid, rows[i].init_start);
            sbx_box_row_free(&rows[i]);
        }
        free(rows);
    }
    /* Sockets of sandboxes that are not live (a crash mid-create). */
    DIR *d = opendir(reg->run_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len != 12 + 5 || strcmp(e->d_name + 12, ".sock") != 0)
            continue;
        bool live = false;
        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n && !live; i++)
            live = strncmp(reg->boxes[i]->id, e->d_name, 12) == 0;
        pthread_mutex_unlock(&reg->lock);
        if (!live)
            unlinkat(dirfd(d), e->d_name, 0);
    }
    if (d)
        closedir(d);
}
