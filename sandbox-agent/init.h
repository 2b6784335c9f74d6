/* PID 1 of a command's namespace, and the command's last steps before execve. Both run in
 * memory copied from the agent by clone(): they read the context below and allocate nothing. */
#ifndef SB_INIT_H
#define SB_INIT_H

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
};

struct init_report {
	int32_t kind;
	int32_t value;
};

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
};

__attribute__((noreturn)) void init_main(const struct init_context *ctx);

#endif
