/* Integration tests of the process backend (manager/backend/backend_process.c) with a real workspace, a real
 * mount plan and the real agent ($SANDBOX_AGENT): the sandbox's view (worktree at its own path, git
 * works, /etc/shadow, private-state and the agent's keys unreachable, system directories read-only, a
 * private /tmp), the end of a detached child, stop + evidence, and adopt() after a manager restart, for a
 * gone and for a live sandbox. Runs as root (CI) and unprivileged: the id maps are the caller's own.
 * Every wait is bounded; the file runs in a few seconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "agent_client.h"
#include "backend.h"
#include "ca.h"
#include "fdio.h"
#include "pathfmt.h"
#include "process.h"
#include "random.h"
#include "receipt_mac.h"
#include "tls.h"
#include "workspace.h"
#include "testutil.h"

/* The process backend's own part of a handle (process.h): opaque to the daemon, read by this test. */
#define PH(h) process_handle_of(h)

#define STEP_MS 20000
#define EVIDENCE_MS 5000

struct fixture {
	char base[64], repo[128], volume[128], priv[128], tls[160], state[160], mgr[128], creds[128];
	char marker[32];
	uint8_t key[RECEIPT_KEY_BYTES];
	struct workspace ws;
	struct mount_plan plan;
	struct backend *be;
	struct sandbox_spec spec;
	struct tls_config *client;
	int execs;
};

static struct fixture F;

/* Every sandbox a test started, so teardown ends those a failed test left behind. */
static char started[16][256];
static size_t n_started;
static char cg_parent[128];   /* test_cgroup_placement's cgroup, removed by teardown after a failure */

/* ---------- helpers ---------- */

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc != 0)
		fail_msg("'%s' failed (%d)", cmd, rc);
}

static void dir_make(const char *path)
{
	if (mkdir(path, 0700) < 0)
		fail_msg("mkdir %s: %s", path, strerror(errno));
}

/* 1 when a process on the host has `needle` in its command line. */
static int process_with(const char *needle)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int found = 0;

	assert_non_null(d);
	while (!found && (e = readdir(d)) != NULL) {
		char path[300], buf[4096];
		ssize_t n;
		int fd;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] == '\0')
				buf[i] = ' ';
		buf[n > 0 ? n : 0] = '\0';
		found = strstr(buf, needle) != NULL;
	}
	closedir(d);
	return found;
}

static int pid_alive(pid_t pid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	return stat(path, &st) == 0;
}

/* ---------- one command through the real agent, as the manager core would send it ---------- */

struct run {
	int exit_code;
	char status[32];
	char out[8192], err[4096];
	int pid_max_bounded;          /* the receipt's boundary.pid_max_bounded: 1, 0, or -1 when absent */
};

static void run_cmd(const struct sandbox_handle *h, const char *command, struct run *out)
{
	struct agent_env env[] = {
		{ "PATH", "/usr/local/bin:/usr/bin:/bin" }, { "HOME", F.ws.worktree }, { "TMPDIR", F.plan.scratch },
		{ "TMP", F.plan.scratch }, { "TEMP", F.plan.scratch }, { "LANG", "C.UTF-8" },
	};
	struct agent_exec_request req = {
		.generation = F.spec.generation, .command = command, .cwd = F.ws.worktree, .timeout_seconds = 20,
		.output_limit = 65536, .env = env, .n_env = sizeof env / sizeof env[0], .receipt_key = F.key,
	};
	struct agent_reply r = { 0 };
	struct agent_conn *c = NULL;
	struct sb_err err;
	char id[32];
	json_t *res;

	snprintf(id, sizeof id, "e%d", ++F.execs);
	req.exec_id = id;
	must(sb_random_bytes(req.nonce, sizeof req.nonce, &err), &err, "nonce");
	must(agent_connect(F.client, h->address, tls_deadline_after(STEP_MS), &c, &err), &err, "agent_connect");
	must(agent_exec(c, &req, tls_deadline_after(STEP_MS), &r, &err), &err, command);
	assert_true(r.receipt_verified);
	res = json_loads(r.result_json, 0, NULL);
	assert_non_null(res);
	snprintf(out->status, sizeof out->status, "%s", json_string_value(json_object_get(res, "status")));
	out->exit_code = (int)json_integer_value(json_object_get(res, "exit_code"));
	snprintf(out->out, sizeof out->out, "%s", json_string_value(json_object_get(res, "stdout")) ?: "");
	snprintf(out->err, sizeof out->err, "%s", json_string_value(json_object_get(res, "stderr")) ?: "");
	json_decref(res);
	res = r.receipt ? json_loads(r.receipt, 0, NULL) : NULL;
	out->pid_max_bounded = -1;
	if (json_is_boolean(json_object_get(json_object_get(res, "boundary"), "pid_max_bounded")))
		out->pid_max_bounded = json_is_true(json_object_get(json_object_get(res, "boundary"), "pid_max_bounded"));
	json_decref(res);
	agent_reply_free(&r);
	agent_close(c);
	if (strcmp(out->status, "exited") != 0)
		fail_msg("'%s': status %s, stderr %s", command, out->status, out->err);
}

static void expect_ok(const struct sandbox_handle *h, const char *command, struct run *r)
{
	run_cmd(h, command, r);
	if (r->exit_code != 0)
		fail_msg("'%s' exited %d: %s%s", command, r->exit_code, r->out, r->err);
}

static void expect_fail(const struct sandbox_handle *h, const char *command, const char *why)
{
	struct run r;

	run_cmd(h, command, &r);
	if (r.exit_code == 0)
		fail_msg("'%s' succeeded inside the sandbox: %s", command, r.out);
	if (why != NULL)
		assert_contains(r.err, why);
}

/* ---------- the fixture: a repository, a workspace, its plan, certificates, the backend ---------- */

static void pki_make(void)
{
	char dir[160], name[128];
	struct ca_leaf agent = { .usage = CA_USAGE_SERVER }, mgr = { .dns_name = CA_MANAGER_NAME,
								     .usage = CA_USAGE_CLIENT };
	char crt[200], key[200], ca_crt[200];
	struct ca *ca;
	struct sb_err err;

	snprintf(dir, sizeof dir, "%s/ca", F.base);
	must(ca_open(dir, &ca, &err), &err, "ca_open");
	must(ca_format_sandbox_name(name, sizeof name, "s1", 1, &err), &err, "sandbox name");
	agent.dns_name = name;
	must(ca_issue_leaf(ca, &agent, F.tls, "agent", &err), &err, "agent certificate");
	must(ca_write_cert(ca, F.tls, "ca.crt", &err), &err, "ca.crt");
	must(ca_issue_leaf(ca, &mgr, F.mgr, "manager", &err), &err, "manager certificate");
	ca_free(ca);
	snprintf(crt, sizeof crt, "%s/manager.crt", F.mgr);
	snprintf(key, sizeof key, "%s/manager.key", F.mgr);
	snprintf(ca_crt, sizeof ca_crt, "%s/ca.crt", F.tls);
	must(agent_client_config(&F.client, crt, key, ca_crt, "s1", 1, &err), &err, "client configuration");
	/* The receipt key, written by the manager before the agent starts, as in production. */
	must(sb_random_bytes(F.key, sizeof F.key, &err), &err, "receipt key");
	snprintf(key, sizeof key, "%s/receipt.key", F.state);
	must(fd_file_create_path(key, 0600, (uid_t)-1, (gid_t)-1, F.key, sizeof F.key, &err), &err, "receipt key");
}

static uid_t sandbox_uid(void)
{
	return geteuid() == 0 ? 65534 : geteuid();
}

static int setup(void **state)
{
	struct sb_err err;
	char path[200];
	FILE *f;

	(void)state;
	if (getenv("SANDBOX_AGENT") == NULL) {
		fprintf(stderr, "SANDBOX_AGENT must name the sandbox-agent binary\n");
		return -1;
	}
	snprintf(F.base, sizeof F.base, "/tmp/be-proc.XXXXXX");
	if (mkdtemp(F.base) == NULL)
		return -1;
	chmod(F.base, 0755);
	snprintf(F.repo, sizeof F.repo, "%s/repo", F.base);
	snprintf(F.volume, sizeof F.volume, "%s/volume", F.base);
	snprintf(F.priv, sizeof F.priv, "%s/priv", F.base);
	snprintf(F.tls, sizeof F.tls, "%s/tls", F.priv);
	snprintf(F.state, sizeof F.state, "%s/state", F.priv);
	snprintf(F.mgr, sizeof F.mgr, "%s/mgr", F.base);
	snprintf(F.creds, sizeof F.creds, "%s/creds", F.base);
	snprintf(F.marker, sizeof F.marker, "300.%d%03d", (int)getpid() % 100000, (int)(time(NULL) % 1000));
	sh("git init -q -b main %s && printf 'replicas: 2\\n' > %s/deploy.yaml && "
	   "git -C %s -c user.name=t -c user.email=t@example.com add deploy.yaml && "
	   "git -C %s -c user.name=t -c user.email=t@example.com commit -q -m init",
	   F.repo, F.repo, F.repo, F.repo);
	if (mkdir(F.volume, 0755) < 0)
		return -1;
	/* The identity's directories for the sandbox's group, as the manager makes them (rule N3). */
	if (workspace_create_owned(F.volume, "alice", "s1", F.repo, NULL,
				   &(struct workspace_owner){ sandbox_uid(), geteuid() == 0 ? 65534 : getegid() }, &F.ws,
				   &err) < 0 ||
	    mount_plan_build(&F.ws, &F.plan, &err) < 0) {
		fprintf(stderr, "workspace: %s\n", err.msg);
		return -1;
	}
	dir_make(F.priv);
	dir_make(F.tls);
	dir_make(F.state);
	snprintf(path, sizeof path, "%s/sock", F.priv);
	dir_make(path);
	dir_make(F.mgr);
	if (mkdir(F.creds, 0755) < 0)
		return -1;
	snprintf(path, sizeof path, "%s/token", F.creds);
	f = fopen(path, "w");
	if (f == NULL)
		return -1;
	fputs("grant-token\n", f);
	fclose(f);
	pki_make();
	if (backend_process_create(&F.be, &err) < 0)
		return -1;
	F.spec = (struct sandbox_spec){
		.session = "s1", .generation = 1, .plan = &F.plan, .private_dir = F.priv, .credentials_dir = F.creds,
		.agent_path = getenv("SANDBOX_AGENT"), .manager_name = CA_MANAGER_NAME,
		/* as the manager does: never host root inside (backend.h) */
		.host_uid = geteuid() == 0 ? 65534 : geteuid(), .host_gid = geteuid() == 0 ? 65534 : getegid(),
	};
	return 0;
}

static int teardown(void **state)
{
	struct sandbox_handle h;
	struct sb_err err;
	int rc = 0;

	(void)state;
	for (size_t i = 0; F.be != NULL && i < n_started; i++)
		if (F.be->ops->adopt(F.be, started[i], NULL, &h, &err) < 0 || F.be->ops->stop(F.be, &h, &err) < 0 ||
		    F.be->ops->evidence(F.be, &h, EVIDENCE_MS, &err) < 0) {
			fprintf(stderr, "teardown: sandbox %s: %s\n", started[i], err.msg);
			rc = -1;
		}
	if (F.be)
		F.be->ops->destroy(F.be);
	if (cg_parent[0] != '\0') {
		static const char *const children[] = { "sandbox-s1-1", "sandbox-left-9", "not-a-sandbox" };
		char child[200];

		for (size_t i = 0; i < sizeof children / sizeof children[0]; i++) {
			snprintf(child, sizeof child, "%s/%s", cg_parent, children[i]);
			rmdir(child);
		}
		rmdir(cg_parent);
	}
	tls_config_free(F.client);
	mount_plan_free(&F.plan);
	workspace_free(&F.ws);
	if (F.base[0] != '\0' && getenv("BE_KEEP") == NULL)
		test_rmtree(F.base);
	return rc;
}

static void prepare_spec(const struct sandbox_spec *spec, struct sandbox_handle *h)
{
	struct sb_err err;

	must(F.be->ops->prepare(F.be, spec, h, &err), &err, "prepare");
	assert_true(PH(h)->pid > 1);
	assert_true(PH(h)->pidfd >= 0);
	assert_true(strncmp(h->runtime_id, "process:", 8) == 0);
	assert_true(strncmp(h->address, "unix:", 5) == 0);
	assert_contains(h->address, "/sock/agent.sock");
	if (n_started < sizeof started / sizeof started[0])
		snprintf(started[n_started++], sizeof started[0], "%s", h->runtime_id);
}

static void prepare(struct sandbox_handle *h)
{
	prepare_spec(&F.spec, h);
}

static void stop_and_prove(struct sandbox_handle *h)
{
	struct sb_err err;
	pid_t pid = PH(h)->pid;
	char want[128];

	must(F.be->ops->stop(F.be, h, &err), &err, "stop");
	must(F.be->ops->evidence(F.be, h, EVIDENCE_MS, &err), &err, "evidence");
	assert_int_equal(PH(h)->pidfd, -1);
	assert_false(pid_alive(pid));
	/* The runtime's word, as the records keep it: this test is init's parent, so it reaped it. */
	snprintf(want, sizeof want, "reaped init of the sandbox's PID namespace (pid %d)", (int)pid);
	assert_string_equal(h->evidence, want);
}

/* ---------- tests ---------- */

/* The sandbox's view, through the real agent, as a command sees it. */
static void test_view(void **state)
{
	struct sandbox_handle h;
	struct sb_err err;
	struct run r;
	char cmd[600], path[300];
	struct stat st;

	(void)state;
	prepare(&h);
	/* The worktree at its own path, writable, and what is written there is on the host. */
	expect_ok(&h, "pwd -P", &r);
	snprintf(path, sizeof path, "%s\n", F.ws.worktree);
	assert_string_equal(r.out, path);
	expect_ok(&h, "echo from-sandbox > report.txt && cat report.txt", &r);
	snprintf(path, sizeof path, "%s/report.txt", F.ws.worktree);
	assert_int_equal(stat(path, &st), 0);
	/* git works on the session's worktree. */
	expect_ok(&h, "git status --porcelain && git log --oneline | wc -l", &r);
	assert_contains(r.out, "?? report.txt");
	/* What the host keeps from the sandbox. */
	expect_fail(&h, "cat /etc/shadow", "No such file");
	snprintf(cmd, sizeof cmd, "ls %s/identities/alice/private-state", F.ws.volume);
	expect_fail(&h, cmd, "No such file");
	snprintf(cmd, sizeof cmd, "ls %s", F.tls);
	expect_fail(&h, cmd, "Permission denied");
	snprintf(cmd, sizeof cmd, "ls %s/agent.log", F.priv);
	expect_fail(&h, cmd, "No such file");
	expect_fail(&h, "ls /etc/ssl/private", "No such file");
	expect_fail(&h, "touch /usr/x", "Read-only file system");
	expect_fail(&h, "touch /etc/x", "Read-only file system");
	/* Its own user database (process_users.c): the uid has a name, the files are not the command's. */
	expect_ok(&h, "id -u -n; getent passwd \"$(id -u)\" | cut -d: -f3,6", &r);
	snprintf(path, sizeof path, "%s\n%u:%s\n", getpwuid(sandbox_uid()) ? getpwuid(sandbox_uid())->pw_name : "sandbox",
		 (unsigned)sandbox_uid(), getpwuid(sandbox_uid()) ? getpwuid(sandbox_uid())->pw_dir : F.plan.scratch);
	assert_string_equal(r.out, path);
	expect_fail(&h, "echo x: >> /etc/passwd", NULL);
	expect_fail(&h, "echo x: >> /etc/group", NULL);
	expect_fail(&h, "mkdir /x", "Read-only file system");
	expect_fail(&h, "ln -s x /.sandbox/y", "Read-only file system");
	expect_fail(&h, "touch /.sandbox/bin/sandbox-agent", NULL); /* EROFS or ETXTBSY */
	/* The grant's credentials: readable, read-only. */
	snprintf(cmd, sizeof cmd, "cat %s/token", F.creds);
	expect_ok(&h, cmd, &r);
	assert_string_equal(r.out, "grant-token\n");
	snprintf(cmd, sizeof cmd, "touch %s/new", F.creds);
	expect_fail(&h, cmd, "Read-only file system");
	/* The sandbox's own /tmp, writable, not the host's. */
	expect_ok(&h, "echo t > /tmp/in-sandbox && cat /tmp/in-sandbox", &r);
	assert_int_equal(stat("/tmp/in-sandbox", &st), -1);
	/* The directories leading to the workspace cannot be moved away under the agent. */
	snprintf(cmd, sizeof cmd, "mv %s %s.moved", F.base, F.base);
	run_cmd(&h, cmd, &r);
	assert_int_not_equal(r.exit_code, 0);
	expect_ok(&h, "pwd -P", &r);
	/* A fresh procfs: the command sees its own namespace's few processes, not the host's. */
	expect_ok(&h, "ls /proc | grep -c '^[0-9]'", &r);
	assert_true(atoi(r.out) > 0 && atoi(r.out) < 10);
	/* A detached child does not outlive its command. */
	snprintf(cmd, sizeof cmd, "setsid sleep %s > /dev/null 2>&1 & echo started", F.marker);
	expect_ok(&h, cmd, &r);
	assert_string_equal(r.out, "started\n");
	assert_false(process_with(F.marker));
	stop_and_prove(&h);
	assert_false(process_with(F.marker));
	/* evidence() again on a proven handle: still gone. */
	must(F.be->ops->evidence(F.be, &h, 0, &err), &err, "evidence again");
}

/* A recorded runtime id whose process is gone: adopt, stop and evidence all say so. */
static void test_adopt_gone(void **state)
{
	struct sandbox_handle h, adopted;
	struct sb_err err;
	char id[256];

	(void)state;
	prepare(&h);
	snprintf(id, sizeof id, "%s", h.runtime_id);
	stop_and_prove(&h);
	must(F.be->ops->adopt(F.be, id, h.address, &adopted, &err), &err, "adopt");
	assert_int_equal(PH(&adopted)->pidfd, -1);
	must(F.be->ops->stop(F.be, &adopted, &err), &err, "stop of a gone sandbox");
	must(F.be->ops->evidence(F.be, &adopted, 0, &err), &err, "evidence of a gone sandbox");
	assert_contains(adopted.evidence, "is gone: its pid is free or names a younger process");
	assert_contains(adopted.evidence, id);
}

/* A live sandbox adopted into a fresh handle (the manager restarted): stop + evidence end it. */
static void test_adopt_live(void **state)
{
	struct sandbox_handle h, adopted;
	struct sb_err err;
	struct run r;
	char id[256], addr[PATH_MAX + 8];

	(void)state;
	prepare(&h);
	snprintf(id, sizeof id, "%s", h.runtime_id);
	snprintf(addr, sizeof addr, "%s", h.address);
	must(F.be->ops->adopt(F.be, id, addr, &adopted, &err), &err, "adopt");
	assert_int_equal(PH(&adopted)->pid, PH(&h)->pid);
	assert_string_equal(adopted.address, h.address);
	expect_ok(&adopted, "echo adopted", &r);
	/* Not gone yet: evidence must not say so. */
	assert_int_equal(F.be->ops->evidence(F.be, &adopted, 100, &err), -1);
	assert_contains(err.msg, "not proven gone");
	stop_and_prove(&adopted);
	/* The original handle (our child) is proven gone as well. */
	must(F.be->ops->evidence(F.be, &h, EVIDENCE_MS, &err), &err, "evidence on the original handle");
	assert_false(pid_alive(PH(&h)->pid));
	/* Its pidfd turned readable, but the adopted handle had reaped it already. */
	assert_contains(h.evidence, "exited: its pidfd turned readable, and it was reaped elsewhere");
}

/* A pid that now names another process (a reused pid) is not the sandbox. */
static void test_adopt_reused_pid(void **state)
{
	struct sandbox_handle adopted;
	struct sb_err err;
	char id[64];

	(void)state;
	/* Our own pid, with a start time that is not ours. */
	snprintf(id, sizeof id, "process:%d:1", (int)getpid());
	must(F.be->ops->adopt(F.be, id, NULL, &adopted, &err), &err, "adopt");
	must(F.be->ops->evidence(F.be, &adopted, 0, &err), &err, "evidence of a reused pid");
	assert_contains(adopted.evidence, "is gone: its pid is free or names a younger process");
	/* A handle nothing filled holds no sandbox: no stop, no evidence, no limits (fail closed,
	 * never a poll on descriptor 0). */
	{
		struct sandbox_handle zero;
		struct sandbox_limits lim;

		memset(&zero, 0, sizeof zero);
		assert_int_equal(F.be->ops->stop(F.be, &zero, &err), -1);
		assert_contains(err.msg, "holds no sandbox of the process backend");
		assert_int_equal(F.be->ops->evidence(F.be, &zero, 0, &err), -1);
		assert_contains(err.msg, "holds no sandbox of the process backend");
		assert_int_equal(F.be->ops->limits(F.be, &zero, &lim, &err), -1);
		assert_string_equal(zero.evidence, "");
	}
	assert_int_equal(F.be->ops->adopt(F.be, "process:abc", NULL, &adopted, &err), -1);
	assert_contains(err.msg, "is not one of the process backend");
	assert_int_equal(F.be->ops->adopt(F.be, "podman:1234", NULL, &adopted, &err), -1);
}

/* An agent that cannot start: prepare fails with what its log says, and nothing stays behind. */
static void test_agent_fails(void **state)
{
	struct sandbox_spec spec = F.spec;
	struct sandbox_handle h;
	struct sb_err err;
	char priv[160], dir[200];

	(void)state;
	snprintf(priv, sizeof priv, "%s/priv-nocert", F.base);
	dir_make(priv);
	snprintf(dir, sizeof dir, "%s/tls", priv);
	dir_make(dir);
	spec.private_dir = priv;
	assert_int_equal(F.be->ops->prepare(F.be, &spec, &h, &err), -1);
	assert_contains(err.msg, "preparing the sandbox of session s1");
	assert_contains(err.msg, "the agent exited with status");
	assert_contains(err.msg, "agent.log");
	assert_int_equal(PH(&h)->pidfd, -1);
	/* A private directory others may write to is refused before anything starts. */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(F.be->ops->prepare(F.be, &spec, &h, &err), -1);
	assert_contains(err.msg, "not writable by group or others");
}

/* An agent whose TLS configuration fails (made on a thread beside its journal since issue 32) exits
 * before it listens, with the loader's words: prepare() fails and says them, and nothing is left. */
static void test_agent_tls_fails(void **state)
{
	struct sandbox_spec spec = F.spec;
	struct sandbox_handle h;
	struct sb_err err;
	char priv[160], dir[200], path[240], needle[260];
	static const char *const files[] = { "agent.crt", "agent.key", "ca.crt" };

	(void)state;
	snprintf(priv, sizeof priv, "%s/priv-badtls", F.base);
	dir_make(priv);
	snprintf(dir, sizeof dir, "%s/tls", priv);
	dir_make(dir);
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		FILE *f;

		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		f = fopen(path, "w");
		assert_non_null(f);
		fputs("not a PEM file\n", f);
		fclose(f);
		assert_int_equal(chmod(path, 0644), 0);
	}
	spec.private_dir = priv;
	assert_int_equal(F.be->ops->prepare(F.be, &spec, &h, &err), -1);
	assert_contains(err.msg, "the agent exited with status");
	assert_contains(err.msg, "loading certificate");
	assert_int_equal(PH(&h)->pidfd, -1);
	snprintf(needle, sizeof needle, "--listen unix:%s/sock/agent.sock", priv);
	assert_int_equal(process_with(needle), 0);
}

/* A failed step inside sandbox init reaches prepare() as it is. */
static void test_setup_fails(void **state)
{
	struct mount_plan plan = F.plan;
	struct mount_entry entries[1] = { { .source = "/nonexistent-source", .target = "/srv/x", .mode = MOUNT_RO,
					    .why = "test" } };
	struct sandbox_spec spec = F.spec;
	struct sandbox_handle h;
	struct sb_err err;

	(void)state;
	plan.entries = entries;
	plan.n = 1;
	spec.plan = &plan;
	assert_int_equal(F.be->ops->prepare(F.be, &spec, &h, &err), -1);
	assert_contains(err.msg, "sandbox init: opening /nonexistent-source to mount it at /srv/x: No such file");
	assert_int_equal(PH(&h)->pidfd, -1);
}

/* ---------- issue 13: nothing inside is uid 0 of a namespace (R5), sized tmpfs (R6), anchored private paths (R2) */

/* The sandbox's uid on the host, as the manager picks it (config.c defaults). */

/* The line "NAME:\t..." of /proc/<pid>/status, after the tab. */
static void status_field(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64], line[512];
	size_t n = strlen(name);
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	out[0] = '\0';
	while (fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, name, n) == 0 && line[n] == ':') {
			snprintf(out, len, "%s", line + n + 2);
			out[strcspn(out, "\n")] = '\0';
		}
	fclose(f);
}

/* The command runs as uid N, mapped N -> N, so no process inside is uid 0 of the user namespace that
 * owns a PID namespace: pid_max and init's /proc files are out of reach, and the receipt's
 * pid_max_bounded is true because it still is (#4, #8). */
static void test_no_root_inside(void **state)
{
	struct sandbox_handle h;
	struct run r;
	char want[64], caps[64], uids[128];

	(void)state;
	prepare(&h);
	/* pid_max of the command's PID namespace: not writable, and the receipt says it holds. */
	run_cmd(&h, "cat /proc/sys/kernel/pid_max; echo 100000 > /proc/sys/kernel/pid_max && echo RAISED; "
		    "cat /proc/sys/kernel/pid_max", &r);
	if (strstr(r.out, "RAISED") != NULL || strstr(r.out, "100000") != NULL)
		fail_msg("pid_max was raised inside the sandbox: %s", r.out);
	assert_true(strstr(r.err, "Permission denied") != NULL || strstr(r.err, "Operation not permitted") != NULL);
	assert_int_equal(r.pid_max_bounded, 1);
	/* init's /proc files belong to the global root now, not to the command's uid. */
	run_cmd(&h, "echo 1000 > /proc/1/oom_score_adj && echo OOM-WRITTEN; "
		    "echo 0 > /proc/1/coredump_filter && echo FILTER-WRITTEN; cat /proc/1/oom_score_adj", &r);
	if (strstr(r.out, "WRITTEN") != NULL)
		fail_msg("a command wrote init's /proc files: %s", r.out);
	assert_string_equal(r.out, "0\n");
	/* Why: uid N inside, mapped N -> N, and the agent (the sandbox's PID 1) without capabilities. */
	expect_ok(&h, "id -u; id -g; awk '{print $1, $2, $3}' /proc/self/uid_map", &r);
	snprintf(want, sizeof want, "%u\n%u\n%u %u 1\n", (unsigned)sandbox_uid(),
		 (unsigned)(geteuid() == 0 ? 65534 : getegid()), (unsigned)sandbox_uid(), (unsigned)sandbox_uid());
	assert_string_equal(r.out, want);
	/* The agent itself (the sandbox's PID 1 after execve): uid N on the host, no capability. */
	status_field(PH(&h)->pid, "Uid", uids, sizeof uids);
	snprintf(want, sizeof want, "%u\t%u\t%u\t%u", (unsigned)sandbox_uid(), (unsigned)sandbox_uid(),
		 (unsigned)sandbox_uid(), (unsigned)sandbox_uid());
	assert_string_equal(uids, want);
	status_field(PH(&h)->pid, "CapEff", caps, sizeof caps);
	assert_string_equal(caps, "0000000000000000");
	status_field(PH(&h)->pid, "CapPrm", caps, sizeof caps);
	assert_string_equal(caps, "0000000000000000");
	/* A root manager's supplementary groups (root's 0 under su or sudo) are not the sandbox's. */
	status_field(PH(&h)->pid, "Groups", uids, sizeof uids);
	if (geteuid() == 0 && strspn(uids, " ") != strlen(uids))
		fail_msg("the sandbox kept the root manager's supplementary groups: %s", uids);
	stop_and_prove(&h);
}

/* /tmp and /dev/shm have the configured sizes (and inodes), a write beyond fails with ENOSPC, and
 * limits() reads them back; without a cgroup-parent no cgroup limit is claimed (#5). */
static void test_tmpfs_sized(void **state)
{
	struct process_settings set = { .tmp_bytes = 8 << 20, .shm_bytes = 4 << 20 };
	struct backend *def = F.be, *be = NULL;
	struct sandbox_limits lim;
	struct sandbox_handle h;
	struct sb_err err;
	struct run r;

	(void)state;
	must(backend_process_create_with(&be, &set, &err), &err, "backend with sizes");
	F.be = be;
	prepare(&h);
	expect_ok(&h, "stat -f -c '%b %S' /tmp /dev/shm | while read b s; do echo $((b * s)); done", &r);
	assert_string_equal(r.out, "8388608\n4194304\n");
	run_cmd(&h, "dd if=/dev/zero of=/tmp/fill bs=1M count=16 2>&1; dd if=/dev/zero of=/dev/shm/fill bs=1M "
		    "count=16 2>&1; rm -f /tmp/fill /dev/shm/fill", &r);
	assert_int_equal(r.exit_code, 0);
	if (strstr(r.out, "No space left on device") == NULL || strstr(strstr(r.out, "No space left on device") + 1,
									  "No space left on device") == NULL)
		fail_msg("a write beyond the tmpfs sizes did not fail with ENOSPC twice: %s", r.out);
	/* nr_inodes: 8 MiB / 4096 = 2048 inodes; the 3000th file fails. */
	run_cmd(&h, "cd /tmp && i=0; while [ $i -lt 3000 ]; do : > f$i 2>/dev/null || break; i=$((i+1)); done; echo $i", &r);
	assert_true(atoi(r.out) < 3000);
	must(be->ops->limits(be, &h, &lim, &err), &err, "limits");
	assert_int_equal(lim.tmp_bytes, 8 << 20);
	assert_int_equal(lim.shm_bytes, 4 << 20);
	assert_int_equal(lim.memory_max, -1);
	assert_int_equal(lim.pids_max, -1);
	assert_string_equal(lim.cgroup, "");
	stop_and_prove(&h);
	be->ops->destroy(be);
	F.be = def;
	/* The defaults are small, not half of RAM. */
	prepare(&h);
	expect_ok(&h, "stat -f -c '%b %S' /tmp /dev/shm | while read b s; do echo $((b * s)); done", &r);
	assert_string_equal(r.out, "268435456\n67108864\n");
	stop_and_prove(&h);
}

/* A private directory (tls/, state/, sock/) under `base`, with the fixture's keys, as the manager
 * makes one. */
static void private_make(const char *base, char *priv, size_t len)
{
	snprintf(priv, len, "%s/priv", base);
	dir_make(priv);
	sh("mkdir %s/tls %s/state %s/sock && cp %s/agent.crt %s/agent.key %s/ca.crt %s/tls/ && cp %s/receipt.key %s/state/",
	   priv, priv, priv, F.tls, F.tls, F.tls, priv, F.state, priv);
}

/* Every proper ancestor of each path (and the path itself), renamed; then every key read at its old
 * and each renamed name. Prints MOVED or READ for what succeeded. */
static void rename_attack(const char *priv, char *cmd, size_t len)
{
	static const char *const subs[] = { "tls", "state", "sock" };
	static const char *const keys[] = { "tls/agent.key", "state/receipt.key" };
	char path[300];
	size_t o = 0;

	o += (size_t)snprintf(cmd + o, len - o, "for a in");
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s", priv, subs[i]);
		for (char *c = path + 1; *c != '\0'; c++)
			if (*c == '/') {
				*c = '\0';
				o += (size_t)snprintf(cmd + o, len - o, " %s", path);
				*c = '/';
			}
		o += (size_t)snprintf(cmd + o, len - o, " %s", path);
	}
	o += (size_t)snprintf(cmd + o, len - o, "; do mv \"$a\" \"$a.moved\" 2>/dev/null && echo \"MOVED $a\"; done; ");
	for (size_t k = 0; k < 2; k++) {
		snprintf(path, sizeof path, "%s/%s", priv, keys[k]);
		o += (size_t)snprintf(cmd + o, len - o, "cat %s >/dev/null 2>&1 && echo READ %s; ", path, path);
		for (char *c = path + 1; *c != '\0'; c++)
			if (*c == '/') {
				*c = '\0';
				o += (size_t)snprintf(cmd + o, len - o, "cat %s.moved/%s >/dev/null 2>&1 && echo READ moved %s; ",
						      path, c + 1, path);
				*c = '/';
			}
	}
	assert_true(o + 8 < len);
	snprintf(cmd + o, len - o, "true");
}

static void private_attack_under(const char *parent)
{
	struct sandbox_spec spec = F.spec;
	struct sandbox_handle h;
	char base[128], priv[200], cmd[8192];
	struct run r;

	snprintf(base, sizeof base, "%s/be-priv.XXXXXX", parent);
	assert_non_null(mkdtemp(base));
	assert_int_equal(chmod(base, 0755), 0);
	private_make(base, priv, sizeof priv);
	spec.private_dir = priv;
	prepare_spec(&spec, &h);
	rename_attack(priv, cmd, sizeof cmd);
	/* Twice: the agent hides its directories per command by path, so a rename that worked would
	 * uncover them to the next command. */
	for (int i = 0; i < 2; i++) {
		expect_ok(&h, cmd, &r);
		if (strstr(r.out, "MOVED") != NULL || strstr(r.out, "READ") != NULL)
			fail_msg("state dir under %s: %s", parent, r.out);
	}
	expect_ok(&h, "echo still-serving", &r);
	stop_and_prove(&h);
	test_rmtree(base);
}

/* The agent's private paths, whatever filesystem the state dir is on: tmpfs under /dev/shm and under
 * /tmp (both writable inside the sandbox), and a plain disk (/var/tmp) (#9). */
static void test_private_paths_anchored(void **state)
{
	struct stat st;

	(void)state;
	private_attack_under("/dev/shm");
	private_attack_under("/tmp");
	if (stat("/var/tmp", &st) == 0 && access("/var/tmp", W_OK) == 0)
		private_attack_under("/var/tmp");
}

/* A read-only plan entry inside a writable one (objects/info/alternates inside objects/): its
 * directory cannot be renamed to put another alternates file in its place. */
static void test_nested_target_anchored(void **state)
{
	struct sandbox_handle h;
	struct sb_err err;
	char cmd[700], dir[PATH_MAX];
	struct run r;
	const char *target = NULL;

	(void)state;
	for (size_t i = 0; i < F.plan.n; i++)
		if (strstr(F.plan.entries[i].target, "/objects/info/alternates") != NULL)
			target = F.plan.entries[i].target;
	assert_non_null(target);
	snprintf(dir, sizeof dir, "%s", target);
	*strrchr(dir, '/') = '\0';
	prepare(&h);
	must(path_fmt(cmd, sizeof cmd, &err, "mv %s %s.moved && echo MOVED; mkdir -p %s.x && echo writable", dir, dir,
		      dir), &err, "the command");
	run_cmd(&h, cmd, &r);
	if (strstr(r.out, "MOVED") != NULL)
		fail_msg("renamed %s inside the sandbox", dir);
	assert_contains(r.out, "writable"); /* objects/ itself stays writable */
	stop_and_prove(&h);
}

/* With a delegated cgroup v2 directory: an earlier sandbox's empty cgroup is swept at the start, and
 * init is born in a cgroup of its own (CLONE_INTO_CGROUP),
 * limits() names it, and it is gone after the evidence. Root only (it makes a cgroup under the
 * host's cgroup v2 root); the limits are set for the controllers that directory offers (on this
 * hybrid host: none of memory, pids, cpu, so only the placement is proven). */
static void test_cgroup_placement(void **state)
{
	static const char *const roots[] = { "/sys/fs/cgroup/unified", "/sys/fs/cgroup" };
	struct process_settings set = { 0 };
	struct backend *def = F.be, *be = NULL;
	struct sandbox_limits lim;
	struct sandbox_handle h;
	struct sb_err err;
	char parent[128] = "", path[300], line[512], want[sizeof line], controllers[256] = "";
	FILE *f;

	(void)state;
	for (size_t i = 0; geteuid() == 0 && parent[0] == '\0' && i < 2; i++) {
		snprintf(path, sizeof path, "%s/cgroup.subtree_control", roots[i]);
		if (access(path, W_OK) == 0)
			snprintf(parent, sizeof parent, "%s/be-test.%d", roots[i], (int)getpid());
	}
	if (parent[0] == '\0') {
		fprintf(stderr, "test_cgroup_placement: skipped (needs root and a writable cgroup v2 root)\n");
		return;
	}
	assert_int_equal(mkdir(parent, 0755), 0);
	snprintf(cg_parent, sizeof cg_parent, "%s", parent);
	snprintf(path, sizeof path, "%s/cgroup.controllers", parent);
	f = fopen(path, "re");
	if (f != NULL && fgets(controllers, sizeof controllers, f) == NULL)
		controllers[0] = '\0';
	if (f != NULL)
		fclose(f);
	snprintf(set.cgroup_parent, sizeof set.cgroup_parent, "%s", parent);
	if (strstr(controllers, "pids") != NULL)
		set.pids = 300;
	if (strstr(controllers, "memory") != NULL)
		set.memory_bytes = 256LL << 20;
	/* An empty cgroup a killed manager left behind goes at the start (cgroup_sweep); a cgroup
	 * that is not a sandbox's stays. */
	snprintf(path, sizeof path, "%s/sandbox-left-9", parent);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof path, "%s/not-a-sandbox", parent);
	assert_int_equal(mkdir(path, 0755), 0);
	must(backend_process_create_with(&be, &set, &err), &err, "backend with a cgroup parent");
	F.be = be;
	assert_int_equal(access(path, F_OK), 0);
	assert_int_equal(rmdir(path), 0);
	snprintf(path, sizeof path, "%s/sandbox-left-9", parent);
	assert_int_equal(access(path, F_OK), -1);
	prepare(&h);
	assert_string_equal(PH(&h)->cgroup, "sandbox-s1-1");
	snprintf(path, sizeof path, "/proc/%d/cgroup", (int)PH(&h)->pid);
	f = fopen(path, "re");
	assert_non_null(f);
	want[0] = '\0';
	while (fgets(line, sizeof line, f) != NULL)
		if (strncmp(line, "0::", 3) == 0)
			snprintf(want, sizeof want, "%s", line + 3);
	fclose(f);
	snprintf(path, sizeof path, "/be-test.%d/sandbox-s1-1\n", (int)getpid());
	assert_string_equal(want, path);
	must(be->ops->limits(be, &h, &lim, &err), &err, "limits");
	snprintf(path, sizeof path, "%s/sandbox-s1-1", parent);
	assert_string_equal(lim.cgroup, path);
	assert_int_equal(lim.pids_max, set.pids > 0 ? 300 : -1);
	assert_int_equal(lim.memory_max, set.memory_bytes > 0 ? 256LL << 20 : -1);
	stop_and_prove(&h);
	assert_int_equal(access(path, F_OK), -1); /* removed after the evidence */
	be->ops->destroy(be);
	F.be = def;
	assert_int_equal(rmdir(parent), 0);
	cg_parent[0] = '\0';
}

/* ---------- issue 32: the network's helper starts before init goes on; its ready is waited for
 * while init builds the root and the agent starts, and before prepare() returns ---------- */

/* A slirp4netns that takes its time: SECONDS before the real one (or, FAIL, an exit without a ready). */
static struct backend *slow_net_backend(const char *name, const char *body)
{
	struct process_settings set = { 0 };
	struct backend *be = NULL;
	struct sb_err err;
	FILE *f;

	snprintf(set.slirp4netns, sizeof set.slirp4netns, "%s/%s", F.base, name);
	f = fopen(set.slirp4netns, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s", body);
	fclose(f);
	assert_int_equal(chmod(set.slirp4netns, 0755), 0);
	must(backend_process_create_with(&be, &set, &err), &err, "backend_process_create_with");
	return be;
}

/* A helper that configures the device 400 ms after a launch that takes some 20: prepare() returns
 * only once it is ready, so the first command already sees tap0 (its route). Without the wait the
 * command would run on a namespace with no device yet. */
static void test_network_ready_before_first_call(void **state)
{
	struct backend *be = slow_net_backend("slow-slirp", "sleep 0.4\nexec /usr/bin/slirp4netns \"$@\"\n");
	struct sandbox_handle h;
	struct sb_err err;
	struct run r;
	pid_t pid;

	(void)state;
	must(be->ops->prepare(be, &F.spec, &h, &err), &err, "prepare");
	pid = PH(&h)->pid;
	expect_ok(&h, "grep -c tap0 /proc/net/route", &r);
	assert_string_equal(r.out, "2\n"); /* the default route and the subnet's, through tap0 */
	must(be->ops->stop(be, &h, &err), &err, "stop");
	must(be->ops->evidence(be, &h, EVIDENCE_MS, &err), &err, "evidence");
	assert_false(pid_alive(pid));
	be->ops->destroy(be);
}

/* A helper that fails after init was released: prepare() fails, says why, and leaves nothing running. */
static void test_network_fails_after_release(void **state)
{
	struct backend *be = slow_net_backend("failing-slirp", "sleep 0.2\nexit 1\n");
	struct sandbox_handle h;
	struct sb_err err;
	char needle[200];

	(void)state;
	assert_int_equal(be->ops->prepare(be, &F.spec, &h, &err), -1);
	assert_contains(err.msg, "the sandbox's network (policy open)");
	assert_contains(err.msg, "failed to configure the sandbox's network");
	assert_int_equal(PH(&h)->pidfd, -1);
	snprintf(needle, sizeof needle, "--listen unix:%s/sock/agent.sock", F.priv);
	assert_int_equal(process_with(needle), 0);
	be->ops->destroy(be);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view),
		cmocka_unit_test(test_adopt_gone),
		cmocka_unit_test(test_adopt_live),
		cmocka_unit_test(test_adopt_reused_pid),
		cmocka_unit_test(test_agent_fails),
		cmocka_unit_test(test_agent_tls_fails),
		cmocka_unit_test(test_setup_fails),
		cmocka_unit_test(test_no_root_inside),
		cmocka_unit_test(test_tmpfs_sized),
		cmocka_unit_test(test_private_paths_anchored),
		cmocka_unit_test(test_nested_target_anchored),
		cmocka_unit_test(test_cgroup_placement),
		cmocka_unit_test(test_network_ready_before_first_call),
		cmocka_unit_test(test_network_fails_after_release),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
