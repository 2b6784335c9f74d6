/* The MCP tool result's text, shaped for a model (see mcp_shape.h). Every length here is in
 * bytes of the result's text: a limit in bytes is also a bound on characters. */
#include "mcp_shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "textesc.h"

#define SHAPE_RESERVE 2048   /* of a limit, for everything but the streams: labels, notes, outcome */
#define LINE_WINDOW_MAX 2000 /* how far a cut moves to reach a line end */
#define WHY_MAX 300          /* of the reason the output was not kept, in a marker */

size_t mcp_shape_budget(size_t limit)
{
	return limit - (limit / 4 < SHAPE_RESERVE ? limit / 4 : SHAPE_RESERVE);
}

/* The length of the character (or, in escaped text, the escape) at i: cuts fall between them. The
 * escapes are read as common/textesc.c reads them, left to right. */
static size_t token_len(const struct mcp_stream *s, size_t i)
{
	return textesc_token_len(s->text, s->len, i, s->escaped);
}

static size_t line_window(size_t n)
{
	return n / 4 < LINE_WINDOW_MAX ? n / 4 : LINE_WINDOW_MAX;
}

/* Where the head ends: at most want bytes, after a newline when one is near the end. */
static size_t head_end(const struct mcp_stream *s, size_t want)
{
	size_t i = 0, line = 0;

	while (i < s->len && i + token_len(s, i) <= want) {
		i += token_len(s, i);
		if (s->text[i - 1] == '\n')
			line = i;
	}
	return line > 0 && i - line <= line_window(want) ? line : i;
}

/* Where the tail starts: at or after from, at most want bytes before the end, just after a
 * newline when one is near the start. */
static size_t tail_start(const struct mcp_stream *s, size_t from, size_t want)
{
	size_t i = from, first = s->len > want ? s->len - want : 0;
	const char *nl;

	while (i < s->len && i < first)
		i += token_len(s, i);
	nl = i < s->len ? memchr(s->text + i, '\n', s->len - i) : NULL;
	if (nl != NULL && (size_t)(nl - (s->text + i)) < line_window(want) && nl + 1 < s->text + s->len)
		return (size_t)(nl + 1 - s->text);
	return i;
}

/* The note after a stream the agent cut or escaped (the exec result's rule, docs/operations.md). */
static int note_format(char *buf, size_t cap, const struct mcp_stream *s)
{
	if (!s->truncated && !s->escaped)
		return buf[0] = '\0', 0;
	return snprintf(buf, cap, "[%s: %lld bytes%s%s]\n", s->name, s->bytes,
			s->truncated ? ", only the start and the end shown" : "",
			s->escaped ? ", not all text: each byte that is not UTF-8, each NUL and each byte of a control "
				     "or bidi character is shown as \\xNN and a backslash as \\\\" : "");
}

/* The marker between a cut stream's head and tail. */
static int marker_format(char *buf, size_t cap, const struct mcp_stream *s, size_t omitted, const char *why)
{
	if (s->kept != NULL)
		return snprintf(buf, cap, "[... %zu bytes omitted: %s (%s, %lld bytes) in %s ...]\n", omitted,
				s->truncated ? "the output the manager kept, its start and end" : "whole output", s->name,
				s->bytes, s->kept);
	if (why != NULL) {
		size_t n = strlen(why) < WHY_MAX ? strlen(why) : WHY_MAX;

		/* Cut between characters: the text must stay UTF-8. */
		while (n > 0 && ((unsigned char)why[n] & 0xC0) == 0x80)
			n--;
		return snprintf(buf, cap, "[... %zu bytes omitted (%s, %lld bytes); the whole output could not be kept: "
				"%.*s ...]\n", omitted, s->name, s->bytes, (int)n, why);
	}
	return snprintf(buf, cap, "[... %zu bytes omitted (%s, %lld bytes); the whole output was not kept ...]\n",
			omitted, s->name, s->bytes);
}

/* What a stream adds besides the share of its text it shows: label, note, and, when cut, the
 * marker (its longest: every byte omitted) and the newlines around head and tail. */
static size_t stream_overhead(const struct mcp_stream *s, const char *why, char *note, size_t note_cap)
{
	char marker[4096];
	int n = note_format(note, note_cap, s), m = marker_format(marker, sizeof marker, s, s->len, why);

	if (s->len == 0)
		return (size_t)n;
	return (strcmp(s->name, "stdout") == 0 ? 0 : strlen("[stderr]\n")) + (size_t)n + (size_t)(m > 0 ? m : 0) + 3;
}

/* One stream's text within share: whole, or its head, the marker line and its tail. */
static void stream_body(FILE *f, const struct mcp_stream *s, const char *why, size_t share)
{
	char marker[4096];
	size_t head, tail;

	if (s->len <= share) {
		fwrite(s->text, 1, s->len, f);
		return;
	}
	head = head_end(s, share * 2 / 5);
	tail = tail_start(s, head, share - head);
	fwrite(s->text, 1, head, f);
	if (head > 0 && s->text[head - 1] != '\n')
		fputc('\n', f);
	marker_format(marker, sizeof marker, s, tail - head, why);
	fputs(marker, f);
	fwrite(s->text + tail, 1, s->len - tail, f);
}

void mcp_shape_shares(const struct mcp_stream s[2], const char *kept_error, const char *outcome, size_t limit,
		      size_t share[2])
{
	char note[512];
	size_t fixed = stream_overhead(&s[0], kept_error, note, sizeof note) +
		       stream_overhead(&s[1], kept_error, note, sizeof note) + strlen(outcome);
	size_t budget = mcp_shape_budget(limit), room = limit > fixed ? limit - fixed : 0;

	share[0] = s[0].len;
	share[1] = s[1].len;
	if (s[0].len + s[1].len <= budget)
		return;
	room = room < budget ? room : budget;
	/* Half each, unless one needs less: then the other has the rest. */
	share[0] = s[0].len <= room / 2 ? s[0].len : s[1].len <= room / 2 ? room - s[1].len : room / 2;
	share[1] = room - share[0];
}

/* The text of a memstream, closed: write errors of a memstream surface at fclose. NULL then. */
static char *memstream_text(FILE *f, char **text)
{
	if (fclose(f) != 0) {
		free(*text);
		return NULL;
	}
	return *text;
}

char *mcp_shape_stream(const struct mcp_stream *s, size_t share, const char *kept_error, size_t *len)
{
	char *text = NULL;
	FILE *f = open_memstream(&text, len);

	if (f == NULL)
		return NULL;
	stream_body(f, s, kept_error, share);
	return memstream_text(f, &text);
}

char *mcp_shape(const struct mcp_stream s[2], const char *kept_error, const char *outcome, size_t limit,
		size_t *len)
{
	char note[512], *text = NULL;
	size_t share[2];
	FILE *f;

	mcp_shape_shares(s, kept_error, outcome, limit, share);
	f = open_memstream(&text, len);
	if (f == NULL)
		return NULL;
	for (int i = 0; i < 2; i++) {
		if (s[i].len > 0 && i == 1)
			fputs("[stderr]\n", f);
		stream_body(f, &s[i], kept_error, share[i]);
		if (s[i].len > 0 && s[i].text[s[i].len - 1] != '\n')
			fputc('\n', f);
		note_format(note, sizeof note, &s[i]);
		fputs(note, f);
	}
	fputs(outcome, f);
	return memstream_text(f, &text);
}
