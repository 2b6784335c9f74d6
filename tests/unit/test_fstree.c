/* Unit tests for common/fstree.c on real trees in a temporary directory: the chown walk and the
 * removal never reach outside the tree through a symbolic link (the target keeps owner, content
 * and ctime), not even when a directory is swapped for a link DURING the walk (an inotify-driven
 * attacker thread, synchronised so the swap always lands mid-walk), never cross a mount, leave
 * hard-linked files alone, and refuse trees deeper than the bound. As root the walk gives a
 * foreign uid; otherwise it runs with our own ids and the visit hook shows what it reached. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fstree.h"
#include "testutil.h"

#define FOREIGN_ID 54321 /* what a root run hands the tree to */

struct fixture {
	char dir[PATH_MAX];     /* mkdtemp root */
	char tree[PATH_MAX];    /* <dir>/tree: what is walked */
	char outside[PATH_MAX]; /* <dir>/outside: must never be reached */
	uid_t uid;
	gid_t gid;
	bool root;
};

/* ---------------------------------------------------------------- helpers */

static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, PATH_MAX, fmt, ap);
	va_end(ap);
	assert_true(n > 0 && n < PATH_MAX);
}

static void mkdir_ok(const char *path)
{
	if (mkdir(path, 0755) != 0)
		fail_msg("mkdir %s: %s", path, strerror(errno));
}

static void write_ok(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	if (f == NULL)
		fail_msg("creating %s: %s", path, strerror(errno));
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void symlink_ok(const char *target, const char *path)
{
	if (symlink(target, path) != 0)
		fail_msg("symlink %s -> %s: %s", path, target, strerror(errno));
}

static struct stat lstat_ok(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		fail_msg("lstat %s: %s", path, strerror(errno));
	return st;
}

static void read_expect(const char *path, const char *want)
{
	char buf[256] = "";
	FILE *f = fopen(path, "re");

	if (f == NULL)
		fail_msg("reading %s: %s", path, strerror(errno));
	if (fgets(buf, sizeof buf, f) == NULL)
		buf[0] = '\0';
	fclose(f);
	assert_string_equal(buf, want);
}

static int open_dir_ok(const char *path)
{
	struct sb_err err;
	int fd = fstree_open_dir(AT_FDCWD, path, &err);

	must(fd, &err, "opening the tree");
	return fd;
}

/* The outside world: a file and a directory with files, all root's (or ours), with content. */
struct outside_state {
	struct stat secret, dir, files[3];
};

static void outside_snapshot(const struct fixture *f, struct outside_state *s)
{
	char path[PATH_MAX];

	pathf(path, "%s/secret", f->outside);
	s->secret = lstat_ok(path);
	pathf(path, "%s/dir", f->outside);
	s->dir = lstat_ok(path);
	for (int i = 0; i < 3; i++) {
		pathf(path, "%s/dir/f%d", f->outside, i);
		s->files[i] = lstat_ok(path);
	}
}

static void stat_same(const struct stat *a, const struct stat *b, const char *what)
{
	if (a->st_uid != b->st_uid || a->st_gid != b->st_gid || a->st_mode != b->st_mode ||
	    a->st_ctim.tv_sec != b->st_ctim.tv_sec || a->st_ctim.tv_nsec != b->st_ctim.tv_nsec)
		fail_msg("%s outside the tree was changed: owner %u:%u -> %u:%u, mode %o -> %o, ctime moved",
			 what, (unsigned)a->st_uid, (unsigned)a->st_gid, (unsigned)b->st_uid, (unsigned)b->st_gid,
			 (unsigned)a->st_mode, (unsigned)b->st_mode);
}

/* Owner, mode, ctime and content of everything outside are as before. */
static void outside_untouched(const struct fixture *f, const struct outside_state *before)
{
	struct outside_state now;
	char path[PATH_MAX];

	outside_snapshot(f, &now);
	stat_same(&before->secret, &now.secret, "secret");
	stat_same(&before->dir, &now.dir, "dir");
	for (int i = 0; i < 3; i++)
		stat_same(&before->files[i], &now.files[i], "dir/f*");
	pathf(path, "%s/secret", f->outside);
	read_expect(path, "root's secret\n");
	for (int i = 0; i < 3; i++) {
		pathf(path, "%s/dir/f%d", f->outside, i);
		read_expect(path, "outside\n");
	}
}

/* ---- the visit hook: which inodes the walk opened ---- */

struct visits {
	dev_t dev[8192];
	ino_t ino[8192];
	size_t n;
	/* the swap attack: once `trigger` was visited, the next visit waits for the attacker */
	ino_t trigger;
	bool triggered;
	atomic_int *swapped;
	bool waited;
};

static void visit_record(void *arg, const struct stat *st)
{
	struct visits *v = arg;

	if (v->triggered && !v->waited && v->swapped != NULL) {
		/* The attacker reacts to the inotify event the walk's open caused; wait for its swap,
		 * so the rest of the walk runs on the swapped tree every time. */
		for (int i = 0; i < 5000 && atomic_load(v->swapped) == 0; i++)
			usleep(1000);
		v->waited = true;
	}
	if (st->st_ino == v->trigger)
		v->triggered = true;
	if (v->n < sizeof v->ino / sizeof v->ino[0]) {
		v->dev[v->n] = st->st_dev;
		v->ino[v->n++] = st->st_ino;
	}
}

static bool visited(const struct visits *v, const struct stat *st)
{
	for (size_t i = 0; i < v->n; i++)
		if (v->ino[i] == st->st_ino && v->dev[i] == st->st_dev)
			return true;
	return false;
}

static void outside_not_visited(const struct visits *v, const struct outside_state *s)
{
	assert_false(visited(v, &s->secret));
	assert_false(visited(v, &s->dir));
	for (int i = 0; i < 3; i++)
		assert_false(visited(v, &s->files[i]));
}

/* ---- the attacker: on the event, rename a directory away and put a link to outside there ---- */

struct attacker {
	pthread_t thread;
	int ino_fd;
	char watched[PATH_MAX];   /* the directory the walk will open */
	char swap[8][PATH_MAX];   /* directories to swap (swap[0] is usually the watched one) */
	int n_swap;
	char link_to[PATH_MAX];   /* outside */
	atomic_int swapped;       /* 1: done; -1: failed */
};

static void *attacker_run(void *arg)
{
	struct attacker *a = arg;
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int ok = 1;

	if (read(a->ino_fd, buf, sizeof buf) <= 0)
		ok = 0;
	for (int i = 0; ok && i < a->n_swap; i++) {
		char moved[PATH_MAX + 8];

		snprintf(moved, sizeof moved, "%s.moved", a->swap[i]);
		if (rename(a->swap[i], moved) != 0 || symlink(a->link_to, a->swap[i]) != 0)
			ok = 0;
	}
	atomic_store(&a->swapped, ok ? 1 : -1);
	return NULL;
}

/* Watch before the walk starts, so the event cannot be missed. */
static void attacker_start(struct attacker *a, uint32_t events)
{
	a->ino_fd = inotify_init1(IN_CLOEXEC);
	assert_true(a->ino_fd >= 0);
	if (inotify_add_watch(a->ino_fd, a->watched, events | IN_ONESHOT) < 0)
		fail_msg("inotify on %s: %s", a->watched, strerror(errno));
	atomic_store(&a->swapped, 0);
	assert_int_equal(pthread_create(&a->thread, NULL, attacker_run, a), 0);
}

static void attacker_join(struct attacker *a)
{
	pthread_join(a->thread, NULL);
	close(a->ino_fd);
	assert_int_equal(atomic_load(&a->swapped), 1);
}

/* ---------------------------------------------------------------- fixture */

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);
	char path[PATH_MAX];

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof f->dir, "/tmp/test_fstree.XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	pathf(f->tree, "%s/tree", f->dir);
	pathf(f->outside, "%s/outside", f->dir);
	mkdir_ok(f->tree);
	mkdir_ok(f->outside);
	pathf(path, "%s/secret", f->outside);
	write_ok(path, "root's secret\n");
	pathf(path, "%s/dir", f->outside);
	mkdir_ok(path);
	for (int i = 0; i < 3; i++) {
		pathf(path, "%s/dir/f%d", f->outside, i);
		write_ok(path, "outside\n");
	}
	f->root = geteuid() == 0;
	f->uid = f->root ? FOREIGN_ID : geteuid();
	f->gid = f->root ? FOREIGN_ID : getegid();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX];

	pathf(path, "%s/tree/m", f->dir);
	umount2(path, MNT_DETACH); /* the mount test's, if it failed half-way */
	test_rmtree(f->dir);
	free(f);
	return 0;
}

/* tree/{a/b/f, file, link_file -> outside/secret, link_dir -> outside/dir, a/rel -> ../../outside} */
static void tree_with_links(const struct fixture *f)
{
	char path[PATH_MAX], target[PATH_MAX];

	pathf(path, "%s/a", f->tree);
	mkdir_ok(path);
	pathf(path, "%s/a/b", f->tree);
	mkdir_ok(path);
	pathf(path, "%s/a/b/f", f->tree);
	write_ok(path, "inside\n");
	pathf(path, "%s/file", f->tree);
	write_ok(path, "inside\n");
	pathf(target, "%s/secret", f->outside);
	pathf(path, "%s/link_file", f->tree);
	symlink_ok(target, path);
	pathf(target, "%s/dir", f->outside);
	pathf(path, "%s/link_dir", f->tree);
	symlink_ok(target, path);
	pathf(path, "%s/a/rel", f->tree);
	symlink_ok("../../outside", path);
}

static void owned(const struct fixture *f, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;

	pathf(path, "%s/%s", f->tree, rel);
	st = lstat_ok(path);
	if (st.st_uid != f->uid || st.st_gid != f->gid)
		fail_msg("%s is %u:%u, not %u:%u", rel, (unsigned)st.st_uid, (unsigned)st.st_gid, (unsigned)f->uid,
			 (unsigned)f->gid);
}

/* ---------------------------------------------------------------- chown */

static void test_chown_links_to_outside(void **state)
{
	struct fixture *f = *state;
	struct visits *v = calloc(1, sizeof *v);
	struct fstree_report rep = { .visit = visit_record, .visit_arg = v };
	struct outside_state before;
	struct sb_err err;
	int fd;

	tree_with_links(f);
	outside_snapshot(f, &before);
	fd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(fd, f->uid, f->gid, &rep, &err), &err, "chown walk");
	close(fd);
	/* tree, a, a/b, a/b/f, file, link_file, link_dir, a/rel */
	assert_int_equal(rep.entries, 8);
	assert_int_equal(v->n, 8);
	if (f->root)
		assert_int_equal(rep.changed, 8);
	for (const char *const *p = (const char *const[]){ "", "a", "a/b", "a/b/f", "file", "link_file", "link_dir",
							 "a/rel", NULL }; *p != NULL; p++)
		owned(f, *p);
	outside_not_visited(v, &before);
	outside_untouched(f, &before);
	free(v);
}

/* The break of issue 13: the directory being walked is renamed away and replaced by a link to
 * outside while the walk is inside it. */
static void test_chown_swap_during_walk(void **state)
{
	struct fixture *f = *state;
	struct visits *v = calloc(1, sizeof *v);
	struct fstree_report rep = { .visit = visit_record, .visit_arg = v };
	struct attacker *a = calloc(1, sizeof *a);
	struct outside_state before;
	char path[PATH_MAX];
	struct sb_err err;
	int fd;

	pathf(a->watched, "%s/d1", f->tree);
	mkdir_ok(a->watched);
	for (int i = 0; i < 10; i++) {
		pathf(path, "%s/d1/f%d", f->tree, i);
		write_ok(path, "inside\n");
	}
	pathf(a->swap[0], "%s", a->watched);
	a->n_swap = 1;
	pathf(a->link_to, "%s/dir", f->outside);
	outside_snapshot(f, &before);
	v->trigger = lstat_ok(a->watched).st_ino;
	v->swapped = &a->swapped;
	attacker_start(a, IN_OPEN | IN_ACCESS);
	fd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(fd, f->uid, f->gid, &rep, &err), &err, "chown walk under attack");
	close(fd);
	attacker_join(a);
	assert_true(v->waited); /* the swap landed mid-walk */
	assert_true(S_ISLNK(lstat_ok(a->watched).st_mode));
	/* The walk went on in the directory it had opened, now at d1.moved: all ten handed over. */
	for (int i = 0; i < 10; i++) {
		char rel[32];

		snprintf(rel, sizeof rel, "d1.moved/f%d", i);
		owned(f, rel);
	}
	outside_not_visited(v, &before);
	outside_untouched(f, &before);
	free(a);
	free(v);
}

/* The swap lands after the start's listing was read and before its entries are opened: each of
 * them is then a link, opened and chowned as itself, never followed. */
static void test_chown_swap_before_descent(void **state)
{
	struct fixture *f = *state;
	struct visits *v = calloc(1, sizeof *v);
	struct fstree_report rep = { .visit = visit_record, .visit_arg = v };
	struct attacker *a = calloc(1, sizeof *a);
	struct outside_state before;
	struct sb_err err;
	int links = 0, fd;

	for (int i = 0; i < 8; i++) {
		char path[PATH_MAX];

		pathf(a->swap[i], "%s/d%d", f->tree, i);
		mkdir_ok(a->swap[i]);
		pathf(path, "%s/f", a->swap[i]);
		write_ok(path, "inside\n");
	}
	a->n_swap = 8;
	pathf(a->watched, "%s", f->tree);
	pathf(a->link_to, "%s/dir", f->outside);
	outside_snapshot(f, &before);
	v->trigger = lstat_ok(f->tree).st_ino; /* the first entry's visit waits for the swap */
	v->swapped = &a->swapped;
	attacker_start(a, IN_ACCESS);
	fd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(fd, f->uid, f->gid, &rep, &err), &err, "chown walk under attack");
	close(fd);
	attacker_join(a);
	assert_true(v->waited);
	for (int i = 0; i < 8; i++)
		if (S_ISLNK(lstat_ok(a->swap[i]).st_mode))
			links++;
	assert_int_equal(links, 8);
	outside_not_visited(v, &before);
	outside_untouched(f, &before);
	free(a);
	free(v);
}

static void test_chown_mount_not_crossed(void **state)
{
	struct fixture *f = *state;
	struct fstree_report rep = { 0 };
	char mnt[PATH_MAX], inner[PATH_MAX];
	struct sb_err err;
	int fd;

	if (!f->root)
		skip(); /* mounting needs root; CI runs the unit tests as root */
	pathf(mnt, "%s/m", f->tree);
	mkdir_ok(mnt);
	if (mount("fstree-test", mnt, "tmpfs", 0, "size=1m") != 0)
		fail_msg("mounting a tmpfs on %s: %s", mnt, strerror(errno));
	pathf(inner, "%s/inner", mnt);
	write_ok(inner, "other filesystem\n");
	fd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(fd, f->uid, f->gid, &rep, &err), &err, "chown walk");
	assert_int_equal(rep.mounts, 1);
	assert_int_equal(lstat_ok(inner).st_uid, 0);
	/* The removal refuses rather than crossing it: the mount and its file stay. */
	assert_int_equal(fstree_remove_beneath(fd, "m", NULL, &err), -1);
	assert_int_equal(err.errnum, EXDEV);
	close(fd);
	fd = open_dir_ok(f->dir);
	assert_int_equal(fstree_remove_beneath(fd, "tree", NULL, &err), -1);
	assert_int_equal(err.errnum, EXDEV);
	assert_contains(err.msg, "mount point");
	close(fd);
	read_expect(inner, "other filesystem\n");
	assert_int_equal(umount2(mnt, 0), 0);
}

static void test_chown_hardlink_left_alone(void **state)
{
	struct fixture *f = *state;
	struct fstree_report rep = { 0 };
	struct outside_state before;
	char target[PATH_MAX], path[PATH_MAX];
	struct sb_err err;
	int fd;

	if (!f->root)
		skip(); /* our own ids: nothing to hand over, so nothing to leave alone */
	pathf(target, "%s/secret", f->outside);
	pathf(path, "%s/hl", f->tree);
	assert_int_equal(link(target, path), 0);
	outside_snapshot(f, &before);
	fd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(fd, f->uid, f->gid, &rep, &err), &err, "chown walk");
	close(fd);
	assert_int_equal(rep.hardlinked, 1);
	outside_untouched(f, &before);
}

static void chain(const struct fixture *f, int levels)
{
	char path[PATH_MAX];
	size_t len;

	pathf(path, "%s", f->tree);
	len = strlen(path);
	for (int i = 0; i < levels; i++) {
		memcpy(path + len, "/d", 3);
		len += 2;
		mkdir_ok(path);
	}
	memcpy(path + len, "/leaf", 6);
	write_ok(path, "deep\n");
}

static void test_depth_bound(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	int fd = open_dir_ok(f->dir), tfd;

	chain(f, FSTREE_DEPTH_MAX);
	tfd = open_dir_ok(f->tree);
	must(fstree_chown_beneath(tfd, f->uid, f->gid, NULL, &err), &err, "a walk at the bound");
	close(tfd);
	must(fstree_remove_beneath(fd, "tree", NULL, &err), &err, "a removal at the bound");
	assert_int_equal(access(f->tree, F_OK), -1);
	mkdir_ok(f->tree);
	chain(f, FSTREE_DEPTH_MAX + 1);
	tfd = open_dir_ok(f->tree);
	assert_int_equal(fstree_chown_beneath(tfd, f->uid, f->gid, NULL, &err), -1);
	assert_int_equal(err.errnum, ELOOP);
	assert_contains(err.msg, "directories deep");
	close(tfd);
	assert_int_equal(fstree_remove_beneath(fd, "tree", NULL, &err), -1);
	assert_int_equal(err.errnum, ELOOP);
	assert_int_equal(access(f->tree, F_OK), 0);
	close(fd);
}

/* ---------------------------------------------------------------- removal */

static void test_remove_links_to_outside(void **state)
{
	struct fixture *f = *state;
	struct outside_state before;
	char path[PATH_MAX];
	struct sb_err err;

	tree_with_links(f);
	/* Sealed directories of our own (the credentials snapshot is 0500) go too. */
	pathf(path, "%s/sealed", f->tree);
	mkdir_ok(path);
	pathf(path, "%s/sealed/f", f->tree);
	write_ok(path, "x\n");
	pathf(path, "%s/sealed", f->tree);
	assert_int_equal(chmod(path, 0500), 0);
	pathf(path, "%s/closed", f->tree);
	mkdir_ok(path);
	assert_int_equal(chmod(path, 0), 0);
	outside_snapshot(f, &before);
	must(fstree_remove_path(f->tree, &err), &err, "removing the tree");
	assert_int_equal(access(f->tree, F_OK), -1);
	outside_untouched(f, &before);
	/* Gone already is fine; a single file goes too. */
	must(fstree_remove_path(f->tree, &err), &err, "removing it again");
	pathf(path, "%s/file", f->dir);
	write_ok(path, "x\n");
	must(fstree_remove_path(path, &err), &err, "removing a file");
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(fstree_remove_path("relative/x", &err), -1);
	assert_int_equal(fstree_remove_path("/tmp/..", &err), -1);
}

static void test_remove_swap_during_walk(void **state)
{
	struct fixture *f = *state;
	struct visits *v = calloc(1, sizeof *v);
	struct fstree_report rep = { .visit = visit_record, .visit_arg = v };
	struct attacker *a = calloc(1, sizeof *a);
	struct outside_state before;
	char path[PATH_MAX];
	struct sb_err err;
	int fd, rc;

	pathf(a->watched, "%s/d1", f->tree);
	mkdir_ok(a->watched);
	for (int i = 0; i < 10; i++) {
		pathf(path, "%s/d1/f%d", f->tree, i);
		write_ok(path, "inside\n");
	}
	pathf(a->swap[0], "%s", a->watched);
	a->n_swap = 1;
	pathf(a->link_to, "%s/dir", f->outside);
	outside_snapshot(f, &before);
	v->trigger = lstat_ok(a->watched).st_ino;
	v->swapped = &a->swapped;
	attacker_start(a, IN_OPEN | IN_ACCESS);
	fd = open_dir_ok(f->dir);
	rc = fstree_remove_beneath(fd, "tree", &rep, &err);
	close(fd);
	attacker_join(a);
	assert_true(v->waited);
	/* d1's files went from the directory it had opened; its name now is a link, which rmdir
	 * refuses: the removal says the tree changed under it instead of going elsewhere. */
	assert_int_equal(rc, -1);
	assert_int_equal(err.errnum, ENOTDIR);
	assert_true(S_ISLNK(lstat_ok(a->watched).st_mode));
	outside_not_visited(v, &before);
	outside_untouched(f, &before);
	free(a);
	free(v);
}

/* ---------------------------------------------------------------- the start */

static void test_open_dir_refuses_links(void **state)
{
	struct fixture *f = *state;
	char link[PATH_MAX], through[PATH_MAX];
	struct sb_err err;
	int fd;

	pathf(link, "%s/tree/to_outside", f->dir);
	symlink_ok(f->outside, link);
	pathf(through, "%s/dir", link);
	assert_int_equal(fstree_open_dir(AT_FDCWD, through, &err), -1);
	assert_int_equal(err.errnum, ELOOP);
	assert_contains(err.msg, "symbolic link");
	assert_int_equal(fstree_open_dir(AT_FDCWD, "tmp", &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	fd = open_dir_ok(f->tree);
	assert_int_equal(fstree_open_dir(fd, "../outside", &err), -1);
	assert_int_equal(err.errnum, EXDEV);
	assert_int_equal(fstree_open_dir(fd, "to_outside", &err), -1);
	assert_true(err.errnum == ELOOP || err.errnum == ENOTDIR); /* O_NOFOLLOW | O_DIRECTORY: ENOTDIR */
	/* The removal's start may be a link: the link goes, its target stays. */
	must(fstree_remove_beneath(fd, "to_outside", NULL, &err), &err, "removing a link");
	assert_int_equal(access(f->outside, F_OK), 0);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chown_links_to_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chown_swap_during_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chown_swap_before_descent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chown_mount_not_crossed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chown_hardlink_left_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_depth_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_links_to_outside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_swap_during_walk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_dir_refuses_links, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
