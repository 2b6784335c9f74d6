/* The exec result's escaping rule, both ways, and JSON for a terminal (see textesc.h). */
#include "textesc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"
#include "random.h"
#include "utf8.h"

/* The code point of the valid UTF-8 sequence of n bytes at p. */
static uint32_t seq_code_point(const uint8_t *p, size_t n)
{
	static const uint8_t lead_mask[] = { 0, 0x7F, 0x1F, 0x0F, 0x07 };
	uint32_t cp = p[0] & lead_mask[n];

	for (size_t i = 1; i < n; i++)
		cp = cp << 6 | (p[i] & 0x3F);
	return cp;
}

/* A character a terminal acts on, leaving newline and tab, which text needs and which move only the
 * cursor's line and column. C0 and DEL: cursor moves, erasing, ESC's sequences; C1: U+009B is CSI and
 * U+009D OSC on a terminal that reads UTF-8 C1; the bidi formatting characters reorder what is shown
 * (a command that prints U+202E makes "txt.exe" look like "exe.txt"); U+2028/U+2029 end a line in
 * JavaScript and in some viewers, where JSON does not. */
static bool code_point_acts(uint32_t cp)
{
	if (cp == '\n' || cp == '\t')
		return false;
	if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F))
		return true;
	return cp == 0x061C || cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) ||
	       (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029;
}

size_t textesc_plain_len(const uint8_t *p, size_t avail)
{
	size_t n = utf8_seq_len(p, avail);

	return n == 0 || code_point_acts(seq_code_point(p, n)) ? 0 : n;
}

static bool text_plain(const uint8_t *in, size_t len)
{
	for (size_t i = 0, n; i < len; i += n)
		if ((n = textesc_plain_len(in + i, len - i)) == 0)
			return false;
	return true;
}

/* The escaped form of in into out (room for 4 bytes per byte: "\xNN" is the longest); returns its
 * length. A sequence that is not plain is escaped byte by byte, so the decoder needs no UTF-8. */
static size_t escape_all(const uint8_t *in, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	char *w = out;

	for (size_t i = 0, n; i < len; i += n) {
		n = textesc_plain_len(in + i, len - i);
		if (n == 0) {
			n = utf8_seq_len(in + i, len - i) ?: 1;
			for (size_t k = 0; k < n; k++) {
				*w++ = '\\', *w++ = 'x';
				*w++ = hex[in[i + k] >> 4], *w++ = hex[in[i + k] & 0xF];
			}
		} else if (in[i] == '\\') {
			*w++ = '\\', *w++ = '\\';
		} else {
			memcpy(w, in + i, n);
			w += n;
		}
	}
	return (size_t)(w - out);
}

char *textesc_encode(const uint8_t *in, size_t len, size_t *out_len, bool *escaped)
{
	char *out;

	*escaped = !text_plain(in, len);
	out = malloc(*escaped ? 4 * len + 1 : len + 1);
	if (out == NULL)
		return NULL;
	if (*escaped) {
		*out_len = escape_all(in, len, out);
	} else {
		memcpy(out, in, len);
		*out_len = len;
	}
	out[*out_len] = '\0';
	return out;
}

char *textesc_str(const char *s)
{
	size_t len;
	bool escaped;

	return s ? textesc_encode((const uint8_t *)s, strlen(s), &len, &escaped) : NULL;
}

size_t textesc_decode(const char *text, size_t len, uint8_t *out)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (text[i] == '\\' && i + 1 < len && text[i + 1] == '\\') {
			out[n++] = '\\';
			i++;
		} else if (text[i] == '\\' && i + 3 < len && text[i + 1] == 'x' && sb_hex_value(text[i + 2]) >= 0 &&
			   sb_hex_value(text[i + 3]) >= 0) {
			out[n++] = (uint8_t)(sb_hex_value(text[i + 2]) << 4 | sb_hex_value(text[i + 3]));
			i += 3;
		} else {
			out[n++] = (uint8_t)text[i];
		}
	}
	return n;
}

size_t textesc_token_len(const char *text, size_t len, size_t i, bool escaped)
{
	size_t k;

	if (escaped && text[i] == '\\' && i + 1 < len && text[i + 1] == '\\')
		return 2;
	if (escaped && text[i] == '\\' && i + 3 < len && text[i + 1] == 'x' && sb_hex_value(text[i + 2]) >= 0 &&
	    sb_hex_value(text[i + 3]) >= 0)
		return 4;
	k = utf8_seq_len((const uint8_t *)text + i, len - i);
	return k ? k : 1;
}

/* The code point a terminal must not meet raw at p, or 0 for a sequence that goes out as it is.
 * Outside strings jansson writes only ASCII punctuation, digits, letters and whitespace, so every
 * acting character above U+001F is inside a string, where \uXXXX means that very character (all of
 * them are in the BMP). C0 is left alone: inside a string jansson has escaped it already, outside it
 * is JSON_INDENT's newlines and spaces. jansson writes only valid UTF-8; a byte that were not would
 * go out as U+FFFD rather than raw. */
static uint32_t json_acting(const uint8_t *p, size_t avail, size_t *n)
{
	uint32_t cp;

	if ((*n = utf8_seq_len(p, avail)) == 0) {
		*n = 1;
		return 0xFFFD;
	}
	cp = seq_code_point(p, *n);
	return cp >= 0x20 && code_point_acts(cp) ? cp : 0;
}

/* jansson's output with each acting character written as \uXXXX. */
static char *json_guard(const char *text)
{
	size_t len = strlen(text), need = len, n;
	char *out, *w;

	for (size_t i = 0; i < len; i += n)
		if (json_acting((const uint8_t *)text + i, len - i, &n) != 0)
			need += 6 - n;
	if ((out = malloc(need + 1)) == NULL)
		return NULL;
	w = out;
	for (size_t i = 0; i < len; i += n) {
		uint32_t cp = json_acting((const uint8_t *)text + i, len - i, &n);

		if (cp != 0) {
			w += sprintf(w, "\\u%04X", (unsigned)cp); /* as jansson writes its own */
		} else {
			memcpy(w, text + i, n);
			w += n;
		}
	}
	*w = '\0';
	return out;
}

char *textesc_json_dumps(const json_t *j, size_t flags)
{
	char *text = sb_json_dumps(j, flags, NULL), *out;

	if (text == NULL)
		return NULL;
	out = json_guard(text);
	free(text);
	return out;
}
