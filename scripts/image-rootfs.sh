# shellcheck shell=bash
# The cached Debian root filesystem of the images built offline: the sandbox image (scripts/image.sh)
# and those of deploy/kubernetes (scripts/manager-image.sh, scripts/postgres-image.sh): debootstrap minbase of bookworm with the given
# packages, package caches and logs removed, then a caller's step that adds its user and directories;
# kept as a tar under build/image/ keyed by everything that goes in, so that a rebuild adds only the
# programs. Sourced; the caller sets repo, and cleans $work up (image_rootfs_cleanup) on exit.
# shellcheck disable=SC2154 # repo is the caller's

image_die() {
	echo "${IMAGE_SCRIPT:-image}: $*" >&2
	exit 1
}

# image_rootfs_cleanup: debootstrap mounts /proc and /sys inside the target while it runs; a failed
# run may leave them. Unmount before removing, and never cross into another file system while removing.
image_rootfs_cleanup() {
	local m
	[ -n "${work:-}" ] && [ -d "$work" ] || return 0
	while read -r m; do
		umount -l "$m" || true
	done < <(findmnt -rn -o TARGET | grep -F "$work/" | sort -r || true)
	rm -rf --one-file-system "$work"
}

# image_rootfs NAME PACKAGES KEYEXTRA STEP: sets base to the cached tar of NAME's root filesystem
# (minbase + PACKAGES, comma-separated), building it when absent; STEP ROOT adds what debootstrap does
# not (users, directories); KEYEXTRA names what STEP does, so that a change rebuilds. Sets work, a
# scratch directory below build/image.
image_rootfs() {
	local name=$1 packages=$2 extra=$3 step=$4 key t0 root
	local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian} suite=bookworm cache_dir=$repo/build/image
	key=$(printf '%s\n' "$suite" "$mirror" minbase "$packages" "$extra" | sha256sum | cut -c1-16)
	base=$cache_dir/$name-rootfs-$suite-$key.tar
	mkdir -p "$cache_dir"
	work=$(mktemp -d "$cache_dir/work.XXXXXX")
	[ -s "$base" ] && return 0
	command -v debootstrap >/dev/null ||
		image_die "debootstrap is missing; install it: apt-get install debootstrap (or run scripts/deps.sh)"
	echo "${IMAGE_SCRIPT:-image}: debootstrap $suite (minbase + $packages) from $mirror, cached as $base"
	t0=$(date +%s)
	root=$work/rootfs
	if ! debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" \
		>"$work/debootstrap.log" 2>&1; then
		tail -n 20 "$work/debootstrap.log" >&2
		image_die "debootstrap failed (mirror $mirror; set DEBIAN_MIRROR to use another)"
	fi
	# What an image must not carry: package caches and lists, debootstrap's leftovers, logs. /dev,
	# /proc and /sys are the runtime's to fill.
	rm -rf "${root:?}/debootstrap" "${root:?}/var/cache/apt/"*.bin "${root:?}/var/cache/apt/archives/"*.deb \
		"${root:?}/var/lib/apt/lists/"* "${root:?}/var/log/"*.log "${root:?}/var/log/apt/"* "${root:?}/dev/"*
	"$step" "$root"
	tar --numeric-owner --xattrs -C "$root" -cf "$base.tmp" .
	mv "$base.tmp" "$base"
	rm -rf --one-file-system "$root"
	echo "${IMAGE_SCRIPT:-image}: root filesystem cached in $(($(date +%s) - t0)) s"
}

# image_add_user ROOT NAME UID HOME [SHELL]: the user and its group, written directly (useradd would
# run the target's binaries on the host). SHELL defaults to nologin.
image_add_user() {
	local root=$1 name=$2 uid=$3 home=$4 shell=${5:-/usr/sbin/nologin}
	echo "$name:x:$uid:$uid:infra-sandbox $name:$home:$shell" >>"$root/etc/passwd"
	echo "$name:x:$uid:" >>"$root/etc/group"
	echo "$name:!:19000:0:99999:7:::" >>"$root/etc/shadow"
	echo "$name:!::" >>"$root/etc/gshadow"
}

# image_import TAR IMAGE CHANGE...: podman import with the --change lines given; prints the image id
# and drops the image this one replaces unless a container still uses it.
image_import() {
	local tar=$1 image=$2 old_iid iid
	shift 2
	local -a changes=()
	local c
	for c in "$@"; do changes+=(--change "$c"); done
	old_iid=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
	iid=$(podman import --quiet "${changes[@]}" \
		--message "infra-sandbox offline image build (${IMAGE_SCRIPT:-image})" "$tar" "$image")
	iid=${iid##*:}
	[ -n "$iid" ] || image_die "podman import printed no image id"
	if [ -n "$old_iid" ] && [ "$old_iid" != "$iid" ]; then
		podman rmi "$old_iid" >/dev/null 2>&1 || true
	fi
	echo "image id: $iid"
}
