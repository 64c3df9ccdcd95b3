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

from sbxd_fixture import assert_error, events

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
