// The bash tool's output shaped for models, driven with the official MCP TypeScript SDK client against
// a real manager and session: the text within the limit (default and --max-output-chars), head and tail
// with a marker naming the file that holds the whole output, that file's exact bytes read back by the
// next call, small output unchanged, the keep limit, and a sandbox that replaces the folder with links,
// a FIFO or planted names: nothing written outside, the call still answers. One line per check
// ("ok ..." / "FAIL ..."), exit 1 when any failed. Run by tests/integration/manager_mcp.sh:
//   node output.mjs --manager BIN --socket PATH --session S --worktree DIR --outside DIR
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['manager', 'socket', 'session', 'worktree', 'outside']) {
	if (!opt[k]) {
		console.error(`usage: output.mjs --manager BIN --socket PATH --session S --worktree DIR --outside DIR (missing --${k})`);
		process.exit(2);
	}
}
const KEEP = 20;
const OUTPUTS = `${opt.worktree}/.sandbox-tmp/.outputs`;
let failed = 0;

function check(what, ok, detail = '') {
	console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}${ok || !detail ? '' : `: ${String(detail).slice(0, 600)}`}`);
	if (!ok) failed++;
	return ok;
}
const sha256 = b => createHash('sha256').update(b).digest('hex');
const text = r => (r?.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('');
const kept = () => readdirSync(OUTPUTS).filter(n => /^exec-[0-9a-f]+\.std(out|err)$/.test(n) && lstatSync(`${OUTPUTS}/${n}`).isFile());

// 16667 numbered lines of 12 bytes: 200004 bytes.
const LINES = 16667;
const BIG = `seq -f 'line %06g' 1 ${LINES}`;
const bigOut = Array.from({ length: LINES }, (_, i) => `line ${String(i + 1).padStart(6, '0')}\n`).join('');
const MARKER = /\n\[\.\.\. (\d+) bytes omitted: whole output \((stdout|stderr), (\d+) bytes\) in (\S+) \.\.\.\]\n/;

async function connect(extra = []) {
	const transport = new StdioClientTransport({
		command: opt.manager, args: ['mcp', '--session', opt.session, '--socket', opt.socket, ...extra], stderr: 'ignore',
	});
	const client = new Client({ name: 'infra-sandbox-output-test', version: '1.0.0' });
	await client.connect(transport);
	return client;
}
const call = (client, command) => client.callTool({ name: 'bash', arguments: { command } });

async function shapeChecks(client) {
	let r = await call(client, 'echo hi; echo oops >&2; exit 3');
	check('small output: the text is unchanged', text(r) === 'hi\n[stderr]\noops\nexit code 3', JSON.stringify(text(r)));
	check('small output: nothing kept, nothing cut', JSON.stringify(r.structuredContent?.output_files) === '{}' &&
		r.structuredContent?.truncated === false, JSON.stringify(r.structuredContent));

	r = await call(client, BIG);
	const t = text(r), m = MARKER.exec(t);
	check('200,000 bytes: the text is within 30000 bytes', Buffer.byteLength(t) <= 30000, Buffer.byteLength(t));
	check('200,000 bytes: it starts with the first lines', t.startsWith('line 000001\nline 000002\n'), t.slice(0, 100));
	check('200,000 bytes: it ends with the last lines, then the exit code',
		t.endsWith(`line 016666\nline 016667\nexit code 0`), t.slice(-100));
	check('200,000 bytes: the marker names the stream, its byte count and a file under .outputs', m !== null &&
		m[2] === 'stdout' && m[3] === String(bigOut.length) && m[4].startsWith(`${OUTPUTS}/exec-`) && m[4].endsWith('.stdout'), t.slice(11000, 11500));
	if (m === null) return null;
	// The marker line as matched starts with the head's own last newline.
	const shown = Buffer.byteLength(t) - (Buffer.byteLength(m[0]) - 1) - 'exit code 0'.length;
	check('200,000 bytes: shown and omitted add up to the whole', shown + Number(m[1]) === bigOut.length, `${shown} + ${m[1]}`);
	check('200,000 bytes: the structured result names the same file and carries the same text',
		r.structuredContent?.output_files?.stdout === m[4] && r.structuredContent.output === t &&
		r.structuredContent.stdout_bytes === bigOut.length && r.structuredContent.truncated === true,
		JSON.stringify(r.structuredContent).slice(0, 400));

	r = await call(client, `sha256sum ${m[4]}; stat -c '%a %u' ${m[4]}; id -u`);
	const [sum, mode] = text(r).split('\n');
	check('the next call reads the file: its sha256 is the output\'s', sum?.split(' ')[0] === sha256(bigOut), text(r));
	check('the file is mode 600, the sandbox\'s own', mode === `600 ${text(r).split('\n')[2]}`, text(r));

	r = await call(client, `${BIG} >&2`);
	const e = MARKER.exec(text(r));
	check('200,000 bytes on stderr: marked and kept as .stderr', e?.[2] === 'stderr' && e[4].endsWith('.stderr') &&
		/^\[stderr\]\nline 000001\n/.test(text(r)) && r.structuredContent?.output_files?.stdout === undefined &&
		r.structuredContent?.output_files?.stderr === e[4], text(r).slice(0, 300));

	// Bytes that are not text: the text shows them escaped, the file holds the bytes themselves.
	r = await call(client, 'head -c 60000 /dev/urandom | tee "$TMPDIR/raw.bin"');
	const b = /in (\S+\.stdout) \.\.\.\]/.exec(text(r));
	check('binary output: escaped in the text, with the note', /\\x[0-9a-f]{2}/.test(text(r)) && /not all text/.test(text(r)) && b !== null,
		text(r).slice(0, 200));
	if (b !== null) {
		r = await call(client, `sha256sum < "$TMPDIR/raw.bin"; sha256sum < ${b[1]}; rm -f "$TMPDIR/raw.bin"`);
		const [x, y] = text(r).split('\n');
		check('binary output: the kept file is the exact bytes', x === y && /^[0-9a-f]{64}/.test(x), text(r));
	}
	// Rule N6: the MCP text holds nothing a terminal acts on raw (ESC, a raw 0x9b, U+009B CSI, U+009D OSC,
	// DEL, U+202E): each is escaped as \xNN of its bytes in the text itself, not only in the JSON around it.
	r = await call(client, 'printf "A\\033[31mB\\233C\\302\\233D\\302\\235E\\177F\\342\\200\\256G\\n"');
	const acting = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufffd]/u;
	check('terminal controls: none raw in the text, each escaped', !acting.test(text(r)) &&
		text(r).includes('A\\x1b[31mB\\x9bC\\xc2\\x9bD\\xc2\\x9dE\\x7fF\\xe2\\x80\\xaeG'), JSON.stringify(text(r)));
	return m[4];
}

async function smallLimitChecks() {
	const client = await connect(['--max-output-chars', '1000']);
	const r = await call(client, BIG);
	const t = text(r), m = MARKER.exec(t);
	check('--max-output-chars 1000: the text is within 1000 bytes', Buffer.byteLength(t) <= 1000, Buffer.byteLength(t));
	check('--max-output-chars 1000: first lines, marker with its file, last lines', t.startsWith('line 000001\n') &&
		t.endsWith('line 016667\nexit code 0') && m?.[4]?.startsWith(`${OUTPUTS}/`), t);
	const { tools } = await client.listTools();
	check('--max-output-chars 1000: the description says the limit', /about 1000 characters/.test(tools[0].description), tools[0].description);
	await client.close();
}

// The command replaces the folder, or the scratch folder itself, before its output is kept.
async function hostileChecks(client) {
	const outside = opt.outside;
	const cases = [
		['.outputs a symbolic link to a directory outside the worktree',
			`rm -rf "$TMPDIR/.outputs" && ln -s ${outside} "$TMPDIR/.outputs" && ${BIG}`, 'rm -f "$TMPDIR/.outputs"'],
		['.outputs a FIFO', `rm -rf "$TMPDIR/.outputs" && mkfifo "$TMPDIR/.outputs" && ${BIG}`, 'rm -f "$TMPDIR/.outputs"'],
		['the scratch folder a symbolic link outside',
			`mv .sandbox-tmp .sandbox-tmp.real && ln -s ${outside} .sandbox-tmp && ${BIG}`,
			'rm -f .sandbox-tmp && mv .sandbox-tmp.real .sandbox-tmp'],
	];
	for (const [what, cmd, undo] of cases) {
		const r = await call(client, cmd);
		check(`hostile: ${what}: the call answers, exit code 0`, r.isError === false && /\nexit code 0$/.test(text(r)), text(r).slice(-300));
		check(`hostile: ${what}: the note says the output was not kept, and why`,
			/bytes\); the whole output could not be kept: \S/.test(text(r)) && r.structuredContent?.output === text(r) &&
			JSON.stringify(r.structuredContent.output_files) === '{}', `${text(r).slice(0, 2000)} ${JSON.stringify(r.structuredContent?.output_files)}`);
		check(`hostile: ${what}: nothing written outside`, readdirSync(outside).join(',') === 'victim', readdirSync(outside).join(','));
		const u = await call(client, undo);
		check(`hostile: ${what}: undone`, u.isError === false && /exit code 0$/.test(text(u)), text(u));
	}
}

// N+5 big calls: only the newest N files remain; names the sandbox planted are its own and stay
// what they were (a link is never followed, a FIFO never opened).
async function keepLimitChecks(client) {
	let r = await call(client, `mkdir -p "$TMPDIR/.outputs" && ln -sf ${opt.outside}/victim "$TMPDIR/.outputs/exec-aaaa.stdout" && ` +
		'mkfifo "$TMPDIR/.outputs/exec-bbbb.stderr" && touch -h -d 2000-01-01 "$TMPDIR/.outputs/exec-aaaa.stdout"');
	check('keep limit: names planted', r.isError === false && /exit code 0$/.test(text(r)), text(r));
	let last = null;
	for (let i = 0; i < KEEP + 5; i++) {
		r = await call(client, BIG);
		last = MARKER.exec(text(r))?.[4] ?? last;
	}
	const files = kept();
	check(`keep limit: after ${KEEP + 5} big calls, ${KEEP} files remain`, files.length === KEEP, `${files.length}: ${files.join(' ')}`);
	check('keep limit: the newest call\'s file is among them', last !== null && files.includes(last.split('/').pop()), last);
	check('keep limit: the planted link and FIFO are left alone, the link\'s target untouched',
		lstatSync(`${OUTPUTS}/exec-aaaa.stdout`).isSymbolicLink() && lstatSync(`${OUTPUTS}/exec-bbbb.stderr`).isFIFO() &&
		readFileSync(`${opt.outside}/victim`, 'utf8') === 'keep me\n');
}

// One request on the control socket (a 4-byte big-endian length, then JSON), its one answer.
function control(req) {
	return new Promise((resolve, reject) => {
		const sock = createConnection(opt.socket), body = Buffer.from(JSON.stringify(req));
		const head = Buffer.alloc(4);
		let got = Buffer.alloc(0);
		head.writeUInt32BE(body.length);
		sock.on('connect', () => sock.write(Buffer.concat([head, body])));
		sock.on('data', d => {
			got = Buffer.concat([got, d]);
			if (got.length >= 4 && got.length >= 4 + got.readUInt32BE(0)) {
				sock.destroy();
				resolve(JSON.parse(got.subarray(4, 4 + got.readUInt32BE(0)).toString()));
			}
		});
		sock.on('error', reject);
	});
}

async function requestChecks() {
	for (const bad of ['yes', -1, 1.5, true]) {
		const r = await control({ op: 'exec', session: opt.session, command: 'true', keep_output: bad });
		check(`exec keep_output ${JSON.stringify(bad)}: refused as invalid, with the reason`, r.ok === false &&
			r.error?.kind === 'invalid' && /keep_output must be a whole number of bytes/.test(r.error.message), JSON.stringify(r));
	}
	const r = await control({ op: 'exec', session: opt.session, command: 'echo hi', keep_output: 0 });
	check('exec keep_output 0: the output is kept however small', r.ok === true &&
		readFileSync(r.result?.output_kept?.stdout ?? '/nonexistent', 'utf8') === 'hi\n', JSON.stringify(r));
}

try {
	await requestChecks();
	const client = await connect();
	await shapeChecks(client);
	await smallLimitChecks();
	await hostileChecks(client);
	await keepLimitChecks(client);
	await client.close();
} catch (e) {
	check('the test ran to its end', false, e?.stack ?? String(e));
}
console.log(`mcp output: ${failed} failed`);
process.exit(failed ? 1 : 0);
