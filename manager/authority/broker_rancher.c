/* The rancher broker: a cluster-scoped Rancher token with a TTL (POST /v3/tokens; Rancher's ttl is
 * in milliseconds), written as a kubeconfig for <server>/k8s/clusters/<cluster_id>, and revoked
 * (DELETE /v3/tokens/<id>) when the sandbox is gone. A Rancher token carries all the permissions of
 * the user that created it, so `read` and `write` use the credentials of two different Rancher
 * users (read_token_file, write_token_file); an access without its file is refused. The manager's
 * own credentials are only ever sent to Rancher; they never reach a file a sandbox sees. */
#include "broker.h"
#include "clock.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKEN_MAX 16384

struct rancher_config {
	char server[1024];
	char ca_file[PATH_MAX];   /* "": the system trust store */
	char cluster_id[254];
	char token_file[PATH_MAX]; /* the requested access's */
	long ttl;
	long timeout;
};

static const char *const rancher_keys[] = {
	"server", "ca_file", "cluster_id", "read_token_file", "write_token_file", "ttl_seconds", "timeout_seconds", NULL,
};

static int config_read(const char *resource, const char *arg, const char *access, struct rancher_config *c,
		       struct sb_err *err)
{
	bool write = strcmp(access, "write") == 0;
	const char *file_key = write ? "write_token_file" : "read_token_file";
	json_t *cfg;
	int rc;

	memset(c, 0, sizeof *c);
	if (!write && strcmp(access, "read") != 0)
		return sb_invalid(err, "resource %s: access must be read or write, not '%s'", resource, access);
	cfg = broker_config_load(resource, arg, rancher_keys, err);
	if (cfg == NULL)
		return -1;
	rc = broker_config_string(resource, cfg, "server", true, c->server, sizeof c->server, err) < 0 ||
	     broker_check_server(resource, c->server, err) < 0 ||
	     broker_config_string(resource, cfg, "ca_file", false, c->ca_file, sizeof c->ca_file, err) < 0 ||
	     broker_config_string(resource, cfg, "cluster_id", true, c->cluster_id, sizeof c->cluster_id, err) < 0 ||
	     broker_check_name(resource, "cluster_id", c->cluster_id, true, err) < 0 ||
	     broker_config_int(resource, cfg, "ttl_seconds", BROKER_LIFETIME_MIN, BROKER_LIFETIME_MAX,
			       BROKER_LIFETIME_DEFAULT, &c->ttl, err) < 0 ||
	     broker_config_int(resource, cfg, "timeout_seconds", 1, 300, BROKER_TIMEOUT_DEFAULT, &c->timeout, err) < 0 ||
	     broker_config_string(resource, cfg, file_key, false, c->token_file, sizeof c->token_file, err) < 0 ? -1 : 0;
	json_decref(cfg);
	if (rc < 0)
		return -1;
	if (c->ca_file[0] != '\0' && c->ca_file[0] != '/')
		return sb_invalid(err, "resource %s: \"ca_file\" must be an absolute path", resource);
	if (c->token_file[0] == '\0')
		return sb_fail(err, EACCES, "resource %s: %s access is not offered (its broker config has no \"%s\")",
			       resource, access, file_key);
	return 0;
}

static int token_create(const struct broker_request *req, const struct rancher_config *c, const char *bearer,
			struct broker_result *out, struct sb_err *err)
{
	char url[2048], server[2048], description[512];
	struct broker_http h = { .resource = req->resource, .api = "the Rancher API (POST /v3/tokens)", .method = "POST",
				 .url = url, .ca_file = c->ca_file, .bearer = bearer, .timeout_ms = c->timeout * 1000 };
	struct broker_kubeconfig k = { .server = server, .ca_file = c->ca_file };
	json_t *body, *resp = NULL;
	const char *token, *expires, *id;
	char *text;
	long status;
	int rc;

	snprintf(description, sizeof description, "infra-sandbox %s %s=%s", req->label ? req->label : "", req->resource,
		 req->access);
	/* Rancher's ttl is in milliseconds. clusterId scopes the token to that one cluster. */
	body = json_pack("{s:s, s:s, s:I, s:s}", "type", "token", "description", description, "ttl",
			 (json_int_t)c->ttl * 1000, "clusterId", c->cluster_id);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "resource %s: building the Rancher token request", req->resource);
	snprintf(url, sizeof url, "%s/v3/tokens", c->server);
	h.body = text;
	rc = broker_http_call(&h, &status, &resp, err);
	free(text);
	if (rc < 0)
		return -1;
	token = json_string_value(json_object_get(resp, "token"));
	expires = json_string_value(json_object_get(resp, "expiresAt"));
	id = json_string_value(json_object_get(resp, "name")) ?: json_string_value(json_object_get(resp, "id"));
	if (token == NULL || token[0] == '\0')
		rc = sb_fail(err, EPROTO, "resource %s: %s answered %ld without a token", req->resource, h.api, status);
	else if (strcmp(token, bearer) == 0)
		rc = sb_fail(err, EPROTO, "resource %s: %s returned the manager's own credential; refused", req->resource,
			     h.api);
	if (rc == 0) {
		/* expiresAt when Rancher says it (it may shorten the ttl to its own maximum), else our ttl. */
		if (expires == NULL || broker_time_parse(expires, &out->expires_ms) < 0)
			out->expires_ms = clock_real_ms() + (int64_t)c->ttl * 1000;
		if (id != NULL && strlen(id) < sizeof out->revoke_id)
			snprintf(out->revoke_id, sizeof out->revoke_id, "%s", id);
		snprintf(server, sizeof server, "%s/k8s/clusters/%s", c->server, c->cluster_id);
		k.token = token;
		rc = broker_kubeconfig_write(req, &k, err);
	}
	json_decref(resp);
	return rc;
}

int broker_rancher(const struct broker_request *req, struct broker_result *out, struct sb_err *err)
{
	struct rancher_config c;
	char bearer[TOKEN_MAX];
	int rc;

	memset(out, 0, sizeof *out);
	if (config_read(req->resource, req->arg, req->access, &c, err) < 0)
		return -1;
	rc = broker_token_read(req->resource, c.token_file, bearer, sizeof bearer, err);
	if (rc == 0)
		rc = token_create(req, &c, bearer, out, err);
	if (rc < 0 && out->revoke_id[0] != '\0') {
		struct sb_err ignored;

		/* Made but not written: it must not live on unused. */
		broker_rancher_revoke(req->resource, req->arg, req->access, out->revoke_id, &ignored);
		out->revoke_id[0] = '\0';
	}
	explicit_bzero(bearer, sizeof bearer);
	return rc;
}

int broker_rancher_revoke(const char *resource, const char *arg, const char *access, const char *id,
			  struct sb_err *err)
{
	struct rancher_config c;
	char bearer[TOKEN_MAX], url[2048];
	struct broker_http h = { .resource = resource, .api = "the Rancher API (DELETE /v3/tokens)", .method = "DELETE",
				 .url = url, .bearer = bearer };
	json_t *resp = NULL;
	long status;
	int rc;

	if (config_read(resource, arg, access, &c, err) < 0 || broker_check_name(resource, "token id", id, true, err) < 0)
		return -1;
	if (broker_token_read(resource, c.token_file, bearer, sizeof bearer, err) < 0)
		return -1;
	snprintf(url, sizeof url, "%s/v3/tokens/%s", c.server, id);
	h.ca_file = c.ca_file;
	h.timeout_ms = c.timeout * 1000;
	rc = broker_http_call(&h, &status, &resp, err);
	explicit_bzero(bearer, sizeof bearer);
	json_decref(resp);
	if (rc < 0 && status == 404)
		return 0; /* already gone */
	return rc;
}
