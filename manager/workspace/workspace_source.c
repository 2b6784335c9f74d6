/* The source repository of a workspace (see workspace.h workspace_create): an absolute path,
 * file:///path or an https:// URL, resolved by hand from its pointer files only. Must never run or
 * parse anything of a local source as configuration before the refusal check, and never accept a
 * transport that hands the connection to a program (ssh, git://, ext::). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "workspace_internal.h"

/* ---------------------------------------------------------------- the source repository */

void source_free(struct source *src)
{
	free(src->clone_arg);
	free(src->common_dir);
	free(src->name);
}

/* An https URL the manager accepts: printable ASCII, a host, no credentials, no query. */
static int url_check(const char *url, struct sb_err *err)
{
	const char *host = url + strlen("https://");
	size_t host_len = strcspn(host, "/");
	char shown[256];

	printable(shown, sizeof shown, url);
	if (strlen(url) > 2048)
		return sb_invalid(err, "repository URL is longer than 2048 characters");
	for (const char *p = url; *p != '\0'; p++)
		if (*p <= 0x20 || *p >= 0x7f || *p == '\\')
			return sb_invalid(err, "repository URL %s has a space, a control character, a "
					  "backslash or a non-ASCII byte; percent-encode it", shown);
	if (host_len == 0)
		return sb_invalid(err, "repository URL %s has no host", shown);
	if (memchr(host, '@', host_len) != NULL)
		return sb_invalid(err, "repository URL %s carries credentials; remove them: they would "
				  "be stored in the repository's config, which every sandbox of the identity reads",
				  shown);
	if (strpbrk(url, "?#") != NULL)
		return sb_invalid(err, "repository URL %s has a query or fragment; give the plain "
				  "repository URL", shown);
	return 0;
}

/* A name for repositories/<name> from the last part of a path or URL: ".git" and a "/.git"
 * directory are dropped, bytes outside [A-Za-z0-9._-] become '_', no leading '.' or '-'. The base
 * is kept short enough for a "-<16 hex>" suffix (see base_choose). */
static char *repo_name_from(const char *path)
{
	char buf[PATH_MAX];
	size_t len;
	char *slash, *start, *name;

	snprintf(buf, sizeof buf, "%s", path);
	len = strlen(buf);
	while (len > 1 && buf[len - 1] == '/')
		buf[--len] = '\0';
	if (len >= 5 && strcmp(buf + len - 5, "/.git") == 0)
		buf[len -= 5] = '\0';
	if (len >= 4 && strcmp(buf + len - 4, ".git") == 0)
		buf[len -= 4] = '\0';
	slash = strrchr(buf, '/');
	start = slash ? slash + 1 : buf;
	for (char *p = start; *p != '\0'; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		      *p == '.' || *p == '_' || *p == '-'))
			*p = '_';
	while (*start == '.' || *start == '-')
		start++;
	start[strnlen(start, WORKSPACE_NAME_MAX - 17)] = '\0';
	name = strdup(*start ? start : "repo");
	return name;
}

/* The common git dir of a local repository: <path>/.git (a directory or a "gitdir:" file, the
 * latter for a linked worktree or submodule), or <path> itself when it is bare; then its
 * "commondir" pointer when it has one. Found by hand from these two pointer files only, so that
 * nothing in the source is run or parsed as configuration before the refusal check. */
static int source_common_dir(const char *path, char **common, struct sb_err *err)
{
	cleanup_free char *dotgit = NULL, *gitdir = NULL, *cdfile = NULL, *head = NULL, *objects = NULL;
	struct stat st, st_objects;

	if (path_alloc_fmt(&dotgit, err, "%s/.git", path) != 0 || path_alloc_fmt(&head, err, "%s/HEAD", path) != 0 ||
	    path_alloc_fmt(&objects, err, "%s/objects", path) != 0)
		return -1;
	if (lstat(dotgit, &st) == 0 && S_ISDIR(st.st_mode)) {
		gitdir = steal_pointer(&dotgit);
	} else if (lstat(dotgit, &st) == 0 && S_ISREG(st.st_mode)) {
		if (pointer_resolve(dotgit, "gitdir: ", path, &gitdir, err) != 0)
			return -1;
	} else if (lstat(head, &st) == 0 && S_ISREG(st.st_mode) && lstat(objects, &st_objects) == 0 &&
		   S_ISDIR(st_objects.st_mode)) {
		gitdir = strdup(path);
		if (gitdir == NULL)
			return sb_fail(err, ENOMEM, "resolving %s", path);
	} else {
		return sb_fail(err, ENOENT, "%s is not a git repository (no .git, and not a bare repository)",
			       path);
	}
	if (path_alloc_fmt(&cdfile, err, "%s/commondir", gitdir) != 0)
		return -1;
	if (!path_exists(cdfile)) {
		*common = steal_pointer(&gitdir);
		return 0;
	}
	return pointer_resolve(cdfile, NULL, gitdir, common, err);
}

static int source_local(const char *path, struct source *src, struct sb_err *err)
{
	char real[PATH_MAX], shown[256];
	struct stat st;

	printable(shown, sizeof shown, path);
	if (realpath(path, real) == NULL) {
		if (errno == ENOENT || errno == ENOTDIR)
			return sb_fail(err, ENOENT, "repository path %s does not exist", shown);
		return sb_fail_errno(err, "repository path %s cannot be resolved", shown);
	}
	if (stat(real, &st) != 0)
		return sb_fail_errno(err, "repository path %s", shown);
	if (!S_ISDIR(st.st_mode))
		return sb_fail(err, ENOTDIR, "repository path %s is not a directory", shown);
	if (source_common_dir(real, &src->common_dir, err) != 0)
		return -1;
	src->clone_arg = strdup(real);
	src->name = repo_name_from(real);
	if (src->clone_arg == NULL || src->name == NULL)
		return sb_fail(err, ENOMEM, "resolving %s", shown);
	return 0;
}

/* What the caller gave: an absolute path, file:///path or https://... Anything else is refused
 * with the reason (ssh, git://, ext:: and "host:path" would hand the transport to a program). */
int source_resolve(const char *repo, struct source *src, struct sb_err *err)
{
	char shown[256];

	memset(src, 0, sizeof *src);
	if (repo == NULL || repo[0] == '\0')
		return sb_invalid(err, "no repository given; give an absolute path, file:///path or an "
				  "https:// URL");
	printable(shown, sizeof shown, repo);
	if (strncmp(repo, "https://", 8) == 0) {
		if (url_check(repo, err) != 0)
			return -1;
		src->clone_arg = strdup(repo);
		src->name = repo_name_from(repo + 8 + strcspn(repo + 8, "/"));
		return src->clone_arg && src->name ? 0 : sb_fail(err, ENOMEM, "resolving %s", shown);
	}
	if (strncmp(repo, "file://", 7) == 0) {
		if (repo[7] != '/')
			return sb_invalid(err, "repository URL %s must name an absolute path: file:///path",
					  shown);
		if (strchr(repo, '%') != NULL)
			return sb_invalid(err, "repository URL %s is percent-encoded; give the plain path",
					  shown);
		return source_local(repo + 7, src, err);
	}
	if (repo[0] == '/')
		return source_local(repo, src, err);
	if (strstr(repo, "://") != NULL || strstr(repo, "::") != NULL || strchr(repo, ':') != NULL)
		return sb_invalid(err, "repository %s uses an unsupported transport; only absolute "
				  "paths, file:///path and https:// URLs are accepted", shown);
	return sb_invalid(err, "repository path %s is relative; give an absolute path", shown);
}
