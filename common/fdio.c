/* Whole writes to a descriptor (see fdio.h). */
#include "fdio.h"

#include <errno.h>
#include <unistd.h>

int fd_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		/* Never returned for len > 0 by pipes, sockets or files; looping on it would spin. */
		if (n == 0) {
			errno = EPIPE;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
