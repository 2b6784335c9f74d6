# shellcheck shell=bash
# Rule N2 (issue 26): each identity's sandboxes run as a uid and gid of its own. A root manager gives
# each identity one slot of its sandbox-ids range, recorded in the store, kept across restarts, and
# checks at every start that no one else has the range; an unprivileged manager does the same in a
# user namespace of its user's subordinate ids (sandbox-ids subuid, its default where it can work),
# else every identity is the manager (said by `session show`, tested as such).

# ids_exec SESSION: the command's uid, gid and the owner of a file it wrote, in IDS_SEEN.
ids_exec() {
	mgr exec --session "$1" -- 'id -u; id -g; echo "secret of $(id -u)" > secret.txt; stat -c "%u %g %a" secret.txt'
	assert_eq "the file it wrote" "secret of $(head -n 1 "$OUT")" "$(cat "$(jr .worktree "$TD/wt.$1")/secret.txt" 2>/dev/null)"
	assert_eq "exec exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	IDS_SEEN=$(tr '\n' ' ' <"$OUT")
}

# ids_named SESSION UID GID: the sandbox's user database knows its ids (process_users.c): by the
# host's name where the host has a user or group with the id (an unprivileged manager's own), else
# "sandbox"; its home is HOME; every lookup a command makes finds them, in both directions.
ids_named() {
	local name group home
	name=$(getent passwd "$2" | cut -d: -f1)
	group=$(getent group "$3" | cut -d: -f1)
	mgr exec --session "$1" -- 'whoami; id -un; id -gn; echo "$(getent passwd sandbox | cut -d: -f3)"; echo ~;
		getent passwd "$(id -u)" | cut -d: -f6; python3 -c "import getpass; print(getpass.getuser())";
		stat -c %U:%G .'
	assert_eq "exec exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	home=$(sed -n 5p "$OUT")
	if [ -z "$name" ]; then
		case $home in /*/.sandbox-tmp) ;; *) bad "HOME is not the scratch folder: $home" ;; esac
		assert_eq "the sandbox's user, by uid and by name" \
			"sandbox sandbox ${group:-sandbox} $2 $home $home sandbox sandbox:${group:-sandbox} " \
			"$(tr '\n' ' ' <"$OUT")"
	else
		assert_eq "the host's user keeps its name" "$name $name ${group:-sandbox} $name" \
			"$(sed -n '1,3p;7p' "$OUT" | tr '\n' ' ' | sed 's/ $//')"
	fi
}

# Two identities: ids of their own (root) or the manager's (unprivileged); the worktree's files the
# identity's; another identity's uid on the host can neither list nor read them; the same ids after
# a restart, and a new identity the next slot.
test_manager_identity_ids() {
	local a_sid a_wt b_sid b_wt a_uid a_gid b_uid b_gid c_uid
	mgr_repo && mgr_start || return 1
	mgr_session && a_sid=$SID && a_wt=$WT && cp "$OUT" "$TD/wt.$a_sid"
	mgr session create --identity bob --repo "$REPO"
	b_sid=$(jr .session) && b_wt=$(jr .worktree) && cp "$OUT" "$TD/wt.$b_sid"
	mgr_ids "$a_sid" && a_uid=$IDS_UID && a_gid=$IDS_GID
	mgr_ids "$b_sid" && b_uid=$IDS_UID && b_gid=$IDS_GID
	[ "$RUN_UID" -eq 0 ] || assert_match "an unprivileged manager's ids: its user's subordinate ids" \
		"the manager user's /etc/subuid and /etc/subgid entries" "$(jr .ids.from)"
	ids_exec "$a_sid"
	assert_eq "alice's command runs as her ids" "$a_uid $a_gid $a_uid $a_gid 600 " "$IDS_SEEN"
	ids_named "$a_sid" "$a_uid" "$a_gid"
	ids_exec "$b_sid"
	assert_eq "bob's command runs as his ids" "$b_uid $b_gid $b_uid $b_gid 600 " "$IDS_SEEN"
	assert_eq "the worktree is the identity's on the host" "$b_uid" "$(stat -c %u "$b_wt")"
	[ "$a_uid" != "$b_uid" ] && [ "$a_gid" != "$b_gid" ] || bad "two identities share ids: $a_uid:$a_gid"
	{
		# alice's uid, as any host process of it would be, against bob's files
		setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups cat "$b_wt/secret.txt" >/dev/null 2>&1 &&
			bad "alice's uid read bob's file"
		setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups ls "$b_wt" >/dev/null 2>&1 &&
			bad "alice's uid listed bob's worktree"
		setpriv --reuid="$a_uid" --regid="$a_gid" --clear-groups cat "$a_wt/secret.txt" >/dev/null 2>&1 ||
			bad "alice's uid cannot read her own file (the test proves nothing)"
		setpriv --reuid=65534 --regid=65534 --clear-groups cat "$a_wt/secret.txt" >/dev/null 2>&1 &&
			bad "nobody read alice's file"
	}
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	mgr_start || return 1
	mgr_ids "$a_sid"
	assert_eq "alice's ids after a restart" "$a_uid:$a_gid" "$IDS_UID:$IDS_GID"
	ids_exec "$a_sid"
	assert_eq "alice's command after a restart" "$a_uid $a_gid $a_uid $a_gid 600 " "$IDS_SEEN"
	mgr session create --identity carol --repo "$REPO"
	mgr_ids "$(jr .session)" && c_uid=$IDS_UID
	assert_eq "carol: the next slot" "$((b_uid + 1))" "$c_uid"
}
t manager_identity_ids test_manager_identity_ids

# serve_refused WHAT WANT [SERVE ARGS...]: serve exits 125 (or 2 for a usage error: WANT_RC) and
# says WANT.
serve_refused() {
	local what=$1 want=$2
	shift 2
	rm -rf "$TD/refused"
	timeout -k 3 30 "${AS[@]}" "$MANAGER" serve --state-dir "$TD/refused" "$@" >"$TD/serve.out" 2>&1
	assert_eq "$what: exit code" "${WANT_RC:-125}" "$?"
	grep -qF -- "$want" "$TD/serve.out" || bad "$what: expected '$want' in: $(head -c 400 "$TD/serve.out")"
	[ -S "$TD/refused/manager.sock" ] && bad "$what: the manager serves"
}

# What the range must not be: anyone's. Root: a host process or a file in a shared place with an id
# of it, a user's uid, another user's subordinate range, nobody; the old one-uid settings are refused
# with their replacement. Unprivileged: a range at all.
test_manager_identity_ids_refused() {
	local sp f
	WANT_RC=2 serve_refused "sandbox-uid" "sandbox-uid is replaced by sandbox-ids START:COUNT" --sandbox-uid 5000
	WANT_RC=2 serve_refused "a range with nobody" "nor 65534 (nobody)" --sandbox-ids 60000:10000
	WANT_RC=2 serve_refused "a range of one" "COUNT must be at least 2" --sandbox-ids 2000000000:1
	WANT_RC=2 serve_refused "not a range" "sandbox-ids must be START:COUNT" --sandbox-ids 2000000000-5
	if [ "$RUN_UID" -ne 0 ]; then
		serve_refused "an unprivileged manager with a range" "runs sandboxes as its own uid and gid only" \
			--sandbox-ids 2000000000:10
		return
	fi
	serve_refused "sbtest's uid in the range" "user $IT_USER (/etc/passwd) has uid" \
		--sandbox-ids "$(id -u "$IT_USER"):10"
	serve_refused "sbtest's subordinate range" "/etc/subuid gives another user the overlapping range" \
		--sandbox-ids "$(awk -F: -v u="$IT_USER" '$1 == u { print $2 + 5; exit }' /etc/subuid):10"
	setpriv --reuid=2000000005 --regid=2000000005 --clear-groups sleep 60 &
	sp=$!
	sleep 0.3
	serve_refused "a host process with an id of the range" "process $sp (sleep) of the host runs with id 2000000005" \
		--sandbox-ids 2000000000:10
	kill "$sp"
	wait "$sp" 2>/dev/null
	f=$(mktemp /var/tmp/sbu.ids.XXXXXX)
	chown 2000000007:2000000007 "$f"
	serve_refused "a file with an id of the range" "$f belongs to uid 2000000007, gid 2000000007" --sandbox-ids 2000000000:10
	rm -f "$f"
	# and with none of these, the same range serves
	mgr_repo && mgr_start --sandbox-ids 2000000000:10 && mgr_session && mgr_ids
	assert_eq "alice: the range's first identity slot" 2000000001 "$IDS_UID"
}
t manager_identity_ids_refused test_manager_identity_ids_refused

# A used-up range refuses a new identity with the reason, and makes nothing for it; the identities
# that have ids go on.
test_manager_identity_ids_used_up() {
	[ "$RUN_UID" -eq 0 ] || { skip "the range is a root manager's (unprivileged: tested refused above)"; return; }
	mgr_repo && mgr_start --sandbox-ids 2000000000:3 || return 1
	mgr_session
	mgr session create --identity bob --repo "$REPO"
	assert_eq "bob gets the last slot" 0 "$RC"
	mgr session create --identity carol --repo "$REPO"
	assert_eq "carol: exit code" 125 "$RC"
	grep -qF "the manager's id range is used up: its 2 slots are given to 2 identities" "$ERR" ||
		bad "carol's refusal: $(head -c 300 "$ERR")"
	[ -e "$MSTATE/volume/identities/carol" ] && bad "carol's directory was made"
	mgr exec --session "$SID" -- 'id -u'
	assert_eq "alice goes on" "0 2000000001" "$RC $(cat "$OUT")"
}
t manager_identity_ids_used_up test_manager_identity_ids_used_up

# An unprivileged manager's ids of its own for each identity: `sandbox-ids subuid` moves the daemon
# into a user namespace mapping its uid to 0 and its user's subordinate ids to themselves
# (newuidmap, newgidmap), where it is a root manager of those ids only. Root has no entries here:
# asked for them, it is a usage error naming the files.
test_manager_identity_ids_subuid() {
	local a_sid a_wt b_sid b_wt a_uid b_uid b_gid start count holder
	if [ "$RUN_UID" -eq 0 ]; then
		serve_refused "root without entries" "root has no entry in /etc/subuid and /etc/subgid" \
			--sandbox-ids subuid
		return
	fi
	start=$(awk -F: -v u="$RUN_USER" '$1 == u { print $2; exit }' /etc/subuid)
	count=$(awk -F: -v u="$RUN_USER" '$1 == u { print $3; exit }' /etc/subuid)
	[ -n "$start" ] || { skip_setup "$RUN_USER has no /etc/subuid entry"; return; }
	# the identities' ids walk to their worktrees, as under a root manager
	chmod 0711 "$TD"
	mgr_repo && mgr_start --sandbox-ids subuid || return 1
	assert_eq "the daemon's uid map" "0 $RUN_UID 1 $start $start $count" "$(tr -s ' \n' ' ' </proc/"$MGR_PID"/uid_map | sed 's/^ //; s/ $//')"
	mgr_session && a_sid=$SID && a_wt=$WT && cp "$OUT" "$TD/wt.$a_sid"
	mgr session create --identity bob --repo "$REPO"
	b_sid=$(jr .session) && b_wt=$(jr .worktree) && cp "$OUT" "$TD/wt.$b_sid"
	mgr session show --session "$a_sid"
	a_uid=$(jr .ids.uid)
	assert_match "where the ids come from" "the manager user's /etc/subuid and /etc/subgid entries" "$(jr .ids.from)"
	mgr session show --session "$b_sid"
	b_uid=$(jr .ids.uid) b_gid=$(jr .ids.gid)
	[ "$a_uid" -gt "$start" ] && [ "$a_uid" -lt $((start + count)) ] && [ "$b_uid" -ne "$a_uid" ] ||
		bad "ids outside $RUN_USER's subordinate range, or shared: alice $a_uid, bob $b_uid"
	ids_exec "$a_sid"
	assert_eq "alice's command runs as her ids" "$a_uid $a_uid $a_uid $a_uid 600 " "$IDS_SEEN"
	ids_exec "$b_sid"
	assert_eq "bob's command runs as his ids" "$b_uid $b_gid $b_uid $b_gid 600 " "$IDS_SEEN"
	assert_eq "bob's file on the host is his id's" "$b_uid" "$(stat -c %u "$b_wt/secret.txt")"
	setpriv --reuid="$a_uid" --regid="$a_uid" --clear-groups cat "$b_wt/secret.txt" >/dev/null 2>&1 &&
		bad "alice's uid read bob's file"
	"${AS[@]}" cat "$b_wt/secret.txt" >/dev/null 2>&1 && bad "the manager's user read bob's file outside its namespace"
	holder=$(cat "$MSTATE/userns-holder")
	assert_eq "the namespace's holder" sbm-userns "$(cat "/proc/$holder/comm" 2>/dev/null)"
	kill -KILL "$MGR_PID"
	wait "$MGR_PID" 2>/dev/null
	# the restarted manager joins the namespace, so it reaches the sandboxes left running
	mgr_start --sandbox-ids subuid || return 1
	assert_eq "the same namespace" "$(readlink "/proc/$holder/ns/user")" "$(readlink "/proc/$MGR_PID/ns/user")"
	ids_exec "$a_sid"
	assert_eq "alice's ids after a restart" "$a_uid $a_uid $a_uid $a_uid 600 " "$IDS_SEEN"
}
t manager_identity_ids_subuid test_manager_identity_ids_subuid

# `sandbox-ids own`: an unprivileged manager asked for one uid, its own, for every identity (said by
# session show, warned at start); root: a usage error. And a state directory below a closed
# directory (a 0700 home): the identities' own ids all the same, root's and the subordinate ones.
test_manager_identity_ids_own() {
	local closed uid
	if [ "$RUN_UID" -eq 0 ]; then
		WANT_RC=2 serve_refused "root asking for its own ids" "sandbox-ids must be START:COUNT" --sandbox-ids own
		# A root manager's state directory below one only root may search: sandbox init walks
		# there as uid 0 without capabilities, and as the identity's uid only below.
		closed=$(mktemp -d /tmp/sbm.XXXXXX) && chmod 0700 "$closed" && MSTATE=$closed/s && mkdir -m 0700 "$MSTATE" ||
			return 1
		mgr_repo && mgr_start && mgr_session || return 1
		cp "$OUT" "$TD/wt.$SID"
		mgr_ids "$SID"
		ids_exec "$SID"
		assert_eq "root, a closed directory above the state: the identity's ids" "$IDS_UID $IDS_UID 600" \
			"$(echo "$IDS_SEEN" | awk '{ print $1, $3, $5 }')"
		mgr_cleanup
		rmdir "$closed"
		return
	fi
	mgr_repo && mgr_start --sandbox-ids own && mgr_session || return 1
	mgr session show --session "$SID"
	assert_eq "the manager's own ids" "$RUN_UID" "$(jr .ids.uid)"
	assert_json .ids.from '"the manager'"'"'s own (an unprivileged manager maps only its own ids)"'
	ids_named "$SID" "$RUN_UID" "$(jr .ids.gid)"
	grep -q "every identity's sandboxes run as this manager's own uid" "$TD/manager.log" || bad "no warning at start"
	# An upgrade: a volume whose identities were made with the manager's own ids keeps them by
	# default (their files are the user's, which no subordinate id may write), and says how to move.
	kill -KILL "$MGR_PID" && wait "$MGR_PID" 2>/dev/null
	mgr_start || return 1
	mgr session show --session "$SID"
	assert_eq "an upgraded volume: the manager's own ids still" "$RUN_UID" "$(jr .ids.uid)"
	grep -q "not the default here: the volume's identities were made with the manager's own ids" "$TD/manager.log" ||
		bad "the upgrade's warning is missing"
	[ -s "$MSTATE/userns-holder" ] && bad "an upgraded volume's start made a subuid namespace"
	# A state directory below a directory of the user's that no one else may search (0700, as a
	# Debian 12 home is): no range id may walk there, and none has to (sandbox init opens the
	# host paths as the user before it takes the identity's uid: sandbox_init.c sources_open()).
	# The subordinate ids are the default there too, and a call runs as one of them.
	mgr_cleanup
	closed=$(mktemp -d /tmp/sbm.XXXXXX) && chown "$RUN_USER:" "$closed" && chmod 0700 "$closed" || return 1
	MSTATE=$closed/s
	mkdir_user "$MSTATE" && chmod 0700 "$MSTATE" || return 1
	mgr_start && mgr_session || return 1
	cp "$OUT" "$TD/wt.$SID"
	mgr session show --session "$SID"
	assert_match "a closed directory above the state: the subordinate ids" "/etc/subuid" "$(jr .ids.from)"
	uid=$(jr .ids.uid)
	[ "$uid" -ne "$RUN_UID" ] || bad "a closed directory above the state: the manager's own uid $uid"
	ids_exec "$SID"
	assert_eq "its command runs as its identity's id, its file that id's" "$uid $uid 600" \
		"$(echo "$IDS_SEEN" | awk '{ print $1, $3, $5 }')"
	mgr_cleanup
	rmdir "$closed"
}
t manager_identity_ids_own test_manager_identity_ids_own

# A manager started under umask 077 (a hardened login, a unit's UMask=): its sandboxes still walk
# into the identity's base clone and read it, because the daemon makes what they read with the
# layout's modes, not its starter's umask (daemon.c daemon_serve); what must stay private stays so,
# and a command's own files are still its uid's alone (the agent's umask 077 for the command).
test_manager_umask_strict() {
	local mode
	mgr_repo || return 1
	umask 077
	mgr_start && mgr_session || return 1
	mgr exec --session "$SID" -- 'git log --format=%s -1; cat payments/* >/dev/null && echo read; git status --porcelain | wc -l;
		echo new > new.txt; stat -c %a new.txt; umask'
	assert_eq "exec exit code (stderr: $(head -c 300 "$ERR"))" 0 "$RC"
	assert_eq "under umask 077: the repository read, the command's own file 0600" "manifests read 0 600 0077 " \
		"$(tr '\n' ' ' <"$OUT")"
	mgr exec --session "$SID" -- 'git add -A && git -c user.name=t -c user.email=t@example.invalid commit -qm two && git log --format=%s -1'
	assert_eq "a commit under umask 077 (stderr: $(head -c 300 "$ERR"))" "two" "$(cat "$OUT")"
	mode=$(stat -c %a "$MSTATE/records.db")
	assert_eq "the records stay the manager's alone" 600 "$mode"
	mode=$(stat -c %a "$MSTATE")
	case $mode in 700 | 711) ;; *) bad "the state directory is $mode" ;; esac
}
t manager_umask_strict test_manager_umask_strict

# The base clone closed by hand (an operator's chmod 0700, what an inherited umask 077 once did): the
# sandbox cannot start, and the call is refused with one clear message: the session and generation
# named once, sandbox init's step and its cause once (process_launch.c setup_wait, sandbox.c
# sandbox_acquire). The mode given back, the next call runs.
test_manager_base_clone_closed() {
	local base msg
	mgr_repo && mgr_start && mgr_session || return 1
	base=$MSTATE/volume/identities/alice/repositories/repo
	[ -d "$base" ] || { bad "no base clone at $base"; return 1; }
	as_in_manager_ns chmod 0700 "$base" || return 1
	mgr exec --session "$SID" -- 'echo ran'
	assert_eq "a call on a closed base clone" 125 "$RC"
	msg=$(cat "$ERR")
	assert_match "the step and its cause" "making the mount point $base/packed-refs.d: Permission denied" "$msg"
	assert_eq "the session named once" 1 "$(grep -o "preparing the sandbox of session $SID" <<<"$msg" | wc -l)"
	assert_eq "one cause" 0 "$(grep -c 'Permission denied: Operation not permitted' <<<"$msg")"
	as_in_manager_ns chmod 0755 "$base" || return 1
	mgr exec --session "$SID" -- 'echo ran'
	assert_eq "the next call, the mode given back (stderr: $(head -c 300 "$ERR"))" ran "$(cat "$OUT")"
}
t manager_base_clone_closed test_manager_base_clone_closed
