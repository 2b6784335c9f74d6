/* Where else a directory shows, and nesting by identity (see aliases.h). Agent side only: it reads
 * /proc/self/mountinfo and allocates; it never mounts. What it finds are candidates that the caller
 * confirms by opening them and comparing identities. */
#include "aliases.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

#define MOUNTINFO_MAX (64u << 20) /* thousands of mounts take a few MiB; beyond this, refuse */
#define MOUNTINFO_FIELDS 5        /* id, parent id, major:minor, root, mount point */

/* ---- mountinfo ---- */

/* Decode the kernel's octal escapes (space, tab, newline and backslash are written \040 \011 \012
 * \134) in place: the decoded text is never longer. */
static void octal_decode(char *s)
{
	char *out = s;

	while (*s != '\0') {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' &&
		    s[3] <= '7') {
			*out++ = (char)(((s[1] - '0') << 6) | ((s[2] - '0') << 3) | (s[3] - '0'));
			s += 4;
		} else {
			*out++ = *s++;
		}
	}
	*out = '\0';
}

/* Split one line (NUL-terminated, no newline) into its first fields, decoded. */
static int line_parse(char *line, struct mountinfo_line *l)
{
	char *field[MOUNTINFO_FIELDS], *save = NULL, *end;
	int parent;

	for (size_t i = 0; i < MOUNTINFO_FIELDS; i++) {
		field[i] = strtok_r(i == 0 ? line : NULL, " ", &save);
		if (field[i] == NULL)
			return -1;
	}
	errno = 0;
	l->id = (int)strtol(field[0], &end, 10);
	if (errno != 0 || *end != '\0' || end == field[0])
		return -1;
	parent = (int)strtol(field[1], &end, 10);
	if (errno != 0 || *end != '\0' || end == field[1] || parent < 0)
		return -1;
	if (sscanf(field[2], "%u:%u", &l->major, &l->minor) != 2)
		return -1;
	octal_decode(field[3]);
	octal_decode(field[4]);
	if (field[3][0] == '\0' || field[4][0] != '/')
		return -1;
	l->root = field[3];
	l->point = field[4];
	return 0;
}

int mountinfo_parse(const char *text, size_t len, struct mountinfo *mi, struct sb_err *err)
{
	size_t lines = 0, cap = 0;
	char *p, *next;

	memset(mi, 0, sizeof *mi);
	for (size_t i = 0; i < len; i++)
		cap += text[i] == '\n';
	cap++;
	mi->text = malloc(len + 1);
	mi->lines = calloc(cap, sizeof mi->lines[0]);
	if (mi->text == NULL || mi->lines == NULL) {
		mountinfo_free(mi);
		return sb_fail(err, ENOMEM, "reading the mount table");
	}
	memcpy(mi->text, text, len);
	mi->text[len] = '\0';
	mi->text_len = len;
	if (strlen(mi->text) != len) {
		mountinfo_free(mi);
		return sb_invalid(err, "the mount table holds a NUL byte");
	}
	for (p = mi->text; *p != '\0'; p = next) {
		char *nl = strchr(p, '\n');

		next = nl != NULL ? nl + 1 : p + strlen(p);
		if (nl != NULL)
			*nl = '\0';
		if (*p == '\0')
			continue;
		if (line_parse(p, &mi->lines[lines]) < 0) {
			mountinfo_free(mi);
			return sb_invalid(err, "the mount table has a line without an id, a device, a root and a "
					  "mount point (line %zu)", lines + 1);
		}
		lines++;
	}
	mi->n = lines;
	return 0;
}

int mountinfo_read(struct mountinfo *mi, struct sb_err *err)
{
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap), *grown;
	int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	int rc;

	if (buf == NULL || fd < 0) {
		rc = buf == NULL ? sb_fail(err, ENOMEM, "reading the mount table") :
				   sb_fail_errno(err, "opening /proc/self/mountinfo");
		goto out;
	}
	for (;;) {
		ssize_t n;

		if (len == cap) {
			if (cap >= MOUNTINFO_MAX) {
				rc = sb_fail(err, E2BIG, "the mount table is over %u MiB", MOUNTINFO_MAX >> 20);
				goto out;
			}
			grown = realloc(buf, cap * 2);
			if (grown == NULL) {
				rc = sb_fail(err, ENOMEM, "reading the mount table");
				goto out;
			}
			buf = grown;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = sb_fail_errno(err, "reading /proc/self/mountinfo");
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	rc = mountinfo_parse(buf, len, mi, err);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

int mountinfo_copy(struct mountinfo *dst, const struct mountinfo *src, struct sb_err *err)
{
	memset(dst, 0, sizeof *dst);
	dst->text = malloc(src->text_len + 1);
	dst->lines = calloc(src->n + 1, sizeof dst->lines[0]);
	if (dst->text == NULL || dst->lines == NULL) {
		mountinfo_free(dst);
		return sb_fail(err, ENOMEM, "copying the mount table");
	}
	memcpy(dst->text, src->text, src->text_len + 1);
	dst->text_len = src->text_len;
	/* The lines point into the text: the same offsets, into the copy. */
	for (size_t i = 0; i < src->n; i++) {
		dst->lines[i] = src->lines[i];
		dst->lines[i].root = dst->text + (src->lines[i].root - src->text);
		dst->lines[i].point = dst->text + (src->lines[i].point - src->text);
	}
	dst->n = src->n;
	return 0;
}

void mountinfo_free(struct mountinfo *mi)
{
	free(mi->lines);
	free(mi->text);
	memset(mi, 0, sizeof *mi);
}

/* ---- aliases ---- */

/* The rest of path below dir ("" or "/..."), or NULL when dir is not path or one of its ancestors. */
static const char *path_rest(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (strcmp(dir, "/") == 0)
		return strcmp(path, "/") == 0 ? "" : path;
	if (strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0'))
		return path + n;
	return NULL;
}

/* base followed by rest (from path_rest) into out; ENAMETOOLONG when it does not fit. */
static int path_join(char *out, size_t len, const char *base, const char *rest)
{
	int n;

	if (rest[0] == '\0')
		n = snprintf(out, len, "%s", base);
	else
		n = snprintf(out, len, "%s%s", strcmp(base, "/") == 0 ? "" : base, rest);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

int aliases_each(const struct mountinfo *mi, int mnt_id, const char *path, alias_fn fn, void *arg,
		 struct sb_err *err)
{
	const struct mountinfo_line *holder = NULL;
	char inside[PATH_MAX], alias[PATH_MAX];
	const char *rest;

	for (size_t i = 0; i < mi->n; i++)
		if (mi->lines[i].id == mnt_id)
			holder = &mi->lines[i];
	if (holder == NULL)
		return sb_fail(err, ENOENT, "the mount holding %s (id %d) is not in the mount table", path, mnt_id);
	/* Where the object lies inside its filesystem: what the holding mount shows, plus the rest. */
	rest = path_rest(path, holder->point);
	if (rest == NULL)
		return sb_fail(err, EXDEV, "%s is not below the mount point %s of the mount that holds it", path,
			       holder->point);
	if (path_join(inside, sizeof inside, holder->root, rest) < 0)
		return sb_fail(err, ENAMETOOLONG, "%s: path too long", path);
	for (size_t i = 0; i < mi->n; i++) {
		const struct mountinfo_line *l = &mi->lines[i];
		int rc;

		if (l == holder || l->major != holder->major || l->minor != holder->minor)
			continue;
		/* The mount shows the object when what it shows is the object or an ancestor of it. */
		rest = path_rest(inside, l->root);
		/* What it shows lies inside the object (a file bind of receipt.key, a bind of a
		 * subdirectory): part of a private directory in view under another name, which no
		 * cover of the directory's own paths hides. Fail closed. */
		if (rest == NULL && path_rest(l->root, inside) != NULL)
			return sb_fail(err, EACCES, "part of %s (%s of its filesystem) is also mounted at %s: refusing "
				       "to run commands; remove that mount", path, l->root, l->point);
		if (rest == NULL)
			continue;
		if (path_join(alias, sizeof alias, l->point, rest) < 0)
			return sb_fail(err, ENAMETOOLONG, "%s shows %s at a path too long to check", l->point, path);
		if (strcmp(alias, path) == 0)
			continue; /* a mount stacked under the holder at the same place */
		rc = fn(alias, arg, err);
		if (rc != 0)
			return rc;
	}
	return 0;
}

int aliases_mount_id(int fd, int *mnt_id, struct sb_err *err)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT, STATX_MNT_ID, &stx) < 0)
		return sb_fail_errno(err, "statx");
	if (!(stx.stx_mask & STATX_MNT_ID))
		return sb_fail(err, ENOSYS, "this kernel does not say which mount holds a file (STATX_MNT_ID, Linux 5.8)");
	*mnt_id = (int)stx.stx_mnt_id;
	return 0;
}

/* ---- nesting by identity ---- */

static int chain_push(struct ident_chain *c, const struct stat *st, struct sb_err *err)
{
	struct ident *grown;

	if (c->n == IDENT_CHAIN_MAX)
		return sb_fail(err, ELOOP, "more than %d directories up to the root", IDENT_CHAIN_MAX);
	/* Doubling from 16: a real tree is a dozen levels deep. */
	if (c->n == 0 || (c->n >= 16 && (c->n & (c->n - 1)) == 0)) {
		grown = realloc(c->v, (c->n < 16 ? 16 : c->n * 2) * sizeof c->v[0]);
		if (grown == NULL)
			return sb_fail(err, ENOMEM, "walking up to the root");
		c->v = grown;
	}
	c->v[c->n++] = (struct ident){ st->st_dev, st->st_ino };
	return 0;
}

int ident_chain_walk(int dirfd, struct ident_chain *c, struct sb_err *err)
{
	struct stat st;
	int cur = dirfd, rc = -1;

	c->v = NULL;
	c->n = 0;
	if (fstat(dirfd, &st) < 0) {
		sb_fail_errno(err, "fstat");
		goto out;
	}
	if (chain_push(c, &st, err) < 0)
		goto out;
	for (;;) {
		/* ".." from a descriptor: at a mount's root the kernel climbs to the mount point first,
		 * and never above this process's root, where ".." is the directory itself. */
		int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);

		if (up < 0) {
			sb_fail_errno(err, "opening the parent directory");
			goto out;
		}
		if (cur != dirfd)
			close(cur);
		cur = up;
		if (fstat(cur, &st) < 0) {
			sb_fail_errno(err, "fstat");
			goto out;
		}
		if (st.st_dev == c->v[c->n - 1].dev && st.st_ino == c->v[c->n - 1].ino)
			break; /* the root */
		if (chain_push(c, &st, err) < 0)
			goto out;
	}
	rc = 0;
out:
	if (cur != dirfd)
		close(cur);
	if (rc < 0)
		ident_chain_free(c);
	return rc;
}

bool ident_chain_holds(const struct ident_chain *c, struct ident id)
{
	for (size_t i = 0; i < c->n; i++)
		if (c->v[i].dev == id.dev && c->v[i].ino == id.ino)
			return true;
	return false;
}

void ident_chain_free(struct ident_chain *c)
{
	free(c->v);
	c->v = NULL;
	c->n = 0;
}
