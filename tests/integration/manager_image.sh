# shellcheck shell=bash
# The manager's image (make manager-image, scripts/manager-image.sh, issue 29) under a real podman: it
# is built from this run's binaries, holds them root-owned with every library the daemon loads, runs
# as the non-root user manager (10001), and `serve` starts in it with a read-only root filesystem and
# no network (podman run --network none), its volume probe running a real sandbox inside. Root only:
# the image goes into root's podman storage (the harness's), the same in both modes.

# mimg_podman ARGS...: podman_cli under a timeout (a hung runtime fails the test instead of the run).
mimg_podman() { timeout -k 3 90 env "CONTAINERS_CONF=$PODMAN_CONF" podman "$@"; }

# mimg_run ARGS...: `podman run --rm` of the image with no network and a read-only root filesystem,
# labeled so that the run's end removes it if the test cannot. Sets RC; stdout in $OUT, stderr in $ERR.
mimg_run() {
	mimg_podman run --rm --network none --read-only --label "infra-sandbox.test=$IT_ROOT" "$@" >"$OUT" 2>"$ERR"
	RC=$?
}

# mimg_build: the image of this run's binaries ($IT_ROOT/bin), tagged for this test ($MIMG).
mimg_build() {
	local t0
	MIMG=infra-sandbox-manager:it-$(basename "$IT_ROOT" | tr '[:upper:]' '[:lower:]')
	t0=$(date +%s)
	if ! IMAGE=$MIMG CONTAINERS_CONF=$PODMAN_CONF bash "$IT_REPO/scripts/manager-image.sh" "$IT_ROOT/bin" \
		>"$TD/build.log" 2>&1; then
		bad "scripts/manager-image.sh failed: $(tail -n 5 "$TD/build.log")"
		return 1
	fi
	echo "manager image built in $(($(date +%s) - t0)) s"
	trap 'mimg_podman rmi -f "$MIMG" >/dev/null 2>&1' EXIT
}

# mimg_contents: the image's user, entrypoint, programs (this run's exact bytes, root-owned) and
# libraries (none missing), and git.
mimg_contents() {
	local info=$TD/image.json p
	mimg_podman image inspect "$MIMG" >"$info" 2>"$ERR" || {
		bad "no image $MIMG: $(head -c 300 "$ERR")"
		return
	}
	assert_json '.[0].Config.User' '"10001:10001"' "$info"
	assert_json '.[0].Config.Entrypoint' '["/usr/local/bin/sandbox-manager"]' "$info"
	for p in sandbox-manager sandbox-manager-daemon sandbox-agent; do
		mimg_run --entrypoint /bin/cat "$MIMG" "/usr/local/bin/$p"
		assert_eq "sha256 of the image's $p" "$(sha256sum <"$IT_ROOT/bin/$p" | cut -d' ' -f1)" \
			"$(sha256sum <"$OUT" | cut -d' ' -f1)"
	done
	mimg_run --entrypoint /bin/sh "$MIMG" -c 'id -u; stat -c "%u:%g %a" /usr/local/bin/sandbox-manager \
		/usr/local/bin/sandbox-manager-daemon /usr/local/bin/sandbox-agent;
		ldd /usr/local/bin/sandbox-manager-daemon | grep -c "not found"; git --version;
		touch /usr/local/bin/sandbox-agent 2>/dev/null && echo root-fs-writable; ls /var/lib/apt/lists | wc -l'
	assert_lines "$(cat "$OUT")" 10001 '0:0 755' '0:0 755' '0:0 755' 0 'git version 2\.[0-9.]+' 0
}

# mimg_serve: `serve` in the image as its user, read-only, no network; its state dir and volume are
# the test's directories (the Deployment's volumes). Waits for "serving on", asks status through the
# socket in the container, then stops it with SIGTERM. The process backend's sandbox (the volume
# probe) needs /dev/net/tun for slirp4netns and a /proc it may mount (unmask, as for the sandbox
# image, images/README.md).
mimg_serve() {
	local d=$TD/mgr name
	mkdir -p "$d/state" "$d/volume" && chmod 0700 "$d/state" && chown 10001:10001 "$d/state" "$d/volume"
	name=mimg-$$-$RANDOM
	mimg_podman run -d --name "$name" --network none --read-only --device /dev/net/tun \
		--security-opt 'unmask=/proc/*' --label "infra-sandbox.test=$IT_ROOT" \
		-v "$d/state:/var/lib/sandbox-manager/state" -v "$d/volume:/var/lib/sandbox-manager/volume" \
		"$MIMG" serve --state-dir /var/lib/sandbox-manager/state --volume /var/lib/sandbox-manager/volume \
		>"$OUT" 2>"$ERR" || {
		bad "podman run serve: $(head -c 300 "$ERR")"
		return
	}
	for _ in $(seq 1 150); do
		mimg_podman logs "$name" >"$TD/serve.log" 2>&1
		grep -q '"serving on ' "$TD/serve.log" && break
		[ "$(mimg_podman inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || break
		sleep 0.2
	done
	assert_match "serve in the image (log: $(tail -c 600 "$TD/serve.log"))" '"serving on /var/lib/sandbox-manager/state/manager.sock' \
		"$(cat "$TD/serve.log")"
	mimg_podman exec "$name" sandbox-manager status --socket /var/lib/sandbox-manager/state/manager.sock >"$OUT" 2>"$ERR"
	assert_eq "status in the container (stderr: $(head -c 300 "$ERR"))" 0 "$?"
	assert_match "status names the backend" 'backend process' "$(head -n 1 "$OUT")"
	# the records were written by the container's user on the mounted state dir, not in the image
	assert_eq "the state dir is the manager's" 10001 "$(stat -c %u "$d/state/records.db")"
	mimg_podman inspect --format '{{.HostConfig.NetworkMode}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' \
		"$name" >"$OUT" 2>&1
	assert_eq "the container's network, root filesystem and user" 'none true 10001:10001' "$(cat "$OUT")"
	mimg_podman stop -t 20 "$name" >/dev/null 2>&1
	assert_eq "serve's exit code on SIGTERM" 0 "$(mimg_podman inspect --format '{{.State.ExitCode}}' "$name")"
	mimg_podman rm -f "$name" >/dev/null 2>&1
}

test_manager_image() {
	[ "$RUN_UID" -eq 0 ] || skip "root only: the image is built into root's podman storage (the root run proves it)"
	need_podman
	if ldd "$IT_ROOT/bin/sandbox-manager-daemon" 2>/dev/null | grep -q 'libasan\|libubsan'; then
		skip "this run's binaries are a sanitizer build; the image holds the plain one (make manager-image)"
	fi
	mimg_build || return
	mimg_contents
	# the CLI as the image's entrypoint, no network, read-only
	mimg_run "$MIMG" --help
	assert_eq "--help in the image (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "--help names serve" 'serve' "$(cat "$OUT" "$ERR")"
	mimg_run "$MIMG" version
	assert_eq "version in the image" "$("$MANAGER" version)" "$(cat "$OUT")"
	mimg_serve
}
# A fresh machine debootstraps the root filesystem first (about 90 s; cached in build/image/ after)
IT_TEST_DEADLINE=600 t manager_image test_manager_image

# The two images as deploy/kubernetes runs them, sharing one network namespace with no network (the
# PostgreSQL container's, --network none; its loopback is their only link, as a pod's would be):
# PostgreSQL from make postgres-image, two managers from the manager image on it (m1 on
# 127.0.0.1:7444, m2 on :7445, each its own state dir, one volume, the certificates of
# deploy/kubernetes/certs.sh, named sandbox-manager), and clients of the manager image in the same
# namespace. A session made through m1, calls sent through m2 and through m1 at once: each runs once,
# on the owner, none overlapping another, all recorded in the store. A client without a certificate,
# with another CA's, with a principal of another identity or with a revoked certificate is refused,
# and nothing is recorded.
# shellcheck disable=SC2016 # expanded in the sandbox
MPAIR_CALL='echo "start $(date +%s%N)" >> "$TMPDIR/calls"; sleep 0.2; echo "end $(date +%s%N)" >> "$TMPDIR/calls"'

# mpair_client PORT PRINCIPAL ARGS...: the CLI in the shared namespace, as the image's user, with PRINCIPAL's
# certificate (from certs.sh's directory MPAIR_CERTS, default $TD/certs), to the manager on
# 127.0.0.1:PORT. Sets RC; stdout in $OUT, stderr in $ERR.
mpair_client() {
	local port=$1 p=$2
	shift 2
	mimg_podman run --rm --network "container:$MPAIR_POD-pg" --read-only --label "infra-sandbox.test=$IT_ROOT" \
		-v "${MPAIR_CERTS:-$TD/certs}/clients/$p:/certs:ro" -e "SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:$port" \
		-e SANDBOX_MANAGER_TLS_NAME=sandbox-manager -e "SANDBOX_MANAGER_TLS_CERT=/certs/$p.crt" \
		-e "SANDBOX_MANAGER_TLS_KEY=/certs/$p.key" -e SANDBOX_MANAGER_TLS_CA=/certs/ca.crt \
		"$MIMG" "$@" >"$OUT" 2>"$ERR"
	RC=$?
}

# mpair_manager N PORT: manager mN in the shared namespace, serving TLS on PORT; waits until it serves.
mpair_manager() {
	local n=$1 port=$2 d=$TD/m$1
	mkdir -p "$d/state" && chmod 0700 "$d/state" && chown 10001:10001 "$d/state"
	mimg_podman run -d --name "$MPAIR_POD-m$n" --network "container:$MPAIR_POD-pg" --read-only --device /dev/net/tun \
		--security-opt 'unmask=/proc/*' --label "infra-sandbox.test=$IT_ROOT" -e PGPASSWORD=mpair-secret \
		-v "$d/state:/var/lib/sandbox-manager/state" -v "$TD/vol:/var/lib/sandbox-manager/volume" \
		-v "$TD/tls:/etc/sandbox-manager/tls:ro" -v "$TD/principals:/etc/sandbox-manager/principals:ro" \
		-v "$TD/repo:/srv/repo:ro" \
		"$MIMG" serve --state-dir /var/lib/sandbox-manager/state --volume /var/lib/sandbox-manager/volume \
		--store 'postgres:host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=5' \
		--manager-id "m$n" --lease-ms 2000 --listen "tls:127.0.0.1:$port" --advertise "tls://127.0.0.1:$port" \
		--tls-cert /etc/sandbox-manager/tls/server.crt --tls-key /etc/sandbox-manager/tls/server.key \
		--tls-client-ca /etc/sandbox-manager/tls/ca.crt \
		--tls-principals /etc/sandbox-manager/principals/principals.json \
		--tls-deny /etc/sandbox-manager/principals/deny >/dev/null 2>"$ERR" || {
		bad "podman run m$n: $(head -c 300 "$ERR")"
		return 1
	}
	for _ in $(seq 1 200); do
		mimg_podman logs "$MPAIR_POD-m$n" >"$TD/m$n.log" 2>&1
		grep -q '"serving on ' "$TD/m$n.log" && return 0
		[ "$(mimg_podman inspect --format '{{.State.Running}}' "$MPAIR_POD-m$n" 2>/dev/null)" = true ] || break
		sleep 0.2
	done
	bad "m$n did not serve: $(tail -c 600 "$TD/m$n.log")"
	return 1
}

# mpair_setup: the images, the certificates, the repository, PostgreSQL and m1, m2.
mpair_setup() {
	local pg
	pg=infra-sandbox-postgres:it-$(basename "$IT_ROOT" | tr '[:upper:]' '[:lower:]')
	mimg_build || return 1
	IMAGE=$pg CONTAINERS_CONF=$PODMAN_CONF bash "$IT_REPO/scripts/postgres-image.sh" >"$TD/pg-build.log" 2>&1 ||
		{ bad "scripts/postgres-image.sh failed: $(tail -n 5 "$TD/pg-build.log")"; return 1; }
	MPAIR_POD=mpair-$$-$RANDOM
	trap 'mimg_podman rm -f "$MPAIR_POD-m1" "$MPAIR_POD-m2" >/dev/null 2>&1; mimg_podman rm -f "$MPAIR_POD-pg" >/dev/null 2>&1
		mimg_podman rmi -f "$MIMG" "'"$pg"'" >/dev/null 2>&1' EXIT
	# the certificates as an operator makes them (files only), readable by the managers' user
	mkdir -p "$TD/principals" "$TD/tls"
	jq -n '{"alice-ci": {identities: ["alice"], repos: ["/srv/repo"]}, "bob-ci": {identities: ["bob"]},
		ops: {operator: true}}' >"$TD/principals/principals.json"
	KUBECTL=none SANDBOX_MANAGER=$MANAGER bash "$IT_REPO/deploy/kubernetes/certs.sh" "$TD/principals/principals.json" \
		"$TD/certs" >"$TD/certs.log" 2>&1 || { bad "certs.sh: $(tail -n 3 "$TD/certs.log")"; return 1; }
	cp "$TD/certs/server/server.crt" "$TD/certs/server/server.key" "$TD/certs/ca/ca.crt" "$TD/tls/" &&
		cp "$TD/certs/deny" "$TD/principals/deny" &&
		chown -R 10001:10001 "$TD/tls" "$TD/principals" && chmod -R a+rX "$TD/certs/clients" &&
		chmod 0711 "$TD/certs" || return 1
	chown -R 10001:10001 "$TD/certs/clients" # the clients run as the image's user too
	# another operator's CA, with a certificate for the same principal name; its client trusts the
	# managers' CA, so that the refusal is the manager's
	if ! KUBECTL=none SANDBOX_MANAGER=$MANAGER bash "$IT_REPO/deploy/kubernetes/certs.sh" \
		"$TD/principals/principals.json" "$TD/other" >>"$TD/certs.log" 2>&1; then
		bad "certs.sh (another CA): $(tail -n 3 "$TD/certs.log")"
		return 1
	fi
	cp "$TD/certs/ca/ca.crt" "$TD/other/clients/alice-ci/ca.crt" && chmod 0711 "$TD/other" &&
		chown -R 10001:10001 "$TD/other/clients" || return 1
	mgr_repo && chown -R 10001:10001 "$TD/repo" || return 1
	mkdir -p "$TD/vol" "$TD/pg" && chown 10001:10001 "$TD/vol" && chmod 1777 "$TD/pg"
	mimg_podman run -d --name "$MPAIR_POD-pg" --network none --read-only --label "infra-sandbox.test=$IT_ROOT" \
		-e POSTGRES_PASSWORD=mpair-secret -v "$TD/pg:/var/lib/postgresql/data" "$pg" >/dev/null ||
		{ bad "podman run postgres failed"; return 1; }
	for _ in $(seq 1 150); do
		mimg_podman logs "$MPAIR_POD-pg" 2>&1 | grep -q 'database system is ready to accept connections' && break
		sleep 0.2
	done
	mpair_manager 1 7444 && mpair_manager 2 7445
}

test_manager_image_pair() {
	[ "$RUN_UID" -eq 0 ] || skip "root only: the images are built into root's podman storage (the root run proves it)"
	need_podman
	if ldd "$IT_ROOT/bin/sandbox-manager-daemon" 2>/dev/null | grep -q 'libasan\|libubsan'; then
		skip "this run's binaries are a sanitizer build; the image holds the plain one (make manager-image)"
	fi
	local sid k rc lines
	mpair_setup || return
	mpair_client 7444 alice-ci session create --identity alice --repo /srv/repo
	assert_eq "session create through m1 (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	sid=$(jr .session)
	[ -n "$sid" ] || return
	# calls sent through m2 (followed to the owner m1) and through m1, at once
	for port in 7445 7444; do
		(
			for k in 1 2 3; do
				mpair_client "$port" alice-ci exec --session "$sid" -- "$MPAIR_CALL"
				echo "$RC" >"$TD/loop-$port-$k.rc"
				cp "$ERR" "$TD/loop-$port-$k.err"
			done
		) &
	done
	wait
	for port in 7445 7444; do
		for k in 1 2 3; do
			rc=$(cat "$TD/loop-$port-$k.rc" 2>/dev/null)
			assert_eq "call $k through :$port: exit code ($(head -c 300 "$TD/loop-$port-$k.err"))" 0 "$rc"
		done
	done
	mpair_client 7445 ops records --session "$sid" --limit 50
	assert_eq "exited records, read through m2" 6 "$(jr '[.records[] | select(.state == "exited")] | length')"
	assert_eq "records" 6 "$(jr '.records | length')"
	mpair_client 7445 ops session show --session "$sid"
	assert_eq "the owner" m1 "$(jr .owner.manager)"
	lines=$(find "$TD/vol" -path '*/.sandbox-tmp/calls' | head -n 1)
	assert_eq "start lines" 6 "$(grep -c '^start [0-9]*$' "$lines")"
	# in time order, every start is followed by its own end: an overlap puts two starts together
	assert_eq "starts not after the previous call's end" 0 \
		"$(sort -k2,2n "$lines" | awk '$1 != (NR % 2 ? "start" : "end") { n++ } END { print n + 0 }')"
	# a client without a certificate is refused, and nothing is recorded
	mimg_podman run --rm --network "container:$MPAIR_POD-pg" --read-only -v "$TD/certs/clients/alice-ci:/certs:ro" \
		-e SANDBOX_MANAGER_SOCKET=tls://127.0.0.1:7445 -e SANDBOX_MANAGER_TLS_NAME=sandbox-manager \
		-e SANDBOX_MANAGER_TLS_CA=/certs/ca.crt "$MIMG" exec --session "$sid" -- true >"$OUT" 2>"$ERR"
	assert_ne "exec without a client certificate: exit code" 0 "$?"
	# alice-ci's name with another CA's certificate: refused at the handshake
	MPAIR_CERTS=$TD/other mpair_client 7444 alice-ci exec --session "$sid" -- true
	assert_eq "exec with another CA's certificate: exit code" 125 "$RC"
	assert_match "exec with another CA's certificate: why" "handshake" "$(cat "$ERR")"
	# a principal of another identity: the session is not its to see
	mpair_client 7445 bob-ci exec --session "$sid" -- true
	assert_ne "exec as bob-ci on alice's session: exit code" 0 "$RC"
	assert_match "bob-ci is told" 'not_found|no such session' "$(cat "$ERR")"
	# alice-ci's certificate revoked in the deny list the managers read (as a ConfigMap update lands)
	echo "serial $(jq -r .serial "$TD/certs/clients-alice-ci.json")" >>"$TD/principals/deny"
	sleep 2.5
	mpair_client 7445 alice-ci exec --session "$sid" -- true
	assert_eq "exec with a revoked certificate: exit code" 125 "$RC"
	mpair_client 7444 ops records --session "$sid" --limit 50
	assert_eq "records after the refused clients" 6 "$(jr '.records | length')"
}
# and, here, PostgreSQL's (about 100 s)
IT_TEST_DEADLINE=600 t manager_image_pair test_manager_image_pair
