/* pool.h - warm pools: per template, sandboxes made ahead of time, so that
 * POST /v1/sandboxes only has to hand one over.
 *
 * A pooled sandbox is complete (namespaces, mounts, cgroups, sbx-init and
 * its zygote running) and owned by nobody: its database row says "pooled"
 * with an empty key, so no key can see or reach it.  Taking one is a claim:
 * the requested limits are written to its cgroups, the row becomes the
 * caller's "running" sandbox in one UPDATE (WHERE state = 'pooled': never
 * handed out twice), and a refill thread makes the next one.  Nobody has
 * run anything in a pooled sandbox, so nothing of another user can be in
 * it; a deleted sandbox is never recycled into the pool.
 *
 * The disk limit is the size of the writable layer, fixed when the sandbox
 * is made: a request for another size is a miss (a cold create). */
#ifndef SBX_DAEMON_POOL_H
#define SBX_DAEMON_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "http.h"

/* "NAME=N" or "N" (the base template): how many to keep ready. */
int sbx_pool_configure(const char *spec, sbx_error *err);

/* Start the refill thread (after reconcile; no-op without pools). */
int sbx_pool_start(sbx_daemon *d, sbx_error *err);

/* Stop refilling and end the sandboxes waiting in the pools. */
void sbx_pool_stop(sbx_daemon *d);

/* A ready sandbox of `template` with a writable layer of disk_mb,
 * referenced and out of the pool; NULL on a miss.  The caller claims it
 * (sbx_reg_claim) or ends it. */
sbx_box *sbx_pool_take(sbx_daemon *d, const char *template_name, uint64_t disk_mb);

/* Template `name` was installed anew (a build, RENAME_EXCHANGE over an
 * older version): the sandboxes its pool holds are of the old version, so
 * they end, and the pool refills from the new one (a stopped pool starts
 * again).  No-op without a pool of it. */
void sbx_pool_template_changed(sbx_daemon *d, const char *name);

/* Template `name` is being removed: its pool stops (until a template of
 * that name is built again) and its sandboxes end.  True if it had a pool. */
bool sbx_pool_template_removed(sbx_daemon *d, const char *name);

/* Sandboxes waiting in all pools. */
size_t sbx_pool_ready(void);

/* Prometheus lines: ready sandboxes, hits, misses, refill time, per
 * template, appended to f. */
void sbx_pool_metrics(FILE *f);

#endif
