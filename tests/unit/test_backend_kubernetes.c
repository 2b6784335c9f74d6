/* Unit tests of the kubernetes backend (manager/backend/backend_kubernetes.c, k8s_api.c,
 * k8s_kubeconfig.c) against a scripted stand-in for the API server on 127.0.0.1, serving recorded
 * shapes of pods of 1.20 (no hostUsers) and of a current version (hostUsers false): what evidence
 * is (the recorded UID's container terminated with the recorded containerID; a 404 or a watch
 * DELETED after this handle's delete with preconditions.uid) and what is not (Running, an accepted
 * delete, a deletionTimestamp, another UID under the name, ContainerStatusUnknown without a
 * containerID, a 404 no delete of ours preceded, a timeout); 409 on a wrong precondition; 410 Gone
 * on a watch (listed again); 429 then 200; the pod's description and the refusal of a server that
 * dropped a field the boundary needs; the kubeconfig's YAML and JSON forms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "k8s_api.h"
#include "k8s_netpol.h"
#include "pathfmt.h"
#include "testutil.h"

#define UID "6f2c1a9e-4b1d-4c55-9a55-0d7d1c2e3f40"
#define OTHER_UID "11111111-2222-3333-4444-555555555555"
#define CID "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define CID2 "containerd://fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define NAME "sandbox-abc123-1"
#define RID "kubernetes:" NAME "/" UID "/" CID
#define PODS "/api/v1/namespaces/sbtest/pods"
#define SECRETS "/api/v1/namespaces/sbtest/secrets"
#define MAX_REQUESTS 256

/* ---- the stand-in API server: one request per connection, answered from the script ---- */

struct route {
	const char *prefix;
	int status;
	char *body;
	int times; /* answers left; -1: always */
};

struct fake {
	char dir[64];
	int listen_fd, port;
	pthread_t thread;
	pthread_mutex_t lock;
	char *requests[MAX_REQUESTS], *bodies[MAX_REQUESTS];
	int n;
	struct route routes[32];
	int n_routes;
	volatile int stop;
	/* the agent's stand-in: accepts, waits for the probe's end of file, closes */
	int agent_fd;
	pthread_t agent_thread;
	int authorized; /* requests that carried the kubeconfig's bearer token */
};

static struct fake F;

static void route_n(const char *prefix, int status, const char *body, int times)
{
	pthread_mutex_lock(&F.lock);
	assert_true(F.n_routes < 32);
	F.routes[F.n_routes++] = (struct route){ prefix, status, strdup(body), times };
	pthread_mutex_unlock(&F.lock);
}

static void route(const char *prefix, int status, const char *body)
{
	route_n(prefix, status, body, -1);
}

/* The last matching route with answers left wins: a test can change an answer midway. */
static int answer_for(const char *line, char **body)
{
	int status = 404;

	*body = strdup("{\"kind\":\"Status\",\"message\":\"no route\",\"code\":404}");
	pthread_mutex_lock(&F.lock);
	for (int i = F.n_routes - 1; i >= 0; i--) {
		struct route *r = &F.routes[i];

		if (strncmp(line, r->prefix, strlen(r->prefix)) != 0 || r->times == 0)
			continue;
		if (r->times > 0)
			r->times--;
		free(*body);
		*body = strdup(r->body);
		status = r->status;
		break;
	}
	pthread_mutex_unlock(&F.lock);
	return status;
}

static void serve_one(int fd)
{
	char buf[65536], method[16], path[1024], line[1100], head[256];
	size_t have = 0;
	long length = 0;
	char *end = NULL, *cl, *body;
	int n, status;

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
	pthread_mutex_lock(&F.lock);
	if (strcasestr(buf, "\r\nAuthorization: Bearer tok-123\r\n") != NULL && strcasestr(buf, "\r\nAuthorization:") < end)
		F.authorized++;
	if (F.n < MAX_REQUESTS) {
		F.requests[F.n] = strdup(line);
		F.bodies[F.n] = strndup(end + 4, (size_t)length);
		F.n++;
	}
	pthread_mutex_unlock(&F.lock);
	status = answer_for(line, &body);
	n = snprintf(head, sizeof head,
		     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
		     status, strlen(body), status == 429 ? "Retry-After: 0\r\n" : "");
	if (send(fd, head, (size_t)n, MSG_NOSIGNAL) == n)
		(void)send(fd, body, strlen(body), MSG_NOSIGNAL);
	free(body);
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

static void *agent_main(void *arg)
{
	(void)arg;
	while (!F.stop) {
		struct pollfd p = { .fd = F.agent_fd, .events = POLLIN };
		char byte;
		int fd;

		if (poll(&p, 1, 50) <= 0)
			continue;
		fd = accept4(F.agent_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		while (read(fd, &byte, 1) > 0) {
		}
		close(fd);
	}
	return NULL;
}

/* How many requests start with prefix; the body of the last one in *body. */
static int seen(const char *prefix, const char **body)
{
	int count = 0;

	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < F.n; i++)
		if (strncmp(F.requests[i], prefix, strlen(prefix)) == 0) {
			count++;
			if (body != NULL)
				*body = F.bodies[i];
		}
	pthread_mutex_unlock(&F.lock);
	return count;
}

static const char *VERSION_133 = "{\"major\":\"1\",\"minor\":\"33\",\"gitVersion\":\"v1.33.1\"}";
static const char *VERSION_120 = "{\"major\":\"1\",\"minor\":\"20\",\"gitVersion\":\"v1.20.15\"}";

static void kubeconfig_write(const char *name, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", F.dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int fake_start(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;
	char text[1024];

	(void)state;
	memset(&F, 0, sizeof F);
	pthread_mutex_init(&F.lock, NULL);
	snprintf(F.dir, sizeof F.dir, "/tmp/sbkube.XXXXXX");
	if (mkdtemp(F.dir) == NULL)
		return -1;
	F.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (F.listen_fd < 0 || bind(F.listen_fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(F.listen_fd, 16) < 0 ||
	    getsockname(F.listen_fd, (struct sockaddr *)&sa, &len) < 0)
		return -1;
	F.port = ntohs(sa.sin_port);
	F.agent_fd = -1;
	snprintf(text, sizeof text,
		 "apiVersion: v1\n"
		 "kind: Config\n"
		 "clusters:\n"
		 "- cluster:\n"
		 "    server: http://127.0.0.1:%d\n"
		 "  name: test   # a comment\n"
		 "contexts:\n"
		 "- context:\n"
		 "    cluster: test\n"
		 "    user: \"manager\"\n"
		 "    namespace: sbtest\n"
		 "  name: ctx\n"
		 "current-context: ctx\n"
		 "preferences: {}\n"
		 "users:\n"
		 "- name: manager\n"
		 "  user:\n"
		 "    token: 'tok-123'\n",
		 F.port);
	kubeconfig_write("kubeconfig", text);
	route("GET /version", 200, VERSION_133);
	route("GET " PODS "?labelSelector=app.kubernetes.io", 200, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}");
	route("POST " SECRETS, 201, "{\"kind\":\"Secret\"}");
	route("DELETE " SECRETS "/", 200, "{\"kind\":\"Status\"}");
	return pthread_create(&F.thread, NULL, fake_main, NULL) == 0 ? 0 : -1;
}

static int fake_stop(void **state)
{
	(void)state;
	F.stop = 1;
	pthread_join(F.thread, NULL);
	if (F.agent_fd >= 0) {
		pthread_join(F.agent_thread, NULL);
		close(F.agent_fd);
	}
	close(F.listen_fd);
	for (int i = 0; i < F.n; i++) {
		free(F.requests[i]);
		free(F.bodies[i]);
	}
	for (int i = 0; i < F.n_routes; i++)
		free(F.routes[i].body);
	test_rmtree(F.dir);
	return 0;
}

static struct backend *backend_new_with(const char *claim)
{
	struct kubernetes_settings set = { .image = "infra-sandbox-agent:dev", .nano_cpus = 1500000000,
					   .memory_bytes = 512LL << 20, .pids = 256, .tmp_bytes = 32LL << 20,
					   .shm_bytes = 16LL << 20 };
	struct backend *be = NULL;
	struct sb_err err = { 0 };

	snprintf(set.kubeconfig, sizeof set.kubeconfig, "%s/kubeconfig", F.dir);
	snprintf(set.manager_volume, sizeof set.manager_volume, "%s/vol", F.dir);
	if (claim != NULL)
		snprintf(set.claim, sizeof set.claim, "%s", claim);
	else
		snprintf(set.volume_dir, sizeof set.volume_dir, "/node/vol");
	if (backend_kubernetes_create(&be, &set, &err) < 0)
		fail_msg("%s", err.msg);
	return be;
}

static struct backend *backend_new(void)
{
	return backend_new_with(NULL);
}

/* A pod as a server answers it: shape "1.20" (no hostUsers, procMount as the server kept it) or
 * "1.33" (hostUsers false). state is the container's "state" object; extra goes into metadata. */
static char *pod(const char *uid, bool host_users, const char *proc, const char *phase, const char *cstatus,
		 const char *extra_meta)
{
	char *s = NULL;

	if (asprintf(&s,
		     "{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"" NAME "\",\"namespace\":\"sbtest\","
		     "\"uid\":\"%s\",\"resourceVersion\":\"1234\"%s%s},"
		     "\"spec\":{%s\"restartPolicy\":\"Never\",\"securityContext\":{\"runAsNonRoot\":true,\"runAsUser\":1000,"
		     "\"seccompProfile\":{\"type\":\"Localhost\",\"localhostProfile\":\"infra-sandbox/seccomp.json\"}},"
		     "\"containers\":[{\"name\":\"agent\",\"image\":\"infra-sandbox-agent:dev\",\"imagePullPolicy\":\"Never\","
		     "\"securityContext\":{\"capabilities\":{\"drop\":[\"ALL\"]},\"privileged\":false,"
		     "\"readOnlyRootFilesystem\":true,\"allowPrivilegeEscalation\":false,\"procMount\":\"%s\"}}]},"
		     "\"status\":{\"phase\":\"%s\",\"podIP\":\"127.0.0.1\",\"containerStatuses\":[%s]}}",
		     uid, extra_meta[0] ? "," : "", extra_meta, host_users ? "\"hostUsers\":false," : "", proc, phase,
		     cstatus) < 0)
		fail();
	return s;
}

static const char *RUNNING = "{\"name\":\"agent\",\"containerID\":\"" CID "\",\"state\":{\"running\":"
			     "{\"startedAt\":\"2026-12-01T15:00:00Z\"}},\"ready\":true}";
static const char *TERMINATED = "{\"name\":\"agent\",\"containerID\":\"" CID "\",\"state\":{\"terminated\":"
				"{\"exitCode\":137,\"reason\":\"Error\",\"containerID\":\"" CID "\"}}}";
static const char *TERMINATED_OTHER = "{\"name\":\"agent\",\"containerID\":\"" CID2 "\",\"state\":{\"terminated\":"
				      "{\"exitCode\":0,\"reason\":\"Completed\",\"containerID\":\"" CID2 "\"}}}";
/* What the kubelet reports when it lost the container: no containerID anywhere. */
static const char *UNKNOWN = "{\"name\":\"agent\",\"state\":{\"terminated\":{\"exitCode\":137,"
			     "\"reason\":\"ContainerStatusUnknown\",\"message\":\"The container could not be located when "
			     "the pod was terminated\"}},\"lastState\":{}}";

static void route_pod(int status, char *body)
{
	char *list = NULL;

	route("GET " PODS "/" NAME, status, body);
	if (status == 200)
		assert_true(asprintf(&list, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"1234\"},\"items\":[%s]}",
				     body) > 0);
	else
		list = strdup("{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"1300\"},\"items\":[]}");
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME, 200, list);
	free(list);
	free(body);
}

static void handle_of(struct backend *be, struct sandbox_handle *h)
{
	struct sb_err err = { 0 };

	assert_int_equal(be->ops->adopt(be, RID, "127.0.0.1:7443", h, &err), 0);
}

/* ---- evidence ---- */

static void terminated_with_recorded_cid_is_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(200, pod(UID, true, "Unmasked", "Failed", TERMINATED, ""));
	route("DELETE " PODS "/" NAME, 200, "{\"kind\":\"Pod\"}");
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	assert_string_equal(h.evidence, "pod terminated for UID " UID " (container " CID " exited 137)");
	/* the ended pod is deleted, with its UID as precondition */
	assert_int_equal(seen("DELETE " PODS "/" NAME, NULL), 1);
	/* and its Secrets by the backend itself, not only by the garbage collector */
	assert_int_equal(seen("DELETE " SECRETS "/" NAME "-agent", NULL), 1);
	assert_int_equal(seen("DELETE " SECRETS "/" NAME "-credentials", NULL), 1);
	/* asked again (a probe proved it, then the sandbox's end asks): the kubelet's word stands,
	 * not the 404 of the pod it deleted, and the server is not asked */
	route_pod(404, strdup("{\"kind\":\"Status\",\"code\":404}"));
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	assert_string_equal(h.evidence, "pod terminated for UID " UID " (container " CID " exited 137)");
	assert_int_equal(seen("DELETE " PODS "/" NAME, NULL), 1);
	be->ops->destroy(be);
}

static void running_is_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "is Running after 500 ms: not proven gone"));
	assert_string_equal(h.evidence, "");
	be->ops->destroy(be);
}

/* An accepted delete, and the deletionTimestamp it sets, are requests. */
static void accepted_delete_and_deletion_timestamp_are_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	const char *body = NULL;
	json_t *opts;

	(void)state;
	route("DELETE " PODS "/" NAME, 200, "{\"kind\":\"Pod\"}");
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING,
			   "\"deletionTimestamp\":\"2026-12-01T15:01:00Z\",\"deletionGracePeriodSeconds\":2"));
	handle_of(be, &h);
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	assert_int_equal(seen("DELETE " PODS "/" NAME, &body), 1);
	opts = json_loads(body, 0, NULL);
	assert_non_null(opts);
	assert_string_equal(json_string_value(json_object_get(json_object_get(opts, "preconditions"), "uid")), UID);
	/* a grace period, never a force delete */
	assert_true(json_integer_value(json_object_get(opts, "gracePeriodSeconds")) > 0);
	json_decref(opts);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "Running, being deleted"));
	be->ops->destroy(be);
}

static void unknown_status_without_cid_is_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(200, pod(UID, true, "Unmasked", "Failed", UNKNOWN, ""));
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "ContainerStatusUnknown) without a containerID"));
	/* nor a container of another ID */
	route_pod(200, pod(UID, true, "Unmasked", "Succeeded", TERMINATED_OTHER, ""));
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "with another containerID"));
	be->ops->destroy(be);
}

static void other_uid_under_the_name_is_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(200, pod(OTHER_UID, true, "Unmasked", "Failed", TERMINATED, ""));
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "holds another pod (UID " OTHER_UID ")"));
	/* and a delete names the recorded UID: the server answers 409 for the other pod */
	route("DELETE " PODS "/" NAME, 409, "{\"kind\":\"Status\",\"code\":409,\"reason\":\"Conflict\",\"message\":"
	      "\"Precondition failed: UID in precondition: " UID ", UID in object meta: " OTHER_UID "\"}");
	assert_int_equal(be->ops->stop(be, &h, &err), -1);
	assert_non_null(strstr(err.msg, "the name holds another pod than UID " UID " (HTTP 409): Precondition failed"));
	assert_int_equal(be->ops->evidence(be, &h, 300, &err), -1);
	be->ops->destroy(be);
}

/* A missing pod is evidence only after this handle's delete with preconditions.uid was accepted. */
static void not_found_counts_only_after_our_delete(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(404, strdup("{\"kind\":\"Status\",\"code\":404}"));
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	assert_non_null(strstr(err.msg, "not found, and no delete with preconditions.uid"));
	/* a delete that found nothing is not ours either */
	route_n("DELETE " PODS "/" NAME, 404, "{\"kind\":\"Status\",\"code\":404}", 1);
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	assert_int_equal(be->ops->evidence(be, &h, 500, &err), -1);
	route("DELETE " PODS "/" NAME, 200, "{\"kind\":\"Pod\"}");
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	assert_int_equal(be->ops->evidence(be, &h, 2000, &err), 0);
	assert_string_equal(h.evidence, "pod UID " UID " gone (404 after delete with preconditions.uid)");
	/* after a manager restart the handle is new: no delete of its own yet */
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 300, &err), -1);
	be->ops->destroy(be);
}

static void watch_deleted_after_delete_is_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char *running = pod(UID, true, "Unmasked", "Running", RUNNING, "");
	char *events = NULL;

	(void)state;
	assert_true(asprintf(&events, "{\"type\":\"MODIFIED\",\"object\":%s}\n{\"type\":\"DELETED\",\"object\":%s}\n",
			     running, running) > 0);
	route("DELETE " PODS "/" NAME, 202, "{\"kind\":\"Pod\"}");
	route_pod(200, running);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", 200, events);
	free(events);
	handle_of(be, &h);
	assert_int_equal(be->ops->stop(be, &h, &err), 0);
	assert_int_equal(be->ops->evidence(be, &h, 3000, &err), 0);
	assert_string_equal(h.evidence, "pod UID " UID " gone (watch DELETED after delete with preconditions.uid)");
	be->ops->destroy(be);
}

/* A DELETED event without a delete of ours (a force delete by someone else) is not evidence. */
static void watch_deleted_without_our_delete_is_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char *running = pod(UID, true, "Unmasked", "Running", RUNNING, "");
	char *events = NULL;

	(void)state;
	assert_true(asprintf(&events, "{\"type\":\"DELETED\",\"object\":%s}\n", running) > 0);
	route_pod(200, running);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1", 200, events);
	free(events);
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 600, &err), -1);
	be->ops->destroy(be);
}

/* 410 Gone: the resourceVersion is too old; the backend lists again and watches from the new one. */
static void watch_gone_lists_again(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char *term = pod(UID, true, "Unmasked", "Failed", TERMINATED, "");
	char *running = pod(UID, true, "Unmasked", "Running", RUNNING, "");
	char *term_list = NULL, *running_list = NULL;

	(void)state;
	assert_true(asprintf(&term_list, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"5001\"},"
			     "\"items\":[%s]}", term) > 0);
	assert_true(asprintf(&running_list, "{\"kind\":\"PodList\",\"metadata\":{\"resourceVersion\":\"1234\"},"
			     "\"items\":[%s]}", running) > 0);
	route("DELETE " PODS "/" NAME, 200, "{}");
	/* the first list: Running at 1234; the watch from 1234: 410 Gone; the next list: terminated */
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME, 200, term_list);
	route_n("GET " PODS "?fieldSelector=metadata.name%3D" NAME, 200, running_list, 1);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", 410,
	      "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\",\"message\":\"too old resource version\"}");
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 3000, &err), 0);
	assert_string_equal(h.evidence, "pod terminated for UID " UID " (container " CID " exited 137)");
	assert_int_equal(seen("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", NULL), 1);
	assert_int_equal(seen("GET " PODS "?fieldSelector=metadata.name%3D" NAME, NULL), 3); /* list, watch, list */
	free(term_list);
	free(running_list);
	free(term);
	free(running);
	be->ops->destroy(be);
}

/* The same as an ERROR event inside a 200 watch. */
static void watch_error_event_gone_lists_again(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char *term = pod(UID, true, "Unmasked", "Failed", TERMINATED, "");
	char *running = pod(UID, true, "Unmasked", "Running", RUNNING, "");
	char *term_list = NULL, *running_list = NULL;

	(void)state;
	assert_true(asprintf(&term_list, "{\"metadata\":{\"resourceVersion\":\"5001\"},\"items\":[%s]}", term) > 0);
	assert_true(asprintf(&running_list, "{\"metadata\":{\"resourceVersion\":\"1234\"},\"items\":[%s]}", running) > 0);
	route("DELETE " PODS "/" NAME, 200, "{}");
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME, 200, term_list);
	route_n("GET " PODS "?fieldSelector=metadata.name%3D" NAME, 200, running_list, 1);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1", 200,
	      "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\n");
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 3000, &err), 0);
	assert_string_equal(h.evidence, "pod terminated for UID " UID " (container " CID " exited 137)");
	assert_int_equal(seen("GET " PODS "?fieldSelector=metadata.name%3D" NAME, NULL), 3);
	free(term_list);
	free(running_list);
	free(term);
	free(running);
	be->ops->destroy(be);
}

/* 429 and 5xx are asked again; the answer after them stands. */
static void throttled_then_answered(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route_pod(200, pod(UID, true, "Unmasked", "Failed", TERMINATED, ""));
	route("DELETE " PODS "/" NAME, 200, "{}");
	route_n("GET " PODS "?fieldSelector", 503, "{\"kind\":\"Status\",\"code\":503}", 1);
	route_n("GET " PODS "?fieldSelector", 429, "{\"kind\":\"Status\",\"code\":429,\"message\":\"slow down\"}", 2);
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 5000, &err), 0);
	assert_int_equal(seen("GET " PODS "?fieldSelector", NULL), 4);
	be->ops->destroy(be);
}

/* A server that never answers is no evidence, and the call is bounded. */
static void unreachable_server_is_not_evidence(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	route("GET " PODS "?fieldSelector", 500, "{\"kind\":\"Status\",\"code\":500,\"message\":\"etcd timeout\"}");
	handle_of(be, &h);
	assert_int_equal(be->ops->evidence(be, &h, 800, &err), -1);
	assert_non_null(strstr(err.msg, "not proven gone"));
	if (strstr(err.msg, "etcd timeout") == NULL)
		fail_msg("message: %s", err.msg);
	be->ops->destroy(be);
}

static void adopt_refuses_other_ids(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };

	(void)state;
	assert_int_equal(be->ops->adopt(be, "podman:0123", "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "kubernetes:Bad_Name/" UID "/" CID, "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "kubernetes:" NAME "/" UID "/notacid", "", &h, &err), -1);
	assert_int_equal(be->ops->adopt(be, "kubernetes:" NAME "/" UID "/", "", &h, &err), 0);
	/* a zeroed handle holds no pod */
	memset(&h, 0, sizeof h);
	assert_int_equal(be->ops->stop(be, &h, &err), -1);
	assert_int_equal(be->ops->evidence(be, &h, 100, &err), -1);
	be->ops->destroy(be);
}

static void lookup_by_labels(void **state)
{
	struct backend *be = backend_new();
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	char *p = pod(UID, true, "Unmasked", "Pending", "", ""), *list = NULL;

	(void)state;
	assert_true(asprintf(&list, "{\"kind\":\"PodList\",\"metadata\":{},\"items\":[%s]}", p) > 0);
	route("GET " PODS "?labelSelector=infra-sandbox/session%3Dabc123%2Cinfra-sandbox/generation%3D1", 200, list);
	assert_int_equal(be->ops->lookup(be, "abc123", 1, &h, &err), 1);
	/* no container yet: the containerID is empty, and a terminated one with any ID will do */
	assert_string_equal(h.runtime_id, "kubernetes:" NAME "/" UID "/");
	assert_int_equal(be->ops->lookup(be, "abc123", 2, &h, &err), -1); /* 404 from the stand-in */
	free(list);
	free(p);
	be->ops->destroy(be);
}

/* ---- the pod ---- */

struct prep {
	char vol[128], ws[160], git[200], hidden[200], hfile[200], priv[160], tls[200], file[260];
	struct mount_entry e[5];
	struct mount_plan plan;
	struct sandbox_spec spec;
};

static void prep_make(struct prep *p)
{
	uid_t uid = geteuid() == 0 ? 65534 : geteuid();
	gid_t gid = geteuid() == 0 ? 65534 : getegid();
	FILE *f;

	snprintf(p->vol, sizeof p->vol, "%s/vol", F.dir);
	snprintf(p->ws, sizeof p->ws, "%s/ws", p->vol);
	snprintf(p->git, sizeof p->git, "%s/ws/.git", p->vol);
	snprintf(p->hidden, sizeof p->hidden, "%s/ws/hidden", p->vol);
	snprintf(p->hfile, sizeof p->hfile, "%s/ws/.git/config", p->vol);
	snprintf(p->priv, sizeof p->priv, "%s/priv", F.dir);
	snprintf(p->tls, sizeof p->tls, "%s/priv/tls", F.dir);
	assert_int_equal(mkdir(p->vol, 0755), 0);
	assert_int_equal(mkdir(p->ws, 0755), 0);
	assert_int_equal(mkdir(p->git, 0755), 0);
	assert_int_equal(mkdir(p->hidden, 0755), 0);
	f = fopen(p->hfile, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(mkdir(p->priv, 0700), 0);
	assert_int_equal(mkdir(p->tls, 0700), 0);
	/* what private_dir.c puts there: the agent's certificate and key, the CA, the receipt key */
	for (int i = 0; i < 4; i++) {
		static const char *const names[] = { "tls/agent.crt", "tls/agent.key", "tls/ca.crt", "state/receipt.key" };

		if (i == 3) {
			snprintf(p->file, sizeof p->file, "%s/state", p->priv);
			assert_int_equal(mkdir(p->file, 0700), 0);
		}
		snprintf(p->file, sizeof p->file, "%s/%s", p->priv, names[i]);
		f = fopen(p->file, "w");
		assert_non_null(f);
		fputs(i == 3 ? "0123456789abcdef0123456789abcdef" : names[i], f);
		fclose(f);
	}
	p->e[0] = (struct mount_entry){ p->ws, p->ws, MOUNT_RW, false, "worktree" };
	p->e[1] = (struct mount_entry){ p->git, p->git, MOUNT_RO, false, "git metadata" };
	p->e[2] = (struct mount_entry){ p->hidden, p->hidden, MOUNT_HIDDEN, false, "hidden" };
	p->e[3] = (struct mount_entry){ p->hfile, p->hfile, MOUNT_HIDDEN, true, "hidden file" };
	p->e[4] = (struct mount_entry){ "/scratch", "/scratch", MOUNT_TMPFS, false, "scratch" };
	p->plan = (struct mount_plan){ p->e, 5, p->ws, "/scratch" };
	p->spec = (struct sandbox_spec){ .session = "abc123", .generation = 1, .plan = &p->plan, .private_dir = p->priv,
					 .agent_path = "/unused", .manager_name = "sandbox-manager", .host_uid = uid,
					 .host_gid = gid };
}

static void agent_stand_in(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(KUBERNETES_AGENT_PORT) };

	F.agent_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(F.agent_fd >= 0);
	setsockopt(F.agent_fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
	if (bind(F.agent_fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		skip(); /* the port is another process's on this machine */
	assert_int_equal(listen(F.agent_fd, 8), 0);
	assert_int_equal(pthread_create(&F.agent_thread, NULL, agent_main, NULL), 0);
}

static json_t *mount_of(json_t *podj, const char *path, json_t **volume)
{
	json_t *mounts = json_object_get(json_array_get(json_object_get(json_object_get(podj, "spec"), "containers"), 0),
					 "volumeMounts");
	size_t i, k;
	json_t *m, *v;

	json_array_foreach(mounts, i, m)
		if (strcmp(json_string_value(json_object_get(m, "mountPath")), path) == 0) {
			json_array_foreach(json_object_get(json_object_get(podj, "spec"), "volumes"), k, v)
				if (json_equal(json_object_get(v, "name"), json_object_get(m, "name")))
					*volume = v;
			return m;
		}
	return NULL;
}

/* The pod's readiness waits on a watch of its next change, and the event's object decides as a GET's
 * reply would (issue 32: the kubelet's status arrives as an event, not at a poll's next tick): the
 * server's GET says Pending and only the watch from its resourceVersion says Running, so the pod is
 * ready by the event, read once by GET. */
static void prepare_ready_from_a_watch_event(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	char *pending = pod(UID, true, "Unmasked", "Pending", "", "");
	char *running = pod(UID, true, "Unmasked", "Running", RUNNING, "");
	char *events = NULL;

	(void)state;
	agent_stand_in();
	prep_make(&p);
	route("POST " PODS, 201, pending);
	route_pod(200, strdup(pending));
	assert_true(asprintf(&events, "{\"type\":\"MODIFIED\",\"object\":%s}\n", running) > 0);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", 200, events);
	free(events);
	free(running);
	free(pending);
	be = backend_new();
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	assert_string_equal(h.runtime_id, RID);
	assert_string_equal(h.address, "127.0.0.1:7443");
	assert_int_equal(seen("GET " PODS "/" NAME, NULL), 1);
	assert_int_equal(seen("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", NULL), 1);
	be->ops->destroy(be);
}

static void prepare_makes_the_pod(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	const char *body = NULL;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	char node[300];
	json_t *pj, *spec, *c, *sc, *m, *v = NULL;

	(void)state;
	agent_stand_in();
	prep_make(&p);
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new();
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	/* the sandbox's identity: the pod's name, UID and containerID; the agent at the pod IP */
	assert_string_equal(h.runtime_id, RID);
	assert_string_equal(h.address, "127.0.0.1:7443");
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	assert_non_null(pj);
	spec = json_object_get(pj, "spec");
	c = json_array_get(json_object_get(spec, "containers"), 0);
	sc = json_object_get(c, "securityContext");
	assert_string_equal(json_string_value(json_object_get(spec, "restartPolicy")), "Never");
	assert_true(json_is_false(json_object_get(spec, "hostUsers")));
	assert_null(json_object_get(spec, "activeDeadlineSeconds"));
	assert_true(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
	assert_true(json_is_true(json_object_get(json_object_get(spec, "securityContext"), "runAsNonRoot")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(spec, "securityContext"), "runAsUser")),
			 p.spec.host_uid);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(spec, "securityContext"),
						"seccompProfile"), "localhostProfile")), "infra-sandbox/seccomp.json");
	assert_string_equal(json_string_value(json_object_get(c, "imagePullPolicy")), "Never");
	assert_string_equal(json_string_value(json_object_get(c, "image")), "infra-sandbox-agent:dev");
	assert_string_equal(json_string_value(json_object_get(sc, "procMount")), "Unmasked");
	assert_true(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
	assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(sc, "capabilities"), "drop"), 0)),
			    "ALL");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "limits"),
						"cpu")), "1500m");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "limits"),
						"memory")), "536870912");
	/* what the scheduler reserves: small, so that a node holds more than one sandbox per CPU */
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "requests"),
						"cpu")), "100m");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c, "resources"), "requests"),
						"memory")), "134217728");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(pj, "metadata"), "labels"),
						"infra-sandbox/session")), "abc123");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(pj, "metadata"), "labels"),
						"infra-sandbox/generation")), "1");
	/* the agent listens on its fixed TCP port */
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "args"), 2)), "0.0.0.0:7443");
	/* the workspace at its own path, from the node's copy of the volume; git metadata read-only */
	m = mount_of(pj, p.ws, &v);
	assert_non_null(m);
	assert_true(json_is_false(json_object_get(m, "readOnly")));
	snprintf(node, sizeof node, "/node/vol/ws");
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "hostPath"), "path")), node);
	m = mount_of(pj, p.git, &v);
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "hostPath"), "path")), "/node/vol/ws/.git");
	m = mount_of(pj, p.hidden, &v);
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_non_null(json_object_get(v, "emptyDir"));
	/* a hidden file: the agent Secret's empty item, alone in its volume, by subPath */
	m = mount_of(pj, p.hfile, &v);
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_string_equal(json_string_value(json_object_get(m, "subPath")), "empty");
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "secret"), "secretName")), NAME "-agent");
	assert_int_equal(json_array_size(json_object_get(json_object_get(v, "secret"), "items")), 1);
	m = mount_of(pj, "/scratch", &v);
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "emptyDir"), "medium")), "Memory");
	/* the agent's material from its Secret, read-only; its state in memory; no hostPath of the
	 * private directory */
	m = mount_of(pj, "/.sandbox/agent/tls", &v);
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "secret"), "secretName")), NAME "-agent");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "secret"), "defaultMode")), 0400);
	m = mount_of(pj, "/.sandbox/agent/run", &v);
	assert_true(json_is_false(json_object_get(m, "readOnly")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "emptyDir"), "medium")), "Memory");
	assert_null(strstr(body, p.priv));
	assert_string_equal(json_string_value(json_array_get(json_object_get(c, "args"), 12)), "/.sandbox/agent/run/state");
	{
		json_t *args = json_object_get(c, "args");
		size_t n = json_array_size(args);

		assert_string_equal(json_string_value(json_array_get(args, n - 4)), "--receipt-key");
		assert_string_equal(json_string_value(json_array_get(args, n - 3)), "/.sandbox/agent/tls/receipt.key");
		/* the command's user named from the image's files, its home the scratch folder (HOME) */
		assert_string_equal(json_string_value(json_array_get(args, n - 2)), "--user-home");
		assert_string_equal(json_string_value(json_array_get(args, n - 1)), "/scratch");
	}
	json_decref(pj);
	/* the agent Secret: after the pod, owned by it (not its controller, never blocking its
	 * deletion), with the four files and the empty item; no credentials Secret without a snapshot */
	assert_int_equal(seen("POST " SECRETS, &body), 1);
	pj = json_loads(body, 0, NULL);
	assert_non_null(pj);
	v = json_array_get(json_object_get(json_object_get(pj, "metadata"), "ownerReferences"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(pj, "metadata"), "name")), NAME "-agent");
	assert_string_equal(json_string_value(json_object_get(v, "kind")), "Pod");
	assert_string_equal(json_string_value(json_object_get(v, "name")), NAME);
	assert_string_equal(json_string_value(json_object_get(v, "uid")), UID);
	assert_true(json_is_false(json_object_get(v, "blockOwnerDeletion")));
	assert_null(json_object_get(v, "controller"));
	/* base64 of the 32 bytes written above */
	assert_string_equal(json_string_value(json_object_get(json_object_get(pj, "data"), "receipt.key")),
			    "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=");
	assert_string_equal(json_string_value(json_object_get(json_object_get(pj, "data"), "agent.key")), "dGxzL2FnZW50LmtleQ==");
	assert_int_equal(json_object_size(json_object_get(pj, "data")), 5);
	json_decref(pj);
	be->ops->destroy(be);
}

/* pvc:CLAIM: one volume of the claim, each plan entry a subPath of it (the source's path below
 * the manager's volume), git metadata read-only; the snapshot's credentials from a Secret of
 * their own at their path. */
static void pvc_mounts_subpaths(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	const char *body = NULL;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	char creds[200];
	FILE *f;
	json_t *pj, *m, *v = NULL;

	(void)state;
	agent_stand_in();
	prep_make(&p);
	snprintf(creds, sizeof creds, "%s/credentials", p.priv);
	assert_int_equal(mkdir(creds, 0700), 0);
	snprintf(p.file, sizeof p.file, "%s/kubernetes-x.kubeconfig", creds);
	f = fopen(p.file, "w");
	assert_non_null(f);
	fputs("kind: Config\n", f);
	fclose(f);
	p.spec.credentials_dir = creds;
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new_with("ws-claim");
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	m = mount_of(pj, p.ws, &v);
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "persistentVolumeClaim"), "claimName")),
			    "ws-claim");
	assert_string_equal(json_string_value(json_object_get(m, "subPath")), "ws");
	assert_true(json_is_false(json_object_get(m, "readOnly")));
	m = mount_of(pj, p.git, &v);
	assert_string_equal(json_string_value(json_object_get(m, "subPath")), "ws/.git");
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_null(strstr(body, "hostPath"));
	m = mount_of(pj, creds, &v);
	assert_true(json_is_true(json_object_get(m, "readOnly")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "secret"), "secretName")),
			    NAME "-credentials");
	json_decref(pj);
	/* two Secrets: the agent's, then the credentials' with the snapshot's file */
	assert_int_equal(seen("POST " SECRETS, &body), 2);
	pj = json_loads(body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(json_object_get(pj, "metadata"), "name")), NAME "-credentials");
	assert_string_equal(json_string_value(json_object_get(json_object_get(pj, "data"), "kubernetes-x.kubeconfig")),
			    "a2luZDogQ29uZmlnCg==");
	json_decref(pj);
	be->ops->destroy(be);
}

/* The credentials bound to the pod (broker_tokenrequest.c's boundObjectRef): prepare() makes them
 * through spec.credentials once, with the created pod's kind, name, UID and namespace, after its
 * create and before it waits for the agent; the pod runs as the grants' service account, with no
 * token of it mounted. A failure there fails prepare() and the pod is deleted with evidence. */
struct bind_seen {
	int calls, requests_before;
	char kind[16], api_version[16], ns[64], name[64], uid[40];
	int fail;
};

static int bind_record(void *ctx, const struct sandbox_bound *b, struct sb_err *err)
{
	struct bind_seen *s = ctx;

	s->calls++;
	pthread_mutex_lock(&F.lock);
	s->requests_before = F.n;
	pthread_mutex_unlock(&F.lock);
	snprintf(s->kind, sizeof s->kind, "%s", b->kind);
	snprintf(s->api_version, sizeof s->api_version, "%s", b->api_version);
	snprintf(s->ns, sizeof s->ns, "%s", b->ns);
	snprintf(s->name, sizeof s->name, "%s", b->name);
	snprintf(s->uid, sizeof s->uid, "%s", b->uid);
	return s->fail ? sb_fail(err, 0, "resource kubernetes:ci: the TokenRequest API answered 409 Conflict") : 0;
}

static void prepare_binds_the_credentials_to_the_pod(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	struct bind_seen seen_bind = { 0 };
	const char *body = NULL;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	json_t *pj, *spec;

	(void)state;
	agent_stand_in();
	prep_make(&p);
	p.spec.service_account = "deployer";
	p.spec.credentials = bind_record;
	p.spec.credentials_ctx = &seen_bind;
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new();
	assert_true(be->ops->binds_credentials);
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(seen_bind.calls, 1);
	assert_string_equal(seen_bind.kind, "Pod");
	assert_string_equal(seen_bind.api_version, "v1");
	assert_string_equal(seen_bind.ns, "sbtest");
	assert_string_equal(seen_bind.name, NAME);
	assert_string_equal(seen_bind.uid, UID);
	/* right after the create (the version, the start's list, the create), before any read-back */
	assert_int_equal(seen_bind.requests_before, 3);
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	spec = json_object_get(pj, "spec");
	assert_string_equal(json_string_value(json_object_get(spec, "serviceAccountName")), "deployer");
	assert_true(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
	json_decref(pj);
	be->ops->destroy(be);
}

static void failed_credentials_delete_the_pod(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	struct bind_seen seen_bind = { .fail = 1 };
	const char *body = NULL;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	json_t *pj;

	(void)state;
	prep_make(&p);
	p.spec.credentials = bind_record;
	p.spec.credentials_ctx = &seen_bind;
	route("POST " PODS, 201, created);
	route("DELETE " PODS "/" NAME, 200, "{}");
	route("GET " PODS "?fieldSelector", 200, "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}");
	free(created);
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "the credentials of pod " NAME " (UID " UID ")"));
	assert_non_null(strstr(err.msg, "409 Conflict"));
	assert_null(strstr(err.msg, "NOT proven"));
	assert_string_equal(h.runtime_id, "");
	assert_int_equal(seen("DELETE " PODS "/" NAME, &body), 1);
	assert_non_null(strstr(body, UID));
	/* no grant needs a service account: the pod has none named */
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	assert_null(json_object_get(json_object_get(pj, "spec"), "serviceAccountName"));
	json_decref(pj);
	be->ops->destroy(be);
}

/* 1.20 has no hostUsers: it is not sent; a server that kept procMount Default is refused. */
static void server_120_without_unmasked_is_refused(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	const char *body = NULL;
	char *created = pod(UID, false, "Default", "Pending", "", "");
	json_t *pj;

	(void)state;
	prep_make(&p);
	route("GET /version", 200, VERSION_120);
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, false, "Default", "Pending", "", ""));
	route("DELETE " PODS "/" NAME, 200, "{}");
	/* once deleted, the list no longer holds it */
	route("GET " PODS "?fieldSelector", 200, "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}");
	free(created);
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "the API server (1.20) did not keep procMount Unmasked"));
	/* and its end is proven: nothing stays behind */
	assert_null(strstr(err.msg, "NOT proven"));
	assert_string_equal(h.runtime_id, "");
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	assert_null(json_object_get(json_object_get(pj, "spec"), "hostUsers"));
	json_decref(pj);
	/* the refused pod is deleted, by its UID */
	assert_int_equal(seen("DELETE " PODS "/" NAME, &body), 1);
	assert_non_null(strstr(body, UID));
	be->ops->destroy(be);
}

/* A current server that dropped hostUsers (its feature gate off) is refused. */
static void dropped_host_users_is_refused(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	char *created = pod(UID, false, "Unmasked", "Pending", "", "");

	(void)state;
	prep_make(&p);
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, false, "Unmasked", "Pending", "", ""));
	route("DELETE " PODS "/" NAME, 200, "{}");
	route("GET " PODS "?fieldSelector", 200, "{\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[]}");
	free(created);
	be = backend_new();
	assert_int_equal(be->ops->prepare(be, &p.spec, &h, &err), -1);
	assert_non_null(strstr(err.msg, "did not keep spec.hostUsers false"));
	assert_int_equal(seen("DELETE " PODS "/" NAME, NULL), 1);
	be->ops->destroy(be);
}

/* ---- the kubeconfig ---- */

/* A pod deleted by someone else (kubectl delete pod: graceful) is out of the API before the manager
 * looks: a watch from the create's resourceVersion replays its last state, the kubelet's word that the
 * recorded container terminated, which is evidence; a force delete's last state (Running) is not. */
static void deleted_by_another(bool graceful)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	char *gone = pod(UID, true, "Unmasked", graceful ? "Failed" : "Running", graceful ? TERMINATED : RUNNING,
			 "\"deletionTimestamp\":\"2026-12-01T15:01:00Z\"");
	char *events = NULL;

	agent_stand_in();
	prep_make(&p);
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new();
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	/* now: no such pod; its history from the create (resourceVersion 1234) ends in DELETED */
	route_pod(404, strdup("{}"));
	assert_true(asprintf(&events, "{\"type\":\"DELETED\",\"object\":%s}\n", gone) > 0);
	route("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", 200, events);
	free(events);
	free(gone);
	if (graceful) {
		assert_int_equal(be->ops->evidence(be, &h, 3000, &err), 0);
		assert_string_equal(h.evidence, "pod terminated for UID " UID " (container " CID " exited 137)");
	} else {
		assert_int_equal(be->ops->evidence(be, &h, 800, &err), -1);
		assert_non_null(strstr(err.msg, "not proven gone"));
		assert_string_equal(h.evidence, "");
	}
	/* the history is asked for once, not in a loop */
	assert_int_equal(seen("GET " PODS "?fieldSelector=metadata.name%3D" NAME "&watch=1&resourceVersion=1234", NULL), 1);
	be->ops->destroy(be);
}

static void deleted_by_another_gracefully_is_evidence(void **state)
{
	(void)state;
	deleted_by_another(true);
}

static void force_deleted_by_another_is_not_evidence(void **state)
{
	(void)state;
	deleted_by_another(false);
}

static void kubeconfig_forms(void **state)
{
	struct k8s_conn c;
	struct sb_err err = { 0 };
	char path[128];

	(void)state;
	snprintf(path, sizeof path, "%s/kubeconfig", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), 0);
	assert_string_equal(c.token, "tok-123");
	assert_string_equal(c.namespace, "sbtest");
	assert_null(c.cert_pem);
	k8s_conn_free(&c);
	/* the client-certificate form, base64 data, and the sequence written at a deeper indent */
	kubeconfig_write("cert.yaml", "apiVersion: v1\nclusters:\n  - name: c\n    cluster:\n"
			 "      server: https://10.0.0.1:6443/\n      certificate-authority-data: Q0EtUEVN\n"
			 "contexts:\n  - name: x\n    context: {cluster: c, user: u}\n");
	snprintf(path, sizeof path, "%s/cert.yaml", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), -1);
	assert_non_null(strstr(err.msg, "flow collections"));
	kubeconfig_write("cert.yaml", "apiVersion: v1\nclusters:\n  - name: c\n    cluster:\n"
			 "      server: https://10.0.0.1:6443/\n      certificate-authority-data: Q0EtUEVN\n"
			 "contexts:\n  - name: x\n    context:\n      cluster: c\n      user: u\n"
			 "current-context: x\nusers:\n  - name: u\n    user:\n"
			 "      client-certificate-data: Q0VSVA==\n      client-key-data: S0VZ\n");
	assert_int_equal(k8s_conn_load(&c, path, &err), 0);
	assert_string_equal(c.server, "https://10.0.0.1:6443");
	assert_string_equal(c.ca_pem, "CA-PEM");
	assert_string_equal(c.cert_pem, "CERT");
	assert_string_equal(c.key_pem, "KEY");
	assert_null(c.token);
	assert_string_equal(c.namespace, "");
	k8s_conn_free(&c);
	/* the JSON form */
	kubeconfig_write("k.json", "{\"current-context\":\"x\",\"contexts\":[{\"name\":\"x\",\"context\":{\"cluster\":\"c\","
			 "\"user\":\"u\",\"namespace\":\"ns1\"}}],\"clusters\":[{\"name\":\"c\",\"cluster\":{\"server\":"
			 "\"https://k:6443\"}}],\"users\":[{\"name\":\"u\",\"user\":{\"token\":\"t\"}}]}");
	snprintf(path, sizeof path, "%s/k.json", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), 0);
	assert_string_equal(c.namespace, "ns1");
	k8s_conn_free(&c);
	/* what would run a program, or turn verification off, is refused */
	kubeconfig_write("exec.yaml", "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
			 "clusters:\n- name: c\n  cluster:\n    server: https://k:6443\nusers:\n- name: u\n  user:\n"
			 "    exec:\n      command: aws\n      args:\n      - eks\n");
	snprintf(path, sizeof path, "%s/exec.yaml", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), -1);
	assert_non_null(strstr(err.msg, "never runs"));
	kubeconfig_write("insecure.yaml", "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
			 "clusters:\n- name: c\n  cluster:\n    server: https://k:6443\n    insecure-skip-tls-verify: true\n"
			 "users:\n- name: u\n  user:\n    token: t\n");
	snprintf(path, sizeof path, "%s/insecure.yaml", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), -1);
	assert_non_null(strstr(err.msg, "insecure-skip-tls-verify"));
	/* clear-text HTTP only to this host */
	kubeconfig_write("http.yaml", "current-context: x\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n"
			 "clusters:\n- name: c\n  cluster:\n    server: http://10.0.0.1:8080\nusers:\n- name: u\n  user:\n"
			 "    token: t\n");
	snprintf(path, sizeof path, "%s/http.yaml", F.dir);
	assert_int_equal(k8s_conn_load(&c, path, &err), -1);
	assert_non_null(strstr(err.msg, "must be https://"));
}

static void token_is_sent_at_start(void **state)
{
	struct backend *be = backend_new();

	(void)state;
	/* every request carried the kubeconfig's token, to the kubeconfig's server */
	assert_int_equal(seen("GET /version", NULL), 1);
	assert_int_equal(F.authorized, F.n);
	assert_int_equal(seen("GET " PODS "?labelSelector=app.kubernetes.io/managed-by%3Dinfra-sandbox-manager", NULL), 1);
	be->ops->destroy(be);
}

/* ---- deploy/kubernetes/networkpolicy.yaml against the labels the backend sets ---- */

/* The YAML file's documents as a JSON array (python3's yaml, a package of scripts/deps.sh), or NULL. */
static json_t *yaml_load(const char *path)
{
	static const char conv[] = "import json, sys, yaml; json.dump(list(yaml.safe_load_all(open(sys.argv[1]))), sys.stdout)";
	char buf[65536];
	size_t len = 0;
	ssize_t r;
	int fd[2], status;
	pid_t pid;

	assert_int_equal(pipe2(fd, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 1);
		execlp("python3", "python3", "-c", conv, path, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	while (len < sizeof buf - 1 && (r = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)r;
	close(fd[0]);
	buf[len] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return NULL;
	return json_loads(buf, 0, NULL);
}

/* The document of kind in the file's documents, or NULL. */
static json_t *doc_of_kind(json_t *docs, const char *kind)
{
	size_t i;
	json_t *d;

	json_array_foreach(docs, i, d)
		if (json_is_string(json_object_get(d, "kind")) && strcmp(json_string_value(json_object_get(d, "kind")), kind) == 0)
			return d;
	return NULL;
}

/* The document whose metadata.name is name in the file's documents, or NULL. */
static json_t *doc_named(json_t *docs, const char *name)
{
	size_t i;
	json_t *d, *n;

	json_array_foreach(docs, i, d) {
		n = json_object_get(json_object_get(d, "metadata"), "name");
		if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
			return d;
	}
	return NULL;
}

/* A matchLabels selector (non-empty, and nothing but matchLabels) selects labels. */
/* One matchExpressions entry (In, NotIn: the operators deploy/ uses) against labels. */
static bool expression_holds(json_t *e, json_t *labels)
{
	const char *op = json_string_value(json_object_get(e, "operator"));
	json_t *have = json_object_get(labels, json_string_value(json_object_get(e, "key"))), *v;
	bool in = false;
	size_t i;

	json_array_foreach(json_object_get(e, "values"), i, v)
		in = in || (json_is_string(have) && strcmp(json_string_value(have), json_string_value(v)) == 0);
	assert_true(strcmp(op, "In") == 0 || strcmp(op, "NotIn") == 0);
	return strcmp(op, "In") == 0 ? in : !in;
}

static bool selects(json_t *selector, json_t *labels)
{
	json_t *want = json_object_get(selector, "matchLabels"), *v;
	const char *k;
	size_t i;

	assert_int_equal(json_object_size(selector), 1 + (json_object_get(selector, "matchExpressions") != NULL));
	assert_true(json_object_size(want) > 0);
	json_object_foreach(want, k, v)
		if (!json_is_string(json_object_get(labels, k)) ||
		    strcmp(json_string_value(json_object_get(labels, k)), json_string_value(v)) != 0)
			return false;
	json_array_foreach(json_object_get(selector, "matchExpressions"), i, v)
		if (!expression_holds(v, labels))
			return false;
	return true;
}

/* The policy's pod selector picks the pods the backend makes and not the manager's pod (deployment.yaml);
 * its only ingress is from the manager's pod, on the agent's port; no egress rule names the manager's
 * pod. A label renamed on either side (k8s_pod.h, deployment.yaml or the policy) fails here. */
static void netpol_selects_the_pods(void **state)
{
	struct backend *be;
	struct sandbox_handle h;
	struct sb_err err = { 0 };
	struct prep p;
	const char *body = NULL;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	json_t *pj, *pol_docs, *dep_docs, *pol, *dep, *pod_labels, *mgr_labels, *spec, *in, *rule, *to, *mine;
	json_t *proxy_pol = k8s_netpol_body();
	size_t i, j;

	(void)state;
	pol_docs = yaml_load("deploy/kubernetes/networkpolicy.yaml");
	dep_docs = yaml_load("deploy/kubernetes/deployment.yaml");
	if (pol_docs == NULL || dep_docs == NULL)
		skip_setup("python3 with its yaml package (python3-yaml, scripts/deps.sh) reads deploy/kubernetes/, "
			   "from the repository's root");
	agent_stand_in();
	prep_make(&p);
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new();
	if (be->ops->prepare(be, &p.spec, &h, &err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(seen("POST " PODS, &body), 1);
	pj = json_loads(body, 0, NULL);
	assert_non_null(pj);
	pod_labels = json_object_get(json_object_get(pj, "metadata"), "labels");
	pol = doc_of_kind(pol_docs, "NetworkPolicy");
	dep = doc_of_kind(dep_docs, "Deployment");
	assert_non_null(pol);
	assert_non_null(dep);
	mgr_labels = json_object_get(json_object_get(json_object_get(json_object_get(dep, "spec"), "template"), "metadata"),
				     "labels");
	spec = json_object_get(pol, "spec");
	assert_true(selects(json_object_get(spec, "podSelector"), pod_labels));
	assert_false(selects(json_object_get(spec, "podSelector"), mgr_labels));
	assert_int_equal(json_array_size(json_object_get(spec, "policyTypes")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "policyTypes"), 0)), "Ingress");
	in = json_object_get(spec, "ingress");
	assert_int_equal(json_array_size(in), 1);
	rule = json_array_get(in, 0);
	assert_int_equal(json_array_size(json_object_get(rule, "from")), 1);
	assert_true(selects(json_object_get(json_array_get(json_object_get(rule, "from"), 0), "podSelector"), mgr_labels));
	assert_false(selects(json_object_get(json_array_get(json_object_get(rule, "from"), 0), "podSelector"), pod_labels));
	assert_int_equal(json_array_size(json_object_get(rule, "ports")), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(rule, "ports"), 0), "port")),
			 KUBERNETES_AGENT_PORT);
	/* Their egress under policy open: every sandbox pod but one of policy proxy, whose policy of
	 * no egress (k8s_netpol.c) would lose to this one's allowances (policies add up). */
	pol = doc_named(pol_docs, "sandbox-pods-egress");
	assert_non_null(pol);
	spec = json_object_get(pol, "spec");
	assert_true(selects(json_object_get(spec, "podSelector"), pod_labels));
	assert_false(selects(json_object_get(spec, "podSelector"), mgr_labels));
	mine = json_object_get(json_object_get(proxy_pol, "spec"), "podSelector");
	assert_false(selects(mine, pod_labels));
	json_object_set_new(pod_labels, LABEL_NETWORK, json_string("proxy"));
	assert_false(selects(json_object_get(spec, "podSelector"), pod_labels));
	assert_true(selects(json_object_get(json_object_get(doc_named(pol_docs, "sandbox-pods"), "spec"), "podSelector"),
			    pod_labels));
	assert_true(selects(mine, pod_labels));
	json_object_del(pod_labels, LABEL_NETWORK);
	assert_int_equal(json_array_size(json_object_get(spec, "policyTypes")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(spec, "policyTypes"), 0)), "Egress");
	json_array_foreach(json_object_get(spec, "egress"), i, rule)
		json_array_foreach(json_object_get(rule, "to"), j, to)
			if (json_object_get(to, "podSelector") != NULL && json_object_get(to, "namespaceSelector") == NULL)
				fail_msg("egress rule %zu allows pods of the manager's namespace", i);
	/* The managers' policy (issue 29): it selects the managers and no sandbox pod, and its one ingress
	 * rule lets in the control API's port from pods that are not sandboxes: a sandbox reaches no port of
	 * a manager (the agent link is the manager's connection to the sandbox). */
	pol = doc_named(pol_docs, "sandbox-managers");
	assert_non_null(pol);
	spec = json_object_get(pol, "spec");
	assert_true(selects(json_object_get(spec, "podSelector"), mgr_labels));
	assert_false(selects(json_object_get(spec, "podSelector"), pod_labels));
	in = json_object_get(spec, "ingress");
	assert_int_equal(json_array_size(in), 1);
	rule = json_array_get(in, 0);
	json_array_foreach(json_object_get(rule, "from"), j, to) {
		assert_non_null(json_object_get(to, "podSelector"));
		assert_false(selects(json_object_get(to, "podSelector"), pod_labels));
	}
	assert_int_equal(json_array_size(json_object_get(rule, "ports")), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(rule, "ports"), 0), "port")),
			 7444);
	json_decref(pj);
	json_decref(pol_docs);
	json_decref(dep_docs);
	json_decref(proxy_pol);
	be->ops->destroy(be);
}

/* ---- policy proxy: the NetworkPolicy before the pod (k8s_netpol.c) ---- */

#define NETPOLS "/apis/networking.k8s.io/v1/namespaces/sbtest/networkpolicies"

/* The index of the first request that starts with prefix, or -1. */
static int first_seen(const char *prefix)
{
	int at = -1;

	pthread_mutex_lock(&F.lock);
	for (int i = 0; i < F.n && at < 0; i++)
		if (strncmp(F.requests[i], prefix, strlen(prefix)) == 0)
			at = i;
	pthread_mutex_unlock(&F.lock);
	return at;
}

static int proxy_prepare(struct sb_err *err)
{
	struct backend *be;
	struct sandbox_handle h;
	struct prep p;
	char *created = pod(UID, true, "Unmasked", "Pending", "", "");
	int rc;

	agent_stand_in();
	prep_make(&p);
	p.spec.network = SANDBOX_NETWORK_PROXY;
	route("POST " PODS, 201, created);
	route_pod(200, pod(UID, true, "Unmasked", "Running", RUNNING, ""));
	free(created);
	be = backend_new();
	rc = be->ops->prepare(be, &p.spec, &h, err);
	be->ops->destroy(be);
	return rc;
}

/* Made before the pod, as k8s_netpol_body says: the pods labelled proxy, egress only, no rule; the
 * pod carries the label. */
static void proxy_pod_has_its_netpol_first(void **state)
{
	struct sb_err err = { 0 };
	const char *body = NULL;
	json_t *got, *want = k8s_netpol_body();

	(void)state;
	route("POST " NETPOLS, 201, "{}");
	if (proxy_prepare(&err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(seen("POST " NETPOLS, &body), 1);
	got = json_loads(body, 0, NULL);
	assert_true(json_equal(got, want));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(json_object_get(got, "spec"),
											      "podSelector"),
									      "matchLabels"),
							      LABEL_NETWORK)),
			    "proxy");
	assert_int_equal(json_array_size(json_object_get(json_object_get(got, "spec"), "egress")), 0);
	assert_non_null(json_object_get(json_object_get(got, "spec"), "egress"));
	assert_true(first_seen("POST " NETPOLS) < first_seen("POST " PODS));
	assert_int_equal(seen("POST " PODS, &body), 1);
	json_decref(got);
	got = json_loads(body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(got, "metadata"), "labels"),
							      LABEL_NETWORK)), "proxy");
	json_decref(got);
	json_decref(want);
}

/* One is there (someone's, or changed): replaced by ours at the version read. */
static void proxy_netpol_there_is_replaced(void **state)
{
	struct sb_err err = { 0 };
	const char *body = NULL;
	json_t *got;

	(void)state;
	route("POST " NETPOLS, 409, "{\"kind\":\"Status\",\"code\":409}");
	route("GET " NETPOLS "/" NETPOL_NAME, 200,
	      "{\"metadata\":{\"name\":\"" NETPOL_NAME "\",\"resourceVersion\":\"77\"},\"spec\":{\"podSelector\":{}}}");
	route("PUT " NETPOLS "/" NETPOL_NAME, 200, "{}");
	if (proxy_prepare(&err) < 0)
		fail_msg("%s", err.msg);
	assert_int_equal(seen("PUT " NETPOLS "/" NETPOL_NAME, &body), 1);
	got = json_loads(body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(json_object_get(got, "metadata"), "resourceVersion")), "77");
	assert_string_equal(json_string_value(json_array_get(json_object_get(json_object_get(got, "spec"), "policyTypes"), 0)),
			    "Egress");
	assert_int_equal(seen("POST " PODS, NULL), 1);
	json_decref(got);
}

/* Fail closed: a policy the server refuses (the manager's Role lacks it) is no pod. */
static void proxy_netpol_refused_is_no_pod(void **state)
{
	struct sb_err err = { 0 };

	(void)state;
	route("POST " NETPOLS, 403, "{\"kind\":\"Status\",\"message\":\"networkpolicies is forbidden\",\"code\":403}");
	assert_int_equal(proxy_prepare(&err), -1);
	assert_non_null(strstr(err.msg, "NetworkPolicy " NETPOL_NAME));
	assert_non_null(strstr(err.msg, "forbidden"));
	assert_int_equal(seen("POST " PODS, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(terminated_with_recorded_cid_is_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(running_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(accepted_delete_and_deletion_timestamp_are_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(unknown_status_without_cid_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(other_uid_under_the_name_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(not_found_counts_only_after_our_delete, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(watch_deleted_after_delete_is_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(watch_deleted_without_our_delete_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(watch_gone_lists_again, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(prepare_ready_from_a_watch_event, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(watch_error_event_gone_lists_again, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(throttled_then_answered, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(unreachable_server_is_not_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(adopt_refuses_other_ids, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(lookup_by_labels, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(prepare_makes_the_pod, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(netpol_selects_the_pods, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(proxy_pod_has_its_netpol_first, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(proxy_netpol_there_is_replaced, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(proxy_netpol_refused_is_no_pod, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(prepare_binds_the_credentials_to_the_pod, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(failed_credentials_delete_the_pod, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(pvc_mounts_subpaths, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(server_120_without_unmasked_is_refused, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(dropped_host_users_is_refused, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(kubeconfig_forms, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(token_is_sent_at_start, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(deleted_by_another_gracefully_is_evidence, fake_start, fake_stop),
		cmocka_unit_test_setup_teardown(force_deleted_by_another_is_not_evidence, fake_start, fake_stop),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
