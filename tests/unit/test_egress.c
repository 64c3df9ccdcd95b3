/* Unit tests of network policies (src/daemon/egress.c): parsing, and the
 * verdict for every kind of destination the proxy can be asked for. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/daemon/egress.h"
#include "../../src/daemon/store.h"

static sbx_net_policy *policy(const char *json)
{
    json_t *j = json_loads(json, JSON_DECODE_ANY, NULL);
    sbx_net_policy *p = NULL;
    sbx_error err = { 0 };
    int r = sbx_net_policy_parse(j, &p, &err);
    json_decref(j);
    return r == 0 ? p : NULL;
}

/* The verdict for host at address text addr. */
static bool allows(const sbx_net_policy *p, const char *host, const char *addr, char *why)
{
    struct sockaddr_storage ss = { 0 };
    if (strchr(addr, ':')) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
        s6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, addr, &s6->sin6_addr), 1);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
        s4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, addr, &s4->sin_addr), 1);
    }
    char buf[512] = "";
    bool ok = sbx_net_policy_allows(p, host, (struct sockaddr *) &ss, false, buf, sizeof buf);
    if (why)
        strcpy(why, buf);
    return ok;
}

static void parsing(void **state)
{
    (void) state;
    const char *good[] = { "\"none\"", "{\"mode\":\"none\"}", "{\"mode\":\"allowlist\"}", "\"open\"",
                           "{\"mode\":\"open\",\"allow\":[\"10.0.2.2/32\"],\"deny\":[\"203.0.113.0/24\"]}",
                           "{\"mode\":\"allowlist\",\"allow\":[\"a.com\",\"*.b.org\",\"10.0.0.0/8\",\"::1\"],"
                           "\"deny\":[\"c.a.com\",\"2001:db8::/32\"]}" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        sbx_net_policy *p = policy(good[i]);
        assert_non_null(p);
        sbx_net_policy_free(p);
    }
    const char *bad[] = { "\"wide\"", "{\"mode\":\"open\",\"deny\":[\"a.com\"]}", "7", "null", "{}", "{\"mode\":\"x\"}", "{\"mode\":\"allowlist\",\"allow\":\"a\"}",
                          "{\"mode\":\"allowlist\",\"allow\":[\"a b\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"1.2.3.4/33\"]}",
                          "{\"mode\":\"allowlist\",\"allow\":[\"a.*.com\"]}", "{\"mode\":\"none\",\"deny\":[\"a.com\"]}",
                          "{\"mode\":\"allowlist\",\"x\":1}", "{\"mode\":\"allowlist\",\"allow\":[\"\"]}" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_null(policy(bad[i]));
    sbx_net_policy *p = policy("{\"mode\":\"allowlist\",\"allow\":[\"A.com.\"]}");
    json_t *j = sbx_net_policy_json(p);
    assert_string_equal(json_string_value(json_array_get(json_object_get(j, "allow"), 0)), "a.com");
    json_decref(j);
    sbx_net_policy_free(p);
}

static void verdicts(void **state)
{
    (void) state;
    char why[512];
    sbx_net_policy *p = policy("{\"mode\":\"allowlist\",\"allow\":[\"pypi.org\",\"*.example.com\",\"203.0.113.0/24\"],"
                               "\"deny\":[\"bad.example.com\",\"198.51.100.7\"]}");
    assert_non_null(p);
    /* names: exact, wildcard (subdomains, not the apex), case */
    assert_true(allows(p, "pypi.org", "151.101.0.223", NULL));
    assert_true(allows(p, "PyPI.org", "151.101.0.223", NULL));
    assert_false(allows(p, "evil-pypi.org", "151.101.0.223", why));
    assert_string_equal(why, "not in allowlist");
    assert_false(allows(p, "pypi.org.evil.net", "151.101.0.223", NULL));
    assert_true(allows(p, "a.example.com", "93.184.215.14", NULL));
    assert_true(allows(p, "a.b.example.com", "93.184.215.14", NULL));
    assert_false(allows(p, "example.com", "93.184.215.14", NULL));
    assert_false(allows(p, "xexample.com", "93.184.215.14", NULL));
    /* deny wins */
    assert_false(allows(p, "bad.example.com", "93.184.215.14", why));
    assert_non_null(strstr(why, "denied by rule bad.example.com"));
    /* an allowed name resolving to an internal address: no */
    const char *internal[] = { "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                               "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1",
                               "::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "ff02::1",
                               "172.31.255.255", "100.127.0.1", "fc00::1", "fdff::1",
                               "2002:7f00:1::1",     /* 6to4 of 127.0.0.1 */
                               "2002:a9fe:a9fe::1",  /* 6to4 of 169.254.169.254 */
                               "2001:0:4136:e378:8000:63bf:3fff:fdd2" /* Teredo */ };
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++) {
        assert_false(allows(p, "pypi.org", internal[i], why));
        assert_non_null(strstr(why, "private, loopback, link-local or reserved"));
    }
    /* addresses: CIDR rules only */
    assert_true(allows(p, NULL, "203.0.113.9", NULL));           /* an allow CIDR opens even a reserved range */
    assert_true(allows(p, NULL, "::ffff:203.0.113.9", NULL));    /* mapped is the IPv4 address */
    assert_false(allows(p, NULL, "151.101.0.223", NULL));
    assert_false(allows(p, NULL, "198.51.100.7", NULL));
    /* public neighbours of those ranges are not caught by them */
    assert_true(allows(p, "pypi.org", "172.32.0.1", NULL));
    assert_true(allows(p, "pypi.org", "100.128.0.1", NULL));
    assert_true(allows(p, "pypi.org", "2001:1::1", NULL));
    assert_true(allows(p, "pypi.org", "2a00:1450::1", NULL));
    /* a deny CIDR wins over an allowed name */
    sbx_net_policy_free(p);
    p = policy("{\"mode\":\"allowlist\",\"allow\":[\"pypi.org\"],\"deny\":[\"151.101.0.0/16\"]}");
    assert_false(allows(p, "pypi.org", "151.101.0.223", why));
    assert_string_equal(why, "address 151.101.0.223 is denied by rule 151.101.0.0/16");
    sbx_net_policy_free(p);
    /* none: nothing */
    p = policy("\"none\"");
    assert_false(allows(p, "pypi.org", "151.101.0.223", why));
    sbx_net_policy_free(p);
    /* an explicit loopback CIDR is the only way to loopback */
    p = policy("{\"mode\":\"allowlist\",\"allow\":[\"127.0.0.5/32\"],\"deny\":[\"127.0.0.5\"]}");
    assert_false(allows(p, NULL, "127.0.0.5", NULL)); /* deny still wins */
    sbx_net_policy_free(p);
}

/* Host names as clients send them: checked, lowercased, one trailing dot
 * (the DNS root) dropped - "evil.com." is "evil.com" to every rule. */
static void host_names(void **state)
{
    (void) state;
    char out[256];
    const char *same[][2] = { { "Allowed.TEST.", "allowed.test" }, { "a-b_c.example.com", "a-b_c.example.com" },
                              { "127.0.0.1", "127.0.0.1" },         { "0x7F.1", "0x7f.1" },
                              { "::FFFF:127.0.0.1", "::ffff:127.0.0.1" }, { "x", "x" } };
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        assert_true(sbx_net_host_normalize(same[i][0], strlen(same[i][0]), out, sizeof out));
        assert_string_equal(out, same[i][1]);
    }
    const char *bad[] = { "", ".", "..", "a..b", ".a", "a.b..", "a b", "a\nb", "a\"b", "\xc3\xa9.com", "a/b",
                          "a:b", "fe80::1%eth0", "[::1]", "a\rb" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(sbx_net_host_normalize(bad[i], strlen(bad[i]), out, sizeof out));
    assert_false(sbx_net_host_normalize("a\0b", 3, out, sizeof out)); /* a NUL inside (SOCKS5 names have lengths) */
    char label[70];
    memset(label, 'a', 64);
    label[64] = '\0';
    assert_false(sbx_net_host_normalize(label, 64, out, sizeof out)); /* a label of 64 */
    assert_true(sbx_net_host_normalize(label, 63, out, sizeof out));
    char big[300];
    for (int i = 0; i < 300; i += 2)
        big[i] = 'a', big[i + 1] = '.';
    assert_false(sbx_net_host_normalize(big, 255, out, sizeof out)); /* over 253 */
    assert_false(sbx_net_host_normalize(big, 299, out, sizeof out));
}

/* The name rules decide before any resolver is asked: a name a deny rule
 * names, or one no rule could allow, is never sent to DNS. */
static void names_before_dns(void **state)
{
    (void) state;
    char why[512];
    sbx_net_policy *p = policy("{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"*.example.com\"],"
                               "\"deny\":[\"evil.com\",\"bad.example.com\"]}");
    assert_int_equal(sbx_net_policy_name_verdict(p, "allowed.test", why, sizeof why), SBX_NAME_ALLOWED);
    assert_int_equal(sbx_net_policy_name_verdict(p, "allowed.test.", why, sizeof why), SBX_NAME_ALLOWED);
    assert_int_equal(sbx_net_policy_name_verdict(p, "ALLOWED.test", why, sizeof why), SBX_NAME_ALLOWED);
    assert_int_equal(sbx_net_policy_name_verdict(p, "a.example.com.", why, sizeof why), SBX_NAME_ALLOWED);
    /* *.x is the subdomains, not x */
    assert_int_equal(sbx_net_policy_name_verdict(p, "example.com", why, sizeof why), SBX_NAME_DENIED);
    assert_string_equal(why, "not in allowlist");
    assert_int_equal(sbx_net_policy_name_verdict(p, "unlisted.test", why, sizeof why), SBX_NAME_DENIED);
    assert_string_equal(why, "not in allowlist");
    assert_int_equal(sbx_net_policy_name_verdict(p, "evil.com.", why, sizeof why), SBX_NAME_DENIED);
    assert_string_equal(why, "evil.com is denied by rule evil.com");
    assert_int_equal(sbx_net_policy_name_verdict(p, "EVIL.com", why, sizeof why), SBX_NAME_DENIED);
    assert_int_equal(sbx_net_policy_name_verdict(p, "Bad.Example.Com.", why, sizeof why), SBX_NAME_DENIED);
    assert_string_equal(why, "bad.example.com is denied by rule bad.example.com");
    assert_int_equal(sbx_net_policy_name_verdict(p, "a\nb", why, sizeof why), SBX_NAME_DENIED);
    assert_string_equal(why, "not a valid host name");
    sbx_net_policy_free(p);
    /* an allow CIDR: a name no domain rule allows may still resolve into it */
    p = policy("{\"mode\":\"allowlist\",\"allow\":[\"203.0.113.0/24\"],\"deny\":[\"evil.com\"]}");
    assert_int_equal(sbx_net_policy_name_verdict(p, "unlisted.test", why, sizeof why), SBX_NAME_BY_ADDRESS);
    assert_int_equal(sbx_net_policy_name_verdict(p, "evil.com.", why, sizeof why), SBX_NAME_DENIED);
    sbx_net_policy_free(p);
    p = policy("\"none\"");
    assert_int_equal(sbx_net_policy_name_verdict(p, "allowed.test", why, sizeof why), SBX_NAME_DENIED);
    sbx_net_policy_free(p);
    /* the verdict at an address agrees, with or without the dot */
    p = policy("{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\",\"*.test\"],\"deny\":[\"evil.test\"]}");
    assert_true(allows(p, "allowed.test.", "151.101.0.223", NULL));
    assert_false(allows(p, "evil.test.", "151.101.0.223", why));
    assert_string_equal(why, "evil.test is denied by rule evil.test");
    assert_false(allows(p, "EVIL.TEST", "151.101.0.223", NULL));
    sbx_net_policy_free(p);
}

/* Every proxied connection is an event: a sandbox keeps about its newest
 * 10,000 of a kind, the others' are untouched. */
static void events_are_capped(void **state)
{
    (void) state;
    char dir[] = "/tmp/sbx-test-events-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/db", dir);
    sbx_store *st;
    sbx_error err = { 0 };
    assert_int_equal(sbx_store_open(&st, path, &err), 0);
    sbx_store_event(st, "other", "k", "net", "{}");
    for (int i = 0; i < 12000; i++)
        sbx_store_event(st, "chatty", "k", "net", i == 11999 ? "{\"last\":true}" : "{}");
    json_t *evs = sbx_store_events(st, "chatty", "net", 20000);
    size_t n = json_array_size(evs); /* trimmed every 1,000 inserts: 10,000 to 10,999 */
    assert_true(n >= 10000 && n < 11000);
    assert_true(json_is_true(json_object_get(json_object_get(json_array_get(evs, n - 1), "detail"), "last")));
    json_decref(evs);
    evs = sbx_store_events(st, "other", NULL, 10);
    assert_int_equal(json_array_size(evs), 1);
    json_decref(evs);
    sbx_store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = { cmocka_unit_test(parsing), cmocka_unit_test(verdicts),
                                        cmocka_unit_test(host_names), cmocka_unit_test(names_before_dns),
                                        cmocka_unit_test(events_are_capped) };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
