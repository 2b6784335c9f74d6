/* `sandbox-manager mcp` (see mcp.h): its command line, and the stdio transport, JSON-RPC lines
 * on stdin and stdout. The protocol is mcp_proto.c's, shared with the Streamable HTTP transport
 * (mcp_http.c). Only protocol goes to stdout; logs go to stderr.
 *
 * Threads: the main thread reads stdin and hands each line to the protocol, which answers
 * everything but tools/call at once; the calls' worker writes their answers here too. */
#include "mcp.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "fdio.h"
#include "log.h"
#include "mcp_http.h"
#include "mcp_proto.h"
#include "mcp_shape.h"

#define LINE_CAP (4u * 1024u * 1024u)   /* one JSON-RPC message; larger ones are refused */
#define DRAIN_SECONDS 10                /* after stdin ends, how long the calls received are waited for */

/* ---- stdout: whole messages, one per line ---- */

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER; /* one message at a time on stdout */
static int legacy_proto = -1; /* what initialize chose for this process; -1 before it */

static void out_send(struct mcp_sink *s, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t len;

	(void)s;
	json_decref(msg);
	if (text == NULL) {
		sb_error("mcp: could not serialise a message (out of memory)");
		return;
	}
	len = strlen(text);
	text[len] = '\n'; /* replaces the terminator: written with an explicit length */
	pthread_mutex_lock(&out_lock);
	if (fd_write_all(STDOUT_FILENO, text, len + 1) < 0)
		sb_warn("mcp: writing to stdout: %s (the client is gone?)", strerror(errno));
	pthread_mutex_unlock(&out_lock);
	free(text);
}

static void out_done(struct mcp_sink *s)
{
	(void)s; /* one stream for every request: nothing to close */
}

static struct mcp_sink stdout_sink = { out_send, out_done };

static void rpc_line(const char *line, size_t len)
{
	struct mcp_origin o = { .sink = &stdout_sink, .legacy_proto = legacy_proto };

	mcp_proto_message(line, len, &o);
	if (o.negotiated >= 0)
		legacy_proto = o.negotiated;
}

/* ---- stdin: lines, bounded ---- */

struct line_reader {
	char *buf;
	size_t len, cap;
	int overlong; /* the current line passed LINE_CAP: skipped up to its newline */
};

static void line_end(struct line_reader *r)
{
	size_t i = 0;

	while (i < r->len && strchr(" \t\r", r->buf[i]) != NULL)
		i++;
	if (r->overlong)
		out_send(&stdout_sink, mcp_error_msg(NULL, RPC_INVALID_REQUEST, NULL, "Invalid Request: the message is over %u bytes",
					      LINE_CAP));
	else if (i < r->len)
		rpc_line(r->buf, r->len);
	r->len = 0;
	r->overlong = 0;
}

static int line_append(struct line_reader *r, const char *data, size_t n)
{
	if (r->overlong)
		return 0;
	if (r->len + n > LINE_CAP) {
		r->overlong = 1;
		r->len = 0;
		return 0;
	}
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? r->cap : 65536;
		char *p;

		while (cap < r->len + n)
			cap *= 2;
		p = realloc(r->buf, cap);
		if (p == NULL)
			return -1;
		r->buf = p;
		r->cap = cap;
	}
	memcpy(r->buf + r->len, data, n);
	r->len += n;
	return 0;
}

/* Read stdin to its end, handling each line; -1 on a read error. */
static int stdin_serve(void)
{
	struct line_reader r = { 0 };
	char chunk[65536];
	int rc = 0;

	for (;;) {
		ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
		size_t off = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -1 : 0;
			break;
		}
		while (off < (size_t)n) {
			char *nl = memchr(chunk + off, '\n', (size_t)n - off);
			size_t seg = nl ? (size_t)(nl - (chunk + off)) : (size_t)n - off;

			if (line_append(&r, chunk + off, seg) < 0) {
				r.overlong = 1; /* out of memory: answer it as too large, keep serving */
				r.len = 0;
			}
			off += seg + (nl != NULL);
			if (nl != NULL)
				line_end(&r);
		}
	}
	if (r.len > 0 || r.overlong)
		line_end(&r); /* a last message without its newline */
	free(r.buf);
	return rc;
}

/* ---- the command ---- */

static const char mcp_usage[] =
	"usage: sandbox-manager mcp --session S [--socket PATH] [--max-output-chars N]\n"
	"                           [--http unix:PATH|127.0.0.1:PORT|[::1]:PORT --token-file F]\n"
	"\n"
	"Serves MCP (2026-07-28 statelessly; 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05 after an\n"
	"initialize) on stdin and stdout, or with --http as Streamable HTTP: one tool, bash ({command,\n"
	"timeout_seconds}), whose calls run in the session's sandbox through the manager. Logs go to stderr.\n"
	"\n"
	"  --session S            the session the tool runs in (required)\n"
	"  --socket PATH          the manager's control socket (default $SANDBOX_MANAGER_SOCKET)\n"
	"  --max-output-chars N   the tool result's text, about N bytes at most (500 to 4194304;\n"
	"                         default 30000); the whole output is kept in a file it names\n"
	"  --http ADDR            serve Streamable HTTP at POST /mcp on a unix socket (created 0600)\n"
	"                         or a loopback address (port 0: any free one, logged); nothing else\n"
	"  --token-file F         with --http (required): the bearer token, a file of mode 0600 owned\n"
	"                         by this user; requests without it are answered 401\n"
	"  -h, --help             this text\n";

/* A usage error: one line saying what, then the usage, on stderr. */
static int usage_error(const char *what, const char *arg)
{
	fprintf(stderr, "sandbox-manager mcp: %s%s%s%s\n%s", what, arg ? " '" : "", arg ? arg : "", arg ? "'" : "",
		mcp_usage);
	return 2;
}

_Static_assert(MCP_OUTPUT_CHARS_MIN == 500 && MCP_OUTPUT_CHARS_MAX == 4194304 && MCP_OUTPUT_CHARS_DEFAULT == 30000,
	       "mcp_usage and the --max-output-chars message state these bounds");

/* --max-output-chars: digits only, within the bounds. */
static int chars_parse(const char *arg, size_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < MCP_OUTPUT_CHARS_MIN ||
	    v > MCP_OUTPUT_CHARS_MAX)
		return -1;
	*out = v;
	return 0;
}

int mcp_serve(int argc, char **argv, const char *version)
{
	static const struct option opts[] = { { "session", 1, NULL, 's' }, { "socket", 1, NULL, 'k' },
					      { "max-output-chars", 1, NULL, 'o' }, { "http", 1, NULL, 'H' },
					      { "token-file", 1, NULL, 't' }, { "help", 0, NULL, 'h' },
					      { NULL, 0, NULL, 0 } };
	struct mcp_settings st = { .version = version, .max_output_chars = MCP_OUTPUT_CHARS_DEFAULT };
	const char *socket_flag = NULL, *http = NULL, *token_file = NULL;
	struct mcp_http *h = NULL;
	int opt, rc;

	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		if (opt == 's')
			st.session = optarg;
		else if (opt == 'k')
			socket_flag = optarg;
		else if (opt == 'H')
			http = optarg;
		else if (opt == 't')
			token_file = optarg;
		else if (opt == 'o') {
			if (chars_parse(optarg, &st.max_output_chars) < 0)
				return usage_error("--max-output-chars takes a number from 500 to 4194304, not", optarg);
		} else if (opt == 'h') {
			fputs(mcp_usage, stdout);
			return 0;
		} else
			return usage_error(opt == ':' ? "a value is missing after option" : "unknown option", argv[optind - 1]);
	}
	if (optind != argc)
		return usage_error("unexpected argument", argv[optind]);
	if (st.session == NULL || st.session[0] == '\0')
		return usage_error("--session is required", NULL);
	if ((http == NULL) != (token_file == NULL))
		return usage_error(http ? "--http needs --token-file (requests are refused without its token)"
					: "--token-file goes with --http", NULL);
	st.socket_path = control_socket_path(socket_flag);
	if (st.socket_path == NULL) {
		fprintf(stderr, "sandbox-manager mcp: no manager socket: pass --socket PATH or set SANDBOX_MANAGER_SOCKET\n");
		return 2;
	}
	if (http != NULL) {
		struct sb_err err;

		if ((h = mcp_http_open(http, token_file, &err)) == NULL) {
			fprintf(stderr, "sandbox-manager mcp: --http %s: %s\n", http, err.msg);
			return 2;
		}
	}
	/* A client that went away must not kill us mid-write: writes fail with EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);
	if (mcp_proto_start(&st) < 0) {
		sb_error("mcp: could not start the worker thread");
		return 1;
	}
	sb_info("mcp: serving the bash tool for session %s (manager at %s)", st.session, st.socket_path);
	if (h != NULL)
		return mcp_http_serve(h); /* until SIGTERM or SIGINT */
	rc = stdin_serve();
	if (rc < 0)
		sb_warn("mcp: reading stdin: %s", strerror(errno));
	rc = mcp_proto_drain(DRAIN_SECONDS);
	if (rc > 0) {
		pthread_mutex_lock(&out_lock); /* no half-written line on the way out */
		_exit(0);
	}
	return rc < 0 ? 1 : 0;
}
