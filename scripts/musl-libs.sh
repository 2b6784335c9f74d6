#!/usr/bin/env bash
# The static programs' libraries built against musl (issue 32): jansson and mbedtls (the client and
# the agent), libseccomp, libcap and protobuf-c (the agent), from Debian's own source packages of the
# versions installed for the rest of the build (their -dev packages), with Debian's patches,
# compiled by musl-gcc (Debian's musl-tools) into a cache outside the clone keyed by those versions:
#   $MUSL_LIBS_CACHE (default /var/cache/infra-sandbox/musl-libs-r<recipe>-<source>_<version>...)
#
# Why the two static programs are linked against musl: every glibc program's start asks the CPU for
# its caches (init_cacheinfo: dozens of `cpuid` instructions), and in a virtual machine each `cpuid`
# exits to the hypervisor. Measured here: an empty static glibc program takes 0.58 ms of CPU, the
# same program against musl 0.04 ms. `sandbox-manager exec` is one process per call, and so is
# `sandbox-agent exec` (docs/performance.md, "Cut: the client linked against musl", "Cut: the agent
# linked against musl").
#
#   scripts/musl-libs.sh --dir   print the cache directory (builds nothing; the Makefile's path)
#   scripts/musl-libs.sh --cflags  print the string-operation flags (below) the Makefile also gives
#                                the programs' own musl objects
#   scripts/musl-libs.sh         build the cache if it is missing (root: it writes under
#                                /var/cache; about 30 s), print its directory
# The sources come through a private apt configuration (scripts/private-apt.sh): the system's
# sources and lists are never touched, and apt checks them against Debian's signed indexes.
set -euo pipefail

recipe=3 # bump when a step below changes what lands in the cache

# Small copies and fills compiled inline, larger ones left to musl (issue 32). musl's memcpy and memset
# are `rep movsq`/`rep stosq` for every length, about 33 ns for a copy of a few bytes on this VM, where
# an inline copy takes 2 ns (glibc's, through its cpuid-chosen variant, 3 ns). A warm call makes about
# 3000 such copies on the agent's connection thread, nearly all under 64 bytes (jansson appending a
# JSON text piece by piece, the log's escaping, protobuf-c): 89 us of that thread's CPU per call in
# `perf`. Up to 256 bytes the copy is an unrolled loop of 8-byte moves; above, a call to musl's.
# GCC's documented x86 options; they change the instructions chosen, never what is copied.
stringops="-minline-all-stringops -minline-stringops-dynamically"
stringops+=" -mmemcpy-strategy=unrolled_loop:256:noalign,libcall:-1:noalign"
stringops+=" -mmemset-strategy=unrolled_loop:256:noalign,libcall:-1:noalign"
# Before the versions are asked for: the Makefile reads this before the dependency step has run.
if [ "${1:-}" = --cflags ]; then
	echo "$stringops"
	exit 0
fi
# shellcheck source=scripts/private-apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/private-apt.sh"

die() {
	echo "musl-libs: $*" >&2
	exit 1
}

# The source version of an installed -dev package: the cache follows what the glibc build links.
source_version() {
	local v
	v=$(dpkg-query -W -f='${source:Version}' "$1" 2>/dev/null) || v=
	[ -n "$v" ] || die "$1 is not installed; run as root: make deps"
	echo "$v"
}

jansson_v=$(source_version libjansson-dev)
mbedtls_v=$(source_version libmbedtls-dev)
seccomp_v=$(source_version libseccomp-dev)
libcap_v=$(source_version libcap-dev)
protobuf_c_v=$(source_version libprotobuf-c-dev)
key=jansson_$jansson_v-mbedtls_$mbedtls_v-libseccomp_$seccomp_v-libcap2_${libcap_v#*:}-protobuf-c_$protobuf_c_v
cache=${MUSL_LIBS_CACHE:-/var/cache/infra-sandbox/musl-libs-r$recipe-$key}
stamp=$cache/.complete

if [ "${1:-}" = --dir ]; then
	echo "$cache"
	exit 0
fi
[ $# -eq 0 ] || die "usage: scripts/musl-libs.sh [--dir | --cflags]"

if [ -f "$stamp" ]; then
	echo "$cache"
	exit 0
fi
[ "$(id -u)" -eq 0 ] || die "$cache is missing; run as root: make deps (it builds it once, in seconds)"

mkdir -p "$cache"
# One build at a time per cache (two clones running `make deps` at once).
exec 9>"$cache/.lock"
flock 9
if [ -f "$stamp" ]; then
	echo "$cache"
	exit 0
fi

# Its tools are the dependency step's packages (scripts/deps.sh).
for t in musl-gcc dpkg-source cmake gperf; do
	command -v "$t" >/dev/null || die "$t is missing; run as root: make deps"
done

work=$(mktemp -d /var/tmp/infra-sandbox-musl.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT

echo "musl-libs: private apt lists from $apt_mirror" >&2
private_apt "$work/apt" --security deb-src

# Unpacked with Debian's patches applied; apt has already checked the files' hashes.
fetch_source() {
	cd "$work"
	apt-get "${papt[@]}" source --download-only "$1=$2" >/dev/null ||
		die "apt-get source $1=$2 failed (the mirror no longer has the installed version? upgrade its -dev package)"
	dpkg-source --no-check -x "$1_${2#*:}.dsc" "$work/$1" >/dev/null
}

# musl-gcc searches only musl's headers; the programs and libseccomp and libcap need the kernel's
# (linux/, asm/) beside them.
mkdir -p "$cache/kernel"
ln -sfn /usr/include/linux "$cache/kernel/linux"
ln -sfn /usr/include/asm-generic "$cache/kernel/asm-generic"
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$cache/kernel/asm"

export CC=musl-gcc
log=$work/build.log
flags="-O2 -fstack-protector-strong -fPIE $stringops -isystem $cache/kernel"

echo "musl-libs: jansson $jansson_v" >&2
fetch_source jansson "$jansson_v"
(cd "$work/jansson" &&
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$flags" \
		-DCMAKE_INSTALL_PREFIX="$cache" -DJANSSON_BUILD_SHARED_LIBS=OFF -DJANSSON_BUILD_DOCS=OFF \
		-DJANSSON_EXAMPLES=OFF -DJANSSON_WITHOUT_TESTS=ON &&
	make -s -j"$(nproc)" -C build install) >>"$log" 2>&1 || die "jansson's build failed: $(tail -n 20 "$log")"

echo "musl-libs: mbedtls $mbedtls_v" >&2
fetch_source mbedtls "$mbedtls_v"
# Debian configures mbedtls in its rules (threads, CMAC, ...), not in a patch: its installed config.h
# of this very version is that configuration, so the musl build takes it as it is.
cmp -s /usr/include/mbedtls/version.h "$work/mbedtls/include/mbedtls/version.h" ||
	die "libmbedtls-dev's headers are not those of mbedtls $mbedtls_v"
install -m 0644 /usr/include/mbedtls/config.h "$work/mbedtls/include/mbedtls/config.h"
(cd "$work/mbedtls" && make -s -j"$(nproc)" -C library CFLAGS="$flags" static >>"$log" 2>&1) ||
	die "mbedtls's build failed: $(tail -n 20 "$log")"
mkdir -p "$cache/lib" "$cache/include"
install -m 0644 "$work"/mbedtls/library/libmbed{tls,x509,crypto}.a "$cache/lib/"
cp -R "$work/mbedtls/include/mbedtls" "$work/mbedtls/include/psa" "$cache/include/"

# The agent's three. libseccomp's tables are generated with gperf at build time.
echo "musl-libs: libseccomp $seccomp_v" >&2
fetch_source libseccomp "$seccomp_v"
(cd "$work/libseccomp" &&
	./configure --prefix="$cache" --enable-static --disable-shared --disable-python CFLAGS="$flags" &&
	make -s -j"$(nproc)" -C src install && make -s -C include install) >>"$log" 2>&1 ||
	die "libseccomp's build failed: $(tail -n 20 "$log")"

echo "musl-libs: libcap $libcap_v" >&2
fetch_source libcap2 "$libcap_v"
# Only the library (no shared object, PAM module or Go); its name table is made by the host's gcc.
(cd "$work/libcap2" && make -s -C libcap CC=musl-gcc BUILD_CC=gcc CFLAGS="$flags" SHARED=no PAM_CAP=no \
	GOLANG=no libcap.a) >>"$log" 2>&1 || die "libcap's build failed: $(tail -n 20 "$log")"
install -m 0644 "$work/libcap2/libcap/libcap.a" "$cache/lib/"
mkdir -p "$cache/include/sys"
install -m 0644 "$work/libcap2/libcap/include/sys/capability.h" "$cache/include/sys/"

echo "musl-libs: protobuf-c $protobuf_c_v" >&2
fetch_source protobuf-c "$protobuf_c_v"
# The runtime library only: the generated code comes from the host's protoc-c, as for glibc.
(cd "$work/protobuf-c" &&
	./configure --prefix="$cache" --enable-static --disable-shared --disable-protoc CFLAGS="$flags" &&
	make -s -j"$(nproc)" install) >>"$log" 2>&1 || die "protobuf-c's build failed: $(tail -n 20 "$log")"

touch "$stamp"
echo "$cache"
