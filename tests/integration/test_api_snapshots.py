"""Snapshots and fork: a sandbox's files saved as a layer
(POST /v1/sandboxes/{id}/snapshots), sandboxes started from it
(POST /v1/sandboxes {"snapshot"}), N copies at once (POST .../fork).

Tried here: every kind of change survives (new, changed and deleted files,
a directory replaced wholesale, symlinks, modes, binary content); forks
are isolated from each other and from their source; a snapshot of a
sandbox made from a snapshot stacks on it; snapshots survive sbxd's
SIGKILL; one in use cannot be deleted; keys see only their own."""

import hashlib
import os
import signal

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
    import time
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
