/* The one copy of scope-bound cleanup (STYLE.md, after bubblewrap and crun): a variable marked
 * cleanup_free, cleanup_close, cleanup_fclose, cleanup_closedir or cleanup_json is released when its scope ends, on every path, and
 * steal_pointer / steal_fd hand ownership on so the old owner releases nothing. No allocation and
 * no locks; close keeps errno, so a failure's errno survives the cleanup of its scope. */
#ifndef SB_CLEANUP_H
#define SB_CLEANUP_H

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static inline void cleanup_closep(const int *fd)
{
	int saved = errno;

	if (*fd >= 0)
		close(*fd);
	errno = saved;
}

static inline void cleanup_fclosep(FILE **f)
{
	int saved = errno;

	if (*f != NULL)
		fclose(*f);
	errno = saved;
}

static inline void cleanup_closedirp(DIR **d)
{
	int saved = errno;

	if (*d != NULL)
		closedir(*d);
	errno = saved;
}

#define cleanup_free __attribute__((cleanup(cleanup_freep)))
#define cleanup_fclose __attribute__((cleanup(cleanup_fclosep)))  /* a stream only read: nothing to flush */
#define cleanup_closedir __attribute__((cleanup(cleanup_closedirp)))
#define cleanup_close __attribute__((cleanup(cleanup_closep)))
#define cleanup_json __attribute__((cleanup(json_decrefp))) /* jansson's own helper */

static inline void *cleanup_steal(void *pp)
{
	void **p = pp;
	void *v = *p;

	*p = NULL;
	return v;
}

/* *pp handed on, *pp cleared; typed like *pp, so a wrong owner does not compile quietly. */
#define steal_pointer(pp) ((__typeof__(*(pp)))cleanup_steal(pp))

/* *fd handed on, *fd set to -1. */
static inline int steal_fd(int *fd)
{
	int v = *fd;

	*fd = -1;
	return v;
}

#endif
