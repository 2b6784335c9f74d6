/* The terminal-safe summary of live output (live_summary.h). Pure: no I/O. */
#include "live_summary.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "textesc.h"

/* Past an escape sequence that starts at raw[i] (ESC): CSI to its final byte, else ESC and one more. */
static size_t escape_skip(const uint8_t *raw, size_t n, size_t i)
{
	if (i + 1 < n && raw[i + 1] == '[') {
		for (i += 2; i < n && !(raw[i] >= 0x40 && raw[i] <= 0x7e); i++) {
		}
		return i < n ? i + 1 : n;
	}
	return i + 2 < n ? i + 2 : n;
}

/* raw[from..to) into out, only what a terminal does not act on, capped without cutting a sequence. */
static size_t line_clean(const uint8_t *raw, size_t from, size_t to, char *out)
{
	size_t o = 0, i = from;

	while (i < to) {
		size_t k = textesc_plain_len(raw + i, to - i);

		if (raw[i] == 0x1b) {
			i = escape_skip(raw, to, i);
		} else if (k == 0) {
			i++; /* a control or a byte that is not UTF-8: dropped */
		} else if (o + k > LIVE_SUMMARY_MAX) {
			break;
		} else {
			memcpy(out + o, raw + i, k);
			if (k == 1 && out[o] == '\t')
				out[o] = ' ';
			o += k;
			i += k;
		}
	}
	/* Only blanks is nothing to show. */
	while (o > 0 && out[o - 1] == ' ')
		o--;
	out[o] = '\0';
	return o;
}

bool live_summary_take(char summary[LIVE_SUMMARY_MAX + 1], const char *text, size_t len, bool escaped)
{
	uint8_t *raw = malloc(len + 1);
	char line[LIVE_SUMMARY_MAX + 1];
	size_t n, end, start;
	bool changed = false;

	if (raw == NULL)
		return false;
	if (escaped) {
		n = textesc_decode(text, len, raw);
	} else {
		memcpy(raw, text, len);
		n = len;
	}
	/* From the end: each line, newest first, until one has something to show (a carriage return ends
	 * a line too: a progress bar's newest state is after its last one). */
	for (end = n; end > 0 && !changed;) {
		for (start = end; start > 0 && raw[start - 1] != '\n' && raw[start - 1] != '\r'; start--) {
		}
		if (line_clean(raw, start, end, line) > 0) {
			memcpy(summary, line, strlen(line) + 1);
			changed = true;
		}
		end = start > 0 ? start - 1 : 0;
	}
	free(raw);
	return changed;
}
