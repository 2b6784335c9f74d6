/* What a principal of the control API over TLS may ask (control_tls.h; docs/operations.md): its
 * identities' sessions, never another's, which are "not found" as sessions that do not exist;
 * operator actions only to operators. Reads the records; changes nothing but the request. */
#include "control_authz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "manager.h"

/* NULL when p may drive the session's identity; a session it may not is "not found". */
static json_t *session_check(struct manager *m, const struct principal *p, const char *id)
{
	struct session_row *row;
	struct sb_err err;
	json_t *answer = NULL;
	int rc;

	if (id == NULL)
		return control_error("invalid", "the request names no session");
	row = calloc(1, sizeof *row);
	if (row == NULL)
		return control_error("internal", "out of memory");
	sb_err_clear(&err);
	rc = records_session_get(m->rec, id, row, &err);
	if (rc < 0)
		answer = control_error_from("internal", &err);
	else if (rc == RECORDS_NOT_FOUND || !principal_may_drive(p, row->identity))
		answer = control_error("not_found", "no session '%s'", id);
	free(row);
	return answer;
}

static json_t *exec_check(struct manager *m, const struct principal *p, const char *exec_id)
{
	struct exec_row *row = calloc(1, sizeof *row);
	struct sb_err err;
	json_t *answer;
	int rc;

	if (row == NULL)
		return control_error("internal", "out of memory");
	sb_err_clear(&err);
	rc = records_exec_get(m->rec, exec_id, row, &err);
	answer = rc < 0 ? control_error_from("internal", &err) :
		 rc == RECORDS_NOT_FOUND ? control_error("not_found", "no exec '%s'", exec_id) :
					   session_check(m, p, row->session);
	if (answer != NULL && rc == RECORDS_FOUND && strcmp(json_string_value(json_object_get(json_object_get(answer,
				"error"), "kind")) ?: "", "not_found") == 0) {
		json_decref(answer);
		answer = control_error("not_found", "no exec '%s'", exec_id);
	}
	free(row);
	return answer;
}

/* A list names an identity p may drive; with none named, p's only one. */
static json_t *list_check(const struct principal *p, json_t *req)
{
	const char *identity = json_string_value(json_object_get(req, "identity"));

	if (identity == NULL && json_object_get(req, "identity") != NULL)
		return control_error("invalid", "session list: identity must be a string");
	if (identity == NULL && p->n_identities == 1)
		return json_object_set_new(req, "identity", json_string(p->identities[0])) == 0 ? NULL :
		       control_error("internal", "out of memory");
	if (identity == NULL)
		return control_error("refused", "principal %s drives several identities: name one (--identity)", p->name);
	return principal_may_drive(p, identity) ? NULL : control_error("refused", "principal %s may not drive "
								      "identity %s", p->name, identity);
}

static bool op_is(const char *op, const char *const *ops)
{
	for (; *ops != NULL; ops++)
		if (strcmp(op, *ops) == 0)
			return true;
	return false;
}

/* A resolve is recorded with the manager's uid (the peer's on the unix socket): the principal
 * who asked goes first in its note, so the record says who it was. */
static json_t *resolve_note(const struct principal *p, json_t *req)
{
	const char *note = json_string_value(json_object_get(req, "note"));
	char *text;
	int rc;

	if (note == NULL)
		return NULL; /* resolve itself refuses a missing note */
	if (asprintf(&text, "[principal %s] %s", p->name, note) < 0)
		return control_error("internal", "out of memory");
	rc = json_object_set_new(req, "note", json_string(text));
	free(text);
	return rc == 0 ? NULL : control_error("internal", "out of memory");
}

/* "RES=ACCESS" (a grant's set, an entry of session create's grants) names a resource p may give. */
static json_t *grant_entry_check(const struct principal *p, const char *set)
{
	const char *eq = set != NULL ? strchr(set, '=') : NULL;
	char res[128];

	if (eq == NULL || (size_t)(eq - set) >= sizeof res)
		return control_error("invalid", "a grant is RESOURCE=ACCESS");
	snprintf(res, sizeof res, "%.*s", (int)(eq - set), set);
	return principal_may_grant(p, res) ? NULL :
	       control_error("refused", "principal %s may not grant %s (its principals entry's resources)", p->name, res);
}

/* A new session: an identity p drives, a repository from where p may take one, grants p may give. */
static json_t *create_check(const struct principal *p, json_t *req)
{
	const char *identity = json_string_value(json_object_get(req, "identity"));
	const char *repo = json_string_value(json_object_get(req, "repo"));
	json_t *grants = json_object_get(req, "grants"), *g, *answer;
	size_t i;

	if (identity == NULL || !principal_may_drive(p, identity))
		return control_error("refused", "principal %s may not drive identity %s", p->name, identity ?: "(none)");
	if (!principal_may_use_repo(p, repo))
		return control_error("refused", "principal %s may not take a repository from %s: its principals entry's "
				     "repos (default https:// only) say where", p->name, repo ?: "(none)");
	if (grants != NULL && !json_is_array(grants))
		return control_error("invalid", "grants must be a list of RESOURCE=ACCESS");
	json_array_foreach(grants, i, g)
		if ((answer = grant_entry_check(p, json_string_value(g))) != NULL)
			return answer;
	/* A session's own egress destinations widen what its sandbox reaches: no principals entry
	 * says which a principal may add, so none may (the manager's --egress-allow still holds). */
	if (json_array_size(json_object_get(req, "egress_allow")) > 0)
		return control_error("refused", "principal %s may not add egress destinations to a session (the "
				     "manager's egress-allow applies)", p->name);
	return NULL;
}

/* A grant's set names a resource p may give; a revoke only takes authority away. */
static json_t *grant_check(const struct principal *p, json_t *req)
{
	const char *set = json_string_value(json_object_get(req, "set"));

	return set == NULL ? NULL : grant_entry_check(p, set);
}

json_t *control_tls_authorize(struct manager *m, const struct principal *p, json_t *req)
{
	static const char *const on_session[] = { "exec", "cancel", "session.show", "session.delete", "grant", NULL };
	static const char *const operator_only[] = { "status", "metrics", "resolve", NULL };
	const char *op = json_string_value(json_object_get(req, "op"));
	const char *exec_id;
	json_t *answer;

	if (op != NULL && p->operator && strcmp(op, "resolve") == 0)
		return resolve_note(p, req);
	if (op == NULL || p->operator || strcmp(op, "config") == 0)
		return NULL; /* no op: dispatch says so; an operator is what the unix socket's peer is */
	if (op_is(op, operator_only))
		return control_error("refused", "%s is an operator's; principal %s is not one (the manager's "
				     "principals file)", op, p->name);
	if (op_is(op, on_session)) {
		answer = session_check(m, p, json_string_value(json_object_get(req, "session")));
		return answer != NULL || strcmp(op, "grant") != 0 ? answer : grant_check(p, req);
	}
	if (strcmp(op, "session.create") == 0)
		return create_check(p, req);
	if (strcmp(op, "session.list") == 0)
		return list_check(p, req);
	if (strcmp(op, "records") == 0) {
		exec_id = json_string_value(json_object_get(req, "exec"));
		answer = exec_id != NULL ? exec_check(m, p, exec_id) : NULL;

		if (answer != NULL || (exec_id != NULL && json_object_get(req, "session") == NULL))
			return answer;
		return session_check(m, p, json_string_value(json_object_get(req, "session")));
	}
	return control_error("refused", "%s is not offered over TLS to principal %s", op, p->name);
}
