#!/usr/bin/env bash
# `make install` and `make uninstall` (the Makefile's last block): the built binaries, the systemd
# units with their paths filled in, the podman seccomp profile, the example configuration and the
# docs, under DESTDIR. Builds nothing: the binaries must already be in BUILD (run `make` first), so
# a test can install a copy while the suite uses build/. Never writes outside DESTDIR + the paths.
# Usage: install.sh install|uninstall BUILD, with DESTDIR, BINDIR, DATADIR, DOCDIR, SYSCONFDIR,
# SYSTEMD_UNIT_DIR and SYSTEMD_USER_UNIT_DIR in the environment (the Makefile passes them).
set -euo pipefail
# New directories (the parents too) 0755 and files as their mode says, whatever the caller's umask.
umask 022

action=${1:-}
build=${2:-}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() {
	echo "install: $*" >&2
	exit 1
}

[ "$action" = install ] || [ "$action" = uninstall ] || die "usage: install.sh install|uninstall BUILD"
[ -n "$build" ] || die "usage: install.sh install|uninstall BUILD"

# The paths are written into the units (ExecStart=) by sed and must stay one plain word there.
for v in BINDIR DATADIR DOCDIR SYSCONFDIR SYSTEMD_UNIT_DIR SYSTEMD_USER_UNIT_DIR; do
	val=${!v:-}
	[[ $val =~ ^/[A-Za-z0-9._/+-]*$ ]] || die "$v must be an absolute path of [A-Za-z0-9._/+-], not '$val'"
done
DESTDIR=${DESTDIR:-}
[ -z "$DESTDIR" ] || [[ $DESTDIR == /* ]] || die "DESTDIR must be an absolute path, not '$DESTDIR'"
conf_dir=$SYSCONFDIR/infra-sandbox

# What is installed: mode, source, destination (without DESTDIR). A source ending in .in is a
# template: its @BINDIR@, @SYSCONFDIR@ and @DOCDIR@ are replaced. One table for both directions,
# so uninstall removes exactly what install puts.
modes=() srcs=() dsts=()
entry() {
	modes+=("$1")
	srcs+=("$2")
	dsts+=("$3")
}
entry 0755 "$build/sandbox-manager" "$BINDIR/sandbox-manager"
# The daemon that `sandbox-manager serve` execs, found beside the client (manager/main.c).
entry 0755 "$build/sandbox-manager-daemon" "$BINDIR/sandbox-manager-daemon"
entry 0755 "$build/sandbox-agent" "$BINDIR/sandbox-agent"
entry 0644 "$src/dist/systemd/sandbox-manager.service.in" "$SYSTEMD_UNIT_DIR/sandbox-manager.service"
entry 0644 "$src/dist/systemd/user/sandbox-manager.service.in" "$SYSTEMD_USER_UNIT_DIR/sandbox-manager.service"
entry 0644 "$src/images/seccomp.json" "$DATADIR/seccomp.json"
entry 0644 "$src/dist/manager.conf.example" "$conf_dir/manager.conf.example"
for doc in README.md docs/operations.md docs/architecture.md docs/isolation.md; do
	entry 0644 "$src/$doc" "$DOCDIR/$(basename "$doc")"
done
# The directories that are ours alone, removed by uninstall once empty (bin/ and the unit
# directories are shared with everything else).
own_dirs=("$DATADIR" "$DOCDIR" "$conf_dir")

render() { # TEMPLATE: the unit on stdout
	sed -e "s|@BINDIR@|$BINDIR|g" -e "s|@SYSCONFDIR@|$SYSCONFDIR|g" -e "s|@DOCDIR@|$DOCDIR|g" "$1"
}

do_install() {
	local i out
	# Everything checked before anything is copied: a refused install leaves DESTDIR as it was.
	for i in "${!srcs[@]}"; do
		[ -f "${srcs[$i]}" ] || die "${srcs[$i]} is missing (run make first; BUILD is '$build')"
		if [[ ${srcs[$i]} == *.in ]] && render "${srcs[$i]}" | grep -n '@[A-Z_]*@' >&2; then
			die "${srcs[$i]} has a token that install.sh does not replace (above)"
		fi
	done
	for i in sandbox-manager sandbox-manager-daemon sandbox-agent; do
		[ -x "$build/$i" ] || die "$build/$i is not executable"
	done
	# The agent runs inside sandbox images with no libraries of ours: only the static one will do.
	command -v readelf >/dev/null || die "readelf (binutils) is needed to check that the agent is static"
	if LC_ALL=C readelf -lW "$build/sandbox-agent" | grep -q 'program interpreter'; then
		die "$build/sandbox-agent is dynamically linked (a SANITIZE=1 build?): install the static agent that \`make\` builds"
	fi
	for i in "${!srcs[@]}"; do
		out=$DESTDIR${dsts[$i]}
		# Only a missing directory is made: install -d would also chmod an existing one (/usr/bin).
		[ -d "$(dirname "$out")" ] || install -d -m 0755 "$(dirname "$out")"
		if [[ ${srcs[$i]} == *.in ]]; then
			render "${srcs[$i]}" >"$out.new"
			chmod "${modes[$i]}" "$out.new"
			mv -f "$out.new" "$out"
		else
			install -m "${modes[$i]}" "${srcs[$i]}" "$out"
		fi
		echo "installed $out"
	done
	# The unit reads manager.conf: a first install gives it the example; an existing one is the
	# operator's and stays as it is.
	if [ ! -e "$DESTDIR$conf_dir/manager.conf" ]; then
		install -m 0644 "$src/dist/manager.conf.example" "$DESTDIR$conf_dir/manager.conf"
		echo "installed $DESTDIR$conf_dir/manager.conf (from the example)"
	else
		echo "kept $DESTDIR$conf_dir/manager.conf"
	fi
}

do_uninstall() {
	local i conf=$DESTDIR$conf_dir/manager.conf
	# manager.conf goes only while it is still the example install.sh put there; changed, it is the
	# operator's.
	if [ -f "$conf" ]; then
		if cmp -s "$conf" "$src/dist/manager.conf.example"; then
			rm -f "$conf"
			echo "removed $conf"
		else
			echo "kept $conf (changed since install; remove it by hand)"
		fi
	fi
	for i in "${!dsts[@]}"; do
		if [ -e "$DESTDIR${dsts[$i]}" ] || [ -L "$DESTDIR${dsts[$i]}" ]; then
			rm -f "$DESTDIR${dsts[$i]}"
			echo "removed $DESTDIR${dsts[$i]}"
		fi
	done
	for i in "${own_dirs[@]}"; do
		[ -d "$DESTDIR$i" ] && rmdir --ignore-fail-on-non-empty "$DESTDIR$i"
	done
	return 0
}

"do_$action"
