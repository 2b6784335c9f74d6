/* The head of one request a sandbox sends to its egress proxy (egress_proxy.c): the request line
 * and the header fields, bounded, checked and fuzzed (tests/fuzz/fuzz_egress_head.c). Pure: no
 * allocation, no I/O.
 *
 * Why not libmicrohttpd: 0.9.75 (Debian bookworm) hands a connection over only after a response
 * queued with MHD_create_response_for_upgrade, and MHD_queue_response refuses such a response with
 * any status but 101 ("Application used invalid status code for 'upgrade' response!", checked by
 * hand against libmicrohttpd-dev 0.9.75-6: CONNECT with 200 returns MHD_NO and the connection is
 * closed). A CONNECT tunnel needs "200 Connection established" and then the raw socket: clients
 * (curl, Go's net/http) take nothing else as success. */
#ifndef SB_EGRESS_HEAD_H
#define SB_EGRESS_HEAD_H

#include <stddef.h>

#include "error.h"

#define EGRESS_HEAD_MAX 8192         /* the whole head, request line and fields, CRLF CRLF included */
#define EGRESS_METHOD_MAX 16
#define EGRESS_TARGET_MAX 300        /* "host:port" with a 253-byte name, or a bracketed IPv6 literal */
#define EGRESS_FIELDS_MAX 64

struct egress_head {
	char method[EGRESS_METHOD_MAX + 1];
	char target[EGRESS_TARGET_MAX + 1];
	int minor;                   /* HTTP/1.minor: 0 or 1 */
	size_t fields;               /* header fields read (their values are not kept) */
};

/* buf[0..len) holds the first bytes of a connection. 1: a complete, well-formed head, *used its
 * length (the bytes after it belong to the tunnel); 0: not complete yet and still within
 * EGRESS_HEAD_MAX; -1: malformed or over a bound, err says which (EINVAL, or E2BIG for a bound). */
int egress_head_parse(const char *buf, size_t len, struct egress_head *h, size_t *used, struct sb_err *err);

#endif
