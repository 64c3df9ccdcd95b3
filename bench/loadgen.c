/* loadgen.c - a small load generator for sbxd's API (bench/api.sh).
 *
 * One libcurl handle with keep-alive, so each measurement is sbxd's work
 * plus one loopback round trip, not a TCP handshake or a client's start-up.
 *
 *   sbx-loadgen URL KEY roundtrip N   create -> exec `true` -> delete, N times
 *   sbx-loadgen URL KEY exec N        exec `true` N times in one sandbox
 *   sbx-loadgen URL KEY info N        GET one sandbox N times: the API's own floor
 *   sbx-loadgen URL KEY echo N        REST: {"cmd": "echo hi"} N times in one sandbox
 *   sbx-loadgen URL KEY create N      create (timed) then delete (not timed) a sandbox, N times
 *   sbx-loadgen URL KEY pause N       pause then resume a sandbox running a busy loop, N times
 *   sbx-loadgen URL KEY pause-idle N  the same with a sandbox whose process sleeps (after the
 *                                     resume nothing competes with sbxd and the client for CPU)
 *   sbx-loadgen URL KEY mcp N         MCP over Streamable HTTP: command_run of `echo hi`
 *                                     N times (one session, one sandbox)
 *   sbx-loadgen URL KEY upload FILE   PUT FILE into a sandbox, then GET it back
 *
 * Prints one JSON object: latencies in ms (p50, p90, p99, mean) or
 * throughputs in MB/s (10^6 bytes per second). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

static CURL *curl;
static const char *base, *key;
static char body[65536];
static size_t body_len;

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    (void) ud;
    size_t len = size * n;
    size_t room = sizeof body - 1 - body_len;
    size_t take = len < room ? len : room;
    memcpy(body + body_len, p, take);
    body_len += take;
    body[body_len] = '\0';
    return len;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void) p;
    *(size_t *) ud += size * n;
    return size * n;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static char session[128]; /* MCP-Session-Id of the last answer that had one */

static size_t header(char *p, size_t size, size_t n, void *ud)
{
    (void) ud;
    size_t len = size * n;
    if (len > 16 && strncasecmp(p, "mcp-session-id:", 15) == 0) {
        const char *v = p + 15;
        while (*v == ' ')
            v++;
        size_t k = (size_t) (p + len - v);
        while (k && (v[k - 1] == '\r' || v[k - 1] == '\n'))
            k--;
        snprintf(session, sizeof session, "%.*s", (int) k, v);
    }
    return len;
}

/* method + path + JSON body (NULL: none) with the key and `extra` headers;
 * returns the HTTP status, body in `body`. */
static long send_json(const char *method, const char *path, const char *json, const char *const *extra)
{
    char url[1024], auth[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    for (size_t i = 0; extra && extra[i]; i++)
        h = curl_slist_append(h, extra[i]);
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, header);
    if (json)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json);
    body_len = 0;
    body[0] = '\0';
    long status = 0;
    if (curl_easy_perform(curl) == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    return status;
}

static long request(const char *method, const char *path, const char *json)
{
    return send_json(method, path, json, NULL);
}

/* One JSON-RPC message to /mcp, in the session if there is one. */
static long mcp(const char *json)
{
    char sid[200];
    snprintf(sid, sizeof sid, "MCP-Session-Id: %s", session);
    const char *const extra[] = { "Accept: application/json, text/event-stream", "MCP-Protocol-Version: 2025-11-25",
                                  session[0] ? sid : NULL, NULL };
    return send_json("POST", "/mcp", json, extra);
}

static int create_with(char id[64], const char *json)
{
    if (request("POST", "/v1/sandboxes", json) != 201)
        return fprintf(stderr, "create failed: %s\n", body), -1;
    const char *p = strstr(body, "\"id\":\"");
    if (!p)
        return -1;
    snprintf(id, 64, "%.32s", p + 6);
    return 0;
}

static int create(char id[64])
{
    return create_with(id, "{}");
}

static int exec_true(const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sandboxes/%s/commands", id);
    if (request("POST", path, "{\"argv\":[\"true\"]}") != 200 || !strstr(body, "\"exit_code\":0"))
        return fprintf(stderr, "exec failed: %s\n", body), -1;
    return 0;
}

static int delete(const char *id)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
    return request("DELETE", path, NULL) == 204 ? 0 : -1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n)
{
    qsort(v, (size_t) n, sizeof *v, cmp);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    printf("{\"benchmark\":\"%s\",\"runs\":%d,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"mean_ms\":%.3f}\n", what,
           n, v[n / 2], v[n * 9 / 10], v[n * 99 / 100], sum / n);
}

static double transfer(const char *id, const char *file, bool up, size_t *bytes)
{
    char url[1024], auth[512];
    snprintf(url, sizeof url, "%s/v1/sandboxes/%s/files?path=bench.bin", base, id);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Expect:");
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L * 1024);
    FILE *f = NULL;
    *bytes = 0;
    if (up) {
        struct stat st;
        f = fopen(file, "rb");
        if (!f || fstat(fileno(f), &st) < 0)
            return -1;
        curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(curl, CURLOPT_READDATA, f);
        curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t) st.st_size);
        curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, 2L * 1024 * 1024);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
        *bytes = (size_t) st.st_size;
    } else {
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, bytes);
    }
    double t0 = now_ms();
    CURLcode rc = curl_easy_perform(curl);
    double t = now_ms() - t0;
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (f)
        fclose(f);
    curl_slist_free_all(h);
    if (rc != CURLE_OK || status != 200) {
        fprintf(stderr, "transfer failed: %s %ld %s\n", curl_easy_strerror(rc), status, body);
        return -1;
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: sbx-loadgen URL KEY roundtrip|exec|info|echo|create|pause|pause-idle|mcp N | upload FILE\n");
        return 2;
    }
    base = argv[1];
    key = argv[2];
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl = curl_easy_init();
    char id[64];
    if (strcmp(argv[3], "upload") == 0) {
        /* the writable layer is memory (tmpfs) for now: room for the file */
        if (create_with(id, "{\"disk_mb\":2048,\"memory_mb\":4096}") < 0)
            return 1;
        size_t up_bytes, down_bytes;
        double up = transfer(id, argv[4], true, &up_bytes);
        double down = transfer(id, argv[4], false, &down_bytes);
        delete (id);
        if (up < 0 || down < 0 || up_bytes != down_bytes)
            return 1;
        printf("{\"benchmark\":\"transfer\",\"bytes\":%zu,\"upload_MBps\":%.1f,\"download_MBps\":%.1f}\n", up_bytes,
               (double) up_bytes / 1e3 / up, (double) down_bytes / 1e3 / down);
        return 0;
    }
    int n = atoi(argv[4]);
    if (n < 1)
        return 2;
    double *v = calloc((size_t) n, sizeof *v), phase[3] = { 0, 0, 0 };
    /* LG_GAP_MS: idle time between iterations (not measured), for the
     * latency of sporadic requests rather than of a back-to-back stream:
     * a warm pool refills in the gaps */
    const char *gap_env = getenv("LG_GAP_MS");
    long gap = gap_env ? atol(gap_env) : 0;
    if (strcmp(argv[3], "roundtrip") == 0) {
        for (int i = 0; i < n + 3; i++) {
            if (gap > 0)
                nanosleep(&(struct timespec){ gap / 1000, gap % 1000 * 1000000L }, NULL);
            double t0 = now_ms();
            if (create(id) < 0)
                return 1;
            double t1 = now_ms();
            if (exec_true(id) < 0)
                return 1;
            double t2 = now_ms();
            if (getenv("LG_SECOND")) {
                if (exec_true(id) < 0)
                    return 1;
                fprintf(stderr, "second exec %.2f ms (first %.2f)\n", now_ms() - t2, t2 - t1);
                t2 = now_ms();
            }
            if (delete (id) < 0)
                return 1;
            if (i >= 3) { /* warm-up */
                v[i - 3] = now_ms() - t0;
                phase[0] += t1 - t0, phase[1] += t2 - t1, phase[2] += now_ms() - t2;
            }
        }
        fprintf(stderr, "mean per phase: create %.2f ms, exec %.2f ms, delete %.2f ms\n", phase[0] / n, phase[1] / n,
                phase[2] / n);
        report("create_exec_delete", v, n);
    } else if (strcmp(argv[3], "exec") == 0) {
        if (create(id) < 0)
            return 1;
        for (int i = 0; i < n + 10; i++) {
            double t0 = now_ms();
            if (exec_true(id) < 0)
                return 1;
            if (i >= 10)
                v[i - 10] = now_ms() - t0;
        }
        delete (id);
        report("exec", v, n);
    } else if (strcmp(argv[3], "echo") == 0) {
        if (create(id) < 0)
            return 1;
        char path[256];
        snprintf(path, sizeof path, "/v1/sandboxes/%s/commands", id);
        for (int i = 0; i < n + 10; i++) {
            double t0 = now_ms();
            if (request("POST", path, "{\"cmd\":\"echo hi\"}") != 200 || !strstr(body, "\"stdout\":\"hi\\n\""))
                return fprintf(stderr, "exec failed: %s\n", body), 1;
            if (i >= 10)
                v[i - 10] = now_ms() - t0;
        }
        delete (id);
        report("rest_echo", v, n);
    } else if (strcmp(argv[3], "mcp") == 0) {
        if (create(id) < 0)
            return 1;
        if (mcp("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"loadgen\",\"version\":\"1\"}}}") != 200 ||
            !session[0])
            return fprintf(stderr, "initialize failed: %s\n", body), 1;
        mcp("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        char call[512];
        for (int i = 0; i < n + 10; i++) {
            snprintf(call, sizeof call,
                     "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"command_run\","
                     "\"arguments\":{\"sandbox_id\":\"%s\",\"cmd\":\"echo hi\"}}}",
                     i + 1, id);
            double t0 = now_ms();
            if (mcp(call) != 200 || !strstr(body, "\"stdout\":\"hi\\n\""))
                return fprintf(stderr, "command_run failed: %s\n", body), 1;
            if (i >= 10)
                v[i - 10] = now_ms() - t0;
        }
        delete (id);
        report("mcp_command_run_echo", v, n);
    } else if (strcmp(argv[3], "create") == 0) {
        for (int i = 0; i < n + 3; i++) {
            if (gap > 0)
                nanosleep(&(struct timespec){ gap / 1000, gap % 1000 * 1000000L }, NULL);
            double t0 = now_ms();
            if (create(id) < 0)
                return 1;
            if (i >= 3)
                v[i - 3] = now_ms() - t0;
            if (delete (id) < 0)
                return 1;
        }
        report("create", v, n);
    } else if (strcmp(argv[3], "pause") == 0 || strcmp(argv[3], "pause-idle") == 0) {
        if (create(id) < 0)
            return 1;
        char path[256];
        snprintf(path, sizeof path, "/v1/sandboxes/%s/commands", id);
        bool busy = strcmp(argv[3], "pause") == 0;
        if (request("POST", path,
                    busy ? "{\"cmd\":\"while :; do :; done\",\"background\":true}"
                         : "{\"cmd\":\"sleep 3600\",\"background\":true}") != 201)
            return fprintf(stderr, "background failed: %s\n", body), 1;
        double *w = calloc((size_t) n, sizeof *w);
        char pp[256], rp[256];
        snprintf(pp, sizeof pp, "/v1/sandboxes/%s/pause", id);
        snprintf(rp, sizeof rp, "/v1/sandboxes/%s/resume", id);
        for (int i = 0; i < n + 5; i++) {
            double t0 = now_ms();
            if (request("POST", pp, NULL) != 200 || !strstr(body, "\"paused\""))
                return fprintf(stderr, "pause failed: %s\n", body), 1;
            double t1 = now_ms();
            if (request("POST", rp, NULL) != 200 || !strstr(body, "\"running\""))
                return fprintf(stderr, "resume failed: %s\n", body), 1;
            if (i >= 5)
                v[i - 5] = t1 - t0, w[i - 5] = now_ms() - t1;
        }
        delete (id);
        report(busy ? "pause" : "pause_idle", v, n);
        report(busy ? "resume" : "resume_idle", w, n);
    } else if (strcmp(argv[3], "info") == 0) {
        if (create(id) < 0)
            return 1;
        char path[256];
        snprintf(path, sizeof path, "/v1/sandboxes/%s", id);
        for (int i = 0; i < n + 10; i++) {
            double t0 = now_ms();
            if (request("GET", path, NULL) != 200)
                return 1;
            if (i >= 10)
                v[i - 10] = now_ms() - t0;
        }
        delete (id);
        report("info", v, n);
    } else {
        return 2;
    }
    return 0;
}
