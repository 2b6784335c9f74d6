/* Writing receipts (see receipt.h); the format's HMAC lives in common/receipt_mac.c. Only the
 * agent writes here, and only after the command's namespace is empty. */
#include "receipt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "linux_calls.h" /* after the system headers: it fills in what musl lacks */

#include "fdio.h"
#include "json_text.h"
#include "pathfmt.h"
#include "random.h"
#include "receipt_mac.h"

static int receipt_name(const char *exec_id, char *name, size_t len, struct sb_err *err)
{
	if ((size_t)snprintf(name, len, "%s.json", exec_id) >= len)
		return sb_fail(err, ENAMETOOLONG, "exec id too long for a receipt name");
	return 0;
}

int receipt_reserve_check(const struct privdir *dir, const char *exec_id, struct sb_err *err)
{
	char name[EXEC_ID_MAX + 8];

	if (receipt_name(exec_id, name, sizeof name, err) < 0)
		return -1;
	if (faccessat(dir->fd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		return sb_fail(err, EEXIST, "exec '%s' already has a receipt in %s; exec ids are never reused",
			       exec_id, dir->path);
	return 0;
}

static int room_name(const char *exec_id, char *name, size_t len, struct sb_err *err)
{
	if ((size_t)snprintf(name, len, "%s.room", exec_id) >= len)
		return sb_fail(err, ENAMETOOLONG, "exec id too long for a receipt's room");
	return 0;
}

int receipt_room_take(const struct privdir *dir, const char *exec_id, struct receipt_info *info, struct sb_err *err)
{
	char name[EXEC_ID_MAX + 8];
	int fd, rc;

	if (room_name(exec_id, name, sizeof name, err) < 0)
		return -1;
	fd = openat(dir->fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return sb_fail_errno(err, "receipt room for exec '%s': creating %s/%s", exec_id, dir->path, name);
	rc = fd_reserve(fd, RECEIPT_ROOM_BYTES);
	if (rc != 0) {
		close(fd);
		unlinkat(dir->fd, name, 0);
		return sb_fail(err, rc, "receipt room for exec '%s': allocating %d bytes in %s", exec_id,
			       RECEIPT_ROOM_BYTES, dir->path);
	}
	info->room_fd = fd;
	info->has_room = true;
	return 0;
}

int receipt_room_take_spare(struct spare_file *spare, const struct privdir *dir, const char *exec_id,
			    struct receipt_info *info, struct sb_err *err)
{
	char name[EXEC_ID_MAX + 8];
	int fd;

	if (room_name(exec_id, name, sizeof name, err) < 0)
		return -1;
	fd = spare_file_take(spare, dir, name, NULL, 0);
	if (fd >= 0) {
		info->room_fd = fd;
		info->has_room = true;
		return 0;
	}
	/* Refused as the create below would refuse it; the spare stays for the next exec. */
	if (errno == EEXIST)
		return sb_fail(err, EEXIST, "receipt room for exec '%s': %s/%s exists", exec_id, dir->path, name);
	return receipt_room_take(dir, exec_id, info, err);
}

void receipt_room_drop(const struct privdir *dir, const char *exec_id, struct receipt_info *info)
{
	char name[EXEC_ID_MAX + 8];
	struct sb_err err;

	if (!info->has_room)
		return;
	close(info->room_fd);
	info->has_room = false;
	if (room_name(exec_id, name, sizeof name, &err) == 0)
		unlinkat(dir->fd, name, 0);
}

/* The receipt written into its room (blocks reserved before the command ran: nothing is
 * allocated now) and renamed to its name, never over an existing file. The room was reserved past
 * its end (fd_reserve), so the write makes the file exactly the receipt's length; the blocks left
 * over are given back by whoever syncs it (receipt_sync), or by the journal's settler after the
 * result (receipt_room_release), off the call's path. Only a room the filesystem could not reserve
 * that way is longer than the receipt: cut here. The file's descriptor, unsynced, or -1 with err
 * (the room removed). */
static int room_write(const struct privdir *dir, const char *exec_id, const char *name, int fd, const char *text,
		      size_t len, struct sb_err *err)
{
	char room[EXEC_ID_MAX + 8];
	size_t done = 0;
	struct stat st;
	ssize_t n;

	if (room_name(exec_id, room, sizeof room, err) < 0) {
		close(fd);
		return -1;
	}
	errno = 0;
	while (done < len && (n = pwrite(fd, text + done, len - done, (off_t)done)) > 0)
		done += (size_t)n;
	if (done < len || fstat(fd, &st) < 0 || (st.st_size != (off_t)len && ftruncate(fd, (off_t)len) < 0) ||
	    renameat2(dir->fd, room, dir->fd, name, RENAME_NOREPLACE) < 0) {
		int saved = errno ? errno : EIO;

		close(fd);
		unlinkat(dir->fd, room, 0);
		return sb_fail(err, saved, "writing %s/%s", dir->path, name);
	}
	return fd;
}

static json_t *digest_json(const struct output_capture *c)
{
	char hex[65];

	sb_hex_encode(c->digest, sizeof c->digest, hex);
	return json_string(hex);
}

static json_t *receipt_build(const struct exec_request *req, const struct exec_outcome *out,
			     const char *nonce_hex)
{
	bool confirmed = out->init_reaped;

	return json_pack("{s:i, s:s, s:I, s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:o, s:o,"
			 " s:{s:b, s:b, s:I, s:s, s:b}}",
			 "version", 1, "exec_id", req->exec_id, "generation", (json_int_t)req->generation,
			 "nonce", nonce_hex, "status", exec_status_name(out->status),
			 "exit_code", out->status == EXEC_EXITED ? json_integer(out->exit_code) : json_null(),
			 "signal", out->status == EXEC_SIGNALED ? json_integer(out->signal) : json_null(),
			 "started_at_ms", (json_int_t)out->started_ms, "ended_at_ms", (json_int_t)out->ended_ms,
			 "stdout_bytes", (json_int_t)out->out.total, "stderr_bytes", (json_int_t)out->err.total,
			 "stdout_sha256", digest_json(&out->out), "stderr_sha256", digest_json(&out->err),
			 "boundary", "init_reaped", out->init_reaped, "confirmed", confirmed,
			 "teardown_ms", (json_int_t)out->teardown_ms, "pid_namespace", out->pid_namespace,
			 "pid_max_bounded", out->pid_max_bounded);
}

int receipt_write_unsynced(const struct privdir *dir, const struct exec_request *req, const struct exec_outcome *out,
			   const struct secrets *sec, struct receipt_info *info, struct sb_err *err)
{
	char name[EXEC_ID_MAX + 8];
	json_t *obj, *check;
	bool has_room = info->has_room;
	int room_fd = info->room_fd;

	memset(info, 0, sizeof *info);
	sb_hex_encode(sec->nonce, sizeof sec->nonce, info->nonce_hex);
	info->boundary_confirmed = out->init_reaped;
	/* The path the result reports: a cut one would name another file, so it is refused. */
	info->has_room = has_room;
	info->room_fd = room_fd;
	if (receipt_name(req->exec_id, name, sizeof name, err) < 0 ||
	    path_fmt(info->path, sizeof info->path, err, "%s/%s", dir->path, name) < 0)
		return -1;
	obj = receipt_build(req, out, info->nonce_hex);
	if (obj == NULL)
		return sb_fail(err, ENOMEM, "building the receipt");
	if (receipt_mac_sign(obj, sec->key, err) == 0) {
		info->text = sb_json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII, &info->text_len);
	}
	json_decref(obj);
	if (info->text == NULL)
		return err->msg[0] ? -1 : sb_fail(err, ENOMEM, "serialising the receipt");
	/* Through the descriptor opened before the command ran: whatever the command renamed, the
	 * receipt lands in the agent's own directory (R1). common/fdio.c: exclusive, no symlink,
	 * written whole; synced by receipt_sync. Into its room when it has one that fits (rule N4). */
	if (info->has_room && info->text_len <= RECEIPT_ROOM_BYTES) {
		info->has_room = false;
		info->fd = room_write(dir, req->exec_id, name, info->room_fd, info->text, info->text_len, err);
	} else {
		receipt_room_drop(dir, req->exec_id, info);
		info->fd = fd_file_write_new(dir->fd, dir->path, name, 0600, info->text, info->text_len, err);
	}
	if (info->fd < 0)
		return -1;
	info->unsynced = true;
	info->written = true;
	check = receipt_mac_verify(info->text, info->text_len, sec->key, info->nonce_hex, req->exec_id,
				   (int64_t)req->generation, err);
	info->verified = check != NULL;
	json_decref(check);
	return info->verified ? 0 : -1;
}

static void receipt_unlink(const struct privdir *dir, const struct receipt_info *info)
{
	char name[EXEC_ID_MAX + 8];
	const char *slash = strrchr(info->path, '/');

	if (slash != NULL && (size_t)snprintf(name, sizeof name, "%s", slash + 1) < sizeof name)
		unlinkat(dir->fd, name, 0);
}

int receipt_sync(const struct privdir *dir, struct receipt_info *info, struct sb_err *err)
{
	int rc = 0;

	if (!info->unsynced)
		return 0;
	info->unsynced = false;
	/* The room's blocks past the receipt given back (room_write); a failure leaves them allocated
	 * and changes nothing the file holds. The data first, then the name: the result names it. */
	(void)fd_reserve_release(info->fd);
	if (fsync(info->fd) < 0)
		rc = sb_fail_errno(err, "writing %s", info->path);
	if (close(info->fd) < 0 && rc == 0)
		rc = sb_fail_errno(err, "closing %s", info->path);
	if (rc == 0 && fsync(dir->fd) < 0)
		rc = sb_fail_errno(err, "syncing directory %s", dir->path);
	if (rc < 0) {
		receipt_unlink(dir, info);
		info->written = info->verified = false;
	}
	return rc;
}

int receipt_write(const struct privdir *dir, const struct exec_request *req, const struct exec_outcome *out,
		  const struct secrets *sec, struct receipt_info *info, struct sb_err *err)
{
	int rc = receipt_write_unsynced(dir, req, out, sec, info, err);

	/* Synced even when the check failed: the file exists, and it says this id ran. */
	if (receipt_sync(dir, info, rc < 0 ? &(struct sb_err){ 0 } : err) < 0)
		return -1;
	return rc;
}

void receipt_info_free(struct receipt_info *info)
{
	if (info->unsynced) {
		close(info->fd);
		info->unsynced = false;
	}
	free(info->text);
	info->text = NULL;
}
