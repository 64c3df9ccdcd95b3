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

/* The same small program in every language the template offers (probed:
 * those it lacks are recorded as evidence, not failures); each must print
 * what the harness computed.  Fewer than two languages: `unsupported`.
 *
 * Not Java: `base` shows the host's /usr, so `java` is there, but not the
 * host's /etc, where the JDK keeps java.security: it cannot start a
 * program (InternalError) in base, a template matter (docs/fuzz.md,
 * Limitations), and the probe only knows whether a command exists. */
static int polyglot(fz_ctx *c)
{
    static const char *const probe[] = { "python3", "perl", "node", "ruby", "tclsh", "lua", "php", "awk",
                                         "bc",      "sh",   "cc",   "c++",  "gfortran" };
    unsigned n = 1 + (unsigned) fz_below(&c->rng, 5000), k = 1 + (unsigned) fz_below(&c->rng, 100000);
    const unsigned m = 1000003;
    unsigned long long want = 0;
    for (unsigned i = 0; i < n; i++)
        want += (unsigned long long) i * k % m;
    char expect[32];
    snprintf(expect, sizeof expect, "%llu\n", want);
    fz_evidence(c, "input", "sum of i*%u %% %u for i < %u = %llu", k, m, n, want);
    char cmd[1024] = "for x in";
    for (size_t i = 0; i < sizeof probe / sizeof *probe; i++) {
        size_t l = strlen(cmd);
        snprintf(cmd + l, sizeof cmd - l, " %s", probe[i]);
    }
    strcat(cmd, "; do command -v $x >/dev/null && echo $x; done; true");
    int code;
    _cleanup_free_ char *have = NULL;
    size_t hl;
    if (fz_exec(c, cmd, &code, &have, &hl, NULL, NULL) < 0)
        return -1;
    char src_c[512], src_cc[512], src_f[512];
    int lc = snprintf(src_c, sizeof src_c,
                      "#include <stdio.h>\nint main(void) { unsigned long long s = 0;\n"
                      "  for (unsigned long long i = 0; i < %u; i++) s += i * %u %% %u;\n"
                      "  printf(\"%%llu\\n\", s); return 0; }\n", n, k, m);
    int lcc = snprintf(src_cc, sizeof src_cc,
                       "#include <iostream>\nint main() { unsigned long long s = 0;\n"
                       "  for (unsigned long long i = 0; i < %u; i++) s += i * %u %% %u;\n"
                       "  std::cout << s << std::endl; }\n", n, k, m);
    int lf = snprintf(src_f, sizeof src_f,
                      "program p\n  integer(8) :: i, s\n  s = 0\n  do i = 0, %u - 1\n"
                      "    s = s + mod(i * %u_8, %u_8)\n  end do\n  print '(I0)', s\nend program p\n", n, k, m);
    char p[16][600];
    const char *lang[16];
    size_t np = 0;
#define LANG(name, ...) (snprintf(p[np], sizeof p[np], __VA_ARGS__), lang[np++] = name)
    LANG("python3", "python3 -c 'print(sum(i * %u %% %u for i in range(%u)))'", k, m, n);
    LANG("perl", "perl -e '$s = 0; for $i (0 .. %u - 1) { $s += $i * %u %% %u } print \"$s\\n\"'", n, k, m);
    LANG("node", "node -e 'let s = 0; for (let i = 0; i < %u; i++) s += i * %u %% %u; console.log(s)'", n, k, m);
    LANG("ruby", "ruby -e 's = 0; %u.times { |i| s += i * %u %% %u }; puts s'", n, k, m);
    LANG("tclsh", "echo 'set s 0; for {set i 0} {$i < %u} {incr i} { incr s [expr {$i * %u %% %u}] }; puts $s' | tclsh",
         n, k, m);
    LANG("lua", "lua -e 'local s = 0 for i = 0, %u - 1 do s = s + i * %u %% %u end print(string.format(\"%%d\", s))'", n,
         k, m);
    LANG("php", "php -r '$s = 0; for ($i = 0; $i < %u; $i++) $s += $i * %u %% %u; echo $s, \"\\n\";'", n, k, m);
    LANG("awk", "awk 'BEGIN { s = 0; for (i = 0; i < %u; i++) s += i * %u %% %u; printf \"%%.0f\\n\", s }'", n, k, m);
    LANG("bc", "echo 's = 0; for (i = 0; i < %u; i++) s += i * %u %% %u; s' | BC_LINE_LENGTH=0 bc", n, k, m);
    LANG("sh", "s=0; i=0; while [ $i -lt %u ]; do s=$((s + i * %u %% %u)); i=$((i + 1)); done; echo $s", n, k, m);
    LANG("cc", "cd /home/user/poly && cc -O1 -o pc p.c && ./pc");
    LANG("c++", "cd /home/user/poly && c++ -O1 -o pcc p.cc && ./pcc");
    LANG("gfortran", "cd /home/user/poly && gfortran -o pf p.f90 && ./pf");
#undef LANG
    /* the compiled ones' sources, those the template can compile */
    fz_upload src[3];
    size_t ns = 0;
    char missing[256] = "";
    size_t present = 0;
    bool on[16];
    for (size_t i = 0; i < np; i++) {
        /* a name is a whole line of the probe's output */
        on[i] = false;
        for (const char *q = have; q && *q; q = strchr(q, '\n') ? strchr(q, '\n') + 1 : NULL)
            if (strncmp(q, lang[i], strlen(lang[i])) == 0 && q[strlen(lang[i])] == '\n')
                on[i] = true;
        if (!on[i]) {
            size_t l = strlen(missing);
            snprintf(missing + l, sizeof missing - l, "%s%s", l ? ", " : "", lang[i]);
            continue;
        }
        present++;
        if (strcmp(lang[i], "cc") == 0)
            src[ns++] = (fz_upload) { "/home/user/poly/p.c", src_c, (size_t) lc };
        else if (strcmp(lang[i], "c++") == 0)
            src[ns++] = (fz_upload) { "/home/user/poly/p.cc", src_cc, (size_t) lcc };
        else if (strcmp(lang[i], "gfortran") == 0)
            src[ns++] = (fz_upload) { "/home/user/poly/p.f90", src_f, (size_t) lf };
    }
    if (missing[0])
        fz_evidence(c, "unsupported", "not in this template: %s", missing);
    if (present < 2)
        return fz_fail(c, FZ_UNSUPPORTED, "fewer than two languages in this template (it lacks %s)", missing);
    if (ns && fz_put_checked_many(c, src, ns) < 0)
        return -1;
    for (size_t i = 0; i < np; i++) {
        if (!on[i])
            continue;
        _cleanup_free_ char *out = output(c, p[i], lang[i]);
        if (!out)
            return -1;
        if (strcmp(out, expect) != 0)
            return fz_fail(c, FZ_SANDBOX, "%s printed %.60s, the harness computed %s", lang[i], out, expect);
    }
    return 0;
}

static const fz_test_def tests[] = {
    { "lang.polyglot", polyglot },
    { "lang.text_tools", text_tools },
    { "lang.python_vs_shell", python_vs_shell },
    { "lang.c_compile_run", c_compile_run },
};
const fz_domain fz_domain_lang = { "lang", tests, sizeof tests / sizeof *tests };
