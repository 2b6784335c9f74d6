# shellcheck shell=bash
# shellcheck disable=SC2034 # AGENT, ESC, GUARD, ELAPSED_MS, LISTENER_PID... are read by the agent_*.sh files
# Helpers for the integration tests of sandbox-agent: a runner that repeats every test as root and as an
# unprivileged user, agent invocations that always run under `timeout`, and assertions that state the
# exact expected outcome. Sourced by run.sh; the agent_*.sh files use only what is defined here.

IT_USER=sbtest                 # the unprivileged user every test also runs as
AGENT_TIMEOUT=${AGENT_TIMEOUT:-30}
IT_TEST_DEADLINE=${IT_TEST_DEADLINE:-180}
IT_PASS=0
IT_FAIL=0
IT_SKIP=0
IT_FAILED=()
IT_SKIPPED=()                  # "name [mode]: why" of every skipped case, for the summary
AGENT_ENV=()                   # extra NAME=VALUE for the agent's own environment (per call)

now_ms() { date +%s%3N; }

# ---- setup ------------------------------------------------------------------------------------------

# it_setup BUILD: copies the agent and attack programs where the unprivileged user can run them (root-owned,
# so no test user can change them), checks that user exists when root, and records the host's namespace inodes.
it_setup() {
	local build=$1 p
	# Not under /tmp: `sandbox-agent exec` gives each command a private /tmp, and the attack programs
	# and test directories must stay visible (read-only) to it.
	IT_ROOT=$(mktemp -d /var/tmp/sandbox-it.XXXXXX) || exit 1
	chmod 0755 "$IT_ROOT"
	mkdir -p "$IT_ROOT/bin/escape"
	if [ ! -x "$build/sandbox-agent" ]; then
		echo "integration: no agent at $build/sandbox-agent" >&2
		exit 1
	fi
	cp "$build/sandbox-agent" "$IT_ROOT/bin/sandbox-agent"
	# The client and the daemon it execs for `serve`, side by side as make and make install put them.
	cp "$build/sandbox-manager" "$build/sandbox-manager-daemon" "$IT_ROOT/bin/"
	for p in "$build"/tests/escape/*; do
		[ -x "$p" ] && cp "$p" "$IT_ROOT/bin/escape/"
	done
	# The failpoint manager (`make failpoints`), with the agent beside it where it looks for one.
	FP_MANAGER=
	if [ -x "$build/fp/sandbox-manager" ] && [ -x "$build/fp/sandbox-manager-daemon" ]; then
		mkdir -p "$IT_ROOT/bin/fp"
		cp "$build/fp/sandbox-manager" "$build/fp/sandbox-manager-daemon" "$build/sandbox-agent" "$IT_ROOT/bin/fp/" &&
			FP_MANAGER=$IT_ROOT/bin/fp/sandbox-manager
	fi
	# The failpoint agent, under its own name: the fp manager runs the normal one beside it.
	FP_AGENT=
	if [ -x "$build/fp/sandbox-agent" ]; then
		mkdir -p "$IT_ROOT/bin/fp"
		cp "$build/fp/sandbox-agent" "$IT_ROOT/bin/fp/sandbox-agent-fp" && FP_AGENT=$IT_ROOT/bin/fp/sandbox-agent-fp
	fi
	export FP_MANAGER FP_AGENT
	chmod -R a+rX,go-w "$IT_ROOT/bin"
	AGENT=$IT_ROOT/bin/sandbox-agent
	MANAGER=$IT_ROOT/bin/sandbox-manager
	ESC=$IT_ROOT/bin/escape
	HOST_PIDNS=$(stat -L -c %i /proc/self/ns/pid)
	HOST_USERNS=$(stat -L -c %i /proc/self/ns/user)
	GUARD="$HOST_PIDNS $HOST_USERNS"

	if [ "$(id -u)" -eq 0 ]; then
		# The test user is the setup step's to create (scripts/test-setup.sh), not the harness's: one
		# place that makes it, so that CI's fresh machine proves that place.
		if ! id "$IT_USER" >/dev/null 2>&1; then
			echo "integration: the test user $IT_USER is missing: run make test-setup (scripts/test-setup.sh) as root" >&2
			exit 1
		fi
		IT_MODES="root $IT_USER"
	else
		IT_MODES=$(id -un)
		echo "integration: not root: running every test as $IT_MODES only (the root runs are skipped)"
	fi
	trap it_cleanup EXIT
}

# IT_KEEP=1 keeps the test directories (logs, results, receipts) for a look afterwards.
it_cleanup() {
	if [ "${IT_KEEP:-0}" = 1 ]; then
		echo "integration: kept $IT_ROOT"
	elif [ -n "${IT_ROOT:-}" ] && [ -d "$IT_ROOT" ]; then
		rm -rf "$IT_ROOT"
	fi
}

# mode_prefix MODE: sets AS to the command prefix that runs a program as MODE's user, and RUN_UID/RUN_USER.
mode_prefix() {
	if [ "$1" = "$IT_USER" ] && [ "$(id -u)" -eq 0 ]; then
		AS=(setpriv "--reuid=$IT_USER" "--regid=$IT_USER" --init-groups
			env "HOME=$(getent passwd "$IT_USER" | cut -d: -f6)" "USER=$IT_USER" "LOGNAME=$IT_USER")
	else
		AS=()
	fi
	RUN_USER=$1
	RUN_UID=$(id -u "$1")
}

# as_user CMD...: runs CMD as the current test's user (no timeout: use it for quick commands only).
as_user() { "${AS[@]}" "$@"; }

# mkdir_user DIR...: creates directories owned by the current test's user.
mkdir_user() {
	mkdir -p "$@" && chown "$RUN_USER:" "$@" 2>/dev/null
	[ "$(stat -c %u "$1")" = "$RUN_UID" ]
}

# ---- running the agent --------------------------------------------------------------------------------

# agent ARGS...: runs the agent as the current user under timeout. Sets RC, ELAPSED_MS; stdout in $OUT,
# stderr in $ERR. Reads stdin from the caller. AGENT_WRAP (array) goes between timeout and the user switch.
agent() {
	local t0
	t0=$(now_ms)
	timeout -k 3 "$AGENT_TIMEOUT" "${AGENT_WRAP[@]}" "${AS[@]}" env -u XDG_RUNTIME_DIR "${AGENT_ENV[@]}" \
		"$AGENT" "$@" >"$OUT" 2>"$ERR"
	RC=$?
	ELAPSED_MS=$(($(now_ms) - t0))
	if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
		bad "agent timed out after ${AGENT_TIMEOUT}s: $*"
	fi
	return 0
}

# ax ARGS... -- COMMAND: `agent exec` with this test's receipt directory and working directory.
ax() { agent exec --receipt-dir "$RD" --cwd "$WD" "$@"; }

# ax_ok ARGS... -- COMMAND: like ax, then asserts that the agent printed one result and exited 0.
ax_ok() {
	ax "$@"
	assert_eq "agent exit code" 0 "$RC"
	if ! jq -e 'type == "object"' "$OUT" >/dev/null 2>&1; then
		bad "agent printed no JSON object: $(head -c 500 "$OUT") / stderr: $(head -c 500 "$ERR")"
	fi
}

# ---- assertions -----------------------------------------------------------------------------------

bad() {
	echo "    FAIL: $*"
	T_BAD=1
}

# skip WHY: a case that does not apply here by design (a root-only case in the unprivileged run, a
# kernel without the feature); named with WHY in the run's summary.
skip() {
	echo "    SKIP: $*"
	exit 77
}

# skip_setup WHY: a case that cannot run for want of a setup step (scripts/test-setup.sh, deps.sh,
# a build). Under CI=true that is a failure: CI proves the setup, it never hides a missing step
# behind a skip (issue 25).
skip_setup() {
	if [ "${CI:-}" = true ]; then
		bad "$* (a missing setup step; CI=true never skips for one)"
		exit 1
	fi
	skip "$* (a setup step is missing: make test-setup)"
}

# A test that calls a helper no file defined (one sourced later, a typo) fails, instead of passing
# with the rest of its checks never run: bash calls this for every command it cannot find.
command_not_found_handle() {
	bad "command not found: $1 (a helper defined in a file sourced later, or a typo?)"
	return 127
}

assert_eq() {
	if [ "$2" != "$3" ]; then
		bad "$1: expected [$2], got [$3]"
	fi
}

assert_ne() {
	if [ "$2" = "$3" ]; then
		bad "$1: expected anything but [$2]"
	fi
}

# assert_match WHAT ERE ACTUAL
assert_match() {
	if ! [[ $3 =~ $2 ]]; then
		bad "$1: [$3] does not match /$2/"
	fi
}

# assert_lt WHAT ACTUAL LIMIT: ACTUAL < LIMIT (integers)
assert_lt() {
	if ! [ "$2" -lt "$3" ] 2>/dev/null; then
		bad "$1: expected < $3, got $2"
	fi
}

# assert_ge WHAT ACTUAL MIN
assert_ge() {
	if ! [ "$2" -ge "$3" ] 2>/dev/null; then
		bad "$1: expected >= $3, got $2"
	fi
}

# assert_terminal_safe WHAT FILE: FILE holds no character a terminal acts on (rule N6, common/textesc.h):
# no C0 control but newline and tab, no DEL, no C1 (U+0080-U+009F), no bidi formatting character, no
# U+2028/U+2029 and no byte that is not UTF-8 (a raw 0x9b is CSI to a terminal reading 8-bit C1).
assert_terminal_safe() {
	local found
	found=$(python3 -c '
import sys
acting = set(range(0x20)) - {0x0a, 0x09} | set(range(0x7f, 0xa0)) | {0x061c, 0x200e, 0x200f, 0x2028, 0x2029}
acting |= set(range(0x202a, 0x202f)) | set(range(0x2066, 0x206a))
text = open(sys.argv[1], "rb").read().decode("utf-8", "surrogateescape")
print(" ".join(sorted({"U+%04X" % ord(c) if c < "\udc80" or c > "\udcff" else "byte 0x%02x" % (ord(c) - 0xdc00)
	for c in text if ord(c) in acting or "\udc80" <= c <= "\udcff"})))' "$2")
	[ -z "$found" ] || bad "$1: printed raw: $found"
}

# jv EXPR [FILE]: the compact JSON of EXPR on FILE (default: the last result).
jv() { jq -c "$1" "${2:-$OUT}" 2>/dev/null; }

# jr EXPR [FILE]: the raw value of EXPR (strings without quotes).
jr() { jq -r "$1" "${2:-$OUT}" 2>/dev/null; }

# json_str TEXT: TEXT as a compact JSON string (to compare with jv).
json_str() { jq -cn --arg s "$1" '$s'; }

# assert_json EXPR EXPECTED_JSON [FILE]: e.g. assert_json .status '"exited"'; assert_json .signal null
assert_json() {
	local got
	got=$(jv "$1" "${3:-$OUT}")
	if [ "$got" != "$2" ]; then
		bad "json $1: expected $2, got ${got:-<no value: $(head -c 300 "${3:-$OUT}")>}"
	fi
}

# assert_result STATUS EXIT_CODE SIGNAL: the agent exited 0 with a result of that status.
assert_result() {
	assert_eq "agent exit code" 0 "$RC"
	assert_json .status "\"$1\""
	assert_json .exit_code "$2"
	assert_json .signal "$3"
}

# assert_lines TEXT ERE...: TEXT has exactly one line per ERE, in order, each matching it whole.
assert_lines() {
	local text=$1 i=0 line
	shift
	local -a lines=()
	mapfile -t lines <<<"$text"
	[ -z "$text" ] && lines=()
	if [ "${#lines[@]}" -ne "$#" ]; then
		bad "expected $# lines, got ${#lines[@]}:"
		printf '      | %s\n' "${lines[@]}"
	fi
	for re in "$@"; do
		line=${lines[$i]:-<missing>}
		if ! [[ $line =~ ^$re$ ]]; then
			bad "line $((i + 1)): [$line] does not match /^$re$/"
		fi
		i=$((i + 1))
	done
}

# no_process PATTERN: asserts that no process on the host matches PATTERN (pgrep -f), right now.
no_process() {
	local left
	left=$(pgrep -a -f -- "$1")
	if [ -n "$left" ]; then
		bad "processes survived the command: $left"
		# shellcheck disable=SC2046 # end exactly the survivors this test started, by their ids
		kill -KILL $(pgrep -f -- "$1") 2>/dev/null
	fi
}

# heartbeat_stopped FILE: FILE exists (the daemon ran) and does not change for 600 ms (it is gone).
heartbeat_stopped() {
	local a b
	if [ ! -s "$1" ]; then
		bad "heartbeat $1 was never written"
		return
	fi
	a=$(cat "$1")
	sleep 0.6
	b=$(cat "$1")
	if [ "$a" != "$b" ]; then
		bad "heartbeat $1 still changing after the result returned ($a -> $b)"
	fi
}

# unique_marker: a number no other process has in its command line.
unique_marker() { echo "$$$RANDOM$RANDOM"; }

# landlock_abi: the Landlock ABI that `sandbox-agent check` reports (0 when none), as the current user.
landlock_abi() {
	local out
	out=$(timeout 10 "${AS[@]}" "$AGENT" check 2>/dev/null)
	jq -r '.features.landlock.abi // 0' <<<"$out" 2>/dev/null || echo 0
}

# start_listener PORTFILE: a loopback TCP listener on two free ports (printed "A B" to PORTFILE) that
# accepts and closes; the second port is also bound on ::1 when IPv6 is there. Sets LISTENER_PID.
start_listener() {
	/usr/bin/python3 - "$1" <<'EOF' &
import os, select, socket, sys
socks = []
for _ in range(3):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    socks.append(s)
try:
    s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s6.bind(("::1", socks[0].getsockname()[1]))
    s6.listen(64)
    socks.append(s6)
except OSError:
    pass
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(" ".join(str(s.getsockname()[1]) for s in socks[:3]) + "\n")
os.rename(tmp, sys.argv[1])
while True:
    for s in select.select(socks, [], [])[0]:
        c, _ = s.accept()
        c.close()
EOF
	LISTENER_PID=$!
	local i
	for i in $(seq 1 50); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	bad "listener did not start"
	return 1
}

# ---- the runner -------------------------------------------------------------------------------------

# it_in_file FUNCTION CALLER: whether a case belongs to IT_FILE (run.sh NAME): registered there (CALLER,
# the file that called t) or its FUNCTION defined there (a file whose cases another file registers,
# manager_kubernetes_tokens.sh's in cluster_smoke.sh). Every case does when no file is selected.
it_in_file() {
	local where
	[ -n "${IT_FILE:-}" ] || return 0
	[ "$2" = "$IT_FILE" ] && return 0
	where=$(shopt -s extdebug && declare -F "$1" | cut -d' ' -f3-)
	[ "$where" = "$IT_FILE" ]
}

# t NAME FUNCTION: runs FUNCTION once per mode (root, then the unprivileged user) in a subshell whose
# working directory is a fresh WD owned by that user, with RD a fresh receipt directory (0700).
# FUNCTION reports with bad/skip; any bad makes the test fail. IT_FILTER (an ERE) selects tests by name.
t() {
	local name=$1 fn=$2 mode td rc log pid wd_pid done_pid started
	for mode in $IT_MODES; do
		if [ -n "${IT_FILTER:-}" ] && ! [[ "$name" =~ $IT_FILTER ]]; then
			continue
		fi
		it_in_file "$fn" "${BASH_SOURCE[1]}" || continue
		td=$IT_ROOT/$mode/$name
		log=$IT_ROOT/$mode/$name.log
		mkdir -p "$IT_ROOT/$mode"
		chmod 0755 "$IT_ROOT/$mode"
		(
			set -u
			T_BAD=0
			TD=$td WD=$td/work RD=$td/receipts OUT=$td/out.json ERR=$td/err.txt
			mode_prefix "$mode"
			AGENT_WRAP=()
			mkdir_user "$TD" "$WD" "$RD" || { bad "cannot create $TD for $mode"; exit 1; }
			chmod 0700 "$RD"
			# A host-root agent runs its commands as nobody (65534): their working directory
			# must be theirs to write.
			[ "$RUN_UID" -eq 0 ] && chown 65534:65534 "$WD"
			cd "$WD" || exit 1
			"$fn"
			exit "$T_BAD"
		) >"$log" 2>&1 &
		pid=$!
		started=$SECONDS
		sleep "$IT_TEST_DEADLINE" &
		wd_pid=$!
		wait -n -p done_pid "$pid" "$wd_pid"
		rc=$?
		if [ "$done_pid" = "$wd_pid" ]; then
			echo "    FAIL: the test did not finish within ${IT_TEST_DEADLINE}s" >>"$log"
			kill -TERM "$pid" 2>/dev/null
			wait "$pid" 2>/dev/null
			rc=1
		else
			kill "$wd_pid" 2>/dev/null
			wait "$wd_pid" 2>/dev/null
		fi
		case $rc in
		0)
			IT_PASS=$((IT_PASS + 1))
			# Each case's seconds, so that CI's time can be read case by case from its log.
			echo "ok   $name [$mode] $((SECONDS - started)) s"
			;;
		77)
			IT_SKIP=$((IT_SKIP + 1))
			IT_SKIPPED+=("$name [$mode]: $(grep -m1 'SKIP:' "$log" | sed 's/^ *SKIP: //')")
			echo "skip ${IT_SKIPPED[-1]}"
			;;
		*)
			IT_FAIL=$((IT_FAIL + 1))
			IT_FAILED+=("$name [$mode]")
			echo "FAIL $name [$mode]"
			sed 's/^/  /' "$log"
			;;
		esac
	done
}
