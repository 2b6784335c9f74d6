# shellcheck shell=bash
# A PRIVATE apt configuration, sourced by the scripts that fetch Debian packages or sources without
# installing them (scripts/cluster/build.sh, scripts/musl-libs.sh): its own sources.list, lists and
# archive cache under a directory of the caller's, so the system's sources and lists are never
# touched; `-o Dir::Etc::sourceparts=-` disables the system's sources.list.d. apt still checks every
# file against Debian's signed indexes (the archive keyring).
apt_mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
apt_suite=bookworm

# private_apt DIR [--security] TYPE...: one "TYPE [signed-by=...] MIRROR SUITE main" line per TYPE
# (deb, deb-src), and with --security the same for the suite's security updates (a version installed
# from there is found); apt's options for it in the array papt, and its lists fetched.
private_apt() {
	local dir=$1 type suites=("$apt_mirror $apt_suite") suite
	shift
	if [ "${1:-}" = --security ]; then
		suites+=("${apt_mirror%/debian}/debian-security $apt_suite-security")
		shift
	fi
	mkdir -p "$dir/lists/partial" "$dir/archives/partial"
	for type in "$@"; do
		for suite in "${suites[@]}"; do
			echo "$type [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $suite main"
		done
	done >"$dir/sources.list"
	papt=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o Dir::Etc::sourceparts=- \
		-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::archives=$dir/archives" \
		-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
	apt-get "${papt[@]}" update -qq
}
