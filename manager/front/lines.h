/* Lines from a descriptor, bounded: the JSON-RPC transports on stdio (mcp.c) and both peers of the
 * Codex bridge (codex_bridge.c) read their messages one line each through this one reader. */
#ifndef SB_LINES_H
#define SB_LINES_H

#include <stddef.h>

/* One line, without its newline (never empty). overlong: it passed the cap, or could not be held
 * (out of memory); its bytes were dropped (line NULL, len 0) and reading goes on. */
typedef void (*lines_fn)(const char *line, size_t len, int overlong);

/* Each line of fd to fn, up to end of file: 0 then; -1 on a read error (errno), with a last line
 * not ended by a newline passed only at end of file. A line over cap bytes (SIZE_MAX: none) is
 * passed as overlong, once, at its newline. */
int lines_read(int fd, size_t cap, lines_fn fn);

/* As lines_read, until stop_fd is readable too (a signalfd): then the lines fd holds already are
 * still passed, read without blocking (up to 1 MiB), and 1 is returned; a line not yet ended by its
 * newline then is dropped (it is not a whole message). 0 at end of file before any stop. */
int lines_read_until(int fd, int stop_fd, size_t cap, lines_fn fn);

#endif
