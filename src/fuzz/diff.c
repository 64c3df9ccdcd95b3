/* diff.c - `sbx fuzz diff [--db FILE] [--json] RUN_A RUN_B`: what changed
 * from run A to run B, of one results file or of two (RUN as FILE:RUN).
 *
 * Tests are matched by (name, seed): a test is a function of its seed, so
 * the same name and seed in two runs is the same test, wherever it fell in
 * the run's order, and two runs of the same --seed and --count match test
 * for test.  A verdict that changed is
 *   fixed      a failure (interface, sandbox, harness, timeout) that passes,
 *   regressed  a pass that fails,
 *   changed    any other change (one failure class to another, to or from
 *              unsupported or unfinished);
 * and a test in one run only is new (in B) or missing (from B).  Beside
 * the tests: the runs' options, the pass rate per domain, the latency per
 * operation (p50, p90) and the totals.
 *
 * Exit 0 when no test regressed, 1 when one did, 2 on a usage error or a
 * file that cannot be read; so a CI job can run a baseline and a candidate
 * with the same seed and fail on `sbx fuzz diff base.db:1 new.db:1`. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { UNCHANGED, FIXED, REGRESSED, CHANGED, NEW, MISSING, N_KINDS } kind;
static const char *const kind_names[] = { "unchanged", "fixed", "regressed", "changed", "new", "missing" };

/* One run, read whole. */
typedef struct side {
    const char *label; /* "A", "B" */
    char path[4096];
    int64_t run;
    sqlite3 *db;
    fz_run_info info;
    fz_test_row *tests; /* by (name, seed) */
    size_t n;
    fz_domain_stat *domains;
    size_t nd;
    fz_op_stat *ops;
    size_t no;
    fz_domain_stat all; /* the totals */
} side;

static void side_free(side *s)
{
    fz_db_tests_free(s->tests, s->n);
    free(s->domains);
    free(s->ops);
    fz_run_info_clear(&s->info);
    sqlite3_close(s->db);
}

/* A test of A and its match in B (either NULL: new, missing). */
typedef struct pair {
    const fz_test_row *a, *b;
    kind k;
} pair;

static const char diff_usage[] =
    "usage: sbx fuzz diff [--db FILE] [--json] RUN_A RUN_B\n"
    "  RUN: a run id in --db (default fuzz-results.db), or FILE:RUN for a run of another results file\n"
    "  exit 0: no test regressed (pass -> failure); 1: some did; 2: usage or results file error\n";

/* RUN or FILE:RUN into s->path and s->run. */
static int parse_spec(const char *spec, const char *db, side *s, sbx_error *err)
{
    const char *colon = strrchr(spec, ':'), *num = colon ? colon + 1 : spec;
    char *end;
    errno = 0;
    long long run = strtoll(num, &end, 10);
    if (!*num || *end || errno || run < 1 || (colon && colon == spec))
        return sbx_error_set(err, 0, "RUN_%s '%s': give a run id (1, 2, ...) of --db, or FILE:RUN", s->label, spec);
    size_t len = colon ? (size_t) (colon - spec) : strlen(db);
    if (len >= sizeof s->path)
        return sbx_error_set(err, ENAMETOOLONG, "run %s '%s'", s->label, spec);
    memcpy(s->path, colon ? spec : db, len);
    s->path[len] = '\0';
    s->run = run;
    return 0;
}

static int by_name_seed(const void *x, const void *y)
{
    const fz_test_row *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    if (c)
        return c;
    return (a->seed > b->seed) - (a->seed < b->seed);
}

static int load(side *s, sbx_error *err)
{
    if (fz_db_open(&s->db, s->path, err) < 0 || fz_db_run(s->db, s->path, &s->run, &s->info, err) < 0 ||
        fz_db_tests(s->db, s->run, NULL, &s->tests, &s->n, err) < 0 ||
        fz_db_domains(s->db, s->run, &s->domains, &s->nd, err) < 0 ||
        fz_db_ops(s->db, s->run, &s->ops, &s->no, err) < 0)
        return sbx_error_wrap(err, "RUN_%s", s->label);
    qsort(s->tests, s->n, sizeof *s->tests, by_name_seed);
    snprintf(s->all.domain, sizeof s->all.domain, "all");
    for (size_t i = 0; i < s->nd; i++) {
        s->all.tests += s->domains[i].tests;
        s->all.passed += s->domains[i].passed;
        s->all.failed += s->domains[i].failed;
        s->all.unsupported += s->domains[i].unsupported;
        s->all.unfinished += s->domains[i].unfinished;
    }
    return 0;
}

static bool same_verdict(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static kind classify(const fz_test_row *a, const fz_test_row *b)
{
    if (!a)
        return NEW;
    if (!b)
        return MISSING;
    if (same_verdict(a->verdict, b->verdict))
        return UNCHANGED;
    bool ap = a->verdict && strcmp(a->verdict, "pass") == 0, bp = b->verdict && strcmp(b->verdict, "pass") == 0;
    if (fz_verdict_failed(a->verdict) && bp)
        return FIXED;
    if (ap && fz_verdict_failed(b->verdict))
        return REGRESSED;
    return CHANGED;
}

/* The tests of both runs merged by (name, seed). */
static pair *match(const side *a, const side *b, size_t *np, size_t counts[N_KINDS])
{
    pair *p = calloc(a->n + b->n + 1, sizeof *p);
    if (!p)
        return NULL;
    size_t i = 0, j = 0, n = 0;
    while (i < a->n || j < b->n) {
        int c = i == a->n ? 1 : j == b->n ? -1 : by_name_seed(&a->tests[i], &b->tests[j]);
        const fz_test_row *x = c <= 0 ? &a->tests[i++] : NULL, *y = c >= 0 ? &b->tests[j++] : NULL;
        p[n] = (pair){ x, y, classify(x, y) };
        counts[p[n].k]++;
        n++;
    }
    *np = n;
    return p;
}

static const fz_domain_stat *find_domain(const side *s, const char *name)
{
    if (strcmp(name, "all") == 0)
        return &s->all;
    for (size_t i = 0; i < s->nd; i++)
        if (strcmp(s->domains[i].domain, name) == 0)
            return &s->domains[i];
    return NULL;
}

static const fz_op_stat *find_op(const side *s, const char *name)
{
    for (size_t i = 0; i < s->no; i++)
        if (strcmp(s->ops[i].op, name) == 0)
            return &s->ops[i];
    return NULL;
}

/* The names of domains (ops: operations) of either run, sorted, unique;
 * (*out)[i] point into the sides. */
static int cmp_str(const void *x, const void *y)
{
    return strcmp(*(const char *const *) x, *(const char *const *) y);
}

static const char **names(const side *a, const side *b, bool ops, size_t *n)
{
    size_t na = ops ? a->no : a->nd, nb = ops ? b->no : b->nd;
    const char **v = calloc(na + nb + 1, sizeof *v);
    if (!v)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < na; i++)
        v[k++] = ops ? a->ops[i].op : a->domains[i].domain;
    for (size_t i = 0; i < nb; i++)
        v[k++] = ops ? b->ops[i].op : b->domains[i].domain;
    qsort(v, k, sizeof *v, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (!u || strcmp(v[u - 1], v[i]) != 0)
            v[u++] = v[i];
    *n = u;
    return v;
}

static double rate_of(const fz_domain_stat *d)
{
    return d ? fz_pass_rate(d->passed, d->failed) : NAN;
}

/* ---- text */

static const char *opt_text(const side *s, const char *key, char buf[64])
{
    json_t *v = json_object_get(s->info.options, key);
    if (json_is_string(v))
        return json_string_value(v);
    if (json_is_integer(v)) {
        snprintf(buf, 64, "%llu", (unsigned long long) json_integer_value(v));
        return buf;
    }
    return strcmp(key, "interface") == 0 ? "rest" : strcmp(key, "domains") == 0 ? "all" : "-";
}

static const char *pct_text(double r, char buf[16])
{
    if (isnan(r))
        return "-";
    snprintf(buf, 16, "%.1f%%", 100 * r);
    return buf;
}

static void print_test(const pair *p)
{
    const fz_test_row *t = p->b ? p->b : p->a;
    printf("  %s seed %llu: %s -> %s", t->name, (unsigned long long) t->seed,
           p->a ? (p->a->verdict ? p->a->verdict : "unfinished") : "(none)",
           p->b ? (p->b->verdict ? p->b->verdict : "unfinished") : "(none)");
    /* the reason of the side that did not pass (B's first) */
    const fz_test_row *why = NULL;
    if (p->b && p->b->verdict && strcmp(p->b->verdict, "pass") != 0 && p->b->why[0])
        why = p->b;
    else if (p->a && p->a->verdict && strcmp(p->a->verdict, "pass") != 0 && p->a->why[0])
        why = p->a;
    if (why)
        printf(": %s%s", why == p->a && p->b ? "in A: " : "", why->why);
    putchar('\n');
}

static void print_kind(const pair *p, size_t n, kind k, const char *title, size_t limit, size_t count)
{
    if (!count)
        return;
    printf("\n%s (%zu):\n", title, count);
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < limit; i++)
        if (p[i].k == k) {
            print_test(&p[i]);
            shown++;
        }
    if (shown < count)
        printf("  ... and %zu more (--json lists them all)\n", count - shown);
}

static void print_text(const side *a, const side *b, const pair *p, size_t np, const size_t c[N_KINDS],
                       const char **dom, size_t ndom, const char **ops, size_t nops)
{
    char b1[64], b2[64];
    printf("A: %s run %lld\nB: %s run %lld\n\n", a->path, (long long) a->run, b->path, (long long) b->run);
    printf("%-12s %-34s %s\n", "", "A", "B");
    static const char *const keys[] = { "seed", "count", "interface", "target", "domains", "template", "jobs" };
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *x = opt_text(a, keys[i], b1), *y = opt_text(b, keys[i], b2);
        printf("%-12s %-34s %s%s\n", keys[i], x, y, strcmp(x, y) != 0 ? "   (differs)" : "");
    }
    size_t matched = np - c[NEW] - c[MISSING];
    printf("\ntests: %zu matched by (name, seed), %zu new in B, %zu missing from B\n", matched, c[NEW], c[MISSING]);
    printf("  regressed %zu, fixed %zu, changed %zu, unchanged %zu\n", c[REGRESSED], c[FIXED], c[CHANGED],
           c[UNCHANGED]);
    if (!matched && a->n && b->n)
        printf("  no test is in both runs (other seeds, counts or domains?): only the rates and latencies "
               "compare\n");
    print_kind(p, np, REGRESSED, "regressed, pass -> failure", (size_t) -1, c[REGRESSED]);
    print_kind(p, np, FIXED, "fixed, failure -> pass", (size_t) -1, c[FIXED]);
    print_kind(p, np, CHANGED, "changed", (size_t) -1, c[CHANGED]);
    print_kind(p, np, NEW, "new in B", 10, c[NEW]);
    print_kind(p, np, MISSING, "missing from B", 10, c[MISSING]);

    printf("\npass rate (passed / (ran - unsupported))\n  %-14s %8s %8s %9s\n", "domain", "A", "B", "change");
    for (size_t i = 0; i <= ndom; i++) {
        const char *d = i < ndom ? dom[i] : "all";
        double ra = rate_of(find_domain(a, d)), rb = rate_of(find_domain(b, d));
        char s1[16], s2[16], s3[16] = "-";
        if (!isnan(ra) && !isnan(rb))
            snprintf(s3, sizeof s3, "%+.1f", 100 * (rb - ra));
        printf("  %-14s %8s %8s %9s\n", d, pct_text(ra, s1), pct_text(rb, s2), s3);
    }

    printf("\nlatency per operation (ms)\n  %-16s %9s %9s %8s %9s %9s %8s\n", "operation", "p50 A", "p50 B", "change",
           "p90 A", "p90 B", "change");
    for (size_t i = 0; i < nops; i++) {
        const fz_op_stat *x = find_op(a, ops[i]), *y = find_op(b, ops[i]);
        char v[6][16];
        double q[4] = { x ? x->p50 : NAN, y ? y->p50 : NAN, x ? x->p90 : NAN, y ? y->p90 : NAN };
        for (int k = 0; k < 4; k++)
            snprintf(v[k], 16, isnan(q[k]) ? "-" : "%.2f", q[k]);
        for (int k = 0; k < 2; k++) {
            double from = q[2 * k], to = q[2 * k + 1];
            if (isnan(from) || isnan(to) || from <= 0)
                snprintf(v[4 + k], 16, "-");
            else
                snprintf(v[4 + k], 16, "%+.0f%%", 100 * (to - from) / from);
        }
        printf("  %-16s %9s %9s %8s %9s %9s %8s\n", ops[i], v[0], v[1], v[4], v[2], v[3], v[5]);
    }

    printf("\ntotals        %8s %8s\n", "A", "B");
    const struct {
        const char *what;
        long x, y;
    } rows[] = { { "tests", a->all.tests, b->all.tests },
                 { "passed", a->all.passed, b->all.passed },
                 { "failed", a->all.failed, b->all.failed },
                 { "unsupported", a->all.unsupported, b->all.unsupported },
                 { "unfinished", a->all.unfinished, b->all.unfinished } };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        printf("  %-11s %8ld %8ld\n", rows[i].what, rows[i].x, rows[i].y);
    printf("\n%s\n", c[REGRESSED] ? "regressed: some tests that passed in A fail in B"
                                  : "nothing regressed");
}

/* ---- JSON */

static json_t *rate_json(double r)
{
    return isnan(r) ? json_null() : json_real(r);
}

static json_t *domain_json(const fz_domain_stat *d)
{
    if (!d)
        return json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:o}", "tests", (json_int_t) d->tests, "passed",
                     (json_int_t) d->passed, "failed", (json_int_t) d->failed, "unsupported",
                     (json_int_t) d->unsupported, "unfinished", (json_int_t) d->unfinished, "pass_rate",
                     rate_json(rate_of(d)));
}

static json_t *side_json(const side *s)
{
    return json_pack("{s:s, s:I, s:O, s:I, s:o, s:o}", "db", s->path, "run", (json_int_t) s->run, "options",
                     s->info.options, "started_at", (json_int_t) s->info.started_at, "ended_at",
                     s->info.ended_at ? json_integer(s->info.ended_at) : json_null(), "totals", domain_json(&s->all));
}

static json_t *verdict_json(const fz_test_row *t)
{
    if (!t)
        return json_null();
    return json_pack("{s:o, s:s}", "verdict", t->verdict ? json_string(t->verdict) : json_null(), "why", t->why);
}

static json_t *op_json(const fz_op_stat *o)
{
    if (!o)
        return json_null();
    return json_pack("{s:I, s:I, s:f, s:f, s:f, s:f}", "steps", (json_int_t) o->n, "failed", (json_int_t) o->failed,
                     "p50", o->p50, "p90", o->p90, "p99", o->p99, "max", o->max);
}

static json_t *diff_json(const side *a, const side *b, const pair *p, size_t np, const size_t c[N_KINDS],
                         const char **dom, size_t ndom, const char **ops, size_t nops)
{
    json_t *tests = json_array(), *domains = json_array(), *operations = json_array();
    for (size_t i = 0; i < np; i++) {
        if (p[i].k == UNCHANGED)
            continue;
        const fz_test_row *t = p[i].b ? p[i].b : p[i].a;
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long) t->seed); /* 64 bits: past JSON's safe integers */
        json_array_append_new(tests, json_pack("{s:s, s:s, s:s, s:s, s:o, s:o}", "name", t->name, "seed", seed,
                                               "domain", t->domain, "change", kind_names[p[i].k], "a",
                                               verdict_json(p[i].a), "b", verdict_json(p[i].b)));
    }
    for (size_t i = 0; i <= ndom; i++) {
        const char *d = i < ndom ? dom[i] : "all";
        const fz_domain_stat *x = find_domain(a, d), *y = find_domain(b, d);
        double ra = rate_of(x), rb = rate_of(y);
        json_array_append_new(domains, json_pack("{s:s, s:o, s:o, s:o}", "domain", d, "a", domain_json(x), "b",
                                                 domain_json(y), "pass_rate_change",
                                                 isnan(ra) || isnan(rb) ? json_null() : json_real(rb - ra)));
    }
    for (size_t i = 0; i < nops; i++) {
        const fz_op_stat *x = find_op(a, ops[i]), *y = find_op(b, ops[i]);
        json_array_append_new(operations,
                              json_pack("{s:s, s:o, s:o, s:o, s:o}", "op", ops[i], "a", op_json(x), "b", op_json(y),
                                        "p50_change_ms", x && y ? json_real(y->p50 - x->p50) : json_null(),
                                        "p90_change_ms", x && y ? json_real(y->p90 - x->p90) : json_null()));
    }
    json_t *summary = json_pack("{s:I}", "matched", (json_int_t) (np - c[NEW] - c[MISSING]));
    for (int k = 0; k < N_KINDS; k++)
        json_object_set_new(summary, kind_names[k], json_integer((json_int_t) c[k]));
    return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "a", side_json(a), "b", side_json(b), "summary", summary,
                     "tests", tests, "domains", domains, "operations", operations, "regressed", c[REGRESSED] > 0);
}

int fz_diff_main(int argc, char **argv)
{
    static const struct option opts[] = { { "db", required_argument, NULL, 'd' },
                                          { "json", no_argument, NULL, 'j' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    const char *db = "fuzz-results.db";
    bool as_json = false;
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'd')
            db = optarg;
        else if (o == 'j')
            as_json = true;
        else if (o == 'h') {
            fputs(diff_usage, stdout);
            return 0;
        } else {
            fputs(diff_usage, stderr);
            return 2;
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "sbx fuzz diff: give two runs, A and B\n%s", diff_usage);
        return 2;
    }
    sbx_error err = { 0 };
    __attribute__((cleanup(side_free))) side a = { .label = "A" };
    __attribute__((cleanup(side_free))) side b = { .label = "B" };
    if (parse_spec(argv[optind], db, &a, &err) < 0 || parse_spec(argv[optind + 1], db, &b, &err) < 0) {
        fprintf(stderr, "sbx fuzz diff: %s\n%s", err.msg, diff_usage);
        return 2;
    }
    if (load(&a, &err) < 0 || load(&b, &err) < 0) {
        fprintf(stderr, "sbx fuzz diff: %s\n", err.msg);
        return 2;
    }
    size_t counts[N_KINDS] = { 0 }, np = 0, ndom = 0, nops = 0;
    _cleanup_free_ pair *p = match(&a, &b, &np, counts);
    _cleanup_free_ const char **dom = names(&a, &b, false, &ndom);
    _cleanup_free_ const char **ops = names(&a, &b, true, &nops);
    if (!p || !dom || !ops) {
        fprintf(stderr, "sbx fuzz diff: out of memory\n");
        return 2;
    }
    if (as_json) {
        _cleanup_json_ json_t *j = diff_json(&a, &b, p, np, counts, dom, ndom, ops, nops);
        if (!j || json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0) {
            fprintf(stderr, "sbx fuzz diff: the JSON could not be made\n");
            return 2;
        }
        putchar('\n');
    } else {
        print_text(&a, &b, p, np, counts, dom, ndom, ops, nops);
    }
    if (fflush(stdout) != 0) {
        perror("sbx fuzz diff: stdout");
        return 2;
    }
    return counts[REGRESSED] ? 1 : 0;
}
