/* pool.c - warm pools; see pool.h.
 *
 * One refill thread keeps every pool at its size, one sandbox at a time
 * (the spawner makes sandboxes one by one anyway), and sleeps on a
 * condition variable when all are full; a take wakes it.  A pooled
 * sandbox that dies while waiting (the lifecycle thread ends it: sbx-init
 * exited, health check failed) is dropped at the next look and replaced. */
#define _GNU_SOURCE
#include "pool.h"
#include "templates.h"
#include "auth.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_POOLS 16
/* After a failed refill the host is short of something (or the template is
 * broken): wait, doubling up to a minute, so that retries do not keep the
 * spawner from the creates of users. */
#define RETRY_MS 2000
#define RETRY_MAX_MS 60000
/* Refills wait until creates have paused this long, unless the pool is
 * half empty: making a sandbox takes a core for ~10 ms, which should not be
 * taken from the requests of a burst the pool is there to absorb. */
#define QUIET_MS 100

typedef struct pool {
    char template_name[65];
    unsigned size;
    sbx_box **ready;
    size_t n;
    uint64_t hits, misses, failed, stale;
    long backoff_ms;
    double refill_ms_last, refill_ms_sum;
    bool stopped;   /* its template was removed: no refill until one is built again */
    bool kick;      /* its template was (re)built: cut a back-off short */
} pool;

static pool pools[MAX_POOLS];
static size_t npools;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_t thread;
static bool running, stopping;
static double last_take_ms;

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

int sbx_pool_configure(const char *spec, sbx_error *err)
{
    const char *eq = strchr(spec, '=');
    char name[65];
    const char *num = spec;
    if (eq) {
        if ((size_t) (eq - spec) >= sizeof name || eq == spec)
            return sbx_error_set(err, EINVAL, "--pool %s: bad template name", spec);
        snprintf(name, sizeof name, "%.*s", (int) (eq - spec), spec);
        num = eq + 1;
    } else {
        snprintf(name, sizeof name, "%s", SBX_DEFAULT_TEMPLATE);
    }
    char *end;
    long n = strtol(num, &end, 10);
    if (!*num || *end || n < 0 || n > 1000)
        return sbx_error_set(err, EINVAL, "--pool %s: use N or TEMPLATE=N with N from 0 to 1000", spec);
    if (!sbx_template_name_valid(name))
        return sbx_error_set(err, EINVAL, "--pool %s: bad template name '%s'", spec, name);
    for (size_t i = 0; i < npools; i++)
        if (strcmp(pools[i].template_name, name) == 0) {
            pools[i].size = (unsigned) n;
            return 0;
        }
    if (npools == MAX_POOLS)
        return sbx_error_set(err, EINVAL, "--pool: at most %d templates", MAX_POOLS);
    snprintf(pools[npools].template_name, sizeof pools[npools].template_name, "%s", name);
    pools[npools++].size = (unsigned) n;
    return 0;
}

/* Drop ready sandboxes that ended while they waited (under lock); the
 * references go to `out` for release outside the lock. */
static size_t prune(pool *p, sbx_registry *reg, sbx_box **out, size_t max)
{
    size_t k = 0, j = 0;
    pthread_mutex_lock(&reg->lock);
    for (size_t i = 0; i < p->n; i++) {
        if (p->ready[i]->gone && k < max)
            out[k++] = p->ready[i];
        else
            p->ready[j++] = p->ready[i];
    }
    pthread_mutex_unlock(&reg->lock);
    p->n = j;
    return k;
}

/* Is b of the version of its template installed now?  (The stack's id
 * line: a file read, no JSON, cheap enough for every take.) */
static bool is_current(sbx_daemon *d, const char *template_name, const sbx_box *b)
{
    char id[33];
    return sbx_template_read_id(d->reg.home, template_name, id) == 0 && strcmp(id, b->tpl.id) == 0;
}

/* Make one sandbox for p; returns it referenced, or NULL. */
static sbx_box *make(sbx_daemon *d, const char *template_name, sbx_error *err)
{
    sbx_box_row row = { 0 };
    sbx_random_hex(row.id, SBX_ID_LEN / 2);
    snprintf(row.template_name, sizeof row.template_name, "%s", template_name);
    snprintf(row.state, sizeof row.state, "pooled");
    row.created_at = sbx_now_wall_ms();
    row.metadata = json_object();
    /* the template's version now: its stack, start command and envs */
    json_t *manifest = NULL;
    if (sbx_tpl_row_pin(d, &row, &manifest, err) < 0) {
        sbx_box_row_free(&row);
        return NULL;
    }
    json_t *envs = json_object_get(manifest, "envs");
    row.envs = json_is_object(envs) ? json_deep_copy(envs) : json_object();
    json_decref(manifest);
    row.millicpus = SBX_DEFAULT_MILLICPUS;
    row.memory_mb = SBX_DEFAULT_MEMORY >> 20;
    row.disk_mb = SBX_DEFAULT_DISK >> 20;
    row.pids = SBX_DEFAULT_PIDS;
    sbx_box *b = NULL;
    if (sbx_reg_create(&d->reg, &row, err) == 0)
        b = sbx_reg_get(&d->reg, row.id, NULL);
    /* ready means started: the template's start command runs now */
    if (b && sbx_tpl_start(d, b, row.start, err) < 0) {
        sbx_reg_end(&d->reg, b, "failed", err->msg);
        sbx_reg_put(&d->reg, b);
        b = NULL;
    }
    sbx_box_row_free(&row);
    return b;
}

static void *refill(void *arg)
{
    sbx_daemon *d = arg;
    pthread_mutex_lock(&lock);
    while (!stopping) {
        pool *p = NULL;
        for (size_t i = 0; i < npools && !p; i++) {
            sbx_box *dead[16];
            size_t k = prune(&pools[i], &d->reg, dead, 16);
            if (k) {
                pthread_mutex_unlock(&lock);
                for (size_t j = 0; j < k; j++)
                    sbx_reg_put(&d->reg, dead[j]);
                pthread_mutex_lock(&lock);
            }
            if (pools[i].n < pools[i].size && !pools[i].stopped)
                p = &pools[i];
        }
        double quiet_for = mono_ms() - last_take_ms;
        if (p && p->n > p->size / 2 && quiet_for < QUIET_MS) {
            p = NULL; /* busy: come back when it is quiet */
        } else {
            quiet_for = -1;
        }
        if (!p) {
            /* full (or busy): sleep until a take, the end of the burst, or a
             * few seconds, to notice pooled sandboxes that died */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            long wait_ms = quiet_for >= 0 ? (long) (QUIET_MS - quiet_for) + 1 : 5000;
            ts.tv_sec += wait_ms / 1000;
            ts.tv_nsec += wait_ms % 1000 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&wake, &lock, &ts);
            continue;
        }
        char name[65];
        snprintf(name, sizeof name, "%s", p->template_name);
        p->kick = false;
        pthread_mutex_unlock(&lock);
        double t0 = mono_ms();
        sbx_error err = { 0 };
        sbx_box *b = make(d, name, &err);
        double took = mono_ms() - t0;
        pthread_mutex_lock(&lock);
        if (!b) {
            p->failed++;
            p->backoff_ms = p->backoff_ms ? p->backoff_ms * 2 : RETRY_MS;
            if (p->backoff_ms > RETRY_MAX_MS)
                p->backoff_ms = RETRY_MAX_MS;
            sbx_log("warn", "event=pool_refill_failed template=%s retry_in_ms=%ld error=\"%s\"", name,
                    p->backoff_ms, err.msg);
            /* a plain sleep: takes must not cut the back-off short (a
             * build of the template does: it may be what was missing) */
            double until = mono_ms() + (double) p->backoff_ms;
            while (!stopping && !p->kick && mono_ms() < until) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&wake, &lock, &ts);
            }
            continue;
        }
        p->backoff_ms = 0;
        /* The template may have been rebuilt (or removed) while this one
         * was made: it would be of the old version.  Such a sandbox goes. */
        bool current = !p->stopped && !p->kick && is_current(d, name, b);
        sbx_box **v = realloc(p->ready, (p->n + 1) * sizeof *v);
        if (stopping || !v || !current) {
            if (v)
                p->ready = v;
            bool removed = p->stopped;
            if (!current)
                p->stale++;
            pthread_mutex_unlock(&lock);
            sbx_reg_end(&d->reg, b, "deleted",
                        stopping || !v ? "warm pool stopped"
                        : removed      ? "its template was removed: warm pool stopped"
                                       : "its template was rebuilt: warm pool renewed");
            sbx_reg_put(&d->reg, b);
            if (removed) /* the layers it held may be the last use of the removed template's */
                sbx_tpl_sweep_layers(d, false);
            pthread_mutex_lock(&lock);
            continue;
        }
        p->ready = v;
        p->ready[p->n++] = b;
        p->refill_ms_last = took;
        p->refill_ms_sum += took;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int sbx_pool_start(sbx_daemon *d, sbx_error *err)
{
    bool any = false;
    for (size_t i = 0; i < npools; i++)
        any |= pools[i].size > 0;
    if (!any)
        return 0;
    int r = pthread_create(&thread, NULL, refill, d);
    if (r)
        return sbx_error_set(err, r, "start the warm pool thread");
    running = true;
    return 0;
}

void sbx_pool_stop(sbx_daemon *d)
{
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    if (running)
        pthread_join(thread, NULL);
    running = false;
    /* Pooled sandboxes belong to nobody: end them rather than leave them
     * (the next start would, too). */
    for (size_t i = 0; i < npools; i++) {
        for (size_t j = 0; j < pools[i].n; j++) {
            sbx_reg_end(&d->reg, pools[i].ready[j], "deleted", "warm pool stopped");
            sbx_reg_put(&d->reg, pools[i].ready[j]);
        }
        free(pools[i].ready);
        pools[i].ready = NULL;
        pools[i].n = 0;
    }
}

sbx_box *sbx_pool_take(sbx_daemon *d, const char *template_name, uint64_t disk_mb)
{
    sbx_box *b = NULL, *dead[8], *stale[8];
    size_t ndead = 0, nstale = 0;
    /* the version installed now: a pooled sandbox of an older one (made
     * just before a rebuild swapped the template) is never handed out */
    char current[33];
    bool known = sbx_template_read_id(d->reg.home, template_name, current) == 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < npools; i++) {
        pool *p = &pools[i];
        if (strcmp(p->template_name, template_name) != 0 || p->size == 0)
            continue;
        /* pooled sandboxes have the default writable layer */
        if (disk_mb << 20 == SBX_DEFAULT_DISK && known) {
            pthread_mutex_lock(&d->reg.lock);
            /* newest first: the one least likely to have been paged out */
            while (p->n && !b && ndead < 8 && nstale < 8) {
                sbx_box *c = p->ready[--p->n];
                if (c->gone)
                    dead[ndead++] = c; /* ended while it waited */
                else if (strcmp(c->tpl.id, current) != 0)
                    stale[nstale++] = c;
                else
                    b = c;
            }
            pthread_mutex_unlock(&d->reg.lock);
        }
        if (b)
            p->hits++;
        else
            p->misses++;
        p->stale += nstale;
        last_take_ms = mono_ms();
        pthread_cond_broadcast(&wake);
        break;
    }
    pthread_mutex_unlock(&lock);
    for (size_t i = 0; i < ndead; i++)
        sbx_reg_put(&d->reg, dead[i]);
    for (size_t i = 0; i < nstale; i++) {
        sbx_reg_end(&d->reg, stale[i], "deleted", "its template was rebuilt: warm pool renewed");
        sbx_reg_put(&d->reg, stale[i]);
    }
    return b;
}

/* Take every ready sandbox of the pool of `name` out of it (under lock);
 * returns the pool or NULL. */
static pool *drain(const char *name, sbx_box ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < npools; i++) {
        if (strcmp(pools[i].template_name, name) != 0)
            continue;
        *out = pools[i].ready;
        *n = pools[i].n;
        pools[i].ready = NULL;
        pools[i].n = 0;
        return &pools[i];
    }
    return NULL;
}

static void end_all(sbx_daemon *d, sbx_box **v, size_t n, const char *why)
{
    for (size_t i = 0; i < n; i++) {
        sbx_reg_end(&d->reg, v[i], "deleted", why);
        sbx_reg_put(&d->reg, v[i]);
    }
    free(v);
}

void sbx_pool_template_changed(sbx_daemon *d, const char *name)
{
    sbx_box **v;
    size_t n;
    pthread_mutex_lock(&lock);
    pool *p = drain(name, &v, &n);
    if (p) {
        p->stopped = false;
        p->kick = true;
        p->backoff_ms = 0;
        last_take_ms = 0; /* a renewal, not a burst of creates: refill now */
        pthread_cond_broadcast(&wake);
    }
    pthread_mutex_unlock(&lock);
    if (n)
        sbx_log("info", "event=pool_renewed template=%s ended=%zu", name, n);
    end_all(d, v, n, "its template was rebuilt: warm pool renewed");
}

bool sbx_pool_template_removed(sbx_daemon *d, const char *name)
{
    sbx_box **v;
    size_t n;
    pthread_mutex_lock(&lock);
    pool *p = drain(name, &v, &n);
    bool had = p && p->size > 0;
    if (p) {
        p->stopped = true;
        p->kick = true; /* a refill sleeping off a failure notices */
        pthread_cond_broadcast(&wake);
    }
    pthread_mutex_unlock(&lock);
    if (had)
        sbx_log("info", "event=pool_stopped template=%s ended=%zu reason=\"template removed\"", name, n);
    end_all(d, v, n, "its template was removed: warm pool stopped");
    return had;
}

size_t sbx_pool_ready(void)
{
    size_t n = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < npools; i++)
        n += pools[i].n;
    pthread_mutex_unlock(&lock);
    return n;
}

void sbx_pool_metrics(FILE *f)
{
    pthread_mutex_lock(&lock);
    fprintf(f, "# HELP sbx_pool_ready Warm sandboxes ready to hand out, by template.\n# TYPE sbx_pool_ready gauge\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_ready{template=\"%s\"} %zu\n", pools[i].template_name, pools[i].n);
    fprintf(f, "# HELP sbx_pool_size Configured warm pool size, by template.\n# TYPE sbx_pool_size gauge\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_size{template=\"%s\"} %u\n", pools[i].template_name, pools[i].size);
    fprintf(f, "# HELP sbx_pool_hits_total Creates served from the warm pool.\n# TYPE sbx_pool_hits_total counter\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_hits_total{template=\"%s\"} %llu\n", pools[i].template_name,
                (unsigned long long) pools[i].hits);
    fprintf(f, "# HELP sbx_pool_misses_total Creates of a pooled template that found the pool empty (or another "
               "disk size).\n# TYPE sbx_pool_misses_total counter\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_misses_total{template=\"%s\"} %llu\n", pools[i].template_name,
                (unsigned long long) pools[i].misses);
    fprintf(f, "# HELP sbx_pool_stale_total Pooled sandboxes ended unused because their template was rebuilt.\n"
               "# TYPE sbx_pool_stale_total counter\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_stale_total{template=\"%s\"} %llu\n", pools[i].template_name,
                (unsigned long long) pools[i].stale);
    fprintf(f, "# HELP sbx_pool_refill_seconds Time to make the last pooled sandbox.\n"
               "# TYPE sbx_pool_refill_seconds gauge\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_refill_seconds{template=\"%s\"} %.6f\n", pools[i].template_name,
                pools[i].refill_ms_last / 1000.0);
    fprintf(f, "# HELP sbx_pool_refill_failures_total Pooled sandboxes that could not be made.\n"
               "# TYPE sbx_pool_refill_failures_total counter\n");
    for (size_t i = 0; i < npools; i++)
        fprintf(f, "sbx_pool_refill_failures_total{template=\"%s\"} %llu\n", pools[i].template_name,
                (unsigned long long) pools[i].failed);
    pthread_mutex_unlock(&lock);
}
