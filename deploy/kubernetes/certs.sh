#!/usr/bin/env bash
# deploy/kubernetes/certs.sh PRINCIPALS.json OUTDIR: the operator's CA for the managers' control API
# and everything deployment.yaml mounts from it. Makes OUTDIR/ca/ (ca.crt, ca.key: ECDSA P-256, 0600 in
# a 0700 directory; keep it off the cluster), the managers' one server certificate (name
# sandbox-manager, OUTDIR/server/) and a client certificate for every principal of PRINCIPALS.json
# (OUTDIR/clients/NAME/: NAME.crt, NAME.key, ca.crt), all issued by `sandbox-manager ca issue --ca`;
# then applies in the namespace: the Secret sandbox-manager-tls (server.crt, server.key, ca.crt: the
# CA clients chain to), the ConfigMap sandbox-manager-principals (principals.json and an empty deny
# list, or OUTDIR/deny if it exists) and, once, the Secret sandbox-postgres (a random password).
# Run again to add principals or change the deny list: the CA and the certificates already made stay.
# Environment: NAMESPACE (default infra-sandbox), KUBECTL (default kubectl; none: write the files
# only), SANDBOX_MANAGER (default
# sandbox-manager from PATH), CLIENT_DAYS (default 30).
set -euo pipefail

die() {
	echo "certs.sh: $*" >&2
	exit 1
}

[ $# -eq 2 ] || die "usage: certs.sh PRINCIPALS.json OUTDIR"
principals=$1
out=$2
ns=${NAMESPACE:-infra-sandbox}
read -r -a kubectl <<<"${KUBECTL:-kubectl}"
manager=${SANDBOX_MANAGER:-sandbox-manager}
# KUBECTL=none: the files only (the objects are applied elsewhere, or the files serve a manager
# outside Kubernetes)
for c in openssl jq "$manager"; do
	command -v "$c" >/dev/null || die "$c is missing"
done
[ "${kubectl[0]}" = none ] || command -v "${kubectl[0]}" >/dev/null || die "${kubectl[0]} is missing (KUBECTL=none: files only)"
jq -e 'type == "object" and length > 0' "$principals" >/dev/null ||
	die "$principals is not a JSON object of principals (docs/operations.md, principals)"

umask 077
mkdir -p "$out"
# The CA: made once. Its key never goes into the cluster.
if [ ! -s "$out/ca/ca.key" ]; then
	mkdir -m 0700 "$out/ca"
	openssl ecparam -name prime256v1 -genkey -noout -out "$out/ca/ca.key.tmp"
	openssl pkcs8 -topk8 -nocrypt -in "$out/ca/ca.key.tmp" -out "$out/ca/ca.key"
	rm -f "$out/ca/ca.key.tmp"
	openssl req -x509 -new -key "$out/ca/ca.key" -sha256 -days 825 -subj "/CN=infra-sandbox control CA ($ns)" \
		-addext "basicConstraints=critical,CA:TRUE,pathlen:0" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		-out "$out/ca/ca.crt" 2>/dev/null
	echo "certs.sh: made the CA in $out/ca"
fi
if [ ! -s "$out/server/server.crt" ]; then
	"$manager" ca issue --server-name sandbox-manager --ca "$out/ca" --out "$out/server" --days 397 >/dev/null
	cp "$out/ca/ca.crt" "$out/server/ca.crt"
	echo "certs.sh: issued the managers' server certificate (name sandbox-manager)"
fi
mkdir -p "$out/clients"
for p in $(jq -r 'keys[]' "$principals"); do
	[ -s "$out/clients/$p/$p.crt" ] && continue
	"$manager" ca issue --principal "$p" --ca "$out/ca" --out "$out/clients/$p" --days "${CLIENT_DAYS:-30}" \
		>"$out/clients-$p.json"
	echo "certs.sh: issued $p's client certificate (serial $(jq -r .serial "$out/clients-$p.json"))"
done
[ -f "$out/deny" ] || echo "# revoked certificates: serial HEX or principal NAME, one a line" >"$out/deny"

if [ "${kubectl[0]}" = none ]; then
	echo "certs.sh: files in $out (KUBECTL=none: nothing applied)"
	exit 0
fi
apply() { "${kubectl[@]}" apply -f - >/dev/null; }
"${kubectl[@]}" -n "$ns" create secret generic sandbox-manager-tls --from-file="$out/server/server.crt" \
	--from-file="$out/server/server.key" --from-file="$out/ca/ca.crt" --dry-run=client -o yaml | apply
"${kubectl[@]}" -n "$ns" create configmap sandbox-manager-principals --from-file=principals.json="$principals" \
	--from-file=deny="$out/deny" --dry-run=client -o yaml | apply
if ! "${kubectl[@]}" -n "$ns" get secret sandbox-postgres >/dev/null 2>&1; then
	"${kubectl[@]}" -n "$ns" create secret generic sandbox-postgres \
		--from-literal=password="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" --dry-run=client -o yaml | apply
fi
echo "certs.sh: applied the Secret sandbox-manager-tls, the ConfigMap sandbox-manager-principals and the Secret sandbox-postgres in $ns"
