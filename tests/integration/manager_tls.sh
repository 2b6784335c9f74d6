# shellcheck shell=bash
# The control API over mutual TLS (serve --listen tls:HOST:PORT, issue 29): a principal's certificate
# from the manager's CA drives the identities the principals file gives it and nothing else; no
# certificate, another CA's, a revoked one (also on a connection already open) or a principal of
# another identity is refused, and nothing is recorded. Loopback only.

TLS_PY=$(dirname "${BASH_SOURCE[0]}")/control_tls.py

# tls_setup: a manager with a TLS listener on a free loopback port (TLS_PORT), the principals file
# (alice-ci drives alice, bob-ci bob, ops is an operator), an empty deny list ($TLS_DENY), and a
# certificate for each principal in $WD/certs/NAME/ (ca issue); a session of alice's ($SID).
tls_setup() {
	local p
	TLS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	TLS_DENY=$WD/deny
	as_user mkdir -p "$WD/certs"
	as_user sh -c "echo '# revoked certificates' > '$TLS_DENY'"
	jq -n --arg repo "$TD/repo" '{"alice-ci": {identities: ["alice"], repos: [$repo]},
		"bob-ci": {identities: ["bob"], max_connections: 1}, ops: {operator: true},
		"many-ci": {identities: ["alice"], max_connections: 256}}' >"$TD/principals.json" &&
		as_user cp "$TD/principals.json" "$WD/principals.json"
	mgr_repo && mgr_start --listen "tls:127.0.0.1:$TLS_PORT" --tls-name "${TLS_NAME:-127.0.0.1}" \
		--tls-principals "$WD/principals.json" --tls-deny "$TLS_DENY" || return 1
	for p in alice-ci bob-ci ops many-ci; do
		as_user "$MANAGER" ca issue --principal "$p" --out "$WD/certs/$p" --state-dir "$MSTATE" >"$WD/certs-$p.json" ||
			bad "ca issue $p failed"
	done
	tls alice-ci session create --identity alice --repo "$REPO"
	assert_eq "session create over TLS (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	SID=$(jr .session)
}

# tls PRINCIPAL ARGS...: a client command over TLS with PRINCIPAL's certificate: the manager named in
# SANDBOX_MANAGER_SOCKET as tls://, the certificate by the CLI's --tls-* flags. Sets RC, OUT, ERR.
# TLS_HOST names the manager (default 127.0.0.1).
tls() {
	local p=$1
	shift
	timeout -k 3 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=tls://${TLS_HOST:-127.0.0.1}:$TLS_PORT" "$MANAGER" \
		--tls-cert "$WD/certs/$p/$p.crt" --tls-key "$WD/certs/$p/$p.key" --tls-ca "$WD/certs/$p/ca.crt" "$@" \
		>"$OUT" 2>"$ERR"
	RC=$?
}

# rows: the number of alice's session's records, read over the unix socket.
rows() {
	mgr records --session "$SID" --limit 100
	jr '.records | length'
}

test_manager_tls_call() {
	tls_setup || return
	tls alice-ci exec --session "$SID" -- 'echo over-tls'
	assert_eq "exec over TLS (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" over-tls "$(cat "$OUT")"
	assert_eq "recorded once, seen over the unix socket" 1 "$(rows)"
	tls alice-ci records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	tls alice-ci session list
	assert_json "[.sessions[].session] | index(\"$SID\") != null" true
	# operator actions: refused to alice-ci, answered to ops
	tls alice-ci status
	assert_eq "status as alice-ci: refused" 125 "$RC"
	assert_match "status refusal" "operator" "$(cat "$ERR")"
	tls alice-ci resolve --exec "$(mgr records --session "$SID"; jr '.records[0].exec_id')" --outcome ran --note x
	assert_match "resolve refusal" "resolve is an operator's" "$(cat "$ERR")"
	tls ops status --json
	assert_eq "status as ops (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
}
t manager_tls_call test_manager_tls_call

# A manager by host name: tls://localhost:PORT resolves (every address tried: ::1 refuses, the
# listener is on 127.0.0.1) and the certificate must name localhost; the same manager by address
# is refused (its certificate names localhost, not 127.0.0.1); a name that resolves to nothing is a
# clear error; nothing is recorded by the refused ones.
test_manager_tls_host_name() {
	local TLS_HOST=localhost
	TLS_NAME=localhost tls_setup || return
	tls alice-ci exec --session "$SID" -- 'echo by-name'
	assert_eq "exec at tls://localhost (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "its output" by-name "$(cat "$OUT")"
	TLS_HOST=127.0.0.1 tls alice-ci exec --session "$SID" -- 'echo by-address'
	assert_eq "the manager's certificate names localhost, not 127.0.0.1" 125 "$RC"
	TLS_HOST=no-such-manager.invalid tls alice-ci exec --session "$SID" -- 'echo nowhere'
	assert_eq "an unknown host" 125 "$RC"
	assert_match "the error names the manager's address" 'tls://no-such-manager.invalid:' "$(cat "$ERR")"
	assert_eq "one call recorded" 1 "$(rows)"
}
t manager_tls_host_name test_manager_tls_host_name

# `mcp` (and codex-bridge, the same calls: daemon_call.c) over TLS: the tool's call runs through the
# manager at tls://, with the certificate from SANDBOX_MANAGER_TLS_*; bob-ci's is refused, not run.
test_manager_tls_mcp() {
	local out p
	tls_setup || return
	for p in alice-ci bob-ci; do
		out=$(timeout -k 3 60 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:$TLS_PORT" \
			"SANDBOX_MANAGER_TLS_CERT=$WD/certs/$p/$p.crt" "SANDBOX_MANAGER_TLS_KEY=$WD/certs/$p/$p.key" \
			"SANDBOX_MANAGER_TLS_CA=$WD/certs/$p/ca.crt" python3 "$TLS_PY" mcp "$MANAGER" "$SID" 'echo via-mcp')
		if [ "$p" = alice-ci ]; then
			assert_match "mcp over TLS as alice-ci" "via-mcp" "$out"
		else
			assert_match "mcp over TLS as bob-ci: refused" "isError" "$out"
		fi
	done
	assert_eq "one call recorded (alice-ci's)" 1 "$(rows)"
}
t manager_tls_mcp test_manager_tls_mcp

test_manager_tls_refused() {
	local before out
	tls_setup || return
	before=$(rows)
	# no client certificate: the handshake fails, no request is read
	out=$(as_user python3 "$TLS_PY" nocert "$TLS_PORT" "$WD/certs/alice-ci/ca.crt" "$SID")
	assert_eq "no client certificate" refused "$out"
	# a certificate of another CA, for the same principal (the operator's-CA path of ca issue)
	as_user sh -c "umask 077; mkdir -p '$WD/other' && cd '$WD/other' &&
		openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null &&
		openssl req -x509 -new -key ca.key -subj '/CN=another CA' -days 2 -out ca.crt \
			-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null" ||
		bad "openssl could not make the other CA"
	as_user "$MANAGER" ca issue --principal alice-ci --out "$WD/certs/other" --ca "$WD/other" >/dev/null ||
		bad "ca issue --ca failed"
	mv "$WD/certs/other/alice-ci.crt" "$WD/certs/other/other.crt" && mv "$WD/certs/other/alice-ci.key" "$WD/certs/other/other.key"
	cp "$WD/certs/alice-ci/ca.crt" "$WD/certs/other/ca.crt" # it trusts the manager; the manager does not trust it
	tls other exec --session "$SID" -- 'echo must-not-run'
	assert_eq "another CA's certificate: refused" 125 "$RC"
	assert_match "another CA's certificate: why" "handshake" "$(cat "$ERR")"
	# bob-ci drives bob only: alice's session is not found to it, in every op and listing
	tls bob-ci exec --session "$SID" -- 'echo must-not-run'
	assert_match "bob-ci exec on alice's session" "not_found" "$(cat "$ERR")"
	tls bob-ci session create --identity alice --repo "$REPO"
	assert_match "bob-ci creating for alice" "refused: principal bob-ci may not drive identity alice" "$(cat "$ERR")"
	# a local path is another identity's worktree as easily as a repository: https:// only by default
	tls bob-ci session create --identity bob --repo "$REPO"
	assert_match "bob-ci creating from a local path" "refused: principal bob-ci may not take a repository" "$(cat "$ERR")"
	tls alice-ci session create --identity alice --repo "$TD/repo/../repo"
	assert_match "a .. segment out of alice-ci's prefix" "may not take a repository" "$(cat "$ERR")"
	tls alice-ci grant --session "$SID" --set "anything=read"
	assert_match "alice-ci granting a resource it was not given" "may not grant anything" "$(cat "$ERR")"
	tls alice-ci session create --identity alice --repo "$REPO" --grant anything=read
	assert_match "alice-ci creating with a grant it was not given" "may not grant anything" "$(cat "$ERR")"
	tls alice-ci session create --identity alice --repo "$REPO" --network proxy --egress-allow 192.0.2.1:443
	assert_match "alice-ci adding egress destinations" "refused: principal alice-ci may not add egress destinations" \
		"$(cat "$ERR")"
	tls bob-ci records --session "$SID"
	assert_match "bob-ci records of alice's session" "not_found" "$(cat "$ERR")"
	tls bob-ci session show --session "$SID"
	assert_match "bob-ci show of alice's session" "not_found" "$(cat "$ERR")"
	tls bob-ci session list
	assert_eq "bob-ci lists (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json "[.sessions[].session] | index(\"$SID\")" null
	tls bob-ci session list --identity alice
	assert_match "bob-ci listing alice's" "refused" "$(cat "$ERR")"
	tls bob-ci status
	assert_match "bob-ci status" "operator" "$(cat "$ERR")"
	assert_eq "nothing recorded by any refused request" "$before" "$(rows)"
}
t manager_tls_refused test_manager_tls_refused

test_manager_tls_revoked() {
	local before serial out
	tls_setup || return
	before=$(rows)
	# a second certificate of alice-ci, revoked by serial: the first one still works
	as_user "$MANAGER" ca issue --principal alice-ci --out "$WD/certs/alice2" --state-dir "$MSTATE" >"$WD/alice2.json"
	mv "$WD/certs/alice2/alice-ci.crt" "$WD/certs/alice2/alice2.crt" && mv "$WD/certs/alice2/alice-ci.key" "$WD/certs/alice2/alice2.key"
	serial=$(jr .serial "$WD/alice2.json")
	as_user sh -c "echo 'serial $(echo "$serial" | tr a-f A-F)' >> '$TLS_DENY'"
	sleep 1.5 # the deny list is looked at again at most once a second
	tls alice2 exec --session "$SID" -- 'echo must-not-run'
	assert_eq "a revoked serial: refused" 125 "$RC"
	assert_match "a revoked serial: why" "revoked" "$(cat "$ERR")"
	assert_eq "nothing recorded for the revoked serial" "$before" "$(rows)"
	tls alice-ci exec --session "$SID" -- 'echo still-allowed'
	assert_eq "the other certificate of alice-ci still works" 0 "$RC"
	before=$(rows)
	# a connection open before the revocation is closed within the bound, unanswered
	out=$(as_user python3 "$TLS_PY" hold "$TLS_PORT" "$WD/certs/alice-ci/ca.crt" "$WD/certs/alice-ci/alice-ci.crt" \
		"$WD/certs/alice-ci/alice-ci.key" "$SID" "$TLS_DENY" "principal alice-ci")
	assert_lines "$out" "first: ok" "second: closed"
	tls alice-ci exec --session "$SID" -- 'echo must-not-run'
	assert_match "a revoked principal: refused" "revoked" "$(cat "$ERR")"
	assert_eq "nothing recorded after the revocation" "$before" "$(rows)"
}
t manager_tls_revoked test_manager_tls_revoked

# Two managers on one store and the operator's own CA (serve --tls-cert/--tls-key/--tls-client-ca,
# ca issue --ca DIR): a session made through m1 over TLS; a call sent to m2 only is answered "owned"
# with m1's advertised tls:// address, and the client follows it there: it runs once, on m1.
test_manager_tls_follow() {
	local ports i out
	multi_setup 0 || return
	as_user mkdir -p "$WD/certs"
	as_user sh -c "umask 077; mkdir -p '$WD/opca' '$WD/certs' && cd '$WD/opca' &&
		openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null &&
		openssl req -x509 -new -key ca.key -subj '/CN=operator CA' -days 2 -out ca.crt \
			-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null" ||
		{ bad "openssl could not make the operator's CA"; return; }
	if ! as_user "$MANAGER" ca issue --server-name 127.0.0.1 --out "$WD/srv" --ca "$WD/opca" >/dev/null ||
		! as_user "$MANAGER" ca issue --principal alice-ci --out "$WD/certs/alice-ci" --ca "$WD/opca" >/dev/null; then
		bad "ca issue --ca failed"
		return
	fi
	jq -n --arg repo "$TD/repo" '{"alice-ci": {identities: ["alice"], repos: [$repo]}}' >"$TD/principals.json" &&
		as_user cp "$TD/principals.json" "$WD/principals.json"
	read -r -a ports < <(python3 -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))')
	for i in 1 2; do
		multi_serve "$i" --listen "tls:127.0.0.1:${ports[i-1]}" --advertise "tls://127.0.0.1:${ports[i-1]}" \
			--tls-cert "$WD/srv/server.crt" --tls-key "$WD/srv/server.key" --tls-client-ca "$WD/opca/ca.crt" \
			--tls-principals "$WD/principals.json" || return
	done
	TLS_PORT=${ports[0]}
	tls alice-ci session create --identity alice --repo "$REPO"
	assert_eq "session create through m1 (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	SID=$(jr .session)
	TLS_PORT=${ports[1]}
	tls alice-ci exec --session "$SID" -- 'echo once >> runs; cat runs'
	assert_eq "a call sent to m2 only, followed to m1 (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "it ran once" once "$(cat "$OUT")"
	# m2 alone, without following: its answer is the owner's tls:// address
	out=$(as_user python3 "$TLS_PY" ask "${ports[1]}" "$WD/certs/alice-ci/ca.crt" "$WD/certs/alice-ci/alice-ci.crt" \
		"$WD/certs/alice-ci/alice-ci.key" "$SID")
	assert_eq "m2's answer" "owned tls://127.0.0.1:${ports[0]} m1" "$out"
	# shellcheck disable=SC2034 # read by mgr (lib_manager.sh): m1's socket, for the records
	MSOCK=${MM_SOCK[1]}
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
}
t manager_tls_follow test_manager_tls_follow

# Nothing unauthenticated holds shared capacity (N1): 70 connections that never start a handshake
# are more than the handshakes the manager keeps in flight (64): each newer connection shuts the
# oldest one still in its handshake down, so a verified client gets in at once during the flood and
# the stallers find at least 7 of theirs closed (6 for their own surplus, 1 for the client's).
# Before (a budget refused at accept), the client waited out the stallers' 10 s handshake deadline.
# A principal at its own bound (bob-ci: 1) is answered unavailable; another principal is not held up.
test_manager_tls_bounds() {
	local out pid i closed
	tls_setup || return
	as_user python3 "$TLS_PY" stall "$TLS_PORT" 70 3 >"$WD/stall.out" &
	pid=$!
	for i in $(seq 1 50); do grep -q open "$WD/stall.out" 2>/dev/null && break; sleep 0.1; done
	assert_eq "the stallers" "open 70" "$(cat "$WD/stall.out")"
	sleep 0.3 # the manager has accepted them all
	mgr session show --session "$SID"
	assert_eq "the unix socket answers during the flood" 0 "$RC"
	tls alice-ci session show --session "$SID"
	assert_eq "a TLS client during the flood (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	wait "$pid" 2>/dev/null
	closed=$(sed -n 's/^closed //p' "$WD/stall.out")
	assert_eq "the stallers' connections shut down, oldest first (of 70: $(cat "$WD/stall.out"))" ok \
		"$([ "${closed:-0}" -ge 7 ] && echo ok || echo "${closed:-none}")"
	as_user python3 "$TLS_PY" idle "$TLS_PORT" "$WD/certs/bob-ci/ca.crt" "$WD/certs/bob-ci/bob-ci.crt" \
		"$WD/certs/bob-ci/bob-ci.key" 8 >"$WD/idle.out" &
	pid=$!
	for i in $(seq 1 50); do grep -q held "$WD/idle.out" 2>/dev/null && break; sleep 0.1; done
	sleep 0.3
	tls bob-ci session list
	assert_match "bob-ci over its bound of 1" "unavailable: principal bob-ci has 1 connections open" "$(cat "$ERR")"
	tls alice-ci session show --session "$SID"
	assert_eq "alice-ci meanwhile" 0 "$RC"
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}
t manager_tls_bounds test_manager_tls_bounds

# TLS clients together never take the last eighth of the control connections' cap: the unix
# socket's peers (the operator's status and resolve) keep room. Under a descriptor limit of 128 the
# cap is 64, so TLS holds at most 56: of 70 verified idle connections (one principal, within its
# own bound of 256), 14 are refused, and `status` over the unix socket answers meanwhile. Before,
# TLS took all 64 and the operator was refused.
test_manager_tls_unix_room() {
	local pid i
	MGR_WRAP=(prlimit --nofile=128:128)
	tls_setup || return
	MGR_WRAP=()
	as_user python3 "$TLS_PY" idle "$TLS_PORT" "$WD/certs/many-ci/ca.crt" "$WD/certs/many-ci/many-ci.crt" \
		"$WD/certs/many-ci/many-ci.key" 8 70 >"$WD/many.out" &
	pid=$!
	for i in $(seq 1 100); do grep -q held "$WD/many.out" 2>/dev/null && break; sleep 0.1; done
	assert_eq "70 TLS connections of one principal" "held 56 refused 14" "$(cat "$WD/many.out")"
	mgr status
	assert_eq "status over the unix socket meanwhile (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
}
t manager_tls_unix_room test_manager_tls_unix_room
