#!/usr/bin/env bash
# learn: `sluice run --learn FILE -- CMD` in the lab. The run reaches what it asks for (except the
# forbidden address ranges and what the organisation denies), FILE then names exactly the hosts it
# reached, `sluicectl policy check` accepts it, and `sluice run --allow-network --policy FILE` of the
# same command succeeds while a host (or port) not in FILE is denied. An existing FILE is never
# overwritten; a shipped preset that covers a reached host is named instead. Through sluiced: an organisation deny rule still denies in learn mode, and an
# organisation `"learn": false` refuses the session before the command runs.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq

SLUICE=$SLUICE_BUILD_DIR/sandbox/sluice
CTL=$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl
lab_internet_up >/dev/null
lab_forward on

P=$LAB_DIR/proj
H=$LAB_DIR/home
mkdir -p "$P" "$H"
AUDIT=$LAB_DIR/audit.log
# sb ARGS...: sluice run as root (embedded netd: no sluiced in this lab's /run/sluice yet) in the project
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin "$SLUICE" run --project-mode ro "$@"); }
GET="curl -sS -m 10 -o /dev/null -w '%{http_code} '"
# the policy without its comment header, as compact JSON
body() { grep -v '^//' "$1" | jq -c .; }
# The command of the round trip: plain HTTP, a CONNECT tunnel (TLS, the lab's CA is not needed for
# the status), another port.
CMD="$GET http://allowed.test/; $GET -k https://registry.test/; $GET http://other.test:8080/x"

# 1. Learn: everything the command asks for goes through, and FILE names exactly that.
F=$LAB_DIR/learned.json
out=$(sb --learn "$F" --audit-log "$AUDIT" -- sh -c "$CMD" 2>"$LAB_DIR/err1")
rc=$?
check_eq "learn: the command succeeds" 0 "$rc"
check_eq "learn: the three requests went through" "200 200 200" "$(echo $out)"
check_match "learn: sluice says where the policy went" "learned policy written to $F: 3 destinations" "$(cat "$LAB_DIR/err1")"
# each request counts once, though the log has its decision and its close record
check_match "learn: ... from three requests, all allowed by learn mode" "\(3 requests, 3 allowed by learn mode\)" \
	"$(cat "$LAB_DIR/err1")"
check_not "learn: nothing was denied" grep -q 'denied' "$LAB_DIR/err1"
check "learn: the file is a valid policy (sluicectl policy check)" "$CTL" policy check "$F"
check_eq "learn: it allows exactly the hosts reached, other.test only on 8080" \
	'{"allow":["allowed.test","other.test:8080","registry.test"]}' "$(body "$F")"
check_match "learn: its header names the command" '^// +sh -c curl' "$(sed -n 2p "$F")"
check_eq "learn: the audit log says learn mode allowed them" "3" \
	"$(jq -r 'select(.rule=="learn mode" and .decision=="allow" and .protocol!="dns") | .host' "$AUDIT" | sort -u | wc -l)"
sid=$(jq -r 'select(.rule=="learn mode") | .session' "$AUDIT" | sort -u)
check_match "learn: the header names the session" "session $sid" "$(head -1 "$F")"

# 1b. The command cannot redirect FILE: it swaps FILE's directory for a symlink to elsewhere during the run;
#     the launcher (root) still writes into the directory FILE named when the run began.
W=$LAB_DIR/w
mkdir -p "$W/out" "$LAB_DIR/elsewhere"
chmod 777 "$W" "$W/out"
out=$(sb --learn "$W/out/learned.json" --bind "$W" --audit-log "$AUDIT" -- \
	sh -c "mv '$W/out' '$W/out.moved' && ln -s '$LAB_DIR/elsewhere' '$W/out' && $GET http://allowed.test/" \
	2>"$LAB_DIR/err1b")
check_eq "learn: the command swapped the directory and its request went through" 200 "$(echo $out)"
check "learn: the swapped path is a symlink now" test -L "$W/out"
check_not "learn: nothing was written through the symlink" test -e "$LAB_DIR/elsewhere/learned.json"
check "learn: the policy is in the directory as it was when the run began" test -s "$W/out.moved/learned.json"
check_eq "learn: ... and names what the run reached" '{"allow":["allowed.test"]}' "$(body "$W/out.moved/learned.json")"

# 1c. A destination reached through the session's SOCKS5 port ($ALL_PROXY, socks5h) is learned like one
#     reached through the HTTP proxy (its records say protocol "socks5").
F5=$LAB_DIR/learned-socks.json
#     (TLS: plain HTTP in a tunnel is handed to the HTTP front, whose records say "http")
out=$(sb --learn "$F5" --audit-log "$AUDIT" -- sh -c "$GET -k --proxy \"\$ALL_PROXY\" https://registry.test/" \
	2>"$LAB_DIR/err1c")
check_eq "learn: a request through SOCKS5 went through" 200 "$(echo $out)"
check_eq "learn: ... recorded as socks5" 1 \
	"$(jq -r 'select(.protocol=="socks5" and .host=="registry.test" and .event=="decision") | .session' "$AUDIT" | wc -l)"
check_eq "learn: ... and its destination is learned" '{"allow":["registry.test"]}' "$(body "$F5")"

# 2. Enforce: the same command with the learned policy succeeds, and nothing is summarised.
out=$(sb --allow-network --policy "$F" --audit-log "$AUDIT" -- sh -c "$CMD" 2>"$LAB_DIR/err2")
check_eq "enforce: the command succeeds with --policy FILE" 0 "$?"
check_eq "enforce: the same three requests go through" "200 200 200" "$(echo $out)"
check_not "enforce: nothing was denied" grep -q 'denied' "$LAB_DIR/err2"
check_eq "enforce: they were allowed by FILE's rules" 3 \
	"$(jq -r "select(.event!=\"close\" and .decision==\"allow\" and .protocol!=\"dns\" and (.rule // \"\" | startswith(\"$F:\"))) | .session" "$AUDIT" | wc -l)"

# 3. ... and it is no wider than the run: another host, another port of a learned host are denied.
out=$(sb --allow-network --policy "$F" --audit-log "$AUDIT" -- \
	sh -c "$GET http://evil.test/; $GET http://allowed.test:8080/; $GET http://other.test/" 2>"$LAB_DIR/err3")
check_eq "enforce: a host not in FILE, and ports not learned, are denied (403)" "403 403 403" "$(echo $out)"
check_match "enforce: the summary lists evil.test" 'evil\.test:80 +1 x +no rule' "$(cat "$LAB_DIR/err3")"

# 3b. Presets: a reached host that a shipped preset covers is learned as that preset (the smallest that
#     covers it: npm, not registries), and not repeated in "allow". (The lab's DNS answers for the npm
#     registry's name with a lab address: nothing leaves the lab.)
lab_dns_add registry.npmjs.org "$LAB_REGISTRY4"
F5=$LAB_DIR/learned5.json
NPM="$GET http://registry.npmjs.org/sluice-demo; $GET http://allowed.test/"
out1=$(sb --learn "$F5" --audit-log "$AUDIT" -- sh -c "$NPM" 2>"$LAB_DIR/err3b")
check_match "learn: the npm registry's name was reached (an HTTP status)" '^[1-5][0-9][0-9] 200$' "$(echo $out1)"
check_eq "learn: it is learned as the npm preset, the other host as itself" 	'{"presets":["npm"],"allow":["allowed.test"]}' "$(body "$F5")"
check_match "learn: the summary line names the preset" '-> 1 preset \(npm\), 1 allow entry' "$(cat "$LAB_DIR/err3b")"
out2=$(sb --allow-network --policy "$F5" --audit-log "$AUDIT" -- sh -c "$NPM" 2>/dev/null)
check_eq "enforce: the same statuses with --policy FILE (the preset allows the registry)" "$(echo $out1)" "$(echo $out2)"

# 3c. DNS: a name only looked up is learned when it was answered (not a name the resolver does not know);
#     with the learned policy the lookup works again and another name is refused.
F6=$LAB_DIR/learned6.json
sb --learn "$F6" --audit-log "$AUDIT" -- sh -c 'getent hosts other.test >/dev/null; getent hosts nosuch.test; true' \
	>/dev/null 2>"$LAB_DIR/err3c"
check_eq "learn: the answered name is learned, the unknown one is not" '{"allow":["other.test"]}' "$(body "$F6")"
check "enforce: the lookup works with --policy FILE" \
	sb --allow-network --policy "$F6" --audit-log "$AUDIT" -- getent hosts other.test
check_not "enforce: another name is refused" \
	sb --allow-network --policy "$F6" --audit-log "$AUDIT" -- getent hosts evil.test

# 4. Learn mode still refuses the forbidden ranges: the metadata address, a name that resolves to it
#    or to a private address. They are summarised as denials and stay out of FILE.
F2=$LAB_DIR/learned2.json
out=$(sb --learn "$F2" --audit-log "$AUDIT" -- \
	sh -c "$GET http://169.254.169.254/latest/meta-data/; $GET http://meta.test/; $GET http://private.test/; $GET http://allowed.test/" \
	2>"$LAB_DIR/err4")
check_eq "learn: forbidden addresses are refused (403), the rest goes through" "403 403 403 200" "$(echo $out)"
check_match "learn: the summary names the metadata address" '169\.254\.169\.254:80 +1 x' "$(cat "$LAB_DIR/err4")"
check_match "learn: ... as a forbidden range" 'forbidden range' "$(cat "$LAB_DIR/err4")"
check_eq "learn: FILE holds only the allowed host" '{"allow":["allowed.test"]}' "$(body "$F2")"

# 5. An existing FILE is never overwritten: refused before the command runs.
sum=$(sha256sum <"$F")
sb --learn "$F" --audit-log "$AUDIT" -- sh -c 'echo ran >&2' >/dev/null 2>"$LAB_DIR/err5"
check_eq "learn: an existing FILE is refused (125)" 125 "$?"
check_match "learn: ... saying so" 'exists, and learn mode never overwrites' "$(cat "$LAB_DIR/err5")"
check_not "learn: ... before the command ran" grep -q '^ran' "$LAB_DIR/err5"
check_eq "learn: ... and FILE is unchanged" "$sum" "$(sha256sum <"$F")"
check_eq "learn: a FILE in a missing directory is refused (125)" 125 \
	"$(sb --learn "$LAB_DIR/nosuch/f.json" -- true >/dev/null 2>&1; echo $?)"
check_eq "learn: refused with the bypass (nothing would record the run)" 125 \
	"$(sb --learn "$LAB_DIR/f6.json" --no-sandbox-i-mean-it -- true >/dev/null 2>&1; echo $?)"
check_eq "learn: a project policy cannot turn learn mode on" 125 \
	"$(mkdir -p "$P/.sluice" && echo '{"options": {"learn": true}}' >"$P/.sluice/policy.json" &&
	   sb --allow-network -- true >/dev/null 2>"$LAB_DIR/err5b"; echo $?)"
check_match "... with the file and line" 'policy\.json:1:[0-9]+: "learn": true cannot be set in a policy file' \
	"$(cat "$LAB_DIR/err5b")"
rm -rf "$P/.sluice"

# 6. Through sluiced, whose organisation layer the launcher cannot see: an org deny rule still
#    denies in learn mode; an org "learn": false refuses the session.
RUN=$LAB_DIR/run
ORG=$LAB_DIR/etc-sluice
mkdir -p "$RUN" "$ORG"
chmod 755 "$ORG"
printf '{ "deny": ["evil.test"] }\n' >"$ORG/policy.json"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
SLUICED_SYSCONF=$ORG
check "sluiced starts" start_sluiced
sbd() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR=$RUN SLUICE_AUDIT_LOG=$AUDIT \
	"$SLUICE" run --project-mode ro "$@"); }
F3=$LAB_DIR/learned3.json
out=$(sbd --learn "$F3" -- sh -c "$GET http://evil.test/; $GET http://other.test/; $GET -k https://registry.test/" 2>"$LAB_DIR/err6")
check_eq "sluiced: learn mode does not lift an organisation deny rule" "403 200 200" "$(echo $out)"
check_match "sluiced: the summary names the org rule" "evil\\.test:80 +1 x +rule $ORG/policy\\.json:1" "$(cat "$LAB_DIR/err6")"
check_eq "sluiced: FILE has the allowed hosts only (the tunnel, logged as sluiced tears down, too)" \
	'{"allow":["other.test","registry.test"]}' "$(body "$F3")"

printf '{\n  "options": { "learn": false }\n}\n' >"$ORG/policy.json"
F4=$LAB_DIR/learned4.json
out=$(sbd --learn "$F4" -- sh -c "echo ran; $GET http://other.test/" 2>"$LAB_DIR/err7")
check_eq "sluiced: an organisation \"learn\": false refuses learn mode (125)" 125 "$?"
check_match "... saying why and where" "$ORG/policy\\.json:2:[0-9]+: learn mode \\(--learn\\) is forbidden by the organisation" \
	"$(cat "$LAB_DIR/err7")"
check_eq "... the command did not run" "" "$out"
check_not "... and no FILE was written" test -e "$F4"
out=$(sbd --allow-network --allow other.test -- sh -c "$GET http://other.test/" 2>/dev/null)
check_eq "sluiced: without --learn, sessions still run under that organisation policy" 200 "$(echo $out)"
lab_stop sluiced

check "the audit log's hash chain holds" "$CTL" log verify "$AUDIT"
done_testing
