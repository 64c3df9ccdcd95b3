/* test_cgroup.c - unit tests for sbx_cg_host_parse(): which cgroup
 * hierarchies sbx uses, and where its own cgroup directories are, from the
 * text of /proc/self/mountinfo and /proc/self/cgroup.
 *
 * Fixtures use real mountinfo syntax:
 *   ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cgroup.h"

/* The layout of the machine these tests were written on: a hybrid host,
 * every v1 controller on its own hierarchy plus cgroup2 at .../unified.
 * cpuacct is listed before cpu so a sloppy prefix match would pick it. */
static const char hybrid_mountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "30 25 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
    "32 30 0:29 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup "
    "rw,xattr,name=systemd\n"
    "33 30 0:30 / /sys/fs/cgroup/cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpuacct\n"
    "34 30 0:32 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu\n"
    "35 30 0:33 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpuset\n"
    "36 25 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
    "37 30 0:34 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,devices\n"
    "38 30 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids\n"
    "39 30 0:36 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup "
    "rw,net_cls,net_prio\n"
    "40 22 0:37 / /proc rw,nosuid,nodev,noexec,relatime shared:19 - proc proc rw\n";

static const char hybrid_cgroup[] =
    "12:net_cls,net_prio:/\n"
    "9:name=systemd:/\n"
    "8:pids:/\n"
    "7:blkio:/\n"
    "6:freezer:/\n"
    "5:devices:/\n"
    "4:memory:/process_api/abc\n"
    "3:cpuset:/\n"
    "2:cpuacct:/not-this-one\n"
    "1:cpu:/\n"
    "0::/\n";

/* cgroup v2 only: systemd's unified layout. */
static const char v2_mountinfo[] =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "30 25 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n";

static const char v2_cgroup[] = "0::/user.slice/session-1.scope\n";

static void assert_host_free(sbx_cg_host *host)
{
    sbx_cg_host_free(host);
    assert_int_equal(host->n, 0);
    assert_null(host->base[0]);
}

/* The directory used for v1 controller `ctrl`.  Each controller we limit
 * (memory, cpu, pids) must be covered by exactly one entry. */
static const char *base_for(const sbx_cg_host *host, const char *ctrl)
{
    for (int i = 0; i < host->n; i++)
        if (host->ctrl[i] && strcmp(host->ctrl[i], ctrl) == 0)
            return host->base[i];
    return NULL;
}

static int count_base(const sbx_cg_host *host, const char *dir)
{
    int n = 0;
    for (int i = 0; i < host->n; i++)
        if (host->base[i] && strcmp(host->base[i], dir) == 0)
            n++;
    return n;
}

static void parse_ok(sbx_cg_host *host, const char *mountinfo, const char *proc_cgroup, const char *override)
{
    sbx_error err = { 0 };
    int r = sbx_cg_host_parse(host, mountinfo, proc_cgroup, override, &err);
    if (r != 0)
        fail_msg("sbx_cg_host_parse failed: %s", err.msg);
}

static void expect_v2(const char *mountinfo, const char *proc_cgroup, const char *override, const char *want)
{
    sbx_cg_host host;
    parse_ok(&host, mountinfo, proc_cgroup, override);
    assert_int_equal(host.mode, SBX_CG_V2);
    assert_int_equal(host.n, 1);
    assert_null(host.ctrl[0]);
    assert_non_null(host.base[0]);
    if (strcmp(host.base[0], want) != 0)
        fail_msg("v2 base is \"%s\", want \"%s\"", host.base[0], want);
    assert_host_free(&host);
}

/* (a) hybrid v1 + unified */
static void test_hybrid_uses_v1(void **state)
{
    (void) state;
    sbx_cg_host host;
    parse_ok(&host, hybrid_mountinfo, hybrid_cgroup, NULL);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_int_equal(host.n, 3);
    assert_string_equal(base_for(&host, "memory"), "/sys/fs/cgroup/memory/process_api/abc");
    assert_string_equal(base_for(&host, "cpu"), "/sys/fs/cgroup/cpu");
    assert_string_equal(base_for(&host, "pids"), "/sys/fs/cgroup/pids");
    assert_host_free(&host);
}

/* (b) cpu and cpuacct co-mounted, as most distributions do */
static void test_v1_comounted_cpu_cpuacct(void **state)
{
    (void) state;
    static const char mountinfo[] =
        "30 25 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
        "33 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup "
        "rw,cpu,cpuacct\n"
        "36 30 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n"
        "38 30 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids\n";
    static const char proc_cgroup[] = "8:pids:/user.slice\n"
                                      "4:memory:/user.slice\n"
                                      "2:cpu,cpuacct:/user.slice\n"
                                      "0::/user.slice\n";
    sbx_cg_host host;
    parse_ok(&host, mountinfo, proc_cgroup, NULL);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_int_equal(host.n, 3);
    assert_string_equal(base_for(&host, "cpu"), "/sys/fs/cgroup/cpu,cpuacct/user.slice");
    assert_int_equal(count_base(&host, "/sys/fs/cgroup/cpu,cpuacct/user.slice"), 1);
    assert_string_equal(base_for(&host, "memory"), "/sys/fs/cgroup/memory/user.slice");
    assert_string_equal(base_for(&host, "pids"), "/sys/fs/cgroup/pids/user.slice");
    assert_host_free(&host);
}

/* (b) dedup: controllers sharing one hierarchy share one directory */
static void test_v1_all_on_one_hierarchy(void **state)
{
    (void) state;
    static const char mountinfo[] =
        "36 25 0:31 / /sys/fs/cgroup/all rw,nosuid - cgroup cgroup rw,memory,cpu,cpuacct,pids\n";
    static const char proc_cgroup[] = "2:memory,cpu,cpuacct,pids:/job/7\n";
    sbx_cg_host host;
    parse_ok(&host, mountinfo, proc_cgroup, NULL);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_int_equal(host.n, 1);
    assert_string_equal(host.base[0], "/sys/fs/cgroup/all/job/7");
    /* one directory, every limit: all three controllers are remembered */
    assert_string_equal(host.ctrl[0], "memory,cpu,pids");
    assert_host_free(&host);
}

/* (c) pure cgroup v2 */
static void test_pure_v2(void **state)
{
    (void) state;
    expect_v2(v2_mountinfo, v2_cgroup, NULL, "/sys/fs/cgroup/user.slice/session-1.scope");
    /* at the root of the hierarchy: no trailing slash */
    expect_v2(v2_mountinfo, "0::/\n", NULL, "/sys/fs/cgroup");
    /* no final newline */
    expect_v2(v2_mountinfo, "0::/a/b", NULL, "/sys/fs/cgroup/a/b");
}

/* The header's rule: v1 only if memory, cpu and pids are all on v1;
 * otherwise the cgroup2 mount (here the hybrid's "unified" one). */
static void test_hybrid_without_v1_pids_falls_back_to_v2(void **state)
{
    (void) state;
    static const char mountinfo[] =
        "31 30 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw\n"
        "34 30 0:32 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu\n"
        "36 25 0:31 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n";
    static const char proc_cgroup[] = "4:memory:/m\n1:cpu:/c\n0::/user.slice/u.scope\n";
    expect_v2(mountinfo, proc_cgroup, NULL, "/sys/fs/cgroup/unified/user.slice/u.scope");
}

/* A v1 controller that is mounted but missing from /proc/self/cgroup is
 * not usable either. */
static void test_v1_controller_not_in_proc_cgroup(void **state)
{
    (void) state;
    static const char proc_cgroup[] = "4:memory:/m\n1:cpu:/\n0::/x\n"; /* no pids line */
    expect_v2(hybrid_mountinfo, proc_cgroup, NULL, "/sys/fs/cgroup/unified/x");
}

/* (d) SBX_CGROUP_PARENT replaces our own path in every hierarchy */
static void test_parent_override(void **state)
{
    (void) state;
    sbx_cg_host host;
    parse_ok(&host, hybrid_mountinfo, hybrid_cgroup, "/sbx-parent");
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_int_equal(host.n, 3);
    assert_string_equal(base_for(&host, "memory"), "/sys/fs/cgroup/memory/sbx-parent");
    assert_string_equal(base_for(&host, "cpu"), "/sys/fs/cgroup/cpu/sbx-parent");
    assert_string_equal(base_for(&host, "pids"), "/sys/fs/cgroup/pids/sbx-parent");
    assert_host_free(&host);

    /* /proc/self/cgroup is not needed at all with an override */
    parse_ok(&host, hybrid_mountinfo, "", "/sbx-parent/deeper");
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_string_equal(base_for(&host, "memory"), "/sys/fs/cgroup/memory/sbx-parent/deeper");
    assert_host_free(&host);

    expect_v2(v2_mountinfo, v2_cgroup, "/sbx-parent", "/sys/fs/cgroup/sbx-parent");
    expect_v2(v2_mountinfo, "", "/sbx-parent", "/sys/fs/cgroup/sbx-parent");
}

/* (e) */
static void test_relative_override_rejected(void **state)
{
    (void) state;
    static const char *const bad[] = { "sbx-parent", "", "./x", "sys/fs/cgroup" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sbx_cg_host host;
        sbx_error err = { 0 };
        assert_int_equal(sbx_cg_host_parse(&host, v2_mountinfo, v2_cgroup, bad[i], &err), -1);
        assert_int_equal(host.n, 0);
        assert_null(host.base[0]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        if (!strstr(err.msg, quoted) || !strstr(err.msg, "absolute"))
            fail_msg("override \"%s\": unclear error: %s", bad[i], err.msg);
    }
}

/* (f) */
static void test_no_cgroup_mounts(void **state)
{
    (void) state;
    static const char mountinfo[] = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
                                    "25 22 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
                                    "30 25 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n";
    static const char *const inputs[][2] = {
        { mountinfo, "0::/\n" },
        { "", "" },
        { "garbage without a separator\n\n", "0::/\n" },
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        sbx_cg_host host;
        sbx_error err = { 0 };
        assert_int_equal(sbx_cg_host_parse(&host, inputs[i][0], inputs[i][1], NULL, &err), -1);
        assert_int_equal(host.n, 0);
        if (!strstr(err.msg, "no usable cgroups") || !strstr(err.msg, "memory") || !strstr(err.msg, "cgroup v2"))
            fail_msg("unclear error for a host without cgroups: %s", err.msg);
    }
}

/* cgroup2 is mounted but /proc/self/cgroup has no "0::" line. */
static void test_v2_without_own_entry(void **state)
{
    (void) state;
    sbx_cg_host host;
    sbx_error err = { 0 };
    assert_int_equal(sbx_cg_host_parse(&host, v2_mountinfo, "1:name=systemd:/\n", NULL, &err), -1);
    assert_int_equal(host.n, 0);
    assert_non_null(strstr(err.msg, "/sys/fs/cgroup"));
    assert_non_null(strstr(err.msg, "0::"));
}

/* (g) mountinfo escapes a space in a path as \040 */
static void test_escaped_mount_point(void **state)
{
    (void) state;
    static const char v2[] =
        "30 25 0:27 / /run/my\\040cgroups rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n";
    expect_v2(v2, "0::/user.slice\n", NULL, "/run/my cgroups/user.slice");

    static const char v1[] =
        "34 30 0:32 / /cg/c\\040p\\134u rw,relatime - cgroup cgroup rw,cpu\n"
        "36 25 0:31 / /cg/mem\\011ory rw,nosuid - cgroup cgroup rw,memory\n"
        "38 30 0:35 / /cg/pids rw,relatime - cgroup cgroup rw,pids\n";
    sbx_cg_host host;
    parse_ok(&host, v1, "4:memory:/\n1:cpu:/x\n8:pids:/\n", NULL);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_string_equal(base_for(&host, "cpu"), "/cg/c p\\u/x");
    assert_string_equal(base_for(&host, "memory"), "/cg/mem\tory");
    assert_string_equal(base_for(&host, "pids"), "/cg/pids");
    assert_host_free(&host);
}

/* (h) a container sees a bind mount of a sub-hierarchy: the mount's root is
 * /docker/xyz, and /proc/self/cgroup shows paths from the hierarchy root. */
static void test_bind_mounted_sub_hierarchy(void **state)
{
    (void) state;
    static const char v2[] =
        "1200 1100 0:31 /docker/xyz /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n";
    expect_v2(v2, "0::/docker/xyz/sub\n", NULL, "/sys/fs/cgroup/sub");
    expect_v2(v2, "0::/docker/xyz\n", NULL, "/sys/fs/cgroup");

    static const char v1[] =
        "1201 1100 0:40 /docker/xyz /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
        "1202 1100 0:41 /docker/xyz /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
        "1203 1100 0:42 /docker/xyz /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n";
    static const char proc_cgroup[] = "8:pids:/docker/xyz/sub\n"
                                      "4:memory:/docker/xyz/sub\n"
                                      "2:cpu,cpuacct:/docker/xyz\n";
    sbx_cg_host host;
    parse_ok(&host, v1, proc_cgroup, NULL);
    assert_int_equal(host.mode, SBX_CG_V1);
    assert_int_equal(host.n, 3);
    assert_string_equal(base_for(&host, "memory"), "/sys/fs/cgroup/memory/sub");
    assert_string_equal(base_for(&host, "cpu"), "/sys/fs/cgroup/cpu,cpuacct");
    assert_string_equal(base_for(&host, "pids"), "/sys/fs/cgroup/pids/sub");
    assert_host_free(&host);
}

/* A host structure is reusable: parse, free, parse again. */
static void test_free_and_reuse(void **state)
{
    (void) state;
    sbx_cg_host host;
    for (int i = 0; i < 3; i++) {
        parse_ok(&host, i % 2 ? v2_mountinfo : hybrid_mountinfo, i % 2 ? v2_cgroup : hybrid_cgroup, NULL);
        assert_int_equal(host.mode, i % 2 ? SBX_CG_V2 : SBX_CG_V1);
        assert_host_free(&host);
    }
    /* freeing an already freed host is harmless */
    sbx_cg_host_free(&host);
    assert_int_equal(host.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hybrid_uses_v1),
        cmocka_unit_test(test_v1_comounted_cpu_cpuacct),
        cmocka_unit_test(test_v1_all_on_one_hierarchy),
        cmocka_unit_test(test_pure_v2),
        cmocka_unit_test(test_hybrid_without_v1_pids_falls_back_to_v2),
        cmocka_unit_test(test_v1_controller_not_in_proc_cgroup),
        cmocka_unit_test(test_parent_override),
        cmocka_unit_test(test_relative_override_rejected),
        cmocka_unit_test(test_no_cgroup_mounts),
        cmocka_unit_test(test_v2_without_own_entry),
        cmocka_unit_test(test_escaped_mount_point),
        cmocka_unit_test(test_bind_mounted_sub_hierarchy),
        cmocka_unit_test(test_free_and_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
