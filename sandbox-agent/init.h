/* PID 1 of a command's namespace, and the command's last steps before execve. Both run in
 * memory copied from the agent by clone(): they read the context below and allocate nothing. */
#ifndef SB_INIT_H
#define SB_INIT_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "boundary.h"
#include "nsspawn.h"

/* What init tells the agent over the report pipe; one fixed-size record per write, so each
 * write is atomic (<= PIPE_BUF). */
enum init_report_kind {
	INIT_REPORT_READY = 1,         /* value: the pid_max init set, 0 when the kernel refused it */
	INIT_REPORT_COMMAND = 2,       /* value: the command's wait status */
	INIT_REPORT_PID_MAX_AFTER = 3, /* value: pid_max as it reads once the command ended */
	INIT_REPORT_BOUND = 4,         /* prebuilt init only: a struct init_bound, before any other */
};

struct init_report {
	int32_t kind;
	int32_t value;
};

/* What a prebuilt init bound into its view, by identity, read from the descriptors it used: [0] its
 * working directory once entered, then (read-only world) the source of each writable root's copy, the
 * working directory's first. The agent compares them with the call's own checks (prebuilt.h). */
struct init_bound {
	int32_t kind; /* INIT_REPORT_BOUND */
	uint32_t n;
	struct {
		uint64_t dev, ino;
	} id[BOUNDARY_MAX_WRITABLE + 2];
};

/* A prebuilt init waits, after its last privilege step, for the call: this header on the go pipe,
 * then the command's bytes, then n_env entries "NAME=VALUE", each with its NUL (env_len in all). */
struct init_call {
	uint32_t command_len;
	uint32_t n_env;
	uint32_t env_len;
};

#define INIT_CALL_COMMAND_MAX (1u << 20)
#define INIT_CALL_ENV_MAX (BOUNDARY_MAX_ENV * 8192u)

/* The namespaces of every init. User namespace first among equals: it owns the others, so an
 * unprivileged agent can create them. The command is never PID 1: init is. */
#define INIT_NAMESPACES (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS)

/* Init exits with this after writing a setup failure to error_fd. */
#define INIT_EXIT_SETUP_FAILED SPAWN_EXIT_SETUP_FAILED

struct init_context {
	const struct boundary *b;
	const char *cwd;
	char *const *argv;
	char *const *envp;
	uid_t uid;
	gid_t gid;
	int go_fd;       /* read end: one byte from the agent once the id maps are written */
	int report_fd;   /* write end: struct init_report records */
	int error_fd;    /* write end: one message when a setup step fails */
	int stdout_fd;   /* write ends of the output pipes */
	int stderr_fd;
	bool prebuilt;   /* build the view, drop, report INIT_REPORT_BOUND, then wait for an init_call
			  * on go_fd (argv and envp come from it) */
};

__attribute__((noreturn)) void init_main(const struct init_context *ctx);

#endif
