/* `sandbox-agent verify-receipt`: checks a receipt file against a key (and, when given, the
 * nonce and exec id it must carry). For operators and tests; the manager links the same code. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opts.h"
#include "receipt_mac.h"

static int file_read(const char *path, char *buf, size_t cap, size_t *len, struct sb_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return sb_fail_errno(err, "opening %s", path);
	n = read(fd, buf, cap);
	close(fd);
	if (n < 0)
		return sb_fail_errno(err, "reading %s", path);
	*len = (size_t)n;
	return 0;
}

static int verdict(bool ok, const char *reason)
{
	json_t *obj = ok ? json_pack("{s:b}", "verified", 1) : json_pack("{s:b, s:s}", "verified", 0, "reason", reason);
	char *text = json_dumps(obj, JSON_COMPACT);

	printf("%s\n", text ? text : "{\"verified\":false}");
	free(text);
	json_decref(obj);
	return ok ? 0 : 1;
}

int cli_verify_receipt(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "receipt", required_argument, NULL, 'r' }, { "key", required_argument, NULL, 'k' },
		{ "nonce", required_argument, NULL, 'n' },   { "exec-id", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	const char *receipt = NULL, *key_path = NULL, *nonce = NULL, *exec_id = NULL;
	static char text[RECEIPT_MAX_BYTES + 1];
	uint8_t key[RECEIPT_KEY_BYTES];
	size_t len = 0, key_len = 0;
	struct sb_err err;
	json_t *obj;
	int opt;

	opts_reset();
	while ((opt = opts_next(argc, argv, "", longopts, NULL, &err)) != OPTS_END) {
		switch (opt) {
		case 'r': receipt = optarg; break;
		case 'k': key_path = optarg; break;
		case 'n': nonce = optarg; break;
		case 'i': exec_id = optarg; break;
		default:
			fprintf(stderr, "sandbox-agent verify-receipt: %s\n", err.msg);
			fprintf(stderr, "usage: sandbox-agent verify-receipt --receipt FILE --key FILE [--nonce HEX] [--exec-id ID]\n");
			return CLI_USAGE;
		}
	}
	if (receipt == NULL || key_path == NULL) {
		fprintf(stderr, "sandbox-agent verify-receipt: --receipt and --key are required\n");
		return CLI_USAGE;
	}
	if (file_read(key_path, (char *)key, sizeof key, &key_len, &err) < 0 ||
	    file_read(receipt, text, sizeof text, &len, &err) < 0)
		return verdict(false, err.msg);
	if (key_len != sizeof key)
		return verdict(false, "the key file must hold exactly 32 bytes");
	obj = receipt_mac_verify(text, len, key, nonce, exec_id, -1, &err);
	explicit_bzero(key, sizeof key);
	json_decref(obj);
	return verdict(obj != NULL, err.msg);
}
