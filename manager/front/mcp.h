/* `sandbox-manager mcp --session S [--socket PATH]`: the Bash tool for agent frameworks, an MCP
 * server on stdio bound to one session. It only speaks to the daemon's control socket and never
 * runs a command itself (docs/operations.md, "The MCP Bash tool"). */
#ifndef SB_MANAGER_MCP_H
#define SB_MANAGER_MCP_H

/* Serves until stdin ends; returns the exit code (0, or 2 for a usage error). */
int mcp_serve(int argc, char **argv, const char *version);

#endif
