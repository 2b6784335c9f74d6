/* The manager's configuration: defaults, then the config file (JSON), then flags; every flag of
 * `serve` can also be set in the file. Checked once at start, with messages naming the key. */
#ifndef SB_CONFIG_H
#define SB_CONFIG_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "egress_allow.h"
#include "error.h"

struct config {
	char state_dir[PATH_MAX];   /* records, CA, per-sandbox private directories, the socket */
	char volume[PATH_MAX];      /* the persistent volume of DESIGN.md */
	char socket[PATH_MAX];
	char backend[32];           /* "process" (default), "podman", "kubernetes" */
	char podman_socket[PATH_MAX];
	char image[256];            /* podman, kubernetes: the sandbox image (images/), the agent as entrypoint */
	char podman_seccomp[PATH_MAX]; /* podman: seccomp profile (images/seccomp.json); "" = podman's */
	char podman_network[64];    /* podman: the containers' network mode, default "bridge" */
	char network[8];            /* a new session's network policy when it names none: "open", "none" or "proxy" */
	int64_t sandbox_nano_cpus;  /* limits of each sandbox: podman's, or the process backend's cgroup */
	int64_t sandbox_memory_mib; /* (only with cgroup_parent: without one it sets none) */
	int64_t sandbox_pids;
	char limit_given[32];       /* one of those three, given explicitly: the process backend needs a cgroup */
	int64_t tmp_bytes;          /* every sandbox's /tmp (tmpfs size), and the plan's tmpfs entries */
	int64_t shm_bytes;          /* every sandbox's /dev/shm (tmpfs size; podman ShmSize) */
	char cgroup_parent[PATH_MAX]; /* process: a delegated cgroup v2 directory, one child per sandbox */
	char podman_only[32];       /* a podman-only setting that was given: refused on other backends */
	char kubeconfig[PATH_MAX];  /* kubernetes: "" = the service account of the pod the manager runs in */
	char k8s_namespace[64];     /* kubernetes: "" = the kubeconfig context's, else "default" */
	char k8s_volume[PATH_MAX + 16]; /* kubernetes: "hostpath:DIR" or "pvc:CLAIM" */
	char k8s_only[32];          /* a kubernetes-only setting that was given: refused on other backends */
	char agent[PATH_MAX];       /* the static sandbox-agent binary */
	unsigned default_timeout;   /* seconds, when a call names none */
	unsigned max_timeout;       /* a call over it is refused */
	unsigned idle_seconds;      /* an idle sandbox is retired after this; the workspace stays */
	unsigned sandboxes_per_identity; /* live sandboxes of one identity on this manager (sandbox.c) */
	bool start_at_create;       /* sandbox-start create: a session's sandbox starts at its create (early_start.c) */
	unsigned stop_grace_seconds; /* at SIGTERM: how long running calls may finish before they are cancelled */
	unsigned long output_limit; /* per stream, bytes */
	unsigned long record_output_limit; /* per stream, bytes kept in an exec's record (invariant 13) */
	uid_t sandbox_uid;          /* an unprivileged manager's sandboxes' uid and gid (the same inside and */
	gid_t sandbox_gid;          /* on the host): its own, the only ones it may map */
	uid_t ids_uid;              /* a root manager: each identity's ids from this range (identity_ids.h): */
	gid_t ids_gid;              /* uids ids_uid.., gids ids_gid.., ids_count of each */
	unsigned long ids_count;    /* 0 until given or defaulted */
	char ids_from[160];         /* where the range came from, for messages and status */
	bool ids_subuid;            /* `sandbox-ids subuid`: the user's subordinate ids (identity_userns.c) */
	bool ids_own;               /* `sandbox-ids own` (unprivileged): every identity the manager's uid */
	bool ids_userns;            /* the daemon runs in that user namespace (ids mapped to themselves) */
	json_t *resources;          /* {"NAME": "BROKER:ARG"} declared by the operator */
	struct egress_allow egress_allow; /* where the egress proxy tunnels to (policy proxy; egress_allow.h) */
	char metrics_listen[PATH_MAX + 8]; /* "" (off), or where GET /metrics is served (metrics_http.h) */
	char store[PATH_MAX + 4096]; /* "" (<state-dir>/records.db), "sqlite:PATH" or "postgres:CONNINFO" */
	char manager_id[65];        /* this manager's name in the store's leases (default: the host name) */
	unsigned long lease_ms;     /* a session's lease: renewed every third of it, taken over after it */
	json_t *tls_listen;         /* ["HOST:PORT", ...]: the control API over mutual TLS (--listen tls:HOST:PORT) */
	json_t *tls_names;          /* the names the manager's server certificate carries (--tls-name) */
	char tls_cert[PATH_MAX];    /* the operator's own server certificate, key and client CA; "" : the */
	char tls_key[PATH_MAX];     /* manager's CA issues them (<state-dir>/ca) */
	char tls_client_ca[PATH_MAX];
	char tls_principals[PATH_MAX]; /* the principals file (principals.h); required with --listen */
	char tls_deny[PATH_MAX];    /* the deny list, "" none */
	char advertise[PATH_MAX];   /* the address "owned" answers give for this manager: "" its socket, or
	                               tls://HOST:PORT for clients on other hosts (docs/scaling.md) */
	int64_t disk_reserve;       /* bytes the manager holds in the state directory when the volume shares its
	                               filesystem, to finish its records when a command fills it; 0: none */
};

/* Parse `serve`'s flags (and the file named by --config); fills every default. 0: loaded;
 * CONFIG_HELP: --help was asked (nothing else done); CONFIG_BAD_FLAG: a flag is unknown, lacks its
 * value or has a bad one (err says which: a usage error); -1: err (the file, or a setting that
 * cannot hold with the others). */
#define CONFIG_HELP 1
#define CONFIG_BAD_FLAG 2
int config_load(struct config *c, int argc, char **argv, struct sb_err *err);
/* `serve`'s usage and flags. */
void config_usage(FILE *f);
void config_free(struct config *c);

#endif
