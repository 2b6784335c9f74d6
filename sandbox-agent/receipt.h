/* Completion receipts: written only after init is reaped, in a directory outside every
 * command's mount view, created exclusively and fsynced before the result is reported. */
#ifndef SB_RECEIPT_H
#define SB_RECEIPT_H

#include <limits.h>
#include <stdbool.h>

#include "boundary.h"
#include "error.h"
#include "privdir.h"
#include "secret.h"

struct receipt_info {
	char path[PATH_MAX];
	char nonce_hex[2 * SECRET_NONCE_BYTES + 1];
	bool written, verified;
	bool boundary_confirmed;
	char *text;              /* the file's exact bytes (malloc'd), for the protocol */
	size_t text_len;
};

/* Fail when a receipt for this exec id exists already: checked before the command runs, so
 * a reused id is refused instead of running a command that can never get its receipt. */
int receipt_reserve_check(const struct privdir *dir, const char *exec_id, struct sb_err *err);

/* Build, sign, write (O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, 0600) and fsync the receipt, then
 * read it back and verify it. dir was opened before the command ran. */
int receipt_write(const struct privdir *dir, const struct exec_request *req, const struct exec_outcome *out,
		  const struct secrets *sec, struct receipt_info *info, struct sb_err *err);

void receipt_info_free(struct receipt_info *info);

#endif
