"""A hostile or broken sbx-init must cost sbxd one request, never the daemon.

Everything that comes out of a sandbox is hostile input (DESIGN.md section 2),
sbx-init included: user code could in principle replace or wedge it.  Each
test starts an sbxd whose SBX_INIT is a small Python stand-in that speaks the
control protocol badly -- never reports ready, never answers, answers with an
oversized frame, or floods output forever -- and checks that the request
concerned fails with a clear 5xx within its deadline while other clients are
served promptly, and that nothing is left behind.
"""

import os
import shutil
import subprocess
import tempfile
import threading
import time

import pytest
import requests

from sbxtest import UID_BASE, UID_COUNT, sandbox_pids

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MY_UID_BASE = UID_BASE + 6 * UID_COUNT
KEY = "hostile-init-test-key-0123456789"
H = {"Authorization": "Bearer " + KEY}

FAKE_INIT = r'''#!/usr/bin/python3
# A misbehaving stand-in for sbx-init (see test_api_hostile_init.py).
import socket, struct, threading, time
MODE = "@MODE@"
def frame(t, p=b""):
    return struct.pack("<II", t, len(p)) + p
ctl = socket.socket(fileno=3)
ctl.recvmsg(12, socket.CMSG_SPACE(64))          # the CGROUP frame and its fds
if MODE == "never_ready":
    time.sleep(3600)
ctl.sendall(frame(2, struct.pack("<I", 1)))     # STARTED
ctl.close()
listener = socket.socket(fileno=4)
held = []
def flood(c):
    c.recv(8)                                   # the EXEC header; its payload is ignored
    c.sendall(frame(2, struct.pack("<I", 42)))  # STARTED pid 42
    chunk = frame(19, struct.pack("<II", 1, 1 << 19) + b"x" * (1 << 19))
    try:
        while True:                             # OUTPUT forever, never EXIT
            c.sendall(chunk)
    except OSError:
        pass
while True:
    c, _ = listener.accept()
    if MODE == "silent":
        held.append(c)                          # never answers
    elif MODE == "garbage":
        c.sendall(struct.pack("<II", 17, 0xFFFFFFF0))  # a frame "longer" than any allowed
        held.append(c)
    elif MODE == "flood":
        threading.Thread(target=flood, args=(c,), daemon=True).start()
'''


def _bin(name):
    sbx = os.environ.get("SBX_BIN") or os.path.join(REPO, "build", "sbx")
    return os.path.join(os.path.dirname(os.path.abspath(sbx)), name)


class Daemon:
    def __init__(self, mode, *extra):
        self.dir = tempfile.mkdtemp(prefix="sbx-hostile-")
        os.chmod(self.dir, 0o755)  # the fake init is bind-mounted from here
        init = os.path.join(self.dir, "fake-init")
        with open(init, "w") as f:
            f.write(FAKE_INIT.replace("@MODE@", mode))
        os.chmod(init, 0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_")}
        env.update(SBX_API_KEY=KEY, SBX_UID_BASE=str(MY_UID_BASE), SBX_INIT=init)
        self.log = os.path.join(self.dir, "sbxd.log")
        # --pool 0: each test's fake init misbehaves on the create it measures
        self.proc = subprocess.Popen([_bin("sbxd"), "--listen", "127.0.0.1:0", "--home",
                                      os.path.join(self.dir, "home"), "--pool", "0", *extra],
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 20
        self.url = None
        while self.url is None:
            text = open(self.log).read()
            for word in text.split():
                if word.startswith("address="):
                    self.url = "http://" + word[len("address="):]
            if self.url is None:
                assert self.proc.poll() is None and time.monotonic() < deadline, text
                time.sleep(0.02)

    def req(self, method, path, headers=H, **kw):
        kw.setdefault("timeout", 60)
        return requests.request(method, self.url + path, headers=headers, **kw)

    def close(self):
        try:
            for s in self.req("GET", "/v1/sandboxes").json().get("sandboxes", []):
                self.req("DELETE", "/v1/sandboxes/" + s["id"])
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        # nothing of ours may remain: our uid range is ours alone
        deadline = time.monotonic() + 10
        while sandbox_pids(base=MY_UID_BASE) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not sandbox_pids(base=MY_UID_BASE)
        assert not os.listdir(os.path.join(self.dir, "home", "run"))
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon(request):
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    d = Daemon(*request.param)
    yield d
    d.close()


class Probe(threading.Thread):
    """Meanwhile, another client asks for /v1/health every 100 ms; the slowest
    answer must stay well under a second."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url, self.stop, self.worst = url, threading.Event(), 0.0

    def run(self):
        # curl measures: a thread of this process would count the time it
        # waits for the GIL, which a test reading a flood holds
        while not self.stop.is_set():
            r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-m", "10", "-w", "%{http_code} %{time_total}",
                                self.url + "/v1/health"], capture_output=True, text=True)
            code, took = r.stdout.split()
            assert code == "200", r.stdout
            self.worst = max(self.worst, float(took))
            time.sleep(0.1)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()
        assert self.worst < 1.0, f"health took {self.worst:.2f} s while a sandbox misbehaved"


@pytest.mark.parametrize("daemon", [("never_ready",)], indirect=True)
def test_init_that_never_reports_ready_fails_the_create_cleanly(daemon):
    with Probe(daemon.url):
        t = time.monotonic()
        r = daemon.req("POST", "/v1/sandboxes", json={})
        took = time.monotonic() - t
    assert r.status_code in (500, 503), r.text
    assert "ready" in r.json()["error"]["message"]
    assert took < 15
    assert daemon.req("GET", "/v1/sandboxes?state=all").json()["sandboxes"] == []


@pytest.mark.parametrize("daemon", [("silent", "--health-interval", "1")], indirect=True)
def test_init_that_never_answers_costs_one_request_then_is_ended_unhealthy(daemon):
    sid = daemon.req("POST", "/v1/sandboxes", json={}).json()["id"]
    with Probe(daemon.url):
        t = time.monotonic()
        r = daemon.req("POST", f"/v1/sandboxes/{sid}/commands", json={"cmd": "true"})
        assert r.status_code in (409, 503), r.text
        assert time.monotonic() - t < 20
        deadline = time.monotonic() + 20
        while daemon.req("GET", f"/v1/sandboxes/{sid}").json()["state"] == "running":
            assert time.monotonic() < deadline, "a silent sbx-init was never found unhealthy"
            time.sleep(0.2)
    s = daemon.req("GET", f"/v1/sandboxes/{sid}").json()
    assert s["state"] == "unhealthy" and "health" in s["end_reason"]


@pytest.mark.parametrize("daemon", [("garbage",)], indirect=True)
def test_oversized_frames_are_refused_at_once(daemon):
    sid = daemon.req("POST", "/v1/sandboxes", json={}).json()["id"]
    with Probe(daemon.url):
        for method, path, kw in [("POST", "/commands", {"json": {"cmd": "true"}}),
                                 ("GET", "/files?path=x", {}),
                                 ("GET", "/commands", {}),
                                 ("GET", "/files/list", {})]:
            t = time.monotonic()
            r = daemon.req(method, f"/v1/sandboxes/{sid}{path}", **kw)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert time.monotonic() - t < 2, path


@pytest.mark.parametrize("daemon", [("flood",)], indirect=True)
def test_endless_output_is_capped_and_the_daemon_stays_small(daemon):
    sid = daemon.req("POST", "/v1/sandboxes", json={}).json()["id"]
    rss = lambda: int([l for l in open(f"/proc/{daemon.proc.pid}/status") if l.startswith("VmRSS")][0].split()[1])
    before = rss()
    with Probe(daemon.url):
        # the stand-in never sends EXIT: sbxd gives up at the command's
        # timeout plus its grace, having kept only the capped output
        r = daemon.req("POST", f"/v1/sandboxes/{sid}/commands", json={"cmd": "yes", "timeout_s": 1})
        assert r.status_code == 503, r.text
        # a streaming client gets the flood at its own pace and can leave
        with daemon.req("POST", f"/v1/sandboxes/{sid}/commands", json={"cmd": "yes"},
                        headers={**H, "Accept": "application/x-ndjson"}, stream=True) as s:
            got = 0
            for line in s.iter_lines():
                got += len(line)
                if got > 20 << 20:
                    break
    if os.environ.get("SBX_SANITIZED") != "1":  # ASan's quarantine holds freed memory
        assert rss() - before < 64 << 10, f"sbxd grew by {(rss() - before) >> 10} MiB"
