/* lifecycle.c - see lifecycle.h. */
#define _GNU_SOURCE
#include "lifecycle.h"
#include "agent.h"
#include "log.h"
#include "templates.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PING_TIMEOUT_MS 5000
#define SAMPLE_EVERY_MS 5000
/* how often layers let go of but still used by a live sandbox are tried again */
#define SWEEP_EVERY_MS 10000

static pthread_t thread;
static volatile int stopping;

/* PING with a short deadline: 0 answered, -1 not. */
static int ping(const sbx_box *b, char *why, size_t len)
{
    sbx_error err = { 0 };
    int fd = sbx_agent_connect(b->sock, &err);
    if (fd < 0) {
        snprintf(why, len, "sbx-init does not accept connections: %s", err.msg);
        return -1;
    }
    uint32_t type;
    uint8_t *p = NULL;
    size_t plen;
    int r = sbx_agent_send(fd, SBX_MSG_PING, NULL, 0);
    if (r == 0)
        r = sbx_agent_recv(fd, PING_TIMEOUT_MS, &type, &p, &plen);
    close(fd);
    free(p);
    if (r <= 0 || type != SBX_MSG_OK) {
        snprintf(why, len, "sbx-init did not answer a health check within %d ms", PING_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

static bool init_exited(const sbx_box *b)
{
    struct pollfd p = { b->pidfd, POLLIN, 0 };
    return b->pidfd >= 0 && poll(&p, 1, 0) == 1;
}

static void *run(void *arg)
{
    sbx_daemon *d = arg;
    int64_t last_health = sbx_now_wall_ms(), last_sample = 0, last_sweep = 0;
    while (!stopping) {
        int64_t now = sbx_now_wall_ms();
        bool health = now - last_health >= (int64_t) d->health_interval * 1000;
        bool sample = now - last_sample >= SAMPLE_EVERY_MS;
        size_t n;
        sbx_box **v = sbx_reg_snapshot(&d->reg, &n);
        for (size_t i = 0; v && i < n; i++) {
            sbx_box *b = v[i];
            pthread_mutex_lock(&d->reg.lock);
            int64_t exp = b->expires_at;
            pthread_mutex_unlock(&d->reg.lock);
            char why[300];
            if (init_exited(b)) {
                sbx_reg_end(&d->reg, b, "failed", "sbx-init exited");
            } else if (exp && now >= exp) {
                sbx_error err = { 0 };
                /* on_timeout "pause": a fresh timeout waits for the resume */
                if (!b->pause_on_timeout || sbx_reg_pause(&d->reg, b, true, b->timeout_s * 1000, &err) < 0)
                    sbx_reg_end(&d->reg, b, "expired", "the sandbox's timeout passed");
                else
                    sbx_log("info", "event=paused sandbox=%s reason=\"timeout (on_timeout: pause)\"", b->id);
            } else if (health && ping(b, why, sizeof why) < 0) {
                sbx_log("warn", "event=health sandbox=%s result=unhealthy reason=\"%s\"", b->id, why);
                sbx_reg_end(&d->reg, b, "unhealthy", why);
            } else if (sample) {
                sbx_reg_sample(&d->reg, b, now);
            }
            sbx_reg_put(&d->reg, b);
        }
        free(v);
        /* layers let go of that live sandboxes still used (a rebuilt
         * template's old version): freed once those have ended */
        if (now - last_sweep >= SWEEP_EVERY_MS && sbx_tpl_released_pending()) {
            sbx_tpl_sweep_layers(d, false);
            last_sweep = now;
        }
        if (health)
            last_health = now;
        if (sample)
            last_sample = now;
        /* a 250 ms tick: timeouts are honoured within a quarter second */
        struct timespec ts = { 0, 250 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int sbx_lifecycle_start(sbx_daemon *d, sbx_error *err)
{
    int r = pthread_create(&thread, NULL, run, d);
    if (r)
        return sbx_error_set(err, r, "start the lifecycle thread");
    return 0;
}

void sbx_lifecycle_stop(void)
{
    stopping = 1;
    pthread_join(thread, NULL);
}
