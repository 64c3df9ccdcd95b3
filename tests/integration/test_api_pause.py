"""Pause and resume (POST /v1/sandboxes/{id}/pause, /resume): the cgroup
freezer stops every user process; a paused sandbox uses no CPU, keeps its
memory, files and commands, and its timeout clock stops; a resume (or any
call that uses the sandbox) continues exactly where it stopped.

Each promise is tried: a process counting while paused loses and repeats
nothing; a CPU spinner uses no CPU while paused; the clock stands still;
on_timeout "pause" pauses instead of killing; a paused sandbox survives
sbxd's SIGKILL and restart still paused; deleting a paused sandbox leaves
nothing behind; another key cannot pause or resume it."""

import signal
import time

from sbxd_fixture import assert_error, collect, events

MiB = 1 << 20


def state(c, sid):
    return c.get(f"/v1/sandboxes/{sid}").json()


def pause(c, sid):
    r = c.post(f"/v1/sandboxes/{sid}/pause")
    assert r.status_code == 200, r.text
    return r.json()


def resume(c, sid):
    r = c.post(f"/v1/sandboxes/{sid}/resume")
    assert r.status_code == 200, r.text
    return r.json()


def counter_lines(c, sid, pid, want, within=10):
    """The numbers a background counter printed, re-attaching to it."""
    r = c.stream("GET", f"/v1/sandboxes/{sid}/commands/{pid}/stream")
    nums, buf = [], ""
    deadline = time.monotonic() + within
    for _, ev in events(r, until_end=False):
        if ev.get("type") == "stdout":
            buf += ev["data"]
            *done, buf = buf.split("\n")
            nums += [int(x) for x in done if x]
        if len(nums) >= want or time.monotonic() > deadline:
            break
    r.close()
    return nums


def test_pause_stops_the_world_and_resume_continues_it(api):
    sid = api.create()["id"]
    pid = api.background(sid, "i=0; while true; do i=$((i+1)); echo $i; echo $i > /tmp/n; sleep 0.05; done")
    time.sleep(0.5)
    s = pause(api, sid)
    assert s["state"] == "paused" and s["expires_at"] is None and 890 <= s["timeout_remaining_s"] <= 900, s
    assert pause(api, sid)["state"] == "paused"  # pausing twice is fine
    # frozen: the counter's file does not move (read from the host side: metrics)
    m1 = api.get(f"/v1/sandboxes/{sid}/metrics").json()
    time.sleep(1.0)
    m2 = api.get(f"/v1/sandboxes/{sid}/metrics").json()
    assert m2["cpu_seconds"] - m1["cpu_seconds"] < 0.02, (m1, m2)
    assert state(api, sid)["state"] == "paused"  # inspecting does not wake it
    listed = api.get("/v1/sandboxes").json()["sandboxes"]
    assert [x["state"] for x in listed if x["id"] == sid] == ["paused"]
    assert api.get("/v1/sandboxes?state=paused").json()["sandboxes"][0]["id"] == sid
    assert api.get("/v1/sandboxes?state=running").json()["sandboxes"] == []
    r = resume(api, sid)
    assert r["state"] == "running" and r["expires_at"] is not None
    # every number once, in order, across the pause
    nums = counter_lines(api, sid, pid, want=40)
    assert nums == list(range(nums[0], nums[0] + len(nums))), nums
    api.delete(f"/v1/sandboxes/{sid}/commands/{pid}")


def test_paused_sandbox_uses_no_cpu(api):
    sid = api.create(cpus=1)["id"]
    api.background(sid, "while :; do :; done")
    time.sleep(0.5)
    pause(api, sid)
    a = api.get(f"/v1/sandboxes/{sid}/metrics").json()["cpu_seconds"]
    time.sleep(1.5)
    b = api.get(f"/v1/sandboxes/{sid}/metrics").json()["cpu_seconds"]
    assert b - a < 0.02, (a, b)
    resume(api, sid)
    time.sleep(1.0)
    c = api.get(f"/v1/sandboxes/{sid}/metrics").json()["cpu_seconds"]
    assert c - b > 0.3, (b, c)


def test_any_use_resumes_and_files_survive(api):
    sid = api.create()["id"]
    api.put_file(sid, "keep.txt", b"still here\x00\xff")
    api.background(sid, "sleep 600")
    pause(api, sid)
    assert api.get_file(sid, "keep.txt") == b"still here\x00\xff"  # a file call wakes it
    assert state(api, sid)["state"] == "running"
    pause(api, sid)
    assert api.sh(sid, "echo awake; pgrep -c sleep") == "awake\n1\n"
    assert state(api, sid)["state"] == "running"
    assert resume(api, sid)["state"] == "running"  # resuming a running one is fine


def test_the_clock_stops_while_paused(api):
    sid = api.create(timeout_s=3)["id"]
    pause(api, sid)
    time.sleep(4)  # past the timeout: a paused sandbox does not expire
    s = state(api, sid)
    assert s["state"] == "paused" and s["timeout_remaining_s"] >= 2, s
    # a new timeout while paused counts from the resume
    r = api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 60})
    assert r.status_code == 200 and r.json()["state"] == "paused" and r.json()["timeout_remaining_s"] == 60, r.text
    r = resume(api, sid)
    left = (time.mktime(time.strptime(r["expires_at"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime()))
    assert 50 <= left <= 61, r


def test_on_timeout_pause(api):
    sid = api.create(timeout_s=1, on_timeout="pause")["id"]
    assert state(api, sid)["on_timeout"] == "pause"
    deadline = time.monotonic() + 10
    while state(api, sid)["state"] != "paused" and time.monotonic() < deadline:
        time.sleep(0.1)
    s = state(api, sid)
    assert s["state"] == "paused" and s["timeout_remaining_s"] == 1, s
    assert api.sh(sid, "echo back") == "back\n"
    assert_error(api.create_raw({"on_timeout": "sleep"}), 400, "invalid_request")


def test_other_key_cannot_pause(api, other):
    sid = api.create()["id"]
    assert_error(other.post(f"/v1/sandboxes/{sid}/pause"), 404, "not_found")
    pause(api, sid)
    assert_error(other.post(f"/v1/sandboxes/{sid}/resume"), 404, "not_found")
    assert_error(api.post(f"/v1/sandboxes/{sid}/pause", json={"bogus": 1}), 400, "invalid_request")
    assert api.delete(f"/v1/sandboxes/{sid}").status_code == 204  # deleting a paused sandbox
    assert_error(api.post(f"/v1/sandboxes/{sid}/resume"), 409, "conflict")


def test_paused_survives_sigkill_restart(make_sbxd):
    d = make_sbxd()
    c = d.client()
    sid = c.create()["id"]
    pid = c.background(sid, "i=0; while true; do i=$((i+1)); echo $i; sleep 0.05; done")
    time.sleep(0.3)
    pause(c, sid)
    d.stop(signal.SIGKILL)
    time.sleep(0.5)
    d.start()
    c = d.client()
    assert state(c, sid)["state"] == "paused"
    assert "paused=1" in d.log()
    resume(c, sid)
    nums = counter_lines(c, sid, pid, want=20)
    assert nums == list(range(nums[0], nums[0] + len(nums))), nums
    pause(c, sid)  # and delete it paused: nothing may be left (checked at close)


class Reader:
    """Reads a command's ndjson stream in a thread: (arrival time, number)
    for each line of a counter, so a test can say when output flowed."""

    def __init__(self, c, sid, pid):
        import threading
        self.resp = c.stream("GET", f"/v1/sandboxes/{sid}/commands/{pid}/stream")
        self.got, self.end = [], None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        buf = ""
        try:
            for t, ev in events(self.resp):
                if ev.get("type") == "stdout":
                    buf += ev["data"]
                    *done, buf = buf.split("\n")
                    self.got += [(t, int(x)) for x in done if x]
                elif ev.get("type") == "end":
                    self.end = ev
        except Exception:  # the connection closed at the end of the test
            pass

    def wait(self, n, within=10):
        deadline = time.monotonic() + within
        while len(self.got) < n and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.got) >= n, self.got

    def close(self):
        self.resp.close()


def test_a_stream_attached_before_the_pause_goes_on_after_it(api):
    """The same connection, held across the pause: nothing arrives while
    paused, then the numbers go on from where they stopped, none lost or
    repeated; a file the counter holds open keeps every line too."""
    sid = api.create()["id"]
    pid = api.background(sid, "exec 3>>/tmp/log; i=0; while true; do i=$((i+1)); echo $i; echo $i >&3; "
                              "sleep 0.05; done")
    rd = Reader(api, sid, pid)
    rd.wait(10)
    pause(api, sid)
    t_paused = time.monotonic()
    n_at_pause = len(rd.got)
    time.sleep(1.5)
    t_resume = time.monotonic()
    during = [n for t, n in rd.got if t_paused + 0.3 < t < t_resume]
    assert during == [], during  # frozen: no output while paused
    assert len(rd.got) <= n_at_pause + 2, (n_at_pause, rd.got[-5:])
    resume(api, sid)
    rd.wait(len(rd.got) + 20)
    nums = [n for _, n in rd.got]
    assert nums == list(range(1, len(nums) + 1)), nums
    after = [t for t, _ in rd.got if t > t_resume]
    assert after, rd.got[-5:]
    rd.close()
    api.delete(f"/v1/sandboxes/{sid}/commands/{pid}")
    # the descriptor it held open got every number, in order, across the pause
    logged = [int(x) for x in api.get_file(sid, "/tmp/log").decode().split()]
    assert logged[:len(nums)] == nums, (logged[:5], nums[:5])


def test_a_commands_timeout_does_not_run_while_paused(api):
    """A command's own timeout_s counts the time it could run: paused for
    longer than its timeout, it still finishes normally; and one that
    overruns still times out, not at the resume but when its time is up.
    (The work is many short sleeps, not one: a kernel timer runs on while
    a process is frozen, so a single `sleep 2` would return at the thaw.)"""
    sid = api.create()["id"]
    ok = api.background(sid, "for i in $(seq 20); do sleep 0.1; done; echo finished", timeout_s=4)
    late = api.background(sid, "sleep 60", timeout_s=2)
    time.sleep(0.8)
    pause(api, sid)
    time.sleep(4.5)  # past both timeouts, but the sandbox was frozen
    assert state(api, sid)["state"] == "paused"
    resume(api, sid)
    t0 = time.monotonic()
    with api.stream("GET", f"/v1/sandboxes/{sid}/commands/{late}/stream") as r:
        evs, _, _ = collect(r)
    end, waited = evs[-1], time.monotonic() - t0
    assert end["timed_out"] and end["signal"] == 9, end
    # it had ~1.2 s left at the pause: killed about that long after the
    # resume, not at once (as if the pause had counted)
    assert 0.6 < waited < 4.0, waited
    with api.stream("GET", f"/v1/sandboxes/{sid}/commands/{ok}/stream") as r:
        evs, so, _ = collect(r)
    end = evs[-1]
    assert so == b"finished\n" and end["exit_code"] == 0 and not end["timed_out"], evs
