#!/usr/bin/env bash
# sluice run --fs ask: the first open of a path outside the read allow-list waits for `sluicectl
# approve|deny` (or --ask-timeout), in real sandboxes, as root and as an unprivileged user. Also: the
# races that must not get around the gate (symlinks, /proc/self/root, dirfds, O_PATH reopens, renames,
# hard links to a secret), masked paths never asked, "fs_read", the choice of mode (relaxed without a
# terminal or with CI), relaxed unchanged, who may decide (SO_PEERCRED), the audit records, and the
# exit note of discarded overlay changes.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"
CTL="$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl"
[ -x "$CTL" ] || skip_all "sluicectl not built"
[ -c /dev/fuse ] || skip_all "no /dev/fuse"

# wait_ask MODE PATH: prints the id of the held open of PATH once `sluicectl asks` (as MODE) lists it.
wait_ask() {
	local id
	for _ in $(seq 100); do
		id=$(as "$1" "$CTL" asks --json 2>/dev/null | python3 -c '
import json, sys
for a in json.load(sys.stdin):
    if a.get("kind") == "fs" and a["path"] == sys.argv[1]:
        print(a["id"]); break' "$2" 2>/dev/null)
		[ -n "$id" ] && { echo "$id"; return 0; }
		sleep 0.1
	done
	return 1
}

for m in $MODES; do
	H=$(home "$m")
	P=$(newdir "$m")
	D=$(newdir "$m") # outside every allow-list: $SB_T is under /var/lib
	A="$SB_T/audit-$m"
	mkdir -p "$A"
	[ "$m" = root ] || chown "$TU:$TU" "$A"
	LOG="$A/fs.log"
	cd "$P" || exit 1
	echo "secret-$m" >"$D/a.txt"
	echo "other-$m" >"$D/b.txt"
	mkdir -p "$D/sub" "$H/.ssh"
	echo "sub-$m" >"$D/sub/c.txt"
	echo "SSH-$m" >"$H/.ssh/id_test"
	ln -f "$H/.ssh/id_test" "$D/hardlink" # the same file as the masked key, under another name
	ln -sfn "$D/a.txt" "$P/link"
	echo original >"$P/keep.txt"
	echo doomed >"$P/doomed.txt"
	[ "$m" = root ] || chown -R "$TU:$TU" "$D" "$H/.ssh" "$P"
	run() { sb "$m" --fs ask --audit-log "$LOG" "$@"; }

	# --- a read waits, then succeeds after approve ---
	out="$SB_T/out-$m"
	( bg_exec "$m" "$SLUICE" run --fs ask --audit-log "$LOG" --ask-timeout 30 -- cat "$D/a.txt" >"$out" 2>"$out.err" ) &
	pid=$!
	id=$(wait_ask "$m" "$D/a.txt")
	check "$m: the open of $D/a.txt is held and listed (kind fs)" test -n "$id"
	sleep 0.3
	check "$m: the command is still waiting" kill -0 "$pid"
	check_match "$m: the launcher says what waits and how to decide" "sluicectl approve $id" "$(cat "$out.err")"
	check "$m: the session's user approves it" q as "$m" "$CTL" approve "$id"
	wait "$pid"
	st=$?
	check_eq "$m: after approval the read succeeds" "0 secret-$m" "$st $(cat "$out")"

	# --- deny: EACCES ---
	( bg_exec "$m" "$SLUICE" run --fs ask --audit-log "$LOG" --ask-timeout 30 -- sh -c 'cat "$1" 2>&1; echo "rc=$?"' sh "$D/b.txt" >"$out" 2>/dev/null ) &
	pid=$!
	id=$(wait_ask "$m" "$D/b.txt")
	check "$m: deny" q as "$m" "$CTL" deny "$id"
	wait "$pid"
	check_match "$m: after denial the read fails with EACCES" "Permission denied.*rc=1" "$(tr '\n' ' ' <"$out")"

	# --- --subtree: one approval for a directory and what is beneath ---
	( bg_exec "$m" "$SLUICE" run --fs ask --audit-log "$LOG" --ask-timeout 30 -- sh -c 'ls "$1" && cat "$1/c.txt"' sh "$D/sub" >"$out" 2>/dev/null ) &
	pid=$!
	id=$(wait_ask "$m" "$D/sub")
	check "$m: approve --subtree" q as "$m" "$CTL" approve --subtree "$id"
	wait "$pid"
	check_eq "$m: the listing and the file beneath need no second question" "c.txt sub-$m" "$(tr '\n' ' ' <"$out" | sed 's/ $//')"

	# --- timeout denies ---
	t0=$(date +%s%N)
	o=$(run --ask-timeout 1 -- sh -c 'cat "$1" 2>&1; echo "rc=$?"' sh "$D/a.txt" 2>&1)
	t1=$(date +%s%N)
	check_match "$m: nobody decides: denied after --ask-timeout" "nobody decided in 1 s.*Permission denied.*rc=1" "$(echo "$o" | tr '\n' ' ')"
	check "$m: ... after about a second ($(((t1 - t0) / 1000000)) ms)" test $(((t1 - t0) / 1000000)) -ge 900

	# --- the opener gives up (here: the session's --timeout kills it): no wait for the decision ---
	t0=$(date +%s%N)
	st=$(run --ask-timeout 60 --timeout 1 -- cat "$D/a.txt" >/dev/null 2>&1; echo $?)
	t1=$(date +%s%N)
	check_eq "$m: a session killed while an open is held ends with --timeout's status" 124 "$st"
	check "$m: ... at once, not when the question would time out ($(((t1 - t0) / 1000000)) ms)" test $(((t1 - t0) / 1000000)) -lt 10000
	check "$m: audit: an \"abandoned\" record" grep -q '"event":"abandoned"' "$LOG"

	# --- masked paths: denied at once, never asked (also under another name: a hard link) ---
	t0=$(date +%s%N)
	o=$(run --ask-timeout 20 -- sh -c 'cat "$1" 2>&1; cat "$2" 2>&1; echo "rc=$?"' sh "$H/.ssh/id_test" "$D/hardlink" 2>&1)
	t1=$(date +%s%N)
	check_not "$m: a masked key is not readable" grep -q "SSH-$m" <<<"$o"
	check_not "$m: ... nor asked about" grep -q "is held (asked by" <<<"$o"
	check "$m: ... and refused at once ($(((t1 - t0) / 1000000)) ms)" test $(((t1 - t0) / 1000000)) -lt 5000

	# --- a masked path refused in a loop does not fill the user's disk with records ---
	before=$(grep -c '"event":"masked"' "$LOG")
	run -- python3 -c '
import os, sys
for _ in range(3000):
    try:
        os.stat(sys.argv[1])
    except OSError:
        pass' "$H/.ssh/id_test" >/dev/null 2>&1
	after=$(grep -c '"event":"masked"' "$LOG")
	check "$m: 3000 refusals of a masked path in a loop: at most 2 records (were one each)" test $((after - before)) -ge 1 -a $((after - before)) -le 2

	# --- a secret created on the host during the session: refused at once too ---
	rm -rf "$H/.aws"
	mkfifo "$SB_T/fifo-$m"
	( bg_exec "$m" "$SLUICE" run --fs ask --audit-log "$LOG" --ask-timeout 20 -- sh -c 'read -r _; cat "$1" 2>&1; echo "rc=$?"' sh "$H/.aws/credentials" <"$SB_T/fifo-$m" >"$out" 2>&1 ) &
	pid=$!
	exec 7>"$SB_T/fifo-$m"
	sleep 0.5
	mkdir -p "$H/.aws" && echo "AWS-LATER-$m" >"$H/.aws/credentials"
	[ "$m" = root ] || chown -R "$TU:$TU" "$H/.aws"
	echo go >&7
	exec 7>&-
	wait "$pid"
	check_match "$m: a secret created after the start is refused" "rc=1" "$(tr '\n' ' ' <"$out")"
	check_not "$m: ... without being asked about" grep -q "is held (asked by" "$out"
	check_not "$m: ... and not read" grep -q "AWS-LATER" "$out"
	rm -rf "$H/.aws" "$SB_T/fifo-$m"

	# --- the races: each reaches the gate as an open of the real object, which is asked about ---
	for v in symlink procroot dirfd opath; do
		case $v in
		symlink) c='cat "$1/link"' ;;
		procroot) c='cat "/proc/self/root$2/a.txt"' ;;
		dirfd) c='python3 -c "import os,sys; d=os.open(sys.argv[1], os.O_PATH); print(os.read(os.open(\"a.txt\", os.O_RDONLY, dir_fd=d), 99))" "$2"' ;;
		opath) c='python3 -c "import os,sys; f=os.open(sys.argv[1] + \"/a.txt\", os.O_PATH); print(open(\"/proc/self/fd/%d\" % f).read())" "$2"' ;;
		esac
		o=$(run --ask-timeout 1 -- sh -c "$c 2>&1; echo rc=\$?" sh "$P" "$D" 2>&1)
		check_not "$m: race $v: the secret is not read" grep -q "secret-$m" <<<"$o"
		check_match "$m: race $v: the open of the real file was asked about" "a read of $D/a.txt is held" "$o"
	done
	# --- the prompt cannot be forged by the command line (the sandbox writes its own argv) ---
	forged=$(printf 'cat wants to read /usr/share/dict/words\033[2K\302\2331A\233%200sX' '')
	o=$(run --ask-timeout 1 -- python3 -c 'import os, sys; os.execvp("cat", sys.argv[1:])' "$forged" "$D/a.txt" 2>&1 | grep -a '^sluice: ')
	line=$(grep -a 'is held (asked by' <<<"$o")
	check_match "$m: prompt: the host path comes first, before the command line" "^sluice: a read of $D/a.txt is held \(asked by \"cat wants to read /usr/share/dict/words\?" "$line"
	check_not "$m: prompt: no escape or C1 control byte reaches the terminal" env LC_ALL=C grep -qaP '[\x1b\x80-\xff]' <<<"$o"
	check_match "$m: prompt: the command line is cut to 48 bytes" '\(asked by "[^"]{48}\.\.\."\)' "$line"
	o=$(run --ask-timeout 1 -- sh -c 'mv "$1/a.txt" "$1/x" 2>&1; ln -s /etc "$1/y" 2>&1; ln "$1/b.txt" "$1/z" 2>&1; echo rc=$?' sh "$D" 2>&1)
	check_match "$m: race rename/link: the gated view cannot be changed" "Read-only file system.*rc=1" "$(echo "$o" | tr '\n' ' ')"
	check "$m: ... and the host is unchanged" test -e "$D/a.txt" -a ! -e "$D/x" -a ! -e "$D/y" -a ! -e "$D/z"

	# --- audit records: asked, approved, denied, timed out, masked ---
	for ev in asked approved denied timed-out masked; do
		check "$m: audit: an \"$ev\" record" grep -q "\"protocol\":\"fs\",\"event\":\"$ev\"" "$LOG"
	done
	check "$m: audit: the approver is named" grep -q "\"event\":\"approved\".*\"by\":$([ "$m" = root ] && echo 0 || echo "$TU_UID")" "$LOG"

	# --- "fs_read": configured paths need no question ---
	mkdir -p "$H/.config/sluice"
	printf '{"sandbox": {"fs_read": ["%s"]}}\n' "$D" >"$H/.config/sluice/policy.json"
	[ "$m" = root ] || chown -R "$TU:$TU" "$H/.config"
	check_eq "$m: fs_read: read without asking" "secret-$m" "$(run --ask-timeout 1 -- cat "$D/a.txt" 2>/dev/null)"
	rm -f "$H/.config/sluice/policy.json"

	# --- --remember user|project: the next session reads without asking; explain names the layer ---
	for layer in user project; do
		f="$D/rem-$layer.txt"
		echo "rem-$layer-$m" >"$f"
		[ "$m" = root ] || chown "$TU:$TU" "$f"
		( bg_exec "$m" "$SLUICE" run --fs ask --audit-log "$LOG" --ask-timeout 30 -- cat "$f" >"$out" 2>/dev/null ) &
		pid=$!
		id=$(wait_ask "$m" "$f")
		check "$m: approve --remember $layer" q as "$m" "$CTL" approve "$id" --remember "$layer"
		wait "$pid"
		check_eq "$m: remember $layer: this session read it" "rem-$layer-$m" "$(cat "$out")"
		check_eq "$m: remember $layer: the next session reads it without asking" "rem-$layer-$m" \
			"$(run --ask-timeout 1 -- cat "$f" 2>/dev/null)"
		check_match "$m: remember $layer: policy explain --path names the layer" "the $layer layer .* has \"fs_read\": \"$f\"" \
			"$(as "$m" "$CTL" policy explain --path "$f")"
	done
	check "$m: remember: the project file is the session's project's" grep -q "rem-project.txt" "$P/.sluice/policy.json"
	check "$m: audit: a \"remembered\" record" grep -q '"event":"remembered","decision":"user"' "$LOG"
	check_eq "$m: explain: a masked path is denied (exit 1)" 1 "$(as "$m" "$CTL" policy explain --path "$H/.ssh/id_test" >/dev/null 2>&1; echo $?)"
	check_eq "$m: explain: an outside path is asked about (exit 3)" 3 "$(as "$m" "$CTL" policy explain --path "$D/a.txt" >/dev/null 2>&1; echo $?)"
	rm -rf "$H/.config/sluice" "$P/.sluice"

	# --- the choice of mode ---
	check_match "$m: no terminal: relaxed, and -v says why" "fs: relaxed \(no terminal" "$(sb "$m" -v -- true 2>&1 </dev/null)"
	check_match "$m: CI set: relaxed" "fs: relaxed \(CI is set" "$(SB_ENV="CI=true" as "$m" script -qec "$SLUICE run -v -- true" /dev/null 2>&1 </dev/null | tr -d '\r'; true)"
	check_match "$m: a terminal: ask" "fs: ask \(a terminal" "$(as "$m" script -qec "$SLUICE run -v -- true" /dev/null 2>&1 </dev/null | tr -d '\r')"
	check_not "$m: relaxed is unchanged: the outside path does not exist" sb "$m" --fs relaxed -- test -e "$D/a.txt"
	check "$m: ask: the home is writable (a layer of the session's)" run -- sh -c "mkdir -p $H/.cache/x && echo w > $H/.cache/x/f && test -s $H/.cache/x/f"
	check_not "$m: ... and the host's home is unchanged" test -e "$H/.cache/x/f"
	check "$m: relaxed: the home is the empty writable tmpfs" sb "$m" --fs relaxed -- sh -c "touch $H/new && test ! -e $H/.ssh/id_test"
	check_not "$m: --fs ask with --profile unsafe is refused" sb "$m" --fs ask --profile unsafe -- true
	o=$(sb "$m" --fs ask --audit-log /proc/none/fs.log -- true 2>&1)
	check_eq "$m: no audit log, no session (125)" 125 "$(sb "$m" --fs ask --audit-log /proc/none/fs.log -- true >/dev/null 2>&1; echo $?)"
	check_match "$m: ... with one line saying why" "^sluice: --fs ask records every decision, but the audit log /proc/none/fs.log cannot be opened" "$o"

	# --- exit note of discarded overlay changes (relaxed and ask alike) ---
	o=$(sb "$m" --fs relaxed -- sh -c 'echo x >new.txt; echo y >>keep.txt; rm doomed.txt' 2>&1)
	check_match "$m: exit note: counts" "1 file changed, 1 added, 1 removed" "$o"
	# the command that keeps them: the same options and command with --save, quoted for sh (read back by shlex)
	check_eq "$m: exit note: the command that keeps them, pasteable" \
		"sluice|run|--fs|relaxed|--save|--|sh|-c|echo x >new.txt; echo y >>keep.txt; rm doomed.txt" \
		"$(sed -n 's/^sluice:   //p' <<<"$o" | python3 -c 'import shlex, sys; print("|".join(shlex.split(sys.stdin.read())))')"
	# an --env VALUE is not repeated (a CI script's --env TOKEN="$TOKEN" would put the token in its log);
	# a name passed through, and the other options, are
	o=$(sb "$m" --fs relaxed --env TOKEN=tok-s3cret --env=KEY=key-s3cret --env HOME --hostname x -- sh -c 'echo x >new3.txt' 2>&1)
	check_eq "$m: exit note with --env NAME=VALUE: the values left out, the rest as given" \
		"sluice|run|--fs|relaxed|--env|TOKEN=...|--env=KEY=...|--env|HOME|--hostname|x|--save|--|sh|-c|echo x >new3.txt" \
		"$(sed -n 's/^sluice:   //p' <<<"$o" | python3 -c 'import shlex, sys; print("|".join(shlex.split(sys.stdin.read())))')"
	check_not "$m: ... no value anywhere in what it printed" grep -q s3cret <<<"$o"
	check_match "$m: ... and it says so" "the values given to --env are left out: write them again" "$o"
	check_not "$m: no note with --save" grep -q discarding <<<"$(sb "$m" --save -- sh -c 'echo x >new2.txt' 2>&1)"
	check_eq "$m: no session directory is left behind (but the --save one)" 1 "$(session_dirs "$m")"
	rm -rf "$(if [ "$m" = root ]; then echo "$ROOT_RT/sluice"; else echo "/var/tmp/sluice-$TU_UID"; fi)"/*
done

# --- the organisation layer (root; /etc overlaid in a private mount namespace, the machine's untouched) ---
ORG="$SB_T/org"
mkdir -p "$ORG/upper/sluice" "$ORG/work"
chmod 755 "$ORG/upper/sluice"
# in_org CMD...: CMD as root with $ORG/upper over /etc (the same upper each time: what it writes stays)
in_org() {
	unshare -m --propagation private bash -c \
		'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/upper,workdir=$1/work" /etc && shift && exec "$@"' \
		bash "$ORG" env -i HOME="$ROOT_HOME" XDG_RUNTIME_DIR="$ROOT_RT" PATH=/usr/local/bin:/usr/bin:/bin "$@"
}
D=$(newdir root)
P=$(newdir root)
cd "$P" || exit 1
echo "org-file" >"$D/o.txt"
mkdir -p "$ROOT_HOME/.aws"
echo "AWS-KEY" >"$ROOT_HOME/.aws/credentials"
# a root launch's command (and gate) read as an unprivileged uid: let it into the fake home
chmod 755 "$ROOT_HOME" "$ROOT_HOME/.aws"
( in_org "$SLUICE" run --fs ask --audit-log "$SB_T/audit-root/fs.log" --ask-timeout 30 -- cat "$D/o.txt" >"$SB_T/out-o" 2>/dev/null ) &
pid=$!
id=$(wait_ask root "$D/o.txt")
check "org: approve --remember org" q in_org "$CTL" approve "$id" --remember org
wait "$pid"
check "org: written to the organisation file" grep -q "o.txt" "$ORG/upper/sluice/policy.json"
check_eq "org: the next session reads it without asking" "org-file" "$(in_org "$SLUICE" run --fs ask --ask-timeout 1 -- cat "$D/o.txt" 2>/dev/null)"
check_match "org: explain names the organisation layer" "the organisation layer" "$(in_org "$CTL" policy explain --path "$D/o.txt")"
# the organisation fixes the mode: --fs cannot change it, and no terminal does not make it relaxed
printf '{"sandbox": {"fs": "ask"}}\n' >"$ORG/upper/sluice/policy.json"
check_match "org: \"fs\": \"ask\" refuses --fs relaxed" "organisation policy .* sets \"fs\": \"ask\"" "$(in_org "$SLUICE" run --fs relaxed -- true 2>&1)"
check_match "org: ... and holds without a terminal" "fs: ask \(set by the organisation\)" "$(in_org "$SLUICE" run -v -- true 2>&1 </dev/null)"
# the organisation forbids remembering: nothing is written, nothing decided
printf '{"sandbox": {"allow_fs_remember": false, "unmask": ["~/.aws"]}}\n' >"$ORG/upper/sluice/policy.json"
echo "no-remember" >"$D/n.txt"
( in_org "$SLUICE" run --fs ask --ask-timeout 5 -- cat "$D/n.txt" >"$SB_T/out-n" 2>/dev/null ) &
pid=$!
id=$(wait_ask root "$D/n.txt")
o=$(in_org "$CTL" approve "$id" --remember user 2>&1)
check_match "org: \"allow_fs_remember\": false refuses --remember" "forbids remembering" "$o"
check_not "org: ... and the user file is not written" test -e "$ROOT_HOME/.config/sluice/policy.json"
check "org: approve without --remember still works" q in_org "$CTL" approve "$id"
wait "$pid"
check_eq "org: ... and the read goes through" "no-remember" "$(cat "$SB_T/out-n")"
# "unmask" (masks.c): the unmasked ~/.aws is asked about (and here denied by the timeout) instead of refused
o=$(in_org "$SLUICE" run --fs ask --ask-timeout 1 -- cat "$ROOT_HOME/.aws/credentials" 2>&1)
check_match "org: an unmasked path is asked about" "a read of $ROOT_HOME/.aws/credentials is held" "$o"
check_not "org: ... and not read without an answer" grep -q AWS-KEY <<<"$o"
rm -rf "$ROOT_HOME/.config/sluice" "$ROOT_HOME/.aws"
chmod 700 "$ROOT_HOME"

# --- who may decide: a user cannot see or answer root's held opens; root answers anyone's ---
D=$(newdir root)
echo "rootonly" >"$D/r.txt"
( bg_exec root "$SLUICE" run --fs ask --audit-log "$SB_T/audit-root/fs.log" --ask-timeout 30 -- cat "$D/r.txt" >"$SB_T/out-x" 2>/dev/null ) &
pid=$!
id=$(wait_ask root "$D/r.txt")
check_eq "peercred: the user does not see root's held open" "" "$(as user "$CTL" asks --json 2>/dev/null | grep -o "$id")"
check_not "peercred: nor can the user approve it" q as user "$CTL" approve "$id"
check "peercred: root can" q as root "$CTL" approve "$id"
wait "$pid"
check_eq "peercred: root's approval opened it" "rootonly" "$(cat "$SB_T/out-x")"
# a user's session: root sees and decides it too
P=$(newdir user)
cd "$P" || exit 1
D=$(newdir user)
echo "useronly" >"$D/u.txt"
chown "$TU:$TU" "$D/u.txt"
( bg_exec user "$SLUICE" run --fs ask --ask-timeout 30 -- cat "$D/u.txt" >"$SB_T/out-u" 2>/dev/null ) &
pid=$!
id=$(wait_ask root "$D/u.txt")
check "peercred: root sees a user's held open" test -n "$id"
check "peercred: and approves it" q as root "$CTL" approve "$id"
wait "$pid"
check_eq "peercred: root's approval opened the user's file" "useronly" "$(cat "$SB_T/out-u")"

# --- squatted gate names: abstract names belong to whoever binds them first. A user binds one under
# root's uid (it must not be talked to) and one under its own that never answers (it must not hold
# root's sluicectl) ---
SQ=$(newdir user)
# squat DIR NAME: as the user, listens on the abstract NAME, never answers, and makes DIR/told when a
# client sends anything
squat() {
	( bg_exec user python3 -c '
import socket, select, sys
d, name = sys.argv[1], sys.argv[2]
l = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
l.bind(b"\0" + name.encode())
l.listen(8)
open(d + "/ready", "w").close()
conns = []
while True:
    r, _, _ = select.select([l] + conns, [], [])
    for s in r:
        if s is l:
            conns.append(l.accept()[0])
        elif s.recv(65536):
            open(d + "/told", "w").close()
        else:
            conns.remove(s)
            s.close()
' "$1" "$2" ) &
	sqpid=$!
	for _ in $(seq 50); do [ -e "$1/ready" ] && break; sleep 0.1; done
}
squat "$SQ" "sluice-fs/0/squatted00000000"
timeout 30 env -i PATH=/usr/bin:/bin "$CTL" asks --json >/dev/null 2>&1
check_not "squat: root's sluicectl tells nothing to a socket that claims root's uid but is the user's" test -e "$SQ/told"
kill "$sqpid" 2>/dev/null
wait "$sqpid" 2>/dev/null
rm -f "$SQ/ready" "$SQ/told"
squat "$SQ" "sluice-fs/$TU_UID/silent0000000000"
t0=$(date +%s%N)
timeout 30 env -i PATH=/usr/bin:/bin "$CTL" asks --json >/dev/null 2>&1
st=$?
t1=$(date +%s%N)
check "squat: root's sluicectl asks is not held by a gate of a user's that never answers" test "$st" -ne 124 -a $(((t1 - t0) / 1000000)) -lt 10000
check "squat: ... which it did ask (a user's own gate is talked to)" test -e "$SQ/told"
kill "$sqpid" 2>/dev/null
wait "$sqpid" 2>/dev/null

done_testing
