/* runner.c - `sbx fuzz run`: the tests of a seed, run by N workers, each
 * in a sandbox of its own that is deleted after it; every result written
 * as it ends.  `--resume RUN` runs what an interrupted run had not
 * finished: the tests are a function of the seed and the options kept
 * with the run, so the same list is made again and the tests that ended
 * are left out. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"
#include "../mcp/mcp.h"

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const fz_domain *const all_domains[] = { &fz_domain_fs,        &fz_domain_encoding, &fz_domain_exec,
                                                &fz_domain_lang,      &fz_domain_lifecycle, &fz_domain_limits,
                                                &fz_domain_security,  &fz_domain_data,      &fz_domain_sdlc,
                                                &fz_domain_network };
#define N_DOMAINS (sizeof all_domains / sizeof *all_domains)

typedef struct job {
    const fz_domain *domain;
    const fz_test_def *def;
    uint64_t seed;
} job;

typedef struct pool {
    const char *url, *key, *template_;
    fz_iface iface;
    long test_timeout_s; /* each test's deadline (--test-timeout) */
    fz_results *res;
    int64_t run;
    job *jobs;
    size_t n, next; /* the jobs to run, the next one to take */
    size_t total;   /* the run's tests (a resumed run's earlier ones too) */
    size_t counts[6];
    size_t done;
    bool tty;
    pthread_mutex_t lock;
} pool;

/* SIGINT/SIGTERM: no new test starts; those running end (and delete
 * their sandboxes), so the run can be resumed.  A second one stops now. */
static volatile sig_atomic_t stopping;

static void on_stop(int sig)
{
    if (stopping) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    stopping = 1;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* The bar on a terminal (redrawn in place with \r), a line per tenth of
 * the run otherwise.  Called with p->lock held. */
static void progress(pool *p)
{
    size_t fail = p->counts[FZ_INTERFACE] + p->counts[FZ_SANDBOX] + p->counts[FZ_HARNESS] + p->counts[FZ_TIMEOUT];
    if (p->tty) {
        int width = 24, filled = (int) (p->done * (size_t) width / (p->total ? p->total : 1));
        fprintf(stderr, "\r[%.*s%*s] %zu/%zu pass %zu fail %zu unsupported %zu", filled,
                "########################", width - filled, "", p->done, p->total, p->counts[FZ_PASS], fail,
                p->counts[FZ_UNSUPPORTED]);
    } else if (p->done == p->total || p->done % (p->total / 10 ? p->total / 10 : 1) == 0) {
        fprintf(stderr, "sbx fuzz: %zu/%zu done, %zu passed, %zu failed\n", p->done, p->total, p->counts[FZ_PASS],
                fail);
    }
}

/* A line per failure, as it happens; on a terminal above the bar: the
 * bar's line is cleared, the failure printed on it, and progress() draws
 * the bar again below.  Called with p->lock held. */
static void failure_line(pool *p, const job *j, const fz_ctx *c)
{
    fprintf(stderr, "%ssbx fuzz: %s (seed %llu): %s: %s\n", p->tty ? "\r\033[K" : "", j->def->name,
            (unsigned long long) j->seed, fz_verdict_name(c->verdict), c->why);
}

/* What the clean-up after a test may take (deletes of its sandboxes),
 * past its deadline: a hung service then costs a worker this much more. */
#define CLEANUP_MS 30000.0

/* t NULL: the worker could not connect (why says why): the test fails
 * as the interface's, it is not skipped.
 *
 * The test's deadline bounds every request it makes (target.c gives none
 * longer than what is left), so a service that hangs ends the test with
 * `timeout` and the worker goes on to the next; the test's sandboxes are
 * then deleted within CLEANUP_MS more. */
static void run_one(pool *p, fz_target *t, const char *why, const job *j)
{
    fz_ctx c = { .t = t, .rng = { j->seed }, .res = p->res, .template_ = p->template_, .name = j->def->name,
                 .seed = j->seed, .test_timeout_s = p->test_timeout_s };
    c.test_row = fz_results_test(p->res, p->run, j->domain->name, j->def->name, j->seed);
    double t0 = now_ms();
    c.deadline = t0 + 1000.0 * (double) p->test_timeout_s;
    _cleanup_json_ json_t *body = json_pack("{s:i}", "timeout_s", 600);
    if (!t)
        fz_fail(&c, FZ_INTERFACE, "connect: %s", why);
    else if (fz_create(&c, body) == 0)
        j->def->run(&c);
    c.deadline = now_ms() + CLEANUP_MS;
    if (t)
        fz_delete_owned(&c);
    fz_results_end(p->res, c.test_row, c.verdict, c.why, now_ms() - t0);
    pthread_mutex_lock(&p->lock);
    p->counts[c.verdict]++;
    p->done++;
    if (c.verdict != FZ_PASS && c.verdict != FZ_UNSUPPORTED)
        failure_line(p, j, &c);
    progress(p);
    pthread_mutex_unlock(&p->lock);
}

static void *worker(void *arg)
{
    pool *p = arg;
    sbx_error err = { 0 };
    fz_target *t = fz_target_new(p->iface, p->url, p->key, &err);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t i = p->next < p->n && !stopping ? p->next++ : p->n;
        pthread_mutex_unlock(&p->lock);
        if (i == p->n)
            break;
        run_one(p, t, err.msg, &p->jobs[i]);
    }
    fz_target_free(t);
    return NULL;
}

static uint64_t mix(uint64_t a, uint64_t b)
{
    fz_rng r = { a ^ (b * 0x9e3779b97f4a7c15ULL) };
    return fz_next(&r);
}

static const char run_usage[] =
    "usage: sbx fuzz run [--target URL] [--key KEY] [--interface rest|mcp] [--count N] [--seed N] [--jobs N]\n"
    "                    [--domain D,...] [--template NAME] [--test-timeout S] [--db FILE]\n"
    "       sbx fuzz run --resume RUN [--key KEY] [--jobs N] [--db FILE]\n";

/* Resuming: a job whose seed already has a verdict is done. */
typedef struct resumed {
    pool *p;
    uint64_t *seeds;
    size_t n;
} resumed;

static void on_done(void *ctx, uint64_t seed, const char *verdict)
{
    resumed *r = ctx;
    uint64_t *s = realloc(r->seeds, (r->n + 1) * sizeof *s);
    if (!s)
        return;
    r->seeds = s;
    r->seeds[r->n++] = seed;
    for (int v = FZ_PASS; v <= FZ_UNSUPPORTED; v++)
        if (verdict && strcmp(verdict, fz_verdict_name((fz_verdict) v)) == 0)
            r->p->counts[v]++;
    r->p->done++;
}

static bool seed_done(const resumed *r, uint64_t seed)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->seeds[i] == seed)
            return true;
    return false;
}

int fz_run_main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "target", required_argument, NULL, 't' }, { "key", required_argument, NULL, 'k' },
        { "interface", required_argument, NULL, 'i' }, { "count", required_argument, NULL, 'n' },
        { "seed", required_argument, NULL, 's' },   { "jobs", required_argument, NULL, 'j' },
        { "domain", required_argument, NULL, 'd' }, { "db", required_argument, NULL, 'o' },
        { "resume", required_argument, NULL, 'r' }, { "template", required_argument, NULL, 'T' },
        { "test-timeout", required_argument, NULL, 'D' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *url = getenv("SBX_URL"), *key = getenv("SBX_API_KEY"), *iface = "rest", *domains = NULL;
    const char *db = "fuzz-results.db", *template_ = NULL;
    long count = 1000, jobs = 0, resume = 0, test_timeout = -1; /* -1: not given */
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
        case 'r': resume = strtol(optarg, &end, 10); break;
        case 'T': template_ = optarg; break;
        case 'D': test_timeout = strtol(optarg, &end, 10); break;
        case 'h': fputs(run_usage, stdout); return 0;
        default: fputs(run_usage, stderr); return 2;
        }
        if (end && *end) {
            fprintf(stderr, "sbx fuzz: bad number '%s'\n%s", optarg, run_usage);
            return 2;
        }
    }
    sbx_error err = { 0 };
    fz_results *res = NULL;
    _cleanup_json_ json_t *kept = NULL;
    if (resume) { /* the run's own options, but for the key (never stored) and --jobs */
        if (fz_results_open(&res, db, &err) < 0) {
            fprintf(stderr, "sbx fuzz: %s\n", err.msg);
            return 125;
        }
        kept = fz_results_options(res, resume);
        if (!kept) {
            fprintf(stderr, "sbx fuzz: --resume %ld: no such run in %s\n", resume, db);
            fz_results_close(res);
            return 2;
        }
        url = json_string_value(json_object_get(kept, "target"));
        iface = json_string_value(json_object_get(kept, "interface")) ?: "rest";
        count = (long) json_integer_value(json_object_get(kept, "count"));
        seed = (uint64_t) json_integer_value(json_object_get(kept, "seed"));
        domains = json_string_value(json_object_get(kept, "domains"));
        template_ = json_string_value(json_object_get(kept, "template"));
        if (!jobs)
            jobs = (long) json_integer_value(json_object_get(kept, "jobs"));
        if (test_timeout < 0 && json_is_integer(json_object_get(kept, "test_timeout")))
            test_timeout = (long) json_integer_value(json_object_get(kept, "test_timeout"));
    }
    if (!jobs)
        jobs = 4;
    if (test_timeout < 0)
        test_timeout = 120; /* generous: the heaviest test (100 MiB over MCP) takes ~15 s on 2 busy cores */
    if (optind < argc || count < 1 || count > 1000000 || jobs < 1 || jobs > 64 || test_timeout < 1 ||
        test_timeout > 86400) {
        fprintf(stderr, "sbx fuzz: --count 1..1000000, --jobs 1..64, --test-timeout 1..86400, no other arguments\n%s",
                run_usage);
        return 2;
    }
    if (!url || !key) {
        fprintf(stderr, "sbx fuzz: give --target URL and --key KEY (or SBX_URL and SBX_API_KEY)\n");
        return 2;
    }
    if (strcmp(iface, "rest") != 0 && strcmp(iface, "mcp") != 0) {
        fprintf(stderr, "sbx fuzz: --interface %s: rest or mcp\n", iface);
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
        fprintf(stderr, "sbx fuzz: --domain %s: none of fs, encoding, exec, lang, lifecycle, limits, security, data, sdlc, network\n",
                domains);
        return 2;
    }
    /* the tests: count spread over the domains, each domain's workflows in
     * turn, every test with a seed of its own */
    pool p = { .url = url, .key = key, .template_ = template_, .iface = strcmp(iface, "mcp") == 0 ? FZ_MCP : FZ_REST, .tty = isatty(2),
               .res = res, .test_timeout_s = test_timeout };
    if (!p.res && fz_results_open(&p.res, db, &err) < 0) {
        fprintf(stderr, "sbx fuzz: %s\n", err.msg);
        return 125;
    }
    resumed done = { .p = &p };
    if (resume) {
        if (fz_results_resume(p.res, resume, on_done, &done) < 0) {
            fprintf(stderr, "sbx fuzz: --resume %ld: %s cannot be changed\n", resume, db);
            fz_results_close(p.res);
            return 125;
        }
        p.run = resume;
    } else {
        _cleanup_json_ json_t *options =
            json_pack("{s:s, s:s, s:I, s:I, s:I, s:s?, s:s*, s:I}", "target", url, "interface", iface, "count",
                      (json_int_t) count, "seed", (json_int_t) seed, "jobs", (json_int_t) jobs, "domains", domains,
                      "template", template_, "test_timeout", (json_int_t) test_timeout);
        p.run = fz_results_run(p.res, options);
    }
    /* the tests: count spread over the domains, each domain's workflows in
     * turn, every test with a seed of its own; those a resumed run finished
     * are left out */
    p.jobs = calloc((size_t) count, sizeof *p.jobs);
    for (size_t i = 0; i < (size_t) count; i++) {
        const fz_domain *d = chosen[i % nd];
        size_t k = i / nd;
        job j = { d, &d->tests[k % d->n], mix(seed, i) };
        if (!seed_done(&done, j.seed))
            p.jobs[p.n++] = j;
    }
    free(done.seeds);
    p.total = (size_t) count; /* the progress counts the whole run */
    pthread_mutex_init(&p.lock, NULL);
    if (resume)
        fprintf(stderr, "sbx fuzz: run %lld resumed: %zu of %ld tests ended before, %zu to run, results in %s\n",
                (long long) p.run, p.done, count, p.n, db);
    else
        fprintf(stderr, "sbx fuzz: run %lld: %ld tests, seed %llu, %ld jobs, %s, results in %s\n", (long long) p.run,
                count, (unsigned long long) seed, jobs, iface, db);
    if (p.tty)
        progress(&p); /* the bar from the start (a resumed run's from where it was) */
    double t0 = now_ms();
    struct sigaction sa = { .sa_handler = on_stop };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    pthread_t th[64];
    for (long i = 0; i < jobs; i++)
        pthread_create(&th[i], NULL, worker, &p);
    for (long i = 0; i < jobs; i++)
        pthread_join(th[i], NULL);
    if (p.tty)
        fputc('\n', stderr);
    if (stopping) {
        fprintf(stderr, "sbx fuzz: interrupted after %zu of %zu tests; to run the rest: sbx fuzz run --resume %lld --db %s\n",
                p.done, p.total, (long long) p.run, db);
        fz_results_close(p.res);
        free(p.jobs);
        return 130;
    }
    fz_results_finish(p.res, p.run);
    size_t failed = p.counts[FZ_INTERFACE] + p.counts[FZ_SANDBOX] + p.counts[FZ_HARNESS] + p.counts[FZ_TIMEOUT];
    printf("run %lld: %zu passed, %zu failed (interface %zu, sandbox %zu, harness %zu, timeout %zu), %zu "
           "unsupported in %.1f s\n",
           (long long) p.run, p.counts[FZ_PASS], failed, p.counts[FZ_INTERFACE], p.counts[FZ_SANDBOX],
           p.counts[FZ_HARNESS], p.counts[FZ_TIMEOUT], p.counts[FZ_UNSUPPORTED], (now_ms() - t0) / 1000);
    fz_results_close(p.res);
    free(p.jobs);
    return failed ? 1 : 0;
}
