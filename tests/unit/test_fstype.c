/* Unit tests for common/fstype.c: the table tells every kernel filesystem of rule N7 by its f_type (also
 * sign-extended, as some ABIs deliver it), names it, and tells no data filesystem for one; on real
 * descriptors, procfs (its root and a part of it, as a bind of /proc/sys would show), sysfs and the
 * cgroup tree are the kernel's and a temporary directory is not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fstype.h"

static void test_kernel_table(void **state)
{
	static const struct {
		unsigned long magic;
		const char *name;
	} want[] = {
		{ PROC_SUPER_MAGIC, "proc" },        { SYSFS_MAGIC, "sysfs" },
		{ CGROUP_SUPER_MAGIC, "cgroup" },    { CGROUP2_SUPER_MAGIC, "cgroup2" },
		{ DEBUGFS_MAGIC, "debugfs" },        { TRACEFS_MAGIC, "tracefs" },
		{ SECURITYFS_MAGIC, "securityfs" },  { BPF_FS_MAGIC, "bpf" },
		{ 0x62656570UL, "configfs" },        { PSTOREFS_MAGIC, "pstore" },
		{ EFIVARFS_MAGIC, "efivarfs" },      { 0x65735543UL, "fusectl" },
		{ BINFMTFS_MAGIC, "binfmt_misc" },   { SELINUX_MAGIC, "selinuxfs" },
		{ SMACK_MAGIC, "smackfs" },          { DEVPTS_SUPER_MAGIC, "devpts" },
		{ NSFS_MAGIC, "nsfs" },              { 0x19800202UL, "mqueue" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		const char *name = fstype_kernel_name(want[i].magic);

		assert_non_null(name);
		assert_string_equal(name, want[i].name);
	}
}

/* A magic with its top bit set, delivered as a negative f_type and sign-extended to 64 bits. */
static void test_sign_extended(void **state)
{
	(void)state;
	assert_string_equal(fstype_kernel_name((unsigned long)(long)(int)SELINUX_MAGIC), "selinuxfs");
	assert_string_equal(fstype_kernel_name((unsigned long)(long)(int)EFIVARFS_MAGIC), "efivarfs");
}

/* The filesystems a command's data lives on are never the kernel's. */
static void test_data_filesystems(void **state)
{
	static const unsigned long data[] = {
		TMPFS_MAGIC, EXT4_SUPER_MAGIC, BTRFS_SUPER_MAGIC, XFS_SUPER_MAGIC, OVERLAYFS_SUPER_MAGIC,
		NFS_SUPER_MAGIC, FUSE_SUPER_MAGIC, SQUASHFS_MAGIC, RAMFS_MAGIC, 0,
	};

	(void)state;
	for (size_t i = 0; i < sizeof data / sizeof data[0]; i++)
		assert_null(fstype_kernel_name(data[i]));
}

static int kernel_at(const char *path, const char **name)
{
	struct sb_err err = { 0 };
	int fd = open(path, O_PATH | O_CLOEXEC);
	int rc;

	assert_true(fd >= 0);
	rc = fstype_kernel_fd(fd, path, name, &err);
	close(fd);
	return rc;
}

static void test_descriptors(void **state)
{
	const char *name = NULL;
	struct statfs sf;

	(void)state;
	assert_int_equal(kernel_at("/proc", &name), 1);
	assert_string_equal(name, "proc");
	assert_int_equal(kernel_at("/proc/sys/kernel", &name), 1);
	assert_string_equal(name, "proc");
	assert_int_equal(kernel_at("/proc/self/oom_score_adj", &name), 1);
	assert_string_equal(name, "proc");
	assert_int_equal(kernel_at("/sys", &name), 1);
	assert_string_equal(name, "sysfs");
	if (statfs("/sys/fs/cgroup", &sf) == 0 && (unsigned long)sf.f_type == CGROUP2_SUPER_MAGIC) {
		assert_int_equal(kernel_at("/sys/fs/cgroup", &name), 1);
		assert_string_equal(name, "cgroup2");
	}
	name = "unset";
	assert_int_equal(kernel_at("/tmp", &name), 0);
	assert_null(name);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kernel_table),
		cmocka_unit_test(test_sign_extended),
		cmocka_unit_test(test_data_filesystems),
		cmocka_unit_test(test_descriptors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
