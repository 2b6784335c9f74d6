/* Who may use the control API over TLS (docs/operations.md, "The control API across hosts"): the
 * principals file (each principal's identities, whether it is an operator, its connection bound)
 * and the deny list of revoked certificate serials and principals, reloaded when it changes. Never
 * grants anything a file does not say; a deny list that cannot be read denies every connection. */
#ifndef SB_PRINCIPALS_H
#define SB_PRINCIPALS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define PRINCIPALS_MAX 1024
#define PRINCIPAL_IDENTITIES_MAX 64
#define PRINCIPAL_LIST_MAX 32         /* repos prefixes, resources */
#define PRINCIPAL_CONNS_DEFAULT 8u   /* open TLS connections a principal may hold at once */
#define PRINCIPAL_CONNS_MAX 256u
#define DENY_ENTRIES_MAX 65536
#define DENY_RECHECK_MS 1000         /* the file is looked at again at most this often */

struct principal {
	char name[64];
	bool operator;                   /* resolve, status, metrics, every identity's sessions */
	unsigned max_conns;
	size_t n_identities;
	char identities[PRINCIPAL_IDENTITIES_MAX][65];
	size_t n_repos;                  /* where its sessions' repositories may come from: prefixes */
	char repos[PRINCIPAL_LIST_MAX][256]; /* of the repo as given; default "https://" alone */
	size_t n_resources;              /* the resources it may grant its sessions; default none */
	char resources[PRINCIPAL_LIST_MAX][128];
};

struct principals {
	size_t n;
	struct principal *p;
};

/* {"NAME": {"identities": ["alice", ...], "operator": false, "max_connections": 8, "repos":
 * ["https://git.example/"], "resources": ["k8s-dev"]}, ...}: every
 * key checked, unknown ones refused (a misspelt "operator" must not silently grant less or more). */
int principals_parse(const json_t *obj, struct principals *out, struct sb_err *err);
int principals_load(const char *path, struct principals *out, struct sb_err *err);
void principals_free(struct principals *ps);
/* NULL: not in the file, so nothing is allowed. */
const struct principal *principals_find(const struct principals *ps, const char *name);
/* An operator drives every identity; anyone else those listed. */
bool principal_may_drive(const struct principal *p, const char *identity);
/* A repository (as session create names it) p may use: an operator any; anyone else one that
 * starts with one of its prefixes and has no ".." segment. */
bool principal_may_use_repo(const struct principal *p, const char *repo);
/* A resource p may grant its sessions: an operator any; anyone else those listed. */
bool principal_may_grant(const struct principal *p, const char *resource);

struct deny_list;

/* path "" : an empty list that never changes. The file is read now (a bad one is an error at start). */
int deny_list_open(const char *path, struct deny_list **out, struct sb_err *err);
void deny_list_free(struct deny_list *d);
/* The file's text: lines "serial HEX" (colons allowed, any case, leading zeros ignored) or
 * "principal NAME"; '#' starts a comment. Fills the list's entries; -1 on the first bad line. */
int deny_list_parse(struct deny_list *d, const char *text, struct sb_err *err);
/* true when principal or serial is denied; reloads the file first when it changed (looked at no
 * more than every DENY_RECHECK_MS). A file that became unreadable or bad denies everything until
 * it is fixed (logged once per change). Thread-safe. */
bool deny_list_denies(struct deny_list *d, const char *principal, const char *serial);

#endif
