// Drives `sandbox-manager mcp` with the official v2 client (@modelcontextprotocol/client, pinned)
// statelessly at 2026-07-28, over stdio and over Streamable HTTP (loopback TCP and a unix socket),
// plus raw HTTP where the SDK cannot say what it sends: the token, Origin, bounds, deadlines and
// the modern errors. One line per check ("ok ..." / "FAIL ..."); exits 1 when any failed.
// Run by tests/integration/manager_mcp.sh:
//   node client2.mjs --manager BIN --socket PATH --session S --dir DIR
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { chmodSync, statSync, writeFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { request as httpRequest } from 'node:http';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['manager', 'socket', 'session', 'dir']) {
	if (!opt[k]) {
		console.error(`usage: client2.mjs --manager BIN --socket PATH --session S --dir DIR (missing --${k})`);
		process.exit(2);
	}
}
const MODERN = '2026-07-28';
const base = ['mcp', '--session', opt.session, '--socket', opt.socket];
let failed = 0;
function check(what, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok || !detail ? '' : `: ${detail}`}`);
	if (!ok) failed++;
	return ok;
}
const sleep = ms => new Promise(r => setTimeout(r, ms));
const text = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('');
const TOKEN = `tok-${process.pid}-${Math.random().toString(36).slice(2)}-0123456789`;
const tokenFile = `${opt.dir}/mcp.token`;
writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
chmodSync(tokenFile, 0o600);

// A server on --http ADDR; resolves with its process and where it listens (from its log).
function httpServer(addr, tf = tokenFile) {
	const proc = spawn(opt.manager, [...base, '--http', addr, '--token-file', tf], { stdio: ['ignore', 'ignore', 'pipe'] });
	let log = '';
	const exit = new Promise(r => proc.on('exit', code => r(code)));
	const ready = new Promise(resolve => {
		proc.stderr.on('data', d => {
			log += d;
			const m = /listening on ([^"\s]+)/.exec(log);
			if (m) resolve(m[1]);
		});
		exit.then(() => resolve(null));
	});
	return { proc, exit, ready, log: () => log };
}


// Raw lines on stdio: the modern errors, and both eras in one process (the stateless requests
// leave the handshake's version alone, and the handshake does not make requests stateful).
async function stdioRawChecks() {
	const proc = spawn(opt.manager, base, { stdio: ['pipe', 'pipe', 'ignore'] });
	const msgs = [];
	let wake = () => {};
	createInterface({ input: proc.stdout }).on('line', l => { msgs.push(JSON.parse(l)); wake(); });
	const ask = async (id, method, params) => {
		proc.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) })}\n`);
		const until = Date.now() + 10000;
		while (msgs.length === 0 && Date.now() < until) await new Promise(r => { wake = r; setTimeout(r, 200); });
		return msgs.shift();
	};
	let m = await ask(1, 'server/discover', {});
	check('stdio: discover without _meta: -32602', m?.error?.code === -32602, JSON.stringify(m));
	m = await ask(2, 'tools/list', { _meta: meta('2099-01-01') });
	check('stdio: an unsupported version: -32022 with supported and requested', m?.error?.code === -32022 &&
		m.error.data?.supported?.[0] === MODERN && m.error.data.requested === '2099-01-01', JSON.stringify(m));
	m = await ask(3, 'tools/list', { _meta: meta() });
	check('stdio: a stateless tools/list: resultType, ttlMs, cacheScope, serverInfo, outputSchema', m?.result?.resultType === 'complete' &&
		m.result.ttlMs >= 0 && m.result.cacheScope === 'private' && !!m.result.tools?.[0]?.outputSchema &&
		m.result._meta?.['io.modelcontextprotocol/serverInfo']?.name === 'sandbox-manager', JSON.stringify(m).slice(0, 300));
	m = await ask(4, 'ping', { _meta: meta() });
	check('stdio: a stateless ping: -32601 (2026-07-28 removed it)', m?.error?.code === -32601, JSON.stringify(m));
	m = await ask(5, 'initialize', { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'raw', version: '1' } });
	check('stdio: initialize after stateless requests: 2024-11-05', m?.result?.protocolVersion === '2024-11-05', JSON.stringify(m));
	m = await ask(6, 'tools/list');
	check('stdio: then a legacy tools/list: as 2024-11-05 (no outputSchema, no resultType)', m?.result?.tools?.length === 1 &&
		!('outputSchema' in m.result.tools[0]) && !('resultType' in m.result), JSON.stringify(m).slice(0, 300));
	m = await ask(7, 'tools/list', { _meta: meta() });
	check('stdio: and a stateless one still as 2026-07-28', m?.result?.resultType === 'complete' && !!m.result.tools?.[0]?.outputSchema,
		JSON.stringify(m).slice(0, 300));
	proc.stdin.end();
	check('stdio: exits 0 at the end of stdin', (await new Promise(r => proc.on('exit', r))) === 0);
}

async function sdkChecks(name, transport) {
	const client = new Client({ name: 'infra-sandbox-test-v2', version: '1.0.0' }, { versionNegotiation: { mode: { pin: MODERN } } });
	await client.connect(transport);
	check(`${name}: negotiated ${MODERN} without initialize`, client.getNegotiatedProtocolVersion() === MODERN, client.getNegotiatedProtocolVersion());
	check(`${name}: server name from discover`, client.getServerVersion()?.name === 'sandbox-manager', JSON.stringify(client.getServerVersion()));
	const { tools } = await client.listTools();
	check(`${name}: tools/list: exactly one tool, bash, with its schemas`, tools.length === 1 && tools[0].name === 'bash' &&
		tools[0].inputSchema?.required?.[0] === 'command' && tools[0].outputSchema?.type === 'object', JSON.stringify(tools).slice(0, 300));
	const r = await client.callTool({ name: 'bash', arguments: { command: 'echo v2; exit 4' } });
	check(`${name}: a call: stdout and "exit code 4"`, /^v2\n/.test(text(r)) && /\nexit code 4$/.test(text(r)) && r.isError === false, text(r));
	check(`${name}: a call: structuredContent is the exec result`, r.structuredContent?.exit_code === 4 &&
		r.structuredContent?.status === 'exited', JSON.stringify(r.structuredContent));
	await client.close();
}

// One raw HTTP request; resolves {status, headers, body, json}.
function raw({ port, path = '/mcp', method = 'POST', headers = {}, body, socketPath }) {
	if (body !== undefined && !('content-length' in headers)) headers = { ...headers, 'content-length': String(Buffer.byteLength(body)) };
	return new Promise(resolve => {
		const req = httpRequest({ host: '127.0.0.1', port, socketPath, path, method, headers }, res => {
			let data = '';
			res.on('data', d => { data += d; });
			// cut short (a stream closed before its end): what came, and why it stopped
			res.on('error', e => resolve({ status: res.statusCode, headers: res.headers, body: data, error: String(e) }));
			res.on('end', () => {
				let json;
				try { json = JSON.parse(data); } catch { json = undefined; }
				resolve({ status: res.statusCode, headers: res.headers, body: data, json });
			});
		});
		req.on('error', e => resolve({ status: 0, error: String(e) }));
		if (body !== undefined) req.write(body);
		req.end();
	});
}
const meta = (v = MODERN) => ({ 'io.modelcontextprotocol/protocolVersion': v, 'io.modelcontextprotocol/clientCapabilities': {} });
function post(port, msg, extra = {}) {
	const body = JSON.stringify(msg);
	return raw({ port, body, headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
		authorization: `Bearer ${TOKEN}`, 'mcp-protocol-version': MODERN, 'mcp-method': msg.method, ...extra } });
}

async function rawChecks(port) {
	let r = await raw({ port, headers: { 'content-type': 'application/json' }, body: '{}' });
	check('http: no token: 401 with WWW-Authenticate: Bearer', r.status === 401 && /^Bearer/.test(r.headers?.['www-authenticate'] ?? ''), JSON.stringify(r));
	r = await post(port, { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta() } }, { authorization: `Bearer ${TOKEN}x` });
	check('http: a wrong token: 401 invalid_token', r.status === 401 && /invalid_token/.test(r.headers?.['www-authenticate'] ?? ''), JSON.stringify(r));
	r = await post(port, { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta() } }, { origin: 'http://evil.example' });
	check('http: a foreign Origin: 403', r.status === 403, JSON.stringify(r));
	r = await post(port, { jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta() } }, { origin: 'http://localhost:6274' });
	check('http: discover from a loopback Origin: 200, supportedVersions, resultType, ttlMs', r.status === 200 &&
		r.json?.result?.supportedVersions?.[0] === MODERN && r.json.result.supportedVersions.includes('2025-11-25') &&
		r.json.result.resultType === 'complete' && r.json.result.ttlMs >= 0 && r.json.result.cacheScope === 'private' &&
		r.json.result._meta?.['io.modelcontextprotocol/serverInfo']?.name === 'sandbox-manager', r.body);
	r = await raw({ port, method: 'GET', headers: { authorization: `Bearer ${TOKEN}` } });
	check('http: GET: 405 (no GET stream in 2026-07-28)', r.status === 405 && r.headers?.allow === 'POST', JSON.stringify(r));
	r = await post(port, { jsonrpc: '2.0', id: 2, method: 'tools/list', params: { _meta: meta('2099-01-01') } }, { 'mcp-protocol-version': '2099-01-01' });
	check('http: an unsupported version: 400 and -32022 listing the supported ones', r.status === 400 &&
		r.json?.error?.code === -32022 && r.json.error.data?.supported?.includes(MODERN) && r.json.error.data.requested === '2099-01-01', r.body);
	r = await post(port, { jsonrpc: '2.0', id: 3, method: 'tools/list', params: { _meta: { 'io.modelcontextprotocol/protocolVersion': MODERN } } });
	check('http: _meta without clientCapabilities: 400 and -32602', r.status === 400 && r.json?.error?.code === -32602, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 3, method: 'tools/list', params: {} });
	check('http: header 2026-07-28 and no _meta: 400 and -32602', r.status === 400 && r.json?.error?.code === -32602, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 3, method: 'tools/list', params: {} }, { 'mcp-protocol-version': '1999-01-01' });
	check('http: an unknown header version and no _meta: 400 and -32022', r.status === 400 && r.json?.error?.code === -32022 &&
		r.json.error.data?.requested === '1999-01-01', r.body);
	r = await post(port, { jsonrpc: '2.0', id: 4, method: 'tools/list', params: { _meta: meta() } }, { 'mcp-method': 'tools/call' });
	check('http: Mcp-Method not the body\'s: 400 and -32020', r.status === 400 && r.json?.error?.code === -32020, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'bash', arguments: { command: 'true' }, _meta: meta() } }, { 'mcp-name': 'sh' });
	check('http: Mcp-Name not the body\'s: 400 and -32020', r.status === 400 && r.json?.error?.code === -32020, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 6, method: 'no/such', params: { _meta: meta() } });
	check('http: an unknown method: 404 and -32601', r.status === 404 && r.json?.error?.code === -32601, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 7, method: 'ping', params: { _meta: meta() } });
	check('http: ping is gone in 2026-07-28: 404 and -32601', r.status === 404 && r.json?.error?.code === -32601, r.body);
	r = await post(port, { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'bash', arguments: { command: 'echo over-http' }, _meta: meta() } }, { 'mcp-name': 'bash' });
	check('http: a raw call: 200 application/json, resultType complete', r.status === 200 &&
		/^application\/json/.test(r.headers?.['content-type'] ?? '') && r.json?.result?.resultType === 'complete' &&
		/^over-http\n/.test(text(r.json.result)), r.body);
	r = await post(port, { jsonrpc: '2.0', id: 8, method: 'server/discover', params: { _meta: meta() } }, { expect: '100-continue' });
	check('http: Expect: 100-continue is answered, then the request', r.status === 200 && r.json?.result?.resultType === 'complete', r.body);
	r = await post(port, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 99 } });
	check('http: a notification: 202 with no body', r.status === 202 && r.body === '', JSON.stringify(r));
	r = await raw({ port, headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'content-length': String(5 << 20) } });
	check('http: a 5 MiB body: 413 before it is read', r.status === 413, JSON.stringify(r).slice(0, 200));
	r = await post(port, { jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} }, { 'mcp-protocol-version': '2025-11-25' });
	check('http: a legacy request (header 2025-11-25, no _meta): answered', r.status === 200 && r.json?.result?.tools?.[0]?.name === 'bash' &&
		!('resultType' in r.json.result), r.body);
	// A stalled client: half a request, then nothing; the server answers 408 by its deadline, and serves others meanwhile.
	const t0 = Date.now();
	const stalled = await new Promise(resolve => {
		const s = netConnect(port, '127.0.0.1', () => s.write('POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\n'));
		let data = '';
		s.on('data', d => { data += d; });
		s.on('close', () => resolve(data));
		s.on('error', () => resolve(data));
		post(port, { jsonrpc: '2.0', id: 10, method: 'server/discover', params: { _meta: meta() } })
			.then(x => check('http: served while another client stalls', x.status === 200, JSON.stringify(x)));
	});
	check('http: a stalled request is answered 408 and closed within 12 s', /^HTTP\/1.1 408/.test(stalled) && Date.now() - t0 < 12000,
		`${stalled.slice(0, 80)} after ${Date.now() - t0} ms`);
	// Closing the connection cancels the call (transports "Cancellation").
	const cmd = `sleep 30.${process.pid}`;
	const body = JSON.stringify({ jsonrpc: '2.0', id: 11, method: 'tools/call', params: { name: 'bash', arguments: { command: cmd }, _meta: meta() } });
	const s = netConnect(port, '127.0.0.1', () => s.write(`POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
		`Authorization: Bearer ${TOKEN}\r\nMCP-Protocol-Version: ${MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: bash\r\n` +
		`Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`));
	s.on('error', () => {});
	await sleep(2500);
	s.destroy();
	const t1 = Date.now();
	r = await post(port, { jsonrpc: '2.0', id: 12, method: 'tools/call', params: { name: 'bash', arguments: { command: 'echo after-close' }, _meta: meta() } }, { 'mcp-name': 'bash' });
	check('http: a closed connection cancels its call: the next call runs within 8 s', /^after-close\n/.test(text(r.json?.result)) &&
		Date.now() - t1 < 8000, `${r.body} after ${Date.now() - t1} ms`);
	// Progress: a call with a progressToken, from a client that takes SSE, is streamed once its first
	// progress is due (15 s); 12 s pass between that and the answer, longer than the 10 s a stalled
	// client is given, so the stream must say something meanwhile (comment lines) to stay open.
	r = await post(port, { jsonrpc: '2.0', id: 13, method: 'tools/call', params: { name: 'bash', arguments: { command: 'sleep 27; echo sse-done' },
		_meta: { ...meta(), progressToken: 'p13' } } }, { 'mcp-name': 'bash' });
	const events = (r.body ?? '').split('\n\n').filter(e => e.startsWith('event: message\ndata: ')).map(e => JSON.parse(e.slice(21)));
	const last = events[events.length - 1];
	check('http: a long call with a progressToken: an SSE stream, progress, then the answer', r.status === 200 &&
		/^text\/event-stream/.test(r.headers?.['content-type'] ?? '') && events.length >= 2 &&
		events[0].method === 'notifications/progress' && events[0].params?.progressToken === 'p13' &&
		last.id === 13 && /^sse-done\n/.test(text(last.result)), (r.body ?? '').slice(0, 400));
	check('http: the stream says something while the call is quiet (comment lines)', /(^|\n\n):\n\n/.test(r.body ?? ''),
		(r.body ?? '').slice(0, 400));
}

try {
	await stdioRawChecks();
	// stdio, modern: the v2 client probes server/discover and never initializes.
	await sdkChecks('stdio', new StdioClientTransport({ command: opt.manager, args: base, stderr: 'ignore' }));

	const tcp = httpServer('127.0.0.1:0');
	const url = await tcp.ready;
	check('http: listening on a loopback port', /^http:\/\/127\.0\.0\.1:\d+\/mcp$/.test(url ?? ''), tcp.log());
	const port = Number(new URL(url).port);
	await sdkChecks('http', new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${TOKEN}` } } }));
	await rawChecks(port);
	tcp.proc.kill('SIGTERM');
	check('http: SIGTERM: exits 0', (await tcp.exit) === 0);

	const sock = `${opt.dir}/mcp.sock`;
	const ux = httpServer(`unix:${sock}`);
	check('unix: listening', (await ux.ready) === `unix:${sock}`, ux.log());
	check('unix: the socket is mode 0600', (statSync(sock).mode & 0o777) === 0o600, (statSync(sock).mode & 0o777).toString(8));
	let r = await raw({ socketPath: sock, method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'server/discover', params: { _meta: meta() } }),
		headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'mcp-protocol-version': MODERN, 'mcp-method': 'server/discover' } });
	check('unix: discover answered', r.status === 200 && r.json?.result?.supportedVersions?.[0] === MODERN, r.body);
	ux.proc.kill('SIGTERM');
	check('unix: SIGTERM: exits 0', (await ux.exit) === 0);

	for (const [what, addr] of [['0.0.0.0', '0.0.0.0:0'], ['a LAN address', '192.168.1.1:8080'], ['a host name', 'example.com:80']]) {
		const bad = httpServer(addr);
		check(`refused: --http ${what}: exit 2 before listening`, (await bad.exit) === 2 && /loopback only/.test(bad.log()), bad.log());
	}
	chmodSync(tokenFile, 0o644);
	const loose = httpServer('127.0.0.1:0');
	check('refused: a token file of mode 0644: exit 2', (await loose.exit) === 2 && /mode 0600/.test(loose.log()), loose.log());
	chmodSync(tokenFile, 0o600);
	const noTok = spawn(opt.manager, [...base, '--http', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] });
	check('refused: --http without --token-file: exit 2', (await new Promise(r2 => noTok.on('exit', r2))) === 2);
} catch (e) {
	check('the test ran to its end', false, e?.stack ?? String(e));
}
console.log(`mcp v2 client: ${failed} failed`);
process.exit(failed ? 1 : 0);
