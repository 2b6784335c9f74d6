#!/usr/bin/env bash
# A throwaway PostgreSQL 15 for the tests (Debian's postgresql-15): initdb and the server in DIR,
# reachable only on a unix socket in DIR (listen_addresses=''), trust for that socket, the superuser
# "sbrecords". initdb refuses root, so as root the cluster belongs to sbtest.
#   pg.sh start DIR   prints the libpq settings (PGHOST=DIR PGPORT=... PGUSER=... PGDATABASE=...);
#                     exit 77 when the postgres binaries are missing (CI=true: exit 1 instead)
#   pg.sh stop DIR    stops that server by the pid in DIR/data/postmaster.pid, and waits for it
#   pg.sh restart DIR stops that server and starts it again on the same data and socket (what a
#                     database restart is to its clients: every connection lost, every row kept)
# DIR must exist and be empty at start; the caller removes it after stop.
set -euo pipefail

bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
port=5432 # only names the socket file, DIR/.s.PGSQL.5432: no TCP port is opened
cmd=${1:?usage: pg.sh start|stop|restart DIR}
dir=${2:?usage: pg.sh start|stop|restart DIR}

as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u sbtest -- "$@"
	else
		"$@"
	fi
}

# serve: the server on DIR/data, a socket in DIR only; fsync off: a test server holds nothing that
# must outlive a power loss.
serve() {
	as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
		-o "-c listen_addresses='' -c unix_socket_directories='$dir' -c port=$port -c fsync=off -c max_connections=60" \
		start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
	echo "PGHOST=$dir PGPORT=$port PGUSER=sbrecords PGDATABASE=postgres"
}

# halt: the fast shutdown (SIGINT: every session ended, the data kept), waited for.
halt() {
	local pidfile=$dir/data/postmaster.pid pid
	[ -f "$pidfile" ] || return 0
	pid=$(head -n 1 "$pidfile")
	case $pid in '' | *[!0-9]*) echo "pg.sh: no pid in $pidfile" >&2; exit 1 ;; esac
	kill -INT "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 300); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "pg.sh: postgres $pid did not stop within 30 s" >&2
	exit 1
}

case $cmd in
start)
	if [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ] || [ ! -x "$bin/postgres" ]; then
		echo "pg.sh: no PostgreSQL 15 binaries in $bin (Debian: postgresql-15, scripts/deps.sh installs it)" >&2
		[ "${CI:-}" = true ] && exit 1
		exit 77
	fi
	[ -d "$dir" ] || { echo "pg.sh: $dir is not a directory" >&2; exit 1; }
	if [ "$(id -u)" -eq 0 ]; then
		if ! id sbtest >/dev/null 2>&1; then
			echo "pg.sh: the test user sbtest, who owns the test servers when root runs them, is missing: run make test-setup (scripts/test-setup.sh) as root" >&2
			exit 1
		fi
		chown sbtest: "$dir"
	fi
	chmod 0700 "$dir"
	as_owner "$bin/initdb" -D "$dir/data" -U sbrecords --auth=trust -E UTF8 --locale=C.UTF-8 --no-sync \
		>"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
	serve
	;;
stop)
	halt
	;;
restart)
	[ -d "$dir/data" ] || { echo "pg.sh: no server's data in $dir (start it first)" >&2; exit 1; }
	halt
	serve
	;;
*)
	echo "usage: pg.sh start|stop|restart DIR" >&2
	exit 2
	;;
esac
