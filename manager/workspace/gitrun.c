/* Running git for trusted manager operations (see gitrun.h). Owns spawning (fork and execve of an
 * argv array, never a shell), the sanitized environment, bounded capture, the deadline and the
 * Landlock confinement of writes and reads. Must never inherit the caller's environment or descriptors, nor
 * leave a git process behind. */
#include "clock.h"
#include "gitrun.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <linux/landlock.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* Put before the caller's arguments of every command. Command-line configuration outranks every
 * config file, and git passes it on to its own children (upload-pack, index-pack, ...) through
 * GIT_CONFIG_PARAMETERS, so these hold for the whole git process tree. */
const char *const gitrun_protections[] = {
	"--no-pager",
	/* No hook ever runs: git looks for /dev/null/<hook>, which cannot exist. */
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	/* An empty askpass and an empty helper list: nothing may be run to obtain credentials. */
	"-c", "core.askPass=",
	"-c", "credential.helper=",
	/* A bare repository is used only when named with --git-dir, never found by discovery
	 * (an agent could plant one inside a worktree). */
	"-c", "safe.bareRepository=explicit",
	"-c", "submodule.recurse=false",
	/* Under a root manager the writable parts of a repository belong to the sandbox's
	 * unprivileged uid; trust in a repository comes from the refusal checks (gitconfig.c) and
	 * Landlock around this process, never from who owns its files. */
	"-c", "safe.directory=*",
	/* No automatic gc or maintenance: they detach into the background, outliving our deadline. */
	"-c", "gc.auto=0",
	"-c", "maintenance.auto=false",
	NULL,
};

/* The whole environment of a git child, apart from the proxy variables copied below. */
const char *const gitrun_env_fixed[] = {
	"PATH=" GITRUN_PATH,
	"HOME=/nonexistent",
	"LC_ALL=C",
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_ATTR_NOSYSTEM=1",
	"GIT_TERMINAL_PROMPT=0",
	/* Transports allowed at all: local paths and https. This also outranks any protocol.*.allow
	 * in a repository's config, so ext:: (which runs commands) and ssh are never used. */
	"GIT_ALLOW_PROTOCOL=file:https",
	NULL,
};

const char *const gitrun_read_only[] = { NULL };

/* Proxy settings are configuration, not programs: an https clone behind a proxy needs them. */
static const char *const env_passthrough[] = {
	"https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY", NULL,
};

#define ENV_MAX 24
#define ARGV_MAX 128

struct capture {
	int fd;           /* read end, -1 once closed */
	char *buf;
	size_t len, cap, total, limit;
	bool truncated;
};

/* Find git in the fixed PATH. Returns 0 and fills path, or -1 (ENOENT) when there is none. */
static int git_find(char *path, size_t size, struct sb_err *err)
{
	char dirs[] = GITRUN_PATH;
	char *save = NULL;

	for (char *d = strtok_r(dirs, ":", &save); d != NULL; d = strtok_r(NULL, ":", &save)) {
		int n = snprintf(path, size, "%s/git", d);

		if (n > 0 && (size_t)n < size && access(path, X_OK) == 0)
			return 0;
	}
	return sb_fail(err, ENOENT, "git not found in %s; install the git package", GITRUN_PATH);
}

static int env_build(const char *envp[ENV_MAX], char *owned[ENV_MAX], struct sb_err *err)
{
	size_t n = 0;

	for (size_t i = 0; gitrun_env_fixed[i] != NULL; i++)
		envp[n++] = gitrun_env_fixed[i];
	for (size_t i = 0; env_passthrough[i] != NULL; i++) {
		const char *v = getenv(env_passthrough[i]);

		if (v == NULL)
			continue;
		if (asprintf(&owned[n], "%s=%s", env_passthrough[i], v) < 0) {
			owned[n] = NULL;
			return sb_fail(err, ENOMEM, "building git's environment");
		}
		envp[n] = owned[n];
		n++;
	}
	envp[n] = NULL;
	return 0;
}

static int argv_build(const char *argv[ARGV_MAX], const char *git, const char *const args[],
		      struct sb_err *err)
{
	size_t n = 0;

	argv[n++] = git;
	for (size_t i = 0; gitrun_protections[i] != NULL; i++)
		argv[n++] = gitrun_protections[i];
	for (size_t i = 0; args[i] != NULL; i++) {
		if (n + 1 >= ARGV_MAX)
			return sb_fail(err, E2BIG, "too many git arguments");
		argv[n++] = args[i];
	}
	argv[n] = NULL;
	return 0;
}

/* ---- confinement (Landlock): writes, and reads when asked ---- */

#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3; newer than bookworm's headers */
#endif

#define READ_RIGHTS (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
/* The only rights Landlock accepts on a rule for a non-directory. */
#define FILE_RIGHTS (LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_EXECUTE | \
		     LANDLOCK_ACCESS_FS_TRUNCATE)

/* What git needs of the system to run at all, readable (and, for the first group, executable)
 * when reads are confined: the programs and libraries, the loader's cache, the name service and
 * TLS trust configuration of an https clone, and the user database (reflog identities). Chosen
 * file by file: /etc as a whole holds shadow and private keys (/etc/ssl/private). These paths
 * belong to root and no sandbox can write them, so their links (/lib -> usr/lib, a resolv.conf
 * into /run) are followed when the rule is made. Missing ones are skipped. */
static const char *const system_exec[] = { "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", NULL };
static const char *const system_read[] = {
	"/etc/ld.so.cache", "/etc/ld.so.preload", "/etc/localtime", "/etc/passwd", "/etc/group",
	"/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/gnutls",
	"/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted", "/etc/crypto-policies/back-ends",
	"/dev/urandom", "/sys/devices/system/cpu/online", NULL,
};

/* Every right that creates, changes or removes something. */
static __u64 write_rights(int abi)
{
	__u64 rights = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
		       LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
		       LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
		       LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
		       LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;

	if (abi >= 2)
		rights |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
	return rights;
}

/* Allow rights beneath path (a directory) or on it (a file: only its file rights). follow: open
 * through links (system paths only); otherwise a final link is refused (ELOOP), and the caller's
 * roots are trusted paths (gitrun.h). optional: a missing path is skipped. Rights the ruleset
 * does not handle are dropped. */
static int ruleset_allow(int ruleset, const char *path, __u64 rights, __u64 handled, bool follow, bool optional,
			 struct sb_err *err)
{
	struct landlock_path_beneath_attr rule = { 0 };
	struct stat st;
	int rc;

	rule.parent_fd = open(path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
	if (rule.parent_fd < 0 && optional && (errno == ENOENT || errno == ENOTDIR))
		return 0;
	if (rule.parent_fd < 0)
		return sb_fail_errno(err, "opening %s to confine git", path);
	if (fstat(rule.parent_fd, &st) != 0) {
		sb_fail_errno(err, "inspecting %s to confine git", path);
		close(rule.parent_fd);
		return -1;
	}
	/* O_PATH | O_NOFOLLOW opens a final link itself instead of failing: refuse it here. */
	if (S_ISLNK(st.st_mode)) {
		close(rule.parent_fd);
		return sb_fail(err, ELOOP, "%s is a symbolic link: refused as a root to confine git", path);
	}
	rule.allowed_access = rights & handled & (S_ISDIR(st.st_mode) ? ~(__u64)0 : FILE_RIGHTS);
	rc = rule.allowed_access == 0 ? 0 :
	     (int)syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
	if (rc != 0)
		sb_fail_errno(err, "allowing git to use %s", path);
	close(rule.parent_fd);
	return rc == 0 ? 0 : -1;
}

static int ruleset_allow_all(int ruleset, const char *const paths[], __u64 rights, __u64 handled, bool system,
			     struct sb_err *err)
{
	for (size_t i = 0; paths != NULL && paths[i] != NULL; i++)
		if (ruleset_allow(ruleset, paths[i], rights, handled, system, system, err) != 0)
			return -1;
	return 0;
}

/* A ruleset that allows writes only beneath the write roots and /dev/null (git opens it for its
 * own children) and, when reads are confined, reads only beneath the write and read roots and the
 * system's paths above, and execution only of the system's programs: nothing in a repository can
 * be executed. Returns its descriptor, -2 when the kernel has no Landlock, -1 on error. */
static int ruleset_build(const struct gitrun_opts *opts, struct sb_err *err)
{
	int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	const char *const *write_roots = opts->write_roots ? opts->write_roots : gitrun_read_only;
	bool reads = opts->read_roots != NULL;
	struct landlock_ruleset_attr attr;
	__u64 h;
	int fd, rc;

	if (abi < 0)
		return errno == ENOSYS || errno == EOPNOTSUPP ? -2 : sb_fail_errno(err, "probing Landlock");
	attr.handled_access_fs = write_rights(abi) | (reads ? READ_RIGHTS | LANDLOCK_ACCESS_FS_EXECUTE : 0);
	h = attr.handled_access_fs;
	fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (fd < 0)
		return sb_fail_errno(err, "creating a Landlock ruleset for git");
	rc = ruleset_allow_all(fd, write_roots, write_rights(abi) | READ_RIGHTS, h, false, err);
	if (rc == 0)
		rc = ruleset_allow(fd, "/dev/null", READ_RIGHTS | write_rights(abi), h, false, false, err);
	if (rc == 0 && reads)
		rc = ruleset_allow_all(fd, opts->read_roots, READ_RIGHTS, h, false, err);
	if (rc == 0 && reads)
		rc = ruleset_allow_all(fd, system_exec, READ_RIGHTS | LANDLOCK_ACCESS_FS_EXECUTE, h, true, err);
	if (rc == 0 && reads)
		rc = ruleset_allow_all(fd, system_read, READ_RIGHTS, h, true, err);
	if (rc != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The ruleset for opts, -1 for "unconfined". Fails only on a real error; a kernel without
 * Landlock gets one warning per process. */
static int confinement(const struct gitrun_opts *opts, int *ruleset, struct sb_err *err)
{
	static bool warned;

	*ruleset = -1;
	if (opts->write_roots == NULL && opts->read_roots == NULL)
		return 0;
	*ruleset = ruleset_build(opts, err);
	if (*ruleset == -1)
		return -1;
	if (*ruleset == -2) {
		*ruleset = -1;
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			sb_warn("Landlock is not available: manager-side git runs without write or read confinement");
	}
	return 0;
}

/* ---- the child, between fork() and execve() ----
 * Only async-signal-safe calls (the manager has other threads); no allocation. Any failure is
 * reported to the parent over the close-on-exec report pipe, then the child dies at once. */

struct child_failure {
	int errnum;
	char step[40];
};

struct child_setup {
	const char *git, *cwd;
	const char *const *argv, *const *envp;
	int out_w, err_w, report_w, ruleset;
};

static void child_fail(int report_w, const char *step) __attribute__((noreturn));
static void child_fail(int report_w, const char *step)
{
	struct child_failure f = { .errnum = errno };
	size_t i;

	for (i = 0; i + 1 < sizeof f.step && step[i] != '\0'; i++)
		f.step[i] = step[i];
	f.step[i] = '\0';
	if (write(report_w, &f, sizeof f) < 0) {
		/* Nothing more can be done: the parent then sees git "exit" 127. */
	}
	_exit(127);
}

static void child_exec(const struct child_setup *c) __attribute__((noreturn));
static void child_exec(const struct child_setup *c)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int null_fd;

	/* Own process group, so a timeout kills git's helpers too. */
	if (setpgid(0, 0) != 0)
		child_fail(c->report_w, "setpgid");
	/* Default dispositions and an empty mask, whatever the manager uses (an ignored SIGPIPE
	 * would otherwise stay ignored across execve). SIGKILL and SIGSTOP refuse: harmless. */
	for (int sig = 1; sig < NSIG; sig++)
		(void)sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	if (sigprocmask(SIG_SETMASK, &none, NULL) != 0)
		child_fail(c->report_w, "sigprocmask");
	/* stdin from /dev/null, stdout and stderr into our pipes (all >= 3, see pipes_open). */
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null_fd < 0 || dup2(null_fd, 0) != 0 || dup2(c->out_w, 1) != 1 || dup2(c->err_w, 2) != 2)
		child_fail(c->report_w, "redirecting stdio");
	/* Every other descriptor closes at execve (the report pipe stays usable until then). */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
		child_fail(c->report_w, "close_range");
	if (chdir(c->cwd) != 0)
		child_fail(c->report_w, "chdir");
	/* Landlock needs no_new_privs; it must come last before execve so nothing above is limited. */
	if (c->ruleset >= 0) {
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
			child_fail(c->report_w, "no_new_privs");
		if (syscall(SYS_landlock_restrict_self, c->ruleset, 0) != 0)
			child_fail(c->report_w, "landlock_restrict_self");
	}
	execve(c->git, (char *const *)c->argv, (char *const *)c->envp);
	child_fail(c->report_w, "execve");
}

/* Start git. Returns 0 with *pid, or -1 with the child's own reason ("starting git: chdir: ..."). */
static int spawn_git(pid_t *pid, struct child_setup *c, struct sb_err *err)
{
	struct child_failure f;
	int report[2];
	ssize_t n;

	if (pipe2(report, O_CLOEXEC) != 0)
		return sb_fail_errno(err, "creating git's report pipe");
	c->report_w = report[1];
	*pid = fork();
	if (*pid == 0)
		child_exec(c);
	close(report[1]);
	if (*pid < 0) {
		close(report[0]);
		return sb_fail_errno(err, "starting git");
	}
	/* The report pipe closes at execve: end of file means git is running. */
	do
		n = read(report[0], &f, sizeof f);
	while (n < 0 && errno == EINTR);
	close(report[0]);
	if (n == (ssize_t)sizeof f) {
		while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
			;
		return sb_fail(err, f.errnum, "starting %s in %s: %s", c->git, c->cwd, f.step);
	}
	return 0;
}

/* Append what one read returned: keep up to the limit, count the rest. */
static int capture_add(struct capture *c, const char *data, size_t n)
{
	size_t keep = n;

	c->total += n;
	if (c->len + keep > c->limit) {
		keep = c->limit - c->len;
		c->truncated = true;
	}
	if (keep == 0)
		return 0;
	if (c->len + keep + 1 > c->cap) {
		size_t cap = c->cap ? c->cap : 4096;
		char *p;

		while (cap < c->len + keep + 1)
			cap *= 2;
		if (cap > c->limit + 1)
			cap = c->limit + 1;
		p = realloc(c->buf, cap);
		if (p == NULL)
			return -1;
		c->buf = p;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, data, keep);
	c->len += keep;
	c->buf[c->len] = '\0';
	return 0;
}

/* Read one ready stream. Returns 0, or -1 (errno set) on a read or allocation failure. */
static int capture_read(struct capture *c)
{
	char chunk[16384];
	ssize_t n = read(c->fd, chunk, sizeof chunk);

	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -1;
	if (n == 0) {
		close(c->fd);
		c->fd = -1;
		return 0;
	}
	if (capture_add(c, chunk, (size_t)n) != 0) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* Drain both pipes until git closes them or the deadline passes. Returns 1 on timeout. */
static int capture_until(struct capture c[2], uint64_t deadline, struct sb_err *err)
{
	while (c[0].fd >= 0 || c[1].fd >= 0) {
		struct pollfd p[2] = { { .fd = c[0].fd, .events = POLLIN }, { .fd = c[1].fd, .events = POLLIN } };
		uint64_t now = (uint64_t)clock_mono_ms();
		int n;

		if (now >= deadline)
			return 1;
		n = poll(p, 2, (int)(deadline - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "waiting for git's output");
		for (int i = 0; i < 2; i++)
			if (p[i].revents != 0 && capture_read(&c[i]) != 0)
				return sb_fail_errno(err, "reading git's output");
	}
	return 0;
}

/* Wait (without reaping) until git has exited or the deadline passes. Returns 1 on timeout. */
static int wait_exit(pid_t pid, uint64_t deadline, struct sb_err *err)
{
	for (;;) {
		siginfo_t info = { 0 };
		struct timespec pause = { 0, 5 * 1000 * 1000 };

		if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
			if (errno == EINTR)
				continue;
			return sb_fail_errno(err, "waiting for git");
		}
		if (info.si_pid == pid)
			return 0;
		if ((uint64_t)clock_mono_ms() >= deadline)
			return 1;
		(void)nanosleep(&pause, NULL); /* an early wake-up only polls sooner */
	}
}

/* Kill what is left of git's process group, then reap git. The group is killed while git is still
 * an unreaped zombie, so its id cannot have been reused by an unrelated group. */
static int reap(pid_t pid, struct gitrun_result *res, struct sb_err *err)
{
	int status;

	if (kill(-pid, SIGKILL) != 0 && errno != ESRCH)
		return sb_fail_errno(err, "stopping git's process group %d", (int)pid);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return sb_fail_errno(err, "reaping git");
	}
	if (WIFEXITED(status)) {
		res->exit_code = WEXITSTATUS(status);
	} else {
		res->exit_code = -1;
		res->term_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
	}
	return 0;
}

static void result_take(struct gitrun_result *res, struct capture c[2])
{
	res->out = c[0].buf ? c[0].buf : strdup("");
	res->out_len = c[0].len;
	res->out_total = c[0].total;
	res->out_truncated = c[0].truncated;
	res->errout = c[1].buf ? c[1].buf : strdup("");
	res->err_len = c[1].len;
	res->err_total = c[1].total;
	res->err_truncated = c[1].truncated;
}

/* Collect output, enforce the deadline, reap. Owns and closes the two read ends; the captured
 * output goes to res on every path. */
static int supervise(pid_t pid, struct capture c[2], unsigned timeout_ms, struct gitrun_result *res,
		     struct sb_err *err)
{
	uint64_t deadline = (uint64_t)clock_mono_ms() + timeout_ms;
	struct sb_err reap_err;
	int rc = capture_until(c, deadline, err);

	if (rc == 0)
		rc = wait_exit(pid, deadline, err);
	for (int i = 0; i < 2; i++)
		if (c[i].fd >= 0)
			close(c[i].fd);
	res->timed_out = rc == 1;
	/* Reap on every path (timeout and errors too): git never outlives this call. A reaping
	 * failure is reported only when nothing failed before it. */
	if (reap(pid, res, &reap_err) != 0 && rc == 0) {
		*err = reap_err;
		rc = -1;
	}
	result_take(res, c);
	if (rc == 0 && (res->out == NULL || res->errout == NULL))
		return sb_fail(err, ENOMEM, "keeping git's output");
	if (rc == 1)
		return sb_fail(err, ETIMEDOUT, "git did not finish within %u ms and was killed", timeout_ms);
	return rc;
}

/* A pipe whose two ends are >= 3 and close-on-exec, so that the child's dup2() onto 0, 1 and 2
 * can never hit one of them even when the manager runs with stdio closed. */
static int pipe_open(int p[2], struct sb_err *err)
{
	if (pipe2(p, O_CLOEXEC) != 0)
		return sb_fail_errno(err, "creating a pipe for git");
	for (int i = 0; i < 2; i++) {
		if (p[i] < 3) {
			int high = fcntl(p[i], F_DUPFD_CLOEXEC, 3);

			close(p[i]);
			p[i] = high;
		}
	}
	if (p[0] < 0 || p[1] < 0) {
		sb_fail_errno(err, "creating a pipe for git");
		if (p[0] >= 0)
			close(p[0]);
		if (p[1] >= 0)
			close(p[1]);
		return -1;
	}
	return 0;
}

int gitrun(const char *const args[], const struct gitrun_opts *opts, struct gitrun_result *res,
	   struct sb_err *err)
{
	const struct gitrun_opts none = { 0 };
	const char *argv[ARGV_MAX], *envp[ENV_MAX];
	char *env_owned[ENV_MAX] = { 0 };
	char git[256];
	int outp[2], errp[2];
	struct child_setup c;
	struct capture cap[2];
	pid_t pid = -1;
	int rc;

	memset(res, 0, sizeof *res);
	opts = opts ? opts : &none;
	if (git_find(git, sizeof git, err) != 0 || argv_build(argv, git, args, err) != 0)
		return -1;
	if (pipe_open(outp, err) != 0)
		return -1;
	if (pipe_open(errp, err) != 0) {
		close(outp[0]);
		close(outp[1]);
		return -1;
	}
	c = (struct child_setup){ .git = git, .cwd = opts->cwd ? opts->cwd : "/", .argv = argv, .envp = envp,
				  .out_w = outp[1], .err_w = errp[1], .ruleset = -1 };
	rc = env_build(envp, env_owned, err);
	if (rc == 0)
		rc = confinement(opts, &c.ruleset, err);
	if (rc == 0)
		rc = spawn_git(&pid, &c, err);
	if (c.ruleset >= 0)
		close(c.ruleset);
	for (size_t i = 0; i < ENV_MAX; i++)
		free(env_owned[i]);
	close(outp[1]);
	close(errp[1]);
	if (rc != 0) {
		close(outp[0]);
		close(errp[0]);
		return -1;
	}
	memset(cap, 0, sizeof cap);
	cap[0].fd = outp[0];
	cap[1].fd = errp[0];
	cap[0].limit = cap[1].limit = opts->output_limit ? opts->output_limit : GITRUN_OUTPUT_LIMIT;
	return supervise(pid, cap, opts->timeout_ms ? opts->timeout_ms : GITRUN_TIMEOUT_MS, res, err);
}

/* git's own explanation: its "fatal:" and "error:" lines, else its last line. */
static void errlines(const char *text, char *out, size_t size)
{
	const char *last = NULL, *p = text;
	size_t used = 0;

	out[0] = '\0';
	while (p != NULL && *p != '\0') {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		if (len > 0)
			last = p;
		if (len > 0 && (strncmp(p, "fatal:", 6) == 0 || strncmp(p, "error:", 6) == 0)) {
			int n = snprintf(out + used, size - used, "%s%.*s", used ? "; " : "", (int)len, p);

			used = n > 0 && used + (size_t)n < size ? used + (size_t)n : size - 1;
		}
		p = end ? end + 1 : NULL;
	}
	if (used == 0 && last != NULL)
		snprintf(out, size, "%.*s", (int)strcspn(last, "\n"), last);
}

int gitrun_check(const char *const args[], const struct gitrun_opts *opts, struct gitrun_result *res,
		 struct sb_err *err)
{
	struct gitrun_result local;
	struct gitrun_result *r = res ? res : &local;
	char why[SB_ERR_MSG_MAX / 2];
	int rc = gitrun(args, opts, r, err);

	if (rc == 0 && r->exit_code != 0) {
		errlines(r->errout ? r->errout : "", why, sizeof why);
		if (r->exit_code < 0)
			rc = sb_fail(err, 0, "git was killed by signal %d: %s", r->term_signal, why);
		else
			rc = sb_fail(err, 0, "git exited with status %d: %s", r->exit_code,
				     why[0] ? why : "(no message)");
	}
	if (res == NULL)
		gitrun_result_free(&local);
	return rc;
}

void gitrun_result_free(struct gitrun_result *res)
{
	free(res->out);
	free(res->errout);
	res->out = res->errout = NULL;
}
