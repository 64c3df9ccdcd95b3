"""sbxd REST API: commands (foreground, streamed, background), their I/O,
signals, timeouts and the killing of process trees."""

import base64
import os
import threading
import time

import pytest

from sbxd_fixture import NDJSON, assert_error, collect, event_data, events, out

MiB = 1 << 20
REPLY_FIELDS = {"pid", "exit_code", "signal", "stdout", "stdout_encoding", "stdout_truncated",
                "stderr", "stderr_encoding", "stderr_truncated", "timed_out", "oom_killed", "duration_ms"}


def cmd_url(sid, rest=""):
    return f"/v1/sandboxes/{sid}/commands{rest}"


def sleeps(api, sid):
    """pids of `sleep` processes in the sandbox, as pgrep run in the sandbox sees them."""
    res = api.run(sid, ["pgrep", "-x", "sleep"], user="root")
    assert res["exit_code"] in (0, 1), res
    return res["stdout"].split()


def wait_until(pred, within, step=0.05):
    deadline = time.monotonic() + within
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


# --------------------------------------------------------------------------
# foreground


def test_reply_fields_and_shell_cmd(api, sandbox):
    res = api.run(sandbox["id"], "echo $HOME; echo $0")
    assert set(res) == REPLY_FIELDS, set(res) ^ REPLY_FIELDS
    assert res["stdout"] == "/home/user\n/bin/sh\n"
    assert res["exit_code"] == 0 and res["signal"] is None
    assert res["timed_out"] is False and res["oom_killed"] is False
    assert res["stdout_truncated"] is False and res["stderr_truncated"] is False
    assert isinstance(res["pid"], int) and res["pid"] > 1
    assert isinstance(res["duration_ms"], int) and 0 <= res["duration_ms"] < 10000


def test_argv_is_not_shell_interpreted(api, sandbox):
    args = ["a b", "'quoted'", '"dq"', "$HOME", "*", ";echo pwned", "`id`", "", "back\\slash", "ü"]
    res = api.run(sandbox["id"], ["printf", "[%s]", *args])
    assert res["exit_code"] == 0, res
    assert res["stdout"] == "".join(f"[{a}]" for a in args)
    # the same through cmd IS shell-interpreted
    res = api.run(sandbox["id"], "printf '[%s]' $HOME")
    assert res["stdout"] == "[/home/user]"


@pytest.mark.parametrize("body", [{}, {"argv": []}, {"cmd": "true", "argv": ["true"]}, {"cmd": 5},
                                  {"argv": "true"}, {"argv": ["true", 1]}, {"cmd": "true", "bogus": 1},
                                  {"cmd": "true", "user": "nobody-such"}, {"cmd": "true", "user": 70000},
                                  {"cmd": "true", "user": -1}, {"cmd": "true", "timeout_s": -1},
                                  {"cmd": "true", "timeout_s": 28801}, {"cmd": "true", "background": "yes"},
                                  {"cmd": "cat", "stdin": "a", "stdin_base64": "YQ=="},
                                  {"cmd": "cat", "stdin_base64": "not base64!"},
                                  {"cmd": "true", "envs": {"A": 1}}, {"cmd": "true", "cwd": 5}])
def test_bad_command_body_is_400(api, sandbox, body):
    r = api.post(cmd_url(sandbox["id"]), json=body)
    assert_error(r, 400, "invalid_request")


@pytest.mark.parametrize("code", [0, 1, 42, 255])
def test_exit_codes(api, sandbox, code):
    res = api.run(sandbox["id"], f"exit {code}")
    assert res["exit_code"] == code and res["signal"] is None


@pytest.mark.parametrize("sig", [9, 15])
def test_signal_death(api, sandbox, sig):
    res = api.run(sandbox["id"], f"echo before; kill -{sig} $$; echo after")
    assert res["exit_code"] is None, res
    assert res["signal"] == sig, res
    assert res["stdout"] == "before\n"
    assert res["timed_out"] is False


def test_stdout_and_stderr_are_separate(api, sandbox):
    res = api.run(sandbox["id"], "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert res["stdout"] == "out1\nout2\n" and res["stderr"] == "err1\nerr2\n"
    assert res["stdout_encoding"] == res["stderr_encoding"] == "utf-8"


def test_non_utf8_output_is_base64_and_byte_exact(api, sandbox):
    sid = sandbox["id"]
    res = api.run(sid, r"printf 'a\000b\377c\n'; printf 'ok \342\202\254\n' >&2")
    assert res["stdout_encoding"] == "base64", res
    assert out(res, "stdout") == b"a\x00b\xffc\n"
    assert res["stderr_encoding"] == "utf-8" and res["stderr"] == "ok \u20ac\n"
    # a larger random blob through cat
    blob = os.urandom(300_000) + b"\x00\xff\x00"
    api.put_file(sid, "blob.bin", blob)
    res = api.run(sid, ["cat", "blob.bin"])
    assert res["stdout_encoding"] == "base64" and out(res, "stdout") == blob
    # a UTF-8 sequence cut in half is not valid UTF-8 either
    res = api.run(sid, r"printf '\342\202'")
    assert res["stdout_encoding"] == "base64" and out(res, "stdout") == b"\xe2\x82"


def test_envs_sandbox_level_and_per_command(api):
    s = api.create(envs={"A": "sandbox-a", "B": "sandbox-b", "PATH_EXTRA": "x"})
    sid = s["id"]
    res = api.run(sid, 'printf "%s|%s|%s|%s|%s" "$A" "$B" "${C-unset}" "$HOME" "$USER"',
                  envs={"B": "cmd-b", "C": "cmd-c"})
    assert res["stdout"] == "sandbox-a|cmd-b|cmd-c|/home/user|user", res
    # the per-command value does not stick
    assert api.sh(sid, 'printf "%s|%s" "$B" "${C-unset}"') == "sandbox-b|unset"
    # argv gets the environment too, and an override can even change PATH
    res = api.run(sid, ["sh", "-c", 'echo "$A $PATH"'], envs={"PATH": "/usr/bin:/bin"})
    assert res["stdout"] == "sandbox-a /usr/bin:/bin\n"


def test_cwd(api, sandbox):
    sid = sandbox["id"]
    assert api.sh(sid, "pwd") == "/home/user\n"
    api.sh(sid, "mkdir -p 'sub dir/x'")
    assert api.sh(sid, "pwd", cwd="sub dir/x") == "/home/user/sub dir/x\n"
    assert api.sh(sid, "pwd", cwd="/tmp") == "/tmp\n"
    assert api.run(sid, ["pwd"], cwd="/")["stdout"] == "/\n"
    for bad in ("no-such-dir", "/no/such/dir"):
        r = api.post(cmd_url(sid), json={"cmd": "pwd", "cwd": bad})
        assert_error(r, 400, "invalid_request")
    # a file is not a directory
    api.put_file(sid, "afile", b"x")
    assert api.post(cmd_url(sid), json={"cmd": "pwd", "cwd": "afile"}).status_code == 400


def test_user(api, sandbox):
    sid = sandbox["id"]
    assert api.sh(sid, "id -u; id -g; echo $HOME") == "1000\n1000\n/home/user\n"
    assert api.sh(sid, "id -u", user="user") == "1000\n"
    root = api.sh(sid, "id -u; echo $HOME; pwd", user="root").split()
    assert root[0] == "0", root
    assert api.sh(sid, "id -u", user=0) == "0\n"
    assert api.sh(sid, "id -u", user=4321) == "4321\n"
    # the default user really cannot do root things
    assert api.run(sid, "touch /etc/x")["exit_code"] != 0
    assert api.run(sid, "touch /etc/x", user="root")["exit_code"] == 0


def test_stdin(api, sandbox):
    sid = sandbox["id"]
    res = api.run(sid, "cat", stdin="hello\nwörld")
    assert res["stdout"] == "hello\nwörld"
    data = b"\x00\xff\x01binary\x00" * 1000
    res = api.run(sid, ["cat"], stdin_base64=base64.b64encode(data).decode())
    assert out(res, "stdout") == data
    # as much as the 1 MiB JSON body allows
    res = api.run(sid, "wc -c", stdin_base64=base64.b64encode(os.urandom(700_000)).decode())
    assert res["stdout"].strip() == "700000"
    # no stdin: EOF at once, cat does not hang
    t = time.monotonic()
    res = api.run(sid, "cat; echo done", timeout_s=10)
    assert res["stdout"] == "done\n" and res["timed_out"] is False
    assert time.monotonic() - t < 5


def test_timeout_kills_the_process_tree(api, sandbox):
    sid = sandbox["id"]
    t = time.monotonic()
    res = api.run(sid, "sleep 100 & sleep 100 & echo started; wait", timeout_s=1)
    took = time.monotonic() - t
    assert res["timed_out"] is True, res
    assert res["exit_code"] is None and res["signal"] == 9, res
    assert res["stdout"] == "started\n"
    assert took < 4, f"a 1 s timeout took {took:.1f} s"
    assert 900 <= res["duration_ms"] < 4000, res
    assert wait_until(lambda: sleeps(api, sid) == [], 2), f"sleeps left: {sleeps(api, sid)}"


def test_timeout_kills_descendants_that_left_the_group(api, sandbox):
    """The timeout kills the tree like DELETE does: a setsid child too.
    Several rounds: killing a tree is racy."""
    sid = sandbox["id"]
    for i in range(4):
        res = api.run(sid, "setsid sleep 300 & sh -c 'sleep 300 & wait' & wait", timeout_s=1)
        assert res["timed_out"] is True, res
        left = wait_until(lambda: sleeps(api, sid) == [], 2) or sleeps(api, sid)
        if left is not True:
            ps = api.sh(sid, "ps -eo pid,ppid,pgid,sid,args")
            api.run(sid, "pkill -9 -x sleep")
            raise AssertionError(f"round {i}: sleeps left after the timeout: {left}\n{ps}")


def test_command_not_found_is_127(api, sandbox):
    sid = sandbox["id"]
    res = api.run(sid, ["/no/such/program", "arg"])
    assert res["exit_code"] == 127, res
    assert res["stderr"], "the reason belongs in stderr"
    res = api.run(sid, ["no-such-program-anywhere"])
    assert res["exit_code"] == 127, res
    res = api.run(sid, "no-such-program-anywhere")
    assert res["exit_code"] == 127, res
    api.put_file(sid, "notexec.sh", b"#!/bin/sh\necho hi\n", mode="0644")
    res = api.run(sid, ["./notexec.sh"])
    assert res["exit_code"] == 126, res
    assert res["stderr"]


def test_output_over_8mib_is_truncated_at_exactly_8mib(api, sandbox):
    sid = sandbox["id"]
    res = api.run(sid, "head -c 9437184 /dev/zero | tr '\\0' a; echo tail-of-run >&2", timeout_s=30)
    assert res["stdout_truncated"] is True, {k: v for k, v in res.items() if k != "stdout"}
    assert len(out(res, "stdout")) == 8 * MiB
    assert out(res, "stdout") == b"a" * (8 * MiB)
    # the command ran on to its end, unblocked
    assert res["exit_code"] == 0 and res["stderr"] == "tail-of-run\n"
    assert res["stderr_truncated"] is False


def test_output_of_exactly_8mib_is_not_truncated(api, sandbox):
    res = api.run(sandbox["id"], "head -c 8388608 /dev/zero | tr '\\0' b", timeout_s=30)
    assert res["stdout_truncated"] is False
    assert len(res["stdout"]) == 8 * MiB


def test_output_flood_on_both_streams(api, sandbox):
    res = api.run(sandbox["id"], "head -c 12000000 /dev/zero >&2 & head -c 12000000 /dev/urandom; wait",
                  timeout_s=30)
    assert res["exit_code"] == 0
    assert res["stdout_truncated"] and res["stderr_truncated"]
    assert len(out(res, "stdout")) == 8 * MiB and out(res, "stderr") == b"\0" * (8 * MiB)


# --------------------------------------------------------------------------
# ndjson


def test_ndjson_stream_in_order_and_live(api, sandbox):
    sid = sandbox["id"]
    t0 = time.monotonic()
    with api.stream("POST", cmd_url(sid), json={"cmd": "echo a; sleep 1; echo b >&2; sleep 0.3; echo c"}) as r:
        assert r.status_code == 200
        assert r.headers["Content-Type"].startswith(NDJSON)
        got = list(events(r))
    kinds = [e["type"] for _, e in got]
    assert kinds == ["start", "stdout", "stderr", "stdout", "end"], got
    (t_start, start), (t_a, a), (t_b, b), (t_c, c), (t_end, end) = got
    assert isinstance(start["pid"], int)
    assert event_data(a) == b"a\n" and event_data(b) == b"b\n" and event_data(c) == b"c\n"
    assert end["exit_code"] == 0 and end["signal"] is None and end["timed_out"] is False
    assert end["oom_killed"] is False and end["duration_ms"] >= 1300
    assert t_a - t0 < 0.6, f"first output arrived {t_a - t0:.2f} s after the request"
    assert t_b - t_a > 0.8 and t_end - t_a > 1.1, "events did not arrive as they happened"


def test_ndjson_binary_chunks_and_exit_status(api, sandbox):
    with api.stream("POST", cmd_url(sandbox["id"]), json={"cmd": r"printf '\377\000x'; kill -9 $$"}) as r:
        evs, so, se = collect(r)
    assert so == b"\xff\x00x"
    assert all(e["encoding"] == "base64" for e in evs if e["type"] == "stdout")
    assert evs[-1]["type"] == "end" and evs[-1]["exit_code"] is None and evs[-1]["signal"] == 9


def test_ndjson_timeout(api, sandbox):
    with api.stream("POST", cmd_url(sandbox["id"]), json={"cmd": "echo x; sleep 30", "timeout_s": 1}) as r:
        evs, so, _ = collect(r)
    assert so == b"x\n"
    assert evs[-1]["type"] == "end" and evs[-1]["timed_out"] is True, evs


# --------------------------------------------------------------------------
# background


def list_cmds(api, sid):
    r = api.get(cmd_url(sid))
    assert r.status_code == 200, r.text
    return {c["pid"]: c for c in r.json()["commands"]}


def test_background_list_and_reattach(api, sandbox):
    sid = sandbox["id"]
    r = api.post(cmd_url(sid), json={"cmd": "for i in 1 2 3 4; do echo line$i; sleep 0.5; done; exit 3",
                                      "background": True})
    assert r.status_code == 201, r.text
    assert set(r.json()) == {"pid"}
    pid = r.json()["pid"]
    c = list_cmds(api, sid)[pid]
    assert c["running"] is True and c["background"] is True, c
    assert c["argv"] == ["/bin/sh", "-c", "for i in 1 2 3 4; do echo line$i; sleep 0.5; done; exit 3"]
    assert c["exit_code"] is None and c["signal"] is None and isinstance(c["started_at"], str)
    time.sleep(0.8)  # line1 and line2 are out before anybody listens
    t0 = time.monotonic()
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        got = list(events(s))
    kinds = [e["type"] for _, e in got]
    assert kinds[0] == "start" and got[0][1]["pid"] == pid
    assert kinds[-1] == "end" and got[-1][1]["exit_code"] == 3, got
    assert "dropped" not in kinds
    data = b"".join(event_data(e) for _, e in got if e["type"] == "stdout")
    assert data == b"line1\nline2\nline3\nline4\n"
    # the buffered lines came at once, the later ones live
    first = next(t for t, e in got if e["type"] == "stdout")
    assert first - t0 < 0.4
    assert got[-1][0] - t0 > 0.6
    c = list_cmds(api, sid)[pid]
    assert c["running"] is False and c["exit_code"] == 3
    # a finished command replays everything and ends
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, so, _ = collect(s)
    assert so == b"line1\nline2\nline3\nline4\n" and evs[-1]["type"] == "end" and evs[-1]["exit_code"] == 3


def test_background_ndjson_start(api, sandbox):
    """A background command asked for with ndjson streams; leaving the stream
    does not end the command."""
    sid = sandbox["id"]
    with api.stream("POST", cmd_url(sid), json={"cmd": "echo hi; sleep 2; echo bye", "background": True}) as s:
        it = events(s)
        _, first = next(it)
        assert first["type"] == "start"
        pid = first["pid"]
        _, second = next(it)
        assert second["type"] == "stdout" and event_data(second) == b"hi\n"
    assert list_cmds(api, sid)[pid]["running"] is True
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, so, _ = collect(s)
    assert so == b"hi\nbye\n" and evs[-1]["exit_code"] == 0


def test_stdin_to_a_background_command(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, ["cat"])
    parts = [b"hello ", b"\x00\xff binary\n", os.urandom(200_000)]
    for p in parts:
        r = api.post(cmd_url(sid, f"/{pid}/stdin"), data=p, headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 204, r.text
    assert list_cmds(api, sid)[pid]["running"] is True, "cat ended before stdin was closed"
    assert api.post(cmd_url(sid, f"/{pid}/stdin/close")).status_code == 204
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, so, _ = collect(s)
    assert so == b"".join(parts)
    assert evs[-1]["type"] == "end" and evs[-1]["exit_code"] == 0
    assert_error(api.post(cmd_url(sid, f"/{pid}/stdin"), data=b"late"), 409, "conflict")


def test_stdin_after_close_is_409(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "cat >/dev/null; sleep 30")
    assert api.post(cmd_url(sid, f"/{pid}/stdin"), data=b"x").status_code == 204
    assert api.post(cmd_url(sid, f"/{pid}/stdin/close")).status_code == 204
    assert_error(api.post(cmd_url(sid, f"/{pid}/stdin"), data=b"y"), 409, "conflict")


def test_background_with_stdin_given_closes_it(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "cat", stdin="given\n")
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, so, _ = collect(s)
    assert so == b"given\n" and evs[-1]["exit_code"] == 0


@pytest.mark.parametrize("sig", ["SIGTERM", "TERM", 15])
def test_signal_endpoint(api, sandbox, sig):
    sid = sandbox["id"]
    pid = api.background(sid, "echo up; sleep 100")
    r = api.post(cmd_url(sid, f"/{pid}/signal"), json={"signal": sig})
    assert r.status_code == 204, r.text
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, _, _ = collect(s)
    end = evs[-1]
    assert end["type"] == "end" and end["exit_code"] is None and end["signal"] == 15, evs
    assert wait_until(lambda: sleeps(api, sid) == [], 2), "the signal went to the shell only"


@pytest.mark.parametrize("sig", ["SIGFOO", "", "KILLME", 0, 65, -9, 99, None, [15], "15x"])
def test_bad_signal_is_400(api, sandbox, sig):
    sid = sandbox["id"]
    pid = api.background(sid, "sleep 100")
    assert_error(api.post(cmd_url(sid, f"/{pid}/signal"), json={"signal": sig}), 400, "invalid_request")
    assert list_cmds(api, sid)[pid]["running"] is True


def test_signal_other_names(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done")
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        it = events(s)
        while True:
            _, e = next(it)
            if e["type"] == "stdout" and b"ready" in event_data(e):
                break
        assert api.post(cmd_url(sid, f"/{pid}/signal"), json={"signal": "SIGUSR1"}).status_code == 204
        rest = [e for _, e in it]
    assert b"got-usr1" in b"".join(event_data(e) for e in rest if e["type"] == "stdout")
    assert rest[-1]["type"] == "end" and rest[-1]["exit_code"] == 7


@pytest.mark.parametrize("script,rounds", [("sleep 300 & sleep 300 & wait", 3),
                                           ("setsid sleep 300 & sh -c 'sleep 300 & wait' & wait", 10)])
def test_delete_command_kills_the_whole_tree(api, sandbox, script, rounds):
    """DELETE kills the process group and every descendant, also one that
    left the group (setsid).  Several rounds: killing a tree is racy."""
    sid = sandbox["id"]
    for i in range(rounds):
        pid = api.background(sid, ["sh", "-c", script])
        assert wait_until(lambda: len(sleeps(api, sid)) == 2, 3), sleeps(api, sid)
        r = api.delete(cmd_url(sid, f"/{pid}"))
        assert r.status_code == 204, r.text
        left = wait_until(lambda: sleeps(api, sid) == [], 2) or sleeps(api, sid)
        if left is not True:
            ps = api.sh(sid, "ps -eo pid,ppid,pgid,sid,args")
            raise AssertionError(f"round {i}: sleeps left after DELETE: {left}\n{ps}")
        c = wait_until(lambda: (lambda c: c if not c["running"] else None)(list_cmds(api, sid)[pid]), 2)
        assert c and c["signal"] == 9 and c["exit_code"] is None, list_cmds(api, sid)[pid]


def test_unknown_pid_is_404(api, sandbox):
    sid = sandbox["id"]
    for method, rest, kw in [("GET", "/4242/stream", {}), ("POST", "/4242/stdin", {"data": b"x"}),
                             ("POST", "/4242/stdin/close", {}),
                             ("POST", "/4242/signal", {"json": {"signal": "TERM"}}),
                             ("DELETE", "/4242", {}), ("GET", "/notapid/stream", {}),
                             ("DELETE", "/1", {})]:
        r = api.req(method, cmd_url(sid, rest), **kw)
        assert_error(r, 404, "not_found")


def test_ops_on_a_finished_command(api, sandbox):
    sid = sandbox["id"]
    pid = api.run(sid, "echo done")["pid"]
    assert_error(api.post(cmd_url(sid, f"/{pid}/stdin"), data=b"x"), 409, "conflict")
    assert_error(api.post(cmd_url(sid, f"/{pid}/signal"), json={"signal": "TERM"}), 409, "conflict")
    c = list_cmds(api, sid)[pid]
    assert c["running"] is False and c["background"] is False and c["exit_code"] == 0


def test_background_is_not_limited_by_default_but_is_with_timeout(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "sleep 30", timeout_s=1)
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, _, _ = collect(s)
    assert evs[-1]["timed_out"] is True and evs[-1]["signal"] == 9
    pid2 = api.background(sid, "sleep 3")
    time.sleep(1.5)
    assert list_cmds(api, sid)[pid2]["running"] is True


def test_commands_run_concurrently(api, sandbox):
    """Two foreground commands in one sandbox do not serialize."""
    sid = sandbox["id"]
    results = []

    def one():
        results.append(api.daemon.client().run(sid, "sleep 1; echo ok"))

    t = time.monotonic()
    ths = [threading.Thread(target=one) for _ in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert [r["stdout"] for r in results] == ["ok\n"] * 4
    assert time.monotonic() - t < 2.5


def test_reattach_after_more_than_1mib_reports_dropped(api, sandbox):
    """sbx-init keeps the last 1 MiB per command: a late re-attach gets a
    "dropped" event for the older output, then exactly the newest bytes."""
    sid = sandbox["id"]
    total = 3 * MiB
    pid = api.background(sid, f"head -c {total} /dev/urandom | od -An -v -tx1 | head -c {total}")
    deadline = time.monotonic() + 20
    while list_cmds(api, sid)[pid]["running"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream")) as s:
        evs, so, _ = collect(s)
    dropped = [e for e in evs if e["type"] == "dropped"]
    assert len(dropped) == 1, [e["type"] for e in evs]
    assert dropped[0]["bytes"] + len(so) == total, (dropped[0], len(so))
    assert MiB // 2 <= len(so) <= MiB
    kinds = [e["type"] for e in evs]
    assert kinds.index("dropped") < kinds.index("stdout")
    assert evs[-1]["type"] == "end" and evs[-1]["exit_code"] == 0


def test_stream_ends_with_error_when_the_sandbox_is_deleted(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "echo up; sleep 60")
    with api.stream("GET", cmd_url(sid, f"/{pid}/stream"), timeout=20) as s:
        it = events(s)
        _, first = next(it)
        assert first["type"] == "start"
        t = time.monotonic()
        threading.Timer(0.5, lambda: api.daemon.client().delete(f"/v1/sandboxes/{sid}")).start()
        rest = [e for _, e in it]
        took = time.monotonic() - t
    assert rest and rest[-1]["type"] in ("error", "end"), rest
    if rest[-1]["type"] == "error":
        assert isinstance(rest[-1]["code"], str) and isinstance(rest[-1]["message"], str)
    assert took < 5, f"the stream took {took:.1f} s to notice the sandbox was deleted"


def test_silent_stream_gets_keepalive_blank_lines(api, sandbox):
    """A streamed command that prints nothing still sends a blank line every
    ~5 s: the thread serving it notices a client that left (and sbxd can stop)
    instead of waiting for output that a sleeping or paused command never
    writes.  Clients skip blank lines (docs/api.md)."""
    sid = sandbox["id"]
    pid = api.background(sid, "sleep 60")
    t0 = time.monotonic()
    got = None
    with api.stream("GET", f"/v1/sandboxes/{sid}/commands/{pid}/stream") as r:
        assert r.status_code == 200
        for line in r.iter_lines(chunk_size=1):
            if line == b"":
                got = time.monotonic() - t0
                break
            assert time.monotonic() - t0 < 15, line
    assert got is not None and 3 < got < 8, got
    assert api.delete(f"/v1/sandboxes/{sid}/commands/{pid}").status_code in (200, 204)
