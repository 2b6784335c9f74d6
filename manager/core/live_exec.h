/* The manager's live output of running execs: one hub per exec, fed by the exec's agent connection
 * (agent_client.h on_output) into a fixed ring per stream (common/live_ring.h), read by its own
 * client and by followers (`follow --exec`), each at its own offsets. The feeder never waits for a
 * reader; a reader that falls behind is told what it skipped. Followers are bounded per exec. The
 * record is never read or written here: a hub ends with its exec and is then gone. What readers
 * got and skipped is counted in the metrics (sandbox_manager_live_output_bytes_total). */
#ifndef SB_LIVE_EXEC_H
#define SB_LIVE_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "live_ring.h"

#define LIVE_FOLLOWERS_MAX 8     /* readers of one exec at once, its own client not counted */
#define LIVE_FOLLOWERS_IDENTITY_MAX 32 /* and of all the running execs of one identity */
#define LIVE_WAIT_SLICE_MS 1000  /* a reader's longest wait before it looks again */

struct live_exec;

/* The exec's own client's hook: called once its hub exists, before the Exec is sent (execpath.c). */
struct live_watch {
	void (*began)(void *ctx, struct live_exec *h);
	void *ctx;
};

/* A hub for exec_id of identity, findable by live_exec_attach until live_exec_end. NULL: out of
 * memory (the exec runs without live output). */
struct live_exec *live_exec_begin(const char *exec_id, const char *identity);
/* From the agent's reader: a chunk as the agent sent it. */
void live_exec_put(struct live_exec *h, enum live_stream stream, uint64_t offset, const uint8_t *data, size_t len);
/* The exec's output is over: readers drain what the rings hold and stop; unfindable from now. Drops
 * the begin's reference. */
void live_exec_end(struct live_exec *h);

/* A follower's reference to the running exec_id: -1 with ENOENT (not running here) or EBUSY (at
 * LIVE_FOLLOWERS_MAX of the exec, or LIVE_FOLLOWERS_IDENTITY_MAX of its identity's execs). counted: whether it counts against that bound (its own client does not). */
int live_exec_attach(const char *exec_id, bool counted, struct live_exec **out, struct sb_err *err);
/* Take a reference for another reader (the exec's own client, from its begin). */
struct live_exec *live_exec_ref(struct live_exec *h);
void live_exec_detach(struct live_exec *h, bool counted);

/* One reader of a hub: where it is in each stream. Registered with the hub while it reads, so that
 * bytes the ring drops before the reader took them are counted skipped as they are dropped, not when
 * (or whether) the reader comes back: a reader stuck on a client that reads nothing shows in the
 * metrics while it is stuck. */
struct live_reader {
	uint64_t off[LIVE_STREAMS];     /* the next byte it takes */
	uint64_t counted[LIVE_STREAMS]; /* its skips before here are in the metrics */
	struct live_reader *next;
};

/* r starts reading h at off[]. */
void live_exec_read_begin(struct live_exec *h, struct live_reader *r, const uint64_t off[LIVE_STREAMS]);
/* r stops: what the hub holds or held past r's offsets, never taken, is counted skipped. */
void live_exec_read_end(struct live_exec *h, struct live_reader *r);

/* r's next chunk (both streams) into buf (LIVE_CHUNK_MAX), waiting up to wait_ms: 1 with *stream,
 * *offset (the chunk's first byte), *len and *skipped (lost before it); 0 nothing yet; -1 the exec
 * ended and everything held was read. */
int live_exec_next(struct live_exec *h, struct live_reader *r, uint8_t *buf, enum live_stream *stream,
		   uint64_t *offset, size_t *len, uint64_t *skipped, int wait_ms);

#endif
