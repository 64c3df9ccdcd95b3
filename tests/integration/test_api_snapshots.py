"""Snapshots and fork: a sandbox's files saved as a layer
(POST /v1/sandboxes/{id}/snapshots), sandboxes started from it
(POST /v1/sandboxes {"snapshot"}), N copies at once (POST .../fork).

Tried here: every kind of change survives (new, changed and deleted files,
a directory replaced wholesale, symlinks, modes, binary content); forks
are isolated from each other and from their source; a snapshot of a
sandbox made from a snapshot stacks on it; snapshots survive sbxd's
SIGKILL; one in use cannot be deleted; keys see only their own."""

import hashlib
import json
import os
import signal
import sqlite3
import time

from sbxd_fixture import assert_error

MiB = 1 << 20


def snap(c, sid):
    r = c.post(f"/v1/sandboxes/{sid}/snapshots")
    assert r.status_code == 201, r.text
    return r.json()


def test_every_kind_of_change_survives(api):
    sid = api.create()["id"]
    blob = os.urandom(3 * MiB) + b"\x00" * 1000
    api.put_file(sid, "work/blob.bin", blob)
    api.sh(sid, "echo one > a.txt; chmod 0750 a.txt; ln -s a.txt link; mkdir -p deep/er; echo x > deep/er/f")
    # as root: delete a template file (a whiteout) and replace a template
    # directory wholesale (an opaque directory)
    api.sh(sid, "rm /etc/nsswitch.conf; rm -rf /etc/skel; mkdir /etc/skel; echo only > /etc/skel/new", user="root")
    s = snap(api, sid)
    assert s["sandbox_id"] == sid and s["template"] == "base" and s["size_bytes"] >= len(blob), s
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"  # the source goes on
    assert api.sh(sid, "cat a.txt") == "one\n"

    n = api.create(snapshot=s["id"])
    assert n["snapshot_id"] == s["id"] and n["template"] == "base"
    nid = n["id"]
    assert hashlib.sha256(api.get_file(nid, "work/blob.bin")).hexdigest() == hashlib.sha256(blob).hexdigest()
    out = api.sh(nid, "cat a.txt; stat -c '%a %U' a.txt; readlink link; cat deep/er/f; "
                      "test -e /etc/nsswitch.conf && echo nss-back; ls -A /etc/skel")
    assert out == "one\n750 user\na.txt\nx\nnew\n", out
    # and it is a sandbox of its own: its changes stay there
    api.sh(nid, "echo two > a.txt")
    assert api.sh(sid, "cat a.txt") == "one\n"


def test_fork_copies_are_isolated(api):
    sid = api.create(metadata={"task": "fork"}, envs={"E": "1"}, memory_mb=256, timeout_s=600)["id"]
    api.sh(sid, "echo base > f.txt")
    r = api.post(f"/v1/sandboxes/{sid}/fork", json={"count": 3})
    assert r.status_code == 201, r.text
    res = r.json()
    kids = [k["id"] for k in res["sandboxes"]]
    assert len(set(kids)) == 3 and sid not in kids
    for k in res["sandboxes"]:
        assert k["snapshot_id"] == res["snapshot"]["id"]
        assert (k["metadata"], k["envs"], k["memory_mb"], k["timeout_s"]) == ({"task": "fork"}, {"E": "1"}, 256, 600)
    for i, k in enumerate(kids):
        api.sh(k, f"echo kid{i} >> f.txt")
    for i, k in enumerate(kids):
        assert api.sh(k, "cat f.txt; echo $E") == f"base\nkid{i}\n1\n"
    assert api.sh(sid, "cat f.txt") == "base\n"
    for bad in (0, 17, "2"):
        assert_error(api.post(f"/v1/sandboxes/{sid}/fork", json={"count": bad}), 400, "invalid_request")


def test_snapshots_stack_and_cannot_be_deleted_in_use(api):
    a = api.create()["id"]
    api.sh(a, "echo layer1 > one; echo gone > doomed")
    s1 = snap(api, a)
    b = api.create(snapshot=s1["id"])["id"]
    api.sh(b, "echo layer2 > two; rm doomed")
    s2 = snap(api, b)
    assert s2["parent_id"] == s1["id"]
    c = api.create(snapshot=s2["id"])["id"]
    assert api.sh(c, "cat one two; ls") == "layer1\nlayer2\none\ntwo\n"
    # in use: by sandboxes made from it, or by a snapshot stacked on it
    assert_error(api.delete(f"/v1/snapshots/{s1['id']}"), 409, "conflict")
    assert_error(api.delete(f"/v1/snapshots/{s2['id']}"), 409, "conflict")
    for sid in (b, c):
        assert api.delete(f"/v1/sandboxes/{sid}").status_code == 204
    ids = [x["id"] for x in api.get("/v1/snapshots").json()["snapshots"]]
    assert s1["id"] in ids and s2["id"] in ids
    assert api.get(f"/v1/snapshots/{s2['id']}").json()["size_bytes"] >= 0
    # the reaper finishes the clean-up of the deleted sandboxes in the background
    deadline = time.monotonic() + 10
    while api.delete(f"/v1/snapshots/{s2['id']}").status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert api.get(f"/v1/snapshots/{s2['id']}").status_code == 404
    assert api.delete(f"/v1/snapshots/{s1['id']}").status_code == 204
    assert_error(api.create_raw({"snapshot": s1["id"]}), 400, "invalid_request")


def test_snapshot_of_a_paused_sandbox_keeps_it_paused(api):
    sid = api.create()["id"]
    api.sh(sid, "echo p > p.txt")
    assert api.post(f"/v1/sandboxes/{sid}/pause").status_code == 200
    s = snap(api, sid)
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "paused"
    assert api.sh(api.create(snapshot=s["id"])["id"], "cat p.txt") == "p\n"


def test_keys_see_only_their_snapshots(api, other):
    sid = api.create()["id"]
    s = snap(api, sid)
    assert_error(other.get(f"/v1/snapshots/{s['id']}"), 404, "not_found")
    assert_error(other.delete(f"/v1/snapshots/{s['id']}"), 404, "not_found")
    assert_error(other.create_raw({"snapshot": s["id"]}), 400, "invalid_request")
    assert s["id"] not in [x["id"] for x in other.get("/v1/snapshots").json()["snapshots"]]
    assert_error(other.post(f"/v1/sandboxes/{sid}/snapshots"), 404, "not_found")
    assert_error(other.post(f"/v1/sandboxes/{sid}/fork", json={}), 404, "not_found")
    assert_error(api.create_raw({"snapshot": s["id"], "template": "other"}), 400, "invalid_request")
    assert api.delete(f"/v1/snapshots/{s['id']}").status_code == 204


def test_snapshot_survives_sigkill_restart(make_sbxd):
    d = make_sbxd()
    c = d.client()
    sid = c.create()["id"]
    c.sh(sid, "echo persisted > keep")
    s = snap(c, sid)
    d.stop(signal.SIGKILL)
    d.start()
    c = d.client()
    assert s["id"] in [x["id"] for x in c.get("/v1/snapshots").json()["snapshots"]]
    assert c.sh(c.create(snapshot=s["id"])["id"], "cat keep") == "persisted\n"


# --- template versions ----------------------------------------------------------


def build(c, name, spec):
    r = c.req("POST", "/v1/templates", params={"name": name}, data=json.dumps(spec).encode(),
              headers={"Content-Type": "application/json"}, timeout=600)
    assert r.status_code == 201, r.text
    return r.json()


def version_spec(v):
    return {"from": "base", "steps": [{"run": f"echo {v} > /version && echo {v} > /only-{v}"}]}


def delete_snapshot(c, sid, within=10):
    """DELETE a snapshot, waiting out the 409 of sandboxes made from it whose
    clean-up is still finishing in the background."""
    deadline = time.monotonic() + within
    while True:
        r = c.delete(f"/v1/snapshots/{sid}")
        if r.status_code != 409 or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


def test_a_snapshot_keeps_its_template_version(make_sbxd):
    """A snapshot is pinned to the template version its sandbox ran on: made
    from it after a rebuild (and an sbxd restart) a sandbox sees v1's files
    under the snapshot's, while fresh sandboxes get v2; a fork of a sandbox
    still running on v1 gets v1 too.  v1's layers stay while anything needs
    them and go with the last snapshot that does."""
    d = make_sbxd()
    c = d.client()
    name = "pinned"
    v1 = build(c, name, version_spec("v1"))
    v1_layer = os.path.join(d.home, "layers", v1["layers"][0]["id"])
    src = c.create(template=name)["id"]
    c.sh(src, "echo mine > /home/user/mine")
    s = snap(c, src)
    assert s["template"] == name and s["template_id"] == v1["id"], s
    runner = c.create(template=name)["id"]  # stays running on v1 through all of it
    assert c.delete(f"/v1/sandboxes/{src}").status_code == 204
    v2 = build(c, name, version_spec("v2"))
    assert v2["layers"][0]["id"] != v1["layers"][0]["id"]
    assert os.path.isdir(v1_layer), "v1's layer went while a snapshot and a sandbox need it"
    d.stop(signal.SIGKILL)
    d.start()
    c = d.client()
    # the snapshot: v1 under its own files
    n = c.create(snapshot=s["id"])["id"]
    assert c.sh(n, "cat /version /home/user/mine /only-v1; test -e /only-v2 || echo no-v2") == \
        "v1\nmine\nv1\nno-v2\n"
    # a fresh sandbox: v2
    assert c.sh(c.create(template=name)["id"], "cat /version") == "v2\n"
    # a fork of the sandbox re-attached after the restart: its own version, v1
    c.sh(runner, "echo forked > /home/user/f")
    fork = c.post(f"/v1/sandboxes/{runner}/fork", json={"count": 1})
    assert fork.status_code == 201, fork.text
    kid = fork.json()["sandboxes"][0]["id"]
    assert fork.json()["snapshot"]["template_id"] == v1["id"]
    assert c.sh(kid, "cat /version /home/user/f") == "v1\nforked\n"
    # a snapshot of a sandbox made from the pinned one stays on v1
    s2 = snap(c, n)
    assert s2["template_id"] == v1["id"] and s2["parent_id"] == s["id"]
    assert c.sh(c.create(snapshot=s2["id"])["id"], "cat /version") == "v1\n"
    # Letting go: v1's layer goes with the last user, not before.
    for sid in [x["id"] for x in c.get("/v1/sandboxes").json()["sandboxes"] if x["template"] == name]:
        if sid != runner:
            assert c.delete(f"/v1/sandboxes/{sid}").status_code == 204
    for snap_id in (s2["id"], fork.json()["snapshot"]["id"]):
        assert delete_snapshot(c, snap_id).status_code == 204
    assert os.path.isdir(v1_layer), "s and the running sandbox still need it"
    assert delete_snapshot(c, s["id"]).status_code == 204
    assert os.path.isdir(v1_layer), "the sandbox running on v1 still needs it"
    assert c.sh(runner, "cat /version /only-v1") == "v1\nv1\n"
    assert c.delete(f"/v1/sandboxes/{runner}").status_code == 204
    deadline = time.monotonic() + 30  # the lifecycle thread tries again every 10 s
    while os.path.isdir(v1_layer) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(v1_layer), "v1's layer outlived everything that needed it"
    assert os.path.isdir(os.path.join(d.home, "layers", v2["layers"][0]["id"]))
    assert c.sh(c.create(template=name)["id"], "cat /version") == "v2\n"


def test_deleting_the_snapshot_frees_the_old_versions_layers(make_sbxd):
    """Nothing live on v1, one snapshot of it: its deletion frees v1's
    layers at once (and only those: v2's stay)."""
    d = make_sbxd()
    c = d.client()
    name = "freed"
    v1 = build(c, name, version_spec("v1"))
    v1_layer = os.path.join(d.home, "layers", v1["layers"][0]["id"])
    src = c.create(template=name)["id"]
    s = snap(c, src)
    assert c.delete(f"/v1/sandboxes/{src}").status_code == 204
    v2 = build(c, name, version_spec("v2"))
    assert os.path.isdir(v1_layer)
    d.stop(signal.SIGTERM)
    d.start()
    c = d.client()
    assert delete_snapshot(c, s["id"]).status_code == 204
    assert not os.path.exists(v1_layer), os.listdir(os.path.join(d.home, "layers"))
    assert os.path.isdir(os.path.join(d.home, "layers", v2["layers"][0]["id"]))
    # removing a template that a snapshot needs stays a 409
    src = c.create(template=name)["id"]
    s = snap(c, src)
    assert c.delete(f"/v1/sandboxes/{src}").status_code == 204
    assert_error(c.delete(f"/v1/templates/{name}"), 409, "conflict")
    assert delete_snapshot(c, s["id"]).status_code == 204
    assert c.delete(f"/v1/templates/{name}").status_code == 204
    assert not os.path.exists(os.path.join(d.home, "layers", v2["layers"][0]["id"]))


def test_rows_of_an_older_database_are_migrated(make_sbxd):
    """A database from before template versions were recorded (no
    template_id, stack, start columns): sbxd adds them, its sandboxes are
    re-attached and its snapshots restore on the template as it is now."""
    d = make_sbxd()
    c = d.client()
    name = "legacy"
    build(c, name, version_spec("v1"))
    live = c.create(template=name)["id"]
    c.sh(live, "echo kept > /home/user/kept")
    s = snap(c, live)
    d.stop(signal.SIGTERM)
    db = sqlite3.connect(os.path.join(d.home, "sbxd.db"))
    for table in ("sandboxes", "snapshots"):
        for col in ("template_id", "stack", "start"):
            db.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    db.commit()
    db.close()
    d.start()
    c = d.client()
    assert c.sh(live, "cat /version /home/user/kept") == "v1\nkept\n"  # re-attached
    got = c.get(f"/v1/snapshots/{s['id']}").json()
    assert got["template_id"] is None, got
    n = c.create(snapshot=s["id"])["id"]
    assert c.sh(n, "cat /version /home/user/kept") == "v1\nkept\n"
    db = sqlite3.connect(os.path.join(d.home, "sbxd.db"))
    cols = {r[1] for r in db.execute("PRAGMA table_info(snapshots)")}
    stack = db.execute("SELECT stack FROM sandboxes WHERE id = ?", (n,)).fetchone()[0]
    db.close()
    assert {"template_id", "stack", "start"} <= cols
    assert stack.startswith("id ") and "layer " in stack, stack


# --- the start command runs again ------------------------------------------------------------------


START_SPEC = {"from": "base", "steps": [
    {"user": "user"},
    # a fresh marker, then a server: the marker is written before the port answers
    {"start": "cat /proc/sys/kernel/random/uuid > /home/user/marker && "
              "exec python3 -m http.server 8125 --bind 127.0.0.1 >/dev/null 2>&1"},
    # live state, not a file: a marker the snapshot brought back cannot pass it
    {"ready": "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8125/\")'"},
]}


def start_command_of(c, sid):
    cmds = c.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]
    return [x for x in cmds if x["background"] and "http.server" in " ".join(x["argv"])]


def test_the_start_command_runs_again_from_a_snapshot_and_in_a_fork(api):
    name = f"start-again-{os.getpid()}"
    build(api, name, START_SPEC)
    try:
        src = api.create(template=name)["id"]
        marker = api.sh(src, "cat marker")
        assert len(marker.strip()) == 36, marker
        s = snap(api, src)
        made = api.create(snapshot=s["id"])["id"]
        fork = api.post(f"/v1/sandboxes/{src}/fork", json={"count": 1})
        assert fork.status_code == 201, fork.text
        kid = fork.json()["sandboxes"][0]["id"]
        for sid in (made, kid):
            # the source's marker came back with the files, and was replaced
            # by this sandbox's own start command before the create answered
            assert api.sh(sid, "cat marker") != marker
            started = start_command_of(api, sid)
            assert len(started) == 1 and started[0]["running"], api.get(f"/v1/sandboxes/{sid}/commands").text
            assert api.sh(sid, "python3 -c 'import urllib.request; "
                               "print(urllib.request.urlopen(\"http://127.0.0.1:8125/\").status)'") == "200\n"
        assert api.sh(made, "cat marker") != api.sh(kid, "cat marker")
        for sid in (src, made, kid):
            api.delete(f"/v1/sandboxes/{sid}")
        for snap_id in (s["id"], fork.json()["snapshot"]["id"]):
            assert delete_snapshot(api, snap_id).status_code == 204
    finally:
        api.delete(f"/v1/templates/{name}")


# --- durability ----------------------------------------------------------------------------------


def test_the_copy_is_on_disk_before_the_snapshot_is_recorded(make_sbxd):
    """"Snapshots persist across restarts of the machine": the copy is
    synced (syncfs, its directory fsynced), renamed into place and the
    rename synced before the row that promises it reaches the database."""
    from syscalls import first, traced
    d = make_sbxd()
    c = d.client()
    sid = c.create()["id"]
    c.sh(sid, "head -c 100000 /dev/urandom > blob; echo x > small")
    with traced(d.pid, ["syncfs", "fsync", "fdatasync", "rename", "renameat", "renameat2", "pwrite64"]) as seen:
        s = snap(c, sid)
    sid_ = s["id"]
    snaps = os.path.join(d.home, "snapshots")
    tmp = f"{snaps}/.{sid_}.tmp"
    synced = first(seen, lambda n, l: n == "syncfs" and f"<{tmp}>" in l)
    assert synced is not None, "the copy was never synced:\n" + "".join(l for _, l in seen)
    renamed = first(seen, lambda n, l: n.startswith("rename") and tmp in l and f"{snaps}/{sid_}\"" in l, synced)
    assert renamed is not None, "".join(l for _, l in seen)
    dir_synced = first(seen, lambda n, l: n == "fsync" and f"<{snaps}>" in l, renamed)
    assert dir_synced is not None, "the rename was never synced:\n" + "".join(l for _, l in seen)
    recorded = first(seen, lambda n, l: n == "pwrite64" and "sbxd.db-wal>" in l and sid_ in l)
    assert recorded is not None, "no write of the snapshot's row seen"
    assert recorded > dir_synced, "the row was written before the copy was on disk"
