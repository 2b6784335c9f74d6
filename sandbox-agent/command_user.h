/* The command's user has a name in a view the agent does not build (`serve --user-home`): see
 * command_user.c. */
#ifndef SB_COMMAND_USER_H
#define SB_COMMAND_USER_H

#include "boundary.h"
#include "error.h"
#include "privdir.h"

/* After boundary_prepare (it chose the command's ids and shell), before the first init is built:
 * where the view's /etc/passwd (or /etc/group) has no entry for the command's uid (gid), write the
 * agent's copy with one, home as its home, into state/users, and record it in b->users for init to
 * bind. 0, or -1 with err. */
int command_user_prepare(struct boundary *b, const struct privdir *state, const char *home, struct sb_err *err);

#endif
