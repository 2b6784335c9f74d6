/* The Streamable HTTP transport of `sandbox-manager mcp --http ADDR --token-file F`: JSON-RPC over
 * POST /mcp on a unix socket or a loopback address and nothing else, each request checked for its
 * bearer token and its Origin, read within bounds and a deadline (docs/operations.md). Served by
 * libmicrohttpd, so only sandbox-manager-daemon links it: the static client execs the daemon's
 * program for `mcp --http` (main.c, daemon_main.c), which reaches it through mcp_http_ops. */
#ifndef SB_MCP_HTTP_H
#define SB_MCP_HTTP_H

#include <sys/un.h>

#include "error.h"

#define MCP_TOKEN_MIN 16
#define MCP_TOKEN_CAP 512

struct MHD_Daemon;

/* The listener (mcp_http_listen.c) and what each connection checks against (mcp_http.c). */
struct mcp_http {
	int fd;
	struct MHD_Daemon *mhd;
	char unix_path[sizeof ((struct sockaddr_un *)0)->sun_path]; /* removed on the way out; "" for TCP */
	char token[MCP_TOKEN_CAP + 1];
	size_t token_len;
};

/* Check the address and the token file, and listen; NULL with err when either is refused. */
struct mcp_http *mcp_http_open(const char *addr, const char *token_file, struct sb_err *err);
/* Serve until SIGTERM or SIGINT (mcp_proto_start first); returns the exit code. */
int mcp_http_serve(struct mcp_http *h);
/* Start serving h->fd (MHD's threads); -1 with err when it cannot. */
int mcp_http_start(struct mcp_http *h, struct sb_err *err);
/* Stop taking connections (the listening socket closed); those open go on. */
void mcp_http_quiesce(struct mcp_http *h);

/* The two entry points mcp_serve() takes from the program that links this transport. */
extern const struct mcp_http_ops mcp_http_ops;

#endif
