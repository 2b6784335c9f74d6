/* `sandbox-manager mcp` (see mcp.h): its command line, and the stdio transport, JSON-RPC lines
 * on stdin and stdout. The protocol is mcp_proto.c's, shared with the Streamable HTTP transport
 * (mcp_http.c, reached through the ops the daemon's program passes in). Only protocol goes to
 * stdout; logs go to stderr.
 *
 * Threads: the main thread reads stdin and hands each line to the protocol, which answers
 * everything but tools/call at once; the calls' worker writes their answers here too. */
#include "mcp.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "cli.h"
#include "cli_flags.h"
#include "control.h"
#include "fdio.h"
#include "lines.h"
#include "log.h"
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

/* One line of stdin: a message, unless blank; one over LINE_CAP is answered, not read. */
static void stdin_line(const char *line, size_t len, int overlong)
{
	size_t i = 0;

	while (i < len && strchr(" \t\r", line[i]) != NULL)
		i++;
	if (overlong)
		out_send(&stdout_sink, mcp_error_msg(NULL, RPC_INVALID_REQUEST, NULL, "Invalid Request: the message is over %u bytes",
					      LINE_CAP));
	else if (i < len)
		rpc_line(line, len);
}

/* ---- the command ---- */

static const struct command cmd_mcp = {
	"mcp",
	"usage: sandbox-manager mcp --session S [--socket PATH]... [--max-output-chars N]\n"
	"                           [--http unix:PATH|127.0.0.1:PORT|[::1]:PORT --token-file F]\n"
	"\n"
	"Serves MCP (2026-07-28 statelessly; 2025-11-25, 2025-06-18, 2025-03-26 and 2024-11-05 after an\n"
	"initialize) on stdin and stdout, or with --http as Streamable HTTP: one tool, bash ({command,\n"
	"timeout_seconds}), whose calls run in the session's sandbox through the manager. Logs go to stderr.\n"
	"\n"
	"  --session S            the session the tool runs in (required)\n"
	SOCKET_HELP OUTPUT_CHARS_HELP
	"  --http ADDR            serve Streamable HTTP at POST /mcp on a unix socket (created 0600)\n"
	"                         or a loopback address (port 0: any free one, logged); nothing else\n"
	"  --token-file F         with --http (required): the bearer token, a file of mode 0600 owned\n"
	"                         by this user; requests without it are answered 401\n"
	HELP_HELP,
};

/* ---- being told to stop ----
 *
 * Claude Code stops a stdio server by SIGINT, then SIGTERM 100 ms later and SIGKILL 400 ms after
 * that, right after it wrote notifications/cancelled for the call it abandons. Taken by its default
 * action, the signal could end this process before it read that line, and the command would run on
 * to its end. So the signals wait in a signalfd, and the lines already written are read and acted on
 * first (the cancel reaches the daemon), then the server stops. */
static int stop_signals_take(void)
{
	sigset_t stop;
	int rc;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGHUP);
	rc = pthread_sigmask(SIG_BLOCK, &stop, NULL);
	if (rc != 0) {
		errno = rc; /* it returns the error; the caller reports errno */
		return -1;
	}
	return signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Logs which signal it was; 0: the seconds the calls are waited for then. */
static int stop_signal_said(int stop_fd)
{
	struct signalfd_siginfo si;

	if (read(stop_fd, &si, sizeof si) == (ssize_t)sizeof si)
		sb_info("mcp: %s: the messages already sent were read; stopping (a running call not cancelled is "
			"left to the manager, which records its end)", strsignal((int)si.ssi_signo));
	return 0;
}

int mcp_serve(int argc, char **argv, const char *version, const struct mcp_http_ops *ops)
{
	const struct command *c = &cmd_mcp;
	json_t *sockets cleanup_json = json_array(); /* --socket, in order */
	struct flag f[] = { { "session", 1, NULL, NULL, 0 },    { "socket", 1, NULL, sockets, 0 },
			    { "max-output-chars", 1, NULL, NULL, 0 }, { "http", 1, NULL, NULL, 0 },
			    { "token-file", 1, NULL, NULL, 0 } };
	struct mcp_settings st = { .version = version, .max_output_chars = MCP_OUTPUT_CHARS_DEFAULT };
	const char *http, *token_file;
	static struct follow_list managers; /* for the whole process: the worker calls them */
	struct mcp_http *h = NULL;
	struct sb_err err;
	int code = 0, rc, stop_fd = -1;

	if (flags_only(c, argc, argv, f, 5, &code) == FLAGS_DONE ||
	    (f[2].set && (code = flag_output_chars(c, f[2].value, &st.max_output_chars)) != 0))
		return code;
	st.session = f[0].value;
	http = f[3].value;
	token_file = f[4].value;
	if (st.session == NULL || st.session[0] == '\0')
		return usage_error(c, "--session is required");
	if ((http == NULL) != (token_file == NULL))
		return usage_error(c, "%s", http ? "--http needs --token-file (requests are refused without its token)"
					       : "--token-file goes with --http");
	if (follow_list_parse(&managers, sockets, &err) < 0) {
		fprintf(stderr, "sandbox-manager mcp: %s\n", err.msg);
		return MCLI_USAGE;
	}
	st.managers = &managers;
	if (http != NULL && ops == NULL)
		return MCP_SERVE_HTTP_ELSEWHERE;
	if (http != NULL) {
		if ((h = ops->open(http, token_file, &err)) == NULL) {
			fprintf(stderr, "sandbox-manager mcp: --http %s: %s\n", http, err.msg);
			return MCLI_USAGE;
		}
	}
	/* A client that went away must not kill us mid-write: writes fail with EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);
	/* Before the worker starts, so that it inherits the mask: only the signalfd takes them. */
	if (h == NULL && (stop_fd = stop_signals_take()) < 0) {
		sb_error("mcp: could not take SIGINT and SIGTERM in a signalfd: %s", strerror(errno));
		return 1;
	}
	if (mcp_proto_start(&st) < 0) {
		sb_error("mcp: could not start the worker thread");
		return 1;
	}
	sb_info("mcp: serving the bash tool for session %s (manager at %s; %zu sockets listed)", st.session,
		managers.path[0], managers.n);
	if (h != NULL)
		return ops->serve(h); /* until SIGTERM or SIGINT */
	rc = lines_read_until(STDIN_FILENO, stop_fd, LINE_CAP, stdin_line);
	if (rc < 0)
		sb_warn("mcp: reading stdin: %s", strerror(errno));
	/* Told to stop, the client is not waiting for answers: nothing more is waited for. */
	rc = mcp_proto_drain(rc == 1 ? stop_signal_said(stop_fd) : DRAIN_SECONDS);
	if (rc > 0) {
		pthread_mutex_lock(&out_lock); /* no half-written line on the way out */
		_exit(0);
	}
	return rc < 0 ? 1 : 0;
}
