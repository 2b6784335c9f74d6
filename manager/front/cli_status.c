/* `sandbox-manager status` and `sandbox-manager metrics`: an operator's view of a running manager,
 * through the daemon's "status" and "metrics" ops (status.c). status exits with the health verdict
 * (status.h has the rule): 0 healthy, 1 degraded, 125 when the manager is unreachable or fails. */
#include "cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textesc.h"

#define STATUS_DEGRADED 1

static const char *const exec_states[] = { "exited", "signaled", "timed_out", "cancelled", "uncertain", "refused" };

static long long num(json_t *obj, const char *key)
{
	return (long long)json_integer_value(json_object_get(obj, key));
}

/* Seconds as "3d 4h", "2h 5m", "4m 10s", "12s". */
static void uptime_print(long long s)
{
	if (s >= 86400)
		printf("%lldd %lldh", s / 86400, s % 86400 / 3600);
	else if (s >= 3600)
		printf("%lldh %lldm", s / 3600, s % 3600 / 60);
	else if (s >= 60)
		printf("%lldm %llds", s / 60, s % 60);
	else
		printf("%llds", s);
}

static void status_print_text(json_t *st)
{
	json_t *sb = json_object_get(st, "sandboxes"), *ss = json_object_get(st, "sessions");
	json_t *ex = json_object_get(st, "execs"), *p;
	size_t i;

	printf("sandbox-manager %s, pid %lld, up ", json_string_value(json_object_get(st, "version")) ?: "?",
	       num(st, "pid"));
	uptime_print(num(st, "uptime_seconds"));
	printf(", backend %s\n", json_string_value(json_object_get(st, "backend")) ?: "?");
	printf("state dir %s, socket %s\n", json_string_value(json_object_get(st, "state_dir")) ?: "?",
	       json_string_value(json_object_get(st, "socket")) ?: "?");
	printf("sandboxes: %lld live (%lld busy, %lld idle)\n", num(sb, "live"), num(sb, "busy"), num(sb, "idle"));
	printf("sessions: %lld active, %lld reserved, %lld deleting, %lld deleted\n", num(ss, "active"),
	       num(ss, "reserved"), num(ss, "deleting"), num(ss, "deleted"));
	printf("execs:");
	for (i = 0; i < sizeof exec_states / sizeof exec_states[0]; i++)
		printf("%s %lld %s", i ? "," : "", num(ex, exec_states[i]), exec_states[i]);
	printf("; in flight %lld (%lld accepted, %lld dispatched)\n", num(st, "in_flight"), num(ex, "accepted"),
	       num(ex, "dispatched"));
	p = json_object_get(st, "disk");
	if (json_object_get(p, "bytes") != NULL)
		printf("disk: %s of %lld bytes, %s\n", json_string_value(json_object_get(p, "bound")) ?: "?",
		       num(p, "bytes"), json_is_true(json_object_get(p, "held")) ? "held" : "given back");
	else if (p != NULL)
		printf("disk: %s\n", json_string_value(json_object_get(p, "bound")) ?: "?");
	printf("health: %s\n", json_string_value(json_object_get(st, "health")) ?: "?");
	json_array_foreach(json_object_get(st, "problems"), i, p)
		printf("  - %s\n", json_string_value(p) ?: "?");
}

/* An answer that is not ok: its error on stderr, as every client command prints one. */
static int answer_error(json_t *resp, const char *none)
{
	json_t *e = json_object_get(resp, "error");
	char *kind = textesc_str(json_string_value(json_object_get(e, "kind")));
	char *msg = textesc_str(json_string_value(json_object_get(e, "message")));

	fprintf(stderr, "sandbox-manager: %s: %s\n", kind ?: "error", msg ?: none);
	free(kind);
	free(msg);
	json_decref(resp);
	return MCLI_FAILED;
}

int mcli_status_run(const json_t *sockets, int as_json)
{
	json_t *resp = mcli_call(sockets, json_pack("{s:s}", "op", "status"));
	const char *health;
	int code;

	if (resp == NULL)
		return MCLI_FAILED;
	if (!json_is_true(json_object_get(resp, "ok")))
		return answer_error(resp, "(no message)");
	health = json_string_value(json_object_get(resp, "health")) ?: "";
	code = strcmp(health, "healthy") == 0 ? 0 : strcmp(health, "degraded") == 0 ? STATUS_DEGRADED : MCLI_FAILED;
	json_object_del(resp, "ok");
	if (as_json) {
		char *text = textesc_json_dumps(resp, JSON_INDENT(2) | JSON_SORT_KEYS);

		printf("%s\n", text ? text : "{}");
		free(text);
	} else {
		status_print_text(resp);
	}
	if (code == MCLI_FAILED)
		fprintf(stderr, "sandbox-manager: the manager answered no health verdict ('%s')\n", health);
	json_decref(resp);
	return code;
}

int mcli_metrics_run(const json_t *sockets)
{
	json_t *resp = mcli_call(sockets, json_pack("{s:s}", "op", "metrics")), *text;

	if (resp == NULL)
		return MCLI_FAILED;
	text = json_object_get(resp, "text");
	if (!json_is_true(json_object_get(resp, "ok")) || !json_is_string(text))
		return answer_error(resp, "(no metrics in the answer)");
	fwrite(json_string_value(text), 1, json_string_length(text), stdout);
	json_decref(resp);
	return fflush(stdout) == 0 ? 0 : MCLI_FAILED;
}
