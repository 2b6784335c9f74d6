/* The request head of a sandbox's connection to its egress proxy (egress_head.h): the request line
 * (RFC 9112 section 3) and header fields (section 5), by their grammar and within fixed bounds.
 * The bytes come from a command, so everything is untrusted: nothing is copied without a bound, a
 * field's value is checked and dropped (a CONNECT needs none), and whatever the grammar does not
 * allow (a bare LF, obs-fold, a NUL, a control byte) ends the connection rather than being mended. */
#include "egress_head.h"

#include <errno.h>
#include <string.h>

/* RFC 9110 section 5.6.2: tchar. */
static int tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The end of the head: the offset just past the first CRLF CRLF in p[0..n), or 0. */
static size_t head_end(const char *p, size_t n)
{
	for (size_t i = 3; i < n; i++)
		if (p[i - 3] == '\r' && p[i - 2] == '\n' && p[i - 1] == '\r' && p[i] == '\n')
			return i + 1;
	return 0;
}

/* Copies the run of bytes at *p accepted by ok into out (at most max, NUL-terminated), up to stop;
 * the length, or -1 when it is empty, too long, or ends on anything but stop. */
static int take(const char **p, const char *end, int (*ok)(unsigned char), char stop, char *out, size_t max)
{
	size_t n = 0;

	while (*p < end && **p != stop) {
		if (!ok((unsigned char)**p) || n >= max)
			return -1;
		out[n++] = **p;
		(*p)++;
	}
	if (n == 0 || *p >= end)
		return -1;
	out[n] = '\0';
	(*p)++; /* the stop byte */
	return (int)n;
}

static int upper(unsigned char c)
{
	return c >= 'A' && c <= 'Z';
}

static int vchar(unsigned char c)
{
	return c > 0x20 && c < 0x7f;
}

static int request_line(const char **p, const char *end, struct egress_head *h, struct sb_err *err)
{
	if (take(p, end, upper, ' ', h->method, EGRESS_METHOD_MAX) < 0)
		return sb_invalid(err, "the request line does not start with a method (A-Z, at most %d) and a space",
				  EGRESS_METHOD_MAX);
	if (take(p, end, vchar, ' ', h->target, EGRESS_TARGET_MAX) < 0)
		return sb_invalid(err, "the request target is not 1 to %d visible characters followed by a space",
				  EGRESS_TARGET_MAX);
	if (end - *p < 10 || memcmp(*p, "HTTP/1.", 7) != 0 || ((*p)[7] != '0' && (*p)[7] != '1') ||
	    (*p)[8] != '\r' || (*p)[9] != '\n')
		return sb_invalid(err, "the request line does not end with HTTP/1.0 or HTTP/1.1 and CRLF");
	h->minor = (*p)[7] - '0';
	*p += 10;
	return 0;
}

/* One "name: value" CRLF; the value: SP, HTAB, visible characters and obs-text (RFC 9110 5.5). */
static int field_line(const char **p, const char *end, struct sb_err *err)
{
	const char *q = *p;

	while (q < end && tchar((unsigned char)*q))
		q++;
	if (q == *p || q >= end || *q != ':')
		return sb_invalid(err, "a header field does not start with a name and ':' (or continues the "
				  "line before it)");
	for (q++; q < end && *q != '\r'; q++) {
		unsigned char c = (unsigned char)*q;

		if (c != ' ' && c != '\t' && (c < 0x21 || c == 0x7f))
			return sb_invalid(err, "a header field's value holds the control byte 0x%02x", c);
	}
	if (end - q < 2 || q[1] != '\n')
		return sb_invalid(err, "a header field does not end with CRLF");
	*p = q + 2;
	return 0;
}

int egress_head_parse(const char *buf, size_t len, struct egress_head *h, size_t *used, struct sb_err *err)
{
	size_t n = head_end(buf, len < EGRESS_HEAD_MAX ? len : EGRESS_HEAD_MAX);
	const char *p = buf, *end;

	memset(h, 0, sizeof *h);
	if (n == 0)
		return len >= EGRESS_HEAD_MAX ? sb_refuse(err, E2BIG, "the request head is over %d bytes", EGRESS_HEAD_MAX) :
		       0;
	end = buf + n - 2; /* the final CRLF ends the field lines */
	if (request_line(&p, end + 2, h, err) < 0)
		return -1;
	while (p < end) {
		if (h->fields == EGRESS_FIELDS_MAX)
			return sb_refuse(err, E2BIG, "the request head has over %d header fields", EGRESS_FIELDS_MAX);
		if (field_line(&p, end, err) < 0)
			return -1;
		h->fields++;
	}
	*used = n;
	return 1;
}
