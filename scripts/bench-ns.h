/* What the two measuring sticks of `make bench` share (scripts/bench-nsfloor.c, the floor, and
 * scripts/bench-nsboundary.c, the boundary's kernel work): one copy, so that they differ by the work
 * they measure only. Static functions: each program is built alone, from its one source file. */
#ifndef BENCH_NS_H
#define BENCH_NS_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noreturn)) static void die(const char *what)
{
	perror(what);
	_exit(125);
}

static void file_put(pid_t pid, const char *name, const char *text)
{
	char path[64];
	int fd;

	snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		die(path);
	close(fd);
}

/* The child's id maps: root inside is the caller outside, setgroups denied first (as an unprivileged
 * caller must). */
static void id_maps_write(pid_t pid)
{
	char map[64];

	file_put(pid, "setgroups", "deny");
	snprintf(map, sizeof map, "0 %d 1", (int)getgid());
	file_put(pid, "gid_map", map);
	snprintf(map, sizeof map, "0 %d 1", (int)getuid());
	file_put(pid, "uid_map", map);
}

/* `bash -c command` in the environment the agent gives a command (sandbox-agent/cli_exec.c env_build),
 * whatever the caller's: bash's start depends on it (LANG=C.UTF-8 loads the locale's files; without
 * SHELL bash looks its uid up in the user database), and a stick is to differ from a boxed command by
 * its isolation only. */
__attribute__((noreturn)) static void bash_exec(const char *command)
{
	static char *const envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				      "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", "TMP=/tmp", "TEMP=/tmp",
				      "SHELL=/bin/bash", NULL };

	execle("/bin/bash", "bash", "-c", command, (char *)NULL, envp);
	die("execve /bin/bash");
}

#endif
