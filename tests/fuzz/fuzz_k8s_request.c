/* libFuzzer target: k8s_request_parse on arbitrary method, path and query (the input's first line is
 * the method, the rest the request target, split at its first '?'), then a read and a write grant's
 * decision and the egress record of it. A request that parses must hold what k8s_request.h promises
 * (NUL-terminated fields with no control byte, a known verb, the server's parts), and a read grant
 * must never pass a request that can change anything. Pure: no I/O. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "egress_log.h"
#include "k8s_request.h"

static const char *const verbs[] = {"get", "list", "watch", "create", "update", "patch", "delete",
				    "deletecollection", "proxy", ""};

static void check_field(const char *f, size_t size)
{
	size_t n = strnlen(f, size);

	if (n == size)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)f[i] < 0x20 || f[i] == 0x7f)
			abort();
}

static void check_resource(const struct k8s_request *r)
{
	bool known = false;

	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		known = known || strcmp(r->verb, verbs[i]) == 0;
	if (!known || r->version[0] == '\0' || r->resource[0] == '\0')
		abort();
	if (r->subresource[0] != '\0' && r->name[0] == '\0')
		abort();
	if ((strcmp(r->prefix, "api") == 0) != (r->group[0] == '\0'))
		abort();
}

static void check(const struct k8s_request *r)
{
	const char *fields[] = {r->group, r->version, r->resource, r->subresource, r->namespace, r->name};
	struct sb_err err;

	for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
		check_field(fields[i], K8S_REQ_FIELD_MAX);
	check_field(r->verb, K8S_REQ_VERB_MAX);
	if (r->resource_request)
		check_resource(r);
	/* read passes nothing that can change anything; write passes all */
	if (k8s_request_decide("fuzz", "read", r, &err) == 0 &&
	    (k8s_request_mutating(r) || r->upgrade || (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0)))
		abort();
	if (k8s_request_decide("fuzz", "write", r, &err) != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	const char *nl = memchr(in, '\n', size);
	size_t mlen = nl != NULL ? (size_t)(nl - in) : 0;
	const char *target = nl != NULL ? nl + 1 : in;
	size_t tlen = size - (size_t)(target - in);
	const char *q = memchr(target, '?', tlen);
	size_t plen = q != NULL ? (size_t)(q - target) : tlen;
	char method[32];
	struct k8s_request r;
	struct sb_err err;
	struct egress_log *log;

	if (mlen >= sizeof method)
		mlen = sizeof method - 1;
	memcpy(method, in, mlen);
	method[mlen] = '\0';
	if (k8s_request_parse(method, target, plen, q != NULL ? q + 1 : "", q != NULL ? tlen - plen - 1 : 0, &r, &err) < 0)
		return 0;
	check(&r);
	log = egress_log_new(1);
	if (log != NULL) {
		struct egress_request req = {.method = r.method, .host = "h", .path = r.path, .k8s = &r, .status = 200};
		json_t *j;

		egress_log_append(log, &req);
		j = egress_log_json(log);
		free(egress_log_text(log));
		json_decref(j);
		egress_log_free(log);
	}
	return 0;
}
