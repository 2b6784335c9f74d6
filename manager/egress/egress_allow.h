/* The destinations a sandbox under the network policy `proxy` may reach (issue 28): the allow-list
 * of `serve --egress-allow`, its patterns, their match against a CONNECT target, and the target's
 * resolution in the manager's own network namespace. Pure except egress_resolve (getaddrinfo). */
#ifndef SB_EGRESS_ALLOW_H
#define SB_EGRESS_ALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "error.h"

#define EGRESS_ALLOW_MAX 64          /* patterns in one allow-list */
#define EGRESS_HOST_MAX 253          /* a DNS name's longest text form */
#define EGRESS_PORT_DEFAULT 443

/* One pattern: an exact host (a name or an IP literal, compared as text, lower case), or with
 * suffix a ".domain" that matches the domain's subdomains (never the domain itself, never an IP). */
struct egress_rule {
	char host[EGRESS_HOST_MAX + 1];  /* lower case; for a suffix rule, with its leading '.' */
	bool suffix;
	bool literal;                    /* host is an IPv4 or IPv6 literal */
	uint16_t port;
};

struct egress_allow {
	struct egress_rule rules[EGRESS_ALLOW_MAX];
	size_t n;
};

/* Adds "host[:port]", ".suffix[:port]" or "[v6]:port" (port default 443). -1 (EINVAL) with the
 * rule broken: an empty label, a trailing dot, a character no host name has, a port out of range. */
int egress_allow_add(struct egress_allow *a, const char *pattern, struct sb_err *err);

/* Adds each pattern of words, separated by single spaces (a session's own list as its record keeps
 * it, sessions.c): 0, or -1 with the first broken pattern's rule (nothing added past it). */
int egress_allow_add_words(struct egress_allow *a, const char *words, struct sb_err *err);

/* A CONNECT target "host:port" or "[v6]:port" into host (lower case, EGRESS_HOST_MAX + 1 bytes,
 * brackets removed) and port; the same rules as a pattern's host, and the port is required. */
int egress_target_parse(const char *target, char *host, uint16_t *port, bool *literal, struct sb_err *err);

/* The first rule that admits host:port (from egress_target_parse), or NULL. */
const struct egress_rule *egress_allow_match(const struct egress_allow *a, const char *host, uint16_t port,
					     bool literal);

/* "api.internal:443, .corp.example:443" (cut to len, "none" when empty): for the 403's body. */
void egress_allow_describe(const struct egress_allow *a, char *out, size_t len);

/* The addresses of host:port, admitted by rule, resolved in the manager's network namespace: the
 * first that is not a loopback or unspecified address, unless the rule names that literal address
 * (the manager's own listeners live on its loopback; a name resolving there is refused). */
int egress_resolve(const struct egress_rule *rule, const char *host, uint16_t port, struct sockaddr_storage *out,
		   socklen_t *out_len, struct sb_err *err);

#endif
