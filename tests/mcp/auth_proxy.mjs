// A loopback reverse proxy that adds `Authorization: Bearer KEY` to every
// request and forwards it to sbxd, for MCP clients that cannot send headers
// of their own (the conformance suite's `server` mode).
//
//   node auth_proxy.mjs --target http://127.0.0.1:7700 [--key KEY]   (or env SBX_API_KEY)
//
// Listens on 127.0.0.1 on a free port and prints one line to stdout,
// `{"port": N, "url": "http://localhost:N"}`, once it accepts connections.
// Everything else is passed through unchanged in both directions: the method,
// the path, every header (Host and Origin included: the DNS-rebinding checks
// must reach sbxd as the client sent them), and the bodies, streamed without
// buffering (Server-Sent Events arrive as sbxd flushes them).  A client that
// goes away aborts the upstream request, so sbxd sees the disconnect too.
// Stops on SIGTERM/SIGINT or when stdin closes.
import http from 'node:http';
import process from 'node:process';

function arg(name) {
    const i = process.argv.indexOf(name);
    return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : undefined;
}

const target = new URL(arg('--target') ?? process.env.SBX_URL ?? '');
const key = arg('--key') ?? process.env.SBX_API_KEY;
if (!target.hostname || !key) {
    console.error('usage: auth_proxy.mjs --target http://HOST:PORT [--key KEY] (or SBX_API_KEY)');
    process.exit(2);
}

// hop-by-hop headers (RFC 9110 7.6.1) are not forwarded; node re-frames bodies
const HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'trailer']);

function copyHeaders(rawHeaders) {
    const out = [];
    for (let i = 0; i < rawHeaders.length; i += 2) {
        const name = rawHeaders[i];
        const lower = name.toLowerCase();
        if (HOP.has(lower) || lower === 'authorization') continue;
        out.push(name, rawHeaders[i + 1]);
    }
    return out;
}

const server = http.createServer((req, res) => {
    req.socket.setNoDelay(true);
    const headers = copyHeaders(req.rawHeaders);
    headers.push('Authorization', `Bearer ${key}`);
    const up = http.request({
        host: target.hostname,
        port: target.port || 80,
        method: req.method,
        path: req.url,
        headers,               // an array of raw pairs: Host goes through as sent
        agent: false,
        setHost: false,
    });
    up.on('socket', (s) => s.setNoDelay(true));
    up.on('response', (ur) => {
        res.writeHead(ur.statusCode, ur.statusMessage, copyHeaders(ur.rawHeaders));
        res.flushHeaders();
        ur.on('data', (chunk) => res.write(chunk));
        ur.on('end', () => res.end());
        ur.on('error', () => res.destroy());
        ur.on('aborted', () => res.destroy());
    });
    up.on('error', (e) => {
        if (!res.headersSent) {
            res.writeHead(502, { 'Content-Type': 'text/plain' });
            res.end(`auth_proxy: upstream error: ${e.message}\n`);
        } else {
            res.destroy();
        }
    });
    req.pipe(up);
    // the client went away before the response ended: drop the upstream request
    res.on('close', () => {
        if (!res.writableFinished) up.destroy();
    });
});

server.keepAliveTimeout = 5000;
server.listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    process.stdout.write(JSON.stringify({ port, url: `http://localhost:${port}` }) + '\n');
});

function stop() {
    server.close();
    server.closeAllConnections?.();
    process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();
