/* The tokenrequest broker: a short-lived Kubernetes ServiceAccount token from the TokenRequest API
 * (POST /api/v1/namespaces/NS/serviceaccounts/SA/token), written as a kubeconfig with the cluster's
 * CA. `read` and `write` map to different service accounts. On the kubernetes backend the token is
 * bound to the sandbox's pod (request_body), which runs as that service account. The manager's own
 * API credential (token_file) is only ever sent to the API server; it never reaches a file a
 * sandbox sees. */
#include "broker.h"
#include "clock.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 16384

struct tokenrequest_config {
	char server[1024];
	char ca_file[PATH_MAX];
	char ns[254];
	char sa[254];          /* the service account of the requested access */
	char token_file[PATH_MAX];
	long expiration;
	long timeout;
	json_t *audiences;     /* borrowed from the config object, or NULL */
};

static const char *const tokenrequest_keys[] = {
	"server", "ca_file", "namespace", "read_service_account", "write_service_account", "token_file",
	"expiration_seconds", "audiences", "timeout_seconds", NULL,
};

static int config_read(const struct broker_request *req, json_t *cfg, struct tokenrequest_config *c,
		       struct sb_err *err)
{
	bool write = strcmp(req->access, "write") == 0;
	const char *sa_key = write ? "write_service_account" : "read_service_account";
	size_t i;
	json_t *a;

	if (!write && strcmp(req->access, "read") != 0)
		return sb_invalid(err, "resource %s: access must be read or write, not '%s'", req->resource,
				  req->access);
	if (broker_config_string(req->resource, cfg, "server", true, c->server, sizeof c->server, err) < 0 ||
	    broker_check_server(req->resource, c->server, err) < 0 ||
	    broker_config_string(req->resource, cfg, "ca_file", true, c->ca_file, sizeof c->ca_file, err) < 0 ||
	    broker_config_string(req->resource, cfg, "namespace", true, c->ns, sizeof c->ns, err) < 0 ||
	    broker_check_name(req->resource, "namespace", c->ns, false, err) < 0 ||
	    broker_config_string(req->resource, cfg, "token_file", true, c->token_file, sizeof c->token_file, err) < 0 ||
	    broker_config_int(req->resource, cfg, "expiration_seconds", BROKER_LIFETIME_MIN, BROKER_LIFETIME_MAX,
			      BROKER_LIFETIME_DEFAULT, &c->expiration, err) < 0 ||
	    broker_config_int(req->resource, cfg, "timeout_seconds", 1, 300, BROKER_TIMEOUT_DEFAULT, &c->timeout, err) < 0 ||
	    broker_config_string(req->resource, cfg, sa_key, false, c->sa, sizeof c->sa, err) < 0)
		return -1;
	if (c->ca_file[0] != '/')
		return sb_invalid(err, "resource %s: \"ca_file\" must be an absolute path", req->resource);
	if (c->sa[0] == '\0')
		return sb_fail(err, EACCES, "resource %s: %s access is not offered (its broker config has no \"%s\")",
			       req->resource, req->access, sa_key);
	if (broker_check_name(req->resource, sa_key, c->sa, false, err) < 0)
		return -1;
	c->audiences = json_object_get(cfg, "audiences");
	if (c->audiences != NULL && !json_is_array(c->audiences))
		return sb_invalid(err, "resource %s: \"audiences\" must be a list of strings", req->resource);
	json_array_foreach(c->audiences, i, a)
		if (!json_is_string(a))
			return sb_invalid(err, "resource %s: \"audiences\" must be a list of strings", req->resource);
	return 0;
}

/* The TokenRequest body. With a bound object (the kubernetes backend's pod), spec.boundObjectRef
 * names it by kind, name and UID: the API server refuses the request unless that object exists
 * with that UID (409) and, for a pod, runs as this service account (400); the token then stops
 * authenticating once the object is deleted. Without one (the process and podman backends, which
 * have no such object) the token lives until its expiry. */
static char *request_body(const struct tokenrequest_config *c, const struct broker_bound *bound)
{
	json_t *spec = json_pack("{s:I}", "expirationSeconds", (json_int_t)c->expiration), *doc;
	char *text;

	if (spec != NULL && c->audiences != NULL && json_array_size(c->audiences) > 0)
		json_object_set(spec, "audiences", c->audiences);
	if (spec != NULL && bound != NULL &&
	    json_object_set_new(spec, "boundObjectRef", json_pack("{s:s, s:s, s:s, s:s}", "kind", bound->kind,
								  "apiVersion", bound->api_version, "name",
								  bound->name, "uid", bound->uid)) < 0) {
		json_decref(spec);
		return NULL;
	}
	doc = json_pack("{s:s, s:s, s:o}", "apiVersion", "authentication.k8s.io/v1", "kind", "TokenRequest", "spec",
			spec);
	text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	return text;
}

/* A token bound to a pod is requested in the pod's namespace: the API server looks the pod up in
 * the namespace of the service account. */
static int bound_check(const struct broker_request *req, const struct tokenrequest_config *c, struct sb_err *err)
{
	const struct broker_bound *b = req->bound;

	if (b == NULL)
		return 0;
	if (b->kind == NULL || b->api_version == NULL || b->ns == NULL || b->name == NULL || b->uid == NULL ||
	    b->name[0] == '\0' || b->uid[0] == '\0')
		return sb_invalid(err, "resource %s: the object to bind the token to has no name or UID", req->resource);
	if (strcmp(b->ns, c->ns) != 0)
		return sb_invalid(err, "resource %s: a token bound to the sandbox's %s %s must be of a service account "
				  "in its namespace %s, not %s (the broker config's \"namespace\")", req->resource, b->kind,
				  b->name, b->ns, c->ns);
	return 0;
}

static int token_issue(const struct broker_request *req, const struct tokenrequest_config *c, const char *bearer,
		       struct broker_result *out, struct sb_err *err)
{
	char url[2048], api[600];
	struct broker_http h = { .resource = req->resource, .api = api, .method = "POST", .url = url,
				 .ca_file = c->ca_file, .bearer = bearer, .timeout_ms = c->timeout * 1000 };
	struct broker_kubeconfig k = { .server = c->server, .ca_file = c->ca_file };
	json_t *resp = NULL, *st;
	const char *token, *expiry;
	char *body;
	long status;
	int rc;

	if (bound_check(req, c, err) < 0)
		return -1;
	body = request_body(c, req->bound);
	if (body == NULL)
		return sb_fail(err, ENOMEM, "resource %s: building the TokenRequest", req->resource);
	snprintf(api, sizeof api, "the TokenRequest API (service account %s/%s)", c->ns, c->sa);
	snprintf(url, sizeof url, "%s/api/v1/namespaces/%s/serviceaccounts/%s/token", c->server, c->ns, c->sa);
	h.body = body;
	rc = broker_http_call(&h, &status, &resp, err);
	free(body);
	if (rc < 0 && status == 409 && req->bound != NULL)
		/* The object under that name is another one (deleted and made again), or none: no token. */
		sb_err_prefix(err, "the sandbox's %s %s is not the one of UID %s any more (deleted, or made again under "
			      "its name)", req->bound->kind, req->bound->name, req->bound->uid);
	if (rc < 0)
		return -1;
	st = json_object_get(resp, "status");
	token = json_string_value(json_object_get(st, "token"));
	expiry = json_string_value(json_object_get(st, "expirationTimestamp"));
	if (token == NULL || token[0] == '\0' || expiry == NULL || broker_time_parse(expiry, &out->expires_ms) < 0)
		rc = sb_fail(err, EPROTO, "resource %s: %s answered %ld without status.token and a valid "
			     "status.expirationTimestamp", req->resource, api, status);
	else if (strcmp(token, bearer) == 0)
		rc = sb_fail(err, EPROTO, "resource %s: %s returned the manager's own credential; refused",
			     req->resource, api);
	else if (out->expires_ms <= clock_real_ms())
		rc = sb_fail(err, EPROTO, "resource %s: %s returned a token that has already expired (%s)",
			     req->resource, api, expiry);
	if (rc == 0) {
		k.token = token;
		rc = broker_kubeconfig_write(req, &k, err);
	}
	json_decref(resp);
	return rc;
}

int broker_tokenrequest_account(const struct broker_request *req, char *out, size_t len, struct sb_err *err)
{
	struct tokenrequest_config c;
	json_t *cfg;
	int rc;

	memset(&c, 0, sizeof c);
	cfg = broker_config_load(req->resource, req->arg, tokenrequest_keys, err);
	if (cfg == NULL)
		return -1;
	rc = config_read(req, cfg, &c, err);
	json_decref(cfg);
	if (rc == 0 && snprintf(out, len, "%s/%s", c.ns, c.sa) >= (int)len)
		rc = sb_fail(err, ENAMETOOLONG, "resource %s: the service account %s/%s is too long", req->resource, c.ns,
			     c.sa);
	return rc;
}

int broker_tokenrequest(const struct broker_request *req, struct broker_result *out, struct sb_err *err)
{
	struct tokenrequest_config c;
	char bearer[TOKEN_MAX];
	json_t *cfg;
	int rc;

	memset(out, 0, sizeof *out);
	memset(&c, 0, sizeof c);
	cfg = broker_config_load(req->resource, req->arg, tokenrequest_keys, err);
	if (cfg == NULL)
		return -1;
	rc = config_read(req, cfg, &c, err);
	if (rc == 0)
		rc = broker_token_read(req->resource, c.token_file, bearer, sizeof bearer, err);
	if (rc == 0)
		rc = token_issue(req, &c, bearer, out, err);
	explicit_bzero(bearer, sizeof bearer);
	json_decref(cfg);
	return rc;
}
