/* JSON text in one allocation (see json_text.h). */
#include "json_text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "random.h"

char *sb_json_dumps_after(const json_t *j, size_t flags, size_t room, size_t *len)
{
	char scratch[JSON_TEXT_SCRATCH];
	size_t n = json_dumpb(j, scratch, sizeof scratch, flags);
	char *buf;

	/* 0 is json_dumpb's failure, and no JSON text is empty. Past the scratch, the text is written
	 * again into its own room: the first pass only measured it. */
	if (n == 0 || n > SIZE_MAX - room - 1 || (buf = malloc(room + n + 1)) == NULL)
		return NULL;
	if (n <= sizeof scratch)
		memcpy(buf + room, scratch, n);
	else if (json_dumpb(j, buf + room, n, flags) != n) {
		free(buf);
		return NULL;
	}
	buf[room + n] = '\0';
	if (len != NULL)
		*len = n;
	return buf;
}

char *sb_json_dumps(const json_t *j, size_t flags, size_t *len)
{
	return sb_json_dumps_after(j, flags, 0, len);
}

int sb_json_seed(struct sb_err *err)
{
	uint32_t seed = 0; /* jansson keeps 32 bits of it */

	while (seed == 0)
		if (sb_random_bytes(&seed, sizeof seed, err) < 0)
			return -1;
	json_object_seed(seed);
	return 0;
}
