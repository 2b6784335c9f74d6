/* `sandbox-manager mcp --session S [--socket PATH]`: the Bash tool for agent frameworks, an MCP
 * server on stdio bound to one session. It only speaks to the daemon's control socket and never
 * runs a command itself (docs/operations.md, "The MCP Bash tool"). */
#ifndef SB_MANAGER_MCP_H
#define SB_MANAGER_MCP_H

#include "error.h"

struct mcp_http;

/* The Streamable HTTP transport (mcp_http.h), given by the program that links libmicrohttpd. */
struct mcp_http_ops {
	struct mcp_http *(*open)(const char *addr, const char *token_file, struct sb_err *err);
	int (*serve)(struct mcp_http *h);
};

/* mcp_serve() without http ops was asked for --http: the caller runs the daemon's program. */
#define MCP_SERVE_HTTP_ELSEWHERE (-1)

/* Serves until stdin ends (or, with --http, until SIGTERM or SIGINT); returns the exit code (0, or
 * 2 for a usage error), or MCP_SERVE_HTTP_ELSEWHERE once the flags are checked when http is NULL. */
int mcp_serve(int argc, char **argv, const char *version, const struct mcp_http_ops *http);

#endif
