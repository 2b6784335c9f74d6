#!/usr/bin/env bash
# `make postgres-image`: the PostgreSQL that deploy/kubernetes/postgres.yaml runs for a test (an
# operator's own PostgreSQL in production), built offline from Debian's postgresql-15 the way
# scripts/manager-image.sh builds the manager's image, tagged infra-sandbox-postgres:dev. Its entry
# point (sandbox-postgres-start) makes the cluster on first start in PGDATA (a subdirectory of the
# mounted data volume, so initdb owns it) with the superuser postgres's password from
# POSTGRES_PASSWORD, password (scram-sha-256) logins from any address, no unix socket: nothing is
# written to the root filesystem. Root only. Environment: IMAGE, DEBIAN_MIRROR, CONTAINERS_CONF.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
IMAGE_SCRIPT=postgres-image
# shellcheck source=scripts/image-rootfs.sh
. "$repo/scripts/image-rootfs.sh"
image=${IMAGE:-infra-sandbox-postgres:dev}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/tests/podman/containers.conf}

[ "$(id -u)" -eq 0 ] || image_die "must run as root (debootstrap; root's podman storage); run: sudo make postgres-image"
command -v podman >/dev/null || image_die "podman is missing; install it (scripts/deps.sh)"

# postgres_step ROOT: the data volume's mount point, owned by the package's user postgres (its ids
# read from the target: the host's postgres, if any, is another user).
postgres_step() {
	local owner
	owner=$(awk -F: '$1 == "postgres" { print $3 ":" $4 }' "$1/etc/passwd")
	[ -n "$owner" ] || image_die "the postgresql-15 package made no user postgres"
	install -d -m 0700 "$1/var/lib/postgresql/data"
	chown "$owner" "$1/var/lib/postgresql/data"
}

trap image_rootfs_cleanup EXIT
image_rootfs postgres postgresql-15 "data:/var/lib/postgresql/data" postgres_step
ids=$(tar -xOf "$base" ./etc/passwd | awk -F: '$1 == "postgres" { print $3 ":" $4 }')
[ -n "$ids" ] || image_die "the postgresql-15 package made no user postgres"

mkdir -p "$work/stage/usr/local/bin"
cat >"$work/stage/usr/local/bin/sandbox-postgres-start" <<'EOF'
#!/bin/sh
# The infra-sandbox test PostgreSQL (scripts/postgres-image.sh): the cluster made on first start.
set -eu
bin=/usr/lib/postgresql/15/bin
PGDATA=${PGDATA:-/var/lib/postgresql/data/pgdata}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "sandbox-postgres-start: POSTGRES_PASSWORD is empty" >&2; exit 1; }
	# the password through a pipe: never in a file, nor in a command line
	printf '%s\n' "$POSTGRES_PASSWORD" |
		"$bin/initdb" -D "$PGDATA" -U postgres --auth-local=peer --auth-host=scram-sha-256 --pwfile=/dev/stdin >/dev/null
	echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
	echo "host all all ::/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories= -c port=5432
EOF
chmod 0755 "$work/stage/usr/local/bin/sandbox-postgres-start"
cp "$base" "$work/rootfs.tar"
tar --numeric-owner --owner=0 --group=0 -rf "$work/rootfs.tar" -C "$work/stage" ./usr/local/bin/sandbox-postgres-start
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
image_import "$work/rootfs.tar" "$image" \
	'ENTRYPOINT ["/usr/local/bin/sandbox-postgres-start"]' \
	"USER $ids" \
	'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin' \
	'LABEL org.opencontainers.image.title=infra-sandbox-postgres' \
	"LABEL org.opencontainers.image.revision=$revision"
echo "postgres-image: $image (user $ids)"
