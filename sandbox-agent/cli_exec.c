/* `sandbox-agent exec`: a thin front end over the boundary, the same path `serve` uses.
 * Parses flags, prepares the boundary, runs one command, writes its receipt, prints the
 * result JSON. Treats every flag as untrusted input with a clear error. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "boundary.h"
#include "privdir.h"
#include "log.h"
#include "names.h"
#include "opts.h"
#include "random.h"
#include "receipt.h"
#include "result.h"
#include "secret.h"
#include "steptime.h"
#include "textesc.h"

#define DEFAULT_TIMEOUT 120
#define MAX_TIMEOUT 86400
#define DEFAULT_OUTPUT_LIMIT (1024 * 1024)
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define ENV_ENTRY_BYTES (PATH_MAX + 16) /* an entry past it is cut, as before */

struct exec_cli {
	struct exec_request req;
	struct boundary_options bopts;
	uint16_t ports[BOUNDARY_MAX_PORTS];
	char cwd[PATH_MAX];
	char receipt_dir[PATH_MAX];
	struct privdir receipts;  /* held from before the command to the receipt's write */
	const char *hide_args[BOUNDARY_MAX_HIDDEN];
	size_t n_hide_args;
	char *user_env[BOUNDARY_MAX_ENV];
	size_t n_user_env;
	/* The eight entries env_build writes, one after the other: they touch one page or two of this
	 * static struct, not one each (a first touch is a page fault, docs/performance.md). */
	char env_store[8 * ENV_ENTRY_BYTES];
	char *nonce_arg;          /* points into argv: wiped after parsing */
	bool receipt_dir_given;
};

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "sandbox-agent exec: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nusage: sandbox-agent exec [--cwd DIR] [--timeout-seconds N] [--output-limit BYTES]\n"
			"         [--nonce HEX] [--receipt-dir DIR] [--block-port PORT]... [--exec-id ID]\n"
			"         [--generation N] [--env NAME=VALUE]... [--hide DIR]... [--max-processes N]\n"
			"         [--writable PATH]... [--tmp-size BYTES]\n"
			"         -- COMMAND\n");
	return CLI_USAGE;
}

/* strtoul with the whole string, a range and no sign: "12x", "-1" and "" are errors. */
static int parse_number(const char *s, unsigned long min, unsigned long max, unsigned long *out)
{
	char *end;

	if (s[0] < '0' || s[0] > '9')
		return -1;
	errno = 0;
	*out = strtoul(s, &end, 10);
	return (errno != 0 || *end != '\0' || *out < min || *out > max) ? -1 : 0;
}

/* NAME=VALUE whose name passes common/names.c env_name_valid. */
static bool env_arg_valid(const char *kv)
{
	const char *eq = strchr(kv, '=');

	return eq != NULL && env_name_valid(kv, (size_t)(eq - kv));
}

static int option_apply(struct exec_cli *c, int opt, const char *arg)
{
	unsigned long v;

	switch (opt) {
	case 'c':
		if (realpath(arg, c->cwd) == NULL)
			return usage_error("--cwd: cannot resolve '%s'", arg);
		return 0;
	case 't':
		if (parse_number(arg, 1, MAX_TIMEOUT, &v) < 0)
			return usage_error("--timeout-seconds: '%s' is not a number from 1 to 86400", arg);
		c->req.timeout_seconds = (unsigned)v;
		return 0;
	case 'o':
		if (parse_number(arg, 0, OUTPUT_LIMIT_MAX, &v) < 0)
			return usage_error("--output-limit: '%s' is not a byte count up to 67108864", arg);
		c->req.output_limit = v;
		return 0;
	case 'n':
		c->nonce_arg = (char *)arg;
		return 0;
	case 'r':
		if (realpath(arg, c->receipt_dir) == NULL)
			return usage_error("--receipt-dir: cannot resolve '%s'", arg);
		c->receipt_dir_given = true;
		return 0;
	case 'p':
		if (parse_number(arg, 1, 65535, &v) < 0)
			return usage_error("--block-port: '%s' is not a port from 1 to 65535", arg);
		if (c->bopts.n_block_ports >= BOUNDARY_MAX_PORTS)
			return usage_error("--block-port: more than 64 ports%s", "");
		c->ports[c->bopts.n_block_ports++] = (uint16_t)v;
		return 0;
	case 'i':
		if (strlen(arg) > EXEC_ID_MAX)
			return usage_error("--exec-id: '%s' is longer than 64 characters", arg);
		snprintf(c->req.exec_id, sizeof c->req.exec_id, "%s", arg);
		return 0;
	case 'g':
		if (parse_number(arg, 0, ULONG_MAX, &v) < 0)
			return usage_error("--generation: '%s' is not a number", arg);
		c->req.generation = v;
		return 0;
	case 'e':
		if (!env_arg_valid(arg) || c->n_user_env >= BOUNDARY_MAX_ENV - 10)
			return usage_error("--env: '%s' is not NAME=VALUE with a valid name (or too many)", arg);
		c->user_env[c->n_user_env++] = (char *)arg;
		return 0;
	case 'h':
		if (c->n_hide_args >= BOUNDARY_MAX_HIDDEN - 1)
			return usage_error("--hide: too many directories%s", "");
		c->hide_args[c->n_hide_args++] = arg;
		return 0;
	case 'w':
		if (c->bopts.n_writable >= BOUNDARY_MAX_WRITABLE - 1)
			return usage_error("--writable: more than %s roots", "15");
		c->bopts.writable[c->bopts.n_writable++] = arg;
		return 0;
	case 'T':
		if (parse_number(arg, 1 << 20, 1ul << 40, &v) < 0)
			return usage_error("--tmp-size: '%s' is not a byte count from 1048576 (1 MiB) to 2^40", arg);
		c->bopts.tmp_bytes = v;
		return 0;
	case 'm':
		if (parse_number(arg, 16, 1000000, &v) < 0)
			return usage_error("--max-processes: '%s' is not a number from 16 to 1000000", arg);
		c->bopts.max_processes = v;
		return 0;
	default:
		return usage_error("unknown option%s", "");
	}
}

static int options_parse(struct exec_cli *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cwd", required_argument, NULL, 'c' },           { "timeout-seconds", required_argument, NULL, 't' },
		{ "output-limit", required_argument, NULL, 'o' },  { "nonce", required_argument, NULL, 'n' },
		{ "receipt-dir", required_argument, NULL, 'r' },   { "block-port", required_argument, NULL, 'p' },
		{ "exec-id", required_argument, NULL, 'i' },       { "generation", required_argument, NULL, 'g' },
		{ "env", required_argument, NULL, 'e' },           { "hide", required_argument, NULL, 'h' },
		{ "max-processes", required_argument, NULL, 'm' }, { "writable", required_argument, NULL, 'w' },
		{ "tmp-size", required_argument, NULL, 'T' },      { NULL, 0, NULL, 0 },
	};
	struct sb_err err;
	int opt, rc;

	opts_reset();
	while ((opt = opts_next(argc, argv, "", longopts, NULL, &err)) != OPTS_END) {
		if (opt == OPTS_BAD)
			return usage_error("%s", err.msg);
		if ((rc = option_apply(c, opt, optarg)) != 0)
			return rc;
	}
	if (optind < 2 || strcmp(argv[optind - 1], "--") != 0)
		return usage_error("the command must follow '--'%s", "");
	if (argc - optind != 1)
		return usage_error("expected exactly one COMMAND after '--' (quote it: -- 'echo hi')%s", "");
	c->req.command = argv[optind];
	return 0;
}

/* The receipt directory, held from here on: the default one per user (created 0700 in a parent
 * of ours), or --receipt-dir. Either must be ours and private, or someone else could have made
 * it first and read our receipts; opened without following any link. */
static int receipt_dir_open(struct exec_cli *c, struct sb_err *err)
{
	const char *run = getenv("XDG_RUNTIME_DIR");
	struct privdir base;
	int rc;

	if (c->receipt_dir_given)
		return privdir_open(&c->receipts, c->receipt_dir, false, 077, err);
	if (run != NULL && run[0] == '/')
		rc = snprintf(c->receipt_dir, sizeof c->receipt_dir, "%s/sandbox-agent", run);
	else
		rc = snprintf(c->receipt_dir, sizeof c->receipt_dir, "/tmp/sandbox-agent-%u", (unsigned)geteuid());
	if (rc < 0 || (size_t)rc >= sizeof c->receipt_dir)
		return sb_fail(err, ENAMETOOLONG, "the default receipt directory's path is too long");
	if (privdir_open(&base, c->receipt_dir, true, 077, err) < 0)
		return -1;
	rc = privdir_open_at(&c->receipts, &base, "receipts", true, 077, err);
	privdir_close(&base);
	if (rc == 0)
		snprintf(c->receipt_dir, sizeof c->receipt_dir, "%s", c->receipts.path);
	return rc;
}

/* Entry n of the command's environment, fmt with one value, written where the last one ended. */
static void env_put(struct exec_cli *c, size_t *used, size_t n, const char *fmt, const char *value)
{
	char *at = c->env_store + *used;
	int len = snprintf(at, ENV_ENTRY_BYTES, fmt, value);

	if (len < 0) {
		at[0] = '\0';
		len = 0;
	}
	/* Each entry has ENV_ENTRY_BYTES of room (a longer one is cut), the eight together the whole
	 * store. */
	*used += (size_t)len < ENV_ENTRY_BYTES ? (size_t)len + 1 : ENV_ENTRY_BYTES;
	c->req.env[n] = at;
}

static void env_build(struct exec_cli *c, const char *shell)
{
	const char *tmp = "/tmp";
	size_t n = 0, used = 0;

	for (size_t i = 0; i < c->n_user_env; i++)
		if (strncmp(c->user_env[i], "TMPDIR=", 7) == 0)
			tmp = c->user_env[i] + 7;
	/* Built from nothing: the agent's own environment never leaks into a command. The
	 * user's --env entries come last, and bash takes the last of duplicate names. */
	env_put(c, &used, n++, "PATH=%s", DEFAULT_PATH);
	env_put(c, &used, n++, "HOME=%s", tmp);
	env_put(c, &used, n++, "LANG=%s", "C.UTF-8");
	env_put(c, &used, n++, "TMPDIR=%s", tmp);
	env_put(c, &used, n++, "TMP=%s", tmp);
	env_put(c, &used, n++, "TEMP=%s", tmp);
	env_put(c, &used, n++, "PWD=%s", c->cwd);
	env_put(c, &used, n++, "SHELL=%s", shell);
	for (size_t i = 0; i < c->n_user_env; i++)
		c->req.env[n++] = c->user_env[i];
	c->req.n_env = n;
}

static int print_json(json_t *obj)
{
	char *text = obj ? textesc_json_dumps(obj, JSON_COMPACT) : NULL;

	json_decref(obj);
	if (text == NULL) {
		fprintf(stderr, "sandbox-agent exec: could not serialise the result\n");
		return CLI_FAILED;
	}
	printf("%s\n", text);
	free(text);
	return fflush(stdout) == 0 ? 0 : CLI_FAILED;
}

/* Nothing ran: still one JSON object on stdout, so callers parse one shape. */
static int print_refused(const struct exec_cli *c, const struct sb_err *err)
{
	fprintf(stderr, "sandbox-agent exec: refused: %s\n", err->msg);
	return print_json(json_pack("{s:s, s:s, s:n, s:n, s:s, s:s, s:i, s:i, s:b, s:b, s:i, s:s, s:n}", "exec_id",
				    c->req.exec_id, "status", "refused", "exit_code", "signal", "stdout", "",
				    "stderr", "", "stdout_bytes", 0, "stderr_bytes", 0, "stdout_truncated", 0,
				    "stderr_truncated", 0, "duration_ms", 0, "error", err->msg, "receipt"));
}

static int nonce_take(struct exec_cli *c, struct secrets *sec, struct sb_err *err)
{
	if (c->nonce_arg == NULL)
		return sb_random_bytes(sec->nonce, sizeof sec->nonce, err);
	if (sb_hex_decode(c->nonce_arg, sec->nonce, sizeof sec->nonce, err) < 0) {
		sb_err_prefix(err, "--nonce");
		return -1;
	}
	/* /proc/PID/cmdline shows argv's memory as it is now, to anyone: wipe the nonce there
	 * before init (a copy of this process) exists. */
	explicit_bzero(c->nonce_arg, strlen(c->nonce_arg));
	return 0;
}

static int exec_run(struct exec_cli *c, struct secrets *sec)
{
	struct boundary b = { 0 };
	struct exec_outcome out;
	struct receipt_info receipt = { 0 }; /* no room taken (receipt.h) */
	struct sb_err err;
	int rc;

	sb_err_clear(&err);
	/* The read-only world: the host view read-only but the working directory and --writable
	 * roots, a fresh /dev and a private /tmp (mounts.c). */
	c->bopts.readonly_world = true;
	c->bopts.block_ports = c->ports;
	hidden_dir_from_privdir(&c->bopts.hidden[c->bopts.n_hidden++], &c->receipts);
	for (size_t i = 0; i < c->n_hide_args; i++)
		if (hidden_dir_from_path(&c->bopts.hidden[c->bopts.n_hidden++], c->hide_args[i], &err) < 0)
			return print_refused(c, &err);
	if (secrets_key_load(sec, &c->receipts, &err) < 0 || boundary_prepare(&b, &c->bopts, &err) < 0 ||
	    receipt_reserve_check(&c->receipts, c->req.exec_id, &err) < 0) {
		boundary_free(&b);
		return print_refused(c, &err);
	}
	steptime_mark(STEP_PREPARED);
	env_build(c, b.shell);
	if (boundary_run(&b, &c->req, -1, &out, &err) < 0) {
		boundary_free(&b);
		return print_refused(c, &err);
	}
	boundary_free(&b);
	if (receipt_write(&c->receipts, &c->req, &out, sec, &receipt, &err) < 0) {
		/* No receipt means no proof: the outcome cannot stand as reported. */
		sb_warn("exec %s: %s", c->req.exec_id, err.msg);
		out.status = EXEC_UNCERTAIN;
		/* For people: the cause is cut to fit detail on purpose. */
		snprintf(out.detail, sizeof out.detail, "receipt not written: %.1000s", err.msg);
	}
	steptime_mark(STEP_RECEIPT);
	rc = print_json(result_to_json(&c->req, &out, &receipt));
	steptime_mark(STEP_END);
	steptime_report("exec");
	receipt_info_free(&receipt);
	exec_outcome_free(&out);
	return rc;
}

int cli_exec(int argc, char **argv)
{
	static struct exec_cli c;
	struct secrets *sec;
	struct sb_err err;
	int rc;

	c.req.timeout_seconds = DEFAULT_TIMEOUT;
	c.req.output_limit = DEFAULT_OUTPUT_LIMIT;
	if ((rc = options_parse(&c, argc, argv)) != 0)
		return rc;
	if (c.cwd[0] == '\0' && getcwd(c.cwd, sizeof c.cwd) == NULL)
		return usage_error("cannot read the current directory; pass --cwd%s", "");
	c.req.cwd = c.cwd;
	sb_err_clear(&err);
	if ((c.req.exec_id[0] == '\0' && sb_random_hex(c.req.exec_id, 8, &err) < 0) ||
	    receipt_dir_open(&c, &err) < 0) {
		fprintf(stderr, "sandbox-agent exec: %s\n", err.msg);
		return CLI_FAILED;
	}
	sec = secrets_alloc(&err);
	if (sec == NULL || nonce_take(&c, sec, &err) < 0) {
		fprintf(stderr, "sandbox-agent exec: %s\n", err.msg);
		secrets_free(sec);
		return c.nonce_arg ? CLI_USAGE : CLI_FAILED;
	}
	rc = exec_run(&c, sec);
	secrets_free(sec);
	privdir_close(&c.receipts);
	return rc;
}
