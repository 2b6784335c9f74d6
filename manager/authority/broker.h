/* Credential brokers: each materialises one grant (a resource at an access) into one file of a
 * sandbox's authority snapshot, and says when that credential expires. A broker never writes the
 * manager's own API credential anywhere, never logs a credential, and never follows a redirect.
 *
 * ARG formats (the part after BROKER: in `--resource NAME=BROKER:ARG`):
 *   tokenrequest:/abs/path.json   {"server": "https://host:6443", "ca_file": "/abs/ca.crt",
 *                                  "namespace": "ci", "read_service_account": "viewer",
 *                                  "write_service_account": "deployer", "token_file": "/abs/token",
 *                                  "expiration_seconds": 3600, "audiences": ["..."],
 *                                  "timeout_seconds": 15}
 *   rancher:/abs/path.json        {"server": "https://rancher.example", "ca_file": "/abs/ca.crt",
 *                                  "cluster_id": "c-m-abc123", "read_token_file": "/abs/read.token",
 *                                  "write_token_file": "/abs/write.token", "ttl_seconds": 3600,
 *                                  "timeout_seconds": 15}
 *   header:/abs/path.json         {"server": "https://api.example[:port][/prefix]", "ca_file": "/abs/ca.crt",
 *                                  "header": "Authorization: Bearer {token}",
 *                                  "read_token_file": "/abs/read.token", "write_token_file": "/abs/w.token"}
 * Required: server, namespace + at least one service account (tokenrequest), cluster_id + at least
 * one token file (rancher, header), ca_file (tokenrequest only; rancher and header fall back to the
 * system trust store), header (header: 'Name: value' with exactly one {token}). An access whose
 * service account or token file is not configured is refused. The header broker serves http:NAME
 * resources, at the edge only (network proxy). */
#ifndef SB_BROKER_H
#define SB_BROKER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

#define BROKER_LIFETIME_MIN 600      /* seconds: the TokenRequest API's own minimum */
#define BROKER_LIFETIME_DEFAULT 3600
#define BROKER_LIFETIME_MAX (7 * 24 * 3600)
#define BROKER_TIMEOUT_DEFAULT 15    /* seconds for one API call, connection included */

/* The object a token is bound to, so that it dies with it (a TokenRequest's spec.boundObjectRef):
 * on the kubernetes backend the sandbox's pod, in the namespace of the token's service account. */
struct broker_bound {
	const char *kind;        /* "Pod" */
	const char *api_version; /* "v1" */
	const char *ns;
	const char *name;
	const char *uid;
};

/* Credentials added at the edge (issue 28, the network policy `proxy`): the sandbox's kubeconfig
 * names a plain-HTTP endpoint on its own loopback and holds no credential; the API server's URL, its
 * CA and the token stay here, in the manager's memory, for its egress proxy to add to each request
 * the grant allows. */
struct broker_edge {
	unsigned port;            /* in: the sandbox's loopback port its kubeconfig names */
	char server[512];         /* out: the API server's URL (a Rancher cluster's, with its path) */
	char ca_file[4096];       /* out: "" for the system trust store */
	char *token;              /* out: heap; broker_edge_clear wipes and frees it */
	/* out, an http: grant's (broker_http) instead of token: "Name: value" with the token in it,
	 * the one header the edge adds to that server's requests; heap, wiped by broker_edge_clear. */
	char *header;
};

/* Wipes and frees e's token; e is empty after. */
void broker_edge_clear(struct broker_edge *e);

struct broker_request {
	const char *resource;  /* "kubernetes:staging": names the credential in messages and kubeconfigs */
	const char *access;    /* "read" or "write" */
	const char *arg;       /* the ARG of BROKER:ARG */
	const char *label;     /* the sandbox this is for ("<session>.g<generation>"): token descriptions */
	const char *path;      /* the file to create (O_EXCL, 0400) */
	uid_t uid;             /* its owner: the sandbox's ids */
	gid_t gid;
	const struct broker_bound *bound; /* NULL: the credential is bound to nothing, and lives until its expiry */
	struct broker_edge *edge;         /* non-NULL: the credential is kept here, the file holds none */
};

struct broker_result {
	int64_t expires_ms;    /* wall clock (ms since the epoch) when the credential expires; 0: never */
	char revoke_id[128];   /* non-empty: the broker can revoke the credential by this id (rancher) */
};

/* TokenRequest: a ServiceAccount token of the read or write service account, as a kubeconfig;
 * bound to req->bound when given (which must be in the service account's namespace). */
int broker_tokenrequest(const struct broker_request *req, struct broker_result *out, struct sb_err *err);

/* The service account ("NS/NAME", into out) whose token broker_tokenrequest would request for
 * req->access: what a pod the token is bound to must run as. Reads the config only; sends nothing. */
int broker_tokenrequest_account(const struct broker_request *req, char *out, size_t len, struct sb_err *err);

/* Rancher: a cluster-scoped Rancher token with a TTL, as a kubeconfig for <server>/k8s/clusters/<id>. */
int broker_rancher(const struct broker_request *req, struct broker_result *out, struct sb_err *err);

/* Delete a Rancher token made by broker_rancher (id: its revoke_id), with the access's credential.
 * A token already gone (404) counts as revoked. */
int broker_rancher_revoke(const char *resource, const char *arg, const char *access, const char *id,
			  struct sb_err *err);

/* header: an http:NAME grant, kept in req->edge (required: the sandbox never holds it) as the
 * server, its CA file and the header built from the template with the access's token. */
int broker_http(const struct broker_request *req, struct sb_err *err);

/* The config of an http: resource checked at the manager's start: its keys, server, template, and
 * every token file it names read as broker_token_read does (then wiped). */
int broker_http_check(const char *resource, const char *arg, struct sb_err *err);

/* tmpl ("Name: value", one {token} in the value) with token in place of {token}, into *out
 * (malloc'd; the caller wipes and frees it). Refused: no name or a name that is not an RFC 9110
 * token, Host or a framing header, a control character, not exactly one {token}, a token with
 * spaces or controls. No message holds the token. */
int broker_header_build(const char *resource, const char *tmpl, const char *token, char **out, struct sb_err *err);

/* The variable that tells a sandbox where an http: grant's edge is: INFRA_SANDBOX_HTTP_ and the
 * part after "http:" upper-cased, every other byte than a letter or digit as '_'. */
void broker_http_env_name(const char *resource, char *out, size_t len);

/* ---- shared by the brokers (broker.c) ---- */

/* A broker's JSON config file: an object whose keys are all in `allowed` (NULL-terminated). */
json_t *broker_config_load(const char *resource, const char *path, const char *const *allowed,
			   struct sb_err *err);

/* Field `key` as a string into out: "" when missing and optional; an error naming the resource
 * when missing and required, not a string, or too long. */
int broker_config_string(const char *resource, json_t *cfg, const char *key, bool required, char *out,
			 size_t len, struct sb_err *err);

/* Field `key` as a whole number in [min, max]; def when missing. */
int broker_config_int(const char *resource, json_t *cfg, const char *key, long min, long max, long def,
		      long *out, struct sb_err *err);

/* "https://host[:port][/prefix]" without a trailing '/', no user info, query or fragment. */
int broker_check_server(const char *resource, char *server, struct sb_err *err);

/* [a-z0-9.-]: a Kubernetes name (or a Rancher id, with extra='_' allowed) safe in a URL path. */
int broker_check_name(const char *resource, const char *what, const char *name, bool rancher, struct sb_err *err);

/* The manager's API credential from path (a regular file, not accessible to others, trailing
 * whitespace removed). The caller wipes out with explicit_bzero when done. */
int broker_token_read(const char *resource, const char *path, char *out, size_t len, struct sb_err *err);

struct broker_http {
	const char *resource;  /* for messages */
	const char *api;       /* for messages: "the TokenRequest API", "the Rancher API" */
	const char *method;    /* "POST" or "DELETE" */
	const char *url;
	const char *ca_file;   /* "" or NULL: the system trust store */
	const char *bearer;    /* the manager's credential: sent, never logged nor copied */
	const char *body;      /* JSON text, or NULL */
	long timeout_ms;
};

/* One HTTPS call. 2xx: 0, with *status and the parsed body in *out (NULL when empty or not JSON).
 * Otherwise -1 with *status (0 when no answer) and a message naming the resource, the API, the
 * status and the server's own message (Kubernetes Status / Rancher error "message"). */
int broker_http_call(const struct broker_http *h, long *status, json_t **out, struct sb_err *err);

/* RFC 3339 ("2024-05-01T12:00:00Z", fractions and offsets accepted) as ms since the epoch. */
int broker_time_parse(const char *text, int64_t *out_ms);

struct broker_kubeconfig {
	const char *server;    /* the cluster's API URL */
	const char *ca_file;   /* embedded as certificate-authority-data; "" or NULL: none */
	const char *token;
};

/* A kubeconfig (JSON, which kubectl reads as YAML) holding one cluster, user and context named after
 * the resource (its part after "kubernetes:"), written to req->path (0400, owned by req->uid/gid).
 * With req->edge: the server is http://127.0.0.1:PORT, the user has no credential, and k's server,
 * CA file and token are copied into req->edge instead. */
int broker_kubeconfig_write(const struct broker_request *req, const struct broker_kubeconfig *k,
			    struct sb_err *err);

#endif
