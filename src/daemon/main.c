/* main.c - sbxd: options, start-up order, the keys subcommands.
 *
 * Start-up order matters:
 *   1. cgroups detected and prepared (on v2 this may move us into a leaf);
 *   2. the spawner forked -- before any thread exists (spawner.h);
 *   3. database, keys, re-attaching to the sandboxes of a previous run;
 *   4. the lifecycle thread and the HTTP server.
 * SIGTERM/SIGINT stop the daemon and leave every sandbox running: the next
 * sbxd re-attaches to them. */
#define _GNU_SOURCE
#include "auth.h"
#include "http.h"
#include "lifecycle.h"
#include "log.h"
#include "openapi_doc.h"
#include "api.h"
#include "build.h"
#include "egress.h"
#include "pool.h"
#include "registry.h"
#include "spawner.h"
#include "store.h"
#include "../lib/parse.h"
#include "../lib/sandbox.h"
#include "../lib/userns.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_LISTEN "127.0.0.1:7700"
#define DEFAULT_MAX_UPLOAD (4ULL << 30)
#define DEFAULT_MAX_SANDBOXES 100
#define DEFAULT_HEALTH_INTERVAL 30
/* sandboxes of `base` kept ready: ~1 MiB of host memory each, and a create
 * that costs a claim (~1 ms) instead of a cold start */
#define DEFAULT_POOL 4

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sbxd [OPTIONS]                      run the sandbox service\n"
            "       sbxd keys create --name NAME [--home DIR]\n"
            "       sbxd keys list [--home DIR]\n"
            "       sbxd keys revoke NAME|ID [--home DIR]\n"
            "\n"
            "Options:\n"
            "  --listen ADDR           HOST:PORT or unix:PATH (default %s; port 0 picks one)\n"
            "  --home DIR              state: database, templates, control sockets\n"
            "                          (default $SBX_HOME or %s)\n"
            "  --max-sandboxes N       running sandboxes per API key (default %d)\n"
            "  --max-upload SIZE       largest file upload (default 4G)\n"
            "  --health-interval SECS  how often each sandbox is health-checked (default %d)\n"
            "  --pool [TEMPLATE=]N     keep N sandboxes of TEMPLATE (default base) ready (default\n"
            "                          base=%d; 0 turns the pool off; repeatable)\n"
            "  --mcp-allow-origin URL  a browser Origin allowed to use /mcp besides localhost\n"
            "                          (repeatable; see docs/mcp.md)\n"
            "  -h, --help, --version\n"
            "\n"
            "Environment: SBX_API_KEY (registered at start, for scripts and tests), SBX_HOME,\n"
            "SBX_UID_BASE, SBX_CGROUP_PARENT, SBX_INIT.  See docs/configuration.md.\n",
            DEFAULT_LISTEN, SBX_DEFAULT_HOME, DEFAULT_MAX_SANDBOXES, DEFAULT_HEALTH_INTERVAL, DEFAULT_POOL);
}

static int prepare_home(const char *home, sbx_error *err)
{
    if (mkdir(home, 0700) < 0 && errno != EEXIST)
        return sbx_error_set(err, errno, "create --home %s", home);
    struct stat st;
    if (stat(home, &st) < 0 || !S_ISDIR(st.st_mode))
        return sbx_error_set(err, ENOTDIR, "--home %s is not a directory", home);
    return 0;
}

static int open_store(const char *home, sbx_store **st, sbx_error *err)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/sbxd.db", home);
    if (prepare_home(home, err) < 0 || sbx_auth_init(err) < 0)
        return -1;
    return sbx_store_open(st, path, err);
}

static int keys_main(int argc, char **argv, const char *home)
{
    sbx_error err = { 0 };
    const char *verb = argc > 0 ? argv[0] : "";
    const char *name = NULL, *target = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc)
            home = argv[++i];
        else if (argv[i][0] != '-' && !target)
            target = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    sbx_store *st;
    if (strcmp(verb, "create") == 0 && name) {
        char key[SBX_KEY_LEN + 1];
        if (open_store(home, &st, &err) < 0 || sbx_auth_create(st, name, key, &err) < 0) {
            sbx_error_print(&err, stderr);
            return 1;
        }
        printf("%s\n", key);
        fprintf(stderr, "sbxd: key '%s' created; it is shown only this once\n", name);
    } else if (strcmp(verb, "list") == 0 && !target) {
        if (open_store(home, &st, &err) < 0) {
            sbx_error_print(&err, stderr);
            return 1;
        }
        json_t *keys = sbx_store_key_list(st);
        printf("%-18s %-24s %-26s %s\n", "ID", "NAME", "CREATED", "REVOKED");
        size_t i;
        json_t *k;
        json_array_foreach(keys, i, k)
        {
            char c[40], rv[40] = "-";
            sbx_format_time(json_integer_value(json_object_get(k, "created_at")), c, sizeof c);
            json_t *r = json_object_get(k, "revoked_at");
            if (json_is_integer(r))
                sbx_format_time(json_integer_value(r), rv, sizeof rv);
            printf("%-18s %-24s %-26s %s\n", json_string_value(json_object_get(k, "id")),
                   json_string_value(json_object_get(k, "name")), c, rv);
        }
        json_decref(keys);
    } else if (strcmp(verb, "revoke") == 0 && target) {
        if (open_store(home, &st, &err) < 0) {
            sbx_error_print(&err, stderr);
            return 1;
        }
        int r = sbx_store_key_revoke(st, target);
        if (r != 1) {
            fprintf(stderr, "sbxd: no active key named or with id '%s'\n", target);
            sbx_store_close(st);
            return 1;
        }
        fprintf(stderr, "sbxd: key '%s' revoked\n", target);
    } else {
        usage(stderr);
        return 2;
    }
    sbx_store_close(st);
    return 0;
}

/* Where the MCP tools reach this daemon's REST API: the bound address, with
 * a wildcard replaced by loopback.  Also: is the listener loopback-only
 * (then /mcp insists on a loopback Host header)? */
static void self_url(const char *bound, sbx_daemon *d)
{
    if (strncmp(bound, "unix:", 5) == 0) {
        snprintf(d->self_url, sizeof d->self_url, "%s", bound);
        return;
    }
    const char *port = strrchr(bound, ':');
    if (strncmp(bound, "0.0.0.0:", 8) == 0)
        snprintf(d->self_url, sizeof d->self_url, "http://127.0.0.1%s", port);
    else if (strncmp(bound, "[::]:", 5) == 0)
        snprintf(d->self_url, sizeof d->self_url, "http://[::1]%s", port);
    else
        snprintf(d->self_url, sizeof d->self_url, "http://%s", bound);
    d->loopback = strncmp(bound, "127.", 4) == 0 || strncmp(bound, "[::1]:", 6) == 0;
}

/* After a restart: the sandboxes with a network get it back (their egress
 * listeners and slirp4netns ended with the old sbxd: until now nothing got
 * out). */
static void reattach_networks(sbx_daemon *d)
{
    size_t n;
    sbx_box **boxes = sbx_reg_snapshot(&d->reg, &n);
    for (size_t i = 0; i < n; i++) {
        sbx_box_row row;
        sbx_net_policy *p = NULL;
        sbx_error err = { 0 };
        if (sbx_store_box_get(d->store, boxes[i]->id, &row) == 1) {
            bool some = row.network && sbx_net_policy_parse(row.network, &p, &err) == 0 &&
                        (sbx_net_policy_is_allowlist(p) || sbx_net_policy_is_open(p));
            if (some && sbx_sandbox_network(d, boxes[i], p, &err) < 0)
                sbx_log("error", "event=network_reattach_failed sandbox=%s error=\"%s\"", boxes[i]->id, err.msg);
            else if (!some)
                sbx_net_policy_free(p);
            sbx_box_row_free(&row);
        }
        sbx_reg_put(&d->reg, boxes[i]);
    }
    free(boxes);
}

int main(int argc, char **argv)
{
    const char *home = getenv("SBX_HOME");
    if (!home || !*home)
        home = SBX_DEFAULT_HOME;
    if (argc > 1 && strcmp(argv[1], "keys") == 0)
        return keys_main(argc - 2, argv + 2, home);

    const char *listen = DEFAULT_LISTEN;
    sbx_daemon d = { .max_upload = DEFAULT_MAX_UPLOAD, .max_sandboxes = DEFAULT_MAX_SANDBOXES,
                     .health_interval = DEFAULT_HEALTH_INTERVAL };
    enum { O_LISTEN = 256, O_HOME, O_MAXSB, O_MAXUP, O_HEALTH, O_VERSION, O_ORIGIN, O_POOL };
    static const struct option opts[] = {
        { "listen", required_argument, NULL, O_LISTEN },   { "home", required_argument, NULL, O_HOME },
        { "max-sandboxes", required_argument, NULL, O_MAXSB }, { "max-upload", required_argument, NULL, O_MAXUP },
        { "health-interval", required_argument, NULL, O_HEALTH }, { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, O_VERSION },       { "mcp-allow-origin", required_argument, NULL, O_ORIGIN },
        { "pool", required_argument, NULL, O_POOL },
        { NULL, 0, NULL, 0 },
    };
    sbx_error err = { 0 };
    char pool_default[16];
    snprintf(pool_default, sizeof pool_default, "%d", DEFAULT_POOL);
    sbx_pool_configure(pool_default, &err);
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        uint64_t v;
        switch (c) {
        case O_LISTEN:
            listen = optarg;
            break;
        case O_HOME:
            home = optarg;
            break;
        case O_MAXSB:
            if (sbx_parse_uint(optarg, 100000, &v, NULL) < 0 || v < 1) {
                fprintf(stderr, "sbxd: --max-sandboxes '%s': use a number 1-100000\n", optarg);
                return 2;
            }
            d.max_sandboxes = (unsigned) v;
            break;
        case O_MAXUP:
            if (sbx_parse_size(optarg, &v, NULL) < 0 || v == 0) {
                fprintf(stderr, "sbxd: --max-upload '%s': use a size such as 512M or 4G\n", optarg);
                return 2;
            }
            d.max_upload = v;
            break;
        case O_HEALTH:
            if (sbx_parse_uint(optarg, 86400, &v, NULL) < 0 || v < 1) {
                fprintf(stderr, "sbxd: --health-interval '%s': use seconds 1-86400\n", optarg);
                return 2;
            }
            d.health_interval = (unsigned) v;
            break;
        case O_ORIGIN: {
            const char **o = realloc(d.mcp_origins, (d.n_mcp_origins + 1) * sizeof *o);
            if (!o)
                return 1;
            o[d.n_mcp_origins++] = optarg;
            d.mcp_origins = o;
            break;
        }
        case O_POOL:
            if (sbx_pool_configure(optarg, &err) < 0) {
                fprintf(stderr, "sbxd: %s\n", err.msg);
                return 2;
            }
            break;
        case O_VERSION:
            printf("sbxd %s\n", SBX_VERSION);
            return 0;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        usage(stderr);
        return 2;
    }
    if (geteuid() != 0) {
        fprintf(stderr, "sbxd: must run as root (it creates namespaces, cgroups and uid maps for sandboxes)\n");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    char abs_home[PATH_MAX];
    if (prepare_home(home, &err) < 0 || !realpath(home, abs_home)) {
        if (!err.msg[0])
            sbx_error_set(&err, errno, "--home %s", home);
        sbx_error_print(&err, stderr);
        return 1;
    }

    /* 1-2: cgroups, then the spawner, before any thread */
    sbx_cg_host host;
    char init_path[PATH_MAX];
    uid_t uid_base;
    sbx_spawner sp;
    sbx_error no_freezer = { 0 };
    if (sbx_cg_host_detect(&host, getenv("SBX_CGROUP_PARENT"), &err) < 0 ||
        (sbx_cg_host_add_freezer(&host, getenv("SBX_CGROUP_PARENT"), &no_freezer), 0) ||
        sbx_cg_host_prepare(&host, &err) < 0 ||
        sbx_find_init(init_path, sizeof init_path, &err) < 0 || sbx_userns_uid_base(&uid_base, &err) < 0 ||
        sbx_spawner_start(&sp, abs_home, &host, init_path, uid_base, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }

    /* 3: state */
    if (open_store(abs_home, &d.store, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    const char *env_key = getenv("SBX_API_KEY");
    if (env_key && *env_key && sbx_auth_register_env(d.store, env_key, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    if (sbx_reg_init(&d.reg, d.store, &sp, &host, abs_home, uid_base, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    sbx_reg_reconcile(&d.reg);
    sbx_build_clean_stale(d.reg.home); /* no build runs yet */
    d.started_ms = sbx_now_wall_ms();
    d.openapi = sbx_openapi_doc;
    d.openapi_len = sbx_openapi_doc_len;

    /* 4: serve.  Signals are taken synchronously below; every thread
     * started from here on inherits the blocked mask. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    char bound[300];
    /* the MCP tools' REST client; libcurl wants this before threads */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "sbxd: cannot initialise libcurl\n");
        return 1;
    }
    if (sbx_reg_start_reaper(&d.reg, &err) < 0 || sbx_lifecycle_start(&d, &err) < 0 ||
        sbx_egress_start(d.store, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    reattach_networks(&d);
    struct MHD_Daemon *mhd = sbx_http_start(&d, listen, bound, sizeof bound, &err);
    if (!mhd) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    self_url(bound, &d);
    if (sbx_pool_start(&d, &err) < 0) {
        sbx_error_print(&err, stderr);
        return 1;
    }
    if (no_freezer.msg[0])
        sbx_log("warn", "event=no_pause reason=\"%s\" (POST .../pause answers 501)", no_freezer.msg);
    sbx_cg_host_hold_freezer(&host);
    sbx_log("info", "event=listening address=%s home=%s cgroup=v%d sandboxes=%zu", bound, abs_home,
            host.mode == SBX_CG_V2 ? 2 : 1, sbx_reg_count(&d.reg, NULL));
    int sig;
    sigwait(&mask, &sig);
    sbx_log("info", "event=stopping signal=%d sandboxes_left_running=%zu", sig, sbx_reg_count(&d.reg, NULL));
    MHD_stop_daemon(mhd);
    sbx_egress_stop();
    sbx_pool_stop(&d);
    sbx_lifecycle_stop();
    sbx_reg_stop_reaper(&d.reg);
    sbx_cg_host_release_freezer(&host);
    sbx_store_close(d.store);
    return 0;
}
