/* The allow-list of the egress proxy (egress_allow.h). Host names are compared as lower-case text
 * after a strict check: letters, digits, '-' and '.', no empty label and no trailing dot (so
 * "api.internal." cannot stand for "api.internal", nor "x..y" for anything), and an IP literal
 * only ever matches the same literal listed as such: a suffix never matches an address. Resolution
 * happens in the manager's network namespace; loopback and unspecified addresses are refused
 * unless listed literally, since the manager's own listeners (MCP HTTP, metrics) live there. */
#include "egress_allow.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A DNS name: labels of letters, digits and '-' (1 to 63 each), no leading or trailing '-', joined
 * by single dots; lower-cased in place. */
static bool name_valid(char *s)
{
	size_t label = 0, n = strlen(s);

	if (n == 0 || n > EGRESS_HOST_MAX)
		return false;
	for (size_t i = 0; i <= n; i++) {
		if (s[i] == '.' || s[i] == '\0') {
			if (label == 0 || label > 63 || s[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		s[i] = (char)tolower((unsigned char)s[i]);
		if (!isalnum((unsigned char)s[i]) && !(s[i] == '-' && label > 0))
			return false;
		label++;
	}
	return true;
}

/* An IPv4 dotted quad or an IPv6 address, in the one text form inet_ntop gives (so "::0001" and
 * "::1" are one address); 1: it is one (host rewritten), 0: it is not. */
static int literal_canonical(char *host)
{
	unsigned char a[sizeof(struct in6_addr)];
	char text[INET6_ADDRSTRLEN];
	int af = strchr(host, ':') != NULL ? AF_INET6 : AF_INET;

	if (inet_pton(af, host, a) != 1 || inet_ntop(af, a, text, sizeof text) == NULL)
		return 0;
	snprintf(host, EGRESS_HOST_MAX + 1, "%s", text);
	return 1;
}

/* Any other spelling of an IPv4 address ("2130706433", "127.1", "0x7f000001", "0177.0.0.1") is an
 * address to getaddrinfo (inet_aton's forms), which would reach 127.0.0.1 through it: never a name. */
static bool numeric_only(const char *s)
{
	struct in_addr ignored;

	return strspn(s, "0123456789.") == strlen(s) || inet_aton(s, &ignored) != 0;
}

/* "host:port", "host" (port default, when allowed), "[v6]:port" into host, port, literal. */
static int hostport_split(const char *text, bool port_required, char *host, uint16_t *port, bool *literal,
			  struct sb_err *err)
{
	const char *colon, *h = text;
	size_t hn;
	char *endp;
	unsigned long v = EGRESS_PORT_DEFAULT;

	if (text[0] == '[') {
		const char *close = strchr(text, ']');

		if (close == NULL || (close[1] != '\0' && close[1] != ':'))
			return sb_invalid(err, "'%.300s': an IPv6 literal is written [ADDRESS]:PORT", text);
		h = text + 1;
		hn = (size_t)(close - h);
		colon = close[1] == ':' ? close + 1 : NULL;
	} else {
		colon = strrchr(text, ':');
		hn = colon != NULL ? (size_t)(colon - text) : strlen(text);
	}
	if (colon == NULL && port_required)
		return sb_invalid(err, "'%.300s' names no port (HOST:PORT)", text);
	if (colon != NULL) {
		errno = 0;
		v = strtoul(colon + 1, &endp, 10);
		if (colon[1] < '0' || colon[1] > '9' || *endp != '\0' || errno != 0 || v == 0 || v > 65535)
			return sb_invalid(err, "'%.300s': the port must be 1 to 65535", text);
	}
	if (hn == 0 || hn > EGRESS_HOST_MAX)
		return sb_invalid(err, "'%.300s': the host must be 1 to %d characters", text, EGRESS_HOST_MAX);
	memcpy(host, h, hn);
	host[hn] = '\0';
	*port = (uint16_t)v;
	*literal = literal_canonical(host) == 1;
	if ((text[0] == '[') != (*literal && strchr(host, ':') != NULL))
		return sb_invalid(err, "'%.300s': an IPv6 address goes in brackets, and nothing else does", text);
	if (!*literal && (numeric_only(host) || !name_valid(host)))
		return sb_invalid(err, "'%.300s' is not a host name (letters, digits, '-' and single dots, no trailing "
				  "dot) or an IP address", text);
	return 0;
}

int egress_allow_add(struct egress_allow *a, const char *pattern, struct sb_err *err)
{
	struct egress_rule r = { .suffix = pattern[0] == '.' };

	if (a->n == EGRESS_ALLOW_MAX)
		return sb_invalid(err, "egress-allow: at most %d patterns", EGRESS_ALLOW_MAX);
	if (hostport_split(pattern + (r.suffix ? 1 : 0), false, r.host + (r.suffix ? 1 : 0), &r.port, &r.literal,
			   err) < 0) {
		sb_err_prefix(err, "egress-allow");
		return -1;
	}
	if (r.suffix && r.literal)
		return sb_invalid(err, "egress-allow '%.300s': a suffix pattern names a domain, not an address", pattern);
	if (r.suffix)
		r.host[0] = '.';
	a->rules[a->n++] = r;
	return 0;
}

int egress_allow_add_words(struct egress_allow *a, const char *words, struct sb_err *err)
{
	char pattern[EGRESS_HOST_MAX + 16];

	for (const char *w = words; *w != '\0';) {
		size_t n = strcspn(w, " ");

		if (n == 0 || n >= sizeof pattern)
			return sb_invalid(err, "egress-allow: an empty or overlong pattern in '%.300s'", words);
		memcpy(pattern, w, n);
		pattern[n] = '\0';
		if (egress_allow_add(a, pattern, err) < 0)
			return -1;
		w += n;
		if (*w == ' ' && *++w == '\0')
			return sb_invalid(err, "egress-allow: a trailing space in '%.300s'", words);
	}
	return 0;
}

int egress_target_parse(const char *target, char *host, uint16_t *port, bool *literal, struct sb_err *err)
{
	return hostport_split(target, true, host, port, literal, err);
}

const struct egress_rule *egress_allow_match(const struct egress_allow *a, const char *host, uint16_t port,
					     bool literal)
{
	size_t hn = strlen(host);

	for (size_t i = 0; i < a->n; i++) {
		const struct egress_rule *r = &a->rules[i];
		size_t rn = strlen(r->host);

		if (r->port != port || r->literal != literal)
			continue;
		if (!r->suffix && strcmp(r->host, host) == 0)
			return r;
		/* ".corp.example" admits "a.corp.example", never "corp.example" or "xcorp.example". */
		if (r->suffix && !literal && hn > rn && strcmp(host + hn - rn, r->host) == 0)
			return r;
	}
	return NULL;
}

void egress_allow_describe(const struct egress_allow *a, char *out, size_t len)
{
	size_t used = 0;

	snprintf(out, len, "%s", a->n == 0 ? "none" : "");
	for (size_t i = 0; i < a->n && used < len; i++) {
		const struct egress_rule *r = &a->rules[i];
		bool v6 = r->literal && strchr(r->host, ':') != NULL;
		int w = snprintf(out + used, len - used, "%s%s%s%s:%u", i ? ", " : "", v6 ? "[" : "", r->host, v6 ? "]" : "",
				 r->port);

		if (w < 0)
			break;
		used += (size_t)w;
	}
}

/* 127.0.0.0/8, ::1, 0.0.0.0, ::, and IPv4-mapped forms of them. */
static bool address_local(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		uint32_t v = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);

		return (v >> 24) == 127 || v == 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *v6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_LOOPBACK(v6) || IN6_IS_ADDR_UNSPECIFIED(v6))
			return true;
		return IN6_IS_ADDR_V4MAPPED(v6) && (v6->s6_addr[12] == 127 || (v6->s6_addr[12] | v6->s6_addr[13] |
									v6->s6_addr[14] | v6->s6_addr[15]) == 0);
	}
	return true; /* not an IP address: never a destination */
}

int egress_resolve(const struct egress_rule *rule, const char *host, uint16_t port, struct sockaddr_storage *out,
		   socklen_t *out_len, struct sb_err *err)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
	char service[8];
	int rc;

	/* A literal is never looked up: it is the address the rule names. */
	hints.ai_flags = rule->literal ? AI_NUMERICHOST : 0;
	snprintf(service, sizeof service, "%u", port);
	rc = getaddrinfo(host, service, &hints, &res);
	if (rc != 0)
		return sb_refuse(err, EHOSTUNREACH, "%.253s does not resolve: %s", host, gai_strerror(rc));
	for (ai = res; ai != NULL; ai = ai->ai_next)
		if ((rule->literal || !address_local(ai->ai_addr)) && ai->ai_addrlen <= sizeof *out)
			break;
	if (ai == NULL) {
		freeaddrinfo(res);
		return sb_refuse(err, EACCES, "%.253s resolves only to loopback or unspecified addresses, where the "
				 "manager's own listeners are (allowed only when listed as that address)", host);
	}
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	*out_len = ai->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}
