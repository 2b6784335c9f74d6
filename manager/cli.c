/* Client commands of sandbox-manager (see cli.h). Thin: parse flags, one request, print. */
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "textesc.h"

struct json_t *mcli_call(const char *socket_flag, json_t *request)
{
	const char *path = control_socket_path(socket_flag);
	struct sb_err err;
	json_t *response = NULL;
	int fd, rc;

	if (path == NULL) {
		fprintf(stderr, "sandbox-manager: no manager socket: pass --socket PATH or set SANDBOX_MANAGER_SOCKET\n");
		json_decref(request);
		return NULL;
	}
	fd = control_connect(path, &err);
	if (fd < 0 || control_send(fd, request, CONTROL_REQUEST_CAP, &err) < 0 ||
	    (rc = control_recv(fd, CONTROL_RESPONSE_CAP, &response, &err)) < 0) {
		fprintf(stderr, "sandbox-manager: %s\n", err.msg);
	} else if (rc == 0) {
		fprintf(stderr, "sandbox-manager: the manager closed the connection without answering\n");
	}
	if (fd >= 0)
		close(fd);
	json_decref(request);
	return response;
}

/* Print a response: its error on stderr (exit 125), or the object without "ok" as JSON. */
static int print_response(json_t *response)
{
	char *text;

	if (response == NULL)
		return MCLI_FAILED;
	if (!json_is_true(json_object_get(response, "ok"))) {
		json_t *e = json_object_get(response, "error");

		fprintf(stderr, "sandbox-manager: %s: %s\n", json_string_value(json_object_get(e, "kind")) ?: "error",
			json_string_value(json_object_get(e, "message")) ?: "(no message)");
		json_decref(response);
		return MCLI_FAILED;
	}
	json_object_del(response, "ok");
	text = json_dumps(response, JSON_INDENT(2) | JSON_SORT_KEYS);
	printf("%s\n", text ? text : "{}");
	free(text);
	json_decref(response);
	return 0;
}

/* A request that could not be built whole is not sent: a missing member would change what it asks. */
static int request_fail(json_t *req)
{
	json_decref(req);
	fprintf(stderr, "sandbox-manager: cannot build the request (out of memory, or text that is not UTF-8)\n");
	return MCLI_FAILED;
}

static int usage(const char *text)
{
	fprintf(stderr, "usage: %s\n", text);
	return MCLI_USAGE;
}

/* getopt_long over argv with the given long options; each option's value goes into vals[i]
 * (repeatable ones into the array at multi). Returns optind, or -1 on an unknown option. */
struct flag {
	const char *name;
	int has_arg;
	const char *value;
	json_t *values;   /* non-NULL: repeatable, collected here */
	int set;
};

static int flags_parse(int argc, char **argv, struct flag *flags, size_t n)
{
	struct option longopts[16];
	int opt;

	for (size_t i = 0; i < n && i < 15; i++)
		longopts[i] = (struct option){ flags[i].name, flags[i].has_arg, NULL, (int)i + 256 };
	longopts[n < 15 ? n : 15] = (struct option){ NULL, 0, NULL, 0 };
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		struct flag *f;

		if (opt < 256 || (size_t)(opt - 256) >= n) {
			fprintf(stderr, "sandbox-manager: unknown or incomplete option '%s'\n", argv[optind - 1]);
			return -1;
		}
		f = &flags[opt - 256];
		f->set = 1;
		f->value = optarg;
		if (f->values != NULL)
			json_array_append_new(f->values, json_string(optarg));
	}
	return optind;
}

/* ---- session ---- */

static int session_create(int argc, char **argv)
{
	struct flag f[] = { { "identity", 1, NULL, NULL, 0 }, { "repo", 1, NULL, NULL, 0 },
			    { "branch", 1, NULL, NULL, 0 },   { "grant", 1, NULL, json_array(), 0 },
			    { "socket", 1, NULL, NULL, 0 } };
	const char *u = "sandbox-manager session create --identity ID --repo PATH_OR_URL [--branch B] "
			"[--grant RES=ACCESS]... [--socket PATH]";
	json_t *req;

	if (flags_parse(argc, argv, f, 5) != argc || !f[0].set || !f[1].set) {
		json_decref(f[3].values);
		return usage(u);
	}
	req = json_pack("{s:s, s:s, s:s, s:s?, s:o}", "op", "session.create", "identity", f[0].value, "repo",
			f[1].value, "branch", f[2].value, "grants", f[3].values);
	return print_response(mcli_call(f[4].value, req));
}

static int session_simple(int argc, char **argv, const char *op, const char *u)
{
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "socket", 1, NULL, NULL, 0 },
			    { "delete-branch", 0, NULL, NULL, 0 } };
	json_t *req;

	if (flags_parse(argc, argv, f, 3) != argc || !f[0].set)
		return usage(u);
	req = json_pack("{s:s, s:s, s:b}", "op", op, "session", f[0].value, "delete_branch", f[2].set);
	return print_response(mcli_call(f[1].value, req));
}

int mcli_session(int argc, char **argv)
{
	const char *sub = argc >= 2 ? argv[1] : "";

	if (strcmp(sub, "create") == 0)
		return session_create(argc - 1, argv + 1);
	if (strcmp(sub, "show") == 0)
		return session_simple(argc - 1, argv + 1, "session.show",
				      "sandbox-manager session show --session S [--socket PATH]");
	if (strcmp(sub, "delete") == 0)
		return session_simple(argc - 1, argv + 1, "session.delete",
				      "sandbox-manager session delete --session S [--delete-branch] [--socket PATH]");
	return usage("sandbox-manager session create|show|delete ...");
}

/* ---- exec ---- */

/* The result's text back to the command's bytes, by the exec result's one rule (common/textesc.h,
 * docs/operations.md). Written with its length: plain text may hold control bytes (never NUL). */
static void stream_write(FILE *out, const char *text, size_t len, int escaped)
{
	uint8_t *raw;

	if (!escaped) {
		fwrite(text, 1, len, out);
	} else if ((raw = malloc(len + 1)) == NULL) {
		fprintf(stderr, "sandbox-manager: out of memory decoding %zu bytes of output\n", len);
	} else {
		fwrite(raw, 1, textesc_decode(text, len, raw), out);
		free(raw);
	}
	fflush(out);
}

static int exec_exit_code(json_t *result)
{
	const char *status = json_string_value(json_object_get(result, "status")) ?: "";

	if (strcmp(status, "exited") == 0)
		return (int)json_integer_value(json_object_get(result, "exit_code"));
	if (strcmp(status, "signaled") == 0)
		return 128 + (int)json_integer_value(json_object_get(result, "signal"));
	if (strcmp(status, "timed_out") == 0)
		return MCLI_TIMEOUT;
	return MCLI_FAILED;
}

static int exec_print(json_t *result, int as_json)
{
	json_t *out = json_object_get(result, "stdout"), *err = json_object_get(result, "stderr");
	const char *status = json_string_value(json_object_get(result, "status")) ?: "?";
	const char *why = json_string_value(json_object_get(result, "error"));
	int code = exec_exit_code(result);

	if (as_json) {
		char *text = json_dumps(result, JSON_COMPACT);

		printf("%s\n", text ? text : "{}");
		free(text);
		return code;
	}
	stream_write(stdout, json_string_value(out) ?: "", json_string_length(out),
		     json_is_true(json_object_get(result, "stdout_escaped")));
	stream_write(stderr, json_string_value(err) ?: "", json_string_length(err),
		     json_is_true(json_object_get(result, "stderr_escaped")));
	if (strcmp(status, "timed_out") == 0)
		fprintf(stderr, "sandbox-manager: the command timed out\n");
	else if (code == MCLI_FAILED)
		fprintf(stderr, "sandbox-manager: the command's outcome is %s%s%s\n", status, why ? ": " : "", why ? why : "");
	return code;
}

int mcli_exec(int argc, char **argv)
{
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "timeout-seconds", 1, NULL, NULL, 0 },
			    { "json", 0, NULL, NULL, 0 },    { "socket", 1, NULL, NULL, 0 },
			    { "turn", 1, NULL, NULL, 0 } };
	const char *u = "sandbox-manager exec --session S [--timeout-seconds N] [--turn N] [--json] [--socket PATH] -- COMMAND";
	json_t *req, *resp, *result;
	char *end;
	int i = flags_parse(argc, argv, f, 5), code;

	if (i < 0 || !f[0].set || i != argc - 1 || strcmp(argv[i - 1], "--") != 0)
		return usage(u);
	req = json_pack("{s:s, s:s, s:s}", "op", "exec", "session", f[0].value, "command", argv[i]);
	if (f[1].set) {
		long v = strtol(f[1].value, &end, 10);

		if (*end != '\0' || f[1].value[0] == '\0' || v < 1) {
			json_decref(req);
			return usage("--timeout-seconds takes a whole number of seconds, at least 1");
		}
		/* Unset, the manager would use its default timeout instead of the one asked for. */
		if (json_object_set_new(req, "timeout_seconds", json_integer(v)) != 0) {
			return request_fail(req);
		}
	}
	if (f[4].set) {
		long v = strtol(f[4].value, &end, 10);

		if (*end != '\0' || f[4].value[0] == '\0' || v < 0) {
			json_decref(req);
			return usage("--turn takes a non-negative number");
		}
		if (json_object_set_new(req, "turn", json_integer(v)) != 0) {
			return request_fail(req);
		}
	}
	resp = mcli_call(f[3].value, req);
	if (resp == NULL)
		return MCLI_FAILED;
	result = json_object_get(resp, "result");
	if (!json_is_true(json_object_get(resp, "ok")) || !json_is_object(result))
		return print_response(resp);
	code = exec_print(result, f[2].set);
	json_decref(resp);
	return code;
}

/* ---- cancel, grant, records ---- */

int mcli_cancel(int argc, char **argv)
{
	return session_simple(argc, argv, "cancel", "sandbox-manager cancel --session S [--socket PATH]");
}

/* A page of records: newest first; the answer's "next_before", when present, is what --before
 * takes for the next page (DESIGN.md; the manager bounds every page, invariant 13). */
int mcli_records(int argc, char **argv)
{
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "exec", 1, NULL, NULL, 0 },
			    { "limit", 1, NULL, NULL, 0 },   { "before", 1, NULL, NULL, 0 },
			    { "state", 1, NULL, NULL, 0 },   { "socket", 1, NULL, NULL, 0 } };
	const char *u = "sandbox-manager records (--session S [--limit N] [--before EXEC] [--state STATE] | --exec ID) "
			"[--socket PATH]";
	json_t *req;
	char *end;
	long limit = 0;

	if (flags_parse(argc, argv, f, 6) != argc || f[0].set == f[1].set ||
	    (f[1].set && (f[2].set || f[3].set || f[4].set)))
		return usage(u);
	if (f[2].set) {
		limit = strtol(f[2].value, &end, 10);
		if (*end != '\0' || f[2].value[0] == '\0' || limit < 1 || limit > 1000000)
			return usage("--limit takes a whole number of records, at least 1");
	}
	req = json_pack("{s:s, s:s*, s:s*, s:s*, s:s*}", "op", "records", "session", f[0].value, "exec", f[1].value,
			"before", f[3].value, "state", f[4].value);
	/* A request without its limit would ask for another page than the one named: not sent. */
	if (req == NULL || (limit > 0 && json_object_set_new(req, "limit", json_integer(limit)) != 0))
		return request_fail(req);
	return print_response(mcli_call(f[5].value, req));
}

int mcli_grant(int argc, char **argv)
{
	struct flag f[] = { { "session", 1, NULL, NULL, 0 }, { "set", 1, NULL, NULL, 0 },
			    { "revoke", 1, NULL, NULL, 0 },  { "socket", 1, NULL, NULL, 0 } };
	json_t *req;

	if (flags_parse(argc, argv, f, 4) != argc || !f[0].set || f[1].set == f[2].set)
		return usage("sandbox-manager grant --session S (--set RES=ACCESS | --revoke RES) [--socket PATH]");
	req = json_pack("{s:s, s:s, s:s?, s:s?}", "op", "grant", "session", f[0].value, "set", f[1].value, "revoke",
			f[2].value);
	return print_response(mcli_call(f[3].value, req));
}
