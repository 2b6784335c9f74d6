/* The one copy of the name rules both programs check before a name reaches a path, a message or
 * an environment: exec ids (a file name in the receipt and journal directories) and environment
 * variable names. Pure functions; no allocation, safe anywhere. */
#ifndef SB_NAMES_H
#define SB_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define EXEC_ID_MAX 64   /* bytes, without the NUL */
#define ENV_NAME_MAX 255 /* bytes, without the '=' */

/* A safe single path component: 1 to max bytes of [A-Za-z0-9._-], not starting with '.' (no ".",
 * "..", hidden or temporary names) nor '-' (never read as an option). Any other byte, a '/', a NUL
 * inside or a byte >= 0x80, makes it invalid. */
bool name_component_valid(const char *s, size_t max);

/* An exec id: name_component_valid(id, EXEC_ID_MAX). NULL is invalid. */
bool exec_id_valid(const char *id);

/* An environment variable name of len bytes (name need not be NUL-terminated there: "NAME=value"
 * passes len up to the '='): 1 to ENV_NAME_MAX bytes of [A-Za-z0-9_], not starting with a digit.
 * The shell's rule, so every name set is one a command can read back. */
bool env_name_valid(const char *name, size_t len);

#endif
