/* The per-sandbox Secrets (k8s_secrets.h).
 *
 * Why Secrets and not the private directory by hostPath: a pod may land on any node (pvc:CLAIM),
 * and the manager's private directory lives on the manager's host only. The pod now mounts no
 * part of the private directory; the manager reads it and sends its files to the API server.
 *
 * Why the pod first: an ownerReference needs the owner's UID, which only the created pod has. The
 * kubelet does not start the container until every Secret volume can be set up, and retries a
 * missing one, so the pod waits for its Secrets instead of starting without them.
 *
 * Why the backend deletes them as well as the garbage collector: the collector is a controller of
 * the cluster (kube-controller-manager), which may be down, slow or configured without it; a
 * Secret that outlives its sandbox holds a key and credentials that must not. The backend's own
 * delete runs only after the pod is proven gone (the collector would not act sooner either), and
 * by name: the names are the pod's, one per session and generation, made by this manager only. */
#include "k8s_secrets.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mbedtls/base64.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fstree.h"
#include "log.h"
#include "pathfmt.h"

/* What the API server takes in one Secret (its object, base64 included, must stay below 1 MiB). */
#define SECRET_DATA_MAX (700 * 1024)

int k8s_secret_name(char *out, size_t len, const char *pod, const char *suffix, struct sb_err *err)
{
	return path_fmt(out, len, err, "%s%s", pod, suffix);
}

/* A Secret key: [-._a-zA-Z0-9]+, and not the kubelet's own "..*" names. */
static bool key_valid(const char *k)
{
	return k[0] != '\0' && strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._") ==
	       strlen(k) && strncmp(k, "..", 2) != 0 && strcmp(k, ".") != 0;
}

/* One file beneath the held directory dirfd (never through a link, never a FIFO's wait) into
 * data[key], base64; *total counts the bytes against the Secret's bound. */
static int data_add(json_t *data, int dirfd, const char *dir, const char *name, const char *key, size_t *total,
		    struct sb_err *err)
{
	struct stat st;
	unsigned char *raw = NULL, *b64 = NULL;
	size_t n64 = 0;
	ssize_t got = -1;
	int rc = -1, fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return sb_fail_errno(err, "reading %s/%s for the pod's Secret", dir, name);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		sb_invalid(err, "%s/%s is not a regular file: not put in a Secret", dir, name);
		goto out;
	}
	if ((size_t)st.st_size > SECRET_DATA_MAX || *total + (size_t)st.st_size > SECRET_DATA_MAX) {
		sb_fail(err, EFBIG, "%s: the files for one Secret exceed %d KiB (the API server's bound is 1 MiB)", dir,
			SECRET_DATA_MAX / 1024);
		goto out;
	}
	raw = malloc((size_t)st.st_size + 1);
	if (raw == NULL) {
		sb_fail(err, ENOMEM, "reading %s/%s", dir, name);
		goto out;
	}
	got = read(fd, raw, (size_t)st.st_size + 1);
	if (got != (ssize_t)st.st_size) {
		sb_fail(err, EIO, "%s/%s changed while it was read", dir, name);
		goto out;
	}
	*total += (size_t)got;
	mbedtls_base64_encode(NULL, 0, &n64, raw, (size_t)got);
	b64 = malloc(n64 + 1);
	if (b64 == NULL || mbedtls_base64_encode(b64, n64 + 1, &n64, raw, (size_t)got) != 0) {
		sb_fail(err, ENOMEM, "encoding %s/%s", dir, name);
		goto out;
	}
	b64[n64] = '\0';
	rc = json_object_set_new(data, key, json_string((char *)b64)) == 0 ? 0 : sb_fail(err, ENOMEM, "a Secret's data");
out:
	if (raw != NULL)
		explicit_bzero(raw, (size_t)st.st_size + 1);
	if (b64 != NULL)
		explicit_bzero(b64, n64);
	free(raw);
	free(b64);
	close(fd);
	return rc;
}

/* Why the paths are opened from AT_FDCWD: the private directory is the manager's (0711, in its
 * state directory), and its tls/, state/ and credentials/ are written by the manager only: no pod
 * mounts them any more, and the process and podman backends' sandboxes see tls/ read-only and
 * credentials/ read-only (agent_dir.c says who owns what). */
static int agent_data(json_t *data, const struct agent_dir *d, struct sb_err *err)
{
	size_t total = 0;
	int tls = fstree_open_dir(AT_FDCWD, d->tls, err), state;
	int rc;

	if (tls < 0)
		return -1;
	rc = data_add(data, tls, d->tls, "agent.crt", K8S_KEY_CERT, &total, err) < 0 ||
	     data_add(data, tls, d->tls, "agent.key", K8S_KEY_KEY, &total, err) < 0 ||
	     data_add(data, tls, d->tls, "ca.crt", K8S_KEY_CA, &total, err) < 0 ? -1 : 0;
	close(tls);
	if (rc < 0)
		return -1;
	state = fstree_open_dir(AT_FDCWD, d->state, err);
	if (state < 0)
		return -1;
	rc = data_add(data, state, d->state, "receipt.key", K8S_KEY_RECEIPT, &total, err);
	close(state);
	if (rc == 0 && json_object_set_new(data, K8S_KEY_EMPTY, json_string("")) < 0)
		rc = sb_fail(err, ENOMEM, "a Secret's data");
	return rc;
}

/* Every file of the snapshot (grants.c makes them flat, named [A-Za-z0-9._-]). */
static int credentials_data(json_t *data, const char *dir, struct sb_err *err)
{
	size_t total = 0;
	int fd = fstree_open_dir(AT_FDCWD, dir, err), rc = 0;
	DIR *dp;
	struct dirent *e;

	if (fd < 0)
		return -1;
	dp = fdopendir(fd);
	if (dp == NULL) {
		close(fd);
		return sb_fail_errno(err, "listing %s", dir);
	}
	while (rc == 0 && (errno = 0, e = readdir(dp)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (!key_valid(e->d_name))
			rc = sb_invalid(err, "%s/%s cannot be a Secret's key ([-._a-zA-Z0-9] only)", dir, e->d_name);
		else
			rc = data_add(data, dirfd(dp), dir, e->d_name, e->d_name, &total, err);
	}
	if (rc == 0 && errno != 0)
		rc = sb_fail_errno(err, "listing %s", dir);
	closedir(dp);
	return rc;
}

static int secret_post(const struct k8s_conn *c, const char *ns, const char *name, const char *pod,
		       const char *pod_uid, json_t *labels, json_t *data, long timeout_ms, struct sb_err *err)
{
	/* The pod owns it: not its controller, and its deletion never waits for the Secret. */
	json_t *body = json_pack("{s:s, s:s, s:s, s:{s:s, s:O, s:[{s:s, s:s, s:s, s:s, s:b}]}, s:o}",
				 "apiVersion", "v1", "kind", "Secret", "type", "Opaque",
				 "metadata", "name", name, "labels", labels,
				 "ownerReferences", "apiVersion", "v1", "kind", "Pod", "name", pod, "uid", pod_uid,
				 "blockOwnerDeletion", 0,
				 "data", data);
	struct rest_reply r;
	char path[256];
	int rc;

	if (body == NULL)
		return sb_fail(err, ENOMEM, "describing Secret %s", name);
	snprintf(path, sizeof path, "/api/v1/namespaces/%s/secrets", ns);
	rc = k8s_request(c, "POST", path, body, timeout_ms, &r, err);
	json_decref(body);
	if (rc < 0)
		return -1;
	if (r.status != 201)
		rc = sb_fail(err, r.status == 403 ? EACCES : EIO, "the API server refused to create Secret %s (HTTP %ld): %s",
			     name, r.status, rest_reply_message(&r));
	rest_reply_free(&r);
	return rc;
}

int k8s_secrets_create(const struct k8s_conn *c, const char *ns, const char *pod, const char *pod_uid,
		       json_t *labels, const struct agent_dir *d, long timeout_ms, struct sb_err *err)
{
	char name[128];
	json_t *data = json_object();
	int rc;

	if (data == NULL)
		return sb_fail(err, ENOMEM, "a Secret's data");
	if (k8s_secret_name(name, sizeof name, pod, K8S_SECRET_AGENT, err) < 0 || agent_data(data, d, err) < 0) {
		json_decref(data);
		return -1;
	}
	rc = secret_post(c, ns, name, pod, pod_uid, labels, data, timeout_ms, err);
	if (rc < 0 || d->credentials[0] == '\0')
		return rc;
	data = json_object();
	if (data == NULL)
		return sb_fail(err, ENOMEM, "a Secret's data");
	if (k8s_secret_name(name, sizeof name, pod, K8S_SECRET_CREDENTIALS, err) < 0 ||
	    credentials_data(data, d->credentials, err) < 0) {
		json_decref(data);
		return -1;
	}
	return secret_post(c, ns, name, pod, pod_uid, labels, data, timeout_ms, err);
}

void k8s_secrets_delete(const struct k8s_conn *c, const char *ns, const char *pod, long timeout_ms)
{
	static const char *const suffix[] = { K8S_SECRET_AGENT, K8S_SECRET_CREDENTIALS };

	for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
		struct rest_reply r;
		struct sb_err err;
		char name[128], path[300];

		if (k8s_secret_name(name, sizeof name, pod, suffix[i], &err) < 0)
			continue;
		snprintf(path, sizeof path, "/api/v1/namespaces/%s/secrets/%s", ns, name);
		if (k8s_request(c, "DELETE", path, NULL, timeout_ms, &r, &err) < 0) {
			sb_warn("Secret %s of the ended pod %s not deleted (the garbage collector still holds it to the "
				"pod): %s", name, pod, err.msg);
			continue;
		}
		if (r.status != 200 && r.status != 202 && r.status != 404)
			sb_warn("Secret %s of the ended pod %s not deleted (HTTP %ld; the garbage collector still holds it "
				"to the pod): %s", name, pod, r.status, rest_reply_message(&r));
		rest_reply_free(&r);
	}
}
