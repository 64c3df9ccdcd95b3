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
event log; bad policies; git clone through the proxy."""

import http.server
import os
import shutil
import signal
import socketserver
import ssl
import subprocess
import threading
import time

import pytest

from sbxd_fixture import EGRESS_TEST_SERVER, assert_error, init_pid

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


def test_git_clone_through_the_proxy_and_its_denial(api, servers, tmp_path):
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
    try:
        port = srv.server_address[1]
        sid = api.create(network=ALLOW)["id"]
        out = api.sh(sid, f"git clone -q http://allowed.test:{port}/repo.git r && cat r/README")
        assert out == "cloned through sbx\n", out
        r = api.run(sid, f"git clone -q http://other.test:{port}/repo.git r2")
        assert r["exit_code"] != 0 and "403" in r["stderr"], r
    finally:
        srv.shutdown()


def test_cli_create_allow_and_net(api, sbxd_daemon, servers):
    http_port, _ = servers
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": api.key}
    sbx = os.environ.get("SBX_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "sbx"))

    def run(*args):
        r = subprocess.run([sbx, *args], env=env, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
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


def test_pip_download_through_the_proxy_and_its_denial(api, tmp_path, tls_dir):
    """pip against a local package index (PEP 503 simple index, over https
    like PyPI): through the proxy when allowed; denied, pip's own error
    says why."""
    import hashlib as hl
    root = tmp_path / "index"
    (root / "simple" / "sbxdemo").mkdir(parents=True)
    (root / "files").mkdir()
    whl = root / "files" / "sbxdemo-1.0-py3-none-any.whl"
    _wheel(whl)
    sha = hl.sha256(whl.read_bytes()).hexdigest()
    (root / "simple" / "sbxdemo" / "index.html").write_text(
        f'<a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a>\n')
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
                 "PIP_PROXY=http://127.0.0.1:3128", "MINE=kept",
                 "TERM=xterm-256color"):
        assert line in out.splitlines(), (line, out)
    assert PAGE.decode() in out, out
    # and after a change of policy, a new terminal has none of them
    assert api.req("PATCH", f"/v1/sandboxes/{sid}/network", json={"mode": "none"}).status_code == 200
    out = pty_output(api, sid, "env; exit\n")
    assert "MINE=kept" in out and "PROXY" not in out.upper(), out
