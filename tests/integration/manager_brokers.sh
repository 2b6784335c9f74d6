# shellcheck shell=bash
# shellcheck disable=SC2016 # the commands expand their variables inside the sandbox
# The tokenrequest and rancher brokers end to end: a local HTTPS stand-in for the Kubernetes and Rancher
# APIs (tests/brokers/server.py), a manager with `--resource NAME=tokenrequest:CONFIG` and
# `rancher:CONFIG`, and a session whose call sees the issued token through KUBECONFIG, never the
# manager's own credential; a 403 from the API refuses the call with the API's message.

BROKER_SERVER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../brokers" && pwd)/server.py
BROKER_BEARER=manager-api-credential-7f3a

# brokers_certs: a CA and a "localhost" server certificate in $TD/tls (openssl CLI, offline).
brokers_certs() {
	local d=$TD/tls
	mkdir -p "$d"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" \
		-days 1 -subj /CN=broker-test-ca -addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$d/server.key" \
			-out "$d/server.csr" -subj /CN=localhost 2>/dev/null &&
		printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/ext" &&
		openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
			-out "$d/server.crt" -days 1 -extfile "$d/ext" 2>/dev/null
}

# brokers_start: the HTTPS server (port in $TD/port), the manager's credential and both configs,
# then a manager declaring kubernetes:staging (tokenrequest) and kubernetes:prod (rancher).
brokers_start() {
	local _ port
	command -v openssl >/dev/null || skip_setup "openssl is not installed (needed for the test server's certificate)"
	brokers_certs || { bad "cannot make the test certificates"; return 1; }
	/usr/bin/python3 "$BROKER_SERVER" --cert "$TD/tls/server.crt" --key "$TD/tls/server.key" \
		--port-file "$TD/port" --log "$TD/requests.log" --bearer "$BROKER_BEARER" \
		--responses "$TD/responses.json" >"$TD/server.log" 2>&1 &
	BROKER_PID=$!
	for _ in $(seq 1 100); do [ -s "$TD/port" ] && break; sleep 0.05; done
	port=$(cat "$TD/port" 2>/dev/null) || { bad "the test server did not start: $(cat "$TD/server.log")"; return 1; }
	printf '%s\n' "$BROKER_BEARER" >"$TD/manager.token"
	chmod 0600 "$TD/manager.token"
	cat >"$TD/staging.json" <<-EOF
		{"server": "https://localhost:$port", "ca_file": "$TD/tls/ca.crt", "namespace": "ci",
		 "read_service_account": "viewer", "write_service_account": "deployer",
		 "token_file": "$TD/manager.token", "expiration_seconds": 900}
	EOF
	cat >"$TD/prod.json" <<-EOF
		{"server": "https://localhost:$port", "ca_file": "$TD/tls/ca.crt", "cluster_id": "c-m-prod1",
		 "read_token_file": "$TD/manager.token", "ttl_seconds": 600}
	EOF
	chown -R "$RUN_USER:" "$TD/manager.token" "$TD/staging.json" "$TD/prod.json" "$TD/tls"
	export NO_PROXY=localhost,127.0.0.1 no_proxy=localhost,127.0.0.1
	# BROKERS_POD=1: the podman backend's manager (lib_podman.sh), which removes its containers too
	if [ "${BROKERS_POD:-0}" = 1 ]; then
		mgr_repo && pod_mgr_start --resource "kubernetes:staging=tokenrequest:$TD/staging.json" || return 1
		trap 'kill "$BROKER_PID" 2>/dev/null; pod_cleanup' EXIT
		return 0
	fi
	mgr_repo && mgr_start --resource "kubernetes:staging=tokenrequest:$TD/staging.json" \
		--resource "kubernetes:prod=rancher:$TD/prod.json" || return 1
	trap 'kill "$BROKER_PID" 2>/dev/null; mgr_cleanup' EXIT
}

# request N FILTER: jq FILTER on the Nth (0-based) request the server logged.
request() { jq -rs ".[$1] | $2" "$TD/requests.log" 2>/dev/null; }

test_manager_brokers() {
	brokers_start || return
	mgr_session --grant kubernetes:staging=read
	mgr exec --session "$SID" -- 'jq -r ".users[0].user.token, .clusters[0].cluster.server" "$KUBECONFIG" 2>/dev/null || cat "$KUBECONFIG"; ls "$(dirname "$KUBECONFIG")"; grep -rl '"$BROKER_BEARER"' "$(dirname "$KUBECONFIG")" || echo "no manager credential"'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_match "the issued token" "k8s-token-viewer-" "$(cat "$OUT")"
	assert_match "the cluster" "https://localhost:" "$(cat "$OUT")"
	assert_match "only the kubeconfig" "^kubernetes-staging.kubeconfig$" "$(grep kubeconfig "$OUT")"
	assert_match "the manager's credential stays out" "no manager credential" "$(cat "$OUT")"
	assert_eq "the request" "POST /api/v1/namespaces/ci/serviceaccounts/viewer/token" "$(request 0 '.method + " " + .path')"
	assert_eq "its credential" "Bearer $BROKER_BEARER" "$(request 0 '.headers.authorization')"
	assert_eq "its expirationSeconds" 900 "$(request 0 '.body | fromjson | .spec.expirationSeconds')"

	# A Rancher grant: a new sandbox, whose snapshot holds both credentials.
	mgr grant --session "$SID" --set kubernetes:prod=read
	assert_eq "grant exit code" 0 "$RC"
	mgr exec --session "$SID" -- 'for f in $(echo "$KUBECONFIG" | tr ":" " "); do grep -o "\"server\": \"[^\"]*\"" "$f"; done'
	assert_eq "exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_match "the Rancher cluster" "/k8s/clusters/c-m-prod1" "$(cat "$OUT")"
	assert_eq "the Rancher ttl in ms" 600000 "$(jq -rs '[.[] | select(.path == "/v3/tokens")][0].body | fromjson | .ttl' "$TD/requests.log")"

	# The API refuses the write service account: the call is refused with the API's message.
	printf '{"POST /api/v1/namespaces/ci/serviceaccounts/deployer/token": {"status": 403, "body": {"kind": "Status", "message": "serviceaccounts \\"deployer\\" is forbidden: no token for you", "code": 403}}}\n' \
		>"$TD/responses.json"
	mgr grant --session "$SID" --set kubernetes:staging=write
	assert_eq "grant exit code" 0 "$RC"
	mgr exec --session "$SID" -- 'echo ran'
	assert_eq "a refused credential refuses the call" 125 "$RC"
	assert_match "the resource, status and message" "kubernetes:staging.*403.*no token for you" "$(cat "$ERR")"
	assert_ne "the command did not run" ran "$(cat "$OUT")"
	grep -q "$BROKER_BEARER" "$TD/manager.log" && bad "the manager's credential is in its log"
	return 0
}
t manager_brokers test_manager_brokers
