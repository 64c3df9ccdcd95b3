"""sbxd restart safety and health checks.

Sandboxes outlive sbxd on purpose: after SIGKILL or SIGTERM the next sbxd
with the same --home re-attaches (same sandboxes, files, running commands,
buffered output).  A sandbox whose sbx-init died while sbxd was down is
recorded "failed" and cleaned up; one whose sbx-init stops answering is
found "unhealthy" by the health checks, without slowing anybody else down.
"""

import os
import signal
import threading
import time

from sbxd_fixture import Client, event_data, events, init_pid, leftovers, procs_of

COUNTER = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.2; done"


def counter_values(api, sid, pid, listen=0.6):
    """Re-attach to the counter command; return the numbers seen within `listen` s
    after the first live line (replay first, then live)."""
    seen = []
    buf = b""
    with api.stream("GET", f"/v1/sandboxes/{sid}/commands/{pid}/stream", timeout=10) as s:
        t_end = None
        for t, e in events(s):
            assert e["type"] in ("start", "stdout", "dropped"), e
            if e["type"] == "stdout":
                buf += event_data(e)
                *lines, buf = buf.split(b"\n")
                seen += [int(x) for x in lines]
                if t_end is None:
                    t_end = t + listen
                if t > t_end:
                    break
    return seen


def check_restarted(api, d, sid, pid, blob, down_s):
    listed = [s["id"] for s in api.get("/v1/sandboxes").json()["sandboxes"]]
    assert sid in listed, f"sandbox not listed running after restart: {listed}"
    assert api.sandbox(sid)["state"] == "running"
    assert api.get_file(sid, "state/blob.bin") == blob
    cmds = {c["pid"]: c for c in api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]}
    assert pid in cmds and cmds[pid]["running"] is True, cmds
    seen = counter_values(api, sid, pid)
    assert seen, "no output on re-attach"
    assert seen == list(range(seen[0], seen[0] + len(seen))), f"output lost or reordered: {seen}"
    assert seen[0] == 0, f"the buffered output does not start at the beginning: {seen[:5]}"
    return seen


def test_sandboxes_survive_sigkill_and_sigterm_of_sbxd(make_sbxd):
    d = make_sbxd()
    api = d.client()
    sid = api.create()["id"]
    blob = os.urandom(512 * 1024)
    api.put_file(sid, "state/blob.bin", blob)
    pid = api.background(sid, COUNTER)
    init = init_pid(sid)
    assert init, "no sbx-init found in the sandbox's init cgroup"
    time.sleep(0.5)

    for sig in (signal.SIGKILL, signal.SIGTERM):
        before = counter_values(api, sid, pid, listen=0.2)
        d.stop(sig)
        t_down = time.monotonic()
        time.sleep(2)
        d.start()
        down = time.monotonic() - t_down
        seen = check_restarted(api, d, sid, pid, blob, down)
        # output produced while sbxd was down is there: the counter ran on,
        # ~5 lines a second
        assert seen[-1] - before[-1] >= int(down * 5 * 0.7), (sig, before[-1], seen[-1], down)
        assert init_pid(sid) == init, "sbx-init changed: the sandbox was recreated, not re-attached"
        # and the sandbox still works
        assert api.sh(sid, "echo still here") == "still here\n"
    assert f"sandbox={sid}" in d.log() and "reattached" in d.log()


def test_init_killed_while_sbxd_down_is_failed_and_cleaned(make_sbxd):
    d = make_sbxd()
    api = d.client()
    victim = api.create()["id"]
    survivor = api.create()["id"]
    api.background(victim, "sleep 300")
    pid = init_pid(victim)
    assert pid
    d.stop(signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)  # our own sandbox's sbx-init
    deadline = time.monotonic() + 5
    while procs_of([victim]) and time.monotonic() < deadline:
        time.sleep(0.05)
    d.start()
    s = api.wait_state(victim, "failed", within=5)
    assert s["state"] == "failed", s
    assert isinstance(s["end_reason"], str) and s["end_reason"], s
    assert s["ended_at"] is not None
    assert victim not in [x["id"] for x in api.get("/v1/sandboxes").json()["sandboxes"]]
    deadline = time.monotonic() + 10
    while leftovers(d.home, [victim]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(d.home, [victim]) == {}, "the failed sandbox's cgroups/socket/processes remain"
    # the other one was re-attached and works
    assert api.sandbox(survivor)["state"] == "running"
    assert api.sh(survivor, "echo ok") == "ok\n"


def test_init_killed_while_sbxd_runs_is_failed(make_sbxd):
    d = make_sbxd("--health-interval", "1")
    api = d.client()
    sid = api.create()["id"]
    pid = init_pid(sid)
    os.kill(pid, signal.SIGKILL)
    s = api.wait_state(sid, "failed", within=5)
    assert s["state"] == "failed" and s["end_reason"], s
    deadline = time.monotonic() + 10
    while leftovers(d.home, [sid]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(d.home, [sid]) == {}


class Prober(threading.Thread):
    """Meanwhile: /v1/health and an exec in another sandbox, over and over;
    records the slowest answer of each."""

    def __init__(self, d, sid):
        super().__init__(daemon=True)
        self.c = Client(d, d.keys["env"])
        self.anon = Client(d, None)
        self.sid = sid
        self.stop = threading.Event()
        self.worst = {"health": 0.0, "exec": 0.0}
        self.errors = []
        self.n = 0

    def run(self):
        while not self.stop.is_set():
            for what in ("health", "exec"):
                t = time.monotonic()
                try:
                    if what == "health":
                        r = self.anon.get("/v1/health", timeout=10)
                        ok = r.status_code == 200
                    else:
                        r = self.c.post(f"/v1/sandboxes/{self.sid}/commands", json={"cmd": "echo ok"}, timeout=10)
                        ok = r.status_code == 200 and r.json()["stdout"] == "ok\n"
                    if not ok:
                        self.errors.append((what, r.status_code, r.text[:200]))
                except Exception as e:  # noqa: BLE001 - recorded, asserted below
                    self.errors.append((what, repr(e)))
                self.worst[what] = max(self.worst[what], time.monotonic() - t)
            self.n += 1
            time.sleep(0.1)


def test_stopped_init_becomes_unhealthy_without_slowing_others(make_sbxd):
    d = make_sbxd("--health-interval", "1")
    api = d.client()
    sick = api.create()["id"]
    well = api.create()["id"]
    pid = init_pid(sick)
    assert pid
    probe = Prober(d, well)
    probe.start()
    try:
        os.kill(pid, signal.SIGSTOP)  # our own sandbox's sbx-init
        t = time.monotonic()
        s = api.wait_state(sick, "unhealthy", within=10, step=0.2)
        took = time.monotonic() - t
        assert s["state"] == "unhealthy", s
        assert isinstance(s["end_reason"], str) and s["end_reason"], s
        assert took < 10
        # its resources go too
        deadline = time.monotonic() + 10
        while leftovers(d.home, [sick]) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = leftovers(d.home, [sick])
    finally:
        probe.stop.set()
        probe.join(20)
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    assert not probe.errors, probe.errors[:5]
    assert probe.n >= 5
    assert probe.worst["health"] < 1.0 and probe.worst["exec"] < 1.0, probe.worst
    assert left == {}, f"the unhealthy sandbox left: {left}"
    assert api.sh(well, "echo fine") == "fine\n"
