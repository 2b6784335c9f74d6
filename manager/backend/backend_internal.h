/* What the backends share of their settings, for this folder only (tests/layering_check.py): the
 * sizes every sandbox's /tmp and /dev/shm get, the limits a container runtime applies from them, and
 * the check of a configured image reference, and the receipt of a listener made in a sandbox's network. */
#ifndef SB_BACKEND_INTERNAL_H
#define SB_BACKEND_INTERNAL_H

#include <stdint.h>

#include "error.h"

/* A size left 0 (or below) in the settings becomes the default of backend.h. */
void backend_sizes_default(int64_t *tmp_bytes, int64_t *shm_bytes);
/* The limits a container runtime created a sandbox with (podman, Kubernetes), from its settings: a
 * setting of 0 is no limit (-1); CPU as cpu.max, nano_cpus over the kernel's 100 ms period; the
 * runtime names and owns the cgroup, so cgroup stays "". */
struct sandbox_limits;
void backend_limits_configured(struct sandbox_limits *out, int64_t tmp_bytes, int64_t shm_bytes, int64_t memory_bytes,
			       int64_t pids, int64_t nano_cpus);
/* An image reference of [A-Za-z0-9._-/:@] only, so that it goes into a request path and into a
 * pod's description as it is. -1 with err (EINVAL) otherwise. */
int backend_image_check(const char *image, struct sb_err *err);
/* A listener on a sandbox's 127.0.0.1:port sent over chan as a one-byte "L" with the descriptor
 * (net_listener.c), within timeout_ms: the descriptor, close-on-exec, once it proved to be a
 * listening TCP socket bound there; -1 for anything else (nothing is left open). */
int net_listener_receive(int chan, uint16_t port, int timeout_ms);

#endif
