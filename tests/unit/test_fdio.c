/* Unit tests for common/fdio.c: private-file creation is exclusive, refuses symlinks, reports the
 * real errno of a short write (never a stale one) and leaves nothing behind when it fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/magic.h>
#include <sys/statfs.h>

#include "fdio.h"
#include "testutil.h"

struct fixture {
	char dir[64];
	int dirfd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof f->dir, "/tmp/test_fdio.XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	f->dirfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	*state = f;
	return f->dirfd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	close(f->dirfd);
	test_rmtree(f->dir);
	free(f);
	return 0;
}

static void file_expect(struct fixture *f, const char *name, const char *want)
{
	char buf[256];
	int fd = openat(f->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static bool file_exists(struct fixture *f, const char *name)
{
	return faccessat(f->dirfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Exactly the bytes asked for, across short reads (a stream socket given them in pieces); an end of file
 * before them is -1, never a short success. */
/* In a child (cmocka writes to 1): with 1 and 2 closed, both come back on /dev/null, 0 is left as it
 * was, and the next file opened lands above 2. Exit status: the first check that failed, or 0. */
static int stdio_child(void)
{
	struct stat st, zero_before, zero_after;
	int fd;

	if (fstat(0, &zero_before) < 0 || close(1) < 0 || close(2) < 0)
		return 1;
	if (fd_stdio_ensure() < 0)
		return 2;
	for (fd = 1; fd <= 2; fd++)
		if (fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3) ||
		    (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR)
			return 3;
	if (fstat(0, &zero_after) < 0 || zero_after.st_ino != zero_before.st_ino || zero_after.st_dev != zero_before.st_dev)
		return 4;
	fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	if (fd < 3)
		return 5;
	return fd_stdio_ensure() == 0 ? 0 : 6; /* nothing to do the second time */
}

static void test_stdio_ensure(void **state)
{
	int status;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(stdio_child());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_read_exact(void **state)
{
	char got[8] = "";
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(write(sv[0], "abc", 3), 3);
	assert_int_equal(write(sv[0], "defg", 4), 4);
	assert_int_equal(fd_read_exact(sv[1], got, 7), 0);
	assert_memory_equal(got, "abcdefg", 7);
	assert_int_equal(write(sv[0], "hi", 2), 2);
	close(sv[0]);
	assert_int_equal(fd_read_exact(sv[1], got, 3), -1);
	close(sv[1]);
}

static void test_create(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	struct stat st;

	must(fd_file_create(f->dirfd, f->dir, "key", 0600, (uid_t)-1, (gid_t)-1, "secret", 6, &err), &err, "create");
	file_expect(f, "key", "secret");
	assert_int_equal(fstatat(f->dirfd, "key", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
}

/* O_EXCL: an existing file is never opened, so never truncated or overwritten. */
static void test_existing_refused(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	must(fd_file_create(f->dirfd, f->dir, "r.json", 0600, (uid_t)-1, (gid_t)-1, "first", 5, &err), &err, "first");
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "r.json", 0600, (uid_t)-1, (gid_t)-1, "second", 6, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	file_expect(f, "r.json", "first");
}

/* A symlink planted where the file goes is refused, and its target is neither created nor written. */
static void test_symlink_refused(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	assert_int_equal(symlinkat("target", f->dirfd, "link"), 0);
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "link", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	assert_false(file_exists(f, "target"));
	must(fd_file_create(f->dirfd, f->dir, "target", 0600, (uid_t)-1, (gid_t)-1, "t", 1, &err), &err, "target");
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "link", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	file_expect(f, "target", "t");
}

static void test_not_one_component(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	assert_int_equal(mkdirat(f->dirfd, "sub", 0700), 0);
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "sub/x", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "..", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	assert_int_equal(fd_file_create(f->dirfd, f->dir, "", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
}

/* A write that stops short (RLIMIT_FSIZE: the kernel writes 4096 of 10000 bytes, then refuses with
 * EFBIG) is the real EFBIG, never the count or a stale errno, and the half file is removed. */
static void test_short_write_reported(void **state)
{
	struct fixture *f = *state;
	static char data[10000];
	struct rlimit old, small;
	struct sb_err err;
	int rc;

	memset(data, 'k', sizeof data);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small = old;
	small.rlim_cur = 4096;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	errno = ENOENT; /* stale: a single write() check would have reported this */
	rc = fd_file_create(f->dirfd, f->dir, "big", 0600, (uid_t)-1, (gid_t)-1, data, sizeof data, &err);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, SIG_DFL);
	assert_int_equal(rc, -1);
	assert_int_equal(err.errnum, EFBIG);
	assert_false(file_exists(f, "big"));
}

/* The directory is fsynced and its result checked: through an O_PATH descriptor (usable as dirfd,
 * but fsync fails with EBADF) the call fails and removes the file it made. */
static void test_directory_sync_checked(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	int pathfd = open(f->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

	assert_true(pathfd >= 0);
	assert_int_equal(fd_file_create(pathfd, f->dir, "k", 0600, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	close(pathfd);
	assert_int_equal(err.errnum, EBADF);
	assert_non_null(strstr(err.msg, "syncing directory"));
	assert_false(file_exists(f, "k"));
}

static void test_create_path_owned(void **state)
{
	struct fixture *f = *state;
	char path[128];
	struct sb_err err;
	struct stat st;
	uid_t uid = geteuid() == 0 ? 65534 : (uid_t)-1;

	snprintf(path, sizeof path, "%s/kubeconfig", f->dir);
	must(fd_file_create_path(path, 0400, uid, uid == (uid_t)-1 ? (gid_t)-1 : 65534, "cfg", 3, &err), &err, "path");
	assert_int_equal(fstatat(f->dirfd, "kubeconfig", &st, AT_SYMLINK_NOFOLLOW), 0);
	assert_int_equal(st.st_mode & 07777, 0400);
	assert_int_equal(st.st_uid, uid == (uid_t)-1 ? geteuid() : 65534);
	assert_int_equal(fd_file_create_path(path, 0400, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	snprintf(path, sizeof path, "%s/missing/kubeconfig", f->dir);
	assert_int_equal(fd_file_create_path(path, 0400, (uid_t)-1, (gid_t)-1, "x", 1, &err), -1);
	assert_int_equal(err.errnum, ENOENT);
}

/* Replace: a stale temporary (a crash) does not block it, the temporary is gone afterwards. */
static void test_replace(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;

	must(fd_file_create(f->dirfd, f->dir, "e.json.tmp", 0600, (uid_t)-1, (gid_t)-1, "stale", 5, &err), &err, "stale");
	must(fd_file_replace(f->dirfd, f->dir, "e.json", "e.json.tmp", 0600, "one", 3, &err), &err, "replace 1");
	must(fd_file_replace(f->dirfd, f->dir, "e.json", "e.json.tmp", 0600, "two", 3, &err), &err, "replace 2");
	file_expect(f, "e.json", "two");
	assert_false(file_exists(f, "e.json.tmp"));
}

/* Written, not synced: the open descriptor of the whole file; exclusive like fd_file_create. */
static void test_write_new(void **state)
{
	struct fixture *f = *state;
	struct sb_err err;
	int fd = fd_file_write_new(f->dirfd, f->dir, "r.json", 0600, "whole", 5, &err);

	assert_true(fd >= 0);
	assert_int_equal(fsync(fd), 0);
	assert_int_equal(close(fd), 0);
	file_expect(f, "r.json", "whole");
	assert_int_equal(fd_file_write_new(f->dirfd, f->dir, "r.json", 0600, "again", 5, &err), -1);
	assert_int_equal(err.errnum, EEXIST);
	file_expect(f, "r.json", "whole");
	assert_int_equal(fd_file_write_new(f->dirfd, f->dir, "../r.json", 0600, "x", 1, &err), -1);
	assert_int_equal(err.errnum, EINVAL);
}

/* A full filesystem (a 16 KiB tmpfs in a private mount namespace, as root only): ENOSPC, no file. */
static void test_full_filesystem(void **state)
{
	struct fixture *f = *state;
	char mnt[128];
	pid_t pid;
	int status;

	if (geteuid() != 0) {
		fprintf(stderr, "test_full_filesystem: skipped (needs root for a private tmpfs)\n");
		return;
	}
	snprintf(mnt, sizeof mnt, "%s/small", f->dir);
	assert_int_equal(mkdir(mnt, 0700), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static char data[64 * 1024];
		struct sb_err err;
		int fd, rc;

		if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", mnt, "tmpfs", 0, "size=16k") < 0)
			_exit(2);
		fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		rc = fd_file_create(fd, mnt, "f", 0600, (uid_t)-1, (gid_t)-1, data, sizeof data, &err);
		_exit(rc == -1 && err.errnum == ENOSPC && faccessat(fd, "f", F_OK, AT_SYMLINK_NOFOLLOW) < 0 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
		fprintf(stderr, "test_full_filesystem: skipped (cannot mount a private tmpfs here)\n");
		return;
	}
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* fd_private_open: made 0600 whatever the umask, an existing file kept and tightened, and a link,
 * a directory or a missing directory refused, each with its errno. */
static void test_private_open(void **state)
{
	struct fixture *f = *state;
	char path[128], link[128], sub[128], missing[128];
	struct sb_err err;
	struct stat st;
	mode_t old = umask(0);
	int fd;

	snprintf(path, sizeof path, "%s/db", f->dir);
	snprintf(link, sizeof link, "%s/link", f->dir);
	snprintf(sub, sizeof sub, "%s/sub", f->dir);
	snprintf(missing, sizeof missing, "%s/none/db", f->dir);
	fd = fd_private_open(path, &err);
	umask(old);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(write(fd, "kept", 4), 4);
	close(fd);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(chmod(path, 0644), 0);
	fd = fd_private_open(path, &err);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	file_expect(f, "db", "kept");
	assert_int_equal(symlink(path, link), 0);
	assert_int_equal(fd_private_open(link, &err), -1);
	assert_int_equal(err.errnum, ELOOP);
	assert_int_equal(mkdir(sub, 0700), 0);
	assert_int_equal(fd_private_open(sub, &err), -1);
	assert_int_equal(err.errnum, EISDIR); /* O_RDWR on a directory */
	assert_int_equal(fd_private_open(missing, &err), -1);
	assert_int_equal(err.errnum, ENOENT);
	assert_non_null(strstr(err.msg, "its directory must exist"));
	snprintf(sub, sizeof sub, "%s/fifo", f->dir);
	assert_int_equal(mkfifo(sub, 0644), 0);
	assert_int_equal(fd_private_open(sub, &err), -1); /* O_RDWR opens a FIFO without blocking */
	assert_int_equal(err.errnum, EINVAL);
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644); /* refused before any change */
}

/* The receipt's room (sandbox-agent/receipt.c): blocks reserved past an end that stays where it was,
 * a write within them that makes the file exactly its bytes long, and the rest given back later.
 * Where the filesystem cannot reserve past the end (fd_reserve's fallback), the size grows instead. */
static void test_reserve_then_release(void **state)
{
	struct fixture *f = *state;
	char text[648];
	struct statfs fs;
	struct stat st;
	int fd = openat(f->dirfd, "room", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(fd_reserve(fd, 8192), 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_blocks * 512 >= 8192);
	/* ext4 and tmpfs (where tests and agents' state live here) reserve past the end. */
	assert_int_equal(fstatfs(fd, &fs), 0);
	if (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == TMPFS_MAGIC)
		assert_int_equal(st.st_size, 0);
	if (st.st_size == 0) {
		memset(text, 'r', sizeof text);
		assert_int_equal(pwrite(fd, text, sizeof text, 0), (ssize_t)sizeof text);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, sizeof text);
		assert_true(st.st_blocks * 512 >= 8192);
		/* Given back: only what holds the bytes stays allocated (one block of at most 4 KiB). */
		assert_int_equal(fd_reserve_release(fd), 0);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(st.st_size, sizeof text);
		assert_true(st.st_blocks * 512 <= 4096);
	} else {
		assert_int_equal(st.st_size, 8192);
	}
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stdio_ensure),
		cmocka_unit_test(test_read_exact),
		cmocka_unit_test_setup_teardown(test_create, setup, teardown),
		cmocka_unit_test_setup_teardown(test_existing_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_one_component, setup, teardown),
		cmocka_unit_test_setup_teardown(test_short_write_reported, setup, teardown),
		cmocka_unit_test_setup_teardown(test_directory_sync_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_create_path_owned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_new, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_filesystem, setup, teardown),
		cmocka_unit_test_setup_teardown(test_private_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_then_release, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
