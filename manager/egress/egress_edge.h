/* A Kubernetes grant served at the edge (issue 28), and an HTTP API grant the same way (spec.header): under the network policy `proxy` the sandbox's
 * kubeconfig names http://127.0.0.1:PORT of its own loopback and holds no credential; the manager
 * listens there (the listener made inside the sandbox's network namespace), judges each request by
 * the grant (k8s_request.h), adds the grant's bearer token, verifies the API server's certificate,
 * forwards with libcurl and streams the answer back (watch streams and chunked bodies included),
 * recording every request in the sandbox's egress log. Served with libmicrohttpd, one thread per
 * connection, bounded. Connection upgrades (exec, attach, port-forward) are refused: a `read` grant
 * refuses them by its verbs, and a `write` grant's are not carried through the edge (said in the
 * 403). */
#ifndef SB_EGRESS_EDGE_H
#define SB_EGRESS_EDGE_H

#include "egress_log.h"
#include "error.h"

#define EDGE_CONN_MAX 16                 /* connections per grant per sandbox; more wait in the backlog */
#define EDGE_BODY_MAX (3 * 1024 * 1024)  /* a request body: the API server's own limit is 3 MiB */
#define EDGE_IDLE_S 300                  /* a connection with no byte either way */
#define EDGE_CONNECT_MS 10000            /* to the API server */
#define EDGE_BUF_BYTES 65536             /* an answer's bytes between the API server and the sandbox */

struct egress_edge_spec {
	int listen_fd;           /* bound and listening in the sandbox's namespace; taken whatever happens */
	const char *session;     /* for logs */
	const char *grant;       /* "kubernetes:prod", "http:tracker" */
	const char *access;      /* "read" or "write" */
	const char *server;      /* the API server's URL, with a Rancher cluster's path if any */
	const char *ca_file;     /* "" for the system trust store */
	const char *token;       /* the bearer token: copied, wiped when the edge stops; NULL with header */
	/* An http: grant (broker.h broker_http): "Name: value", the header added to each request in
	 * place of the bearer token; copied, wiped when the edge stops. Its requests are judged by
	 * method: `read` passes GET, HEAD and OPTIONS, `write` all; a refusal is a 403 whose message
	 * names the grant, the access and the method. NULL: a Kubernetes grant. */
	const char *header;
	struct egress_log *log;  /* the sandbox's egress log: every request is appended (not owned) */
	/* Called for a request that may change something (k8s_request_mutating), before it leaves
	 * (status 0) and once it ends (its status, 0 if none came): the caller keeps it on record
	 * at once, so that a manager killed meanwhile leaves the evidence. key names the request
	 * (unique per edge). NULL: none. */
	void (*note)(void *ctx, const char *key, const struct egress_request *req);
	void *note_ctx;
};

struct egress_edge;

/* Starts serving spec->listen_fd. 0, or -1 with err (the descriptor closed either way). */
int egress_edge_start(const struct egress_edge_spec *spec, struct egress_edge **out, struct sb_err *err);

/* Stops serving: the listener closed, every connection ended (their upstream transfers with
 * them), the token wiped; *e becomes NULL. NULL: nothing. */
void egress_edge_stop(struct egress_edge **e);

#endif
