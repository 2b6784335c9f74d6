# shellcheck shell=bash
# `make install` and the systemd units (issue 14). What this guards: an install that misses a file or
# gives it the wrong mode, a unit whose ExecStart= names a path the install did not fill in, an
# installed manager that cannot find its agent, an uninstall that leaves files behind or takes the
# operator's configuration, a unit systemd would warn about, and a hardening setting of the system
# unit that the process backend cannot live with.
# The install runs from the copies of the binaries the suite already uses (BUILD=$IT_ROOT/bin: the
# install target builds nothing) into a DESTDIR inside the test's directory, as the test's user.

INSTALL_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# install_make TARGET ARGS...: make TARGET in the source tree, from the suite's binaries; RC, $OUT, $ERR.
# Not the outer make's jobserver (its descriptors are not ours).
install_make() {
	as_user env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$INSTALL_SRC" "$@" BUILD="$IT_ROOT/bin" \
		>"$OUT" 2>"$ERR"
	RC=$?
}

# install_tree DIR: every file under DIR with its mode, sorted ("644 ./etc/...").
install_tree() { (cd "$1" && find . -type f -printf '%m %p\n' | LC_ALL=C sort); }

# What `make install DESTDIR=... PREFIX=/usr` puts there, with the modes.
INSTALL_WANT="644 ./etc/infra-sandbox/manager.conf
644 ./etc/infra-sandbox/manager.conf.example
644 ./usr/lib/systemd/system/sandbox-manager.service
644 ./usr/lib/systemd/user/sandbox-manager.service
644 ./usr/share/doc/infra-sandbox/README.md
644 ./usr/share/doc/infra-sandbox/architecture.md
644 ./usr/share/doc/infra-sandbox/isolation.md
644 ./usr/share/doc/infra-sandbox/operations.md
644 ./usr/share/infra-sandbox/seccomp.json
755 ./usr/bin/sandbox-agent
755 ./usr/bin/sandbox-manager
755 ./usr/bin/sandbox-manager-daemon"

test_manager_install() {
	local root=$TD/root pre=$TD/p d f got
	# A dynamically linked agent (a SANITIZE=1 build) is refused, and nothing is installed.
	# (The daemon is the dynamically linked program at hand.)
	mkdir_user "$TD/dyn" && cp "$MANAGER" "$MANAGER-daemon" "$TD/dyn/" && cp "$MANAGER-daemon" "$TD/dyn/sandbox-agent"
	as_user env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$INSTALL_SRC" install BUILD="$TD/dyn" \
		DESTDIR="$TD/dynroot" PREFIX=/usr >"$OUT" 2>"$ERR"
	assert_ne "install of a dynamic agent: exit code" 0 "$?"
	grep -q 'sandbox-agent is dynamically linked' "$ERR" || bad "no 'dynamically linked' in: $(head -c 300 "$ERR")"
	[ -e "$TD/dynroot" ] && bad "a refused install wrote $(find "$TD/dynroot" | head -5)"
	if LC_ALL=C readelf -lW "$AGENT" | grep -q 'program interpreter'; then
		skip "the suite's agent is dynamically linked (SANITIZE=1): make install refuses it, as checked"
	fi

	install_make install DESTDIR="$root" PREFIX=/usr
	assert_eq "make install: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	[ "$RC" -eq 0 ] || return
	got=$(install_tree "$root")
	assert_eq "the installed files and modes" "$INSTALL_WANT" "$got"
	got=$(cd "$root" && find . -type d ! -perm 0755 -printf '%m %p\n')
	assert_eq "installed directories not 0755" "" "$got"
	cmp -s "$MANAGER" "$root/usr/bin/sandbox-manager" || bad "the installed manager is not the built one"
	cmp -s "$MANAGER-daemon" "$root/usr/bin/sandbox-manager-daemon" || bad "the installed daemon is not the built one"
	cmp -s "$AGENT" "$root/usr/bin/sandbox-agent" || bad "the installed agent is not the built one"
	cmp -s "$INSTALL_SRC/images/seccomp.json" "$root/usr/share/infra-sandbox/seccomp.json" || bad "seccomp.json differs"
	cmp -s "$INSTALL_SRC/dist/manager.conf.example" "$root/etc/infra-sandbox/manager.conf" ||
		bad "a first install's manager.conf is not the example"

	# The units name the installed paths (PREFIX=/usr), with no token left.
	f=$root/usr/lib/systemd/system/sandbox-manager.service
	assert_eq "system unit: ExecStart" \
		"ExecStart=/usr/bin/sandbox-manager serve --config /etc/infra-sandbox/manager.conf --socket /run/infra-sandbox/manager.sock" \
		"$(grep '^ExecStart=' "$f")"
	assert_eq "system unit: Documentation" "Documentation=file:/usr/share/doc/infra-sandbox/operations.md" \
		"$(grep '^Documentation=' "$f")"
	f=$root/usr/lib/systemd/user/sandbox-manager.service
	assert_eq "user unit: ExecStart" "ExecStart=/usr/bin/sandbox-manager serve --socket %t/infra-sandbox/manager.sock" \
		"$(grep '^ExecStart=' "$f")"
	got=$(grep -l '@[A-Z_]*@' "$root"/usr/lib/systemd/*/sandbox-manager.service)
	assert_eq "units with a token left" "" "$got"

	# The installed binaries run, and the installed manager finds the agent beside it and reads the
	# installed configuration.
	assert_eq "installed manager: version" "$("$MANAGER" version)" "$(as_user "$root/usr/bin/sandbox-manager" version)"
	assert_match "installed manager: version" '^sandbox-manager [0-9]+\.[0-9]+\.[0-9]+$' \
		"$(as_user "$root/usr/bin/sandbox-manager" version)"
	as_user "$root/usr/bin/sandbox-agent" check >"$OUT" 2>"$ERR"
	assert_json '.ok | type' '"boolean"'
	mgr_repo || return
	local MANAGER=$root/usr/bin/sandbox-manager
	mgr_start --config "$root/etc/infra-sandbox/manager.conf" && mgr_session || return
	mgr exec --session "$SID" -- 'echo from the installed manager'
	assert_eq "a call on the installed manager: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "a call on the installed manager: output" "from the installed manager" "$(cat "$OUT")"

	# systemd reads both units without a warning (verify exits 0 even for an unknown key, so its
	# stderr must be empty). It checks that ExecStart= is executable: an install with no DESTDIR,
	# all of it inside this test's directory.
	command -v systemd-analyze >/dev/null || { bad "systemd-analyze is missing (scripts/deps.sh installs systemd)"; return; }
	install_make install PREFIX="$pre" SYSCONFDIR="$pre/etc"
	assert_eq "make install PREFIX=$pre: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	as_user systemd-analyze verify "$pre/lib/systemd/system/sandbox-manager.service" >"$OUT" 2>"$ERR"
	assert_eq "systemd-analyze verify (system unit): exit code" 0 "$?"
	assert_eq "systemd-analyze verify (system unit): warnings" "" "$(cat "$ERR")"
	mkdir_user "$TD/xdg" && chmod 0700 "$TD/xdg"
	as_user env XDG_RUNTIME_DIR="$TD/xdg" systemd-analyze verify --user "$pre/lib/systemd/user/sandbox-manager.service" \
		>"$OUT" 2>"$ERR"
	assert_eq "systemd-analyze verify --user (user unit): exit code" 0 "$?"
	assert_eq "systemd-analyze verify --user (user unit): warnings" "" "$(cat "$ERR")"

	# Uninstall removes exactly that: no file left, and the directories that are ours alone gone.
	install_make uninstall DESTDIR="$root" PREFIX=/usr
	assert_eq "make uninstall: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "files left after uninstall" "" "$(install_tree "$root")"
	for d in usr/share/infra-sandbox usr/share/doc/infra-sandbox etc/infra-sandbox; do
		[ -e "$root/$d" ] && bad "uninstall left $d"
	done
	[ -d "$root/usr/bin" ] || bad "uninstall removed usr/bin, which is not ours"

	# A configuration changed by the operator survives a reinstall and an uninstall.
	install_make install DESTDIR="$root" PREFIX=/usr
	assert_eq "second make install: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	echo '{"idle-seconds": 60}' >"$root/etc/infra-sandbox/manager.conf"
	install_make install DESTDIR="$root" PREFIX=/usr
	assert_eq "make install over a changed manager.conf: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "manager.conf after a reinstall" '{"idle-seconds": 60}' "$(cat "$root/etc/infra-sandbox/manager.conf")"
	install_make uninstall DESTDIR="$root" PREFIX=/usr
	assert_eq "make uninstall: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "files left after uninstall, a changed manager.conf" "644 ./etc/infra-sandbox/manager.conf" \
		"$(install_tree "$root")"
	grep -q 'kept .*manager.conf' "$OUT" || bad "uninstall did not say it kept manager.conf: $(head -c 300 "$OUT")"
}
t manager_install test_manager_install

# The system unit's [Service] keys: the ones test_manager_unit_sandbox replays or that need no
# replay. A key added to the unit fails this test until it is replayed (or argued) here.
UNIT_KEYS="Delegate ExecStart KillMode LimitNOFILE NoNewPrivileges PrivateTmp ProtectHome ProtectSystem
Restart RestartPreventExitStatus RestartSec RuntimeDirectory RuntimeDirectoryMode StateDirectory
StateDirectoryMode TimeoutStopSec Type"

# unit_ns_script FILE: the namespace's set-up, run by unshare -m as root: every mount read-only but
# /dev, /proc and /sys (ProtectSystem=strict; ProtectHome=read-only comes with it), the writable
# directories given ($UNIT_RW: StateDirectory=, RuntimeDirectory=) bound writable again, a tmpfs on
# /tmp (PrivateTmp=; the test's files are in /var/tmp, which systemd would make private too), then
# the descriptor limit (LimitNOFILE=) and no_new_privs (NoNewPrivileges=) for the command.
# $UNIT_EXTRA: more mount commands.
unit_ns_script() {
	cat >"$1" <<'SCRIPT'
set -u
findmnt -rn -o TARGET | while read -r m; do
	m=$(printf '%b' "$m")
	case $m in /dev | /dev/* | /proc | /proc/* | /sys | /sys/*) continue ;; esac
	mount -o remount,bind,ro "$m" || echo "unit-ns: cannot make $m read-only" >&2
done
for d in $UNIT_RW; do
	mount --bind "$d" "$d" && mount -o remount,bind,rw "$d" "$d" || echo "unit-ns: cannot make $d writable" >&2
done
mount -t tmpfs -o mode=1777 tmpfs /tmp || echo "unit-ns: no private /tmp" >&2
eval "${UNIT_EXTRA:-}"
# LimitNOFILE=65536, as far as this process may raise its hard limit (systemd can; a test run may not)
n=$(ulimit -Hn)
[ "$n" = unlimited ] || [ "$n" -gt 65536 ] && n=65536
exec prlimit --nofile="$n:$n" setpriv --no-new-privs "$@"
SCRIPT
}

# The system unit's file-system hardening, replayed without systemd (none runs here): the installed
# manager, with the unit's ExecStart= flags, in a mount namespace set up as the unit's would be. It
# must start, clone a repository it can only read, run calls and write only where the unit lets it.
test_manager_unit_sandbox() {
	local root=$TD/root unit keys got rc
	[ "$RUN_UID" -eq 0 ] || skip "the system unit runs the manager as root"
	LC_ALL=C readelf -lW "$AGENT" | grep -q 'program interpreter' && skip "make install refuses a SANITIZE=1 agent"
	install_make install DESTDIR="$root" PREFIX=/usr
	assert_eq "make install: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	[ "$RC" -eq 0 ] || return
	unit=$root/usr/lib/systemd/system/sandbox-manager.service

	# The unit sets exactly the keys this test knows, with the values replayed below.
	keys=$(sed -n '/^\[Service\]/,/^\[/{/^[A-Za-z]*=/s/=.*//p}' "$unit" | LC_ALL=C sort | tr '\n' ' ')
	# shellcheck disable=SC2086 # the list is split into its words on purpose
	assert_eq "the unit's [Service] keys" "$(printf '%s\n' $UNIT_KEYS | LC_ALL=C sort | tr '\n' ' ')" "$keys"
	for kv in ProtectSystem=strict ProtectHome=read-only PrivateTmp=yes NoNewPrivileges=yes \
		StateDirectory=infra-sandbox RuntimeDirectory=infra-sandbox KillMode=mixed LimitNOFILE=65536; do
		grep -qx "$kv" "$unit" || bad "the unit does not set $kv"
	done

	# The state directory short (agents' sockets live below it) and outside /tmp, which is private
	# in the namespace; mgr_cleanup removes it and ends its sandboxes.
	MSTATE=$(mktemp -d /var/tmp/sbu.XXXXXX) && chmod 0711 "$MSTATE" || { bad "no state directory"; return; }
	mkdir -p "$TD/run" && chmod 0700 "$TD/run" && chmod 0711 "$TD"
	MSOCK=$TD/run/manager.sock
	mgr_repo || return
	unit_ns_script "$TD/unit-ns.sh"
	# The unit's ExecStart= flags, with this test's configuration, socket and state paths.
	UNIT_RW="$MSTATE $TD/run" unshare -m --propagation slave bash "$TD/unit-ns.sh" \
		"$root/usr/bin/sandbox-manager" serve --config "$root/etc/infra-sandbox/manager.conf" \
		--socket "$MSOCK" --state-dir "$MSTATE" >"$TD/manager.log" 2>&1 &
	MGR_PID=$!
	trap mgr_cleanup EXIT
	for _ in $(seq 1 100); do
		[ -S "$MSOCK" ] || { kill -0 "$MGR_PID" 2>/dev/null && sleep 0.1 && continue; }
		break
	done
	[ -S "$MSOCK" ] || { bad "the manager did not start: $(tail -n 5 "$TD/manager.log")"; return; }
	got=$(grep 'unit-ns:' "$TD/manager.log")
	assert_eq "namespace set-up errors" "" "$got"
	# What the manager's namespace lets it write: its state directory, not the rest.
	nsenter -t "$MGR_PID" -m touch "$MSTATE/probe" 2>/dev/null || bad "the state directory is not writable in the namespace"
	nsenter -t "$MGR_PID" -m touch "$TD/probe" 2>/dev/null && bad "$TD is writable in the namespace (not ProtectSystem=strict)"
	rm -f "$MSTATE/probe"

	mgr_session || return
	mgr exec --session "$SID" -- 'echo hello > out.txt && cat out.txt && id -u && (touch /usr/x 2>/dev/null || echo ro)'
	assert_eq "a call under the unit's hardening: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	local out
	out=$(cat "$OUT")
	mgr_ids
	assert_lines "$out" hello "$IDS_UID" ro
	assert_eq "the call's file in the worktree" hello "$(cat "$WT/out.txt" 2>/dev/null)"
	mgr records --session "$SID"
	assert_json '[.records[].state]' '["exited"]'
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null

	# Why the unit leaves ProtectKernelTunables= out: with /proc/sys mounted over, a sandbox cannot
	# mount its own /proc, and the manager refuses to start (its volume probe starts a sandbox).
	UNIT_RW="$MSTATE $TD/run" UNIT_EXTRA='mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys' \
		timeout -k 2 30 unshare -m --propagation slave bash "$TD/unit-ns.sh" \
		"$root/usr/bin/sandbox-manager" serve --config "$root/etc/infra-sandbox/manager.conf" \
		--socket "$MSOCK" --state-dir "$MSTATE" >"$TD/tunables.log" 2>&1
	rc=$?
	assert_eq "serve with /proc/sys read-only: exit code" 125 "$rc"
	grep -q 'mounting the proc for /proc: Operation not permitted' "$TD/tunables.log" ||
		bad "no 'mounting the proc' refusal in: $(tail -n 3 "$TD/tunables.log" | head -c 400)"
}
t manager_unit_sandbox test_manager_unit_sandbox

# The user unit as systemd would start it, without systemd: its ExecStart= with %t made
# $XDG_RUNTIME_DIR, the runtime directory made (RuntimeDirectory=), a fresh home and no
# XDG_STATE_HOME: the unprivileged defaults must carry a session and a call.
test_manager_user_unit() {
	local root=$TD/root home xdg line uid
	local -a cmd
	[ "$RUN_UID" -eq 0 ] && skip "the user unit is for an unprivileged manager"
	LC_ALL=C readelf -lW "$AGENT" | grep -q 'program interpreter' && skip "make install refuses a SANITIZE=1 agent"
	install_make install DESTDIR="$root" PREFIX=/usr
	assert_eq "make install: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	[ "$RC" -eq 0 ] || return
	line=$(sed -n 's/^ExecStart=//p' "$root/usr/lib/systemd/user/sandbox-manager.service")
	# short: the agents' sockets live below the state directory (107 bytes at most)
	home=$(mktemp -d /tmp/sbh.XXXXXX) && chown "$RUN_USER:" "$home" || { bad "cannot create a home"; return; }
	UNIT_HOME=$home # for the EXIT trap, which runs after this function's locals are gone
	xdg=$TD/xdg
	mkdir_user "$xdg" "$xdg/infra-sandbox" && chmod 0700 "$xdg" "$xdg/infra-sandbox"
	read -r -a cmd <<<"${line//%t/$xdg}"
	assert_eq "the user unit's program" /usr/bin/sandbox-manager "${cmd[0]}"
	cmd[0]=$root/usr/bin/sandbox-manager
	"${AS[@]}" env -u XDG_STATE_HOME "HOME=$home" "XDG_RUNTIME_DIR=$xdg" "${cmd[@]}" >"$TD/manager.log" 2>&1 &
	MGR_PID=$!
	# mgr_cleanup ends this state directory's sandboxes and removes it; the home goes with it
	MSTATE=$home/.local/state/infra-sandbox
	MSOCK=$xdg/infra-sandbox/manager.sock
	trap 'mgr_cleanup; [ -z "${IT_KEEP:-}" ] && [ -n "${UNIT_HOME:-}" ] && rm -rf "$UNIT_HOME"' EXIT
	for _ in $(seq 1 100); do
		[ -S "$MSOCK" ] && break
		kill -0 "$MGR_PID" 2>/dev/null || break
		sleep 0.1
	done
	[ -S "$MSOCK" ] || { bad "the user unit's manager did not start: $(tail -n 3 "$TD/manager.log")"; return; }
	[ -f "$MSTATE/records.db" ] || bad "no records.db in the default state directory $MSTATE"
	mgr_repo && mgr_session || return
	# the identity's ids: the user's subordinate ones where it has entries (the default, a 0700
	# home included), else its own (session show says which)
	mgr session show --session "$SID"
	uid=$(jr .ids.uid)
	[[ "$(jr .ids.from)" != *"/etc/subuid"* ]] || [ "$uid" != "$RUN_UID" ] || bad "subordinate ids said, own uid given"
	mgr exec --session "$SID" -- 'echo user unit; id -u'
	assert_eq "a call on the user unit's manager: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_lines "$(cat "$OUT")" 'user unit' "$uid"
}
t manager_user_unit test_manager_user_unit
