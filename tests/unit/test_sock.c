/* Unit tests for common/sock.c: the one HOST:PORT parser (the agent's --listen, the manager's agent
 * address) and the one unix-socket listener (the agent's unix:PATH, the control and metrics sockets). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sock.h"

static void test_hostport_accepts(void **state)
{
	struct sockaddr_storage ss;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	struct sb_err err;
	socklen_t len = 0;
	uint16_t port = 0;

	(void)state;
	assert_int_equal(sock_hostport_parse("127.0.0.1:8443", &ss, &len, &port, &err), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(len, sizeof *v4);
	assert_int_equal(ntohs(v4->sin_port), 8443);
	assert_int_equal(port, 8443);
	assert_int_equal(ntohl(v4->sin_addr.s_addr), INADDR_LOOPBACK);
	assert_int_equal(sock_hostport_parse("[::1]:65535", &ss, &len, &port, &err), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(len, sizeof *v6);
	assert_int_equal(ntohs(v6->sin6_port), 65535);
	assert_memory_equal(&v6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback);
	assert_int_equal(sock_hostport_parse("0.0.0.0:1", &ss, &len, NULL, &err), 0);
}

/* What either old copy took and the one copy refuses, with what both refused: a port with a sign or a
 * space before it (strtoul skips both: the agent's --listen took them), a bracketed empty host. */
static void test_hostport_refuses(void **state)
{
	static const char *const bad[] = {
		"127.0.0.1:+80", "127.0.0.1: 80", "127.0.0.1:-0", "[]:80",  /* taken by one of the old copies */
		"127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:", "127.0.0.1:80x", "127.0.0.1:99999999999999999999",
		":80", "127.0.0.1", "", "localhost:80", "::1:80", "[::1]80", "[::1:80", "1.2.3:80", "[127.0.0.1]:80",
		"127.0.0.1:0x50", "127.0.0.1:80 ",
	};
	struct sockaddr_storage ss;
	struct sb_err err;
	socklen_t len;
	uint16_t port;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (sock_hostport_parse(bad[i], &ss, &len, &port, &err) != -1)
			fail_msg("accepted '%s'", bad[i]);
		assert_int_equal(err.errnum, EINVAL);
		assert_int_equal(ss.ss_family, 0);
	}
}

struct tmp {
	char dir[64], path[128];
};

static void tmp_make(struct tmp *t)
{
	snprintf(t->dir, sizeof t->dir, "/tmp/test_sock.XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	snprintf(t->path, sizeof t->path, "%s/s.sock", t->dir);
}

static void tmp_remove(struct tmp *t)
{
	unlink(t->path);
	rmdir(t->dir);
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	return st.st_mode & 07777;
}

/* Born 0600 whatever the process's umask (the agent's socket was bound under the caller's umask, then
 * chmodded: a window open to all with umask 0), the umask given back; a wider mode only when asked. */
static void test_listen_unix_mode(void **state)
{
	struct sb_err err;
	struct tmp t;
	mode_t before;
	int fd;

	(void)state;
	tmp_make(&t);
	before = umask(0);
	fd = sock_listen_unix(t.path, 0600, 4, &err);
	assert_true(fd >= 0);
	assert_int_equal(umask(before), 0);
	assert_int_equal(mode_of(t.path), 0600);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	fd = sock_listen_unix(t.path, 0660, 4, &err); /* the stale socket replaced */
	assert_true(fd >= 0);
	assert_int_equal(mode_of(t.path), 0660);
	close(fd);
	tmp_remove(&t);
}

static void test_listen_unix_refuses(void **state)
{
	char longpath[200];
	struct sb_err err;
	struct stat st;
	struct tmp t;
	int fd;

	(void)state;
	tmp_make(&t);
	fd = open(t.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(sock_listen_unix(t.path, 0600, 4, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	assert_int_equal(lstat(t.path, &st), 0); /* never removed */
	assert_true(S_ISREG(st.st_mode));
	memset(longpath, 'a', sizeof longpath - 1);
	longpath[0] = '/';
	longpath[sizeof longpath - 1] = '\0';
	assert_int_equal(sock_listen_unix(longpath, 0600, 4, &err), -1);
	assert_int_equal(err.errnum, ENAMETOOLONG);
	assert_int_equal(sock_listen_unix("", 0600, 4, &err), -1);
	tmp_remove(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostport_accepts),
		cmocka_unit_test(test_hostport_refuses),
		cmocka_unit_test(test_listen_unix_mode),
		cmocka_unit_test(test_listen_unix_refuses),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
