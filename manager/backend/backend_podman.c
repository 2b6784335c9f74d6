/* The podman backend (backend.h): a session's sandbox is a container of the sandbox image, whose
 * entrypoint is the static sandbox-agent, created and proven gone through the Docker-compatible API
 * of a Podman service on a unix socket (podman_api.h). The manager never talks to the container's
 * network: the agent listens on a unix socket in <private_dir>/sock, bind-mounted at the same path,
 * and the manager speaks mutual TLS over it as with every backend.
 *
 * What the container gets (container_body()):
 *   User             the sandbox's uid:gid (its identity's own, identity_ids.h; the manager's own when it is
 *                    unprivileged), never 0: the image's root is never used
 *   Binds            the mount plan, every entry at its own path (rw, ro; hidden ones over an empty
 *                    file or directory of the private dir), each directory between a writable entry
 *                    and an entry inside it bound onto itself (mount_plan_anchors()), the credentials
 *                    snapshot read-only, and the agent's tls/ (read-only), state/ and sock/ at
 *                    PRIVATE_INSIDE (/.sandbox/agent/...), whatever the host path: its ancestors lie
 *                    in the read-only image root, which no command can rename; all nosuid,nodev
 *   Tmpfs            /tmp (size tmp_bytes), and the plan's tmpfs entries; the image's root is
 *                    read-only; ShmSize bounds /dev/shm
 *   SecurityOpt      unmask of every path below /proc, and only those (else the agent cannot
 *                    mount a fresh /proc for each command in its nested user namespace: the
 *                    runtime's masks and read-only binds make /proc "not fully visible",
 *                    mount_too_revealing() in fs/namespace.c), no-new-privileges, and the
 *                    seccomp profile of images/ when configured
 *   CapDrop ALL, no published port, CPU, memory (no swap) and pids limits, no restart policy
 *
 * Evidence is the runtime's own word for the recorded container Id: State.Status "exited" (or
 * "created" with no pid: it never ran), or 404 once it has been deleted. An accepted kill or delete
 * is a request, never evidence. After evidence the container is deleted; a failed delete leaves an
 * exited container behind, which is logged and removed by the next restart's recovery. */
#include "agent_dir.h"
#include "backend.h"
#include "backend_internal.h"
#include "clock.h"
#include "log.h"
#include "pathfmt.h"
#include "podman_api.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define REQUEST_MS 15000      /* one API call (create may resolve the image and set up networking) */
#define STOP_MS 5000          /* the kill request: callers may hold the manager's lock */
#define READY_MS 30000        /* from start to an agent serving on its socket */
#define POLL_MS 100
#define LOG_TAIL_BYTES 600
#define RUNTIME_PREFIX "podman:"
/* The agent's private directories inside the container: below the read-only image root, so no
 * ancestor can be renamed (a host state dir under /tmp or /dev/shm would otherwise lie in the
 * container's writable tmpfs). The host paths stay the manager's: it reaches the socket there. */
#define PRIVATE_INSIDE "/.sandbox/agent"
#define NET_SOCKET_NAME "net.sock" /* policy proxy: the agent's listener handover, beside agent.sock */

struct podman {
	struct backend be;
	struct podman_settings set;
};

static struct podman *podman_of(struct backend *be)
{
	return (struct podman *)be;
}

static int call(const struct podman *p, const char *method, const char *path, json_t *body, long timeout_ms,
		struct rest_reply *r, struct sb_err *err)
{
	return podman_request(p->set.socket, method, path, body, timeout_ms, r, err);
}

/* Container ids are 64 hex digits: checked before one goes into a request path or is adopted. */
static bool id_valid(const char *id)
{
	size_t n = 0;

	for (; id[n] != '\0'; n++)
		if (!isxdigit((unsigned char)id[n]) || isupper((unsigned char)id[n]))
			return false;
	return n == 64;
}

static const char *handle_id(const struct sandbox_handle *h)
{
	return h->runtime_id + strlen(RUNTIME_PREFIX);
}

static void handle_clear(struct sandbox_handle *h)
{
	memset(h, 0, sizeof *h);
}

/* ---------------------------------------------------------------- the container's description */

/* A Binds entry is "source:target:options", so a path holding ':' or ',' cannot be said in it
 * (and the manager's own paths never hold them). */
static int bind_add(json_t *binds, const char *source, const char *target, bool ro, struct sb_err *err)
{
	char text[2 * PATH_MAX + 64];

	if (strpbrk(source, ":,") != NULL || strpbrk(target, ":,") != NULL)
		return sb_invalid(err, "%s: a path with ':' or ',' cannot be bind-mounted into a container", source);
	if (path_fmt(text, sizeof text, err, "%s:%s:%s,nosuid,nodev,rprivate", source, target, ro ? "ro" : "rw") < 0)
		return -1;
	return json_array_append_new(binds, json_string(text)) == 0 ? 0 : sb_fail(err, ENOMEM, "container binds");
}

/* The sources hidden entries are mounted from: an empty file and an empty directory of the
 * manager's private directory, read-only for everyone. */
static int empties_make(const struct agent_dir *d, char *file, char *dir, struct sb_err *err)
{
	int fd;

	if (path_fmt(file, PATH_MAX, err, "%s/empty", d->private_dir) < 0 ||
	    path_fmt(dir, PATH_MAX, err, "%s/empty.d", d->private_dir) < 0)
		return -1;
	fd = open(file, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (fd < 0)
		return sb_fail_errno(err, "creating %s", file);
	close(fd);
	if (mkdir(dir, 0555) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", dir);
	return 0;
}

/* One anchor (mount_plan_anchors) as a bind. Podman mounts in order of depth, so the anchor is in
 * place before the entry inside it. */
static int anchor_bind(void *binds, const char *source, const char *anchor, struct sb_err *err)
{
	return bind_add(binds, source, anchor, false, err);
}

static int plan_mounts(const struct agent_dir *d, const struct sandbox_spec *spec, int64_t tmp_bytes, json_t *binds,
		       json_t *tmpfs, struct sb_err *err)
{
	json_t *seen = json_object();
	char empty_file[PATH_MAX], empty_dir[PATH_MAX], opts[128];
	bool empties = false;

	for (size_t i = 0; i < spec->plan->n; i++) {
		const struct mount_entry *e = &spec->plan->entries[i];
		int rc = 0;

		if (seen == NULL || mount_plan_anchors(spec->plan, e->target, seen, anchor_bind, binds, err) < 0) {
			json_decref(seen);
			return err->msg[0] ? -1 : sb_fail(err, ENOMEM, "container binds");
		}
		if (e->mode == MOUNT_HIDDEN && !empties) {
			if (empties_make(d, empty_file, empty_dir, err) < 0) {
				json_decref(seen);
				return -1;
			}
			empties = true;
		}
		switch (e->mode) {
		case MOUNT_RW:
		case MOUNT_RO:
			rc = bind_add(binds, e->source, e->target, e->mode == MOUNT_RO, err);
			break;
		case MOUNT_HIDDEN:
			rc = bind_add(binds, e->is_file ? empty_file : empty_dir, e->target, true, err);
			break;
		case MOUNT_TMPFS:
			/* Owned by the sandbox's uid, as the process backend's tmpfs is; sized as /tmp. */
			snprintf(opts, sizeof opts, "rw,nosuid,nodev,mode=0755,uid=%u,gid=%u,size=%lld",
				 (unsigned)d->host_uid, (unsigned)d->host_gid, (long long)tmp_bytes);
			rc = json_object_set_new(tmpfs, e->target, json_string(opts)) == 0 ? 0 :
			     sb_fail(err, ENOMEM, "container tmpfs");
			break;
		}
		if (rc < 0) {
			sb_err_prefix(err, "mount plan entry %s", e->target);
			json_decref(seen);
			return -1;
		}
	}
	json_decref(seen);
	return 0;
}

static json_t *mounts_json(const struct podman *p, const struct agent_dir *d, const struct sandbox_spec *spec,
			   json_t **tmpfs, struct sb_err *err)
{
	json_t *binds = json_array();
	char tmp[128];

	/* Size only: Podman 4.3 refuses nr_inodes= ("unknown mount option"); the inodes' kernel memory
	 * is charged to the container's memory limit instead. */
	snprintf(tmp, sizeof tmp, "rw,nosuid,nodev,mode=1777,size=%lld", (long long)p->set.tmp_bytes);
	*tmpfs = json_pack("{s:s}", "/tmp", tmp);
	if (binds == NULL || *tmpfs == NULL || plan_mounts(d, spec, p->set.tmp_bytes, binds, *tmpfs, err) < 0 ||
	    (d->credentials[0] != '\0' && bind_add(binds, d->credentials, d->credentials, true, err) < 0) ||
	    bind_add(binds, d->tls, PRIVATE_INSIDE "/tls", true, err) < 0 ||
	    bind_add(binds, d->state, PRIVATE_INSIDE "/state", false, err) < 0 ||
	    bind_add(binds, d->sock_dir, PRIVATE_INSIDE "/sock", false, err) < 0) {
		if (err->msg[0] == '\0')
			sb_fail(err, ENOMEM, "describing the container's mounts");
		json_decref(binds);
		json_decref(*tmpfs);
		*tmpfs = NULL;
		return NULL;
	}
	return binds;
}

static json_t *strings_json(char *const *v)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && v[i] != NULL; i++)
		if (json_array_append_new(a, json_string(v[i])) < 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

/* The agent's command line with its private paths as the container sees them (PRIVATE_INSIDE):
 * each argument that is one of the host paths agent_dir_prepare() put there is replaced. Policy
 * proxy adds the net socket (podman_net_listen). */
static json_t *command_json(const struct agent_dir *d, enum sandbox_network network)
{
	static const char *const inside[][2] = {
		{ "listen", "unix:" PRIVATE_INSIDE "/sock/agent.sock" }, { "cert", PRIVATE_INSIDE "/tls/agent.crt" },
		{ "key", PRIVATE_INSIDE "/tls/agent.key" }, { "ca", PRIVATE_INSIDE "/tls/ca.crt" },
		{ "state", PRIVATE_INSIDE "/state" },
	};
	const char *host[] = { d->listen, d->cert, d->key, d->ca, d->state };
	json_t *a = json_array();

	/* argv[0] is the image's entrypoint, the agent itself. */
	for (size_t i = 1; a != NULL && d->argv[i] != NULL; i++) {
		const char *arg = d->argv[i];

		for (size_t k = 0; k < sizeof host / sizeof host[0]; k++)
			if (d->argv[i] == host[k])
				arg = inside[k][1];
		if (json_array_append_new(a, json_string(arg)) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	if (a != NULL && network == SANDBOX_NETWORK_PROXY &&
	    (json_array_append_new(a, json_string("--net-socket")) < 0 ||
	     json_array_append_new(a, json_string("unix:" PRIVATE_INSIDE "/sock/" NET_SOCKET_NAME)) < 0)) {
		json_decref(a);
		return NULL;
	}
	return a;
}

static json_t *security_json(const struct podman *p)
{
	char seccomp[PATH_MAX + 16];
	json_t *a = json_pack("[s, s]", "unmask=/proc/*", "no-new-privileges");

	if (a != NULL && p->set.seccomp[0] != '\0') {
		snprintf(seccomp, sizeof seccomp, "seccomp=%s", p->set.seccomp);
		json_array_append_new(a, json_string(seccomp));
	}
	return a;
}

static json_t *container_body(const struct podman *p, const struct agent_dir *d, const struct sandbox_spec *spec,
			      struct sb_err *err)
{
	char user[32];
	json_t *tmpfs = NULL, *binds = mounts_json(p, d, spec, &tmpfs, err), *body;

	if (binds == NULL)
		return NULL;
	snprintf(user, sizeof user, "%u:%u", (unsigned)d->host_uid, (unsigned)d->host_gid);
	body = json_pack("{s:s, s:s, s:o, s:o, s:s, s:s, s:{s:s, s:s, s:s}, s:b,"
			 " s:{s:o, s:o, s:o, s:[s], s:b, s:s, s:I, s:I, s:I, s:I, s:I, s:{s:s}, s:b}}",
			 "Image", p->set.image, "User", user, "Cmd", command_json(d, spec->network), "Env", strings_json(d->envp),
			 "WorkingDir", "/", "Hostname", "sandbox",
			 "Labels", "infra-sandbox.session", spec->session, "infra-sandbox.generation", d->generation,
			 "infra-sandbox.private-dir", d->private_dir,
			 "AttachStdin", 0,
			 "HostConfig", "Binds", binds, "Tmpfs", tmpfs, "SecurityOpt", security_json(p), "CapDrop", "ALL",
			 "ReadonlyRootfs", 1, "NetworkMode",
			 /* Policies none and proxy: the runtime's own loopback-only namespace. */
			 spec->network != SANDBOX_NETWORK_OPEN ? "none" : p->set.network, "NanoCpus", (json_int_t)p->set.nano_cpus,
			 "Memory", (json_int_t)p->set.memory_bytes, "MemorySwap", (json_int_t)p->set.memory_bytes,
			 "PidsLimit", (json_int_t)p->set.pids, "ShmSize", (json_int_t)p->set.shm_bytes,
			 "RestartPolicy", "Name", "no", "AutoRemove", 0);
	if (body == NULL)
		sb_fail(err, ENOMEM, "describing the container");
	return body;
}

/* ---------------------------------------------------------------- the container's life */

/* "sandbox-<session>-<generation>" when the session id is a plain name (it always is: hex, or
 * volprobe-<hex>); a name makes `podman ps` readable, the Id is what is recorded. */
static void container_name(const struct sandbox_spec *spec, char *out, size_t len)
{
	out[0] = '\0';
	for (const char *c = spec->session; *c != '\0'; c++)
		if (!isalnum((unsigned char)*c) && *c != '-')
			return;
	snprintf(out, len, "sandbox-%s-%llu", spec->session, (unsigned long long)spec->generation);
}

static int container_create(const struct podman *p, const struct agent_dir *d, const struct sandbox_spec *spec,
			    struct sandbox_handle *h, struct sb_err *err)
{
	json_t *body = container_body(p, d, spec, err);
	struct rest_reply r;
	char path[256], name[200];
	const char *id;
	int rc;

	if (body == NULL)
		return -1;
	/* Before the container exists: a cut address would name another socket (common/pathfmt.c). */
	if (path_fmt(h->address, sizeof h->address, err, "%s", d->listen) < 0) {
		json_decref(body);
		return -1;
	}
	container_name(spec, name, sizeof name);
	snprintf(path, sizeof path, "/containers/create%s%s", name[0] ? "?name=" : "", name);
	rc = call(p, "POST", path, body, REQUEST_MS, &r, err);
	json_decref(body);
	if (rc < 0)
		return -1;
	id = json_string_value(json_object_get(r.body, "Id"));
	if (r.status != 201 || id == NULL || !id_valid(id)) {
		rc = sb_fail(err, EIO, "podman refused to create the container (HTTP %ld): %s", r.status,
			     rest_reply_message(&r));
	} else {
		/* id_valid bounds the id, so it fits runtime_id whole. */
		snprintf(h->runtime_id, sizeof h->runtime_id, RUNTIME_PREFIX "%s", id);
	}
	rest_reply_free(&r);
	return rc;
}

static int container_start(const struct podman *p, const struct sandbox_handle *h, struct sb_err *err)
{
	struct rest_reply r;
	char path[128];
	int rc = 0;

	snprintf(path, sizeof path, "/containers/%s/start", handle_id(h));
	if (call(p, "POST", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	if (r.status != 204 && r.status != 304)
		rc = sb_fail(err, EIO, "podman could not start the container (HTTP %ld): %s", r.status,
			     rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

struct container_state {
	bool gone;          /* 404: no container with this Id any more */
	char status[32];    /* State.Status */
	long long pid;      /* State.Pid */
	long long exit_code;
	char finished[64];  /* State.FinishedAt, "" when podman did not say */
};

static int container_inspect(const struct podman *p, const char *id, long timeout_ms, struct container_state *s,
			     struct sb_err *err)
{
	struct rest_reply r;
	char path[128];
	json_t *state;
	int rc = 0;

	memset(s, 0, sizeof *s);
	snprintf(path, sizeof path, "/containers/%s/json", id);
	if (call(p, "GET", path, NULL, timeout_ms < 1 ? 1 : timeout_ms, &r, err) < 0)
		return -1;
	state = json_object_get(r.body, "State");
	if (r.status == 404) {
		s->gone = true;
	} else if (r.status != 200 || !json_is_string(json_object_get(state, "Status"))) {
		rc = sb_fail(err, EIO, "podman could not inspect container %.12s (HTTP %ld): %s", id, r.status,
			     rest_reply_message(&r));
	} else {
		snprintf(s->status, sizeof s->status, "%s", json_string_value(json_object_get(state, "Status")));
		s->pid = json_integer_value(json_object_get(state, "Pid"));
		s->exit_code = json_integer_value(json_object_get(state, "ExitCode"));
		if (json_is_string(json_object_get(state, "FinishedAt")))
			snprintf(s->finished, sizeof s->finished, "%s", json_string_value(json_object_get(state, "FinishedAt")));
	}
	rest_reply_free(&r);
	return rc;
}

/* Until podman sees the container stop, at most timeout_ms. Its answer is not evidence (inspect
 * decides); it only spares polling. A quick failure must not make the caller spin. */
static void container_wait(const struct podman *p, const char *id, long timeout_ms)
{
	struct rest_reply r;
	struct sb_err ignored;
	char path[160];
	long status = 0;

	snprintf(path, sizeof path, "/containers/%s/wait?condition=not-running", id);
	if (call(p, "POST", path, NULL, timeout_ms < 1 ? 1 : timeout_ms, &r, &ignored) == 0) {
		status = r.status;
		rest_reply_free(&r);
	}
	if (status != 200)
		usleep(POLL_MS * 1000);
}

/* No process of the container can run any more: it exited, or it was created and never started. */
static bool state_ended(const struct container_state *s)
{
	return s->gone || strcmp(s->status, "exited") == 0 || (strcmp(s->status, "created") == 0 && s->pid == 0);
}

/* The evidence as podman gave it, for the records: which state of the recorded Id ended it. */
static void state_evidence(const struct container_state *s, const char *id, char *out, size_t len)
{
	if (s->gone)
		snprintf(out, len, "container gone for Id %s (podman: no such container, HTTP 404)", id);
	else if (strcmp(s->status, "exited") == 0)
		snprintf(out, len, "container exited for Id %s (podman inspect: State.Status exited, ExitCode %lld%s%s)",
			 id, s->exit_code, s->finished[0] ? ", FinishedAt " : "", s->finished);
	else
		snprintf(out, len, "container never started for Id %s (podman inspect: State.Status %s, Pid 0)", id,
			 s->status);
}

/* A handle prepare(), adopt() or lookup() filled: a podman runtime id with a valid Id. */
static int handle_held(const struct sandbox_handle *h, struct sb_err *err)
{
	if (strncmp(h->runtime_id, RUNTIME_PREFIX, strlen(RUNTIME_PREFIX)) != 0 || !id_valid(handle_id(h)))
		return sb_invalid(err, "the handle of sandbox '%s' holds no container of the podman backend",
				  h->runtime_id);
	return 0;
}

static void container_delete(const struct podman *p, const char *id)
{
	struct rest_reply r;
	struct sb_err err;
	char path[128];

	snprintf(path, sizeof path, "/containers/%s?v=true", id);
	if (call(p, "DELETE", path, NULL, REQUEST_MS, &r, &err) < 0) {
		sb_warn("container %.12s ended but was not deleted: %s", id, err.msg);
		return;
	}
	if (r.status != 200 && r.status != 204 && r.status != 404)
		sb_warn("container %.12s ended but was not deleted (HTTP %ld): %s", id, r.status, rest_reply_message(&r));
	rest_reply_free(&r);
}

/* The container's own output (the agent's log lines), for the message of a failed prepare. The
 * logs of a container without a terminal come in frames: 8 bytes (stream, 0, 0, 0, big-endian
 * length) before each chunk. */
static void logs_tail(const struct podman *p, const struct sandbox_handle *h, char *out, size_t len)
{
	struct rest_reply r;
	struct sb_err err;
	char path[160], text[LOG_TAIL_BYTES + 1];
	size_t have = 0, at = 0;

	out[0] = '\0';
	snprintf(path, sizeof path, "/containers/%s/logs?stdout=true&stderr=true&tail=10", handle_id(h));
	if (call(p, "GET", path, NULL, REQUEST_MS, &r, &err) < 0)
		return;
	while (r.status == 200 && at + 8 <= r.raw_len) {
		const unsigned char *f = (const unsigned char *)r.raw + at;
		size_t n = (size_t)f[4] << 24 | (size_t)f[5] << 16 | (size_t)f[6] << 8 | f[7];

		if (n > r.raw_len - at - 8)
			break;
		for (size_t i = 0; i < n; i++) {
			char c = (char)f[8 + i];

			if (have == LOG_TAIL_BYTES)
				memmove(text, text + 1, --have); /* keep the end: it says why */
			text[have++] = c == '\n' || c == '\0' ? ' ' : c;
		}
		at += 8 + n;
	}
	rest_reply_free(&r);
	while (have > 0 && text[have - 1] == ' ')
		have--;
	text[have] = '\0';
	if (have > 0)
		snprintf(out, len, "; the container's output: %s", text);
}

/* Until the agent serves on its socket, or the container stops (its output says why). */
static int ready_wait(const struct podman *p, const struct agent_dir *d, const struct sandbox_handle *h,
		      struct sb_err *err)
{
	int64_t deadline = clock_mono_ms() + READY_MS, next_inspect = 0;
	struct container_state s;
	char tail[LOG_TAIL_BYTES + 64];

	for (;;) {
		if (agent_serving(d->sock, clock_mono_ms() + POLL_MS) == 1)
			return 0;
		if (clock_mono_ms() >= next_inspect) {
			if (container_inspect(p, handle_id(h), REQUEST_MS, &s, err) < 0)
				return -1;
			if (strcmp(s.status, "running") != 0) {
				logs_tail(p, h, tail, sizeof tail);
				return sb_fail(err, ECHILD, "the container is %s (exit code %lld) before its agent served%s",
					       s.gone ? "gone" : s.status, s.exit_code, tail);
			}
			next_inspect = clock_mono_ms() + 4 * POLL_MS;
		}
		if (clock_remaining_ms(deadline) == 0) {
			logs_tail(p, h, tail, sizeof tail);
			return sb_fail(err, ETIMEDOUT, "the agent did not serve on %s within %d ms%s", d->sock, READY_MS,
				       tail);
		}
		usleep(20 * 1000);
	}
}

/* ---------------------------------------------------------------- the backend's operations */

static int podman_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err);
static int podman_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err);

/* A failed prepare leaves nothing running: kill, evidence, delete. err already says what failed;
 * this adds whether the end was proven (the handle keeps the Id for evidence() otherwise). */
static void prepare_abort(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	struct sb_err again;
	size_t len = strlen(err->msg);

	if (strncmp(h->runtime_id, RUNTIME_PREFIX, strlen(RUNTIME_PREFIX)) != 0)
		return;
	podman_stop(be, h, &again);
	if (podman_evidence(be, h, READY_MS, &again) < 0) {
		snprintf(err->msg + len, sizeof err->msg - len, " (and the container's end is NOT proven: %s)", again.msg);
		return;
	}
	handle_clear(h);
}

static int podman_prepare(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
			  struct sb_err *err)
{
	struct podman *p = podman_of(be);
	struct agent_dir *d = calloc(1, sizeof *d);
	int rc = -1;

	handle_clear(h);
	if (d == NULL)
		return sb_fail(err, ENOMEM, "preparing a container");
	if (spec == NULL || spec->session == NULL || spec->plan == NULL || spec->private_dir == NULL ||
	    spec->manager_name == NULL)
		sb_invalid(err, "the sandbox spec needs a session, a mount plan, a private directory and the "
			   "manager's name");
	else if (agent_dir_prepare(d, spec, err) == 0 && container_create(p, d, spec, h, err) == 0)
		rc = container_start(p, h, err) == 0 && ready_wait(p, d, h, err) == 0 ? 0 : -1;
	if (rc < 0) {
		prepare_abort(be, h, err);
		sb_err_prefix(err, "preparing the container of session %s (generation %llu)",
			      spec && spec->session ? spec->session : "?",
			      spec ? (unsigned long long)spec->generation : 0ULL);
	}
	free(d);
	return rc;
}

/* SIGKILL to the container's PID 1, the agent: the kernel then kills everything in its PID
 * namespace, nested command namespaces included. A request, not evidence. */
static int podman_stop(struct backend *be, struct sandbox_handle *h, struct sb_err *err)
{
	struct rest_reply r;
	char path[128];
	int rc = 0;

	if (handle_held(h, err) < 0)
		return -1;
	snprintf(path, sizeof path, "/containers/%s/kill?signal=KILL", handle_id(h));
	if (call(podman_of(be), "POST", path, NULL, STOP_MS, &r, err) < 0)
		return -1;
	/* 404: deleted already; 409: not running. Neither is evidence; evidence() asks. */
	if (r.status != 204 && r.status != 200 && r.status != 404 && r.status != 409)
		rc = sb_fail(err, EIO, "podman did not accept the kill of container %.12s (HTTP %ld): %s", handle_id(h),
			     r.status, rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

static int podman_evidence(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err)
{
	struct podman *p = podman_of(be);
	int64_t deadline = clock_mono_ms() + (timeout_ms < 0 ? 0 : timeout_ms);
	struct container_state s;
	char last[sizeof s.status] = "";

	if (handle_held(h, err) < 0)
		return -1;
	/* Proven before (h->evidence is written only then): the container was deleted after it, and
	 * a 404 now would replace podman's word on how it ended with its absence. */
	if (h->evidence[0] != '\0')
		return 0;
	for (;;) {
		/* Each question within what is left of the bound: a hung service is no evidence either. */
		int left = clock_remaining_ms(deadline);

		if (container_inspect(p, handle_id(h), left < REQUEST_MS ? left : REQUEST_MS, &s, err) == 0) {
			if (state_ended(&s)) {
				state_evidence(&s, handle_id(h), h->evidence, sizeof h->evidence);
				if (!s.gone)
					container_delete(p, handle_id(h));
				return 0;
			}
			snprintf(last, sizeof last, "%s", s.status);
		}
		if (clock_remaining_ms(deadline) == 0)
			break;
		container_wait(p, handle_id(h), clock_remaining_ms(deadline));
	}
	if (last[0] != '\0')
		return sb_fail(err, ETIMEDOUT, "container %.12s is still %s after %d ms: not proven gone", handle_id(h),
			       last, timeout_ms);
	sb_err_prefix(err, "container %.12s: no evidence of its end within %d ms", handle_id(h), timeout_ms);
	return -1;
}

static int podman_adopt(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
			struct sb_err *err)
{
	(void)be;
	handle_clear(h);
	if (strncmp(runtime_id, RUNTIME_PREFIX, strlen(RUNTIME_PREFIX)) != 0 ||
	    !id_valid(runtime_id + strlen(RUNTIME_PREFIX)))
		return sb_invalid(err, "'%s' is not a podman runtime id (podman:<64 hex digits>)", runtime_id);
	if (address != NULL && strlen(address) >= sizeof h->address)
		return sb_fail(err, ENAMETOOLONG, "address too long");
	snprintf(h->runtime_id, sizeof h->runtime_id, "%s", runtime_id);
	snprintf(h->address, sizeof h->address, "%s", address ? address : "");
	return 0;
}

/* Percent-encoding for a query value: everything but RFC 3986's unreserved characters. */
static int query_escape(const char *in, char *out, size_t len, struct sb_err *err)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (const unsigned char *c = (const unsigned char *)in; *c != '\0'; c++) {
		if (o + 4 > len)
			return sb_fail(err, ENAMETOOLONG, "podman API: query too long");
		if (isalnum(*c) || strchr("-._~", *c) != NULL) {
			out[o++] = (char)*c;
		} else {
			out[o++] = '%';
			out[o++] = hex[*c >> 4];
			out[o++] = hex[*c & 15];
		}
	}
	out[o] = '\0';
	return 0;
}

static int podman_lookup(struct backend *be, const char *session, uint64_t generation, struct sandbox_handle *h,
			 struct sb_err *err)
{
	char filters[512], escaped[1536], path[1700];
	struct rest_reply r;
	json_t *first;
	int rc = 0;

	handle_clear(h);
	snprintf(filters, sizeof filters,
		 "{\"label\":[\"infra-sandbox.session=%s\",\"infra-sandbox.generation=%llu\"]}", session,
		 (unsigned long long)generation);
	if (strpbrk(session, "\"\\") != NULL || query_escape(filters, escaped, sizeof escaped, err) < 0)
		return sb_invalid(err, "session '%s' cannot be looked up", session);
	snprintf(path, sizeof path, "/containers/json?all=true&filters=%s", escaped);
	if (call(podman_of(be), "GET", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	first = json_array_get(r.body, 0);
	if (r.status != 200 || !json_is_array(r.body))
		rc = sb_fail(err, EIO, "podman could not list containers (HTTP %ld): %s", r.status, rest_reply_message(&r));
	else if (json_is_string(json_object_get(first, "Id")) && id_valid(json_string_value(json_object_get(first, "Id")))) {
		snprintf(h->runtime_id, sizeof h->runtime_id, RUNTIME_PREFIX "%s",
			 json_string_value(json_object_get(first, "Id")));
		rc = 1;
	}
	rest_reply_free(&r);
	return rc;
}

/* What the container was created with: the runtime applies them (memory, pids and CPU in the
 * container's own cgroup, which podman names and owns: cgroup stays ""). */
static int podman_limits(struct backend *be, const struct sandbox_handle *h, struct sandbox_limits *out,
			 struct sb_err *err)
{
	const struct podman *p = podman_of(be);

	(void)h;
	(void)err;
	backend_limits_configured(out, p->set.tmp_bytes, p->set.shm_bytes, p->set.memory_bytes, p->set.pids,
				  p->set.nano_cpus);
	return 0;
}

/* Policy proxy: the container's namespace is the runtime's, which an unprivileged manager of a
 * rootful service cannot enter, so the agent, inside it, makes the listener and hands it over on
 * sock/net.sock (its --net-socket, serve_netsock.c) beside agent.sock, a directory no command
 * reaches; the manager then holds and serves it as the process backend's own. */
static int podman_net_listen(struct backend *be, const struct sandbox_handle *h, uint16_t port, int *fd,
			     struct sb_err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *sock = h->address + strlen("unix:"), *slash = strrchr(sock, '/');
	unsigned char req[2] = { (unsigned char)(port >> 8), (unsigned char)(port & 0xff) };
	int chan;

	(void)be;
	*fd = -1;
	if (strncmp(h->address, "unix:", 5) != 0 || slash == NULL ||
	    (size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%.*s/" NET_SOCKET_NAME, (int)(slash - sock), sock) >=
		    sizeof sa.sun_path)
		return sb_fail(err, ENAMETOOLONG, "the agent's net socket beside %s", h->address);
	chan = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (chan < 0)
		return sb_fail_errno(err, "creating a unix socket");
	if (connect(chan, (struct sockaddr *)&sa, sizeof sa) < 0 || send(chan, req, sizeof req, MSG_NOSIGNAL) != 2) {
		sb_fail_errno(err, "asking the agent for 127.0.0.1:%u (%s)", port, sa.sun_path);
		close(chan);
		return -1;
	}
	*fd = net_listener_receive(chan, port, STOP_MS);
	close(chan);
	if (*fd < 0)
		return sb_refuse(err, EPROTO, "the agent gave no listener on 127.0.0.1:%u of the container's network "
				 "(its log says why)", port);
	return 0;
}

static void podman_destroy(struct backend *be)
{
	free(podman_of(be));
}

static const struct backend_ops podman_ops = {
	.name = "podman",
	.prepare = podman_prepare,
	.stop = podman_stop,
	.evidence = podman_evidence,
	.adopt = podman_adopt,
	.lookup = podman_lookup,
	.limits = podman_limits,
	.net_listen = podman_net_listen,
	.destroy = podman_destroy,
};

/* At start, so that a wrong socket or a missing image is said once, clearly, and not at the
 * first call of every session. */
static int service_check(const struct podman *p, struct sb_err *err)
{
	struct rest_reply r;
	char path[300];
	int rc = 0;

	if (call(p, "GET", "/version", NULL, REQUEST_MS, &r, err) < 0) {
		sb_err_prefix(err, "the podman service (start it with `podman system service --time=0 unix://%s`)",
			      p->set.socket);
		return -1;
	}
	if (r.status != 200)
		rc = sb_fail(err, EIO, "%s does not answer as a podman service (HTTP %ld): %s", p->set.socket, r.status,
			     rest_reply_message(&r));
	rest_reply_free(&r);
	if (rc < 0)
		return -1;
	snprintf(path, sizeof path, "/images/%s/json", p->set.image);
	if (call(p, "GET", path, NULL, REQUEST_MS, &r, err) < 0)
		return -1;
	if (r.status == 404)
		rc = sb_fail(err, ENOENT, "the podman service has no image '%s' (build it: `make image`, or see images/README.md)",
			     p->set.image);
	else if (r.status != 200)
		rc = sb_fail(err, EIO, "podman could not inspect image '%s' (HTTP %ld): %s", p->set.image, r.status,
			     rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

int backend_podman_create(struct backend **out, const struct podman_settings *set, struct sb_err *err)
{
	struct podman *p = calloc(1, sizeof *p);

	if (p == NULL)
		return sb_fail(err, ENOMEM, "creating the podman backend");
	p->be.ops = &podman_ops;
	p->set = *set;
	backend_sizes_default(&p->set.tmp_bytes, &p->set.shm_bytes);
	if (backend_image_check(set->image, err) < 0) {
		free(p);
		return -1;
	}
	if (service_check(p, err) < 0) {
		free(p);
		return -1;
	}
	*out = &p->be;
	return 0;
}
