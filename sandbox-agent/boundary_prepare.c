/* agent, once per agent, before any command: what every command's boundary reuses (boundary.h
 * struct boundary): the private directories by identity, the writable roots resolved, the ids
 * commands run as, seccomp chosen, Landlock set up. Never starts a process and never mounts. */
#include "boundary.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "landlock.h"
#include "seccomp.h"
#include "mountfd.h"
#include "privdir.h"

#define DEFAULT_TEARDOWN_MS 5000

/* ---- preparation, once per agent ---- */

void hidden_dir_from_privdir(struct hidden_dir *h, const struct privdir *d)
{
	memcpy(h->path, d->path, sizeof h->path);
	h->dev = d->dev;
	h->ino = d->ino;
}

int hidden_dir_from_path(struct hidden_dir *h, const char *path, struct sb_err *err)
{
	struct stat st;
	int fd;

	/* Resolved once, now: a symlink swapped in later cannot redirect the hiding mount, and
	 * init covers only the directory with this identity. */
	if (realpath(path, h->path) == NULL)
		return sb_fail_errno(err, "directory to hide %s", path);
	fd = mfd_open_nofollow(AT_FDCWD, h->path, O_PATH | O_DIRECTORY);
	if (fd < 0 || fstat(fd, &st) < 0) {
		sb_fail_errno(err, "directory to hide %s", h->path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	h->dev = st.st_dev;
	h->ino = st.st_ino;
	return 0;
}


static int writable_add(struct boundary *b, const char *path, struct sb_err *err)
{
	char *real;

	if (b->n_writable >= BOUNDARY_MAX_WRITABLE)
		return sb_fail(err, E2BIG, "more than %d writable roots", BOUNDARY_MAX_WRITABLE);
	real = realpath(path, NULL);
	if (real == NULL)
		return sb_fail_errno(err, "writable root %s", path);
	b->writable[b->n_writable++] = real;
	return 0; /* checked per command, with the rest: writable_check() */
}

static int landlock_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	b->landlock_abi = landlock_abi();
	if (opts->n_block_ports == 0) {
		/* No big domain above the command: a per-call layer with scopes only is cheap. */
		b->landlock_per_call = b->landlock_abi >= 6;
		return 0;
	}
	if (opts->n_block_ports > BOUNDARY_MAX_PORTS)
		return sb_fail(err, E2BIG, "more than %d blocked ports", BOUNDARY_MAX_PORTS);
	memcpy(b->block_ports, opts->block_ports, opts->n_block_ports * sizeof(uint16_t));
	b->n_block_ports = opts->n_block_ports;
	/* The agent restricts itself, once: it makes no outbound TCP connections, and every
	 * command inherits the domain for free. A per-call layer under it would cost ~12 ms. */
	b->landlock_per_call = false;
	if (landlock_restrict_ports(b->landlock_abi, b->block_ports, b->n_block_ports, err) < 0) {
		sb_err_prefix(err, "blocking ports for commands");
		return -1;
	}
	return 0;
}

/* Does the agent's euid stand for host root? In the initial user namespace uid_map reads
 * "0 0 4294967295"; a namespace that maps its 0 to host 0 counts the same. */
static bool euid_is_host_root(void)
{
	unsigned long inside, outside, count;
	bool host_root = false;
	FILE *f;

	if (geteuid() != 0)
		return false;
	f = fopen("/proc/self/uid_map", "re");
	if (f == NULL)
		return true; /* cannot tell: assume the worst */
	while (fscanf(f, "%lu %lu %lu", &inside, &outside, &count) == 3)
		if (inside == 0 && outside == 0)
			host_root = true;
	fclose(f);
	return host_root;
}

/* Which ids run commands. Never host root: a process whose uid is host 0 needs no capability
 * to write /proc/sys, /proc/sysrq-trigger, sysfs or root-owned device nodes (the kernel checks
 * ownership there, not capabilities), so a host-root agent runs its commands as an unprivileged
 * uid, mapped 1:1 so that file ownership reads the same inside and out. And never uid 0 of the
 * command's own user namespace, which owns its PID namespace: that namespace's root may write
 * per-namespace sysctls such as pid_max (kernel/pid.c, Linux >= 6.14) and owns init's /proc
 * files once init is not dumpable. So an agent that is uid 0 of a namespace of its own (a
 * rootless container) maps the sandbox uid inside to its own 0 outside: the same kernel uid,
 * with no uid 0 in the command's namespace at all. */
static int command_ids_choose(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	uid_t sandbox_uid = opts->sandbox_uid ? opts->sandbox_uid : BOUNDARY_SANDBOX_ID_DEFAULT;
	gid_t sandbox_gid = opts->sandbox_gid ? opts->sandbox_gid : BOUNDARY_SANDBOX_ID_DEFAULT;

	b->command_uid = b->command_outside_uid = geteuid();
	b->command_gid = b->command_outside_gid = getegid();
	if (geteuid() == 0) {
		b->command_uid = sandbox_uid;
		b->command_gid = sandbox_gid;
		if (euid_is_host_root()) {
			b->command_outside_uid = sandbox_uid;
			b->command_outside_gid = sandbox_gid;
			/* The command inherits the supplementary groups of its creator, and setgroups is
			 * denied in its namespace, so it could never drop them: a root agent started
			 * with root's groups (a login shell's initgroups) would hand group 0 to nobody.
			 * The agent needs none of them after its keys are loaded: drop them for good. */
			if (setgroups(0, NULL) < 0)
				return sb_fail_errno(err, "dropping the agent's supplementary groups");
		}
	} else if (getegid() == 0) {
		b->command_gid = sandbox_gid; /* gid 0 inside would own the namespace's files too */
	}
	if (b->command_uid == 0 || b->command_gid == 0)
		return sb_fail(err, EPERM, "commands never run as uid 0: choose another sandbox uid and gid");
	return 0;
}

int boundary_prepare(struct boundary *b, const struct boundary_options *opts, struct sb_err *err)
{
	ssize_t n;

	memset(b, 0, sizeof *b);
	b->max_processes = opts->max_processes ? opts->max_processes : BOUNDARY_MAX_PROCESSES_DEFAULT;
	b->teardown_ms = DEFAULT_TEARDOWN_MS;
	b->shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	b->readonly_world = opts->readonly_world;
	b->tmp_bytes = opts->tmp_bytes ? opts->tmp_bytes : BOUNDARY_TMP_BYTES_DEFAULT;
	b->shm_bytes = opts->shm_bytes ? opts->shm_bytes : BOUNDARY_SHM_BYTES_DEFAULT;
	if (command_ids_choose(b, opts, err) < 0)
		return -1;
	if (opts->n_hidden > BOUNDARY_MAX_HIDDEN)
		return sb_fail(err, E2BIG, "more than %d private directories", BOUNDARY_MAX_HIDDEN);
	b->hidden = calloc(opts->n_hidden + 1, sizeof b->hidden[0]);
	if (b->hidden == NULL)
		return sb_fail(err, ENOMEM, "recording the private directories");
	memcpy(b->hidden, opts->hidden, opts->n_hidden * sizeof opts->hidden[0]);
	b->n_hidden = opts->n_hidden;
	/* The binary the next exec will run: a command must never be able to replace it. Unknown is
	 * unguarded: refuse rather than run without the check. */
	n = readlink("/proc/self/exe", b->agent_exe, sizeof b->agent_exe - 1);
	if (n <= 0 || (size_t)n >= sizeof b->agent_exe - 1)
		return sb_fail(err, n < 0 ? errno : ENAMETOOLONG, "reading the agent binary's path (/proc/self/exe)");
	b->agent_exe[n] = '\0';
	for (size_t i = 0; i < opts->n_writable; i++)
		if (writable_add(b, opts->writable[i], err) < 0)
			return -1;
	b->no_caps = cap_init();
	if (b->no_caps == NULL)
		return sb_fail_errno(err, "cap_init");
	b->seccomp = b->readonly_world ? &seccomp_program_readonly_world : &seccomp_program_host_world;
	return landlock_prepare(b, opts, err);
}

void boundary_free(struct boundary *b)
{
	for (size_t i = 0; i < b->n_writable; i++)
		free(b->writable[i]);
	b->n_writable = 0;
	free(b->hidden);
	b->hidden = NULL;
	b->n_hidden = 0;
	if (b->no_caps != NULL)
		cap_free(b->no_caps);
	b->no_caps = NULL;
}
