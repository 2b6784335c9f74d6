/* Start-up, before the first call: what the previous run left in flight is settled, never rerun.
 * Execs first (accepted ones refused: they never ran; dispatched ones reconciled with their
 * sandbox, or uncertain), since their sandboxes may still know how they ended; then the sandboxes
 * (sandbox.c sandbox_recover), each stopped with evidence or its session reserved. Each session on
 * its own: one that cannot be settled is reserved and the others serve. The one place that calls
 * both sides: neither calls the other for it. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent_client.h"
#include "call.h"
#include "control.h"
#include "failpoint.h"
#include "fstree.h"
#include "cleanup.h"
#include "identity_ids.h"
#include "log.h"
#include "pathfmt.h"
#include "private_dir.h"
#include "random.h"
#include "receipt_mac.h"

/* Why the opened key file cannot be the receipt key, or NULL. why has room for the reason. */
static const char *key_file_refusal(const struct stat *st, uid_t sandbox_uid, char *why, size_t size)
{
	if (!S_ISREG(st->st_mode))
		return "it is not a regular file";
	if (st->st_size != RECEIPT_KEY_BYTES)
		snprintf(why, size, "it holds %lld bytes, not %d", (long long)st->st_size, RECEIPT_KEY_BYTES);
	else if (st->st_nlink != 1)
		snprintf(why, size, "it has %llu names (a hard link may be a file from elsewhere)",
			 (unsigned long long)st->st_nlink);
	else if (st->st_uid != sandbox_uid && st->st_uid != geteuid())
		snprintf(why, size, "it belongs to uid %u, neither the sandbox's (%u) nor the manager's (%u)",
			 (unsigned)st->st_uid, (unsigned)sandbox_uid, (unsigned)geteuid());
	else
		return NULL;
	return why;
}

/* The receipt key of a sandbox the previous run left, read back from its private directory
 * (issue 13, R3). Under a root manager state/ belongs to the sandbox's uid (agent_dir.c
 * hand_over), so a command or a compromised agent can put anything there: a link to a root-only
 * file would make the manager use that file as the HMAC key (and its bytes reach timing or
 * messages). So the private directory is opened from its recorded path with no link anywhere on
 * it (its parent, <state_dir>/sandboxes/, is the manager's and no sandbox can write it) and must
 * be the manager's; then state/receipt.key beneath it, with no link on the way and without
 * blocking on a FIFO; and the file must be a regular file of exactly RECEIPT_KEY_BYTES with one
 * name, owned by the sandbox's uid (its identity's, rule N2) or the manager. Anything else refuses the key, and the caller
 * settles the exec uncertain: fail closed, never trusted. */
static int receipt_key_read(uid_t sandbox_uid, const char *private_dir, uint8_t key[RECEIPT_KEY_BYTES],
			    struct sb_err *err)
{
	struct open_how how = { .flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   RESOLVE_NO_XDEV };
	char why[160];
	const char *refusal;
	struct stat st;
	size_t got = 0;
	int dirfd, fd;

	dirfd = fstree_open_dir(AT_FDCWD, private_dir, err);
	if (dirfd < 0)
		return -1;
	if (fstat(dirfd, &st) != 0 || st.st_uid != geteuid()) {
		close(dirfd);
		return sb_fail(err, EPERM, "the private directory %s is not the manager's: its receipt key is not used",
			       private_dir);
	}
	fd = (int)syscall(SYS_openat2, dirfd, "state/receipt.key", &how, sizeof how);
	close(dirfd);
	if (fd < 0)
		return sb_fail_errno(err, "receipt key %s/state/receipt.key cannot be opened%s", private_dir,
				     errno == ELOOP || errno == EXDEV ? ": a symbolic link or a mount is on its path "
				     "(state/ is the sandbox's: a command may have replaced it)" : "");
	if (fstat(fd, &st) != 0) {
		sb_fail_errno(err, "inspecting %s/state/receipt.key", private_dir);
		close(fd);
		return -1;
	}
	refusal = key_file_refusal(&st, sandbox_uid, why, sizeof why);
	if (refusal != NULL) {
		close(fd);
		return sb_fail(err, EPERM, "receipt key %s/state/receipt.key refused: %s (state/ is the sandbox's: a "
			       "command may have replaced it)", private_dir, refusal);
	}
	while (got < RECEIPT_KEY_BYTES) {
		ssize_t n = read(fd, key + got, RECEIPT_KEY_BYTES - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got != RECEIPT_KEY_BYTES) {
		explicit_bzero(key, RECEIPT_KEY_BYTES);
		return sb_fail(err, EIO, "receipt key %s/state/receipt.key: could not read its %d bytes", private_dir,
			       RECEIPT_KEY_BYTES);
	}
	return 0;
}

#define RECOVER_QUERY_MS 30000

/* The ids the session's sandbox ran as: its identity's (identity_ids.h). */
static int session_ids(struct manager *m, const char *session, struct workspace_owner *ids, struct sb_err *err)
{
	cleanup_free struct session_row *s = malloc(sizeof *s);

	if (s == NULL)
		return sb_fail(err, ENOMEM, "recovering");
	if (records_session_get(m->rec, session, s, err) != RECORDS_FOUND)
		return -1;
	return identity_ids_of(m, s->identity, ids, err);
}

/* Ask the sandbox the exec was dispatched to; fill c->reply on a verified, finished answer. */
static int recover_query(struct manager *m, struct call *c, const struct exec_row *e, struct sb_err *err)
{
	struct sandbox_row sb;
	struct live_sandbox *l = calloc(1, sizeof *l);
	int rc = -1;

	if (l == NULL)
		return sb_fail(err, ENOMEM, "recovering");
	sb_err_clear(err);
	if (records_sandbox_get(m->rec, e->session, &sb, err) != RECORDS_FOUND || sb.generation != e->generation ||
	    strcmp(sb.runtime_id, e->sandbox) != 0) {
		free(l);
		return sb_fail(err, ENOENT, "its sandbox is not on record any more");
	}
	snprintf(l->session, sizeof l->session, "%s", e->session);
	l->generation = e->generation;
	/* A truncated address or directory would name another socket or key: refuse, never shorten. */
	if (path_fmt(l->h.address, sizeof l->h.address, err, "%s", sb.address) < 0 ||
	    path_fmt(l->private_dir, sizeof l->private_dir, err, "%s", sb.private_dir) < 0) {
		free(l);
		sb_err_prefix(err, "its sandbox's recorded address or directory");
		return -1;
	}
	c->sandbox = l;
	if (session_ids(m, e->session, &l->ids, err) == 0 && receipt_key_read(l->ids.uid, sb.private_dir, l->receipt_key, err) == 0 &&
	    sb_hex_decode(e->nonce_hex, c->nonce, sizeof c->nonce, err) == 0) {
		/* The same client configuration as the sandbox's own (private_dir.c). RECOVER_QUERY_MS,
		 * not the exec's own deadline: the start serves no session until every one is settled,
		 * so an exec its agent still says is running (call_reconcile asks on while it does) is
		 * not waited for to its end: it is settled uncertain, its sandbox stopped. */
		if (client_config_make(m, l, err) == 0)
			rc = call_reconcile(m, c, tls_deadline_after(RECOVER_QUERY_MS), err);
		if (rc == 0)
			rc = call_result_verify(c, err);
	}
	live_free(l); /* its TLS configuration and key; it had no connection of its own */
	c->sandbox = NULL;
	return rc;
}

/* After a failed final write at start-up: 0 when the exec's end is on record anyway (another
 * manager on the same records settled it first), else -1 (the caller's error stays the first). */
static int recover_settled(struct manager *m, const char *exec_id)
{
	struct exec_row *e = malloc(sizeof *e);
	struct sb_err ignored;
	int settled = e != NULL && records_exec_get(m->rec, exec_id, e, &ignored) == RECORDS_FOUND &&
		      strcmp(e->state, "accepted") != 0 && strcmp(e->state, "dispatched") != 0;

	if (settled)
		sb_info("exec %s: already settled as %s", exec_id, e->state);
	free(e);
	return settled ? 0 : -1;
}

/* Policy proxy: the mutating requests a running exec's record kept as they left (sandbox.c
 * edge_note) stay with the end recovery finds for it, since the agent's result knows nothing of
 * them: for an uncertain exec they are the evidence of what reached the cluster. */
static void egress_noted_keep(struct manager *m, const char *exec_id, json_t *result)
{
	struct records_query q = { .exec_id = exec_id };
	json_t *page = NULL, *noted;
	struct sb_err ignored;

	if (!json_is_object(result) || json_object_get(result, "egress") != NULL ||
	    records_page(m->rec, &q, &page, &ignored) != RECORDS_FOUND)
		return;
	noted = json_object_get(json_object_get(json_array_get(json_object_get(page, "records"), 0), "result"), "egress");
	if (json_is_object(noted))
		json_object_set(result, "egress", noted);
	json_decref(page);
}

/* Settle one dispatched exec: its verified end, or uncertain. -1 when neither can be recorded.
 * context: what left it, for the reason ("the manager restarted", "its owner ... stopped"). */
static int recover_dispatched(struct manager *m, const char *exec_id, const char *context, bool ask,
			      struct sb_err *err)
{
	struct call *c = calloc(1, sizeof *c);
	struct exec_row *e = malloc(sizeof *e);
	struct sb_err why;
	json_t *result = NULL;
	const char *status = "uncertain";
	int rc = -1;

	sb_err_clear(&why);
	if (c == NULL || e == NULL) {
		sb_fail(err, ENOMEM, "recovering exec %s", exec_id);
	} else if (records_exec_get(m->rec, exec_id, e, err) == RECORDS_FOUND) {
		snprintf(c->exec_id, sizeof c->exec_id, "%s", e->id);
		snprintf(c->session, sizeof c->session, "%s", e->session);
		snprintf(c->nonce_hex, sizeof c->nonce_hex, "%s", e->nonce_hex);
		if (!ask) {
			/* Another manager's sandbox: its agent trusts only that manager's CA, so nothing
			 * here can ask it; the sandbox was stopped with evidence first (recovery_session). */
			snprintf(c->reason, sizeof c->reason, "%.200s while it ran; its sandbox was stopped before "
				 "its end was seen (only the manager that started a sandbox can ask its agent)", context);
			result = call_refused_result(c, "uncertain", c->reason);
		} else if (recover_query(m, c, e, &why) == 0 && (result = call_result_parse(c)) != NULL) {
			status = json_string_value(json_object_get(result, "status")) ?: "uncertain";
		} else {
			/* Invariant 7: lost is uncertain, and uncertain is never rerun. */
			snprintf(c->reason, sizeof c->reason, "%.200s while it ran, and its end could not be "
				 "established: %.700s", context, why.msg[0] ? why.msg : "the result is not JSON");
			result = call_refused_result(c, "uncertain", c->reason);
		}
		egress_noted_keep(m, exec_id, result);
		rc = call_record_end(m, c, status, result, err);
		if (rc < 0)
			rc = recover_settled(m, exec_id);
		else
			sb_info("exec %s (session %s), recovered: %s%s%s", c->exec_id, c->session, status,
				c->reason[0] ? ": " : "", c->reason);
		json_decref(result);
	}
	if (rc < 0)
		sb_err_prefix(err, "settling exec %s left dispatched (%s)", exec_id, context);
	if (c != NULL)
		agent_reply_free(&c->reply);
	free(c);
	free(e);
	return rc;
}

/* The exec states a manager's death can leave, in the order they are settled. */
static const char *const in_flight[] = { "accepted", "dispatched" };

#ifdef SB_FAILPOINTS
/* Test builds only (failpoint manager.recovery.settle_fails): one exec's end cannot be recorded, as
 * a store refusing one write would; the session must be reserved and the others serve
 * (docs/reliability.md). */
static int settle_fault(const char *exec_id, struct sb_err *err)
{
	if (!failpoint_hit("manager.recovery.settle_fails"))
		return 0;
	sb_warn("failpoint manager.recovery.settle_fails reached: exec %s is left in flight", exec_id);
	return sb_fail(err, EIO, "settling exec %s: its end could not be recorded (failpoint "
		       "manager.recovery.settle_fails)", exec_id);
}
#else
static int settle_fault(const char *exec_id, struct sb_err *err)
{
	(void)exec_id;
	(void)err;
	return 0;
}
#endif

/* One exec left in state in_flight[k], settled: refused (accepted: it never ran) or reconciled. */
static int recovery_exec(struct manager *m, size_t k, const char *exec_id, const char *refusal, const char *context,
			 bool ask, struct sb_err *err)
{
	if (settle_fault(exec_id, err) < 0)
		return -1;
	if (k == 0 && records_exec_finish(m->rec, exec_id, "refused", NULL, NULL, refusal, err) < 0)
		return recover_settled(m, exec_id);
	if (k == 1)
		return recover_dispatched(m, exec_id, context, ask, err);
	return 0;
}

/* Fail closed: what cannot be recorded as settled stops the caller (a start reserves the session,
 * a takeover answers no call). Each exec on its own: one that cannot be settled does not keep the
 * others in flight; the first such is left (its id, "" for none) and its error returned. Accepted
 * execs first: they never ran (a stale owner cannot dispatch them now: its dispatch is a
 * compare-and-set on `accepted` that the fence also holds); then dispatched ones, which their
 * sandbox may still know the end of. */
static int recovery_execs(struct manager *m, const char *session, const char *context, bool ask, char left[65],
			  struct sb_err *err)
{
	char refusal[300];
	struct sb_err one;
	int rc = 0;

	left[0] = '\0';
	snprintf(refusal, sizeof refusal, "%.200s before dispatching it: it never ran", ask ? "the manager stopped" : context);
	for (size_t k = 0; k < 2; k++) {
		json_t *ids = records_exec_ids_in_state(m->rec, session, in_flight[k], rc == 0 ? err : &one), *id;
		size_t i;

		if (ids == NULL)
			return -1;
		json_array_foreach(ids, i, id) {
			const char *exec_id = json_string_value(id);

			if (recovery_exec(m, k, exec_id, refusal, context, ask, rc == 0 ? err : &one) == 0)
				continue;
			if (rc == 0) {
				snprintf(left, 65, "%s", exec_id);
				rc = -1;
			} else {
				sb_error("session %s: %s", session, one.msg); /* err keeps the first */
			}
		}
		json_decref(ids);
	}
	return rc;
}

/* For this manager's own earlier run the sandbox is settled even when an exec was not: stopping it
 * is the safe direction, and the exec's end is then for an operator to settle (resolve.c). */
static int recovery_session_left(struct manager *m, const char *session, const char *previous, char left[65],
				 struct sb_err *err)
{
	char context[160];
	struct sb_err sandbox_err;

	if (previous[0] == '\0') {
		/* This manager's own earlier run: execs first, since their sandbox may still know how
		 * they ended (recover_query asks it); then the sandbox. */
		int rc = recovery_execs(m, session, "the manager restarted", true, left, err);

		if (sandbox_recover_session(m, session, "after a manager restart", rc < 0 ? &sandbox_err : err) < 0) {
			if (rc < 0) /* err keeps the exec's failure, the first */
				sb_error("session %s: %s", session, sandbox_err.msg);
			return -1;
		}
		return rc;
	}
	left[0] = '\0';
	/* Another manager's: its sandbox first, stopped with evidence (or the session reserved), so
	 * nothing it runs can still end after the records say how its calls ended. */
	snprintf(context, sizeof context, "its owner, manager %.64s, stopped renewing its lease", previous);
	if (sandbox_recover_session(m, session, context, err) < 0)
		return -1;
	return recovery_execs(m, session, context, false, left, err);
}

int recovery_session(struct manager *m, const char *session, const char *previous, struct sb_err *err)
{
	char left[65];

	return recovery_session_left(m, session, previous, left, err);
}

/* ---- which sessions a manager settles ----
 * A session's leftovers are settled by the manager that holds its lease: at start the sessions
 * this manager owned before (its id), those no one owns, and those whose owner stopped renewing;
 * a session whose owner is alive is that owner's to settle, and is left as it is. */

/* ---- a session recovery could not settle ----
 * Reserved, so no call runs and nothing deletes its workspace while an exec of it is in flight on
 * record; the others serve. The mark that holds it is in the records (the session `reserved`, the
 * exec still accepted or dispatched, which records_sessions_release never releases), so it holds
 * across a crash; the reason is in memory only (the note): every start retries recovery anyway, and
 * a reason kept from an earlier start would name a cause that may be gone (a full disk, a store
 * that refused one write). */

static void note_free_all(struct unsettled_note **list)
{
	while (*list != NULL) {
		struct unsettled_note *n = *list;

		*list = n->next;
		free(n);
	}
}

/* -1 only when the reserve cannot be recorded: the store itself is unusable, and the start fails. */
static int recovery_reserve(struct manager *m, const char *session, const char *exec_id, const struct sb_err *why,
			    struct sb_err *err)
{
	struct unsettled_note *n = calloc(1, sizeof *n);

	if (n == NULL)
		return sb_fail(err, ENOMEM, "noting session %s as unsettled", session);
	if (records_session_set_state(m->rec, session, "reserved", err) < 0) {
		free(n);
		sb_err_prefix(err, "session %s could not be settled (%.300s), and reserving it failed", session, why->msg);
		return -1;
	}
	snprintf(n->session, sizeof n->session, "%s", session);
	snprintf(n->exec_id, sizeof n->exec_id, "%s", exec_id);
	snprintf(n->reason, sizeof n->reason, "%s", why->msg);
	pthread_mutex_lock(&m->lock);
	n->next = m->unsettled;
	m->unsettled = n;
	pthread_mutex_unlock(&m->lock);
	sb_error("session %s: what the previous run left could not be settled (%s); the session is reserved "
		 "(calls and delete refused) until an operator settles %s%s (resolve --exec), or a restart does",
		 session, why->msg, exec_id[0] ? "exec " : "its sandbox", exec_id);
	return 0;
}

/* Each session on its own: one that cannot be settled is reserved (recovery_reserve) and the
 * others are settled and serve. Only a store that cannot be read or written stops the start. */
int recovery_run(struct manager *m, struct sb_err *err)
{
	json_t *set = records_sessions_in_flight(m->rec, err), *v;
	size_t i;
	int released, rc = 0;

	if (set == NULL)
		return -1;
	pthread_mutex_lock(&m->lock);
	note_free_all(&m->unsettled);
	pthread_mutex_unlock(&m->lock);
	json_array_foreach(set, i, v) {
		const char *session = json_string_value(v);
		struct sb_err why;
		char left[65];
		struct lease l;
		int took = ownership_take(m, session, &l, err);

		if (took == RECORDS_REFUSED) {
			sb_info("session %s: owned by manager %s, which is alive: its leftovers are its own", session,
				l.owner);
			continue;
		}
		if (took == RECORDS_NOT_FOUND)
			continue;
		if (took < 0) {
			rc = -1;
			break;
		}
		sb_err_clear(&why);
		if (recovery_session_left(m, session, l.previous, left, &why) < 0 &&
		    recovery_reserve(m, session, left, &why, err) < 0) {
			rc = -1;
			break;
		}
	}
	json_decref(set);
	if (rc < 0)
		return -1;
	/* A session reserved because a sandbox's end was not proven gets its workspace back once
	 * every one of its sandboxes is: the operator removed it, or it ended since. One with an exec
	 * still in flight stays reserved (records_sessions_release). */
	released = records_sessions_release(m->rec, err);
	if (released < 0)
		return -1;
	if (released > 0)
		sb_info("%d reserved session(s) released: their sandboxes are proven gone", released);
	return 0;
}

json_t *recovery_unsettled_json(struct manager *m)
{
	json_t *list = json_array();

	pthread_mutex_lock(&m->lock);
	for (struct unsettled_note *n = m->unsettled; n != NULL && list != NULL; n = n->next)
		if (json_array_append_new(list, json_pack("{s:s, s:s?, s:s}", "session", n->session, "exec",
							  n->exec_id[0] ? n->exec_id : NULL, "reason", n->reason)) != 0) {
			json_decref(list);
			list = NULL;
		}
	pthread_mutex_unlock(&m->lock);
	return list;
}

bool recovery_unsettled_get(struct manager *m, const char *session, struct unsettled_note *out)
{
	bool found = false;

	pthread_mutex_lock(&m->lock);
	for (struct unsettled_note *n = m->unsettled; n != NULL && !found; n = n->next)
		if (strcmp(n->session, session) == 0) {
			*out = *n;
			out->next = NULL;
			found = true;
		}
	pthread_mutex_unlock(&m->lock);
	return found;
}

/* Whether session still has an exec in flight on record; -1 (err). */
static int in_flight_left(struct manager *m, const char *session, char first[65], struct sb_err *err)
{
	first[0] = '\0';
	for (size_t k = 0; k < 2 && first[0] == '\0'; k++) {
		json_t *ids = records_exec_ids_in_state(m->rec, session, in_flight[k], err);

		if (ids == NULL)
			return -1;
		if (json_array_size(ids) > 0)
			snprintf(first, 65, "%s", json_string_value(json_array_get(ids, 0)) ?: "?");
		json_decref(ids);
	}
	return first[0] != '\0';
}

int recovery_unsettled_done(struct manager *m, const char *session, struct sb_err *err)
{
	struct unsettled_note **p, *n;
	struct session_row s;
	char next[65];
	int left = in_flight_left(m, session, next, err);

	if (left < 0)
		return -1;
	pthread_mutex_lock(&m->lock);
	for (p = &m->unsettled; (n = *p) != NULL; p = &n->next)
		if (strcmp(n->session, session) == 0) {
			if (left) {
				snprintf(n->exec_id, sizeof n->exec_id, "%s", next);
			} else {
				*p = n->next;
				free(n);
			}
			break;
		}
	pthread_mutex_unlock(&m->lock);
	if (left)
		return 0;
	/* The same release as at start: a sandbox of it not proven gone keeps it reserved still. */
	if (records_sessions_release(m->rec, err) < 0)
		return -1;
	if (records_session_get(m->rec, session, &s, err) != RECORDS_FOUND)
		return -1;
	return strcmp(s.state, "active") == 0;
}

/* ---- a session taken over while serving ----
 * The take and the note that the session must be settled happen under claim_lock, so a second
 * request of the same session that finds it this manager's already also finds the note; the
 * settling happens under the session's queue turn, so no call of this manager runs on the session
 * before what the old owner left is settled (its sandbox proven gone or its session reserved). */

/* Whether session has a settle note; previous (may be NULL) gets the manager it was taken from;
 * take removes the note. */
static bool settle_pending(struct manager *m, const char *session, char previous[65], bool take)
{
	struct settle_note **p, *n;
	bool found = false;

	pthread_mutex_lock(&m->lock);
	for (p = &m->settle; (n = *p) != NULL; p = &n->next)
		if (strcmp(n->session, session) == 0) {
			found = true;
			if (previous != NULL)
				memcpy(previous, n->previous, sizeof n->previous);
			if (take) {
				*p = n->next;
				free(n);
			}
			break;
		}
	pthread_mutex_unlock(&m->lock);
	return found;
}

static int settle_note_add(struct manager *m, const char *session, const char *previous)
{
	struct settle_note *n = calloc(1, sizeof *n);

	if (n == NULL)
		return -1;
	snprintf(n->session, sizeof n->session, "%s", session);
	snprintf(n->previous, sizeof n->previous, "%s", previous);
	pthread_mutex_lock(&m->lock);
	n->next = m->settle;
	m->settle = n;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

json_t *recovery_claim(struct manager *m, const char *session)
{
	struct lease l;
	struct sb_err err;
	char previous[65];
	int took, rc = 0;

	if (session == NULL)
		return NULL; /* the op answers its own "needs a session" */
	pthread_mutex_lock(&m->claim_lock);
	took = ownership_take(m, session, &l, &err);
	if (took == RECORDS_FOUND && l.previous[0] != '\0' && settle_note_add(m, session, l.previous) < 0)
		took = sb_fail(&err, ENOMEM, "noting session %s to settle", session);
	pthread_mutex_unlock(&m->claim_lock);
	if (took == RECORDS_REFUSED)
		return ownership_refusal(session, &l);
	if (took == RECORDS_NOT_FOUND)
		return NULL; /* the op answers not_found itself */
	if (took < 0)
		return control_error_from("unavailable", &err);
	if (!settle_pending(m, session, NULL, false))
		return NULL;
	queue_enter(m->queue, session);
	if (settle_pending(m, session, previous, false)) {
		struct live_sandbox *stale = sandbox_find(m, session);

		sb_info("session %s: taken over from manager %s, whose lease expired; settling what it left", session,
			previous);
		/* This manager held the session before (it lost it while paused or cut off, and takes it
		 * back now): its sandbox of then is of a generation before the takeovers, which the fence
		 * refuses; its end is proven before anything runs (sandbox.c sandbox_forget_stale). */
		if (stale != NULL)
			rc = sandbox_forget_stale(m, stale, &err);
		if (rc == 0)
			rc = recovery_session(m, session, previous, &err);
		if (rc == 0)
			settle_pending(m, session, NULL, true);
	}
	queue_leave(m->queue, session);
	if (rc < 0)
		return control_error("unavailable", "session %s was taken over from another manager, and what it left "
				     "could not be settled yet (nothing ran; retry): %s", session, err.msg);
	return NULL;
}
