/* Rule N4, separate failure domains: what keeps a tenant that fills the volume from making another
 * identity's call uncertain or losing its record. Either the state directory (records, private
 * directories) is on another filesystem than the volume, which no sandbox writes ("separate"), or the
 * manager holds a reserve there that it gives back to finish the records it could not write ("reserve").
 * It never writes a record itself: the records run the statement again once it gave the reserve back
 * (records_set_full_hook), and execpath.c asks disk_bound_admit before a call is recorded. */
#ifndef SB_DISK_BOUND_H
#define SB_DISK_BOUND_H

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define DISK_RESERVE_NAME "disk-reserve"

enum disk_bound_kind {
	DISK_SEPARATE, /* st_dev of the state directory and of the volume differ */
	DISK_RESERVE,  /* one filesystem, and a reserve of `bytes` in the state directory */
	DISK_NONE,     /* one filesystem and disk-reserve 0: no bound (the operator's choice) */
};

struct disk_bound {
	pthread_mutex_t lock;
	enum disk_bound_kind kind;
	char state_dir[PATH_MAX];
	int dir_fd;     /* the state directory: fstatvfs of the filesystem the reserve is on */
	int fd;         /* <state-dir>/disk-reserve, or -1 */
	int64_t bytes;  /* the reserve's size (disk-reserve) */
	bool held;      /* its blocks are allocated */
	uint64_t released; /* how many times it was given back, for the log and session show */
};

/* At start, before the first call: compares the two filesystems and, on one, takes the reserve.
 * A reserve that cannot be taken for want of space is no failure: it stays given back, and calls
 * are refused until it can be taken (disk_bound_admit). -1 (err): the state directory or the
 * reserve's file could not be opened, or the reserve is over a quarter of the filesystem (once given
 * back it could never be taken again). */
int disk_bound_start(struct disk_bound *d, const char *state_dir, const char *volume, int64_t bytes,
		     struct sb_err *err);

/* A record could not be written for want of space (records_set_full_hook, ctx a struct disk_bound):
 * the reserve is given back (its blocks freed) and true returned, so the record is written again,
 * once; also when another record gave it back a moment before. False without a reserve. */
bool disk_bound_release(void *ctx);

/* Before a call is accepted (nothing recorded yet): 0, or -1 when the reserve is given back and the
 * filesystem has no room to take it again (err says so, with the free space). Cheap: one fstatvfs
 * while the reserve is given back, nothing while it is held. */
int disk_bound_admit(struct disk_bound *d, struct sb_err *err);

/* What `session show` and `status` say under "disk": {"bound": "separate filesystem"},
 * {"bound": "reserve", "bytes": N, "held": B, ...} or {"bound": "none", ...}. */
json_t *disk_bound_json(struct disk_bound *d);

#endif
