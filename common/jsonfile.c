/* JSON files, close-on-exec (see jsonfile.h). */
#include "jsonfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

json_t *sb_json_load_path(const char *path, size_t flags, json_error_t *jerr)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	json_t *obj;

	if (fd < 0) {
		memset(jerr, 0, sizeof *jerr);
		snprintf(jerr->text, sizeof jerr->text, "unable to open %s: %s", path, strerror(errno));
		return NULL;
	}
	obj = json_loadfd(fd, flags, jerr);
	close(fd);
	return obj;
}
