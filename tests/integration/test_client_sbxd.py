"""The sbx client verbs end to end: `sbx` -> sbx-client -> the real sbxd -> sandboxes.

test_client_fake.py covers the client's protocol handling in detail against
a fake; this file checks that the pieces fit: one sbxd (on a unix socket, a
private home, its own uid range) for the module, driven only through `sbx`.
Needs root, like sbxd itself.  Binaries: sbx, sbx-client and sbxd next to
SBX_BIN (default <repo>/build/sbx).
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from sbxtest import UID_BASE, UID_COUNT, sandbox_pids, sbx_cgroups

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a uid range of our own, next to the session's, so that what this module's
# sandboxes leave behind is ours to find
MY_UID_BASE = UID_BASE + 4 * UID_COUNT
KEY = "sbx_" + "5a" * 24
T = 60


def _bin(name):
    sbx = os.environ.get("SBX_BIN") or os.path.join(REPO, "build", "sbx")
    return os.path.join(os.path.dirname(os.path.abspath(sbx)), name)


@pytest.fixture(scope="module")
def sbxd():
    if os.geteuid() != 0:
        pytest.skip("sbxd needs root")
    for name in ("sbx", "sbx-client", "sbxd"):
        if not os.access(_bin(name), os.X_OK):
            pytest.fail(f"{name} not found at {_bin(name)} (build it, or set SBX_BIN)")
    d = tempfile.mkdtemp(prefix="sbx-client-e2e-")
    os.chmod(d, 0o755)
    sock = os.path.join(d, "sbxd.sock")
    cgroups_before = sbx_cgroups()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBX_") and "proxy" not in k.lower()}
    env.update(SBX_API_KEY=KEY, SBX_UID_BASE=str(MY_UID_BASE))
    log = open(os.path.join(d, "sbxd.log"), "wb")
    p = subprocess.Popen([_bin("sbxd"), "--listen", "unix:" + sock, "--home", os.path.join(d, "home")],
                         env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            p.wait()
            pytest.fail("sbxd did not start:\n" + open(os.path.join(d, "sbxd.log")).read())
        time.sleep(0.02)
    client_env = dict(env, SBX_URL="unix:" + sock)
    del client_env["SBX_UID_BASE"]
    try:
        yield client_env
    finally:
        # sandboxes outlive sbxd by design: delete them through the API first
        r = subprocess.run([_bin("sbx"), "ls", "-q"], env=client_env, capture_output=True, timeout=T)
        for sid in r.stdout.decode().split():
            subprocess.run([_bin("sbx"), "kill", sid], env=client_env, capture_output=True, timeout=T)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (sandbox_pids(MY_UID_BASE) or sbx_cgroups() - cgroups_before):
            time.sleep(0.05)
        left = sandbox_pids(MY_UID_BASE), sorted(sbx_cgroups() - cgroups_before)
        shutil.rmtree(d, ignore_errors=True)
        assert left == ([], []), f"sbx kill left behind (processes, cgroups): {left}"


def sbx(env, *args, input=b"", check=None):
    r = subprocess.run([_bin("sbx"), *args], env=env, input=input, capture_output=True, timeout=T)
    if check is not None:
        assert r.returncode == check, (r.returncode, r.stdout[:2000], r.stderr.decode(errors="replace"))
    return r


@pytest.fixture(scope="module")
def sid(sbxd):
    return sbx(sbxd, "create", "-m", "suite=client e2e", "--memory", "256M", check=0).stdout.decode().strip()


def test_create_ls_info(sbxd, sid):
    assert len(sid) == 32
    r = sbx(sbxd, "ls", "-m", "suite=client e2e", check=0)
    assert sid in r.stdout.decode() and "suite=client e2e" in r.stdout.decode()
    info = json.loads(sbx(sbxd, "info", sid, check=0).stdout)
    assert info["state"] == "running" and info["memory_mb"] == 256


def test_exec_byte_exact_and_exit_status(sbxd, sid):
    r = sbx(sbxd, "exec", sid, "--", "sh", "-c", r"printf 'a\000b\377'; printf 'e\n' >&2; exit 5", check=5)
    assert r.stdout == b"a\x00b\xff" and r.stderr == b"e\n"
    sbx(sbxd, "exec", sid, "--", "sh", "-c", "kill -9 $$", check=137)
    sbx(sbxd, "exec", sid, "-t", "1", "--", "sleep", "30", check=124)
    r = sbx(sbxd, "exec", "-i", sid, "--", "sha256sum", input=bytes(range(256)) * 1000, check=0)
    assert r.stdout.split()[0].decode() == hashlib.sha256(bytes(range(256)) * 1000).hexdigest()
    r = sbx(sbxd, "exec", sid, "-u", "root", "-c", "id -u", check=0)
    assert r.stdout == b"0\n"


def test_cp_tree_round_trip(sbxd, sid, tmp_path):
    src = tmp_path / "src ü"
    (src / "sub" / "empty").mkdir(parents=True)
    blob = os.urandom(2 << 20)
    (src / "sub" / "blob.bin").write_bytes(blob)
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    os.chmod(src / "run.sh", 0o755)
    sbx(sbxd, "cp", str(src), f"{sid}:proj", check=0)
    r = sbx(sbxd, "exec", sid, "--", "sh", "-c", "./proj/run.sh && sha256sum proj/sub/blob.bin && "
                                                  "test -d proj/sub/empty", check=0)
    assert r.stdout.decode().split()[:2] == ["ran", hashlib.sha256(blob).hexdigest()]
    out = tmp_path / "out"
    out.mkdir()
    sbx(sbxd, "cp", f"{sid}:proj", str(out), check=0)
    assert (out / "proj" / "sub" / "blob.bin").read_bytes() == blob
    assert (out / "proj" / "sub" / "empty").is_dir()
    assert os.access(out / "proj" / "run.sh", os.X_OK)


def test_api_errors_are_one_line_125(sbxd, sid):
    r = sbx(sbxd, "info", "0" * 32, check=125)
    assert r.stderr.decode().startswith("sbx: ") and "(not_found)" in r.stderr.decode()
    r = sbx(dict(sbxd, SBX_API_KEY="sbx_wrong"), "ls", check=125)
    assert "(unauthorized)" in r.stderr.decode()


def test_shell_runs_a_terminal_and_passes_on_the_exit_status(sbxd, sid):
    # stdin is a pipe here (no raw mode): the keys still go to a shell on a
    # terminal in the sandbox, which echoes them and runs them
    r = sbx(sbxd, "shell", sid, input=b"tty; stty size; echo $((6*7)); exit 7\n")
    assert r.returncode == 7, r.stderr
    out = r.stdout.decode(errors="replace")
    assert "/dev/pts/" in out and "42" in out
    assert "24 80" in out  # the default size when the client has no terminal


def test_shell_unknown_sandbox_is_one_error_line(sbxd):
    r = sbx(sbxd, "shell", "0" * 32)
    assert r.returncode == 125 and r.stderr.count(b"\n") == 1 and b"no sandbox" in r.stderr


def test_kill(sbxd):
    other = sbx(sbxd, "create", check=0).stdout.decode().strip()
    sbx(sbxd, "kill", other, check=0)
    assert json.loads(sbx(sbxd, "info", other, check=0).stdout)["state"] == "deleted"
    assert "(conflict)" in sbx(sbxd, "kill", other, check=125).stderr.decode()


def test_pause_resume_snapshot_fork(sbxd):
    """sbx pause|resume|snapshot|fork and create --snapshot, as a user types them."""
    src = sbx(sbxd, "create", check=0).stdout.decode().strip()
    sbx(sbxd, "exec", src, "--", "sh", "-c", "echo kept > f.txt", check=0)
    sbx(sbxd, "pause", src, check=0)
    assert json.loads(sbx(sbxd, "info", src, check=0).stdout)["state"] == "paused"
    sbx(sbxd, "resume", src, check=0)
    assert json.loads(sbx(sbxd, "info", src, check=0).stdout)["state"] == "running"
    snap = sbx(sbxd, "snapshot", src, check=0).stdout.decode().strip()
    assert len(snap) == 32
    assert snap in sbx(sbxd, "snapshot", "ls", check=0).stdout.decode()
    new = sbx(sbxd, "create", "--snapshot", snap, check=0).stdout.decode().strip()
    assert sbx(sbxd, "exec", new, "--", "cat", "f.txt", check=0).stdout == b"kept\n"
    kids = sbx(sbxd, "fork", "-n", "2", src, check=0).stdout.decode().split()
    assert len(kids) == 2
    for k in kids:
        assert sbx(sbxd, "exec", k, "--", "cat", "f.txt", check=0).stdout == b"kept\n"
    assert "(conflict)" in sbx(sbxd, "snapshot", "rm", snap, check=125).stderr.decode()
    assert "from 1 to 16" in sbx(sbxd, "fork", "-n", "0", src, check=2).stderr.decode()
    sbx(sbxd, "kill", src, new, *kids, check=0)
    # once nothing made from them is live: `sbx snapshot rm` deletes them,
    # the fork's snapshot too (the killed sandboxes' clean-up finishes in
    # the background, so the first tries may still be a conflict)
    fork_snap = json.loads(sbx(sbxd, "info", kids[0], check=0).stdout)["snapshot_id"]
    for s in (snap, fork_snap):
        deadline = time.monotonic() + 15
        while True:
            r = sbx(sbxd, "snapshot", "rm", s)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            assert b"(conflict)" in r.stderr, r.stderr
            time.sleep(0.2)
        assert r.returncode == 0 and r.stdout == b"", (r.returncode, r.stdout, r.stderr)
    listed = sbx(sbxd, "snapshot", "ls", check=0).stdout.decode()
    assert snap not in listed and fork_snap not in listed, listed
    assert b"(not_found)" in sbx(sbxd, "snapshot", "rm", snap, check=125).stderr
    r = sbx(sbxd, "--json", "info", new, check=0)
    assert json.loads(r.stdout)["state"] == "deleted"


def test_create_on_timeout(sbxd):
    """sbx create --on-timeout pause: the timeout pauses the sandbox (its
    files kept) instead of ending it; kill is the default; anything else is
    a usage error."""
    sid = sbx(sbxd, "create", "--on-timeout", "pause", "--timeout", "2s", check=0).stdout.decode().strip()
    info = json.loads(sbx(sbxd, "info", sid, check=0).stdout)
    assert info["on_timeout"] == "pause" and info["timeout_s"] == 2, info
    sbx(sbxd, "exec", sid, "--", "sh", "-c", "echo kept > f", check=0)
    deadline = time.monotonic() + 15
    while info["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        info = json.loads(sbx(sbxd, "info", sid, check=0).stdout)
    assert info["state"] == "paused", info
    sbx(sbxd, "resume", sid, check=0)
    assert sbx(sbxd, "exec", sid, "--", "cat", "f", check=0).stdout == b"kept\n"
    other = sbx(sbxd, "create", "--on-timeout", "kill", check=0).stdout.decode().strip()
    assert json.loads(sbx(sbxd, "info", other, check=0).stdout)["on_timeout"] == "kill"
    r = sbx(sbxd, "create", "--on-timeout", "sleep", check=2)
    assert b"--on-timeout sleep: use pause or kill" in r.stderr, r.stderr
    sbx(sbxd, "kill", sid, other, check=0)
