/* The spawner (see spawner.h): the agent's side of the request channel, and the spawner itself. The
 * spawner is a clone of the multi-threaded agent: like init, it allocates nothing, uses no stdio and
 * reads only what was fixed before it was made (the boundary) and what each request carries. */
#include "spawner.h"

#include <errno.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdio.h"
#include "init.h"
#include "log.h"
#include "nsspawn.h"
#include "sock.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define SPAWN_FDS 5 /* go[0], report[1], error[1], out[1], errp[1]: init_context's order */

/* A request on the stream: this header, carrying the five descriptors (SCM_RIGHTS), then cwd_len
 * bytes of the working directory, then n_hidden entries, each followed by its path's path_len bytes.
 * Every length is bounded by the reader before a byte is stored. */
struct spawn_request {
	uint32_t cwd_len;
	uint32_t n_hidden;
};

struct spawn_hidden {
	uint64_t dev, ino;
	uint32_t path_len;
	uint32_t pad;
};

/* The answer: the init's pid, with its pidfd (SCM_RIGHTS), or pid 0 and the clone's errno. */
struct spawn_reply {
	int32_t pid;
	int32_t errnum;
};

/* ---- the spawner ---- */

/* Its own copies of a request: static, as init's call buffers are (init.c), and copied again into each
 * init by the clone. */
static char req_cwd[PATH_MAX];
static struct hidden_dir req_hidden[BOUNDARY_MAX_HIDDEN_VIEW];

/* The header and exactly SPAWN_FDS descriptors with it. 1, 0 at the channel's end, -1 otherwise (any
 * descriptor that did arrive is closed). */
static int header_receive(int sock, struct spawn_request *h, int fds[SPAWN_FDS])
{
	int got_fds[SOCK_FDS_MAX];
	size_t n;
	ssize_t got = sock_recv_fds(sock, h, sizeof *h, 0, got_fds, &n);

	if (got == 0 && n == 0)
		return 0;
	if (got > 0 && n == SPAWN_FDS && fd_read_exact(sock, (char *)h + got, sizeof *h - (size_t)got) == 0) {
		memcpy(fds, got_fds, sizeof(int) * SPAWN_FDS);
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		close(got_fds[i]);
	return -1;
}

/* The rest of a request, into req_cwd and req_hidden. */
static int view_receive(int sock, const struct spawn_request *h)
{
	if (h->cwd_len >= sizeof req_cwd || h->n_hidden > BOUNDARY_MAX_HIDDEN_VIEW ||
	    fd_read_exact(sock, req_cwd, h->cwd_len) < 0)
		return -1;
	req_cwd[h->cwd_len] = '\0';
	for (uint32_t i = 0; i < h->n_hidden; i++) {
		struct spawn_hidden e;

		if (fd_read_exact(sock, &e, sizeof e) < 0 || e.path_len >= sizeof req_hidden[i].path ||
		    fd_read_exact(sock, req_hidden[i].path, e.path_len) < 0)
			return -1;
		req_hidden[i].path[e.path_len] = '\0';
		req_hidden[i].dev = (dev_t)e.dev;
		req_hidden[i].ino = (ino_t)e.ino;
	}
	return 0;
}

static int reply_send(int sock, pid_t pid, int errnum, int pidfd)
{
	struct spawn_reply r = { .pid = pid > 0 ? pid : 0, .errnum = errnum };

	/* A few bytes on a stream socket the agent reads: they go whole or the channel is gone. */
	return sock_send_fds(sock, &r, sizeof r, &pidfd, pid > 0 ? 1 : 0) == (ssize_t)sizeof r ? 0 : -1;
}

/* Clone one init as init_spawn() does, but with CLONE_PARENT: the agent's child, not the spawner's. */
static void spawn_one(const struct boundary *b, int sock, const struct spawn_request *h, const int fds[SPAWN_FDS])
{
	static char *argv[4];
	static struct boundary run;
	static struct init_context ctx;
	struct sb_err err;
	int pidfd = -1;
	pid_t pid;

	run = *b;
	run.hidden = req_hidden;
	run.n_hidden = h->n_hidden;
	argv[0] = (char *)b->shell;
	argv[1] = "-c";
	ctx = (struct init_context){
		.b = &run, .cwd = req_cwd, .argv = argv, .envp = NULL, .uid = b->command_uid, .gid = b->command_gid,
		.go_fd = fds[0], .report_fd = fds[1], .error_fd = fds[2],
		.stdout_fd = fds[3], .stderr_fd = fds[4], .prebuilt = true,
	};
	pid = spawn_clone(CLONE_PARENT | INIT_NAMESPACES, &pidfd, &err);
	if (pid == 0)
		init_main(&ctx);
	for (int i = 0; i < SPAWN_FDS; i++)
		close(fds[i]);
	if (reply_send(sock, pid, pid < 0 ? err.errnum : 0, pidfd) < 0)
		_exit(1);
	if (pidfd >= 0)
		close(pidfd);
}

/* The spawner's whole life: requests until the channel ends (the agent stopped it, or died: then
 * also its parent-death signal). A request it cannot read whole ends it, which the agent sees. */
__attribute__((noreturn)) static void spawner_main(const struct boundary *b, int sock, pid_t agent)
{
	unsigned keep[4] = { 0, 1, 2, (unsigned)sock };
	struct sb_err err;

	/* With the builder thread, not after it: a parent gone before the arm shows in getppid(). */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != agent)
		_exit(1);
	/* Nothing of the agent's stays open here (its listener, connections, journal, state): the
	 * spawner holds stdin, stdout, stderr (so that received descriptors land above 2, as init
	 * expects: init.c stdio_attach) and its end of the channel. Default signal state, as init's. */
	if (spawn_signals_default(&err) < 0 || spawn_fds_keep(keep, 4, &err) < 0)
		_exit(1);
	for (;;) {
		struct spawn_request h;
		int fds[SPAWN_FDS];
		int rc = header_receive(sock, &h, fds);

		if (rc <= 0)
			_exit(rc == 0 ? 0 : 1);
		if (view_receive(sock, &h) < 0) {
			for (int i = 0; i < SPAWN_FDS; i++)
				close(fds[i]);
			_exit(1);
		}
		spawn_one(b, sock, &h, fds);
	}
}

/* ---- the agent's side ---- */

bool spawner_running(const struct spawner *s)
{
	return s->pid > 0;
}

int spawner_start(struct spawner *s, const struct boundary *b, struct sb_err *err)
{
	struct timeval tv = { .tv_sec = b->teardown_ms / 1000, .tv_usec = (b->teardown_ms % 1000) * 1000 };
	pid_t agent = getpid(), pid;
	int sv[2];

	s->pid = -1;
	s->pidfd = s->sock = -1;
	s->bound_ms = b->teardown_ms;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return sb_fail_errno(err, "the spawner's channel");
	/* Bounded both ways: a spawner that stops reading or answering fails the request, never the
	 * builder (a call waits for the builder). */
	if (setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(sv[0], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0) {
		sb_fail_errno(err, "bounding the spawner's channel");
		close(sv[0]);
		close(sv[1]);
		return -1;
	}
	/* A raw clone (no atfork handlers, whose locks another agent thread may hold): the spawner, like
	 * init, allocates nothing. */
	pid = spawn_clone(0, &s->pidfd, err);
	if (pid == 0) {
		close(sv[0]);
		spawner_main(b, sv[1], agent);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		sb_err_prefix(err, "starting the spawner");
		return -1;
	}
	s->pid = pid;
	s->sock = sv[0];
	return 0;
}

/* SIGKILL, reaped within the bound, logged: from here on the builder clones the inits itself. */
static void spawner_stop(struct spawner *s, const char *why)
{
	struct pollfd p = { s->pidfd, POLLIN, 0 };
	siginfo_t info;
	bool reaped;

	close(s->sock);
	syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
	memset(&info, 0, sizeof info);
	reaped = poll(&p, 1, (int)s->bound_ms) > 0 &&
		 waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, &info, WEXITED | WNOHANG) == 0 && info.si_pid == s->pid;
	sb_error("the spawner %d ended (%s)%s; prebuilt inits are cloned by the agent from now on", (int)s->pid, why,
		 reaped ? "" : ", and was not reaped within the bound");
	close(s->pidfd);
	s->pid = -1;
	s->pidfd = s->sock = -1;
}

/* The request as one buffer (spawn_request's layout), bounded before it is allocated. */
static char *request_pack(const char *cwd, const struct hidden_dir *hidden, size_t n_hidden, size_t *len,
			  struct sb_err *err)
{
	struct spawn_request h = { .n_hidden = (uint32_t)n_hidden };
	size_t cwd_len = strnlen(cwd, PATH_MAX), total;
	char *buf, *at;

	if (cwd_len >= PATH_MAX || n_hidden > BOUNDARY_MAX_HIDDEN_VIEW)
		return sb_fail(err, E2BIG, "a view larger than a spawner request holds"), NULL;
	total = sizeof h + cwd_len;
	for (size_t i = 0; i < n_hidden; i++) {
		size_t n = strnlen(hidden[i].path, sizeof hidden[i].path);

		if (n >= sizeof hidden[i].path)
			return sb_fail(err, ENAMETOOLONG, "a hidden place's path is not terminated"), NULL;
		total += sizeof(struct spawn_hidden) + n;
	}
	buf = malloc(total);
	if (buf == NULL)
		return sb_fail(err, ENOMEM, "a spawner request"), NULL;
	h.cwd_len = (uint32_t)cwd_len;
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, cwd, cwd_len);
	at = buf + sizeof h + cwd_len;
	for (size_t i = 0; i < n_hidden; i++) {
		struct spawn_hidden e = { .dev = (uint64_t)hidden[i].dev, .ino = (uint64_t)hidden[i].ino,
					  .path_len = (uint32_t)strlen(hidden[i].path) };

		memcpy(at, &e, sizeof e);
		memcpy(at + sizeof e, hidden[i].path, e.path_len);
		at += sizeof e + e.path_len;
	}
	*len = total;
	return buf;
}

/* The descriptors ride with the first bytes; the rest follows on the stream. */
static int request_send(int sock, const char *buf, size_t len, const int fds[SPAWN_FDS])
{
	ssize_t n = sock_send_fds(sock, buf, len, fds, SPAWN_FDS);
	size_t done = 0;

	while (n > 0 && (done += (size_t)n) < len) {
		do
			n = send(sock, buf + done, len - done, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
	}
	if (n == 0)
		errno = EPIPE;
	return done == len ? 0 : -1;
}

/* The answer and, with a pid, exactly one descriptor. */
static int reply_receive(int sock, struct spawn_reply *r, int *pidfd)
{
	int fds[SOCK_FDS_MAX];
	size_t n;
	ssize_t got = sock_recv_fds(sock, r, sizeof *r, MSG_WAITALL, fds, &n);

	*pidfd = -1;
	if (got == (ssize_t)sizeof *r && n == (r->pid > 0 ? 1u : 0u)) {
		if (n == 1)
			*pidfd = fds[0];
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	if (got >= 0)
		errno = got == 0 ? EPIPE : EPROTO;
	return -1;
}

pid_t spawner_spawn(struct spawner *s, const char *cwd, const struct hidden_dir *hidden, size_t n_hidden,
		    const int fds[5], int *pidfd, struct sb_err *err)
{
	struct spawn_reply r;
	char why[160];
	size_t len;
	char *buf = request_pack(cwd, hidden, n_hidden, &len, err);
	int rc;

	if (buf == NULL)
		return -1;
	rc = request_send(s->sock, buf, len, fds);
	free(buf);
	if (rc < 0 || reply_receive(s->sock, &r, pidfd) < 0) {
		int e = errno;

		if (e == EAGAIN || e == EWOULDBLOCK)
			snprintf(why, sizeof why, "no answer within %u ms", s->bound_ms);
		else
			snprintf(why, sizeof why, "its channel: %s", strerror(e));
		spawner_stop(s, why);
		return sb_fail(err, e, "the spawner ended: %s", why);
	}
	if (r.pid <= 0)
		return sb_fail(err, r.errnum, "creating the command's user, PID and mount namespaces (in the spawner)");
	return r.pid;
}
