/* The one UTF-8 check (see utf8.h). */
#include "utf8.h"

#include <string.h>

size_t utf8_seq_len(const uint8_t *p, size_t avail)
{
	uint8_t b = p[0];
	size_t n;
	uint32_t cp;

	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF)
		n = 2, cp = b & 0x1F;
	else if (b >= 0xE0 && b <= 0xEF)
		n = 3, cp = b & 0x0F;
	else if (b >= 0xF0 && b <= 0xF4)
		n = 4, cp = b & 0x07;
	else
		return 0; /* a continuation byte, 0xC0/0xC1 (always overlong), or above U+10FFFF's lead */
	if (avail < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3F);
	}
	if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
		return 0;
	return n;
}

bool utf8_valid(const void *s, size_t len)
{
	const uint8_t *p = s;

	for (size_t i = 0, k; i < len; i += k)
		if ((k = utf8_seq_len(p + i, len - i)) == 0)
			return false;
	return true;
}

bool utf8_valid_str(const char *s)
{
	return utf8_valid(s, strlen(s));
}
