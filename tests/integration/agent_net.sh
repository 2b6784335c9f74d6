# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec --block-port: a blocked TCP port (a management listener) cannot be reached from a
# command by any route, while other ports still connect. Loopback listeners only.

test_block_port() {
	local abi blocked open_port blocked2
	abi=$(landlock_abi)
	[ "${abi:-0}" -ge 4 ] 2>/dev/null || skip "Landlock ABI ${abi:-none} < 4: TCP ports cannot be blocked here"
	start_listener "$TD/ports" || return
	trap 'kill "$LISTENER_PID" 2>/dev/null' EXIT
	read -r blocked open_port blocked2 <"$TD/ports"

	# control: without --block-port the port answers
	ax_ok -- "(exec 3<>/dev/tcp/127.0.0.1/$blocked) && echo connected"
	assert_result exited 0 null
	assert_json .stdout '"connected\n"'

	ax_ok --block-port "$blocked" --block-port "$blocked2" -- "$ESC/attack_net $GUARD $blocked $open_port"
	assert_result exited 0 null
	assert_lines "$(jr .stdout)" \
		'connect_blocked_v4 errno=EACCES' 'connect_blocked_v4_other errno=EACCES' \
		'connect_blocked_v6 errno=EACCES' 'connect_blocked_v4mapped errno=EACCES' \
		'connect_open_v4 errno=0' 'sendto_fastopen_blocked errno=EPERM' \
		'setsockopt_fastopen_connect errno=EPERM' 'sendmmsg_fastopen_blocked errno=(EPERM|EACCES)' \
		'socket_mptcp errno=EPERM' 'socket_mptcp_highbits errno=EPERM' 'attack_net failures=0'

	# the same from the shell, for both blocked ports
	ax_ok --block-port "$blocked" --block-port "$blocked2" -- "
		(exec 3<>/dev/tcp/127.0.0.1/$blocked) 2>/dev/null; echo blocked=\$?
		(exec 3<>/dev/tcp/127.0.0.1/$blocked2) 2>/dev/null; echo blocked2=\$?
		(exec 3<>/dev/tcp/127.0.0.1/$open_port) && echo open=\$?
		(exec 3<>/dev/tcp/127.0.0.1/$blocked)"
	assert_result exited 1 null
	assert_json .stdout '"blocked=1\nblocked2=1\nopen=0\n"'
	assert_match "stderr" "Permission denied" "$(jr .stderr)"
}
t block_port test_block_port
