/* A sandbox generation's private directory (its keys and certificates), made when the generation
 * is prepared and removed only once the sandbox is proven gone; and the manager's TLS client
 * configuration for that generation. Never removes by path through a link a sandbox planted. */
#include "private_dir.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_client.h"
#include "fdio.h"
#include "fstree.h"
#include "grants.h"
#include "log.h"
#include "pathfmt.h"
#include "random.h"

/* The private directory holds the sandbox's keys: removed once the sandbox is proven gone. The
 * credentials it was issued that can be revoked (Rancher tokens) are revoked first. The sandbox
 * wrote its state/ and sock/ (a root manager handed them over), so the removal is fstree's: by
 * descriptor, never following a link planted there. Its path is trusted: <state_dir>/sandboxes/
 * is the manager's, and no sandbox can write it. Returns 0, or -1 with err (what stays is logged). */
int private_dir_remove(const char *dir, struct sb_err *err)
{
	struct sb_err revoke_err;

	/* Its revoke list is the only record of what is still to revoke: kept with the directory. */
	if (snapshot_release(dir, &revoke_err) < 0) {
		sb_error("releasing the credentials of %s: %s; the directory stays so they can be revoked", dir,
			 revoke_err.msg);
		*err = revoke_err;
		return -1;
	}
	if (fstree_remove_path(dir, err) < 0) {
		sb_warn("%s", err->msg);
		return -1;
	}
	return 0;
}

/* 0700, or 0711 for the directories a root manager's sandbox init must walk through. */
static int dir_make(const char *path, bool walked, struct sb_err *err)
{
	mode_t mode = walked && geteuid() == 0 ? 0711 : 0700;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return sb_fail_errno(err, "creating %s", path);
	if (chmod(path, mode) < 0)
		return sb_fail_errno(err, "setting the mode of %s", path);
	return 0;
}

/* private_dir/{tls,state,sock}: the agent's certificate (named for this generation), the CA
 * certificate, and a fresh receipt key that only the manager and this agent hold. */
int private_dir_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	char path[PATH_MAX + 32], name[256];
	/* Unsynced: the agent reads them on this boot or never (ca.h ca_write_cert_unsynced); six
	 * fsyncs were ~3 ms of a new session's first call (issue 32). The receipt key stays synced:
	 * recovery reads it back to verify the receipts a crashed sandbox left. */
	struct ca_leaf leaf = { .usage = CA_USAGE_SERVER, .unsynced = true, .copy = &l->agent_cert };

	/* A truncated path would name another directory: path_fmt refuses it (ENAMETOOLONG). */
	if (path_fmt(path, sizeof path, err, "%s/sandboxes", m->cfg.state_dir) < 0 ||
	    path_fmt(l->private_dir, sizeof l->private_dir, err, "%s/sandboxes/%s.g%llu", m->cfg.state_dir, l->session,
		     (unsigned long long)l->generation) < 0)
		return -1;
	if (dir_make(path, true, err) < 0 || dir_make(l->private_dir, true, err) < 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (path_fmt(path, sizeof path, err, "%s/%s", l->private_dir, (const char *[]){ "tls", "state", "sock" }[i]) < 0 ||
		    dir_make(path, false, err) < 0)
			return -1;
	}
	if (ca_format_sandbox_name(name, sizeof name, l->session, l->generation, err) < 0)
		return -1;
	leaf.dns_name = name;
	if (path_fmt(path, sizeof path, err, "%s/tls", l->private_dir) < 0)
		return -1;
	/* ca.crt: the CA, and this run's self-signed manager certificate (daemon.c manager_tls). */
	if (ca_issue_leaf(m->ca, &leaf, path, "agent", err) < 0 ||
	    ca_write_trust_unsynced(m->ca, &m->self_cert, path, "ca.crt", err) < 0)
		return -1;
	if (sb_random_bytes(l->receipt_key, sizeof l->receipt_key, err) < 0)
		return -1;
	if (path_fmt(path, sizeof path, err, "%s/state/receipt.key", l->private_dir) < 0)
		return -1;
	/* common/fdio.c: 0600, exclusive, no symlink, written whole, synced with its directory. */
	return fd_file_create_path(path, 0600, (uid_t)-1, (gid_t)-1, l->receipt_key, sizeof l->receipt_key, err);
}

/* The manager's client configuration for this generation. A generation this run issued the
 * certificate of trusts exactly that certificate (pinned: its CA signature is not checked again
 * at each handshake, ~2.5 ms of the first call's), and presents this run's self-signed
 * certificate, which that agent's trust list holds as itself. One found at a restart (recovery),
 * whose certificate this run holds only as a file the sandbox could have written and whose trust
 * list names an earlier run's self-signed certificate, is verified against the CA and shown the
 * CA-signed manager.crt, as before. */
int client_config_make(struct manager *m, struct live_sandbox *l, struct sb_err *err)
{
	const char *own = l->agent_cert.len != 0 ? "manager-self" : "manager";
	char cert[PATH_MAX + 16], key[PATH_MAX + 16], ca[PATH_MAX + 16];
	int rc;

	if (path_fmt(cert, sizeof cert, err, "%s/%s.crt", m->tls_dir, own) < 0 ||
	    path_fmt(key, sizeof key, err, "%s/%s.key", m->tls_dir, own) < 0 ||
	    path_fmt(ca, sizeof ca, err, "%s/ca.crt", m->tls_dir) < 0)
		return -1;
	if (agent_client_config(&l->tls, cert, key, ca, l->session, l->generation, err) < 0)
		return -1;
	rc = l->agent_cert.len == 0 ? 0 : tls_config_pin_peer(l->tls, l->agent_cert.pem, l->agent_cert.len, err);
	l->agent_cert.len = 0;
	if (rc < 0) {
		tls_config_free(l->tls);
		l->tls = NULL;
	}
	return rc;
}
