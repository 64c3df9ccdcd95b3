"""A deliberately broken sandbox service for `sbx fuzz`: a fault-injecting
HTTP proxy in front of a REAL sbxd (never fake_sbxd.py, which runs commands
on the host without isolation: the limits and security domains must meet a
real sandbox).

Everything passes through unchanged but for one fault, chosen per run:

  nul_download     downloads (REST GET .../files, MCP files_read) come back
                   with every NUL byte turned into 0x01, same length
  drop_upload      uploads (REST PUT .../files, MCP files_write) are answered
                   200 with the size that was sent, and never reach sbxd
  truncate_upload  uploads reach sbxd cut to half their bytes; the answer
                   still says the size that was sent
  change_upload    uploads reach sbxd with one byte changed (the middle one)
  strip_limits     sandbox creates (REST POST /v1/sandboxes, MCP
                   sandbox_create) lose memory_mb, disk_mb, pids and cpus
  hang_download    downloads are never answered (until the client gives up)

sbxd's /mcp calls sbxd's REST API on its own listener, so in front of /mcp
the proxy only sees MCP's JSON-RPC: there it decodes a tool's arguments or
result (base64 or text content), changes them, and encodes them again.  A
change made there is still in transit, between the agent and the service:
the harness must call it `interface`.

Each fault is recorded against the sandbox it hit, and each sandbox against
the test that made it (the harness puts `test` and `sbx.fuzz.seed` in every
create's metadata), so a test can ask which (name, seed) were affected.
"""

import base64
import http.client
import json
import select
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FAULTS = ("nul_download", "drop_upload", "truncate_upload", "change_upload", "strip_limits", "hang_download")
LIMIT_FIELDS = ("memory_mb", "disk_mb", "pids", "cpus")
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade",
       "content-length", "host", "expect"}  # hop by hop, or set anew per request
HOME = "/home/user"


class BrokenTarget:
    def __init__(self, upstream, fault):
        assert fault in FAULTS, fault
        u = urllib.parse.urlsplit(upstream)
        self.upstream = (u.hostname, u.port)
        self.fault = fault
        self.lock = threading.Lock()
        self.owner = {}    # sandbox id -> (test name, seed)
        self.faults = []   # (sandbox id, what) of every fault injected
        self.stop = threading.Event()
        handler = type("Handler", (_Handler,), {"target": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- what happened
    def hit(self, sandbox_id, what):
        with self.lock:
            self.faults.append((sandbox_id, what))

    def created(self, sandbox):
        meta = sandbox.get("metadata") or {}
        if "sbx.fuzz.seed" in meta:
            with self.lock:
                self.owner[sandbox["id"]] = (meta.get("test"), int(meta["sbx.fuzz.seed"]))

    def affected(self):
        """{(test name, seed): [what, ...]} of the tests a fault hit."""
        out = {}
        with self.lock:
            for sid, what in self.faults:
                if sid in self.owner:
                    out.setdefault(self.owner[sid], []).append(what)
        return out

    def unowned_faults(self):
        with self.lock:
            return [(s, w) for s, w in self.faults if s not in self.owner]


def _sandbox_of(path):
    parts = path.split("?", 1)[0].split("/")
    return parts[3] if len(parts) > 3 and parts[1:3] == ["v1", "sandboxes"] else None


def _is_file_transfer(method, path):
    p = urllib.parse.urlsplit(path)
    parts = p.path.split("/")
    return method in ("GET", "PUT") and len(parts) == 5 and parts[1:3] == ["v1", "sandboxes"] and parts[4] == "files"


def _abs(path):
    return path if path.startswith("/") else posix_join(HOME, path)


def posix_join(a, b):
    return a.rstrip("/") + "/" + b


def _decode(args):
    """The bytes of a files_write's content (base64 or text)."""
    if args.get("encoding") == "base64":
        return base64.b64decode(args["content"])
    return args["content"].encode("utf-8")


def _sse_messages(body):
    """The JSON-RPC messages of a text/event-stream body."""
    msgs, data = [], []
    for line in body.decode("utf-8").split("\n"):
        line = line.rstrip("\r")
        if not line:
            if data:
                msgs.append(json.loads("\n".join(data)))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" ") if line[5:6] == " " else line[5:])
    if data:
        msgs.append(json.loads("\n".join(data)))
    return msgs


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    target = None  # set per server
    upstream_conn = None

    def log_message(self, fmt, *args):  # quiet
        pass

    # -- plumbing
    def _body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _upstream(self):
        if self.upstream_conn is None:
            self.upstream_conn = http.client.HTTPConnection(*self.target.upstream, timeout=900)
        return self.upstream_conn

    def _forward(self, body):
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        headers["Content-Length"] = str(len(body))
        for attempt in range(2):
            conn = self._upstream()
            try:
                conn.request(self.command, self.path, body=body if body or self.command in ("POST", "PUT") else None,
                             headers=headers)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                self.upstream_conn = None
                if attempt:
                    raise

    def _reply(self, status, headers, body):
        self.send_response(status)
        for k, v in headers:
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _relay(self, resp):
        """The upstream answer as it comes (streams stay streams)."""
        if resp.getheader("Content-Length") is not None or self.command == "HEAD" or resp.status in (204, 304):
            self._reply(resp.status, resp.getheaders(), resp.read())
            return
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _hang(self):
        """No answer: wait until the client gives up (closes), then close."""
        self.close_connection = True
        while not self.target.stop.is_set():
            r, _, _ = select.select([self.connection], [], [], 0.2)
            if r:
                try:
                    if not self.connection.recv(1, 0):
                        return
                except OSError:
                    return

    def _json_reply(self, status, obj, extra=()):
        self._reply(status, [("Content-Type", "application/json"), *extra], json.dumps(obj).encode())

    # -- requests
    def do_GET(self):
        self._handle()

    def do_PUT(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def do_DELETE(self):
        self._handle()

    def do_PATCH(self):
        self._handle()

    def _handle(self):
        body = self._body()
        t = self.target
        path = urllib.parse.urlsplit(self.path).path
        if path == "/mcp" and self.command == "POST":
            return self._mcp(body)
        sid = _sandbox_of(self.path)
        transfer = _is_file_transfer(self.command, self.path)
        if transfer and self.command == "GET" and t.fault == "hang_download":
            t.hit(sid, "download never answered")
            return self._hang()
        if transfer and self.command == "PUT":
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            if t.fault == "drop_upload":
                t.hit(sid, f"upload of {len(body)} bytes dropped")
                return self._json_reply(200, {"path": _abs(q["path"][0]), "size": len(body)})
            if t.fault == "truncate_upload" and body:
                t.hit(sid, f"upload cut from {len(body)} to {len(body) // 2} bytes")
                sent = len(body)
                resp = self._forward(body[: len(body) // 2])
                answer = resp.read()
                if resp.status == 200:
                    doc = json.loads(answer)
                    doc["size"] = sent  # "it all arrived"
                    answer = json.dumps(doc).encode()
                return self._reply(resp.status, resp.getheaders(), answer)
            if t.fault == "change_upload" and body:
                t.hit(sid, f"byte {len(body) // 2} of {len(body)} changed in an upload")
                b = bytearray(body)
                b[len(b) // 2] ^= 0x01
                body = bytes(b)
        if path == "/v1/sandboxes" and self.command == "POST":
            if t.fault == "strip_limits" and body:
                doc = json.loads(body)
                gone = [k for k in LIMIT_FIELDS if k in doc]
                for k in gone:
                    del doc[k]
                body = json.dumps(doc).encode()
            resp = self._forward(body)
            answer = resp.read()
            if resp.status == 201:
                sb = json.loads(answer)
                t.created(sb)
                if t.fault == "strip_limits" and gone:
                    t.hit(sb["id"], "limits stripped: " + ",".join(gone))
            return self._reply(resp.status, resp.getheaders(), answer)
        resp = self._forward(body)
        if transfer and self.command == "GET" and t.fault == "nul_download" and resp.status == 200:
            data = resp.read()
            if b"\0" in data:
                t.hit(sid, f"{data.count(0)} NUL bytes of {len(data)} turned into 0x01")
                data = data.replace(b"\0", b"\x01")
            return self._reply(resp.status, resp.getheaders(), data)
        self._relay(resp)

    # -- MCP: JSON-RPC in and out
    def _mcp(self, body):
        t = self.target
        try:
            msg = json.loads(body)
        except ValueError:
            msg = None
        call = msg.get("params", {}) if isinstance(msg, dict) and msg.get("method") == "tools/call" else None
        tool = call.get("name") if call else None
        args = call.get("arguments", {}) if call else {}
        sid = args.get("sandbox_id")
        sent = None
        if tool == "files_read" and t.fault == "hang_download":
            t.hit(sid, "files_read never answered")
            return self._hang()
        if tool == "files_write" and t.fault in ("drop_upload", "truncate_upload", "change_upload"):
            data = _decode(args)
            sent = len(data)
            if t.fault == "drop_upload":
                t.hit(sid, f"files_write of {sent} bytes dropped")
                result = {"path": _abs(args["path"]), "size": sent}
                rpc = {"jsonrpc": "2.0", "id": msg["id"], "result": {
                    "content": [{"type": "text", "text": json.dumps(result)}], "structuredContent": result,
                    "isError": False}}
                return self._reply(200, [("Content-Type", "text/event-stream"),
                                         ("MCP-Session-Id", self.headers.get("MCP-Session-Id", ""))],
                                   b"event: message\ndata: " + json.dumps(rpc).encode() + b"\n\n")
            if data:
                if t.fault == "truncate_upload":
                    t.hit(sid, f"files_write cut from {sent} to {sent // 2} bytes")
                    data = data[: sent // 2]
                else:
                    t.hit(sid, f"byte {sent // 2} of {sent} changed in a files_write")
                    b = bytearray(data)
                    b[len(b) // 2] ^= 0x01
                    data = bytes(b)
                args["content"] = base64.b64encode(data).decode()
                args["encoding"] = "base64"
                body = json.dumps(msg).encode()
        gone = []
        if tool == "sandbox_create" and t.fault == "strip_limits":
            gone = [k for k in LIMIT_FIELDS if k in args]
            for k in gone:
                del args[k]
            body = json.dumps(msg).encode()
        resp = self._forward(body)
        if tool not in ("sandbox_create", "files_read", "files_write"):
            return self._relay(resp)
        answer = resp.read()
        ctype = resp.getheader("Content-Type", "")
        if resp.status != 200 or not answer:
            return self._reply(resp.status, resp.getheaders(), answer)
        msgs = _sse_messages(answer) if ctype.startswith("text/event-stream") else [json.loads(answer)]
        changed = False
        for m in msgs:
            st = (m.get("result") or {}).get("structuredContent")
            if m.get("id") != msg.get("id") or not isinstance(st, dict) or m["result"].get("isError"):
                continue
            if tool == "sandbox_create" and "id" in st:
                t.created(st)
                if gone:
                    t.hit(st["id"], "limits stripped: " + ",".join(gone))
            elif tool == "files_write" and sent is not None and t.fault == "truncate_upload":
                st["size"] = sent  # "it all arrived"
                changed = True
            elif tool == "files_read" and t.fault == "nul_download" and isinstance(st.get("content"), str):
                data = base64.b64decode(st["content"]) if st.get("encoding") == "base64" else st["content"].encode()
                if b"\0" in data:
                    t.hit(sid, f"{data.count(0)} NUL bytes of {len(data)} turned into 0x01 (files_read)")
                    st["content"] = base64.b64encode(data.replace(b"\0", b"\x01")).decode()
                    st["encoding"] = "base64"
                    changed = True
        if not changed:
            return self._reply(resp.status, resp.getheaders(), answer)
        out = b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in msgs)
        headers = [(k, v) for k, v in resp.getheaders() if k.lower() != "content-type"]
        return self._reply(200, [("Content-Type", "text/event-stream"), *headers], out)
