/* runner.c - `sbx fuzz run`: the tests of a seed, run by N workers, each
 * in a sandbox of its own that is deleted after it; every result written
 * as it ends. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const fz_domain *const all_domains[] = { &fz_domain_fs,        &fz_domain_encoding, &fz_domain_exec,
                                                &fz_domain_lang,      &fz_domain_lifecycle, &fz_domain_limits,
                                                &fz_domain_security,  &fz_domain_data,      &fz_domain_sdlc };
#define N_DOMAINS (sizeof all_domains / sizeof *all_domains)

typedef struct job {
    const fz_domain *domain;
    const fz_test_def *def;
    uint64_t seed;
} job;

typedef struct pool {
    const char *url, *key;
    fz_results *res;
    int64_t run;
    job *jobs;
    size_t n, next;
    size_t counts[6];
    size_t done;
    bool tty;
    pthread_mutex_t lock;
} pool;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static void progress(pool *p)
{
    size_t fail = p->counts[FZ_INTERFACE] + p->counts[FZ_SANDBOX] + p->counts[FZ_HARNESS] + p->counts[FZ_TIMEOUT];
    if (p->tty) {
        int width = 30, filled = (int) (p->done * (size_t) width / (p->n ? p->n : 1));
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu  pass %zu  fail %zu  unsupported %zu ", filled,
                "##############################", width - filled, "", p->done, p->n, p->counts[FZ_PASS], fail,
                p->counts[FZ_UNSUPPORTED]);
    } else if (p->done == p->n || p->done % (p->n / 10 ? p->n / 10 : 1) == 0) {
        fprintf(stderr, "sbx fuzz: %zu/%zu done, %zu passed, %zu failed\n", p->done, p->n, p->counts[FZ_PASS], fail);
    }
}

static void run_one(pool *p, sbx_http *http, const job *j)
{
    fz_ctx c = { .http = http, .rng = { j->seed }, .res = p->res };
    c.test_row = fz_results_test(p->res, p->run, j->domain->name, j->def->name, j->seed);
    double t0 = now_ms();
    _cleanup_json_ json_t *body = json_pack("{s:i, s:{s:s, s:s}}", "timeout_s", 600, "metadata", "sbx.fuzz", "1",
                                            "test", j->def->name);
    if (fz_create(&c, body) == 0)
        j->def->run(&c);
    if (c.sandbox[0]) {
        char path[80];
        snprintf(path, sizeof path, "/v1/sandboxes/%s", c.sandbox);
        long st = fz_request_status(&c, "DELETE", path, NULL);
        if (st != 204)
            fz_fail(&c, FZ_INTERFACE, "DELETE of the test's sandbox answered %ld", st);
    }
    fz_results_end(p->res, c.test_row, c.verdict, c.why, now_ms() - t0);
    pthread_mutex_lock(&p->lock);
    p->counts[c.verdict]++;
    p->done++;
    progress(p);
    if (c.verdict != FZ_PASS && c.verdict != FZ_UNSUPPORTED && !p->tty)
        fprintf(stderr, "sbx fuzz: %s (seed %llu): %s: %s\n", j->def->name, (unsigned long long) j->seed,
                fz_verdict_name(c.verdict), c.why);
    pthread_mutex_unlock(&p->lock);
}

static void *worker(void *arg)
{
    pool *p = arg;
    sbx_error err = { 0 };
    sbx_http *http = sbx_http_new(p->url, p->key, &err);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next < p->n ? p->next++ : p->n;
        pthread_mutex_unlock(&p->lock);
        if (i == p->n)
            break;
        if (http)
            run_one(p, http, &p->jobs[i]);
    }
    sbx_http_free(http);
    return NULL;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    fz_rng r = { a ^ (b * 0x9e3779b97f4a7c15ULL) };
    return fz_next(&r);
}

static const char run_usage[] =
    "usage: sbx fuzz run [--target URL] [--key KEY] [--interface rest] [--count N] [--seed N] [--jobs N]\n"
    "                    [--domain fs,encoding,exec] [--db FILE]\n";

int fz_run_main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "target", required_argument, NULL, 't' }, { "key", required_argument, NULL, 'k' },
        { "interface", required_argument, NULL, 'i' }, { "count", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },   { "jobs", required_argument, NULL, 'j' },
        { "domain", required_argument, NULL, 'd' }, { "db", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
    };
    const char *url = getenv("SBX_URL"), *key = getenv("SBX_API_KEY"), *iface = "rest", *domains = NULL;
    const char *db = "fuzz-results.db";
    long count = 1000, jobs = 4;
    uint64_t seed = (uint64_t) time(NULL);
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        switch (o) {
        case 't': url = optarg; break;
        case 'k': key = optarg; break;
        case 'i': iface = optarg; break;
        case 'n': count = strtol(optarg, &end, 10); break;
        case 's': seed = strtoull(optarg, &end, 10); break;
        case 'j': jobs = strtol(optarg, &end, 10); break;
        case 'd': domains = optarg; break;
        case 'o': db = optarg; break;
        case 'h': fputs(run_usage, stdout); return 0;
        default: fputs(run_usage, stderr); return 2;
        }
        if (end && *end) {
            fprintf(stderr, "sbx fuzz: bad number '%s'\n%s", optarg, run_usage);
            return 2;
        }
    }
    if (optind < argc || count < 1 || count > 1000000 || jobs < 1 || jobs > 64) {
        fprintf(stderr, "sbx fuzz: --count 1..1000000, --jobs 1..64, no other arguments\n%s", run_usage);
        return 2;
    }
    if (!url || !key) {
        fprintf(stderr, "sbx fuzz: give --target URL and --key KEY (or SBX_URL and SBX_API_KEY)\n");
        return 2;
    }
    if (strcmp(iface, "rest") != 0) {
        fprintf(stderr, "sbx fuzz: --interface %s: only rest so far (mcp is next)\n", iface);
        return 2;
    }
    const fz_domain *chosen[N_DOMAINS];
    size_t nd = 0;
    for (size_t i = 0; i < N_DOMAINS; i++) {
        if (domains) {
            char pat[64];
            snprintf(pat, sizeof pat, ",%s,", all_domains[i]->name);
            char list[512];
            snprintf(list, sizeof list, ",%s,", domains);
            if (!strstr(list, pat))
                continue;
        }
        chosen[nd++] = all_domains[i];
    }
    if (!nd) {
        fprintf(stderr, "sbx fuzz: --domain %s: none of fs, encoding, exec, lang, lifecycle, limits, security, data, sdlc\n",
                domains);
        return 2;
    }
    /* the tests: count spread over the domains, each domain's workflows in
     * turn, every test with a seed of its own */
    pool p = { .url = url, .key = key, .n = (size_t) count, .tty = isatty(2) };
    p.jobs = calloc(p.n, sizeof *p.jobs);
    for (size_t i = 0; i < p.n; i++) {
        const fz_domain *d = chosen[i % nd];
        size_t k = i / nd;
        p.jobs[i] = (job){ d, &d->tests[k % d->n], mix(seed, i) };
    }
    sbx_error err = { 0 };
    if (fz_results_open(&p.res, db, &err) < 0) {
        fprintf(stderr, "sbx fuzz: %s\n", err.msg);
        return 125;
    }
    _cleanup_json_ json_t *options = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s?}", "target", url, "interface", iface,
                                               "count", (json_int_t) count, "seed", (json_int_t) seed, "jobs",
                                               (json_int_t) jobs, "domains", domains);
    p.run = fz_results_run(p.res, options);
    pthread_mutex_init(&p.lock, NULL);
    fprintf(stderr, "sbx fuzz: run %lld: %ld tests, seed %llu, %ld jobs, results in %s\n", (long long) p.run, count,
            (unsigned long long) seed, jobs, db);
    double t0 = now_ms();
    pthread_t th[64];
    for (long i = 0; i < jobs; i++)
        pthread_create(&th[i], NULL, worker, &p);
    for (long i = 0; i < jobs; i++)
        pthread_join(th[i], NULL);
    fz_results_finish(p.res, p.run);
    if (p.tty)
        fputc('\n', stderr);
    size_t failed = p.counts[FZ_INTERFACE] + p.counts[FZ_SANDBOX] + p.counts[FZ_HARNESS] + p.counts[FZ_TIMEOUT];
    printf("run %lld: %zu passed, %zu failed (interface %zu, sandbox %zu, harness %zu, timeout %zu), %zu "
           "unsupported in %.1f s\n",
           (long long) p.run, p.counts[FZ_PASS], failed, p.counts[FZ_INTERFACE], p.counts[FZ_SANDBOX],
           p.counts[FZ_HARNESS], p.counts[FZ_TIMEOUT], p.counts[FZ_UNSUPPORTED], (now_ms() - t0) / 1000);
    fz_results_close(p.res);
    free(p.jobs);
    return failed ? 1 : 0;
}
