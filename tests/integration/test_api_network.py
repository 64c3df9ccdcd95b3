"""Network policy: "none" (loopback only) and "allowlist" (out through
sbxd's egress proxy only, domain and CIDR rules, deny wins).

Every server here runs on this machine (127.0.0.5, in the test process);
names like allowed.test reach it through sbxd's test-only host map
(SBX_TEST_EGRESS_HOSTS, sbxd_fixture.py).  Tried: HTTP, HTTPS through
CONNECT and SOCKS5 to an allowed name; the clear 403 for a name not in
the list; address literals in every form (loopback, IPv6, IPv4-mapped,
decimal, hex, octal, link-local metadata, private) and a name resolving
to a private address; deny over allow; no way out without the proxy
(unset variables, a direct connection, DNS); a policy changed at run time;
sbxd killed (nothing gets out) and restarted (the policy is back); the
event log; bad policies; git clone (http, https, git://, ssh://), pip
download and npm through the proxy, and every proxy variable documented;
a terminal's environment; names judged before any DNS query (a resolver
of the test's own); SOCKS5 names with control bytes and invalid UTF-8;
trailing dots and case; *.x is the subdomains only; a deny CIDR over an
allowed name; every special range (6to4, Teredo...) over CONNECT and
SOCKS5; the host's own addresses (an address the test gives this machine)
in both modes, also one gained while an open sandbox runs; open <->
allowlist at run time; bytes both ways; domain fronting through the
Host header; SOCKS5 without "no authentication"; the test settings'
warnings; mode "open" (slirp4netns) with its deny list and its events."""

import http.server
import os
import re
import shutil
import signal
import socketserver
import ssl
import subprocess
import threading
import time

import pytest

from sbxd_fixture import EGRESS_TEST_SERVER, HOST_PUBLIC_V4, HOST_PUBLIC_V6, assert_error, init_pid

ALLOW = {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test"]}
PAGE = b"hello through the egress proxy\n"


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.server.root:
            return super().do_GET()
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def do_POST(self):  # the body read whole, then the page
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _serve(tls_dir=None, root=None):
    handler = _Handler
    if root:
        handler = lambda *a, **kw: _Handler(*a, directory=root, **kw)  # noqa: E731
    srv = _Server((EGRESS_TEST_SERVER, 0), handler)
    srv.root = root
    if tls_dir:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(tls_dir, "cert.pem"), os.path.join(tls_dir, "key.pem"))
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=allowed.test", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    return d


@pytest.fixture(scope="module")
def servers(tls_dir):
    d = tls_dir
    plain, tls = _serve(), _serve(tls_dir=str(d))
    yield plain.server_address[1], tls.server_address[1]
    plain.shutdown()
    tls.shutdown()


def curl(api, sid, args, **kw):
    """curl in the sandbox: (exit code, stdout)."""
    r = api.run(sid, ["curl", "-sS", "-m", "10", *args], **kw)
    return r["exit_code"], r["stdout"], r["stderr"]


def test_allowlist_http_https_socks(api, servers):
    http_port, tls_port = servers
    s = api.create(network=ALLOW)
    assert s["network"] == {"mode": "allowlist", "allow": ["allowed.test", "*.allowed.test"], "deny": []}, s
    sid = s["id"]
    env = api.sh(sid, "env | grep -i -E '^(https?|all|no)_proxy=' | sort")
    assert "HTTP_PROXY=http://127.0.0.1:3128" in env and "ALL_PROXY=socks5h://127.0.0.1:1080" in env, env
    code, out, err = curl(api, sid, [f"http://allowed.test:{http_port}/"])
    assert (code, out) == (0, PAGE.decode()), err
    code, out, err = curl(api, sid, [f"http://sub.allowed.test:{http_port}/x"])
    assert (code, out) == (0, PAGE.decode()), err
    code, out, err = curl(api, sid, ["-k", f"https://allowed.test:{tls_port}/"])          # CONNECT
    assert (code, out) == (0, PAGE.decode()), err
    code, out, err = curl(api, sid, ["--socks5-hostname", "127.0.0.1:1080", f"http://allowed.test:{http_port}/"])
    assert (code, out) == (0, PAGE.decode()), err
    # a name not in the list: a 403 that says why
    code, out, err = curl(api, sid, ["-i", f"http://other.test:{http_port}/"])
    assert code == 0 and " 403 " in out.splitlines()[0], out
    assert f"sbx: egress to other.test:{http_port} denied by sandbox network policy (not in allowlist)" in out, out
    code, out, err = curl(api, sid, ["-k", f"https://other.test:{tls_port}/"])
    assert code != 0 and "403" in err, err
    code, out, err = curl(api, sid, ["--socks5-hostname", "127.0.0.1:1080", f"http://other.test:{http_port}/"])
    assert code != 0 and ("not allowed" in err or "ruleset" in err.lower() or "(2)" in err), err
    # every attempt is an event
    evs = api.get(f"/v1/sandboxes/{sid}/events?type=net").json()["events"]
    got = [(e["detail"]["host"], e["detail"]["verdict"], e["detail"]["proto"]) for e in evs]
    assert ("allowed.test", "allowed", "http") in got and ("allowed.test", "allowed", "http-connect") in got, got
    assert ("allowed.test", "allowed", "socks5") in got and ("other.test", "denied", "http") in got, got
    ok = [e["detail"] for e in evs if e["detail"]["verdict"] == "allowed" and e["detail"]["proto"] == "http"][0]
    assert ok["address"] == EGRESS_TEST_SERVER and ok["port"] == http_port and ok["bytes_in"] > len(PAGE), ok
    denied = [e["detail"] for e in evs if e["detail"]["verdict"] == "denied"][0]
    assert denied["reason"] == "not in allowlist", denied


PROBE = r"""
import socket, sys
def ask(host, port):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    data = b""
    while True:  # a denial ends the connection; an open tunnel does not
        chunk = s.recv(4096)
        data += chunk
        if not chunk or data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
            break
    data = data.decode(errors="replace")
    s.close()
    line = data.splitlines()[0] if data else "(nothing)"
    body = data.split("\r\n\r\n", 1)[1].strip() if "\r\n\r\n" in data else ""
    print(host, line.split(" ")[1] if " " in line else line, body)
for h in sys.argv[2:]:
    ask(h, sys.argv[1])
"""


def test_addresses_in_every_form_are_denied(api, servers):
    """Literal addresses and names resolving to private ones: denied even
    when the domain rules would allow everything, unless a CIDR names them."""
    http_port, _ = servers
    sid = api.create(network={"mode": "allowlist", "allow": ["*.test", "allowed.test"]})["id"]
    api.put_file(sid, "probe.py", PROBE.encode())
    hosts = ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "2130706433", "0x7f000001",
             "0177.0.0.1", "127.1", "169.254.169.254", "10.0.0.1", "192.168.1.1", "[fe80::1]", "0.0.0.0",
             EGRESS_TEST_SERVER, "private.test", "metadata.test", "loop.test"]
    out = api.sh(sid, f"python3 probe.py {http_port} " + " ".join(f"'{h}'" for h in hosts))
    lines = out.strip().splitlines()
    assert len(lines) == len(hosts), out
    for h, line in zip(hosts, lines):
        assert line.split(" ")[1] == "403" and "denied by sandbox network policy" in line, (h, line)
    assert "private.test resolves to 10.255.255.1, which is in 10.0.0.0/8" in out, out
    assert "resolves to 169.254.169.254" in out, out
    # an explicit CIDR opens its range (and only it)
    api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "allowlist", "allow": [f"{EGRESS_TEST_SERVER}/32"]})
    out = api.sh(sid, f"python3 probe.py {http_port} {EGRESS_TEST_SERVER} 127.0.0.1")
    assert out.splitlines()[0].split(" ")[1] == "200" and out.splitlines()[1].split(" ")[1] == "403", out


def test_deny_wins_and_policy_changes_at_run_time(api, servers):
    http_port, _ = servers
    url = f"http://allowed.test:{http_port}/"
    sid = api.create(network={"mode": "allowlist", "allow": ["*.test"], "deny": ["allowed.test"]})["id"]
    code, out, _ = curl(api, sid, ["-i", url])
    assert " 403 " in out.splitlines()[0] and "allowed.test is denied by rule allowed.test" in out, out
    r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json=ALLOW)
    assert r.status_code == 200 and r.json()["network"]["allow"] == ALLOW["allow"], r.text
    assert curl(api, sid, [url])[:2] == (0, PAGE.decode())
    # none: the listeners are gone, nothing answers
    r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "none"})
    assert r.status_code == 200 and r.json()["network"] == {"mode": "none"}
    code, out, err = curl(api, sid, ["-x", "http://127.0.0.1:3128", url])
    assert code == 7, (code, err)  # connection refused
    assert "HTTP_PROXY" not in api.sh(sid, "env")
    r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json=ALLOW)
    assert curl(api, sid, [url])[:2] == (0, PAGE.decode())
    assert api.get(f"/v1/sandboxes/{sid}").json()["network"]["mode"] == "allowlist"


def test_no_way_around_the_proxy(api, servers):
    http_port, _ = servers
    sid = api.create(network=ALLOW)["id"]
    url = f"http://allowed.test:{http_port}/"
    code, _, err = curl(api, sid, ["--noproxy", "*", url])            # no proxy: no name, no route
    assert code in (6, 7), err
    code, _, err = curl(api, sid, ["--noproxy", "*", f"http://{EGRESS_TEST_SERVER}:{http_port}/"])
    assert code == 7, err
    out = api.sh(sid, "env -u HTTP_PROXY -u http_proxy python3 -c '\n"
                      "import socket\n"
                      f"for a in [(\"{EGRESS_TEST_SERVER}\", {http_port}), (\"8.8.8.8\", 53)]:\n"
                      "    try:\n"
                      "        socket.create_connection(a, timeout=3); print(\"connected\")\n"
                      "    except OSError as e: print(type(e).__name__, e.errno)\n"
                      "try:\n"
                      "    socket.getaddrinfo(\"allowed.test\", 80); print(\"resolved\")\n"
                      "except OSError as e: print(\"gaierror\")\n"
                      "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                      "try:\n"
                      "    s.sendto(b\"x\", (\"8.8.8.8\", 53)); print(\"sent\")\n"
                      "except OSError as e: print(\"udp\", e.errno)\n"
                      "'")
    assert "connected" not in out and "resolved" not in out and "sent" not in out, out
    assert out.count("101") >= 2, out  # ENETUNREACH
    # mode none (the default): loopback only, no proxy, no variables
    sid2 = api.create()["id"]
    assert api.get(f"/v1/sandboxes/{sid2}").json()["network"] == {"mode": "none"}
    code, _, err = curl(api, sid2, ["-x", "http://127.0.0.1:3128", url])
    assert code == 7, err
    assert "proxy" not in api.sh(sid2, "env").lower()


def test_fail_closed_when_sbxd_dies_and_back_after_restart(make_sbxd, servers):
    http_port, _ = servers
    d = make_sbxd()
    c = d.client()
    sid = c.create(network=ALLOW)["id"]
    url = f"http://allowed.test:{http_port}/"
    assert curl(c, sid, [url])[:2] == (0, PAGE.decode())
    # a command that keeps trying while sbxd is away
    c.background(sid, f"while true; do curl -s -m 2 -o /dev/null -w '%{{http_code}}\\n' {url} >> /tmp/codes; "
                      "sleep 0.2; done")
    time.sleep(1)
    d.stop(sig=signal.SIGKILL)
    time.sleep(2)
    d.start()
    out = c.sh(sid, "cat /tmp/codes")
    codes = out.split()
    assert "200" in codes and "000" in codes, codes       # it worked, then nothing got out
    assert set(codes) <= {"200", "000"}, codes
    assert curl(c, sid, [url])[:2] == (0, PAGE.decode())  # the policy is back


@pytest.mark.parametrize("net", [
    "wide-open", {"mode": "bogus"}, {"mode": "allowlist", "allow": "example.com"}, {"mode": "allowlist", "allow": [5]},
    {"mode": "allowlist", "allow": ["exa mple.com"]}, {"mode": "allowlist", "allow": ["10.0.0.0/33"]},
    {"mode": "allowlist", "allow": ["a.com"], "colour": 1}, {"mode": "none", "allow": ["a.com"]},
    {"mode": "allowlist", "allow": ["foo.*.com"]}, 7, None,
])
def test_bad_policies_are_400s(api, net):
    assert_error(api.create_raw({"network": net}), 400, "invalid_request")
    sid = api.create()["id"]
    assert_error(api.req("PATCH", f"/v1/sandboxes/{sid}/network", json=net), 400, "invalid_request")
    assert api.get(f"/v1/sandboxes/{sid}").json()["network"] == {"mode": "none"}


def test_git_clone_through_the_proxy_and_its_denial(api, tls_dir, tmp_path):
    """git over http (plain proxying) and https (CONNECT, a local TLS
    server), allowed and denied, and with every *_proxy variable dropped
    (git's own http.proxy, given as GIT_CONFIG_*, still holds).  What a
    denial says is what git shows of it: over http the proxy's 403 body
    (git prints a text/plain error body as "remote: ..."), over https only
    curl's "CONNECT tunnel failed, response 403".  git:// and ssh:// have
    no proxy: they fail at the name lookup (docs/api.md)."""
    if not shutil.which("git"):
        pytest.skip("git is not installed on this host (base shows the host's /usr)")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README").write_text("cloned through sbx\n")
    subprocess.run(["git", "-C", str(repo), "add", "README"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
                   check=True)
    bare = tmp_path / "srv" / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True)
    srv = _serve(root=str(tmp_path / "srv"))   # git's "dumb" HTTP protocol: plain files
    tls = _serve(tls_dir=str(tls_dir), root=str(tmp_path / "srv"))
    try:
        port, tport = srv.server_address[1], tls.server_address[1]
        sid = api.create(network=ALLOW)["id"]
        assert api.sh(sid, "git config --get http.proxy") == "http://127.0.0.1:3128\n"
        out = api.sh(sid, f"git clone -q http://allowed.test:{port}/repo.git r && cat r/README")
        assert out == "cloned through sbx\n", out
        out = api.sh(sid, f"git -c http.sslVerify=false clone -q https://allowed.test:{tport}/repo.git r2 && "
                          "cat r2/README")
        assert out == "cloned through sbx\n", out
        # no *_proxy variable at all: git's http.proxy is enough
        unset = "env -u http_proxy -u HTTP_PROXY -u https_proxy -u HTTPS_PROXY -u ALL_PROXY -u all_proxy"
        out = api.sh(sid, f"{unset} git -c http.sslVerify=false clone -q https://allowed.test:{tport}/repo.git r3 "
                          "&& cat r3/README")
        assert out == "cloned through sbx\n", out
        r = api.run(sid, f"git clone -q http://other.test:{port}/repo.git r4")
        assert r["exit_code"] != 0 and "403" in r["stderr"], r
        assert f"remote: sbx: egress to other.test:{port} denied by sandbox network policy (not in allowlist)" \
            in r["stderr"], r["stderr"]
        r = api.run(sid, f"git -c http.sslVerify=false clone -q https://other.test:{tport}/repo.git r5")
        assert r["exit_code"] != 0 and "CONNECT tunnel failed, response 403" in r["stderr"], r
        r = api.run(sid, "git clone -q git://allowed.test/repo.git r6")
        assert r["exit_code"] != 0 and "unable to look up allowed.test (port 9418)" in r["stderr"], r
        r = api.run(sid, "git clone -q ssh://git@allowed.test/repo.git r7", timeout_s=60)
        assert r["exit_code"] != 0 and "Could not resolve hostname allowed.test" in r["stderr"], r
    finally:
        srv.shutdown()
        tls.shutdown()


def test_cli_create_allow_and_net(api, sbxd_daemon, servers):
    http_port, _ = servers
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": api.key}
    sbx = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))

    def run(*args):
        r = subprocess.run([sbx, *args], env=env, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
    code, out, _ = run("--help")
    assert code == 0 and "net ID [none | allow RULE... | open [CIDR...]] [--deny RULE]..." in out, out
    code, out, _ = run("net", "--help")
    assert code == 0 and "*.example.com: its subdomains only" in out and "open [CIDR...]" in out, out
    code, out, err = run("create", "--allow", "allowed.test", "--deny", "other.test")
    assert code == 0, err
    sid = out.strip()
    api.daemon.created.append(sid)
    code, out, err = run("net", sid)
    assert (code, out) == (0, "allowlist\n  allow: allowed.test\n  deny: other.test\n"), (out, err)
    code, out, _ = run("exec", sid, "--", "curl", "-s", "-m", "10", f"http://allowed.test:{http_port}/")
    assert (code, out) == (0, PAGE.decode())
    assert run("net", sid, "none")[:2] == (0, "none\n")
    assert run("exec", sid, "--", "curl", "-s", "-m", "5", f"http://allowed.test:{http_port}/")[0] != 0
    assert run("net", sid, "allow", "*.test", "--deny", "allowed.test")[:2] == \
        (0, "allowlist\n  allow: *.test\n  deny: allowed.test\n")
    assert run("net", sid, "open", "10.0.2.2/32", "--deny", "203.0.113.0/24")[:2] == \
        (0, "open\n  allow: 10.0.2.2/32\n  deny: 203.0.113.0/24\n")
    code, _, err = run("net", sid, "open", "--deny", "evil.com")
    assert code == 125 and "CIDR rules only" in err, err
    assert run("net", sid, "bogus")[0] == 2
    assert run("net", sid, "allow")[0] == 2
    code, _, err = run("create", "--allow", "not a domain")
    assert code == 125 and "neither a domain" in err, err
    assert run("create", "--deny", "x.com")[0] == 2
    api.delete(f"/v1/sandboxes/{sid}")



def _loopback_server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.root = None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_open_mode_reaches_out_with_the_deny_list_enforced(api):
    """Mode open: a user-space network stack (slirp4netns), no proxy.  The
    tests' sbxd lets it reach this machine's loopback as 10.0.2.2 (a test
    setting): a private address, so only an explicit CIDR opens it."""
    srv = _loopback_server()
    port = srv.server_address[1]
    try:
        s = api.create(network={"mode": "open", "allow": ["10.0.2.2/32"], "deny": ["203.0.113.0/24", "1.1.1.1"]})
        assert s["network"] == {"mode": "open", "allow": ["10.0.2.2/32"], "deny": ["203.0.113.0/24", "1.1.1.1"]}
        sid = s["id"]
        out = api.sh(sid, "cat /proc/net/route | awk 'NR>1 {print $1, $2}'; cat /etc/resolv.conf; env")
        assert "eth0 00000000" in out and "nameserver 10.0.2.3" in out and "PROXY" not in out, out
        code, body, err = curl(api, sid, [f"http://10.0.2.2:{port}/"])
        assert (code, body) == (0, PAGE.decode()), err
        # denied ranges fail at once, in the sandbox's own kernel: nothing is sent
        for target in ("http://1.1.1.1/", "http://169.254.169.254/latest/meta-data/", "http://192.168.1.1/",
                       "http://10.0.0.1/", "http://[::ffff:169.254.169.254]/", "http://100.64.0.1/"):
            t0 = time.monotonic()
            code, _, err = curl(api, sid, ["-m", "5", target])
            assert code == 7 and time.monotonic() - t0 < 3, (target, code, err)
        # a policy change applies at once
        r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "open"})
        assert r.status_code == 200, r.text
        assert curl(api, sid, ["-m", "5", f"http://10.0.2.2:{port}/"])[0] == 7
        r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "none"})
        assert r.status_code == 200 and r.json()["network"] == {"mode": "none"}, r.text
        assert "eth0" not in api.sh(sid, "cat /proc/net/dev")
        r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "open", "allow": ["10.0.2.2/32"]})
        assert curl(api, sid, [f"http://10.0.2.2:{port}/"])[:2] == (0, PAGE.decode())
        api.delete(f"/v1/sandboxes/{sid}")
        # open takes CIDR rules only: domains need the proxy
        assert_error(api.create_raw({"network": {"mode": "open", "deny": ["evil.com"]}}), 400, "invalid_request")
    finally:
        srv.shutdown()


def test_open_mode_connections_are_events(api):
    """No proxy sees open mode's traffic: the kernel's log (NFLOG in the
    sandbox's namespace) makes each new connection let out, and each
    packet refused, an event with its verdict and the rule that decided.
    Link-local chatter of the interface itself is not reported."""
    srv = _loopback_server()
    port = srv.server_address[1]
    try:
        sid = api.create(network={"mode": "open", "allow": ["10.0.2.2/32"], "deny": ["203.0.113.7"]})["id"]
        assert curl(api, sid, [f"http://10.0.2.2:{port}/"])[:2] == (0, PAGE.decode())
        assert curl(api, sid, ["-m", "5", "http://203.0.113.7:81/"])[0] == 7
        assert curl(api, sid, ["-m", "5", "http://169.254.169.254/"])[0] == 7
        want = {("10.0.2.2", port, "allowed"), ("203.0.113.7", 81, "denied"), ("169.254.169.254", 80, "denied")}
        deadline = time.monotonic() + 5
        while True:
            evs = [e["detail"] for e in api.get(f"/v1/sandboxes/{sid}/events?type=net").json()["events"]]
            got = {(e["address"], e["port"], e["verdict"]) for e in evs}
            if want <= got or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert want <= got, evs
        by = {(e["address"], e["verdict"]): e for e in evs}
        assert by[("10.0.2.2", "allowed")]["proto"] == "tcp" and by[("10.0.2.2", "allowed")]["bytes_in"] is None
        assert "denied by rule 203.0.113.7" in by[("203.0.113.7", "denied")]["reason"], evs
        assert "169.254.0.0/16" in by[("169.254.169.254", "denied")]["reason"], evs
        assert not [e for e in evs if e["address"].startswith("ff02:")], evs
        # one event per connection let out, not per packet
        allowed = [e for e in evs if e["address"] == "10.0.2.2"]
        assert len(allowed) == 1, allowed
        api.delete(f"/v1/sandboxes/{sid}")
    finally:
        srv.shutdown()


def test_open_mode_fails_closed_without_sbxd(make_sbxd):
    srv = _loopback_server()
    port = srv.server_address[1]
    d = make_sbxd()
    c = d.client()
    try:
        sid = c.create(network={"mode": "open", "allow": ["10.0.2.2/32"]})["id"]
        assert curl(c, sid, [f"http://10.0.2.2:{port}/"])[:2] == (0, PAGE.decode())
        pid = str(init_pid(sid))

        def slirps():
            found = []
            for p in os.listdir("/proc"):
                try:
                    argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
                except OSError:
                    continue
                if argv and argv[0].endswith(b"slirp4netns") and pid.encode() in argv:
                    found.append(p)
            return found
        assert len(slirps()) == 1
        d.stop(sig=signal.SIGKILL)
        # slirp4netns ends with sbxd (its exit fd): nothing gets out
        deadline = time.monotonic() + 5
        while slirps() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not slirps()
        d.start()
        assert len(slirps()) == 1
        assert curl(c, sid, [f"http://10.0.2.2:{port}/"])[:2] == (0, PAGE.decode())  # back with the restart
    finally:
        srv.shutdown()


def _wheel(path):
    """A minimal pure-Python wheel: sbxdemo 1.0."""
    import base64
    import hashlib as hl
    import zipfile
    files = {"sbxdemo/__init__.py": b"VALUE = 42\n",
             "sbxdemo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxdemo\nVersion: 1.0\n",
             "sbxdemo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sbx-test\nRoot-Is-Purelib: true\n"
                                          b"Tag: py3-none-any\n"}
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hl.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "sbxdemo-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("sbxdemo-1.0.dist-info/RECORD", record)


def _package_index(root):
    """A PEP 503 simple index under root with one wheel, sbxdemo 1.0 (its
    SHA-256 in the link, as PyPI gives it); returns the wheel's path."""
    import hashlib
    (root / "simple" / "sbxdemo").mkdir(parents=True)
    (root / "files").mkdir()
    whl = root / "files" / "sbxdemo-1.0-py3-none-any.whl"
    _wheel(whl)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    (root / "simple" / "sbxdemo" / "index.html").write_text(
        f'<a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a>\n')
    return whl


def test_pip_download_through_the_proxy_and_its_denial(api, tmp_path, tls_dir):
    """pip against a local package index (PEP 503 simple index, over https
    like PyPI): through the proxy when allowed; denied, pip's own error
    says why."""
    root = tmp_path / "index"
    whl = _package_index(root)
    srv = _serve(tls_dir=str(tls_dir), root=str(root))
    try:
        port = srv.server_address[1]
        sid = api.create(network=ALLOW)["id"]
        pip = "python3 -m pip download --no-deps --disable-pip-version-check --retries 1 --timeout 10 -d dl"
        r = api.run(sid, f"{pip} --index-url https://allowed.test:{port}/simple --trusted-host allowed.test sbxdemo"
                         " && ls dl")
        assert r["exit_code"] == 0 and whl.name in r["stdout"], r
        r = api.run(sid, f"{pip} --index-url https://other.test:{port}/simple --trusted-host other.test sbxdemo")
        assert r["exit_code"] != 0, r
        said = r["stdout"] + r["stderr"]
        assert "denied by sandbox network policy (not in allowlist)" in said, said
    finally:
        srv.shutdown()


# --------------------------------------------------------------------------
# the proxy's protocols from the inside, byte by byte (python3 in the sandbox)

NETPROBE = r'''
import json, socket, struct, sys

def read_all(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data

def answer(data):
    head, _, body = data.partition(b"\r\n\r\n")
    line = head.split(b"\r\n")[0].decode(errors="replace")
    parts = line.split(" ", 2)
    return {"status": int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0,
            "line": line, "body": body.decode(errors="replace").strip()}

def hostport(host, port):
    return (f"[{host}]" if ":" in host else host) + f":{port}"

def connect(r):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    hp = hostport(r["host"], r["port"])
    s.sendall(f"CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:  # an open tunnel stays open: stop at its head
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    if data.startswith(b"HTTP/1.1 200") and r.get("send"):  # the answer through the tunnel
        s.sendall(r["send"].encode())
        return dict(answer(read_all(s)), tunnel=answer(data)["line"])
    elif not data.startswith(b"HTTP/1.1 200"):
        data += read_all(s)
    return answer(data)

def http(r):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(r["raw"].encode())
    return answer(read_all(s))

def socks(r):
    s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
    methods = bytes.fromhex(r.get("methods", "00"))
    s.sendall(b"\x05" + bytes([len(methods)]) + methods)
    g = s.recv(2)
    if g != b"\x05\x00":
        return {"greeting": g.hex(), "closed": s.recv(1) == b""}
    host = r["host"]
    if r.get("name_hex") is not None:
        name = bytes.fromhex(r["name_hex"])
        a = b"\x03" + bytes([len(name)]) + name
    else:
        try:
            a = b"\x01" + socket.inet_pton(socket.AF_INET, host)
        except OSError:
            try:
                a = b"\x04" + socket.inet_pton(socket.AF_INET6, host)
            except OSError:
                a = b"\x03" + bytes([len(host)]) + host.encode()
    s.sendall(b"\x05\x01\x00" + a + struct.pack(">H", r["port"]))
    rep = b""
    while len(rep) < 10:
        chunk = s.recv(10 - len(rep))
        if not chunk:
            break
        rep += chunk
    out = {"reply": rep[1] if len(rep) > 1 else -1}
    if out["reply"] == 0 and r.get("send"):
        s.sendall(r["send"].encode())
        out.update(answer(read_all(s)))
    return out

print(json.dumps([globals()[r["kind"]](r) for r in json.load(open(sys.argv[1]))]))
'''


def netprobe(api, sid, reqs):
    """Each request ({"kind": "connect"|"http"|"socks", ...}) made from
    inside the sandbox; their answers."""
    import json
    api.put_file(sid, "netprobe.py", NETPROBE.encode())
    api.put_file(sid, "netprobe.json", json.dumps(reqs).encode())
    r = api.run(sid, ["python3", "netprobe.py", "netprobe.json"], timeout_s=120)
    assert r["exit_code"] == 0, r
    return json.loads(r["stdout"])


def net_events(api, sid, want=None, within=5):
    """The sandbox's net events (their details); with want(evs) -> bool,
    waited for (an event is written once its connection ended)."""
    deadline = time.monotonic() + within
    while True:
        evs = [e["detail"] for e in api.get(f"/v1/sandboxes/{sid}/events?type=net").json()["events"]]
        if want is None or want(evs) or time.monotonic() > deadline:
            return evs
        time.sleep(0.05)


def get_req(host, port, host_header=None, path="/"):
    hp = (f"[{host}]" if ":" in host else host) + f":{port}"
    return {"kind": "http", "raw": f"GET http://{hp}{path} HTTP/1.1\r\nHost: {host_header or hp}\r\n"
                                   "Connection: close\r\n\r\n"}


# --------------------------------------------------------------------------
# names are judged before anything is resolved


class DnsLogger:
    """A DNS server on addr:53 (UDP) that logs every name asked and answers
    the names of `answers` (A records) - NXDOMAIN for the others, no
    records for other types."""

    def __init__(self, addr, answers):
        import socket
        self.answers = answers
        self.names = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((addr, 53))
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import socket
        import struct
        while not self.stopping:
            try:
                q, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            if len(q) < 17:
                continue
            i, labels = 12, []
            while i < len(q) and q[i]:
                labels.append(q[i + 1:i + 1 + q[i]].decode(errors="replace"))
                i += 1 + q[i]
            qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
            question = q[12:i + 5]
            name = ".".join(labels).lower()
            self.names.append(name)
            addr = self.answers.get(name)
            if addr is None:
                flags, an = 0x8183, b""  # NXDOMAIN
            elif qtype == 1:
                flags, an = 0x8180, b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 1, 4) + socket.inet_aton(addr)
            else:
                flags, an = 0x8180, b""
            self.sock.sendto(q[:2] + struct.pack(">HHHHH", flags, 1, 1 if an else 0, 0, 0) + question + an, peer)

    def close(self):
        self.stopping = True
        self.thread.join()
        self.sock.close()


def in_own_resolv_conf(tmp_path, nameserver):
    """A wrap for Sbxd: sbxd in a mount namespace of its own whose
    /etc/resolv.conf names only `nameserver` (the host's is untouched)."""
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {nameserver}\noptions timeout:1 attempts:1\n")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(conf)]


def test_names_are_judged_before_any_dns_query(make_sbxd, servers, tmp_path):
    """A name a deny rule names, or one no rule could allow, never reaches
    a resolver (DNS is a way out too: a query for secret.attacker.example
    carries its name out); it gets the 403 that says why, not a 502
    "cannot resolve".  Only when an allow CIDR could take the answer is the
    name resolved - then judged by its address.  Through sbxd's own
    resolver: a DNS server of this test's on 127.0.0.77, the only one in
    the /etc/resolv.conf of the sbxd under test (in a mount namespace)."""
    http_port, _ = servers
    dns = DnsLogger("127.0.0.77", {"viadns.test": EGRESS_TEST_SERVER, "outside.test": "127.0.0.6"})
    try:
        d = make_sbxd(wrap=in_own_resolv_conf(tmp_path, "127.0.0.77"))
        c = d.client()
        sid = c.create(network={"mode": "allowlist", "allow": ["allowed.test"],
                                "deny": ["denied.test", "*.denied.test"]})["id"]
        names = ["denied.test", "x.denied.test", "unlisted.test", "Denied.Test.", "secret-data.unlisted.test"]
        reqs = [get_req(n, http_port) for n in names]
        reqs += [{"kind": "connect", "host": n, "port": 443} for n in names]
        reqs += [{"kind": "socks", "host": n, "port": 443} for n in names]
        got = netprobe(c, sid, reqs)
        n = len(names)
        for name, a in zip(names * 2, got[:2 * n]):
            assert a["status"] == 403, (name, a)
        canon = lambda x: x.lower().rstrip(".")  # noqa: E731
        assert got[0]["body"] == f"sbx: egress to denied.test:{http_port} denied by sandbox network policy " \
                                 "(denied.test is denied by rule denied.test)", got[0]
        assert got[2]["body"] == f"sbx: egress to unlisted.test:{http_port} denied by sandbox network policy " \
                                 "(not in allowlist)", got[2]
        assert "x.denied.test is denied by rule *.denied.test" in got[1]["body"], got[1]
        assert "(denied.test is denied by rule denied.test)" in got[3]["body"], got[3]
        assert all(a["reply"] == 2 for a in got[2 * n:]), got[2 * n:]
        # the allowed name (a test host: no DNS either) still works
        assert curl(c, sid, [f"http://allowed.test:{http_port}/"])[:2] == (0, PAGE.decode())
        assert dns.names == [], dns.names
        evs = net_events(c, sid, lambda e: len(e) >= 3 * n + 1)
        for name in names:
            assert [e for e in evs if e["host"] == canon(name) and e["verdict"] == "denied"], (name, evs)

        # with an allow CIDR, a name no domain rule allows is resolved: its
        # address decides (the logger sees this query - it works)
        r = c.req("PATCH", f"/v1/sandboxes/{sid}/network",
                  json={"mode": "allowlist", "allow": ["allowed.test", f"{EGRESS_TEST_SERVER}/32"],
                        "deny": ["denied.test"]})
        assert r.status_code == 200, r.text
        assert curl(c, sid, [f"http://viadns.test:{http_port}/"])[:2] == (0, PAGE.decode())
        assert "viadns.test" in dns.names, dns.names
        code, out, _ = curl(c, sid, ["-i", f"http://outside.test:{http_port}/"])   # 127.0.0.6: no CIDR
        assert " 403 " in out.splitlines()[0] and "outside.test resolves to 127.0.0.6" in out, out
        code, out, _ = curl(c, sid, ["-i", f"http://nowhere.test:{http_port}/"])
        assert " 502 " in out.splitlines()[0] and "cannot resolve nowhere.test" in out, out
        code, out, _ = curl(c, sid, ["-i", f"http://denied.test.:{http_port}/"])
        assert " 403 " in out.splitlines()[0] and "denied by rule denied.test" in out, out
        assert "denied.test" not in dns.names and "unlisted.test" not in dns.names, dns.names
        assert not [x for x in dns.names if "denied" in x or "secret" in x], dns.names
    finally:
        dns.close()


# --------------------------------------------------------------------------
# a terminal is a process like any other: it gets the proxy variables


def pty_output(api, sid, keys):
    """Type keys into a terminal of the sandbox (GET .../pty, a WebSocket);
    everything it printed until the shell exited."""
    from wsclient import BINARY, TEXT, WebSocket, accept_for
    import json
    ws = WebSocket(api.daemon.url, f"/v1/sandboxes/{sid}/pty?cols=200&rows=50",
                   {"Authorization": f"Bearer {api.key}"})
    assert ws.status == 101, ws.status_line
    assert ws.headers["sec-websocket-accept"] == accept_for(ws.key), ws.headers
    ws.send(keys, BINARY)
    out = b""
    try:
        while True:
            op, data = ws.recv()
            if op == BINARY:
                out += data
            elif op == TEXT and json.loads(data).get("type") == "exit":
                break
    finally:
        ws.close()
    import re
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))  # the shell's terminal codes
    return text.replace("\r", "")


def test_terminal_gets_the_proxy_variables(api, servers):
    """`sbx shell` and any WebSocket terminal: the same environment as a
    command (the proxy's variables, the sandbox's envs) - else a person at
    the terminal would see no network where a command sees one."""
    http_port, _ = servers
    sid = api.create(network=ALLOW, envs={"MINE": "kept"})["id"]
    out = pty_output(api, sid, f"env | sort; curl -s -m 10 http://allowed.test:{http_port}/; exit\n")
    for line in ("HTTP_PROXY=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
                 "ALL_PROXY=socks5h://127.0.0.1:1080", "NO_PROXY=localhost,127.0.0.1,::1",
                 "PIP_PROXY=http://127.0.0.1:3128", "GIT_CONFIG_VALUE_0=http://127.0.0.1:3128", "MINE=kept",
                 "TERM=xterm-256color"):
        assert line in out.splitlines(), (line, out)
    assert PAGE.decode() in out, out
    # and after a change of policy, a new terminal has none of them
    assert api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "none"}).status_code == 200
    out = pty_output(api, sid, "env; exit\n")
    assert "MINE=kept" in out and "PROXY" not in out.upper(), out


# --------------------------------------------------------------------------
# SOCKS5: names checked like HTTP's, every attempt an event in words


def test_socks5_names_are_checked_and_every_attempt_is_an_event(api, servers, sbxd_daemon):
    """A SOCKS5 name is bytes with a length: a newline in it must not
    start a line of sbxd's log, invalid UTF-8 must not cost the event, and
    neither may reach a resolver.  Refused with reply 2, and the event has
    the name (escaped), the reason and the sentence an HTTP client gets."""
    http_port, _ = servers
    sid = api.create(network=ALLOW)["id"]
    injected = b"allowed.test\n2099-01-01T00:00:00Z info event=forged"
    bad = [injected, b"\xff\xfe.test", b"allowed.test\x00.evil", b"a b.test", b"allowed.test\r"]
    reqs = [{"kind": "socks", "host": "", "name_hex": n.hex(), "port": http_port} for n in bad]
    reqs.append({"kind": "socks", "host": "other.test", "port": http_port})
    reqs.append({"kind": "socks", "host": "allowed.test", "port": http_port,
                 "send": "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"})
    # a client that does not offer "no authentication" is told no method is acceptable
    reqs.append({"kind": "socks", "host": "allowed.test", "port": http_port, "methods": "02"})
    got = netprobe(api, sid, reqs)
    assert [a["reply"] for a in got[:6]] == [2] * 6, got
    assert got[6]["reply"] == 0 and got[6]["status"] == 200 and got[6]["body"] == PAGE.decode().strip(), got[6]
    assert got[7] == {"greeting": "05ff", "closed": True}, got[7]
    want = len(bad) + 2
    evs = [e for e in net_events(api, sid, lambda e: len(e) >= want) if e["proto"] == "socks5"]
    assert len(evs) == want, evs
    by_host = {e["host"]: e for e in evs}
    shown = ["allowed.test\\x0a2099-01-01T00:00:00Z info event=forged", "\\xff\\xfe.test",
             "allowed.test\\x00.evil", "a b.test", "allowed.test\\x0d"]
    for h in shown:
        e = by_host[h]
        assert e["verdict"] == "denied" and e["reason"] == "not a valid host name", e
        assert e["message"] == f"sbx: egress to {h}:{http_port} denied by sandbox network policy " \
                               "(not a valid host name)", e
    e = by_host["other.test"]
    assert e["message"] == f"sbx: egress to other.test:{http_port} denied by sandbox network policy " \
                           "(not in allowlist)", e
    ok = by_host["allowed.test"]
    assert ok["verdict"] == "allowed" and "message" not in ok and ok["bytes_out"] > 40 and ok["bytes_in"] > 0, ok
    # nothing forged a line of sbxd's log
    log = sbxd_daemon.log()
    assert "event=forged" in log  # (escaped, inside the line of the event)
    assert not [line for line in log.splitlines() if line.startswith("2099-01-01")], log[-2000:]


PROXY_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:3128", "HTTPS_PROXY": "http://127.0.0.1:3128",
    "http_proxy": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
    "ALL_PROXY": "socks5h://127.0.0.1:1080", "all_proxy": "socks5h://127.0.0.1:1080",
    "NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
    "PIP_PROXY": "http://127.0.0.1:3128",
    "npm_config_proxy": "http://127.0.0.1:3128", "npm_config_https_proxy": "http://127.0.0.1:3128",
    "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.proxy", "GIT_CONFIG_VALUE_0": "http://127.0.0.1:3128",
}
STANDARD = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"]


def test_every_documented_proxy_variable_is_set_and_works(api, tls_dir, tmp_path):
    """The variables docs/api.md lists, each with its value - and pip's and
    npm's own ones are enough for pip and npm with the standard ones gone."""
    import json
    sid = api.create(network=ALLOW)["id"]
    env = dict(line.split("=", 1) for line in api.sh(sid, "env").splitlines() if "=" in line)
    assert {k: env.get(k) for k in PROXY_ENV} == PROXY_ENV, env
    assert "GIT_PROXY_COMMAND" not in env, env
    assert ":env:.proxy='http://127.0.0.1:3128'" in api.sh(sid, "python3 -m pip config list")
    # a package index (https) and an npm registry (http) on this machine
    root = tmp_path / "www"
    whl = _package_index(root)
    (root / "sbxdemo").write_text(json.dumps({"name": "sbxdemo", "dist-tags": {"latest": "1.0.0"},
                                              "versions": {"1.0.0": {"name": "sbxdemo", "version": "1.0.0"}}}))
    tls, plain = _serve(tls_dir=str(tls_dir), root=str(root)), _serve(root=str(root))
    try:
        unset = "env " + " ".join(f"-u {k}" for k in STANDARD)
        r = api.run(sid, f"{unset} python3 -m pip download --no-deps --disable-pip-version-check --retries 0 "
                         f"--timeout 10 -d dl --index-url https://allowed.test:{tls.server_address[1]}/simple "
                         "--trusted-host allowed.test sbxdemo && ls dl")
        assert r["exit_code"] == 0 and whl.name in r["stdout"], r
        if shutil.which("npm"):
            assert api.sh(sid, "npm config get proxy https-proxy") == \
                "proxy=http://127.0.0.1:3128\nhttps-proxy=http://127.0.0.1:3128\n"
            r = api.run(sid, f"{unset} npm view --json --fetch-retries 0 "
                             f"--registry http://allowed.test:{plain.server_address[1]}/ sbxdemo version",
                        timeout_s=120)
            assert r["exit_code"] == 0 and json.loads(r["stdout"]) == "1.0.0", r
            r = api.run(sid, f"{unset} npm view --fetch-retries 0 "
                             f"--registry http://other.test:{plain.server_address[1]}/ sbxdemo version",
                        timeout_s=120)
            assert r["exit_code"] != 0 and "403" in r["stdout"] + r["stderr"], r
    finally:
        tls.shutdown()
        plain.shutdown()


# --------------------------------------------------------------------------
# the host's own addresses, whatever their range


@pytest.fixture
def host_public_address():
    """HOST_PUBLIC_V4 and HOST_PUBLIC_V6 given to this machine (on lo) for
    the test, with an HTTP server on each: addresses of the host that no
    private or special range covers.  Removed at the end."""
    added = []
    try:
        for a, plen, extra in ((HOST_PUBLIC_V4, 32, []), (HOST_PUBLIC_V6, 128, ["nodad"])):
            subprocess.run(["ip", "addr", "add", f"{a}/{plen}", "dev", "lo", *extra], check=True, capture_output=True)
            added.append(f"{a}/{plen}")
        srvs = []
        for a, fam in ((HOST_PUBLIC_V4, None), (HOST_PUBLIC_V6, "v6")):
            cls = _Server
            if fam:
                import socket

                class _Server6(_Server):
                    address_family = socket.AF_INET6
                cls = _Server6
            srv = cls((a, 0), _Handler)
            srv.root = None
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            srvs.append(srv)
        yield srvs[0].server_address[1], srvs[1].server_address[1]
        for srv in srvs:
            srv.shutdown()
            srv.server_close()
    finally:
        for a in added:
            subprocess.run(["ip", "addr", "del", a, "dev", "lo"], capture_output=True)


def test_allowlist_denies_the_hosts_own_addresses(api, host_public_address):
    """A name that resolves to one of the host's own addresses reaches the
    host's services through the proxy (which connects from the host): it
    is denied like loopback, unless a CIDR names the address."""
    p4, p6 = host_public_address
    sid = api.create(network={"mode": "allowlist", "allow": ["*.test"]})["id"]
    got = netprobe(api, sid, [get_req("hostaddr.test", p4), get_req("hostaddr6.test", p6),
                              {"kind": "connect", "host": "hostaddr.test", "port": p4},
                              {"kind": "socks", "host": "hostaddr6.test", "port": p6}])
    assert got[0]["status"] == 403 and got[0]["body"] == (
        f"sbx: egress to hostaddr.test:{p4} denied by sandbox network policy ({HOST_PUBLIC_V4} is an address of "
        "this host (allow it with a CIDR rule))"), got[0]
    assert got[1]["status"] == 403 and f"{HOST_PUBLIC_V6} is an address of this host" in got[1]["body"], got[1]
    assert got[2]["status"] == 403 and got[3]["reply"] == 2, got
    # named by a CIDR, it is reached: the server was there all along
    api.req("PATCH", f"/v1/sandboxes/{sid}/network",
            json={"mode": "allowlist", "allow": ["*.test", f"{HOST_PUBLIC_V4}/32", f"{HOST_PUBLIC_V6}/128"]})
    got = netprobe(api, sid, [get_req("hostaddr.test", p4), get_req("hostaddr6.test", p6),
                              get_req(HOST_PUBLIC_V4, p4)])
    assert [a["status"] for a in got] == [200, 200, 200] and got[0]["body"] == PAGE.decode().strip(), got


def test_open_mode_denies_the_hosts_own_addresses(api, host_public_address):
    """slirp4netns connects from the host: the host's own addresses (all of
    them, not only loopback) are rejected in the sandbox's nftables table
    unless a CIDR names them."""
    p4, p6 = host_public_address
    sid = api.create(network={"mode": "open"})["id"]
    t0 = time.monotonic()
    code, _, err = curl(api, sid, ["-m", "5", f"http://{HOST_PUBLIC_V4}:{p4}/"])
    assert code == 7 and time.monotonic() - t0 < 3, (code, err)
    evs = net_events(api, sid, lambda e: any(x["address"] == HOST_PUBLIC_V4 for x in e))
    e = [x for x in evs if x["address"] == HOST_PUBLIC_V4][0]
    assert e["verdict"] == "denied" and e["reason"] == \
        f"{HOST_PUBLIC_V4} is an address of this host (allow it with a CIDR rule)", e
    r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "open", "allow": [f"{HOST_PUBLIC_V4}/32"]})
    assert r.status_code == 200, r.text
    assert curl(api, sid, [f"http://{HOST_PUBLIC_V4}:{p4}/"])[:2] == (0, PAGE.decode())
    # no IPv6 at all in mode open (slirp4netns without --enable-ipv6): the v6 address is not even tried
    out = api.sh(sid, "python3 -c 'import socket\n"
                      f"try: socket.create_connection((\"{HOST_PUBLIC_V6}\", {p6}), timeout=3); print(\"connected\")\n"
                      "except OSError as e: print(e.errno)'")
    assert out.strip() == "101", out  # ENETUNREACH


# --------------------------------------------------------------------------
# names as rules see them; deny over allow; every special range


def test_a_trailing_dot_and_case_change_nothing(api, servers):
    """"allowed.test." is allowed.test (the DNS root's dot), and
    "OTHER.test." is still other.test to a deny rule: over plain HTTP,
    CONNECT and SOCKS5."""
    http_port, _ = servers
    sid = api.create(network={"mode": "allowlist", "allow": ["*.test", "allowed.test"], "deny": ["other.test"]})["id"]
    send = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    got = netprobe(api, sid, [
        get_req("allowed.test.", http_port), get_req("Allowed.Test.", http_port),
        get_req("other.test.", http_port), get_req("OTHER.test", http_port),
        {"kind": "connect", "host": "allowed.test.", "port": http_port, "send": send},
        {"kind": "connect", "host": "other.test.", "port": http_port},
        {"kind": "socks", "host": "allowed.test.", "port": http_port, "send": send},
        {"kind": "socks", "host": "other.test.", "port": http_port},
    ])
    assert [a.get("status") for a in got[:6]] == [200, 200, 403, 403, 200, 403], got
    assert "(other.test is denied by rule other.test)" in got[2]["body"], got[2]
    assert got[4]["body"] == PAGE.decode().strip(), got[4]
    assert got[6]["reply"] == 0 and got[6]["status"] == 200 and got[7]["reply"] == 2, got[6:]
    evs = net_events(api, sid, lambda e: len(e) >= 8)
    assert {e["host"] for e in evs} == {"allowed.test", "other.test"}, evs


def test_wildcard_is_subdomains_only(api, servers):
    """*.allowed.test is a.allowed.test, a.b.allowed.test - not allowed.test."""
    http_port, _ = servers
    sid = api.create(network={"mode": "allowlist", "allow": ["*.allowed.test"]})["id"]
    assert curl(api, sid, [f"http://sub.allowed.test:{http_port}/"])[:2] == (0, PAGE.decode())
    code, out, _ = curl(api, sid, ["-i", f"http://allowed.test:{http_port}/"])
    assert " 403 " in out.splitlines()[0] and "(not in allowlist)" in out, out


def test_a_deny_cidr_wins_over_an_allowed_domain(api, servers):
    http_port, _ = servers
    sid = api.create(network={"mode": "allowlist", "allow": ["allowed.test"],
                              "deny": [f"{EGRESS_TEST_SERVER}/32"]})["id"]
    code, out, _ = curl(api, sid, ["-i", f"http://allowed.test:{http_port}/"])
    assert " 403 " in out.splitlines()[0], out
    assert f"sbx: egress to allowed.test:{http_port} denied by sandbox network policy (address " \
           f"{EGRESS_TEST_SERVER} is denied by rule {EGRESS_TEST_SERVER}/32)" in out, out
    code, _, err = curl(api, sid, ["--socks5-hostname", "127.0.0.1:1080", f"http://allowed.test:{http_port}/"])
    assert code != 0, err
    evs = net_events(api, sid, lambda e: len(e) >= 2)
    assert [e["reason"] for e in evs] == [f"address {EGRESS_TEST_SERVER} is denied by rule {EGRESS_TEST_SERVER}/32"] * 2


SPECIAL = [("fd00::1", "fc00::/7"), ("fc00::5", "fc00::/7"), ("100.64.0.1", "100.64.0.0/10"),
           ("100.127.255.254", "100.64.0.0/10"), ("172.16.0.1", "172.16.0.0/12"), ("172.31.1.1", "172.16.0.0/12"),
           ("0.0.0.0", "0.0.0.0/8"), ("2002:7f00:1::1", "2002::/16"), ("2002:a9fe:a9fe::1", "2002::/16"),
           ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32")]


def test_every_special_range_through_connect_and_socks5(api, servers):
    """Private (RFC 1918, ULA), CGNAT, "this network", and the IPv6 forms
    that carry an IPv4 address (6to4, Teredo): refused by both front doors,
    naming the range; their public neighbours are only "not in allowlist"."""
    http_port, _ = servers
    sid = api.create(network={"mode": "allowlist", "allow": ["*.test"]})["id"]
    reqs = []
    for a, _ in SPECIAL:
        reqs += [{"kind": "connect", "host": a, "port": http_port}, {"kind": "socks", "host": a, "port": http_port}]
    for a in ("172.32.0.1", "100.128.0.1", "2001:1::1"):
        reqs.append({"kind": "connect", "host": a, "port": http_port})
    got = netprobe(api, sid, reqs)
    for i, (a, rng) in enumerate(SPECIAL):
        c, s = got[2 * i], got[2 * i + 1]
        shown = f"[{a}]" if ":" in a else a
        assert c["status"] == 403 and c["body"] == (
            f"sbx: egress to {shown}:{http_port} denied by sandbox network policy ({a} is in {rng}: a private, "
            "loopback, link-local or reserved range (allow it with a CIDR rule))"), (a, c)
        assert s["reply"] == 2, (a, s)
    for c in got[2 * len(SPECIAL):]:
        assert c["status"] == 403 and c["body"].endswith("(not in allowlist)"), c
    evs = net_events(api, sid, lambda e: len(e) >= len(reqs))
    socks = {e["host"]: e for e in evs if e["proto"] == "socks5"}
    for a, rng in SPECIAL:
        assert f"is in {rng}" in socks[a]["reason"] and socks[a]["message"].startswith("sbx: egress to "), socks[a]


def test_switching_between_open_and_allowlist_at_run_time(api, servers):
    """open -> allowlist: the interface and its way out go, the proxy and
    its variables come; allowlist -> open: the other way round."""
    http_port, _ = servers
    srv = _loopback_server()
    lport = srv.server_address[1]
    try:
        sid = api.create(network={"mode": "open", "allow": ["10.0.2.2/32"]})["id"]
        assert curl(api, sid, [f"http://10.0.2.2:{lport}/"])[:2] == (0, PAGE.decode())
        r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json=ALLOW)
        assert r.status_code == 200 and r.json()["network"]["mode"] == "allowlist", r.text
        out = api.sh(sid, "cat /proc/net/dev; env")
        assert "eth0" not in out and "HTTP_PROXY=http://127.0.0.1:3128" in out, out
        assert curl(api, sid, ["--noproxy", "*", f"http://10.0.2.2:{lport}/"])[0] == 7   # no route
        assert curl(api, sid, [f"http://allowed.test:{http_port}/"])[:2] == (0, PAGE.decode())
        r = api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "open", "allow": ["10.0.2.2/32"]})
        assert r.status_code == 200 and r.json()["network"]["mode"] == "open", r.text
        out = api.sh(sid, "cat /proc/net/dev; env")
        assert "eth0" in out and "PROXY" not in out, out
        assert curl(api, sid, ["-x", "http://127.0.0.1:3128", f"http://allowed.test:{http_port}/"])[0] == 7
        assert curl(api, sid, [f"http://10.0.2.2:{lport}/"])[:2] == (0, PAGE.decode())
    finally:
        srv.shutdown()


def test_events_count_bytes_both_ways(api, servers):
    """bytes_out: what the sandbox sent (the request, a body); bytes_in:
    what came back - for plain HTTP, CONNECT and SOCKS5 alike."""
    http_port, _ = servers
    sid = api.create(network=ALLOW)["id"]
    body = "x" * 100000
    req = (f"POST / HTTP/1.1\r\nHost: allowed.test:{http_port}\r\nContent-Length: {len(body)}\r\n"
           f"Connection: close\r\n\r\n{body}")
    got = netprobe(api, sid, [
        {"kind": "http", "raw": req.replace("POST / ", f"POST http://allowed.test:{http_port}/ ", 1)},
        {"kind": "connect", "host": "allowed.test", "port": http_port, "send": req},
        {"kind": "socks", "host": "allowed.test", "port": http_port, "send": req}])
    assert [a["status"] for a in got] == [200] * 3 and {a["body"] for a in got} == {PAGE.decode().strip()}, got
    evs = net_events(api, sid, lambda e: len(e) >= 3)
    for e in evs:
        assert e["verdict"] == "allowed" and len(body) < e["bytes_out"] < len(body) + 400, e
        assert len(PAGE) < e["bytes_in"] < len(PAGE) + 400, e
    assert {e["proto"] for e in evs} == {"http", "http-connect", "socks5"}, evs


def test_plain_http_host_header_must_name_the_target(api, servers):
    """Domain fronting through plain HTTP: a request to allowed.test whose
    Host header names another site would be answered, by a server that
    hosts both, as the other one.  Refused (403) unless Host names the
    request's own host and port; a missing one (HTTP/1.0) is added."""
    http_port, _ = servers
    sid = api.create(network=ALLOW)["id"]
    hp = f"allowed.test:{http_port}"
    one0 = {"kind": "http", "raw": f"GET http://{hp}/ HTTP/1.0\r\n\r\n"}
    two = {"kind": "http", "raw": f"GET http://{hp}/ HTTP/1.1\r\nHost: {hp}\r\nHost: evil.test\r\n\r\n"}
    got = netprobe(api, sid, [get_req("allowed.test", http_port, host_header="evil.test"),
                              get_req("allowed.test", http_port, host_header=f"evil.test:{http_port}"),
                              get_req("allowed.test", http_port, host_header="allowed.test:1"),
                              get_req("allowed.test", http_port, host_header=f"Allowed.Test.:{http_port}"),
                              one0, two, get_req("allowed.test", http_port, host_header="allowed.test\x00x")])
    assert got[0]["status"] == 403 and got[0]["body"] == (
        f"sbx: egress to allowed.test:{http_port} denied by sandbox network policy (evil.test: the Host header "
        "must name the host the request goes to)"), got[0]
    assert [a["status"] for a in got] == [403, 403, 403, 200, 200, 403, 400], got
    assert "more than one Host header" in got[5]["body"], got[5]


def test_test_only_settings_are_announced(sbxd_daemon):
    """The test settings weaken the proxy (names to local addresses taken
    as public) and open mode (the host's loopback): sbxd says so loudly."""
    log = sbxd_daemon.log()
    assert re.search(r" warn event=test_setting_active name=SBX_TEST_EGRESS_HOSTS .*TEST ONLY", log), log[:3000]
    assert re.search(r" warn event=test_setting_active name=SBX_TEST_OPEN_HOST_LOOPBACK .*TEST ONLY", log), \
        log[:3000]


def test_open_mode_follows_the_hosts_addresses(api):
    """An address the host gains while an open sandbox runs (DHCP, a VPN,
    an interface coming up) is rejected too: sbxd hears of it (rtnetlink)
    and makes every open sandbox's table again."""
    addr = "11.22.33.45"
    sid = api.create(network={"mode": "open"})["id"]
    subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], check=True, capture_output=True)
    srv = None
    try:
        srv = _Server((addr, 0), _Handler)
        srv.root = None
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        url = f"http://{addr}:{srv.server_address[1]}/"
        deadline = time.monotonic() + 10
        while True:
            code = curl(api, sid, ["-m", "3", "-o", "/dev/null", url])[0]
            if code == 7 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert code == 7, f"{url} still reached (curl exit {code}) 10 s after the host gained {addr}"
        evs = net_events(api, sid, lambda e: any(x["address"] == addr for x in e))
        assert [e for e in evs if e["address"] == addr and e["verdict"] == "denied" and
                e["reason"].startswith(f"{addr} is an address of this host")], evs
    finally:
        if srv:
            srv.shutdown()
            srv.server_close()
        subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], capture_output=True)
