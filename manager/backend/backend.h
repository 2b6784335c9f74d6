/* The runtime backend interface: how a session's sandbox is started, stopped and proven gone.
 * One implementation per runtime (backend_process.c today; podman and kubernetes later). The
 * manager core decides WHEN; a backend only knows HOW, and never decides that a sandbox is gone
 * without evidence from its runtime: a reaped PID-namespace init, a container in state "exited",
 * a pod container terminated for the recorded UID. An accepted kill request is never evidence. */
#ifndef SB_BACKEND_H
#define SB_BACKEND_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "mount_plan.h"

/* The sandbox's own object in its runtime that credentials can be bound to, so that they stop
 * working when it is deleted (a TokenRequest's boundObjectRef): the kubernetes backend's pod. */
struct sandbox_bound {
	const char *kind;                /* "Pod" */
	const char *api_version;         /* "v1" */
	const char *ns;
	const char *name;
	const char *uid;
};

/* Everything a backend needs to start one sandbox generation. The manager core has already
 * issued the agent's certificate and written the receipt key into private_dir. */
/* A session's network policy (issue 26, N1): every sandbox has a network namespace of its own;
 * `none` gives it loopback only, `open` also a way out through a user-mode NAT (process backend:
 * slirp4netns) from which the host's loopback, and so the manager's listeners, are unreachable;
 * `proxy` loopback only, its way out the manager's egress proxy (manager/egress/). */
enum sandbox_network {
	SANDBOX_NETWORK_OPEN = 0,   /* the default, as the seed describes */
	SANDBOX_NETWORK_NONE,
	SANDBOX_NETWORK_PROXY,      /* loopback only, and the manager's egress proxy listening on the
				     * sandbox's 127.0.0.1:EGRESS_PROXY_PORT (issue 28; on kubernetes the pod
				     * network stays, with a NetworkPolicy allowing no egress) */
};

/* "open", "none" or "proxy"; sandbox_network_parse: 0, or -1 for any other word. */
const char *sandbox_network_name(enum sandbox_network n);
int sandbox_network_parse(const char *word, enum sandbox_network *out);

struct sandbox_spec {
	const char *session;
	uint64_t generation;
	enum sandbox_network network;    /* the session's policy */
	const struct mount_plan *plan;   /* from mount_plan_build(): what the sandbox sees */
	const char *private_dir;         /* manager-owned, 0700: tls/ (agent.crt, agent.key, ca.crt),
					  * state/ (the agent's --state-dir, with receipt.key), sock/ */
	const char *credentials_dir;     /* the authority snapshot, mounted read-only; may be NULL */
	const char *agent_path;          /* the static sandbox-agent on the host */
	const char *manager_name;        /* the agent's --manager-name */
	uid_t host_uid;                  /* the sandbox's uid and gid, the same inside as on the host */
	gid_t host_gid;                  /* (mapped 1:1); never 0: the identity's (identity_ids.h) */
	const char *service_account;     /* what the sandbox runs as where its runtime has identities (a
					  * pod's serviceAccountName: the grants' tokenrequest account);
					  * NULL or "": the runtime's default */
	/* For a backend with binds_credentials: fills credentials_dir, its credentials bound to the
	 * object given. prepare() calls it once, after that object exists and before any command
	 * can run; a failure fails prepare(). */
	int (*credentials)(void *ctx, const struct sandbox_bound *bound, struct sb_err *err);
	void *credentials_ctx;
};

/* Which limits hold for one sandbox, as the backend measured or set them; for `session show` and
 * `check`. -1: no such limit holds. */
struct sandbox_limits {
	int64_t tmp_bytes;               /* size of its /tmp */
	int64_t shm_bytes;               /* size of its /dev/shm */
	int64_t memory_max;              /* bytes (swap: none on top) */
	int64_t pids_max;
	int64_t cpu_quota_us, cpu_period_us; /* cpu.max */
	char cgroup[PATH_MAX];           /* the sandbox's own cgroup, "" when it has none */
};

#define SANDBOX_EVIDENCE_MAX 512
#define SANDBOX_RUNTIME_BYTES 256

/* One sandbox as the daemon holds it: what the records keep (runtime_id, address), what its
 * runtime said when evidence() proved it gone (evidence), and the backend's own state (a pidfd, a
 * cgroup: runtime), which only the backend that filled the handle reads or writes. A zeroed handle
 * holds no sandbox: stop(), evidence() and limits() refuse it until prepare(), adopt() or lookup()
 * filled it. A copy may be given to limits() only: the original keeps what it holds. */
struct sandbox_handle {
	char runtime_id[256];            /* "process:<pid>:<start-time>", "podman:<Id>"; recorded */
	char address[PATH_MAX + 8];      /* "unix:<private_dir>/sock/agent.sock" */
	char evidence[SANDBOX_EVIDENCE_MAX]; /* once evidence() returned 0: the runtime's word, recorded */
	union {
		unsigned char bytes[SANDBOX_RUNTIME_BYTES];
		uint64_t align;
	} runtime;                       /* the backend's alone */
};

struct backend;

struct backend_ops {
	const char *name;
	/* true: prepare() makes the credentials through spec->credentials, bound to the sandbox's
	 * object (kubernetes: its pod); false: the core makes them before prepare(). */
	bool binds_credentials;
	/* Start the sandbox; return once its agent accepts connections (bounded), or fail and
	 * leave nothing running. */
	int (*prepare)(struct backend *be, const struct sandbox_spec *spec, struct sandbox_handle *h,
		       struct sb_err *err);
	/* Ask the runtime to stop it (SIGKILL, container kill). Not evidence. */
	int (*stop)(struct backend *be, struct sandbox_handle *h, struct sb_err *err);
	/* Wait up to timeout_ms for evidence that the sandbox and all its processes are gone.
	 * 0: proven gone (the handle's resources are released), h->evidence says what the runtime
	 * said: "reaped init of the sandbox's PID namespace (pid N)", "container exited for Id X";
	 * -1: not proven, err says why. Once it returned 0 for a handle, later calls return 0 at
	 * once and leave h->evidence as it is: the first proof stands (the backend deleted the
	 * sandbox's object after it, so asking the runtime again would find only its absence, and
	 * a probe and the sandbox's end may both ask, execpath.c and sandbox.c). */
	int (*evidence)(struct backend *be, struct sandbox_handle *h, int timeout_ms, struct sb_err *err);
	/* Rebuild a handle from a recorded runtime_id after a manager restart (the process may be
	 * gone already, or another process may have the pid: the start time tells). */
	int (*adopt)(struct backend *be, const char *runtime_id, const char *address, struct sandbox_handle *h,
		     struct sb_err *err);
	/* The sandbox of (session, generation) that a manager killed inside prepare() may have left
	 * before its runtime id was recorded. 1: found (h filled, for stop() and evidence()); 0: none.
	 * NULL for a backend whose sandbox cannot outlive an unfinished prepare. */
	int (*lookup)(struct backend *be, const char *session, uint64_t generation, struct sandbox_handle *h,
		      struct sb_err *err);
	/* Which limits hold for the live sandbox of h (struct sandbox_limits). NULL when unknown. */
	int (*limits)(struct backend *be, const struct sandbox_handle *h, struct sandbox_limits *out,
		      struct sb_err *err);
	/* A listening TCP socket on 127.0.0.1:port inside the live sandbox's own network namespace,
	 * held by the manager alone (close-on-exec): the egress proxy's, for policy `proxy`. NULL for
	 * a backend that cannot give one (the policy is refused there). */
	int (*net_listen)(struct backend *be, const struct sandbox_handle *h, uint16_t port, int *fd,
			  struct sb_err *err);
	/* Without net_listen: true when the sandbox's agent holds those listeners and relays each
	 * connection through the manager's mTLS link to it (kubernetes: a pod's network is not the
	 * manager's to enter; manager/agentlink/agent_relay.h), its sandbox allowed no way out (the
	 * backend's NetworkPolicy, k8s_pod.c). */
	bool net_by_agent;
	void (*destroy)(struct backend *be);
};

struct backend {
	const struct backend_ops *ops;
	void *priv;
};

/* Sizes of every sandbox's /tmp and /dev/shm unless configured (config tmp-size, shm-size). */
#define SANDBOX_TMP_BYTES_DEFAULT (256LL << 20)
#define SANDBOX_SHM_BYTES_DEFAULT (64LL << 20)

/* The process backend (the default): the sandbox is `sandbox-agent serve` as PID 1 of its own
 * user, PID, mount, IPC and UTS namespaces on this host, whose root is built from the mount plan. */
struct process_settings {
	int64_t tmp_bytes;               /* tmpfs size of its /tmp (and of the plan's tmpfs entries); 0: default */
	int64_t shm_bytes;               /* tmpfs size of its /dev/shm; 0: default */
	char cgroup_parent[PATH_MAX];    /* a cgroup v2 directory delegated to the manager; "": none */
	int64_t memory_bytes;            /* per sandbox in its cgroup: memory.max (memory.swap.max 0), */
	int64_t pids;                    /* pids.max, */
	int64_t nano_cpus;               /* cpu.max in 1e-9 CPUs; 0: that limit is not set */
	char slirp4netns[PATH_MAX];      /* the user-mode NAT of the `open` policy; "": /usr/bin/slirp4netns */
};

/* Without a cgroup_parent, sandboxes get no memory, pids or CPU limit beyond the tmpfs sizes and
 * the agent's RLIMIT_NPROC: logged once here, and said by limits(). */
int backend_process_create_with(struct backend **out, const struct process_settings *set, struct sb_err *err);
/* The defaults: sized /tmp and /dev/shm, no cgroup. */
int backend_process_create(struct backend **out, struct sb_err *err);

/* The podman backend: the sandbox is a container of the sandbox image (images/), whose entrypoint
 * is the agent, through the Docker-compatible API of a Podman service on a unix socket. */
struct podman_settings {
	char socket[PATH_MAX];           /* the service's unix socket */
	char image[256];
	char seccomp[PATH_MAX];          /* a seccomp profile on the service's host; "" = the runtime's default */
	char network[64];                /* NetworkMode: "none" (default), "bridge", a network's name */
	int64_t nano_cpus;               /* CPU limit, in 1e-9 CPUs */
	int64_t memory_bytes;            /* memory limit; swap is not allowed on top */
	int64_t pids;                    /* pids limit */
	int64_t tmp_bytes;               /* size of the container's /tmp tmpfs; 0: default */
	int64_t shm_bytes;               /* ShmSize of its /dev/shm; 0: default */
};

/* Checks that the service answers and has the image, once, at start. */
int backend_podman_create(struct backend **out, const struct podman_settings *set, struct sb_err *err);

/* The kubernetes backend: the sandbox is one pod of the sandbox image (restartPolicy Never), made
 * and proven gone through the API server (backend_kubernetes.c); the manager speaks mutual TLS to
 * its agent at the pod's IP on KUBERNETES_AGENT_PORT. */
#define KUBERNETES_AGENT_PORT 7443
struct kubernetes_settings {
	char kubeconfig[PATH_MAX];       /* "": the service account of the pod the manager runs in */
	char namespace[64];              /* "": the kubeconfig context's, else "default" */
	char image[256];
	char volume_dir[PATH_MAX];       /* hostpath:DIR: where the node sees the manager's volume */
	char claim[254];                 /* pvc:CLAIM: the claim holding the manager's volume at its root */
	char manager_volume[PATH_MAX];   /* the manager's volume: the plan's sources lie below it */
	char seccomp_profile[128];       /* localhostProfile below the kubelet's seccomp root; "":
					  * infra-sandbox/seccomp.json (images/seccomp.json installed there) */
	int64_t nano_cpus;
	int64_t memory_bytes;
	int64_t pids;                    /* not a pod field: the kubelet's podPidsLimit; limits() says -1 */
	int64_t tmp_bytes;
	int64_t shm_bytes;
};

/* Checks that the API server answers, and which version it is, once, at start. */
int backend_kubernetes_create(struct backend **out, const struct kubernetes_settings *set, struct sb_err *err);

#endif
