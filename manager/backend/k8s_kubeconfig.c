/* k8s_api.h: where the API server is and who the manager is to it. A kubeconfig is read the way
 * kubectl reads its current-context, for the fields used here only (server, the CA, a token or a
 * client certificate, the namespace); anything that would run a program (exec, auth-provider) or
 * turn verification off (insecure-skip-tls-verify) is refused, never ignored. */
#include "k8s_api.h"
#include "pathfmt.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <mbedtls/base64.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FILE_MAX (1024 * 1024) /* a kubeconfig, a CA, a token: small files */
#define YAML_LINES_MAX 20000
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---------------------------------------------------------------- the YAML subset */

struct yline {
	int indent;
	char *text;    /* from the first non-blank character, comment and trailing blanks cut */
	int no;        /* 1-based, for messages */
};

struct yaml {
	struct yline *l;
	int n, at;
	struct sb_err *err;
};

static json_t *node_parse(struct yaml *y, int indent);

/* A " #" outside quotes starts a comment. */
static void comment_cut(char *s)
{
	char quote = 0;

	for (char *c = s; *c != '\0'; c++) {
		if (quote != 0) {
			if (*c == '\\' && quote == '"' && c[1] != '\0')
				c++;
			else if (*c == quote)
				quote = 0;
		} else if (*c == '"' || *c == '\'') {
			quote = *c;
		} else if (*c == '#' && (c == s || c[-1] == ' ' || c[-1] == '\t')) {
			*c = '\0';
			break;
		}
	}
	for (size_t n = strlen(s); n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'); n--)
		s[n - 1] = '\0';
}

static json_t *scalar(struct yaml *y, const char *s, int no)
{
	size_t n = strlen(s);

	if (strcmp(s, "{}") == 0)
		return json_object();
	if (strcmp(s, "[]") == 0)
		return json_array();
	if (s[0] == '{' || s[0] == '[' || s[0] == '|' || s[0] == '>' || s[0] == '&' || s[0] == '*' || s[0] == '!') {
		sb_invalid(y->err, "kubeconfig line %d: '%c' (flow collections, block scalars, anchors, tags) is "
			   "not read here: write the value plainly or use the JSON form", no, s[0]);
		return NULL;
	}
	if ((s[0] == '"' || s[0] == '\'') && n >= 2 && s[n - 1] == s[0]) {
		char *out = malloc(n), *o = out;
		json_t *v;

		if (out == NULL)
			return NULL;
		for (size_t i = 1; i + 1 < n; i++) {
			if (s[0] == '\'' && s[i] == '\'' && s[i + 1] == '\'')
				i++;
			else if (s[0] == '"' && s[i] == '\\' && i + 2 < n)
				i++;
			*o++ = s[i];
		}
		*o = '\0';
		v = json_string(out);
		free(out);
		return v;
	}
	if (s[0] == '"' || s[0] == '\'') {
		sb_invalid(y->err, "kubeconfig line %d: an unterminated quoted value", no);
		return NULL;
	}
	if (strcmp(s, "true") == 0 || strcmp(s, "false") == 0)
		return json_boolean(s[0] == 't');
	if (strcmp(s, "null") == 0 || strcmp(s, "~") == 0)
		return json_null();
	return json_string(s);
}

/* The ": " (or a final ':') that ends a mapping key, outside quotes; NULL when the line has none. */
static char *key_end(char *s)
{
	char quote = 0;

	for (char *c = s; *c != '\0'; c++) {
		if (quote != 0) {
			if (*c == quote)
				quote = 0;
		} else if (*c == '"' || *c == '\'') {
			quote = *c;
		} else if (*c == ':' && (c[1] == ' ' || c[1] == '\0')) {
			return c;
		}
	}
	return NULL;
}

/* The value of a key whose line ends at ':': a deeper block, a sequence at the same indent
 * ("clusters:\n- cluster: ..."), or null. */
static json_t *value_block(struct yaml *y, int indent)
{
	if (y->at < y->n && y->l[y->at].indent > indent)
		return node_parse(y, y->l[y->at].indent);
	if (y->at < y->n && y->l[y->at].indent == indent && strncmp(y->l[y->at].text, "- ", 2) == 0)
		return node_parse(y, indent);
	return json_null();
}

static json_t *mapping_parse(struct yaml *y, int indent)
{
	json_t *m = json_object();

	while (m != NULL && y->at < y->n && y->l[y->at].indent == indent && strncmp(y->l[y->at].text, "- ", 2) != 0 &&
	       strcmp(y->l[y->at].text, "-") != 0) {
		struct yline *l = &y->l[y->at];
		char *colon = key_end(l->text), *rest;
		json_t *key, *v;

		if (colon == NULL) {
			sb_invalid(y->err, "kubeconfig line %d: expected 'key: value'", l->no);
			break;
		}
		*colon = '\0';
		rest = colon[1] == '\0' ? colon + 1 : colon + 2;
		while (*rest == ' ')
			rest++;
		key = scalar(y, l->text, l->no);
		y->at++;
		v = *rest == '\0' ? value_block(y, indent) : scalar(y, rest, l->no);
		if (!json_is_string(key) || v == NULL || json_object_set_new(m, json_string_value(key), v) < 0) {
			json_decref(key);
			if (y->err->msg[0] == '\0')
				sb_invalid(y->err, "kubeconfig line %d: a key must be a string", l->no);
			break;
		}
		json_decref(key);
	}
	if (y->err->msg[0] != '\0') {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* "- x": the item's content is read as if the dash were a blank (a mapping at indent + 2). */
static json_t *sequence_parse(struct yaml *y, int indent)
{
	json_t *a = json_array();

	while (a != NULL && y->at < y->n && y->l[y->at].indent == indent &&
	       (strncmp(y->l[y->at].text, "- ", 2) == 0 || strcmp(y->l[y->at].text, "-") == 0)) {
		struct yline *l = &y->l[y->at];
		json_t *item;
		char *body = l->text[1] == '\0' ? l->text + 1 : l->text + 2;

		while (*body == ' ')
			body++;
		if (*body == '\0') {
			y->at++;
			item = value_block(y, indent);
		} else if (key_end(body) != NULL) {
			l->indent = indent + (int)(body - l->text);
			l->text = body;
			item = node_parse(y, l->indent);
		} else {
			y->at++;
			item = scalar(y, body, l->no);
		}
		if (item == NULL || json_array_append_new(a, item) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

static json_t *node_parse(struct yaml *y, int indent)
{
	if (strncmp(y->l[y->at].text, "- ", 2) == 0 || strcmp(y->l[y->at].text, "-") == 0)
		return sequence_parse(y, indent);
	return mapping_parse(y, indent);
}

json_t *k8s_yaml_parse(const char *text, struct sb_err *err)
{
	struct yaml y = { .err = err };
	char *copy;
	json_t *root = NULL;
	int no = 0;
	size_t skip = strspn(text, " \t\r\n");

	err->msg[0] = '\0';
	if (text[skip] == '{') {
		json_error_t je;

		root = json_loads(text, 0, &je);
		if (root == NULL)
			sb_invalid(err, "kubeconfig (JSON) line %d: %s", je.line, je.text);
		return root;
	}
	copy = strdup(text);
	y.l = calloc(YAML_LINES_MAX, sizeof *y.l);
	if (copy == NULL || y.l == NULL) {
		free(copy);
		free(y.l);
		sb_fail(err, ENOMEM, "reading the kubeconfig");
		return NULL;
	}
	/* strsep keeps empty lines, so line numbers stay true. */
	for (char *p = copy, *line; (line = strsep(&p, "\n")) != NULL;) {
		int indent = 0;

		no++;
		while (line[indent] == ' ')
			indent++;
		if (line[indent] == '\t') {
			sb_invalid(err, "kubeconfig line %d: a tab in the indentation", no);
			goto out;
		}
		comment_cut(line + indent);
		if (line[indent] == '\0' || strcmp(line + indent, "---") == 0)
			continue;
		if (y.n == YAML_LINES_MAX) {
			sb_fail(err, EFBIG, "kubeconfig: more than %d lines", YAML_LINES_MAX);
			goto out;
		}
		y.l[y.n++] = (struct yline){ indent, line + indent, no };
	}
	if (y.n == 0) {
		sb_invalid(err, "kubeconfig: empty");
		goto out;
	}
	root = node_parse(&y, y.l[0].indent);
	if (root != NULL && y.at < y.n) {
		sb_invalid(err, "kubeconfig line %d: unexpected indentation", y.l[y.at].no);
		json_decref(root);
		root = NULL;
	} else if (root == NULL && err->msg[0] == '\0') {
		sb_fail(err, ENOMEM, "reading the kubeconfig");
	}
out:
	free(y.l);
	free(copy);
	return root;
}

/* ---------------------------------------------------------------- the current context */

static int file_read(const char *path, char **out, size_t *len, struct sb_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf;
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "%s", path);
	buf = malloc(FILE_MAX + 1);
	if (buf == NULL) {
		close(fd);
		return sb_fail(err, ENOMEM, "%s", path);
	}
	n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + n, (size_t)(FILE_MAX + 1 - n));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			n = -1;
			break;
		}
		n += r;
		if (r == 0 || n > FILE_MAX)
			break;
	}
	if (n < 0) {
		sb_fail_errno(err, "reading %s", path);
		close(fd);
		free(buf);
		return -1;
	}
	close(fd);
	if (n > FILE_MAX) {
		free(buf);
		return sb_fail(err, EFBIG, "%s: over 1 MiB", path);
	}
	buf[n] = '\0';
	*out = buf;
	*len = (size_t)n;
	return 0;
}

/* The entry of a named list ("clusters", "users", "contexts") whose "name" is name: its inner object. */
static json_t *named(json_t *root, const char *list, const char *inner, const char *name)
{
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(root, list), i, e)
		if (json_is_string(json_object_get(e, "name")) && strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
			return json_object_get(e, inner);
	return NULL;
}

/* "<field>-data" (base64) or "<field>" (a file, relative to the kubeconfig's directory). 0 and
 * *out NULL when neither is given. */
static int pem_get(json_t *o, const char *field, const char *dir, char **out, size_t *len, struct sb_err *err)
{
	char key[64], path[PATH_MAX];
	const char *data, *file;
	size_t n = 0;

	*out = NULL;
	snprintf(key, sizeof key, "%s-data", field);
	data = json_string_value(json_object_get(o, key));
	file = json_string_value(json_object_get(o, field));
	if (data != NULL) {
		mbedtls_base64_decode(NULL, 0, &n, (const unsigned char *)data, strlen(data));
		*out = malloc(n + 1);
		if (*out == NULL)
			return sb_fail(err, ENOMEM, "kubeconfig %s", key);
		if (mbedtls_base64_decode((unsigned char *)*out, n + 1, len, (const unsigned char *)data, strlen(data)) != 0) {
			free(*out);
			*out = NULL;
			return sb_invalid(err, "kubeconfig: %s is not base64", key);
		}
		(*out)[*len] = '\0';
		return 0;
	}
	if (file == NULL)
		return 0;
	if (path_fmt(path, sizeof path, err, file[0] == '/' ? "%s" : "%s/%s", file[0] == '/' ? file : dir, file) < 0)
		return -1;
	if (file_read(path, out, len, err) < 0) {
		sb_err_prefix(err, "kubeconfig %s", field);
		return -1;
	}
	return 0;
}

static int server_set(struct k8s_conn *c, const char *server, struct sb_err *err)
{
	size_t n;

	if (server == NULL)
		return sb_invalid(err, "kubeconfig: the cluster has no server");
	/* Plain HTTP only to this host (`kubectl proxy`, a test's stand-in): credentials in clear
	 * text never cross a network. */
	if (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://127.0.0.1:", 17) != 0 &&
	    strncmp(server, "http://localhost:", 17) != 0)
		return sb_invalid(err, "kubeconfig: server '%s' must be https:// (http:// only on 127.0.0.1)", server);
	if (path_fmt(c->server, sizeof c->server, err, "%s", server) < 0)
		return -1;
	n = strlen(c->server);
	while (n > 0 && c->server[n - 1] == '/')
		c->server[--n] = '\0';
	return 0;
}

/* A token goes into an HTTP header: a line break in it would add headers of its own. */
static bool token_valid(const char *t)
{
	if (t[0] == '\0')
		return false;
	for (; *t != '\0'; t++)
		if (*t <= ' ' || *t == 0x7f)
			return false;
	return true;
}

static int context_load(struct k8s_conn *c, json_t *root, const char *dir, struct sb_err *err)
{
	const char *current = json_string_value(json_object_get(root, "current-context"));
	json_t *ctx, *cluster, *user;
	const char *cname, *uname, *ns, *token;
	char *file_token = NULL;
	size_t n;

	if (current == NULL || current[0] == '\0')
		return sb_invalid(err, "kubeconfig: no current-context");
	ctx = named(root, "contexts", "context", current);
	if (ctx == NULL)
		return sb_invalid(err, "kubeconfig: current-context '%s' is not among its contexts", current);
	cname = json_string_value(json_object_get(ctx, "cluster"));
	uname = json_string_value(json_object_get(ctx, "user"));
	ns = json_string_value(json_object_get(ctx, "namespace"));
	cluster = cname ? named(root, "clusters", "cluster", cname) : NULL;
	user = uname ? named(root, "users", "user", uname) : NULL;
	if (cluster == NULL)
		return sb_invalid(err, "kubeconfig: context '%s' names no cluster it holds", current);
	if (json_is_true(json_object_get(cluster, "insecure-skip-tls-verify")))
		return sb_invalid(err, "kubeconfig: cluster '%s' turns server verification off "
				  "(insecure-skip-tls-verify): refused", cname);
	if (user != NULL && (json_object_get(user, "exec") != NULL || json_object_get(user, "auth-provider") != NULL))
		return sb_invalid(err, "kubeconfig: user '%s' gets its credentials from a program (exec or "
				  "auth-provider), which the manager never runs: give it a token or a client certificate",
				  uname);
	if (server_set(c, json_string_value(json_object_get(cluster, "server")), err) < 0 ||
	    pem_get(cluster, "certificate-authority", dir, &c->ca_pem, &c->ca_len, err) < 0 ||
	    pem_get(user, "client-certificate", dir, &c->cert_pem, &c->cert_len, err) < 0 ||
	    pem_get(user, "client-key", dir, &c->key_pem, &c->key_len, err) < 0 ||
	    pem_get(user, "token-file", dir, &file_token, &n, err) < 0)
		return -1;
	token = json_string_value(json_object_get(user, "token"));
	if (token != NULL && (c->token = strdup(token)) == NULL)
		return sb_fail(err, ENOMEM, "kubeconfig token");
	if (token == NULL && file_token != NULL) {
		file_token[strcspn(file_token, "\r\n")] = '\0';
		c->token = file_token;
		file_token = NULL;
	}
	free(file_token);
	if (c->token != NULL && !token_valid(c->token))
		return sb_invalid(err, "kubeconfig: user '%s' has a token with blanks or control characters",
				  uname ? uname : "");
	if ((c->cert_pem == NULL) != (c->key_pem == NULL))
		return sb_invalid(err, "kubeconfig: user '%s' has a client certificate without its key, or a key "
				  "without its certificate", uname ? uname : "");
	if (c->token == NULL && c->cert_pem == NULL)
		return sb_invalid(err, "kubeconfig: user '%s' has neither a token nor a client certificate",
				  uname ? uname : "(none)");
	if (ns != NULL && path_fmt(c->namespace, sizeof c->namespace, err, "%s", ns) < 0)
		return -1;
	return 0;
}

/* The pod's own service account: the server from the environment kubelet sets, its token, CA and
 * namespace from the mounted files. */
static int in_cluster_load(struct k8s_conn *c, struct sb_err *err)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
	char server[300], *ns = NULL;
	size_t n;

	if (host == NULL || port == NULL)
		return sb_fail(err, ENOENT, "no kubeconfig given, and not in a pod (KUBERNETES_SERVICE_HOST unset): "
			       "give --kubeconfig PATH");
	snprintf(server, sizeof server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
	if (server_set(c, server, err) < 0 || file_read(SA_DIR "/token", &c->token, &n, err) < 0 ||
	    file_read(SA_DIR "/ca.crt", &c->ca_pem, &c->ca_len, err) < 0)
		return -1;
	c->token[strcspn(c->token, "\r\n")] = '\0';
	if (!token_valid(c->token))
		return sb_invalid(err, "%s/token holds blanks or control characters", SA_DIR);
	if (file_read(SA_DIR "/namespace", &ns, &n, err) == 0) {
		ns[strcspn(ns, "\r\n")] = '\0';
		snprintf(c->namespace, sizeof c->namespace, "%s", ns);
		free(ns);
	}
	err->msg[0] = '\0';
	return 0;
}

int k8s_conn_load(struct k8s_conn *c, const char *path, struct sb_err *err)
{
	char *text = NULL, dir[PATH_MAX];
	json_t *root;
	size_t len;
	int rc;

	memset(c, 0, sizeof *c);
	if (path[0] == '\0')
		rc = in_cluster_load(c, err);
	else if (file_read(path, &text, &len, err) < 0)
		rc = -1;
	else if ((root = k8s_yaml_parse(text, err)) == NULL)
		rc = -1;
	else {
		snprintf(dir, sizeof dir, "%s", path);
		rc = context_load(c, root, dirname(dir), err);
		json_decref(root);
	}
	free(text);
	if (rc < 0) {
		if (path[0] != '\0')
			sb_err_prefix(err, "%s", path);
		k8s_conn_free(c);
	}
	return rc;
}

void k8s_conn_free(struct k8s_conn *c)
{
	free(c->ca_pem);
	free(c->cert_pem);
	free(c->key_pem);
	if (c->token != NULL)
		explicit_bzero(c->token, strlen(c->token));
	free(c->token);
	memset(c, 0, sizeof *c);
}
