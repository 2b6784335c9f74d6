/* Name rules (see names.h). Byte tests, not <ctype.h>: the locale must never widen what passes. */
#include "names.h"

#include <string.h>

static bool alnum_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool name_component_valid(const char *s, size_t max)
{
	size_t n;

	if (s == NULL || s[0] == '.' || s[0] == '-')
		return false;
	for (n = 0; s[n] != '\0'; n++) {
		unsigned char c = (unsigned char)s[n];

		if (n >= max || !(alnum_byte(c) || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return n > 0;
}

bool exec_id_valid(const char *id)
{
	return name_component_valid(id, EXEC_ID_MAX);
}

bool env_name_valid(const char *name, size_t len)
{
	if (name == NULL || len == 0 || len > ENV_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!(alnum_byte(c) || c == '_'))
			return false;
	}
	return true;
}
