"""Port exposure: /v1/sandboxes/{id}/ports/{port}/... reaches an HTTP
server listening inside the sandbox, behind the API's authentication.

Tried: GET of a page and a path with a query; POST with a body (sized and
chunked) echoed back; the server's status and headers come through, the
API key does not; HEAD; nothing listening is a 502 that says so; bad
ports; another key's sandbox is a 404; no key is a 401; a paused
sandbox is woken; a sandbox without network can still be reached (the
way in is sbx's, not the sandbox's); protocol upgrades joined byte for
byte, and a real WebSocket (handshake checked, frames echoed)."""

import json
import time

import requests

from sbxd_fixture import assert_error

SERVER = r'''
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body, extra=()):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-From-Sandbox", "yes")
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if not size:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        info = {"method": self.command, "path": self.path, "body": body.decode(),
                "headers": {k.lower(): v for k, v in self.headers.items()}}
        self.reply(418 if self.path.startswith("/teapot") else 200, json.dumps(info).encode())
    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = answer
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


def start_server(api, sid, port=8000):
    api.put_file(sid, "srv.py", SERVER.encode())
    api.background(sid, f"python3 srv.py {port}")
    api.sh(sid, "python3 -c 'import socket,time\n"
                "for _ in range(100):\n"
                "    try: socket.create_connection((\"127.0.0.1\", %d)).close(); break\n"
                "    except OSError: time.sleep(0.05)'" % port)


def test_http_to_a_server_in_the_sandbox(api):
    sid = api.create()["id"]  # no network at all: the way in is sbx's
    start_server(api, sid)
    base = f"/v1/sandboxes/{sid}/ports/8000"
    r = api.get(base + "/some/where?x=1&y=a%20b")
    assert r.status_code == 200 and r.headers["X-From-Sandbox"] == "yes", r.text
    info = r.json()
    assert info["method"] == "GET" and info["path"] == "/some/where?x=1&y=a%20b", info
    assert "authorization" not in info["headers"], info          # the API key stays with sbx
    assert info["headers"]["host"] == "127.0.0.1:8000" and info["headers"]["x-forwarded-prefix"] == base, info
    assert api.get(base).json()["path"] == "/"
    r = api.post(base + "/teapot", data=b"tea" * 1000)
    assert r.status_code == 418 and r.json()["body"] == "tea" * 1000 and r.json()["method"] == "POST", r.text
    r = api.req("PUT", base + "/up", data=iter([b"chunk1-", b"chunk2"]))   # chunked, no length
    assert r.status_code == 200 and r.json()["body"] == "chunk1-chunk2", r.text
    r = api.req("HEAD", base + "/h")
    assert r.status_code == 200 and r.headers["X-From-Sandbox"] == "yes" and r.content == b""
    r = api.delete(base + "/d")
    assert r.status_code == 200 and r.json()["method"] == "DELETE"


def test_errors_and_access(api, other, sbxd_daemon):
    sid = api.create()["id"]
    r = api.get(f"/v1/sandboxes/{sid}/ports/8001/")
    assert_error(r, 502, "bad_gateway")
    assert "nothing answers on port 8001" in r.json()["error"]["message"], r.text
    for bad in ("0", "65536", "x", "-1"):
        assert_error(api.get(f"/v1/sandboxes/{sid}/ports/{bad}/"), 400, "invalid_request")
    start_server(api, sid)
    assert_error(other.get(f"/v1/sandboxes/{sid}/ports/8000/"), 404, "not_found")
    r = requests.get(f"{sbxd_daemon.url}/v1/sandboxes/{sid}/ports/8000/", timeout=10)
    assert r.status_code == 401
    # a paused sandbox is woken by the request
    assert api.post(f"/v1/sandboxes/{sid}/pause").status_code == 200
    r = api.get(f"/v1/sandboxes/{sid}/ports/8000/after-pause")
    assert r.status_code == 200 and r.json()["path"] == "/after-pause", r.text
    assert api.get(f"/v1/sandboxes/{sid}").json()["state"] == "running"
    api.delete(f"/v1/sandboxes/{sid}")
    assert_error(api.get(f"/v1/sandboxes/{sid}/ports/8000/"), 409, "conflict")


UPGRADE_SERVER = r'''
import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    head, rest = head.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    hdr = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
    if hdr.get("upgrade") != "echo" or "upgrade" not in hdr.get("connection", "").lower():
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return c.close()
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nready\n" + rest)
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d.upper())
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def test_protocol_upgrade_is_joined_byte_for_byte(api, sbxd_daemon):
    """An Upgrade request (WebSocket or any protocol): the 101 and then
    the raw bytes both ways, as the server in the sandbox sends them."""
    import socket
    import time
    from urllib.parse import urlparse
    sid = api.create()["id"]
    api.put_file(sid, "up.py", UPGRADE_SERVER.encode())
    api.background(sid, "python3 up.py 8002")
    time.sleep(0.5)
    u = urlparse(sbxd_daemon.url)
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(f"GET /v1/sandboxes/{sid}/ports/8002/chat HTTP/1.1\r\nHost: {u.netloc}\r\n"
              f"Authorization: Bearer {api.key}\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n".encode())
    data = b""
    while b"ready\n" not in data:
        chunk = s.recv(4096)
        assert chunk, data
        data += chunk
    assert data.startswith(b"HTTP/1.1 101"), data
    assert b"upgrade: echo" in data.lower(), data
    s.sendall(b"hello \x00\xff sandbox")
    got = b""
    while len(got) < len(b"hello \x00\xff sandbox"):
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    assert got == b"HELLO \x00\xff SANDBOX", got
    s.close()


WS_SERVER = r'''
import base64, hashlib, socket, struct, sys, threading
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def need(c, buf, n):
    while len(buf) < n:
        d = c.recv(65536)
        if not d:
            raise EOFError
        buf += d
    return buf[:n], buf[n:]
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        head += c.recv(4096)
    head, buf = head.split(b"\r\n\r\n", 1)
    hdr = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip()
           for l in head.decode().split("\r\n")[1:]}
    key = hdr["sec-websocket-key"]
    acc = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Accept: {acc}\r\n\r\n").encode())
    try:
        while True:  # echo each frame (unmasked, as a server sends), until a close
            (b0, b1), buf = need(c, buf, 2)
            n = b1 & 0x7F
            if n == 126:
                x, buf = need(c, buf, 2); n = struct.unpack(">H", x)[0]
            elif n == 127:
                x, buf = need(c, buf, 8); n = struct.unpack(">Q", x)[0]
            mask, buf = need(c, buf, 4) if b1 & 0x80 else (b"\0\0\0\0", buf)
            data, buf = need(c, buf, n)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            op = b0 & 0x0F
            h = bytes([0x80 | op])
            h += bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n) if n < 65536 else \
                bytes([127]) + struct.pack(">Q", n)
            c.sendall(h + data)
            if op == 8:
                break
    except EOFError:
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''


def test_a_websocket_through_port_exposure(api, sbxd_daemon, other):
    """A real WebSocket: the client's Sec-WebSocket-Key reaches the server
    in the sandbox unchanged (the Sec-WebSocket-Accept it computes from it
    is the one RFC 6455 asks for), and frames go both ways - a text frame,
    a 70,000-byte binary one (64-bit length), the close.  The API key is
    needed, as everywhere."""
    import os
    import struct
    from wsclient import BINARY, CLOSE, TEXT, WebSocket, accept_for
    sid = api.create()["id"]
    api.put_file(sid, "ws.py", WS_SERVER.encode())
    api.background(sid, "python3 ws.py 8003")
    api.sh(sid, "python3 -c 'import socket,time\n"
                "for _ in range(100):\n"
                "    try: socket.create_connection((\"127.0.0.1\", 8003)).close(); break\n"
                "    except OSError: time.sleep(0.05)'")
    path = f"/v1/sandboxes/{sid}/ports/8003/echo"
    ws = WebSocket(sbxd_daemon.url, path, {"Authorization": f"Bearer {api.key}"})
    try:
        assert ws.status == 101, ws.status_line
        assert ws.headers["upgrade"].lower() == "websocket", ws.headers
        assert ws.headers["sec-websocket-accept"] == accept_for(ws.key), (ws.key, ws.headers)
        ws.send("hello sandbox \u2713", TEXT)
        assert ws.recv() == (TEXT, "hello sandbox \u2713".encode())
        blob = os.urandom(70000)
        ws.send(blob, BINARY)
        assert ws.recv() == (BINARY, blob)
        ws.send(struct.pack(">H", 1000), CLOSE)
        assert ws.recv() == (CLOSE, struct.pack(">H", 1000))
    finally:
        ws.sock.close()
    for who, status in ((None, 401), (other.key, 404)):  # no key, another tenant's key: no upgrade
        ws = WebSocket(sbxd_daemon.url, path, {"Authorization": f"Bearer {who}"} if who else {})
        assert ws.status == status, ws.status_line
        ws.sock.close()


def test_a_head_answer_has_no_body_and_the_connection_goes_on(api, sbxd_daemon):
    """HEAD through a port: the head only, with the server's Content-Length,
    and not one byte after it, so that the next request on the same
    keep-alive connection gets its own answer (libmicrohttpd 0.9.75 ended a
    HEAD answer of unknown length with a last chunk, read by the client as
    the start of the next answer)."""
    import socket
    sid = api.create()["id"]
    start_server(api, sid)
    base = f"/v1/sandboxes/{sid}/ports/8000"
    host, port = sbxd_daemon.url.split("//")[1].split(":")
    s = socket.create_connection((host, int(port)), timeout=10)
    auth = f"Host: x\r\nAuthorization: Bearer {api.key}\r\n"
    s.sendall(f"HEAD {base}/h HTTP/1.1\r\n{auth}\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(65536)
    time.sleep(0.5)  # anything sent after the head has arrived by now
    s.setblocking(False)
    try:
        extra = s.recv(65536)
    except BlockingIOError:
        extra = b""
    s.setblocking(True)
    assert extra == b"", (head, extra)
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 200 OK" and "Transfer-Encoding: chunked" not in lines, lines
    length = [int(l.split(":")[1]) for l in lines if l.lower().startswith("content-length:")]
    assert len(length) == 1 and length[0] > 0, lines  # the server's own, passed on
    # the same connection: a GET gets its own answer
    s.sendall(f"GET {base}/h HTTP/1.1\r\n{auth}Connection: close\r\n\r\n".encode())
    resp = b""
    while chunk := s.recv(65536):
        resp += chunk
    s.close()
    assert resp.startswith(b"HTTP/1.1 200 OK"), resp[:200]
    assert b'"method": "GET"' in resp.split(b"\r\n\r\n", 1)[1], resp[:500]  # (chunked)
