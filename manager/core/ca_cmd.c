/* `sandbox-manager ca issue`: a client certificate for a principal of the control API over TLS
 * (docs/operations.md), from the manager's CA (<state-dir>/ca) or the operator's own (--ca DIR,
 * never created here). Writes the key 0600 into a directory of the operator's; never prints a key. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/x509_crt.h>

#include "ca.h"
#include "control_tls.h"
#include "manager.h"
#include "opts.h"

#define CA_CMD_DAYS_DEFAULT 30
#define CA_CMD_DAYS_MAX 825

static const char ca_usage[] =
	"usage: sandbox-manager ca issue (--principal NAME | --server-name NAME) --out DIR\n"
	"                                (--state-dir DIR | --ca DIR) [--days N]\n"
	"\n"
	"  --principal NAME  the principal ([a-z0-9-], up to 63): the certificate names\n"
	"                    NAME" CONTROL_TLS_SUFFIX "\n"
	"  --server-name NAME  a manager's server certificate instead (DIR/server.crt, .key): NAME is how\n"
	"                    clients reach it (its host name or address); for managers that share the\n"
	"                    operator's CA (serve --tls-cert/--tls-key/--tls-client-ca)\n"
	"  --out DIR         writes DIR/NAME.crt, DIR/NAME.key (0600) and DIR/ca.crt (to verify the manager)\n"
	"  --state-dir DIR   the manager's CA in DIR/ca (made at the manager's first start)\n"
	"  --ca DIR          the operator's own CA instead: DIR/ca.crt and DIR/ca.key (ECDSA P-256)\n"
	"  --days N          lifetime, 1 to 825 days (default 30)\n";

/* The serial of the certificate just written, for the deny list. */
static void serial_print(const char *crt_path, char *out, size_t len)
{
	mbedtls_x509_crt crt;

	out[0] = '\0';
	mbedtls_x509_crt_init(&crt);
	if (mbedtls_x509_crt_parse_file(&crt, crt_path) == 0)
		for (size_t i = 0, used = 0; i < crt.serial.len && used + 3 <= len; i++, used += 2)
			snprintf(out + used, 3, "%02x", crt.serial.p[i]);
	mbedtls_x509_crt_free(&crt);
}

/* principal NULL: a server certificate for server_name, written as DIR/server.{crt,key}. */
static int ca_issue(const char *principal, const char *server_name, const char *out, const char *ca_dir, long days,
		    struct sb_err *err)
{
	char name[TLS_NAME_MAX + 1], crt_path[PATH_MAX], serial[TLS_SERIAL_HEX_MAX + 1];
	struct ca_leaf leaf = { .dns_name = name, .usage = principal ? CA_USAGE_CLIENT : CA_USAGE_SERVER };
	const char *base = principal ? principal : "server";
	struct stat st;
	struct ca *ca;
	json_t *said;
	int rc;

	if (principal != NULL && (principal[0] == '\0' || strlen(principal) > TLS_PRINCIPAL_MAX ||
				  strspn(principal, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(principal)))
		return sb_invalid(err, "--principal must be 1 to %d of [a-z0-9-], not '%.80s'", TLS_PRINCIPAL_MAX, principal);
	if (principal != NULL)
		snprintf(name, sizeof name, "%s%s", principal, CONTROL_TLS_SUFFIX);
	else if (tls_check_name(server_name, "--server-name", err) < 0)
		return -1;
	else
		snprintf(name, sizeof name, "%s", server_name);
	if (snprintf(crt_path, sizeof crt_path, "%s/ca.crt", ca_dir) >= (int)sizeof crt_path || stat(crt_path, &st) < 0)
		return sb_fail_errno(err, "no CA at %s (start the manager once, or give --ca DIR holding ca.crt and ca.key)",
				     ca_dir);
	leaf.not_after = time(NULL) + days * 86400;
	/* The key goes there: made private when new; an existing directory is the operator's choice. */
	if (mkdir(out, 0700) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", out);
	if (ca_open(ca_dir, &ca, err) < 0)
		return -1;
	rc = ca_issue_leaf(ca, &leaf, out, base, err);
	if (rc == 0)
		rc = ca_write_cert(ca, out, "ca.crt", err);
	ca_free(ca);
	if (rc < 0)
		return -1;
	snprintf(crt_path, sizeof crt_path, "%s/%s.crt", out, base);
	serial_print(crt_path, serial, sizeof serial);
	said = json_pack("{s:s, s:s, s:s, s:I}", principal ? "principal" : "server_name", principal ?: server_name,
			 "cert", crt_path, "serial", serial, "not_after", (json_int_t)leaf.not_after);
	if (said != NULL) {
		json_object_set_new(said, "key", json_sprintf("%s/%s.key", out, base));
		json_object_set_new(said, "ca", json_sprintf("%s/ca.crt", out));
		json_dumpf(said, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
		putchar('\n');
	}
	json_decref(said);
	return 0;
}

int ca_cmd(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "principal", 1, NULL, 0 }, { "out", 1, NULL, 0 }, { "state-dir", 1, NULL, 0 },
		{ "ca", 1, NULL, 0 },        { "days", 1, NULL, 0 }, { "server-name", 1, NULL, 0 },
		{ "help", 0, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *v[6] = { NULL, NULL, NULL, NULL, NULL, NULL };
	char ca_dir[PATH_MAX];
	struct sb_err err;
	long days = CA_CMD_DAYS_DEFAULT;
	char *end;
	int idx, opt;

	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(ca_usage, stdout);
		return 0;
	}
	if (argc < 2 || strcmp(argv[1], "issue") != 0) {
		fprintf(stderr, "sandbox-manager ca: the one subcommand is issue\n%s", ca_usage);
		return 2;
	}
	opts_reset();
	while ((opt = opts_next(argc - 1, argv + 1, "h", longopts, &idx, &err)) != OPTS_END) {
		if (opt == 'h') {
			fputs(ca_usage, stdout);
			return 0;
		}
		if (opt == OPTS_BAD) {
			fprintf(stderr, "sandbox-manager ca issue: %s\n%s", err.msg, ca_usage);
			return 2;
		}
		v[idx] = optarg;
	}
	if ((v[0] == NULL) == (v[5] == NULL) || v[1] == NULL || (v[2] == NULL) == (v[3] == NULL)) {
		fprintf(stderr, "sandbox-manager ca issue: one of --principal or --server-name, --out and one of "
				"--state-dir or --ca are required\n%s", ca_usage);
		return 2;
	}
	if (v[4] != NULL) {
		errno = 0;
		days = strtol(v[4], &end, 10);
		if (*end != '\0' || errno != 0 || days < 1 || days > CA_CMD_DAYS_MAX) {
			fprintf(stderr, "sandbox-manager ca issue: --days takes 1 to %d\n", CA_CMD_DAYS_MAX);
			return 2;
		}
	}
	snprintf(ca_dir, sizeof ca_dir, v[3] != NULL ? "%s" : "%s/ca", v[3] != NULL ? v[3] : v[2]);
	sb_err_clear(&err);
	if (ca_issue(v[0], v[5], v[1], ca_dir, days, &err) < 0) {
		fprintf(stderr, "sandbox-manager ca issue: %s\n", err.msg);
		return 125;
	}
	return 0;
}
