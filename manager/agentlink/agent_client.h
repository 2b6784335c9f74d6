/* The manager's side of the agent protocol: connect to one sandbox-agent over mutual TLS, negotiate,
 * and exchange Exec / Result / Receipt, Cancel, Query and Ping with deadlines. Never delivers a
 * Result or Receipt whose exec id or generation differ from the request's (invariant 6), and never
 * calls an exec over that it cannot account for: a failure after dispatch says so (`dispatched`). */
#ifndef SB_AGENT_CLIENT_H
#define SB_AGENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "proto.h"
#include "tls.h"

#define AGENT_NONCE_BYTES 32
#define AGENT_BUILD_MAX 128

struct agent_conn;  /* one connection after TLS and Hello; used by one thread at a time */

/* What the agent said about itself in its Hello. */
struct agent_peer {
	uint32_t version;          /* the negotiated protocol version */
	bool has_generation;
	uint64_t generation;       /* the generation the agent was started for */
	char build[AGENT_BUILD_MAX];  /* printable ASCII only, "" when not sent */
	const char *features_json; /* the agent's `check` report, or NULL; owned by the connection */
};

enum agent_exec_state {
	AGENT_EXEC_UNKNOWN,   /* the agent has no record of the exec */
	AGENT_EXEC_RUNNING,
	AGENT_EXEC_FINISHED,
};

struct agent_env {
	const char *name, *value;
};

/* One Exec. receipt_key is optional: when set, the receipt's HMAC, nonce, exec id and generation
 * are verified here and a receipt that fails is refused like a mismatched one. */
struct agent_exec_request {
	const char *exec_id;
	uint64_t generation;
	uint8_t nonce[AGENT_NONCE_BYTES];
	const char *command;
	const char *cwd;
	uint32_t timeout_seconds;
	uint64_t output_limit;
	const struct agent_env *env;
	size_t n_env;
	const uint8_t *receipt_key;  /* RECEIPT_KEY_BYTES or NULL */
	/* Live output: set, the Exec asks for Output chunks and each one for this exec that comes before
	 * the Result is handed here (stream 0 stdout, 1 stderr; live_ring.h), never kept. */
	void (*on_output)(void *ctx, int stream, uint64_t offset, const uint8_t *data, size_t len);
	void *output_ctx;
};

/* What a reply must match to be delivered (Query, and the exec's own wait). */
struct agent_expect {
	const char *exec_id;
	uint64_t generation;
	const uint8_t *nonce;        /* AGENT_NONCE_BYTES or NULL: the receipt's nonce is not checked */
	const uint8_t *receipt_key;  /* RECEIPT_KEY_BYTES or NULL: the receipt is not verified here */
};

/* The answer to agent_exec, agent_query and agent_cancel. Free with agent_reply_free. */
struct agent_reply {
	uint32_t agent_error;         /* a Sandbox__ErrorCode when the agent answered Error, else 0 */
	bool dispatched;              /* agent_exec: the Exec was (at least partly) sent. A failure after
				       * this point with agent_error == 0 means the outcome is unknown:
				       * reconcile with Query, never rerun (invariant 7) */
	enum agent_exec_state state;  /* agent_query, agent_cancel; FINISHED after agent_exec */
	char *result_json;            /* malloc'd, NUL-terminated; NULL when none */
	char *receipt;                /* malloc'd receipt bytes + NUL; NULL when the agent wrote none */
	size_t receipt_len;
	bool receipt_verified;        /* checked against the key of the request or expectation */
};

/* A client TLS configuration for one sandbox generation: presents cert/key, trusts ca, and accepts
 * only the agent certificate named "sandbox-<sandbox_id>.g<generation>.agent". */
int agent_client_config(struct tls_config **out, const char *cert, const char *key, const char *ca,
			const char *sandbox_id, uint64_t generation, struct sb_err *err);

/* Connect to address ("unix:PATH", "IPv4:PORT" or "[IPv6]:PORT", numeric only), run the TLS
 * handshake and the Hello exchange, all before deadline_ms (tls_deadline_after). The config must
 * outlive the connection. Refuses an agent whose protocol versions do not overlap ours. */
int agent_connect(struct tls_config *config, const char *address, int64_t deadline_ms, struct agent_conn **out,
		  struct sb_err *err);

const struct agent_peer *agent_conn_peer(const struct agent_conn *conn);

/* Whether nothing has arrived on conn since its last exchange ended, and none failed: the protocol
 * is request and reply, so an agent that closed it (at its idle limit, or its process gone) has left
 * its close to read, which shows. Not proof that the agent will answer: that takes agent_ping. */
bool agent_conn_quiet(const struct agent_conn *conn);

/* Send close_notify (bounded) and free everything; NULL is a no-op. */
void agent_close(struct agent_conn *conn);
/* From another thread: makes a read or write the owner is blocked in fail at once (shutdown);
 * the connection stays the owner's to close. */
void agent_interrupt(struct agent_conn *conn);

/* Run one exec and wait until deadline_ms for its Result and, when the result names one, its
 * Receipt. Returns 0 with result_json (and receipt) in *out; -1 with err and, when the agent
 * answered Error (ERR_REFUSED, ERR_BUSY, ...), out->agent_error. A Result or Receipt for another
 * exec id or generation, or a receipt that fails verification, is refused (-1, EPROTO/EPERM) and
 * the connection is closed for further use. A Result whose "receipt" is null comes without a
 * receipt (receipt NULL): the exec is then NOT complete (invariant 5). */
int agent_exec(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
	       struct agent_reply *out, struct sb_err *err);

/* The two halves of agent_exec, for a manager that records the dispatch between them. */
int agent_exec_send(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
		    struct agent_reply *out, struct sb_err *err);
int agent_exec_wait(struct agent_conn *conn, const struct agent_exec_request *req, int64_t deadline_ms,
		    struct agent_reply *out, struct sb_err *err);

/* Ask what became of an exec (e.g. after a lost connection). A FINISHED answer carries the result
 * and, when one was written, the receipt; both must match want (exec id, generation). */
int agent_query(struct agent_conn *conn, const struct agent_expect *want, int64_t deadline_ms,
		struct agent_reply *out, struct sb_err *err);

/* Cancel the running exec exec_id over a NEW connection (the exec's own one is busy waiting).
 * out->state is the exec's state as the cancel found it; its Result follows on its own connection.
 * An exec that is not running is -1 with agent_error ERR_UNKNOWN_EXEC (ENOENT). */
int agent_cancel(struct tls_config *config, const char *address, const char *exec_id, int64_t deadline_ms,
		 struct agent_reply *out, struct sb_err *err);

/* A Ping with a random token; the Pong must echo it. */
int agent_ping(struct agent_conn *conn, int64_t deadline_ms, struct sb_err *err);

/* Policy `proxy` through the agent (agent_relay.h), on a connection of its own that carries no
 * other request: a NetAccept for the sandbox's 127.0.0.1:port, answered once the agent's listener
 * there exists. 0, or -1 (the agent's refusal in err). */
int agent_net_accept(struct agent_conn *conn, uint16_t port, int64_t deadline_ms, struct sb_err *err);
/* Then the wait for a connection to it: 1 once the agent says one came (the connection now carries
 * its bytes: agent_net_pipe), 0 when stop_fd became readable first, -1 on an error. */
int agent_net_wait(struct agent_conn *conn, uint16_t port, int stop_fd, struct sb_err *err);
/* That connection's bytes between the agent and plain_fd both ways, until both ends closed
 * (common/tls_pipe.h); idle_ms bounds each wait. 0, or -1 with errno. */
int agent_net_pipe(struct agent_conn *conn, int plain_fd, int idle_ms);

void agent_reply_free(struct agent_reply *r);

/* "busy", "refused", ... for a Sandbox__ErrorCode; "unknown" otherwise. */
const char *agent_error_name(uint32_t code);

/* --- Pure steps: no I/O, for tests and fuzzing. Each judges one received envelope. --- */

/* Where an exec's wait stands; zero-initialise, then feed each envelope to agent_exec_accept. */
struct agent_exec_wait {
	bool have_result;
	bool expect_receipt;
};

/* Returns 1 when the exchange is complete (out filled), 0 when a Receipt is still expected, -1 when
 * the envelope is refused (err says why; out->agent_error set for an agent Error). */
int agent_exec_accept(struct agent_exec_wait *w, const struct agent_expect *want, const Sandbox__Envelope *m,
		      struct agent_reply *out, struct sb_err *err);

/* Judge the answer to a Query or Cancel for want->exec_id; 0 with out filled, or -1. */
int agent_query_accept(const struct agent_expect *want, const Sandbox__Envelope *m, struct agent_reply *out,
		       struct sb_err *err);

/* Judge the agent's Hello (or Error) answering ours; 0 with peer filled (features_json malloc'd, the
 * caller frees it), or -1. */
int agent_hello_accept(const Sandbox__Envelope *m, struct agent_peer *peer, char **features_json,
		       struct sb_err *err);

#endif
