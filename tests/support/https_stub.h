/* The local HTTPS stand-in of tests/brokers/server.py (the TokenRequest and Rancher APIs, any other
 * answer by its --responses file, every request logged as a JSON line), started by a C test with a
 * certificate for "localhost" of the project's own CA. Header-only, shared by test_brokers and
 * test_egress_edge. Binds 127.0.0.1 only. */
#ifndef SB_HTTPS_STUB_H
#define SB_HTTPS_STUB_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

/* Starts the server: its TLS files in tls_dir (server.crt, server.key), its port written to
 * port_file, requests to log, overrides read from responses, bearer the credential it accepts.
 * The URL ("https://localhost:PORT") into server; the pid, or -1. */
static inline pid_t https_stub_start(const char *tls_dir, const char *port_file, const char *log,
				     const char *responses, const char *bearer, char *server, size_t server_len)
{
	const char *script = getenv("BROKER_TEST_SERVER") ?: "tests/brokers/server.py";
	char cert[256], key[256], port[16] = "";
	char *argv[] = { "python3", (char *)script, "--cert", cert, "--key", key, "--port-file", (char *)port_file,
			 "--log", (char *)log, "--bearer", (char *)bearer, "--responses", (char *)responses, NULL };
	extern char **environ;
	pid_t pid;

	snprintf(cert, sizeof cert, "%s/server.crt", tls_dir);
	snprintf(key, sizeof key, "%s/server.key", tls_dir);
	if (access(script, R_OK) < 0) {
		fprintf(stderr, "https_stub: %s not found (run from the repository root or set BROKER_TEST_SERVER)\n",
			script);
		return -1;
	}
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		execve("/usr/bin/python3", argv, environ);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		FILE *f = fopen(port_file, "r");

		if (f != NULL) {
			if (fgets(port, sizeof port, f) == NULL)
				port[0] = '\0';
			fclose(f);
			port[strcspn(port, "\n")] = '\0';
			snprintf(server, server_len, "https://localhost:%s", port);
			return pid;
		}
		usleep(50 * 1000);
	}
	fprintf(stderr, "https_stub: the HTTPS test server did not start\n");
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	return -1;
}

static inline void https_stub_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
}

/* Before a case: no overrides, an empty request log. 0, or -1. */
static inline int https_stub_reset(const char *responses, const char *log)
{
	unlink(responses);
	return truncate(log, 0) < 0 && errno != ENOENT ? -1 : 0;
}

/* The requests logged so far, as a JSON array of {"method","path","headers","body"}. */
static inline json_t *https_stub_requests(const char *log)
{
	json_t *all = json_array();
	char line[65536];
	FILE *f = fopen(log, "r");

	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		json_array_append_new(all, json_loads(line, 0, NULL));
	if (f != NULL)
		fclose(f);
	return all;
}

#endif
