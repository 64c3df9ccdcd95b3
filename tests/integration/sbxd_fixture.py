"""Helpers for the sbxd REST API tests (tests/integration/test_api_*.py).

An `Sbxd` is one real sbxd started as root on 127.0.0.1 (port 0, the chosen
port parsed from its `event=listening address=...` log line) with a private
--home and its own uid range.  Sandboxes outlive sbxd on purpose, so nothing
here ever stops sbxd with sandboxes left: teardown DELETEs every running
sandbox of every key used, through the API, and then checks that the
sandboxes created through this module left nothing behind:

  - no control socket in HOME/run/ (`<id12>.sock`),
  - no `sbx-<id>` cgroup directory in any hierarchy under /sys/fs/cgroup,
  - no process whose /proc/PID/cgroup names one of those ids.

Whatever is found is then removed (only those processes, by pid; only those
cgroups) so that one failure does not spill into the next test, and the
check fails.

Scopes: `Scope` tracks what one test created, so the shared session daemon
can check per test; `Sbxd.close()` checks the whole daemon at the end.

Each Sbxd nests its sandboxes' cgroups under a private parent
(SBX_CGROUP_PARENT=/sbx-api-<name>, made here in the memory, cpu and pids
hierarchies and removed at the end).  Without it they would sit directly
under our own cgroup, which for cpu and pids is the root on this host: there
the leak clean-up of other test sessions running at the same time (sbxtest.
LeakChecker removes every *new* empty sbx-* cgroup next to its own) removes
a sandbox's freshly made, still empty init cgroup, and the create fails with
"leave the work cgroup: No such device".
"""

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import requests

from sbxtest import UID_BASE, UID_COUNT

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")
# a uid range of our own (test_client_sbxd uses +4, test_api_hostile_init +6)
API_UID_BASE = UID_BASE + 8 * UID_COUNT
ENV_KEY = "api-tests-env-key-0123456789abcdef"
T = 60  # default HTTP timeout: a hung sbxd fails a test, not the run
NDJSON = "application/x-ndjson"
ID_RE = re.compile(r"sbx-([0-9a-f]{32})")
CG_V1_CONTROLLERS = ("memory", "cpu", "pids", "freezer")  # what sbxd uses on cgroup v1 (freezer: pause)


def sbxd_bin():
    sbx = os.environ.get("SBX_BIN") or os.path.join(BUILD, "sbx")
    return os.path.join(os.path.dirname(os.path.abspath(sbx)), "sbxd")


def helper_bin():
    """The static in-sandbox test helper (forkbomb, memhog, flood...)."""
    p = os.environ.get("SBX_TEST_HELPER") or os.path.join(BUILD, "tests", "sbx-test-helper")
    return p if os.access(p, os.X_OK) else None


# --------------------------------------------------------------------------
# what a sandbox can leave behind on the host


def cgroup_dirs(ids):
    """{id: [cgroup dirs named sbx-<id>]} in every hierarchy under /sys/fs/cgroup."""
    want = {"sbx-" + i: i for i in ids}
    found = {}
    if not want:
        return found
    for top in os.listdir("/sys/fs/cgroup"):
        root = os.path.join("/sys/fs/cgroup", top)
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        for d, subdirs, _ in os.walk(root):
            keep = []
            for s in subdirs:
                if s in want:
                    found.setdefault(want[s], []).append(os.path.join(d, s))
                else:
                    keep.append(s)
            subdirs[:] = keep
    return found


def procs_of(ids):
    """{pid: cgroup text} of live processes whose /proc/PID/cgroup names one of ids."""
    ids = set(ids)
    found = {}
    if not ids:
        return found
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cgroup") as f:
                text = f.read()
            if not any(m in ids for m in ID_RE.findall(text)):
                continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found[int(name)] = text
    return found


def init_pid(sid):
    """The host pid of sandbox sid's sbx-init: the process in .../sbx-<sid>/init."""
    for pid, text in procs_of([sid]).items():
        if f"sbx-{sid}/init" in text:
            return pid
    return None


def sockets_of(home, ids):
    try:
        names = os.listdir(os.path.join(home, "run"))
    except FileNotFoundError:
        return []
    prefixes = {i[:12] for i in ids}
    return [n for n in names if n[:12] in prefixes]


def leftovers(home, ids, whole_run_dir=False):
    left = {}
    p = procs_of(ids)
    if p:
        left["processes"] = {pid: _cmdline(pid) for pid in p}
    c = cgroup_dirs(ids)
    if c:
        left["cgroups"] = sorted(x for v in c.values() for x in v)
    if whole_run_dir:
        try:
            s = os.listdir(os.path.join(home, "run"))
        except FileNotFoundError:
            s = []
    else:
        s = sockets_of(home, ids)
    if s:
        left["run"] = sorted(s)
    return left


def force_clean(ids):
    """Remove what our own sandboxes left: their processes (by pid) and cgroups."""
    for _ in range(3):
        for pid in procs_of(ids):
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.2)
    for dirs in cgroup_dirs(ids).values():
        for top in dirs:
            for d, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
                try:
                    os.rmdir(d)
                except OSError:
                    pass


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


# --------------------------------------------------------------------------
# the daemon


# name=addr: a loopback test server standing for a public host; name=@addr:
# judged like a real DNS answer (a private address stays private)
EGRESS_TEST_SERVER = "127.0.0.5"
# HOST_PUBLIC_V4/V6: public-looking addresses test_api_network.py gives this machine for a
# while (on lo), to show that a host's own addresses are denied whatever their range
HOST_PUBLIC_V4 = "11.22.33.44"
HOST_PUBLIC_V6 = "3ffe:ffff::1"
EGRESS_TEST_HOSTS = ",".join([f"allowed.test={EGRESS_TEST_SERVER}", f"other.test={EGRESS_TEST_SERVER}",
                              f"sub.allowed.test={EGRESS_TEST_SERVER}", "private.test=@10.255.255.1",
                              "metadata.test=@169.254.169.254", "loop.test=@127.0.0.1",
                              f"hostaddr.test=@{HOST_PUBLIC_V4}", f"hostaddr6.test=@{HOST_PUBLIC_V6}"])


class Sbxd:
    """One sbxd with a private home.  start()/stop() may be called repeatedly
    (restart tests); the home, the keys and the record of created sandboxes
    survive restarts."""

    def __init__(self, *args, prefix="sbx-api-", wrap=()):
        """wrap: a command that execs the rest of its argv (sbxd and its
        options) in the same process, e.g. in a mount namespace of its own."""
        self.wrap = list(wrap)
        self.dir = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.dir, 0o755)
        self.home = os.path.join(self.dir, "home")
        # No warm pool unless a test asks for one (test_api_pool.py): pooled
        # sandboxes belong to no key, and the leak checks here count what a
        # test created.
        self.args = list(args) if any(a.startswith("--pool") for a in args) else ["--pool", "0", *args]
        self.log_path = os.path.join(self.dir, "sbxd.log")
        self.proc = None
        self.stopping = False
        self.url = None
        self.keys = {"env": ENV_KEY}   # name -> key, every key that may own sandboxes
        self.revoked = set()
        self.created = []              # every sandbox id created through this daemon
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("SBX_") and "proxy" not in k.lower()}
        self.cg_parent = "/" + os.path.basename(self.dir)
        self.cg_dirs = []
        for ctrl in CG_V1_CONTROLLERS:
            top = os.path.join("/sys/fs/cgroup", ctrl)
            if os.path.isdir(top) and os.path.ismount(top):
                os.mkdir(top + self.cg_parent)
                self.cg_dirs.append(top + self.cg_parent)
        if self.cg_dirs:
            self.env["SBX_CGROUP_PARENT"] = self.cg_parent
        self.env.update(SBX_API_KEY=ENV_KEY, SBX_UID_BASE=str(API_UID_BASE),
                        # the egress proxy's test-only names (test_api_network.py): nothing leaves the machine
                        SBX_TEST_EGRESS_HOSTS=EGRESS_TEST_HOSTS,
                        # network mode open: 10.0.2.2 is this machine's loopback (test_api_network.py)
                        SBX_TEST_OPEN_HOST_LOOPBACK="1")
        self.start()

    # -- process
    def start(self, timeout=30):
        assert self.proc is None or self.proc.poll() is not None, "sbxd already running"
        died = self.died()
        assert died is None, died
        self.stopping = False
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([*self.wrap, sbxd_bin(), "--listen", "127.0.0.1:0", "--home", self.home,
                                          *self.args],
                                         env=self.env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=log)
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        self.url = None
        while True:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode("utf-8", "replace")
            m = re.search(r"event=listening address=(\S+)", text)
            if m:
                self.url = "http://" + m.group(1)
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                raise AssertionError(f"sbxd did not start (exit {self.proc.returncode}):\n{text}")
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stop sbxd (only this pid); sandboxes are left running on purpose."""
        if not self.running():
            return self.proc.returncode if self.proc else None
        self.stopping = True
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"sbxd did not stop on signal {sig} within {timeout} s")

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    # -- keys
    def keys_cli(self, *args):
        r = subprocess.run([sbxd_bin(), "keys", *args, "--home", self.home], env=self.env,
                           capture_output=True, timeout=T)
        assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
        return r.stdout.decode()

    def create_key(self, name):
        out = self.keys_cli("create", "--name", name).strip()
        key = out.split()[-1]
        assert re.fullmatch(r"sbx_[0-9a-f]{48}", key), f"unexpected key output {out!r}"
        self.keys[name] = key
        return key

    def revoke_key(self, name):
        self.keys_cli("revoke", name)
        self.revoked.add(name)

    def client(self, key=ENV_KEY, tracker=None):
        return Client(self, key, tracker)

    # -- teardown
    def delete_all(self):
        """DELETE every running sandbox of every (unrevoked) key; return problems."""
        problems = []
        for name, key in self.keys.items():
            if name in self.revoked:
                continue
            c = Client(self, key)
            r = c.get("/v1/sandboxes?state=live")
            if r.status_code != 200:
                problems.append(f"list for key {name}: {r.status_code} {r.text[:200]}")
                continue
            for s in r.json()["sandboxes"]:
                d = c.delete(f"/v1/sandboxes/{s['id']}")
                if d.status_code != 204:
                    problems.append(f"DELETE {s['id']} (key {name}): {d.status_code} {d.text[:200]}")
        return problems

    def check_clean(self, ids, whole_run_dir=False, within=10.0):
        deadline = time.monotonic() + within
        while True:
            left = leftovers(self.home, ids, whole_run_dir)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def died(self):
        """A problem line if sbxd exited without being asked to, else None."""
        if self.proc is not None and self.proc.poll() is not None and not self.stopping:
            tail = "\n".join(self.log().splitlines()[-15:])
            return f"sbxd (pid {self.proc.pid}) exited on its own with status {self.proc.returncode}:\n{tail}"
        return None

    def close(self):
        """Delete everything through the API, stop sbxd, assert nothing leaked."""
        problems = []
        died = self.died()
        if died:
            problems.append(died)
            self.stopping = True  # reported: restart it to delete through the API
        try:
            if not self.running():
                self.start()
            problems += self.delete_all()
        except Exception as e:  # noqa: BLE001 - report, then clean up anyway
            problems.append(f"deleting through the API failed: {e!r}")
        finally:
            try:
                self.stop(signal.SIGTERM)
            except AssertionError as e:
                problems.append(str(e))
        left = self.check_clean(self.created, whole_run_dir=True)
        if left:
            force_clean(self.created)
            problems.append(f"left behind after DELETE of every sandbox: {left}")
        for d in self.cg_dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                problems.append(f"cgroup parent {d} not removable: {e} ({os.listdir(d)})")
        if not problems:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            problems.append(f"(sbxd home and log kept in {self.dir})")
        assert not problems, "\n".join(problems)


class Scope:
    """What one test created on a (possibly shared) daemon: at the end every
    running sandbox of the keys it used is deleted and its ids must leave
    nothing behind."""

    def __init__(self, daemon):
        self.daemon = daemon
        self.ids = []
        self.keys = set()

    def client(self, key=ENV_KEY):
        self.keys.add(key)
        return Client(self.daemon, key, self)

    def finish(self):
        d = self.daemon
        problems = []
        died = d.died()
        if died:
            # report it, and restart it (same home: it re-attaches) so that the
            # sandboxes can be deleted and the next tests can run
            problems.append(died)
            d.stopping = True
            try:
                d.start()
            except AssertionError as e:
                problems.append(str(e))
        if d.running():
            for key in self.keys:
                if key not in [d.keys[n] for n in d.keys if n not in d.revoked]:
                    continue
                c = Client(d, key)
                r = c.get("/v1/sandboxes?state=live")
                if r.status_code != 200:
                    problems.append(f"list: {r.status_code} {r.text[:200]}")
                    continue
                for s in r.json()["sandboxes"]:
                    x = c.delete(f"/v1/sandboxes/{s['id']}")
                    if x.status_code != 204:
                        problems.append(f"DELETE {s['id']}: {x.status_code} {x.text[:200]}")
        left = d.check_clean(self.ids)
        if left:
            force_clean(self.ids)
            problems.append(f"left behind after DELETE: {left}")
        return problems


# --------------------------------------------------------------------------
# the client


class Client:
    def __init__(self, daemon, key, tracker=None):
        self.daemon = daemon
        self.key = key
        self.tracker = tracker
        self.s = requests.Session()
        self.s.trust_env = False  # no proxies for 127.0.0.1

    def headers(self, extra=None):
        h = {"Authorization": "Bearer " + self.key} if self.key is not None else {}
        h.update(extra or {})
        return h

    def req(self, method, path, headers=None, **kw):
        kw.setdefault("timeout", T)
        return self.s.request(method, self.daemon.url + path, headers=self.headers(headers), **kw)

    def get(self, path, **kw):
        return self.req("GET", path, **kw)

    def post(self, path, **kw):
        return self.req("POST", path, **kw)

    def put(self, path, **kw):
        return self.req("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.req("DELETE", path, **kw)

    # -- sandboxes
    def create_raw(self, body=None, **kw):
        r = self.post("/v1/sandboxes", json={} if body is None else body, **kw)
        if r.status_code == 201:
            self._track(r.json()["id"])
        return r

    def create(self, **body):
        r = self.create_raw(body)
        assert r.status_code == 201, (r.status_code, r.text)
        return r.json()

    def _track(self, sid):
        self.daemon.created.append(sid)
        if self.tracker is not None:
            self.tracker.ids.append(sid)

    def sandbox(self, sid):
        r = self.get(f"/v1/sandboxes/{sid}")
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def wait_state(self, sid, want, within, step=0.1):
        deadline = time.monotonic() + within
        while True:
            s = self.sandbox(sid)
            if s["state"] == want or time.monotonic() > deadline:
                return s
            time.sleep(step)

    # -- commands
    def run(self, sid, cmd=None, **body):
        """Foreground command; returns the JSON reply (asserting 200)."""
        if cmd is not None:
            body["cmd" if isinstance(cmd, str) else "argv"] = cmd
        r = self.post(f"/v1/sandboxes/{sid}/commands", json=body)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def sh(self, sid, cmd, **body):
        """Run cmd, assert exit 0, return stdout as text."""
        res = self.run(sid, cmd, **body)
        assert res["exit_code"] == 0, res
        return out(res, "stdout").decode()

    def background(self, sid, cmd, **body):
        body["cmd" if isinstance(cmd, str) else "argv"] = cmd
        r = self.post(f"/v1/sandboxes/{sid}/commands", json={**body, "background": True})
        assert r.status_code == 201, (r.status_code, r.text)
        return r.json()["pid"]

    def stream(self, method, path, **kw):
        """An ndjson response as a context manager (stream=True)."""
        return self.req(method, path, headers={"Accept": NDJSON}, stream=True, **kw)

    # -- files
    def put_file(self, sid, path, data, **params):
        r = self.put(f"/v1/sandboxes/{sid}/files", params={"path": path, **params}, data=data)
        assert r.status_code == 200, (r.status_code, r.text)
        return r.json()

    def get_file(self, sid, path, **params):
        r = self.get(f"/v1/sandboxes/{sid}/files", params={"path": path, **params})
        assert r.status_code == 200, (r.status_code, r.text[:500])
        return r.content


def out(res, stream):
    """The bytes of a command reply's stdout/stderr, whatever its encoding."""
    enc = res[stream + "_encoding"]
    if enc == "base64":
        return base64.b64decode(res[stream])
    assert enc == "utf-8", enc
    return res[stream].encode("utf-8")


def event_data(ev):
    if ev.get("encoding") == "base64":
        return base64.b64decode(ev["data"])
    assert ev.get("encoding") == "utf-8", ev
    return ev["data"].encode("utf-8")


def events(resp, until_end=True, timeout=None):
    """Yield (monotonic arrival time, event) from an ndjson response, as the
    lines arrive; each line must be a JSON object."""
    if resp.status_code != 200:
        raise AssertionError(f"stream: {resp.status_code} {resp.text[:500]}")
    assert resp.headers.get("Content-Type", "").startswith(NDJSON), resp.headers
    deadline = None if timeout is None else time.monotonic() + timeout
    for line in resp.iter_lines(chunk_size=None):
        if not line:
            continue
        ev = json.loads(line)
        assert isinstance(ev, dict) and "type" in ev, line
        yield time.monotonic(), ev
        if until_end and ev["type"] in ("end", "error"):
            return
        if deadline is not None and time.monotonic() > deadline:
            raise AssertionError("stream did not end in time")


def collect(resp):
    """All events of an ndjson response, plus the concatenated stdout/stderr."""
    evs = [e for _, e in events(resp)]
    so = b"".join(event_data(e) for e in evs if e["type"] == "stdout")
    se = b"".join(event_data(e) for e in evs if e["type"] == "stderr")
    return evs, so, se


def err_code(r):
    """The error code of an error reply (asserting the documented shape)."""
    try:
        body = r.json()
    except ValueError:
        raise AssertionError(f"error reply is not JSON: {r.status_code} {r.text[:300]!r}")
    assert isinstance(body.get("error"), dict), body
    assert isinstance(body["error"].get("message"), str) and body["error"]["message"], body
    return body["error"]["code"]


def assert_error(r, status, code):
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert err_code(r) == code, r.text[:500]


# --------------------------------------------------------------------------
# pytest fixtures (imported by conftest.py)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def sbxd_daemon():
    """The shared sbxd of the API tests (default options), with a second key "other"."""
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    if not os.access(sbxd_bin(), os.X_OK):
        pytest.fail(f"sbxd not found at {sbxd_bin()} (ninja -C build)")
    d = Sbxd()
    d.create_key("other")
    yield d
    d.close()


@pytest.fixture
def scope(sbxd_daemon):
    s = Scope(sbxd_daemon)
    yield s
    problems = s.finish()
    assert not problems, "\n".join(problems)


@pytest.fixture
def api(scope):
    """A client with the env key of the shared sbxd; what it creates is deleted
    and leak-checked when the test ends."""
    return scope.client()


@pytest.fixture
def other(scope, sbxd_daemon):
    """A client with the second key ("other") of the shared sbxd."""
    return scope.client(sbxd_daemon.keys["other"])


@pytest.fixture
def sandbox(api):
    """A fresh running sandbox (object) of the env key."""
    return api.create()


@pytest.fixture
def make_sbxd():
    """make_sbxd(*options, wrap=()) -> a private Sbxd, closed (delete all, stop, leak
    check) when the test ends."""
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    made = []

    def make(*args, **kw):
        d = Sbxd(*args, **kw)
        made.append(d)
        return d

    yield make
    errors = []
    for d in made:
        try:
            d.close()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, "\n".join(errors)


def upload_helper(client, sid, path="/tmp/sbx-test-helper"):
    """Copy the static test helper into the sandbox; returns its path there."""
    h = helper_bin()
    if h is None:
        pytest.skip("the static test helper is not built (build/tests/sbx-test-helper)")
    with open(h, "rb") as f:
        client.put_file(sid, path, f.read(), mode="0755")
    return path
