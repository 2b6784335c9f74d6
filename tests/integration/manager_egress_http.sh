# shellcheck shell=bash
# shellcheck disable=SC2016 # the commands expand their variables inside the sandbox
# An HTTP API resource at the edge (issue 28), end to end on the process backend: http:tracker with
# the header broker, the broker's local HTTPS stand-in (tests/brokers/server.py, as in
# manager_egress_edge.sh) for the API, which answers 401 unless the request's Authorization is the
# token's and logs every header it got. A session of policy proxy learns the edge from
# INFRA_SANDBOX_HTTP_TRACKER and holds no token; a read grant passes a GET with the header added and
# refuses a POST before it leaves; after a grant change to write the POST passes; every request is
# on its exec's record. A bad config is refused at start (and two http: resources of one variable),
# and an http: grant off policy proxy.

HTTP_TOKEN=httpapi-token-0123456789

# http_start: the stand-in (accepting HTTP_TOKEN), the token file and the config, then a manager
# declaring http:tracker.
http_start() {
	local _ port
	command -v openssl >/dev/null || skip_setup "openssl is not installed (needed for the test server's certificate)"
	brokers_certs || { bad "cannot make the test certificates"; return 1; }
	cat >"$TD/responses.json" <<-'EOF'
		{"GET /v1/issues?state=open": {"status": 200, "body": {"issues": [{"id": 7}]}},
		 "POST /v1/issues": {"status": 201, "body": {"id": 8}}}
	EOF
	/usr/bin/python3 "$BROKER_SERVER" --cert "$TD/tls/server.crt" --key "$TD/tls/server.key" \
		--port-file "$TD/port" --log "$TD/requests.log" --bearer "$HTTP_TOKEN" \
		--responses "$TD/responses.json" >"$TD/server.log" 2>&1 &
	BROKER_PID=$!
	for _ in $(seq 1 100); do [ -s "$TD/port" ] && break; sleep 0.05; done
	port=$(cat "$TD/port" 2>/dev/null) || { bad "the test server did not start: $(cat "$TD/server.log")"; return 1; }
	printf '%s\n' "$HTTP_TOKEN" >"$TD/tracker.token"
	chmod 0600 "$TD/tracker.token"
	cat >"$TD/tracker.json" <<-EOF
		{"server": "https://localhost:$port/", "ca_file": "$TD/tls/ca.crt",
		 "header": "Authorization: Bearer {token}",
		 "read_token_file": "$TD/tracker.token", "write_token_file": "$TD/tracker.token"}
	EOF
	chown -R "$RUN_USER:" "$TD/tracker.token" "$TD/tracker.json" "$TD/tls" "$TD/responses.json"
	mgr_repo && mgr_start --resource "http:tracker=header:$TD/tracker.json" || return 1
	trap 'kill "$BROKER_PID" 2>/dev/null; mgr_cleanup' EXIT
}

# http_requests METHOD: how many requests of METHOD reached the stand-in.
http_requests() { jq -rs --arg m "$1" '[.[] | select(.method == $m)] | length' "$TD/requests.log" 2>/dev/null; }

test_manager_egress_http() {
	local post='curl -s --noproxy "*" -X POST -H "Content-Type: application/json" -d "{\"title\":\"x\"}" -w "\n%{http_code}\n" "$INFRA_SANDBOX_HTTP_TRACKER/v1/issues"'
	local get_id post_id
	http_start || return
	mgr_session --grant http:tracker=read --network proxy
	mgr exec --session "$SID" -- 'echo "$INFRA_SANDBOX_HTTP_TRACKER"; curl -s -H "Authorization: Bearer sandbox-forged" "$INFRA_SANDBOX_HTTP_TRACKER/v1/issues?state=open"'
	assert_eq "a GET through the edge: exit code (stderr: $(head -c 400 "$ERR"))" 0 "$RC"
	assert_eq "the sandbox learns the edge's address" "http://127.0.0.1:3129" "$(head -n 1 "$OUT")"
	assert_match "the API's answer" '"issues"' "$(cat "$OUT")"
	assert_eq "the header the stand-in got: the grant's, added at the edge (not the sandbox's own)" \
		"Bearer $HTTP_TOKEN" "$(jq -rs '[.[] | select(.method == "GET")][0].headers.authorization' "$TD/requests.log")"

	# The sandbox's whole view holds no token: its environment, every process's, and every file it can
	# read outside the host's read-only /usr (proved able to find one: a marker planted first). Each
	# string is named in two halves, so that the command line holds neither whole.
	mgr exec --session "$SID" -- 'echo "httpapi-marker-""'"$$"'" > planted.txt;
		for t in "httpapi-marker-""'"$$"'" "httpapi-""token-"; do
			{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr "\0" "\n"; } | grep -c -F -f <(echo "$t")
			grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr "$t" / 2>/dev/null | head -n 3
			echo "--"
		done'
	assert_eq "the search: exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_match "the search finds the planted marker" "planted.txt" "$(sed -n '1,/^--$/p' "$OUT")"
	assert_eq "no token of the grant is anywhere in the sandbox" "0 --" \
		"$(sed -n '/^--$/,$p' "$OUT" | sed 1d | tr '\n' ' ' | sed 's/ $//')"

	# A POST under read: refused at the edge, naming the grant, the access and the method; nothing leaves.
	mgr exec --session "$SID" -- "$post"
	assert_eq "a POST under read: the answer" 403 "$(tail -n 1 "$OUT")"
	assert_match "the refusal names the rule" 'grant \\"http:tracker\\" \(read\): method POST' "$(cat "$OUT")"
	assert_eq "nothing left the edge" 0 "$(http_requests POST)"

	# Under write the POST passes, with its body and the header.
	mgr grant --session "$SID" --set http:tracker=write
	assert_eq "grant exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	mgr exec --session "$SID" -- "$post"
	assert_eq "a POST under write: the answer (stderr: $(head -c 300 "$ERR"))" 201 "$(tail -n 1 "$OUT")"
	assert_eq "its body reached the API" '{"title":"x"}' \
		"$(jq -rs '[.[] | select(.method == "POST")][0].body' "$TD/requests.log")"
	assert_eq "with the header" "Bearer $HTTP_TOKEN" \
		"$(jq -rs '[.[] | select(.method == "POST")][0].headers.authorization' "$TD/requests.log")"

	# Each exec's record lists its requests (records: newest first): method, host, path, status, bytes.
	mgr records --session "$SID"
	assert_json '[.records[] | .result.egress.requests // 0]' '[1,1,0,1]'
	get_id=$(jr '.records[3].exec_id')
	post_id=$(jr '.records[0].exec_id')
	mgr records --exec "$get_id"
	assert_json '.records[0].result.egress.details[0] | [.method, .path, .status, .refused, has("kubernetes")]' \
		'["GET","/v1/issues?state=open",200,false,false]'
	assert_match "the host is the API's" '^https://localhost:[0-9]+$' "$(jr '.records[0].result.egress.details[0].host')"
	assert_json '.records[0].result.egress.details[0].bytes_down > 0' true
	mgr records --session "$SID"
	assert_json '.records[1].result.egress.details[0] | [.method, .status, .refused]' '["POST",403,true]'
	assert_json '.records[1].result.egress.mutating_accepted' 0
	mgr records --exec "$post_id"
	assert_json '.records[0].result.egress.details[0] | [.method, .path, .status, .bytes_up]' '["POST","/v1/issues",201,13]'
	assert_json '.records[0].result.egress.mutating_accepted' 1
}
t manager_egress_http test_manager_egress_http

# Refusals: an http: grant on a session that is not of policy proxy (its token would have to be in
# the sandbox), and a manager whose http: config is bad (a template without {token}; a token file
# others can read) does not start, saying why and never what the token file holds.
test_manager_egress_http_refused() {
	local d out
	http_start || return
	d=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$d" && chmod 0700 "$d" || return
	mgr session create --identity alice --repo "$REPO" --grant http:tracker=read --network open
	assert_eq "an http: grant on network open: exit code" 125 "$RC"
	assert_match "says why" "needs a session of network proxy" "$(cat "$ERR")"
	mgr_session --network open
	mgr grant --session "$SID" --set http:tracker=write
	assert_eq "grant --set http: on network open: exit code" 125 "$RC"
	assert_match "says why" "needs a session of network proxy" "$(cat "$ERR")"

	sed 's/{token}/TOKEN/' "$TD/tracker.json" >"$TD/bad.json"
	chown "$RUN_USER:" "$TD/bad.json"
	out=$(timeout -k 3 20 "${AS[@]}" "$MANAGER" serve --state-dir "$d" --resource "http:bad=header:$TD/bad.json" 2>&1)
	assert_eq "a template without {token}: serve's exit code" 125 "$?"
	assert_match "says which resource and what" 'resource http:bad: "header" must hold exactly one \{token\}' "$out"
	chmod 0644 "$TD/tracker.token"
	out=$(timeout -k 3 20 "${AS[@]}" "$MANAGER" serve --state-dir "$d" --resource "http:tracker=header:$TD/tracker.json" 2>&1)
	assert_eq "a token file others can read: serve's exit code" 125 "$?"
	assert_match "says which file and what to do" "tracker.token must be a regular file with no access for others" "$out"
	case $out in *"$HTTP_TOKEN"*) bad "serve's refusal holds the token: $out" ;; esac
	out=$(timeout -k 3 20 "${AS[@]}" "$MANAGER" serve --state-dir "$d" --resource "kubernetes:x=header:$TD/tracker.json" 2>&1)
	assert_eq "the header broker for a kubernetes: resource: serve's exit code" 125 "$?"
	assert_match "says why" "the header: broker serves http:NAME resources only" "$out"
	chmod 0600 "$TD/tracker.token"
	out=$(timeout -k 3 20 "${AS[@]}" "$MANAGER" serve --state-dir "$d" --resource "kubernetes:a=file:/nonexistent" \
		--resource "http:my-api=header:$TD/tracker.json" --resource "http:my.api=header:$TD/tracker.json" 2>&1)
	assert_eq "two http: resources of one variable: serve's exit code" 125 "$?"
	assert_match "says which" "would both be INFRA_SANDBOX_HTTP_MY_API in a sandbox" "$out"
	rm -rf -- "$d"
}
t manager_egress_http_refused test_manager_egress_http_refused
