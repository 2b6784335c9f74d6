/* A sandbox generation's private directory, <state_dir>/sandboxes/<session>.g<generation>: its
 * agent's certificate, the CA certificate and the receipt key; and the manager's TLS client
 * configuration that trusts only that generation's agent. */
#ifndef SB_PRIVATE_DIR_H
#define SB_PRIVATE_DIR_H

#include "error.h"
#include "manager.h"

/* private_dir/{tls,state,sock}, a certificate named for l's generation, a fresh receipt key. */
int private_dir_make(struct manager *m, struct live_sandbox *l, struct sb_err *err);
/* Once the sandbox is proven gone: its revocable credentials revoked, then the directory removed
 * by descriptor. 0, or -1 with err (what stays is logged). */
int private_dir_remove(const char *dir, struct sb_err *err);
/* l->tls: the manager's client certificate, trusting only l's session and generation. */
int client_config_make(struct manager *m, struct live_sandbox *l, struct sb_err *err);

#endif
