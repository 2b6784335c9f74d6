/* The principals file and the deny list of the control API over TLS (see principals.h). Owns their
 * parsing and the deny list's reload; never allows what the files do not name, and a deny list
 * that cannot be read denies everyone rather than forgetting a revocation. */
#include "principals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "jsonfile.h"
#include "log.h"
#include "tls.h"

#define DENY_FILE_MAX (4u << 20)

static bool principal_name_valid(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= TLS_PRINCIPAL_MAX && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

static int principal_identities(struct principal *p, const json_t *v, struct sb_err *err)
{
	size_t i;
	json_t *item;

	if (!json_is_array(v) || json_array_size(v) > PRINCIPAL_IDENTITIES_MAX)
		return sb_invalid(err, "principal %s: identities must be a list of at most %d names", p->name,
				  PRINCIPAL_IDENTITIES_MAX);
	json_array_foreach(v, i, item) {
		const char *id = json_string_value(item);

		if (id == NULL || id[0] == '\0' || strlen(id) >= sizeof p->identities[0])
			return sb_invalid(err, "principal %s: identity %zu must be a name of 1 to 64 bytes", p->name, i + 1);
		memcpy(p->identities[p->n_identities++], id, strlen(id) + 1);
	}
	return 0;
}

/* A list of strings into out[max][width]: "repos", "resources". */
static int principal_list(const struct principal *p, const char *key, const json_t *v, char *out, size_t width,
			  size_t *n, struct sb_err *err)
{
	size_t i;
	json_t *item;

	if (!json_is_array(v) || json_array_size(v) > PRINCIPAL_LIST_MAX)
		return sb_invalid(err, "principal %s: %s must be a list of at most %d strings", p->name, key,
				  PRINCIPAL_LIST_MAX);
	*n = 0;
	json_array_foreach(v, i, item) {
		const char *str = json_string_value(item);

		if (str == NULL || str[0] == '\0' || strlen(str) >= width)
			return sb_invalid(err, "principal %s: %s entry %zu must be 1 to %zu bytes", p->name, key, i + 1,
					  width - 1);
		memcpy(out + *n * width, str, strlen(str) + 1);
		(*n)++;
	}
	return 0;
}

static int principal_parse(struct principal *p, const char *name, const json_t *obj, struct sb_err *err)
{
	const char *key;
	json_t *v;

	if (!principal_name_valid(name))
		return sb_invalid(err, "principal '%.80s' must be 1 to %d of [a-z0-9-] (the label before "
				  ".principal.infra-sandbox in its certificate)", name, TLS_PRINCIPAL_MAX);
	if (!json_is_object(obj))
		return sb_invalid(err, "principal %s must be an object", name);
	memcpy(p->name, name, strlen(name) + 1);
	p->max_conns = PRINCIPAL_CONNS_DEFAULT;
	/* A local path on the manager's host is another identity's worktree as easily as a repository. */
	memcpy(p->repos[0], "https://", sizeof "https://");
	p->n_repos = 1;
	json_object_foreach((json_t *)obj, key, v) {
		if (strcmp(key, "identities") == 0) {
			if (principal_identities(p, v, err) < 0)
				return -1;
		} else if (strcmp(key, "operator") == 0) {
			if (!json_is_boolean(v))
				return sb_invalid(err, "principal %s: operator must be true or false", name);
			p->operator = json_is_true(v);
		} else if (strcmp(key, "repos") == 0) {
			if (principal_list(p, key, v, p->repos[0], sizeof p->repos[0], &p->n_repos, err) < 0)
				return -1;
		} else if (strcmp(key, "resources") == 0) {
			if (principal_list(p, key, v, p->resources[0], sizeof p->resources[0], &p->n_resources, err) < 0)
				return -1;
		} else if (strcmp(key, "max_connections") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > PRINCIPAL_CONNS_MAX)
				return sb_invalid(err, "principal %s: max_connections must be 1 to %u", name,
						  PRINCIPAL_CONNS_MAX);
			p->max_conns = (unsigned)json_integer_value(v);
		} else {
			return sb_invalid(err, "principal %s: unknown key '%.80s' (identities, operator, "
					  "max_connections, repos, resources)", name, key);
		}
	}
	return 0;
}

int principals_parse(const json_t *obj, struct principals *out, struct sb_err *err)
{
	const char *name;
	json_t *v;

	out->n = 0;
	out->p = NULL;
	if (!json_is_object(obj) || json_object_size(obj) > PRINCIPALS_MAX)
		return sb_invalid(err, "the principals file must be an object of at most %d principals", PRINCIPALS_MAX);
	out->p = calloc(json_object_size(obj) + 1, sizeof *out->p);
	if (out->p == NULL)
		return sb_fail(err, ENOMEM, "reading the principals");
	json_object_foreach((json_t *)obj, name, v) {
		if (principal_parse(&out->p[out->n], name, v, err) < 0) {
			principals_free(out);
			return -1;
		}
		out->n++;
	}
	return 0;
}

int principals_load(const char *path, struct principals *out, struct sb_err *err)
{
	json_error_t jerr;
	json_t *obj = sb_json_load_path(path, JSON_REJECT_DUPLICATES, &jerr);
	int rc;

	out->n = 0;
	out->p = NULL;
	if (obj == NULL)
		return sb_invalid(err, "principals file %s: %s (line %d)", path, jerr.text, jerr.line);
	rc = principals_parse(obj, out, err);
	json_decref(obj);
	if (rc < 0)
		sb_err_prefix(err, "principals file %s", path);
	return rc;
}

void principals_free(struct principals *ps)
{
	free(ps->p);
	ps->p = NULL;
	ps->n = 0;
}

const struct principal *principals_find(const struct principals *ps, const char *name)
{
	for (size_t i = 0; name != NULL && i < ps->n; i++)
		if (strcmp(ps->p[i].name, name) == 0)
			return &ps->p[i];
	return NULL;
}

bool principal_may_drive(const struct principal *p, const char *identity)
{
	if (p->operator)
		return true;
	for (size_t i = 0; identity != NULL && i < p->n_identities; i++)
		if (strcmp(p->identities[i], identity) == 0)
			return true;
	return false;
}

bool principal_may_use_repo(const struct principal *p, const char *repo)
{
	if (p->operator)
		return true;
	if (repo == NULL || strstr(repo, "/../") != NULL || strcmp(repo, "..") == 0 || strncmp(repo, "../", 3) == 0 ||
	    (strlen(repo) >= 3 && strcmp(repo + strlen(repo) - 3, "/..") == 0))
		return false;
	for (size_t i = 0; i < p->n_repos; i++)
		if (strncmp(repo, p->repos[i], strlen(p->repos[i])) == 0)
			return true;
	return false;
}

bool principal_may_grant(const struct principal *p, const char *resource)
{
	if (p->operator)
		return true;
	for (size_t i = 0; resource != NULL && i < p->n_resources; i++)
		if (strcmp(p->resources[i], resource) == 0)
			return true;
	return false;
}

/* ---- the deny list ---- */

struct deny_entry {
	char kind; /* 's': serial, 'p': principal */
	char value[TLS_SERIAL_HEX_MAX + 1];
};

struct deny_list {
	pthread_mutex_t lock;
	char path[4096];
	struct stat seen;          /* the file as last read */
	int64_t checked_ms;
	bool bad;                  /* the file as it is now cannot be used: deny everyone */
	size_t n;
	struct deny_entry *e;
};

/* Lowercase hex without colons or leading zeros: one spelling per serial. -1 when not hex. */
static int serial_normalise(const char *in, size_t len, char *out, size_t out_len)
{
	size_t used = 0;
	bool lead = true;

	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c == ':')
			continue;
		if (c >= 'A' && c <= 'F')
			c = (char)(c - 'A' + 'a');
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return -1;
		if (lead && c == '0')
			continue;
		lead = false;
		if (used + 1 >= out_len)
			return -1;
		out[used++] = c;
	}
	if (used == 0 && len > 0)
		out[used++] = '0';
	out[used] = '\0';
	return used > 0 ? 0 : -1;
}

/* One line, without its comment and surrounding blanks; empty lines add nothing. */
static int deny_line(struct deny_entry *e, const char *line, size_t len, size_t lineno, struct sb_err *err)
{
	const char *sp = memchr(line, ' ', len);
	size_t klen = sp != NULL ? (size_t)(sp - line) : len, vlen;
	const char *v = sp != NULL ? sp + 1 : line + len;

	while (v < line + len && *v == ' ')
		v++;
	vlen = (size_t)(line + len - v);
	if (klen == 6 && memcmp(line, "serial", 6) == 0 && vlen > 0 &&
	    serial_normalise(v, vlen, e->value, sizeof e->value) == 0) {
		e->kind = 's';
		return 0;
	}
	if (klen == 9 && memcmp(line, "principal", 9) == 0 && vlen > 0 && vlen <= TLS_PRINCIPAL_MAX) {
		memcpy(e->value, v, vlen);
		e->value[vlen] = '\0';
		if (principal_name_valid(e->value)) {
			e->kind = 'p';
			return 0;
		}
	}
	return sb_invalid(err, "deny list line %zu: want 'serial HEX' or 'principal NAME'", lineno);
}

static size_t trim(const char **s, size_t len)
{
	const char *hash = memchr(*s, '#', len);

	if (hash != NULL)
		len = (size_t)(hash - *s);
	while (len > 0 && (**s == ' ' || **s == '\t')) {
		(*s)++;
		len--;
	}
	while (len > 0 && ((*s)[len - 1] == ' ' || (*s)[len - 1] == '\t' || (*s)[len - 1] == '\r'))
		len--;
	return len;
}

int deny_list_parse(struct deny_list *d, const char *text, struct sb_err *err)
{
	struct deny_entry *e = NULL;
	size_t n = 0, cap = 0, lineno = 0;

	for (const char *line = text; *line != '\0' || lineno == 0; ) {
		const char *nl = strchr(line, '\n');
		size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
		const char *s = line;

		lineno++;
		len = trim(&s, len);
		if (len > 0) {
			if (n == cap) {
				struct deny_entry *more;

				cap = cap ? cap * 2 : 16;
				more = n >= DENY_ENTRIES_MAX ? NULL : realloc(e, cap * sizeof *e);
				if (more == NULL) {
					free(e);
					return sb_invalid(err, "deny list: more than %d entries, or out of memory",
							  DENY_ENTRIES_MAX);
				}
				e = more;
			}
			if (deny_line(&e[n], s, len, lineno, err) < 0) {
				free(e);
				return -1;
			}
			n++;
		}
		if (nl == NULL)
			break;
		line = nl + 1;
	}
	free(d->e);
	d->e = e;
	d->n = n;
	return 0;
}

static int deny_read(struct deny_list *d, struct stat *st, struct sb_err *err)
{
	int fd = open(d->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	unsigned char *text;
	size_t len;
	int rc;

	if (fd < 0)
		return sb_fail_errno(err, "opening the deny list %s", d->path);
	if (fstat(fd, st) < 0 || tls_read_fd(fd, d->path, DENY_FILE_MAX, &text, &len, err) < 0) {
		if (err->msg[0] == '\0')
			sb_fail_errno(err, "reading the deny list %s", d->path);
		close(fd);
		return -1;
	}
	close(fd);
	rc = strlen((char *)text) + 1 == len ? deny_list_parse(d, (char *)text, err) :
					       sb_invalid(err, "the deny list holds a NUL byte");
	free(text);
	if (rc < 0)
		sb_err_prefix(err, "deny list %s", d->path);
	return rc;
}

int deny_list_open(const char *path, struct deny_list **out, struct sb_err *err)
{
	struct deny_list *d = calloc(1, sizeof *d);

	*out = NULL;
	if (d == NULL)
		return sb_fail(err, ENOMEM, "opening the deny list");
	pthread_mutex_init(&d->lock, NULL);
	if (strlen(path) >= sizeof d->path) {
		free(d);
		return sb_invalid(err, "the deny list's path is too long");
	}
	memcpy(d->path, path, strlen(path) + 1);
	sb_err_clear(err);
	if (path[0] != '\0' && deny_read(d, &d->seen, err) < 0) {
		deny_list_free(d);
		return -1;
	}
	d->checked_ms = clock_mono_ms();
	*out = d;
	return 0;
}

void deny_list_free(struct deny_list *d)
{
	if (d == NULL)
		return;
	pthread_mutex_destroy(&d->lock);
	free(d->e);
	free(d);
}

static bool stat_same(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Under d->lock. By path (stat follows the rename an editor or a Kubernetes secret makes). */
static void deny_refresh(struct deny_list *d)
{
	struct stat now, got;
	struct sb_err err;
	int64_t t = clock_mono_ms();

	if (d->path[0] == '\0' || t - d->checked_ms < DENY_RECHECK_MS)
		return;
	d->checked_ms = t;
	sb_err_clear(&err);
	if (stat(d->path, &now) == 0 && !d->bad && stat_same(&now, &d->seen))
		return;
	if (deny_read(d, &got, &err) < 0) {
		if (!d->bad)
			sb_error("TLS connections refused until the deny list is fixed: %s", err.msg);
		d->bad = true;
		return;
	}
	d->seen = got;
	if (d->bad)
		sb_info("the deny list %s is readable again", d->path);
	d->bad = false;
	sb_info("deny list %s reloaded: %zu entries", d->path, d->n);
}

bool deny_list_denies(struct deny_list *d, const char *principal, const char *serial)
{
	char norm[TLS_SERIAL_HEX_MAX + 1] = "";
	bool denied;

	if (serial != NULL && serial_normalise(serial, strlen(serial), norm, sizeof norm) < 0)
		norm[0] = '\0';
	pthread_mutex_lock(&d->lock);
	deny_refresh(d);
	denied = d->bad;
	for (size_t i = 0; !denied && i < d->n; i++)
		denied = (d->e[i].kind == 's' && norm[0] != '\0' && strcmp(d->e[i].value, norm) == 0) ||
			 (d->e[i].kind == 'p' && principal != NULL && strcmp(d->e[i].value, principal) == 0);
	pthread_mutex_unlock(&d->lock);
	return denied;
}
