#!/usr/bin/env bash
# product_run: what `sluice run --allow-network` tells the user, in the lab. At exit it lists what the
# session was denied (host:port, count, rule) with the flag that would allow it, read from this session's
# own records in the audit log (embedded netd with --audit-log); --quiet prints nothing of sluice's own;
# --verbose names the network session, whose id is the one in the audit log.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
lab_internet_up >/dev/null
lab_forward on

P=$LAB_DIR/proj
H=$LAB_DIR/home
mkdir -p "$P" "$H"
AUDIT=$LAB_DIR/audit.log
# sb ARGS...: sluice run as root (embedded netd: no sluiced in this lab's /run/sluice) in the project
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin "$SLUICE" run --project-mode ro "$@"); }
GET='curl -sS -m 10 -o /dev/null -w %{http_code}\n'

# 1. A run that is denied a host: the summary names it, counts it, and gives the exact flag.
out=$(sb --allow-network --allow allowed.test --audit-log "$AUDIT" -- \
	sh -c "$GET http://allowed.test/; $GET http://other.test/; $GET http://other.test/x; $GET http://evil.test:8080/" 2>"$LAB_DIR/err1")
rc=$?
err=$(cat "$LAB_DIR/err1")
check_eq "the command's status passes through" 0 "$rc"
check_match "allowed.test went through the proxy (200)" '^200' "$out"
check_match "other.test was refused by the proxy (403)" '403' "$out"
check_match "the summary counts the denied requests" 'requests were denied' "$err"
check_match "other.test:80 denied twice, no rule" 'other\.test:80 +2 x +no rule' "$err"
check_match "... with the exact flag to allow it" 'to allow it: --allow other\.test:80 ' "$err"
check_match "... or the policy line" '"other\.test:80" to "allow" in \.sluice/policy\.json' "$err"
check_match "evil.test:8080 denied once with its flag" '--allow evil\.test:8080' "$err"
check_not "the allowed host is not in the summary" grep -q 'allowed\.test' "$LAB_DIR/err1"
check_not "no other messages from sluice or its embedded netd" grep -v -e '^sluice: session' -e '^  ' "$LAB_DIR/err1"
sid=$(sed -n 's/^sluice: session \([0-9a-f]*\): .*denied:$/\1/p' "$LAB_DIR/err1" | head -1)
check_eq "the summary's session id is the one in the audit log's denials" \
	"$sid" "$(jq -r 'select(.decision=="deny" and .host=="other.test") | .session' "$AUDIT" | sort -u)"

# 2. The flag it suggests works.
out=$(sb --allow-network --allow allowed.test --allow other.test:80 --audit-log "$AUDIT" -- sh -c "$GET http://other.test/" 2>"$LAB_DIR/err2")
check_match "with the suggested --allow other.test:80 the request goes through" '^200' "$out"
check_not "... and nothing is summarised" grep -q 'denied' "$LAB_DIR/err2"

# 3. Only this session's records: a second session's summary does not repeat the first one's denials.
sb --allow-network --allow allowed.test --audit-log "$AUDIT" -- sh -c "$GET http://evil.test/" >/dev/null 2>"$LAB_DIR/err3"
check_match "a later session summarises its own denial" 'evil\.test:80 +1 x' "$(cat "$LAB_DIR/err3")"
check_not "... and not the earlier session's" grep -q 'other\.test' "$LAB_DIR/err3"

# 4. A deny rule: --allow cannot override it, and the summary says which rule to change.
printf '{ "allow": ["*.registry.test"], "deny": ["bad.registry.test"] }\n' >"$LAB_DIR/pol.json"
lab_dns_add bad.registry.test 198.18.1.10 >/dev/null
sb --allow-network --policy "$LAB_DIR/pol.json" --audit-log "$AUDIT" -- sh -c "$GET http://bad.registry.test/" >/dev/null 2>"$LAB_DIR/err4"
check_match "a denial by a deny rule names the rule" "bad\.registry\.test:80 +1 x +rule $LAB_DIR/pol\.json:1" "$(cat "$LAB_DIR/err4")"
check_match "... and says --allow cannot override it" '--allow cannot override it' "$(cat "$LAB_DIR/err4")"

# 5. --quiet: nothing of sluice's own, the command's output untouched.
denials() { jq -r 'select(.decision=="deny" and .host=="other.test") | .session' "$AUDIT" | wc -l; }
before=$(denials)
out=$(sb --quiet --allow-network --allow allowed.test --audit-log "$AUDIT" -- sh -c "$GET http://other.test/; echo done >&2" 2>"$LAB_DIR/err5")
check_match "--quiet: the command still ran (403 from the proxy)" '403' "$out"
check_eq "--quiet: stderr holds only the command's own output" "done" "$(cat "$LAB_DIR/err5")"
check_eq "--quiet: the denial was still logged" $((before + 1)) "$(denials)"

# The sessions so far appended to one log (each embedded session reopened it): its hash chain holds.
check "the audit log's hash chain holds across sessions" "$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" log verify "$AUDIT"

# 6. A policy of 5,000 hosts (over the 32 KiB a control message carries inline: it travels in a sealed
# memfd to the embedded netd, and again from it to the proxy engine) works like a small one.
seq 0 4999 | awk 'BEGIN { printf "{ \"allow\": [" } { printf "\"h%d.example.test\", ", $1 } END { print "\"allowed.test\" ] }" }' \
	>"$LAB_DIR/big.json"
check "the 5,000-host policy is over 100 KiB" test "$(stat -c %s "$LAB_DIR/big.json")" -gt 102400
GETL='curl -sS -m 10 -o /dev/null -w "%{http_code}\n"' # one status per line
out=$(sb --allow-network --policy "$LAB_DIR/big.json" -- sh -c "$GETL http://allowed.test/; $GETL http://other.test/" 2>"$LAB_DIR/err-big")
check_eq "a 5,000-host policy: the session starts and the command's status passes through" 0 "$?"
check_match "... a host in it goes through (200)" '^200$' "$(sed -n 1p <<<"$out")"
check_match "... a host not in it is refused (403)" '^403$' "$(sed -n 2p <<<"$out")"
check_not "... and nothing complains about its size" grep -q 'too large' "$LAB_DIR/err-big"

# 7. --verbose: the network session id, the addresses and the audit log it goes to.
sb --verbose --allow-network --allow allowed.test --audit-log "$AUDIT" -- true 2>"$LAB_DIR/err6"
check_match "--verbose names the network session and the audit log" \
	"network session [0-9a-f]+ \\(embedded netd\\).*audit log $AUDIT" "$(cat "$LAB_DIR/err6")"
check_match "--verbose prints the setup steps" 'launcher: cgroups' "$(cat "$LAB_DIR/err6")"
check_eq "--quiet with --verbose is refused (125)" 125 "$(sb -q -v -- true >/dev/null 2>&1; echo $?)"

# 8. Back to back: an embedded helper finishes its kernel clean-up (link, table, lease directory) after
# its launcher returned, while the next launch's helper starts (netd/embedded.c). Without the lock on the
# network namespace (netd/core.c) about one launch in fifteen failed here ("taking the gateway lease ...:
# No such file or directory", or the helper gone), its lease directory or table deleted under it.
fails=0
for i in $(seq 40); do
	sb --allow-network -- true 2>"$LAB_DIR/err8" || { fails=$((fails + 1)); diag "launch $i: $(cat "$LAB_DIR/err8")"; }
done
check_eq "40 embedded launches back to back all start" 0 "$fails"
for _ in $(seq 200); do [ -z "$(nft list ruleset)" ] && break; sleep 0.05; done
check_eq "... and the last helper leaves no nftables table behind" "" "$(nft list ruleset)"

# The network is wired while pid 1 builds the filesystem (docs/sandbox.md "Start-up"); the command runs
# only once it is: the helper stopped before its answer and killed there, the session fails (125) and the
# command never ran.
rm -f "$P/ran"
(cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICED_TEST_STOP_AT=engine "$SLUICE" run --project-mode rw \
	--allow-network -- touch ran) 2>"$LAB_DIR/err-stop" &
lpid=$!
hpid=
for _ in $(seq 200); do
	for c in $(cat /proc/$lpid/task/*/children 2>/dev/null); do
		[ "$(sed -n 's/^State:\t\(.\).*/\1/p' /proc/$c/status 2>/dev/null)" = T ] && hpid=$c
	done
	[ -n "$hpid" ] && break
	sleep 0.05
done
check "the helper stopped before it answered" test -n "$hpid"
sleep 0.3 # pid 1 has built the filesystem by now and waits for the network
check_not "... and the command has not run" test -e "$P/ran"
[ -n "$hpid" ] && kill -9 "$hpid"
wait "$lpid"
check_eq "the session fails when the network step does (125)" 125 "$?"
check_not "... and the command never ran" test -e "$P/ran"
check_match "... saying why" 'sluice: ' "$(cat "$LAB_DIR/err-stop")"

done_testing
