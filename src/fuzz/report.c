/* report.c - `sbx fuzz report DB [-o FILE] [--run N]`: one self-contained
 * HTML page (no script, no stylesheet or image from elsewhere, no link):
 * the run's options, the pass rate per domain (inline SVG bars and a
 * table), the verdicts, latency percentiles per operation (an inline SVG
 * chart on a log scale and a table), the failures grouped by mode (verdict
 * and normalised reason) with every member's evidence, and the unsupported
 * tests apart: they are not passes, and not counted in the pass rate.
 *
 * The page is made in memory and written only when every query worked, so
 * a failed report leaves no half page behind (nor truncates an old one). */
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
#include <time.h>

/* Evidence can be a command's whole output: each piece is cut here. */
#define EVIDENCE_MAX 4096

static void esc_n(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; s && i < n && s[i]; i++) {
        switch (s[i]) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(s[i], f);
        }
    }
}

static void esc(FILE *f, const char *s)
{
    esc_n(f, s, (size_t) -1);
}

/* A rate as "97.5%", "-" when nothing counts. */
static const char *rate_text(double rate, char buf[16])
{
    if (isnan(rate))
        return "-";
    snprintf(buf, 16, "%.1f%%", 100 * rate);
    return buf;
}

static void utc(int64_t ms, char buf[32])
{
    time_t t = (time_t) (ms / 1000);
    struct tm tm;
    if (!ms || !gmtime_r(&t, &tm) || !strftime(buf, 32, "%Y-%m-%d %H:%M:%S UTC", &tm))
        snprintf(buf, 32, "-");
}

static void option_row(FILE *f, const char *name, json_t *options, const char *key, const char *missing)
{
    json_t *v = json_object_get(options, key);
    fprintf(f, "<tr><th>%s</th><td>", name);
    if (json_is_string(v))
        esc(f, json_string_value(v));
    else if (json_is_integer(v))
        fprintf(f, "%llu", (unsigned long long) json_integer_value(v)); /* a seed is unsigned */
    else
        esc(f, missing);
    fprintf(f, "</td></tr>\n");
}

static void write_head(FILE *f, int64_t run, const fz_run_info *info)
{
    fprintf(f,
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>sbx fuzz run %lld</title><style>"
            "body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:75em}"
            "table{border-collapse:collapse;margin:1em 0}"
            "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}"
            "td.n{text-align:right}.pass{color:#1a7f37}.fail{color:#cf222e}.unsupported{color:#57606a}"
            "code,pre{font:12px monospace;white-space:pre-wrap}pre{background:#f6f8fa;padding:6px;margin:4px 0}"
            "details{margin:6px 0;border:1px solid #ddd;padding:4px 8px}summary{cursor:pointer}"
            "div.test{margin:6px 0 10px 1em}svg text{font:12px system-ui,sans-serif}"
            "</style></head><body><h1>sbx fuzz: run %lld</h1>\n<table id=\"options\">\n",
            (long long) run, (long long) run);
    option_row(f, "target", info->options, "target", "-");
    option_row(f, "interface", info->options, "interface", "rest");
    option_row(f, "seed", info->options, "seed", "-");
    option_row(f, "count", info->options, "count", "-");
    option_row(f, "jobs", info->options, "jobs", "-");
    option_row(f, "domains", info->options, "domains", "all");
    option_row(f, "template", info->options, "template", "the service's default");
    char a[32], b[32];
    utc(info->started_at, a);
    utc(info->ended_at, b);
    fprintf(f, "<tr><th>started</th><td>%s</td></tr>\n<tr><th>ended</th><td>", a);
    if (info->ended_at)
        fprintf(f, "%s (%.1f s)", b, (double) (info->ended_at - info->started_at) / 1000);
    else
        fprintf(f, "not ended (interrupted, or still running)");
    fprintf(f, "</td></tr>\n</table>\n");
}

static void write_domains(FILE *f, const fz_domain_stat *d, size_t n)
{
    fz_domain_stat all = { .domain = "all" };
    for (size_t i = 0; i < n; i++) {
        all.tests += d[i].tests;
        all.passed += d[i].passed;
        all.failed += d[i].failed;
        all.unsupported += d[i].unsupported;
        all.unfinished += d[i].unfinished;
    }
    char buf[16];
    double rate = fz_pass_rate(all.passed, all.failed);
    fprintf(f,
            "<h2>Pass rate</h2>\n<p id=\"summary\">%ld tests: %ld passed, %ld failed, %ld unsupported, %ld "
            "unfinished. Pass rate <b id=\"pass-rate\" class=\"%s\">%s</b> (passed / (ran &minus; unsupported): "
            "what the target does not offer is neither a pass nor a failure).</p>\n",
            all.tests, all.passed, all.failed, all.unsupported, all.unfinished,
            all.failed ? "fail" : "pass", rate_text(rate, buf));
    /* the chart: a stacked bar per domain, its parts in proportion to its tests */
    const int x0 = 120, w = 380, row = 22, top = 20;
    fprintf(f,
            "<h2>Per domain</h2>\n<svg id=\"domain-chart\" width=\"600\" height=\"%zu\" role=\"img\" "
            "aria-label=\"pass rate per domain\">\n",
            n * row + top + 4);
    static const struct {
        const char *what, *fill;
    } legend[] = { { "passed", "#2da44e" }, { "failed", "#cf222e" }, { "unsupported", "#afb8c1" },
                   { "unfinished", "#eaeef2" } };
    for (size_t k = 0; k < sizeof legend / sizeof *legend; k++)
        fprintf(f, "<rect x=\"%zu\" y=\"2\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%zu\" y=\"11\">%s</text>\n",
                x0 + 100 * k, legend[k].fill, x0 + 100 * k + 14, legend[k].what);
    for (size_t i = 0; i < n; i++) {
        int y = top + (int) i * row;
        fprintf(f, "<text x=\"0\" y=\"%d\">", y + 15);
        esc(f, d[i].domain);
        fprintf(f, "</text>");
        const struct {
            long v;
            const char *what, *fill;
        } parts[] = { { d[i].passed, "passed", "#2da44e" },
                      { d[i].failed, "failed", "#cf222e" },
                      { d[i].unsupported, "unsupported", "#afb8c1" },
                      { d[i].unfinished, "unfinished", "#eaeef2" } };
        double x = x0;
        for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
            if (!parts[k].v || !d[i].tests)
                continue;
            double pw = (double) w * (double) parts[k].v / (double) d[i].tests;
            fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"16\" fill=\"%s\"><title>%ld %s</title></rect>",
                    x, y + 3, pw, parts[k].fill, parts[k].v, parts[k].what);
            x += pw;
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", x0 + w + 8, y + 15,
                rate_text(fz_pass_rate(d[i].passed, d[i].failed), buf));
    }
    fprintf(f, "</svg>\n<table id=\"domains\"><tr><th>domain</th><th>tests</th><th>passed</th><th>failed</th>"
               "<th>unsupported</th><th>unfinished</th><th>pass rate</th></tr>\n");
    for (size_t i = 0; i <= n; i++) {
        const fz_domain_stat *x = i < n ? &d[i] : &all;
        fprintf(f, "<tr><td>%s", i < n ? "" : "<b>");
        esc(f, x->domain);
        fprintf(f,
                "%s</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td><td class=\"n\">%ld</td><td class=\"n\">%ld"
                "</td><td class=\"n\">%ld</td><td class=\"n %s\">%s</td></tr>\n",
                i < n ? "" : "</b>", x->tests, x->passed, x->failed, x->unsupported, x->unfinished,
                x->failed ? "fail" : "pass", rate_text(fz_pass_rate(x->passed, x->failed), buf));
    }
    fprintf(f, "</table>\n");
}

static int write_verdicts(FILE *f, sqlite3 *db, int64_t run, sbx_error *err)
{
    sqlite3_stmt *s;
    if (fz_db_prepare(db,
                      "SELECT coalesce(verdict, 'unfinished'), count(*) FROM tests WHERE run = ? GROUP BY 1 "
                      "ORDER BY 2 DESC, 1",
                      &s, err) < 0)
        return -1;
    sqlite3_bind_int64(s, 1, run);
    fprintf(f, "<h2>Verdicts</h2>\n<table id=\"verdicts\"><tr><th>verdict</th><th>tests</th></tr>\n");
    int r;
    while ((r = fz_db_step(db, s, err)) == 1) {
        fprintf(f, "<tr><td>");
        esc(f, fz_db_text(s, 0));
        fprintf(f, "</td><td class=\"n\">%lld</td></tr>\n", (long long) sqlite3_column_int64(s, 1));
    }
    sqlite3_finalize(s);
    fprintf(f, "</table>\n");
    return r;
}

/* x of ms on the latency chart's log axis [lo, hi] */
static double log_x(double ms, double lo, double hi, double x0, double w)
{
    double v = ms < lo ? lo : ms;
    return x0 + w * (log10(v) - log10(lo)) / (log10(hi) - log10(lo));
}

static void write_latency(FILE *f, const fz_op_stat *o, size_t n)
{
    fprintf(f, "<h2>Latency per operation (ms)</h2>\n");
    if (!n) {
        fprintf(f, "<p>No step was recorded.</p>\n");
        return;
    }
    /* a log scale: a create takes a hundred times an upload of a small file */
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < n; i++) {
        if (o[i].p50 > 0 && o[i].p50 < lo)
            lo = o[i].p50;
        if (o[i].p99 > hi)
            hi = o[i].p99;
    }
    lo = isinf(lo) ? 0.01 : pow(10, floor(log10(lo)));
    hi = hi <= lo ? lo * 10 : pow(10, ceil(log10(hi)));
    const int x0 = 120, w = 380, row = 20, top = 18;
    int height = top + (int) n * row + 8;
    fprintf(f,
            "<svg id=\"latency-chart\" width=\"720\" height=\"%d\" role=\"img\" aria-label=\"latency per operation, "
            "log scale\">\n<text x=\"%d\" y=\"12\">p50 (dark), p90 (light), p99 (tick); ms, log scale</text>\n",
            height, x0);
    for (double t = lo; t <= hi * 1.0001; t *= 10) {
        double x = log_x(t, lo, hi, x0, w);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%d\" font-size=\"10\" fill=\"#888\">%g</text>\n",
                x, top, x, height - 8, x + 2, height, t);
    }
    for (size_t i = 0; i < n; i++) {
        int y = top + (int) i * row;
        fprintf(f, "<g><title>");
        esc(f, o[i].op);
        fprintf(f, ": %zu steps, p50 %.2f, p90 %.2f, p99 %.2f, max %.2f ms</title>", o[i].n, o[i].p50, o[i].p90,
                o[i].p99, o[i].max);
        fprintf(f, "<text x=\"0\" y=\"%d\">", y + 13);
        esc(f, o[i].op);
        double x50 = log_x(o[i].p50, lo, hi, x0, w), x90 = log_x(o[i].p90, lo, hi, x0, w),
               x99 = log_x(o[i].p99, lo, hi, x0, w);
        fprintf(f,
                "</text><rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"#a5c8f0\"/>"
                "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"14\" fill=\"#2f6fb5\"/>"
                "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\" stroke-width=\"2\"/>"
                "<text x=\"%d\" y=\"%d\">%.1f / %.1f</text></g>\n",
                x0, y + 2, x90 - x0, x0, y + 2, x50 - x0, x99, y + 1, x99, y + 17, x0 + w + 40, y + 13, o[i].p50,
                o[i].p90);
    }
    fprintf(f, "</svg>\n<table id=\"latency\"><tr><th>operation</th><th>steps</th><th>failed</th><th>p50</th>"
               "<th>p90</th><th>p99</th><th>max</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<tr><td>");
        esc(f, o[i].op);
        fprintf(f,
                "</td><td class=\"n\">%zu</td><td class=\"n\">%zu</td><td class=\"n\">%.2f</td><td class=\"n\">%.2f"
                "</td><td class=\"n\">%.2f</td><td class=\"n\">%.2f</td></tr>\n",
                o[i].n, o[i].failed, o[i].p50, o[i].p90, o[i].p99, o[i].max);
    }
    fprintf(f, "</table>\n");
}

/* A test and its mode (verdict and normalised reason), for grouping. */
typedef struct member {
    const fz_test_row *t;
    char mode[256];
} member;

static int by_mode(const void *a, const void *b)
{
    const member *x = a, *y = b;
    int c = strcmp(x->t->verdict, y->t->verdict);
    if (!c)
        c = strcmp(x->mode, y->mode);
    return c ? c : (x->t->id > y->t->id) - (x->t->id < y->t->id);
}

typedef struct group {
    size_t first, n;
} group;

/* The largest group first; groups of a size in the order of their mode. */
static int by_size(const void *a, const void *b, void *members)
{
    const group *x = a, *y = b;
    const member *m = members;
    if (x->n != y->n)
        return x->n < y->n ? 1 : -1;
    return by_mode(&m[x->first], &m[y->first]);
}

static int write_evidence(FILE *f, sqlite3 *db, sqlite3_stmt *e, int64_t test, sbx_error *err)
{
    sqlite3_reset(e);
    sqlite3_bind_int64(e, 1, test);
    int r, any = 0;
    while ((r = fz_db_step(db, e, err)) == 1) {
        if (!any++)
            fprintf(f, "<pre>");
        const char *text = fz_db_text(e, 1);
        size_t len = strlen(text), cut = len;
        if (len > EVIDENCE_MAX) {
            cut = EVIDENCE_MAX;
            while (cut && ((unsigned char) text[cut] & 0xC0) == 0x80) /* not inside a UTF-8 character */
                cut--;
        }
        esc(f, fz_db_text(e, 0));
        fprintf(f, ": ");
        esc_n(f, text, cut);
        if (cut < len)
            fprintf(f, " [... %zu bytes more]", len - cut);
        fputc('\n', f);
    }
    if (any)
        fprintf(f, "</pre>");
    return r;
}

/* The tests t[0..n-1] grouped by mode, the largest group first, each a
 * <details> with its members' reasons and evidence. */
static int write_groups(FILE *f, sqlite3 *db, const fz_test_row *t, size_t n, const char *cls, sbx_error *err)
{
    _cleanup_free_ member *m = calloc(n ? n : 1, sizeof *m);
    _cleanup_free_ group *g = calloc(n ? n : 1, sizeof *g);
    if (!m || !g)
        return sbx_error_set(err, ENOMEM, "the report");
    for (size_t i = 0; i < n; i++) {
        m[i].t = &t[i];
        fz_reason_mode(t[i].why, m[i].mode, sizeof m[i].mode);
    }
    qsort(m, n, sizeof *m, by_mode);
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        if (i && strcmp(m[i - 1].t->verdict, m[i].t->verdict) == 0 && strcmp(m[i - 1].mode, m[i].mode) == 0)
            g[ng - 1].n++;
        else
            g[ng++] = (group){ i, 1 };
    }
    qsort_r(g, ng, sizeof *g, by_size, m);
    _cleanup_stmt_ sqlite3_stmt *e = NULL;
    if (fz_db_prepare(db, "SELECT what, text FROM evidence WHERE test = ? ORDER BY rowid", &e, err) < 0)
        return -1;
    for (size_t k = 0; k < ng; k++) {
        const member *first = &m[g[k].first];
        fprintf(f, "<details class=\"mode %s\" data-verdict=\"", cls);
        esc(f, first->t->verdict);
        fprintf(f, "\" data-count=\"%zu\"%s><summary><b class=\"%s\">", g[k].n, ng == 1 ? " open" : "",
                strcmp(cls, "failure") == 0 ? "fail" : "unsupported");
        esc(f, first->t->verdict);
        fprintf(f, "</b> &times; <span class=\"count\">%zu</span>: <code class=\"reason\">", g[k].n);
        esc(f, first->mode);
        fprintf(f, "</code></summary>\n");
        for (size_t i = g[k].first; i < g[k].first + g[k].n; i++) {
            const fz_test_row *x = m[i].t;
            fprintf(f, "<div class=\"test\" data-name=\"");
            esc(f, x->name);
            fprintf(f, "\" data-seed=\"%llu\"><b>", (unsigned long long) x->seed);
            esc(f, x->name);
            fprintf(f, "</b> seed %llu (", (unsigned long long) x->seed);
            esc(f, x->domain);
            fprintf(f, ", %.0f ms): <span class=\"why\">", x->ms);
            esc(f, x->why);
            fprintf(f, "</span>");
            if (write_evidence(f, db, e, x->id, err) < 0)
                return -1;
            fprintf(f, "</div>\n");
        }
        fprintf(f, "</details>\n");
    }
    return 0;
}

/* What the page shows, read before a byte of it is written. */
typedef struct report_data {
    fz_domain_stat *domains;
    fz_op_stat *ops;
    fz_test_row *failed, *unsupported;
    size_t nd, no, nf, nu;
} report_data;

static void report_data_free(report_data *d)
{
    free(d->domains);
    free(d->ops);
    fz_db_tests_free(d->failed, d->nf);
    fz_db_tests_free(d->unsupported, d->nu);
}

/* The page into f; < 0 when a query failed. */
static int write_report(FILE *f, sqlite3 *db, int64_t run, const fz_run_info *info, sbx_error *err)
{
    __attribute__((cleanup(report_data_free))) report_data d = { 0 };
    if (fz_db_domains(db, run, &d.domains, &d.nd, err) < 0 || fz_db_ops(db, run, &d.ops, &d.no, err) < 0 ||
        fz_db_tests(db, run, "verdict IS NOT NULL AND verdict NOT IN ('pass', 'unsupported')", &d.failed, &d.nf,
                    err) < 0 ||
        fz_db_tests(db, run, "verdict = 'unsupported'", &d.unsupported, &d.nu, err) < 0)
        return -1;
    write_head(f, run, info);
    write_domains(f, d.domains, d.nd);
    if (write_verdicts(f, db, run, err) < 0)
        return -1;
    write_latency(f, d.ops, d.no);
    fprintf(f, "<h2>Failures by mode</h2>\n<p id=\"failures\">%zu failed tests", d.nf);
    if (d.nf) {
        fprintf(f, ", grouped by verdict and reason (numbers, ids and paths folded: N, &lt;id&gt;, &lt;path&gt;)."
                   "</p>\n");
        if (write_groups(f, db, d.failed, d.nf, "failure", err) < 0)
            return -1;
    } else {
        fprintf(f, ".</p>\n<p class=\"pass\">None.</p>\n");
    }
    fprintf(f,
            "<h2>Unsupported</h2>\n<p id=\"unsupported\">%zu tests need what the target does not offer: not "
            "passes, and not counted in the pass rate.</p>\n",
            d.nu);
    if (d.nu && write_groups(f, db, d.unsupported, d.nu, "unsupported", err) < 0)
        return -1;
    fprintf(f, "</body></html>\n");
    return 0;
}

static const char report_usage[] = "usage: sbx fuzz report DB [-o|--output FILE] [--run N]   (default report.html, the newest run)\n";

int fz_report_main(int argc, char **argv)
{
    static const struct option opts[] = { { "output", required_argument, NULL, 'o' },
                                          { "run", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    const char *out = "report.html";
    int64_t run = 0;
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        char *end;
        if (o == 'o') {
            out = optarg;
        } else if (o == 'r') {
            errno = 0;
            run = strtoll(optarg, &end, 10);
            if (errno || end == optarg || *end || run < 1) {
                fprintf(stderr, "sbx fuzz report: --run %s: a run id (1, 2, ...)\n%s", optarg, report_usage);
                return 2;
            }
        } else if (o == 'h') {
            fputs(report_usage, stdout);
            return 0;
        } else {
            fputs(report_usage, stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fputs(report_usage, stderr);
        return 2;
    }
    const char *path = argv[optind];
    sbx_error err = { 0 };
    _cleanup_db_ sqlite3 *db = NULL;
    __attribute__((cleanup(fz_run_info_clear))) fz_run_info info = { 0 };
    if (fz_db_open(&db, path, &err) < 0 || fz_db_run(db, path, &run, &info, &err) < 0) {
        fprintf(stderr, "sbx fuzz report: %s\n", err.msg);
        return 125;
    }
    /* the page in memory first: a failed query leaves no half page behind */
    _cleanup_free_ char *page = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&page, &len);
    if (!f) {
        perror("sbx fuzz report");
        return 125;
    }
    int r = write_report(f, db, run, &info, &err);
    if (fclose(f) != 0 && r == 0)
        r = sbx_error_set(&err, errno, "the report");
    if (r < 0) {
        fprintf(stderr, "sbx fuzz report: %s, run %lld: %s\n", path, (long long) run, err.msg);
        return 125;
    }
    _cleanup_fclose_ FILE *w = fopen(out, "we");
    if (!w || fwrite(page, 1, len, w) != len || fflush(w) != 0) {
        fprintf(stderr, "sbx fuzz report: writing %s: %s\n", out, strerror(errno));
        return 125;
    }
    printf("%s\n", out);
    return 0;
}
