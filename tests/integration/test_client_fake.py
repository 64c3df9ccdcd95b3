"""The sbx client verbs (sbx-client) against a fake sbxd (fake_sbxd.py).

These check the client's side of the REST contract: option parsing and the
requests it makes, exit statuses, streaming exec output byte-exact, cp round
trips byte-exact.  They need no root and no real daemon.

Binaries: SBX_CLIENT, else sbx-client next to SBX_BIN, else <repo>/build/.
"""

import base64
import filecmp
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from fake_sbxd import FakeSbxd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USAGE, FAILURE, TIMEOUT = 2, 125, 124
T = 60  # every client run gets a timeout: a hang must fail the test


def _binary(name):
    if name == "sbx-client" and os.environ.get("SBX_CLIENT"):
        return os.environ["SBX_CLIENT"]
    sbx = os.environ.get("SBX_BIN") or os.path.join(REPO, "build", "sbx")
    return os.path.join(os.path.dirname(os.path.abspath(sbx)), name)


@pytest.fixture(scope="module")
def client_bin():
    path = _binary("sbx-client")
    if not os.access(path, os.X_OK):
        pytest.fail(f"sbx-client not found at {path} (build it, or set SBX_CLIENT / SBX_BIN)")
    return path


@pytest.fixture
def fake():
    f = FakeSbxd().start()
    yield f
    f.stop()


def base_env(fake):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SBX_URL", "SBX_API_KEY") and "proxy" not in k.lower()}
    env.update(SBX_URL=fake.url, SBX_API_KEY=fake.key)
    return env


@pytest.fixture
def sbx(client_bin, fake):
    """sbx(*args, input=b"", env=...) -> CompletedProcess (bytes) of sbx-client ARGS."""
    def run(*args, input=b"", env=None, extra_env=None, timeout=T):
        e = dict(env if env is not None else base_env(fake))
        e.update(extra_env or {})
        return subprocess.run([client_bin, *args], input=input, capture_output=True, env=e, timeout=timeout)
    run.bin = client_bin
    return run


def describe(r):
    return (f"exit {r.returncode}\n--- stdout\n{r.stdout[:3000]!r}\n--- stderr\n"
            f"{r.stderr.decode(errors='replace')[:3000]}")


def ok(r):
    assert r.returncode == 0, describe(r)
    return r


def one_error_line(r, code, *needles):
    assert r.returncode == code, describe(r)
    lines = r.stderr.decode(errors="replace").splitlines()
    assert lines and lines[0].startswith("sbx: "), describe(r)
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"
    return lines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sid(sbx):
    return ok(sbx("create")).stdout.decode().strip()


# ---------------------------------------------------------------- usage, connection, dispatch

@pytest.mark.parametrize("args,needle", [
    (["create", "--memory", "100k"], "whole number of MiB"),
    (["create", "--memory", "lots"], "--memory"),
    (["create", "--timeout", "1500ms"], "whole seconds"),
    (["create", "-m", "novalue"], "KEY=VALUE"),
    (["create", "extra"], "unexpected argument"),
    (["ls", "--bogus"], "--bogus"),
    (["info"], "missing sandbox id"),
    (["info", "a", "b"], "unexpected argument"),
    (["timeout", "abc"], "missing DURATION"),
    (["exec", "abc"], "missing command"),
    (["exec", "-c", "true", "abc", "ls"], "exclude each other"),
    (["exec", "abc", "-t"], "needs a value"),
    (["cp", "a", "b"], "neither"),
    (["cp", "x:a", "y:b"], "both"),
    (["cp", "x:a"], "missing"),
    (["--url"], "needs a value"),
    ([], "missing verb"),
])
def test_usage_errors_exit_2_with_usage_line(sbx, fake, args, needle):
    r = sbx(*args)
    lines = one_error_line(r, USAGE, needle)
    assert any(line.startswith("usage: sbx") for line in lines[1:]), describe(r)
    assert r.stdout == b""
    assert fake.requests == [], "a usage error must not reach the daemon"


def test_help_goes_to_stdout(sbx):
    for verb in ("create", "ls", "info", "kill", "timeout", "metrics", "exec", "cp"):
        r = ok(sbx(verb, "--help"))
        assert r.stdout.startswith(b"usage: sbx " + verb.encode()), describe(r)
        assert b"--url URL" in r.stdout and r.stderr == b""


def test_unknown_verb_is_one_line_125(sbx):
    one_error_line(sbx("frobnicate"), FAILURE, "frobnicate")


def test_connection_refused_names_url_and_sbxd(sbx, fake):
    url = f"http://127.0.0.1:{free_port()}"
    r = sbx("ls", extra_env={"SBX_URL": url})
    lines = one_error_line(r, FAILURE, url, "sbxd")
    assert len(lines) == 1


def test_connection_refused_unix_socket(sbx, tmp_path):
    path = str(tmp_path / "none.sock")
    one_error_line(sbx("--url", "unix:" + path, "info", "x"), FAILURE, "unix:" + path, "No such file")


def test_shell_connection_refused_names_the_url(sbx, tmp_path):
    path = str(tmp_path / "none.sock")
    one_error_line(sbx("--url", "unix:" + path, "shell", "abc"), FAILURE, "unix:" + path)


def test_sbx_dispatches_to_client(client_bin, fake):
    sbx_bin = _binary("sbx")
    if not os.access(sbx_bin, os.X_OK):
        pytest.skip(f"no sbx next to sbx-client ({sbx_bin})")
    env = base_env(fake)
    ok(subprocess.run([client_bin, "create"], env=env, capture_output=True, timeout=T))
    r = subprocess.run([sbx_bin, "ls", "-q"], env=env, capture_output=True, timeout=T)
    assert r.returncode == 0 and r.stdout.decode().strip() == list(fake.sandboxes)[0], describe(r)
    # options before the verb reach the client too
    r = subprocess.run([sbx_bin, "--url", fake.url, "ls", "-q"], env=dict(env, SBX_URL="http://127.0.0.1:1"),
                       capture_output=True, timeout=T)
    assert r.returncode == 0, describe(r)
    # help lists the client verbs
    r = subprocess.run([sbx_bin, "help"], capture_output=True, timeout=T)
    for verb in (b"create", b"ls", b"info", b"exec", b"cp", b"kill", b"timeout", b"metrics", b"shell"):
        assert b"\n  " + verb + b" " in r.stdout, verb
    # SBX_CLIENT names the client; a wrong one is a clear error
    r = subprocess.run([sbx_bin, "ls"], env=dict(env, SBX_CLIENT="/nonexistent/sbx-client"),
                       capture_output=True, timeout=T)
    one_error_line(r, FAILURE, "SBX_CLIENT")


# ---------------------------------------------------------------- auth and global options

def test_bad_key_is_an_api_error(sbx, fake):
    r = sbx("ls", extra_env={"SBX_API_KEY": "wrong"})
    one_error_line(r, FAILURE, "missing or unknown API key (unauthorized)")


def test_no_key_hints_at_sbx_api_key(sbx, fake):
    env = base_env(fake)
    del env["SBX_API_KEY"]
    r = sbx("ls", env=env)
    one_error_line(r, FAILURE, "(unauthorized)", "SBX_API_KEY")
    assert "Authorization" not in fake.requests[-1][2]


def test_flags_override_env_and_may_follow_the_verb(sbx, fake, sid):
    env = dict(base_env(fake), SBX_URL=f"http://127.0.0.1:{free_port()}", SBX_API_KEY="wrong")
    r = sbx("info", sid, "--url", fake.url, "--key", fake.key, env=env)
    assert json.loads(ok(r).stdout)["id"] == sid
    r = sbx("--url", fake.url, "--key", fake.key, "--json", "info", sid, env=env)
    assert json.loads(ok(r).stdout)["id"] == sid
    assert fake.requests[-1][2]["Authorization"] == "Bearer " + fake.key


def test_unix_socket_url(client_bin, tmp_path):
    path = str(tmp_path / "sbxd.sock")
    f = FakeSbxd(unix_path=path).start()
    try:
        env = dict(base_env(f))
        r = subprocess.run([client_bin, "create"], env=env, capture_output=True, timeout=T)
        assert r.returncode == 0 and r.stdout.decode().strip() in f.sandboxes, describe(r)
        r = subprocess.run([client_bin, "--url", "unix://" + path, "ls", "-q"], env=env, capture_output=True,
                           timeout=T)
        assert r.returncode == 0 and len(r.stdout.split()) == 1, describe(r)
    finally:
        f.stop()


# ---------------------------------------------------------------- sandboxes

def test_create_sends_what_the_options_say(sbx, fake):
    r = sbx("create", "--template", "base", "--timeout", "5m", "--cpus", "0.5", "--memory", "1G",
            "--disk", "512M", "--pids", "64", "-m", "owner=ann", "-m", "job=a b=c", "-e", "A=1",
            "-e", "FROM_HOST", "-e", "UNSET_HERE", extra_env={"FROM_HOST": "héllo"})
    sid = ok(r).stdout.decode().strip()
    assert sid in fake.sandboxes and len(sid) == 32
    assert fake.created[-1] == {"template": "base", "timeout_s": 300, "cpus": 0.5, "memory_mb": 1024,
                                "disk_mb": 512, "pids": 64, "metadata": {"owner": "ann", "job": "a b=c"},
                                "envs": {"A": "1", "FROM_HOST": "héllo"}}
    assert fake.requests[-1][2]["Content-Type"] == "application/json"


def test_create_plain_sends_an_empty_object(sbx, fake):
    ok(sbx("create"))
    assert fake.created == [{}]


def test_create_json_prints_the_sandbox(sbx, fake):
    obj = json.loads(ok(sbx("create", "--json")).stdout)
    assert obj == fake.sandboxes[obj["id"]]


def test_create_api_error_is_message_and_code(sbx):
    r = sbx("create", "--template", "nope")
    lines = one_error_line(r, FAILURE)
    assert lines == ["sbx: unknown template (invalid_request)"]
    assert r.stdout == b""


def test_ls_table_filters_and_json(sbx, fake):
    a = ok(sbx("create", "-m", "team=red & blue", "-m", "ünï=cödé")).stdout.decode().strip()
    b = ok(sbx("create", "-m", "team=green", "--timeout", "2h")).stdout.decode().strip()
    r = ok(sbx("ls"))
    lines = r.stdout.decode().splitlines()
    assert lines[0].split() == ["ID", "STATE", "TEMPLATE", "CREATED", "EXPIRES", "METADATA"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {a, b}
    assert "team=red & blue,ünï=cödé" in rows[a]
    assert "running" in rows[b] and "s ago" in rows[b]
    assert re.search(r" in (1h59m|2h) ", rows[b]), rows[b]

    # metadata filters are escaped into the query, and sbxd applies them
    r = ok(sbx("ls", "-q", "-m", "team=red & blue", "-m", "ünï=cödé"))
    assert r.stdout.decode().split() == [a]
    assert "metadata.team=red%20%26%20blue" in fake.requests[-1][1]

    ok(sbx("kill", b))
    assert ok(sbx("ls", "-q")).stdout.decode().split() == [a]
    assert ok(sbx("ls", "-q", "--state", "deleted")).stdout.decode().split() == [b]
    assert sorted(ok(sbx("ls", "-q", "--state", "all")).stdout.decode().split()) == sorted([a, b])
    raw = json.loads(ok(sbx("ls", "--json", "--state", "all")).stdout)
    assert sorted(s["id"] for s in raw["sandboxes"]) == sorted([a, b])


def test_info_kill_timeout_metrics(sbx, fake, sid):
    info = json.loads(ok(sbx("info", sid)).stdout)
    assert info == fake.sandboxes[sid]
    before = fake.sandboxes[sid]["expires_at"]
    r = ok(sbx("timeout", sid, "2h"))
    assert r.stdout.decode().strip() == fake.sandboxes[sid]["expires_at"] != before
    r = ok(sbx("metrics", sid))
    out = r.stdout.decode()
    assert "cpu        1.500 s" in out and "12 MiB (peak 20 MiB) of 1 GiB" in out and "processes  3" in out
    assert json.loads(ok(sbx("metrics", "--json", sid)).stdout)["processes"] == 3

    r = ok(sbx("kill", sid))
    assert r.stdout == b"" and fake.sandboxes[sid]["state"] == "deleted"
    assert fake.requests[-1][0] == "DELETE"
    one_error_line(sbx("kill", sid), FAILURE, "(conflict)")
    one_error_line(sbx("info", "0" * 32), FAILURE, "no sandbox 00000000000000000000000000000000 (not_found)")


def test_ids_are_escaped_into_the_path(sbx, fake):
    one_error_line(sbx("info", "../x?y"), FAILURE, "(not_found)")
    assert fake.requests[-1][1] == "/v1/sandboxes/..%2Fx%3Fy"


# ---------------------------------------------------------------- exec

def exec_(sbx, sid, *args, **kw):
    return sbx("exec", sid, *args, **kw)


@pytest.mark.parametrize("encoding", ["auto", "base64"])
def test_exec_output_is_byte_exact(sbx, fake, sid, encoding):
    fake.encoding = encoding
    script = r"printf 'a\000b\377\376c\n'; printf 'err\000\n' >&2; printf 'ü\n'"
    r = exec_(sbx, sid, "--", "sh", "-c", script)
    assert r.returncode == 0, describe(r)
    assert r.stdout == b"a\x00b\xff\xfec\n\xc3\xbc\n"
    assert r.stderr == b"err\x00\n"


def test_exec_utf8_chunk_with_nul_is_decoded(sbx, fake, sid):
    fake.script = [{"type": "start", "pid": 7},
                   {"type": "stdout", "data": "x\u0000y\u00e9", "encoding": "utf-8"},
                   {"type": "stderr", "data": base64.b64encode(b"\x00\xff").decode(), "encoding": "base64"},
                   {"type": "end", "exit_code": 0, "signal": None, "timed_out": False, "oom_killed": False,
                    "duration_ms": 1}]
    r = exec_(sbx, sid, "--", "whatever")
    assert r.returncode == 0, describe(r)
    assert r.stdout == b"x\x00y\xc3\xa9" and r.stderr == b"\x00\xff"


def test_exec_large_output(sbx, fake, sid, tmp_path):
    blob = os.urandom(5 << 20)
    (tmp_path / "blob").write_bytes(blob)
    r = exec_(sbx, sid, "--", "cat", str(tmp_path / "blob"))
    assert r.returncode == 0, describe(r)
    assert hashlib.sha256(r.stdout).hexdigest() == hashlib.sha256(blob).hexdigest()


@pytest.mark.parametrize("args,code", [
    (["sh", "-c", "exit 3"], 3),
    (["sh", "-c", "exit 0"], 0),
    (["sh", "-c", "kill -9 $$"], 128 + 9),
    (["sh", "-c", "kill -TERM $$"], 128 + 15),
    (["/nonexistent/cmd"], 127),
])
def test_exec_exit_status(sbx, sid, args, code):
    r = exec_(sbx, sid, "--", *args)
    assert r.returncode == code, describe(r)


def test_exec_argv_goes_unchanged_without_shell(sbx, fake, sid):
    args = ["printf", "%s|", "a b", "$HOME", "'q'", "*", "-l", "--", ""]
    r = exec_(sbx, sid, "--", *args)
    assert r.stdout == b"a b|$HOME|'q'|*|-l|--||", describe(r)
    assert fake.execs[-1] == {"argv": args}


def test_exec_without_double_dash_and_options_after_id(sbx, fake, sid):
    # the command's own options stay the command's
    r = exec_(sbx, sid, "-e", "X=1", "printenv", "X")
    assert r.returncode == 0 and r.stdout == b"1\n", describe(r)
    r = sbx("exec", "-e", "X=2", sid, "sh", "-c", "echo $X; ls -l / >/dev/null")
    assert r.returncode == 0 and r.stdout == b"2\n", describe(r)


def test_exec_c_env_cwd_user_timeout_fields(sbx, fake, sid):
    os.makedirs(os.path.join(fake.root(sid), "work dir"))
    r = exec_(sbx, sid, "-c", "echo \"$A$B\"; pwd", "-e", "A=x", "-e", "B=y z", "-w", "/work dir",
              "-u", "1000", "-t", "30")
    assert r.returncode == 0, describe(r)
    assert fake.execs[-1] == {"cmd": "echo \"$A$B\"; pwd", "envs": {"A": "x", "B": "y z"}, "cwd": "/work dir",
                              "user": 1000, "timeout_s": 30}
    out = r.stdout.decode().splitlines()
    assert out[0] == "xy z" and out[1].endswith("/work dir")
    r = exec_(sbx, sid, "-u", "root", "-t", "0", "-c", "true")
    assert r.returncode == 0, describe(r)
    assert fake.execs[-1] == {"cmd": "true", "user": "root", "timeout_s": 0}


def test_exec_timeout_is_124(sbx, sid):
    t = time.monotonic()
    r = exec_(sbx, sid, "-t", "1", "--", "sleep", "30")
    assert r.returncode == TIMEOUT, describe(r)
    assert b"timeout" in r.stderr and time.monotonic() - t < 20


def test_exec_stdin(sbx, sid):
    data = bytes(range(256)) * 100 + b"\x00end"
    r = exec_(sbx, sid, "-i", "--", "cat", input=data)
    assert r.returncode == 0 and r.stdout == data, describe(r)
    # without -i the command's stdin is not ours
    r = exec_(sbx, sid, "--", "cat", input=b"not sent")
    assert r.returncode == 0 and r.stdout == b"", describe(r)


def test_exec_stdin_too_large_is_refused_before_sending(sbx, fake, sid):
    n = len(fake.requests)
    r = exec_(sbx, sid, "-i", "--", "cat", input=b"x" * ((1 << 20) + 1))
    one_error_line(r, FAILURE, "sbx cp -")
    assert len(fake.requests) == n


def test_exec_background_prints_pid(sbx, fake, sid):
    r = exec_(sbx, sid, "--background", "--", "sleep", "0.2")
    assert r.returncode == 0, describe(r)
    pid = int(r.stdout)
    assert (sid, pid) in fake.commands


def test_exec_streams_as_output_arrives(client_bin, fake, sid):
    p = subprocess.Popen([client_bin, "exec", sid, "--", "sh", "-c", "echo first; sleep 3; echo second"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(fake))
    try:
        t = time.monotonic()
        line = p.stdout.readline()
        assert line == b"first\n"
        assert time.monotonic() - t < 2.5, "the first line waited for the command to end"
        assert p.poll() is None
        assert p.stdout.read() == b"second\n"
        assert p.wait(timeout=T) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_exec_forwards_sigint(client_bin, fake, sid):
    script = 'trap "echo got INT; exit 7" INT; echo ready; while :; do sleep 0.1; done'
    p = subprocess.Popen([client_bin, "exec", sid, "--", "sh", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(fake))
    try:
        assert p.stdout.readline() == b"ready\n"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) == 7
        assert p.stdout.read() == b"got INT\n"
        assert [s[2] for s in fake.signals] == [signal.SIGINT]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_exec_command_ignoring_the_signal_is_killed_after_grace(client_bin, fake, sid):
    p = subprocess.Popen([client_bin, "exec", sid, "--", "sh", "-c", 'trap "" INT; echo ready; sleep 60'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base_env(fake))
    try:
        assert p.stdout.readline() == b"ready\n"
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 128 + signal.SIGKILL
        assert 9 < time.monotonic() - t < 20
        assert b"did not exit within 10s" in p.stderr.read()
        assert len(fake.killed) == 1
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_exec_reader_going_away_kills_the_command(client_bin, fake, sid):
    p = subprocess.Popen([client_bin, "exec", sid, "--", "yes"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=base_env(fake))
    try:
        assert p.stdout.read(10) == b"y\ny\ny\ny\ny\n"
        p.stdout.close()
        assert p.wait(timeout=20) == 128 + signal.SIGPIPE
        assert p.stderr.read() == b""
        assert len(fake.killed) == 1 and fake.killed[0][0] == sid
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_exec_stream_error_line_is_125(sbx, fake, sid):
    fake.script = [{"type": "start", "pid": 5}, {"type": "stdout", "data": "partial", "encoding": "utf-8"},
                   {"type": "error", "code": "unavailable", "message": "sbx-init stopped answering"}]
    r = exec_(sbx, sid, "--", "x")
    assert r.stdout == b"partial"
    assert one_error_line(r, FAILURE) == ["sbx: sbx-init stopped answering (unavailable)"]


def test_exec_stream_without_end_is_125(sbx, fake, sid):
    fake.script = [{"type": "start", "pid": 5}, {"type": "stdout", "data": "x", "encoding": "utf-8"}]
    one_error_line(exec_(sbx, sid, "--", "x"), FAILURE, "before the command's exit status")


def test_exec_malformed_stream_is_125(sbx, fake, sid):
    fake.script = [{"type": "start", "pid": 5}, b"{not json\n"]
    one_error_line(exec_(sbx, sid, "--", "x"), FAILURE, "malformed")
    fake.script = [{"type": "stdout", "data": "!!!", "encoding": "base64"}]
    one_error_line(exec_(sbx, sid, "--", "x"), FAILURE, "base64")


def test_exec_signal_and_oom_and_unknown_lines(sbx, fake, sid):
    end = {"type": "end", "exit_code": None, "signal": 9, "timed_out": False, "oom_killed": True}
    fake.script = [{"type": "start", "pid": 5}, {"type": "future-kind", "x": 1}, end]
    r = exec_(sbx, sid, "--", "x")
    assert r.returncode == 123 and b"out of memory" in r.stderr, describe(r)
    fake.script = [dict(end, oom_killed=False, signal=2)]
    assert exec_(sbx, sid, "--", "x").returncode == 130


def test_exec_api_error(sbx, fake, sid):
    r = exec_(sbx, sid, "-w", "/no/such/dir", "--", "true")
    assert one_error_line(r, FAILURE) == ["sbx: cwd does not exist (invalid_request)"]
    one_error_line(exec_(sbx, "f" * 32, "--", "true"), FAILURE, "(not_found)")


# ---------------------------------------------------------------- cp

def sandbox_file(fake, sid, path):
    return os.path.join(fake.root(sid), path.lstrip("/"))


def test_cp_file_round_trip_byte_exact(sbx, fake, sid, tmp_path):
    data = os.urandom(3 << 20) + b"\x00" * 10
    src = tmp_path / "sp ace ü.bin"
    src.write_bytes(data)
    os.chmod(src, 0o750)
    ok(sbx("cp", str(src), f"{sid}:/tmp/dir with space/ñ.bin"))
    stored = sandbox_file(fake, sid, "/tmp/dir with space/ñ.bin")
    assert open(stored, "rb").read() == data
    assert os.stat(stored).st_mode & 0o777 == 0o750
    assert fake.uploads[-1] == ("/tmp/dir with space/ñ.bin", "length")  # streamed with a Content-Length
    put = [r for r in fake.requests if r[0] == "PUT"][-1]
    assert "path=%2Ftmp%2Fdir%20with%20space%2F%C3%B1.bin" in put[1] and "mode=0750" in put[1]

    back = tmp_path / "back.bin"
    ok(sbx("cp", f"{sid}:/tmp/dir with space/ñ.bin", str(back)))
    assert back.read_bytes() == data
    assert os.stat(back).st_mode & 0o777 == 0o750 & ~current_umask()
    assert [p for p in os.listdir(tmp_path) if ".sbx-" in p] == []  # no temporary left


def current_umask():
    m = os.umask(0)
    os.umask(m)
    return m


def test_cp_into_existing_directory_and_relative_paths(sbx, fake, sid, tmp_path):
    src = tmp_path / "a.txt"
    src.write_bytes(b"hello\n")
    ok(sbx("cp", str(src), f"{sid}:"))  # ID: is the home directory
    assert open(sandbox_file(fake, sid, "/home/user/a.txt"), "rb").read() == b"hello\n"
    ok(sbx("cp", str(src), f"{sid}:sub/"))  # trailing slash: a directory
    assert open(sandbox_file(fake, sid, "/home/user/sub/a.txt"), "rb").read() == b"hello\n"
    ok(sbx("cp", str(src), f"{sid}:renamed.txt"))
    assert os.path.isfile(sandbox_file(fake, sid, "/home/user/renamed.txt"))

    out = tmp_path / "out"
    out.mkdir()
    ok(sbx("cp", f"{sid}:sub/a.txt", str(out)))
    assert (out / "a.txt").read_bytes() == b"hello\n"
    ok(sbx("cp", f"{sid}:renamed.txt", str(tmp_path / "new") + "/"))
    assert (tmp_path / "new" / "renamed.txt").read_bytes() == b"hello\n"


def test_cp_dot_copies_contents_and_user_root_is_passed(sbx, fake, sid, tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"f")
    ok(sbx("cp", "-u", "root", str(src) + "/.", f"{sid}:/dst"))
    assert open(sandbox_file(fake, sid, "/dst/d/f"), "rb").read() == b"f"
    sent = [r[1] for r in fake.requests if "/files" in r[1]]
    assert sent and all("user=root" in u for u in sent), sent
    out = tmp_path / "out"
    out.mkdir()
    ok(sbx("cp", f"{sid}:/dst/.", str(out)))
    assert (out / "d" / "f").read_bytes() == b"f"


def test_cp_directory_round_trip(sbx, fake, sid, tmp_path):
    src = tmp_path / "proj ü"
    (src / "deep" / "er").mkdir(parents=True)
    (src / "empty dir").mkdir()
    (src / "top.txt").write_bytes(b"top\n")
    (src / "deep" / "bin.dat").write_bytes(os.urandom(200000))
    (src / "deep" / "er" / "x.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(src / "deep" / "er" / "x.sh", 0o755)
    os.symlink("/etc/passwd", src / "link")

    r = ok(sbx("cp", str(src), f"{sid}:/srv"))  # /srv does not exist: it becomes the copy
    assert b"skipping symbolic link" in r.stderr and b"link" in r.stderr
    stored = sandbox_file(fake, sid, "/srv")
    assert os.path.isdir(os.path.join(stored, "empty dir"))
    assert not os.path.lexists(os.path.join(stored, "link"))
    assert open(os.path.join(stored, "deep/bin.dat"), "rb").read() == (src / "deep" / "bin.dat").read_bytes()

    ok(sbx("cp", str(src), f"{sid}:/srv"))  # /srv exists now: the copy goes into it
    assert os.path.isfile(os.path.join(stored, "proj ü", "top.txt"))

    dest = tmp_path / "dest"
    dest.mkdir()
    ok(sbx("cp", f"{sid}:/srv", str(dest)))
    got = dest / "srv"
    os.unlink(src / "link")
    cmp = filecmp.dircmp(src, got, ignore=["proj ü"])
    assert not cmp.left_only and not cmp.diff_files, (cmp.left_only, cmp.right_only, cmp.diff_files)
    assert (got / "empty dir").is_dir()
    assert (got / "deep" / "bin.dat").read_bytes() == (src / "deep" / "bin.dat").read_bytes()
    assert os.stat(got / "deep" / "er" / "x.sh").st_mode & 0o777 == 0o755 & ~current_umask()
    assert (got / "proj ü" / "top.txt").read_bytes() == b"top\n"


def test_cp_download_skips_sandbox_symlinks(sbx, fake, sid, tmp_path):
    d = sandbox_file(fake, sid, "/home/user/d")
    os.makedirs(d)
    open(os.path.join(d, "f"), "wb").write(b"f")
    os.symlink("/etc", os.path.join(d, "evil"))
    r = ok(sbx("cp", f"{sid}:d", str(tmp_path / "d")))
    assert b"skipping symbolic link" in r.stderr
    assert sorted(os.listdir(tmp_path / "d")) == ["f"]


def test_cp_stdin_and_stdout(sbx, fake, sid):
    data = os.urandom(300000)
    ok(sbx("cp", "-", f"{sid}:/in.bin", input=data))
    assert open(sandbox_file(fake, sid, "/in.bin"), "rb").read() == data
    assert fake.uploads[-1] == ("/in.bin", "chunked")
    r = ok(sbx("cp", f"{sid}:/in.bin", "-"))
    assert r.stdout == data


def test_cp_errors(sbx, fake, sid, tmp_path):
    one_error_line(sbx("cp", f"{sid}:/nope", str(tmp_path / "x")), FAILURE, "/nope", "(not_found)")
    assert not os.path.exists(tmp_path / "x")
    one_error_line(sbx("cp", str(tmp_path / "missing"), f"{sid}:/x"), FAILURE, "missing", "No such file")
    (tmp_path / "dir").mkdir()
    open(sandbox_file(fake, sid, "/home/user/file"), "wb").write(b"x")
    one_error_line(sbx("cp", str(tmp_path / "dir"), f"{sid}:file"), FAILURE, "non-directory")
    one_error_line(sbx("cp", str(tmp_path / "dir"), f"{'0' * 32}:/x"), FAILURE, "(not_found)")


@pytest.mark.parametrize("direction", ["upload", "download"])
def test_cp_streams_without_holding_the_file(client_bin, fake, sid, tmp_path, direction):
    size = 160 << 20
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(size)
    if direction == "upload":
        args = [str(big), f"{sid}:/big"]
    else:
        os.rename(big, sandbox_file(fake, sid, "/big"))
        args = [f"{sid}:/big", str(tmp_path / "down")]
    # the peak RSS of the client alone, measured by a parent of its own
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
             "print(r, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    r = subprocess.run([sys.executable, "-c", probe, client_bin, "cp", *args], env=base_env(fake),
                       capture_output=True, timeout=120)
    rc, maxrss_kib = map(int, r.stdout.split())
    assert rc == 0, r.stderr
    assert maxrss_kib < 100 * 1024, f"sbx cp of {size >> 20} MiB peaked at {maxrss_kib >> 10} MiB"
    out = sandbox_file(fake, sid, "/big") if direction == "upload" else tmp_path / "down"
    assert os.path.getsize(out) == size
