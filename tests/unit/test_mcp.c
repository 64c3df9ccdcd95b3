/* test_mcp.c - unit tests for the MCP protocol layer (src/mcp/): JSON-RPC
 * framing, the lifecycle, version negotiation, tools/list pagination, the
 * tool schemas and argument validation.  Nothing here reaches sbxd: the
 * session points at a port nobody listens on, and every call tested fails
 * before it would make a request.  The tools themselves are tested against
 * a real sbxd by tests/integration/test_mcp.py. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/mcp/mcp.h"
#include "../../src/mcp/tools.h"

/* The messages a request produced. */
static json_t *sent;

static void collect(void *ctx, json_t *msg)
{
    (void) ctx;
    json_array_append(sent, msg);
}

static json_t *call(sbx_mcp *m, const char *text)
{
    json_error_t e;
    json_t *msg = json_loads(text, 0, &e);
    assert_non_null(msg);
    json_array_clear(sent);
    sbx_mcp_handle(m, msg, collect, NULL);
    json_decref(msg);
    return json_array_size(sent) ? json_array_get(sent, json_array_size(sent) - 1) : NULL;
}

static int error_code(json_t *res)
{
    return (int) json_integer_value(json_object_get(json_object_get(res, "error"), "code"));
}

static sbx_mcp *session(bool initialized)
{
    sbx_error err = { 0 };
    sbx_mcp *m = sbx_mcp_new("http://127.0.0.1:9", "k", &err);
    assert_non_null(m);
    if (initialized)
        assert_non_null(call(m, "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
                                "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
                                "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"));
    return m;
}

static int setup(void **state)
{
    (void) state;
    sent = json_array();
    return 0;
}

static int teardown(void **state)
{
    (void) state;
    json_decref(sent);
    return 0;
}

static void test_version_negotiation(void **state)
{
    (void) state;
    const char *asks[][2] = { { "2025-11-25", "2025-11-25" },
                              { "2025-06-18", "2025-06-18" },
                              { "2025-03-26", "2025-03-26" },
                              { "2024-11-05", "2025-11-25" },
                              { "bogus", "2025-11-25" } };
    for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
        sbx_mcp *m = session(false);
        char req[256];
        snprintf(req, sizeof req,
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\"}}",
                 asks[i][0]);
        json_t *res = call(m, req);
        assert_string_equal(json_string_value(json_object_get(json_object_get(res, "result"), "protocolVersion")),
                            asks[i][1]);
        assert_non_null(json_object_get(json_object_get(json_object_get(res, "result"), "capabilities"), "tools"));
        sbx_mcp_free(m);
    }
    assert_true(sbx_mcp_version_supported("2025-06-18"));
    assert_false(sbx_mcp_version_supported("2025-06-19"));
    assert_false(sbx_mcp_version_supported(NULL));
}

static void test_lifecycle_errors(void **state)
{
    (void) state;
    sbx_mcp *m = session(false);
    /* before initialize: only ping works */
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}")), -32600);
    json_t *pong = call(m, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
    assert_true(json_is_object(json_object_get(pong, "result")));
    assert_string_equal(json_string_value(json_object_get(pong, "id")), "p");
    /* initialize without a version is invalid params */
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"initialize\",\"params\":{}}")),
                     -32602);
    sbx_mcp_free(m);

    m = session(true);
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"prompts/list\"}")), -32601);
    assert_int_equal(error_code(call(m, "{\"id\":4,\"method\":\"ping\"}")), -32600);             /* no jsonrpc */
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}")), -32600);
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":7}")), -32600);
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\",\"params\":[]}")), -32602);
    assert_int_equal(error_code(call(m, "[1]")), -32600);
    /* notifications and responses get nothing */
    assert_null(call(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"));
    assert_null(call(m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":9}}"));
    assert_null(call(m, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}"));
    /* logging/setLevel is accepted */
    assert_non_null(json_object_get(
        call(m, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"info\"}}"),
        "result"));
    sbx_mcp_free(m);
}

static void test_tools_list_pages(void **state)
{
    (void) state;
    sbx_mcp *m = session(true);
    json_t *names = json_array();
    char req[256] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}";
    for (int page = 0; page < 10; page++) {
        json_t *res = json_object_get(call(m, req), "result");
        assert_non_null(res);
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(res, "tools"), i, t)
        {
            json_array_append(names, json_object_get(t, "name"));
            assert_string_equal(json_string_value(json_object_get(json_object_get(t, "inputSchema"), "type")),
                                "object");
            assert_string_equal(json_string_value(json_object_get(json_object_get(t, "outputSchema"), "type")),
                                "object");
            assert_true(strlen(json_string_value(json_object_get(t, "description"))) > 20);
        }
        const char *next = json_string_value(json_object_get(res, "nextCursor"));
        if (!next)
            break;
        snprintf(req, sizeof req,
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"cursor\":\"%s\"}}", next);
    }
    assert_int_equal(json_array_size(names), 24);
    assert_int_equal(sbx_mcp_ntools, 24);
    static const char *const want[] = { "sandbox_create", "sandbox_list",  "sandbox_info", "sandbox_kill",
                                        "sandbox_set_timeout", "command_run", "command_list", "command_output",
                                        "command_kill",
                                        "files_write",    "files_read",    "files_list",   "files_stat",
                                        "files_mkdir",    "files_move",    "files_remove",
                                        "sandbox_pause",  "sandbox_resume", "sandbox_snapshot", "sandbox_fork",
                                        "snapshot_list",  "snapshot_delete", "sandbox_network", "template_list" };
    for (size_t i = 0; i < 24; i++)
        assert_string_equal(json_string_value(json_array_get(names, i)), want[i]);
    json_decref(names);
    const char *bad[] = { "\"tools:3\"", "\"tools:99\"", "\"x\"", "7" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(req, sizeof req, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{\"cursor\":%s}}",
                 bad[i]);
        assert_int_equal(error_code(call(m, req)), -32602);
    }
    sbx_mcp_free(m);
}

static json_t *tool_result(sbx_mcp *m, const char *name, const char *args)
{
    char req[1024];
    snprintf(req, sizeof req,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\",\"arguments\":%s}}",
             name, args);
    return json_object_get(call(m, req), "result");
}

static const char *text_of(json_t *res)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(res, "content"), 0), "text"));
}

static void test_tool_arguments(void **state)
{
    (void) state;
    sbx_mcp *m = session(true);
    /* protocol errors */
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{}}")),
                     -32602);
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                                        "{\"name\":\"nosuch\"}}")),
                     -32602);
    assert_int_equal(error_code(call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                                        "{\"name\":\"sandbox_info\",\"arguments\":[]}}")),
                     -32602);
    /* argument errors are tool errors a model can read */
    static const struct {
        const char *tool, *args, *says;
    } cases[] = {
        { "sandbox_info", "{}", "missing required argument 'sandbox_id'" },
        { "sandbox_info", "{\"sandbox_id\":1}", "'sandbox_id' must be a string" },
        { "sandbox_info", "{\"sandbox_id\":\"a\",\"x\":1}", "unknown argument 'x'" },
        { "command_run", "{\"sandbox_id\":\"a\",\"argv\":[]}", "'argv' must have at least 1" },
        { "command_run", "{\"sandbox_id\":\"a\",\"argv\":[\"ls\",2]}", "'argv[1]' must be a string" },
        { "command_run", "{\"sandbox_id\":\"a\",\"timeout_s\":-1}", "'timeout_s' must be between" },
        { "command_run", "{\"sandbox_id\":\"a\",\"envs\":{\"A\":1}}", "'envs.A' must be a string" },
        { "command_run", "{\"sandbox_id\":\"a\"}", "exactly one of 'cmd'" },
        { "command_run", "{\"sandbox_id\":\"a\",\"cmd\":\"x\",\"argv\":[\"x\"]}", "exactly one of 'cmd'" },
        { "files_write", "{\"sandbox_id\":\"a\",\"path\":\"p\",\"content\":\"x\",\"encoding\":\"hex\"}",
          "'encoding' must be one of" },
        { "files_write", "{\"sandbox_id\":\"a\",\"path\":\"p\",\"content\":\"!!\",\"encoding\":\"base64\"}",
          "not valid base64" },
        { "files_list", "{\"sandbox_id\":\"a\",\"depth\":17}", "'depth' must be between" },
        { "sandbox_list", "{\"state\":\"sleeping\"}", "'state' must be one of" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *res = tool_result(m, cases[i].tool, cases[i].args);
        assert_non_null(res);
        assert_true(json_is_true(json_object_get(res, "isError")));
        const char *t = text_of(res);
        if (!t || !strstr(t, cases[i].says))
            fail_msg("%s %s: got '%s', want '%s'", cases[i].tool, cases[i].args, t ? t : "(none)", cases[i].says);
    }
    /* sbxd not there: still a tool error, naming the address */
    json_t *res = tool_result(m, "sandbox_info", "{\"sandbox_id\":\"abc\"}");
    assert_true(json_is_true(json_object_get(res, "isError")));
    assert_non_null(strstr(text_of(res), "127.0.0.1:9"));
    sbx_mcp_free(m);
}

static void test_resources(void **state)
{
    (void) state;
    sbx_mcp *m = session(true);
    json_t *res = json_object_get(call(m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/templates/list\"}"),
                                  "result");
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(res, "resourceTemplates"), 0), "uriTemplate")),
                        SBX_MCP_FILE_TEMPLATE);
    res = json_object_get(call(m, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resources/list\"}"), "result");
    assert_int_equal(json_array_size(json_object_get(res, "resources")), 0);
    const char *bad[] = { "file:///etc/passwd", "sbx://sandboxes/abc", "sbx://sandboxes//files/x",
                          "sbx://sandboxes/a/files/%00x", "sbx://sandboxes/a/files/" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char req[256];
        snprintf(req, sizeof req,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"resources/read\",\"params\":{\"uri\":\"%s\"}}", bad[i]);
        assert_int_equal(error_code(call(m, req)), -32602);
    }
    sbx_mcp_free(m);
}

static void test_validator(void **state)
{
    (void) state;
    json_error_t e;
    json_t *schema = json_loads("{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"a\"],"
                                "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":1},"
                                "\"b\":{\"type\":[\"integer\",\"null\"]}}}",
                                0, &e);
    char msg[256];
    json_t *ok = json_loads("{\"a\":1}", 0, &e), *okf = json_loads("{\"a\":2.0}", 0, &e),
           *frac = json_loads("{\"a\":1.5}", 0, &e), *zero = json_loads("{\"a\":0}", 0, &e);
    assert_int_equal(sbx_mcp_validate(schema, ok, msg, sizeof msg), 0);
    assert_int_equal(sbx_mcp_validate(schema, okf, msg, sizeof msg), 0); /* 2.0 is an integer in JSON Schema */
    assert_int_equal(sbx_mcp_validate(schema, frac, msg, sizeof msg), -1);
    assert_int_equal(sbx_mcp_validate(schema, zero, msg, sizeof msg), -1);
    json_decref(ok), json_decref(okf), json_decref(frac), json_decref(zero), json_decref(schema);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_version_negotiation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lifecycle_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tools_list_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tool_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resources, setup, teardown),
        cmocka_unit_test_setup_teardown(test_validator, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
