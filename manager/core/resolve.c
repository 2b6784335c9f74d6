/* `resolve`: an operator's word on an exec recorded `uncertain` (records.h exec_resolution), kept
 * beside the exec with who said it (the control connection's peer) and when. It must never change
 * the exec's state nor run anything again (invariant 7): it only records what a person found. */
#include "manager.h"

#include <errno.h>
#include <pwd.h>
#include <string.h>

#include "control.h"
#include "log.h"

/* The peer's login name for the record, or NULL when it has none (a uid without a passwd entry,
 * or an entry too large for buf): the uid is recorded either way. */
static const char *login_name(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *found = NULL;

	if (getpwuid_r(uid, &pw, buf, len, &found) != 0 || found == NULL)
		return NULL;
	return found->pw_name;
}

json_t *resolve_answer(struct manager *m, json_t *req, uid_t peer)
{
	const char *exec_id = json_string_value(json_object_get(req, "exec"));
	struct exec_resolution res = {
		.outcome = json_string_value(json_object_get(req, "outcome")),
		.note = json_string_value(json_object_get(req, "note")),
		.by_uid = (uint32_t)peer,
	};
	char pwbuf[4096];
	struct sb_err err;
	int rc;

	if (exec_id == NULL || res.outcome == NULL || res.note == NULL)
		return control_error("invalid", "resolve needs an exec, an outcome (ran, not-ran or unknown) and a note");
	res.by_name = login_name(peer, pwbuf, sizeof pwbuf);
	sb_err_clear(&err);
	rc = records_exec_resolve(m->rec, exec_id, &res, &err);
	if (rc == RECORDS_NOT_FOUND)
		return control_error_from("not_found", &err);
	if (rc == RECORDS_REFUSED)
		return control_error_from("refused", &err);
	if (rc < 0)
		return control_error_from(err.errnum == EINVAL ? "invalid" : "internal", &err);
	sb_info("exec %s resolved by uid %u: %s (its state stays uncertain)", exec_id, (unsigned)peer, res.outcome);
	return json_pack("{s:b, s:s, s:s, s:{s:s, s:s, s:I, s:s?, s:I}}", "ok", 1, "exec_id", exec_id, "state",
			 "uncertain", "resolution", "outcome", res.outcome, "note", res.note, "by_uid",
			 (json_int_t)res.by_uid, "by_name", res.by_name, "at_ms", (json_int_t)res.at_ms);
}
