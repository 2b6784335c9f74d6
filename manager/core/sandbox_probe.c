/* At start: the third property of the volume probe (workspace/volume_probe.c does the first two), through one
 * throwaway sandbox: a write on the host is visible through a sandbox's mount view, and a write
 * inside is visible on the host. Reads what the sandbox wrote as untrusted: never another file. */
#include "manager.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_client.h"
#include "fstree.h"
#include "identity_ids.h"
#include "log.h"
#include "pathfmt.h"
#include "private_dir.h"
#include "random.h"

struct probe {
	char dir[PATH_MAX];
	char token[17];
	struct mount_entry entry;
	struct mount_plan plan;
};

static int probe_exec(struct live_sandbox *l, struct probe *p, struct sb_err *err)
{
	char cmd[256];
	struct agent_env env[] = { { "PATH", "/usr/bin:/bin" } };
	struct agent_exec_request req = { .exec_id = "volume-probe", .generation = l->generation, .command = cmd,
					  .cwd = p->dir, .timeout_seconds = 10, .output_limit = 4096, .env = env,
					  .n_env = 1, .receipt_key = l->receipt_key };
	struct agent_reply reply = { 0 };
	struct agent_conn *conn = NULL;
	json_t *result = NULL;
	int rc = -1;

	snprintf(cmd, sizeof cmd, "cat host.txt && echo %s-sandbox > sandbox.txt", p->token);
	if (sb_random_bytes(req.nonce, sizeof req.nonce, err) == 0 &&
	    agent_connect(l->tls, l->h.address, tls_deadline_after(10000), &conn, err) == 0 &&
	    agent_exec(conn, &req, tls_deadline_after(30000), &reply, err) == 0) {
		result = json_loads(reply.result_json, 0, NULL);
		const char *out = json_string_value(json_object_get(result, "stdout"));

		rc = out != NULL && strncmp(out, p->token, 16) == 0 && reply.receipt_verified ? 0 :
		     sb_fail(err, EIO, "a file written on the host is not visible inside a sandbox (it read '%s')",
			     out ? out : "(nothing)");
	}
	json_decref(result);
	agent_reply_free(&reply);
	agent_close(conn);
	return rc;
}

/* host.txt, written before the probe's sandbox exists (nothing else writes the fresh directory). */
static int probe_host_write(const struct probe *p, struct sb_err *err)
{
	char path[PATH_MAX + 16];
	FILE *f;

	if (path_fmt(path, sizeof path, err, "%s/host.txt", p->dir) < 0)
		return -1;
	f = fopen(path, "wxe");
	if (f == NULL)
		return sb_fail_errno(err, "writing %s", path);
	fprintf(f, "%s\n", p->token);
	if (fclose(f) != 0)
		return sb_fail_errno(err, "closing %s", path);
	return 0;
}

/* sandbox.txt, which the probe's sandbox wrote: its directory is the sandbox's (handed over), so
 * a compromised agent could have put a link or a FIFO there. Read beneath the held probe
 * directory (opened with no link on its path: the volume root above it is not the sandbox's), one
 * name with O_NOFOLLOW, without blocking, a regular file of at most a line: never another file. */
static int probe_sandbox_read(const struct probe *p, struct sb_err *err)
{
	char want[64], got[64];
	struct stat st;
	ssize_t n = -1;
	int dirfd, fd;

	dirfd = fstree_open_dir(AT_FDCWD, p->dir, err);
	if (dirfd < 0)
		return -1;
	fd = openat(dirfd, "sandbox.txt", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(dirfd);
	if (fd < 0)
		return sb_fail_errno(err, "a file written inside a sandbox is not visible on the host (%s/sandbox.txt%s)",
				     p->dir, errno == ELOOP ? ": a symbolic link, refused" : "");
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)sizeof got)
		n = read(fd, got, sizeof got - 1);
	close(fd);
	if (n < 0)
		return sb_fail(err, EIO, "%s/sandbox.txt, written inside a sandbox, is not a regular file of one short "
			       "line", p->dir);
	got[n] = '\0';
	snprintf(want, sizeof want, "%s-sandbox\n", p->token);
	if (strcmp(got, want) != 0)
		return sb_fail(err, EIO, "a file written inside a sandbox reads differently on the host");
	return 0;
}

/* The third property of the volume probe (workspace/volume_probe.c does the first two): a write on the host is
 * visible through a sandbox's mount view, and a write inside is visible on the host. One
 * throwaway sandbox on a probe directory of the volume, stopped with evidence afterwards. */
int sandbox_volume_probe(struct manager *m, struct sb_err *err)
{
	struct live_sandbox *l = calloc(1, sizeof *l);
	struct probe p = { 0 };
	struct sandbox_spec spec = { 0 };
	struct sb_err ignored;
	bool unproven = false;
	int rc = -1;

	if (l == NULL)
		return sb_fail(err, ENOMEM, "probing the volume");
	l->generation = 1;
	if (sb_random_hex(p.token, 8, err) < 0)
		goto out;
	snprintf(l->session, sizeof l->session, "volprobe-%s", p.token);
	if (path_fmt(p.dir, sizeof p.dir, err, "%s/.probe-%s", m->cfg.volume, p.token) < 0) {
		p.dir[0] = '\0';
		goto out;
	}
	if (mkdir(p.dir, 0755) < 0) {
		sb_fail_errno(err, "creating %s", p.dir);
		goto out;
	}
	p.entry = (struct mount_entry){ .source = p.dir, .target = p.dir, .mode = MOUNT_RW, .why = "volume probe" };
	p.plan = (struct mount_plan){ .entries = &p.entry, .n = 1, .workdir = p.dir, .scratch = p.dir };
	spec = (struct sandbox_spec){ .session = l->session, .generation = 1, .plan = &p.plan, .agent_path = m->cfg.agent,
				      .manager_name = CA_MANAGER_NAME, .host_uid = identity_ids_probe(&m->cfg).uid,
				      .host_gid = identity_ids_probe(&m->cfg).gid };
	if (probe_host_write(&p, err) < 0 || private_dir_make(m, l, err) < 0 || client_config_make(m, l, err) < 0)
		goto out;
	spec.private_dir = l->private_dir;
	if (m->backend->ops->prepare(m->backend, &spec, &l->h, err) < 0)
		goto out;
	rc = probe_exec(l, &p, err) == 0 && probe_sandbox_read(&p, err) == 0 ? 0 : -1;
	if (m->backend->ops->stop(m->backend, &l->h, &ignored) < 0)
		sb_warn("volume probe: stopping its sandbox: %s", ignored.msg);
	if (m->backend->ops->evidence(m->backend, &l->h, EVIDENCE_MS, rc == 0 ? err : &ignored) < 0) {
		/* Its keys and directory stay: it may still run. */
		sb_error("volume probe: the end of its sandbox %s is not proven", l->h.runtime_id);
		unproven = true;
		rc = -1;
	}
out:
	if (rc < 0)
		sb_err_prefix(err, "volume probe");
	else
		sb_info("volume probe: exclusive create, atomic rename, and writes visible both ways through a "
			"sandbox's mount view");
	if (!unproven && l->private_dir[0] != '\0')
		private_dir_remove(l->private_dir, &ignored);
	if (!unproven && p.dir[0] != '\0')
		private_dir_remove(p.dir, &ignored);
	live_free(l);
	return rc;
}
