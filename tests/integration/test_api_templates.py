"""Templates: built from a spec (POST /v1/templates), listed, shown, used by
name or id, removed (DELETE, refused while in use).

Tried here: every step kind (run, copy, env, workdir, user, start, ready)
and the defaults a new sandbox takes from them; the layer cache (an
unchanged prefix is not rebuilt, a changed context file is); the event
stream; a failed step (the template untouched, nothing left running); bad
specs and hostile contexts (`..` entries, symlinks out of the context,
destinations through a symlink); an OCI image archive and a `docker save`
archive, both made here, imported with their whiteouts and config and run;
templates built from templates; removal and the layers it frees; the CLI."""

import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile
import time

import pytest

from sbxd_fixture import assert_error, events


def build_events(resp, timeout=300):
    """The events of a streamed build, as they arrive."""
    for _, ev in events(resp, until_end=False, timeout=timeout):
        yield ev

_n = [0]


def uniq(prefix):
    _n[0] += 1
    return f"{prefix}-{os.getpid()}-{_n[0]}"


def tar_context(spec, files=None):
    """A build context: the spec as sbx-template.json, then files
    {path: bytes | ("symlink", target) | ("dir",)}."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        items = [("sbx-template.json", json.dumps(spec).encode() if not isinstance(spec, bytes) else spec)]
        items += list((files or {}).items())
        for path, data in items:
            ti = tarfile.TarInfo(path)
            ti.mtime = 1700000000
            if isinstance(data, tuple) and data[0] == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, data[1]
                t.addfile(ti)
            elif isinstance(data, tuple) and data[0] == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def build(c, name, spec, files=None, stream=False, **params):
    """POST /v1/templates; the response (stream: the events)."""
    body = tar_context(spec, files) if files is not None else json.dumps(spec).encode()
    ctype = "application/x-tar" if files is not None else "application/json"
    headers = {"Content-Type": ctype}
    if stream:
        headers["Accept"] = "application/x-ndjson"
    return c.req("POST", "/v1/templates", params={"name": name, **params}, data=body, headers=headers,
                 stream=stream, timeout=600)


def built(c, name, spec, files=None, **params):
    r = build(c, name, spec, files, **params)
    assert r.status_code == 201, r.text
    return r.json()


def remove(c, name):
    r = c.delete(f"/v1/templates/{name}")
    assert r.status_code in (204, 404), r.text


def test_steps_and_the_defaults_sandboxes_take(api):
    name = uniq("steps")
    spec = {"from": "base", "steps": [
        {"run": "mkdir -p /opt/app && echo hello > /opt/app/greeting && id -u > /opt/app/built-by"},
        {"env": {"GREETING": "hi there", "OVERRIDE": "template"}},
        {"workdir": "/opt/app"},
        {"run": ["/bin/sh", "-c", "echo \"$GREETING\" > env.txt; pwd > pwd.txt"]},
        {"user": "user"},
        {"start": "python3 -m http.server 8123 --bind 127.0.0.1 >/tmp/http.log 2>&1"},
        {"ready": "python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8123/\")'"},
    ], "memory_mb": 256, "timeout_s": 1200}
    t = built(api, name, spec)
    try:
        assert t["name"] == name and len(t["id"]) == 32 and t["from"] == "base", t
        assert [layer["step"].split()[0] for layer in t["layers"]] == ["run", "run"], t["layers"]
        assert t["envs"] == {"GREETING": "hi there", "OVERRIDE": "template"} and t["user"] == "user", t
        assert t["workdir"] == "/opt/app" and t["start"][:2] == ["/bin/sh", "-c"], t
        assert t["in_use"] == {"sandboxes": 0, "snapshots": 0}

        s = api.create(template=name, envs={"OVERRIDE": "request"})
        sid = s["id"]
        assert (s["template"], s["memory_mb"], s["timeout_s"]) == (name, 256, 1200), s
        assert s["envs"] == {"GREETING": "hi there", "OVERRIDE": "request"}, s
        # the start command is up (the readiness check passed before the create returned)
        out = api.sh(sid, "id -un; pwd; cat greeting built-by env.txt pwd.txt; echo $OVERRIDE; "
                          "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8123/\").status)'")
        assert out == "user\n/opt/app\nhello\n0\nhi there\n/opt/app\nrequest\n200\n", out
        cmds = api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]
        start = [c for c in cmds if c["background"]]
        assert len(start) == 1 and start[0]["running"] and "http.server" in start[0]["argv"][2], cmds
        # requests still choose
        assert api.sh(sid, "id -un; pwd", user="root", cwd="/tmp") == "root\n/tmp\n"
        # by id too, and a GET by either
        s2 = api.create(template=t["id"], memory_mb=128)
        assert s2["template"] == name and s2["memory_mb"] == 128, s2
        for ref in (name, t["id"]):
            g = api.get(f"/v1/templates/{ref}").json()
            assert g["id"] == t["id"] and g["in_use"]["sandboxes"] == 2, g
        assert name in [x["name"] for x in api.get("/v1/templates").json()["templates"]]
        api.delete(f"/v1/sandboxes/{sid}")
        api.delete(f"/v1/sandboxes/{s2['id']}")
    finally:
        remove(api, name)


def test_a_readiness_check_that_never_passes_fails_the_create(api):
    name = uniq("never-ready")
    built(api, name, {"from": "base", "steps": [{"start": "sleep 1000"}, {"ready": "echo not yet; exit 1"}],
                      "ready_timeout_s": 2})
    try:
        t0 = time.monotonic()
        r = api.create_raw({"template": name})
        assert_error(r, 503, "unavailable")
        assert "readiness" in r.json()["error"]["message"] and "not yet" in r.json()["error"]["message"], r.text
        assert 1.5 < time.monotonic() - t0 < 20
        # nothing of it stays running
        live = api.get("/v1/sandboxes?state=live").json()["sandboxes"]
        assert not [s for s in live if s["template"] == name], live
    finally:
        remove(api, name)


def test_cache_reuses_an_unchanged_prefix(api):
    name = uniq("cache")
    spec = {"from": "base", "steps": [
        {"run": "echo one > /tmp/one; sleep 1"},
        {"copy": {"src": "app", "dest": "/home/user/app", "owner": "user"}},
        {"run": "cat /home/user/app/main.py > /tmp/seen"},
    ]}
    files = {"app": ("dir",), "app/main.py": b"print('v1')\n", "app/lib/util.py": b"x = 1\n"}
    try:
        t0 = time.monotonic()
        first = built(api, name, spec, files)
        t_first = time.monotonic() - t0
        assert [s["cached"] for s in first["steps"]] == [False, False, False], first["steps"]

        t0 = time.monotonic()
        again = built(api, name, spec, files)
        assert [s["cached"] for s in again["steps"]] == [True, True, True], again["steps"]
        assert time.monotonic() - t0 < t_first  # the sleep did not run again
        assert [x["id"] for x in again["layers"]] == [x["id"] for x in first["layers"]]
        assert again["id"] != first["id"]  # a new version all the same

        # a changed file: its copy step and what follows run again
        files["app/main.py"] = b"print('v2')\n"
        third = built(api, name, spec, files)
        assert [s["cached"] for s in third["steps"]] == [True, False, False], third["steps"]
        sid = api.create(template=name)["id"]
        assert api.sh(sid, "cat /tmp/seen; stat -c %U /home/user/app/main.py /home/user/app/lib; "
                           "stat -c '%U %a' /home/user") == "print('v2')\nuser\nuser\nuser 755\n"
        api.delete(f"/v1/sandboxes/{sid}")
        # and no_cache runs everything
        fourth = built(api, name, spec, files, no_cache="true")
        assert [s["cached"] for s in fourth["steps"]] == [False, False, False]
    finally:
        remove(api, name)


def test_events_stream(api):
    name = uniq("stream")
    r = build(api, name, {"from": "base", "steps": [{"run": "echo out; echo err >&2; sleep 2"}, {"env": {"A": "1"}}]},
              stream=True)
    try:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/x-ndjson"), r.text
        timed = list(events(r, until_end=False, timeout=300))
        evs = [e for _, e in timed]
        # events come as they happen, not at the end: the step's output and
        # its start arrived while it still slept
        at = {}
        for t, e in timed:
            at.setdefault(e["type"], t)
        assert at["done"] - at["output"] > 1.5 and at["done"] - at["step"] > 1.5, at
        kinds = [e["type"] for e in evs]
        assert kinds[0] == "step" and kinds[-1] == "done", kinds
        assert evs[0]["index"] == 1 and evs[0]["total"] == 2 and evs[0]["cached"] is False
        outs = {(e["stream"], e["data"]) for e in evs if e["type"] == "output"}
        assert ("stdout", "out\n") in outs and ("stderr", "err\n") in outs, outs
        assert kinds.count("step_done") == 2
        assert evs[-1]["template"]["name"] == name
    finally:
        remove(api, name)


def test_a_failed_step_changes_nothing(api):
    name = uniq("fails")
    good = built(api, name, {"from": "base", "steps": [{"run": "echo v1 > /tmp/v"}]})
    try:
        r = build(api, name, {"from": "base", "steps": [{"run": "echo v2 > /tmp/v"},
                                                        {"run": "echo about to fail; exit 3"}]})
        assert_error(r, 422, "build_failed")
        e = r.json()["error"]
        assert e["step"] == 2 and "exit code 3" in e["message"] and "about to fail" in e["output"], e
        # streamed, the same failure is an event
        r = build(api, name, {"from": "base", "steps": [{"run": "exit 4"}]}, stream=True)
        evs = list(build_events(r))
        assert evs[-1]["type"] == "error" and evs[-1]["step"] == 1 and "exit code 4" in evs[-1]["message"], evs
        # the template is still the one that built
        assert api.get(f"/v1/templates/{name}").json()["id"] == good["id"]
        sid = api.create(template=name)["id"]
        assert api.sh(sid, "cat /tmp/v") == "v1\n"
        api.delete(f"/v1/sandboxes/{sid}")
        # no build sandbox stays behind
        live = api.get("/v1/sandboxes?state=live").json()["sandboxes"]
        assert not [s for s in live if "sbx.build" in s["metadata"]], live
    finally:
        remove(api, name)


def test_one_build_per_name_at_a_time(api):
    name = uniq("busy")
    r1 = build(api, name, {"from": "base", "steps": [{"run": "sleep 3"}]}, stream=True)
    try:
        it = build_events(r1)
        assert next(it)["type"] == "step"  # it is running
        assert_error(build(api, name, {"from": "base"}), 409, "conflict")
        assert list(it)[-1]["type"] == "done"
    finally:
        remove(api, name)


@pytest.mark.parametrize("params,ctype,body,status,code", [
    ({}, "application/json", b"{}", 400, "invalid_request"),                         # no name
    ({"name": "../x"}, "application/json", b'{"from":"base"}', 400, "invalid_request"),
    ({"name": "base"}, "application/json", b'{"from":"base"}', 400, "invalid_request"),
    ({"name": "ok"}, "text/plain", b'{"from":"base"}', 415, "unsupported_media_type"),
    ({"name": "ok"}, "application/json", b'{"from":"base"', 400, "invalid_request"),   # malformed
    ({"name": "ok"}, "application/json", b'[1]', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","colour":1}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","from":"base"}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"steps":[]}', 400, "invalid_request"),       # no from
    ({"name": "ok"}, "application/json", b'{"from":"archive:../x.tar"}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"jump":"x"}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"run":"a","env":{}}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"run":""}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"run":"a\\u0000b"}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"run":5}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"env":{"A=B":"1"}}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","steps":[{"workdir":"rel"}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json",
     b'{"from":"base","steps":[{"copy":{"src":"../etc/passwd","dest":"/x"}}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json",
     b'{"from":"base","steps":[{"copy":{"src":"a","dest":"x"}}]}', 400, "invalid_request"),
    ({"name": "ok"}, "application/json", b'{"from":"base","memory_mb":"big"}', 400, "invalid_request"),
    ({"name": "ok", "no_cache": "maybe"}, "application/json", b'{"from":"base"}', 400, "invalid_request"),
    ({"name": "ok"}, "application/x-tar", b"not a tar at all" * 100, 400, "invalid_request"),
])
def test_bad_specs_are_400s(api, params, ctype, body, status, code):
    before = {t["name"] for t in api.get("/v1/templates").json()["templates"]}
    r = api.req("POST", "/v1/templates", params=params, data=body, headers={"Content-Type": ctype})
    assert_error(r, status, code)
    assert {t["name"] for t in api.get("/v1/templates").json()["templates"]} == before


def test_failures_of_a_valid_spec(api):
    name = uniq("bad")
    for spec, files, words in [
        ({"from": "no-such-template"}, None, "no template"),
        ({"from": "archive:missing.tar"}, {}, "no file missing.tar"),
        ({"from": "base", "steps": [{"copy": {"src": "nothere", "dest": "/x"}}]}, {}, "nothere"),
        ({"from": "base", "steps": [{"user": "nobody-here"}]}, None, "unknown user"),
        # /bin is a symlink in base: a layer with a /bin directory would hide it
        ({"from": "base", "steps": [{"copy": {"src": "f", "dest": "/bin/f"}}]}, {"f": b"x"}, "symlink"),
        # base's /usr is the host's, read-only
        ({"from": "base", "steps": [{"copy": {"src": "f", "dest": "/usr/local/f"}}]}, {"f": b"x"}, "read-only"),
    ]:
        r = build(api, name, spec, files)
        assert_error(r, 422, "build_failed")
        assert words in r.json()["error"]["message"], (spec, r.text)
    assert api.get(f"/v1/templates/{name}").status_code == 404
    # a tar without the spec
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        ti = tarfile.TarInfo("other.json")
        ti.size = 2
        t.addfile(ti, io.BytesIO(b"{}"))
    r = api.req("POST", "/v1/templates", params={"name": name}, data=buf.getvalue(),
                headers={"Content-Type": "application/x-tar"})
    assert_error(r, 400, "invalid_request")
    assert "sbx-template.json" in r.text


def test_hostile_contexts(api, tmp_path):
    name = uniq("hostile")
    marker = f"/tmp/sbx-escape-{os.getpid()}"
    # an entry climbing out of the context
    r = build(api, name, {"from": "base"}, {"../../../../" + marker.lstrip("/"): b"pwned"})
    assert_error(r, 400, "invalid_request")
    assert not os.path.exists(marker)
    # a symlink to the host's /etc, then a copy through it
    r = build(api, name, {"from": "base", "steps": [{"copy": {"src": "evil/passwd", "dest": "/x"}}]},
              {"evil": ("symlink", "/etc")})
    assert_error(r, 422, "build_failed")
    assert "symlink" in r.json()["error"]["message"]
    # an archive `from` that is a link to a host file: never read
    r = build(api, name, {"from": "archive:image.tar"}, {"image.tar": ("symlink", "/etc/shadow")})
    assert_error(r, 422, "build_failed")
    assert "symlink" in r.json()["error"]["message"], r.text
    # a symlink copied as it is: a link, never what it points to on the host
    t = built(api, name, {"from": "base", "steps": [{"copy": {"src": "link", "dest": "/opt/link"}}]},
              {"link": ("symlink", "/etc/shadow")})
    try:
        sid = api.create(template=name)["id"]
        assert api.sh(sid, "readlink /opt/link; test -e /etc/shadow || echo no-shadow") == "/etc/shadow\nno-shadow\n"
        api.delete(f"/v1/sandboxes/{sid}")
    finally:
        remove(api, name)
    assert t


def test_remove_refused_in_use_then_frees_layers(api, sbxd_daemon):
    name = uniq("rm")
    built(api, name, {"from": "base", "steps": [{"run": f"echo {name} > /unique-{name}"}]})
    layers_dir = os.path.join(sbxd_daemon.home, "layers")
    t = api.get(f"/v1/templates/{name}").json()
    mine = t["layers"][0]["id"]
    assert os.path.isdir(os.path.join(layers_dir, mine))
    sid = api.create(template=name)["id"]
    r = api.delete(f"/v1/templates/{name}")
    assert_error(r, 409, "conflict")
    assert "1 live sandbox" in r.json()["error"]["message"]
    snap = api.post(f"/v1/sandboxes/{sid}/snapshots").json()["id"]
    api.delete(f"/v1/sandboxes/{sid}")
    assert_error(api.delete(f"/v1/templates/{t['id']}"), 409, "conflict")  # the snapshot needs it
    assert api.delete(f"/v1/snapshots/{snap}").status_code == 204
    assert api.delete(f"/v1/templates/{t['id']}").status_code == 204
    assert_error(api.get(f"/v1/templates/{name}"), 404, "not_found")
    assert_error(api.delete(f"/v1/templates/{name}"), 404, "not_found")
    assert not os.path.exists(os.path.join(layers_dir, mine))
    assert_error(api.create_raw({"template": name}), 400, "invalid_request")
    assert_error(api.delete("/v1/templates/base"), 400, "invalid_request")


def test_from_a_template(api):
    parent, child = uniq("parent"), uniq("child")
    built(api, parent, {"from": "base", "steps": [{"run": "echo p > /p"}, {"env": {"P": "1"}}, {"user": "root"}]})
    try:
        c = built(api, child, {"from": parent, "steps": [{"run": "cat /p > /c; echo $P >> /c"},
                                                          {"env": {"C": "2"}}]})
        assert len(c["layers"]) == 2 and c["envs"] == {"P": "1", "C": "2"} and c["user"] == "root", c
        sid = api.create(template=child)["id"]
        assert api.sh(sid, "cat /c; id -un") == "p\n1\nroot\n"
        api.delete(f"/v1/sandboxes/{sid}")
    finally:
        remove(api, child)
        remove(api, parent)


# --- image archives --------------------------------------------------------------


def _layer(entries, compress=True):
    """A layer tar from [(path, bytes | ("dir",) | ("symlink", t) | ("hardlink", t), mode)]."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for path, data, mode in entries:
            ti = tarfile.TarInfo(path)
            ti.mode, ti.mtime = mode, 1700000000
            if path.startswith("home/app"):
                ti.uid = ti.gid = 1000
            if isinstance(data, tuple):
                ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE}[data[0]]
                if len(data) > 1:
                    ti.linkname = data[1]
                t.addfile(ti)
            else:
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    return gzip.compress(raw, mtime=0) if compress else raw


def _busybox_root():
    bb = open("/bin/busybox", "rb").read()
    return [("bin", ("dir",), 0o755), ("bin/busybox", bb, 0o755)] + [
        (f"bin/{a}", ("symlink", "busybox"), 0o777) for a in ("sh", "cat", "ls", "id", "echo", "test", "env", "pwd")
    ] + [("etc", ("dir",), 0o755), ("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", 0o644),
         ("etc/group", b"root:x:0:\napp:x:1000:\n", 0o644), ("home", ("dir",), 0o755),
         ("home/app", ("dir",), 0o755), ("srv", ("dir",), 0o755), ("srv/old", ("dir",), 0o755),
         ("srv/old/a", b"a", 0o644), ("srv/old/b", b"b", 0o644), ("gone.txt", b"x", 0o644),
         ("tmp", ("dir",), 0o1777)]


def _oci_archive(path, layers, config):
    """An OCI image layout archive, as `skopeo copy ... oci-archive:` writes one."""
    blobs = {}

    def blob(data):
        d = hashlib.sha256(data).hexdigest()
        blobs[d] = data
        return {"digest": "sha256:" + d, "size": len(data)}
    cfg = blob(json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {**cfg, "mediaType": "application/vnd.oci.image.config.v1+json"},
                "layers": [{**blob(lay), "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"} for lay in layers]}
    m = blob(json.dumps(manifest).encode())
    index = {"schemaVersion": 2, "manifests": [{**m, "mediaType": "application/vnd.oci.image.manifest.v1+json"}]}
    with tarfile.open(path, "w") as t:
        for name, data in [("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                           ("index.json", json.dumps(index).encode())] + \
                          [(f"blobs/sha256/{d}", data) for d, data in blobs.items()]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))


def _docker_save(path, layers, config):
    with tarfile.open(path, "w") as t:
        names = []
        cfg = json.dumps(config).encode()
        cfg_name = hashlib.sha256(cfg).hexdigest() + ".json"  # as docker names it
        items = [(cfg_name, cfg)]
        for i, lay in enumerate(layers):
            names.append(f"l{i}/layer.tar")
            items.append((names[-1], gzip.decompress(lay)))
        items.append(("manifest.json", json.dumps([{"Config": cfg_name, "RepoTags": ["t:1"],
                                                    "Layers": names}]).encode()))
        for name, data in items:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))


@pytest.mark.parametrize("kind", ["oci", "docker-save"])
def test_image_archive_imported_and_run(api, tmp_path, kind):
    layers = [
        _layer(_busybox_root()),
        # a whiteout of gone.txt, /srv/old made opaque with a new file in it
        _layer([("srv/old/new", b"new", 0o644), ("srv/old/.wh..wh..opq", b"", 0o644), (".wh.gone.txt", b"", 0o644),
                ("home/app/hello", b"hello from the image\n", 0o640)]),
    ]
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/bin", "IMG=yes"], "WorkingDir": "/home/app", "User": "app",
                         "Cmd": ["/bin/sh"]}}
    config["rootfs"] = {"type": "layers",
                        "diff_ids": ["sha256:" + hashlib.sha256(gzip.decompress(lay)).hexdigest() for lay in layers]}
    img = tmp_path / "image.tar"
    (_oci_archive if kind == "oci" else _docker_save)(str(img), layers, config)
    name = uniq("image")
    spec = {"from": "archive:image.tar", "steps": [{"run": ["/bin/sh", "-c", "echo built > /home/app/built"]}]}
    t = built(api, name, spec, {"image.tar": img.read_bytes()})
    try:
        assert t["envs"]["IMG"] == "yes" and t["workdir"] == "/home/app" and t["user"] == "app", t
        sid = api.create(template=name)["id"]
        out = api.sh(sid, "id -un; pwd; echo $IMG; cat hello built; ls /srv/old; test -e /gone.txt || echo gone")
        assert out == "app\n/home/app\nyes\nhello from the image\nbuilt\nnew\ngone\n", out
        api.delete(f"/v1/sandboxes/{sid}")
        # the import is cached like a step
        again = built(api, name, spec, {"image.tar": img.read_bytes()})
        assert again["layers"][0]["id"] == t["layers"][0]["id"] and again["steps"][-1]["cached"], again
    finally:
        remove(api, name)


def test_cli_template_verbs(api, sbxd_daemon, tmp_path):
    name = uniq("cli")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('cli app')\n")
    (tmp_path / "spec.json").write_text(json.dumps({"from": "base", "steps": [
        {"copy": {"src": "app", "dest": "/home/user/app", "owner": "user"}},
        {"run": "echo building; python3 /home/user/app/main.py"}, {"workdir": "/home/user/app"}]}))
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": api.key}
    sbx = sbx_bin()

    def run(*args):
        return subprocess.run([sbx, *args], env=env, capture_output=True, text=True, timeout=300)
    try:
        r = run("template", "build", "-f", str(tmp_path / "spec.json"), "--name", name)
        assert r.returncode == 0, r.stderr
        assert len(r.stdout.strip()) == 32, r.stdout
        assert "[1/3] copy app /home/user/app" in r.stderr and "cli app" in r.stderr, r.stderr
        # not a terminal: plain lines, no escape codes, nothing redrawn
        assert "\x1b" not in r.stderr and "\r" not in r.stderr, repr(r.stderr)
        r = run("template", "build", "-f", str(tmp_path / "spec.json"), "--name", name)
        assert r.returncode == 0 and "(cached)" in r.stderr, r.stderr
        assert "\x1b" not in r.stderr and "\r" not in r.stderr, repr(r.stderr)
        r = run("template", "ls")
        assert r.returncode == 0 and name in r.stdout and "base" in r.stdout, r.stdout
        r = run("template", "info", name)
        assert r.returncode == 0 and "workdir    /home/user/app" in r.stdout, r.stdout
        r = run("--json", "template", "info", name)
        assert json.loads(r.stdout)["name"] == name
        r = run("template", "build", "-f", str(tmp_path / "missing.json"), "--name", name)
        assert r.returncode == 125 and "missing.json" in r.stderr
        r = run("template", "build", "--name", name)
        assert r.returncode == 2
        r = run("template", "rm", name)
        assert r.returncode == 0, r.stderr
        r = run("template", "rm", name)
        assert r.returncode == 125 and "no template" in r.stderr
    finally:
        remove(api, name)


def sbx_bin():
    return os.path.abspath(os.environ.get("SBX_BIN") or os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                                      "sbx"))


def on_a_terminal(args, env, timeout=300):
    """Run sbx with stderr on a pseudo-terminal (stdout a pipe): the chunks
    the terminal got, each with its arrival time, then stdout and the exit
    status."""
    import pty
    import threading
    master, slave = pty.openpty()
    t0 = time.monotonic()
    p = subprocess.Popen([sbx_bin(), *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []

    def read():
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                break
            if not b:
                break
            chunks.append((time.monotonic() - t0, b))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        out, _ = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader.join(10)
    os.close(master)
    return chunks, out.decode(), p.returncode


def test_cli_build_progress_on_a_terminal(api, sbxd_daemon, tmp_path):
    """On a terminal, `sbx template build` keeps a status line under its
    output - the step, its number, how long it has run - redrawn every
    second while the step prints nothing, erased before each output line;
    then "done in", and "(cached)" on a rebuild."""
    name = uniq("tty")
    (tmp_path / "spec.json").write_text(json.dumps({"from": "base", "steps": [
        {"run": "echo first; sleep 3.5; echo last"}, {"env": {"A": "1"}}]}))
    env = {**os.environ, "SBX_URL": sbxd_daemon.url, "SBX_API_KEY": api.key}
    try:
        chunks, out, rc = on_a_terminal(["template", "build", "-f", str(tmp_path / "spec.json"), "--name", name], env)
        text = b"".join(b for _, b in chunks).decode(errors="replace")
        assert rc == 0 and len(out.strip()) == 32, (rc, out, text)
        assert "\x1b" not in out  # the id on stdout, plain
        assert "\x1b[1m[1/2]\x1b[0m run echo first" in text, repr(text)
        # the status line: step, number, time so far, redrawn in place
        data = b"".join(b for _, b in chunks)
        ends, n = [], 0
        for t, b in chunks:
            n += len(b)
            ends.append((n, t))

        def arrivals(pattern):
            """When each occurrence of pattern had fully arrived."""
            out, i = [], data.find(pattern)
            while i >= 0:
                out.append(next(t for end, t in ends if end >= i + len(pattern)))
                i = data.find(pattern, i + 1)
            return out
        redraws = arrivals(b"\r\x1b[K\x1b[36m[1/2]\x1b[0m run echo first")
        first_at = arrivals(b"\x1b[2mfirst\r\n")[0]  # output lines: dimmed
        last_at = arrivals(b"\x1b[2mlast\r\n")[0]
        silent = [t for t in redraws if first_at < t < last_at]
        assert len(silent) >= 3, (first_at, last_at, redraws)
        gaps = [b - a for a, b in zip([first_at] + silent, silent + [last_at])]
        assert max(gaps) < 1.6, gaps  # at least once a second (with room for a loaded machine)
        assert "(1s)" in text and "(2s)" in text and "(3s)" in text, repr(text)
        # erased before an output line, never mixed with it
        assert "\r\x1b[K\x1b[2mlast" in text, repr(text)
        assert "done in 3." in text and "built template " + name in text, repr(text)
        # nothing left of it at the end: its last drawing erased before the last line
        last_status = text.rfind("\x1b[36m[")
        erased = text.find("\r\x1b[K", last_status)
        assert 0 <= last_status < erased < text.find("built template " + name), repr(text[-300:])
        chunks, out, rc = on_a_terminal(["template", "build", "-f", str(tmp_path / "spec.json"), "--name", name], env)
        text = b"".join(b for _, b in chunks).decode(errors="replace")
        assert rc == 0 and "\x1b[32m(cached)\x1b[0m" in text, repr(text)
    finally:
        remove(api, name)


def test_build_steps_root_is_a_container_root_not_the_hosts(api, sbxd_daemon):
    """A run step's root may chown and add users (a container's default
    capabilities, inside the sandbox's user namespace) -- and nothing more:
    the host's /usr stays read-only, host files stay out of reach, and the
    sandboxes of the template get no capability at all."""
    name = uniq("caps")
    marker = f"/usr/sbx-pwned-{os.getpid()}"
    spec = {"from": "base", "steps": [
        {"run": "touch /f && chown 1000:1000 /f && chmod 4755 /f && grep CapEff /proc/self/status > /caps"},
        {"run": f"touch {marker} 2>/dev/null && echo wrote-host-usr; "
                "cat /proc/1/root/etc/shadow 2>/dev/null && echo read-init-root; "
                "mount -t tmpfs x /mnt 2>/dev/null && echo mounted; echo done"},
    ]}
    r = build(api, name, spec, stream=True)
    evs = list(build_events(r))
    try:
        assert evs[-1]["type"] == "done", evs[-1]
        out = "".join(e["data"] for e in evs if e["type"] == "output")
        assert out == "done\n", out
        assert not os.path.exists(marker)
        sid = api.create(template=name)["id"]
        caps = api.sh(sid, "cat /caps; stat -c '%u %a' /f; grep CapEff /proc/self/status", user="root")
        lines = caps.splitlines()
        assert lines[0] != "CapEff:\t0000000000000000", caps   # the build step had them
        assert lines[1] == "1000 4755" and lines[2] == "CapEff:\t0000000000000000", caps
        api.delete(f"/v1/sandboxes/{sid}")
    finally:
        remove(api, name)


def test_run_steps_get_the_network_the_spec_allows(api):
    """build.network: a run step reaches what the policy allows (here a
    local server standing for a package index), and only that."""
    import http.server
    import threading
    from sbxd_fixture import EGRESS_TEST_SERVER

    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = b"package-1.0\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    srv = http.server.ThreadingHTTPServer((EGRESS_TEST_SERVER, 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    name = uniq("net")
    port = srv.server_address[1]
    try:
        t = built(api, name, {"from": "base", "build": {"network": {"mode": "allowlist", "allow": ["allowed.test"]}},
                              "steps": [{"run": f"curl -sf http://allowed.test:{port}/pkg > /opt/pkg.txt"}]})
        sid = api.create(template=name)["id"]
        assert api.sh(sid, "cat /opt/pkg.txt") == "package-1.0\n"
        assert api.get(f"/v1/sandboxes/{sid}").json()["network"] == {"mode": "none"}  # the build's, not theirs
        api.delete(f"/v1/sandboxes/{sid}")
        r = build(api, name, {"from": "base", "build": {"network": {"mode": "allowlist", "allow": ["allowed.test"]}},
                              "steps": [{"run": f"curl -sSf http://other.test:{port}/pkg"}]})
        assert_error(r, 422, "build_failed")
        assert "403" in r.json()["error"]["output"], r.text
        r = build(api, name, {"from": "base", "steps": [{"run": f"curl -sSf -m 5 http://allowed.test:{port}/pkg"}]})
        assert_error(r, 422, "build_failed")   # no network unless the spec says so
        assert_error(build(api, name, {"from": "base", "build": {"network": {"mode": "wide"}}}), 400, "invalid_request")
        assert t
    finally:
        srv.shutdown()
        remove(api, name)


def test_bounds_on_specs_and_contexts(api, make_sbxd):
    """A spec is at most 1 MiB; a build context unpacks to at most
    --max-upload bytes, however well it compresses."""
    big = {"from": "base", "steps": [{"env": {"PAD": "x" * (1 << 20)}}]}
    assert_error(build(api, uniq("big"), big), 413, "too_large")
    r = build(api, uniq("bigtar"), {"from": "base", "steps": [{"env": {"PAD": "x" * (1 << 20)}}]}, files={})
    assert_error(r, 400, "invalid_request")
    assert "at most" in r.json()["error"]["message"], r.text
    # a 40 MiB file of zeros compresses to ~40 KiB: the bound is on what it unpacks to
    d = make_sbxd("--max-upload", "1M")
    c = d.client()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        spec = json.dumps({"from": "base", "steps": [{"copy": {"src": "zeros", "dest": "/z"}}]}).encode()
        ti = tarfile.TarInfo("sbx-template.json")
        ti.size = len(spec)
        t.addfile(ti, io.BytesIO(spec))
        ti = tarfile.TarInfo("zeros")
        ti.size = 40 << 20
        t.addfile(ti, io.BytesIO(bytes(40 << 20)))
    body = buf.getvalue()
    assert len(body) < 1 << 20
    r = c.req("POST", "/v1/templates", params={"name": "bomb"}, data=body,
              headers={"Content-Type": "application/x-tar"})
    assert_error(r, 400, "invalid_request")
    assert "build context" in r.json()["error"]["message"], r.text
    # the failed build's directory goes once the request is done (just after the answer)
    builds = os.path.join(d.home, "builds")
    deadline = time.monotonic() + 5
    while os.path.isdir(builds) and os.listdir(builds) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.isdir(builds) or not os.listdir(builds), os.listdir(builds)


def test_layers_and_the_template_are_on_disk_before_they_are_named(make_sbxd):
    """A built layer is synced before it is renamed into the cache (and the
    rename synced); the template directory is synced before it is swapped
    in: after a crash of the machine no template stands on a half-written
    layer."""
    from syscalls import first, traced
    d = make_sbxd()
    c = d.client()
    name = uniq("durable")
    with traced(d.pid, ["syncfs", "fsync", "rename", "renameat", "renameat2"]) as seen:
        t = built(c, name, {"from": "base", "steps": [{"run": f"echo {name} > /f"}]})
    key = t["layers"][0]["id"]
    layers, templates = os.path.join(d.home, "layers"), os.path.join(d.home, "templates")
    dump = "".join(line for _, line in seen)
    synced = first(seen, lambda n, l: n == "syncfs" and f"<{layers}/.{key}.tmp." in l)
    assert synced is not None, "the layer was never synced:\n" + dump
    renamed = first(seen, lambda n, l: n.startswith("rename") and f"\"{layers}/{key}\"" in l, synced)
    assert renamed is not None, dump
    assert first(seen, lambda n, l: n == "fsync" and f"<{layers}>" in l, renamed) is not None, dump
    tsynced = first(seen, lambda n, l: n == "syncfs" and f"<{templates}/.{name}.tmp." in l, renamed)
    assert tsynced is not None, "the template directory was never synced:\n" + dump
    installed = first(seen, lambda n, l: n.startswith("rename") and f"\"{templates}/{name}\"" in l, tsynced)
    assert installed is not None, dump
    assert first(seen, lambda n, l: n == "fsync" and f"<{templates}>" in l, installed) is not None, dump
    sid = c.create(template=name)["id"]
    assert c.sh(sid, "cat /f") == name + "\n"
