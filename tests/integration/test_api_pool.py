"""sbxd's warm pool (--pool): sandboxes made ahead of time and handed over by
POST /v1/sandboxes.

What the pool promises, each tried here: a pooled sandbox belongs to nobody
(no key can see or reach it); a create takes one (a hit, visible in
/metrics) and honours the requested limits, envs and metadata; a pooled
sandbox is never handed out twice, even to creates racing each other; it
never carries anything from an earlier user (a deleted sandbox is never
recycled); the pool refills; a pooled sandbox that dies is replaced; a
restart, even after SIGKILL, drains the old pool and leaves user sandboxes
alone; a graceful stop leaves nothing behind."""

import json
import os
import re
import signal
import sqlite3
import threading
import time

from sbxd_fixture import init_pid, leftovers

MiB = 1 << 20


def prom(c, name, template="base"):
    text = c.get("/metrics").text
    m = re.search(rf'^{name}{{template="{template}"}} ([0-9.]+)$', text, re.M)
    return float(m.group(1)) if m else None


def wait_ready(c, n, within=30, template="base"):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if prom(c, "sbx_pool_ready", template) == n:
            return
        time.sleep(0.05)
    raise AssertionError(f"pool of {template} not at {n} within {within} s: {c.get('/metrics').text}")


def pooled_rows(d, template=None):
    db = sqlite3.connect(os.path.join(d.home, "sbxd.db"), timeout=10)
    try:
        return db.execute("SELECT id, init_pid, key_id FROM sandboxes WHERE state = 'pooled' AND (?1 IS NULL OR "
                          "template = ?1)", (template,)).fetchall()
    finally:
        db.close()


def build(c, name, spec):
    r = c.req("POST", "/v1/templates", params={"name": name}, data=json.dumps(spec).encode(),
              headers={"Content-Type": "application/json"}, timeout=600)
    assert r.status_code == 201, r.text
    return r.json()


def row(d, sid):
    db = sqlite3.connect(os.path.join(d.home, "sbxd.db"), timeout=10)
    try:
        return db.execute("SELECT state, end_reason, cleaned FROM sandboxes WHERE id = ?", (sid,)).fetchone()
    finally:
        db.close()


def cg_file(d, sid, ctrl, name):
    with open(f"/sys/fs/cgroup/{ctrl}{d.cg_parent}/sbx-{sid}/work/{name}") as f:
        return f.read().strip()


def test_pooled_sandboxes_belong_to_nobody(make_sbxd):
    d = make_sbxd("--pool", "3")
    c = d.client()
    wait_ready(c, 3)
    assert prom(c, "sbx_pool_size") == 3
    rows = pooled_rows(d)
    assert len(rows) == 3 and all(k == "" for _, _, k in rows)
    assert c.get("/v1/sandboxes").json()["sandboxes"] == []
    for state in ("running", "pooled"):
        r = c.get(f"/v1/sandboxes?state={state}")
        assert r.status_code in (200, 400) and (r.status_code == 400 or r.json()["sandboxes"] == [])
    other = d.client(d.create_key("other"))
    for sid, _, _ in rows:
        for cl in (c, other):
            assert cl.get(f"/v1/sandboxes/{sid}").status_code == 404
            assert cl.post(f"/v1/sandboxes/{sid}/commands", json={"cmd": "id"}).status_code == 404
            assert cl.delete(f"/v1/sandboxes/{sid}").status_code == 404
    # not counted as anybody's running sandboxes
    text = c.get("/metrics").text
    assert re.search(r"^sbx_sandboxes_running 0$", text, re.M), text


def test_create_is_a_hit_and_honours_limits_envs_metadata(make_sbxd):
    d = make_sbxd("--pool", "2")
    c = d.client()
    wait_ready(c, 2)
    pooled = {sid for sid, _, _ in pooled_rows(d)}
    s = c.create(memory_mb=256, cpus=0.5, pids=64, envs={"GREETING": "hello"}, metadata={"k": "v"}, timeout_s=120)
    sid = s["id"]
    assert sid in pooled, "the create did not take a pooled sandbox"
    assert prom(c, "sbx_pool_hits_total") == 1 and prom(c, "sbx_pool_misses_total") == 0
    assert "pool=hit" in d.log()
    assert (s["memory_mb"], s["cpus"], s["pids"], s["metadata"], s["envs"]) == (256, 0.5, 64, {"k": "v"},
                                                                               {"GREETING": "hello"})
    got = c.get(f"/v1/sandboxes/{sid}").json()
    assert got["state"] == "running" and got["timeout_s"] == 120 and got["metadata"] == {"k": "v"}
    assert c.sh(sid, "echo $GREETING") == "hello\n"
    # the kernel enforces the requested limits, not the pool's defaults
    if os.path.isdir(f"/sys/fs/cgroup/memory{d.cg_parent}"):  # cgroup v1 (this host)
        assert int(cg_file(d, sid, "memory", "memory.limit_in_bytes")) == 256 * MiB
        assert cg_file(d, sid, "cpu", "cpu.cfs_quota_us") == "50000"
        assert cg_file(d, sid, "pids", "pids.max") == "64"
    else:
        assert int(cg_file(d, sid, "", "memory.max")) == 256 * MiB
        assert cg_file(d, sid, "", "pids.max") == "64"
    m = c.get(f"/v1/sandboxes/{sid}/metrics").json()
    assert m["memory_limit_bytes"] == 256 * MiB
    # a memory hog is held to 256 MiB
    res = c.run(sid, ["python3", "-c", "b = bytearray(400 << 20); print(len(b))"], timeout_s=30)
    assert res["exit_code"] != 0 or res["signal"] is not None, res
    # another disk size is a miss (the pool's sandboxes have the default layer)
    s2 = c.create(disk_mb=128)
    assert s2["id"] not in pooled and s2["disk_mb"] == 128
    assert prom(c, "sbx_pool_misses_total") == 1


def test_nothing_of_an_earlier_user_is_visible(make_sbxd):
    """A deleted sandbox is gone for good: the next create gets a sandbox
    nobody has touched, never a recycled one."""
    d = make_sbxd("--pool", "2")
    c = d.client()
    wait_ready(c, 2)
    a = c.create()["id"]
    c.put_file(a, "secret.txt", b"top secret")
    c.sh(a, "echo leftover > /tmp/mark; mkdir -p /home/user/.cache/x")
    bg = c.background(a, "sleep 300")
    assert c.delete(f"/v1/sandboxes/{a}").status_code == 204
    wait_ready(c, 2)
    seen = set()
    for _ in range(4):
        b = c.create()["id"]
        assert b != a and b not in seen
        seen.add(b)
        out = c.sh(b, "ls -A /home/user; ls -A /tmp; ps -eo comm | grep -cx sleep || true")
        assert "secret.txt" not in out and "mark" not in out and ".cache" not in out, out
        assert out.strip().endswith("0"), out
        assert c.get(f"/v1/sandboxes/{b}/commands").json()["commands"][:-1] == [], "commands of someone else"
        assert c.delete(f"/v1/sandboxes/{b}").status_code == 204
    del bg


def test_racing_creates_never_share_a_sandbox(make_sbxd):
    d = make_sbxd("--pool", "4")
    c = d.client()
    wait_ready(c, 4)
    ids, errors = [], []

    def one():
        try:
            r = c.create_raw({})
            if r.status_code != 201:
                errors.append(r.text)
            else:
                ids.append(r.json()["id"])
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(ids) == 10 and len(set(ids)) == 10
    hits, misses = prom(c, "sbx_pool_hits_total"), prom(c, "sbx_pool_misses_total")
    assert hits + misses == 10 and 1 <= hits <= 10
    db = sqlite3.connect(os.path.join(d.home, "sbxd.db"), timeout=10)
    owners = db.execute(f"SELECT COUNT(*) FROM sandboxes WHERE state = 'running' AND key_id != '' AND id IN "
                        f"({','.join('?' * len(ids))})", ids).fetchone()[0]
    db.close()
    assert owners == 10
    for sid in ids:
        assert c.sh(sid, "echo ok") == "ok\n"


def test_pool_refills_and_replaces_a_dead_sandbox(make_sbxd):
    d = make_sbxd("--pool", "2")
    c = d.client()
    wait_ready(c, 2)
    for _ in range(3):
        c.create()
    wait_ready(c, 2)  # refilled once the creates paused
    assert prom(c, "sbx_pool_refill_seconds") > 0
    victim, pid, _ = pooled_rows(d)[0]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (row(d, victim)[0] == "pooled" or victim in [r[0] for r in pooled_rows(d)]):
        time.sleep(0.1)
    assert row(d, victim)[0] == "failed", row(d, victim)
    wait_ready(c, 2)
    assert victim not in [r[0] for r in pooled_rows(d)]
    assert d.check_clean([victim]) == {}


def test_restart_drains_the_old_pool_and_keeps_user_sandboxes(make_sbxd):
    d = make_sbxd("--pool", "2")
    c = d.client()
    wait_ready(c, 2)
    mine = c.create()["id"]
    wait_ready(c, 2)
    old = [r[0] for r in pooled_rows(d)]
    old_pids = [r[1] for r in pooled_rows(d)]
    d.stop(signal.SIGKILL)
    d.start()
    c = d.client()
    wait_ready(c, 2)
    for sid in old:
        st = row(d, sid)
        assert st[0] == "deleted" and "warm pool" in st[1], st
    assert d.check_clean(old) == {}
    for p in old_pids:
        assert not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z"
    assert c.sh(mine, "echo still here") == "still here\n"
    assert c.get(f"/v1/sandboxes/{mine}").json()["state"] == "running"


def test_graceful_stop_ends_the_pool(make_sbxd):
    d = make_sbxd("--pool", "3")
    c = d.client()
    wait_ready(c, 3)
    pooled = [r[0] for r in pooled_rows(d)]
    pids = [init_pid(sid) for sid in pooled]
    d.stop(signal.SIGTERM)
    assert leftovers(d.home, pooled, whole_run_dir=True) == {}
    for sid in pooled:
        assert row(d, sid)[0] == "deleted" and row(d, sid)[2] == 1
    assert all(p is None or not os.path.exists(f"/proc/{p}") for p in pids)
    d.start()  # for the fixture's own checks at the end


def test_pool_option_errors(make_sbxd):
    import subprocess
    from sbxd_fixture import sbxd_bin
    for bad in ("-1", "x", "base=", "=3", "bad/name=2", "1001"):
        r = subprocess.run([sbxd_bin(), "--pool", bad, "--home", "/nonexistent-sbx-test"], capture_output=True,
                           timeout=30)
        assert r.returncode == 2 and b"--pool" in r.stderr, (bad, r.returncode, r.stderr)


def version_spec(v):
    return {"from": "base", "steps": [{"run": f"echo {v} > /version && echo {v} > /only-{v}"}]}


def test_a_rebuilt_templates_pool_hands_out_the_new_version(make_sbxd):
    """--pool NAME=1 of a custom template: the pool waits for the template,
    fills from its first build, and a rebuild renews it -- the next create
    sees the new version (never a pooled sandbox of the old one), the old
    pooled sandbox ends unused, and the pool refills from the new one."""
    name = "pooled-app"
    d = make_sbxd("--pool", "1", "--pool", f"{name}=1")
    c = d.client()
    assert prom(c, "sbx_pool_size", name) == 1 and prom(c, "sbx_pool_size") == 1
    v1 = build(c, name, version_spec("v1"))
    wait_ready(c, 1, template=name)  # the build started the waiting pool (no minute of back-off)
    old = [r[0] for r in pooled_rows(d, name)]
    assert len(old) == 1
    v2 = build(c, name, version_spec("v2"))
    assert v2["id"] != v1["id"]
    s = c.create(template=name)
    assert c.sh(s["id"], "cat /version; ls /only-v1 2>/dev/null || echo no-v1") == "v2\nno-v1\n"
    st = row(d, old[0])
    assert st[0] == "deleted" and "rebuilt" in st[1], st
    assert s["id"] != old[0]
    wait_ready(c, 1, template=name)
    new = [r[0] for r in pooled_rows(d, name)]
    hits = prom(c, "sbx_pool_hits_total", name)
    s2 = c.create(template=name)
    assert s2["id"] == new[0] and prom(c, "sbx_pool_hits_total", name) == hits + 1, "not a pool hit"
    assert c.sh(s2["id"], "cat /version") == "v2\n"
    assert prom(c, "sbx_pool_stale_total", name) == 0  # renewed before any take could see it
    # base's pool was not touched by any of it
    assert prom(c, "sbx_pool_ready") == 1
    assert d.check_clean(old) == {}


def test_a_stale_pooled_sandbox_is_never_handed_out(make_sbxd):
    """The guard in the take: a pooled sandbox whose template version is not
    the installed one (the template swapped behind sbxd's back here, as a
    rebuild racing a refill would) is ended, not handed out."""
    name = "swapped"
    d = make_sbxd("--pool", "0", "--pool", f"{name}=1")
    c = d.client()
    build(c, name, version_spec("v1"))
    wait_ready(c, 1, template=name)
    old = pooled_rows(d, name)[0][0]
    # v2 built under another name, then put in place the way an install does
    build(c, "other-v2", version_spec("v2"))
    tdir = os.path.join(d.home, "templates")
    os.rename(os.path.join(tdir, name), os.path.join(tdir, ".swapped-away"))
    import shutil
    shutil.copytree(os.path.join(tdir, "other-v2"), os.path.join(tdir, name))
    try:
        s = c.create(template=name)
        assert s["id"] != old
        assert c.sh(s["id"], "cat /version") == "v2\n"
        st = row(d, old)
        assert st[0] == "deleted" and "rebuilt" in st[1], st
        assert prom(c, "sbx_pool_stale_total", name) == 1 and prom(c, "sbx_pool_hits_total", name) == 0
    finally:
        c.delete(f"/v1/sandboxes/{s['id']}")
        shutil.rmtree(os.path.join(tdir, ".swapped-away"), ignore_errors=True)


def test_removing_a_template_ends_its_pool(make_sbxd):
    """A template whose only users are its own pooled sandboxes can be
    removed: they end and its pool stops (no refill of a template that is
    gone); built again, the pool starts again.  A sandbox of a user still
    makes the removal a 409, and then the pool stays."""
    name = "removable"
    d = make_sbxd("--pool", "0", "--pool", f"{name}=2")
    c = d.client()
    build(c, name, version_spec("v1"))
    wait_ready(c, 2, template=name)
    mine = c.create(template=name)["id"]   # a hit: the pool refills to 2
    wait_ready(c, 2, template=name)
    r = c.delete(f"/v1/templates/{name}")
    assert r.status_code == 409 and "1 live sandbox" in r.text, r.text
    assert prom(c, "sbx_pool_ready", name) == 2 and len(pooled_rows(d, name)) == 2
    assert c.delete(f"/v1/sandboxes/{mine}").status_code == 204
    pooled = [x[0] for x in pooled_rows(d, name)]
    r = c.delete(f"/v1/templates/{name}")
    assert r.status_code == 204, r.text
    for sid in pooled:
        st = row(d, sid)
        assert st[0] == "deleted" and "removed" in st[1], st
    assert d.check_clean(pooled) == {}
    time.sleep(2.5)  # a refill would have happened by now
    assert prom(c, "sbx_pool_ready", name) == 0 and pooled_rows(d, name) == []
    assert c.get(f"/v1/templates/{name}").status_code == 404
    assert "event=pool_stopped template=" + name in d.log()
    build(c, name, version_spec("v2"))
    wait_ready(c, 2, template=name)
    s = c.create(template=name)
    assert c.sh(s["id"], "cat /version") == "v2\n"
