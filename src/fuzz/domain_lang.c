/* domain_lang.c - languages the template offers: the same small program in
 * two languages must print the same thing; C is compiled and run. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run cmd; its stdout, or NULL after recording a failure. */
static char *output(fz_ctx *c, const char *cmd, const char *what)
{
    int code;
    char *out = NULL, *err = NULL;
    size_t ol, el;
    if (fz_exec(c, cmd, &code, &out, &ol, &err, &el) < 0)
        return NULL;
    if (code == 127) {
        fz_fail(c, FZ_UNSUPPORTED, "%s: not in this template (%s)", what, err);
        free(out);
        out = NULL;
    } else if (code != 0) {
        fz_fail(c, FZ_SANDBOX, "%s failed (exit %d): %.300s", what, code, err);
        free(out);
        out = NULL;
    }
    free(err);
    return out;
}

/* sum of i*k for i < n, and a word count, in Python and in shell */
static int python_vs_shell(fz_ctx *c)
{
    unsigned n = 1 + (unsigned) fz_below(&c->rng, 2000), k = 1 + (unsigned) fz_below(&c->rng, 97);
    char py[256], sh[256];
    snprintf(py, sizeof py, "python3 -c 'print(sum(i * %u for i in range(%u)))'", k, n);
    snprintf(sh, sizeof sh, "s=0; i=0; while [ $i -lt %u ]; do s=$((s + i * %u)); i=$((i + 1)); done; echo $s", n, k);
    _cleanup_free_ char *a = output(c, py, "python3");
    if (!a)
        return -1;
    _cleanup_free_ char *b = output(c, sh, "sh");
    if (!b)
        return -1;
    unsigned long long want = (unsigned long long) k * n * (n - 1) / 2;
    char expect[32];
    snprintf(expect, sizeof expect, "%llu\n", want);
    if (strcmp(a, expect) != 0 || strcmp(b, expect) != 0)
        return fz_fail(c, FZ_SANDBOX, "python3 printed %s, sh printed %s, the harness computed %s", a, b, expect);
    return 0;
}

static int c_compile_run(fz_ctx *c)
{
    unsigned n = 1 + (unsigned) fz_below(&c->rng, 40);
    char src[512];
    int len = snprintf(src, sizeof src,
                       "#include <stdio.h>\nint main(void) { unsigned long long a = 0, b = 1;\n"
                       "  for (int i = 0; i < %u; i++) { unsigned long long t = a + b; a = b; b = t; }\n"
                       "  printf(\"%%llu\\n\", a); return 0; }\n",
                       n);
    if (fz_put_checked(c, "/home/user/fib.c", src, (size_t) len) < 0)
        return -1;
    _cleanup_free_ char *out = output(c, "cd /home/user && cc -O2 -o fib fib.c && ./fib", "cc");
    if (!out)
        return -1;
    unsigned long long a = 0, b = 1;
    for (unsigned i = 0; i < n; i++) {
        unsigned long long t = a + b;
        a = b;
        b = t;
    }
    char expect[32];
    snprintf(expect, sizeof expect, "%llu\n", a);
    _cleanup_free_ char *py = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "python3 -c 'a,b=0,1\nfor _ in range(%u): a,b=b,a+b\nprint(a)'", n);
    py = output(c, cmd, "python3");
    if (!py)
        return -1;
    if (strcmp(out, expect) != 0 || strcmp(py, expect) != 0)
        return fz_fail(c, FZ_SANDBOX, "fib(%u): C printed %s, Python %s, the harness %s", n, out, py, expect);
    return 0;
}

/* A word count over generated text, by Perl, Python and awk (what Debian
 * images carry besides), and the harness: the same words, the same counts. */
static int text_tools(fz_ctx *c)
{
    /* in code point (and byte) order: the order the tools sort in */
    static const char *const words[] = { "alpha", "beta", "delta", "gamma", "zeta", "épsilon" };
    size_t n = 1 + (size_t) fz_below(&c->rng, 3000);
    size_t count[6] = { 0 };
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    for (size_t i = 0; i < n; i++) {
        size_t w = (size_t) fz_below(&c->rng, 6);
        count[w]++;
        fprintf(f, "%s%s", words[w], fz_below(&c->rng, 8) ? " " : "\n");
    }
    fclose(f);
    int r = fz_put_checked(c, "/home/user/words.txt", text, len);
    free(text);
    if (r < 0)
        return -1;
    char expect[256] = "";
    for (size_t w = 0; w < 6; w++) {
        size_t l = strlen(expect);
        if (count[w])
            snprintf(expect + l, sizeof expect - l, "%s %zu\n", words[w], count[w]);
    }
    static const struct {
        const char *what, *cmd;
    } tools[] = {
        { "perl", "perl -CSD -ne 'for (split) { $c{$_}++ } END { print \"$_ $c{$_}\\n\" for sort keys %c }' words.txt" },
        { "python3", "python3 -c 'import collections,sys\nc=collections.Counter(open(\"words.txt\", encoding=\"utf-8\").read().split())\n"
                     "sys.stdout.write(\"\".join(\"%s %d\\n\" % (w, c[w]) for w in sorted(c)))'" },
        { "awk", "awk '{ for (i = 1; i <= NF; i++) c[$i]++ } END { for (w in c) print w, c[w] }' words.txt | LC_ALL=C sort" },
    };
    for (size_t i = 0; i < sizeof tools / sizeof *tools; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "cd /home/user && %s", tools[i].cmd);
        _cleanup_free_ char *out = output(c, cmd, tools[i].what);
        if (!out)
            return -1;
        if (strcmp(out, expect) != 0)
            return fz_fail(c, FZ_SANDBOX, "%s counted %.200s; the harness %.200s", tools[i].what, out, expect);
    }
    return 0;
}

static const fz_test_def tests[] = {
    { "lang.text_tools", text_tools },
    { "lang.python_vs_shell", python_vs_shell },
    { "lang.c_compile_run", c_compile_run },
};
const fz_domain fz_domain_lang = { "lang", tests, sizeof tests / sizeof *tests };
