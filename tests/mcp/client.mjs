// Drives `sandbox-manager mcp` with the official MCP TypeScript SDK client (and raw JSON-RPC lines
// where the SDK cannot say what it sends) against a real manager and session. Prints one line per
// check ("ok ..." / "FAIL ...") and exits 1 when any check failed. Run by tests/integration/manager_mcp.sh:
//   node client.mjs --manager BIN --socket PATH --session S --manager-pid PID --max-timeout N --default-timeout N
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['manager', 'socket', 'session', 'manager-pid', 'max-timeout', 'default-timeout']) {
	if (!opt[k]) {
		console.error(`usage: client.mjs --manager BIN --socket PATH --session S --manager-pid PID --max-timeout N --default-timeout N (missing --${k})`);
		process.exit(2);
	}
}
const MAX = Number(opt['max-timeout']);
const MARK = `${process.pid}${Math.floor(Math.random() * 1e6)}`;
const serverArgs = ['mcp', '--session', opt.session, '--socket', opt.socket];
let failed = 0;

function check(what, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok || !detail ? '' : `: ${detail}`}`);
	if (!ok) failed++;
	return ok;
}
const sleep = ms => new Promise(r => setTimeout(r, ms));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// The manager's records of the session (through its CLI, not through the server under test).
function records() {
	const out = execFileSync(opt.manager, ['records', '--session', opt.session, '--socket', opt.socket], { encoding: 'utf8' });
	return JSON.parse(out).records;
}
async function waitRecord(pred, ms) {
	const until = Date.now() + ms;
	for (;;) {
		const r = records().find(pred);
		if (r || Date.now() > until) return r;
		await sleep(100);
	}
}
function processAlive(pattern) {
	try {
		execFileSync('pgrep', ['-f', '--', pattern], { stdio: 'ignore' });
		return true;
	} catch {
		return false;
	}
}

// ---- raw JSON-RPC lines: exact versions, errors, and nothing but protocol on stdout ----

class Raw {
	constructor() {
		this.proc = spawn(opt.manager, serverArgs, { stdio: ['pipe', 'pipe', 'ignore'] });
		this.msgs = [];
		this.junk = [];
		this.waiters = [];
		this.exit = new Promise(r => this.proc.on('exit', code => r(code)));
		createInterface({ input: this.proc.stdout }).on('line', line => {
			try {
				const m = JSON.parse(line);
				if (m.jsonrpc !== '2.0') throw new Error('not JSON-RPC 2.0');
				this.msgs.push(m);
			} catch {
				this.junk.push(line);
			}
			this.waiters.splice(0).forEach(w => w());
		});
	}
	send(x) {
		this.proc.stdin.write((typeof x === 'string' ? x : JSON.stringify(x)) + '\n');
	}
	// The next message (in order), within ms.
	async next(ms = 10000) {
		const until = Date.now() + ms;
		while (this.msgs.length === 0 && Date.now() < until)
			await new Promise(r => { this.waiters.push(r); setTimeout(r, 200); });
		return this.msgs.shift();
	}
	async request(id, method, params) {
		this.send({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });
		return this.next();
	}
}

async function initRaw(version) {
	const raw = new Raw();
	const r = await raw.request(1, 'initialize', { protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw', version: '1' } });
	raw.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
	return [raw, r];
}

async function rawChecks() {
	for (const v of ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25']) {
		const [raw, r] = await initRaw(v);
		check(`initialize ${v}: answered with ${v}`, r?.id === 1 && r.result?.protocolVersion === v, JSON.stringify(r));
		if (v === '2024-11-05') {
			const l = await raw.request(2, 'tools/list');
			check('2024-11-05: tools/list has no outputSchema (it came with 2025-06-18)',
				l?.result?.tools?.length === 1 && !('outputSchema' in l.result.tools[0]), JSON.stringify(l));
		}
		raw.proc.stdin.end();
		check(`initialize ${v}: exits 0 at the end of stdin`, (await raw.exit) === 0);
	}
	const [raw, r] = await initRaw('1999-01-01');
	check('an unsupported version is answered with the latest, 2025-11-25', r?.result?.protocolVersion === '2025-11-25', JSON.stringify(r));

	raw.send('{"jsonrpc":"2.0","id":2,"method":');
	let m = await raw.next();
	check('a parse error answers -32700 with id null', m?.error?.code === -32700 && m.id === null, JSON.stringify(m));
	m = await raw.request(3, 'no/such/method');
	check('an unknown method answers -32601', m?.id === 3 && m.error?.code === -32601, JSON.stringify(m));
	raw.send({ id: 4, method: 'ping' });
	m = await raw.next();
	check('a message without jsonrpc "2.0" answers -32600', m?.error?.code === -32600, JSON.stringify(m));
	raw.send('[{"jsonrpc":"2.0","id":5,"method":"ping"}]');
	m = await raw.next();
	check('a batch answers -32600', m?.error?.code === -32600, JSON.stringify(m));
	raw.send({ jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'sh', arguments: { command: 'true' } } });
	m = await raw.next();
	check('an unknown tool answers -32602', m?.id === 6 && m.error?.code === -32602, JSON.stringify(m));
	raw.send({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: [] });
	m = await raw.next();
	check('params that are not an object answer -32602', m?.id === 7 && m.error?.code === -32602, JSON.stringify(m));
	raw.send(`{"jsonrpc":"2.0","id":8,"method":"ping","params":{"pad":"${'a'.repeat(5 << 20)}"}}`);
	m = await raw.next(20000);
	check('a 5 MiB line answers -32600 and nothing else', m?.error?.code === -32600 && m.id === null, JSON.stringify(m)?.slice(0, 300));
	raw.send({ jsonrpc: '2.0', method: 'notifications/whatever' });
	raw.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 12345 } });
	raw.send({ jsonrpc: '2.0', method: 'no/such/notification' });
	m = await raw.request(9, 'ping');
	check('notifications get no answer; the server still serves after every error', m?.id === 9 && same(m.result, {}), JSON.stringify(m));
	raw.proc.stdin.end();
	check('exits 0 at the end of stdin', (await raw.exit) === 0);
	check('nothing but JSON-RPC on stdout', raw.junk.length === 0, raw.junk.join(' | ').slice(0, 300));
}

// ---- the SDK client ----

async function connect() {
	const transport = new StdioClientTransport({ command: opt.manager, args: serverArgs, stderr: 'ignore' });
	let negotiated;
	transport.setProtocolVersion = v => { negotiated = v; };
	const client = new Client({ name: 'infra-sandbox-test', version: '1.0.0' });
	client.lateResponses = [];
	client.onerror = e => client.lateResponses.push(String(e));
	await client.connect(transport);
	return [client, negotiated];
}

const text = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('');

async function schemaChecks(client, negotiated) {
	check('SDK: negotiated protocol version 2025-11-25', negotiated === '2025-11-25', negotiated);
	check('SDK: server name', client.getServerVersion()?.name === 'sandbox-manager', JSON.stringify(client.getServerVersion()));
	check('SDK: tools capability', !!client.getServerCapabilities()?.tools);
	const { tools } = await client.listTools();
	check('tools/list: exactly one tool, bash', tools.length === 1 && tools[0].name === 'bash', JSON.stringify(tools.map(t => t.name)));
	const t = tools[0];
	const want = {
		type: 'object',
		properties: {
			command: { type: 'string', description: t.inputSchema?.properties?.command?.description },
			timeout_seconds: { type: 'integer', description: t.inputSchema?.properties?.timeout_seconds?.description, minimum: 1, maximum: MAX },
		},
		required: ['command'],
		additionalProperties: false,
	};
	check(`tools/list: the exact inputSchema (maximum ${MAX})`, same(t.inputSchema, want) &&
		typeof want.properties.command.description === 'string' && typeof want.properties.timeout_seconds.description === 'string',
	JSON.stringify(t.inputSchema));
	check('tools/list: outputSchema is the model\'s view, every field required, nothing else', t.outputSchema?.type === 'object' &&
		same(Object.keys(t.outputSchema.properties ?? {}).sort(), [...(t.outputSchema.required ?? [])].sort()) &&
		same([...t.outputSchema.required].sort(), ['duration_ms', 'exit_code', 'output', 'output_files', 'signal', 'status',
			'stderr_bytes', 'stdout_bytes', 'timed_out', 'truncated']) && t.outputSchema.additionalProperties === false,
	JSON.stringify(t.outputSchema));
	for (const words of [/fresh/, /do not persist/, /no stdin/i, /background/, /TMPDIR/, /head and tail/]) {
		check(`tools/list: the description says ${words}`, words.test(t.description ?? ''), t.description);
	}
}

async function callChecks(client) {
	let r = await client.callTool({ name: 'bash', arguments: { command: 'echo hi; echo oops >&2; exit 3' } });
	check('a call: stdout in the text', /^hi\n/.test(text(r)), text(r));
	check('a call: stderr labelled in the text', /\[stderr\]\noops\n/.test(text(r)), text(r));
	check('a call: last line "exit code 3"', /\nexit code 3$/.test(text(r)), text(r));
	check('a call: isError false for a non-zero exit', r.isError === false);
	const sc = r.structuredContent ?? {};
	check('a call: structuredContent is the outcome and the same text, no exec id, receipt or host path',
		sc.status === 'exited' && sc.exit_code === 3 && sc.signal === null && sc.timed_out === false &&
		Number.isInteger(sc.duration_ms) && sc.output === text(r) && sc.stdout_bytes === 3 && sc.stderr_bytes === 5 &&
		sc.truncated === false && same(sc.output_files, {}) && !/exec_id|receipt|nonce/.test(JSON.stringify(sc)),
	JSON.stringify(r.structuredContent));
	r = await client.callTool({ name: 'bash', arguments: { command: 'pwd; echo "$TMPDIR"', timeout_seconds: MAX } });
	const wt = `/workspaces/${opt.session}`;
	check('a call starts at the worktree, TMPDIR its scratch', r.isError === false &&
		text(r).startsWith('/') && text(r).includes(`${wt}\n`) && text(r).includes(`${wt}/.sandbox-tmp\n`), text(r));

	const before = records().length;
	const bad = [
		['an extra argument', { command: 'true', cwd: '/' }, /unknown argument 'cwd'/],
		['a command that is not a string', { command: ['ls'] }, /command must be a string/],
		['an empty command', { command: '' }, /must not be empty/],
		['no command', {}, /command is required/],
		['a timeout that is a string', { command: 'true', timeout_seconds: '5' }, /timeout_seconds must be a whole number/],
		['a timeout that is not whole', { command: 'true', timeout_seconds: 1.5 }, /timeout_seconds must be a whole number/],
		['a timeout of 0', { command: 'true', timeout_seconds: 0 }, /from 1 to/],
		[`a timeout over the cap (${MAX + 1})`, { command: 'true', timeout_seconds: MAX + 1 }, new RegExp(`from 1 to ${MAX}`)],
		['a session in the arguments', { command: 'true', session: 'other' }, /unknown argument 'session'/],
	];
	for (const [what, args, re] of bad) {
		r = await client.callTool({ name: 'bash', arguments: args });
		check(`refused: ${what}: isError with a clear message`, r.isError === true && re.test(text(r)) &&
			r.structuredContent?.status === 'refused', `${text(r)} ${JSON.stringify(r.structuredContent)}`);
	}
	check('refused calls never reached the manager (no exec recorded)', records().length === before, `${before} -> ${records().length}`);

	const t0 = Date.now();
	r = await client.callTool({ name: 'bash', arguments: { command: `sleep 30.${MARK}1`, timeout_seconds: 1 } });
	check('a timeout: isError, "timed out after 1 s"', r.isError === true && /timed out after 1 s$/.test(text(r)) &&
		r.structuredContent?.status === 'timed_out', text(r));
	check('a timeout: returned within 6 s', Date.now() - t0 < 6000, `${Date.now() - t0} ms`);
	check('a timeout: no sleep left', !processAlive(`sleep 30.${MARK}1`));
}

async function cancelChecks(client) {
	const cmd = `sleep 30.${MARK}2`;
	const ac = new AbortController();
	const call = client.callTool({ name: 'bash', arguments: { command: cmd, timeout_seconds: MAX } }, undefined, { signal: ac.signal })
		.then(() => 'answered', e => `rejected: ${e?.name ?? e}`);
	const dispatched = await waitRecord(x => x.command === cmd && x.state === 'dispatched', 15000);
	check('cancel: the call reached the sandbox', !!dispatched);
	const t0 = Date.now();
	ac.abort('the user pressed escape');
	check('cancel: the SDK call ends at once', /^rejected/.test(await call));
	const rec = await waitRecord(x => x.command === cmd && x.state !== 'dispatched' && x.state !== 'accepted', 10000);
	check('cancel: the manager records the exec cancelled', rec?.state === 'cancelled', JSON.stringify(rec));
	check('cancel: within 5 s', Date.now() - t0 < 5000, `${Date.now() - t0} ms`);
	check('cancel: no sleep left', !processAlive(cmd));
	await sleep(1000);
	check('cancel: no response was sent for the cancelled request', client.lateResponses.length === 0, client.lateResponses.join(' | '));
	const r = await client.callTool({ name: 'bash', arguments: { command: 'echo after-cancel' } });
	check('cancel: the next call runs', r.isError === false && /^after-cancel\n/.test(text(r)), text(r));
}

async function waitGone(pid, ms) {
	const until = Date.now() + ms;
	while (Date.now() < until) {
		let state = '';
		try {
			state = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0];
		} catch {
			return;
		}
		// A zombie leader is not enough: the other threads of a killed multi-threaded manager may
		// still hold the shared descriptor table (and the listening socket) for a moment.
		let tasks = [];
		try {
			tasks = readdirSync(`/proc/${pid}/task`);
		} catch {
			return;
		}
		if (state === 'Z' && tasks.length <= 1) return;
		await new Promise(resolve => setTimeout(resolve, 50));
	}
}

async function managerGoneChecks(client) {
	const cmd = `sleep 20.${MARK}3`;
	const marker = `/tmp/mcp-local-fallback.${MARK}`;
	rmSync(marker, { force: true });
	const call = client.callTool({ name: 'bash', arguments: { command: cmd, timeout_seconds: MAX } });
	await waitRecord(x => x.command === cmd && x.state === 'dispatched', 15000);
	process.kill(Number(opt['manager-pid']), 'SIGKILL');
	let r = await call;
	// A dying process's listening socket can still accept into its backlog: wait until it is gone.
	await waitGone(Number(opt['manager-pid']), 5000);
	check('manager killed mid-call: isError, outcome uncertain, unavailable', r.isError === true &&
		/outcome uncertain: sandbox-manager unavailable/.test(text(r)) && r.structuredContent?.status === 'uncertain', text(r));
	r = await client.callTool({ name: 'bash', arguments: { command: `touch ${marker}; echo ran` } });
	check('manager gone: the next call is isError "sandbox-manager unavailable"', r.isError === true &&
		/sandbox-manager unavailable/.test(text(r)) && r.structuredContent?.status === 'refused', text(r));
	check('manager gone: nothing ran locally (no marker file)', !existsSync(marker));
	const { tools } = await client.listTools();
	check('manager gone: the server still answers tools/list', tools.length === 1);
}

try {
	await rawChecks();
	const [client, negotiated] = await connect();
	await schemaChecks(client, negotiated);
	await callChecks(client);
	await cancelChecks(client);
	await managerGoneChecks(client);
	await client.close();
} catch (e) {
	check('the test ran to its end', false, e?.stack ?? String(e));
}
console.log(`mcp client: ${failed} failed`);
process.exit(failed ? 1 : 0);
