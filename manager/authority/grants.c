/* Brokers and snapshots (see grants.h). The `file` broker copies an operator-provided credential;
 * `tokenrequest` and `rancher` obtain short-lived ones over HTTPS (broker.h). An unknown broker is
 * refused, so a grant never silently yields nothing; a failed snapshot revokes what it made. */
#include "grants.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker.h"
#include "fdio.h"
#include "jsonfile.h"
#include "pathfmt.h"

#define REVOKE_FILE "credentials.revoke"

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
	int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (in < 0)
		return sb_fail_errno(err, "reading the credential %s", from);
	n = read(in, buf, sizeof buf);
	close(in);
	if (n < 0 || n == (ssize_t)sizeof buf)
		return sb_fail(err, n < 0 ? errno : EFBIG, "the credential %s cannot be read whole (max %d bytes)", from,
			       CREDENTIAL_MAX - 1);
	/* common/fdio.c: 0400, exclusive, no symlink, owned, written whole, synced with its directory. */
	return fd_file_create_path(to, 0400, uid, gid, buf, (size_t)n, err);
}

/* <private_dir>/credentials.revoke: what snapshot_release must revoke, replaced atomically. Beside
 * the credentials directory, never in it: the sandbox does not see it. */
static int revoke_list_write(const char *private_dir, json_t *list, struct sb_err *err)
{
	char path[PATH_MAX + 32], *text;
	int dirfd, rc;

	if (path_fmt(path, sizeof path, err, "%s/" REVOKE_FILE, private_dir) < 0)
		return -1;
	if (json_array_size(list) == 0)
		return unlink(path) < 0 && errno != ENOENT ? sb_fail_errno(err, "removing %s", path) : 0;
	text = json_dumps(list, JSON_COMPACT);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "serialising %s", path);
	dirfd = open(private_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* common/fdio.c: 0600 from the start, fsynced, renamed over the old list, directory fsynced. */
	rc = dirfd < 0 ? sb_fail_errno(err, "opening %s", private_dir) :
	     fd_file_replace(dirfd, private_dir, REVOKE_FILE, REVOKE_FILE ".tmp", 0600, text, strlen(text), err);
	if (dirfd >= 0)
		close(dirfd);
	free(text);
	return rc;
}

struct snapshot_ctx {
	struct snapshot *s;
	const struct broker_bound *bound;
	const char *private_dir;
	const char *label;     /* "<session>.g<generation>": the private directory's name */
	json_t *revoke;        /* [{"resource", "access", "broker", "arg", "id"}] */
	bool edge;             /* the network policy `proxy`: brokers' credentials kept in s->edges */
	uid_t uid;
	gid_t gid;
};

/* The next edge of the snapshot, for this grant: its port is fixed by its place. NULL with err. */
static struct broker_edge *edge_next(struct snapshot_ctx *c, const char *resource, const char *access,
				     struct sb_err *err)
{
	struct snapshot *s = c->s;
	struct snapshot_edge *e;

	if (s->edges == NULL && (s->edges = calloc(SNAPSHOT_EDGES_MAX, sizeof *s->edges)) == NULL) {
		sb_fail(err, ENOMEM, "grant %s: its edge", resource);
		return NULL;
	}
	if (s->edges_n == SNAPSHOT_EDGES_MAX) {
		sb_fail(err, E2BIG, "grant %s: over %d grants served at the edge", resource,
			SNAPSHOT_EDGES_MAX);
		return NULL;
	}
	e = &s->edges[s->edges_n];
	if (path_fmt(e->resource, sizeof e->resource, err, "%s", resource) < 0 ||
	    path_fmt(e->access, sizeof e->access, err, "%s", access) < 0)
		return NULL;
	e->cred.port = SNAPSHOT_EDGE_PORT + (unsigned)s->edges_n;
	return &e->cred;
}

void snapshot_edges_free(struct snapshot *s)
{
	for (size_t i = 0; s->edges != NULL && i < SNAPSHOT_EDGES_MAX; i++)
		broker_edge_clear(&s->edges[i].cred);
	free(s->edges);
	s->edges = NULL;
	s->edges_n = 0;
}

/* A network broker's grant: its kubeconfig, its expiry, and (if revocable) its entry in the list. */
static int grant_broker(struct snapshot_ctx *c, const char *resource, const char *access, const char *broker,
			const char *path, struct sb_err *err)
{
	bool rancher = strncmp(broker, "rancher:", 8) == 0;
	struct broker_request req = { .resource = resource, .access = access, .label = c->label, .path = path,
				      .uid = c->uid, .gid = c->gid, .bound = rancher ? NULL : c->bound };
	struct broker_result res;

	if (strncmp(resource, "kubernetes:", 11) != 0)
		return sb_invalid(err, "grant %s: the %s broker serves kubernetes:* resources only", resource,
				  rancher ? "rancher" : "tokenrequest");
	req.arg = broker + (rancher ? 8 : 13);
	if (c->edge && (req.edge = edge_next(c, resource, access, err)) == NULL)
		return -1;
	if ((rancher ? broker_rancher(&req, &res, err) : broker_tokenrequest(&req, &res, err)) < 0)
		return -1;
	if (req.edge != NULL)
		c->s->edges_n++; /* counted once it holds a credential */
	if (res.expires_ms != 0 && (c->s->expires_ms == 0 || res.expires_ms < c->s->expires_ms))
		c->s->expires_ms = res.expires_ms;
	if (res.revoke_id[0] == '\0')
		return 0;
	json_array_append_new(c->revoke, json_pack("{s:s, s:s, s:s, s:s, s:s}", "resource", resource, "access",
						   access, "broker", "rancher", "arg", req.arg, "id", res.revoke_id));
	return revoke_list_write(c->private_dir, c->revoke, err);
}

/* An http: grant (broker header:): its edge only, no file; the sandbox learns its port from
 * env_name. Refused off the edge (broker_http says why). */
static int grant_http(struct snapshot_ctx *c, const char *resource, const char *access, const char *broker,
		      struct sb_err *err)
{
	struct broker_request req = { .resource = resource, .access = access, .arg = broker + 7, .label = c->label };
	struct snapshot_edge *e;

	if (strncmp(resource, "http:", 5) != 0)
		return sb_invalid(err, "grant %s: the header broker serves http:* resources only", resource);
	if (c->edge && (req.edge = edge_next(c, resource, access, err)) == NULL)
		return -1;
	if (broker_http(&req, err) < 0)
		return -1;
	e = &c->s->edges[c->s->edges_n++];
	broker_http_env_name(resource, e->env_name, sizeof e->env_name);
	return 0;
}

static int grant_materialise(struct snapshot_ctx *c, const char *resource, const char *access, const char *broker,
			     struct sb_err *err)
{
	struct snapshot *s = c->s;
	char name[256], path[PATH_MAX + 300];
	int kube = strncmp(resource, "kubernetes:", 11) == 0;
	size_t used;

	if (broker == NULL)
		return sb_fail(err, ENOENT, "grant %s=%s: the resource is no longer declared", resource, access);
	if (strncmp(broker, "header:", 7) == 0 || strncmp(resource, "http:", 5) == 0)
		return strncmp(broker, "header:", 7) == 0 ?
		       grant_http(c, resource, access, broker, err) :
		       sb_invalid(err, "grant %s: an http: resource needs the header: broker", resource);
	file_name(resource, name, sizeof name);
	if (path_fmt(path, sizeof path, err, "%s/%s%s", s->dir, name, kube ? ".kubeconfig" : "") < 0)
		return -1;
	if (strncmp(broker, "file:", 5) == 0) {
		if (copy_file(broker + 5, path, c->uid, c->gid, err) < 0)
			return -1;
	} else if (strncmp(broker, "tokenrequest:", 13) == 0 || strncmp(broker, "rancher:", 8) == 0) {
		if (grant_broker(c, resource, access, broker, path, err) < 0)
			return -1;
	} else {
		return sb_fail(err, EOPNOTSUPP, "grant %s: unknown broker '%.*s'; use file:, tokenrequest:, rancher: or header:",
			       resource, (int)strcspn(broker, ":"), broker);
	}
	if (!kube)
		return 0;
	used = strlen(s->kubeconfig);
	if (used + strlen(path) + 2 > sizeof s->kubeconfig)
		return sb_fail(err, E2BIG, "too many kubernetes grants for one KUBECONFIG");
	snprintf(s->kubeconfig + used, sizeof s->kubeconfig - used, "%s%s", used ? ":" : "", path);
	return 0;
}

int snapshot_dir_make(const char *private_dir, uid_t uid, gid_t gid, char *out, size_t len, struct sb_err *err)
{
	if (path_fmt(out, len, err, "%s/credentials", private_dir) < 0)
		return -1;
	/* Readable by the sandbox's uid only; mounted read-only, outside the worktree. */
	if (mkdir(out, 0500) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", out);
	if (chown(out, uid, gid) < 0 || chmod(out, 0500) < 0)
		return sb_fail_errno(err, "preparing %s", out);
	return 0;
}

int snapshot_service_account(json_t *grants, json_t *resources, char *out, size_t len, struct sb_err *err)
{
	const char *resource, *first = NULL;
	char account[600], chosen[600] = ""; /* "NS/NAME" */
	json_t *access;

	out[0] = '\0';
	json_object_foreach(grants, resource, access) {
		const char *broker = json_string_value(json_object_get(resources, resource));
		struct broker_request req = { .resource = resource, .access = json_string_value(access) ?: "" };

		if (broker == NULL || strncmp(broker, "tokenrequest:", 13) != 0)
			continue;
		req.arg = broker + 13;
		if (broker_tokenrequest_account(&req, account, sizeof account, err) < 0)
			return -1;
		if (first != NULL && strcmp(account, chosen) != 0)
			return sb_invalid(err, "grants %s and %s need the service accounts %s and %s: the sandbox's pod "
					  "runs as one, to which their tokens are bound", first, resource, chosen, account);
		memcpy(chosen, account, sizeof chosen);
		first = resource;
	}
	/* The name only: the pod's own namespace is the account's (the broker refuses another one). */
	return first == NULL ? 0 : path_fmt(out, len, err, "%s", strchr(chosen, '/') + 1);
}

static int snapshot_fill(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
			 const struct broker_bound *bound, bool edge, struct snapshot *out, struct sb_err *err)
{
	const char *resource, *slash = strrchr(private_dir, '/');
	struct snapshot_ctx c = { .s = out, .bound = bound, .private_dir = private_dir, .edge = edge,
				  .label = slash ? slash + 1 : private_dir, .uid = uid, .gid = gid };
	json_t *access;
	int rc = 0;

	memset(out, 0, sizeof *out);
	if (snapshot_dir_make(private_dir, uid, gid, out->dir, sizeof out->dir, err) < 0)
		return -1;
	if (chmod(out->dir, 0700) < 0)
		return sb_fail_errno(err, "opening %s", out->dir);
	c.revoke = json_array();
	json_object_foreach(grants, resource, access)
		if (rc == 0)
			rc = grant_materialise(&c, resource, json_string_value(access) ?: "",
					       json_string_value(json_object_get(resources, resource)), err);
	json_decref(c.revoke);
	if (rc < 0) {
		struct sb_err ignored;

		/* This sandbox will not start: what was already made must not outlive it. */
		snapshot_release(private_dir, &ignored);
		snapshot_edges_free(out);
		return -1;
	}
	if (chmod(out->dir, 0500) < 0) {
		snapshot_edges_free(out);
		return sb_fail_errno(err, "sealing %s", out->dir);
	}
	return 0;
}

int snapshot_make(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		  const struct broker_bound *bound, struct snapshot *out, struct sb_err *err)
{
	return snapshot_fill(private_dir, grants, resources, uid, gid, bound, false, out, err);
}

int snapshot_make_edge(const char *private_dir, json_t *grants, json_t *resources, uid_t uid, gid_t gid,
		       struct snapshot *out, struct sb_err *err)
{
	return snapshot_fill(private_dir, grants, resources, uid, gid, NULL, true, out, err);
}

int snapshot_release(const char *private_dir, struct sb_err *err)
{
	char path[PATH_MAX + 32];
	json_t *list, *kept, *e;
	json_error_t jerr;
	size_t i;
	int rc = 0;

	if (path_fmt(path, sizeof path, err, "%s/" REVOKE_FILE, private_dir) < 0)
		return -1;
	if (access(path, F_OK) < 0)
		return 0;
	list = sb_json_load_path(path, 0, &jerr);
	if (!json_is_array(list)) {
		json_decref(list);
		return sb_invalid(err, "%s: %s", path, jerr.text);
	}
	kept = json_array();
	json_array_foreach(list, i, e) {
		const char *resource = json_string_value(json_object_get(e, "resource")) ?: "?";
		const char *arg = json_string_value(json_object_get(e, "arg"));
		const char *acc = json_string_value(json_object_get(e, "access"));
		const char *id = json_string_value(json_object_get(e, "id"));

		if (arg == NULL || acc == NULL || id == NULL ||
		    broker_rancher_revoke(resource, arg, acc, id, err) < 0) {
			if (arg == NULL || acc == NULL || id == NULL)
				sb_invalid(err, "%s: entry %zu is incomplete", path, i);
			json_array_append(kept, e);
			rc = -1;
		}
	}
	if (revoke_list_write(private_dir, kept, rc < 0 ? &(struct sb_err){ 0 } : err) < 0)
		rc = -1;
	json_decref(kept);
	json_decref(list);
	return rc;
}
