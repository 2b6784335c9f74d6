/* One call's state, held from its validation to its final record. execpath.c runs a call through
 * its steps; recovery.c settles a call the previous run left dispatched with the same end: ask the
 * agent, verify the receipt, record. Nothing here takes the session's turn: the caller holds it. */
#ifndef SB_CALL_H
#define SB_CALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent_client.h"
#include "error.h"
#include "live_exec.h"
#include "manager.h"
#include "metrics.h"
#include "records.h"

struct call {
	char exec_id[65];              /* 24 hex digits when made here; a recorded one may be longer */
	char session[65];
	const char *command;
	unsigned timeout;
	int64_t turn;
	char tag[65];                  /* optional, from the client: lets it cancel this call only */
	long long keep_over;           /* "keep_output" (control.h), or -1 */
	uint8_t nonce[AGENT_NONCE_BYTES];
	char nonce_hex[2 * AGENT_NONCE_BYTES + 1];
	struct live_sandbox *sandbox;
	struct agent_reply reply;
	char reason[SB_ERR_MSG_MAX];
	struct metrics_lap lap;        /* each step's time (metrics.h) */
	bool has_turn;                 /* it holds the session's queue turn */
	bool cancelled_first;          /* it took a cancel that came before it ran (cancel.c) */
	bool agent_gone;               /* its agent stopped listening during the call (call_reconcile) */
	struct session_row s;          /* read once, under the turn (execpath.c call_bind) */
	const struct live_watch *watch; /* the client that asked for live output, or NULL */
};

/* The result of a call that did not run to its end (refused, cancelled, uncertain). */
json_t *call_refused_result(const struct call *c, const char *status, const char *why);
/* Commit the exec's final record. status is one of the final states. */
int call_record_end(struct manager *m, struct call *c, const char *status, json_t *result, struct sb_err *err);
/* After a lost answer: reconnect to c->sandbox and ask until the agent knows the end: while it says
 * the exec runs, until deadline; a few tries when it cannot be reached. An agent that no longer
 * listens (its socket refuses) ends the asking at once: c->agent_gone. */
int call_reconcile(struct manager *m, struct call *c, int64_t deadline, struct sb_err *err);
/* Between two tries that reached no agent: the runtime's evidence, a short probe, says the sandbox is
 * gone. A cancel during the probe is deferred to its end (stop() and evidence() never at once). */
bool call_sandbox_proven_gone(struct manager *m, struct call *c);
/* The reply has a result and a receipt verified for this exec, nonce and generation, and the result
 * says what the receipt proves (result_proof.h): status, exit code, signal, byte counts, digests. */
int call_result_verify(struct call *c, struct sb_err *err);
/* The reply's result as a JSON object, or NULL. */
json_t *call_result_parse(const struct call *c);

#endif
