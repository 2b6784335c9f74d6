/* Configuration (see config.h). Owns the defaults and their reasons. */
#include "backend.h"
#include "config.h"
#include "identity_ids.h"
#include "jsonfile.h"
#include "metrics_http.h"
#include "opts.h"
#include "pathfmt.h"
#include "tls.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT 120
#define MAX_TIMEOUT 600
#define IDLE_SECONDS 900
#define SANDBOXES_PER_IDENTITY 32
/* Under systemd's default TimeoutStopSec (90 s) with room for the cancel's evidence after it. */
#define STOP_GRACE_SECONDS 30
#define OUTPUT_LIMIT (1024 * 1024)
/* A record keeps less than a call's answer: the answer is read once, records are listed and paged
 * (records.h RECORDS_OUTPUT_LIMIT_DEFAULT; the byte counts and digests of the whole streams stay). */
#define RECORD_OUTPUT_LIMIT (64 * 1024)
/* A session's lease (issue 19): a dead owner's sessions wait this long before another manager may
 * take them over; renewed every third of it, so a manager must miss two renewals to lose them. */
#define LEASE_MS 10000

static int str_set(char *dst, size_t len, const char *value, const char *key, struct sb_err *err)
{
	if (strlen(value) >= len)
		return sb_fail(err, ENAMETOOLONG, "config: %s is too long", key);
	memcpy(dst, value, strlen(value) + 1);
	return 0;
}

static int uint_set(unsigned long *dst, const char *value, unsigned long min, unsigned long max, const char *key,
		    struct sb_err *err)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(value, &end, 10);
	if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max)
		return sb_invalid(err, "config: %s must be a whole number from %lu to %lu, not '%s'", key, min, max,
				  value);
	*dst = v;
	return 0;
}

/* Bytes, with an optional K, M or G suffix (powers of 1024): "256M", "1G", "65536". */
static int bytes_set(int64_t *dst, const char *value, int64_t min, int64_t max, const char *key, struct sb_err *err)
{
	char *end;
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(value, &end, 10);
	if (*end == 'K' || *end == 'k')
		shift = 10;
	else if (*end == 'M' || *end == 'm')
		shift = 20;
	else if (*end == 'G' || *end == 'g')
		shift = 30;
	if (shift != 0)
		end++;
	if (value[0] < '0' || value[0] > '9' || *end != '\0' || errno != 0 || v > (unsigned long long)max >> shift ||
	    (int64_t)(v << shift) < min)
		return sb_invalid(err, "config: %s must be a size from %lldM to %lldG (bytes, or with a K, M or G "
				  "suffix), not '%s'", key, (long long)(min >> 20), (long long)(max >> 30), value);
	*dst = (int64_t)(v << shift);
	return 0;
}

/* A manager id is a name in messages and in the store: letters, digits, '.', '_' and '-'. */
static bool manager_id_valid(const char *id)
{
	size_t n = strlen(id);

	return n >= 1 && n <= 64 &&
	       strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* The directory of this executable: the agent ships beside the manager (build/, /usr/lib/...). */
static int agent_default(char *out, size_t len, struct sb_err *err)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash;

	self[n > 0 ? n : 0] = '\0';
	slash = strrchr(self, '/');
	if (slash != NULL)
		*slash = '\0';
	return path_fmt(out, len, err, "%s/sandbox-agent", n > 0 ? self : ".");
}

/* A default path that does not fit is an error, never a shorter path naming another directory. */
static int defaults(struct config *c, struct sb_err *err)
{
	const char *state = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	int rc;

	memset(c, 0, sizeof *c);
	if (geteuid() == 0)
		rc = path_fmt(c->state_dir, sizeof c->state_dir, err, "/var/lib/infra-sandbox");
	else if (state != NULL && state[0] == '/')
		rc = path_fmt(c->state_dir, sizeof c->state_dir, err, "%s/infra-sandbox", state);
	else
		rc = path_fmt(c->state_dir, sizeof c->state_dir, err, "%s/.local/state/infra-sandbox", home ? home : "/tmp");
	if (rc < 0) {
		sb_err_prefix(err, "config: the default state-dir (from XDG_STATE_HOME or HOME)");
		return -1;
	}
	snprintf(c->backend, sizeof c->backend, "process");
	snprintf(c->podman_network, sizeof c->podman_network, "bridge");
	snprintf(c->network, sizeof c->network, "open");
	c->sandbox_nano_cpus = 2000000000;
	c->sandbox_memory_mib = 2048;
	c->sandbox_pids = 1024;
	/* Small: what a sandbox writes to /tmp and /dev/shm is host memory while it lives. */
	c->tmp_bytes = SANDBOX_TMP_BYTES_DEFAULT;
	c->shm_bytes = SANDBOX_SHM_BYTES_DEFAULT;
	if (agent_default(c->agent, sizeof c->agent, err) < 0) {
		sb_err_prefix(err, "config: the default agent beside this program");
		return -1;
	}
	c->default_timeout = DEFAULT_TIMEOUT;
	c->max_timeout = MAX_TIMEOUT;
	c->idle_seconds = IDLE_SECONDS;
	c->sandboxes_per_identity = SANDBOXES_PER_IDENTITY;
	c->stop_grace_seconds = STOP_GRACE_SECONDS;
	c->output_limit = OUTPUT_LIMIT;
	c->record_output_limit = RECORD_OUTPUT_LIMIT;
	c->lease_ms = LEASE_MS;
	c->disk_reserve = 64LL << 20;
	/* The host name: what `session show` names as a session's owner when the operator gave none. */
	if (gethostname(c->manager_id, sizeof c->manager_id - 1) < 0 || !manager_id_valid(c->manager_id))
		snprintf(c->manager_id, sizeof c->manager_id, "manager");
	c->resources = json_object();
	c->tls_listen = json_array();
	c->tls_names = json_array();
	/* Unprivileged, the manager can map only its own ids. As root it gives each identity ids of
	 * its own from sandbox-ids (identity_ids.c): never host root (backend.h), never nobody. */
	c->sandbox_uid = geteuid();
	c->sandbox_gid = getegid();
	return 0;
}

/* "1.5" CPUs, as podman --cpus takes them, to the API's billionths. */
static int cpus_set(int64_t *out, const char *value, struct sb_err *err)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(value, &end);
	if (errno != 0 || end == value || *end != '\0' || !(v >= 0.01 && v <= 1024))
		return sb_invalid(err, "config: sandbox-cpus must be a number of CPUs from 0.01 to 1024, not '%s'",
				  value);
	*out = (int64_t)(v * 1e9);
	return 0;
}

/* One setting by name, from the file or a flag: the same checks for both. */
static int setting_apply(struct config *c, const char *key, const char *value, struct sb_err *err)
{
	static const char *const podman_keys[] = { "podman-socket", "podman-seccomp", "podman-network", NULL };
	static const char *const k8s_keys[] = { "kubeconfig", "namespace", "k8s-volume", NULL };
	static const char *const limit_keys[] = { "sandbox-cpus", "sandbox-memory-mib", "sandbox-pids", NULL };
	unsigned long v;

	for (size_t i = 0; podman_keys[i] != NULL; i++)
		if (strcmp(key, podman_keys[i]) == 0)
			snprintf(c->podman_only, sizeof c->podman_only, "%s", key);
	for (size_t i = 0; k8s_keys[i] != NULL; i++)
		if (strcmp(key, k8s_keys[i]) == 0)
			snprintf(c->k8s_only, sizeof c->k8s_only, "%s", key);
	if (strcmp(key, "kubeconfig") == 0)
		return str_set(c->kubeconfig, sizeof c->kubeconfig, value, key, err);
	if (strcmp(key, "namespace") == 0)
		return str_set(c->k8s_namespace, sizeof c->k8s_namespace, value, key, err);
	if (strcmp(key, "k8s-volume") == 0)
		return str_set(c->k8s_volume, sizeof c->k8s_volume, value, key, err);
	for (size_t i = 0; limit_keys[i] != NULL; i++)
		if (strcmp(key, limit_keys[i]) == 0)
			snprintf(c->limit_given, sizeof c->limit_given, "%s", key);
	if (strcmp(key, "tmp-size") == 0 || strcmp(key, "shm-size") == 0)
		return bytes_set(key[0] == 't' ? &c->tmp_bytes : &c->shm_bytes, value, 1LL << 20, 64LL << 30, key, err);
	if (strcmp(key, "disk-reserve") == 0)
		return bytes_set(&c->disk_reserve, value, 0, 64LL << 30, key, err);
	if (strcmp(key, "cgroup-parent") == 0)
		return str_set(c->cgroup_parent, sizeof c->cgroup_parent, value, key, err);
	if (strcmp(key, "network") == 0) {
		if (strcmp(value, "open") != 0 && strcmp(value, "none") != 0 && strcmp(value, "proxy") != 0)
			return sb_invalid(err, "config: network must be open, none or proxy, not '%s'", value);
		return str_set(c->network, sizeof c->network, value, key, err);
	}

	if (strcmp(key, "state-dir") == 0)
		return str_set(c->state_dir, sizeof c->state_dir, value, key, err);
	if (strcmp(key, "volume") == 0)
		return str_set(c->volume, sizeof c->volume, value, key, err);
	if (strcmp(key, "socket") == 0)
		return str_set(c->socket, sizeof c->socket, value, key, err);
	if (strcmp(key, "backend") == 0) {
		if (strcmp(value, "process") != 0 && strcmp(value, "podman") != 0 && strcmp(value, "kubernetes") != 0)
			return sb_invalid(err, "config: backend must be process, podman or kubernetes, not '%s'", value);
		return str_set(c->backend, sizeof c->backend, value, key, err);
	}
	if (strcmp(key, "podman-socket") == 0)
		return str_set(c->podman_socket, sizeof c->podman_socket, value, key, err);
	if (strcmp(key, "image") == 0)
		return str_set(c->image, sizeof c->image, value, key, err);
	if (strcmp(key, "podman-seccomp") == 0)
		return str_set(c->podman_seccomp, sizeof c->podman_seccomp, value, key, err);
	if (strcmp(key, "podman-network") == 0)
		return str_set(c->podman_network, sizeof c->podman_network, value, key, err);
	if (strcmp(key, "sandbox-cpus") == 0)
		return cpus_set(&c->sandbox_nano_cpus, value, err);
	if (strcmp(key, "sandbox-memory-mib") == 0 || strcmp(key, "sandbox-pids") == 0) {
		if (uint_set(&v, value, 16, 1024 * 1024, key, err) < 0)
			return -1;
		*(key[8] == 'm' ? &c->sandbox_memory_mib : &c->sandbox_pids) = (int64_t)v;
		return 0;
	}
	if (strcmp(key, "agent") == 0)
		return str_set(c->agent, sizeof c->agent, value, key, err);
	if (strcmp(key, "default-timeout-seconds") == 0 || strcmp(key, "max-timeout-seconds") == 0 ||
	    strcmp(key, "idle-seconds") == 0) {
		if (uint_set(&v, value, 1, 86400, key, err) < 0)
			return -1;
		*(key[0] == 'd' ? &c->default_timeout : key[0] == 'm' ? &c->max_timeout : &c->idle_seconds) = (unsigned)v;
		return 0;
	}
	if (strcmp(key, "sandboxes-per-identity") == 0) {
		if (uint_set(&v, value, 1, 4096, key, err) < 0)
			return -1;
		c->sandboxes_per_identity = (unsigned)v;
		return 0;
	}
	if (strcmp(key, "sandbox-start") == 0) {
		if (strcmp(value, "call") != 0 && strcmp(value, "create") != 0)
			return sb_invalid(err, "config: sandbox-start must be call or create, not '%.32s'", value);
		c->start_at_create = strcmp(value, "create") == 0;
		return 0;
	}
	if (strcmp(key, "stop-grace-seconds") == 0) {
		if (uint_set(&v, value, 0, 86400, key, err) < 0)
			return -1;
		c->stop_grace_seconds = (unsigned)v;
		return 0;
	}
	if (strcmp(key, "sandbox-uid") == 0 || strcmp(key, "sandbox-gid") == 0)
		return sb_invalid(err, "config: %s is replaced by sandbox-ids START:COUNT: each identity's sandboxes "
				  "run as ids of its own from that range (docs/operations.md)", key);
	if (strcmp(key, "sandbox-ids") == 0)
		return strcmp(value, "subuid") == 0 ? identity_ids_subuid_range(c, err) :
		       strcmp(value, "own") == 0 && geteuid() != 0 ? (c->ids_own = true, 0) : identity_ids_parse(c, value, err);
	if (strcmp(key, "output-limit") == 0)
		return uint_set(&c->output_limit, value, 0, 1024 * 1024, key, err);
	if (strcmp(key, "record-output-limit") == 0)
		return uint_set(&c->record_output_limit, value, 256, 1024 * 1024, key, err);
	if (strcmp(key, "store") == 0) {
		/* Its form here (a usage error); whether it can be reached, when serve opens it. */
		if (strncmp(value, "postgres:", 9) != 0 && (strncmp(value, "sqlite:/", 8) != 0 || value[8] == '\0'))
			return sb_invalid(err, "config: store must be sqlite:PATH (PATH absolute) or postgres:CONNINFO "
					  "(libpq's key=value or URI; empty: the PG* environment), not '%.100s'", value);
		return str_set(c->store, sizeof c->store, value, key, err);
	}
	if (strcmp(key, "manager-id") == 0) {
		if (!manager_id_valid(value))
			return sb_invalid(err, "config: manager-id must be 1 to 64 letters, digits, '.', '_' or '-', "
					  "not '%.100s'", value);
		return str_set(c->manager_id, sizeof c->manager_id, value, key, err);
	}
	if (strcmp(key, "lease-ms") == 0)
		return uint_set(&c->lease_ms, value, 500, 3600 * 1000, key, err);
	if (strcmp(key, "metrics-listen") == 0)
		return metrics_http_check(value, err) < 0 ? -1 :
		       str_set(c->metrics_listen, sizeof c->metrics_listen, value, key, err);
	if (strcmp(key, "listen") == 0) {
		if (strncmp(value, "tls:", 4) != 0 || strrchr(value, ':') == value + 3 || strlen(value) > 300)
			return sb_invalid(err, "config: listen must be tls:HOST:PORT, not '%.100s'", value);
		return json_array_append_new(c->tls_listen, json_string(value + 4)) == 0 ? 0 :
		       sb_invalid(err, "config: listen '%.100s' is not valid UTF-8", value);
	}
	if (strcmp(key, "advertise") == 0) {
		if (strncmp(value, "tls://", 6) != 0 || strrchr(value, ':') == value + 3 || strlen(value) > 107)
			return sb_invalid(err, "config: advertise must be tls://HOST:PORT (at most 107 bytes), not '%.100s'",
					  value);
		return str_set(c->advertise, sizeof c->advertise, value, key, err);
	}
	if (strcmp(key, "tls-name") == 0) {
		if (tls_check_name(value, "config: tls-name", err) < 0)
			return -1;
		return json_array_append_new(c->tls_names, json_string(value)) == 0 ? 0 : sb_fail(err, ENOMEM, "tls-name");
	}
	if (strcmp(key, "tls-cert") == 0 || strcmp(key, "tls-key") == 0 || strcmp(key, "tls-client-ca") == 0 ||
	    strcmp(key, "tls-principals") == 0 || strcmp(key, "tls-deny") == 0) {
		char *dst = key[4] == 'c' && key[5] == 'e' ? c->tls_cert : key[4] == 'k' ? c->tls_key :
			    key[4] == 'c' ? c->tls_client_ca : key[4] == 'p' ? c->tls_principals : c->tls_deny;

		if (value[0] != '/')
			return sb_invalid(err, "config: %s must be an absolute path, not '%.100s'", key, value);
		return str_set(dst, PATH_MAX, value, key, err);
	}
	if (strcmp(key, "egress-allow") == 0) {
		if (egress_allow_add(&c->egress_allow, value, err) < 0) {
			sb_err_prefix(err, "config");
			return -1;
		}
		return 0;
	}
	if (strcmp(key, "resource") == 0) {
		const char *eq = strchr(value, '=');
		char name[128];

		if (eq == NULL || eq == value || (size_t)(eq - value) >= sizeof name || strchr(eq, ':') == NULL)
			return sb_invalid(err, "config: resource must be NAME=BROKER:ARG, not '%s'", value);
		memcpy(name, value, (size_t)(eq - value));
		name[eq - value] = '\0';
		return json_object_set_new(c->resources, name, json_string(eq + 1)) == 0 ? 0 :
		       sb_invalid(err, "config: resource '%s' is not valid UTF-8", value);
	}
	return sb_invalid(err, "config: unknown setting '%s'", key);
}

/* The file: {"state-dir": "...", "resource": ["a=file:/x"], "max-timeout-seconds": 600, ...}. */
static int file_apply(struct config *c, const char *path, struct sb_err *err)
{
	json_error_t jerr;
	json_t *obj = sb_json_load_path(path, JSON_REJECT_DUPLICATES, &jerr), *v;
	const char *key;
	char num[32];
	int rc = 0;

	if (!json_is_object(obj)) {
		json_decref(obj);
		return sb_invalid(err, "config file %s: %s (line %d)", path, jerr.text, jerr.line);
	}
	json_object_foreach(obj, key, v) {
		size_t i;
		json_t *item;

		if (json_is_array(v) && (strcmp(key, "resource") == 0 || strcmp(key, "egress-allow") == 0 ||
					 strcmp(key, "listen") == 0 || strcmp(key, "tls-name") == 0)) {
			json_array_foreach(v, i, item)
				if (rc == 0)
					rc = json_is_string(item) ? setting_apply(c, key, json_string_value(item), err) :
					     sb_invalid(err, "config: %s entries must be strings", key);
		} else if (json_is_string(v)) {
			rc = setting_apply(c, key, json_string_value(v), err);
		} else if (json_is_integer(v)) {
			snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
			rc = setting_apply(c, key, num, err);
		} else {
			rc = sb_invalid(err, "config: %s must be a string or a number", key);
		}
		if (rc < 0)
			break;
	}
	json_decref(obj);
	if (rc < 0)
		sb_err_prefix(err, "config file %s", path);
	return rc;
}

/* `serve`'s usage, here beside the flags it describes: `serve --help` prints it on stdout, a flag
 * error on stderr after the one line that says what was wrong. */
void config_usage(FILE *f)
{
	fputs("usage: sandbox-manager serve [FLAGS]\n"
	      "\n"
	      "Runs the manager: the control socket, the records, the sandboxes. Every flag can also be set\n"
	      "in the config file under the same name; flags override the file.\n"
	      "\n"
	      "  --config FILE                  a JSON object of settings ({\"idle-seconds\": 300, ...})\n"
	      "  --state-dir DIR                records, CA, sandboxes' private directories, the socket\n"
	      "  --volume DIR                   the persistent volume (default <state-dir>/volume)\n"
	      "  --socket PATH                  the control socket (default <state-dir>/manager.sock)\n"
	      "  --store sqlite:PATH|postgres:CONNINFO  the records (default sqlite:<state-dir>/records.db)\n"
	      "  --manager-id ID                this manager's name in the store's session leases (default: the\n"
	      "                                 host name; several managers on one store need one each)\n"
	      "  --lease-ms N                   a session's lease, renewed every third of it; another manager takes\n"
	      "                                 a dead owner's sessions over after it (default 10000)\n"
	      "  --backend process|podman|kubernetes  where sandboxes run (default process)\n"
	      "  --agent PATH                   the static sandbox-agent (default: beside this binary)\n"
	      "  --default-timeout-seconds N    a call's timeout when it names none (default 120)\n"
	      "  --max-timeout-seconds N        a call asking for more is refused (default 600)\n"
	      "  --idle-seconds N               an idle sandbox is retired after N seconds (default 900)\n"
	      "  --sandboxes-per-identity N     live sandboxes of one identity here; at the bound its least\n"
	      "                                 recently used idle one is retired for a new one (default 32)\n"
	      "  --sandbox-start call|create    when a session's sandbox starts: at its first call (default), or\n"
	      "                                 at its create, while the client is still busy elsewhere\n"
	      "  --output-limit BYTES           per stream of a call's answer (default 1 MiB)\n"
	      "  --record-output-limit BYTES    per stream kept in an exec's record (default 64 KiB)\n"
	      "  --tmp-size BYTES               each sandbox's /tmp (K, M or G suffix; default 256M)\n"
	      "  --shm-size BYTES               each sandbox's /dev/shm (default 64M)\n"
	      "  --disk-reserve BYTES           held in the state directory when the volume shares its filesystem,\n"
	      "                                 given back to finish records when a command fills it (default\n"
	      "                                 64M; 0: none; unused when they are separate filesystems)\n"
	      "  --sandbox-ids START:COUNT      root manager: each identity's uid and gid from this range (default:\n"
	      "                                 root's /etc/subuid and /etc/subgid entries, else 1879048192:65536)\n"
	      "  --resource NAME=BROKER:ARG     a resource grants may name (repeatable)\n"
	      "  --listen tls:HOST:PORT         the control API over mutual TLS as well (repeatable; needs\n"
	      "                                 --tls-principals; docs/operations.md)\n"
	      "  --tls-name NAME                a name the manager's server certificate carries (repeatable)\n"
	      "  --tls-cert/--tls-key/--tls-client-ca PATH  the operator's own server certificate, key and\n"
	      "                                 client CA instead of the manager's CA\n"
	      "  --tls-principals FILE          principals: their identities, operator or not\n"
	      "  --tls-deny FILE                revoked serials and principals (reloaded when it changes)\n"
	      "  --advertise tls://HOST:PORT    the address \"owned\" answers give for this manager (default: its\n"
	      "                                 socket), for clients on other hosts\n"
	      "  --cgroup-parent DIR            process backend: a delegated cgroup v2 directory\n"
	      "  --sandbox-cpus N, --sandbox-memory-mib N, --sandbox-pids N\n"
	      "                                 each sandbox's limits (podman, or process with --cgroup-parent)\n"
	      "  --podman-socket PATH           podman: the service's unix socket\n"
	      "  --image NAME                   podman, kubernetes: the sandbox image\n"
	      "  --podman-seccomp FILE          podman: a seccomp profile (images/seccomp.json)\n"
	      "  --podman-network MODE          podman: the containers' network (default bridge)\n"
	      "  --network open|none|proxy      a session's network when it names none (default open: a NAT\n"
	      "                                 without the host's loopback; none: loopback only; proxy:\n"
	      "                                 loopback only and the egress proxy, process and podman)\n"
	      "  --egress-allow HOST[:PORT]     a destination the egress proxy tunnels to (repeatable; .SUFFIX:\n"
	      "                                 its subdomains; port default 443)\n"
	      "  --kubeconfig PATH              kubernetes: the API server and credentials (default: in-cluster)\n"
	      "  --namespace NS                 kubernetes: the pods' namespace (default: the context's)\n"
	      "  --k8s-volume hostpath:DIR|pvc:CLAIM  kubernetes: where the node sees the manager's volume, or\n"
	      "                                 the claim holding it at its root\n"
	      "  -h, --help                     this text\n"
	      "\n"
	      "Exit codes: 2 usage error or the state directory is in use by another manager; 125 any other\n"
	      "failure to start. docs/operations.md has every setting.\n", f);
}

static int flags_apply(struct config *c, int argc, char **argv, struct sb_err *err)
{
	static const struct option longopts[] = {
		{ "config", 1, NULL, 0 }, { "state-dir", 1, NULL, 0 }, { "volume", 1, NULL, 0 },
		{ "socket", 1, NULL, 0 }, { "backend", 1, NULL, 0 },   { "podman-socket", 1, NULL, 0 },
		{ "image", 1, NULL, 0 },  { "agent", 1, NULL, 0 },     { "default-timeout-seconds", 1, NULL, 0 },
		{ "max-timeout-seconds", 1, NULL, 0 }, { "idle-seconds", 1, NULL, 0 },
		{ "sandboxes-per-identity", 1, NULL, 0 }, { "sandbox-start", 1, NULL, 0 },
		{ "output-limit", 1, NULL, 0 }, { "resource", 1, NULL, 0 }, { "sandbox-uid", 1, NULL, 0 },
		{ "sandbox-gid", 1, NULL, 0 },  { "sandbox-ids", 1, NULL, 0 },  { "podman-seccomp", 1, NULL, 0 }, { "podman-network", 1, NULL, 0 },
		{ "sandbox-cpus", 1, NULL, 0 }, { "sandbox-memory-mib", 1, NULL, 0 }, { "sandbox-pids", 1, NULL, 0 },
		{ "record-output-limit", 1, NULL, 0 },
		{ "tmp-size", 1, NULL, 0 }, { "shm-size", 1, NULL, 0 }, { "cgroup-parent", 1, NULL, 0 },
		{ "metrics-listen", 1, NULL, 0 }, { "stop-grace-seconds", 1, NULL, 0 },
		{ "kubeconfig", 1, NULL, 0 }, { "namespace", 1, NULL, 0 }, { "k8s-volume", 1, NULL, 0 },
		{ "store", 1, NULL, 0 }, { "manager-id", 1, NULL, 0 }, { "lease-ms", 1, NULL, 0 },
		{ "network", 1, NULL, 0 }, { "disk-reserve", 1, NULL, 0 }, { "egress-allow", 1, NULL, 0 },
		{ "listen", 1, NULL, 0 }, { "tls-name", 1, NULL, 0 }, { "tls-cert", 1, NULL, 0 },
		{ "tls-key", 1, NULL, 0 }, { "tls-client-ca", 1, NULL, 0 }, { "tls-principals", 1, NULL, 0 },
		{ "tls-deny", 1, NULL, 0 }, { "advertise", 1, NULL, 0 },
		{ "help", 0, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int idx, opt;

	/* The flags' shape first: --help, an unknown flag or a missing value is answered before any
	 * file is read or any setting applied. */
	opts_reset();
	while ((opt = opts_next(argc, argv, "h", longopts, &idx, err)) != OPTS_END) {
		if (opt == 'h')
			return CONFIG_HELP;
		if (opt == OPTS_BAD)
			return CONFIG_BAD_FLAG;
	}
	if (optind != argc) {
		sb_fail(err, 0, "unexpected argument '%s'", argv[optind]);
		return CONFIG_BAD_FLAG;
	}
	/* The files next (--config FILE or --config=FILE, in order), so that flags override them
	 * whatever their order. */
	opts_reset();
	while (opts_next(argc, argv, "h", longopts, &idx, err) != OPTS_END)
		if (idx == 0 && file_apply(c, optarg, err) < 0)
			return -1;
	opts_reset();
	while (opts_next(argc, argv, "h", longopts, &idx, err) != OPTS_END)
		if (idx != 0 && setting_apply(c, longopts[idx].name, optarg, err) < 0)
			return CONFIG_BAD_FLAG;
	return 0;
}

/* The agent is the image's; what podman needs is its socket, the image, and a profile it can read. */
static int podman_check(const struct config *c, struct sb_err *err)
{
	struct stat st;

	if (c->podman_socket[0] != '/')
		return sb_invalid(err, "config: the podman backend needs podman-socket, the absolute path of the "
				  "service's unix socket");
	if (c->image[0] == '\0')
		return sb_invalid(err, "config: the podman backend needs image, the sandbox image's name (make image "
				  "builds infra-sandbox-agent:dev)");
	if (c->podman_seccomp[0] != '\0' && (c->podman_seccomp[0] != '/' || stat(c->podman_seccomp, &st) < 0 ||
					      !S_ISREG(st.st_mode)))
		return sb_invalid(err, "config: podman-seccomp must be the absolute path of a seccomp profile "
				  "(images/seccomp.json), not '%s'", c->podman_seccomp);
	if (c->podman_network[0] == '\0' || strspn(c->podman_network, "abcdefghijklmnopqrstuvwxyz0123456789-_.") !=
						   strlen(c->podman_network))
		return sb_invalid(err, "config: podman-network must be a network mode or name, not '%s'",
				  c->podman_network);
	/* The host's network is the host's loopback: every listener of the manager and of the host
	 * would be a command's to reach (rule N1). */
	if (strcmp(c->podman_network, "host") == 0)
		return sb_invalid(err, "config: podman-network host would give commands the host's network and every "
				  "listener on its loopback (docs/isolation.md, N1): use bridge, or a network of your own");
	return 0;
}

/* What the kubernetes backend needs: the image and where the node sees the volume. The
 * kubeconfig's content is read when the backend starts. */
static int kubernetes_check(const struct config *c, struct sb_err *err)
{
	if (c->podman_only[0] != '\0')
		return sb_invalid(err, "config: %s applies to the podman backend only (the backend is kubernetes)",
				  c->podman_only);
	if (c->image[0] == '\0')
		return sb_invalid(err, "config: the kubernetes backend needs image, the sandbox image's name, present "
				  "on the node (imagePullPolicy Never)");
	if (strcmp(c->network, "none") == 0)
		return sb_invalid(err, "config: network none needs a runtime that gives a sandbox loopback only; a pod "
				  "always has the pod network (docs/isolation.md, N1): use the process or podman backend");
	if (strncmp(c->k8s_volume, "pvc:", 4) == 0) {
		const char *claim = c->k8s_volume + 4;
		size_t n = strlen(claim);

		/* a PersistentVolumeClaim's name: a DNS subdomain */
		if (n == 0 || n > 253 || strspn(claim, "abcdefghijklmnopqrstuvwxyz0123456789-.") != n ||
		    strchr("-.", claim[0]) != NULL || strchr("-.", claim[n - 1]) != NULL)
			return sb_invalid(err, "config: k8s-volume pvc:CLAIM: '%s' is not a claim's name (lower-case "
					  "letters, digits, '-' and '.')", claim);
	} else if (strncmp(c->k8s_volume, "hostpath:/", 10) != 0) {
		return sb_invalid(err, "config: the kubernetes backend needs k8s-volume hostpath:DIR (DIR absolute: "
				  "where the node sees the manager's volume) or pvc:CLAIM, not '%s'", c->k8s_volume);
	}
	if (c->kubeconfig[0] != '\0' && c->kubeconfig[0] != '/')
		return sb_invalid(err, "config: kubeconfig must be an absolute path, not '%s'", c->kubeconfig);
	return 0;
}

/* The default state-dir's missing parents, as `mkdir -p` makes them (a fresh account has no
 * ~/.local/state): each one created 0700, as the XDG base directory spec asks; the state-dir itself
 * is the daemon's to create and check (daemon.c dir_private). Only the default: the parent of a
 * state-dir the operator names must exist, so that a typo does not grow a tree. */
static int state_dir_parents(const char *state_dir, struct sb_err *err)
{
	char path[PATH_MAX];

	if (path_fmt(path, sizeof path, err, "%s", state_dir) < 0)
		return -1;
	for (char *slash = strchr(path + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST)
			return sb_fail_errno(err, "config: creating %s, a parent of the default state-dir %s", path,
					     state_dir);
		*slash = '/';
	}
	return 0;
}

static int config_check(struct config *c, struct sb_err *err)
{
	if ((c->volume[0] == '\0' && path_fmt(c->volume, sizeof c->volume, err, "%s/volume", c->state_dir) < 0) ||
	    (c->socket[0] == '\0' && path_fmt(c->socket, sizeof c->socket, err, "%s/manager.sock", c->state_dir) < 0)) {
		sb_err_prefix(err, "config: the default volume and socket beside state-dir");
		return -1;
	}
	if (c->state_dir[0] != '/' || c->volume[0] != '/')
		return sb_invalid(err, "config: state-dir and volume must be absolute paths");
	/* The socket's path is also this manager's address in the store (docs/scaling.md): absolute,
	 * so a client anywhere can follow it. */
	if (c->socket[0] != '/') {
		char cwd[PATH_MAX], rel[PATH_MAX];

		memcpy(rel, c->socket, sizeof rel);
		if (getcwd(cwd, sizeof cwd) == NULL || path_fmt(c->socket, sizeof c->socket, err, "%s/%s", cwd, rel) < 0)
			return sb_fail(err, ENAMETOOLONG, "config: socket %s made absolute is too long", rel);
	}
	if (c->default_timeout > c->max_timeout)
		return sb_invalid(err, "config: default-timeout-seconds (%u) is over max-timeout-seconds (%u)",
				  c->default_timeout, c->max_timeout);
	if (geteuid() != 0 && c->ids_count != 0 && !c->ids_subuid)
		return sb_fail(err, EPERM, "config: an unprivileged manager runs sandboxes as its own uid and gid only "
			       "(sandbox-ids is a root manager's)");
	/* The namespace's default first: after its re-execution the daemon is uid 0 there, and must
	 * take the namespace's ids, not a root manager's default range. */
	if (identity_userns_default(c, err) < 0 || identity_ids_default(c, err) < 0)
		return -1;
	if (strcmp(c->backend, "kubernetes") == 0)
		return kubernetes_check(c, err);
	if (c->k8s_only[0] != '\0')
		return sb_invalid(err, "config: %s applies to the kubernetes backend only (the backend is %s)",
				  c->k8s_only, c->backend);
	if (c->cgroup_parent[0] != '\0' && (strcmp(c->backend, "process") != 0 || c->cgroup_parent[0] != '/'))
		return sb_invalid(err, "config: cgroup-parent is the absolute path of a cgroup v2 directory, and "
				  "the process backend's only (the backend is %s)", c->backend);
	if (strcmp(c->backend, "podman") == 0)
		return podman_check(c, err);
	if (c->image[0] != '\0')
		return sb_invalid(err, "config: image applies to the podman and kubernetes backends only (the backend "
				  "is %s)", c->backend);
	/* A limit that silently does nothing would be a surprise. */
	if (c->podman_only[0] != '\0')
		return sb_invalid(err, "config: %s applies to the podman backend only (the backend is %s)",
				  c->podman_only, c->backend);
	if (c->limit_given[0] != '\0' && c->cgroup_parent[0] == '\0')
		return sb_invalid(err, "config: %s applies to the podman backend only, or to the process backend "
				  "with cgroup-parent (a cgroup v2 directory delegated to the manager, with the memory, pids "
				  "and cpu controllers): without one the process backend sets no such limit", c->limit_given);
	if (access(c->agent, X_OK) < 0)
		return sb_fail_errno(err, "config: the agent binary %s", c->agent);
	return 0;
}

int config_load(struct config *c, int argc, char **argv, struct sb_err *err)
{
	char default_state[PATH_MAX];

	int rc;

	if (defaults(c, err) < 0)
		return -1;
	memcpy(default_state, c->state_dir, sizeof default_state);
	rc = flags_apply(c, argc, argv, err);
	if (rc != 0)
		return rc;
	if (config_check(c, err) < 0)
		return -1;
	/* Last: a configuration refused creates nothing. */
	return strcmp(c->state_dir, default_state) == 0 ? state_dir_parents(c->state_dir, err) : 0;
}

void config_free(struct config *c)
{
	json_decref(c->resources);
	c->resources = NULL;
	json_decref(c->tls_listen);
	json_decref(c->tls_names);
	c->tls_listen = c->tls_names = NULL;
}
