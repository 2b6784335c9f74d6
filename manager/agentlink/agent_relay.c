/* The relay of one port of a sandbox's loopback through its agent (agent_relay.h): one thread that
 * keeps a NetAccept waiting, and one thread per connection carried (agent_net_pipe) to the
 * manager's own listener. Why the manager dials the agent rather than the agent the manager: the
 * sandbox pod then needs no way out at all (its NetworkPolicy allows no egress, k8s_pod.c), the
 * manager needs no listener reachable from pods, and the agent's mTLS, generation-bound, is the
 * same that carries every exec. */
#include "agent_relay.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent_client.h"
#include "clock.h"
#include "log.h"
#include "sock.h"
#include "thread.h"

#define RELAY_CONNECT_MS 10000
#define RELAY_RETRY_MS 1000      /* after a failed NetAccept: the agent gone, or its tunnels full */

struct agent_relay {
	struct tls_config *config;
	char address[160];
	char path[108];          /* sun_path's size */
	uint16_t port;
	int stop_fd;             /* eventfd: readable once stopping */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t idle;     /* signalled as tunnels end */
	struct agent_conn *tunnels[AGENT_RELAY_TUNNELS_MAX]; /* NULL: a free slot */
	int live;                /* tunnel threads running */
};

struct tunnel {
	struct agent_relay *r;
	size_t slot;
};

/* The manager's listener, by its path: a unix socket in a directory no one else may search. */
static int relay_plain_connect(const struct agent_relay *r)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memcpy(sa.sun_path, r->path, sizeof r->path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void *tunnel_thread(void *arg)
{
	struct tunnel *t = arg;
	struct agent_relay *r = t->r;
	int fd = relay_plain_connect(r);

	if (fd < 0)
		sb_warn("relay of 127.0.0.1:%u: the manager's listener refused a connection: %s", r->port, strerror(errno));
	else if (agent_net_pipe(r->tunnels[t->slot], fd, AGENT_RELAY_IDLE_MS) < 0 && errno != ETIMEDOUT)
		sb_info("relay of 127.0.0.1:%u: a connection ended: %s", r->port, strerror(errno));
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&r->lock);
	agent_close(r->tunnels[t->slot]);
	r->tunnels[t->slot] = NULL;
	r->live--;
	pthread_cond_broadcast(&r->idle);
	pthread_mutex_unlock(&r->lock);
	free(t);
	return NULL;
}

/* The accepted connection on a tunnel thread of its own; closed when no slot or thread is left. */
static void relay_carry(struct agent_relay *r, struct agent_conn *conn)
{
	struct tunnel *t = malloc(sizeof *t);
	struct sb_err err;
	size_t i = 0;

	pthread_mutex_lock(&r->lock);
	while (i < AGENT_RELAY_TUNNELS_MAX && r->tunnels[i] != NULL)
		i++;
	if (t != NULL && i < AGENT_RELAY_TUNNELS_MAX) {
		*t = (struct tunnel){ .r = r, .slot = i };
		r->tunnels[i] = conn;
		r->live++;
		if (sb_thread_detached(tunnel_thread, t, &err) == 0) {
			pthread_mutex_unlock(&r->lock);
			return;
		}
		r->tunnels[i] = NULL;
		r->live--;
	}
	pthread_mutex_unlock(&r->lock);
	sb_warn("relay of 127.0.0.1:%u: a connection dropped (%d carried at once at most)", r->port,
		AGENT_RELAY_TUNNELS_MAX);
	free(t);
	agent_close(conn);
}

/* One NetAccept, connected and answered: the agent's listener holds the port. */
static int relay_open(struct agent_relay *r, struct agent_conn **out, struct sb_err *err)
{
	int64_t deadline = tls_deadline_after(RELAY_CONNECT_MS);

	if (agent_connect(r->config, r->address, deadline, out, err) < 0)
		return -1;
	if (agent_net_accept(*out, r->port, deadline, err) < 0) {
		agent_close(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

static bool relay_stopping(const struct agent_relay *r, int wait_ms)
{
	struct pollfd p = { .fd = r->stop_fd, .events = POLLIN };

	return poll(&p, 1, wait_ms) == 1;
}

static void *relay_thread(void *arg)
{
	struct agent_relay *r = arg;
	struct agent_conn *pending = NULL;
	struct sb_err err;
	bool said = false;

	while (!relay_stopping(r, 0)) {
		int rc;

		if (pending == NULL && relay_open(r, &pending, &err) < 0) {
			/* Once per outage in the log: the sandbox's end makes the agent unreachable too. */
			if (!said)
				sb_warn("relay of 127.0.0.1:%u: %s (retrying)", r->port, err.msg);
			said = true;
			(void)relay_stopping(r, RELAY_RETRY_MS);
			continue;
		}
		said = false;
		rc = agent_net_wait(pending, r->port, r->stop_fd, &err);
		if (rc == 1)
			relay_carry(r, pending);
		else
			agent_close(pending);
		if (rc < 0)
			sb_info("relay of 127.0.0.1:%u: %s", r->port, err.msg);
		pending = NULL;
	}
	agent_close(pending);
	return NULL;
}

static void relay_free(struct agent_relay *r)
{
	if (r->stop_fd >= 0)
		close(r->stop_fd);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->idle);
	free(r);
}

/* The relay's fields and the manager's listener; -1 with err (nothing left). */
static int relay_new(struct tls_config *config, const char *address, uint16_t port, const char *sock_path,
		     int *listen_fd, struct agent_relay **out, struct sb_err *err)
{
	struct agent_relay *r = calloc(1, sizeof *r);

	if (r == NULL)
		return sb_fail(err, ENOMEM, "the relay of 127.0.0.1:%u", port);
	r->config = config;
	r->port = port;
	r->stop_fd = eventfd(0, EFD_CLOEXEC);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->idle, NULL);
	if (r->stop_fd < 0) {
		sb_fail_errno(err, "the relay of 127.0.0.1:%u: eventfd", port);
	} else if (strlen(address) >= sizeof r->address || strlen(sock_path) >= sizeof r->path) {
		sb_fail(err, ENAMETOOLONG, "the relay of 127.0.0.1:%u: the agent's address or %s is too long", port,
			sock_path);
	} else {
		snprintf(r->address, sizeof r->address, "%s", address);
		snprintf(r->path, sizeof r->path, "%s", sock_path);
		*listen_fd = sock_listen_unix(sock_path, 0600, 64, err);
		if (*listen_fd >= 0) {
			*out = r;
			return 0;
		}
	}
	relay_free(r);
	return -1;
}

int agent_relay_start(struct tls_config *config, const char *address, uint16_t port, const char *sock_path,
		      int *listen_fd, struct agent_relay **out, struct sb_err *err)
{
	struct agent_conn *first = NULL;
	struct agent_relay *r = NULL;
	int rc;

	*out = NULL;
	*listen_fd = -1;
	if (relay_new(config, address, port, sock_path, listen_fd, &r, err) < 0)
		return -1;
	/* Fail closed: the port is the agent's before the sandbox's first command, or no sandbox. */
	if (relay_open(r, &first, err) < 0) {
		sb_err_prefix(err, "the sandbox's 127.0.0.1:%u through its agent", port);
	} else {
		agent_close(first); /* the listener stays the agent's; the thread opens its own waits */
		rc = pthread_create(&r->thread, NULL, relay_thread, r);
		if (rc == 0) {
			*out = r;
			return 0;
		}
		sb_fail(err, rc, "the relay of 127.0.0.1:%u: its thread", port);
	}
	close(*listen_fd);
	*listen_fd = -1;
	unlink(r->path);
	relay_free(r);
	return -1;
}

void agent_relay_stop(struct agent_relay **rp)
{
	struct agent_relay *r = rp ? *rp : NULL;
	uint64_t one = 1;

	if (r == NULL)
		return;
	*rp = NULL;
	/* An eventfd's write fails only at its counter's maximum: never from one write. */
	if (write(r->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
		sb_warn("relay of 127.0.0.1:%u: its stop was not signalled: %s", r->port, strerror(errno));
	pthread_join(r->thread, NULL);
	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < AGENT_RELAY_TUNNELS_MAX; i++)
		agent_interrupt(r->tunnels[i]);
	while (r->live > 0)
		pthread_cond_wait(&r->idle, &r->lock);
	pthread_mutex_unlock(&r->lock);
	unlink(r->path);
	relay_free(r);
}
