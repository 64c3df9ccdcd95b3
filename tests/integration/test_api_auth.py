"""sbxd REST API: authentication (contract: everything but GET /v1/health needs a key).

Every route is tried without a key, with a wrong key, with a malformed
Authorization header and with a revoked key: each must be 401
{"error":{"code":"unauthorized"}} and must not have acted (the sandbox is
still running, its file untouched, its command still alive).
"""

import uuid

import pytest

from sbxd_fixture import Client, assert_error

ROUTES = [
    ("GET", "/v1/sandboxes", None),
    ("POST", "/v1/sandboxes", {}),
    ("GET", "/v1/sandboxes/{id}", None),
    ("DELETE", "/v1/sandboxes/{id}", None),
    ("POST", "/v1/sandboxes/{id}/timeout", {"timeout_s": 5}),
    ("GET", "/v1/sandboxes/{id}/metrics", None),
    ("POST", "/v1/sandboxes/{id}/commands", {"cmd": "touch /tmp/acted"}),
    ("GET", "/v1/sandboxes/{id}/commands", None),
    ("GET", "/v1/sandboxes/{id}/commands/{pid}/stream", None),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/stdin", b"x"),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/stdin/close", None),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/signal", {"signal": "KILL"}),
    ("DELETE", "/v1/sandboxes/{id}/commands/{pid}", None),
    ("PUT", "/v1/sandboxes/{id}/files?path=f.txt", b"overwritten"),
    ("GET", "/v1/sandboxes/{id}/files?path=f.txt", None),
    ("DELETE", "/v1/sandboxes/{id}/files?path=f.txt", None),
    ("GET", "/v1/sandboxes/{id}/files/list?path=.", None),
    ("GET", "/v1/sandboxes/{id}/files/stat?path=f.txt", None),
    ("POST", "/v1/sandboxes/{id}/files/mkdir", {"path": "newdir"}),
    ("POST", "/v1/sandboxes/{id}/files/move", {"from": "f.txt", "to": "g.txt"}),
    ("GET", "/v1/sandboxes/{id}/pty?cols=80&rows=24", None),
    ("GET", "/v1/usage", None),
    ("GET", "/v1/openapi.json", None),
    ("GET", "/metrics", None),
]

BAD_AUTH = {
    "missing": None,
    "wrong key": {"Authorization": "Bearer sbx_" + "0" * 48},
    "not bearer": {"Authorization": "Basic dXNlcjpwYXNz"},
    "empty bearer": {"Authorization": "Bearer "},
}


def _send(api, method, path, body, headers):
    kw = {}
    if isinstance(body, bytes):
        kw["data"] = body
    elif body is not None:
        kw["json"] = body
    c = Client(api.daemon, None)
    return c.req(method, path, headers=headers, **kw)


@pytest.fixture
def victim(api):
    """A sandbox with a file and a running background command."""
    sb = api.create()
    api.put_file(sb["id"], "f.txt", b"original")
    pid = api.background(sb["id"], "sleep 300")
    return sb["id"], pid


def _assert_untouched(api, sid, pid):
    assert api.sandbox(sid)["state"] == "running"
    assert api.get_file(sid, "f.txt") == b"original"
    assert api.get(f"/v1/sandboxes/{sid}/files/stat", params={"path": "g.txt"}).status_code == 404
    assert api.get(f"/v1/sandboxes/{sid}/files/stat", params={"path": "newdir"}).status_code == 404
    assert api.get(f"/v1/sandboxes/{sid}/files/stat", params={"path": "/tmp/acted"}).status_code == 404
    cmds = {c["pid"]: c for c in api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]}
    assert cmds[pid]["running"] is True, cmds


def test_health_needs_no_key(api):
    c = Client(api.daemon, None)
    r = c.get("/v1/health")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok"
    assert isinstance(body["version"], str) and body["version"]
    assert isinstance(body["sandboxes_running"], int) and body["sandboxes_running"] >= 0
    # a wrong key on health is not an error either
    r = c.get("/v1/health", headers={"Authorization": "Bearer nonsense"})
    assert r.status_code == 200


@pytest.mark.parametrize("how", list(BAD_AUTH))
def test_every_other_route_is_401_without_a_valid_key(api, victim, how):
    sid, pid = victim
    before = api.get("/v1/sandboxes?state=all").json()["sandboxes"]
    bad = []
    for method, path, body in ROUTES:
        p = path.format(id=sid, pid=pid)
        r = _send(api, method, p, body, BAD_AUTH[how])
        if r.status_code != 401:
            bad.append((method, p, r.status_code, r.text[:200]))
            continue
        assert_error(r, 401, "unauthorized")
    assert not bad, f"not 401 with {how} key: {bad}"
    _assert_untouched(api, sid, pid)
    assert api.get("/v1/sandboxes?state=all").json()["sandboxes"] == before, "an unauthorized create acted"


def test_unknown_sandbox_still_401_not_404_without_key(api):
    r = _send(api, "GET", "/v1/sandboxes/" + "0" * 32, None, None)
    assert_error(r, 401, "unauthorized")
    r = _send(api, "GET", "/v1/no-such-route", None, None)
    assert r.status_code in (401, 404), r.status_code


def test_revoked_key_gets_401(api, victim):
    sid, pid = victim
    d = api.daemon
    name = "revokee-" + uuid.uuid4().hex[:8]
    key = d.create_key(name)
    c = Client(d, key)
    r = c.get("/v1/sandboxes")
    assert r.status_code == 200, r.text
    assert c.get("/v1/usage").json()["key"] == name
    listed = d.keys_cli("list")
    assert name in listed
    d.revoke_key(name)
    for method, path, body in ROUTES:
        p = path.format(id=sid, pid=pid)
        r = _send(api, method, p, body, {"Authorization": "Bearer " + key})
        assert r.status_code == 401, (method, p, r.status_code, r.text[:200])
        assert_error(r, 401, "unauthorized")
    # the other keys still work
    assert api.get("/v1/sandboxes").status_code == 200
    _assert_untouched(api, sid, pid)
