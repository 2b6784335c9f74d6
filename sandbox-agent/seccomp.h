/* The command's seccomp filter: compiled to BPF once, at build time (sandbox-agent/gen/seccomp_gen.c
 * prints seccomp_compile()'s programs into build/gen/seccomp_bpf.c), loaded per command as the very
 * last step before execve (every earlier step may need a syscall the filter denies). */
#ifndef SB_SECCOMP_H
#define SB_SECCOMP_H

#include <linux/filter.h>
#include <stdbool.h>

#include "error.h"

/* Build the deny list of ISOLATION.md and export it as a BPF program (prog->filter malloc'd).
 * no_unix_sockets: also refuse creating unix sockets (the read-only world of `exec`). */
int seccomp_compile(struct sock_fprog *prog, bool no_unix_sockets, struct sb_err *err);

/* The programs seccomp_compile() made at build time, for the host's view (serve) and for the
 * read-only world of `exec` (no_unix_sockets). tests/unit/test_seccomp.c checks that they are what a
 * compile makes now. */
extern const struct sock_fprog seccomp_program_host_world;
extern const struct sock_fprog seccomp_program_readonly_world;

/* Load a compiled program into the calling thread. No allocation: safe after clone(). */
int seccomp_load_prog(const struct sock_fprog *prog, struct sb_err *err);

#endif
