/* fuse_stall MOUNTPOINT: a FUSE server (raw /dev/fuse, no libfuse) that mounts an empty root on
 * MOUNTPOINT and then takes requests without ever answering them, so that a process touching anything
 * below the root waits in the kernel's request_wait_answer. Once the server has read a request, that wait
 * becomes uninterruptible when the process is sent SIGKILL: the process stays in D state until the
 * connection is aborted. That is the known way to keep a PID namespace from emptying.
 *
 * Answered: INIT (protocol 7.x), GETATTR of the root (so `stat -c %F MOUNTPOINT` and `ls -d` work),
 * STATFS (so df and mount scanners on the host do not hang), GETXATTR/LISTXATTR with ENOSYS (so
 * `ls -l MOUNTPOINT` does not hang). Every other request (LOOKUP first of all) is read and never answered.
 *
 * Prints "ready" on stdout once INIT is answered. On SIGTERM, SIGINT or SIGHUP it closes /dev/fuse (the last
 * descriptor: the kernel aborts the connection, every waiting request ends with ECONNABORTED and the stuck
 * processes are freed), then detaches the mount (umount2 MNT_DETACH) and exits 0. Must run as root.
 * Exit codes: 0 clean end, 1 error, 2 usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAX_WRITE (128u * 1024u)
/* The kernel refuses reads smaller than header + fuse_write_in + max_write (and than 8 KiB). */
#define BUF_SIZE (MAX_WRITE + 64u * 1024u)
#define MIN_MINOR 13 /* the init reply layout with max_background; every kernel since 2.6.29 */

static unsigned char buf[BUF_SIZE];
static uint32_t proto_minor;
static const char *mnt;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	fputs("fuse_stall: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static const char *op_name(uint32_t op)
{
	switch (op) {
	case FUSE_LOOKUP: return "LOOKUP";
	case FUSE_FORGET: return "FORGET";
	case FUSE_GETATTR: return "GETATTR";
	case FUSE_SETATTR: return "SETATTR";
	case FUSE_OPEN: return "OPEN";
	case FUSE_STATFS: return "STATFS";
	case FUSE_GETXATTR: return "GETXATTR";
	case FUSE_LISTXATTR: return "LISTXATTR";
	case FUSE_INIT: return "INIT";
	case FUSE_OPENDIR: return "OPENDIR";
	case FUSE_ACCESS: return "ACCESS";
	case FUSE_CREATE: return "CREATE";
	case FUSE_INTERRUPT: return "INTERRUPT";
	case FUSE_DESTROY: return "DESTROY";
	case FUSE_BATCH_FORGET: return "BATCH_FORGET";
	default: return "other";
	}
}

/* reply: one answer to request UNIQUE, ERROR (0 or -errno) and LEN bytes of BODY. 0 when written, 1 when
 * the request no longer exists (interrupted or aborted: ENOENT), -1 on any other failure. */
static int reply(int fd, uint64_t unique, int32_t error, const void *body, size_t len)
{
	unsigned char out[sizeof(struct fuse_out_header) + 256];
	struct fuse_out_header h;
	ssize_t n;

	if (len > sizeof out - sizeof h) {
		say("internal error: reply body of %zu bytes", len);
		return -1;
	}
	memset(&h, 0, sizeof h);
	h.len = (uint32_t)(sizeof h + len);
	h.error = error;
	h.unique = unique;
	memcpy(out, &h, sizeof h);
	if (len > 0)
		memcpy(out + sizeof h, body, len);
	do
		n = write(fd, out, h.len);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == ENOENT) {
		say("request %llu is gone (interrupted or aborted) before its reply", (unsigned long long)unique);
		return 1;
	}
	if (n < 0) {
		say("write /dev/fuse (reply to %llu): %s", (unsigned long long)unique, strerror(errno));
		return -1;
	}
	if ((size_t)n != h.len) {
		say("write /dev/fuse: short write %zd of %u", n, h.len);
		return -1;
	}
	return 0;
}

/* 1 when INIT was answered, 0 when the kernel's major is newer (it sends INIT again), -1 on error. */
static int do_init(int fd, const struct fuse_in_header *in, const unsigned char *arg, size_t arglen)
{
	struct fuse_init_in ii;
	struct fuse_init_out io;
	size_t outlen;

	/* major, minor, max_readahead, flags: present since protocol 7.6 */
	if (arglen < 4 * sizeof(uint32_t)) {
		say("INIT: argument of %zu bytes is too short", arglen);
		return -1;
	}
	memset(&ii, 0, sizeof ii);
	memcpy(&ii, arg, arglen < sizeof ii ? arglen : sizeof ii);
	memset(&io, 0, sizeof io);
	io.major = FUSE_KERNEL_VERSION;
	io.minor = FUSE_KERNEL_MINOR_VERSION;
	if (ii.major > FUSE_KERNEL_VERSION) {
		/* our major only: the kernel answers with a new INIT for it */
		say("INIT: kernel protocol %u.%u, offering %u", ii.major, ii.minor, FUSE_KERNEL_VERSION);
		return reply(fd, in->unique, 0, &io, 2 * sizeof(uint32_t)) < 0 ? -1 : 0;
	}
	if (ii.major < FUSE_KERNEL_VERSION || ii.minor < MIN_MINOR) {
		say("INIT: kernel protocol %u.%u is too old (need %u.%u)", ii.major, ii.minor, FUSE_KERNEL_VERSION,
		    MIN_MINOR);
		reply(fd, in->unique, -EPROTO, NULL, 0);
		return -1;
	}
	if (ii.minor < io.minor)
		io.minor = ii.minor;
	proto_minor = io.minor;
	io.max_readahead = ii.max_readahead;
	io.flags = 0; /* no optional feature */
	io.max_background = 16;
	io.congestion_threshold = 12;
	io.max_write = MAX_WRITE;
	io.time_gran = 1;
	outlen = io.minor < 23 ? FUSE_COMPAT_22_INIT_OUT_SIZE : sizeof io;
	if (reply(fd, in->unique, 0, &io, outlen) != 0)
		return -1;
	say("INIT: kernel protocol %u.%u, negotiated %u.%u", ii.major, ii.minor, io.major, io.minor);
	return 1;
}

static int do_getattr_root(int fd, const struct fuse_in_header *in)
{
	struct fuse_attr_out ao;
	struct timespec now;

	if (clock_gettime(CLOCK_REALTIME, &now) != 0) {
		say("clock_gettime: %s", strerror(errno));
		return -1;
	}
	memset(&ao, 0, sizeof ao);
	ao.attr_valid = 1;
	ao.attr.ino = FUSE_ROOT_ID;
	ao.attr.mode = S_IFDIR | 0755;
	ao.attr.nlink = 2;
	ao.attr.uid = 0;
	ao.attr.gid = 0;
	ao.attr.size = 4096;
	ao.attr.blocks = 8;
	ao.attr.blksize = 4096;
	ao.attr.atime = ao.attr.mtime = ao.attr.ctime = (uint64_t)now.tv_sec;
	ao.attr.atimensec = ao.attr.mtimensec = ao.attr.ctimensec = (uint32_t)now.tv_nsec;
	return reply(fd, in->unique, 0, &ao, sizeof ao) < 0 ? -1 : 0;
}

static int do_statfs(int fd, const struct fuse_in_header *in)
{
	struct fuse_statfs_out so;

	memset(&so, 0, sizeof so);
	so.st.bsize = 4096;
	so.st.frsize = 4096;
	so.st.namelen = 255;
	return reply(fd, in->unique, 0, &so, sizeof so) < 0 ? -1 : 0;
}

/* One request from /dev/fuse. 1 when the server goes on, 0 when the connection ended, -1 on error. */
static int serve_one(int fd, int *initialized)
{
	struct fuse_in_header in;
	ssize_t n;
	int r;

	n = read(fd, buf, sizeof buf);
	if (n < 0) {
		switch (errno) {
		case EINTR:
		case EAGAIN:
		case ENOENT: /* the request was interrupted before it reached us */
			return 1;
		case ENODEV: /* unmounted or aborted from elsewhere */
			say("the connection ended (ENODEV)");
			return 0;
		default:
			say("read /dev/fuse: %s", strerror(errno));
			return -1;
		}
	}
	if ((size_t)n < sizeof in) {
		say("read /dev/fuse: short request of %zd bytes", n);
		return -1;
	}
	memcpy(&in, buf, sizeof in);
	if (in.len != (uint32_t)n) {
		say("read /dev/fuse: request says %u bytes, read %zd", in.len, n);
		return -1;
	}
	if (!*initialized && in.opcode != FUSE_INIT) {
		say("request %s (%u) before INIT", op_name(in.opcode), in.opcode);
		return -1;
	}
	switch (in.opcode) {
	case FUSE_INIT:
		if (*initialized) {
			say("a second INIT after the connection was set up");
			return -1;
		}
		r = do_init(fd, &in, buf + sizeof in, (size_t)n - sizeof in);
		if (r < 0)
			return -1;
		if (r == 1) {
			*initialized = 1;
			if (printf("ready\n") < 0 || fflush(stdout) != 0) {
				say("cannot write \"ready\" to stdout: %s", strerror(errno));
				return -1;
			}
		}
		return 1;
	case FUSE_GETATTR:
		if (in.nodeid == FUSE_ROOT_ID)
			return do_getattr_root(fd, &in) < 0 ? -1 : 1;
		break;
	case FUSE_STATFS:
		return do_statfs(fd, &in) < 0 ? -1 : 1;
	case FUSE_GETXATTR:
	case FUSE_LISTXATTR:
		return reply(fd, in.unique, -ENOSYS, NULL, 0) < 0 ? -1 : 1;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
		return 1; /* never answered, by the protocol */
	case FUSE_DESTROY:
		say("DESTROY: the filesystem is being unmounted");
		return reply(fd, in.unique, 0, NULL, 0) < 0 ? -1 : 1;
	default:
		break;
	}
	say("holding %s (opcode %u) unique %llu nodeid %llu from pid %u: never answered", op_name(in.opcode),
	    in.opcode, (unsigned long long)in.unique, (unsigned long long)in.nodeid, in.pid);
	return 1;
}

int main(int argc, char **argv)
{
	char opts[256];
	struct stat st;
	sigset_t sigs;
	int fd, sfd, initialized = 0, status = 0, mounted = 0, n;

	if (argc != 2 || argv[1][0] == '\0') {
		fprintf(stderr, "usage: fuse_stall MOUNTPOINT\n");
		return 2;
	}
	mnt = argv[1];
	if (stat(mnt, &st) != 0) {
		say("%s: %s", mnt, strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		say("%s: not a directory", mnt);
		return 1;
	}
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
		say("signal(SIGPIPE): %s", strerror(errno));
		return 1;
	}
	/* the ending signals arrive through a signalfd, between requests */
	if (sigemptyset(&sigs) != 0 || sigaddset(&sigs, SIGTERM) != 0 || sigaddset(&sigs, SIGINT) != 0 ||
	    sigaddset(&sigs, SIGHUP) != 0) {
		say("sigset: %s", strerror(errno));
		return 1;
	}
	if (sigprocmask(SIG_BLOCK, &sigs, NULL) != 0) {
		say("sigprocmask: %s", strerror(errno));
		return 1;
	}
	sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	if (sfd < 0) {
		say("signalfd: %s", strerror(errno));
		return 1;
	}
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		say("open /dev/fuse: %s", strerror(errno));
		close(sfd);
		return 1;
	}
	n = snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", fd);
	if (n < 0 || (size_t)n >= sizeof opts) {
		say("mount options do not fit");
		return 1;
	}
	if (mount("fuse_stall", mnt, "fuse", MS_NOSUID | MS_NODEV, opts) != 0) {
		say("mount fuse on %s (%s): %s%s", mnt, opts, strerror(errno),
		    errno == EPERM ? " (needs root)" : "");
		close(fd);
		close(sfd);
		return 1;
	}
	mounted = 1;
	say("mounted on %s (%s), pid %ld", mnt, opts, (long)getpid());

	for (;;) {
		struct pollfd p[2] = { { fd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		int r;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			say("poll: %s", strerror(errno));
			status = 1;
			break;
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			ssize_t got = read(sfd, &si, sizeof si);

			if (got != (ssize_t)sizeof si) {
				say("read signalfd: %s", got < 0 ? strerror(errno) : "short read");
				status = 1;
			} else {
				say("signal %u: ending", si.ssi_signo);
			}
			break;
		}
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
			say("/dev/fuse: the connection ended (poll revents 0x%x)", (unsigned)p[0].revents);
			break;
		}
		if (p[0].revents & POLLIN) {
			r = serve_one(fd, &initialized);
			if (r < 0) {
				status = 1;
				break;
			}
			if (r == 0)
				break;
		}
	}

	/* The last /dev/fuse descriptor (O_CLOEXEC, no fork): closing it aborts the connection. */
	if (close(fd) != 0) {
		say("close /dev/fuse: %s", strerror(errno));
		status = 1;
	}
	if (mounted && umount2(mnt, MNT_DETACH) != 0) {
		if (errno == EINVAL || errno == ENOENT) {
			say("umount2 %s: %s (already unmounted)", mnt, strerror(errno));
		} else {
			say("umount2 %s: %s", mnt, strerror(errno));
			status = 1;
		}
	}
	if (close(sfd) != 0) {
		say("close signalfd: %s", strerror(errno));
		status = 1;
	}
	say("ended (%s)", status == 0 ? "clean" : "error");
	return status;
}
