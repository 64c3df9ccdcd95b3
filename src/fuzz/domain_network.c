/* domain_network.c - network policies: with none, no way out and a clear
 * error; with an allowlist, what is allowed arrives byte for byte through
 * the egress proxy and what is not is refused in words that say why; a
 * policy changed on a running sandbox takes effect at once.
 *
 * The only server the tests talk to is the harness's own, on this
 * machine's loopback (libmicrohttpd, started once per process): it serves
 * /blob/SEED/SIZE, bytes made from the seed, so a test knows their SHA-256
 * without keeping them.  The sandbox reaches it only through sbxd's egress
 * proxy, which runs on the host and is told to allow 127.0.0.1/32 (the
 * proxy denies loopback unless a CIDR rule names it).  A target on another
 * machine cannot reach this server: there the domain is `unsupported`.
 *
 * Where an address is needed that must NOT be reached, the tests use
 * 192.0.2.1 (TEST-NET-1, documentation only): with no interface but
 * loopback a connect() there fails at once, nothing is sent. */
#define _GNU_SOURCE
#include "fuzz.h"
#include "../lib/cleanup.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOB_MAX (8u << 20)

static struct MHD_Daemon *server;
static unsigned short server_port;
static pthread_once_t server_once = PTHREAD_ONCE_INIT;

static enum MHD_Result serve(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **state)
{
    (void) cls, (void) version, (void) upload, (void) upload_size, (void) state;
    unsigned long long seed = 0;
    unsigned long size = 0;
    int n = 0;
    struct MHD_Response *r;
    unsigned status = MHD_HTTP_OK;
    if (strcmp(method, "GET") == 0 && sscanf(url, "/blob/%llu/%lu%n", &seed, &size, &n) == 2 && url[n] == '\0' &&
        size <= BLOB_MAX) {
        uint8_t *b = malloc(size ? size : 1);
        if (!b)
            return MHD_NO;
        fz_rng rng = { seed };
        fz_bytes(&rng, b, size);
        r = MHD_create_response_from_buffer(size, b, MHD_RESPMEM_MUST_FREE);
    } else {
        static const char nf[] = "no such blob\n";
        status = MHD_HTTP_NOT_FOUND;
        r = MHD_create_response_from_buffer(sizeof nf - 1, (void *) nf, MHD_RESPMEM_PERSISTENT);
    }
    enum MHD_Result ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ok;
}

static void start_server(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    server = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, serve,
                              NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &sa, MHD_OPTION_END);
    const union MHD_DaemonInfo *info = server ? MHD_get_daemon_info(server, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    server_port = info ? info->port : 0;
}

/* The harness's server, or a recorded reason why there is none. */
static int harness_server(fz_ctx *c)
{
    if (!fz_target_local(c->t))
        return fz_fail(c, FZ_UNSUPPORTED, "the target is not on this machine: it cannot reach the harness's server");
    pthread_once(&server_once, start_server);
    return server_port ? 0 : fz_fail(c, FZ_HARNESS, "the harness's HTTP server did not start");
}

static int set_policy(fz_ctx *c, const char *mode, const char *allow, const char *deny)
{
    _cleanup_json_ json_t *p = json_pack("{s:s}", "mode", mode);
    if (allow)
        json_object_set_new(p, "allow", json_pack("[s]", allow));
    if (deny)
        json_object_set_new(p, "deny", json_pack("[s]", deny));
    fz_evidence(c, "policy", "%s allow %s deny %s", mode, allow ? allow : "-", deny ? deny : "-");
    return fz_set_network(c, p);
}

/* A command whose tool is not in the template (126, 127) tried nothing:
 * `unsupported`, never a pass nor the sandbox's failure. */
static int missing_tool(fz_ctx *c, int code, const char *tool)
{
    if (code == 126 || code == 127)
        return fz_fail(c, FZ_UNSUPPORTED, "%s is not in this template (exit %d)", tool, code);
    return 0;
}

/* Fetch a blob through the proxy (curl, told the proxy explicitly: NO_PROXY
 * names loopback, which the blob's URL is); prints the HTTP status, then the
 * body's SHA-256, or the body itself when it is not 200 (the proxy's words). */
static int fetch(fz_ctx *c, uint64_t seed, size_t size, int *code, char **out, char **err)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "command -v curl >/dev/null || exit 127; "
             "s=$(curl -sS --max-time 20 --noproxy '' -x http://127.0.0.1:3128 -o /tmp/blob -w '%%{http_code}' "
             "http://127.0.0.1:%u/blob/%llu/%zu) || exit $?; echo \"$s\"; "
             "if [ \"$s\" = 200 ]; then sha256sum < /tmp/blob; else cat /tmp/blob; fi",
             server_port, (unsigned long long) seed, size);
    size_t ol, el;
    if (fz_exec(c, cmd, code, out, &ol, err, &el) < 0)
        return -1;
    return missing_tool(c, *code, "curl");
}

static int fetch_must_work(fz_ctx *c)
{
    uint64_t seed = fz_next(&c->rng);
    size_t size = (size_t) fz_below(&c->rng, fz_below(&c->rng, 4) ? 65536 : BLOB_MAX);
    uint8_t *b = malloc(size ? size : 1);
    if (!b)
        return fz_fail(c, FZ_HARNESS, "out of memory");
    fz_rng rng = { seed };
    fz_bytes(&rng, b, size);
    char want[65];
    fz_sha256(b, size, want);
    free(b);
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    if (fetch(c, seed, size, &code, &out, &err) < 0)
        return -1;
    if (code != 0 || strncmp(out, "200\n", 4) != 0)
        return fz_fail(c, FZ_SANDBOX, "an allowed fetch of %zu bytes failed (exit %d): %.200s %.200s", size, code, out,
                       err);
    /* the proxy carried them: bytes changed on the way in are the sandbox
     * service's doing (its proxy), not the API's */
    if (strncmp(out + 4, want, 64) != 0)
        return fz_fail(c, FZ_SANDBOX, "%zu bytes through the proxy arrived as %.64s, not %s", size, out + 4, want);
    return 0;
}

/* With no network: no interface but loopback, no name resolution, and a
 * connect() anywhere fails with an error that says so. */
static int none(fz_ctx *c)
{
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    size_t ol, el;
    bool curl = fz_below(&c->rng, 2);
    const char *cmd = curl ? "curl -sS --max-time 5 --noproxy '*' http://192.0.2.1/"
                           : "python3 -c 'import socket; socket.create_connection((\"192.0.2.1\", 80), 5)'";
    fz_evidence(c, "attempt", "%s", cmd);
    if (fz_exec(c, cmd, &code, &out, &ol, &err, &el) < 0 || missing_tool(c, code, curl ? "curl" : "python3") < 0)
        return -1;
    if (code == 0)
        return fz_fail(c, FZ_SANDBOX, "with network none, a connection to 192.0.2.1 succeeded");
    if (!strstr(err, "unreachable") && !strstr(err, "Unreachable") && !strstr(err, "Couldn't connect") &&
        !strstr(err, "Failed to connect"))
        return fz_fail(c, FZ_SANDBOX, "with network none, the failure does not say why: %.300s", err);
    _cleanup_free_ char *dev = NULL;
    if (fz_exec(c, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; getent hosts example.com", &code, &dev, &ol,
                NULL, NULL) < 0)
        return -1;
    if (strcmp(dev, "lo\n") != 0)
        return fz_fail(c, FZ_SANDBOX, "with network none, the interfaces (and names resolved) are: %.200s", dev);
    return 0;
}

static int allowlist_fetch(fz_ctx *c)
{
    if (harness_server(c) < 0 || set_policy(c, "allowlist", "127.0.0.1/32", NULL) < 0)
        return -1;
    int r = fetch_must_work(c);
    if (r < 0)
        return r;
    /* going around the proxy gains nothing: there is no route */
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    size_t ol, el;
    if (fz_exec(c, "curl -sS --max-time 5 --noproxy '*' http://192.0.2.1/", &code, &out, &ol, &err, &el) < 0 ||
        missing_tool(c, code, "curl") < 0)
        return -1;
    return code != 0 ? 0 : fz_fail(c, FZ_SANDBOX, "with an allowlist, a direct connection got out");
}

/* Denied: not in the allowlist, or allowed and denied (deny wins).  The
 * answer must say it was the policy, and why. */
static int allowlist_denied(fz_ctx *c)
{
    if (harness_server(c) < 0)
        return -1;
    bool deny_rule = fz_below(&c->rng, 2);
    if (set_policy(c, "allowlist", deny_rule ? "127.0.0.1/32" : "192.0.2.0/24", deny_rule ? "127.0.0.0/8" : NULL) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    if (fetch(c, fz_next(&c->rng), 100, &code, &out, &err) < 0)
        return -1;
    if (code == 0 && strncmp(out, "200\n", 4) == 0)
        return fz_fail(c, FZ_SANDBOX, "a destination the policy denies was reached");
    if (!strstr(out, "denied by sandbox network policy"))
        return fz_fail(c, FZ_SANDBOX, "a denial that does not say why (exit %d): %.300s %.200s", code, out, err);
    /* the reason: the deny rule; or, for a loopback address no rule allows,
     * the range it is in */
    if (deny_rule ? !strstr(out, "denied by rule") : !strstr(out, "not in allowlist") && !strstr(out, "127.0.0.0/8"))
        return fz_fail(c, FZ_SANDBOX, "a denial that names the wrong reason: %.300s", out);
    return 0;
}

/* none → allowlist (works) → none again (the proxy is gone) */
static int policy_change(fz_ctx *c)
{
    if (harness_server(c) < 0 || set_policy(c, "allowlist", "127.0.0.1/32", NULL) < 0)
        return -1;
    if (fetch_must_work(c) < 0 || set_policy(c, "none", NULL, NULL) < 0)
        return -1;
    int code;
    _cleanup_free_ char *out = NULL, *err = NULL;
    if (fetch(c, fz_next(&c->rng), 100, &code, &out, &err) < 0)
        return -1;
    if (code == 0)
        return fz_fail(c, FZ_SANDBOX, "after going back to none, a fetch through the proxy still worked: %.100s", out);
    return 0;
}

static const fz_test_def tests[] = {
    { "network.none", none },
    { "network.allowlist_fetch", allowlist_fetch },
    { "network.allowlist_denied", allowlist_denied },
    { "network.policy_change", policy_change },
};
const fz_domain fz_domain_network = { "network", tests, sizeof tests / sizeof *tests };
