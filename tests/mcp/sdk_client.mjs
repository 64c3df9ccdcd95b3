// sbx's MCP server driven by the official TypeScript SDK
// (@modelcontextprotocol/sdk), a client nobody here wrote.
//
//   node sdk_client.mjs stdio   # spawns `$SBX_BIN mcp` (SBX_URL and SBX_API_KEY passed on)
//   node sdk_client.mjs http    # Streamable HTTP to $SBX_URL/mcp with Authorization: Bearer $SBX_API_KEY
//
// Environment: SBX_URL (http://127.0.0.1:PORT), SBX_API_KEY, SBX_BIN (the sbx
// binary, stdio only), NODE_PATH-free: run it with the node_modules printed by
// install.sh as MCP_NODE_MODULES (the SDK is imported from there).
//
// Runs the whole scenario of docs/mcp.md against one sandbox: initialize,
// paginated tools/list with every tool's schemas, sandbox_* tools, command_run
// (shell and argv forms, exit codes, stderr, stdin, env, cwd, binary output,
// timeouts, background + command_output/command_list/command_kill, not-found -> isError),
// text and binary (PNG full of NUL bytes, random bytes) file round trips with
// SHA-256 checks inside and outside the sandbox, image content for images,
// resources (templates, text and blob reads), files_list/stat/mkdir/move/remove,
// cancellation (the command's process tree is gone), progress notifications,
// tool failures as isError, protocol misuse as JSON-RPC errors, sandbox_kill.
//
// The SDK validates every structuredContent against the tool's outputSchema
// itself (kept on: the validators of every page of tools/list are installed).
//
// On success prints one JSON line of results to stdout and exits 0.  On the
// first failed check prints `FAIL: <step>: <what>` (and the server's stderr for
// stdio) to stderr and exits 1.  The sandbox it created is killed either way.
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { deflateSync } from 'node:zlib';
import { isDeepStrictEqual } from 'node:util';

const transportKind = process.argv[2];
const SBX_URL = process.env.SBX_URL;
const KEY = process.env.SBX_API_KEY;
const MODS = process.env.MCP_NODE_MODULES;
if (!['stdio', 'http'].includes(transportKind) || !SBX_URL || !KEY || !MODS) {
    console.error('usage: SBX_URL=... SBX_API_KEY=... MCP_NODE_MODULES=... [SBX_BIN=...] node sdk_client.mjs stdio|http');
    process.exit(2);
}
const sdk = (p) => import(pathToFileURL(path.join(MODS, '@modelcontextprotocol/sdk/dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StdioClientTransport } = await sdk('client/stdio.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');
const { McpError, EmptyResultSchema } = await sdk('types.js');

// ---------------------------------------------------------------------------
// checks

let step = 'start';
const results = { transport: transportKind, checks: [] };
class Failure extends Error {}

// SBX_MCP_KEEP_GOING=1 (for debugging the server): record failed checks and
// go on, to see every disagreement in one run; exits 1 at the end if any
const KEEP_GOING = process.env.SBX_MCP_KEEP_GOING === '1';
const failures = [];
function ok(cond, what, detail) {
    if (!cond) {
        const d = detail === undefined ? '' : `: ${typeof detail === 'string' ? detail : JSON.stringify(detail)}`;
        const m = `${what}${d}`.slice(0, 4000);
        if (!KEEP_GOING) throw new Failure(m);
        failures.push(`${step}: ${m}`);
        console.error(`FAIL (going on): ${step}: ${m}`);
    }
}
function eq(got, want, what) {
    ok(isDeepStrictEqual(got, want), what, `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}
function passed(name) {
    results.checks.push(name);
}
const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// the contract's tool table (docs/mcp.md): arguments and the required ones

const TOOLS = {
    sandbox_create: [['template', 'timeout_s', 'metadata', 'envs', 'cpus', 'memory_mb', 'disk_mb', 'pids', 'on_timeout', 'snapshot'], []],
    sandbox_list: [['state', 'metadata'], []],
    sandbox_info: [['sandbox_id'], ['sandbox_id']],
    sandbox_kill: [['sandbox_id'], ['sandbox_id']],
    sandbox_set_timeout: [['sandbox_id', 'timeout_s'], ['sandbox_id', 'timeout_s']],
    command_run: [['sandbox_id', 'cmd', 'argv', 'cwd', 'envs', 'stdin', 'timeout_s', 'background'], ['sandbox_id']],
    command_list: [['sandbox_id'], ['sandbox_id']],
    command_output: [['sandbox_id', 'pid', 'wait_s'], ['sandbox_id', 'pid']],
    command_kill: [['sandbox_id', 'pid'], ['sandbox_id', 'pid']],
    files_write: [['sandbox_id', 'path', 'content', 'encoding', 'mode'], ['sandbox_id', 'path', 'content']],
    files_read: [['sandbox_id', 'path', 'encoding'], ['sandbox_id', 'path']],
    files_list: [['sandbox_id', 'path', 'depth'], ['sandbox_id']],
    files_stat: [['sandbox_id', 'path'], ['sandbox_id', 'path']],
    files_mkdir: [['sandbox_id', 'path'], ['sandbox_id', 'path']],
    files_move: [['sandbox_id', 'from', 'to'], ['sandbox_id', 'from', 'to']],
    files_remove: [['sandbox_id', 'path', 'recursive'], ['sandbox_id', 'path']],
    sandbox_pause: [['sandbox_id'], ['sandbox_id']],
    sandbox_resume: [['sandbox_id'], ['sandbox_id']],
    sandbox_snapshot: [['sandbox_id'], ['sandbox_id']],
    sandbox_fork: [['sandbox_id', 'count'], ['sandbox_id']],
    sandbox_network: [['sandbox_id', 'mode', 'allow', 'deny'], ['sandbox_id', 'mode']],
    template_list: [[], []],
    snapshot_list: [[], []],
    snapshot_delete: [['snapshot_id'], ['snapshot_id']],
};

// ---------------------------------------------------------------------------
// a PNG built by hand: 64x64 RGBA, stored (uncompressed) deflate blocks so the
// file itself is mostly NUL bytes, with a few coloured rows

function crc32(buf) {
    let c, crc = 0xffffffff;
    for (let n = 0; n < buf.length; n++) {
        c = (crc ^ buf[n]) & 0xff;
        for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
        crc = (crc >>> 8) ^ c;
    }
    return (crc ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
}
function makePng(w = 64, h = 64) {
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(w, 0);
    ihdr.writeUInt32BE(h, 4);
    ihdr[8] = 8; // bit depth
    ihdr[9] = 6; // RGBA
    const raw = Buffer.alloc(h * (1 + 4 * w)); // filter byte 0 + transparent black pixels
    for (let y = 0; y < h; y += 16) {
        for (let x = 0; x < w; x++) raw.set([255, x * 4, y * 4, 255], y * (1 + 4 * w) + 1 + 4 * x);
    }
    const idat = deflateSync(raw, { level: 0 });
    return Buffer.concat([
        Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
        chunk('IHDR', ihdr), chunk('IDAT', idat), chunk('IEND', Buffer.alloc(0)),
    ]);
}

// ---------------------------------------------------------------------------
// the client

const client = new Client({ name: 'sbx-tests-sdk-client', version: '1.0.0' });
let transport;
let serverStderr = '';
if (transportKind === 'stdio') {
    ok(process.env.SBX_BIN, 'SBX_BIN must name the sbx binary for the stdio transport');
    transport = new StdioClientTransport({
        command: process.env.SBX_BIN,
        args: ['mcp'],
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', SBX_URL, SBX_API_KEY: KEY },
        stderr: 'pipe',
    });
    transport.stderr?.on('data', (d) => { serverStderr += d.toString(); });
} else {
    transport = new StreamableHTTPClientTransport(new URL('/mcp', SBX_URL), {
        requestInit: { headers: { Authorization: `Bearer ${KEY}` } },
    });
}
// transport-level errors (for stdio: a line on stdout that is not a JSON-RPC
// message; for http: a bad response) are failures: nothing but JSON-RPC may
// reach the client
const transportErrors = [];
client.onerror = (e) => transportErrors.push(String(e?.message ?? e));

let sid = null;          // the sandbox of this run
const created = [];      // every sandbox id created (reported for the leak checks)

// call a tool that must succeed; returns structuredContent
async function call(name, args, opts) {
    const r = await client.callTool({ name, arguments: args }, undefined, opts);
    ok(r.isError !== true, `${name} ${JSON.stringify(args).slice(0, 300)} returned isError`, r.content);
    ok(r.structuredContent && typeof r.structuredContent === 'object', `${name}: no structuredContent`, r);
    ok(Array.isArray(r.content) && r.content.length > 0, `${name}: empty content`, r);
    if (name !== 'files_read') {
        const text = r.content.find((c) => c.type === 'text');
        ok(text, `${name}: no text content item`, r.content);
        let parsed;
        try { parsed = JSON.parse(text.text); } catch { ok(false, `${name}: text content is not JSON`, text.text); }
        eq(parsed, r.structuredContent, `${name}: text content must be the same JSON as structuredContent`);
    }
    return r;
}
const sc = async (name, args, opts) => (await call(name, args, opts)).structuredContent;

// call a tool that must fail as a tool result (isError: true); returns its message
async function toolError(name, args) {
    const r = await client.callTool({ name, arguments: args });
    ok(r.isError === true, `${name} ${JSON.stringify(args).slice(0, 300)} should be isError`, r);
    const t = (r.content ?? []).find((c) => c.type === 'text');
    ok(t && t.text.length > 0, `${name}: isError result without a text message`, r);
    return t.text;
}

// arguments refused: a tool error by the contract (a -32602 is tolerated
// here only because the SDK may validate before sending); a success is not
async function refused(name, args) {
    let r;
    try {
        r = await client.callTool({ name, arguments: args });
    } catch (e) {
        ok(e instanceof McpError && e.code === -32602, `${name} ${JSON.stringify(args)}: expected isError or -32602`, String(e));
        return;
    }
    ok(r.isError === true, `${name} ${JSON.stringify(args)}: expected isError or -32602`, r);
}

// a request that must be refused with a JSON-RPC error of this code
async function rpcError(code, what, fn) {
    try {
        const r = await fn();
        ok(false, `${what}: expected JSON-RPC error ${code}, got a result`, r);
    } catch (e) {
        if (e instanceof Failure) throw e;
        ok(e instanceof McpError, `${what}: expected McpError ${code}`, String(e));
        eq(e.code, code, `${what}: JSON-RPC error code`);
        return e.message;
    }
}

async function sh(cmd, extra = {}) {
    const r = await sc('command_run', { sandbox_id: sid, cmd, ...extra });
    eq(r.exit_code, 0, `command ${JSON.stringify(cmd)} exit code (stderr ${JSON.stringify(r.stderr)})`);
    return r.stdout;
}

async function main() {
    // -- initialize ---------------------------------------------------------
    step = 'initialize';
    await client.connect(transport);
    const info = client.getServerVersion();
    ok(info && info.name === 'sbx', 'serverInfo.name is "sbx"', info);
    ok(typeof info.version === 'string' && /^\d+\.\d+/.test(info.version), 'serverInfo.version', info);
    const caps = client.getServerCapabilities();
    ok(caps?.tools, 'capabilities.tools', caps);
    ok(caps?.resources, 'capabilities.resources', caps);
    results.server = info;
    if (transportKind === 'http') {
        ok(typeof transport.sessionId === 'string' && transport.sessionId.length >= 16, 'MCP-Session-Id', transport.sessionId);
        eq(transport.protocolVersion, '2025-11-25', 'negotiated protocol version');
    }
    eq(await client.ping(), {}, 'ping result');
    eq(await client.setLoggingLevel('info'), {}, 'logging/setLevel result');
    passed('initialize');

    // -- tools/list, every page ---------------------------------------------
    step = 'tools/list';
    const tools = [];
    let cursor;
    let pages = 0;
    do {
        const page = await client.listTools(cursor === undefined ? undefined : { cursor });
        pages++;
        ok(page.tools.length <= 8, `tools/list page ${pages} has ${page.tools.length} tools (at most 8)`);
        tools.push(...page.tools);
        cursor = page.nextCursor;
        ok(pages < 10, 'tools/list: nextCursor chain does not end');
    } while (cursor !== undefined);
    // listTools() keeps only the last page's output validators: install all of them
    client.cacheToolMetadata(tools);
    const names = tools.map((t) => t.name);
    eq([...names].sort(), Object.keys(TOOLS).sort(), 'tool names over all pages');
    ok(pages >= 2, 'tools/list is paginated (24 tools, 8 per page)', pages);
    for (const t of tools) {
        const [props, required] = TOOLS[t.name];
        ok(typeof t.description === 'string' && t.description.length > 10, `${t.name}: description`);
        ok(t.inputSchema?.type === 'object', `${t.name}: inputSchema.type`, t.inputSchema);
        eq(t.inputSchema.additionalProperties, false, `${t.name}: inputSchema.additionalProperties`);
        eq(Object.keys(t.inputSchema.properties ?? {}).sort(), [...props].sort(), `${t.name}: argument names`);
        eq([...(t.inputSchema.required ?? [])].sort(), [...required].sort(), `${t.name}: required arguments`);
        ok(t.outputSchema?.type === 'object', `${t.name}: outputSchema`, t.outputSchema);
    }
    results.tools = names;
    results.tool_pages = pages;
    passed('tools/list');

    // -- sandboxes ----------------------------------------------------------
    step = 'sandbox_create';
    const sb = await sc('sandbox_create', { timeout_s: 600, metadata: { suite: 'mcp-sdk', transport: transportKind } });
    ok(/^[0-9a-f]{32}$/.test(sb.id), 'sandbox id', sb);
    sid = sb.id;
    created.push(sid);
    eq(sb.state, 'running', 'new sandbox state');
    eq(sb.template, 'base', 'default template');
    eq(sb.timeout_s, 600, 'timeout_s');
    eq(sb.metadata, { suite: 'mcp-sdk', transport: transportKind }, 'metadata');
    for (const k of ['created_at', 'expires_at']) ok(typeof sb[k] === 'string', `sandbox.${k}`, sb);
    passed('sandbox_create');

    step = 'sandbox_info/list/set_timeout';
    eq((await sc('sandbox_info', { sandbox_id: sid })).id, sid, 'sandbox_info id');
    const listed = await sc('sandbox_list', {});
    ok(listed.sandboxes.some((s) => s.id === sid), 'sandbox_list shows the sandbox', listed);
    const byMeta = await sc('sandbox_list', { metadata: { suite: 'mcp-sdk', transport: transportKind } });
    eq(byMeta.sandboxes.map((s) => s.id), [sid], 'sandbox_list metadata filter');
    eq((await sc('sandbox_list', { metadata: { suite: 'no-such-suite' } })).sandboxes, [], 'sandbox_list non-matching filter');
    const st = await sc('sandbox_set_timeout', { sandbox_id: sid, timeout_s: 1200 });
    eq(st.timeout_s, 1200, 'set_timeout timeout_s');
    ok(Date.parse(st.expires_at) > Date.parse(sb.expires_at), 'set_timeout moves expires_at', [sb.expires_at, st.expires_at]);
    passed('sandbox_info/list/set_timeout');

    // -- pause / resume (and the auto-resume of a paused sandbox) -------------
    step = 'sandbox_pause/resume';
    const paused = await sc('sandbox_pause', { sandbox_id: sid });
    eq([paused.state, paused.expires_at], ['paused', null], 'sandbox_pause: state and stopped clock');
    eq((await sc('sandbox_resume', { sandbox_id: sid })).state, 'running', 'sandbox_resume');
    await sc('sandbox_pause', { sandbox_id: sid });
    eq((await sc('command_run', { sandbox_id: sid, cmd: 'echo awake' })).stdout, 'awake\n', 'a call wakes a paused sandbox');
    eq((await sc('sandbox_info', { sandbox_id: sid })).state, 'running', 'running again after the call');
    passed('sandbox_pause/resume');

    // -- command_run --------------------------------------------------------
    step = 'command_run';
    let r = await sc('command_run', { sandbox_id: sid, cmd: 'echo hi' });
    eq([r.exit_code, r.stdout, r.stderr, r.stdout_encoding, r.timed_out], [0, 'hi\n', '', 'utf-8', false], 'echo hi');
    for (const k of ['pid', 'signal', 'stderr_encoding', 'stdout_truncated', 'stderr_truncated', 'oom_killed', 'duration_ms']) {
        ok(k in r, `command_run result has ${k}`, r);
    }
    r = await sc('command_run', { sandbox_id: sid, argv: ['printf', '%s|', 'a b', '$HOME', "it's"] });
    eq(r.stdout, "a b|$HOME|it's|", 'argv form: no shell');
    r = await sc('command_run', { sandbox_id: sid, cmd: 'echo out; echo oops >&2; exit 3' });
    eq([r.exit_code, r.stdout, r.stderr], [3, 'out\n', 'oops\n'], 'non-zero exit is a success with exit_code and stderr');
    r = await sc('command_run', { sandbox_id: sid, cmd: 'cat; echo "[$FOO]"; pwd', stdin: 'héllo\n', envs: { FOO: 'b a r' }, cwd: '/tmp' });
    eq(r.stdout, 'héllo\n[b a r]\n/tmp\n', 'stdin, envs, cwd');
    r = await sc('command_run', { sandbox_id: sid, cmd: "printf '\\377\\000x'" });
    eq([r.stdout_encoding, r.stdout], ['base64', Buffer.from([0xff, 0, 0x78]).toString('base64')], 'binary stdout comes as base64');
    r = await sc('command_run', { sandbox_id: sid, cmd: 'sleep 5', timeout_s: 1 });
    ok(r.timed_out === true && r.exit_code === null && r.signal === 9, 'timeout_s: timed_out, SIGKILL', r);
    let msg = await toolError('command_run', { sandbox_id: sid, argv: ['no-such-command-xyz'] });
    ok(msg.includes('no-such-command-xyz'), 'not-found message names the command', msg);
    await toolError('command_run', { sandbox_id: sid, cmd: 'no-such-command-xyz --flag' });
    await toolError('command_run', { sandbox_id: sid, cmd: 'exit 126' });
    await toolError('command_run', { sandbox_id: sid, cmd: 'echo x', cwd: 'no/such/dir' });
    passed('command_run');

    step = 'background + command_list/command_kill';
    // command_output: what a background command printed, while it runs and once it ended
    const talk = await sc('command_run', { sandbox_id: sid, cmd: 'echo one; echo two >&2; sleep 1; echo three; exit 4', background: true });
    let co = await sc('command_output', { sandbox_id: sid, pid: talk.pid });
    ok(co.running === true && co.stdout === 'one\n' && co.stderr === 'two\n' && co.exit_code === null, 'command_output while it runs', co);
    co = await sc('command_output', { sandbox_id: sid, pid: talk.pid, wait_s: 30 });
    eq([co.running, co.stdout, co.stderr, co.exit_code, co.dropped_bytes], [false, 'one\nthree\n', 'two\n', 4, 0], 'command_output once it ended');
    await toolError('command_output', { sandbox_id: sid, pid: 99999 });
    const bg = await sc('command_run', { sandbox_id: sid, cmd: 'sleep 300', background: true });
    ok(Number.isInteger(bg.pid) && bg.pid > 0 && bg.background === true, 'background result', bg);
    let cl = await sc('command_list', { sandbox_id: sid });
    let c = cl.commands.find((x) => x.pid === bg.pid);
    ok(c && c.running === true && c.background === true, 'command_list shows the background command running', cl);
    eq(await sc('command_kill', { sandbox_id: sid, pid: bg.pid }), { sandbox_id: sid, pid: bg.pid, killed: true }, 'command_kill');
    for (let i = 0; ; i++) {
        cl = await sc('command_list', { sandbox_id: sid });
        c = cl.commands.find((x) => x.pid === bg.pid);
        if (c && c.running === false) break;
        ok(i < 50, 'killed command still running after 5 s', c);
        await sleep(100);
    }
    eq(c.signal, 9, 'killed command signal');
    await toolError('command_kill', { sandbox_id: sid, pid: bg.pid }); // finished: conflict
    await toolError('command_kill', { sandbox_id: sid, pid: 99999 });
    passed('background + command_list/command_kill');

    // -- text file round trip -----------------------------------------------
    step = 'text file round trip';
    const tpath = 'dir with spaces/héllo wörld ☃.txt';
    const text = 'Grüße, мир, 世界 🌍\n\ttabs and "quotes" \\ backslash\nlast line without newline';
    const tbytes = Buffer.from(text, 'utf8');
    let w = await sc('files_write', { sandbox_id: sid, path: tpath, content: text });
    eq(w, { path: `/home/user/${tpath}`, size: tbytes.length }, 'files_write (text) result');
    let rd = await call('files_read', { sandbox_id: sid, path: tpath });
    eq([rd.structuredContent.encoding, rd.structuredContent.content, rd.structuredContent.size, rd.structuredContent.path],
        ['utf8', text, tbytes.length, `/home/user/${tpath}`], 'files_read (text)');
    ok(typeof rd.structuredContent.mime_type === 'string' && rd.structuredContent.mime_type.startsWith('text/'),
        'text mime_type', rd.structuredContent.mime_type);
    ok(rd.content.some((x) => x.type === 'text' && x.text.includes(text)), 'files_read (text): the text is in content', rd.content);
    ok(!rd.content.some((x) => x.type === 'image'), 'no image item for text', rd.content);
    eq((await sh(`sha256sum '${tpath}'`)).split(' ')[0], sha256(tbytes), 'text file SHA-256 inside the sandbox');
    // asking for base64 gets base64
    rd = await sc('files_read', { sandbox_id: sid, path: tpath, encoding: 'base64' });
    eq([rd.encoding, rd.content], ['base64', tbytes.toString('base64')], 'files_read encoding=base64');
    // UTF-8 text holding a NUL byte is read back as base64
    await sc('files_write', { sandbox_id: sid, path: 'nul.txt', content: 'a\u0000b' });
    rd = await sc('files_read', { sandbox_id: sid, path: 'nul.txt' });
    eq([rd.encoding, rd.content, rd.size], ['base64', Buffer.from('a\0b').toString('base64'), 3], 'text with NUL comes back as base64');
    passed('text file round trip');

    // -- binary round trips -------------------------------------------------
    step = 'PNG round trip';
    const png = makePng();
    const nuls = png.filter((b) => b === 0).length;
    ok(nuls > png.length / 2, 'the PNG is mostly NUL bytes', [nuls, png.length]);
    w = await sc('files_write', { sandbox_id: sid, path: 'img/pixels.png', content: png.toString('base64'), encoding: 'base64', mode: '0600' });
    eq(w, { path: '/home/user/img/pixels.png', size: png.length }, 'files_write (png) result');
    rd = await call('files_read', { sandbox_id: sid, path: 'img/pixels.png' });
    const s = rd.structuredContent;
    eq([s.encoding, s.size, s.mime_type], ['base64', png.length, 'image/png'], 'files_read (png)');
    eq(sha256(Buffer.from(s.content, 'base64')), sha256(png), 'PNG SHA-256 after the round trip');
    const img = rd.content.find((x) => x.type === 'image');
    ok(img, 'files_read of a PNG gives an image content item', rd.content.map((x) => x.type));
    eq(img.mimeType, 'image/png', 'image item mimeType');
    eq(sha256(Buffer.from(img.data, 'base64')), sha256(png), 'image item data SHA-256');
    eq((await sh('sha256sum img/pixels.png')).split(' ')[0], sha256(png), 'PNG SHA-256 inside the sandbox');
    const pst = await sc('files_stat', { sandbox_id: sid, path: 'img/pixels.png' });
    eq([pst.name, pst.path, pst.type, pst.size, pst.mode], ['pixels.png', '/home/user/img/pixels.png', 'file', png.length, '0600'], 'files_stat (png)');
    results.png = { size: png.length, nul_bytes: nuls, sha256: sha256(png) };
    passed('PNG round trip');

    step = 'random bytes round trip';
    const rnd = randomBytes(200 * 1024);
    for (let i = 0; i < rnd.length; i += 1000) rnd.fill(0, i, i + 100); // runs of NULs
    rnd.set([0xc3, 0x28, 0xff, 0xfe, 0x00], 0); // invalid UTF-8 up front
    w = await sc('files_write', { sandbox_id: sid, path: 'bin/random.bin', content: rnd.toString('base64'), encoding: 'base64' });
    eq(w.size, rnd.length, 'files_write (random) size');
    rd = await call('files_read', { sandbox_id: sid, path: 'bin/random.bin', encoding: 'base64' });
    eq(rd.structuredContent.encoding, 'base64', 'random bytes encoding');
    eq(sha256(Buffer.from(rd.structuredContent.content, 'base64')), sha256(rnd), 'random bytes SHA-256 after the round trip');
    ok(!rd.content.some((x) => x.type === 'image'), 'no image item for random bytes', rd.content.map((x) => x.type));
    rd = await sc('files_read', { sandbox_id: sid, path: 'bin/random.bin' });
    eq(rd.encoding, 'base64', 'random bytes come back as base64 unasked');
    eq((await sh('sha256sum bin/random.bin')).split(' ')[0], sha256(rnd), 'random bytes SHA-256 inside the sandbox');
    passed('random bytes round trip');

    // -- resources ----------------------------------------------------------
    step = 'resources';
    const tmpl = await client.listResourceTemplates();
    ok(tmpl.resourceTemplates.some((t) => t.uriTemplate === 'sbx://sandboxes/{sandbox_id}/files/{+path}'),
        'resource template sbx://sandboxes/{sandbox_id}/files/{+path}', tmpl);
    eq((await client.listResources()).resources, [], 'resources/list is empty');
    const base = `sbx://sandboxes/${sid}/files/`;
    let res = await client.readResource({ uri: base + 'img/pixels.png' });
    ok(res.contents.length === 1, 'one content for the PNG resource', res);
    eq([res.contents[0].uri, res.contents[0].mimeType, 'text' in res.contents[0]], [base + 'img/pixels.png', 'image/png', false], 'PNG resource');
    eq(sha256(Buffer.from(res.contents[0].blob, 'base64')), sha256(png), 'PNG resource blob SHA-256');
    res = await client.readResource({ uri: base + 'bin/random.bin' });
    eq(sha256(Buffer.from(res.contents[0].blob, 'base64')), sha256(rnd), 'random resource blob SHA-256');
    const turi = base + encodeURI(tpath);
    res = await client.readResource({ uri: turi });
    eq([res.contents[0].text, 'blob' in res.contents[0]], [text, false], 'text resource');
    ok(res.contents[0].mimeType?.startsWith('text/'), 'text resource mimeType', res.contents[0]);
    passed('resources');

    // -- files_list/stat/mkdir/move/remove -----------------------------------
    step = 'files_*';
    eq(await sc('files_mkdir', { sandbox_id: sid, path: 'work/a/b' }), { path: '/home/user/work/a/b', created: true }, 'files_mkdir');
    eq(await sc('files_mkdir', { sandbox_id: sid, path: 'work/a/b' }), { path: '/home/user/work/a/b', created: false }, 'files_mkdir again');
    await sc('files_write', { sandbox_id: sid, path: 'work/a/b/f.txt', content: 'f', mode: '0755' });
    let ls = await sc('files_list', { sandbox_id: sid, path: 'work' });
    eq(ls.entries.map((e) => [e.name, e.type]), [['a', 'dir']], 'files_list depth 1');
    ls = await sc('files_list', { sandbox_id: sid, path: 'work', depth: 3 });
    eq(ls.entries.map((e) => e.path).sort(), ['/home/user/work/a', '/home/user/work/a/b', '/home/user/work/a/b/f.txt'], 'files_list depth 3');
    ls = await sc('files_list', { sandbox_id: sid });
    ok(ls.entries.some((e) => e.name === 'dir with spaces' && e.type === 'dir'), 'files_list of the home', ls);
    const fe = (await sc('files_list', { sandbox_id: sid, path: 'dir with spaces' })).entries;
    eq(fe.map((e) => e.name), ['héllo wörld ☃.txt'], 'files_list shows the non-ASCII name');
    eq(await sc('files_move', { sandbox_id: sid, from: 'work/a/b/f.txt', to: 'work/g.txt' }), { path: '/home/user/work/g.txt' }, 'files_move');
    const gst = await sc('files_stat', { sandbox_id: sid, path: 'work/g.txt' });
    eq([gst.type, gst.size, gst.mode], ['file', 1, '0755'], 'files_stat after the move');
    await toolError('files_stat', { sandbox_id: sid, path: 'work/a/b/f.txt' });
    await toolError('files_remove', { sandbox_id: sid, path: 'work' }); // not empty
    eq(await sc('files_remove', { sandbox_id: sid, path: 'work', recursive: true }), { path: '/home/user/work', removed: true }, 'files_remove');
    await toolError('files_stat', { sandbox_id: sid, path: 'work' });
    passed('files_*');

    // -- progress -----------------------------------------------------------
    step = 'progress';
    const prog = [];
    r = await sc('command_run', { sandbox_id: sid, cmd: 'for i in 1 2 3 4 5; do echo $i; sleep 0.2; done' },
        { onprogress: (p) => prog.push(p) });
    eq(r.stdout, '1\n2\n3\n4\n5\n', 'progress command output');
    ok(prog.length >= 3, 'at least 3 progress notifications', prog);
    for (let i = 1; i < prog.length; i++) ok(prog[i].progress > prog[i - 1].progress, 'progress increases', prog);
    eq(prog[prog.length - 1].progress, 10, 'progress counts the output bytes');
    eq(prog.map((p) => p.message).join(''), r.stdout, 'progress messages carry the output');
    results.progress_notifications = prog.length;
    passed('progress');

    // -- cancellation -------------------------------------------------------
    step = 'cancellation';
    const ac = new AbortController();
    const t0 = Date.now();
    const pending = client.callTool({ name: 'command_run', arguments: { sandbox_id: sid, cmd: 'sleep 30; echo done > cancelled.txt' } },
        undefined, { signal: ac.signal });
    setTimeout(() => ac.abort('test cancels'), 1000);
    let aborted = false;
    try { await pending; } catch { aborted = true; }
    ok(aborted && Date.now() - t0 < 5000, 'the aborted call rejects at once', Date.now() - t0);
    let gone = false;
    for (let i = 0; i < 50 && !gone; i++) {
        cl = await sc('command_list', { sandbox_id: sid });
        const live = cl.commands.filter((x) => x.running && x.argv.join(' ').includes('sleep 30'));
        const pg = await sc('command_run', { sandbox_id: sid, argv: ['pgrep', '-x', 'sleep'] });
        gone = live.length === 0 && pg.exit_code === 1;
        if (!gone) await sleep(100);
    }
    ok(gone, 'the cancelled command is no longer running 5 s later', cl);
    results.cancel_ms = Date.now() - t0;
    c = cl.commands.find((x) => x.argv.join(' ').includes('sleep 30'));
    ok(c && c.running === false && c.exit_code === null && c.signal !== null, 'the cancelled command was killed by a signal', c);
    await toolError('files_stat', { sandbox_id: sid, path: 'cancelled.txt' });
    // the session goes on working after a cancellation
    eq(await sh('echo still here'), 'still here\n', 'a call after the cancellation');
    passed('cancellation');

    // -- tool failures (isError) and protocol misuse (JSON-RPC errors) -------
    step = 'errors';
    const unknown = '0123456789abcdef0123456789abcdef';
    msg = await toolError('sandbox_info', { sandbox_id: unknown });
    ok(msg.includes(unknown), 'the message names the sandbox', msg);
    await toolError('sandbox_info', { sandbox_id: 'not-an-id' });
    msg = await toolError('files_read', { sandbox_id: sid, path: 'no/such/file.txt' });
    ok(msg.length > 0, 'missing file message', msg);
    await toolError('files_read', { sandbox_id: sid, path: 'img' }); // a directory
    await toolError('sandbox_create', { timeout_s: 999999 }); // bad value
    await refused('command_run', { sandbox_id: sid, cmd: 'true', argv: ['true'] }); // both cmd and argv
    await refused('command_run', { sandbox_id: sid }); // neither cmd nor argv
    await toolError('files_write', { sandbox_id: sid, path: 'x.bin', content: '!!!not base64!!!', encoding: 'base64' });
    await rpcError(-32602, 'unknown tool', () => client.callTool({ name: 'no_such_tool', arguments: {} }));
    // arguments that do not match the inputSchema are tool errors a model can
    // correct (docs/mcp.md, as protocol revision 2025-11-25 asks)
    ok((await toolError('sandbox_info', { sandbox_id: sid, bogus: 1 })).includes("unknown argument 'bogus'"), 'unknown argument named');
    ok((await toolError('sandbox_info', {})).includes("missing required argument 'sandbox_id'"), 'missing argument named');
    ok((await toolError('sandbox_info', { sandbox_id: 42 })).includes("'sandbox_id' must be a string"), 'mistyped argument named');
    await rpcError(-32601, 'unknown method', () => client.request({ method: 'no/such/method', params: {} }, EmptyResultSchema));
    passed('errors');

    // -- sandbox_kill ---------------------------------------------------------
    step = 'sandbox_kill';
    eq(await sc('sandbox_kill', { sandbox_id: sid }), { sandbox_id: sid, killed: true }, 'sandbox_kill');
    const after = await sc('sandbox_info', { sandbox_id: sid });
    eq(after.state, 'deleted', 'state after sandbox_kill');
    await toolError('command_run', { sandbox_id: sid, cmd: 'true' });
    await toolError('sandbox_kill', { sandbox_id: sid });
    sid = null;
    passed('sandbox_kill');

    // -- close ----------------------------------------------------------------
    step = 'close';
    if (transportKind === 'http') {
        await transport.terminateSession(); // DELETE /mcp; throws unless 2xx (or 405)
        eq(transport.sessionId, undefined, 'session ended');
        await client.close();
    } else {
        const t1 = Date.now();
        await client.close(); // closes stdin; the SDK waits 2 s before SIGTERM
        ok(Date.now() - t1 < 1900, '`sbx mcp` exits when its stdin closes', Date.now() - t1);
    }
    passed('close');
    eq(transportErrors, [], 'transport errors (non-JSON-RPC output)');
}

let code = 0;
try {
    await main();
    if (failures.length) throw new Failure(`${failures.length} failed checks (above)`);
} catch (e) {
    code = 1;
    const what = e instanceof Failure ? e.message : (e?.stack ?? String(e));
    console.error(`FAIL: ${step}: ${what}`);
    if (serverStderr) console.error(`--- sbx mcp stderr ---\n${serverStderr.slice(-4000)}`);
    if (sid) {
        try { await client.callTool({ name: 'sandbox_kill', arguments: { sandbox_id: sid } }); } catch { /* the test's teardown deletes it */ }
    }
    try { await client.close(); } catch { /* ignore */ }
}
results.sandboxes = created;
if (code === 0) process.stdout.write(JSON.stringify(results) + '\n');
else console.error(`RESULTS: ${JSON.stringify(results)}`);
process.exit(code);
