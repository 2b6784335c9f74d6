/* Each identity's own uid and gid (issue 26, rule N2): what its sandboxes run as and what its files
 * on the volume belong to. A root manager gives each identity one slot of its id range
 * (`sandbox-ids`), recorded in the store; an unprivileged manager can map only its own ids, so its
 * sandboxes are all itself (docs/isolation.md says what separates them then). */
#ifndef SB_IDENTITY_IDS_H
#define SB_IDENTITY_IDS_H

#include <stdbool.h>

#include "config.h"
#include "error.h"
#include "workspace.h"

struct manager;

/* config: "START:COUNT" (uids and gids START .. START+COUNT-1) into c; refused unless the range
 * holds the probe's slot and one identity and no id below 1000, nobody (65534) or 65535. */
int identity_ids_parse(struct config *c, const char *value, struct sb_err *err);

/* A range START:COUNT (uids or gids): never an id below 1000 (the system's), nobody (65534) or 65535,
 * nor past the last valid id; refused naming from. */
int identity_ids_range_valid(unsigned long start, unsigned long count, const char *from, struct sb_err *err);

/* A root manager given no range: root's entries of /etc/subuid and /etc/subgid when both exist,
 * else IDENTITY_IDS_DEFAULT. Nothing for an unprivileged manager. */
int identity_ids_default(struct config *c, struct sb_err *err);

/* At start (root): no id of the range is a user's or group's (/etc/passwd, /etc/group), overlaps
 * another user's subordinate range, runs a process of the host's user namespace, or owns an entry
 * directly in the places other users write (identity_ids.c ids_places). Refused naming the user,
 * the range, the process or the path. */
int identity_ids_check(const struct config *c, struct sb_err *err);

/* The ids of identity's files and sandboxes (workspace_owner_fn): a root manager's from the
 * identity's slot, given now when it has none; an unprivileged manager's own. */
int identity_ids_of(void *manager, const char *identity, struct workspace_owner *out, struct sb_err *err);

/* `sandbox-ids subuid` (identity_userns.c): marks c; as uid 0 of the namespace that
 * identity_userns_enter made, sets the range to its ids 1..N (the user's first subordinate ids). */
int identity_ids_subuid_range(struct config *c, struct sb_err *err);

/* `sandbox-ids subuid` and unprivileged: the daemon moves into a user namespace mapping its own ids
 * and its user's subordinate ids (newuidmap, newgidmap) and re-executes itself there, with argv
 * (daemon_serve's: "serve" FLAGS...). Returns 0 when there is nothing to do, -1 with err when it
 * cannot; does not return when it did. Call first, before any thread. */
int identity_userns_enter(const struct config *c, int argc, char **argv, struct sb_err *err);

/* An unprivileged manager given no sandbox-ids: `subuid` when its user has entries in both files and
 * newuidmap and newgidmap are installed (rule N2: each identity its own ids), else its own uid. */
int identity_userns_default(struct config *c, struct sb_err *err);

/* Takes this start's mark of a holder it made (identity_userns_enter passes it in the environment
 * across the re-execution) out of the environment: call it first thing, before any child starts. */
void identity_userns_made(void);

/* Once the start holds its state directory: the holder it made, in <state-dir>/userns-holder for
 * the next start to join. 0, or -1 with err. */
int identity_userns_keep(const struct config *c, struct sb_err *err);

/* A start that failed in a namespace it made: its holder ended (nothing else is in it). */
void identity_userns_abandon(const struct config *c);

/* A control peer's host uid: in the namespace the manager's own user is 0 there (SO_PEERCRED). */
uid_t identity_userns_host_uid(const struct config *c, uid_t uid);

/* Under a root manager (or as root of the subuid namespace) each process sandbox's init walks from /
 * to the host paths its view is made of as the manager's uid (0) without any capability over the
 * host's files (sandbox_init.c sources_open()): every directory on path must be searchable by uid
 * 0 as a file mode says, root's own or open to others. Said at start, not at the first call. 0, or
 * -1 with err naming the directory and the fix. */
int identity_ids_walkable(const char *path, struct sb_err *err);

/* The ids of the manager's own volume probe (sandbox_probe.c): the range's first, no identity's. */
struct workspace_owner identity_ids_probe(const struct config *c);

#endif
