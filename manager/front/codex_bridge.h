/* `sandbox-manager codex-bridge --session S [--socket PATH] [-- CODEX_COMMAND...]`: a JSON-RPC
 * proxy on stdio between a supervisor and Codex's app-server (its child), which gives every thread
 * the managed `bash` tool, keeps Codex's own shell off, and answers that tool's calls through the
 * daemon's control socket. It never runs a command itself (docs/integrations.md (its Codex section)). */
#ifndef SB_MANAGER_CODEX_BRIDGE_H
#define SB_MANAGER_CODEX_BRIDGE_H

/* Serves until the supervisor's stdin ends and Codex exits; returns Codex's exit code (2 for a
 * usage error, 125 when Codex cannot be started). */
int codex_bridge_serve(int argc, char **argv);

#endif
