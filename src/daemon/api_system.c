/* api_system.c - health, usage, the OpenAPI document, Prometheus metrics. */
#define _GNU_SOURCE
#include "api.h"
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SBX_VERSION
#define SBX_VERSION "dev"
#endif

void sbx_api_health(sbx_req *r)
{
    sbx_reply_json(r, 200, json_pack("{s:s, s:s, s:I}", "status", "ok", "version", SBX_VERSION, "sandboxes_running",
                                     (json_int_t) sbx_reg_count(&r->d->reg, NULL)));
}

void sbx_api_usage(sbx_req *r)
{
    json_t *u = sbx_store_usage(r->d->store, r->key.id, sbx_now_wall_ms());
    if (!u) {
        sbx_reply_error(r, 500, "internal", "cannot read usage");
        return;
    }
    json_object_set_new(u, "key", json_string(r->key.name));
    sbx_reply_json(r, 200, u);
}

void sbx_api_openapi(sbx_req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->d->openapi_len, (void *) r->d->openapi, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    sbx_reply_response(r, 200, resp);
}

void sbx_api_prometheus(sbx_req *r)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        sbx_reply_error(r, 500, "internal", "out of memory");
        return;
    }
    sbx_daemon *d = r->d;
    fprintf(f, "# HELP sbx_sandboxes_running Sandboxes running now.\n# TYPE sbx_sandboxes_running gauge\n");
    size_t all = sbx_reg_count(&d->reg, NULL), ready = sbx_pool_ready();
    fprintf(f, "sbx_sandboxes_running %zu\n", all > ready ? all - ready : 0);
    sbx_pool_metrics(f);
    fprintf(f, "# HELP sbx_sandboxes Sandboxes recorded, by state.\n# TYPE sbx_sandboxes gauge\n");
    json_t *counts = sbx_store_state_counts(d->store);
    const char *k;
    json_t *v;
    json_object_foreach(counts, k, v)
        fprintf(f, "sbx_sandboxes{state=\"%s\"} %lld\n", k, (long long) json_integer_value(v));
    json_decref(counts);
    fprintf(f, "# HELP sbx_sandboxes_created_total Sandboxes created by this sbxd process.\n"
               "# TYPE sbx_sandboxes_created_total counter\nsbx_sandboxes_created_total %llu\n",
            (unsigned long long) __atomic_load_n(&d->created, __ATOMIC_RELAXED));
    fprintf(f, "# HELP sbx_commands_total Commands started by this sbxd process.\n"
               "# TYPE sbx_commands_total counter\nsbx_commands_total %llu\n",
            (unsigned long long) __atomic_load_n(&d->commands, __ATOMIC_RELAXED));
    fprintf(f, "# HELP sbx_http_requests_total HTTP requests.\n# TYPE sbx_http_requests_total counter\n"
               "sbx_http_requests_total %llu\n",
            (unsigned long long) __atomic_load_n(&d->requests, __ATOMIC_RELAXED));
    fprintf(f, "# HELP sbx_http_errors_total HTTP error replies by class.\n# TYPE sbx_http_errors_total counter\n"
               "sbx_http_errors_total{class=\"4xx\"} %llu\nsbx_http_errors_total{class=\"5xx\"} %llu\n",
            (unsigned long long) __atomic_load_n(&d->errors_4xx, __ATOMIC_RELAXED),
            (unsigned long long) __atomic_load_n(&d->errors_5xx, __ATOMIC_RELAXED));
    fprintf(f, "# HELP sbx_uptime_seconds Seconds since sbxd started.\n# TYPE sbx_uptime_seconds gauge\n"
               "sbx_uptime_seconds %.3f\n",
            (double) (sbx_now_wall_ms() - d->started_ms) / 1000.0);
    fclose(f);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
    sbx_reply_response(r, 200, resp);
}
