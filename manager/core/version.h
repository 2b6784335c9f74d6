/* The manager's version: what `version` prints, the MCP server announces, and status and the
 * metrics' build_info report. */
#ifndef SB_MANAGER_VERSION_H
#define SB_MANAGER_VERSION_H

#define SB_VERSION "0.1.0"

#endif
