/* Whole writes to a descriptor. Safe between clone() and execve() (no allocation, no locks),
 * so the namespace inits use it as well as ordinary code. */
#ifndef SB_FDIO_H
#define SB_FDIO_H

#include <stddef.h>

/* All of buf to fd, through EINTR and short writes. 0 once everything is written; -1 with errno
 * set otherwise (EPIPE when the reader is gone and SIGPIPE is ignored, or for a write of 0). */
int fd_write_all(int fd, const void *buf, size_t len);

#endif
