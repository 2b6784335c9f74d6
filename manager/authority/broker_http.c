/* The `header` broker of an HTTP API resource (broker.h): its config checked, the header its grant
 * adds built from the template and the access's token, kept in the manager's memory for the egress
 * edge (struct broker_edge). Never writes a token to a file nor puts one in a message: every
 * refusal names the template or the file, never what the file holds. */
#include "broker.h"
#include "pathfmt.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TOKEN_BYTES 8192
#define TEMPLATE_MAX 1024
#define PLACEHOLDER "{token}"

static const char *const http_keys[] = { "server", "ca_file", "header", "read_token_file", "write_token_file",
					 NULL };

/* RFC 9110 token characters: what a header's name may hold. */
static bool tchar(char c)
{
	return isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int broker_header_build(const char *resource, const char *tmpl, const char *token, char **out, struct sb_err *err)
{
	const char *colon = strchr(tmpl, ':'), *at = strstr(tmpl, PLACEHOLDER), *p;
	size_t name_len, need;

	*out = NULL;
	name_len = colon ? (size_t)(colon - tmpl) : 0;
	for (p = tmpl; p < tmpl + name_len && tchar(*p); p++) {
	}
	if (colon == NULL || name_len == 0 || p != colon)
		return sb_invalid(err, "resource %s: \"header\" must be 'Name: value' with a header name of letters, "
				  "digits and -, e.g. 'Authorization: Bearer {token}'", resource);
	/* Host and the framing headers are libcurl's to set: a template could otherwise misdirect or
	 * cut the request the edge forwards. */
	if (strncasecmp(tmpl, "Host:", 5) == 0 || strncasecmp(tmpl, "Content-Length:", 15) == 0 ||
	    strncasecmp(tmpl, "Transfer-Encoding:", 18) == 0 || strncasecmp(tmpl, "Connection:", 11) == 0)
		return sb_invalid(err, "resource %s: \"header\" may not set %.*s", resource, (int)name_len, tmpl);
	for (p = colon + 1; *p != '\0'; p++)
		if (*p < 0x20 || *p == 0x7f)
			return sb_invalid(err, "resource %s: \"header\" holds a control character (a line break would "
					  "start another header)", resource);
	if (at == NULL || at < colon || strstr(at + 1, PLACEHOLDER) != NULL)
		return sb_invalid(err, "resource %s: \"header\" must hold exactly one " PLACEHOLDER " in its value, as "
				  "in 'Authorization: Bearer " PLACEHOLDER "'", resource);
	/* The token is broker_token_read's: printable, no spaces, so it cannot end the header either. */
	for (p = token; *p != '\0'; p++)
		if (!isgraph((unsigned char)*p))
			return sb_invalid(err, "resource %s: the token holds spaces or control characters", resource);
	need = strlen(tmpl) - strlen(PLACEHOLDER) + strlen(token) + 1;
	*out = malloc(need);
	if (*out == NULL)
		return sb_fail(err, ENOMEM, "resource %s: building its header", resource);
	memcpy(*out, tmpl, (size_t)(at - tmpl));
	memcpy(*out + (at - tmpl), token, strlen(token));
	strcpy(*out + (at - tmpl) + strlen(token), at + strlen(PLACEHOLDER));
	return 0;
}

struct http_config {
	char server[512];
	char ca_file[4096];
	char header[TEMPLATE_MAX];
	char token_file[2][4096]; /* read, write */
};

/* The config at path, checked whole: no token is read here. */
static int http_config_load(const char *resource, const char *path, struct http_config *c, struct sb_err *err)
{
	json_t *cfg = broker_config_load(resource, path, http_keys, err);
	char *probe = NULL;
	int rc;

	if (cfg == NULL)
		return -1;
	rc = broker_config_string(resource, cfg, "server", true, c->server, sizeof c->server, err) < 0 ||
	     broker_config_string(resource, cfg, "ca_file", false, c->ca_file, sizeof c->ca_file, err) < 0 ||
	     broker_config_string(resource, cfg, "header", true, c->header, sizeof c->header, err) < 0 ||
	     broker_config_string(resource, cfg, "read_token_file", false, c->token_file[0], sizeof c->token_file[0],
				  err) < 0 ||
	     broker_config_string(resource, cfg, "write_token_file", false, c->token_file[1], sizeof c->token_file[1],
				  err) < 0 ||
	     broker_check_server(resource, c->server, err) < 0 ? -1 : 0;
	json_decref(cfg);
	if (rc == 0 && c->ca_file[0] != '\0' && c->ca_file[0] != '/')
		rc = sb_invalid(err, "resource %s: \"ca_file\" must be an absolute path", resource);
	if (rc == 0 && c->token_file[0][0] == '\0' && c->token_file[1][0] == '\0')
		rc = sb_invalid(err, "resource %s: its broker config needs \"read_token_file\" or \"write_token_file\"",
				resource);
	/* The template judged on a token of its own, so that a bad one is refused before any is read. */
	if (rc == 0 && broker_header_build(resource, c->header, "x", &probe, err) < 0)
		rc = -1;
	free(probe);
	return rc;
}

int broker_http_check(const char *resource, const char *arg, struct sb_err *err)
{
	struct http_config c;
	char *token;
	int rc = 0;

	if (http_config_load(resource, arg, &c, err) < 0)
		return -1;
	if ((token = malloc(TOKEN_BYTES)) == NULL)
		return sb_fail(err, ENOMEM, "resource %s: checking its token files", resource);
	for (int i = 0; i < 2 && rc == 0; i++)
		if (c.token_file[i][0] != '\0')
			rc = broker_token_read(resource, c.token_file[i], token, TOKEN_BYTES, err);
	explicit_bzero(token, TOKEN_BYTES);
	free(token);
	return rc;
}

int broker_http(const struct broker_request *req, struct sb_err *err)
{
	struct broker_edge *e = req->edge;
	const char *file;
	struct http_config c;
	char *token;
	int rc;

	if (e == NULL)
		return sb_invalid(err, "grant %s: an HTTP API grant is served at the edge only, for a session of network "
				  "proxy: on any other network its token would have to be inside the sandbox", req->resource);
	if (http_config_load(req->resource, req->arg, &c, err) < 0)
		return -1;
	file = c.token_file[strcmp(req->access, "write") == 0];
	if (file[0] == '\0')
		return sb_fail(err, EPERM, "grant %s=%s: its broker config has no %s_token_file", req->resource, req->access,
			       req->access);
	if ((token = malloc(TOKEN_BYTES)) == NULL)
		return sb_fail(err, ENOMEM, "resource %s: reading its token", req->resource);
	broker_edge_clear(e);
	rc = broker_token_read(req->resource, file, token, TOKEN_BYTES, err) < 0 ||
	     broker_header_build(req->resource, c.header, token, &e->header, err) < 0 ||
	     path_fmt(e->server, sizeof e->server, err, "%s", c.server) < 0 ||
	     path_fmt(e->ca_file, sizeof e->ca_file, err, "%s", c.ca_file) < 0 ? -1 : 0;
	explicit_bzero(token, TOKEN_BYTES);
	free(token);
	if (rc < 0)
		broker_edge_clear(e);
	return rc;
}

void broker_http_env_name(const char *resource, char *out, size_t len)
{
	const char *name = strncmp(resource, "http:", 5) == 0 ? resource + 5 : resource;
	size_t o = (size_t)snprintf(out, len, "INFRA_SANDBOX_HTTP_");

	for (; *name != '\0' && o + 1 < len; name++)
		out[o++] = isalnum((unsigned char)*name) ? (char)toupper((unsigned char)*name) : '_';
	out[o < len ? o : len - 1] = '\0';
}
