/* Brokers and snapshots (see grants.h). The `file` broker copies an operator-provided credential;
 * network brokers (TokenRequest, Rancher) are declared but refused until they exist, so a grant
 * never silently yields nothing. */
#include "grants.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CREDENTIAL_MAX (1024 * 1024)

/* A resource name as a file name: [A-Za-z0-9._-], the rest becomes '-'. */
static void file_name(const char *resource, char *out, size_t len)
{
	size_t i;

	for (i = 0; resource[i] != '\0' && i + 1 < len; i++) {
		char c = resource[i];

		out[i] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
				 c == '_' || c == '-' ? c : '-';
	}
	out[i] = '\0';
}

static int copy_file(const char *from, const char *to, uid_t uid, gid_t gid, struct sb_err *err)
{
	static char buf[CREDENTIAL_MAX];
	ssize_t n;
	int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out;

	if (in < 0)
		return sb_fail_errno(err, "reading the credential %s", from);
	n = read(in, buf, sizeof buf);
	close(in);
	if (n < 0 || n == (ssize_t)sizeof buf)
		return sb_fail(err, n < 0 ? errno : EFBIG, "the credential %s cannot be read whole (max %d bytes)", from,
			       CREDENTIAL_MAX - 1);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
	if (out < 0)
		return sb_fail_errno(err, "creating %s", to);
	if (write(out, buf, (size_t)n) != n || fchown(out, uid, gid) < 0 || fsync(out) < 0) {
		sb_fail_errno(err, "writing %s", to);
		close(out);
		return -1;
	}
	close(out);
	return 0;
}

static int grant_materialise(struct snapshot *s, const char *resource, const char *access, const char *broker,
			     uid_t uid, gid_t gid, struct sb_err *err)
{
	char name[256], path[PATH_MAX + 300];
	int kube = strncmp(resource, "kubernetes:", 11) == 0;
	size_t used;

	if (broker == NULL)
		return sb_fail(err, ENOENT, "grant %s=%s: the resource is no longer declared", resource, access);
	if (strncmp(broker, "file:", 5) != 0)
		return sb_fail(err, EOPNOTSUPP, "grant %s: broker '%.*s' is not available in this build; use file:PATH",
			       resource, (int)strcspn(broker, ":"), broker);
	file_name(resource, name, sizeof name);
	snprintf(path, sizeof path, "%s/%s%s", s->dir, name, kube ? ".kubeconfig" : "");
	if (copy_file(broker + 5, path, uid, gid, err) < 0)
		return -1;
	if (!kube)
		return 0;
	used = strlen(s->kubeconfig);
	if (used + strlen(path) + 2 > sizeof s->kubeconfig)
		return sb_fail(err, E2BIG, "too many kubernetes grants for one KUBECONFIG");
	snprintf(s->kubeconfig + used, sizeof s->kubeconfig - used, "%s%s", used ? ":" : "", path);
	return 0;
}

int snapshot_make(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		  struct snapshot *out, struct sb_err *err)
{
	const char *resource;
	json_t *access;

	memset(out, 0, sizeof out->kubeconfig);
	out->kubeconfig[0] = '\0';
	snprintf(out->dir, sizeof out->dir, "%s/credentials", private_dir);
	/* Readable by the sandbox's uid only; mounted read-only, outside the worktree. */
	if (mkdir(out->dir, 0500) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", out->dir);
	if (chown(out->dir, uid, gid) < 0 || chmod(out->dir, 0700) < 0)
		return sb_fail_errno(err, "preparing %s", out->dir);
	json_object_foreach(grants, resource, access)
		if (grant_materialise(out, resource, json_string_value(access) ?: "",
				      json_string_value(json_object_get(resources, resource)), uid, gid, err) < 0)
			return -1;
	if (chmod(out->dir, 0500) < 0)
		return sb_fail_errno(err, "sealing %s", out->dir);
	return 0;
}
