// The Claude Agent SDK with `sandbox-manager mcp` as its only shell (tests/integration/manager_claude.sh),
// run only inside tests/frameworks/offline.sh, against the fake model (with_fake_anthropic.sh).
//
//   node sdk.mjs --manager BIN --session S --socket PATH [--max-output-chars N]
//                [--interrupt-after-ms MS [--interrupt-at N]] [--rpc-dir DIR]
//
// Prints every SDK message as one JSON line. --interrupt-after-ms: once the model's Nth tool call
// (default the first) is seen, waits MS and interrupts the query (as a user pressing Esc would).
// The options are the ones docs/integrations.md shows.
import { query } from '@anthropic-ai/claude-agent-sdk';

const opt = {};
for (let i = 2; i < process.argv.length; i += 2) opt[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];

const args = ['mcp', '--session', opt.session, '--socket', opt.socket];
if (opt['max-output-chars']) args.push('--max-output-chars', opt['max-output-chars']);
// --rpc-dir DIR: the server's traffic copied both ways on its way (DIR/in.jsonl, DIR/out.jsonl)
const server = opt['rpc-dir']
	? { command: 'bash', args: ['-c', 'r=$0; tee -a "$r/in.jsonl" | "$@" | tee -a "$r/out.jsonl"', opt['rpc-dir'], opt.manager, ...args] }
	: { command: opt.manager, args };

const q = query({
	prompt: 'Run the commands.',
	options: {
		mcpServers: {
			sandbox: { type: 'stdio', ...server, alwaysLoad: true, timeout: 660_000 },
		},
		tools: [],                                 // none of the SDK's own tools: no local shell, no files
		disallowedTools: ['Bash'],
		allowedTools: ['mcp__sandbox__bash'],
		permissionMode: 'dontAsk',                 // anything not allowed is refused, never asked
		settingSources: [],                        // no user or project settings change the above
		persistSession: false,
		env: { ...process.env },                   // `env` replaces the whole environment
	},
});

let interrupted = false, calls = 0;
try {
for await (const m of q) {
	console.log(JSON.stringify(m));
	const toolUse = m.type === 'assistant' && m.message?.content?.some(b => b.type === 'tool_use');
	if (toolUse) calls++;
	if (toolUse && opt['interrupt-after-ms'] && calls === Number(opt['interrupt-at'] ?? 1) && !interrupted) {
		interrupted = true;
		setTimeout(() => {
			console.log(JSON.stringify({ type: 'test', event: 'interrupt' }));
			q.interrupt().catch(e => console.log(JSON.stringify({ type: 'test', event: 'interrupt-failed', error: String(e) })));
		}, Number(opt['interrupt-after-ms']));
	}
}
} catch (e) {
	// An interrupted query ends with an error result: expected then, a failure otherwise.
	console.log(JSON.stringify({ type: 'test', event: 'error', error: String(e) }));
	if (!interrupted) process.exit(1);
}
