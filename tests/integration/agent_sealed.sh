# shellcheck shell=bash
# serve --receipt-key (sandbox-agent/secret.c, sealed.c): the manager's receipt key from a file. On a
# writable mount the own-uid rule holds unchanged: a key that others can read, or that is not the
# agent's own, is refused before the agent serves, with the rule in the message; the agent's own
# 0600 key passes the rule (and is then checked for its size). The read-only mount cases (a Secret
# volume's shape) are tests/unit/test_sealed.c's and kubernetes_secrets' on the cluster.

sealed_serve() {
	agent serve --listen "unix:$TD/sock/agent.sock" --tls-cert "$TD/tls/agent.crt" --tls-key "$TD/tls/agent.key" \
		--tls-ca "$TD/tls/ca.crt" --manager-name sandbox-manager --state-dir "$TD/state" --receipt-key "$1"
}

test_receipt_key_file_refused() {
	mkdir_user "$TD/tls" "$TD/sock" "$TD/state"
	chmod 0700 "$TD/tls" "$TD/sock" "$TD/state"
	as_user touch "$TD/tls/agent.key"
	as_user sh -c "umask 022; printf '%s' 0123456789abcdef0123456789abcdef > '$TD/tls/readable.key'"
	sealed_serve "$TD/tls/readable.key"
	assert_eq "a key others can read: exit code" 125 "$RC"
	assert_match "a key others can read: says why" \
		"receipt key refused \(owned by uid $RUN_UID with mode 0600, or on a read-only mount as sealed.c says\): .*readable.key is not this uid's \($RUN_UID\) and not on a read-only mount" \
		"$(cat "$ERR")"
	if [ "$RUN_UID" -eq 0 ]; then
		printf '%s' 0123456789abcdef0123456789abcdef >"$TD/tls/other.key"
		chown 12345:12345 "$TD/tls/other.key"
		chmod 0400 "$TD/tls/other.key"
		sealed_serve "$TD/tls/other.key"
		assert_eq "another uid's key: exit code" 125 "$RC"
		assert_match "another uid's key: says why" "other.key is not this uid's \(0\) and not on a read-only mount" \
			"$(cat "$ERR")"
	fi
	as_user sh -c "umask 077; printf short > '$TD/tls/short.key'"
	sealed_serve "$TD/tls/short.key"
	assert_eq "the agent's own key of the wrong size: exit code" 125 "$RC"
	assert_match "the own-uid rule passed, the size did not" "short.key must hold exactly 32 bytes" "$(cat "$ERR")"
}
t receipt_key_file_refused test_receipt_key_file_refused
