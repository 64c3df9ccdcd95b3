/* api_sandboxes.c - /v1/sandboxes: create, list, inspect, delete, extend,
 * metrics. */
#define _GNU_SOURCE
#include "agent.h"
#include "api.h"
#include "egress.h"
#include "templates.h"
#include "auth.h"
#include "log.h"
#include "pool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_TIMEOUT_S (8 * 3600)
#define DEFAULT_TIMEOUT_S 900

static json_t *time_or_null(int64_t ms)
{
    if (!ms)
        return json_null();
    char buf[40];
    sbx_format_time(ms, buf, sizeof buf);
    return json_string(buf);
}

json_t *sbx_box_json(const sbx_box_row *b)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(b->id));
    json_object_set_new(o, "template", json_string(b->template_name));
    json_object_set_new(o, "state", json_string(b->state));
    json_object_set_new(o, "created_at", time_or_null(b->created_at));
    json_object_set_new(o, "expires_at", time_or_null(b->expires_at));
    json_object_set_new(o, "ended_at", time_or_null(b->ended_at));
    json_object_set_new(o, "end_reason", b->end_reason[0] ? json_string(b->end_reason) : json_null());
    json_object_set_new(o, "timeout_s", json_integer(b->timeout_s));
    json_object_set_new(o, "on_timeout", json_string(b->on_timeout[0] ? b->on_timeout : "kill"));
    json_object_set_new(o, "snapshot_id", b->snapshot_id[0] ? json_string(b->snapshot_id) : json_null());
    /* while paused the clock stands still: expires_at is null, this says
     * how much is left for after the resume */
    if (strcmp(b->state, "paused") == 0)
        json_object_set_new(o, "timeout_remaining_s", json_integer((b->paused_remaining_ms + 999) / 1000));
    json_object_set(o, "metadata", b->metadata);
    json_object_set(o, "envs", b->envs);
    json_object_set_new(o, "cpus", json_real(b->millicpus / 1000.0));
    json_object_set_new(o, "memory_mb", json_integer((json_int_t) b->memory_mb));
    json_object_set_new(o, "disk_mb", json_integer((json_int_t) b->disk_mb));
    json_object_set_new(o, "pids", json_integer(b->pids));
    json_object_set_new(o, "network", b->network ? json_incref(b->network) : json_pack("{s:s}", "mode", "none"));
    return o;
}

/* 200 with sandbox {0} as it is recorded now (after a change). */
static void reply_sandbox(sbx_req *r)
{
    sbx_box_row row;
    if (sbx_store_box_get(r->d->store, r->arg[0], &row) == 1) {
        sbx_reply_json(r, 200, sbx_box_json(&row));
        sbx_box_row_free(&row);
    } else {
        sbx_reply_error(r, 404, "not_found", "no sandbox %s", r->arg[0]);
    }
}

static uint64_t host_memory_mb(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t) pages * (uint64_t) size >> 20 : 1024;
}

void sbx_api_sandbox_create(sbx_req *r)
{
    static const char *const fields[] = { "template", "timeout_s",  "metadata", "envs", "cpus", "memory_mb",
                                          "disk_mb",  "pids",       "on_timeout", "snapshot", "network", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    const char *tpl = SBX_DEFAULT_TEMPLATE, *on_timeout = "kill", *snapshot = NULL;
    sbx_snap_row snap = { 0 };
    int64_t timeout = DEFAULT_TIMEOUT_S, memory = SBX_DEFAULT_MEMORY >> 20, disk = SBX_DEFAULT_DISK >> 20,
            pids = SBX_DEFAULT_PIDS;
    double cpus = SBX_DEFAULT_MILLICPUS / 1000.0;
    json_t *metadata = NULL, *envs = NULL, *manifest = NULL;
    sbx_net_policy *net = NULL; /* NULL: "none" */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_string(r, j, "template", &tpl) < 0 ||
        sbx_json_int(r, j, "timeout_s", 1, MAX_TIMEOUT_S, &timeout) < 0 ||
        sbx_json_strmap(r, j, "metadata", &metadata) < 0 || sbx_json_strmap(r, j, "envs", &envs) < 0 ||
        sbx_json_number(r, j, "cpus", 0.01, ncpu > 0 ? (double) ncpu : 1, &cpus) < 0 ||
        sbx_json_int(r, j, "memory_mb", 16, (int64_t) host_memory_mb(), &memory) < 0 ||
        sbx_json_int(r, j, "disk_mb", 1, 1 << 20, &disk) < 0 || sbx_json_int(r, j, "pids", 8, 65536, &pids) < 0 ||
        sbx_json_string(r, j, "on_timeout", &on_timeout) < 0 || sbx_json_string(r, j, "snapshot", &snapshot) < 0)
        goto out;
    if (json_object_get(j, "network")) {
        sbx_error nerr = { 0 };
        if (sbx_net_policy_parse(json_object_get(j, "network"), &net, &nerr) < 0) {
            sbx_reply_error(r, 400, "invalid_request", "%s", nerr.msg);
            goto out;
        }
    }
    if (snapshot) { /* its template, with its layer over it */
        if (sbx_store_snap_get(r->d->store, snapshot, r->key.id, &snap) != 1) {
            sbx_reply_error(r, 400, "invalid_request", "unknown snapshot '%s'", snapshot);
            goto out;
        }
        if (json_object_get(j, "template") && strcmp(tpl, snap.template_name) != 0) {
            sbx_reply_error(r, 400, "invalid_request", "snapshot %s is of template '%s', not '%s'", snapshot,
                            snap.template_name, tpl);
            goto out;
        }
        tpl = snap.template_name;
    }
    if (strcmp(on_timeout, "kill") != 0 && strcmp(on_timeout, "pause") != 0) {
        sbx_reply_error(r, 400, "invalid_request", "'on_timeout' must be \"kill\" or \"pause\"");
        goto out;
    }
    if (metadata && json_object_size(metadata) > 64) {
        sbx_reply_error(r, 400, "invalid_request", "at most 64 metadata entries");
        goto out;
    }
    if (envs) {
        const char *k;
        json_t *v;
        json_object_foreach(envs, k, v)
        {
            if (strchr(k, '=')) {
                sbx_reply_error(r, 400, "invalid_request", "env name '%s' contains '='", k);
                goto out;
            }
        }
    }
    /* by name or id; its manifest gives the defaults the request leaves out */
    char tpl_name[65];
    if (sbx_tpl_resolve(r->d->reg.home, tpl, tpl_name) < 0) {
        sbx_reply_error(r, 400, "invalid_request", "unknown template '%s'", tpl);
        goto out;
    }
    tpl = tpl_name;
    /* The version to make it of: the template as installed now (its stack,
     * start command and manifest read as one version), or for a snapshot
     * the version the snapshot was taken on. */
    sbx_box_row row = { 0 };
    snprintf(row.template_name, sizeof row.template_name, "%s", tpl);
    sbx_error err = { 0 };
    if (sbx_tpl_row_pin(r->d, &row, &manifest, &err) < 0 || !manifest) {
        if (!manifest || err.errno_ == ENOENT)
            sbx_reply_error(r, 400, "invalid_request", "unknown template '%s'", tpl);
        else
            sbx_reply_sbx_error(r, &err);
        sbx_box_row_free(&row);
        goto out;
    }
    if (snapshot && snap.stack && snap.stack[0]) {
        free(row.stack);
        row.stack = strdup(snap.stack);
        snprintf(row.template_id, sizeof row.template_id, "%s", snap.template_id);
        if (snap.start) { /* rows from before start pins: the template's current one */
            json_decref(row.start);
            row.start = json_incref(snap.start);
        }
    }
    json_t *v;
    if (!json_object_get(j, "timeout_s") && json_is_integer(v = json_object_get(manifest, "timeout_s")))
        timeout = json_integer_value(v);
    if (!json_object_get(j, "memory_mb") && json_is_integer(v = json_object_get(manifest, "memory_mb")))
        memory = json_integer_value(v) < (int64_t) host_memory_mb() ? json_integer_value(v) : (int64_t) host_memory_mb();
    if (!json_object_get(j, "disk_mb") && json_is_integer(v = json_object_get(manifest, "disk_mb")))
        disk = json_integer_value(v);
    if (!json_object_get(j, "cpus") && json_is_number(v = json_object_get(manifest, "cpus")))
        cpus = json_number_value(v) < (double) (ncpu > 0 ? ncpu : 1) ? json_number_value(v) : (double) (ncpu > 0 ? ncpu : 1);
    if (sbx_reg_count(&r->d->reg, r->key.id) >= r->d->max_sandboxes) {
        sbx_reply_error(r, 429, "quota_exceeded", "this key has %u running sandboxes, the most allowed (sbxd "
                                                  "--max-sandboxes)",
                        r->d->max_sandboxes);
        sbx_box_row_free(&row);
        goto out;
    }

    sbx_random_hex(row.id, SBX_ID_LEN / 2);
    snprintf(row.key_id, sizeof row.key_id, "%s", r->key.id);
    snprintf(row.state, sizeof row.state, "running");
    row.created_at = sbx_now_wall_ms();
    row.timeout_s = timeout;
    row.expires_at = row.created_at + timeout * 1000;
    row.metadata = metadata ? json_incref(metadata) : json_object();
    /* the template's envs, under the request's */
    row.envs = json_deep_copy(json_is_object(json_object_get(manifest, "envs")) ? json_object_get(manifest, "envs")
                                                                                 : json_object());
    if (envs)
        json_object_update(row.envs, envs);
    row.millicpus = (uint32_t) (cpus * 1000 + 0.5);
    row.memory_mb = (uint64_t) memory;
    row.disk_mb = (uint64_t) disk;
    row.pids = (uint32_t) pids;
    snprintf(row.on_timeout, sizeof row.on_timeout, "%s", on_timeout);
    if (snapshot)
        snprintf(row.snapshot_id, sizeof row.snapshot_id, "%s", snap.id);
    row.network = sbx_net_policy_json(net);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* A warm sandbox if the pool has one: the create is then a claim. */
    sbx_box *pooled = snapshot ? NULL : sbx_pool_take(r->d, tpl, row.disk_mb);
    int claimed = -1;
    if (pooled) {
        snprintf(row.id, sizeof row.id, "%s", pooled->id);
        claimed = sbx_reg_claim(&r->d->reg, pooled, &row, &err);
        if (claimed < 0) {
            sbx_log("warn", "event=pool_claim_failed sandbox=%s error=\"%s\"", row.id, err.msg);
            sbx_reg_end(&r->d->reg, pooled, "failed", "could not be handed out from the warm pool");
            sbx_random_hex(row.id, SBX_ID_LEN / 2);
            memset(&err, 0, sizeof err);
        }
        sbx_reg_put(&r->d->reg, pooled);
    }
    if (!pooled || claimed != 0) {
    if (sbx_reg_create(&r->d->reg, &row, &err) < 0) {
        sbx_log("error", "event=create_failed error=\"%s\"", err.msg);
        /* the host (memory, pids, cgroups) or the new sandbox's sbx-init
         * failed: a condition to retry later, not a bug of the request */
        sbx_reply_error(r, 503, "unavailable", "cannot create the sandbox: %s", err.msg);
        sbx_box_row_free(&row);
        goto out;
    }
    }
    /* its network, then its template's start command and readiness check
     * (which may need the network; a pooled sandbox ran them when made) */
    sbx_box *nb = sbx_reg_get(&r->d->reg, row.id, NULL);
    int bad = nb ? sbx_sandbox_network(r->d, nb, net, &err) : 0;
    net = NULL; /* taken */
    if (nb && bad == 0 && !(pooled && claimed == 0))
        bad = sbx_tpl_start(r->d, nb, row.start ? row.start : manifest, &err);
    if (nb && bad < 0) {
        sbx_reg_end(&r->d->reg, nb, "failed", err.msg);
        sbx_reg_put(&r->d->reg, nb);
        sbx_reply_error(r, 503, "unavailable", "sandbox %s did not start: %s", row.id, err.msg);
        sbx_box_row_free(&row);
        goto out;
    }
    if (nb)
        sbx_reg_put(&r->d->reg, nb);
    __atomic_add_fetch(&r->d->created, 1, __ATOMIC_RELAXED);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sbx_log("info", "event=created sandbox=%s key=%s template=%s pool=%s ms=%.2f", row.id, r->key.name, tpl,
            pooled ? "hit" : "miss",
            (double) (t1.tv_sec - t0.tv_sec) * 1e3 + (double) (t1.tv_nsec - t0.tv_nsec) / 1e6);
    sbx_reply_json(r, 201, sbx_box_json(&row));
    sbx_box_row_free(&row);
out:
    if (snapshot)
        sbx_snap_row_free(&snap);
    sbx_net_policy_free(net);
    json_decref(manifest);
    json_decref(j);
}

int sbx_sandbox_network(sbx_daemon *d, sbx_box *b, sbx_net_policy *p, sbx_error *err)
{
    bool allow = sbx_net_policy_is_allowlist(p), open = sbx_net_policy_is_open(p);
    if (!p && !__atomic_load_n(&b->net_allowlist, __ATOMIC_RELAXED) && !__atomic_load_n(&b->net_open, __ATOMIC_RELAXED))
        return 0; /* none, and it was none: nothing to do */
    json_t *js = sbx_net_policy_json(p);
    if (!p) {
        json_t *none = json_string("none");
        sbx_net_policy_parse(none, &p, err);
        json_decref(none);
    }
    if (sbx_egress_set(b->id, b->key_id, b->init_pid, p, err) < 0) {
        json_decref(js);
        return -1;
    }
    __atomic_store_n(&b->net_allowlist, allow, __ATOMIC_RELAXED);
    __atomic_store_n(&b->net_open, open, __ATOMIC_RELAXED);
    sbx_store_box_set_network(d->store, b->id, js);
    json_decref(js);
    if (open) {
        /* names resolve through slirp4netns's DNS forwarder */
        char *const argv[] = { "/bin/sh", "-c", "printf 'nameserver 10.0.2.3\\noptions timeout:2 attempts:2\\n' "
                                                "> /etc/resolv.conf", NULL };
        sbx_exec_opts o = { .argv = argv, .user = "0", .cwd = "/", .timeout_s = 10 };
        int code = -1;
        sbx_error e2 = { 0 };
        if (sbx_box_exec(d, b, &o, &code, NULL, &e2) < 0 || code != 0)
            sbx_log("warn", "event=resolv_conf_failed sandbox=%s error=\"%s\"", b->id, e2.msg);
    }
    return 0;
}

struct list_filter {
    sbx_req *r;
    const char *state;
    json_t *metadata; /* KEY -> VALUE all of which must match */
    bool bad;
};

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void) kind;
    struct list_filter *f = cls;
    if (strcmp(key, "state") == 0) {
        f->state = value ? value : "";
    } else if (strncmp(key, "metadata.", 9) == 0 && key[9]) {
        json_object_set_new(f->metadata, key + 9, json_string(value ? value : ""));
    } else {
        sbx_reply_error(f->r, 400, "invalid_request", "unknown query parameter '%s' (use state= or metadata.KEY=)",
                        key);
        f->bad = true;
        return MHD_NO;
    }
    return MHD_YES;
}

static bool valid_state(const char *s)
{
    static const char *const states[] = { "live",   "running", "paused", "deleted", "expired",
                                          "unhealthy", "failed", "all",   NULL };
    for (size_t i = 0; states[i]; i++)
        if (strcmp(s, states[i]) == 0)
            return true;
    return false;
}

void sbx_api_sandbox_list(sbx_req *r)
{
    /* by default the live ones: running and paused */
    struct list_filter f = { r, "live", json_object(), false };
    MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, collect_arg, &f);
    if (f.bad)
        goto out;
    if (!valid_state(f.state)) {
        sbx_reply_error(r, 400, "invalid_request", "unknown state '%s'", f.state);
        goto out;
    }
    sbx_box_row *rows;
    size_t n;
    if (sbx_store_box_list(r->d->store, r->key.id, strcmp(f.state, "all") ? f.state : NULL, &rows, &n) < 0) {
        sbx_reply_error(r, 500, "internal", "cannot read the sandbox list");
        goto out;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        bool ok = true;
        const char *k;
        json_t *v;
        json_object_foreach(f.metadata, k, v)
        {
            json_t *have = json_object_get(rows[i].metadata, k);
            if (!have || !json_equal(have, v))
                ok = false;
        }
        if (ok)
            json_array_append_new(arr, sbx_box_json(&rows[i]));
        sbx_box_row_free(&rows[i]);
    }
    free(rows);
    sbx_reply_json(r, 200, json_pack("{s:o}", "sandboxes", arr));
out:
    json_decref(f.metadata);
}

void sbx_api_sandbox_get(sbx_req *r)
{
    sbx_box_row row;
    if (sbx_store_box_get(r->d->store, r->arg[0], &row) == 1) {
        if (strcmp(row.key_id, r->key.id) == 0) {
            sbx_reply_json(r, 200, sbx_box_json(&row));
            sbx_box_row_free(&row);
            return;
        }
        sbx_box_row_free(&row);
    }
    sbx_reply_error(r, 404, "not_found", "no sandbox %s", r->arg[0]);
}

void sbx_api_sandbox_delete(sbx_req *r)
{
    sbx_box *b = sbx_req_box_as_is(r); /* no need to wake it to end it */
    if (!b)
        return;
    if (sbx_reg_end(&r->d->reg, b, "deleted", "deleted through the API"))
        sbx_reply_empty(r, 204);
    else
        sbx_reply_error(r, 409, "conflict", "sandbox %s is already ending", b->id);
    sbx_reg_put(&r->d->reg, b);
}

void sbx_api_sandbox_timeout(sbx_req *r)
{
    static const char *const fields[] = { "timeout_s", NULL };
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    int64_t t = -1;
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_int(r, j, "timeout_s", 1, MAX_TIMEOUT_S, &t) < 0)
        goto out;
    if (t < 0) {
        sbx_reply_error(r, 400, "invalid_request", "'timeout_s' is required");
        goto out;
    }
    sbx_box *b = sbx_req_box_as_is(r);
    if (!b)
        goto out;
    int64_t exp = sbx_now_wall_ms() + t * 1000;
    pthread_mutex_lock(&r->d->reg.lock);
    b->timeout_s = t;
    if (b->paused) /* the new timeout starts when it resumes */
        b->paused_remaining_ms = t * 1000;
    else
        b->expires_at = exp;
    pthread_mutex_unlock(&r->d->reg.lock);
    sbx_store_box_set_expiry(r->d->store, b->id, exp, t);
    sbx_reg_put(&r->d->reg, b);
    reply_sandbox(r);
out:
    json_decref(j);
}

void sbx_api_sandbox_metrics(sbx_req *r)
{
    sbx_box *b = sbx_req_box_as_is(r);
    if (!b)
        return;
    sbx_cg_stats st;
    sbx_cgroup_stats(&b->cg, &st);
    /* disk use of the writable layer, as the sandbox's root sees it */
    uint64_t used = 0;
    sbx_buf req = { 0 };
    sbx_buf_put_u32(&req, 0);
    sbx_buf_put_u32(&req, 0);
    sbx_buf_put_str(&req, "/");
    uint8_t *reply;
    size_t len;
    sbx_error err = { 0 };
    if (sbx_agent_call(b->sock, SBX_MSG_STATFS, req.data, req.len, &reply, &len, NULL, &err) == 0) {
        sbx_reader rd = { reply, reply + len, false };
        used = sbx_read_u64(&rd);
        free(reply);
    }
    sbx_buf_free(&req);
    json_t *o = json_object();
    json_object_set_new(o, "cpu_seconds", json_real(st.cpu_seconds));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t) st.memory_bytes));
    json_object_set_new(o, "memory_peak_bytes", json_integer((json_int_t) st.memory_peak_bytes));
    json_object_set_new(o, "memory_limit_bytes", json_integer((json_int_t) st.memory_limit_bytes));
    json_object_set_new(o, "disk_used_bytes", json_integer((json_int_t) used));
    json_object_set_new(o, "disk_limit_bytes", json_integer((json_int_t) b->disk_bytes));
    /* the zygote (sbx-init's spawner, see src/init/zygote.h) is not the user's */
    json_object_set_new(o, "processes", json_integer(st.processes > 0 ? st.processes - 1 : 0));
    sbx_reg_put(&r->d->reg, b);
    sbx_reply_json(r, 200, o);
}

static void pause_or_resume(sbx_req *r, bool pause)
{
    if (sbx_req_no_fields(r) < 0)
        return;
    sbx_box *b = sbx_req_box_as_is(r);
    if (!b)
        return;
    sbx_error err = { 0 };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int done = sbx_reg_pause(&r->d->reg, b, pause, 0, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    sbx_reg_put(&r->d->reg, b);
    if (done < 0) {
        if (err.errno_ == ENOTSUP)
            sbx_reply_error(r, 501, "not_supported", "%s", err.msg);
        else if (err.errno_ == ESRCH)
            sbx_reply_error(r, 409, "conflict", "%s", err.msg);
        else
            sbx_reply_error(r, 503, "unavailable", "cannot %s sandbox %s: %s", pause ? "pause" : "resume", r->arg[0],
                            err.msg);
        return;
    }
    if (done)
        sbx_log("info", "event=%s sandbox=%s ms=%.2f", pause ? "paused" : "resumed", r->arg[0],
                (double) (t1.tv_sec - t0.tv_sec) * 1e3 + (double) (t1.tv_nsec - t0.tv_nsec) / 1e6);
    reply_sandbox(r);
}

void sbx_api_sandbox_pause(sbx_req *r)
{
    pause_or_resume(r, true);
}

void sbx_api_sandbox_resume(sbx_req *r)
{
    pause_or_resume(r, false);
}

void sbx_api_sandbox_network(sbx_req *r)
{
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    sbx_net_policy *p = NULL;
    sbx_error err = { 0 };
    if (sbx_net_policy_parse(j, &p, &err) < 0) {
        json_decref(j);
        sbx_reply_error(r, 400, "invalid_request", "%s", err.msg);
        return;
    }
    json_decref(j);
    sbx_box *b = sbx_req_box_as_is(r); /* a policy change does not wake a paused sandbox */
    if (!b) {
        sbx_net_policy_free(p);
        return;
    }
    int rc = sbx_sandbox_network(r->d, b, p, &err);
    sbx_reg_put(&r->d->reg, b);
    if (rc < 0) {
        sbx_reply_error(r, 503, "unavailable", "cannot change the network of sandbox %s: %s", r->arg[0], err.msg);
        return;
    }
    sbx_store_event(r->d->store, r->arg[0], r->key.id, "network", "policy changed");
    reply_sandbox(r);
}

void sbx_api_sandbox_events(sbx_req *r)
{
    bool bad;
    const char *type = sbx_query(r, "type", &bad), *lim = bad ? NULL : sbx_query(r, "limit", &bad);
    if (bad)
        return;
    char *end = NULL;
    long limit = lim ? strtol(lim, &end, 10) : 1000;
    if (lim && (!*lim || *end || limit < 1 || limit > 10000)) {
        sbx_reply_error(r, 400, "invalid_request", "'limit' must be 1..10000");
        return;
    }
    sbx_box_row row;
    int found = sbx_store_box_get(r->d->store, r->arg[0], &row) == 1;
    bool mine = found && strcmp(row.key_id, r->key.id) == 0;
    if (found)
        sbx_box_row_free(&row);
    if (!mine) {
        sbx_reply_error(r, 404, "not_found", "no sandbox %s", r->arg[0]);
        return;
    }
    sbx_reply_json(r, 200, json_pack("{s:o}", "events", sbx_store_events(r->d->store, r->arg[0], type, limit)));
}
