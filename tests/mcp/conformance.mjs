// The official conformance suite (@modelcontextprotocol/conformance, pinned) against
// `sandbox-manager mcp --http` on loopback. The suite sends no credentials, so it talks to a loopback
// proxy here that adds the bearer token and forwards each request byte for byte otherwise.
// Every server scenario of the suite runs, at each spec version it applies to; each one's outcome
// must be the expected one (EXPECTED below: pass, or fail for a stated reason of this one-tool
// server's design). A scenario that passes where a failure was expected fails the test too, so the
// list stays true. Run by tests/integration/manager_mcp.sh:
//   node conformance.mjs --manager BIN --socket PATH --session S --dir DIR
import { spawn } from 'node:child_process';
import { writeFileSync, readdirSync, readFileSync, existsSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { fileURLToPath } from 'node:url';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['manager', 'socket', 'session', 'dir']) {
	if (!opt[k]) {
		console.error(`usage: conformance.mjs --manager BIN --socket PATH --session S --dir DIR (missing --${k})`);
		process.exit(2);
	}
}
const here = fileURLToPath(new URL('.', import.meta.url));
const suite = `${here}node_modules/@modelcontextprotocol/conformance/dist/index.js`;
const TOKEN = `conformance-${process.pid}-${Math.random().toString(36).slice(2)}`;
writeFileSync(`${opt.dir}/token`, `${TOKEN}\n`, { mode: 0o600 });

// Why a scenario (or one check of it) cannot pass against this server by design.
const FIXTURE = 'calls a fixture tool of the suite\'s reference server; this server has one tool, bash, by design';
const WHY = {
	resources: 'no resources: the server offers the bash tool only (resources/* answer -32601)',
	prompts: 'no prompts: the server offers the bash tool only (prompts/* answer -32601)',
	logging: 'no logging capability: logs go to stderr (2026-07-28 deprecates Logging)',
	completion: 'no completion capability: there are no prompts or resources to complete',
	tasks: 'the tasks extension is not offered: a call runs to its end, cancelled by closing its stream',
	xmcp: 'no x-mcp-header parameter: a command must not be copied into an HTTP header',
	fixture: FIXTURE,
};
// Scenarios expected to fail (every failing check of theirs), by the reason.
const EXPECTED_SCENARIO = {
	'logging-set-level': WHY.logging,
	'completion-complete': WHY.completion,
	'json-schema-2020-12': WHY.fixture,
	'elicitation-sep1034-defaults': WHY.fixture,
	'elicitation-sep1330-enums': WHY.fixture,
	'http-custom-header-server-validation': WHY.xmcp,
};
for (const s of ['simple-text', 'image', 'audio', 'embedded-resource', 'mixed-content', 'with-logging', 'error', 'with-progress',
	'sampling', 'elicitation']) EXPECTED_SCENARIO[`tools-call-${s}`] = WHY.fixture;
for (const s of ['list', 'read-text', 'read-binary', 'templates-read', 'subscribe', 'unsubscribe']) EXPECTED_SCENARIO[`resources-${s}`] = WHY.resources;
for (const s of ['list', 'get-simple', 'get-with-args', 'get-embedded-resource', 'get-with-image']) EXPECTED_SCENARIO[`prompts-${s}`] = WHY.prompts;
for (const s of ['lifecycle', 'capability-negotiation', 'wire-fields', 'request-state-removal', 'mrtr-input', 'request-headers',
	'dispatch-and-envelope', 'required-task-error', 'mrtr-composition']) EXPECTED_SCENARIO[`tasks-${s}`] = WHY.tasks;
for (const s of ['basic-elicitation', 'basic-sampling', 'basic-list-roots', 'request-state', 'multiple-input-requests', 'multi-round',
	'non-tool-request', 'result-type', 'tampered-state', 'capability-check']) EXPECTED_SCENARIO[`input-required-result-${s}`] = WHY.fixture;
// Single checks expected to fail in scenarios that otherwise pass.
const EXPECTED_CHECK = {
	'server-stateless': {
		'sep-2575-server-rejects-undeclared-capability': WHY.fixture,
		'sep-2575-missing-capability-http-400': WHY.fixture,
		'sep-2575-http-server-no-independent-requests-on-stream': WHY.fixture,
		'sep-2575-server-no-log-without-loglevel': WHY.fixture,
	},
	caching: {
		'sep-2549-prompts-list-caching-hints': WHY.prompts,
		'sep-2549-resources-list-caching-hints': WHY.resources,
		'sep-2549-resources-templates-list-caching-hints': WHY.resources,
	},
};

let failed = 0;
function check(what, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok || !detail ? '' : `: ${detail}`}`);
	if (!ok) failed++;
	return ok;
}

// The server, on a free loopback port; the proxy in front of it adds the token.
const server = spawn(opt.manager, ['mcp', '--session', opt.session, '--socket', opt.socket, '--http', '127.0.0.1:0',
	'--token-file', `${opt.dir}/token`], { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const upstream = await new Promise(resolve => {
	server.stderr.on('data', d => {
		log += d;
		const m = /listening on http:\/\/127\.0\.0\.1:(\d+)\//.exec(log);
		if (m) resolve(Number(m[1]));
	});
	server.on('exit', () => resolve(0));
});
const proxy = createServer((req, res) => {
	const up = request({ host: '127.0.0.1', port: upstream, path: req.url, method: req.method,
		headers: { ...req.headers, authorization: `Bearer ${TOKEN}` } }, r => {
		res.writeHead(r.statusCode, r.headers);
		r.pipe(res);
	});
	up.on('error', () => { if (!res.headersSent) res.writeHead(502); res.end(); });
	req.pipe(up);
	res.on('close', () => up.destroy()); // a client that leaves cancels upstream too
});
await new Promise(r => proxy.listen(0, '127.0.0.1', r));
const url = `http://127.0.0.1:${proxy.address().port}/mcp`;

// The suite in a child (asynchronously: the proxy serves it from this process).
async function runSuite(label, extra) {
	const out = `${opt.dir}/results-${label}`;
	const child = spawn(process.execPath, ['--import', `${here}node20/register.mjs`, suite, 'server', '--url', url, '--suite', 'all',
		'-o', out, ...extra], { stdio: ['ignore', 'ignore', 'inherit'] });
	const timer = setTimeout(() => child.kill('SIGKILL'), 240000);
	const code = await new Promise(r => child.on('exit', (c, sig) => r(sig ?? c)));
	clearTimeout(timer);
	check(`conformance ${label}: the suite ran to its end`, code === 0 || code === 1, `exit ${code}`);
	const scenarios = {};
	for (const d of existsSync(out) ? readdirSync(out) : []) {
		const name = d.replace(/^server-/, '').replace(/-\d{4}-\d\d-\d\dT[\d-]+Z$/, '');
		if (existsSync(`${out}/${d}/checks.json`)) scenarios[name] = JSON.parse(readFileSync(`${out}/${d}/checks.json`, 'utf8'));
	}
	return scenarios;
}

function judge(label, scenarios) {
	const passed = [], empty = [], expected = [];
	check(`conformance ${label}: scenarios ran`, Object.keys(scenarios).length > 20, Object.keys(scenarios).join(' '));
	for (const [name, checks] of Object.entries(scenarios).sort()) {
		const fails = checks.filter(c => c.status === 'FAILURE');
		const ok = checks.filter(c => c.status === 'SUCCESS');
		const whyAll = EXPECTED_SCENARIO[name];
		const unexpected = fails.filter(c => !whyAll && !EXPECTED_CHECK[name]?.[c.id]);
		check(`conformance ${label}: ${name}: no unexpected failure`, unexpected.length === 0,
			unexpected.map(c => `${c.id}: ${c.errorMessage ?? ''}`).join(' | ').slice(0, 600));
		if (whyAll) {
			check(`conformance ${label}: ${name}: fails as expected (${whyAll})`, fails.length > 0,
				'it passes now: take it off the expected list');
			expected.push(name);
			continue;
		}
		for (const [id, why] of Object.entries(EXPECTED_CHECK[name] ?? {})) {
			const c = checks.find(x => x.id === id);
			check(`conformance ${label}: ${name}: ${id} fails as expected (${why})`, c?.status === 'FAILURE',
				`it is ${c?.status ?? 'missing'} now: take it off the expected list`);
		}
		(ok.length > 0 ? passed : empty).push(`${name} (${ok.length} checks)`);
	}
	console.log(`     ${label}: passing: ${passed.join(', ')}`);
	console.log(`     ${label}: no check applied (nothing of theirs in this server): ${empty.join(', ') || 'none'}`);
	console.log(`     ${label}: failing by design: ${expected.length} scenarios`);
	return passed.length;
}

if (check('the server listens on loopback', upstream > 0, log)) {
	const latest = judge('latest', await runSuite('latest', []));
	const legacy = judge('2025-11-25', await runSuite('2025-11-25', ['--spec-version', '2025-11-25']));
	check('conformance: the core scenarios pass', latest >= 10 && legacy >= 4, `${latest} and ${legacy} passing`);
}
proxy.close();
server.kill('SIGTERM');
check('the server exits 0 on SIGTERM', (await new Promise(r => server.on('exit', r))) === 0);
console.log(`mcp conformance: ${failed} failed`);
process.exit(failed ? 1 : 0);
