/* Control API transport (see control.h): framing and JSON, the listener and the peer check.
 * Knows nothing of what an op means. */
#include "control.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "json_text.h"
#include "sock.h"

static int sockaddr_fill(struct sockaddr_un *sa, const char *path, struct sb_err *err)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa->sun_path)
		return sb_fail(err, ENAMETOOLONG, "control socket path %s is too long (max %zu bytes)", path,
			       sizeof sa->sun_path - 1);
	memcpy(sa->sun_path, path, strlen(path) + 1);
	return 0;
}

int control_listen(const char *path, mode_t mode, struct sb_err *err)
{
	/* common/sock.c: a stale socket replaced, any other file refused, bound under umask 0177. */
	return sock_listen_unix(path, mode, 128, err);
}

int control_connect(const char *path, struct sb_err *err)
{
	struct sockaddr_un sa;
	int fd;

	if (sockaddr_fill(&sa, path, err) < 0)
		return -1;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sb_fail_errno(err, "creating a socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		sb_fail_errno(err, "the manager is not reachable at %s (is `sandbox-manager serve` running?)", path);
		close(fd);
		return -1;
	}
	return fd;
}

int control_peer_uid(int fd, uid_t *uid, struct sb_err *err)
{
	struct ucred cred;
	socklen_t len = sizeof cred;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return sb_fail_errno(err, "reading the peer's credentials");
	*uid = cred.uid;
	return 0;
}

int control_send(int fd, json_t *msg, size_t cap, struct sb_err *err)
{
	struct sb_stream s;

	sb_stream_fd(&s, &fd);
	return control_send_stream(&s, msg, cap, err);
}

/* The frame's header and its text are written together, in one write: a process that dies while it
 * sends (a manager killed at a failpoint, or by the OOM killer, while another of its threads
 * answers) leaves its peer a whole message or none, never a header whose text never comes, which the
 * peer could only call a broken stream instead of an answer that did not come. One write, not two,
 * per message too; over TLS one record. */
int control_send_stream(struct sb_stream *s, json_t *msg, size_t cap, struct sb_err *err)
{
	size_t len = 0;
	char *frame = sb_json_dumps_after(msg, JSON_COMPACT, FRAME_ROOM, &len);
	int rc;

	if (frame == NULL)
		return sb_fail(err, ENOMEM, "serialising a control message");
	rc = frame_write_rooms(s, (uint8_t *)frame, &len, 1, cap, err);
	free(frame);
	return rc;
}

int control_recv(int fd, size_t cap, json_t **msg, struct sb_err *err)
{
	struct sb_stream s;

	sb_stream_fd(&s, &fd);
	return control_recv_stream(&s, cap, msg, err);
}

int control_recv_stream(struct sb_stream *s, size_t cap, json_t **msg, struct sb_err *err)
{
	json_error_t jerr;
	uint8_t *buf;
	size_t len;
	int rc;

	*msg = NULL;
	rc = frame_read(s, cap, &buf, &len, err);
	if (rc <= 0)
		return rc;
	*msg = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &jerr);
	free(buf);
	if (!json_is_object(*msg)) {
		json_decref(*msg);
		*msg = NULL;
		return sb_fail(err, EBADMSG, "control message is not a JSON object: %s", jerr.text);
	}
	return 1;
}

json_t *control_error(const char *kind, const char *fmt, ...)
{
	char msg[SB_ERR_MSG_MAX];
	va_list ap;
	json_t *e;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	e = json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "kind", kind, "message", msg);
	if (e != NULL)
		return e;
	/* JSON takes UTF-8 only: a message cut inside a character, or naming a path that is not
	 * UTF-8, still answers, with those bytes as '?', rather than as no answer at all. */
	for (char *p = msg; *p != '\0'; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	return json_pack("{s:b, s:{s:s, s:s}}", "ok", 0, "error", "kind", kind, "message", msg);
}

json_t *control_error_from(const char *kind, const struct sb_err *err)
{
	return control_error(kind, "%s", err->msg);
}

int control_request_uint(json_t *req, const char *key, unsigned dflt, unsigned *out)
{
	json_t *v = json_object_get(req, key);

	if (v == NULL || json_is_null(v)) {
		*out = dflt;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX)
		return -1;
	*out = (unsigned)json_integer_value(v);
	return 0;
}
