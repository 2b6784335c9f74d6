# shellcheck shell=bash
# shellcheck disable=SC2016,SC2034 # commands are text for the inner bash; variables are read by lib.sh
# sandbox-agent exec: output. A head and a tail within --output-limit with the marker between them, exact
# byte counts, bounded agent memory under a 200 MB flood, and bytes that are not UTF-8 escaped, never lost.

# The marker between head and tail when N bytes were left out.
marker() { printf '\n[... %s bytes omitted ...]\n' "$1"; }

# rss_wrap FILE: sets AGENT_WRAP so the agent's peak RSS (KiB) lands in FILE.
rss_wrap() {
	if [ -x /usr/bin/time ]; then
		AGENT_WRAP=(/usr/bin/time -f %M -o "$1")
	else
		# no GNU time: poll VmHWM of the agent (setpriv and env exec it, so the pid stays the same)
		# shellcheck disable=SC2016 # expanded by the wrapper shell
		AGENT_WRAP=(bash -c 'f=$0; "$@" & p=$!; h=0
			while kill -0 $p 2>/dev/null; do
				v=$(awk "/^VmHWM:/ {print \$2}" /proc/$p/status 2>/dev/null)
				[ -n "$v" ] && [ "$v" -gt "$h" ] && h=$v
				sleep 0.02
			done
			wait $p; rc=$?; echo $h > "$f"; exit $rc' "$1")
	fi
}

test_flood() {
	local total=200000000 half=32768 rss limit=65536 want_sha
	rss_wrap "$TD/rss"
	if [ "${SANITIZE:-0}" = 1 ]; then
		# AddressSanitizer's own shadow and quarantine: keep the quarantine small, allow its overhead
		AGENT_ENV=("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8")
		limit=$((160 * 1024))
	fi
	AGENT_TIMEOUT=90
	ax_ok --output-limit 65536 --timeout-seconds 80 --exec-id flood -- "head -c $total /dev/zero"
	AGENT_WRAP=()
	assert_result exited 0 null
	# NUL is escaped by the exec result's rule (docs/operations.md): each one is the text \x00
	assert_json '[.stdout_bytes, .stdout_truncated, .stderr_bytes, .stdout_escaped]' "[$total,true,0,true]"
	# 32768 NUL bytes (\x00 each), the marker, 32768 NUL bytes. Compared whole: jq 1.6's gsub over the
	# 65536 escapes took minutes on a slow machine, past the case's 180 s.
	local ok
	ok=$(jq --arg m "$(marker $((total - 2 * half)); printf x)" '($m | rtrimstr("x")) as $m |
		(.stdout | length) == 2 * 4 * '$half' + ($m | length) and (.stdout | index($m)) == 4 * '$half' and
		.stdout == ("\\x00" * '$half') + $m + ("\\x00" * '$half')' "$OUT")
	assert_eq "stdout is head + marker + tail" true "$ok"
	rss=$(tail -n 1 "$TD/rss" 2>/dev/null)
	echo "    agent peak RSS: ${rss:-?} KiB, ${ELAPSED_MS} ms for $total bytes"
	assert_lt "agent peak RSS in KiB" "${rss:-999999999}" "$limit"
	want_sha=$(head -c "$total" /dev/zero | sha256sum | cut -d' ' -f1)
	assert_json .stdout_sha256 "\"$want_sha\"" "$RD/flood.json"
	assert_json .stdout_bytes "$total" "$RD/flood.json"
}
t output_flood test_flood

# seq 1 100000 (588895 bytes) on both streams through a 1000-byte bound: the first and last 500 bytes.
test_truncation_exact() {
	local total
	seq 1 100000 >"$TD/seq.txt"
	total=$(stat -c %s "$TD/seq.txt")
	{ head -c 500 "$TD/seq.txt"; marker $((total - 1000)); tail -c 500 "$TD/seq.txt"; } >"$TD/want.txt"
	ax_ok --output-limit 1000 -- 'seq 1 100000; seq 1 100000 >&2'
	assert_result exited 0 null
	assert_json '[.stdout_bytes, .stderr_bytes, .stdout_truncated, .stderr_truncated]' "[$total,$total,true,true]"
	jq -j .stdout "$OUT" >"$TD/stdout.txt"
	jq -j .stderr "$OUT" >"$TD/stderr.txt"
	cmp -s "$TD/want.txt" "$TD/stdout.txt" || bad "stdout is not head+marker+tail: $(head -c 200 "$TD/stdout.txt")"
	cmp -s "$TD/want.txt" "$TD/stderr.txt" || bad "stderr is not head+marker+tail: $(head -c 200 "$TD/stderr.txt")"
}
t output_truncation_exact test_truncation_exact

# Exactly the limit is kept whole; one byte more is cut with "1 bytes omitted".
test_truncation_boundary() {
	local zeros
	zeros=$(printf '%0500d' 0)
	ax_ok --output-limit 1000 -- 'printf "%01000d" 0'
	assert_json '[.stdout_bytes, .stdout_truncated]' '[1000,false]'
	assert_json .stdout "\"$zeros$zeros\""
	ax_ok --output-limit 1000 -- 'printf "%01001d" 0'
	assert_json '[.stdout_bytes, .stdout_truncated]' '[1001,true]'
	local mk
	mk=$(marker 1; printf x) # keep the marker's trailing newline
	assert_json .stdout "$(json_str "$zeros${mk%x}$zeros")"
}
t output_truncation_boundary test_truncation_boundary

# Bytes that are not UTF-8, and NUL, become \xNN and literal backslashes are doubled; nothing is dropped.
test_binary_output() {
	ax_ok --exec-id bin -- "printf '\\xff\\x00abc\\\\'"
	assert_result exited 0 null
	assert_json '[.stdout_bytes, .stdout_escaped, .stderr_escaped]' '[6,true,false]'
	assert_json .stdout '"\\xff\\x00abc\\\\"'
	# shellcheck disable=SC1003 # the format ends in an escaped backslash
	assert_json .stdout_sha256 "\"$(printf '\xff\x00abc\\' | sha256sum | cut -d' ' -f1)\"" "$RD/bin.json"
}
t output_binary test_binary_output

# Valid UTF-8 (2- and 4-byte) passes as text, unescaped, backslash kept single.
test_utf8_output() {
	ax_ok -- 'printf "caf\xc3\xa9 \xf0\x9f\x98\x80 \\\\ \n"'
	assert_result exited 0 null
	assert_json '[.stdout_bytes, .stdout_escaped]' '[14,false]'
	assert_json .stdout "$(json_str $'caf\xc3\xa9 \xf0\x9f\x98\x80 \\ \n')"
}
t output_utf8 test_utf8_output

# Overlong, surrogate, 5-byte and cut-off sequences are not UTF-8: each byte is escaped; one stream only.
test_invalid_utf8_forms() {
	ax_ok -- 'printf "a\xc0\xafb\xed\xa0\x80c\xf8\x88\x80\x80\x80d\xc3" >&2; echo fine'
	assert_result exited 0 null
	assert_json '[.stdout_escaped, .stderr_escaped, .stderr_bytes]' '[false,true,15]'
	assert_json .stdout '"fine\n"'
	assert_json .stderr "$(json_str 'a\xc0\xafb\xed\xa0\x80c\xf8\x88\x80\x80\x80d\xc3')"
}
t output_invalid_utf8 test_invalid_utf8_forms

# Rule N6: what a command prints reaches no terminal raw through the agent's JSON. ESC, a raw 0x9b
# (CSI to a terminal that reads 8-bit C1), U+009B (CSI) and U+009D (OSC) as UTF-8, DEL and U+202E
# (right-to-left override) are escaped as \xNN of their bytes (common/textesc.c textesc_encode); stderr
# holds only valid UTF-8, so no byte that is not UTF-8 forces the stream's escaping there.
test_output_terminal_safe() {
	ax_ok --exec-id term -- 'printf "A\033[31mB\233C\302\233D\302\235E\177F\342\200\256G\n"
		printf "\302\233\302\235\177\342\200\256\033" >&2'
	assert_result exited 0 null
	assert_terminal_safe "sandbox-agent exec's JSON" "$OUT"
	assert_json '[.stdout_bytes, .stdout_escaped, .stderr_bytes, .stderr_escaped]' '[22,true,9,true]'
	assert_json .stdout "$(json_str 'A\x1b[31mB\x9bC\xc2\x9bD\xc2\x9dE\x7fF\xe2\x80\xaeG'$'\n')"
	assert_json .stderr "$(json_str '\xc2\x9b\xc2\x9d\x7f\xe2\x80\xae\x1b')"
	assert_json .stderr_sha256 "\"$(printf '\302\233\302\235\177\342\200\256\033' | sha256sum | cut -d' ' -f1)\"" "$RD/term.json"
}
t output_terminal_safe test_output_terminal_safe
