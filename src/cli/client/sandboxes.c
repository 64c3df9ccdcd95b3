/* sandboxes.c - the sandbox lifecycle verbs: create, ls, info, kill,
 * timeout, metrics.  Thin: options into a request, the answer onto stdout. */
#define _GNU_SOURCE
#include "client.h"
#include "../../lib/cleanup.h"
#include "../../lib/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- create ---- */

enum { OPT_TEMPLATE = 256, OPT_TIMEOUT, OPT_CPUS, OPT_MEMORY, OPT_DISK, OPT_PIDS, OPT_STATE, OPT_SNAPSHOT, OPT_ALLOW,
       OPT_DENY, OPT_ON_TIMEOUT };

static const struct option create_options[] = {
    { "template", required_argument, NULL, OPT_TEMPLATE },
    { "snapshot", required_argument, NULL, OPT_SNAPSHOT },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "on-timeout", required_argument, NULL, OPT_ON_TIMEOUT },
    { "cpus", required_argument, NULL, OPT_CPUS },
    { "memory", required_argument, NULL, OPT_MEMORY },
    { "disk", required_argument, NULL, OPT_DISK },
    { "pids", required_argument, NULL, OPT_PIDS },
    { "metadata", required_argument, NULL, 'm' },
    { "env", required_argument, NULL, 'e' },
    { "allow", required_argument, NULL, OPT_ALLOW },
    { "deny", required_argument, NULL, OPT_DENY },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb create_verb = {
    .name = "create",
    .usage = "sbx create [--template T | --snapshot S] [--timeout SECS] [--on-timeout pause|kill] [--cpus N] [--memory SIZE] "
             "[--disk SIZE] [--pids N] "
             "[-m KEY=VALUE]... [-e KEY=VALUE]... [--allow RULE]... [--deny RULE]...",
    .help = "\n"
            "Create a sandbox and print its id (the sandbox object with --json).\n"
            "\n"
            "  --template NAME       root file system template (sbxd's default: base)\n"
            "  --snapshot ID         start from a snapshot's files (`sbx snapshot`, `sbx fork`)\n"
            "  --timeout DURATION    lifetime: seconds, or 30s, 15m, 2h (sbxd's default: 15m, at most 8h)\n"
            "  --on-timeout WHAT     what the timeout does: kill (the default) or pause (files and processes\n"
            "                        kept, frozen; `sbx resume` starts a fresh timeout)\n"
            "  --cpus N              CPU quota in vCPUs, fractions allowed\n"
            "  --memory SIZE         memory limit, e.g. 512M, 2G (whole MiB)\n"
            "  --disk SIZE           writable layer size (whole MiB)\n"
            "  --pids N              max processes and threads\n"
            "  -m, --metadata K=V    a metadata label (repeatable; `sbx ls -m K=V` filters on it)\n"
            "  -e, --env K=V         an environment variable of every command (K alone: our value of K)\n"
            "  --allow RULE          network: let it reach this domain (example.com; *.example.com is its\n"
            "                        subdomains, not example.com itself) or CIDR through sbxd's egress\n"
            "                        proxy (repeatable; without any: no network)\n"
            "  --deny RULE           network: never this domain or CIDR (repeatable; wins over --allow)\n",
    .shortopts = "m:e:",
    .longopts = create_options,
    .stop_after = -1,
};

/* Whole seconds from "90", "90s", "15m", "2h"... */
static int parse_seconds(const char *opt, const char *arg, bool allow_zero, uint64_t *out, sbx_error *err)
{
    uint64_t ms;
    if (allow_zero && strcmp(arg, "0") == 0) {
        *out = 0;
        return 0;
    }
    if (sbx_parse_duration(arg, &ms, err) < 0)
        return sbx_error_wrap(err, "%s", opt);
    if (ms % 1000)
        return sbx_error_set(err, 0, "%s %s: must be whole seconds", opt, arg);
    *out = ms / 1000;
    return 0;
}

/* A size in whole MiB, as the API counts memory and disk. */
static int parse_mib(const char *opt, const char *arg, json_int_t *out, sbx_error *err)
{
    uint64_t bytes;
    if (sbx_parse_size(arg, &bytes, err) < 0)
        return sbx_error_wrap(err, "%s", opt);
    if (bytes % (1u << 20))
        return sbx_error_set(err, 0, "%s %s: must be a whole number of MiB (e.g. 512M, 2G)", opt, arg);
    *out = (json_int_t) (bytes >> 20);
    return 0;
}

struct create_opts {
    json_t *body;
    json_t *metadata;
    json_t *envs;
    json_t *allow, *deny;
};

/* {"mode": "allowlist", "allow": [...], "deny": [...]} */
static json_t *allowlist(json_t *allow, json_t *deny)
{
    return json_pack("{s:s, s:O, s:O}", "mode", "allowlist", "allow", allow, "deny", deny);
}

static int create_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    struct create_opts *o = ctx;
    json_t *v = NULL;
    const char *field = NULL;
    switch (opt) {
    case OPT_TEMPLATE:
        field = "template";
        if (!(v = json_string(arg)))
            return sbx_error_set(err, 0, "--template: not valid UTF-8");
        break;
    case OPT_SNAPSHOT:
        field = "snapshot";
        if (!(v = json_string(arg)))
            return sbx_error_set(err, 0, "--snapshot: not valid UTF-8");
        break;
    case OPT_TIMEOUT: {
        uint64_t s;
        if (parse_seconds("--timeout", arg, false, &s, err) < 0)
            return -1;
        field = "timeout_s";
        v = json_integer((json_int_t) s);
        break;
    }
    case OPT_ON_TIMEOUT:
        if (strcmp(arg, "kill") != 0 && strcmp(arg, "pause") != 0)
            return sbx_error_set(err, 0, "--on-timeout %s: use pause or kill", arg);
        field = "on_timeout";
        v = json_string(arg);
        break;
    case OPT_CPUS: {
        uint32_t milli;
        if (sbx_parse_cpus(arg, &milli, err) < 0)
            return sbx_error_wrap(err, "--cpus");
        field = "cpus";
        v = json_real(milli / 1000.0);
        break;
    }
    case OPT_MEMORY:
    case OPT_DISK: {
        json_int_t mib = 0;
        if (parse_mib(opt == OPT_MEMORY ? "--memory" : "--disk", arg, &mib, err) < 0)
            return -1;
        field = opt == OPT_MEMORY ? "memory_mb" : "disk_mb";
        v = json_integer(mib);
        break;
    }
    case OPT_PIDS: {
        uint64_t n;
        if (sbx_parse_uint(arg, 1u << 30, &n, err) < 0)
            return sbx_error_wrap(err, "--pids");
        field = "pids";
        v = json_integer((json_int_t) n);
        break;
    }
    case 'm':
        return sbx_cli_add_kv(o->metadata, "-m", arg, false, err);
    case 'e':
        return sbx_cli_add_kv(o->envs, "-e", arg, true, err);
    case OPT_ALLOW:
    case OPT_DENY:
        if (json_array_append_new(opt == OPT_ALLOW ? o->allow : o->deny, json_string(arg)) < 0)
            return sbx_error_set(err, 0, "%s: not valid UTF-8", opt == OPT_ALLOW ? "--allow" : "--deny");
        return 0;
    default:
        return sbx_error_set(err, 0, "unhandled option");
    }
    if (!v || json_object_set_new(o->body, field, v) < 0)
        return sbx_error_set(err, ENOMEM, "request");
    return 0;
}

int sbx_client_create(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    _cleanup_json_ json_t *body = json_object();
    _cleanup_json_ json_t *metadata = json_object();
    _cleanup_json_ json_t *envs = json_object();
    if (!body || !metadata || !envs) {
        sbx_error_set(&err, ENOMEM, "request");
        return sbx_cli_fail(&err);
    }
    _cleanup_json_ json_t *allow = json_array();
    _cleanup_json_ json_t *deny = json_array();
    struct create_opts o = { body, metadata, envs, allow, deny };
    sbx_cli_args a;
    int r = sbx_cli_parse(cli, &create_verb, argc, argv, create_option, &o, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&create_verb, &err);
    if (a.npos > 0) {
        sbx_error_set(&err, 0, "unexpected argument '%s'", a.pos[0]);
        return sbx_cli_usage_error(&create_verb, &err);
    }
    if (json_object_size(metadata) && json_object_set(body, "metadata", metadata) < 0)
        return SBX_EXIT_FAILURE;
    if (json_object_size(envs) && json_object_set(body, "envs", envs) < 0)
        return SBX_EXIT_FAILURE;
    if (json_array_size(allow) && json_object_set_new(body, "network", allowlist(allow, deny)) < 0)
        return SBX_EXIT_FAILURE;
    if (!json_array_size(allow) && json_array_size(deny)) {
        sbx_error_set(&err, 0, "--deny without --allow: the sandbox has no network to deny anything from");
        return sbx_cli_usage_error(&create_verb, &err);
    }

    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!h || sbx_http_json(h, "POST", "/v1/sandboxes", body, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json) {
        sbx_cli_print_raw(&resp);
        return 0;
    }
    const char *id = json_string_value(json_object_get(resp.json, "id"));
    if (!id) {
        sbx_error_set(&err, 0, "sbxd's answer has no sandbox id");
        return sbx_cli_fail(&err);
    }
    printf("%s\n", id);
    return 0;
}

/* ---- ls ---- */

static const struct option ls_options[] = {
    { "state", required_argument, NULL, OPT_STATE },
    { "metadata", required_argument, NULL, 'm' },
    { "quiet", no_argument, NULL, 'q' },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb ls_verb = {
    .name = "ls",
    .usage = "sbx ls [--state STATE|all] [-m KEY=VALUE]... [-q]",
    .help = "\n"
            "List sandboxes: the running ones, or those in STATE (running, deleted, expired, unhealthy,\n"
            "failed, or all).\n"
            "\n"
            "  --state STATE         only sandboxes in STATE, or `all`\n"
            "  -m, --metadata K=V    only sandboxes with this metadata label (repeatable: all must match)\n"
            "  -q, --quiet           print the ids only\n",
    .shortopts = "m:q",
    .longopts = ls_options,
    .stop_after = -1,
};

struct ls_opts {
    const char *state;
    const char **metadata; /* the -m arguments, KEY=VALUE */
    size_t n_metadata;
    bool quiet;
};

static int ls_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    struct ls_opts *o = ctx;
    switch (opt) {
    case OPT_STATE:
        if (!*arg)
            return sbx_error_set(err, 0, "--state: empty");
        o->state = arg;
        return 0;
    case 'm': {
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg)
            return sbx_error_set(err, 0, "-m '%s': expected KEY=VALUE", arg);
        o->metadata[o->n_metadata++] = arg;
        return 0;
    }
    case 'q':
        o->quiet = true;
        return 0;
    }
    return sbx_error_set(err, 0, "unhandled option");
}

/* "?state=S&metadata.K=V...", every part escaped (keys may hold '&' or '='). */
static char *ls_query(sbx_http *h, const struct ls_opts *o, sbx_error *err)
{
    char *q = NULL;
    size_t qlen = 0;
    FILE *f = open_memstream(&q, &qlen);
    if (!f) {
        sbx_error_set(err, ENOMEM, "query");
        return NULL;
    }
    bool ok = true;
    if (o->state) {
        _cleanup_free_ char *v = sbx_http_escape(h, o->state, err);
        ok = v && fprintf(f, "?state=%s", v) > 0;
    }
    for (size_t i = 0; ok && i < o->n_metadata; i++) {
        const char *kv = o->metadata[i], *eq = strchr(kv, '=');
        _cleanup_free_ char *k = strndup(kv, (size_t) (eq - kv));
        _cleanup_free_ char *ek = k ? sbx_http_escape(h, k, err) : NULL;
        _cleanup_free_ char *ev = sbx_http_escape(h, eq + 1, err);
        ok = ek && ev && fprintf(f, "%cmetadata.%s=%s", ftell(f) ? '&' : '?', ek, ev) > 0;
    }
    if (fclose(f) != 0 || !ok) {
        free(q);
        if (!err->msg[0])
            sbx_error_set(err, ENOMEM, "query");
        return NULL;
    }
    return q;
}

/* "2026-12-02T17:00:00.123Z" -> seconds since the epoch; -1 if it is not that. */
static time_t parse_time(const char *s)
{
    struct tm tm = { 0 };
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end)
        return -1;
    if (*end == '.')
        end += 1 + strspn(end + 1, "0123456789");
    if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
        return -1;
    return timegm(&tm);
}

/* "42s", "5m", "1h59m", "2d3h": two units at most, rounded down. */
static void format_span(time_t d, char *buf, size_t len)
{
    long long s = (long long) d;
    if (s < 60)
        snprintf(buf, len, "%llds", s);
    else if (s < 3600)
        snprintf(buf, len, "%lldm", s / 60);
    else if (s < 86400 && (s % 3600) / 60)
        snprintf(buf, len, "%lldh%lldm", s / 3600, (s % 3600) / 60);
    else if (s < 86400)
        snprintf(buf, len, "%lldh", s / 3600);
    else if ((s % 86400) / 3600)
        snprintf(buf, len, "%lldd%lldh", s / 86400, (s % 86400) / 3600);
    else
        snprintf(buf, len, "%lldd", s / 86400);
}

/* CREATED "5m ago", EXPIRES "in 10m": what a person scanning the table wants;
 * --json has the exact times.  Unparseable times are shown as given. */
static void format_when(const char *iso, bool future, time_t now, char *buf, size_t len)
{
    time_t t = parse_time(iso);
    if (!iso) {
        snprintf(buf, len, "-");
        return;
    }
    if (t < 0) {
        snprintf(buf, len, "%s", iso);
        return;
    }
    char span[32];
    time_t d = future ? t - now : now - t;
    if (d < 0)
        d = 0;
    format_span(d, span, sizeof span);
    snprintf(buf, len, future ? "in %s" : "%s ago", span);
}

#define LS_COLS 6

int sbx_client_ls(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    _cleanup_free_ const char **metadata = calloc((size_t) argc + 1, sizeof *metadata);
    if (!metadata)
        return SBX_EXIT_FAILURE;
    struct ls_opts o = { .metadata = metadata };
    sbx_cli_args a;
    int r = sbx_cli_parse(cli, &ls_verb, argc, argv, ls_option, &o, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&ls_verb, &err);
    if (a.npos > 0) {
        sbx_error_set(&err, 0, "unexpected argument '%s'", a.pos[0]);
        return sbx_cli_usage_error(&ls_verb, &err);
    }
    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_free_ char *query = h ? ls_query(h, &o, &err) : NULL;
    _cleanup_free_ char *path = NULL;
    if (!query || asprintf(&path, "/v1/sandboxes%s", query) < 0) {
        if (!err.msg[0])
            sbx_error_set(&err, ENOMEM, "request path");
        return sbx_cli_fail(&err);
    }
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (sbx_http_json(h, "GET", path, NULL, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json) {
        sbx_cli_print_raw(&resp);
        return 0;
    }
    json_t *list = json_object_get(resp.json, "sandboxes");
    if (!json_is_array(list)) {
        sbx_error_set(&err, 0, "sbxd's answer has no \"sandboxes\" list");
        return sbx_cli_fail(&err);
    }
    size_t n = json_array_size(list);
    if (o.quiet) {
        for (size_t i = 0; i < n; i++) {
            const char *id = json_string_value(json_object_get(json_array_get(list, i), "id"));
            if (id)
                printf("%s\n", id);
        }
        return 0;
    }

    /* all cells first, then the widths, then the table */
    static const char *const headers[LS_COLS] = { "ID", "STATE", "TEMPLATE", "CREATED", "EXPIRES", "METADATA" };
    _cleanup_free_ char **cells = calloc((n + 1) * LS_COLS, sizeof *cells);
    if (!cells)
        return SBX_EXIT_FAILURE;
    size_t width[LS_COLS] = { 0 };
    time_t now = time(NULL);
    bool oom = false;
    for (size_t c = 0; c < LS_COLS; c++)
        oom |= !(cells[c] = strdup(headers[c]));
    for (size_t i = 0; i < n; i++) {
        json_t *sb = json_array_get(list, i);
        char **row = cells + (i + 1) * LS_COLS;
        const char *id = json_string_value(json_object_get(sb, "id"));
        const char *state = json_string_value(json_object_get(sb, "state"));
        const char *tpl = json_string_value(json_object_get(sb, "template"));
        char created[64], expires[64];
        format_when(json_string_value(json_object_get(sb, "created_at")), false, now, created, sizeof created);
        if (state && strcmp(state, "running") == 0)
            format_when(json_string_value(json_object_get(sb, "expires_at")), true, now, expires, sizeof expires);
        else
            snprintf(expires, sizeof expires, "-");
        /* metadata as k=v,k=v in sbxd's order */
        char *md = NULL;
        size_t mdlen = 0;
        FILE *f = open_memstream(&md, &mdlen);
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(sb, "metadata"), k, v)
            if (f)
                fprintf(f, "%s%s=%s", ftell(f) ? "," : "", k, json_is_string(v) ? json_string_value(v) : "?");
        if (!f || fclose(f) != 0)
            oom = true;
        row[0] = strdup(id ? id : "?");
        row[1] = strdup(state ? state : "?");
        row[2] = strdup(tpl ? tpl : "-");
        row[3] = strdup(created);
        row[4] = strdup(expires);
        row[5] = md && *md ? md : (free(md), strdup("-"));
    }
    for (size_t i = 0; i < (n + 1) * LS_COLS; i++) {
        if (!cells[i]) {
            oom = true;
            continue;
        }
        size_t l = strlen(cells[i]);
        if (l > width[i % LS_COLS])
            width[i % LS_COLS] = l;
    }
    for (size_t i = 0; !oom && i <= n; i++) {
        char **row = cells + i * LS_COLS;
        for (size_t c = 0; c + 1 < LS_COLS; c++)
            printf("%-*s  ", (int) width[c], row[c]);
        printf("%s\n", row[LS_COLS - 1]);
    }
    for (size_t i = 0; i < (n + 1) * LS_COLS; i++)
        free(cells[i]);
    if (oom) {
        sbx_error_set(&err, ENOMEM, "formatting the table");
        return sbx_cli_fail(&err);
    }
    return 0;
}

/* ---- info, kill, timeout, metrics: one sandbox id each ---- */

static const sbx_cli_verb info_verb = {
    .name = "info",
    .usage = "sbx info ID",
    .help = "\nPrint the sandbox object (also of ended sandboxes: their final state and end_reason).\n",
    .stop_after = -1,
};

static const sbx_cli_verb kill_verb = {
    .name = "kill",
    .usage = "sbx kill ID...",
    .help = "\nDelete sandboxes: their processes are killed and their files removed.\n",
    .stop_after = -1,
};

static const sbx_cli_verb timeout_verb = {
    .name = "timeout",
    .usage = "sbx timeout ID DURATION",
    .help = "\n"
            "Set the sandbox to expire DURATION from now (seconds, or 30s, 15m, 2h; at most 8h) and\n"
            "print the new expiry time.\n",
    .stop_after = -1,
};

static const sbx_cli_verb metrics_verb = {
    .name = "metrics",
    .usage = "sbx metrics ID",
    .help = "\nPrint the sandbox's resource use: CPU time, memory, disk, processes.\n",
    .stop_after = -1,
};

/* Parse a verb taking exactly `want` positionals (or at least, if
 * `at_least`).  Returns -1 to go on, else the exit status to return. */
static int parse_ids(sbx_cli *cli, const sbx_cli_verb *v, int argc, char **argv, int want, bool at_least,
                     sbx_cli_args *a)
{
    static const char *const names[] = { "sandbox id", "DURATION" };
    sbx_error err = { 0 };
    int r = sbx_cli_parse(cli, v, argc, argv, NULL, NULL, a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(v, &err);
    if (a->npos < want || (!at_least && a->npos > want)) {
        if (a->npos < want)
            sbx_error_set(&err, 0, "missing %s", names[a->npos < 2 ? a->npos : 1]);
        else
            sbx_error_set(&err, 0, "unexpected argument '%s'", a->pos[want]);
        return sbx_cli_usage_error(v, &err);
    }
    return -1;
}

int sbx_client_info(sbx_cli *cli, int argc, char **argv)
{
    sbx_cli_args a;
    int r = parse_ids(cli, &info_verb, argc, argv, 1, false, &a);
    if (r >= 0)
        return r;
    sbx_error err = { 0 };
    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_free_ char *path = h ? sbx_cli_sandbox_path(h, a.pos[0], "", &err) : NULL;
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!path || sbx_http_json(h, "GET", path, NULL, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json)
        sbx_cli_print_raw(&resp);
    else
        sbx_cli_print_json(resp.json, true);
    return 0;
}

static const sbx_cli_verb pause_verb = {
    .name = "pause",
    .usage = "sbx pause ID...",
    .help = "\nFreeze sandboxes: every process stops where it is and uses no CPU; memory, files and\n"
            "commands are kept, and the timeout stops counting.  `sbx resume`, or any use, wakes them.\n",
    .stop_after = -1,
};

static const sbx_cli_verb resume_verb = {
    .name = "resume",
    .usage = "sbx resume ID...",
    .help = "\nWake paused sandboxes: their processes continue where they stopped.\n",
    .stop_after = -1,
};

/* One request per id (kill, pause, resume): every id is tried; one failure
 * fails the whole. */
static int each_id(sbx_cli *cli, const sbx_cli_verb *v, int argc, char **argv, const char *method,
                   const char *suffix)
{
    sbx_cli_args a;
    int r = parse_ids(cli, v, argc, argv, 1, true, &a);
    if (r >= 0)
        return r;
    sbx_error err = { 0 };
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h)
        return sbx_cli_fail(&err);
    int status = 0;
    for (int i = 0; i < a.npos; i++) {
        _cleanup_free_ char *path = sbx_cli_sandbox_path(h, a.pos[i], suffix, &err);
        _cleanup_http_resp_ sbx_http_resp resp = { 0 };
        if (!path || sbx_http_json(h, method, path, NULL, &resp, &err) < 0) {
            if (a.npos > 1)
                sbx_error_wrap(&err, "%s", a.pos[i]);
            status = sbx_cli_fail(&err);
        } else if (cli->json && resp.body_len) {
            sbx_cli_print_raw(&resp);
        }
    }
    return status;
}

int sbx_client_kill(sbx_cli *cli, int argc, char **argv)
{
    return each_id(cli, &kill_verb, argc, argv, "DELETE", "");
}

int sbx_client_pause(sbx_cli *cli, int argc, char **argv)
{
    return each_id(cli, &pause_verb, argc, argv, "POST", "/pause");
}

int sbx_client_resume(sbx_cli *cli, int argc, char **argv)
{
    return each_id(cli, &resume_verb, argc, argv, "POST", "/resume");
}

int sbx_client_timeout(sbx_cli *cli, int argc, char **argv)
{
    sbx_cli_args a;
    int r = parse_ids(cli, &timeout_verb, argc, argv, 2, false, &a);
    if (r >= 0)
        return r;
    sbx_error err = { 0 };
    uint64_t secs;
    if (parse_seconds("timeout", a.pos[1], false, &secs, &err) < 0)
        return sbx_cli_usage_error(&timeout_verb, &err);
    _cleanup_json_ json_t *body = json_pack("{sI}", "timeout_s", (json_int_t) secs);
    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_free_ char *path = h ? sbx_cli_sandbox_path(h, a.pos[0], "/timeout", &err) : NULL;
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!path || !body || sbx_http_json(h, "POST", path, body, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json) {
        sbx_cli_print_raw(&resp);
        return 0;
    }
    const char *exp = json_string_value(json_object_get(resp.json, "expires_at"));
    printf("%s\n", exp ? exp : "?");
    return 0;
}

static void metric_size(const char *label, json_t *m, const char *key, const char *peak, const char *limit)
{
    char a[32], b[32], c[32];
    json_t *v = json_object_get(m, key);
    if (!json_is_integer(v))
        return;
    printf("%-10s %s", label, sbx_format_size((uint64_t) json_integer_value(v), a, sizeof a));
    json_t *p = peak ? json_object_get(m, peak) : NULL;
    if (json_is_integer(p))
        printf(" (peak %s)", sbx_format_size((uint64_t) json_integer_value(p), b, sizeof b));
    json_t *l = json_object_get(m, limit);
    if (json_is_integer(l) && json_integer_value(l) > 0)
        printf(" of %s", sbx_format_size((uint64_t) json_integer_value(l), c, sizeof c));
    putchar('\n');
}

int sbx_client_metrics(sbx_cli *cli, int argc, char **argv)
{
    sbx_cli_args a;
    int r = parse_ids(cli, &metrics_verb, argc, argv, 1, false, &a);
    if (r >= 0)
        return r;
    sbx_error err = { 0 };
    sbx_http *h = sbx_cli_http(cli, &err);
    _cleanup_free_ char *path = h ? sbx_cli_sandbox_path(h, a.pos[0], "/metrics", &err) : NULL;
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!path || sbx_http_json(h, "GET", path, NULL, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json) {
        sbx_cli_print_raw(&resp);
        return 0;
    }
    json_t *m = resp.json;
    json_t *cpu = json_object_get(m, "cpu_seconds");
    if (json_is_number(cpu))
        printf("%-10s %.3f s\n", "cpu", json_number_value(cpu));
    metric_size("memory", m, "memory_bytes", "memory_peak_bytes", "memory_limit_bytes");
    metric_size("disk", m, "disk_used_bytes", NULL, "disk_limit_bytes");
    json_t *procs = json_object_get(m, "processes");
    if (json_is_integer(procs))
        printf("%-10s %" JSON_INTEGER_FORMAT "\n", "processes", json_integer_value(procs));
    return 0;
}

/* ---- snapshots and fork ---- */

static const sbx_cli_verb snapshot_verb = {
    .name = "snapshot",
    .usage = "sbx snapshot ID | sbx snapshot ls | sbx snapshot rm SNAPSHOT...",
    .help = "\n"
            "Save sandbox ID's files (what it changed over its template) as a snapshot and print the\n"
            "snapshot's id; `sbx create --snapshot SNAPSHOT` starts sandboxes from it.  Processes and\n"
            "memory are not saved.  `ls` lists your snapshots, `rm` deletes them (not while in use).\n",
    .stop_after = -1,
};

int sbx_client_snapshot(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    sbx_cli_args a;
    int r = sbx_cli_parse(cli, &snapshot_verb, argc, argv, NULL, NULL, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&snapshot_verb, &err);
    if (a.npos < 1) {
        sbx_error_set(&err, 0, "missing sandbox id (or ls, rm)");
        return sbx_cli_usage_error(&snapshot_verb, &err);
    }
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h)
        return sbx_cli_fail(&err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (strcmp(a.pos[0], "ls") == 0) {
        if (sbx_http_json(h, "GET", "/v1/snapshots", NULL, &resp, &err) < 0)
            return sbx_cli_fail(&err);
        if (cli->json) {
            sbx_cli_print_raw(&resp);
            return 0;
        }
        printf("%-32s  %-32s  %-12s  %10s  %s\n", "SNAPSHOT", "FROM SANDBOX", "TEMPLATE", "BYTES", "CREATED");
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(resp.json, "snapshots"), i, s)
            printf("%-32s  %-32s  %-12s  %10lld  %s\n", json_string_value(json_object_get(s, "id")),
                   json_string_value(json_object_get(s, "sandbox_id")), json_string_value(json_object_get(s, "template")),
                   (long long) json_integer_value(json_object_get(s, "size_bytes")),
                   json_string_value(json_object_get(s, "created_at")));
        return 0;
    }
    if (strcmp(a.pos[0], "rm") == 0) {
        int status = 0;
        for (int i = 1; i < a.npos; i++) {
            _cleanup_free_ char *e = sbx_http_escape(h, a.pos[i], &err);
            char path[512];
            _cleanup_http_resp_ sbx_http_resp rr = { 0 };
            if (!e || snprintf(path, sizeof path, "/v1/snapshots/%s", e) >= (int) sizeof path ||
                sbx_http_json(h, "DELETE", path, NULL, &rr, &err) < 0)
                status = sbx_cli_fail(&err);
        }
        return status;
    }
    if (a.npos > 1) {
        sbx_error_set(&err, 0, "unexpected argument '%s'", a.pos[1]);
        return sbx_cli_usage_error(&snapshot_verb, &err);
    }
    _cleanup_free_ char *path = sbx_cli_sandbox_path(h, a.pos[0], "/snapshots", &err);
    if (!path || sbx_http_json(h, "POST", path, NULL, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json)
        sbx_cli_print_raw(&resp);
    else
        printf("%s\n", json_string_value(json_object_get(resp.json, "id")) ?: "");
    return 0;
}

static const struct option fork_options[] = {
    { "count", required_argument, NULL, 'n' },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb fork_verb = {
    .name = "fork",
    .usage = "sbx fork [-n COUNT] ID",
    .help = "\n"
            "Copy sandbox ID's files into COUNT (default 1, at most 16) new sandboxes with its limits,\n"
            "envs and metadata, and print their ids, one per line.  Processes are not copied.\n",
    .shortopts = "n:",
    .longopts = fork_options,
    .stop_after = -1,
};

static int fork_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    if (opt != 'n')
        return 0;
    char *end;
    long n = strtol(arg, &end, 10);
    if (*end || n < 1 || n > 16)
        return sbx_error_set(err, 0, "-n '%s': use a count from 1 to 16", arg);
    *(long *) ctx = n;
    return 0;
}

int sbx_client_fork(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    sbx_cli_args a;
    long count = 1;
    int r = sbx_cli_parse(cli, &fork_verb, argc, argv, fork_option, &count, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&fork_verb, &err);
    if (a.npos != 1) {
        sbx_error_set(&err, 0, a.npos ? "one sandbox id" : "missing sandbox id");
        return sbx_cli_usage_error(&fork_verb, &err);
    }
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h)
        return sbx_cli_fail(&err);
    _cleanup_free_ char *path = sbx_cli_sandbox_path(h, a.pos[0], "/fork", &err);
    _cleanup_json_ json_t *body = json_pack("{s:i}", "count", (int) count);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!path || sbx_http_json(h, "POST", path, body, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json) {
        sbx_cli_print_raw(&resp);
        return 0;
    }
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(resp.json, "sandboxes"), i, s)
        printf("%s\n", json_string_value(json_object_get(s, "id")));
    return 0;
}

/* ---- network ---- */

static const struct option net_options[] = {
    { "deny", required_argument, NULL, OPT_DENY },
    { NULL, 0, NULL, 0 },
};

static const sbx_cli_verb net_verb = {
    .name = "net",
    .usage = "sbx net ID [none | allow RULE... | open [CIDR...]] [--deny RULE]...",
    .help = "\n"
            "Show sandbox ID's network policy, or change it (at once, for new connections):\n"
            "  none                  nothing gets out (loopback only)\n"
            "  allow RULE...         only these domains (example.com; *.example.com: its subdomains only)\n"
            "                        and CIDRs, through sbxd's egress proxy; private, metadata and the\n"
            "                        host's own addresses need a CIDR\n"
            "  open [CIDR...]        the internet through a user-space network stack (IPv4 only); private,\n"
            "                        loopback, metadata and the host's own addresses stay denied unless a\n"
            "                        CIDR names them\n"
            "  --deny RULE           never this domain or CIDR (repeatable; wins; open: CIDRs only)\n"
            "Egress attempts: `--json` ... GET /v1/sandboxes/ID/events?type=net (docs/api.md).\n",
    .longopts = net_options,
    .stop_after = -1,
};

static int net_option(void *ctx, int opt, const char *arg, sbx_error *err)
{
    if (opt != OPT_DENY)
        return 0;
    if (json_array_append_new(ctx, json_string(arg)) < 0)
        return sbx_error_set(err, 0, "--deny: not valid UTF-8");
    return 0;
}

static void print_policy(json_t *net)
{
    printf("%s", json_string_value(json_object_get(net, "mode")) ?: "none");
    const char *lists[] = { "allow", "deny" };
    for (size_t l = 0; l < 2; l++) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(net, lists[l]), i, v)
            printf("%s%s", i ? " " : l ? "\n  deny: " : "\n  allow: ", json_string_value(v));
    }
    printf("\n");
}

int sbx_client_net(sbx_cli *cli, int argc, char **argv)
{
    sbx_error err = { 0 };
    sbx_cli_args a;
    _cleanup_json_ json_t *deny = json_array();
    int r = sbx_cli_parse(cli, &net_verb, argc, argv, net_option, deny, &a, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&net_verb, &err);
    if (a.npos < 1) {
        sbx_error_set(&err, 0, "missing sandbox id");
        return sbx_cli_usage_error(&net_verb, &err);
    }
    _cleanup_json_ json_t *body = NULL;
    if (a.npos >= 2 && strcmp(a.pos[1], "none") == 0 && a.npos == 2 && !json_array_size(deny)) {
        body = json_pack("{s:s}", "mode", "none");
    } else if ((a.npos >= 3 && strcmp(a.pos[1], "allow") == 0) || (a.npos >= 2 && strcmp(a.pos[1], "open") == 0)) {
        _cleanup_json_ json_t *allow = json_array();
        for (int i = 2; i < a.npos; i++)
            json_array_append_new(allow, json_string(a.pos[i]));
        body = allowlist(allow, deny);
        if (strcmp(a.pos[1], "open") == 0)
            json_object_set_new(body, "mode", json_string("open"));
    } else if (a.npos > 1 || json_array_size(deny)) {
        sbx_error_set(&err, 0, "use `none`, `allow RULE...` (at least one rule) or `open [CIDR...]`");
        return sbx_cli_usage_error(&net_verb, &err);
    }
    sbx_http *h = sbx_cli_http(cli, &err);
    if (!h)
        return sbx_cli_fail(&err);
    _cleanup_free_ char *path = sbx_cli_sandbox_path(h, a.pos[0], body ? "/network" : "", &err);
    _cleanup_http_resp_ sbx_http_resp resp = { 0 };
    if (!path || sbx_http_json(h, body ? "PATCH" : "GET", path, body, &resp, &err) < 0)
        return sbx_cli_fail(&err);
    if (cli->json)
        sbx_cli_print_raw(&resp);
    else
        print_policy(json_object_get(resp.json, "network"));
    return 0;
}
