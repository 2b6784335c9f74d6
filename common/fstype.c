/* The kernel filesystems by f_type (see fstype.h): a command given write access into any of them could
 * reach past its namespaces (a host procfs writes other processes' oom_score_adj and autogroup nice,
 * sysfs and cgroupfs the machine's settings), so a writable tree holding one is refused. Never decides
 * by path: a bind mount shows any of them under any name. */
#include "fstype.h"

#include <errno.h>
#include <linux/magic.h>
#include <stddef.h>
#include <sys/vfs.h>

/* Magic numbers the uapi header does not carry, from the filesystems' sources. */
#define FSTYPE_CONFIGFS_MAGIC 0x62656570UL   /* fs/configfs/mount.c */
#define FSTYPE_FUSECTL_MAGIC 0x65735543UL    /* fs/fuse/control.c */
#define FSTYPE_MQUEUE_MAGIC 0x19800202UL     /* ipc/mqueue.c */
#define FSTYPE_RPC_PIPEFS_MAGIC 0x67596969UL /* net/sunrpc/rpc_pipe.c */
#define FSTYPE_NFSD_MAGIC 0x6e667364UL       /* fs/nfsd/nfsctl.c */

/* One table: every filesystem here exposes kernel state (of the machine, of other processes or of other
 * namespaces) as files; none holds a command's data. devtmpfs is not here: it reports tmpfs's f_type and
 * is told apart by the caller (boundary_view.c writable_kernel_check()). */
static const struct {
	unsigned long magic;
	const char *name;
} kernel_fs[] = {
	{ PROC_SUPER_MAGIC, "proc" },
	{ SYSFS_MAGIC, "sysfs" },
	{ CGROUP_SUPER_MAGIC, "cgroup" },
	{ CGROUP2_SUPER_MAGIC, "cgroup2" },
	{ DEBUGFS_MAGIC, "debugfs" },
	{ TRACEFS_MAGIC, "tracefs" },
	{ SECURITYFS_MAGIC, "securityfs" },
	{ BPF_FS_MAGIC, "bpf" },
	{ FSTYPE_CONFIGFS_MAGIC, "configfs" },
	{ PSTOREFS_MAGIC, "pstore" },
	{ EFIVARFS_MAGIC, "efivarfs" },
	{ FSTYPE_FUSECTL_MAGIC, "fusectl" },
	{ BINFMTFS_MAGIC, "binfmt_misc" },
	{ SELINUX_MAGIC, "selinuxfs" },
	{ SMACK_MAGIC, "smackfs" },
	{ DEVPTS_SUPER_MAGIC, "devpts" },
	{ NSFS_MAGIC, "nsfs" },
	{ FSTYPE_MQUEUE_MAGIC, "mqueue" },
	{ FSTYPE_RPC_PIPEFS_MAGIC, "rpc_pipefs" },
	{ FSTYPE_NFSD_MAGIC, "nfsd" },
};

const char *fstype_kernel_name(unsigned long f_type)
{
	/* A magic is 32 bits, and f_type is signed on some ABIs: a magic with its top bit set
	 * (SELINUX_MAGIC, EFIVARFS_MAGIC) may arrive sign-extended. Compare the low 32 bits. */
	unsigned long low = f_type & 0xffffffffUL;

	for (size_t i = 0; i < sizeof kernel_fs / sizeof kernel_fs[0]; i++)
		if (kernel_fs[i].magic == low)
			return kernel_fs[i].name;
	return NULL;
}

int fstype_kernel_fd(int fd, const char *what, const char **name, struct sb_err *err)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return sb_fail_errno(err, "statfs of %s", what);
	*name = fstype_kernel_name((unsigned long)sf.f_type);
	return *name != NULL;
}
