/* Unit tests of the podman backend's rules (manager/backend/backend_podman.c) against a scripted stand-in for
 * the Docker-compatible API on a unix socket: what evidence is (exited, created and never started, 404)
 * and what is not (running, paused, an accepted kill, a service that does not answer); the container's
 * description (user, binds at their own paths, hidden entries, security options, limits, labels); the
 * failures a user sees (podman's own message, a missing image, a path a bind cannot say); and recovery's
 * lookup by labels. The real runtime is exercised by tests/integration/manager_podman.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend.h"
#include "pathfmt.h"
#include "workspace.h"
#include "testutil.h"

#define ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define MAX_REQUESTS 64

/* ---- the stand-in service: one request per connection, answered from the test's script ---- */

struct answer {
	int status;
	const char *body;
	size_t len;   /* of body: log frames hold NUL bytes */
	int delay_ms; /* before answering: a hung service */
};

struct fake {
	char dir[64], sock[128];
	int listen_fd;
	pthread_t thread;
	pthread_mutex_t lock;
	char *requests[MAX_REQUESTS]; /* "METHOD PATH" */
	char *bodies[MAX_REQUESTS];
	int n;
	/* The script: the answer for a request whose "METHOD PATH" starts with a prefix. */
	struct {
		const char *prefix;
		struct answer a;
	} routes[16];
	int n_routes;
	volatile int stop;
	int inheritable_sockets; /* client connections without close-on-exec, seen during requests */
};

static struct fake F;

static void route_raw(const char *prefix, int status, const char *body, size_t len)
{
	pthread_mutex_lock(&F.lock);
	F.routes[F.n_routes].prefix = prefix;
	F.routes[F.n_routes].a = (struct answer){ status, body, len, 0 };
	F.n_routes++;
	pthread_mutex_unlock(&F.lock);
}

static void route(const char *prefix, int status, const char *body)
{
	route_raw(prefix, status, body, strlen(body));
}

static struct answer answer_for(const char *line)
{
	struct answer a = { 404, "{\"message\":\"no route\"}", 22, 0 };

	pthread_mutex_lock(&F.lock);
	/* The last matching route wins: a test can change an answer midway. */
	for (int i = 0; i < F.n_routes; i++)
		if (strncmp(line, F.routes[i].prefix, strlen(F.routes[i].prefix)) == 0)
			a = F.routes[i].a;
	pthread_mutex_unlock(&F.lock);
	return a;
}

/* While the client's request is open: is its connection to the service close-on-exec? It is the
 * socket of this process whose peer is the service's path. (libcurl's internal wakeup socketpair
 * is not ours to flag; the manager's own child paths close every descriptor anyway.) */
static int connections_inheritable(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		struct sockaddr_un peer;
		socklen_t len = sizeof peer;
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == dirfd(d))
			continue;
		memset(&peer, 0, sizeof peer);
		if (getpeername(fd, (struct sockaddr *)&peer, &len) == 0 && peer.sun_family == AF_UNIX &&
		    strcmp(peer.sun_path, F.sock) == 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC) == 0)
			n++;
	}
	closedir(d);
	return n;
}

static void serve_one(int fd)
{
	char buf[65536], method[16], path[1024], line[1100], head[256];
	size_t have = 0;
	long length = 0;
	char *end = NULL, *cl;
	struct answer a;
	int n;

	while (end == NULL && have < sizeof buf - 1) {
		ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);

		if (r <= 0)
			return;
		have += (size_t)r;
		buf[have] = '\0';
		end = strstr(buf, "\r\n\r\n");
	}
	if (end == NULL || sscanf(buf, "%15s %1023s", method, path) != 2)
		return;
	cl = strcasestr(buf, "Content-Length:");
	if (cl != NULL && cl < end)
		length = strtol(cl + 15, NULL, 10);
	while ((long)(have - (size_t)(end + 4 - buf)) < length && have < sizeof buf - 1) {
		ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);

		if (r <= 0)
			return;
		have += (size_t)r;
		buf[have] = '\0';
	}
	snprintf(line, sizeof line, "%s %s", method, path);
	n = connections_inheritable();
	pthread_mutex_lock(&F.lock);
	F.inheritable_sockets += n;
	if (F.n < MAX_REQUESTS) {
		F.requests[F.n] = strdup(line);
		F.bodies[F.n] = strndup(end + 4, (size_t)length);
		F.n++;
	}
	pthread_mutex_unlock(&F.lock);
	a = answer_for(line);
	if (a.delay_ms > 0)
		usleep((useconds_t)a.delay_ms * 1000);
	n = snprintf(head, sizeof head,
		     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
		     a.status, a.len);
	/* MSG_NOSIGNAL: a client that gave up (the hung-service test) must not kill the test with SIGPIPE */
	if (send(fd, head, (size_t)n, MSG_NOSIGNAL) == n && a.len > 0)
		(void)send(fd, a.body, a.len, MSG_NOSIGNAL);
}

static void *fake_main(void *arg)
{
	(void)arg;
	while (!F.stop) {
		struct pollfd p = { .fd = F.listen_fd, .events = POLLIN };
		int fd;

		if (poll(&p, 1, 50) <= 0)
			continue;
		fd = accept4(F.listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve_one(fd);
		close(fd);
	}
	return NULL;
}

/* How many requests start with prefix; the index of the last one in *last. */
static int seen(const char *prefix, int *last)
{
	int count = 0;

	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < F.n; i++)
		if (strncmp(F.requests[i], prefix, strlen(prefix)) == 0) {
			count++;
			if (last != NULL)
				*last = i;
		}
	pthread_mutex_unlock(&F.lock);
	return count;
}

static int fake_start(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct sb_err err;

	(void)state;
	memset(&F, 0, sizeof F);
	pthread_mutex_init(&F.lock, NULL);
	snprintf(F.dir, sizeof F.dir, "/tmp/sbpodman.XXXXXX");
	if (mkdtemp(F.dir) == NULL)
		return -1;
	snprintf(F.sock, sizeof F.sock, "%s/api.sock", F.dir);
	if (path_fmt(sa.sun_path, sizeof sa.sun_path, &err, "%s", F.sock) < 0)
		return -1;
	F.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (F.listen_fd < 0 || bind(F.listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(F.listen_fd, 16) < 0)
		return -1;
	route("GET /v1.41/version", 200, "{\"Version\":\"4.3.1\"}");
	route("GET /v1.41/images/", 200, "{\"Id\":\"sha256:1\"}");
	return pthread_create(&F.thread, NULL, fake_main, NULL) == 0 ? 0 : -1;
}

static int fake_stop(void **state)
{
	(void)state;
	F.stop = 1;
	pthread_join(F.thread, NULL);
	close(F.listen_fd);
	for (int i = 0; i < F.n; i++) {
		free(F.requests[i]);
		free(F.bodies[i]);
	}
	test_rmtree(F.dir);
	return 0;
}

static struct backend *backend_new_on(const char *network)
{
	struct podman_settings set = { .image = "infra-sandbox-agent:dev", .seccomp = "/etc/sandbox/seccomp.json",
				       .network = "", .nano_cpus = 1500000000, .memory_bytes = 512LL << 20,
				       .pids = 256, .tmp_bytes = 32LL << 20, .shm_bytes = 16LL << 20 };
	struct backend *be = NULL;
	struct sb_err err = { 0 };

	snprintf(set.socket, sizeof set.socket, "%s", F.sock);
	snprintf(set.network, sizeof set.network, "%s", network);
	assert_int_equal(backend_podman_create(&be, &set, &err), 0);
	return be;
}

static struct backend *backend_new(void)
{
	return backend_new_on("none");
}

static void handle_of(struct backend *be, struct sandbox_handle *h)
{
	struct sb_err err = { 0 };

	assert_int_equal(be->ops->adopt(be, "podman:" ID, "unix:/x/sock/agent.sock", h, &err), 0);
}

/* ---- evidence ---- */

static void evidence_exited_then_deleted(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route("GET /v1.41/containers/" ID "/json", 200, "{\"Id\":\"" ID "\",\"State\":{\"Status\":\"exited\",\"Pid\":0,"
	      "\"ExitCode\":137,\"FinishedAt\":\"2026-12-01T15:00:00Z\"}}");
	route("DELETE /v1.41/containers/" ID, 204, "");
	be = backend_new();
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	/* what the records keep: podman's own word for the recorded Id */
	assert_string_equal(h.evidence, "container exited for Id " ID " (podman inspect: State.Status exited, ExitCode 137, "
			    "FinishedAt 2026-12-01T15:00:00Z)");
	assert_int_equal(seen("DELETE /v1.41/containers/" ID "?v=true", NULL), 1);
	/* asked again (a probe proved it, then the sandbox's end asks): the first proof stands, not
	 * the 404 of the container it deleted, and the service is not asked */
	route("GET /v1.41/containers/" ID "/json", 404, "{\"message\":\"no such container\"}");
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	assert_string_equal(h.evidence, "container exited for Id " ID " (podman inspect: State.Status exited, ExitCode 137, "
			    "FinishedAt 2026-12-01T15:00:00Z)");
	assert_int_equal(seen("GET /v1.41/containers/" ID "/json", NULL), 1);
	/* the connections to the service are close-on-exec (curl_handle.c) */
	assert_int_equal(F.inheritable_sockets, 0);
	be->ops->destroy(be);
}

static void evidence_404_is_gone(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route("GET /v1.41/containers/" ID "/json", 404, "{\"message\":\"no such container\"}");
	be = backend_new();
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	assert_string_equal(h.evidence, "container gone for Id " ID " (podman: no such container, HTTP 404)");
	assert_int_equal(seen("DELETE", NULL), 0);
	be->ops->destroy(be);
}

/* An accepted kill is a request: a container still running (or paused) is not gone. */
static void accepted_kill_is_not_evidence(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route("POST /v1.41/containers/" ID "/kill", 204, "");
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"running\",\"Pid\":4242}}");
	be = backend_new();
	handle_of(be, &h);
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	assert_int_equal(seen("POST /v1.41/containers/" ID "/kill?signal=KILL", NULL), 1);
	assert_int_equal(be->ops->evidence(be, &h, 600, &err), -1);
	assert_non_null(strstr(err.msg, "is still running after 600 ms: not proven gone"));
	/* it waited for the container to stop between questions, and still asked again */
	assert_true(seen("POST /v1.41/containers/" ID "/wait?condition=not-running", NULL) >= 1);
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"paused\",\"Pid\":4242}}");
	assert_int_equal(be->ops->evidence(be, &h, 300, &err), -1);
	assert_non_null(strstr(err.msg, "still paused"));
	/* created but started (a pid): not evidence either; created and never started: evidence */
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"created\",\"Pid\":4242}}");
	assert_int_equal(be->ops->evidence(be, &h, 300, &err), -1);
	assert_string_equal(h.evidence, ""); /* nothing proven, nothing said */
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"created\",\"Pid\":0}}");
	assert_int_equal(be->ops->evidence(be, &h, 300, &err), 0);
	assert_string_equal(h.evidence, "container never started for Id " ID " (podman inspect: State.Status created, Pid 0)");
	assert_int_equal(seen("GET /v1.41/containers/" ID "/json", NULL) >= 4, 1);
	assert_int_equal(seen("DELETE", NULL), 1); /* only after the evidence */
	be->ops->destroy(be);
}

/* A service that does not answer within the bound gives no evidence, within the bound. */
static void hung_service_is_not_evidence(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	be = backend_new();
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"exited\"}}");
	pthread_mutex_lock(&F.lock);
	F.routes[F.n_routes - 1].a.delay_ms = 1500;
	pthread_mutex_unlock(&F.lock);
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "no evidence of its end within 500 ms"));
	be->ops->destroy(be);
}

/* 409 (not running) and 404 (deleted) answers to a kill are no error: evidence() decides. */
static void stop_answers(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	be = backend_new();
	handle_of(be, &h);
	route("POST /v1.41/containers/" ID "/kill", 409, "{\"message\":\"container state improper\"}");
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	route("POST /v1.41/containers/" ID "/kill", 404, "{\"message\":\"no such container\"}");
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	route("POST /v1.41/containers/" ID "/kill", 500, "{\"message\":\"runtime exploded\"}");
	assert_int_equal(be->ops->stop(be, &h, &err), -1);
	assert_non_null(strstr(err.msg, "runtime exploded"));
	be->ops->destroy(be);
}

static void adopt_refuses_other_ids(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	be = backend_new();
	assert_int_equal(be->ops->adopt(be, "process:12:34", "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "podman:../../etc", "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "podman:" ID "/kill", "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "podman:" ID, "", &h, &err), 0);
	/* a handle nothing filled holds no container: refused before any request */
	memset(&h, 0, sizeof h);
	assert_int_equal(be->ops->stop(be, &h, &err), -1);
	assert_non_null(strstr(err.msg, "holds no container of the podman backend"));
	assert_int_equal(be->ops->evidence(be, &h, 100, &err), -1);
	assert_non_null(strstr(err.msg, "holds no container of the podman backend"));
	assert_int_equal(seen("POST /v1.41/containers/", NULL), 0);
	assert_int_equal(seen("GET /v1.41/containers/", NULL), 0);
	be->ops->destroy(be);
}

/* ---- start-up ---- */

static void missing_image_is_said_at_start(void **state)
{
	struct podman_settings set = { .image = "infra-sandbox-agent:nope", .network = "none" };
	struct backend *be = NULL;
	struct sb_err err = { 0 };

	(void)state;
	route("GET /v1.41/images/", 404, "{\"message\":\"no such image\"}");
	snprintf(set.socket, sizeof set.socket, "%s", F.sock);
	assert_int_equal(backend_podman_create(&be, &set, &err), -1);
	assert_non_null(strstr(err.msg, "no image 'infra-sandbox-agent:nope'"));
	assert_non_null(strstr(err.msg, "make image"));
	snprintf(set.socket, sizeof set.socket, "%s/none.sock", F.dir);
	assert_int_equal(backend_podman_create(&be, &set, &err), -1);
	assert_non_null(strstr(err.msg, "podman system service"));
	snprintf(set.image, sizeof set.image, "x?y=1");
	assert_int_equal(backend_podman_create(&be, &set, &err), -1);
	assert_non_null(strstr(err.msg, "not an image reference"));
}

/* ---- prepare: the container's description, and a failure that leaves nothing behind ---- */

struct prep {
	char priv[128], tls[160], wt[128], wtgit[160], hidden[160], objects[160], alternates[200];
	struct mount_entry e[5];
	struct mount_plan plan;
	struct sandbox_spec spec;
};

static void prep_make(struct prep *p, const char *worktree_name)
{
	snprintf(p->priv, sizeof p->priv, "%s/priv", F.dir);
	snprintf(p->tls, sizeof p->tls, "%s/tls", p->priv);
	snprintf(p->wt, sizeof p->wt, "%s/%s", F.dir, worktree_name);
	snprintf(p->wtgit, sizeof p->wtgit, "%s/.git", p->wt);
	snprintf(p->hidden, sizeof p->hidden, "%s/secret", p->wt);
	assert_int_equal(mkdir(p->priv, 0700) == 0 || errno == EEXIST, 1);
	assert_int_equal(mkdir(p->tls, 0700) == 0 || errno == EEXIST, 1);
	assert_int_equal(mkdir(p->wt, 0755) == 0 || errno == EEXIST, 1);
	p->e[0] = (struct mount_entry){ .source = p->wt, .target = p->wt, .mode = MOUNT_RW };
	p->e[1] = (struct mount_entry){ .source = p->wtgit, .target = p->wtgit, .mode = MOUNT_RO, .is_file = true };
	p->e[2] = (struct mount_entry){ .source = p->hidden, .target = p->hidden, .mode = MOUNT_HIDDEN };
	/* a read-only entry two levels inside a writable one, as objects/info/alternates is */
	snprintf(p->objects, sizeof p->objects, "%s/objects", F.dir);
	snprintf(p->alternates, sizeof p->alternates, "%s/info/alternates", p->objects);
	assert_int_equal(mkdir(p->objects, 0755) == 0 || errno == EEXIST, 1);
	p->e[3] = (struct mount_entry){ .source = p->objects, .target = p->objects, .mode = MOUNT_RW };
	p->e[4] = (struct mount_entry){ .source = p->alternates, .target = p->alternates, .mode = MOUNT_RO,
					.is_file = true };
	p->plan = (struct mount_plan){ .entries = p->e, .n = 5, .workdir = p->wt, .scratch = p->wt };
	p->spec = (struct sandbox_spec){ .session = "0123abcd", .generation = 7, .plan = &p->plan,
					 .private_dir = p->priv, .manager_name = "manager.infra-sandbox",
					 .host_uid = geteuid() == 0 ? 65534 : geteuid(),
					 .host_gid = geteuid() == 0 ? 65534 : getegid() };
}

static json_t *create_body(void)
{
	int last = -1;

	assert_int_equal(seen("POST /v1.41/containers/create", &last), 1);
	return json_loads(F.bodies[last], 0, NULL);
}

static bool has_string(json_t *array, const char *want)
{
	size_t i;
	json_t *v;

	json_array_foreach(array, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), want) == 0)
			return true;
	return false;
}

static void prepare_failure_describes_and_cleans_up(void **state)
{
	struct prep p;
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char want[512];
	json_t *body, *hc;

	(void)state;
	prep_make(&p, "wt");
	route("POST /v1.41/containers/create", 201, "{\"Id\":\"" ID "\"}");
	route("POST /v1.41/containers/" ID "/start", 204, "");
	route("GET /v1.41/containers/" ID "/json", 200, "{\"State\":{\"Status\":\"exited\",\"Pid\":0,\"ExitCode\":1}}");
	/* the logs of a container without a terminal: 8-byte frame headers */
	route_raw("GET /v1.41/containers/" ID "/logs", 200, "\x02\x00\x00\x00\x00\x00\x00\x09" "bad cert\n", 17);
	route("DELETE /v1.41/containers/" ID, 204, "");
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "preparing the container of session 0123abcd (generation 7)"));
	assert_non_null(strstr(err.msg, "the container is exited (exit code 1) before its agent served"));
	assert_non_null(strstr(err.msg, "bad cert"));
	assert_int_equal(seen("DELETE /v1.41/containers/" ID, NULL), 1);
	assert_string_equal(h.runtime_id, ""); /* proven gone: nothing left to track */

	body = create_body();
	assert_non_null(body);
	assert_int_equal(seen("POST /v1.41/containers/create?name=sandbox-0123abcd-7", NULL), 1);
	snprintf(want, sizeof want, "%u:%u", (unsigned)p.spec.host_uid, (unsigned)p.spec.host_gid);
	assert_string_equal(json_string_value(json_object_get(body, "User")), want);
	assert_string_equal(json_string_value(json_object_get(body, "Image")), "infra-sandbox-agent:dev");
	assert_string_equal(json_string_value(json_array_get(json_object_get(body, "Cmd"), 0)), "serve");
	assert_string_equal(json_string_value(json_object_get(json_object_get(body, "Labels"), "infra-sandbox.session")),
			    "0123abcd");
	assert_string_equal(json_string_value(json_object_get(json_object_get(body, "Labels"),
							      "infra-sandbox.generation")), "7");
	hc = json_object_get(body, "HostConfig");
	snprintf(want, sizeof want, "%s:%s:rw,nosuid,nodev,rprivate", p.wt, p.wt);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	snprintf(want, sizeof want, "%s:%s:ro,nosuid,nodev,rprivate", p.wtgit, p.wtgit);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	snprintf(want, sizeof want, "%s/priv/empty.d:%s:ro,nosuid,nodev,rprivate", F.dir, p.hidden);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	/* The agent's private directories at /.sandbox/agent, below the read-only image root, whatever
	 * the host path (a state dir under /tmp or /dev/shm would otherwise sit in a writable tmpfs of
	 * the container, where a command could rename its ancestors); its arguments name them there. */
	snprintf(want, sizeof want, "%s/priv/tls:/.sandbox/agent/tls:ro,nosuid,nodev,rprivate", F.dir);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	snprintf(want, sizeof want, "%s/priv/state:/.sandbox/agent/state:rw,nosuid,nodev,rprivate", F.dir);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	snprintf(want, sizeof want, "%s/priv/sock:/.sandbox/agent/sock:rw,nosuid,nodev,rprivate", F.dir);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	snprintf(want, sizeof want, "%s/priv/tls:%s/priv/tls:ro,nosuid,nodev,rprivate", F.dir, F.dir);
	assert_false(has_string(json_object_get(hc, "Binds"), want));
	assert_true(has_string(json_object_get(body, "Cmd"), "unix:/.sandbox/agent/sock/agent.sock"));
	assert_true(has_string(json_object_get(body, "Cmd"), "/.sandbox/agent/tls/agent.key"));
	assert_true(has_string(json_object_get(body, "Cmd"), "/.sandbox/agent/tls/agent.crt"));
	assert_true(has_string(json_object_get(body, "Cmd"), "/.sandbox/agent/tls/ca.crt"));
	assert_true(has_string(json_object_get(body, "Cmd"), "/.sandbox/agent/state"));
	assert_false(has_string(json_object_get(body, "Cmd"), "--net-socket")); /* policy proxy's alone */
	snprintf(want, sizeof want, "%s/priv/state", F.dir);
	assert_false(has_string(json_object_get(body, "Cmd"), want));
	/* The directory between a writable entry and the entry inside it is a mount point of its own. */
	snprintf(want, sizeof want, "%s/info:%s/info:rw,nosuid,nodev,rprivate", p.objects, p.objects);
	assert_true(has_string(json_object_get(hc, "Binds"), want));
	/* Sized /tmp (bytes and inodes) and /dev/shm. */
	assert_string_equal(json_string_value(json_object_get(json_object_get(hc, "Tmpfs"), "/tmp")),
			    "rw,nosuid,nodev,mode=1777,size=33554432");
	assert_int_equal(json_integer_value(json_object_get(hc, "ShmSize")), 16LL << 20);
	assert_true(has_string(json_object_get(hc, "SecurityOpt"), "unmask=/proc/*"));
	assert_true(has_string(json_object_get(hc, "SecurityOpt"), "no-new-privileges"));
	assert_true(has_string(json_object_get(hc, "SecurityOpt"), "seccomp=/etc/sandbox/seccomp.json"));
	assert_true(has_string(json_object_get(hc, "CapDrop"), "ALL"));
	assert_true(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
	assert_string_equal(json_string_value(json_object_get(hc, "NetworkMode")), "none");
	assert_int_equal(json_integer_value(json_object_get(hc, "NanoCpus")), 1500000000);
	assert_int_equal(json_integer_value(json_object_get(hc, "Memory")), 512LL << 20);
	assert_int_equal(json_integer_value(json_object_get(hc, "MemorySwap")), 512LL << 20);
	assert_int_equal(json_integer_value(json_object_get(hc, "PidsLimit")), 256);
	assert_null(json_object_get(hc, "PortBindings"));
	json_decref(body);
	be->ops->destroy(be);
}

static void refused_create_says_why(void **state)
{
	struct prep p;
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	prep_make(&p, "wt2");
	route("POST /v1.41/containers/create", 500, "{\"cause\":\"x\",\"message\":\"crun: cgroup setup failed\"}");
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "podman refused to create the container (HTTP 500): crun: cgroup setup failed"));
	assert_int_equal(seen("POST /v1.41/containers/" ID "/start", NULL), 0);
	be->ops->destroy(be);
}

/* Policy proxy on a service whose network is bridge: the container gets the runtime's loopback-only
 * namespace all the same, and the agent its net socket beside agent.sock (podman_net_listen). */
static void proxy_policy_has_no_network_but_the_net_socket(void **state)
{
	struct prep p;
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	json_t *body;

	(void)state;
	prep_make(&p, "wt4");
	p.spec.network = SANDBOX_NETWORK_PROXY;
	route("POST /v1.41/containers/create", 500, "{\"message\":\"stop here\"}");
	be = backend_new_on("bridge");
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	body = create_body();
	assert_non_null(body);
	assert_string_equal(json_string_value(json_object_get(json_object_get(body, "HostConfig"), "NetworkMode")), "none");
	assert_true(has_string(json_object_get(body, "Cmd"), "--net-socket"));
	assert_true(has_string(json_object_get(body, "Cmd"), "unix:/.sandbox/agent/sock/net.sock"));
	assert_non_null(be->ops->net_listen);
	json_decref(body);
	be->ops->destroy(be);
}

/* A Binds entry is "source:target:options": a path with ':' cannot be said, so nothing is created. */
static void colon_paths_are_refused(void **state)
{
	struct prep p;
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	prep_make(&p, "w:t");
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "cannot be bind-mounted into a container"));
	assert_int_equal(seen("POST /v1.41/containers/create", NULL), 0);
	be->ops->destroy(be);
}

static void never_host_root(void **state)
{
	struct prep p;
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	prep_make(&p, "wt3");
	p.spec.host_uid = 0;
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "never runs as host root"));
	assert_int_equal(seen("POST /v1.41/containers/create", NULL), 0);
	be->ops->destroy(be);
}

/* Recovery: a container of (session, generation) found by its labels. */
static void lookup_by_labels(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	int last = -1;

	(void)state;
	be = backend_new();
	route("GET /v1.41/containers/json", 200, "[{\"Id\":\"" ID "\"}]");
	assert_int_equal(be->ops->lookup(be, "0123abcd", 3, &h, &err), 1);
	assert_string_equal(h.runtime_id, "podman:" ID);
	assert_int_equal(seen("GET /v1.41/containers/json?all=true&filters=", &last), 1);
	assert_non_null(strstr(F.requests[last], "infra-sandbox.session%3D0123abcd"));
	assert_non_null(strstr(F.requests[last], "infra-sandbox.generation%3D3"));
	route("GET /v1.41/containers/json", 200, "[]");
	assert_int_equal(be->ops->lookup(be, "0123abcd", 3, &h, &err), 0);
	be->ops->destroy(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(evidence_exited_then_deleted, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(evidence_404_is_gone, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(accepted_kill_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(hung_service_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(stop_answers, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(adopt_refuses_other_ids, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(missing_image_is_said_at_start, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(prepare_failure_describes_and_cleans_up, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(refused_create_says_why, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(proxy_policy_has_no_network_but_the_net_socket, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(colon_paths_are_refused, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(never_host_root, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(lookup_by_labels, fake_start, fake_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
