# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: the completion receipt. Where it is written, what it carries, that it verifies, that
# any change to it fails verification, and that an exec id is used once.

sha() { sha256sum | cut -d' ' -f1; }

# set_byte FILE OFFSET CHAR: replaces the byte at OFFSET in place.
set_byte() { printf '%s' "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none; }

new_nonce() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }

# verify ARGS...: `sandbox-agent verify-receipt ARGS`, result in $OUT (saved from the exec's result first).
verify() {
	cp "$OUT" "$TD/exec.json"
	agent verify-receipt "$@"
}

test_receipt_contents() {
	local nonce f
	nonce=$(new_nonce)
	ax_ok --exec-id r-1 --nonce "$nonce" -- 'printf "hello\n"; printf "e\n" >&2; stat -L -c %i /proc/self/ns/pid >&2; exit 5'
	assert_result exited 5 null
	f=$RD/r-1.json
	local pidns
	pidns=$(jr .stderr | sed -n 2p)
	assert_json .exec_id '"r-1"'
	assert_json .receipt.path "$(json_str "$f")"
	assert_json .receipt.nonce "\"$nonce\""
	assert_json .receipt.verified true
	assert_json .receipt.boundary_confirmed true
	[ -f "$f" ] || { bad "no receipt at $f"; return; }
	assert_eq "receipt mode and owner" "600 $RUN_UID" "$(stat -c '%a %u' "$f")"
	assert_match "key mode (no group or other access)" '^[0-7]00 ' "$(stat -c '%a %u' "$RD/receipt.key")"
	assert_json '[.version, .exec_id, .nonce, .status, .exit_code, .signal]' "[1,\"r-1\",\"$nonce\",\"exited\",5,null]" "$f"
	assert_json '[.stdout_bytes, .stderr_bytes]' "[6,$((2 + ${#pidns} + 1))]" "$f"
	assert_json .stdout_sha256 "\"$(printf 'hello\n' | sha)\"" "$f"
	assert_json .stderr_sha256 "\"$(jq -j .stderr "$OUT" | sha)\"" "$f"
	assert_json '[.boundary.init_reaped, .boundary.confirmed]' '[true,true]' "$f"
	assert_json .boundary.pid_namespace "\"pid:[$pidns]\"" "$f"
	assert_json '.boundary.teardown_ms | type' '"number"' "$f"
	assert_json 'has("generation")' true "$f"
	assert_json '.ended_at_ms >= .started_at_ms and .started_at_ms > 1600000000000' true "$f"
	assert_match "hmac" '^[0-9a-f]{64}$' "$(jr .hmac_sha256 "$f")"

	verify --receipt "$f" --key "$RD/receipt.key" --nonce "$nonce" --exec-id r-1
	assert_eq "verify-receipt exit code" 0 "$RC"
	assert_json .verified true
	verify --receipt "$f" --key "$RD/receipt.key"
	assert_eq "verify-receipt (no nonce, no id) exit code" 0 "$RC"
	assert_json .verified true
}
t receipt_contents test_receipt_contents

# Each change to a receipt, and each mismatch of nonce, exec id or key, fails verification (exit 1).
test_receipt_tamper() {
	local nonce f bad_nonce
	nonce=$(new_nonce)
	ax_ok --exec-id tamper --nonce "$nonce" -- 'echo hi'
	assert_result exited 0 null
	f=$RD/tamper.json
	[ -f "$f" ] || { bad "no receipt at $f"; return; }

	local off match str c
	cp "$f" "$TD/status.json"
	off=$(grep -bo '"exited"' "$f" | head -n 1 | cut -d: -f1)
	set_byte "$TD/status.json" $((off + 6)) D # "exiteD"
	cp "$f" "$TD/bytes.json"
	match=$(grep -boE '"stdout_bytes": *3' "$f" | head -n 1)
	str=${match#*:}
	set_byte "$TD/bytes.json" $((${match%%:*} + ${#str} - 1)) 4 # 3 -> 4
	cp "$f" "$TD/hmac.json"
	match=$(grep -boE '"hmac_sha256": *"' "$f" | head -n 1)
	str=${match#*:}
	off=$((${match%%:*} + ${#str})) # the first hex digit
	c=$(dd if="$f" bs=1 skip="$off" count=1 status=none)
	set_byte "$TD/hmac.json" "$off" "$([ "$c" = 0 ] && echo 1 || echo 0)"
	local one
	for one in status bytes hmac; do
		assert_eq "bytes changed in $one.json" 1 "$(cmp -l "$f" "$TD/$one.json" | wc -l)"
		verify --receipt "$TD/$one.json" --key "$RD/receipt.key" --nonce "$nonce" --exec-id tamper
		assert_eq "verify-receipt of $one.json exit code" 1 "$RC"
		assert_json .verified false
		assert_json '.reason | type' '"string"'
	done

	bad_nonce=$(new_nonce)
	verify --receipt "$f" --key "$RD/receipt.key" --nonce "$bad_nonce" --exec-id tamper
	assert_eq "verify-receipt with another nonce" 1 "$RC"
	assert_json .verified false
	verify --receipt "$f" --key "$RD/receipt.key" --nonce "$nonce" --exec-id other
	assert_eq "verify-receipt with another exec id" 1 "$RC"
	assert_json .verified false
	head -c 32 /dev/urandom >"$TD/other.key"
	verify --receipt "$f" --key "$TD/other.key" --nonce "$nonce"
	assert_eq "verify-receipt with another key" 1 "$RC"
	assert_json .verified false
}
t receipt_tamper test_receipt_tamper

# A second exec with an exec id that has a receipt is refused, runs nothing and leaves the receipt alone.
test_duplicate_exec_id() {
	ax_ok --exec-id dup -- 'true'
	assert_result exited 0 null
	local before
	before=$(sha <"$RD/dup.json")
	ax_ok --exec-id dup -- "touch $WD/ran-twice"
	assert_json .status '"refused"'
	assert_json .exit_code null
	assert_json '.error | type' '"string"'
	assert_match "error" '.+' "$(jr .error)"
	[ -e "$WD/ran-twice" ] && bad "the refused exec ran its command"
	assert_eq "receipt unchanged" "$before" "$(sha <"$RD/dup.json")"
}
t duplicate_exec_id test_duplicate_exec_id

# Without --receipt-dir: $XDG_RUNTIME_DIR/sandbox-agent/receipts, else /tmp/sandbox-agent-UID/receipts;
# hidden from the command either way.
test_default_receipt_dir() {
	local m xdg dir
	m=$(unique_marker)
	xdg=$TD/xdg
	mkdir_user "$xdg" && chmod 0700 "$xdg"
	AGENT_ENV=("XDG_RUNTIME_DIR=$xdg")
	agent exec --cwd "$WD" --exec-id "xdg-$m" -- "ls $xdg/sandbox-agent/receipts >/dev/null 2>&1; echo ls=\$?"
	dir=$xdg/sandbox-agent/receipts
	assert_result exited 0 null
	assert_json .stdout '"ls=2\n"'
	assert_json .receipt.path "$(json_str "$dir/xdg-$m.json")"
	assert_json .receipt.verified true
	[ -f "$dir/xdg-$m.json" ] || bad "no receipt in $dir"
	verify --receipt "$dir/xdg-$m.json" --key "$dir/receipt.key" --exec-id "xdg-$m"
	assert_eq "verify-receipt exit code" 0 "$RC"

	AGENT_ENV=()
	dir=/tmp/sandbox-agent-$RUN_UID/receipts
	agent exec --cwd "$WD" --exec-id "tmp-$m" -- "ls $dir >/dev/null 2>&1; echo ls=\$?"
	assert_result exited 0 null
	assert_json .stdout '"ls=2\n"'
	assert_json .receipt.path "$(json_str "$dir/tmp-$m.json")"
	[ -f "$dir/tmp-$m.json" ] || bad "no receipt in $dir"
	assert_eq "owner of $dir" "$RUN_UID" "$(stat -c %u "$dir")"
	rm -f "$dir/tmp-$m.json"
}
t default_receipt_dir test_default_receipt_dir
