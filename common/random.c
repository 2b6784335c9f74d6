/* CSPRNG and hex (see random.h). */
#include "random.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

int sb_random_bytes(void *buf, size_t len, struct sb_err *err)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sb_fail_errno(err, "getrandom");
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

void sb_hex_encode(const uint8_t *in, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0xf];
	}
	out[2 * len] = '\0';
}

int sb_hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int sb_hex_decode(const char *hex, uint8_t *out, size_t out_len, struct sb_err *err)
{
	size_t len = strlen(hex);

	if (len != 2 * out_len)
		return sb_invalid(err, "expected %zu hex digits, got %zu", 2 * out_len, len);
	for (size_t i = 0; i < out_len; i++) {
		int hi = sb_hex_value(hex[2 * i]), lo = sb_hex_value(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return sb_invalid(err, "not a hex digit at position %zu", hi < 0 ? 2 * i : 2 * i + 1);
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int sb_random_hex(char *out, size_t bytes, struct sb_err *err)
{
	uint8_t buf[64];

	if (bytes > sizeof buf)
		return sb_invalid(err, "random id of %zu bytes is too long", bytes);
	if (sb_random_bytes(buf, bytes, err) < 0)
		return -1;
	sb_hex_encode(buf, bytes, out);
	return 0;
}
