/* report.c - `sbx fuzz report DB [-o FILE] [--run N]`: one self-contained
 * HTML page (no external assets): pass rate per domain (inline SVG bars),
 * verdicts, latency percentiles per operation, failures with their
 * evidence. */
#define _GNU_SOURCE
#include "fuzz.h"

#include <getopt.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void esc(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *col(sqlite3_stmt *s, int i)
{
    const char *t = (const char *) sqlite3_column_text(s, i);
    return t ? t : "";
}

static int by_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static const char report_usage[] = "usage: sbx fuzz report DB [-o report.html] [--run N]\n";

int fz_report_main(int argc, char **argv)
{
    static const struct option opts[] = { { "output", required_argument, NULL, 'o' },
                                          { "run", required_argument, NULL, 'r' },
                                          { NULL, 0, NULL, 0 } };
    const char *out = "report.html";
    long run = 0;
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        if (o == 'o')
            out = optarg;
        else if (o == 'r')
            run = strtol(optarg, NULL, 10);
        else {
            fputs(report_usage, stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fputs(report_usage, stderr);
        return 2;
    }
    sqlite3 *db;
    if (sqlite3_open_v2(argv[optind], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "sbx fuzz: cannot open %s: %s\n", argv[optind], sqlite3_errmsg(db));
        sqlite3_close(db);
        return 125;
    }
    sqlite3_stmt *s;
    if (!run && sqlite3_prepare_v2(db, "SELECT max(id) FROM runs", -1, &s, NULL) == SQLITE_OK) {
        if (sqlite3_step(s) == SQLITE_ROW)
            run = sqlite3_column_int64(s, 0);
        sqlite3_finalize(s);
    }
    if (!run) {
        fprintf(stderr, "sbx fuzz: %s holds no run\n", argv[optind]);
        sqlite3_close(db);
        return 125;
    }
    FILE *f = fopen(out, "we");
    if (!f) {
        perror(out);
        sqlite3_close(db);
        return 125;
    }
    char options[1024] = "";
    sqlite3_prepare_v2(db, "SELECT options FROM runs WHERE id = ?", -1, &s, NULL);
    sqlite3_bind_int64(s, 1, run);
    if (sqlite3_step(s) == SQLITE_ROW)
        snprintf(options, sizeof options, "%s", col(s, 0));
    sqlite3_finalize(s);
    fprintf(f, "<!doctype html><html><head><meta charset=\"utf-8\"><title>sbx fuzz run %ld</title><style>"
               "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
               "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f4f4f4}"
               ".pass{color:#1a7f37}.fail{color:#cf222e}code,pre{font:12px monospace;white-space:pre-wrap}"
               "</style></head><body><h1>sbx fuzz: run %ld</h1><p><code>",
            run, run);
    esc(f, options);
    fprintf(f, "</code></p>\n<h2>Pass rate per domain</h2>\n");
    /* per domain: bars */
    sqlite3_prepare_v2(db,
                       "SELECT domain, count(*), sum(verdict = 'pass'), sum(verdict = 'unsupported'), "
                       "sum(verdict IS NULL) FROM tests WHERE run = ? GROUP BY domain ORDER BY domain",
                       -1, &s, NULL);
    sqlite3_bind_int64(s, 1, run);
    fprintf(f, "<table><tr><th>domain</th><th>tests</th><th>passed</th><th>unsupported</th>"
               "<th>unfinished</th><th>rate</th><th></th></tr>\n");
    while (sqlite3_step(s) == SQLITE_ROW) {
        long n = sqlite3_column_int64(s, 1), pass = sqlite3_column_int64(s, 2);
        double rate = n ? 100.0 * (double) pass / (double) n : 0;
        fprintf(f, "<tr><td>");
        esc(f, col(s, 0));
        fprintf(f,
                "</td><td>%ld</td><td>%ld</td><td>%lld</td><td>%lld</td><td class=\"%s\">%.1f%%</td><td>"
                "<svg width=\"200\" height=\"14\" xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"200\" "
                "height=\"14\" fill=\"#f0c0c0\"/><rect width=\"%.0f\" height=\"14\" fill=\"#5cb85c\"/></svg></td></tr>\n",
                n, pass, (long long) sqlite3_column_int64(s, 3), (long long) sqlite3_column_int64(s, 4),
                pass == n ? "pass" : "fail", rate, 2 * rate);
    }
    sqlite3_finalize(s);
    fprintf(f, "</table>\n<h2>Verdicts</h2><table><tr><th>verdict</th><th>tests</th></tr>\n");
    sqlite3_prepare_v2(db, "SELECT coalesce(verdict, 'unfinished'), count(*) FROM tests WHERE run = ? GROUP BY 1", -1,
                       &s, NULL);
    sqlite3_bind_int64(s, 1, run);
    while (sqlite3_step(s) == SQLITE_ROW) {
        fprintf(f, "<tr><td>");
        esc(f, col(s, 0));
        fprintf(f, "</td><td>%lld</td></tr>\n", (long long) sqlite3_column_int64(s, 1));
    }
    sqlite3_finalize(s);
    /* latency percentiles per operation */
    fprintf(f, "</table>\n<h2>Latency per operation (ms)</h2><table><tr><th>operation</th><th>count</th>"
               "<th>p50</th><th>p90</th><th>p99</th><th>max</th></tr>\n");
    sqlite3_stmt *ops;
    sqlite3_prepare_v2(db, "SELECT DISTINCT op FROM steps JOIN tests ON tests.id = steps.test WHERE run = ? ORDER BY op",
                       -1, &ops, NULL);
    sqlite3_bind_int64(ops, 1, run);
    while (sqlite3_step(ops) == SQLITE_ROW) {
        char op[64];
        snprintf(op, sizeof op, "%s", col(ops, 0));
        sqlite3_prepare_v2(db, "SELECT ms FROM steps JOIN tests ON tests.id = steps.test WHERE run = ? AND op = ?", -1,
                           &s, NULL);
        sqlite3_bind_int64(s, 1, run);
        sqlite3_bind_text(s, 2, op, -1, SQLITE_TRANSIENT);
        size_t n = 0, cap = 256;
        double *v = malloc(cap * sizeof *v);
        while (sqlite3_step(s) == SQLITE_ROW) {
            if (n == cap)
                v = realloc(v, (cap *= 2) * sizeof *v);
            v[n++] = sqlite3_column_double(s, 0);
        }
        sqlite3_finalize(s);
        qsort(v, n, sizeof *v, by_double);
#define PCT(q) (n ? v[(size_t) fmin((double) n - 1, floor((q) * (double) n))] : 0)
        fprintf(f, "<tr><td>");
        esc(f, op);
        fprintf(f, "</td><td>%zu</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%.2f</td></tr>\n", n, PCT(0.5),
                PCT(0.9), PCT(0.99), n ? v[n - 1] : 0);
        free(v);
    }
    sqlite3_finalize(ops);
    /* failures, grouped by verdict, with evidence */
    fprintf(f, "</table>\n<h2>Failures</h2>\n");
    sqlite3_prepare_v2(db,
                       "SELECT id, verdict, name, seed, why FROM tests WHERE run = ? AND verdict NOT IN ('pass', "
                       "'unsupported') ORDER BY verdict, name",
                       -1, &s, NULL);
    sqlite3_bind_int64(s, 1, run);
    int failures = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        failures++;
        fprintf(f, "<h3 class=\"fail\">");
        esc(f, col(s, 1));
        fprintf(f, ": ");
        esc(f, col(s, 2));
        fprintf(f, " <small>(seed %llu)</small></h3><p>", (unsigned long long) sqlite3_column_int64(s, 3));
        esc(f, col(s, 4));
        fprintf(f, "</p><pre>");
        sqlite3_stmt *e;
        sqlite3_prepare_v2(db, "SELECT what, text FROM evidence WHERE test = ?", -1, &e, NULL);
        sqlite3_bind_int64(e, 1, sqlite3_column_int64(s, 0));
        while (sqlite3_step(e) == SQLITE_ROW) {
            esc(f, col(e, 0));
            fprintf(f, ": ");
            esc(f, col(e, 1));
            fputc('\n', f);
        }
        sqlite3_finalize(e);
        fprintf(f, "</pre>\n");
    }
    sqlite3_finalize(s);
    if (!failures)
        fprintf(f, "<p class=\"pass\">None.</p>\n");
    fprintf(f, "</body></html>\n");
    fclose(f);
    sqlite3_close(db);
    printf("%s\n", out);
    return 0;
}
