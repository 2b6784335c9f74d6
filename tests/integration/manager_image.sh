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
t manager_image test_manager_image
