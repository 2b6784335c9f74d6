/* Unit tests for sandbox-agent/aliases.c: the mountinfo parser (octal escapes, refusing a line it cannot
 * read whole), where a path shows through the other mounts of its filesystem (root-prefix logic on
 * sample tables), and nesting by identity with ".." walks on a real tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aliases.h"
#include "testutil.h"

static const char SAMPLE[] =
	"22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	"23 22 0:5 / /proc rw,nosuid - proc proc rw\n"
	"30 22 8:1 /home /mnt/home rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
	"31 22 8:1 /home/u/.state /srv/with\\040space rw - ext4 /dev/sda1 rw\n"
	"32 22 8:1 /home/u/.state/rc/receipt.key /etc/key rw - ext4 /dev/sda1 rw\n"
	"33 22 8:1 /var /var rw - ext4 /dev/sda1 rw\n"
	"34 22 8:2 / /data rw - ext4 /dev/sdb1 rw\n"
	"35 22 8:1 /home/u2 /mnt/u2 rw - ext4 /dev/sda1 rw\n"
	"36 22 8:1 / /again rw - ext4 /dev/sda1 rw\n"
	"37 34 8:2 /x /data/y rw - ext4 /dev/sdb1 rw"; /* the last line without its newline */

static void test_parse_fields_and_escapes(void **state)
{
	struct mountinfo mi;
	struct sb_err err;

	(void)state;
	assert_int_equal(mountinfo_parse(SAMPLE, strlen(SAMPLE), &mi, &err), 0);
	assert_int_equal(mi.n, 10);
	assert_int_equal(mi.lines[0].id, 22);
	assert_int_equal(mi.lines[0].major, 8);
	assert_int_equal(mi.lines[0].minor, 1);
	assert_string_equal(mi.lines[2].root, "/home");
	assert_string_equal(mi.lines[2].point, "/mnt/home");
	assert_string_equal(mi.lines[3].point, "/srv/with space");
	assert_string_equal(mi.lines[9].point, "/data/y");
	mountinfo_free(&mi);

	static const char esc[] = "40 1 0:9 /a\\134b\\011c /m\\012n rw - tmpfs t rw\n";
	assert_int_equal(mountinfo_parse(esc, strlen(esc), &mi, &err), 0);
	assert_string_equal(mi.lines[0].root, "/a\\b\tc");
	assert_string_equal(mi.lines[0].point, "/m\nn");
	mountinfo_free(&mi);
}

/* A copy stands alone: its lines point into its own text, and outlive the table they were copied from
 * (the prebuilt init's, sandbox-agent/prebuilt.c, while the builder reads the table again). */
static void test_copy_owns_its_lines(void **state)
{
	struct mountinfo mi, copy;
	struct sb_err err;

	(void)state;
	assert_int_equal(mountinfo_parse(SAMPLE, strlen(SAMPLE), &mi, &err), 0);
	assert_int_equal(mountinfo_copy(&copy, &mi, &err), 0);
	memset(mi.text, 'x', mi.text_len);
	mountinfo_free(&mi);
	assert_int_equal(copy.n, 10);
	for (size_t i = 0; i < copy.n; i++) {
		assert_true(copy.lines[i].root >= copy.text && copy.lines[i].root < copy.text + copy.text_len);
		assert_true(copy.lines[i].point >= copy.text && copy.lines[i].point < copy.text + copy.text_len);
	}
	assert_int_equal(copy.lines[9].id, 37);
	assert_string_equal(copy.lines[3].point, "/srv/with space");
	assert_string_equal(copy.lines[9].root, "/x");
	assert_string_equal(copy.lines[9].point, "/data/y");
	mountinfo_free(&copy);
}

static void test_parse_refuses_partial_lines(void **state)
{
	static const char *const bad[] = {
		"22 1 8:1 /\n",                  /* no mount point */
		"x 1 8:1 / / rw - ext4 a rw\n",  /* no id */
		"22 1 8 / / rw - ext4 a rw\n",   /* no minor */
		"22 1 8:1 / rel rw - ext4 a rw\n", /* a mount point that is not absolute */
	};
	struct mountinfo mi;
	struct sb_err err;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(mountinfo_parse(bad[i], strlen(bad[i]), &mi, &err), -1);
		assert_int_equal(err.errnum, EINVAL);
		assert_null(mi.lines);
	}
	assert_int_equal(mountinfo_parse("22 1 8:1 / / rw\0x", 17, &mi, &err), -1); /* a NUL inside */
}

struct found {
	char paths[16][PATH_MAX];
	size_t n;
};

static int collect(const char *alias, void *arg, struct sb_err *err)
{
	struct found *f = arg;

	(void)err;
	snprintf(f->paths[f->n++], PATH_MAX, "%s", alias);
	return 0;
}

static void test_aliases_of_a_directory(void **state)
{
	struct mountinfo mi;
	struct found f = { .n = 0 };
	struct sb_err err;

	(void)state;
	/* A file inside the directory mounted elsewhere (/etc/key, a bind of rc/receipt.key): no cover
	 * of the directory's paths hides it, so its aliases cannot be listed: refused. */
	assert_int_equal(mountinfo_parse(SAMPLE, strlen(SAMPLE), &mi, &err), 0);
	assert_int_equal(aliases_each(&mi, 22, "/home/u/.state/rc", collect, &f, &err), -1);
	assert_int_equal(err.errnum, EACCES);
	assert_contains(err.msg, "is also mounted at /etc/key");
	/* The file itself shows at the bind's mount point. */
	f.n = 0;
	assert_int_equal(aliases_each(&mi, 22, "/home/u/.state/rc/receipt.key", collect, &f, &err), 0);
	assert_int_equal(f.n, 4);
	assert_string_equal(f.paths[2], "/etc/key");
	mountinfo_free(&mi);

	/* Without that bind, the directory's aliases. */
	{
		char text[sizeof SAMPLE];
		const char *cut = strstr(SAMPLE, "32 22 8:1");
		const char *next = strchr(cut, '\n') + 1;

		memcpy(text, SAMPLE, (size_t)(cut - SAMPLE));
		strcpy(text + (cut - SAMPLE), next);
		assert_int_equal(mountinfo_parse(text, strlen(text), &mi, &err), 0);
	}
	f.n = 0;
	/* /home/u/.state/rc on the root mount (22): inside sda1 it is /home/u/.state/rc. */
	assert_int_equal(aliases_each(&mi, 22, "/home/u/.state/rc", collect, &f, &err), 0);
	assert_int_equal(f.n, 3);
	assert_string_equal(f.paths[0], "/mnt/home/u/.state/rc"); /* a bind of an ancestor */
	assert_string_equal(f.paths[1], "/srv/with space/rc");    /* a bind of its parent */
	assert_string_equal(f.paths[2], "/again/home/u/.state/rc"); /* the whole filesystem again */
	/* Not: /var, /mnt/u2 ("/home/u2" is no ancestor of "/home/u"), sdb1's mounts. */

	/* The same directory reached through the bind (30): the root mount is an alias now. */
	f.n = 0;
	assert_int_equal(aliases_each(&mi, 30, "/mnt/home/u/.state/rc", collect, &f, &err), 0);
	assert_int_equal(f.n, 3);
	assert_string_equal(f.paths[0], "/home/u/.state/rc");
	assert_string_equal(f.paths[1], "/srv/with space/rc");
	assert_string_equal(f.paths[2], "/again/home/u/.state/rc");

	/* The root of a filesystem whose parts are mounted elsewhere: refused; a mount inside another
	 * filesystem. */
	f.n = 0;
	assert_int_equal(aliases_each(&mi, 22, "/", collect, &f, &err), -1);
	assert_int_equal(err.errnum, EACCES);
	f.n = 0;
	assert_int_equal(aliases_each(&mi, 37, "/data/y/z", collect, &f, &err), 0);
	assert_int_equal(f.n, 1);
	assert_string_equal(f.paths[0], "/data/x/z");
	mountinfo_free(&mi);
}

static void test_aliases_fail_closed(void **state)
{
	struct mountinfo mi;
	struct found f = { .n = 0 };
	struct sb_err err;

	(void)state;
	assert_int_equal(mountinfo_parse(SAMPLE, strlen(SAMPLE), &mi, &err), 0);
	/* The holding mount not in the table: nobody can say where else the path shows. */
	assert_int_equal(aliases_each(&mi, 99, "/home/u", collect, &f, &err), -1);
	assert_int_equal(err.errnum, ENOENT);
	/* A path that is not below the holder's mount point. */
	assert_int_equal(aliases_each(&mi, 30, "/home/u", collect, &f, &err), -1);
	assert_int_equal(err.errnum, EXDEV);
	mountinfo_free(&mi);
}

static void test_mountinfo_read_self(void **state)
{
	struct mountinfo mi;
	struct sb_err err;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), id = -1;
	bool found = false;

	(void)state;
	assert_int_equal(mountinfo_read(&mi, &err), 0);
	assert_true(mi.n > 0);
	assert_int_equal(aliases_mount_id(fd, &id, &err), 0);
	for (size_t i = 0; i < mi.n; i++)
		found |= mi.lines[i].id == id && strcmp(mi.lines[i].point, "/") == 0;
	assert_true(found);
	close(fd);
	mountinfo_free(&mi);
}

static struct ident ident_of(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (struct ident){ st.st_dev, st.st_ino };
}

static void test_chain_walk(void **state)
{
	char dir[] = "/tmp/test_aliases.XXXXXX", mid[PATH_MAX], deep[PATH_MAX], other[PATH_MAX];
	struct ident_chain c;
	struct sb_err err;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(mid, sizeof mid, "%s/a", dir);
	snprintf(deep, sizeof deep, "%s/a/b", dir);
	snprintf(other, sizeof other, "%s/c", dir);
	assert_int_equal(mkdir(mid, 0700), 0);
	assert_int_equal(mkdir(deep, 0700), 0);
	assert_int_equal(mkdir(other, 0700), 0);

	fd = open(deep, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(ident_chain_walk(fd, &c, &err), 0);
	close(fd);
	assert_true(c.n >= 4); /* b, a, dir, ..., / */
	assert_true(ident_chain_holds(&c, ident_of(deep)));
	assert_true(ident_chain_holds(&c, ident_of(dir)));
	assert_true(ident_chain_holds(&c, ident_of("/")));
	assert_false(ident_chain_holds(&c, ident_of(other))); /* a sibling is no ancestor */
	ident_chain_free(&c);
	assert_null(c.v);

	rmdir(deep);
	rmdir(mid);
	rmdir(other);
	rmdir(dir);
}

/* A deep tree (150 levels): the chain is exactly what opening ".." level by level finds, every level
 * once, in order, up to the root. */
static void test_chain_walk_deep(void **state)
{
	enum { DEPTH = 150 };
	char dir[] = "/tmp/test_aliases.XXXXXX";
	struct ident_chain c;
	struct sb_err err;
	struct stat st;
	size_t n = 0;
	int fd, cur;

	(void)state;
	assert_non_null(mkdtemp(dir));
	fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int i = 0; i < DEPTH; i++) {
		int next;

		assert_int_equal(mkdirat(fd, "d", 0700), 0);
		next = openat(fd, "d", O_PATH | O_DIRECTORY | O_CLOEXEC);
		assert_true(next >= 0);
		close(fd);
		fd = next;
	}
	assert_int_equal(ident_chain_walk(fd, &c, &err), 0);
	/* The reference: open ".." from each level, to the root. */
	cur = dup(fd);
	assert_true(cur >= 0);
	for (;;) {
		int up;

		assert_int_equal(fstat(cur, &st), 0);
		if (n > 0 && st.st_dev == c.v[n - 1].dev && st.st_ino == c.v[n - 1].ino)
			break;
		assert_true(n < c.n);
		assert_true(st.st_dev == c.v[n].dev && st.st_ino == c.v[n].ino);
		n++;
		up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		assert_true(up >= 0);
		close(cur);
		cur = up;
	}
	close(cur);
	assert_int_equal(n, c.n);
	assert_true(c.n > DEPTH);
	ident_chain_free(&c);
	close(fd);
	for (int i = DEPTH; i > 0; i--) {
		char path[sizeof dir + 2 * DEPTH + 1];
		int len = snprintf(path, sizeof path, "%s", dir);

		for (int j = 0; j < i; j++)
			len += snprintf(path + len, sizeof path - (size_t)len, "/d");
		assert_int_equal(rmdir(path), 0);
	}
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_fields_and_escapes), cmocka_unit_test(test_parse_refuses_partial_lines),
		cmocka_unit_test(test_aliases_of_a_directory),   cmocka_unit_test(test_aliases_fail_closed),
		cmocka_unit_test(test_mountinfo_read_self),      cmocka_unit_test(test_chain_walk),
		cmocka_unit_test(test_chain_walk_deep),
		cmocka_unit_test(test_copy_owns_its_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
