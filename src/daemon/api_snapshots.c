/* api_snapshots.c - snapshots of a sandbox's file system, and fork.
 *
 * A snapshot is the sandbox's writable layer (the overlay's upper
 * directory: what it changed over its template, whiteouts and opaque
 * directories included), copied to HOME/snapshots/<id> while the sandbox's
 * processes are frozen, so the copy is consistent.  sbxd reaches that
 * directory through sbx-init's fd SBX_UPPER_FD (/proc/PID/fd/5): nothing
 * else leads to it once the sandbox has pivoted into its root.  A sandbox
 * made from a snapshot mounts the snapshot's layer (and those of the
 * snapshots below it, if its source was itself made from one) between the
 * template and a fresh writable layer.  Memory is not part of a snapshot:
 * processes do not come back, files do (a template's start command runs
 * again in a sandbox made from one).  The copy itself is layers.c's. */
#define _GNU_SOURCE
#include "api.h"
#include "auth.h"
#include "egress.h"
#include "layers.h"
#include "log.h"
#include "templates.h"
#include "../lib/spec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FORK 16

static json_t *snap_json(const sbx_snap_row *s)
{
    char at[40];
    sbx_format_time(s->created_at, at, sizeof at);
    return json_pack("{s:s, s:s, s:s, s:s?, s:s, s:I, s:s?}", "id", s->id, "sandbox_id", s->sandbox_id, "template",
                     s->template_name, "template_id", s->template_id[0] ? s->template_id : NULL, "created_at", at,
                     "size_bytes", (json_int_t) s->size_bytes, "parent_id", s->parent_id[0] ? s->parent_id : NULL);
}

/* Snapshot live sandbox b (of key_id) into out.  -1 with err on failure. */
static int take_snapshot(sbx_daemon *d, sbx_box *b, const char *key_id, sbx_snap_row *out, sbx_error *err)
{
    memset(out, 0, sizeof *out);
    sbx_random_hex(out->id, SBX_ID_LEN / 2);
    snprintf(out->key_id, sizeof out->key_id, "%s", key_id);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", b->id);
    snprintf(out->template_name, sizeof out->template_name, "%s", b->tpl.name);
    /* What the sandbox was made on: a sandbox made from the snapshot
     * mounts exactly that under the snapshot's layer, whatever the template
     * has become since (a rebuild).  The row has it; a row from before
     * stacks were recorded: what the sandbox holds open now. */
    sbx_box_row row;
    if (sbx_store_box_get(d->store, b->id, &row) == 1) {
        snprintf(out->parent_id, sizeof out->parent_id, "%s", row.snapshot_id);
        if (row.stack && row.stack[0]) {
            out->stack = row.stack;
            row.stack = NULL;
            snprintf(out->template_id, sizeof out->template_id, "%s", row.template_id);
        }
        out->start = row.start ? json_incref(row.start) : NULL;
        sbx_box_row_free(&row);
    }
    if (!out->stack) {
        out->stack = sbx_template_stack_text(&b->tpl);
        snprintf(out->template_id, sizeof out->template_id, "%s", b->tpl.id);
    }
    if (!out->stack) {
        sbx_snap_row_free(out);
        return sbx_error_set(err, ENOMEM, "snapshot");
    }
    char dir[512], tmp[600], final[600];
    snprintf(dir, sizeof dir, "%s/snapshots", d->reg.home);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        sbx_snap_row_free(out);
        return sbx_error_set(err, errno, "mkdir %s", dir);
    }
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, out->id);
    snprintf(final, sizeof final, "%s/%s", dir, out->id);
    int ret = sbx_layer_capture(&d->reg, b, tmp, err);
    /* On disk before it is on record: "snapshots persist across restarts
     * of the machine" means the copy (every file cp wrote, then its name)
     * reaches the disk before the row that promises it does. */
    if (ret == 0)
        ret = sbx_layer_sync(tmp, err);
    if (ret == 0 && rename(tmp, final) < 0)
        ret = sbx_error_set(err, errno, "rename %s", tmp);
    if (ret == 0 && sbx_dir_sync(dir, err) < 0) {
        ret = -1;
        sbx_layer_remove(final);
    }
    if (ret < 0) {
        sbx_layer_remove(tmp);
        sbx_snap_row_free(out);
        return -1;
    }
    out->size_bytes = sbx_layer_bytes(final);
    out->created_at = sbx_now_wall_ms();
    if (sbx_store_snap_insert(d->store, out) != 1) {
        sbx_layer_remove(final);
        sbx_snap_row_free(out);
        return sbx_error_set(err, EIO, "record snapshot %s", out->id);
    }
    sbx_store_event(d->store, b->id, key_id, "snapshot", out->id);
    sbx_log("info", "event=snapshot sandbox=%s snapshot=%s bytes=%lld", b->id, out->id, (long long) out->size_bytes);
    return 0;
}

void sbx_api_snapshot_create(sbx_req *r)
{
    if (sbx_req_no_fields(r) < 0)
        return;
    sbx_box *b = sbx_req_box_as_is(r); /* a paused sandbox is snapshotted as it is */
    if (!b)
        return;
    sbx_snap_row s;
    sbx_error err = { 0 };
    int rc = take_snapshot(r->d, b, r->key.id, &s, &err);
    sbx_reg_put(&r->d->reg, b);
    if (rc < 0) {
        sbx_reply_error(r, err.errno_ == ENOSPC ? 507 : 503, err.errno_ == ENOSPC ? "insufficient_storage" : "unavailable",
                        "cannot snapshot sandbox %s: %s", r->arg[0], err.msg);
        return;
    }
    sbx_reply_json(r, 201, snap_json(&s));
    sbx_snap_row_free(&s);
}

void sbx_api_snapshot_list(sbx_req *r)
{
    sbx_snap_row *rows;
    size_t n;
    if (sbx_store_snap_list(r->d->store, r->key.id, &rows, &n) < 0) {
        sbx_reply_error(r, 500, "internal", "cannot read the snapshot list");
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(arr, snap_json(&rows[i]));
        sbx_snap_row_free(&rows[i]);
    }
    free(rows);
    sbx_reply_json(r, 200, json_pack("{s:o}", "snapshots", arr));
}

void sbx_api_snapshot_get(sbx_req *r)
{
    sbx_snap_row s;
    if (sbx_store_snap_get(r->d->store, r->arg[0], r->key.id, &s) != 1) {
        sbx_reply_error(r, 404, "not_found", "no snapshot %s", r->arg[0]);
        return;
    }
    sbx_reply_json(r, 200, snap_json(&s));
    sbx_snap_row_free(&s);
}

void sbx_api_snapshot_delete(sbx_req *r)
{
    sbx_snap_row s;
    if (sbx_store_snap_get(r->d->store, r->arg[0], r->key.id, &s) != 1) {
        sbx_reply_error(r, 404, "not_found", "no snapshot %s", r->arg[0]);
        return;
    }
    int users = sbx_store_snap_users(r->d->store, s.id);
    if (users != 0) {
        sbx_reply_error(r, 409, "conflict",
                        "snapshot %s is in use (%d sandboxes made from it are live, or snapshots stack on it)",
                        s.id, users);
        sbx_snap_row_free(&s);
        return;
    }
    char dir[600];
    snprintf(dir, sizeof dir, "%s/snapshots/%s", r->d->reg.home, s.id);
    sbx_store_snap_delete(r->d->store, s.id);
    sbx_layer_remove(dir);
    /* it may have been the last thing that needed the layers of an older
     * version of its template */
    json_t *keys = json_object();
    sbx_tpl_keep_stack(s.stack, keys);
    sbx_snap_row_free(&s);
    size_t freed = sbx_tpl_release_layers(r->d, keys);
    json_decref(keys);
    sbx_log("info", "event=snapshot_deleted snapshot=%s layers_removed=%zu", s.id, freed);
    sbx_reply_empty(r, 204);
}

void sbx_api_sandbox_fork(sbx_req *r)
{
    json_t *j = sbx_req_json(r);
    if (!j)
        return;
    static const char *const fields[] = { "count", NULL };
    int64_t count = 1;
    if (sbx_json_only(r, j, fields) < 0 || sbx_json_int(r, j, "count", 1, MAX_FORK, &count) < 0) {
        json_decref(j);
        return;
    }
    json_decref(j);
    sbx_box *b = sbx_req_box_as_is(r);
    if (!b)
        return;
    if (sbx_reg_count(&r->d->reg, r->key.id) + (size_t) count > r->d->max_sandboxes) {
        sbx_reg_put(&r->d->reg, b);
        sbx_reply_error(r, 429, "quota_exceeded", "%lld more sandboxes would pass this key's limit (sbxd "
                                                  "--max-sandboxes %u)",
                        (long long) count, r->d->max_sandboxes);
        return;
    }
    sbx_box_row src;
    sbx_snap_row s;
    sbx_error err = { 0 };
    bool have_src = sbx_store_box_get(r->d->store, b->id, &src) == 1;
    int rc = have_src ? take_snapshot(r->d, b, r->key.id, &s, &err) : sbx_error_set(&err, ENOENT, "no record");
    sbx_reg_put(&r->d->reg, b);
    if (rc < 0) {
        if (have_src)
            sbx_box_row_free(&src);
        sbx_reply_error(r, 503, "unavailable", "cannot fork sandbox %s: %s", r->arg[0], err.msg);
        return;
    }
    /* N copies: the source's limits, envs, metadata and timeout, each from
     * the snapshot just taken */
    json_t *made = json_array();
    json_t *manifest = sbx_tpl_load(r->d->reg.home, src.template_name);
    for (int64_t i = 0; i < count; i++) {
        sbx_box_row row = { 0 };
        sbx_random_hex(row.id, SBX_ID_LEN / 2);
        snprintf(row.key_id, sizeof row.key_id, "%s", r->key.id);
        snprintf(row.template_name, sizeof row.template_name, "%s", src.template_name);
        snprintf(row.state, sizeof row.state, "running");
        snprintf(row.snapshot_id, sizeof row.snapshot_id, "%s", s.id);
        /* the version its source was made on, as the snapshot recorded it */
        row.stack = strdup(s.stack);
        snprintf(row.template_id, sizeof row.template_id, "%s", s.template_id);
        row.start = s.start ? json_incref(s.start) : NULL;
        snprintf(row.on_timeout, sizeof row.on_timeout, "%s", src.on_timeout);
        row.created_at = sbx_now_wall_ms();
        row.timeout_s = src.timeout_s;
        row.expires_at = row.created_at + src.timeout_s * 1000;
        row.metadata = json_incref(src.metadata);
        row.envs = json_incref(src.envs);
        row.network = src.network ? json_incref(src.network) : NULL;
        row.millicpus = src.millicpus;
        row.memory_mb = src.memory_mb;
        row.disk_mb = src.disk_mb;
        row.pids = src.pids;
        if (sbx_reg_create(&r->d->reg, &row, &err) < 0) {
            sbx_box_row_free(&row);
            sbx_log("error", "event=fork_failed sandbox=%s error=\"%s\"", src.id, err.msg);
            break;
        }
        /* its source's network; memory is not copied: the template's
         * start command runs again */
        sbx_box *nb = sbx_reg_get(&r->d->reg, row.id, NULL);
        sbx_net_policy *np = NULL;
        if (row.network && sbx_net_policy_parse(row.network, &np, &err) < 0)
            np = NULL;
        int started = nb ? sbx_sandbox_network(r->d, nb, np, &err) : 0;
        if (!nb)
            sbx_net_policy_free(np);
        if (nb && started == 0)
            started = sbx_tpl_start(r->d, nb, row.start ? row.start : manifest, &err);
        if (started < 0)
            sbx_reg_end(&r->d->reg, nb, "failed", err.msg);
        if (nb)
            sbx_reg_put(&r->d->reg, nb);
        if (started < 0) {
            sbx_box_row_free(&row);
            break;
        }
        sbx_box_row got;
        if (sbx_store_box_get(r->d->store, row.id, &got) == 1) {
            json_array_append_new(made, sbx_box_json(&got));
            sbx_box_row_free(&got);
        }
        sbx_box_row_free(&row);
        __atomic_add_fetch(&r->d->created, 1, __ATOMIC_RELAXED);
    }
    sbx_box_row_free(&src);
    json_decref(manifest);
    if ((int64_t) json_array_size(made) < count) {
        /* all or nothing: a partial fork is deleted */
        size_t i;
        json_t *v;
        json_array_foreach(made, i, v)
        {
            sbx_box *fb = sbx_reg_get(&r->d->reg, json_string_value(json_object_get(v, "id")), r->key.id);
            if (fb) {
                sbx_reg_end(&r->d->reg, fb, "deleted", "part of a fork that failed");
                sbx_reg_put(&r->d->reg, fb);
            }
        }
        json_decref(made);
        sbx_reply_error(r, 503, "unavailable", "cannot make the forked sandboxes: %s (snapshot %s is kept)", err.msg,
                        s.id);
        sbx_snap_row_free(&s);
        return;
    }
    sbx_log("info", "event=fork sandbox=%s snapshot=%s count=%lld", r->arg[0], s.id, (long long) count);
    sbx_reply_json(r, 201, json_pack("{s:o, s:o}", "snapshot", snap_json(&s), "sandboxes", made));
    sbx_snap_row_free(&s);
}
