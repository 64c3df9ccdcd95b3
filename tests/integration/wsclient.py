"""A minimal WebSocket client (RFC 6455) on a plain socket, for the tests
that must see the handshake and the frames themselves: sbxd's terminal
(GET /v1/sandboxes/{id}/pty) and a WebSocket server in a sandbox reached
through port exposure (GET /v1/sandboxes/{id}/ports/{port}/...)."""

import base64
import hashlib
import os
import socket
import struct
from urllib.parse import urlparse

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG = 1, 2, 8, 9, 10


def accept_for(key):
    """The Sec-WebSocket-Accept a server must answer key with."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


class WebSocket:
    def __init__(self, base_url, path, headers=None, timeout=30):
        u = urlparse(base_url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        self.key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {u.netloc}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {self.key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise AssertionError(f"connection closed during the handshake: {data!r}")
            data += chunk
        head, self.buf = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        self.status_line = lines[0]
        self.status = int(lines[0].split(" ")[1])
        self.headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def send(self, payload, opcode=BINARY):
        """One frame, masked (a client's frames must be)."""
        if isinstance(payload, str):
            payload = payload.encode()
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"connection closed with {len(self.buf)} of {n} bytes")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """(opcode, payload) of the next whole message (fragments joined)."""
        opcode, parts = None, []
        while True:
            b0, b1 = self._need(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._need(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._need(8))
            mask = self._need(4) if b1 & 0x80 else None
            data = self._need(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode is None:
                opcode = b0 & 0x0F
            parts.append(data)
            if b0 & 0x80:
                return opcode, b"".join(parts)

    def close(self):
        try:
            self.send(struct.pack(">H", 1000), CLOSE)
        except OSError:
            pass
        self.sock.close()
