/* The text of the MCP bash tool's result, shaped for a model (mcp.c): at most about `limit` bytes,
 * each stream that does not fit cut to its head and tail with a marker that says how much was left
 * out and where the whole output can be read inside the sandbox. Pure: bytes and a limit in, text
 * out; no I/O, nothing global. */
#ifndef SB_MCP_SHAPE_H
#define SB_MCP_SHAPE_H

#include <stdbool.h>
#include <stddef.h>

#define MCP_OUTPUT_CHARS_DEFAULT 30000
#define MCP_OUTPUT_CHARS_MIN 500
#define MCP_OUTPUT_CHARS_MAX (4u * 1024u * 1024u)

/* One stream of an exec result. */
struct mcp_stream {
	const char *name;   /* "stdout" or "stderr" */
	const char *text;   /* its text in the result (valid UTF-8; escaped when `escaped`) */
	size_t len;
	long long bytes;    /* the stream's whole size (<name>_bytes) */
	bool truncated;     /* the agent kept only its start and end (<name>_truncated) */
	bool escaped;       /* bytes that are not text are shown as \xNN (<name>_escaped) */
	const char *kept;   /* where the whole text's bytes are, as the sandbox sees it, or NULL */
};

/* The streams' share of a limit: they are shown whole while their text together is at most this,
 * and cut beyond it. The exec asks the manager to keep the whole output beyond the same number
 * (keep_output, control.h), so a cut stream always has its file or a reason why not. */
size_t mcp_shape_budget(size_t limit);

/* The tool's text: stdout; "[stderr]" and stderr; a note after a stream the agent cut or escaped;
 * and `outcome`, the last line (no newline after it). Streams within the budget are shown whole
 * (as they always were); otherwise the space left by every other part is shared between the two
 * (neither gets less than half unless it needs less), and a stream that does not fit its share
 * keeps its first 40% and last 60%, cut between UTF-8 characters (and escapes) and at a line end
 * when one is near, with a marker line between. The whole text is then at most `limit` bytes,
 * unless the other parts alone are longer. kept_error: why the output was not kept (NULL when no
 * reason was given). Returns the text (malloc, NUL-terminated) and its length in *len, or NULL when
 * out of memory. */
char *mcp_shape(const struct mcp_stream s[2], const char *kept_error, const char *outcome, size_t limit,
		size_t *len);

/* The parts of mcp_shape, for the structured result: each stream's share of the text (its whole
 * length when the streams fit the budget), and one stream's text within its share (whole, or its
 * head, the marker line and its tail). NULL when out of memory. */
void mcp_shape_shares(const struct mcp_stream s[2], const char *kept_error, const char *outcome, size_t limit,
		      size_t share[2]);
char *mcp_shape_stream(const struct mcp_stream *s, size_t share, const char *kept_error, size_t *len);

#endif
