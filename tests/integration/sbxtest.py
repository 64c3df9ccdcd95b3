"""Shared helpers for the sbx integration tests (fixtures are in conftest.py)."""

import os
import re
import signal
import subprocess
import time

HELPER_IN_SANDBOX = "/opt/helper"

# A uid range of our own (sandbox uid N is host uid UID_BASE + N).
UID_BASE = 1_800_000_000
UID_COUNT = 65536

# Every subprocess gets a timeout: a hung sbx must fail a test, not the run.
DEFAULT_TIMEOUT = 60

SBX_CG_RE = re.compile(r"^sbx-[0-9a-f]{32}$")


class Runner:
    """Runs `sbx run ...` with the session environment and a timeout."""

    def __init__(self, sbx, helper, env):
        self.sbx = sbx
        self.helper_path = helper
        self.env = env
        self.helper_bind = ["--ro-bind", f"{helper}:{HELPER_IN_SANDBOX}"]

    def argv(self, args):
        return [self.sbx, "run", *args]

    def __call__(self, args, *, timeout=DEFAULT_TIMEOUT, env=None, extra_env=None, input=None,
                 text=False, check_rc=None, **kw):
        e = dict(self.env if env is None else env)
        if extra_env:
            e.update(extra_env)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        if input is None and "stdin" not in kw:
            kw["stdin"] = subprocess.DEVNULL
        r = subprocess.run(self.argv(args), env=e, input=input, text=text, timeout=timeout, **kw)
        if check_rc is not None:
            assert r.returncode == check_rc, describe(r)
        return r

    def helper(self, helper_args, opts=(), **kw):
        """Run the helper inside a sandbox: sbx run OPTS --ro-bind H:/opt/helper -- /opt/helper ARGS."""
        return self([*opts, *self.helper_bind, "--", HELPER_IN_SANDBOX, *helper_args], **kw)

    def popen(self, args, *, env=None, **kw):
        e = dict(self.env if env is None else env)
        kw.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.argv(args), env=e, **kw)


def describe(r):
    def s(b):
        if b is None:
            return ""
        if isinstance(b, bytes):
            b = b.decode("utf-8", "replace")
        return b if len(b) < 4000 else b[:4000] + "...[truncated]"
    return f"exit {r.returncode}\n--- stdout\n{s(r.stdout)}\n--- stderr\n{s(r.stderr)}"


def stop(p, timeout=10):
    """Wait for a Popen; kill it (by pid) if it overstays."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=10)
        raise


# --------------------------------------------------------------------------
# leak checks: processes, cgroups, mounts, SBX_HOME


def _proc_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def sandbox_pids(base=UID_BASE, count=UID_COUNT, sbx_home=None):
    """Host pids (not zombies) that belong to this session's sandboxes: any
    uid in [base, base+count), or, with sbx_home, an environment naming our
    SBX_HOME (sbx itself, its cleanup watcher, and a sandbox's first process
    before its uid map is written, all of which run as host root)."""
    marker = f"SBX_HOME={sbx_home}".encode() if sbx_home else None
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if _proc_state(name) == "Z":
                continue
            with open(f"/proc/{name}/status") as f:
                uids = next(l for l in f if l.startswith("Uid:")).split()[1:]
            if any(base <= int(u) < base + count for u in uids):
                found.append(int(name))
                continue
            if marker:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        found.append(int(name))
        except (OSError, StopIteration, IndexError):
            continue
    return found


def _unescape(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def own_cgroup_dirs():
    """The caller's own cgroup directory in every mounted hierarchy (v1 and v2),
    per /proc/self/cgroup and /proc/self/mountinfo: where sbx nests sandboxes."""
    mounts = []  # (fstype, root, mountpoint, superopts)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.rstrip("\n").partition(" - ")
            fields = pre.split()
            pfields = post.split()
            if len(pfields) < 3 or pfields[0] not in ("cgroup", "cgroup2"):
                continue
            mounts.append((pfields[0], _unescape(fields[3]), _unescape(fields[4]), pfields[2].split(",")))
    dirs = set()
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            for fstype, root, point, opts in mounts:
                if hid == "0" and ctrls == "":
                    if fstype != "cgroup2":
                        continue
                else:
                    if fstype != "cgroup" or not all(c in opts for c in ctrls.split(",") if c):
                        continue
                rel = path
                if root != "/" and (path == root or path.startswith(root + "/")):
                    rel = path[len(root):]
                d = os.path.normpath(point + "/" + rel.lstrip("/"))
                if os.path.isdir(d):
                    dirs.add(d)
    return sorted(dirs)


def sbx_cgroups(extra_parents=()):
    """Every sbx-<id> cgroup directly under our own cgroup directories."""
    found = set()
    for d in list(own_cgroup_dirs()) + list(extra_parents):
        try:
            for name in os.listdir(d):
                if SBX_CG_RE.match(name):
                    found.add(os.path.join(d, name))
        except FileNotFoundError:
            continue
    return found


def mountinfo():
    with open("/proc/self/mountinfo") as f:
        return set(f.read().splitlines())


class LeakChecker:
    """Snapshot what a sandbox could leave behind; assert nothing new remains.

    Leftovers: processes of this session's sandboxes (see sandbox_pids), sbx-*
    cgroups next to ours, mounts, and anything in SBX_HOME but templates/base."""

    def __init__(self, sbx_home):
        self.sbx_home = sbx_home
        self.snapshot()

    def snapshot(self):
        self.cgroups = sbx_cgroups()
        self.mounts = mountinfo()
        self.pids = set(sandbox_pids(sbx_home=self.sbx_home))

    def leftovers(self):
        left = {}
        pids = sorted(set(sandbox_pids(sbx_home=self.sbx_home)) - self.pids)
        if pids:
            left["processes"] = [(p, _cmdline(p)) for p in pids]
        cgs = sorted(sbx_cgroups() - self.cgroups)
        if cgs:
            left["cgroups"] = cgs
        m = mountinfo()
        if m != self.mounts:
            left["mounts"] = {"new": sorted(m - self.mounts), "gone": sorted(self.mounts - m)}
        home = sorted(os.listdir(self.sbx_home))
        tpl = sorted(os.listdir(os.path.join(self.sbx_home, "templates"))) if "templates" in home else []
        if home != ["templates"] or tpl != ["base"]:
            left["sbx_home"] = {"top": home, "templates": tpl}
        return left

    def assert_clean(self, within=5.0):
        deadline = time.monotonic() + within
        while True:
            left = self.leftovers()
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        assert not left, f"left behind: {left}"

    def cleanup(self):
        """Remove what a failed test left, so it does not spill into the next
        one: kill the session's new sandbox processes (by pid), then remove
        new sbx-* cgroups once they are empty."""
        for pid in set(sandbox_pids(sbx_home=self.sbx_home)) - self.pids:
            kill_quietly(pid)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and set(sandbox_pids(sbx_home=self.sbx_home)) - self.pids:
            time.sleep(0.05)
        deadline = time.monotonic() + 5
        while True:
            left = sorted(sbx_cgroups() - self.cgroups)
            for cg in left:
                for sub in ("work", "init", ""):
                    try:
                        os.rmdir(os.path.join(cg, sub) if sub else cg)
                    except OSError:
                        pass
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


# --------------------------------------------------------------------------
# parsing helper output


def parse_pairs(out):
    """'NAME VALUE' lines -> dict."""
    if isinstance(out, bytes):
        out = out.decode()
    res = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        res[k] = v
    return res


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
