"""sbxd REST API: files (upload, download, list, stat, mkdir, move, delete),
their errors, and path resolution that must stay inside the sandbox."""

import hashlib
import os
import random
import socket
import threading
import time
import uuid


from sbxd_fixture import assert_error

MiB = 1 << 20
ENTRY_FIELDS = {"name", "path", "type", "size", "mode", "mtime"}


def files(sid, rest=""):
    return f"/v1/sandboxes/{sid}/files{rest}"


class PRNGStream:
    """size bytes of seeded pseudo-random data, produced as read and hashed on
    the way: an upload body with a Content-Length that never sits in memory."""

    def __init__(self, size, seed):
        self.size, self.left = size, size
        self.rng = random.Random(seed)
        self.sha = hashlib.sha256()

    def __len__(self):
        return self.size

    def read(self, n=-1):
        if n is None or n < 0 or n > self.left:
            n = self.left
        n = min(n, MiB)
        if n == 0:
            return b""
        b = self.rng.randbytes(n)
        self.left -= n
        self.sha.update(b)
        return b


def sandbox_sha(api, sid, path):
    return api.sh(sid, ["sha256sum", path]).split()[0]


# --------------------------------------------------------------------------
# round trips


def test_round_trip_1mib_with_nuls(api, sandbox):
    sid = sandbox["id"]
    data = b"\x00" * 1000 + os.urandom(MiB - 2000) + b"\x00\xff" * 500
    r = api.put(files(sid), params={"path": "blob.bin"}, data=data)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/home/user/blob.bin", "size": MiB}
    g = api.get(files(sid), params={"path": "blob.bin"})
    assert g.status_code == 200
    assert g.headers["Content-Type"].startswith("application/octet-stream")
    assert int(g.headers["Content-Length"]) == MiB
    assert g.content == data
    assert sandbox_sha(api, sid, "blob.bin") == hashlib.sha256(data).hexdigest()
    # the file belongs to the sandbox user, with the default mode
    assert api.sh(sid, "stat -c '%u %a' blob.bin") == "1000 644\n"
    # replacing it
    api.put_file(sid, "blob.bin", b"short")
    assert api.get_file(sid, "blob.bin") == b"short"
    # an empty file
    assert api.put_file(sid, "empty", b"")["size"] == 0
    g = api.get(files(sid), params={"path": "empty"})
    assert g.status_code == 200 and g.content == b"" and g.headers["Content-Length"] == "0"


def test_upload_and_download_100mib(api, sandbox):
    sid = sandbox["id"]
    size = 100 * MiB
    body = PRNGStream(size, seed=1234)
    t = time.monotonic()
    r = api.put(files(sid), params={"path": "big/hundred.bin"}, data=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/home/user/big/hundred.bin", "size": size}
    want = body.sha.hexdigest()
    assert body.left == 0
    assert sandbox_sha(api, sid, "big/hundred.bin") == want
    h = hashlib.sha256()
    n = 0
    with api.get(files(sid), params={"path": "big/hundred.bin"}, stream=True, timeout=120) as g:
        assert g.status_code == 200
        assert int(g.headers["Content-Length"]) == size
        for chunk in g.iter_content(MiB):
            h.update(chunk)
            n += len(chunk)
    assert n == size and h.hexdigest() == want
    assert time.monotonic() - t < 60


def test_chunked_upload(api, sandbox):
    """An upload without Content-Length (Transfer-Encoding: chunked)."""
    sid = sandbox["id"]
    parts = [os.urandom(300_000) for _ in range(7)]
    r = api.put(files(sid), params={"path": "chunked.bin"}, data=iter(parts))
    assert r.status_code == 200, r.text
    assert r.json()["size"] == sum(map(len, parts))
    assert api.get_file(sid, "chunked.bin") == b"".join(parts)


def test_upload_over_max_upload_is_413_and_leaves_nothing(make_sbxd):
    d = make_sbxd("--max-upload", "1M")
    c = d.client()
    sid = c.create()["id"]
    c.put_file(sid, "ok.bin", b"x" * MiB)
    r = c.put(files(sid), params={"path": "big.bin"}, data=b"x" * (MiB + 1))
    assert_error(r, 413, "too_large")
    r = c.put(files(sid), params={"path": "big2.bin"}, data=iter([b"y" * 600_000] * 4))
    assert_error(r, 413, "too_large")
    # atomic: no half file, no temporary left
    assert c.sh(sid, "ls -A").split() == ["ok.bin"]


def test_aborted_upload_leaves_no_half_file(api, sandbox):
    """A client that goes away mid-upload leaves neither the file nor a temporary."""
    sid = sandbox["id"]
    api.put_file(sid, "keep.bin", b"old content")
    host, port = api.daemon.url[len("http://"):].rsplit(":", 1)
    for target in ("keep.bin", "new.bin"):
        with socket.create_connection((host, int(port)), timeout=10) as c:
            c.sendall((f"PUT /v1/sandboxes/{sid}/files?path={target} HTTP/1.1\r\n"
                       f"Host: {host}\r\nAuthorization: Bearer {api.key}\r\n"
                       f"Content-Length: {10 * MiB}\r\n\r\n").encode())
            c.sendall(os.urandom(2 * MiB))
            time.sleep(0.3)
    time.sleep(0.5)
    assert api.get_file(sid, "keep.bin") == b"old content"
    left = api.sh(sid, "ls -A /home/user")
    assert left.split() == ["keep.bin"], f"an aborted upload left: {left.split()}"


def test_names_with_spaces_and_non_ascii(api, sandbox):
    sid = sandbox["id"]
    name = "dir with space/ünï cödé 名前 #?&=%.txt"
    r = api.put(files(sid), params={"path": name}, data=b"content")
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "/home/user/" + name
    assert api.get_file(sid, name) == b"content"
    entries = api.get(files(sid, "/list"), params={"path": "dir with space"}).json()["entries"]
    assert [e["name"] for e in entries] == ["ünï cödé 名前 #?&=%.txt"]
    assert api.run(sid, ["cat", name])["stdout"] == "content"


def test_put_creates_parents_and_relative_paths_resolve_under_home(api, sandbox):
    sid = sandbox["id"]
    assert api.put_file(sid, "a/b/c/deep.txt", b"deep")["path"] == "/home/user/a/b/c/deep.txt"
    assert api.sh(sid, "cat /home/user/a/b/c/deep.txt") == "deep"
    st = api.get(files(sid, "/stat"), params={"path": "a/b"}).json()
    assert st["type"] == "dir" and st["path"] == "/home/user/a/b"
    assert api.put_file(sid, "./x/../rel.txt", b"r")["path"] == "/home/user/rel.txt"
    assert api.put_file(sid, "/tmp/abs/t.txt", b"t")["path"] == "/tmp/abs/t.txt"
    assert api.sh(sid, "cat /tmp/abs/t.txt") == "t"
    # a file where a directory is needed
    assert_error(api.put(files(sid), params={"path": "rel.txt/under"}, data=b"x"), 409, "conflict")


def test_put_mode(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "run.sh", b"#!/bin/sh\necho ran\n", mode="0755")
    st = api.get(files(sid, "/stat"), params={"path": "run.sh"}).json()
    assert st["mode"] == "0755"
    assert api.sh(sid, "./run.sh") == "ran\n"
    api.put_file(sid, "secret", b"s", mode="0600")
    assert api.sh(sid, "stat -c %a secret") == "600\n"
    for bad in ("999", "rwx", "01777777", "-1"):
        assert_error(api.put(files(sid), params={"path": "m", "mode": bad}, data=b"x"), 400, "invalid_request")


def test_list_with_depth(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "t/a.txt", b"a")
    api.put_file(sid, "t/sub/b.txt", b"bb")
    api.put_file(sid, "t/sub/deeper/c.txt", b"ccc")

    def listing(**params):
        r = api.get(files(sid, "/list"), params=params)
        assert r.status_code == 200, r.text
        es = r.json()["entries"]
        for e in es:
            assert ENTRY_FIELDS <= set(e), e
        return {e["path"]: e for e in es}

    one = listing(path="t")
    assert set(one) == {"/home/user/t/a.txt", "/home/user/t/sub"}
    assert set(listing(path="t", depth=1)) == set(one)
    two = listing(path="t", depth=2)
    assert set(two) == {"/home/user/t/a.txt", "/home/user/t/sub", "/home/user/t/sub/b.txt",
                        "/home/user/t/sub/deeper"}
    three = listing(path="/home/user/t", depth=3)
    assert "/home/user/t/sub/deeper/c.txt" in three and len(three) == 5
    assert three["/home/user/t/sub/deeper/c.txt"]["size"] == 3
    assert three["/home/user/t/sub/deeper/c.txt"]["name"] == "c.txt"
    assert three["/home/user/t/sub"]["type"] == "dir"
    # default path is the home
    assert "/home/user/t" in listing()
    assert_error(api.get(files(sid, "/list"), params={"path": "nope"}), 404, "not_found")
    assert_error(api.get(files(sid, "/list"), params={"path": "t", "depth": "x"}), 400, "invalid_request")


def test_stat_fields(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "f.txt", b"12345")
    api.sh(sid, "mkdir d && ln -s f.txt link && ln -s /etc/hostname abslink && mkfifo fifo")
    st = api.get(files(sid, "/stat"), params={"path": "f.txt"}).json()
    assert st["type"] == "file" and st["size"] == 5 and st["mode"] == "0644"
    assert st["name"] == "f.txt" and st["path"] == "/home/user/f.txt"
    assert "symlink_target" not in st
    assert st["mtime"].endswith("Z") and st["mtime"][:2] == "20"
    st = api.get(files(sid, "/stat"), params={"path": "d"}).json()
    assert st["type"] == "dir" and st["mode"] == "0755"
    st = api.get(files(sid, "/stat"), params={"path": "link"}).json()
    assert st["type"] == "symlink" and st["symlink_target"] == "f.txt"
    st = api.get(files(sid, "/stat"), params={"path": "abslink"}).json()
    assert st["type"] == "symlink" and st["symlink_target"] == "/etc/hostname"
    st = api.get(files(sid, "/stat"), params={"path": "fifo"}).json()
    assert st["type"] == "other"
    assert_error(api.get(files(sid, "/stat"), params={"path": "missing"}), 404, "not_found")


def test_mkdir(api, sandbox):
    sid = sandbox["id"]
    r = api.post(files(sid, "/mkdir"), json={"path": "newdir/inner"})
    assert r.status_code == 201, r.text
    assert r.json()["path"] == "/home/user/newdir/inner"
    assert r.json().get("created", True) is True, r.json()
    r = api.post(files(sid, "/mkdir"), json={"path": "newdir/inner"})
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/home/user/newdir/inner", "created": False}
    assert api.run(sid, "test -d newdir/inner")["exit_code"] == 0
    r = api.post(files(sid, "/mkdir"), json={"path": "p1/p2", "parents": False})
    assert_error(r, 404, "not_found")
    api.put_file(sid, "plain", b"x")
    assert_error(api.post(files(sid, "/mkdir"), json={"path": "plain"}), 409, "conflict")
    assert_error(api.post(files(sid, "/mkdir"), json={"path": "x", "bogus": 1}), 400, "invalid_request")
    assert_error(api.post(files(sid, "/mkdir"), json={}), 400, "invalid_request")


def test_move(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "from.txt", b"moving")
    r = api.post(files(sid, "/move"), json={"from": "from.txt", "to": "sub/../to.txt"})
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "/home/user/to.txt"}
    assert api.get_file(sid, "to.txt") == b"moving"
    assert_error(api.get(files(sid), params={"path": "from.txt"}), 404, "not_found")
    assert_error(api.post(files(sid, "/move"), json={"from": "nothere", "to": "x"}), 404, "not_found")
    api.sh(sid, "mkdir -p dd/e && echo y > dd/e/f")
    assert api.post(files(sid, "/move"), json={"from": "dd", "to": "/tmp/dd2"}).status_code == 200
    assert api.sh(sid, "cat /tmp/dd2/e/f") == "y\n"


def test_delete(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "gone.txt", b"x")
    assert api.delete(files(sid), params={"path": "gone.txt"}).status_code == 204
    assert_error(api.get(files(sid), params={"path": "gone.txt"}), 404, "not_found")
    assert_error(api.delete(files(sid), params={"path": "gone.txt"}), 404, "not_found")
    api.put_file(sid, "tree/a/b.txt", b"x")
    assert_error(api.delete(files(sid), params={"path": "tree"}), 409, "conflict")
    assert api.run(sid, "test -f tree/a/b.txt")["exit_code"] == 0
    assert api.delete(files(sid), params={"path": "tree", "recursive": "true"}).status_code == 204
    assert api.run(sid, "test -e tree")["exit_code"] == 1
    api.sh(sid, "mkdir emptydir")
    assert api.delete(files(sid), params={"path": "emptydir"}).status_code == 204
    # deleting a symlink deletes the link, not its target
    api.sh(sid, "mkdir keep && echo k > keep/k && ln -s keep lnk")
    assert api.delete(files(sid), params={"path": "lnk", "recursive": "true"}).status_code == 204
    assert api.sh(sid, "cat keep/k; test ! -e lnk && echo nolink") == "k\nnolink\n"


def test_get_of_a_proc_file_returns_its_content(api, sandbox):
    """procfs files have st_size 0: a download must still carry their bytes."""
    sid = sandbox["id"]
    want = api.run(sid, ["cat", "/proc/1/cmdline"])["stdout"].encode()
    assert want.startswith(b"sbx-init")
    r = api.get(files(sid), params={"path": "/proc/1/cmdline"})
    assert r.status_code == 200, r.text
    assert r.content == want
    assert int(r.headers["Content-Length"]) == len(want)


def test_get_directory_is_409_and_missing_is_404(api, sandbox):
    sid = sandbox["id"]
    assert_error(api.get(files(sid), params={"path": "/tmp"}), 409, "conflict")
    assert_error(api.get(files(sid), params={"path": "nothing/here"}), 404, "not_found")
    assert_error(api.get(files(sid)), 400, "invalid_request")


def test_permission_denied_is_403(api, sandbox):
    sid = sandbox["id"]
    api.sh(sid, "echo topsecret > /etc/shadowish && chmod 600 /etc/shadowish", user="root")
    assert_error(api.get(files(sid), params={"path": "/etc/shadowish"}), 403, "forbidden")
    # root may
    r = api.get(files(sid), params={"path": "/etc/shadowish", "user": "root"})
    assert r.status_code == 200 and r.content == b"topsecret\n"
    assert_error(api.put(files(sid), params={"path": "/usr/evil"}, data=b"x"), 403, "forbidden")
    assert_error(api.put(files(sid), params={"path": "/etc/passwd"}, data=b"x"), 403, "forbidden")
    assert_error(api.delete(files(sid), params={"path": "/etc/shadowish"}), 403, "forbidden")
    assert_error(api.get(files(sid, "/list"), params={"path": "/root"}), 403, "forbidden")
    assert_error(api.post(files(sid, "/mkdir"), json={"path": "/etc/newdir"}), 403, "forbidden")
    assert api.run(sid, "test -e /usr/evil || test -e /etc/newdir")["exit_code"] == 1
    assert "user:" in api.sh(sid, "cat /etc/passwd")


def test_nul_in_path_is_400(api, sandbox):
    sid = sandbox["id"]
    api.put_file(sid, "a", b"x")
    q = "?path=a%00b"
    for method, rest in [("GET", ""), ("PUT", ""), ("DELETE", ""), ("GET", "/stat"), ("GET", "/list")]:
        r = api.req(method, files(sid, rest) + q, data=b"x" if method == "PUT" else None)
        assert_error(r, 400, "invalid_request")
    r = api.post(files(sid, "/mkdir"), json={"path": "x\u0000y"})
    assert_error(r, 400, "invalid_request")
    r = api.post(files(sid, "/move"), json={"from": "a", "to": "a\u0000b"})
    assert_error(r, 400, "invalid_request")
    assert api.get_file(sid, "a") == b"x"


# --------------------------------------------------------------------------
# escapes: every path is resolved inside the sandbox


def test_dotdot_resolves_inside(api, sandbox):
    sid = sandbox["id"]
    inside = api.sh(sid, "cat /etc/hostname")
    assert inside.strip() == "sbx-" + sid[:12]
    with open("/etc/hostname", "rb") as f:
        host = f.read()
    assert host.decode() != inside
    assert api.get_file(sid, "../../../../etc/hostname").decode() == inside
    assert api.get_file(sid, "/../../etc/hostname").decode() == inside
    st = api.get(files(sid, "/stat"), params={"path": "../../../../etc/hostname"}).json()
    assert st["path"] == "/etc/hostname"


def test_absolute_symlink_to_root_stays_inside(api, sandbox):
    sid = sandbox["id"]
    inside = api.sh(sid, "cat /etc/hostname")
    api.sh(sid, "ln -s / rootlink && ln -s /etc/hostname hostlink && ln -s ../../../../../.. rel")
    assert api.get_file(sid, "rootlink/etc/hostname").decode() == inside
    assert api.get_file(sid, "hostlink").decode() == inside
    assert api.get_file(sid, "rel/etc/hostname").decode() == inside
    names = {e["name"] for e in api.get(files(sid, "/list"), params={"path": "rootlink"}).json()["entries"]}
    sandbox_root = set(api.sh(sid, "ls -A /").split())
    assert names == sandbox_root


def test_symlinked_parent_to_proc1_and_root_stays_inside(api, sandbox):
    sid = sandbox["id"]
    api.sh(sid, "ln -s /proc/1 p1 && ln -s / up")
    want = api.run(sid, ["cat", "/proc/1/cmdline"])["stdout"].encode()
    assert want.startswith(b"sbx-init")
    with open("/proc/1/cmdline", "rb") as f:
        assert f.read() != want
    got = api.get(files(sid), params={"path": "p1/cmdline"})
    assert got.status_code == 200, got.text
    # (an empty body is test_get_of_a_proc_file_returns_its_content's concern)
    assert got.content in (want, b""), got.content
    st = api.get(files(sid, "/stat"), params={"path": "p1/cmdline"}).json()
    assert st["type"] == "file" and st["mode"] == "0444"
    # /proc/1/root (the sandbox init's root) is not the host's, whatever the answer
    for user in ("user", "root"):
        for p in ("p1/root/etc/hostname", "/home/user/p1/root/etc/hostname"):
            r = api.get(files(sid), params={"path": p, "user": user})
            if r.status_code == 200:
                assert r.content.decode().strip() == "sbx-" + sid[:12]
            else:
                assert r.status_code in (403, 404), r.text
    assert api.get_file(sid, "up/etc/hostname").decode().strip() == "sbx-" + sid[:12]
    # a write through the symlinked parent lands in the sandbox's /tmp
    name = "sbx-api-escape-" + uuid.uuid4().hex
    r = api.put(files(sid), params={"path": f"up/tmp/{name}"}, data=b"inside")
    assert r.status_code == 200, r.text
    assert r.json()["path"] in (f"/tmp/{name}", f"/home/user/up/tmp/{name}")
    assert api.sh(sid, f"cat /tmp/{name}") == "inside"
    assert not os.path.exists(f"/tmp/{name}"), "a file appeared on the host"


def test_write_through_dotdot_cannot_create_host_files(api, sandbox):
    sid = sandbox["id"]
    host_dir = api.daemon.dir  # exists on the host, not in the sandbox
    name = "escape-" + uuid.uuid4().hex
    for p in (f"../../../../tmp/{name}", f"../../../..{host_dir}/{name}", f"/../../{host_dir}/x/../{name}"):
        r = api.put(files(sid), params={"path": p}, data=b"escaped?")
        assert r.status_code in (200, 403), r.text
    assert not os.path.exists(f"/tmp/{name}")
    assert not os.path.exists(os.path.join(host_dir, name))
    assert api.sh(sid, f"cat /tmp/{name}") == "escaped?"
    # and reading host paths through .. shows the sandbox (or nothing)
    r = api.get(files(sid), params={"path": f"../../..{api.daemon.log_path}"})
    assert r.status_code == 404, r.status_code


def test_symlink_swapped_during_upload_stays_inside(api, sandbox):
    sid = sandbox["id"]
    name = "swap-" + uuid.uuid4().hex
    api.sh(sid, "mkdir -p d/tmp")
    before_root = api.sh(sid, "ls -A /")
    swapper = api.background(
        sid, "while :; do mv d d.real; ln -s / d; rm d; mv d.real d; done 2>/dev/null")
    results = []

    def uploads():
        for i in range(8):
            try:
                r = api.daemon.client().put(files(sid), params={"path": f"d/tmp/{name}-{i}"},
                                            data=PRNGStream(4 * MiB, i), timeout=60)
                results.append(r.status_code)
            except Exception as e:  # noqa: BLE001 - a failed upload is fine here
                results.append(repr(e))

    th = threading.Thread(target=uploads)
    th.start()
    th.join(90)
    assert not th.is_alive()
    cmds = {c["pid"]: c for c in api.get(f"/v1/sandboxes/{sid}/commands").json()["commands"]}
    assert cmds[swapper]["running"] is True, "the swapping loop was not running"
    assert api.delete(f"/v1/sandboxes/{sid}/commands/{swapper}").status_code == 204
    # nothing on the host
    for i in range(8):
        for host in (f"/tmp/{name}-{i}", f"/{name}-{i}", f"/tmp/d/tmp/{name}-{i}"):
            assert not os.path.exists(host), f"{host} appeared on the host"
    # the sandbox's own / is intact and still works
    assert api.sh(sid, "ls -A /") == before_root
    assert api.sh(sid, "cat /etc/hostname").strip() == "sbx-" + sid[:12]
    assert api.sh(sid, "echo alive") == "alive\n"
    # what landed, landed in the sandbox: under d (wherever the swaps left it)
    # or, through the symlink, in its /tmp
    landed = api.sh(sid, f"find /home/user /tmp -name '{name}-*' | wc -l").strip()
    # failed uploads left no temporary (half) files either
    temps = api.sh(sid, "find /home/user /tmp -name '.sbx-upload*'")
    assert temps == "", f"uploads that failed left temporary files: {temps.split()} ({results})"
    assert int(landed) == sum(1 for r in results if r == 200), (landed, results)


def test_disk_full_is_507_and_leaves_no_half_file(api):
    sid = api.create(disk_mb=8)["id"]
    api.put_file(sid, "small.bin", b"s" * 1000)
    r = api.put(files(sid), params={"path": "huge.bin"}, data=PRNGStream(20 * MiB, 7), timeout=60)
    assert_error(r, 507, "insufficient_storage")
    assert api.sh(sid, "ls -A").split() == ["small.bin"]
    # and the sandbox's own writes see ENOSPC too, while the sandbox lives on
    res = api.run(sid, "head -c 20000000 /dev/zero > fill.bin")
    assert res["exit_code"] != 0 and "space" in res["stderr"].lower(), res
    assert api.sh(sid, "rm fill.bin; echo ok") == "ok\n"
