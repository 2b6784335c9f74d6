/* What the network brokers share (see broker.h): their config files, the manager's API credential,
 * one bounded HTTPS call through libcurl (certificate verified, https only, no redirects), and the
 * kubeconfig they write. Never logs a credential nor puts the manager's credential in a file. */
#include "broker.h"
#include "curl_handle.h"
#include "fdio.h"
#include "jsonfile.h"
#include "pathfmt.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/base64.h>

#define RESPONSE_MAX (1024 * 1024)
#define CA_FILE_MAX (256 * 1024)

json_t *broker_config_load(const char *resource, const char *path, const char *const *allowed,
			   struct sb_err *err)
{
	json_error_t jerr;
	json_t *cfg, *v;
	const char *key;

	if (path[0] != '/') {
		sb_invalid(err, "resource %s: the broker's ARG must be the absolute path of its JSON config, not '%s'",
			   resource, path);
		return NULL;
	}
	cfg = sb_json_load_path(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(cfg)) {
		sb_invalid(err, "resource %s: config %s: %s", resource, path,
			   cfg ? "must be a JSON object" : jerr.text);
		json_decref(cfg);
		return NULL;
	}
	json_object_foreach(cfg, key, v) {
		size_t i;

		for (i = 0; allowed[i] != NULL && strcmp(allowed[i], key) != 0; i++) {
		}
		if (allowed[i] == NULL) {
			sb_invalid(err, "resource %s: config %s: unknown key '%s'", resource, path, key);
			json_decref(cfg);
			return NULL;
		}
	}
	return cfg;
}

int broker_config_string(const char *resource, json_t *cfg, const char *key, bool required, char *out,
			 size_t len, struct sb_err *err)
{
	json_t *v = json_object_get(cfg, key);

	out[0] = '\0';
	if (v == NULL || (json_is_string(v) && json_string_length(v) == 0)) {
		if (required)
			return sb_invalid(err, "resource %s: its broker config needs \"%s\"", resource, key);
		return 0;
	}
	if (!json_is_string(v))
		return sb_invalid(err, "resource %s: \"%s\" must be a string", resource, key);
	if (json_string_length(v) >= len || strlen(json_string_value(v)) != json_string_length(v))
		return sb_invalid(err, "resource %s: \"%s\" is too long or holds a NUL", resource, key);
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

int broker_config_int(const char *resource, json_t *cfg, const char *key, long min, long max, long def,
		      long *out, struct sb_err *err)
{
	json_t *v = json_object_get(cfg, key);

	*out = def;
	if (v == NULL)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return sb_invalid(err, "resource %s: \"%s\" must be a whole number from %ld to %ld", resource, key,
				  min, max);
	*out = (long)json_integer_value(v);
	return 0;
}

int broker_check_server(const char *resource, char *server, struct sb_err *err)
{
	size_t n = strlen(server);
	const char *host = server + 8;

	while (n > 8 && server[n - 1] == '/')
		server[--n] = '\0';
	if (strncmp(server, "https://", 8) != 0 || n == 8)
		return sb_invalid(err, "resource %s: \"server\" must be an https:// URL, not '%s'", resource, server);
	for (const char *p = host; *p != '\0'; p++)
		if (!isalnum((unsigned char)*p) && strchr(".-_:/[]", *p) == NULL)
			return sb_invalid(err,
					  "resource %s: \"server\" may hold only a host, a port and a path ('%c' in '%s')",
					  resource, *p, server);
	return 0;
}

int broker_check_name(const char *resource, const char *what, const char *name, bool rancher, struct sb_err *err)
{
	size_t n = strlen(name);
	bool ok = n > 0 && n <= 253 && name[0] != '.' && name[0] != '-';

	for (size_t i = 0; ok && i < n; i++)
		ok = islower((unsigned char)name[i]) || isdigit((unsigned char)name[i]) || name[i] == '-' ||
		     name[i] == '.' || (rancher && (name[i] == '_' || isupper((unsigned char)name[i])));
	if (!ok || strstr(name, "..") != NULL)
		return sb_invalid(err, "resource %s: \"%s\" '%s' is not a valid name (%s)", resource, what, name,
				  rancher ? "letters, digits, '-', '_' and '.'" : "lower-case letters, digits, '-' and '.'");
	return 0;
}

int broker_token_read(const char *resource, const char *path, char *out, size_t len, struct sb_err *err)
{
	struct stat st;
	ssize_t n;
	int fd;

	if (path[0] != '/')
		return sb_invalid(err, "resource %s: the token file must be an absolute path", resource);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return sb_fail_errno(err, "resource %s: reading the manager's API credential %s", resource, path);
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 0007) != 0) {
		close(fd);
		return sb_fail(err, EPERM,
			       "resource %s: the manager's API credential %s must be a regular file with no access for "
			       "others (chmod o-rwx)", resource, path);
	}
	n = read(fd, out, len);
	close(fd);
	if (n < 0 || (size_t)n >= len) {
		explicit_bzero(out, len);
		return sb_fail(err, n < 0 ? errno : EFBIG, "resource %s: the credential %s cannot be read whole", resource,
			       path);
	}
	while (n > 0 && isspace((unsigned char)out[n - 1]))
		n--;
	out[n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		if (!isgraph((unsigned char)out[i])) {
			explicit_bzero(out, len);
			return sb_invalid(err, "resource %s: the credential %s holds spaces or control characters",
					  resource, path);
		}
	if (n == 0)
		return sb_invalid(err, "resource %s: the credential %s is empty", resource, path);
	return 0;
}

/* ---- one HTTPS call ---- */

/* The server's own explanation: "message" of a Kubernetes Status or a Rancher error, else the
 * body's printable head. Never the request's credential: that is never echoed into messages. */
static void server_message(const struct rest_reply *r, char *out, size_t len)
{
	const char *msg = json_string_value(json_object_get(r->body, "message"));
	size_t i, j = 0;

	if (msg == NULL)
		msg = r->raw ? r->raw : "";
	for (i = 0; msg[i] != '\0' && j + 1 < len && i < 400; i++)
		out[j++] = isprint((unsigned char)msg[i]) ? msg[i] : ' ';
	out[j] = '\0';
	if (j == 0)
		snprintf(out, len, "(no message)");
}

static const char *status_text(long status)
{
	switch (status) {
	case 400: return " Bad Request";
	case 401: return " Unauthorized (the manager's API credential was not accepted)";
	case 403: return " Forbidden";
	case 404: return " Not Found";
	case 409: return " Conflict";
	case 422: return " Unprocessable Entity";
	case 429: return " Too Many Requests";
	default: return status >= 500 ? " (server error)" : "";
	}
}

int broker_http_call(const struct broker_http *h, long *status, json_t **out, struct sb_err *err)
{
	char curl_err[CURL_ERROR_SIZE] = "", msg[512];
	struct rest_reply r = { .max = RESPONSE_MAX };
	struct curl_slist *headers = NULL;
	CURL *c;
	CURLcode rc;

	*status = 0;
	*out = NULL;
	if (strlen(h->bearer) > REST_BEARER_MAX)
		return sb_invalid(err, "resource %s: the manager's API credential is too long", h->resource);
	c = sb_curl_new();
	if (c == NULL)
		return sb_fail(err, ENOMEM, "resource %s: starting an HTTPS client", h->resource);
	if (rest_setopt(c, h->method, h->body, h->bearer, h->timeout_ms, &headers, curl_err, &r, err) < 0) {
		curl_easy_cleanup(c);
		sb_err_prefix(err, "resource %s", h->resource);
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_URL, h->url);
	/* https only, for the call and any redirect (none is followed: a redirect is an error). */
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "https");
	/* The server is verified: its chain against ca_file (or the system's store), its name. */
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (h->ca_file != NULL && h->ca_file[0] != '\0')
		curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
	/* Bounded (timeout_ms, rest_setopt): a stalled API fails the grant, it does not hold the
	 * session's queue. */
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(headers);
	curl_easy_cleanup(c);
	if (rc != CURLE_OK) {
		*status = 0;
		/* errno only for a timeout: curl's own text says the rest better than strerror would. */
		sb_fail(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : 0, "resource %s: %s at %s: %s%s", h->resource,
			h->api, h->url, r.too_big ? "the answer is larger than 1 MiB" : rest_failure(rc, &r, curl_err),
			rc == CURLE_OPERATION_TIMEDOUT ? " (timeout_seconds in the broker config)" : "");
		rest_reply_free(&r);
		return -1;
	}
	rest_reply_parse(&r);
	if (*status < 200 || *status > 299) {
		server_message(&r, msg, sizeof msg);
		rest_reply_free(&r);
		return sb_fail(err, 0, "resource %s: %s answered %ld%s: %s", h->resource, h->api, *status,
			       status_text(*status), msg);
	}
	if (r.raw != NULL)
		explicit_bzero(r.raw, r.raw_len); /* it holds the new credential */
	*out = r.body;
	r.body = NULL;
	rest_reply_free(&r);
	return 0;
}

/* ---- time ---- */

int broker_time_parse(const char *text, int64_t *out_ms)
{
	struct tm tm;
	const char *rest;
	long offset = 0;
	time_t t;

	memset(&tm, 0, sizeof tm);
	rest = text ? strptime(text, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	if (rest == NULL)
		return -1;
	if (*rest == '.')
		for (rest++; isdigit((unsigned char)*rest); rest++) {
		}
	if (*rest == 'Z' || *rest == 'z') {
		rest++;
	} else if ((*rest == '+' || *rest == '-') && isdigit((unsigned char)rest[1]) && isdigit((unsigned char)rest[2]) &&
		   rest[3] == ':' && isdigit((unsigned char)rest[4]) && isdigit((unsigned char)rest[5])) {
		offset = ((rest[1] - '0') * 10 + (rest[2] - '0')) * 3600L + ((rest[4] - '0') * 10 + (rest[5] - '0')) * 60L;
		if (*rest == '-')
			offset = -offset;
		rest += 6;
	} else {
		return -1;
	}
	if (*rest != '\0')
		return -1;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*out_ms = ((int64_t)t - offset) * 1000;
	return 0;
}

/* ---- the kubeconfig ---- */

static char *ca_data(const char *resource, const char *path, struct sb_err *err)
{
	static const size_t cap = CA_FILE_MAX;
	unsigned char *raw = malloc(cap);
	char *b64 = NULL;
	size_t b64_len = 0;
	ssize_t n = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (raw != NULL && fd >= 0)
		n = read(fd, raw, cap);
	if (fd >= 0)
		close(fd);
	if (raw == NULL || n <= 0 || (size_t)n == cap) {
		sb_fail(err, n < 0 || fd < 0 ? errno : EINVAL, "resource %s: reading the CA file %s", resource, path);
		free(raw);
		return NULL;
	}
	mbedtls_base64_encode(NULL, 0, &b64_len, raw, (size_t)n);
	b64 = malloc(b64_len + 1);
	if (b64 == NULL || mbedtls_base64_encode((unsigned char *)b64, b64_len + 1, &b64_len, raw, (size_t)n) != 0) {
		sb_fail(err, ENOMEM, "resource %s: encoding the CA file %s", resource, path);
		free(b64);
		b64 = NULL;
	}
	free(raw);
	return b64;
}

void broker_edge_clear(struct broker_edge *e)
{
	if (e->token != NULL) {
		explicit_bzero(e->token, strlen(e->token));
		free(e->token);
	}
	if (e->header != NULL) {
		explicit_bzero(e->header, strlen(e->header));
		free(e->header);
	}
	e->token = e->header = NULL;
	e->server[0] = e->ca_file[0] = '\0';
}

/* The credential kept at the edge (req->edge), never written: 0, or -1 with err. */
static int edge_keep(const struct broker_request *req, const struct broker_kubeconfig *k, struct sb_err *err)
{
	struct broker_edge *e = req->edge;

	broker_edge_clear(e);
	if (path_fmt(e->server, sizeof e->server, err, "%s", k->server) < 0 ||
	    path_fmt(e->ca_file, sizeof e->ca_file, err, "%s", k->ca_file ? k->ca_file : "") < 0)
		return -1;
	e->token = strdup(k->token);
	return e->token == NULL ? sb_fail(err, ENOMEM, "resource %s: keeping the credential", req->resource) : 0;
}

int broker_kubeconfig_write(const struct broker_request *req, const struct broker_kubeconfig *k,
			    struct sb_err *err)
{
	const char *name = strncmp(req->resource, "kubernetes:", 11) == 0 ? req->resource + 11 : req->resource;
	char *ca = NULL, *text, local[64];
	json_t *cluster, *doc, *user;
	int rc;

	if (req->edge != NULL) {
		/* The sandbox gets the edge's address and nothing to present: the proxy authenticates. */
		if (edge_keep(req, k, err) < 0)
			return -1;
		snprintf(local, sizeof local, "http://127.0.0.1:%u", req->edge->port);
		cluster = json_pack("{s:s}", "server", local);
		user = json_object();
	} else {
		if (k->ca_file != NULL && k->ca_file[0] != '\0' && (ca = ca_data(req->resource, k->ca_file, err)) == NULL)
			return -1;
		cluster = json_pack("{s:s}", "server", k->server);
		if (ca != NULL)
			json_object_set_new(cluster, "certificate-authority-data", json_string(ca));
		free(ca);
		user = json_pack("{s:s}", "token", k->token);
	}
	/* Built as JSON by jansson: every value quoted and escaped; kubectl reads JSON kubeconfigs. */
	doc = json_pack("{s:s, s:s, s:[{s:s, s:o}], s:[{s:s, s:o}], s:[{s:s, s:{s:s, s:s}}], s:s}",
			"apiVersion", "v1", "kind", "Config",
			"clusters", "name", name, "cluster", cluster,
			"users", "name", name, "user", user,
			"contexts", "name", name, "context", "cluster", name, "user", name,
			"current-context", name);
	text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	json_decref(doc);
	if (text == NULL)
		return sb_fail(err, ENOMEM, "resource %s: building the kubeconfig", req->resource);
	/* common/fdio.c: 0400, exclusive, no symlink, owned before it is synced with its directory. */
	rc = fd_file_create_path(req->path, 0400, req->uid, req->gid, text, strlen(text), err);
	explicit_bzero(text, strlen(text));
	free(text);
	return rc;
}
