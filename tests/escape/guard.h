/* Guard for the attack programs: they try to break the boundary, so they must only ever run inside it.
 * The test passes the host's PID and user namespace inodes as argv[1] and argv[2]; the guard refuses
 * (exit 99) unless both differ from this process's own, or when it cannot tell. Never weaken it. */
#ifndef ESCAPE_GUARD_H
#define ESCAPE_GUARD_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GUARD_REFUSED 99

/* The name of errno value e ("EPERM"), or its number when glibc has no name; "0" for success. */
static inline const char *guard_errname(int e)
{
	static char buf[16];
	const char *name;

	if (e == 0)
		return "0";
	name = strerrorname_np(e);
	if (name)
		return name;
	snprintf(buf, sizeof(buf), "%d", e);
	return buf;
}

/* Parses a namespace inode from the command line; 0 when it is not a positive decimal number. */
static inline unsigned long long guard_parse_inode(const char *s)
{
	char *end = NULL;
	unsigned long long v;

	if (!s || !*s || *s < '0' || *s > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || !end || *end)
		return 0;
	return v;
}

/* The inode of /proc/self/ns/NAME; 0 when it cannot be read. */
static inline unsigned long long guard_ns_inode(const char *name)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/self/ns/%s", name);
	if (stat(path, &st) != 0)
		return 0;
	return (unsigned long long)st.st_ino;
}

static inline void guard_refuse(const char *why)
{
	printf("guard: refusing: not inside a fresh namespace\n");
	fflush(stdout);
	fprintf(stderr, "guard: %s\n", why);
	exit(GUARD_REFUSED);
}

/* Exits 99 unless this process is in a PID and a user namespace other than the host's (argv[1], argv[2]).
 * Returns the index of the program's first own argument. */
static inline int guard_check(int argc, char **argv)
{
	unsigned long long host_pid, host_user, own_pid, own_user;

	if (argc < 3)
		guard_refuse("usage: PROGRAM HOST_PIDNS_INODE HOST_USERNS_INODE ...");
	host_pid = guard_parse_inode(argv[1]);
	host_user = guard_parse_inode(argv[2]);
	if (!host_pid || !host_user)
		guard_refuse("host namespace inodes are not numbers");
	own_pid = guard_ns_inode("pid");
	own_user = guard_ns_inode("user");
	if (!own_pid || !own_user)
		guard_refuse("cannot stat /proc/self/ns");
	if (own_pid == host_pid)
		guard_refuse("same PID namespace as the host");
	if (own_user == host_user)
		guard_refuse("same user namespace as the host");
	return 3;
}

#endif
