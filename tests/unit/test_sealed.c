/* Unit tests of sandbox-agent/sealed.c, through the two places that use it: the receipt key
 * from a file (secret.c secrets_key_load_file) and the directory of the TLS key (privdir.c
 * privdir_open_readable). A file that is not the agent's own is refused on a writable mount
 * whatever its mode; on a read-only mount (a tmpfs mounted in a private mount namespace, then
 * remounted read-only: what the kubelet does for a Secret volume) the shape of a Secret's file
 * (root's, mode 0440, the agent's group) is accepted, and a group- or world-writable file, a
 * file of another non-root uid, a file readable by others or by another group are refused.
 * The read-only cases need root (a mount); as another user they are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "privdir.h"
#include "secret.h"
#include "testutil.h"

#define OTHER 12345

static char dir[64];

static void key_write(const char *name, mode_t mode, uid_t uid, gid_t gid)
{
	char path[128];
	int fd;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "0123456789abcdef0123456789abcdef", 32), 32);
	assert_int_equal(fchown(fd, uid, gid), 0);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

/* 0 when the key at name loads; else -1 and err says why. */
static int key_load(const char *name, struct sb_err *err)
{
	struct secrets *s = secrets_alloc(err);
	char path[128];
	int rc;

	assert_non_null(s);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	rc = secrets_key_load_file(s, path, err);
	if (rc == 0)
		assert_memory_equal(s->key, "0123456789abcdef0123456789abcdef", 32);
	secrets_free(s);
	return rc;
}

static void refused(const char *name, const char *why)
{
	struct sb_err err = { 0 };

	assert_int_equal(key_load(name, &err), -1);
	assert_contains(err.msg, why);
}

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof dir, "/tmp/sbsealed.XXXXXX");
	return mkdtemp(dir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	test_rmtree(dir);
	return 0;
}

/* On a writable mount the own-uid rule alone applies: 0600 of this uid loads; anything else,
 * root's 0440 (a Secret's shape) included, is refused. */
static void writable_mount_keeps_the_own_uid_rule(void **state)
{
	struct sb_err err = { 0 };

	(void)state;
	key_write("own", 0600, geteuid(), getegid());
	assert_int_equal(key_load("own", &err), 0);
	key_write("group-readable", 0640, geteuid(), getegid());
	refused("group-readable", "not on a read-only mount");
	if (geteuid() == 0) {
		key_write("other-uid", 0400, OTHER, 0);
		refused("other-uid", "not on a read-only mount");
	}
	/* a root-owned file readable by the agent's group, as a Secret gives, but writable here */
	if (geteuid() != 0 && access("/etc/hostname", R_OK) == 0) {
		snprintf(dir, sizeof dir, "/etc");
		refused("hostname", "not on a read-only mount");
		snprintf(dir, sizeof dir, "%s", "/tmp/sbsealed.gone");
	}
}

/* The read-only cases, in a child with a mount namespace of its own. */
static int readonly_child(void)
{
	struct sb_err err = { 0 };
	struct privdir d;
	char sub[128];

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "mode=0755") < 0)
		return 2;
	key_write("secret", 0440, 0, getegid());            /* a Secret's file: root's, fsGroup, 0440 */
	key_write("own", 0600, geteuid(), getegid());
	key_write("group-writable", 0460, 0, getegid());
	key_write("world-writable", 0442, 0, getegid());
	key_write("other-uid", 0400, OTHER, getegid());
	key_write("others-read", 0444, 0, getegid());
	key_write("other-group", 0440, 0, OTHER);
	snprintf(sub, sizeof sub, "%s/data", dir);
	if (mkdir(sub, 02755) < 0)
		return 3;
	snprintf(sub, sizeof sub, "%s/open", dir);
	if (mkdir(sub, 0777) < 0 || chmod(sub, 0777) < 0)
		return 3;
	if (mount(NULL, dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
		return 4;
	assert_int_equal(key_load("secret", &err), 0);
	assert_int_equal(key_load("own", &err), 0);
	refused("group-writable", "writable by group or others");
	refused("world-writable", "writable by group or others");
	refused("other-uid", "belongs to uid 12345, neither root nor this uid");
	refused("others-read", "readable by others");
	refused("other-group", "readable by others");
	/* the directory of the TLS key: the kubelet's 2755 root directory, not a world-writable one */
	snprintf(sub, sizeof sub, "%s/data", dir);
	if (privdir_open_readable(&d, sub, &err) < 0)
		fail_msg("%s", err.msg);
	privdir_close(&d);
	snprintf(sub, sizeof sub, "%s/open", dir);
	assert_int_equal(privdir_open_readable(&d, sub, &err), -1);
	assert_contains(err.msg, "writable by group or others");
	return 0;
}

static void readonly_mount_takes_a_secret_shape_only(void **state)
{
	pid_t pid;
	int status;

	(void)state;
	if (geteuid() != 0)
		skip(); /* a mount needs root */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(readonly_child());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(writable_mount_keeps_the_own_uid_rule, setup, teardown),
		cmocka_unit_test_setup_teardown(readonly_mount_takes_a_secret_shape_only, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
