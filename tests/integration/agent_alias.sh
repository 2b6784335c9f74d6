# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec with the same directory mounted twice (an operator's bind mount): the agent's private
# directories are hidden at every path where they show, and a writable root that holds one, lies inside one
# or holds the agent binary is refused whatever path names it (rule R1 of docs/isolation.md: by identity,
# never by path strings; sandbox-agent/aliases.c, boundary_view.c run_view_build()). Each test makes its bind
# mounts as root in a private mount namespace of its own, then runs the agent there as the test's user.

# alias_setup: TD/home holding .state/rc (the receipt directory, 0700), proj (a working directory) and bin;
# TD/alias and TD/wr/sub as mount points. All the test user's; proj is the command's to write.
alias_setup() {
	[ "$(id -u)" -eq 0 ] || skip "bind mounts need root: the harness runs as $(id -un)"
	command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
	HOME_D=$TD/home
	ALIAS=$TD/alias
	RCD=$HOME_D/.state/rc
	mkdir_user "$HOME_D" "$HOME_D/.state" "$RCD" "$HOME_D/proj" "$HOME_D/bin" "$ALIAS" "$TD/wr" "$TD/wr/sub" ||
		bad "cannot create the test's directories"
	chmod 0700 "$RCD"
	[ "$RUN_UID" -eq 0 ] && chown 65534:65534 "$HOME_D/proj"
	return 0
}

# in_binds SRC DST [SRC DST]... -- PROGRAM ARGS...: PROGRAM as the test's user, under timeout, in a private
# mount namespace where each SRC is also mounted at DST. Sets RC; stdout in $OUT, stderr in $ERR.
in_binds() {
	local mounts=""
	while [ "$1" != -- ]; do
		mounts+="mount --bind $(printf '%q %q' "$1" "$2") && "
		shift 2
	done
	shift
	timeout -k 3 "$AGENT_TIMEOUT" unshare -m --propagation private bash -c \
		"$mounts exec $(printf '%q ' "${AS[@]}" env -u XDG_RUNTIME_DIR "$@")" >"$OUT" 2>"$ERR"
	RC=$?
	[ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && bad "agent timed out after ${AGENT_TIMEOUT}s: $*"
	return 0
}

# (a) The receipt directory seen through the alias is the empty hiding mount (mode 0, nothing to list or
# read), while the receipt is still written to the real one and verifies with its key.
test_alias_receipt_hidden() {
	local m id
	alias_setup
	m=$(unique_marker)
	id=al-$m
	in_binds "$HOME_D" "$ALIAS" -- "$AGENT" exec --receipt-dir "$RCD" --cwd "$ALIAS/proj" --exec-id "$id" -- "
		ls -a $ALIAS/.state/rc >/dev/null 2>&1 && echo listed
		cat $ALIAS/.state/rc/receipt.key >/dev/null 2>&1 && echo key-read
		stat -c %a $ALIAS/.state/rc
		stat -c %a $RCD
		touch $ALIAS/.state/rc/planted-$m 2>/dev/null && echo planted
		echo done"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '0' '0' 'done'
	assert_json .receipt.verified true
	[ -f "$RCD/$id.json" ] || bad "the receipt is not in the agent's own directory $RCD"
	[ -e "$RCD/planted-$m" ] && bad "the command wrote into the receipt directory through the alias"
	cp "$OUT" "$TD/exec.json"
	agent verify-receipt --receipt "$RCD/$id.json" --key "$RCD/receipt.key" --exec-id "$id"
	assert_eq "verify-receipt exit code" 0 "$RC"
}
t alias_receipt_hidden test_alias_receipt_hidden

# (b) The working directory is the alias's root, which holds the receipt directory: refused, naming both;
# and the same with the receipt directory named through the alias and the real tree as working directory.
test_alias_cwd_refused() {
	local m
	alias_setup
	m=$(unique_marker)
	in_binds "$HOME_D" "$ALIAS" -- "$AGENT" exec --receipt-dir "$RCD" --cwd "$ALIAS" -- "touch $ALIAS/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $RCD lies inside the writable $ALIAS:" "$(jr .error)"
	in_binds "$HOME_D" "$ALIAS" -- "$AGENT" exec --receipt-dir "$ALIAS/.state/rc" --cwd "$HOME_D" -- \
		"touch $HOME_D/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $ALIAS/.state/rc lies inside the writable $HOME_D:" "$(jr .error)"
	[ -e "$HOME_D/ran-$m" ] && bad "a refused exec ran its command"
	return 0
}
t alias_cwd_refused test_alias_cwd_refused

# (c) A --writable root that is an alias of an ancestor of the receipt directory, or that holds a bind mount
# of one (the receipt directory then shows inside it under another name): refused.
test_alias_writable_refused() {
	local m
	alias_setup
	m=$(unique_marker)
	in_binds "$HOME_D" "$ALIAS" -- "$AGENT" exec --receipt-dir "$RCD" --cwd "$WD" --writable "$ALIAS/.state" -- \
		"touch $ALIAS/.state/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $RCD lies inside the writable $ALIAS/.state:" "$(jr .error)"
	in_binds "$HOME_D/.state" "$TD/wr/sub" -- "$AGENT" exec --receipt-dir "$RCD" --cwd "$WD" --writable "$TD/wr" -- \
		"touch $TD/wr/sub/ran-$m"
	assert_json .status '"refused"'
	assert_match "error" "private directory $RCD, which shows at $TD/wr/sub/rc through another mount, lies inside the writable $TD/wr:" \
		"$(jr .error)"
	[ -e "$HOME_D/.state/ran-$m" ] && bad "a refused exec ran its command"
	return 0
}
t alias_writable_refused test_alias_writable_refused

# (d) The agent binary under TD/home/bin, with the working directory the alias's root that holds it, or
# run through the alias with the real tree as working directory, or bound as a file into the working
# directory: refused each time, the binary unchanged.
test_alias_binary_refused() {
	local m copy before
	alias_setup
	m=$(unique_marker)
	copy=$HOME_D/bin/agent-copy
	cp "$AGENT" "$copy" && chown "$RUN_USER:" "$copy"
	before=$(sha256sum <"$copy")
	in_binds "$HOME_D" "$ALIAS" -- "$copy" exec --receipt-dir "$RD" --cwd "$ALIAS" -- "echo evil > $ALIAS/bin/agent-copy"
	assert_json .status '"refused"'
	assert_match "error" "agent binary $copy lies inside the writable $ALIAS, where" "$(jr .error)"
	in_binds "$HOME_D" "$ALIAS" -- "$ALIAS/bin/agent-copy" exec --receipt-dir "$RD" --cwd "$HOME_D" -- \
		"echo evil > $copy"
	assert_json .status '"refused"'
	assert_match "error" "agent binary $ALIAS/bin/agent-copy lies inside the writable $HOME_D, where" "$(jr .error)"
	as_user touch "$WD/agent-bound"
	in_binds "$copy" "$WD/agent-bound" -- "$copy" exec --receipt-dir "$RD" --cwd "$WD" -- "echo evil > $WD/agent-bound"
	assert_json .status '"refused"'
	assert_match "error" "agent binary $copy, which shows at $WD/agent-bound through another mount, lies inside the writable $WD" \
		"$(jr .error)"
	assert_eq "agent binary unchanged" "$before" "$(sha256sum <"$copy")"
}
t alias_binary_refused test_alias_binary_refused

# An alias the command cannot reach (another mount covers it) needs no hiding: the exec runs, and the
# receipt directory is still hidden where it does show.
test_alias_covered_runs() {
	local m
	alias_setup
	m=$(unique_marker)
	timeout -k 3 "$AGENT_TIMEOUT" unshare -m --propagation private bash -c \
		"mount --bind $(printf '%q %q' "$HOME_D" "$ALIAS") && mount -t tmpfs none $(printf '%q' "$ALIAS/.state") &&
		exec $(printf '%q ' "${AS[@]}" env -u XDG_RUNTIME_DIR "$AGENT" exec --receipt-dir "$RCD" --cwd "$WD" -- \
			"ls -a $ALIAS/.state | tr '\n' ' '; echo; stat -c %a $RCD")" >"$OUT" 2>"$ERR"
	RC=$?
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" '\. \.\. ' '0'
}
t alias_covered_runs test_alias_covered_runs

# Part of a private directory mounted elsewhere (a file bind of receipt.key, as a third review did): no cover
# of the directory's own paths hides it, so the agent refuses to run, naming the mount, and the key stays
# unread.
test_alias_part_refused() {
	local m
	alias_setup
	m=$(unique_marker)
	# A first exec makes the key (no mount yet).
	ax_ok --receipt-dir "$RCD" -- true
	assert_result exited 0 null
	: >"$TD/keyview" && chown "$RUN_USER:" "$TD/keyview"
	in_binds "$RCD/receipt.key" "$TD/keyview" -- "$AGENT" exec --receipt-dir "$RCD" --cwd "$WD" -- \
		"od -An -tx1 $TD/keyview > $WD/stolen-$m"
	assert_json .status '"refused"'
	assert_match "error" "is also mounted at $TD/keyview" "$(jr .error)"
	[ -e "$WD/stolen-$m" ] && bad "the command ran and could read the key through the file bind"
	return 0
}
t alias_part_refused test_alias_part_refused
