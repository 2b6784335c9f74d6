/* The daemon's clean stop (daemon.c runs it on SIGTERM or SIGINT): what it does, in order, is
 * below; every step uses the one mechanism of the running manager (cancel.c, sandbox.c). */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "control.h"
#include "log.h"
#include "metrics.h"
#include "status.h"
#include "thread.h"

/* ---- the stop ----
 * SIGTERM or SIGINT (systemctl stop, ^C): no new connection and no new call; the running calls get
 * stop-grace-seconds to finish; then each one still running is cancelled as a client's cancel
 * would (recorded cancelled with its sandbox's evidence, or uncertain); then every live sandbox is
 * retired with evidence. A second signal ends the grace at once, never the evidence. Exit 0 when
 * every sandbox's end is proven and every request answered; 1 otherwise, with the log saying what
 * is not proven (those sessions stay reserved, and the next start asks the runtime again). The
 * state dir's lock goes with the process. */
#define STOP_SETTLE_MS 60000 /* after the cancel: each call's evidence (sandbox.c EVIDENCE_MS), record, answer */
#define STOP_NOT_PROVEN 1

/* Blocked before any thread exists, so every thread inherits the mask and only the accept loop
 * takes them, from a signalfd. Children empty their masks before execve (nsspawn.c
 * spawn_signals_default, gitrun.c child_exec). Returns the signalfd, or -1. */
int stop_signals(struct sb_err *err)
{
	sigset_t set;
	int rc, fd;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (rc != 0)
		return sb_fail(err, rc, "blocking SIGTERM and SIGINT");
	fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0)
		return sb_fail_errno(err, "creating a signalfd for SIGTERM and SIGINT");
	return fd;
}

/* The signal waiting on the signalfd, or 0. */
int stop_signal_take(int sigfd)
{
	struct signalfd_siginfo si;

	return read(sigfd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
}

/* Until no request is being answered, the deadline passes, or (sigfd >= 0) another signal comes.
 * Returns how many are still being answered. Answers end on other threads: a short poll between
 * looks, which a signal cuts short. */
static unsigned requests_wait(struct manager *m, int64_t deadline, int sigfd)
{
	for (;;) {
		struct pollfd p = { .fd = sigfd, .events = POLLIN };
		unsigned n;
		int left;

		pthread_mutex_lock(&m->lock);
		n = m->requests;
		pthread_mutex_unlock(&m->lock);
		left = clock_remaining_ms(deadline);
		if (n == 0 || left == 0)
			return n;
		if (poll(&p, 1, left < 50 ? left : 50) > 0 && stop_signal_take(sigfd) > 0) {
			sb_info("stop: a second signal ends the grace (%u request(s) still being answered)", n);
			return n;
		}
	}
}

/* The control socket goes first: a client then hears at once that the manager is not reachable,
 * instead of waiting in the backlog of one that no longer accepts. Only the socket this manager
 * bound (the same file), never one that took its place. */
static void socket_remove(int fd, const char *path, const struct stat *bound)
{
	struct stat st;

	close(fd);
	if (lstat(path, &st) == 0 && st.st_dev == bound->st_dev && st.st_ino == bound->st_ino && unlink(path) < 0)
		sb_warn("stop: removing the control socket %s: %s", path, strerror(errno));
}

int daemon_stop(struct manager *m, int signo, int sigfd, int fd, const struct stat *bound)
{
	const char *name = signo == SIGINT ? "SIGINT" : "SIGTERM";
	unsigned cancelled, unanswered, not_retired, unproven;
	char why[128];

	pthread_mutex_lock(&m->lock);
	m->stop_phase = STOP_REFUSING;
	unproven = m->unproven;
	pthread_mutex_unlock(&m->lock);
	socket_remove(fd, m->cfg.socket, bound);
	sb_info("stop (%s): no new calls; the running ones have %u s to finish", name, m->cfg.stop_grace_seconds);
	requests_wait(m, clock_deadline_after((int64_t)m->cfg.stop_grace_seconds * 1000), sigfd);

	snprintf(why, sizeof why, "the manager stopped (%s) before the call finished", name);
	cancelled = cancel_stop_calls(m, why);
	if (cancelled > 0)
		sb_info("stop: %u call(s) still running are cancelled; waiting for their sandboxes' evidence", cancelled);
	unanswered = requests_wait(m, clock_deadline_after(STOP_SETTLE_MS), -1);
	if (unanswered > 0)
		sb_error("stop: %u request(s) still unanswered %d s after the cancel: the manager exits without their "
			 "answers", unanswered, STOP_SETTLE_MS / 1000);

	snprintf(why, sizeof why, "the manager stopped (%s)", name);
	not_retired = sandbox_retire_all(m, why);
	pthread_mutex_lock(&m->lock);
	unproven = m->unproven - unproven;
	pthread_mutex_unlock(&m->lock);
	if (unanswered == 0 && not_retired == 0 && unproven == 0) {
		/* Its sessions are free for any manager now (records_manager_unregister keeps any with
		 * something still in flight: those wait for the lease to expire and a takeover). */
		ownership_release(m);
		sb_info("stopped: every call settled, every sandbox's end proven");
		return 0;
	}
	sb_error("stopped with something not proven: %u request(s) unanswered, %u sandbox(es) not retired, %u "
		 "sandbox end(s) not proven (their sessions stay reserved: session show; the next start asks the runtime "
		 "again)", unanswered, not_retired, unproven);
	return STOP_NOT_PROVEN;
}
