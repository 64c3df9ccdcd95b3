"""A fake sbxd: just enough of the REST API contract to test the sbx client verbs.

It runs in the test's own process (a thread), so tests can look at what it
received (`requests`, `created`) and steer it (`encoding`, `script`).

- Sandboxes are records in memory; their files live in a host directory per
  sandbox (`root(id)`), a relative path meaning /home/user/PATH.
- Commands run for real on the host (no isolation: this is a test of the
  client's wire protocol, not of sandboxing), in their own process group, with
  output streamed as ndjson chunks the moment it is read.  `encoding` picks how
  chunks are encoded: "auto" (UTF-8 when the chunk is valid UTF-8, which
  includes NUL bytes as \\u0000, else base64, as the contract says) or
  "base64" (always).
- `script`, when set, replaces the command's ndjson answer by these lines.

Not a reference implementation: no limits, no quotas, no security.
"""

import base64
import json
import os
import posixpath
import queue
import secrets
import shutil
import signal
import socketserver
import stat
import subprocess
import tempfile
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CREATE_FIELDS = {"template", "timeout_s", "metadata", "envs", "cpus", "memory_mb", "disk_mb", "pids"}
EXEC_FIELDS = {"cmd", "argv", "cwd", "envs", "user", "stdin", "stdin_base64", "timeout_s", "background"}
HOME = "/home/user"


def iso(t):
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


class ApiError(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class FakeSbxd:
    def __init__(self, key="sbx_" + "ab" * 24, unix_path=None):
        self.key = key
        self.unix_path = unix_path
        self.sandboxes = {}
        self.created = []      # bodies of POST /v1/sandboxes, in order
        self.execs = []        # bodies of POST .../commands, in order
        self.requests = []     # (method, raw path, headers dict) of every request
        self.uploads = []      # (path, "length"|"chunked") of every PUT
        self.commands = {}     # (id, pid) -> Popen
        self.killed = []       # (id, pid) of DELETE .../commands/{pid}
        self.signals = []      # (id, pid, signal)
        self.encoding = "auto"
        self.script = None
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="fake-sbxd-")
        handler = type("Handler", (_Handler,), {"fake": self})
        if unix_path:
            self.httpd = _UnixHTTPServer(unix_path, handler)
            self.url = "unix:" + unix_path
        else:
            self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            self.httpd.daemon_threads = True
            self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        for p in list(self.commands.values()):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- state helpers

    def root(self, sid):
        return os.path.join(self.dir, sid)

    def host_path(self, sid, path):
        if "\0" in path:
            raise ApiError(400, "invalid_request", "NUL in path")
        if not path.startswith("/"):
            path = HOME + "/" + path
        norm = posixpath.normpath(path)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        return os.path.join(self.root(sid), norm.lstrip("/")), norm

    def new_sandbox(self, body):
        sid = secrets.token_hex(16)
        now = datetime.now(timezone.utc)
        sb = {
            "id": sid, "template": body.get("template", "base"), "state": "running",
            "created_at": iso(now), "expires_at": iso(now + timedelta(seconds=body.get("timeout_s", 900))),
            "ended_at": None, "end_reason": None, "timeout_s": body.get("timeout_s", 900),
            "metadata": body.get("metadata", {}), "envs": body.get("envs", {}),
            "cpus": body.get("cpus", 1.0), "memory_mb": body.get("memory_mb", 1024),
            "disk_mb": body.get("disk_mb", 512), "pids": body.get("pids", 512),
        }
        os.makedirs(os.path.join(self.root(sid), "home/user"))
        self.sandboxes[sid] = sb
        return sb


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = True


def _entry(host, abspath):
    st = os.lstat(host)
    if stat.S_ISDIR(st.st_mode):
        t = "dir"
    elif stat.S_ISREG(st.st_mode):
        t = "file"
    elif stat.S_ISLNK(st.st_mode):
        t = "symlink"
    else:
        t = "other"
    e = {"name": posixpath.basename(abspath) or "/", "path": abspath, "type": t, "size": st.st_size,
         "mode": "%04o" % stat.S_IMODE(st.st_mode),
         "mtime": iso(datetime.fromtimestamp(st.st_mtime, timezone.utc))}
    if t == "symlink":
        e["symlink_target"] = os.readlink(host)
    return e


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None  # set per server

    def log_message(self, fmt, *args):
        pass

    def address_string(self):
        return "client"

    # ---- plumbing

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_empty(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def body_chunks(self):
        """The request body, piece by piece: Content-Length or chunked."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return
                left = size
                while left:
                    piece = self.rfile.read(min(left, 1 << 16))
                    if not piece:
                        raise ConnectionError("short chunk")
                    left -= len(piece)
                    yield piece
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length") or 0)
            while left:
                piece = self.rfile.read(min(left, 1 << 16))
                if not piece:
                    raise ConnectionError("short body")
                left -= len(piece)
                yield piece

    def read_json(self):
        raw = b"".join(self.body_chunks())
        ctype = self.headers.get("Content-Type")
        if ctype is not None and ctype.split(";")[0].strip() != "application/json":
            raise ApiError(415, "unsupported_media_type", f"Content-Type {ctype}")
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "invalid_request", f"malformed JSON: {e}")
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_request", "body must be an object")
        return body

    def handle_any(self, method):
        f = self.fake
        url = urllib.parse.urlsplit(self.path)
        with f.lock:
            f.requests.append((method, self.path, dict(self.headers)))
        try:
            if url.path == "/v1/health":
                return self.send_json(200, {"status": "ok", "version": "fake", "sandboxes_running": 0})
            if f.key and self.headers.get("Authorization") != "Bearer " + f.key:
                # drain what the client sends, then refuse
                for _ in self.body_chunks():
                    pass
                raise ApiError(401, "unauthorized", "missing or unknown API key")
            q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
            return self.route(method, parts, q)
        except ApiError as e:
            self.send_json(e.status, {"error": {"code": e.code, "message": e.message}})
        except (BrokenPipeError, ConnectionError):
            self.close_connection = True

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_DELETE(self):
        self.handle_any("DELETE")

    # ---- routes

    def sandbox(self, sid, running=False):
        sb = self.fake.sandboxes.get(sid)
        if not sb:
            raise ApiError(404, "not_found", f"no sandbox {sid}")
        if running and sb["state"] != "running":
            raise ApiError(409, "conflict", f"sandbox {sid} is {sb['state']}")
        return sb

    def route(self, method, parts, q):
        f = self.fake
        if parts[:2] != ["v1", "sandboxes"]:
            raise ApiError(404, "not_found", "no such route")
        rest = parts[2:]
        if not rest:
            if method == "POST":
                body = self.read_json()
                unknown = set(body) - CREATE_FIELDS
                if unknown:
                    raise ApiError(400, "invalid_request", f"unknown field {sorted(unknown)[0]}")
                if body.get("template", "base") != "base":
                    raise ApiError(400, "invalid_request", "unknown template")
                f.created.append(body)
                return self.send_json(201, f.new_sandbox(body))
            if method == "GET":
                state = q.get("state", ["running"])[0]
                out = []
                for sb in f.sandboxes.values():
                    if state != "all" and sb["state"] != state:
                        continue
                    if any(k.startswith("metadata.") and sb["metadata"].get(k[9:]) != v[0] for k, v in q.items()):
                        continue
                    out.append(sb)
                return self.send_json(200, {"sandboxes": out})
            raise ApiError(405, "method_not_allowed", method)
        sid, rest = rest[0], rest[1:]
        sb = self.sandbox(sid)
        if not rest:
            if method == "GET":
                return self.send_json(200, sb)
            if method == "DELETE":
                self.sandbox(sid, running=True)
                sb["state"] = "deleted"
                sb["end_reason"] = "deleted"
                sb["ended_at"] = iso(datetime.now(timezone.utc))
                return self.send_empty(204)
            raise ApiError(405, "method_not_allowed", method)
        if rest == ["timeout"] and method == "POST":
            body = self.read_json()
            t = body.get("timeout_s")
            if not isinstance(t, int) or isinstance(t, bool) or not 1 <= t <= 28800:
                raise ApiError(400, "invalid_request", "timeout_s must be an integer 1..28800")
            self.sandbox(sid, running=True)
            sb["expires_at"] = iso(datetime.now(timezone.utc) + timedelta(seconds=t))
            sb["timeout_s"] = t
            return self.send_json(200, sb)
        if rest == ["metrics"] and method == "GET":
            return self.send_json(200, {"cpu_seconds": 1.5, "memory_bytes": 12 << 20,
                                        "memory_peak_bytes": 20 << 20, "memory_limit_bytes": 1 << 30,
                                        "disk_used_bytes": 3 << 20, "disk_limit_bytes": 512 << 20,
                                        "processes": 3})
        if rest[0] == "commands":
            return self.commands(sid, method, rest[1:])
        if rest[0] == "files":
            self.sandbox(sid, running=True)
            return self.files(sid, method, rest[1:], q)
        raise ApiError(404, "not_found", "no such route")

    # ---- commands

    def commands(self, sid, method, rest):
        f = self.fake
        if not rest and method == "POST":
            self.sandbox(sid, running=True)
            return self.exec(sid, self.read_json())
        if len(rest) >= 1:
            key = (sid, int(rest[0]))
            p = f.commands.get(key)
            if not p:
                raise ApiError(404, "not_found", "no such command")
            if rest[1:] == ["signal"] and method == "POST":
                body = self.read_json()
                sig = body.get("signal")
                if isinstance(sig, str):
                    sig = getattr(signal, sig if sig.startswith("SIG") else "SIG" + sig)
                f.signals.append((sid, key[1], int(sig)))
                if p.poll() is not None:
                    raise ApiError(409, "conflict", "the command has finished")
                os.killpg(p.pid, int(sig))
                return self.send_empty(204)
            if rest[1:] == [] and method == "DELETE":
                f.killed.append(key)
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return self.send_empty(204)
        raise ApiError(404, "not_found", "no such route")

    def exec(self, sid, body):
        f = self.fake
        f.execs.append(body)
        unknown = set(body) - EXEC_FIELDS
        if unknown:
            raise ApiError(400, "invalid_request", f"unknown field {sorted(unknown)[0]}")
        if ("cmd" in body) == ("argv" in body):
            raise ApiError(400, "invalid_request", "give exactly one of cmd and argv")
        argv = ["/bin/sh", "-c", body["cmd"]] if "cmd" in body else body["argv"]
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ApiError(400, "invalid_request", "argv must be a non-empty list of strings")
        stdin = None
        if "stdin" in body:
            stdin = body["stdin"].encode()
        elif "stdin_base64" in body:
            stdin = base64.b64decode(body["stdin_base64"], validate=True)
        env = dict(os.environ)
        env.update(f.sandboxes[sid]["envs"])
        env.update(body.get("envs", {}))
        cwd = f.host_path(sid, body.get("cwd", HOME))[0]
        if not os.path.isdir(cwd):
            raise ApiError(400, "invalid_request", "cwd does not exist")
        background = body.get("background", False)
        timeout = body.get("timeout_s", 0 if background else 60)
        ndjson = self.headers.get("Accept") == "application/x-ndjson"

        if f.script is not None and ndjson:
            return self.stream_lines(list(f.script))
        try:
            p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env, cwd=cwd, start_new_session=True)
        except FileNotFoundError:
            lines = [{"type": "start", "pid": 0},
                     {"type": "stderr", "data": f"{argv[0]}: command not found\n", "encoding": "utf-8"},
                     {"type": "end", "exit_code": 127, "signal": None, "timed_out": False, "oom_killed": False,
                      "duration_ms": 0}]
            return self.stream_lines(lines) if ndjson else self.send_json(200, {"pid": 0, "exit_code": 127})
        f.commands[(sid, p.pid)] = p
        if stdin is not None:
            threading.Thread(target=self.feed, args=(p, stdin), daemon=True).start()
        else:
            p.stdin.close()
        timed_out = threading.Event()

        def expire():
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.daemon = True
            timer.start()
        if background and not ndjson:
            def drain():
                p.stdout.read()
                p.stderr.read()
                p.wait()
            threading.Thread(target=drain, daemon=True).start()
            return self.send_json(201, {"pid": p.pid})

        start = time.monotonic()
        chunks = queue.Queue()

        def reader(stream, name):
            fd = stream.fileno()
            while True:
                data = os.read(fd, 65536)
                if not data:
                    break
                chunks.put((name, data))
            chunks.put((name, None))

        for stream, name in ((p.stdout, "stdout"), (p.stderr, "stderr")):
            threading.Thread(target=reader, args=(stream, name), daemon=True).start()

        def lines():
            yield {"type": "start", "pid": p.pid}
            open_streams = 2
            while open_streams:
                name, data = chunks.get()
                if data is None:
                    open_streams -= 1
                    continue
                yield {"type": name, **self.encode(data)}
            rc = p.wait()
            if timer:
                timer.cancel()
            yield {"type": "end", "exit_code": rc if rc >= 0 else None, "signal": -rc if rc < 0 else None,
                   "timed_out": timed_out.is_set(), "oom_killed": False,
                   "duration_ms": int((time.monotonic() - start) * 1000)}
        return self.stream_lines(lines())

    @staticmethod
    def feed(p, data):
        try:
            p.stdin.write(data)
            p.stdin.close()
        except BrokenPipeError:
            pass

    def encode(self, data):
        if self.fake.encoding != "base64":
            try:
                return {"data": data.decode("utf-8"), "encoding": "utf-8"}
            except UnicodeDecodeError:
                pass
        return {"data": base64.b64encode(data).decode(), "encoding": "base64"}

    def stream_lines(self, lines):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            data = line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---- files

    def files(self, sid, method, rest, q):
        path = q.get("path", ["."])[0]
        host, norm = self.fake.host_path(sid, path)
        if rest == [] and method == "PUT":
            os.makedirs(os.path.dirname(host), exist_ok=True)
            if os.path.isdir(host):
                raise ApiError(409, "conflict", f"{norm} is a directory")
            mode = q.get("mode", ["0644"])[0]
            chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
            self.fake.uploads.append((norm, "chunked" if chunked else "length"))
            tmp = host + ".upload-tmp"
            size = 0
            with open(tmp, "wb") as out:
                for piece in self.body_chunks():
                    out.write(piece)
                    size += len(piece)
            os.chmod(tmp, int(mode, 8))
            os.rename(tmp, host)
            return self.send_json(200, {"path": norm, "size": size})
        if rest == [] and method == "GET":
            if not os.path.lexists(host):
                raise ApiError(404, "not_found", f"no such file: {norm}")
            if os.path.isdir(host):
                raise ApiError(409, "conflict", f"{norm} is a directory")
            size = os.path.getsize(host)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(host, "rb") as src:
                shutil.copyfileobj(src, self.wfile, 1 << 16)
            return
        if rest == ["stat"] and method == "GET":
            if not os.path.lexists(host):
                raise ApiError(404, "not_found", f"no such file or directory: {norm}")
            return self.send_json(200, _entry(host, norm))
        if rest == ["list"] and method == "GET":
            depth = int(q.get("depth", ["1"])[0])
            if not os.path.isdir(host):
                raise ApiError(404, "not_found", f"no such directory: {norm}")
            entries = []

            def walk(h, n, d):
                for name in sorted(os.listdir(h)):
                    hp, np_ = os.path.join(h, name), posixpath.join(n, name)
                    e = _entry(hp, np_)
                    entries.append(e)
                    if e["type"] == "dir" and d > 1:
                        walk(hp, np_, d - 1)
            walk(host, norm, depth)
            return self.send_json(200, {"entries": entries})
        if rest == ["mkdir"] and method == "POST":
            body = self.read_json()
            host, norm = self.fake.host_path(sid, body["path"])
            if os.path.isdir(host):
                return self.send_json(200, {"path": norm, "created": False})
            if os.path.lexists(host):
                raise ApiError(409, "conflict", f"{norm} exists and is not a directory")
            os.makedirs(host)
            return self.send_json(201, {"path": norm})
        raise ApiError(404, "not_found", "no such route")
