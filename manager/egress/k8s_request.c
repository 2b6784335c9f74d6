/* The Kubernetes request attributes (k8s_request.h): the facts of the API server's RequestInfoFactory
 * (k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), its query decoding (net/url ParseQuery, the
 * bool and field selector conversions of k8s.io/apimachinery) and the grants' decision on them.
 * Pure: no I/O, no threads. Where the server would read a request in a way this code cannot repeat
 * exactly (an empty or dot segment a client library may squash, a NUL), the request is refused. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "k8s_request.h"
#include "random.h"
#include "textesc.h"
#include "utf8.h"

/* The one table from method to verb. A resource request names an object ("get" on pods/web) or a
 * collection (no name: "list" on pods); the server turns a get without a name into list (or watch,
 * by the query) and a delete without a name into deletecollection; POST, PUT and PATCH keep theirs.
 * Any other method has no verb (""): the server answers 405, and a read grant refuses it. */
static const struct method_verb {
	const char *method;
	const char *object;      /* verb with a name */
	const char *collection;  /* verb without one */
} method_verbs[] = {
	{"GET", "get", "list"},
	{"HEAD", "get", "list"},
	{"POST", "create", "create"},
	{"PUT", "update", "update"},
	{"PATCH", "patch", "patch"},
	{"DELETE", "delete", "deletecollection"},
};

/* The legacy prefixes /api/v1/watch/... and /api/v1/proxy/...: the segment is the verb, whatever
 * the method (a POST there is still "watch"; the server answers it 405, a read grant refuses it by
 * its method). proxy takes no subresource: what follows the name is the proxied path. */
static const struct special_verb {
	const char *verb;
	bool subresources;
} special_verbs[] = {
	{"watch", true},
	{"proxy", false},
};

/* Subresources that open a stream into a workload rather than read an object. */
static const char *const upgrade_subresources[] = {"exec", "attach", "portforward", "proxy"};

/* /namespaces/NAME/status and /namespaces/NAME/finalize are the namespace's own subresources, not a
 * namespaced resource (the server's namespaceSubresources). */
static const char *const namespace_subresources[] = {"status", "finalize"};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

struct segments {
	char buf[K8S_REQ_PATH_MAX + 1];  /* the decoded path, each segment NUL-terminated in place */
	const char *seg[K8S_REQ_SEGMENTS_MAX];
	size_t n;
};

static bool in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s, list[i]) == 0)
			return true;
	return false;
}

/* A byte no request target may carry raw (Go's url.Parse refuses them), nor decoded here. */
static bool is_control(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

/* Copy s into a field; a value that does not fit refuses the request (E2BIG) rather than judging a
 * truncated name. */
static int field_set(char *dst, size_t size, const char *s, const char *what, struct sb_err *err)
{
	size_t n = strlen(s);

	if (n >= size)
		return sb_refuse(err, E2BIG, "%s of %zu bytes: over the limit of %zu", what, n, size - 1);
	memcpy(dst, s, n + 1);
	return 0;
}

/* Percent-decode the path as Go's URL.Path does (before the server splits it, so %2F separates
 * segments there too); an escape that is not % and two hex digits is the server's 400, refused. */
static int path_decode(const char *path, size_t len, char *out, size_t *out_len, struct sb_err *err)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)path[i];

		if (c == '%') {
			int hi = i + 2 < len ? sb_hex_value(path[i + 1]) : -1;
			int lo = i + 2 < len ? sb_hex_value(path[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return sb_invalid(err, "invalid percent escape at byte %zu of the path", i);
			c = (unsigned char)(hi << 4 | lo);
			i += 2;
		} else if (c == '?' || c == '#' || c == ' ') {
			return sb_invalid(err, "byte %zu of the path is '%c': the query must come apart", i, c);
		}
		if (c == 0 || is_control(c))
			return sb_invalid(err, "control byte 0x%02x at byte %zu of the path", c, i);
		out[o++] = (char)c;
	}
	out[o] = '\0';
	*out_len = o;
	return 0;
}

/* Split the decoded path on '/' (one leading and one trailing slash trimmed, as the server trims).
 * An empty, "." or ".." segment is refused: the server keeps them as segments, but a client
 * library on the way (libcurl squashes dot segments) could send another path than the one judged. */
static int path_split(struct segments *s, size_t len, struct sb_err *err)
{
	char *p = s->buf + 1;  /* past the leading '/' */

	s->n = 0;
	if (len > 1 && s->buf[len - 1] == '/')
		s->buf[--len] = '\0';
	if (len <= 1)
		return 0;  /* "/": no segment */
	while (p != NULL) {
		char *slash = strchr(p, '/');

		if (slash != NULL)
			*slash = '\0';
		if (*p == '\0' || strcmp(p, ".") == 0 || strcmp(p, "..") == 0)
			return sb_invalid(err, "path segment %zu is \"%s\": an empty or dot segment is refused", s->n + 1, p);
		if (s->n == K8S_REQ_SEGMENTS_MAX)
			return sb_refuse(err, E2BIG, "path of more than %d segments", K8S_REQ_SEGMENTS_MAX);
		s->seg[s->n++] = p;
		p = slash != NULL ? slash + 1 : NULL;
	}
	return 0;
}

static int path_segments(const char *path, size_t len, struct segments *s, struct sb_err *err)
{
	size_t dlen = 0;

	if (len > K8S_REQ_PATH_MAX)
		return sb_refuse(err, E2BIG, "path of %zu bytes: over the limit of %d", len, K8S_REQ_PATH_MAX);
	if (len == 0 || path[0] != '/')
		return sb_invalid(err, "the path does not start with '/'");
	if (path_decode(path, len, s->buf, &dlen, err) < 0)
		return -1;
	return path_split(s, dlen, err);
}

/* Go's QueryUnescape of in[0..len) into out (room for len + 1): '+' is a space, %XX a byte; false
 * for an invalid escape (Go drops that pair). */
static bool query_unescape(const char *in, size_t len, char *out, size_t *out_len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		if (in[i] == '%') {
			int hi = i + 2 < len ? sb_hex_value(in[i + 1]) : -1;
			int lo = i + 2 < len ? sb_hex_value(in[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return false;
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			out[o++] = in[i] == '+' ? ' ' : in[i];
		}
	}
	out[o] = '\0';
	*out_len = o;
	return true;
}

/* The query's parameters this code reads: the first value of watch and of fieldSelector (the
 * server converts the first only), and whether dryRun is present at all. */
struct query_params {
	bool watch_set;
	bool watch;
	bool selector_set;
	char selector[K8S_REQ_QUERY_MAX + 1];
	size_t selector_len;
	bool dry_run;
};

/* Go's strings.EqualFold(s, "false"): ASCII case aside, 's' also folds from U+017F (long s). */
static bool equal_fold_false(const char *s, size_t len)
{
	static const char want[] = "false";
	size_t j = 0;

	for (size_t i = 0; i < len; j++) {
		if (j == 5)
			return false;
		if (want[j] == 's' && i + 1 < len && (unsigned char)s[i] == 0xc5 && (unsigned char)s[i + 1] == 0xbf) {
			i += 2;
			continue;
		}
		if ((s[i] | 0x20) != want[j] || s[i] == '\0')
			return false;
		i++;
	}
	return j == 5;
}

/* One key=value pair (Go: a pair holding ';' is an error and skipped; no '=' means an empty value;
 * a pair whose key or value does not unescape is skipped). */
static void query_pair(const char *pair, size_t len, struct query_params *q, char *key, char *val)
{
	const char *eq = memchr(pair, '=', len);
	size_t klen = eq != NULL ? (size_t)(eq - pair) : len;
	const char *v = eq != NULL ? eq + 1 : pair + len;
	size_t vlen = len - klen - (eq != NULL);
	size_t kout, vout;

	if (memchr(pair, ';', len) != NULL)
		return;
	if (!query_unescape(pair, klen, key, &kout) || !query_unescape(v, vlen, val, &vout))
		return;
	if (strlen(key) != kout)
		return;  /* a key with a NUL is no parameter of ours */
	if (strcmp(key, "watch") == 0 && !q->watch_set) {
		q->watch_set = true;
		q->watch = !((vout == 1 && val[0] == '0') || equal_fold_false(val, vout));
	} else if (strcmp(key, "fieldSelector") == 0 && !q->selector_set) {
		q->selector_set = true;
		memcpy(q->selector, val, vout + 1);
		q->selector_len = vout;
	} else if (strcmp(key, "dryRun") == 0) {
		q->dry_run = true;
	}
}

static int query_parse(const char *query, size_t len, struct query_params *q, struct sb_err *err)
{
	cleanup_free char *key = NULL;
	cleanup_free char *val = NULL;
	size_t i = 0;

	memset(q, 0, sizeof *q);
	if (len > K8S_REQ_QUERY_MAX)
		return sb_refuse(err, E2BIG, "query of %zu bytes: over the limit of %d", len, K8S_REQ_QUERY_MAX);
	for (size_t j = 0; j < len; j++)
		if (query[j] == '\0' || is_control((unsigned char)query[j]) || query[j] == ' ' || query[j] == '#')
			return sb_invalid(err, "byte 0x%02x at byte %zu of the query", (unsigned char)query[j], j);
	key = malloc(len + 1);
	val = malloc(len + 1);
	if (key == NULL || val == NULL)
		return sb_refuse(err, ENOMEM, "out of memory reading the query");
	while (i < len) {
		const char *amp = memchr(query + i, '&', len - i);
		size_t plen = amp != NULL ? (size_t)(amp - (query + i)) : len - i;

		if (plen > 0)
			query_pair(query + i, plen, q, key, val);
		i += plen + 1;
	}
	return 0;
}

/* fields.UnescapeValue: "\\", "\," and "\=" stand for their character; any other escape, a lone
 * backslash at the end, or an unescaped ',' or '=' make the selector invalid. */
static bool selector_unescape(const char *in, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		char c = in[i];

		if (c == '\\') {
			if (i + 1 == len || (in[i + 1] != '\\' && in[i + 1] != ',' && in[i + 1] != '='))
				return false;
			c = in[++i];
		} else if (c == ',' || c == '=') {
			return false;
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return true;
}

/* One term of a field selector: its operator is the first "!=", "==" or "=" in it (fields'
 * splitTerm). *match: it is metadata.name's exact match (= or ==); its unescaped value into value
 * (room for len + 1). false: the term, hence the whole selector, is invalid. */
static bool selector_term(const char *t, size_t len, bool *match, char *value)
{
	for (size_t i = 0; i < len; i++) {
		size_t oplen = 0;
		bool exact = true;

		if (t[i] == '!' && i + 1 < len && t[i + 1] == '=') {
			oplen = 2;
			exact = false;
		} else if (t[i] == '=') {
			oplen = i + 1 < len && t[i + 1] == '=' ? 2 : 1;
		}
		if (oplen == 0)
			continue;
		if (!selector_unescape(t + i + oplen, len - i - oplen, value))
			return false;
		*match = exact && i == strlen("metadata.name") && memcmp(t, "metadata.name", i) == 0;
		return true;
	}
	return false;
}

/* The next term of sel from *pos: up to a ',' no backslash escapes (fields' splitTerms). */
static size_t selector_next(const char *sel, size_t len, size_t *pos)
{
	size_t start = *pos, i = start;

	while (i < len && sel[i] != ',')
		i += sel[i] == '\\' && i + 1 < len ? 2 : 1;
	*pos = i + 1;
	return i - start;
}

/* Go's a < b on strings: bytes compared, a prefix first. */
static bool term_less(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c < 0 || (c == 0 && alen < blen);
}

/* The name list and watch requests name by fieldSelector=metadata.name=NAME (RequiresExactMatch).
 * The server sorts the terms and takes the first match: the least of the matching terms here. The
 * name is kept only when it is a valid path segment name (no '/', no '%', not "." or ".."); an
 * invalid selector gives none, as the server's decoding error does. */
static int selector_name(const struct query_params *q, char *name, struct sb_err *err)
{
	cleanup_free char *value = malloc(q->selector_len + 1);
	const char *best = NULL;
	size_t best_len = 0, pos = 0;

	if (value == NULL)
		return sb_refuse(err, ENOMEM, "out of memory reading the field selector");
	if (memchr(q->selector, '\0', q->selector_len) != NULL || !utf8_valid(q->selector, q->selector_len))
		return 0;  /* fields hold no NUL; Go would rewrite bytes that are not UTF-8 */
	while (pos <= q->selector_len) {
		const char *term = q->selector + pos;
		size_t tlen = selector_next(q->selector, q->selector_len, &pos);
		bool match = false;

		if (tlen == 0)
			continue;
		if (!selector_term(term, tlen, &match, value))
			return 0;
		if (match && (best == NULL || term_less(term, tlen, best, best_len))) {
			best = term;
			best_len = tlen;
		}
	}
	if (best == NULL)
		return 0;
	selector_term(best, best_len, &(bool){false}, value);
	if (strcmp(value, ".") == 0 || strcmp(value, "..") == 0 || strpbrk(value, "/%") != NULL)
		return 0;
	for (const char *c = value; *c != '\0'; c++)
		if (is_control((unsigned char)*c))
			return 0;  /* no field holds a control byte (k8s_request.h) */
	return field_set(name, K8S_REQ_FIELD_MAX, value, "fieldSelector metadata.name", err);
}

/* Non-resource paths a read grant passes with GET: what kubectl reads to learn the API. */
static bool discovery_path(const struct segments *s)
{
	if (s->n == 0)
		return false;
	/* Under /api and /apis, a path the caller did not read as a resource request is short enough
	 * to be discovery: /api, /api/VERSION, /apis, /apis/GROUP, /apis/GROUP/VERSION. */
	if (strcmp(s->seg[0], "api") == 0 || strcmp(s->seg[0], "apis") == 0)
		return true;
	if (strcmp(s->seg[0], "version") == 0)
		return s->n == 1;
	return strcmp(s->seg[0], "openapi") == 0 && s->n >= 2;
}

static const struct method_verb *method_verb_find(const char *method)
{
	for (size_t i = 0; i < ARRAY_LEN(method_verbs); i++)
		if (strcmp(method, method_verbs[i].method) == 0)
			return &method_verbs[i];
	return NULL;
}

static const struct special_verb *special_verb_find(const char *seg)
{
	for (size_t i = 0; i < ARRAY_LEN(special_verbs); i++)
		if (strcmp(seg, special_verbs[i].verb) == 0)
			return &special_verbs[i];
	return NULL;
}

/* Namespace, then resource/name/subresource from the segments after the version (and after a
 * special verb): the server's "namespaces" rule and its parts switch. */
static int resource_parts(struct k8s_request *out, const char *const *p, size_t n, bool subresources,
			  struct sb_err *err)
{
	if (strcmp(p[0], "namespaces") == 0 && n > 1) {
		if (field_set(out->namespace, sizeof out->namespace, p[1], "namespace", err) < 0)
			return -1;
		if (n > 2 && !in_list(p[2], namespace_subresources, ARRAY_LEN(namespace_subresources))) {
			p += 2;
			n -= 2;
		}
	}
	if (n >= 3 && subresources && field_set(out->subresource, sizeof out->subresource, p[2], "subresource", err) < 0)
		return -1;
	if (n >= 2 && field_set(out->name, sizeof out->name, p[1], "name", err) < 0)
		return -1;
	return field_set(out->resource, sizeof out->resource, p[0], "resource", err);
}

/* The collection rules: a get without a name is a list or, by the query, a watch (and may name
 * its object by fieldSelector); a delete without one is a deletecollection. */
static int collection_verb(struct k8s_request *out, const struct method_verb *mv, const struct query_params *q,
			   struct sb_err *err)
{
	if (out->name[0] != '\0' || mv == NULL || strcmp(out->verb, mv->object) != 0)
		return 0;
	if (strcmp(mv->object, "get") == 0) {
		snprintf(out->verb, sizeof out->verb, "%s", q->watch ? "watch" : "list");
		return q->selector_set ? selector_name(q, out->name, err) : 0;
	}
	snprintf(out->verb, sizeof out->verb, "%s", mv->collection);
	return 0;
}

/* A request under /api or /apis with enough segments: p[0] is the prefix. */
static int resource_request(struct k8s_request *out, const struct segments *s, const struct query_params *q,
			    struct sb_err *err)
{
	const struct method_verb *mv = method_verb_find(out->method);
	const struct special_verb *sv;
	const char *const *p = s->seg + 1;
	size_t n = s->n - 1;

	out->resource_request = true;
	snprintf(out->prefix, sizeof out->prefix, "%s", s->seg[0]);
	if (strcmp(out->prefix, "apis") == 0) {
		if (field_set(out->group, sizeof out->group, p[0], "API group", err) < 0)
			return -1;
		p++;
		n--;
	}
	if (field_set(out->version, sizeof out->version, p[0], "API version", err) < 0)
		return -1;
	p++;
	n--;
	sv = special_verb_find(p[0]);
	if (sv != NULL) {
		if (n < 2)
			return sb_invalid(err, "\"%s\" with no resource after it", sv->verb);
		snprintf(out->verb, sizeof out->verb, "%s", sv->verb);
		p++;
		n--;
	} else {
		snprintf(out->verb, sizeof out->verb, "%s", mv != NULL ? mv->object : "");
	}
	if (resource_parts(out, p, n, sv == NULL || sv->subresources, err) < 0)
		return -1;
	out->upgrade = strcmp(out->verb, "proxy") == 0 ||
		       in_list(out->subresource, upgrade_subresources, ARRAY_LEN(upgrade_subresources));
	return collection_verb(out, mv, q, err);
}

static int method_set(struct k8s_request *out, const char *method, struct sb_err *err)
{
	size_t n = strlen(method);

	if (n == 0 || n >= sizeof out->method)
		return sb_invalid(err, "method of %zu bytes: a method is 1 to %zu", n, sizeof out->method - 1);
	for (size_t i = 0; i < n; i++)
		if (method[i] <= ' ' || (unsigned char)method[i] >= 0x7f)
			return sb_invalid(err, "byte 0x%02x in the method", (unsigned char)method[i]);
	memcpy(out->method, method, n + 1);
	return 0;
}

int k8s_request_parse(const char *method, const char *path, size_t path_len, const char *query, size_t query_len,
		      struct k8s_request *out, struct sb_err *err)
{
	cleanup_free struct segments *s = calloc(1, sizeof *s);
	cleanup_free struct query_params *q = malloc(sizeof *q);
	size_t prefix_min;

	memset(out, 0, sizeof *out);
	if (s == NULL || q == NULL)
		return sb_refuse(err, ENOMEM, "out of memory reading the request");
	if (method_set(out, method, err) < 0 || path_segments(path, path_len, s, err) < 0 ||
	    query_parse(query, query_len, q, err) < 0)
		return -1;
	memcpy(out->path, path, path_len);
	out->path[path_len] = '\0';
	out->dry_run = q->dry_run;
	/* Until proven a resource request, the verb is the method in lower case. */
	for (size_t i = 0; out->method[i] != '\0'; i++)
		out->verb[i] = (char)(out->method[i] >= 'A' && out->method[i] <= 'Z' ? out->method[i] | 0x20 : out->method[i]);
	/* /api/VERSION/RESOURCE is the shortest resource request; /apis has the group too. */
	prefix_min = s->n > 0 && strcmp(s->seg[0], "apis") == 0 ? 4 : 3;
	if (s->n < 3 || (strcmp(s->seg[0], "api") != 0 && strcmp(s->seg[0], "apis") != 0) || s->n < prefix_min) {
		out->discovery = discovery_path(s);
		return 0;
	}
	out->verb[0] = '\0';
	return resource_request(out, s, q, err);
}

static bool read_method(const struct k8s_request *req)
{
	return strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
}

static bool read_verb(const char *verb)
{
	return strcmp(verb, "get") == 0 || strcmp(verb, "list") == 0 || strcmp(verb, "watch") == 0;
}

bool k8s_request_mutating(const struct k8s_request *req)
{
	if (!read_method(req) || req->upgrade)
		return true;
	return req->resource_request && !read_verb(req->verb);
}

/* "apps/deployments/scale", "pods", "pods/exec": the group/resource a refusal names. */
static void group_resource(const struct k8s_request *req, char *out, size_t len)
{
	snprintf(out, len, "%s%s%s%s%s", req->group, req->group[0] != '\0' ? "/" : "", req->resource,
		 req->subresource[0] != '\0' ? "/" : "", req->subresource);
}

/* Why a read grant refuses req, or NULL when it passes it. The method is checked as well as the
 * verb: the legacy /watch/ prefix makes any method a "watch". */
static const char *read_refusal(const struct k8s_request *req)
{
	if (req->upgrade)
		return "it opens a stream into a workload (exec, attach, port-forward or proxy), refused under read even with GET";
	if (!read_method(req))
		return req->dry_run ? "a dry run is still the mutating verb (admission runs), refused under read"
				    : "read passes GET and HEAD only";
	if (!req->resource_request)
		return req->discovery && strcmp(req->verb, "get") == 0 ? NULL : "read passes discovery paths only";
	/* Every GET or HEAD resource verb of the tables is get, list, watch or proxy (an upgrade) today;
	 * this keeps a new row from passing a read grant. */
	return read_verb(req->verb) ? NULL : "read passes get, list and watch only";
}

/* ` "NAME" in namespace "NS"` for a refusal, each string terminal-safe; "" without them. */
static void object_words(const struct k8s_request *req, char *out, size_t len)
{
	cleanup_free char *name = textesc_str(req->name);
	cleanup_free char *ns = textesc_str(req->namespace);
	size_t n = 0;

	out[0] = '\0';
	if (name != NULL && name[0] != '\0')
		n = (size_t)snprintf(out, len, " \"%s\"", name);
	if (ns != NULL && ns[0] != '\0' && n < len)
		snprintf(out + n, len - n, " in namespace \"%s\"", ns);
}

int k8s_request_decide(const char *grant, const char *access, const struct k8s_request *req, struct sb_err *err)
{
	cleanup_free char *g = textesc_str(grant != NULL ? grant : "");
	cleanup_free char *target = NULL;
	char what[4 * K8S_REQ_FIELD_MAX];
	char verb[K8S_REQ_VERB_MAX + 48];
	const char *why;

	if (g == NULL)
		return sb_refuse(err, ENOMEM, "refused: out of memory naming the grant");
	if (access == NULL || (strcmp(access, "read") != 0 && strcmp(access, "write") != 0))
		return sb_invalid(err, "refused by grant \"%s\": its access is neither read nor write", g);
	if (strcmp(access, "write") == 0)
		return 0;  /* the cluster's RBAC still decides */
	why = read_refusal(req);
	if (why == NULL)
		return 0;
	if (req->verb[0] != '\0')
		snprintf(verb, sizeof verb, "verb \"%s\"%s", req->verb, req->dry_run ? " (dry run)" : "");
	else
		snprintf(verb, sizeof verb, "method \"%s\" (no Kubernetes verb)", req->method);
	if (req->resource_request) {
		char obj[3 * K8S_REQ_FIELD_MAX];

		group_resource(req, what, sizeof what);
		target = textesc_str(what);
		object_words(req, obj, sizeof obj);
		if (target != NULL)
			return sb_refuse(err, EACCES, "refused by grant \"%s\" (read): %s on %s%s: %s", g, verb, target, obj, why);
	} else {
		target = textesc_str(req->path);
		if (target != NULL)
			return sb_refuse(err, EACCES, "refused by grant \"%s\" (read): %s on path \"%s\": %s", g, verb, target, why);
	}
	return sb_refuse(err, EACCES, "refused by grant \"%s\" (read): %s: %s", g, verb, why);
}
