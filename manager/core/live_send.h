/* Live output to a control client: chunks of a hub (live_exec.h) as frames on the client's
 * connection, before the request's one answer. The exec's own client gets them from a thread of
 * its own while its connection's thread waits for the exec; a follower (op "follow") on its
 * connection's thread. A frame is {"output": {"stream": "stdout"|"stderr", "offset": N, "text": T,
 * "escaped": B, "skipped": K}}: T is the bytes by the exec result's escaping rule (textesc.h),
 * offset the stream's byte offset of its first byte, K bytes lost just before it. */
#ifndef SB_LIVE_SEND_H
#define SB_LIVE_SEND_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

#include "frame.h"
#include "live_exec.h"

/* The exec's own client: live_send_watch gives execpath_run its hook; live_send_join waits for the
 * thread (after the exec) so that the answer follows the last chunk. */
struct live_client {
	struct sb_stream *stream;
	struct live_exec *hub;
	pthread_t thread;
	bool started;
	struct live_watch watch;
};

void live_send_watch(struct live_client *lc, struct sb_stream *s);
/* true when chunks were sent on (the answer then says "streamed": true). */
bool live_send_join(struct live_client *lc);

/* op "follow": {"exec": ID, "offset": N (stdout), "stderr_offset": N}; sends the chunks of a running
 * exec until it ends and answers {"ok": true, "running": true|false, "offsets": {...}}: false when
 * the exec is not running here (its record holds what is kept: `records --exec`). */
json_t *live_send_follow(struct sb_stream *s, json_t *req);

#endif
