/* client.c - sbx-client's entry point: global options, option parsing
 * shared by the verbs, dispatch, and the small helpers they share.
 *
 * Options may come before the verb or after it, and between positionals
 * (`sbx info ID --json`), so each verb parses with getopt_long in "+" mode
 * one option at a time and collects positionals itself.  That keeps
 * `sbx exec ID ls -l` working: after the sandbox id, the first non-option
 * starts the command, whose own options are not ours. */
#define _GNU_SOURCE
#include "client.h"
#include "../../lib/cleanup.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_OPTIONS 64

enum { OPT_URL = 0x1000, OPT_KEY, OPT_JSON, OPT_HELP };

static const struct option global_options[] = {
    { "url", required_argument, NULL, OPT_URL },
    { "key", required_argument, NULL, OPT_KEY },
    { "json", no_argument, NULL, OPT_JSON },
    { "help", no_argument, NULL, OPT_HELP },
    { NULL, 0, NULL, 0 },
};

static const char global_help[] =
    "\n"
    "Global options (before or after the verb):\n"
    "  --url URL     sbxd's address: http://HOST:PORT or unix:/PATH (env SBX_URL, default " SBX_DEFAULT_URL ")\n"
    "  --key KEY     API key (env SBX_API_KEY)\n"
    "  --json        print sbxd's JSON answer as is\n";

static const char *option_name(const struct option *opts, int val, char *buf, size_t len)
{
    for (const struct option *o = opts; o->name; o++)
        if (o->val == val) {
            snprintf(buf, len, "--%s", o->name);
            return buf;
        }
    snprintf(buf, len, "-%c", val);
    return buf;
}

int sbx_cli_parse(sbx_cli *cli, const sbx_cli_verb *v, int argc, char **argv, sbx_cli_opt_fn fn, void *ctx,
                  sbx_cli_args *out, sbx_error *err)
{
    /* the verb's options and the global ones in one table */
    struct option all[MAX_OPTIONS];
    size_t n = 0;
    for (const struct option *o = v->longopts; o && o->name && n + 1 < MAX_OPTIONS; o++)
        all[n++] = *o;
    for (const struct option *o = global_options; o->name && n + 1 < MAX_OPTIONS; o++)
        all[n++] = *o;
    all[n] = (struct option) { NULL, 0, NULL, 0 };
    char shortopts[64];
    /* "+": never permute (a command's own options are not ours);
     * ":": a missing value comes back as ':' rather than '?' */
    snprintf(shortopts, sizeof shortopts, "+:h%s", v->shortopts ? v->shortopts : "");

    out->rest = NULL;
    out->nrest = 0;
    opterr = 0;
    int w = 1; /* positionals are compacted into argv[1..w) as we go */
    int i = 1;
    while (i < argc) {
        const char *a = argv[i];
        bool full = v->stop_after >= 0 && w - 1 >= v->stop_after;
        if (strcmp(a, "--") == 0) {
            i++;
            /* after "--" only positionals, then (exec) the command */
            while (i < argc && !(v->stop_after >= 0 && w - 1 >= v->stop_after))
                argv[w++] = argv[i++];
            if (v->stop_after >= 0 && i < argc) {
                out->rest = argv + i;
                out->nrest = argc - i;
            }
            break;
        }
        if (a[0] != '-' || a[1] == '\0') { /* a positional ("-" is one: stdin/stdout) */
            if (full) {
                out->rest = argv + i;
                out->nrest = argc - i;
                break;
            }
            argv[w++] = argv[i++];
            continue;
        }
        optind = i;
        int c = getopt_long(argc, argv, shortopts, all, NULL);
        if (c == -1) /* not reached: non-options and "--" are handled above */
            break;
        char name[64];
        switch (c) {
        case OPT_URL:
            cli->url = optarg;
            break;
        case OPT_KEY:
            cli->key = optarg;
            break;
        case OPT_JSON:
            cli->json = true;
            break;
        case 'h':
        case OPT_HELP:
            printf("usage: %s\n%s%s", v->usage, v->help ? v->help : "", global_help);
            return 1;
        case ':':
            if (optopt)
                return sbx_error_set(err, 0, "option %s needs a value", option_name(all, optopt, name, sizeof name));
            return sbx_error_set(err, 0, "option %s needs a value", argv[optind - 1]);
        case '?':
            if (optopt)
                return sbx_error_set(err, 0, "unknown option '-%c'", optopt);
            return sbx_error_set(err, 0, "unknown option '%.64s'", argv[optind - 1]);
        default:
            if (!fn || fn(ctx, c, optarg, err) < 0)
                return -1;
        }
        i = optind;
    }
    out->pos = argv + 1;
    out->npos = w - 1;
    return 0;
}

int sbx_cli_usage_error(const sbx_cli_verb *v, const sbx_error *err)
{
    sbx_error_print(err, stderr);
    if (strcmp(v->name, "help") == 0)
        fprintf(stderr, "usage: %s   (see `sbx help`)\n", v->usage);
    else
        fprintf(stderr, "usage: %s   (see `sbx %s --help`)\n", v->usage, v->name);
    return SBX_EXIT_USAGE;
}

int sbx_cli_fail(const sbx_error *err)
{
    sbx_error_print(err, stderr);
    return SBX_EXIT_FAILURE;
}

sbx_http *sbx_cli_http(sbx_cli *cli, sbx_error *err)
{
    if (!cli->http)
        cli->http = sbx_http_new(cli->url, cli->key, err);
    return cli->http;
}

void sbx_cli_print_json(const json_t *v, bool pretty)
{
    _cleanup_free_ char *s =
        json_dumps(v, (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_ENCODE_ANY | JSON_REAL_PRECISION(10));
    if (s)
        printf("%s\n", s);
}

void sbx_cli_print_raw(const sbx_http_resp *r)
{
    fwrite(r->body, 1, r->body_len, stdout);
    if (r->body_len == 0 || r->body[r->body_len - 1] != '\n')
        putchar('\n');
}

int sbx_cli_add_kv(json_t *obj, const char *opt, const char *arg, bool allow_host, sbx_error *err)
{
    const char *eq = strchr(arg, '=');
    if (eq == arg || !*arg || (!eq && !allow_host))
        return sbx_error_set(err, 0, "%s '%s': expected KEY=VALUE%s", opt, arg, allow_host ? " or KEY" : "");
    _cleanup_free_ char *key = strndup(arg, eq ? (size_t) (eq - arg) : strlen(arg));
    if (!key)
        return sbx_error_set(err, ENOMEM, "%s", opt);
    const char *value = eq ? eq + 1 : getenv(key);
    if (!value)
        return 0; /* like `sbx run -e KEY`: unset here means "not set" */
    /* the API carries text: both must be UTF-8 (set_new frees s on failure) */
    json_t *s = json_string(value);
    if (!s || json_object_set_new(obj, key, s) < 0)
        return sbx_error_set(err, 0, "%s '%s': not valid UTF-8", opt, arg);
    return 0;
}

char *sbx_cli_sandbox_path(sbx_http *h, const char *id, const char *suffix, sbx_error *err)
{
    if (!*id) {
        sbx_error_set(err, 0, "empty sandbox id");
        return NULL;
    }
    _cleanup_free_ char *eid = sbx_http_escape(h, id, err);
    char *path = NULL;
    if (!eid)
        return NULL;
    if (asprintf(&path, "/v1/sandboxes/%s%s", eid, suffix) < 0) {
        sbx_error_set(err, ENOMEM, "request path");
        return NULL;
    }
    return path;
}

static const struct {
    const char *name;
    int (*fn)(sbx_cli *, int, char **);
} verbs[] = {
    { "create", sbx_client_create }, { "ls", sbx_client_ls },           { "info", sbx_client_info },
    { "kill", sbx_client_kill },     { "timeout", sbx_client_timeout }, { "metrics", sbx_client_metrics },
    { "exec", sbx_client_exec },     { "cp", sbx_client_cp },           { "shell", sbx_client_shell },
    { "pause", sbx_client_pause },   { "resume", sbx_client_resume },   { "mcp", sbx_client_mcp },
    { "snapshot", sbx_client_snapshot }, { "fork", sbx_client_fork },     { "template", sbx_client_template },
    { "net", sbx_client_net },       { "fuzz", sbx_client_fuzz },
};

static const sbx_cli_verb top = {
    .name = "help",
    .usage = "sbx [--url URL] [--key KEY] [--json] VERB [ARGS...]",
    .help = "\n"
            "Verbs talking to sbxd: create, ls, info, exec, cp, shell, kill, pause, resume, snapshot, fork,\n"
            "template, net, timeout, metrics, mcp, fuzz\n"
            "(`sbx VERB --help`).\n"
            "`sbx help` lists every verb.\n",
    .stop_after = 0,
};

int main(int argc, char **argv)
{
    /* A reader that goes away (`sbx exec ID -- yes | head`) must give us
     * EPIPE to handle, not kill us halfway through a request. */
    signal(SIGPIPE, SIG_IGN);
    sbx_cli cli = { .url = getenv("SBX_URL"), .key = getenv("SBX_API_KEY") };
    if (!cli.url || !*cli.url)
        cli.url = SBX_DEFAULT_URL;
    if (cli.key && !*cli.key)
        cli.key = NULL;

    sbx_error err = { 0 };
    sbx_cli_args args;
    int r = sbx_cli_parse(&cli, &top, argc, argv, NULL, NULL, &args, &err);
    if (r != 0)
        return r > 0 ? 0 : sbx_cli_usage_error(&top, &err);
    if (args.nrest == 0) {
        sbx_error_set(&err, 0, "missing verb");
        return sbx_cli_usage_error(&top, &err);
    }
    const char *verb = args.rest[0];
    if (strcmp(verb, "help") == 0) {
        printf("usage: %s\n%s%s", top.usage, top.help, global_help);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof *verbs; i++) {
        if (strcmp(verbs[i].name, verb) != 0)
            continue;
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            fprintf(stderr, "sbx: cannot initialise libcurl\n");
            return SBX_EXIT_FAILURE;
        }
        int status = verbs[i].fn(&cli, args.nrest, args.rest);
        sbx_http_free(cli.http);
        curl_global_cleanup();
        if (fflush(stdout) != 0 && status == 0) {
            fprintf(stderr, "sbx: writing stdout: %s\n", strerror(errno));
            status = SBX_EXIT_FAILURE;
        }
        return status;
    }
    /* 125, not 2, and one line: what `sbx` said for unknown verbs before the
     * client verbs moved here (tests/integration/test_errors.py) */
    fprintf(stderr, "sbx: unknown command '%s' (see `sbx help`)\n", verb);
    return SBX_EXIT_FAILURE;
}
