/* Status and metrics answers (see status.h). Each answer reads the records once (records_counts)
 * and the live list under m->lock; it never takes a session's turn, so a long call cannot delay
 * it, and it writes nothing. */
#include "status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "manager.h"
#include "metrics.h"
#include "version.h"

struct status_view {
	json_t *counts;    /* records_counts() */
	json_t *unsettled; /* recovery_unsettled_json() */
	int64_t idle, busy;
};

static int status_read(struct manager *m, struct status_view *v, struct sb_err *err)
{
	v->idle = v->busy = 0;
	v->counts = records_counts(m->rec, err);
	if (v->counts == NULL)
		return -1;
	v->unsettled = recovery_unsettled_json(m);
	if (v->unsettled == NULL) {
		json_decref(v->counts);
		return sb_fail(err, ENOMEM, "listing the sessions recovery could not settle");
	}
	pthread_mutex_lock(&m->lock);
	for (struct live_sandbox *l = m->live; l != NULL; l = l->next)
		*(l->busy ? &v->busy : &v->idle) += 1;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int64_t count_of(const struct status_view *v, const char *group, const char *state)
{
	return json_integer_value(json_object_get(json_object_get(v->counts, group), state));
}

static int64_t uncertain_open(const struct status_view *v)
{
	return json_integer_value(json_object_get(v->counts, "uncertain_open"));
}

/* Append to a message for people; a message that does not fit ends in "..." (it only names more
 * sessions than the records' lists hold anyway). */
static void msg_add(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void msg_add(char *buf, size_t size, const char *fmt, ...)
{
	size_t used = strlen(buf);
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf + used, size - used, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size - used)
		memcpy(buf + size - 4, "...", 4);
}

static bool is_unsettled(const struct status_view *v, const char *session)
{
	json_t *item;
	size_t i;

	json_array_foreach(v->unsettled, i, item)
		if (session != NULL && strcmp(json_string_value(json_object_get(item, "session")) ?: "", session) == 0)
			return true;
	return false;
}

/* The sessions recovery could not settle, each with why and the exec to resolve. */
static json_t *unsettled_problem(const struct status_view *v)
{
	size_t n = json_array_size(v->unsettled), i;
	json_t *item;
	char msg[4096];

	msg[0] = '\0';
	msg_add(msg, sizeof msg, "%zu session%s reserved: the start's recovery could not settle what the previous run "
		"left in flight, so calls and delete are refused; look at the workspace, then settle the exec "
		"(resolve --exec ID --outcome ran|not-ran|unknown --note TEXT: it is recorded uncertain and the "
		"session serves again), or restart the manager to retry:", n, n == 1 ? "" : "s");
	json_array_foreach(v->unsettled, i, item) {
		const char *exec = json_string_value(json_object_get(item, "exec"));

		msg_add(msg, sizeof msg, "%s session %s (%s%s: %s)", i ? "," : "",
			json_string_value(json_object_get(item, "session")) ?: "?", exec ? "exec " : "its sandbox",
			exec ?: "", json_string_value(json_object_get(item, "reason")) ?: "?");
	}
	return json_string(msg);
}

/* The verdict's reasons (status.h), each naming what to look at and what to do. */
static json_t *status_problems(const struct status_view *v)
{
	json_t *list = json_array(), *item;
	int64_t uncertain = uncertain_open(v);
	int64_t reserved = count_of(v, "sessions", "reserved") - (int64_t)json_array_size(v->unsettled);
	char msg[2048];
	size_t i;

	if (list == NULL)
		return NULL;
	if (uncertain > 0) {
		msg[0] = '\0';
		msg_add(msg, sizeof msg, "%lld unresolved uncertain exec%s on sessions not deleted: their outcome is "
			"unknown and they are never rerun; look at each workspace (records --session S --state "
			"unresolved), then settle each (resolve --exec ID --outcome ran|not-ran|unknown --note TEXT) "
			"or delete the session:", (long long)uncertain, uncertain == 1 ? "" : "s");
		json_array_foreach(json_object_get(v->counts, "uncertain_sessions"), i, item)
			msg_add(msg, sizeof msg, "%s session %s (%lld, newest exec %s)", i ? "," : "",
				json_string_value(json_object_get(item, "session")) ?: "?",
				(long long)json_integer_value(json_object_get(item, "uncertain")),
				json_string_value(json_object_get(item, "newest_exec")) ?: "?");
		json_array_append_new(list, json_string(msg));
	}
	if (reserved > 0) {
		msg[0] = '\0';
		msg_add(msg, sizeof msg, "%lld session%s reserved: the end of %s sandbox is not proven, so calls and "
			"delete are refused; end it by hand and restart the manager (docs/operations.md, After a "
			"crash):", (long long)reserved, reserved == 1 ? "" : "s", reserved == 1 ? "its" : "each one's");
		json_array_foreach(json_object_get(v->counts, "reserved_sessions"), i, item)
			if (!is_unsettled(v, json_string_value(item)))
				msg_add(msg, sizeof msg, "%s %s", msg[strlen(msg) - 1] == ':' ? "" : ",",
					json_string_value(item) ?: "?");
		json_array_append_new(list, json_string(msg));
	}
	if (json_array_size(v->unsettled) > 0)
		json_array_append_new(list, unsettled_problem(v));
	return list;
}

json_t *status_answer(struct manager *m)
{
	struct status_view v;
	struct sb_err err;
	json_t *problems, *resp, *disk;

	sb_err_clear(&err);
	if (status_read(m, &v, &err) < 0)
		return control_error_from("internal", &err);
	problems = status_problems(&v);
	/* Rule N4: a reserve given back means calls are refused until there is room again. */
	disk = disk_bound_json(&m->disk);
	if (json_is_false(json_object_get(disk, "held")))
		json_array_append_new(problems, json_string("the state directory's filesystem is full: the disk reserve "
							    "was given back to finish records, and calls are refused until "
							    "twice its size is free (docs/operations.md, Disk)"));
	resp = json_pack("{s:b, s:s, s:s, s:I, s:I, s:s, s:s, s:s?, s:{s:I, s:I, s:I}, s:O, s:O, s:I, s:I, s:I,"
			 " s:O, s:O, s:O, s:s, s:o}",
			 "ok", 1, "version", SB_VERSION, "backend", m->cfg.backend, "pid", (json_int_t)getpid(),
			 "uptime_seconds", (json_int_t)(metrics_uptime_ms() / 1000), "state_dir", m->cfg.state_dir,
			 "socket", m->cfg.socket, "metrics_listen", m->cfg.metrics_listen[0] ? m->cfg.metrics_listen : NULL,
			 "sandboxes", "live", (json_int_t)(v.idle + v.busy), "idle", (json_int_t)v.idle, "busy",
			 (json_int_t)v.busy, "sessions", json_object_get(v.counts, "sessions"), "execs",
			 json_object_get(v.counts, "execs"), "in_flight",
			 (json_int_t)(count_of(&v, "execs", "accepted") + count_of(&v, "execs", "dispatched")),
			 "uncertain", (json_int_t)uncertain_open(&v), "reserved",
			 (json_int_t)count_of(&v, "sessions", "reserved"), "uncertain_sessions",
			 json_object_get(v.counts, "uncertain_sessions"), "reserved_sessions",
			 json_object_get(v.counts, "reserved_sessions"), "unsettled_sessions", v.unsettled, "health",
			 json_array_size(problems) > 0 ? "degraded" : "healthy", "problems", problems);
	json_decref(v.counts);
	json_decref(v.unsettled);
	if (resp != NULL)
		json_object_set_new(resp, "disk", disk);
	else
		json_decref(disk);
	return resp;
}

int status_metrics_text(struct manager *m, char **text, size_t *len, struct sb_err *err)
{
	struct status_view v;
	struct metrics_gauges g;
	int rc;

	if (status_read(m, &v, err) < 0)
		return -1;
	g = (struct metrics_gauges){
		.version = SB_VERSION, .backend = m->cfg.backend, .sandboxes_idle = v.idle, .sandboxes_busy = v.busy,
		.sessions_active = count_of(&v, "sessions", "active"),
		.sessions_deleting = count_of(&v, "sessions", "deleting"),
		.sessions_deleted = count_of(&v, "sessions", "deleted"),
		.sessions_reserved = count_of(&v, "sessions", "reserved"), .uncertain = uncertain_open(&v),
		.sessions_unsettled = (int64_t)json_array_size(v.unsettled),
		.in_flight = count_of(&v, "execs", "accepted") + count_of(&v, "execs", "dispatched"),
	};
	rc = metrics_render(&g, text, len, err);
	json_decref(v.counts);
	json_decref(v.unsettled);
	return rc;
}

json_t *status_metrics_answer(struct manager *m)
{
	struct sb_err err;
	char *text;
	size_t len;
	json_t *resp;

	sb_err_clear(&err);
	if (status_metrics_text(m, &text, &len, &err) < 0)
		return control_error_from("internal", &err);
	resp = json_pack("{s:b, s:s, s:s%}", "ok", 1, "content_type", METRICS_CONTENT_TYPE, "text", text, len);
	free(text);
	return resp;
}
