#!/usr/bin/env bash
# offline.sh CMD [ARG...]: runs CMD in a network namespace of its own that holds nothing but
# loopback, with /etc/resolv.conf pointing at 127.0.0.1, so an agent framework (Claude Code, the
# Agent SDK, Codex) can reach only what the test starts on 127.0.0.1 (its fake model) and unix
# sockets (the manager). The one way the tests run a framework: never outside this.
#
# As root: unshare --net --mount. As any other user: a user namespace first, as its root, which
# grants the capabilities for `ip link` and the bind mount inside it only; CMD then runs in a
# nested user namespace as the user's own uid and gid again (files stay the user's, and no
# framework runs as root). Before CMD runs, the namespace is checked: a different network
# namespace than this script's, holding exactly one interface, lo; otherwise nothing runs (exit 97).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: offline.sh CMD [ARG...]" >&2; exit 2; }

if [ "${OFFLINE_INSIDE:-}" != 1 ]; then
	resolv=$(mktemp /tmp/offline-resolv.XXXXXX)
	printf 'nameserver 127.0.0.1\noptions attempts:1 timeout:1\n' >"$resolv"
	chmod 0644 "$resolv"
	outer_netns=$(readlink /proc/self/ns/net)
	userns=()
	[ "$(id -u)" -eq 0 ] || userns=(--user --map-root-user)
	rc=0
	OFFLINE_INSIDE=1 OFFLINE_RESOLV="$resolv" OFFLINE_OUTER_NETNS="$outer_netns" OFFLINE_UID=$(id -u) OFFLINE_GID=$(id -g) \
		unshare "${userns[@]}" --net --mount --fork -- bash "${BASH_SOURCE[0]}" "$@" || rc=$?
	rm -f "$resolv"
	exit "$rc"
fi

# Inside the new namespaces.
ip link set lo up
mount --bind "$OFFLINE_RESOLV" /etc/resolv.conf
ifaces=$(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }')
if [ "$(readlink /proc/self/ns/net)" = "$OFFLINE_OUTER_NETNS" ] || [ "$ifaces" != lo ]; then
	echo "offline.sh: refusing to run: the network namespace is not private and loopback-only (interfaces: $ifaces)" >&2
	exit 97
fi
uid=$OFFLINE_UID gid=$OFFLINE_GID
unset OFFLINE_INSIDE OFFLINE_RESOLV OFFLINE_OUTER_NETNS OFFLINE_UID OFFLINE_GID
[ "$uid" -eq 0 ] && exec "$@"
exec unshare --user --map-user="$uid" --map-group="$gid" -- "$@"
