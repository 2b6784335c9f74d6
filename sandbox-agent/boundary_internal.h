/* The boundary's files' shared parts (boundary_view.c, boundary_run.c, boundary_prebuilt.c): what a
 * fresh call and a prebuilt init both use. Only boundary_*.c include it (tests/layering_check.py). */
#ifndef SB_BOUNDARY_INTERNAL_H
#define SB_BOUNDARY_INTERNAL_H

#include "boundary.h"
#include "aliases.h" /* struct mountinfo, struct ident */

struct init_context;
struct guarded;

/* Built by the agent before each command: init hides `hidden` (the private directories, then every
 * other path where one shows), and each writable root is checked against every guarded path. */
struct run_view {
	struct hidden_dir *hidden;
	size_t n_hidden, cap_hidden;
	struct guarded *g;
	size_t n_g, cap_g;
	struct mountinfo mi;
	bool mi_borrowed;      /* mi is a prebuilt init's (boundary_init_check): not this view's to free */
	struct ident roots[BOUNDARY_MAX_WRITABLE + 1]; /* the working directory, then the writable roots, as checked */
	size_t n_roots;
	const char *own;       /* while collecting aliases: the object whose aliases these are */
	struct ident own_id;
	bool own_binary;
};

/* The descriptors between agent and init; index 0 is the agent's end unless noted. */
struct run_fds {
	int out[2], errp[2];   /* output pipes: [0] agent reads, [1] command writes */
	int go[2];             /* [0] init reads, [1] agent writes */
	int report[2];         /* [0] agent reads, [1] init writes */
	int error[2];          /* [0] agent reads, [1] init and command write */
};

struct run_state {
	pid_t pid;
	int pidfd;
	bool cmd_done, killed, reaped;
	bool reports_ended;       /* init closed its report pipe: nothing more to poll there */
	int poll_failed;          /* errno of a failed poll: the outcome is uncertain */
	int32_t pid_max_set;      /* what init set pid_max to (0: not bounded) */
	int wait_status;
	enum exec_status kill_reason;
	int64_t deadline, teardown_start, teardown_deadline;
	int64_t reports_from;     /* from then on the report pipe is watched with the output open */
};

/* boundary_view.c */
int request_check(const struct exec_request *req, struct sb_err *err);
void run_view_free(struct run_view *v);
/* What the agent keeps of ended views for the next one (boundary_view.c): two arrays at most. */
size_t run_view_kept_bytes(void);
int run_view_build(const struct boundary *b, const char *cwd, const struct mountinfo *mi, struct run_view *v,
		   struct sb_err *err);

/* boundary_run.c */
void fd_close(int *fd);
void run_fds_close(struct run_fds *f);
int run_fds_open(struct run_fds *f, struct sb_err *err);
pid_t init_spawn(const struct init_context *ctx, int *pidfd, struct sb_err *err);
int id_maps_write(pid_t pid, const struct boundary *b, struct sb_err *err);
void pid_namespace_read(pid_t pid, char *out, size_t len);
void error_read(int fd, char *msg, size_t len);
void init_try_reap(struct run_state *st);
int outcome_init(const struct exec_request *req, struct exec_outcome *out, struct sb_err *err);
void run_to_end(const struct boundary *b, const struct exec_request *req, int cancel_fd, struct run_fds *f,
		struct run_state *st, struct exec_outcome *out, int64_t t0);

#endif
