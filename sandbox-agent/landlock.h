/* Landlock for commands: TCP connect refused on the blocked ports (ABI >= 4) and, where the
 * kernel has scopes (ABI >= 6), no signals and no abstract unix sockets outside the domain.
 * Bookworm's headers predate both, so the uapi pieces are declared in landlock.c. */
#ifndef SB_LANDLOCK_H
#define SB_LANDLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The kernel's Landlock ABI version, or 0 when Landlock is absent or disabled. */
int landlock_abi(void);

/* Restrict the calling process (and everything it will start) for good: connect() to any of
 * ports fails with EACCES, every other port stays open; scopes are added where available.
 * Built once per agent because the rule set is 65,535 rules (ISOLATION.md "Cost"). */
int landlock_restrict_ports(int abi, const uint16_t *ports, size_t n, struct sb_err *err);

/* The cheap per-command layer: the scopes when `scopes` (ABI >= 6) and, in the read-only world, opening
 * for write only beneath the n write_roots (ABI >= 1; nothing when the kernel has no Landlock:
 * `check` says so). No allocation: safe after clone(). Under an agent-wide TCP domain a new layer
 * costs ~12 ms (ISOLATION.md "Cost"): the read-only world pays it when ports are blocked. */
int landlock_restrict_command(int abi, bool scopes, const char *const *write_roots, size_t n, struct sb_err *err);

#endif
