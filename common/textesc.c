/* The exec result's escaping rule, read back (see textesc.h). */
#include "textesc.h"

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

size_t textesc_decode(const char *text, size_t len, uint8_t *out)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (text[i] == '\\' && i + 1 < len && text[i + 1] == '\\') {
			out[n++] = '\\';
			i++;
		} else if (text[i] == '\\' && i + 3 < len && text[i + 1] == 'x' && hex_value(text[i + 2]) >= 0 &&
			   hex_value(text[i + 3]) >= 0) {
			out[n++] = (uint8_t)(hex_value(text[i + 2]) << 4 | hex_value(text[i + 3]));
			i += 3;
		} else {
			out[n++] = (uint8_t)text[i];
		}
	}
	return n;
}
