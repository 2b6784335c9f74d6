/* The daemon's shared state: configuration, records, queue, CA, backend, and the live sandboxes.
 * One struct manager per process; every control connection's thread uses it. `lock` guards
 * the live list and each live sandbox's flags; everything about one session's sandbox that can
 * take long (prepare, exec, retire) happens while that session's queue turn is held. */
#ifndef SB_MANAGER_H
#define SB_MANAGER_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent_client.h"
#include "agent_relay.h"
#include "backend.h"
#include "ca.h"
#include "config.h"
#include "disk_bound.h"
#include "error.h"
#include "grants.h"
#include "queue.h"
#include "records.h"
#include "tls.h"
#include "workspace.h"

struct egress_edge;
struct egress_log;

#define SESSION_ID_BYTES 8  /* 16 hex digits: short enough for a certificate name */
#define EVIDENCE_MS 10000   /* how long a retire waits for the backend's evidence of a sandbox's end */

/* An http: grant's edge as a sandbox's calls learn it: INFRA_SANDBOX_HTTP_<NAME>=http://127.0.0.1:PORT. */
struct live_http_env {
	char name[160];
	char url[32];
};

struct live_sandbox {
	struct live_sandbox *next;
	char session[65];
	uint64_t generation;
	struct sandbox_handle h;
	struct tls_config *tls;        /* trusts only this sandbox generation's certificate */
	struct ca_cert_copy agent_cert; /* that certificate as this run issued it, until tls pins it */
	struct agent_conn *conn;       /* kept between calls (used under the session's turn only) */
	char private_dir[PATH_MAX];
	uint8_t receipt_key[32];
	int64_t last_used_ms;
	bool busy;                     /* an exec is in flight on it */
	char running_exec[65];
	char running_tag[65];          /* the client's tag of the running call ("" when none) */
	char cancel_reason[256];       /* set: stop it and record the running exec cancelled */
	bool probing;                  /* the call's thread asks the runtime for evidence (execpath.c) */
	bool stop_deferred;            /* a cancel came meanwhile: the prober stops it after its probe */
	char kubeconfig[8192];         /* from the authority snapshot: KUBECONFIG of every call */
	int64_t credentials_expire_ms; /* the snapshot's earliest expiry; 0: nothing expires */
	char authority[8192];          /* the grants it was prepared with (canonical JSON) */
	char workdir[PATH_MAX];        /* from the mount plan: where every call starts */
	char scratch[PATH_MAX];        /* TMPDIR, TMP and TEMP */
	enum sandbox_network network;  /* the session's policy, recorded with it (backend.h) */
	struct egress_proxy *egress;   /* policy proxy: its proxy and listener, ended with it (live_free) */
	/* Policy proxy: every request that leaves, by the proxy or an edge, until the running exec's
	 * end takes them into its record (execpath.c call_record_end). */
	struct egress_log *egress_log;
	struct egress_edge *edges[SNAPSHOT_EDGES_MAX]; /* its kubernetes grants served at the edge */
	/* Policy proxy on a backend whose sandbox network only its agent listens in (net_by_agent):
	 * the proxy's port and each edge's, relayed through the agent (agent_relay.h). */
	struct agent_relay *relays[1 + SNAPSHOT_EDGES_MAX];
	size_t relays_n;
	struct snapshot_edge *edge_creds;  /* from the snapshot until the edges hold them (sandbox_egress) */
	size_t edges_n;
	struct live_http_env http_env[SNAPSHOT_EDGES_MAX]; /* its http: grants' edges, for every call */
	size_t http_env_n;
	/* The running exec's mutating requests, kept on its record as they leave and end (sandbox.c
	 * edge_note): one writer at a time, so that a later note never loses to an earlier one. */
	struct manager *m;
	pthread_mutex_t notes_lock;
	json_t *notes;                 /* {key: request} of notes_exec, at most EGRESS_NOTES_MAX */
	char notes_exec[65];
	char identity[65];             /* the session's identity: its sessions share repo_dir's refs */
	struct workspace_owner ids;    /* the identity's uid and gid: the sandbox's (identity_ids.h) */
	char repo_dir[PATH_MAX];       /* the base clone, swept after each call (execpath.c call_sweep) */
	char worktree_name[65];        /* the session's worktrees/<name>/ in it */
	struct live_sandbox *starting_next; /* in m->starting while it is being prepared (sandbox.c) */
};

/* A tagged cancel that came before its call ran (cancel.c): kept for the call, which takes it when
 * it gets its turn or its sandbox and is recorded cancelled without running; and the note of a
 * tagged call's end, for a cancel that comes after it. At most CANCEL_PENDING_PER_SESSION wait per
 * session, so one client cannot take the room of the others. */
#define CANCEL_PENDING_MAX 64
#define CANCEL_PENDING_PER_SESSION 8
struct cancel_pending {
	char session[65];
	char tag[65];
	char exec_id[65];              /* "" while it waits; then the exec that took it, or that ended */
	int64_t since_ms;              /* monotonic: the oldest note makes room first */
	int64_t until_ms;              /* monotonic; a free slot once past */
};

/* A session this manager took over from another (recovery.c recovery_claim): what the old owner
 * left is settled before any call of this manager runs on it. */
struct settle_note {
	struct settle_note *next;
	char session[65];
	char previous[65];             /* the manager it was taken from */
};

/* A session recovery could not settle (recovery.c recovery_run): reserved, why, and the first
 * exec it left in flight (for `resolve`). In memory only: the records keep the session reserved and
 * the exec in flight, which is what holds it; the reason is the last start's (recovery_note). */
struct unsettled_note {
	struct unsettled_note *next;
	char session[65];
	char exec_id[65];              /* "" when no exec was left (the sandbox could not be settled) */
	char reason[SB_ERR_MSG_MAX];
};

struct manager {
	struct config cfg;
	char incarnation[33];          /* this run's, in the store's registry of managers (ownership.c) */
	pthread_mutex_t claim_lock;    /* a lease's take and its settle note, together (recovery.c) */
	struct settle_note *settle;    /* under `lock` */
	struct unsettled_note *unsettled; /* under `lock` */
	struct records *rec;
	struct queue *queue;
	struct ca *ca;
	struct backend *backend;
	char tls_dir[PATH_MAX];        /* the manager's client certificate and the CA certificate */
	struct ca_cert_copy self_cert; /* tls_dir/manager-self.crt: in the trust list of the agents this run starts */
	pthread_mutex_t lock;
	struct live_sandbox *live;
	struct live_sandbox *starting; /* being prepared: counted against the identity's bound (sandbox.c) */
	/* The stop (stop.c daemon_stop), under `lock`: its phase; the control requests being
	 * answered (it waits for them); the sandboxes whose end could not be proven (sandbox.c). */
	enum stop_phase { STOP_NONE, STOP_REFUSING, STOP_CANCELLING } stop_phase;
	unsigned requests;
	unsigned unproven;
	struct cancel_pending pending[CANCEL_PENDING_MAX]; /* under `lock` */
	struct disk_bound disk;        /* rule N4: the bound on a full volume (disk_bound.h) */
};

/* sandbox.c: a session's sandbox, with its queue turn held by the caller. s: the session's record,
 * as the caller read it under that turn. why: a call, which may retire an idle sandbox of the same
 * identity at its bound; or the start at the session's create (early_start.c), which never does. */
enum acquire_for { ACQUIRE_FOR_CALL, ACQUIRE_FOR_CREATE };
int sandbox_acquire(struct manager *m, const struct session_row *s, enum acquire_for why, struct live_sandbox **out,
		    struct sb_err *err);
/* Stop, wait for evidence, record. 0: proven gone; -1: not proven (the session is then marked
 * "reserved": its workspace stays until an operator or a later retire proves the end). */
int sandbox_retire(struct manager *m, struct live_sandbox *l, const char *why, struct sb_err *err);
/* A cancel or a revocation, with m->lock held and the sandbox busy: asks the runtime to stop it and
 * interrupts the running call's connection. The call's own thread then gets the evidence. */
int sandbox_interrupt(struct manager *m, struct live_sandbox *l, struct sb_err *err);
struct live_sandbox *sandbox_find(struct manager *m, const char *session);
/* With the session's turn held, as this manager takes back a session another manager held
 * meanwhile: its own sandbox of before, proven gone and dropped; -1 (err) when not proven. */
int sandbox_forget_stale(struct manager *m, struct live_sandbox *l, struct sb_err *err);
/* The memory of a live sandbox (its connection, TLS configuration, receipt key), not the sandbox:
 * that ends only through sandbox_retire. */
void live_free(struct live_sandbox *l);
/* The stop: every live sandbox retired with evidence, under its session's turn; one still in use
 * by a call is left as it is. Returns how many were not retired (each is logged). */
unsigned sandbox_retire_all(struct manager *m, const char *why);
void *sandbox_evictor(void *arg);
/* sandbox_probe.c, at start: a write crosses the sandbox's mount view both ways (one throwaway
 * sandbox). */
int sandbox_volume_probe(struct manager *m, struct sb_err *err);
/* recovery.c, after the session's execs: the sandbox a previous run or another manager left for
 * the session is stopped with evidence and recorded gone, or recorded unproven with its session
 * reserved; context says what left it, in the record. */
int sandbox_recover_session(struct manager *m, const char *session, const char *context, struct sb_err *err);
/* execpath.c and sessions.c, under the session's turn: a session reserved because an earlier
 * sandbox's end was not proven is asked about again; true when that sandbox is proven gone now and
 * the session released, its row (now active) then in *row; false leaves *row as it was. */
bool sandbox_reserved_retry(struct manager *m, const char *session, struct session_row *row);

/* execpath.c: the six steps of one call; returns the control response. */
struct live_watch;
/* watch: NULL, or the hook of a client that asked for live output (live_exec.h). */
json_t *execpath_run(struct manager *m, json_t *req, const struct live_watch *watch);

/* cancel.c: the one cancel of a running call. Cancel the session's running call; with a tag, only
 * the call the client tagged so; the answer waits for its final record. */
json_t *cancel_call(struct manager *m, const char *session, const char *tag);
/* The session's running call (with a tag, only the one tagged so) stopped for reason, under m->lock.
 * 1: one was, or a pending cancel of that tag was taken by its call (its exec id in exec_id); 0:
 * none runs; 2: none with that tag runs yet, and the cancel waits for it (struct cancel_pending);
 * -1: the stop request failed (err; the reason is set all the same, and the sandbox's evidence
 * decides), or too many cancels wait already. */
int cancel_session_call(struct manager *m, const char *session, const char *tag, const char *reason, char *exec_id,
			size_t len, struct sb_err *err);
/* With m->lock held: whether a cancel waits for the call tagged tag on session; if so the call
 * (exec_id) takes it, and must then not run. Never for an empty tag. */
bool cancel_pending_take(struct manager *m, const char *session, const char *tag, const char *exec_id);
/* A tagged call on session ended (its record final), m->lock not held: noted under its tag, so
 * that its cancel, should it come now, answers with that exec instead of waiting for a call that
 * will not come; a cancel that came meanwhile is taken by it. */
void cancel_call_ended(struct manager *m, const char *session, const char *tag, const char *exec_id);
/* The stop, once its grace is over: no call is dispatched from now on, and every running one is
 * cancelled as cancel_call does, for reason. Returns how many were running. */
unsigned cancel_stop_calls(struct manager *m, const char *reason);

/* recovery.c: at start, before the first call: accepted execs are refused (they never ran),
 * dispatched ones reconciled or uncertain; then the sandboxes (sandbox_recover). A session that
 * cannot be settled is reserved, with a note (struct unsettled_note); -1 only when the records
 * cannot be read or written. */
int recovery_run(struct manager *m, struct sb_err *err);
/* What one session's previous owner left in flight, settled: execs never rerun, the sandbox
 * proven gone or the session reserved. previous: "" for this manager's own earlier run, else the
 * manager whose lease it took over. */
int recovery_session(struct manager *m, const char *session, const char *previous, struct sb_err *err);
/* Before a request that acts on a session (connections.c): NULL when the session is this
 * manager's now (taken if free, taken over if its owner's lease expired, and then settled under
 * the session's turn before anything runs), or no such session (the op says so); else the
 * answer: the owner's "owned" refusal, or why the store could not say. */
json_t *recovery_claim(struct manager *m, const char *session);
/* The sessions recovery left reserved, as [{"session", "exec", "reason"}], for status; NULL on no
 * memory. */
json_t *recovery_unsettled_json(struct manager *m);
/* The note of one such session into *out; false when it has none. */
bool recovery_unsettled_get(struct manager *m, const char *session, struct unsettled_note *out);
/* resolve.c, with the session's turn held: the exec left in flight is now settled; when nothing of
 * the session is left in flight its note goes and its reserve is lifted as at start (records_
 * sessions_release). 1: released, 0: still reserved, -1 (err). */
int recovery_unsettled_done(struct manager *m, const char *session, struct sb_err *err);

/* ownership.c: this manager in the store's registry, its leases renewed, released at a clean stop
 * (docs/scaling.md). */
int ownership_start(struct manager *m, struct sb_err *err);
void ownership_release(struct manager *m);
/* records_lease_take at this manager's clock and lease. */
int ownership_take(struct manager *m, const char *session, struct lease *out, struct sb_err *err);
/* The "owned" refusal of a request on a session that l's owner holds (control.h). */
json_t *ownership_refusal(const char *session, const struct lease *l);
/* {"manager", "address", "lease_expires_ms"} of the session's owner, or null, for `session show`. */
json_t *ownership_json(struct manager *m, const char *session);

/* early_start.c: with `sandbox-start create`, the new session's sandbox started on a thread of its
 * own under the session's turn; called by its create once recorded. Never fails the create: a start
 * that cannot be made now is left to the first call (and logged). */
void early_start(struct manager *m, const char *session);
/* Whether the session's turn is held by its start at create (a delete waits for that, where it
 * refuses a call's). */
bool early_start_holds(struct manager *m, const char *session);

/* sessions.c: the other control operations. */
json_t *sessions_create(struct manager *m, json_t *req);
/* The session's record, its sandbox's and "limits": what bounds its live sandbox (null when none). */
json_t *sessions_show(struct manager *m, const char *session);
json_t *sessions_delete(struct manager *m, const char *session, bool delete_branch);
json_t *sessions_grant(struct manager *m, json_t *req);

/* resolve.c: an operator settles an uncertain exec; peer is who (the connection's uid). */
json_t *resolve_answer(struct manager *m, json_t *req, uid_t peer);

/* pages.c: the paged answers (records, and the list of sessions). */
json_t *pages_records(struct manager *m, json_t *req);
json_t *pages_sessions(struct manager *m, json_t *req);

/* connections.c: a thread for an accepted control connection (fd is taken), bounded. */
void conn_start(struct manager *m, int fd);

/* stop.c: the clean stop. stop_signals blocks SIGTERM and SIGINT (before any thread) and returns
 * a signalfd for them; stop_signal_take reads one (its number, or 0); daemon_stop runs the stop on
 * the listening socket fd bound at bound, and returns the exit code. */
struct stat;
int stop_signals(struct sb_err *err);
int stop_signal_take(int sigfd);
int daemon_stop(struct manager *m, int signo, int sigfd, int fd, const struct stat *bound);

/* daemon.c */
int daemon_serve(int argc, char **argv);

#endif
