/* The whole output of a call, kept in files the next call can read (exec request member
 * "keep_output", control.h): exec-<id>.stdout and .stderr in <worktree>/.sandbox-tmp/.outputs/,
 * the newest OUTPUT_KEEP_FILES of them. The scratch folder is the sandbox's to change at any moment,
 * so every step is by descriptor, with the sandbox's own file rights; it must never follow a link
 * there, write outside it, or fail the call it keeps. */
#ifndef SB_OUTPUT_KEEP_H
#define SB_OUTPUT_KEEP_H

#include <jansson.h>
#include <sys/types.h>

#include "control_limits.h"

#define OUTPUT_KEEP_DIR CONTROL_KEEP_DIR
#define OUTPUT_KEEP_FILES CONTROL_KEEP_FILES /* per session: the oldest beyond this are removed */

/* After the call's record is committed, on its control response resp (ok with a result): when the
 * result's stdout and stderr text together is over `over` bytes, write each non-empty stream's
 * bytes (escaped text decoded, common/textesc.h) and add "output_kept": {"stdout": PATH, ...}
 * (paths as the sandbox sees them: the worktree is at the same path inside) to the result, or
 * "output_kept_error": why. worktree is the session's (records); owner_uid and owner_gid the
 * sandbox's, which the scratch folder must belong to. Never fails: the call's answer stands. */
void output_keep(json_t *resp, const char *worktree, const char *exec_id, size_t over, uid_t owner_uid,
		 gid_t owner_gid);

#endif
