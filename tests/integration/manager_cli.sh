# shellcheck shell=bash
# sandbox-manager's command line (issue 14): --help on every command (stdout, exit 0, its flags named),
# usage errors (exit 2: one line saying what, then the usage), an unknown session or exec answered
# `not_found` in one line with exit 125 by every command (exec said "internal", cancel exited 0), the
# session list, and an operator's resolution of an uncertain exec (once, uncertain only, never rerun).

# cli ARGS...: the manager binary as the test user, with no manager socket. Sets RC; stdout in $OUT,
# stderr in $ERR.
cli() {
	timeout -k 3 30 "${AS[@]}" env -u SANDBOX_MANAGER_SOCKET "$MANAGER" "$@" >"$OUT" 2>"$ERR"
	RC=$?
}

# help_ok WHAT FLAG... -- ARGS...: `sandbox-manager ARGS` prints a usage naming every FLAG on stdout,
# nothing on stderr, and exits 0.
help_ok() {
	local what=$1 flags=() f
	shift
	while [ "$1" != -- ]; do flags+=("$1"); shift; done
	shift
	cli "$@"
	assert_eq "$what: exit code" 0 "$RC"
	assert_eq "$what: stderr" "" "$(cat "$ERR")"
	assert_match "$what: a usage" "^usage: sandbox-manager" "$(head -n 1 "$OUT")"
	for f in "${flags[@]}"; do
		grep -qF -- "$f" "$OUT" || bad "$what: the usage does not mention $f: $(head -c 300 "$OUT")"
	done
}

# usage_error WHAT MESSAGE -- ARGS...: exit 2, nothing on stdout, stderr = one line matching MESSAGE,
# then the usage (its first line "usage: ...", and no other line saying what went wrong).
usage_error() {
	local what=$1 message=$2
	shift 3
	cli "$@"
	assert_eq "$what: exit code" 2 "$RC"
	assert_eq "$what: stdout" "" "$(cat "$OUT")"
	assert_match "$what: the message" "^sandbox-manager[a-z ]*: $message" "$(head -n 1 "$ERR")"
	assert_match "$what: the usage after it" "^usage: sandbox-manager" "$(sed -n 2p "$ERR")"
	assert_eq "$what: messages after the first line" 0 "$(tail -n +2 "$ERR" | grep -c '^sandbox-manager[a-z ]*: ')"
}

test_manager_cli_help() {
	help_ok "session create --help" --identity --repo --branch --grant --socket -- session create --help
	help_ok "session show -h" --session --socket -- session show -h
	help_ok "session delete --help" --session --delete-branch -- session delete --help
	help_ok "session list --help" --identity --state --all --limit --before -- session list --help
	help_ok "session --help" create show delete list -- session --help
	help_ok "exec --help" --session --timeout-seconds --turn --json --socket -- exec --help
	help_ok "cancel --help" --session --socket -- cancel --help
	help_ok "grant --help" --session --set --revoke -- grant --help
	help_ok "records --help" --session --exec --limit --before --state unresolved -- records --help
	help_ok "resolve --help" --exec --outcome ran not-ran unknown --note -- resolve --help
	help_ok "mcp --help" --session --socket -- mcp --help
	help_ok "serve --help" --config --state-dir --volume --socket --backend --idle-seconds --podman-socket \
		--cgroup-parent -- serve --help
	help_ok "version --help" version -- version --help
	help_ok "help exec" --timeout-seconds -- help exec
	help_ok "--help" serve session exec cancel grant records resolve mcp version -- --help
	# help wins wherever it stands among the flags, and nothing is asked of a manager
	help_ok "exec with flags, then --help" --session -- exec --session 0123456789abcdef --help -- true
	cli --version
	assert_eq "--version: exit code" 0 "$RC"
	assert_match "--version: output" "^sandbox-manager [0-9]+\.[0-9]+\.[0-9]+$" "$(cat "$OUT")"
	cli version
	assert_eq "version: exit code" 0 "$RC"
	assert_eq "version and --version agree" "$(cat "$OUT")" "$(timeout 10 "$MANAGER" --version)"

	# usage errors: one line, the usage, exit 2, for every command
	usage_error "unknown flag of exec" "unknown option '--bogus'" -- exec --bogus --session s -- true
	usage_error "unknown flag of session create" "unknown option '--bogus'" -- session create --bogus
	usage_error "unknown flag of session show" "unknown option '--bogus'" -- session show --bogus
	usage_error "unknown flag of session delete" "unknown option '--bogus'" -- session delete --bogus
	usage_error "unknown flag of session list" "unknown option '--bogus'" -- session list --bogus
	usage_error "unknown flag of cancel" "unknown option '--bogus'" -- cancel --bogus
	usage_error "unknown flag of grant" "unknown option '--bogus'" -- grant --bogus
	usage_error "unknown flag of records" "unknown option '--bogus'" -- records --bogus
	usage_error "unknown flag of resolve" "unknown option '--bogus'" -- resolve --bogus
	usage_error "unknown flag of mcp" "unknown option '--bogus'" -- mcp --bogus
	usage_error "unknown flag of version" "unknown option '--bogus'" -- version --bogus
	usage_error "a short flag nobody has" "unknown option '-x'" -- exec -x
	usage_error "a value for a flag that takes none" "option '--json' takes no value" -- exec --json=1
	usage_error "a flag without its value" "option '--session' needs a value" -- exec --session
	usage_error "exec without --session" "--session is required" -- exec -- true
	usage_error "exec without a command" "the command goes after --" -- exec --session s
	usage_error "a bad timeout" "--timeout-seconds takes a whole number" -- exec --session s --timeout-seconds 1x -- true
	usage_error "session create without --repo" "--repo is required" -- session create --identity alice
	usage_error "an unknown session subcommand" "unknown subcommand 'frobnicate'" -- session frobnicate
	usage_error "grant with both" "give exactly one of --set" -- grant --session s --set a=read --revoke a
	usage_error "records with both" "give exactly one of --session" -- records --session s --exec e
	usage_error "records --limit 0" "--limit takes a whole number" -- records --session s --limit 0
	usage_error "session list --limit many" "--limit takes a whole number" -- session list --limit many
	usage_error "resolve without a note" "--note is required" -- resolve --exec e --outcome ran
	usage_error "resolve with an empty note" "--note takes 1 to 4096 bytes" -- resolve --exec e --outcome ran --note ''
	usage_error "resolve with a note too long" "--note takes 1 to 4096 bytes" -- resolve --exec e --outcome ran \
		--note "$(head -c 4097 /dev/zero | tr '\0' n)"
	usage_error "resolve with another outcome" "--outcome takes ran, not-ran or unknown" -- resolve --exec e \
		--outcome maybe --note x
	usage_error "mcp without --session" "--session is required" -- mcp
	usage_error "an unknown command" "unknown command 'frobnicate'" -- frobnicate
	usage_error "no command" "a command is required" --

	# serve's flags: parsed by its configuration, answered before anything is created
	usage_error "unknown flag of serve" "unknown option '--bogus'" -- serve --state-dir "$TD/never" --bogus
	usage_error "serve with a bad value" "config: idle-seconds must be a whole number" -- serve \
		--state-dir "$TD/never" --idle-seconds soon
	usage_error "serve with a stray argument" "unexpected argument 'now'" -- serve --state-dir "$TD/never" now
	usage_error "serve with a bad sandbox start" "config: sandbox-start must be call or create, not 'later'" -- \
		serve --state-dir "$TD/never" --sandbox-start later
	[ -e "$TD/never" ] && bad "a serve refused for its flags created its state directory"
	return 0
}
t manager_cli_help test_manager_cli_help

# The client's start (issue 32, docs/performance.md "Cut: the client linked against musl"): static,
# and not started by glibc, whose start asks the CPU for its caches with dozens of `cpuid`s (0.6 ms of
# exits to the hypervisor per `sandbox-manager exec` in a VM). glibc's crt1 marks every program it
# starts with an ABI tag note (NT_GNU_ABI_TAG); musl's start carries none. The sanitizer build links
# the client against glibc on purpose (CLIENT_LIBC): there it must be that build.
test_manager_cli_start() {
	local notes rc
	if LC_ALL=C readelf -lW "$MANAGER" | grep -q 'program interpreter'; then
		LC_ALL=C readelf -dW "$MANAGER" | grep -q 'libasan' ||
			bad "the client is dynamic but not the sanitizer build: $(LC_ALL=C readelf -dW "$MANAGER" | grep NEEDED | head -c 300)"
		return 0
	fi
	notes=$(LC_ALL=C readelf -nW "$MANAGER" 2>&1)
	case $notes in
	*NT_GNU_ABI_TAG*) bad "the static client is glibc's (an ABI tag note): build it with CLIENT_LIBC=musl" ;;
	esac
	# musl gives a thread 128 KiB unless the program asks (-z stack-size); glibc gave 8 MiB.
	assert_match "the client's thread stack size" 'stack size: 0x800000' "$notes"
	"$MANAGER" version >"$OUT" 2>"$ERR"
	rc=$?
	assert_eq "version: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$rc"
	assert_match "version" "sandbox-manager " "$(cat "$OUT")"
}
t manager_cli_start test_manager_cli_start

# one_line WHAT KIND: exit 125, stderr exactly one line "sandbox-manager: KIND: ...", stdout empty.
one_line() {
	assert_eq "$1: exit code" 125 "$RC"
	assert_eq "$1: lines on stderr ($(head -c 300 "$ERR"))" 1 "$(wc -l <"$ERR")"
	assert_match "$1: the message" "^sandbox-manager: $2: " "$(cat "$ERR")"
	assert_eq "$1: stdout" "" "$(cat "$OUT")"
}

test_manager_cli_not_found() {
	local nosuch=0123456789abcdef
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$nosuch" -- true
	one_line "exec on an unknown session" not_found
	mgr exec --session "$nosuch" --json -- true
	one_line "exec --json on an unknown session" not_found
	mgr cancel --session "$nosuch"
	one_line "cancel on an unknown session" not_found
	mgr session show --session "$nosuch"
	one_line "session show on an unknown session" not_found
	mgr session delete --session "$nosuch"
	one_line "session delete on an unknown session" not_found
	mgr grant --session "$nosuch" --revoke kubernetes:staging
	one_line "grant on an unknown session" not_found
	mgr records --session "$nosuch"
	one_line "records on an unknown session" not_found
	mgr records --exec "$nosuch"
	one_line "records on an unknown exec" not_found
	mgr resolve --exec "$nosuch" --outcome ran --note "looked"
	one_line "resolve on an unknown exec" not_found
	# nothing was recorded for any of them
	mgr session list --all
	assert_json '[.sessions[].session]' "[\"$SID\"]"
	# a cancel with nothing running on a session that exists is still an answer, not an error
	mgr cancel --session "$SID"
	assert_eq "cancel with nothing running: exit code" 0 "$RC"
	assert_json .cancelled null
	# a deleted session is no session to call or cancel: not_found, and no record is added
	mgr session delete --session "$SID"
	assert_eq "delete: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr exec --session "$SID" -- true
	one_line "exec on a deleted session" not_found
	mgr cancel --session "$SID"
	one_line "cancel on a deleted session" not_found
	mgr records --session "$SID"
	assert_json '.records' '[]'
	# an unreachable manager: one line too
	timeout -k 3 30 "${AS[@]}" "$MANAGER" session list --socket "$TD/no.sock" >"$OUT" 2>"$ERR"
	RC=$?
	assert_eq "unreachable: exit code" 125 "$RC"
	assert_eq "unreachable: lines on stderr" 1 "$(wc -l <"$ERR")"
	assert_match "unreachable: the message" "not reachable at $TD/no.sock" "$(cat "$ERR")"
}
t manager_cli_not_found test_manager_cli_not_found

# Several sockets (docs/operations.md, Several managers): --socket repeated and SANDBOX_MANAGER_SOCKET
# with ':' are tried in order, an unreachable one passed over; the list's bounds refused in one line.
test_manager_cli_sockets() {
	local nine=/1:/2:/3:/4:/5:/6:/7:/8:/9
	mgr_repo && mgr_start || return
	mgr_session
	cli session show --session "$SID" --socket "$TD/no.sock" --socket "$MSOCK"
	assert_eq "--socket twice, the first unreachable: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '.session' "\"$SID\""
	timeout -k 3 30 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$TD/no.sock:$MSOCK" "$MANAGER" exec --session "$SID" \
		-- 'echo via-list' >"$OUT" 2>"$ERR"
	assert_eq "a list in SANDBOX_MANAGER_SOCKET: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$?"
	assert_eq "a list in SANDBOX_MANAGER_SOCKET: output" via-list "$(cat "$OUT")"
	cli session list --socket "$TD/no.sock" --socket "$TD/no2.sock"
	assert_eq "none reachable: exit code" 125 "$RC"
	assert_eq "none reachable: lines on stderr" 1 "$(wc -l <"$ERR")"
	assert_match "none reachable: the message" \
		"none of the 2 manager sockets is reachable; the last: the manager is not reachable at $TD/no2.sock" "$(cat "$ERR")"
	timeout -k 3 30 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$nine" "$MANAGER" session list >"$OUT" 2>"$ERR"
	assert_eq "nine sockets: exit code" 125 "$?"
	assert_eq "nine sockets: the message" \
		"sandbox-manager: SANDBOX_MANAGER_SOCKET names more than 8 manager sockets" "$(cat "$ERR")"
	timeout -k 3 30 "${AS[@]}" env "SANDBOX_MANAGER_SOCKET=$nine" "$MANAGER" mcp --session "$SID" </dev/null \
		>"$OUT" 2>"$ERR"
	assert_eq "nine sockets, mcp: exit code" 2 "$?"
	assert_eq "nine sockets, mcp: the message" \
		"sandbox-manager mcp: SANDBOX_MANAGER_SOCKET names more than 8 manager sockets" "$(cat "$ERR")"
}
t manager_cli_sockets test_manager_cli_sockets

# The control socket serves its manager's uid and root only (connections.c, conn_thread): a client of
# another uid is refused by the peer's credentials (SO_PEERCRED). The socket's 0700 directory would stop
# that client first, so it keeps CAP_DAC_OVERRIDE: only the uid check is left to refuse it (mutation
# M13). Needs a root harness to run a client as a third uid (nobody), in both modes.
test_manager_control_peer_uid() {
	[ "$(id -u)" -eq 0 ] || skip "running a client as another uid needs a root harness"
	mgr_start || return
	timeout -k 3 30 setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=+dac_override \
		--ambient-caps=+dac_override env "SANDBOX_MANAGER_SOCKET=$MSOCK" "$MANAGER" session list \
		>"$OUT" 2>"$ERR"
	RC=$?
	assert_ne "a client of uid 65534: exit code (stdout: $(head -c 200 "$OUT"))" 0 "$RC"
	assert_eq "a client of uid 65534: nothing served" "" "$(cat "$OUT")"
	grep -q "refused a control connection from uid 65534" "$TD/manager.log" ||
		bad "the manager did not log the refusal of uid 65534: $(tail -n 5 "$TD/manager.log")"
	mgr session list
	assert_eq "the manager's own uid is served: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
}
t manager_control_peer_uid test_manager_control_peer_uid

test_manager_session_list() {
	local s1 s2 s3 e1
	mgr_repo && mgr_start || return
	mgr_session && s1=$SID
	mgr exec --session "$s1" -- 'echo hi'
	assert_eq "exec: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr records --session "$s1"
	e1=$(jr '.records[0].exec_id')
	mgr session create --identity bob --repo "$REPO"
	s2=$(jr .session)
	mgr session create --identity alice --repo "$REPO"
	s3=$(jr .session)
	mgr session delete --session "$s3"
	assert_eq "delete: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"

	mgr session list
	assert_eq "session list: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.sessions[].session]' "[\"$s2\",\"$s1\"]" # newest first, the deleted one left out
	assert_json '[.sessions[].identity]' '["bob","alice"]'
	assert_json '[.sessions[].state]' '["active","active"]'
	assert_json '[.sessions[].generation]' '[0,1]'
	assert_json '.sessions[1].last_exec | [.exec_id, .state]' "[\"$e1\",\"exited\"]"
	assert_json '.sessions[1].last_exec | [(.accepted_ms | type), (.finished_ms | type)]' '["number","number"]'
	assert_json '.sessions[0] | [.last_exec, .sandbox]' '[null,null]'
	assert_json '[.sessions[].created_ms | type]' '["number","number"]'
	assert_json 'has("next_before")' false
	local runtime
	runtime=$(jv '.sessions[1].sandbox')
	mgr session show --session "$s1"
	assert_eq "the listed sandbox is the session's" "$(jv .sandbox.runtime_id)" "$runtime"
	[ "$runtime" != null ] || bad "the session with a call has no sandbox listed"

	mgr session list --identity alice
	assert_json '[.sessions[].session]' "[\"$s1\"]"
	mgr session list --all
	assert_json '[.sessions[] | [.session, .state]]' "[[\"$s3\",\"deleted\"],[\"$s2\",\"active\"],[\"$s1\",\"active\"]]"
	mgr session list --state deleted
	assert_json '[.sessions[].session]' "[\"$s3\"]"
	mgr session list --limit 1
	assert_json '[.sessions[].session]' "[\"$s2\"]"
	assert_json .next_before "\"$s2\""
	mgr session list --limit 1 --before "$s2"
	assert_json '[.sessions[].session]' "[\"$s1\"]"
	assert_json 'has("next_before")' false
	mgr session list --state sleeping
	one_line "an unknown session state" invalid
	mgr session list --before 0123456789abcdef
	one_line "before an unknown session" not_found
}
t manager_session_list test_manager_session_list

test_manager_resolve() {
	local m done_id name
	m=$(unique_marker)
	name=$(id -un "$RUN_UID")
	mgr_repo && mgr_start && mgr_session || return
	mgr exec --session "$SID" -- true
	mgr records --session "$SID"
	done_id=$(jr '.records[0].exec_id')
	mgr_uncertain "$m"
	mgr records --session "$SID" --state unresolved
	assert_json '[.records[].exec_id]' "[\"$UNCERTAIN\"]"

	# only an uncertain exec: the exited one is refused, its record untouched
	mgr resolve --exec "$done_id" --outcome ran --note "it exited 0"
	one_line "resolve of an exited exec" refused
	assert_match "resolve of an exited exec: why" "is exited, not uncertain" "$(cat "$ERR")"
	mgr records --exec "$done_id"
	assert_json '.records[0] | [.state, .resolution]' '["exited",null]'

	mgr resolve --exec "$UNCERTAIN" --outcome not-ran --note "no trace of it in the worktree (checked git status)"
	assert_eq "resolve: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json '[.exec_id, .state, .resolution.outcome, .resolution.by_uid, .resolution.by_name]' \
		"[\"$UNCERTAIN\",\"uncertain\",\"not-ran\",$RUN_UID,\"$name\"]"
	mgr records --exec "$UNCERTAIN"
	assert_json '.records[0] | [.state, .resolution.outcome, .resolution.note, .resolution.by_uid]' \
		"[\"uncertain\",\"not-ran\",\"no trace of it in the worktree (checked git status)\",$RUN_UID]"
	assert_json '.records[0].resolution.at_ms >= .records[0].finished_ms' true
	mgr records --session "$SID"
	assert_json '[.records[] | [.state, (.resolution.outcome // null)]]' '[["uncertain","not-ran"],["exited",null]]'
	mgr records --session "$SID" --state uncertain
	assert_json '[.records[].exec_id]' "[\"$UNCERTAIN\"]"
	mgr records --session "$SID" --state unresolved
	assert_json '.records' '[]'

	# once: the second word is refused and the first stays
	mgr resolve --exec "$UNCERTAIN" --outcome ran --note "changed my mind"
	one_line "a second resolve" refused
	assert_match "a second resolve: why" "already resolved \(not-ran\)" "$(cat "$ERR")"
	mgr records --exec "$UNCERTAIN"
	assert_json '.records[0].resolution | [.outcome, .note]' '["not-ran","no trace of it in the worktree (checked git status)"]'
	# and nothing ran again
	assert_eq "the command ran once" 1 "$(wc -l <"$WT/.sandbox-tmp/runs.$m")"
	grep -q "exec $UNCERTAIN resolved by uid $RUN_UID: not-ran" "$TD/manager.log" ||
		bad "the manager's log does not say who resolved it"
}
t manager_resolve test_manager_resolve

# serve's one option parser (issue 27): `--config=FILE` reads the file as `--config FILE` does (it
# was parsed and dropped: the manager ran on its defaults), and an abbreviation (`--conf FILE`,
# which getopt_long took for --config) is a usage error, not a manager on the defaults.
test_manager_serve_config() {
	local metrics=unix:$TD/metrics.sock
	printf '{"metrics-listen": "%s"}\n' "$metrics" >"$TD/serve.json"
	chmod 0644 "$TD/serve.json"
	usage_error "serve --conf FILE" "unknown option '--conf' \(options are spelt out whole: --config\)" -- serve \
		--state-dir "$TD/never" --conf "$TD/serve.json"
	usage_error "serve --conf=FILE" "unknown option '--conf'" -- serve --state-dir "$TD/never" "--conf=$TD/serve.json"
	usage_error "serve --idle 5" "unknown option '--idle'" -- serve --state-dir "$TD/never" --idle 5
	usage_error "serve --config without its file" "option '--config' needs a value" -- serve --state-dir "$TD/never" \
		--config
	usage_error "exec --sess S" "unknown option '--sess'" -- exec --sess s -- true
	[ -e "$TD/never" ] && bad "a serve refused for its flags created its state directory"

	mgr_start "--config=$TD/serve.json" || return
	mgr status --json
	assert_json .metrics_listen "\"$metrics\""
	# its log: RFC 3339 UTC times with milliseconds, and a warning that no cgroup limit holds
	grep -q '^{"ts":"[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]\{3\}Z","level":"warn",.*no cgroup-parent configured' \
		"$TD/manager.log" || bad "no warning that sandboxes get no cgroup limit: $(head -c 600 "$TD/manager.log")"
	# a client's flags in both spellings too
	mgr status "--socket=$MSOCK" --json
	assert_eq "status --socket=PATH: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_json .metrics_listen "\"$metrics\""
}
t manager_serve_config test_manager_serve_config
