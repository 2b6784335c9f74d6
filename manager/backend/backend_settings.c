/* The backends' shared settings (backend_internal.h): defaults and checks every constructor
 * applies the same way. Never reads a runtime or the records. */
#include "backend_internal.h"
#include "backend.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

void backend_sizes_default(int64_t *tmp_bytes, int64_t *shm_bytes)
{
	if (*tmp_bytes <= 0)
		*tmp_bytes = SANDBOX_TMP_BYTES_DEFAULT;
	if (*shm_bytes <= 0)
		*shm_bytes = SANDBOX_SHM_BYTES_DEFAULT;
}

void backend_limits_configured(struct sandbox_limits *out, int64_t tmp_bytes, int64_t shm_bytes, int64_t memory_bytes,
			       int64_t pids, int64_t nano_cpus)
{
	*out = (struct sandbox_limits){ .tmp_bytes = tmp_bytes, .shm_bytes = shm_bytes,
					.memory_max = memory_bytes > 0 ? memory_bytes : -1,
					.pids_max = pids > 0 ? pids : -1,
					.cpu_quota_us = nano_cpus > 0 ? nano_cpus / 10000 : -1,
					.cpu_period_us = nano_cpus > 0 ? 100000 : -1 };
}

int backend_image_check(const char *image, struct sb_err *err)
{
	for (const char *c = image; *c != '\0'; c++)
		if (!isalnum((unsigned char)*c) && strchr("._-/:@", *c) == NULL)
			return sb_invalid(err, "config: image '%s' is not an image reference", image);
	return 0;
}

static const char *const network_names[] = { [SANDBOX_NETWORK_OPEN] = "open", [SANDBOX_NETWORK_NONE] = "none",
							     [SANDBOX_NETWORK_PROXY] = "proxy" };

const char *sandbox_network_name(enum sandbox_network n)
{
	return (size_t)n < sizeof network_names / sizeof network_names[0] ? network_names[n] : "?";
}

int sandbox_network_parse(const char *word, enum sandbox_network *out)
{
	for (size_t i = 0; word != NULL && i < sizeof network_names / sizeof network_names[0]; i++)
		if (strcmp(word, network_names[i]) == 0) {
			*out = (enum sandbox_network)i;
			return 0;
		}
	return -1;
}
