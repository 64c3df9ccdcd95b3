/* test_paths.c - unit tests for the pure path and name checks:
 * sbx_check_sandbox_path (mount.c), sbx_template_name_valid and
 * sbx_passwd_find (template.c). */
#define _GNU_SOURCE /* PATH_MAX */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mount.h"
#include "template.h"

/* ---- sbx_check_sandbox_path -------------------------------------------- */

static void expect_path_ok(const char *path)
{
    sbx_error err = { 0 };
    if (sbx_check_sandbox_path(path, "--bind", &err) != 0)
        fail_msg("sbx_check_sandbox_path(\"%s\") rejected a valid path: %s", path, err.msg);
}

/* The error names the option (`what`), quotes the path, and says why. */
static void expect_path_error(const char *path, const char *why)
{
    sbx_error err = { 0 };
    int r = sbx_check_sandbox_path(path, "--bind", &err);
    if (r != -1)
        fail_msg("sbx_check_sandbox_path(\"%s\") = %d, want -1", path, r);
    char quoted[PATH_MAX + 8];
    snprintf(quoted, sizeof quoted, "'%s'", path);
    if (!strstr(err.msg, "--bind") || !strstr(err.msg, quoted))
        fail_msg("error for \"%s\" does not name the option and the path: %s", path, err.msg);
    if (why && !strstr(err.msg, why))
        fail_msg("error for \"%s\" lacks \"%s\": %s", path, why, err.msg);
}

static void test_path_ok(void **state)
{
    (void) state;
    expect_path_ok("/work");
    expect_path_ok("/home/user/x");
    expect_path_ok("/home/user/x/");
    expect_path_ok("/procfoo");   /* only /proc itself and below are reserved */
    expect_path_ok("/proc.d");
    expect_path_ok("/devices");
    expect_path_ok("/.sbxrc");
    expect_path_ok("/sbx");
    expect_path_ok("/tmp/proc");  /* reserved names only at the top */
    expect_path_ok("/home/dev/shm");
    expect_path_ok("/a/..b");     /* "..b" is a name, not a parent reference */
    expect_path_ok("/a/b..");
    expect_path_ok("/...");
    expect_path_ok("/a/.hidden");
    expect_path_ok("/with space/\xc3\xa9");
}

static void test_path_must_be_absolute(void **state)
{
    (void) state;
    expect_path_error("work", "absolute");
    expect_path_error("", "absolute");
    expect_path_error("./work", "absolute");
    expect_path_error("../work", "absolute");
    expect_path_error("~/work", "absolute");
}

static void test_path_not_root(void **state)
{
    (void) state;
    expect_path_error("/", "root");
    expect_path_error("//", "root");
    expect_path_error("///", "root");
}

static void test_path_no_dotdot(void **state)
{
    (void) state;
    expect_path_error("/a/../b", "..");
    expect_path_error("/..", "..");
    expect_path_error("/../work", "..");
    expect_path_error("/a/b/..", "..");
    expect_path_error("/a/../../etc", "..");
    expect_path_error("/work/..//proc", "..");
}

static void test_path_reserved(void **state)
{
    (void) state;
    expect_path_error("/proc", "/proc");
    expect_path_error("/proc/", "/proc");
    expect_path_error("/proc/x", "/proc");
    expect_path_error("/proc/sys/kernel", "/proc");
    expect_path_error("//proc", "/proc");
    expect_path_error("/dev", "/dev");
    expect_path_error("/dev/shm", "/dev");
    expect_path_error("/dev/null", "/dev");
    expect_path_error("/.sbx", "/.sbx");
    expect_path_error("/.sbx/init", "/.sbx");
    expect_path_error("//.sbx//init", "/.sbx");
}

static void test_path_too_long(void **state)
{
    (void) state;
    char *p = malloc(PATH_MAX + 1);
    assert_non_null(p);
    p[0] = '/';
    memset(p + 1, 'a', PATH_MAX - 1);
    p[PATH_MAX] = '\0'; /* strlen == PATH_MAX: one too long */
    sbx_error err = { 0 };
    assert_int_equal(sbx_check_sandbox_path(p, "-w", &err), -1);
    assert_non_null(strstr(err.msg, "-w"));
    assert_non_null(strstr(err.msg, "too long"));

    p[PATH_MAX - 1] = '\0'; /* strlen == PATH_MAX - 1: fits */
    assert_int_equal(sbx_check_sandbox_path(p, "-w", &err), 0);
    free(p);
}

static void test_path_null(void **state)
{
    (void) state;
    sbx_error err = { 0 };
    assert_int_equal(sbx_check_sandbox_path(NULL, "-w", &err), -1);
    assert_non_null(strstr(err.msg, "absolute"));
}

/* "." components let a path reach what the checks above forbid: "/." is
 * the sandbox root, "/./proc" is /proc, "/./.sbx/init" is sbx-init. */
static void test_path_dot_components(void **state)
{
    (void) state;
    expect_path_error("/.", NULL);
    expect_path_error("/./", NULL);
    expect_path_error("/./proc", NULL);
    expect_path_error("/./dev/shm", NULL);
    expect_path_error("/./.sbx/init", NULL);
    expect_path_error("/.//.sbx", NULL);
}

/* ---- sbx_template_name_valid ------------------------------------------- */

static void test_template_names(void **state)
{
    (void) state;
    static const char *const good[] = {
        "base", "A", "py3.12", "my_tpl-2", "a..b", "0", "x-", "x.",
        "0123456789012345678901234567890123456789012345678901234567890123", /* 64 */
    };
    static const char *const bad[] = {
        "", ".", "..", ".hidden", "-x", "-", "a/b", "../etc", "/abs", "a b", "a\tb", "a:b", "a\nb",
        "caf\xc3\xa9", "a*", "a$b",
        "01234567890123456789012345678901234567890123456789012345678901234", /* 65 */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        if (!sbx_template_name_valid(good[i]))
            fail_msg("template name \"%s\" rejected", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (sbx_template_name_valid(bad[i]))
            fail_msg("template name \"%s\" accepted", bad[i]);
}

/* ---- sbx_passwd_find --------------------------------------------------- */

static const char passwd[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "# a comment line\n"
    "\n"
    "short:x:5:5\n"                              /* too few fields */
    "sixfields:x:6:6:gecos:/home/six\n"          /* one field short */
    "dup:x:7\n"                                  /* malformed first ... */
    "dup:x:8:9::/home/dup:/bin/sh\n"             /* ... then a valid one */
    "user:x:1000:1000:User,,,:/home/user:/bin/bash\n"
    "svc:x:200:300::var/lib/svc:/usr/sbin/nologin\n" /* relative home */
    "nohome:x:201:202:::/bin/sh\n"               /* empty home */
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    "last:x:4242:4243:Last:/home/last:/bin/sh";  /* no final newline */

static void expect_user(const char *who, uid_t uid, gid_t gid, const char *name, const char *home)
{
    sbx_user u;
    memset(&u, 0x7f, sizeof u);
    if (sbx_passwd_find(passwd, who, &u) != 1)
        fail_msg("sbx_passwd_find(\"%s\") did not find it", who);
    assert_int_equal(u.uid, uid);
    assert_int_equal(u.gid, gid);
    assert_string_equal(u.name, name);
    assert_string_equal(u.home, home);
}

static void expect_no_user(const char *who)
{
    sbx_user u;
    memset(&u, 0, sizeof u);
    if (sbx_passwd_find(passwd, who, &u) != 0)
        fail_msg("sbx_passwd_find(\"%s\") found uid %u", who, (unsigned) u.uid);
}

static void test_passwd_by_name(void **state)
{
    (void) state;
    expect_user("root", 0, 0, "root", "/root");
    expect_user("user", 1000, 1000, "user", "/home/user");
    expect_user("nobody", 65534, 65534, "nobody", "/nonexistent");
    expect_user("last", 4242, 4243, "last", "/home/last");
}

static void test_passwd_by_uid(void **state)
{
    (void) state;
    expect_user("0", 0, 0, "root", "/root");
    expect_user("1000", 1000, 1000, "user", "/home/user");
    expect_user("4242", 4242, 4243, "last", "/home/last");
    /* a uid is matched as a whole, not as a prefix or a gid */
    expect_no_user("100");
    expect_no_user("10000");
    expect_no_user("4243");
}

static void test_passwd_missing(void **state)
{
    (void) state;
    expect_no_user("ghost");
    expect_no_user("12345");
    expect_no_user("use");  /* prefix of a name */
    expect_no_user("users"); /* extension of a name */
    expect_no_user("ROOT");
    expect_no_user("x");    /* the password field is not a name */

    sbx_user u;
    assert_int_equal(sbx_passwd_find("", "root", &u), 0);
    assert_int_equal(sbx_passwd_find("\n\n\n", "root", &u), 0);
}

static void test_passwd_malformed_lines(void **state)
{
    (void) state;
    expect_no_user("short");
    expect_no_user("5");
    expect_no_user("sixfields");
    expect_no_user("6");
    /* a malformed entry does not hide a later valid one */
    expect_user("dup", 8, 9, "dup", "/home/dup");
    expect_user("8", 8, 9, "dup", "/home/dup");
    expect_no_user("7");
    /* a line too long for the parser is skipped, not misread */
    size_t n = 2000;
    char *text = malloc(n + 64);
    assert_non_null(text);
    memset(text, 'a', n);
    memcpy(text, "long:x:1:1::/home/", 18);
    strcpy(text + n, ":/bin/sh\nok:x:2:2::/ok:/bin/sh\n");
    sbx_user u;
    assert_int_equal(sbx_passwd_find(text, "long", &u), 0);
    assert_int_equal(sbx_passwd_find(text, "ok", &u), 1);
    assert_int_equal(u.uid, 2);
    free(text);
}

static void test_passwd_relative_home(void **state)
{
    (void) state;
    expect_user("svc", 200, 300, "svc", "/");
    expect_user("nohome", 201, 202, "nohome", "/");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_path_ok),
        cmocka_unit_test(test_path_must_be_absolute),
        cmocka_unit_test(test_path_not_root),
        cmocka_unit_test(test_path_no_dotdot),
        cmocka_unit_test(test_path_reserved),
        cmocka_unit_test(test_path_too_long),
        cmocka_unit_test(test_path_null),
        cmocka_unit_test(test_path_dot_components),
        cmocka_unit_test(test_template_names),
        cmocka_unit_test(test_passwd_by_name),
        cmocka_unit_test(test_passwd_by_uid),
        cmocka_unit_test(test_passwd_malformed_lines),
        cmocka_unit_test(test_passwd_missing),
        cmocka_unit_test(test_passwd_relative_home),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
