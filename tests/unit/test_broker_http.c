/* Unit tests for the header broker of http: resources (manager/authority/broker_http.c): the header
 * template (bad ones refused, the value built), the config (bad ones refused with a message that
 * names the fault), the grant kept at the edge only (snapshot_make refuses it, snapshot_make_edge
 * serves it with its variable's name, and no file holds the token), and no message ever holding a
 * token. No network: the header broker calls nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "broker.h"
#include "grants.h"

#define SECRET "s3cr3t-token-0123456789"

static char base[64];

static void write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(chmod(path, mode), 0);
}

/* A config at base/NAME.json with the fields given as JSON object members. */
static const char *config_at(const char *name, const char *members)
{
	static char path[128];
	char text[2048];

	snprintf(path, sizeof path, "%s/%s.json", base, name);
	snprintf(text, sizeof text, "{%s}", members);
	write_text(path, text, 0600);
	return path;
}

static int setup(void **state)
{
	char path[128];

	(void)state;
	snprintf(base, sizeof base, "/tmp/test_broker_http.XXXXXX");
	assert_non_null(mkdtemp(base));
	snprintf(path, sizeof path, "%s/read.token", base);
	write_text(path, SECRET "\n", 0600);
	snprintf(path, sizeof path, "%s/open.token", base);
	write_text(path, SECRET, 0644);
	return 0;
}

static int teardown(void **state)
{
	/* Only files this test made, by name: no shell. */
	static const char *const names[] = { "read.token", "open.token", "c.json", NULL };
	char path[160];

	(void)state;
	for (size_t i = 0; names[i] != NULL; i++) {
		snprintf(path, sizeof path, "%s/%s", base, names[i]);
		unlink(path);
	}
	rmdir(base);
	return 0;
}

static void template_builds_the_value(void **state)
{
	struct sb_err err;
	char *h = NULL;

	(void)state;
	assert_int_equal(broker_header_build("http:x", "Authorization: Bearer {token}", SECRET, &h, &err), 0);
	assert_string_equal(h, "Authorization: Bearer " SECRET);
	free(h);
	assert_int_equal(broker_header_build("http:x", "X-Api-Key: {token}", SECRET, &h, &err), 0);
	assert_string_equal(h, "X-Api-Key: " SECRET);
	free(h);
	assert_int_equal(broker_header_build("http:x", "Authorization: token {token} (ci)", SECRET, &h, &err), 0);
	assert_string_equal(h, "Authorization: token " SECRET " (ci)");
	free(h);
}

static void template_refusals(void **state)
{
	static const char *const bad[] = {
		"Authorization Bearer {token}",       /* no colon */
		": Bearer {token}",                    /* no name */
		"Auth orization: Bearer {token}",      /* a space in the name */
		"Authorization: Bearer",               /* no {token} */
		"Authorization: {token} {token}",      /* two */
		"{token}: x",                          /* {token} in the name */
		"Authorization: Bearer {token}\r\nX-Evil: 1", /* a second header */
		"Host: {token}.example",               /* libcurl's */
		"content-length: {token}",
		"Transfer-Encoding: {token}",
		NULL,
	};
	struct sb_err err;
	char *h;

	(void)state;
	for (size_t i = 0; bad[i] != NULL; i++) {
		h = (char *)1;
		sb_err_clear(&err);
		assert_int_equal(broker_header_build("http:x", bad[i], SECRET, &h, &err), -1);
		assert_null(h);
		assert_non_null(strstr(err.msg, "resource http:x"));
		assert_null(strstr(err.msg, SECRET));
	}
	/* A token that would end the header line is refused, and not echoed. */
	assert_int_equal(broker_header_build("http:x", "A: {token}", SECRET "\r\nX: 1", &h, &err), -1);
	assert_null(strstr(err.msg, SECRET));
}

static void check_refuses(const char *members, const char *words)
{
	struct sb_err err;

	sb_err_clear(&err);
	assert_int_equal(broker_http_check("http:x", config_at("c", members), &err), -1);
	if (strstr(err.msg, words) == NULL)
		fail_msg("'%s' was refused with '%s', not naming '%s'", members, err.msg, words);
	assert_null(strstr(err.msg, SECRET));
}

static void config_refusals(void **state)
{
	char tok[160], open_tok[160], m[1024];
	struct sb_err err;

	(void)state;
	snprintf(tok, sizeof tok, "%s/read.token", base);
	snprintf(open_tok, sizeof open_tok, "%s/open.token", base);
	snprintf(m, sizeof m, "\"server\": \"https://api.example\", \"header\": \"A: {token}\", \"read_token_file\": \"%s\"",
		 tok);
	assert_int_equal(broker_http_check("http:x", config_at("c", m), &err), 0);
	assert_int_equal(broker_http_check("http:x", "relative.json", &err), -1);
	check_refuses("\"header\": \"A: {token}\", \"read_token_file\": \"/x\"", "\"server\"");
	check_refuses("\"server\": \"http://api.example\", \"header\": \"A: {token}\", \"read_token_file\": \"/x\"",
		      "https://");
	check_refuses("\"server\": \"https://api.example\", \"read_token_file\": \"/x\"", "\"header\"");
	check_refuses("\"server\": \"https://api.example\", \"header\": \"A: {token}\"", "read_token_file");
	check_refuses("\"server\": \"https://api.example\", \"header\": \"A: Bearer\", \"read_token_file\": \"/x\"",
		      "exactly one {token}");
	check_refuses("\"server\": \"https://api.example\", \"header\": \"A: {token}\", \"token\": \"x\"",
		      "unknown key 'token'");
	check_refuses("\"server\": \"https://api.example\", \"header\": \"A: {token}\", \"read_token_file\": \"/nonexistent/t\"",
		      "/nonexistent/t");
	snprintf(m, sizeof m, "\"server\": \"https://api.example\", \"header\": \"A: {token}\", \"write_token_file\": \"%s\"",
		 open_tok);
	check_refuses(m, "no access for others");
}

/* The grant at the edge: its header built with the read token, its variable named, no file made. */
static void snapshot_serves_it_at_the_edge(void **state)
{
	char tok[160], m[1024], priv[128], arg[200];
	json_t *grants = json_pack("{s:s}", "http:my-api.v2", "read"), *resources;
	struct snapshot snap;
	struct sb_err err;
	struct dirent *d;
	DIR *dir;

	(void)state;
	snprintf(tok, sizeof tok, "%s/read.token", base);
	snprintf(m, sizeof m, "\"server\": \"https://api.example:8443/v1/\", \"header\": \"X-Key: k={token}\", "
		 "\"read_token_file\": \"%s\"", tok);
	snprintf(arg, sizeof arg, "header:%s", config_at("c", m));
	resources = json_pack("{s:s}", "http:my-api.v2", arg);
	snprintf(priv, sizeof priv, "%s/priv", base);
	assert_int_equal(mkdir(priv, 0700), 0);
	assert_int_equal(snapshot_make_edge(priv, grants, resources, getuid(), getgid(), &snap, &err), 0);
	assert_int_equal(snap.edges_n, 1);
	assert_string_equal(snap.edges[0].cred.header, "X-Key: k=" SECRET);
	assert_null(snap.edges[0].cred.token);
	assert_string_equal(snap.edges[0].cred.server, "https://api.example:8443/v1");
	assert_int_equal(snap.edges[0].cred.port, SNAPSHOT_EDGE_PORT);
	assert_string_equal(snap.edges[0].env_name, "INFRA_SANDBOX_HTTP_MY_API_V2");
	assert_string_equal(snap.kubeconfig, "");
	dir = opendir(snap.dir);
	assert_non_null(dir);
	while ((d = readdir(dir)) != NULL)
		assert_true(d->d_name[0] == '.');
	closedir(dir);
	rmdir(snap.dir);
	snapshot_edges_free(&snap);

	/* Not at the edge: refused, saying why; the write access has no token file. */
	sb_err_clear(&err);
	assert_int_equal(snapshot_make(priv, grants, resources, getuid(), getgid(), NULL, &snap, &err), -1);
	assert_non_null(strstr(err.msg, "network proxy"));
	rmdir(snap.dir);
	json_object_set_new(grants, "http:my-api.v2", json_string("write"));
	assert_int_equal(snapshot_make_edge(priv, grants, resources, getuid(), getgid(), &snap, &err), -1);
	assert_non_null(strstr(err.msg, "write_token_file"));
	assert_null(snap.edges);
	rmdir(snap.dir);
	rmdir(priv);
	json_decref(grants);
	json_decref(resources);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(template_builds_the_value),
		cmocka_unit_test(template_refusals),
		cmocka_unit_test(config_refusals),
		cmocka_unit_test(snapshot_serves_it_at_the_edge),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
