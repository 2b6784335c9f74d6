/* The manager's records: sessions, turns, grants, sandboxes and one row per exec, in one of two
 * stores behind these functions: SQLite (WAL; the embedded default, one file in the state
 * directory) or PostgreSQL 15 through libpq (`serve --store postgres:CONNINFO`).
 * Every state change is a committed transaction before the manager acts on it, so a manager
 * killed at any point restarts with records that say what was in flight. Never stores a key;
 * stores each exec's nonce only as the hex the receipt must carry. Thread-safe: one connection
 * behind a mutex (SQLite serialises writers anyway). Either store runs the same statements with
 * the same rules: a transition is one compare-and-set statement on the current state.
 *
 * Several managers may share one store (PostgreSQL). Each session is then owned by at most one of
 * them, under a lease: sessions.owner (a manager id) and sessions.lease_expires_ms (wall-clock ms),
 * which the owner renews with its heartbeat (records_manager_heartbeat) and another manager may
 * take over only once it has expired (records_lease_take: the session's generation + 1). The
 * fence (records_set_fence) makes the store itself refuse a manager that lost a session and does
 * not know it yet: every write about a session carries, in its own statement, the condition that
 * the session is still owned by this manager (and, for the writes that carry one, still at that
 * generation); a write the fence refuses changes nothing and fails with ESTALE, "fenced: ...". */
#ifndef SB_RECORDS_H
#define SB_RECORDS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "control_limits.h"
#include "error.h"

struct records;

/* Found / not found, for lookups. */
#define RECORDS_FOUND 0
#define RECORDS_NOT_FOUND 1
/* A change a rule refuses (records_exec_resolve); err says why, and nothing was written. */
#define RECORDS_REFUSED 2

#define SESSION_EGRESS_ALLOW_BYTES 4096 /* a session's own egress allow-list, as its record keeps it */

struct session_row {
	char id[65];
	char identity[65];
	char repo[4096];           /* as given: path or URL */
	char worktree[4096];
	char branch[256];
	char state[32];            /* "active", "deleting", "deleted", "reserved" (sandbox end unproven) */
	uint64_t generation;       /* bumped whenever the sandbox or the authority changes */
	int64_t turn;              /* the current turn; 0 before any */
	int64_t created_ms;
	char owner[65];            /* the manager id owning it, "" none (released, or a store of one manager) */
	int64_t lease_expires_ms;  /* wall-clock ms the owner's lease runs to; 0 when released */
	char network[16];          /* the sandbox's network policy: "open", "none" or "proxy" (backend.h) */
	/* the session's own egress allow-list (policy proxy, schema 7): its patterns separated by one
	 * space, "" none; added to the manager's */
	char egress_allow[SESSION_EGRESS_ALLOW_BYTES];
};

/* Exec states: accepted -> dispatched -> exited|signaled|timed_out|cancelled|uncertain|refused. */
struct exec_row {
	char id[65];
	char session[65];
	int64_t turn;
	char state[16];
	char command[65536];       /* truncated copy for the record; the full command went to the agent */
	uint32_t timeout_seconds;
	uint64_t generation;       /* set at dispatch */
	char nonce_hex[65];        /* set at dispatch */
	char sandbox[256];         /* the runtime identity it was dispatched to */
	int64_t accepted_ms, dispatched_ms, finished_ms;
};

struct sandbox_row {
	char session[65];
	uint64_t generation;
	char backend[32];
	char runtime_id[256];      /* "process:<pid>:<start-time>", a container id, a pod uid */
	char address[4200];        /* how the agent is reached: unix:PATH */
	char private_dir[4096];    /* the manager-side directory with its keys and socket */
	char state[32];            /* "starting", "running", "stopping", "gone", "unproven" */
	char grants_json[8192];    /* the authority snapshot it was prepared with */
	int64_t started_ms;
	char evidence[2048];       /* what the last state change said: the evidence, or why there is none */
};

/* The SQLite store at path. */
int records_open(const char *path, struct records **out, struct sb_err *err);
/* "sqlite:PATH" or "postgres:CONNINFO" (libpq's key=value or URI form; empty: libpq's PG*
 * environment). Either store's schema is created or migrated here, and a newer one refused;
 * a store that cannot be reached or read fails with err naming it (never a password). */
int records_open_store(const char *store, struct records **out, struct sb_err *err);
/* "sqlite" or "postgres". */
const char *records_store_kind(const struct records *r);
/* SQLite: how many WAL checkpoints the store's own thread has run; commits never run one
 * (records_sqlite.c). 0 for PostgreSQL, or when the thread could not start. */
unsigned long records_sqlite_checkpoints(struct records *r);
void records_close(struct records *r);

/* Not fenced (a new session): it is created owned by s->owner ("" none) until s->lease_expires_ms. */
int records_session_insert(struct records *r, const struct session_row *s, struct sb_err *err);
int records_session_get(struct records *r, const char *id, struct session_row *out, struct sb_err *err);
int records_session_set_state(struct records *r, const char *id, const char *state, struct sb_err *err);
/* Every `reserved` session whose sandboxes are all proven gone and which has no exec in flight
 * becomes `active` again; returns how many, or -1. With a fence, only the sessions owned by the fence's manager or by no one. */
int records_sessions_release(struct records *r, struct sb_err *err);
/* Increment the generation; *generation receives the new value. */
int records_session_bump_generation(struct records *r, const char *id, uint64_t *generation, struct sb_err *err);
int records_session_set_turn(struct records *r, const char *id, int64_t turn, struct sb_err *err);

/* Grants: resource -> access ("read"/"write"). */
int records_grant_set(struct records *r, const char *session, const char *resource, const char *access,
		      struct sb_err *err);
int records_grant_revoke(struct records *r, const char *session, const char *resource, struct sb_err *err);
/* {"resource": "access", ...}, sorted by resource; a new reference, or NULL with err. */
json_t *records_grants(struct records *r, const char *session, struct sb_err *err);

int records_sandbox_upsert(struct records *r, const struct sandbox_row *s, struct sb_err *err);
int records_sandbox_get(struct records *r, const char *session, struct sandbox_row *out, struct sb_err *err);
int records_sandbox_set_state(struct records *r, const char *session, uint64_t generation, const char *state,
			      const char *evidence, struct sb_err *err);
/* Every sandbox not in state "gone", for recovery at start: a JSON array of row objects. */
json_t *records_sandboxes_not_gone(struct records *r, struct sb_err *err);

int records_exec_insert(struct records *r, const struct exec_row *e, struct sb_err *err);
/* authority: the authority snapshot (grants JSON) of the sandbox it goes to; may be NULL. */
int records_exec_dispatched(struct records *r, const char *exec_id, uint64_t generation, const char *nonce_hex,
			    const char *sandbox, const char *authority, struct sb_err *err);
/* Final state with the result JSON and the receipt text (either may be NULL) and a reason. The
 * result is stored with each stream's text bounded (records_set_output_limit): head and tail with a
 * marker between them, "<stream>_truncated" true, the agent's "<stream>_bytes" kept and the whole
 * stream's "<stream>_sha256" taken from the receipt, so what a command prints cannot grow its record. */
int records_exec_finish(struct records *r, const char *exec_id, const char *state, const char *result_json,
			const char *receipt_json, const char *reason, struct sb_err *err);
int records_exec_get(struct records *r, const char *exec_id, struct exec_row *out, struct sb_err *err);
/* Policy proxy: what a running (dispatched) exec has sent so far that may change something, kept as
 * its result ({"egress": {...}}) before each such request leaves and again when it is answered, so
 * that a manager killed meanwhile leaves the evidence on record (recovery keeps it with the end it
 * finds). Nothing is written once the exec has ended. */
#define RECORDS_EGRESS_NOTE_MAX (256u * 1024u)
int records_exec_egress_note(struct records *r, const char *exec_id, const char *result_json, struct sb_err *err);

/* Invariant 13: no answer grows without bound. Bytes of text kept per stream in a record, when it
 * is written and again when it is served (records written by older versions hold whole outputs). */
#define RECORDS_OUTPUT_LIMIT_DEFAULT (64u * 1024u)
#define RECORDS_OUTPUT_LIMIT_MIN 256u
#define RECORDS_OUTPUT_LIMIT_MAX (1024u * 1024u)
/* Set once at start, before any other call; clamped to MIN..MAX. */
void records_set_output_limit(struct records *r, size_t limit);
/* A statement that failed because the store's filesystem is full (SQLite; PostgreSQL's disk is its
 * server's) calls full(ctx), with the records' lock held; when it answers true (room was given
 * back) the statement runs once more, unless SQLite rolled back a longer transaction around it (rule
 * N4, disk_bound.h). */
void records_set_full_hook(struct records *r, bool (*full)(void *ctx), void *ctx);

#define RECORDS_PAGE_LIMIT_DEFAULT 20u
#define RECORDS_PAGE_LIMIT_MAX CONTROL_RECORDS_LIMIT_MAX
/* A page's "records" array serialises (JSON_COMPACT, escapes included) to at most its budget:
 * the control API uses RECORDS_PAGE_BYTES, far below its response cap; no budget is below MIN. */
#define RECORDS_PAGE_BYTES (8u * 1024u * 1024u)
#define RECORDS_PAGE_MIN_BYTES (64u * 1024u)

struct records_query {
	const char *session;   /* a page of this session's execs (any session state, deleted too), */
	const char *exec_id;   /* or this one exec: exactly one of the two */
	const char *before;    /* session only, may be NULL: only execs older than this one */
	const char *state;     /* session only, may be NULL: only execs in this state, or "unresolved" */
	unsigned limit;        /* session only: at most this many, 1..RECORDS_PAGE_LIMIT_MAX */
	size_t budget;         /* bytes of the serialised "records" array (0: RECORDS_PAGE_BYTES) */
};

/* *out = {"records": [...], "next_before": ID}: newest first (accepted time, then insertion order);
 * "next_before" only when more remain, the exec id to pass as `before` for the next page. A page
 * stops before its budget; its first record is always served, shortened when it is larger than the
 * budget on its own ("truncated": true on that record; ids, states, times, byte counts and digests
 * are kept). Returns RECORDS_FOUND, RECORDS_NOT_FOUND (no such session, exec, or `before` exec in
 * the session; err says which), or -1 (EINVAL: a bad argument). */
int records_page(struct records *r, const struct records_query *q, json_t **out, struct sb_err *err);
/* An operator's word on an exec recorded `uncertain` (`sandbox-manager resolve`): what they found
 * it did, why, who said so and when. Recorded once and never changed; the exec's own record and
 * state stay as they were, and nothing is run again (invariant 7). Served as the record's
 * "resolution" (null until then); a page's `state` "unresolved" selects the uncertain execs
 * without one. */
#define RECORDS_NOTE_MAX CONTROL_NOTE_MAX
struct exec_resolution {
	const char *outcome;   /* "ran", "not-ran" or "unknown" */
	const char *note;      /* 1..RECORDS_NOTE_MAX bytes of UTF-8 */
	uint32_t by_uid;       /* who: the control connection's peer uid */
	const char *by_name;   /* its login name, or NULL when it has none */
	int64_t at_ms;         /* when: set by records_exec_resolve */
};
/* RECORDS_FOUND: recorded; RECORDS_NOT_FOUND: no such exec; RECORDS_REFUSED: the exec is not
 * uncertain, or is resolved already (the first word stays); -1: EINVAL (a bad outcome or note), or
 * SQLite's failure. Nothing is written unless it returns RECORDS_FOUND. */
int records_exec_resolve(struct records *r, const char *exec_id, struct exec_resolution *res, struct sb_err *err);

/* Sessions for `session list`, newest first, paged like records. */
#define RECORDS_SESSIONS_LIMIT_DEFAULT 100u
#define RECORDS_SESSIONS_LIMIT_MAX CONTROL_SESSIONS_LIMIT_MAX
struct sessions_query {
	const char *identity;  /* may be NULL: every identity */
	const char *state;     /* may be NULL: any state, deleted only with `all` */
	bool all;              /* deleted sessions too (when no state is named) */
	const char *before;    /* may be NULL: only sessions created before this one */
	unsigned limit;        /* 1..RECORDS_SESSIONS_LIMIT_MAX */
	size_t budget;         /* bytes of the serialised "sessions" array (0: RECORDS_PAGE_BYTES) */
};
/* *out = {"sessions": [{"session", "identity", "state", "sandbox" (its runtime id while one is not
 * proven gone, else null), "generation", "created_ms", "owner" (a manager id or null), "last_exec": {"exec_id", "state",
 * "accepted_ms", "finished_ms"} or null}], "next_before": ID when more remain}. Returns
 * RECORDS_FOUND, RECORDS_NOT_FOUND (no `before` session), or -1 (EINVAL: a bad argument). */
int records_sessions_page(struct records *r, const struct sessions_query *q, json_t **out, struct sb_err *err);

/* ---------------------------------------------------------------- leases, managers, the fence */

/* A session's lease: who owns it (a manager id, "" no one), that manager's control socket as its
 * managers row says ("" when it has none), the wall-clock ms the lease runs to, the session's
 * generation, and, after a takeover, the manager it was taken from ("" otherwise). */
struct lease {
	char owner[65];
	char address[4200];
	int64_t expires_ms;
	uint64_t generation;
	char previous[65];
};

/* A manager's start on the store: its row in `managers` (id, incarnation: 32 hex chars of this
 * run, address: its control socket, heartbeat now_ms), in one compare-and-set statement.
 * RECORDS_FOUND: registered (a row of the same id left by an incarnation whose heartbeat is older
 * than lease_ms is taken over); RECORDS_REFUSED: another incarnation's heartbeat is fresh, err
 * "manager id ID is in use by a running manager (its address A, heartbeat N ms ago)"; -1. */
int records_manager_register(struct records *r, const char *id, const char *incarnation, const char *address,
			     int64_t now_ms, int64_t lease_ms, struct sb_err *err);
/* The heartbeat, every lease_ms/3: in one transaction, the managers row's heartbeat_ms and every
 * lease the manager owns renewed to now_ms + lease_ms. RECORDS_FOUND; RECORDS_REFUSED when the
 * row's incarnation is not ours (another process took the id) or the row is gone: nothing was
 * renewed, and the manager must stop dispatching and exit; -1. */
int records_manager_heartbeat(struct records *r, const char *id, const char *incarnation, int64_t now_ms,
			      int64_t lease_ms, struct sb_err *err);
/* A clean stop, in one transaction: every session the manager owns with nothing in flight (no
 * sandbox but gone ones, no exec accepted or dispatched) released (owner NULL, expiry 0), and its
 * managers row removed, only if the row's incarnation is ours; the others stay its own until their
 * lease expires, so that the manager taking them over settles them. RECORDS_FOUND;
 * RECORDS_REFUSED (not ours: nothing changed); -1. */
int records_manager_unregister(struct records *r, const char *id, const char *incarnation, struct sb_err *err);
/* identity's slot in a root manager's id range (identity_ids.c), given now if it has none: the next
 * one, recorded for every manager of the store. slots: the range's size; 0 only reads.
 * RECORDS_FOUND (*slot), RECORDS_NOT_FOUND (slots 0 and none given), RECORDS_REFUSED (the range is
 * used up: err says so, nothing recorded), or -1. Not fenced: an identity is no session's. */
int records_identity_slot(struct records *r, const char *identity, int64_t slots, int64_t now_ms, int64_t *slot,
			  struct sb_err *err);

/* Take session for manager me, in one transaction, until now_ms + lease_ms:
 * - owned by me: one read, nothing written (the heartbeat renews it; *out's address is "");
 * - owned by no one: taken (generation unchanged, previous "");
 * - owned by another whose lease expired (lease_expires_ms < now_ms): taken over, a compare-and-set
 *   on the (owner, generation) read in the same transaction: generation + 1, previous = the old
 *   owner; the caller then settles what the old owner left in flight (never rerun);
 * - owned by another whose lease is live: RECORDS_REFUSED, *out the owner, its address and expiry.
 * RECORDS_FOUND (*out: me, my address, the new expiry and generation), RECORDS_REFUSED,
 * RECORDS_NOT_FOUND (no such session), or -1. Not fenced. */
int records_lease_take(struct records *r, const char *session, const char *me, int64_t now_ms, int64_t lease_ms,
		       struct lease *out, struct sb_err *err);
/* The session's lease as stored (previous ""): RECORDS_FOUND, RECORDS_NOT_FOUND, or -1. */
int records_lease_get(struct records *r, const char *session, struct lease *out, struct sb_err *err);
/* Once at start, before any write: from then on each write about a session (exec insert,
 * dispatched and finish; sandbox upsert and set_state; session set_state, bump_generation and
 * set_turn; grant set and revoke) also requires, in its own statement, that the session is owned
 * by manager_id, and exec dispatched and sandbox upsert that it is at their generation. A write
 * the fence refuses writes nothing and returns -1 with err->errnum ESTALE and a message starting
 * "fenced: " with the session, its owner and generation now. NULL or "": no fence (the default). */
void records_set_fence(struct records *r, const char *manager_id);

/* Exec ids in a state (e.g. "dispatched", "accepted"), oldest first, of one session (NULL: of
 * every session), for recovery. */
json_t *records_exec_ids_in_state(struct records *r, const char *session, const char *state, struct sb_err *err);
/* The sessions with something in flight, for recovery: an exec accepted or dispatched, or a
 * sandbox not proven gone. A JSON array of session ids. */
json_t *records_sessions_in_flight(struct records *r, struct sb_err *err);

/* What status and metrics report, read in one call: {"execs": {STATE: N} for every exec state,
 * "sessions": {STATE: N} for every session state (zeros included), "uncertain_open": the uncertain
 * execs of sessions not deleted (someone still has to reconcile them), "uncertain_sessions":
 * [{"session", "uncertain", "newest_exec"}] those sessions, newest first, and "reserved_sessions":
 * [ID] the reserved ones, newest first; both lists at most RECORDS_COUNTS_LIST_MAX long}. Counted
 * with GROUP BY (the execs on their state index). A new reference, or NULL with err. */
#define RECORDS_COUNTS_LIST_MAX 10
json_t *records_counts(struct records *r, struct sb_err *err);

#endif
