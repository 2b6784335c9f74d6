/* Start-up, before the first call: what the previous run left in flight is settled, never rerun.
 * Execs first (accepted ones refused: they never ran; dispatched ones reconciled with their
 * sandbox, or uncertain), since their sandboxes may still know how they ended; then the sandboxes
 * (sandbox.c sandbox_recover), each stopped with evidence or its session reserved. The one place
 * that calls both sides: neither calls the other for it. */
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
#include "fstree.h"
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
 * name, owned by the sandbox's uid or the manager. Anything else refuses the key, and the caller
 * settles the exec uncertain: fail closed, never trusted. */
static int receipt_key_read(const struct manager *m, const char *private_dir, uint8_t key[RECEIPT_KEY_BYTES],
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
	refusal = key_file_refusal(&st, m->cfg.sandbox_uid, why, sizeof why);
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
	if (receipt_key_read(m, sb.private_dir, l->receipt_key, err) == 0 &&
	    sb_hex_decode(e->nonce_hex, c->nonce, sizeof c->nonce, err) == 0) {
		/* The same client configuration as the sandbox's own (private_dir.c). */
		if (client_config_make(m, l, err) == 0)
			rc = call_reconcile(m, c, tls_deadline_after(30000), err);
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

/* Settle one dispatched exec: its verified end, or uncertain. -1 when neither can be recorded. */
static int recover_dispatched(struct manager *m, const char *exec_id, struct sb_err *err)
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
		if (recover_query(m, c, e, &why) == 0 && (result = call_result_parse(c)) != NULL) {
			status = json_string_value(json_object_get(result, "status")) ?: "uncertain";
		} else {
			/* Invariant 7: lost is uncertain, and uncertain is never rerun. */
			snprintf(c->reason, sizeof c->reason, "the manager restarted while it ran, and its end could "
				 "not be established: %.900s", why.msg[0] ? why.msg : "the result is not JSON");
			result = call_refused_result(c, "uncertain", c->reason);
		}
		rc = call_record_end(m, c, status, result, err);
		if (rc < 0)
			rc = recover_settled(m, exec_id);
		else
			sb_info("exec %s (session %s), recovered: %s%s%s", c->exec_id, c->session, status,
				c->reason[0] ? ": " : "", c->reason);
		json_decref(result);
	}
	if (rc < 0)
		sb_err_prefix(err, "settling exec %s left dispatched by the previous run", exec_id);
	if (c != NULL)
		agent_reply_free(&c->reply);
	free(c);
	free(e);
	return rc;
}

/* Fail closed: a start-up that cannot record how the previous run's execs ended does not serve. */
static int recovery_execs(struct manager *m, struct sb_err *err)
{
	json_t *ids = records_exec_ids_in_state(m->rec, "accepted", err), *id;
	size_t i;
	int rc = 0;

	if (ids == NULL)
		return -1;
	json_array_foreach(ids, i, id) {
		if (rc == 0 && records_exec_finish(m->rec, json_string_value(id), "refused", NULL, NULL,
						   "the manager stopped before dispatching it: it never ran", err) < 0)
			rc = recover_settled(m, json_string_value(id));
	}
	json_decref(ids);
	if (rc < 0)
		return -1;
	ids = records_exec_ids_in_state(m->rec, "dispatched", err);
	if (ids == NULL)
		return -1;
	json_array_foreach(ids, i, id)
		if (rc == 0 && recover_dispatched(m, json_string_value(id), err) < 0)
			rc = -1;
	json_decref(ids);
	return rc;
}

int recovery_run(struct manager *m, struct sb_err *err)
{
	/* Execs first: their sandboxes may still know how they ended (recover_query asks them). */
	if (recovery_execs(m, err) < 0)
		return -1;
	return sandbox_recover(m, err);
}
