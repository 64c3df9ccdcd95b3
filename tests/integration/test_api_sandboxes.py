"""sbxd REST API: the sandbox resource (create, list, get, timeout, delete),
request validation, quotas and cross-key isolation."""

import datetime
import json
import os
import re

import pytest

from sbxd_fixture import assert_error, leftovers, upload_helper

FIELDS = {"id", "template", "state", "created_at", "expires_at", "ended_at", "end_reason",
          "timeout_s", "on_timeout", "snapshot_id", "metadata", "envs", "cpus", "memory_mb", "disk_mb", "pids",
          "network"}
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def ts(s):
    assert TS_RE.match(s), f"not RFC 3339 UTC with milliseconds: {s!r}"
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def ids(resp):
    assert resp.status_code == 200, (resp.status_code, resp.text)
    return {s["id"] for s in resp.json()["sandboxes"]}


# --------------------------------------------------------------------------
# create


def test_create_with_defaults(api):
    t0 = now()
    r = api.create_raw()
    assert r.status_code == 201, r.text
    s = r.json()
    assert set(s) == FIELDS, set(s) ^ FIELDS
    assert re.fullmatch(r"[0-9a-f]{32}", s["id"])
    assert s["template"] == "base"
    assert s["state"] == "running"
    created, expires = ts(s["created_at"]), ts(s["expires_at"])
    assert abs((created - t0).total_seconds()) < 5
    assert abs((expires - created).total_seconds() - 900) < 1
    assert s["ended_at"] is None and s["end_reason"] is None
    assert s["timeout_s"] == 900
    assert s["metadata"] == {} and s["envs"] == {}
    assert s["cpus"] == 1.0 and isinstance(s["cpus"], float)
    assert (s["memory_mb"], s["disk_mb"], s["pids"]) == (1024, 512, 512)
    # GET returns the same object
    assert api.sandbox(s["id"]) == s
    # and it is a real, working sandbox
    assert api.sh(s["id"], "echo hi") == "hi\n"


def test_create_with_metadata_envs_and_limits(api):
    body = {"timeout_s": 120, "metadata": {"owner": "ü ser", "purpose": "test"},
            "envs": {"GREETING": "hello world", "EMPTY": ""},
            "cpus": 0.5, "memory_mb": 256, "disk_mb": 64, "pids": 64}
    s = api.create(**body)
    for k, v in body.items():
        assert s[k] == v, (k, s[k], v)
    assert abs((ts(s["expires_at"]) - ts(s["created_at"])).total_seconds() - 120) < 1
    sid = s["id"]
    assert api.sh(sid, 'printf "%s|%s|" "$GREETING" "${EMPTY-unset}"') == "hello world||"
    m = api.get(f"/v1/sandboxes/{sid}/metrics").json()
    assert m["memory_limit_bytes"] == 256 << 20, m
    assert m["disk_limit_bytes"] == 64 << 20, m
    # the pids limit is enforced: fewer than 64 more processes
    helper = upload_helper(api, sid)
    res = api.run(sid, [helper, "forkbomb", "200"], timeout_s=30)
    m = re.match(r"forks (\d+) errno (\S+)", res["stdout"])
    assert m, res
    assert int(m.group(1)) < 64 and m.group(2) == "EAGAIN", res["stdout"]


def test_list_filters(api):
    tag = os.urandom(4).hex()
    a = api.create(metadata={"suite": tag, "n": "1"})["id"]
    b = api.create(metadata={"suite": tag, "n": "2", "x": "y z"})["id"]
    c = api.create(metadata={"suite": tag, "n": "3"})["id"]
    assert api.delete(f"/v1/sandboxes/{c}").status_code == 204

    everything = ids(api.get("/v1/sandboxes"))
    assert {a, b} <= everything and c not in everything, "default list must be running only"
    assert all(s["state"] == "running" for s in api.get("/v1/sandboxes").json()["sandboxes"])
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag})) == {a, b}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "metadata.n": "2"})) == {b}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "metadata.n": "9"})) == set()
    assert ids(api.get("/v1/sandboxes", params={"metadata.x": "y z", "metadata.suite": tag})) == {b}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "state": "deleted"})) == {c}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "state": "all"})) == {a, b, c}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "state": "running"})) == {a, b}
    assert ids(api.get("/v1/sandboxes", params={"metadata.suite": tag, "state": "expired"})) == set()

    assert_error(api.get("/v1/sandboxes", params={"bogus": "1"}), 400, "invalid_request")
    assert_error(api.get("/v1/sandboxes", params={"state": "sleeping"}), 400, "invalid_request")


def test_get_unknown_sandbox_is_404(api):
    assert_error(api.get("/v1/sandboxes/" + "0" * 32), 404, "not_found")
    assert_error(api.get("/v1/sandboxes/not-an-id"), 404, "not_found")
    assert_error(api.delete("/v1/sandboxes/" + "f" * 32), 404, "not_found")
    assert_error(api.post("/v1/sandboxes/" + "0" * 32 + "/commands", json={"cmd": "true"}), 404, "not_found")


def test_unknown_route_404_and_wrong_method_405(api):
    assert_error(api.get("/v1/nothing-here"), 404, "not_found")
    assert_error(api.put("/v1/sandboxes", json={}), 405, "method_not_allowed")
    assert_error(api.req("PATCH", "/v1/health"), 405, "method_not_allowed")


# --------------------------------------------------------------------------
# timeout, expiry, delete


def test_timeout_extend(api, sandbox):
    sid = sandbox["id"]
    r = api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 7200})
    assert r.status_code == 200, r.text
    s = r.json()
    assert set(s) == FIELDS
    assert abs((ts(s["expires_at"]) - now()).total_seconds() - 7200) < 5
    assert api.sandbox(sid)["expires_at"] == s["expires_at"]
    assert_error(api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 28801}), 400, "invalid_request")
    assert_error(api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 0}), 400, "invalid_request")
    assert_error(api.post(f"/v1/sandboxes/{sid}/timeout", json={}), 400, "invalid_request")
    assert_error(api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 5, "x": 1}), 400, "invalid_request")


def test_timeout_shorten_expires_then_409(api, sandbox):
    sid = sandbox["id"]
    pid = api.background(sid, "sleep 300")
    r = api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 1})
    assert r.status_code == 200, r.text
    assert abs((ts(r.json()["expires_at"]) - now()).total_seconds() - 1) < 1.5
    s = api.wait_state(sid, "expired", within=3.5)
    assert s["state"] == "expired", s
    assert s["ended_at"] is not None and ts(s["ended_at"]) >= ts(s["created_at"])
    assert sid not in ids(api.get("/v1/sandboxes"))
    assert sid in ids(api.get("/v1/sandboxes", params={"state": "expired"}))
    assert_error(api.post(f"/v1/sandboxes/{sid}/commands", json={"cmd": "true"}), 409, "conflict")
    assert_error(api.get(f"/v1/sandboxes/{sid}/files", params={"path": "x"}), 409, "conflict")
    assert_error(api.post(f"/v1/sandboxes/{sid}/commands/{pid}/signal", json={"signal": 9}), 409, "conflict")
    assert_error(api.post(f"/v1/sandboxes/{sid}/timeout", json={"timeout_s": 60}), 409, "conflict")
    assert_error(api.delete(f"/v1/sandboxes/{sid}"), 409, "conflict")
    # the expired sandbox's processes, cgroups and socket are gone
    left = api.daemon.check_clean([sid], within=5)
    assert not left, left


def test_delete_then_get_deleted_then_409(api, sandbox):
    sid = sandbox["id"]
    api.background(sid, "sleep 300")
    # (the leak check sees a live sandbox: processes, cgroups and its socket)
    assert set(leftovers(api.daemon.home, [sid])) == {"processes", "cgroups", "run"}
    r = api.delete(f"/v1/sandboxes/{sid}")
    assert r.status_code == 204, r.text
    assert r.content == b""
    s = api.sandbox(sid)
    assert s["state"] == "deleted"
    assert s["ended_at"] is not None and isinstance(s["end_reason"], str)
    assert_error(api.delete(f"/v1/sandboxes/{sid}"), 409, "conflict")
    assert_error(api.post(f"/v1/sandboxes/{sid}/commands", json={"cmd": "true"}), 409, "conflict")
    assert_error(api.put(f"/v1/sandboxes/{sid}/files", params={"path": "x"}, data=b"x"), 409, "conflict")
    left = api.daemon.check_clean([sid], within=5)
    assert not left, left


# --------------------------------------------------------------------------
# validation

BAD_BODIES = {
    "timeout over 8h": {"timeout_s": 28801},
    "timeout zero": {"timeout_s": 0},
    "timeout negative": {"timeout_s": -5},
    "timeout string": {"timeout_s": "900"},
    "timeout float": {"timeout_s": 1.5},
    "timeout bool": {"timeout_s": True},
    "unknown field": {"tmeplate": "base"},
    "unknown field beside good ones": {"timeout_s": 60, "colour": "blue"},
    "template number": {"template": 5},
    "metadata not object": {"metadata": ["a", "b"]},
    "metadata value not string": {"metadata": {"a": 1}},
    "envs value not string": {"envs": {"A": None}},
    "envs not object": {"envs": "A=B"},
    "cpus zero": {"cpus": 0},
    "cpus string": {"cpus": "1"},
    "cpus more than the host": {"cpus": (os.cpu_count() or 1) + 1},
    "memory too small": {"memory_mb": 15},
    "memory float": {"memory_mb": 256.5},
    "memory more than the host": {"memory_mb": 1 << 30},
    "disk zero": {"disk_mb": 0},
    "disk too large": {"disk_mb": 1048577},
    "pids too few": {"pids": 7},
    "pids too many": {"pids": 65537},
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_bad_create_body_is_400(api, name):
    before = ids(api.get("/v1/sandboxes", params={"state": "all"}))
    r = api.create_raw(BAD_BODIES[name])
    assert_error(r, 400, "invalid_request")
    assert ids(api.get("/v1/sandboxes", params={"state": "all"})) == before


@pytest.mark.parametrize("raw", [b"{", b"{\"timeout_s\": 60,}", b"[]", b"\"x\"", b"null", b"{\"a\":1}{",
                                 b"\xff\xfe{}"])
def test_malformed_json_is_400(api, raw):
    r = api.post("/v1/sandboxes", data=raw, headers={"Content-Type": "application/json"})
    assert_error(r, 400, "invalid_request")


def test_json_body_over_1mib_is_413(api):
    body = json.dumps({"metadata": {"k": "x" * ((1 << 20) + 10)}}).encode()
    r = api.post("/v1/sandboxes", data=body, headers={"Content-Type": "application/json"})
    assert_error(r, 413, "too_large")
    # just under the limit is parsed (then judged on its content)
    s = api.create_raw({"metadata": {"k": "x" * 1000}})
    assert s.status_code == 201, s.text


def test_content_type(api):
    r = api.post("/v1/sandboxes", data=b"{}", headers={"Content-Type": "text/plain"})
    assert_error(r, 415, "unsupported_media_type")
    r = api.post("/v1/sandboxes", data=b"{}", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert_error(r, 415, "unsupported_media_type")
    r = api.post("/v1/sandboxes", data=b"{}", headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 201, r.text
    api._track(r.json()["id"])
    # absent Content-Type is accepted
    r = api.post("/v1/sandboxes", data=b"{}", headers={"Content-Type": None})
    assert r.status_code == 201, r.text
    api._track(r.json()["id"])
    sid = r.json()["id"]
    r = api.post(f"/v1/sandboxes/{sid}/commands", data=b'{"cmd":"true"}', headers={"Content-Type": "text/plain"})
    assert_error(r, 415, "unsupported_media_type")


def test_unknown_template_is_400(api):
    r = api.create_raw({"template": "no-such-template"})
    assert_error(r, 400, "invalid_request")
    assert "unknown template" in r.json()["error"]["message"]
    r = api.create_raw({"template": "../base"})
    assert_error(r, 400, "invalid_request")


def test_quota_max_sandboxes(make_sbxd):
    d = make_sbxd("--max-sandboxes", "2")
    d.create_key("second")
    a = d.client()
    b = d.client(d.keys["second"])
    s1 = a.create()["id"]
    a.create()
    r = a.create_raw()
    assert_error(r, 429, "quota_exceeded")
    # per key: the other key still has its own quota
    b.create()
    # ended sandboxes do not count
    assert a.delete(f"/v1/sandboxes/{s1}").status_code == 204
    a.create()
    assert_error(a.create_raw(), 429, "quota_exceeded")
    assert len(a.get("/v1/sandboxes").json()["sandboxes"]) == 2


# --------------------------------------------------------------------------
# cross-key isolation


def test_other_key_sees_a_plain_404(api, other):
    sid = api.create()["id"]
    api.put_file(sid, "mine.txt", b"A's data")
    pid = api.background(sid, "sleep 300")
    sub = f"/v1/sandboxes/{sid}"
    checks = [
        ("GET", sub, {}),
        ("DELETE", sub, {}),
        ("POST", sub + "/timeout", {"json": {"timeout_s": 1}}),
        ("GET", sub + "/metrics", {}),
        ("POST", sub + "/commands", {"json": {"cmd": "touch /tmp/pwned"}}),
        ("GET", sub + "/commands", {}),
        ("GET", sub + f"/commands/{pid}/stream", {}),
        ("POST", sub + f"/commands/{pid}/stdin", {"data": b"x"}),
        ("POST", sub + f"/commands/{pid}/stdin/close", {}),
        ("POST", sub + f"/commands/{pid}/signal", {"json": {"signal": "KILL"}}),
        ("DELETE", sub + f"/commands/{pid}", {}),
        ("GET", sub + "/files", {"params": {"path": "mine.txt"}}),
        ("PUT", sub + "/files", {"params": {"path": "mine.txt"}, "data": b"B was here"}),
        ("DELETE", sub + "/files", {"params": {"path": "mine.txt"}}),
        ("GET", sub + "/files/list", {"params": {"path": "."}}),
        ("GET", sub + "/files/stat", {"params": {"path": "mine.txt"}}),
        ("POST", sub + "/files/mkdir", {"json": {"path": "bdir"}}),
        ("POST", sub + "/files/move", {"json": {"from": "mine.txt", "to": "b.txt"}}),
    ]
    bad = []
    for method, path, kw in checks:
        r = other.req(method, path, **kw)
        if r.status_code != 404:
            bad.append((method, path, r.status_code, r.text[:200]))
        else:
            assert_error(r, 404, "not_found")
    assert not bad, bad
    # B's own list, in every state, does not show A's sandbox
    own = other.create()["id"]
    for st in ("running", "all", "deleted", "expired"):
        listed = ids(other.get("/v1/sandboxes", params={"state": st}))
        assert sid not in listed, st
    assert own in ids(other.get("/v1/sandboxes"))
    # and A's view of B's sandbox is a 404 too
    assert_error(api.get(f"/v1/sandboxes/{own}"), 404, "not_found")
    # nothing B did had an effect
    assert api.sandbox(sid)["state"] == "running"
    assert api.sandbox(sid)["expires_at"] != ""
    assert api.get_file(sid, "mine.txt") == b"A's data"
    assert api.run(sid, "test -e /tmp/pwned || test -e b.txt || test -e bdir")["exit_code"] == 1
    cmds = {c["pid"]: c for c in api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]}
    assert cmds[pid]["running"] is True


def test_parallel_creates(api):
    from concurrent.futures import ThreadPoolExecutor

    def one(i):
        c = api.daemon.client(tracker=api.tracker)
        r = c.create_raw({"metadata": {"par": str(i)}})
        return r.status_code, r.json()

    with ThreadPoolExecutor(8) as pool:
        res = list(pool.map(one, range(16)))
    assert [st for st, _ in res] == [201] * 16, res
    got = {b["id"] for _, b in res}
    assert len(got) == 16
    for _, b in res:
        assert api.sh(b["id"], "cat /etc/hostname").strip() == "sbx-" + b["id"][:12]
