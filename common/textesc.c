/* The exec result's escaping rule, read back (see textesc.h). */
#include "textesc.h"

#include "random.h"
#include "utf8.h"

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
