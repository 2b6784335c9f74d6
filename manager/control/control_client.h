/* A client's connection to one manager (the CLI, `mcp`, `codex-bridge`): a unix socket path, or
 * "tls://HOST:PORT", the control API over mutual TLS with the client's certificate from
 * $SANDBOX_MANAGER_TLS_CERT, _KEY and _CA (the CLI's --tls-cert/--tls-key/--tls-ca set them). The
 * manager's certificate must chain to that CA and name HOST (or $SANDBOX_MANAGER_TLS_NAME). */
#ifndef SB_CONTROL_CLIENT_H
#define SB_CONTROL_CLIENT_H

#include <jansson.h>
#include <stdbool.h>

#include "error.h"

#define CONTROL_TLS_PREFIX "tls://"
#define CONTROL_CLIENT_CONNECT_MS 10000 /* TCP connect and TLS handshake, each */

struct tls_config;
struct tls_session;

struct control_conn {
	int fd;
	struct tls_config *config;
	struct tls_session *tls;
};

bool control_address_is_tls(const char *address);

/* Connect (and for TLS verify the manager). -1 with err: nothing was sent. */
int control_conn_open(struct control_conn *c, const char *address, struct sb_err *err);
int control_conn_send(struct control_conn *c, json_t *msg, struct sb_err *err);
/* As control_recv: 1 a message, 0 closed between messages, -1 error. */
int control_conn_recv(struct control_conn *c, json_t **msg, struct sb_err *err);
void control_conn_close(struct control_conn *c);
/* Reads and writes fail with ETIMEDOUT (EAGAIN on a unix socket) after ms; 0: no bound. */
int control_conn_set_timeout(struct control_conn *c, int ms, struct sb_err *err);
/* Something to read within ms (bytes already decrypted count): 1, 0 none, -1 error. */
int control_conn_wait(struct control_conn *c, int ms);

#endif
