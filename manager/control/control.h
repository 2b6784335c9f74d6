/* The manager's local control API: JSON objects in frames (common/frame.h) over a unix socket
 * that only the manager's own uid (or its group, with mode 0660) may use; the peer's uid is
 * checked with SO_PEERCRED on every connection, not trusted from file modes alone.
 *
 * Request:  {"op": "session.create" | "session.show" | "session.delete" | "session.list" | "exec" |
 *            "cancel" | "grant" | "records" | "resolve" | "config" | "status" | "metrics", ...arguments}.
 *            An exec may carry "tag" (the client's name for the call); a cancel with "tag" stops only
 *            the running call that carries it.
 *            An exec may carry "keep_output": N (bytes, >= 0): when the result's stdout and stderr
 *            text together is over N, the manager writes each non-empty stream's bytes, after the
 *            call's record is committed, to <worktree>/.sandbox-tmp/.outputs/exec-<id>.stdout and
 *            .stderr (the newest 20 files are kept: output_keep.h) and adds "output_kept":
 *            {"stdout": PATH, "stderr": PATH} to the answer's result (not to the record), or
 *            "output_kept_error": why; the call's outcome never depends on it.
 *            "records" takes "session" (with optional "limit", "before", "state") or "exec", and
 *            answers one page, newest first, with "next_before" when more remain (records.h);
 *            "session.list" takes optional "identity", "state", "all", "limit", "before" and pages
 *            the same way. "resolve" takes "exec", "outcome", "note" and records them with the
 *            peer's uid (resolve.c).
 * Response: {"ok": true, ...} or {"ok": false, "error": {"kind": K, "message": M}} with K one of
 *            "invalid" (bad input), "not_found", "refused" (a rule said no), "unavailable" (the
 *            sandbox or manager cannot run it now), "internal", or "owned": the session is another
 *            manager's while its lease is live, with "owner", "address" (its control socket, or "")
 *            and "retry_after_ms"; nothing was recorded and nothing ran, so the front ends resend it
 *            there (front/follow.h). */
#ifndef SB_CONTROL_H
#define SB_CONTROL_H

#include <jansson.h>
#include <sys/types.h>

#include "error.h"
#include "frame.h"

#define CONTROL_REQUEST_CAP (2u * 1024u * 1024u)
/* Every answer is built to fit (invariant 13: records are paged under RECORDS_PAGE_BYTES, outputs
 * are bounded); one that would not is replaced by an error by the daemon, never dropped. */
#define CONTROL_RESPONSE_CAP (32u * 1024u * 1024u)

int control_listen(const char *path, mode_t mode, struct sb_err *err);
int control_connect(const char *path, struct sb_err *err);
/* The connecting process's uid (SO_PEERCRED). */
int control_peer_uid(int fd, uid_t *uid, struct sb_err *err);

int control_send(int fd, json_t *msg, size_t cap, struct sb_err *err);
/* 1: a message in *msg (an object), 0: the peer closed between messages, -1: error. */
int control_recv(int fd, size_t cap, json_t **msg, struct sb_err *err);
/* The same over a stream whose reads and writes may time out (the daemon bounds how long a client
 * may take to send a request or to read an answer). */
int control_send_stream(struct sb_stream *s, json_t *msg, size_t cap, struct sb_err *err);
int control_recv_stream(struct sb_stream *s, size_t cap, json_t **msg, struct sb_err *err);

/* {"ok": false, "error": {"kind", "message"}}: a new reference. */
json_t *control_error(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error response from an sb_err, with its kind. */
json_t *control_error_from(const char *kind, const struct sb_err *err);

/* A request's whole-number argument: absent or null is dflt; -1 when it is not 0..UINT32_MAX. */
int control_request_uint(json_t *req, const char *key, unsigned dflt, unsigned *out);

#endif
