#!/usr/bin/env bash
# ask: interactive approval in the lab. `sluice run --ask` sessions under sluiced hold requests no rule
# allows; a second process (this script) lists them with `sluicectl asks`, approves (the request gets its
# 200, and the host:port stays approved for the session), denies (403 naming who denied), or lets one time
# out (403 "not approved within N s"). A host an explicit deny rule names is never held; CONNECT is held
# and resumed like HTTP; another user can neither see nor decide root's held requests; --remember project
# writes PROJECT/.sluice/policy.json so a later session needs no approval; the audit log has the "ask"
# line and the final verdict with the deciding uid; the embedded helper refuses --ask. Inside an inspected
# tunnel the host's HTTP rules decide before anything is held (a path they deny is a 403, never an ask),
# statically and after a live policy change. A live change decides held requests again like a verdict (CONNECT,
# SOCKS5 and plain HTTP alike): still undecided they stay held and listed, allowed they are released, denied
# they are refused with a 403 naming why; held requests checked for more than their destination (inspected,
# or a policy with credentials) are refused on any change.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq setpriv useradd

B=$SLUICE_BUILD_DIR
SLUICE=$B/sandbox/sluice CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice # the lab's own, private /run
AUDIT=$LAB_DIR/audit.log
export SLUICE_RUN_DIR=$RUN SLUICE_AUDIT_LOG=$AUDIT
lab_internet_up >/dev/null
lab_forward on
mkdir -p "$LAB_DIR/etc-sluice"
P=$LAB_DIR/proj H=$LAB_DIR/home
mkdir -p "$P" "$H"
chmod 755 "$LAB_DIR"
sb() { (cd "$P" && exec env -i HOME="$H" PATH=/usr/bin:/bin SLUICE_RUN_DIR=$RUN "$SLUICE" run --project-mode ro "$@"); }
CODE='curl -s -m 40 -o /dev/null -w %{http_code}'

# A throwaway unprivileged user (removed on exit), to show it cannot decide root's requests.
TU=$(test_user_name askt)
test_useradd "$TU" "$LAB_DIR/tu-home" || lab_bail "useradd $TU failed (10 s)"
lab_defer "userdel $TU >/dev/null 2>&1"
TU_UID=$(id -u "$TU")
mkdir -p "$LAB_DIR/tu-home" "$LAB_DIR/tu-proj"
chown "$TU:$TU" "$LAB_DIR/tu-home" "$LAB_DIR/tu-proj"
as_tu() {
	(cd "$LAB_DIR/tu-proj" && exec setpriv --reuid="$TU_UID" --regid="$TU_UID" --clear-groups \
		env -i HOME="$LAB_DIR/tu-home" PATH=/usr/bin:/bin USER="$TU" SLUICE_RUN_DIR=$RUN "$@")
}

# wait_asks N: polls until N requests are held; prints the JSON list
wait_asks() {
	local js="[]"
	for _ in $(seq 150); do
		js=$("$CTL" asks --json 2>/dev/null) || js="[]"
		[ "$(jq length <<<"$js")" -ge "$1" ] && break
		sleep 0.1
	done
	printf '%s' "$js"
}
ask_id() { jq -r --arg h "$2" '.[] | select(.host == $h) | .id' <<<"$1"; }

# ---- without sluiced, the embedded helper cannot be reached by sluicectl: --ask is refused ----
out=$(sb --allow-network --ask --allow allowed.test -- true 2>&1)
check_eq "--ask without sluiced: exit 125" 125 "$?"
check_match "... saying approval needs sluiced" 'interactive approval .*needs sluiced' "$out"
check_eq "--ask without --allow-network is refused (125)" 125 "$(sb --ask -- true >/dev/null 2>&1; echo $?)"
check_eq "--ask-timeout 0 is refused (125)" 125 "$(sb --allow-network --ask --ask-timeout 0 -- true >/dev/null 2>&1; echo $?)"

. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh"
# (its engine trusts the lab's CA, for the inspected upstreams below)
check "sluiced starts" start_sluiced SLUICE_TLS_TRUST="$LAB_CA"
check_eq "no held requests at first" "no requests are waiting for approval" "$("$CTL" asks)"

# ---- one session: approve, deny, an explicit deny rule, and the approval lasting for the session ----
printf '{ "deny": ["evil.test"] }\n' >"$LAB_DIR/deny.json"
sb --allow-network --ask --ask-timeout 40 --allow allowed.test --policy "$LAB_DIR/deny.json" -- sh -c "
	(echo other \$($CODE http://other.test/); echo again \$($CODE http://other.test/again)) &
	(echo registry \$($CODE http://registry.test/); curl -s -m 40 http://registry.test/ >/dev/null) &
	echo evil \$($CODE http://evil.test/) &
	echo allowed \$($CODE http://allowed.test/)
	wait" >"$LAB_DIR/a.out" 2>"$LAB_DIR/a.err" &
runpid=$!
js=$(wait_asks 2)
check_eq "two requests are held" 2 "$(jq length <<<"$js")"
oid=$(ask_id "$js" other.test)
rid=$(ask_id "$js" registry.test)
check_match "other.test:80 is held with an 8-hex-digit id" '^[0-9a-f]{8}$' "$oid"
check_eq "... its method and port" "GET 80" "$(jq -r '.[] | select(.host == "other.test") | "\(.method) \(.port)"' <<<"$js")"
check_eq "... its session's uid (root)" 0 "$(jq -r '.[] | select(.host == "other.test") | .uid' <<<"$js")"
check_eq "the explicitly denied evil.test is never held" "" "$(ask_id "$js" evil.test)"
check_match "the table lists them" "^$oid .* GET other\\.test:80\$" "$("$CTL" approve)"
check_eq "another user sees none of root's held requests" "no requests are waiting for approval" \
	"$(as_tu "$CTL" asks 2>&1)"
out=$(as_tu "$CTL" approve "$oid" 2>&1)
check_eq "another user cannot approve root's request (exit 1)" 1 "$?"
check_match "... told there is no such request of theirs" 'no such held request of yours' "$out"
check_eq "... and it is still held" "$oid" "$(ask_id "$("$CTL" asks --json)" other.test)"
check_not "a malformed id is refused by sluicectl" "$CTL" deny ../../x
out=$("$CTL" approve "$oid")
check_match "approve ID" "approved $oid: GET other\\.test:80" "$out"
out=$("$CTL" deny "$rid")
check_match "deny ID" "denied $rid: GET registry\\.test:80" "$out"
check_not "deciding it again fails (no longer held)" "$CTL" deny "$rid"
wait "$runpid"
check_eq "the session ended normally" 0 "$?"
a=$(cat "$LAB_DIR/a.out")
check_match "the approved request got its 200" '^other 200$' "$a"
check_match "... and a second request to it in the session needed no approval" '^again 200$' "$a"
check_match "the denied request got a 403" '^registry 403$' "$a"
check_match "the explicitly denied host got its 403 at once" '^evil 403$' "$a"
check_match "the allowed host was never held" '^allowed 200$' "$a"
sid=$(jq -r 'select(.host == "other.test" and .decision == "ask") | .session' "$AUDIT" | head -1)
check_eq "the audit log has one \"ask\" line for other.test" 1 \
	"$(jq -c 'select(.host == "other.test" and .decision == "ask")' "$AUDIT" | wc -l)"
check_match "... quoting the id and how to decide" "held for approval as $oid" \
	"$(jq -r 'select(.host == "other.test" and .decision == "ask") | .reason' "$AUDIT")"
check_match "the final line allows it, quoting who approved" "approved by uid 0" \
	"$(jq -r --arg s "$sid" 'select(.session == $s and .host == "other.test" and .decision == "allow" and .status == 200) | .reason' "$AUDIT" | head -1)"
check_match "the denial quotes who denied" "denied by uid 0" \
	"$(jq -r --arg s "$sid" 'select(.session == $s and .host == "registry.test" and .decision == "deny") | .reason' "$AUDIT" | head -1)"
check_eq "the second registry.test request was refused by the session's denial, not held again" 1 \
	"$(jq -c --arg s "$sid" 'select(.session == $s and .host == "registry.test" and .decision == "ask")' "$AUDIT" | wc -l)"
check_eq "evil.test has no \"ask\" line" 0 "$(jq -c 'select(.host == "evil.test" and .decision == "ask")' "$AUDIT" | wc -l)"
check_eq "no held requests are left" "no requests are waiting for approval" "$("$CTL" asks)"

# ---- a timeout denies ----
start=$(date +%s)
body=$(sb --allow-network --ask --ask-timeout 2 -- curl -s -m 30 -w '\n%{http_code}' http://registry.test/late 2>/dev/null)
took=$(($(date +%s) - start))
check_match "an unanswered request gets a 403 after the timeout" '403$' "$body"
check_match "... saying it was not approved in time" 'not approved within 2 s' "$body"
check "... after waiting for it (${took}s >= 2s)" test "$took" -ge 2
check_match "... and the audit log says so" 'not approved within 2 s' \
	"$(jq -r 'select(.host == "registry.test" and .decision == "deny") | .reason' "$AUDIT" | tail -1)"

# ---- CONNECT is held and resumed like a plain request ----
sb --allow-network --ask -- curl -s -p -m 40 -o /dev/null -w '%{http_connect} %{http_code}\n' http://other.test/tunnel \
	>"$LAB_DIR/c.out" 2>"$LAB_DIR/c.err" &
runpid=$!
js=$(wait_asks 1)
check_eq "a CONNECT is held" "connect CONNECT" "$(jq -r '.[0] | "\(.protocol) \(.method)"' <<<"$js")"
cid=$(jq -r '.[0].id' <<<"$js")
for _ in $(seq 50); do grep -q held "$LAB_DIR/c.err" && break; sleep 0.1; done
check_match "sluice run announces the held request on its stderr" \
	"^sluice: held for approval: CONNECT other\\.test:80; .sluicectl approve $cid. \\(or deny $cid\\) within 60 s\$" \
	"$(cat "$LAB_DIR/c.err")"
"$CTL" approve "$cid" >/dev/null
wait "$runpid"
check_eq "... and once approved, the tunnel carries the request" "200 200" "$(cat "$LAB_DIR/c.out")"

# ---- inside an inspected tunnel, the host's HTTP rules decide a request before it is held ----
# allowed.test is allowed for CONNECT and GET only, so an inspected POST to it is undecided (ask). Its HTTP
# rules still come first: a POST they deny is refused at once (403 with the rule), never held; one they
# allow is held and, approved, goes with the host's credential. Then a live policy change (sluicectl session
# policy) makes the host itself undecided under an inspected tunnel that stays open: a GET its deny rule
# names is refused in that tunnel, not held, and an allowed one is held and approved there.
SECRET=ask-secret-$RANDOM$RANDOM
printf '%s\n' "$SECRET" >"$H/api-token"
chmod 0600 "$H/api-token"
rules='"allow": ["GET /pub/**", "POST /upload/*"], "deny": ["POST /upload/secret", "GET /pub/secret/**"]'
printf '{ "allow": [{"host": "allowed.test", "methods": ["CONNECT", "GET"]}],
  "inspect": [{"host": "allowed.test", %s,
    "credential": {"header": "Authorization: Bearer {secret}", "secret_file": "%s", "placeholder_env": "API_TOKEN"}}] }\n' \
	"$rules" "$H/api-token" >"$LAB_DIR/insp.json"
# (a policy sluicectl sends is a project's: it cannot name a credential)
printf '{ "options": {"ask": true, "ask_timeout": 40},\n  "inspect": [{"host": "allowed.test", %s}] }\n' "$rules" \
	>"$LAB_DIR/insp-ask.json"
sb --allow-network --ask --ask-timeout 40 --policy "$LAB_DIR/insp.json" -- sh -c "
	echo secret \$($CODE -X POST -d x https://allowed.test/upload/secret)
	echo outside \$($CODE -X POST -d x https://allowed.test/admin/x)
	curl -s -m 40 -X POST -d x https://allowed.test/upload/ok" >"$LAB_DIR/i.out" 2>"$LAB_DIR/i.err" &
runpid=$!
js=$(wait_asks 1)
check_eq "an inspected POST the HTTP rules allow is held (the host's rules allow GET only)" \
	"https POST allowed.test 443" "$(jq -r '.[] | "\(.protocol) \(.method) \(.host) \(.port)"' <<<"$js")"
a=$(cat "$LAB_DIR/i.out")
check_match "a POST an HTTP deny rule names was refused at once (403), not held" '^secret 403$' "$a"
check_match "... and one outside the HTTP allow rules" '^outside 403$' "$a"
"$CTL" approve "$(jq -r '.[0].id' <<<"$js")" >/dev/null
wait "$runpid"
out=$(sed -n '3,$p' "$LAB_DIR/i.out")
check_eq "approved, the held POST reached its path" "POST /upload/ok" "$(jq -r '"\(.method) \(.path)"' <<<"$out")"
check_eq "... with the host's credential set by the proxy" "Bearer $SECRET" \
	"$(jq -r '.headers[] | select(.[0] == "Authorization") | .[1]' <<<"$out")"
check_match "the refusal names the deny rule in the audit log" \
	"\"path\":\"/upload/secret\",\"decision\":\"deny\",\"rule\":\"$LAB_DIR/insp.json:[0-9]+:[0-9]+\".*denied by" \
	"$(jq -c 'select(.protocol == "https" and .path == "/upload/secret")' "$AUDIT")"
check_eq "... and neither refused POST was ever held" 0 \
	"$(jq -c 'select(.decision == "ask" and (.path == "/upload/secret" or .path == "/admin/x"))' "$AUDIT" | wc -l)"
check_not "... nor reached the origin" grep -q -e '/upload/secret' -e '/admin/x' <<<"$(lab_http_requests)"

# The live change: one inspected tunnel (python's http.client keeps it) across it. The new policy drops the
# allow rule, keeps the inspect entry and asks; a second connection's CONNECT is then held, and the open
# tunnel's requests to the same host:port wait on that ask: one the deny rule names is refused at once instead.
fifo=$LAB_DIR/live.fifo
mkfifo "$fifo"
exec 7<>"$fifo"
sb --allow-network --ask --ask-timeout 40 --policy "$LAB_DIR/insp.json" -- "$LAB_PYTHON" -c '
import http.client, os, ssl, sys, threading, urllib.parse
u = urllib.parse.urlsplit(os.environ["https_proxy"])
def tunnel():
    c = http.client.HTTPSConnection(u.hostname, u.port, timeout=40, context=ssl.create_default_context())
    c.set_tunnel("allowed.test", 443)
    return c
def get(c, path):
    c.request("GET", path)
    r = c.getresponse()
    print(path, r.status, r.read().decode(errors="replace").replace("\n", " "), flush=True)
a = tunnel()
get(a, "/pub/one")
sys.stdin.readline()  # the policy was changed
t = threading.Thread(target=get, args=(tunnel(), "/pub/bg"))
t.start()
sys.stdin.readline()  # its CONNECT is held
get(a, "/pub/secret/x")
get(a, "/pub/two")
t.join()' <"$fifo" >"$LAB_DIR/l.out" 2>"$LAB_DIR/l.err" &
runpid=$!
for _ in $(seq 150); do [ -s "$LAB_DIR/l.out" ] && break; sleep 0.1; done
check_match "the inspected tunnel's first GET is allowed" '^/pub/one 200 ' "$(cat "$LAB_DIR/l.out")"
lid=$("$CTL" sessions --json | jq -r '[.[] | select(.command | test("python"))][0].id')
check_match "the live session's policy loses its allow rule, keeps its inspect entry and asks" "policy replaced" \
	"$("$CTL" session policy "$lid" --file "$LAB_DIR/insp-ask.json" 2>&1)"
echo go >&7
js=$(wait_asks 1)
check_eq "a second tunnel's CONNECT to the host is held" "connect CONNECT allowed.test 443" \
	"$(jq -r '.[] | "\(.protocol) \(.method) \(.host) \(.port)"' <<<"$js")"
echo go >&7
for _ in $(seq 50); do grep -q '^/pub/secret/x ' "$LAB_DIR/l.out" && break; sleep 0.1; done
check_match "in the open tunnel, a GET the deny rule names is refused at once (403, the rule), not held" \
	"^/pub/secret/x 403 .*denied by $LAB_DIR/insp-ask\\.json:" "$(cat "$LAB_DIR/l.out")"
held_two() { [ "$(jq -c 'select(.decision == "ask" and .protocol == "https" and .path == "/pub/two")' "$AUDIT" | wc -l)" = 1 ]; }
check "... a GET the HTTP rules allow waits on the CONNECT's ask" eventually held_two
"$CTL" approve "$(jq -r '.[0].id' <<<"$js")" >/dev/null
wait "$runpid"
exec 7>&-
check_match "approved, it got its 200 in the same tunnel" '^/pub/two 200 .*"path": "/pub/two"' "$(cat "$LAB_DIR/l.out")"
check_not "... without a credential (the new policy names none)" grep -q '^/pub/two .*Authorization' "$LAB_DIR/l.out"
check_match "... and the held CONNECT's request got its 200" '^/pub/bg 200 ' "$(cat "$LAB_DIR/l.out")"
check_not "the denied GET never reached the origin" grep -q '/pub/secret/x' <<<"$(lab_http_requests)"
check_eq "... and was never held" 0 "$(jq -c 'select(.decision == "ask" and .path == "/pub/secret/x")' "$AUDIT" | wc -l)"

# A policy change while requests are held, under a policy that names a credential: a plain request and an
# inspected one are both refused (403) on any change, since what was checked when they were read (the search
# for credential placeholders, the host's HTTP rules) was checked under the old policy; neither is left to
# approve, and their records say why.
sb --allow-network --ask --ask-timeout 40 --policy "$LAB_DIR/insp.json" -- sh -c "
	echo plain \$($CODE http://other.test/held-plain) &
	echo inspected \$($CODE -X POST -d x https://allowed.test/upload/held) &
	wait" >"$LAB_DIR/d.out" 2>"$LAB_DIR/d.err" &
runpid=$!
js=$(wait_asks 2)
check_eq "a plain and an inspected request are held" "http other.test https allowed.test" \
	"$(jq -r 'sort_by(.protocol) | map("\(.protocol) \(.host)") | join(" ")' <<<"$js")"
lid=$("$CTL" sessions --json | jq -r '[.[] | select(.command == "sh")][0].id')
"$CTL" session policy "$lid" --deny other.test >/dev/null
no_asks() { [ "$("$CTL" asks)" = "no requests are waiting for approval" ]; }
check "after a live policy change, both end at once: nothing is left to approve" eventually no_asks
wait "$runpid"
check_eq "... both refused (403)" "inspected 403 plain 403" "$(sort "$LAB_DIR/d.out" | tr '\n' ' ' | sed 's/ $//')"
check_match "... the plain one's record says its placeholder search was made under the old policy" \
	'"decision":"deny".*"reason":"the session.s policy changed while this request was held for approval \(the policies name credentials' \
	"$(jq -c 'select(.path == null and .host == "other.test" and .event != "decision")' "$AUDIT" | tail -n 1)"
check_match "... the inspected one's that its HTTP rules were applied under the old one" \
	'"path":"/upload/held","decision":"deny".*"reason":"the session.s policy changed while this request was held for approval \(its HTTP rules were applied under the old one\)' \
	"$(jq -c 'select(.path == "/upload/held" and .event != "decision")' "$AUDIT")"
check_not "... and neither reached the origin" grep -q -e '/held-plain' -e '/upload/held' <<<"$(lab_http_requests)"

# A policy change decides held CONNECT, SOCKS5 and plain requests again by the rule an operator's verdict
# follows: still undecided (other.test), they stay held on their ask, still listed, and an approval releases
# them later; allowed now (registry.test), they are released as if approved; denied now (evil.test), they are
# refused (403; SOCKS5: not allowed), their records naming the new policy's reason.
TUN='curl -s -p -m 40 -o /dev/null -w %{http_connect}/%{http_code}'
sb --allow-network --ask --ask-timeout 40 -- sh -c "
	echo c-stay \$($TUN http://other.test/c-stay) &
	echo s-stay \$($CODE -x \$ALL_PROXY http://other.test/s-stay) &
	echo c-go \$($TUN http://registry.test/c-go) &
	echo s-go \$($CODE -x \$ALL_PROXY http://registry.test/s-go) &
	echo h-go \$($CODE http://registry.test/h-go) &
	echo c-deny \$($TUN http://evil.test/c-deny) &
	echo s-deny \$($CODE -x \$ALL_PROXY http://evil.test/s-deny) &
	curl -s -m 40 -w '\n%{http_code}\n' http://evil.test/h-deny | sed 's/^/h-deny /' &
	wait" >"$LAB_DIR/v.out" 2>"$LAB_DIR/v.err" &
runpid=$!
js=$(wait_asks 3)
vid=$("$CTL" sessions --json | jq -r '[.[] | select(.command == "sh")][0].id')
oid=$(ask_id "$js" other.test)
held_all() { [ "$(jq -c --arg s "$vid" 'select(.session == $s and .decision == "ask")' "$AUDIT" | wc -l)" = 8 ]; }
check "eight CONNECT, SOCKS5 and plain requests to three hosts are held" eventually held_all
"$CTL" session policy "$vid" --allow registry.test --deny evil.test >/dev/null
only_other() { [ "$("$CTL" asks --json | jq -r 'map("\(.id) \(.host)") | join(",")')" = "$oid other.test" ]; }
check "after a live change that allows one host and denies another, the third's ask alone is listed (its id kept)" \
	eventually only_other
decided_six() { [ "$(grep -c -e '^[cs]-go ' -e '^h-go ' -e '^[cs]-deny ' -e '^h-deny [0-9]' "$LAB_DIR/v.out")" = 6 ]; }
check "... the other six are answered at once" eventually decided_six
v=$(cat "$LAB_DIR/v.out")
check_match "a held CONNECT the new policy allows is released: its tunnel carries the request (registry's 404)" \
	'^c-go 200/404$' "$v"
check_match "... a SOCKS5 connect too" '^s-go 404$' "$v"
check_match "... and a plain request" '^h-go 404$' "$v"
check_match "a held CONNECT the new policy denies is refused with a 403" '^c-deny 403/' "$v"
check_match "... a SOCKS5 connect (not allowed: curl sees no HTTP status)" '^s-deny 000$' "$v"
check_match "... and a plain request, whose 403 says why" '^h-deny 403$' "$v"
check_match "... in its body" "^h-deny   reason:  the session's new policy denies it while it was held for approval: evil\.test:80 denied by" "$v"
check_not "... and none reached the origin" grep -q -e '/c-deny' -e '/s-deny' -e '/h-deny' <<<"$(lab_http_requests)"
# (the requests inside the released tunnels are decided anew, protocol http, allowed by the new rule: no reason)
released() { jq -r --arg s "$vid" --arg p "$1" 'select(.session == $s and .protocol == $p and .host == "registry.test" and .decision == "allow" and .event == "decision" and .reason != null) | .reason' "$AUDIT"; }
for p in connect socks5 http; do
	check_eq "the released $p request's decision record says the new policy allowed it" \
		"released while held for approval: the session's new policy allows registry.test:80" "$(released "$p")"
	check_match "the refused $p request's record names the new policy's reason" \
		"\"decision\":\"deny\".*\"reason\":\"the session's new policy denies it while it was held for approval: evil\\.test:80 denied by" \
		"$(jq -c --arg s "$vid" --arg p "$p" 'select(.session == $s and .protocol == $p and .host == "evil.test" and .event == "complete")' "$AUDIT")"
done
"$CTL" approve "$oid" >/dev/null
wait "$runpid"
v=$(cat "$LAB_DIR/v.out")
check_match "the requests left held are released by their approval later: the CONNECT" '^c-stay 200/200$' "$v"
check_match "... and the SOCKS5 connect" '^s-stay 200$' "$v"
rm -f "$H/api-token"

# ---- --remember project: the project's policy file, so the next session needs no approval ----
mkdir -p "$P/.sluice"
printf '// the project policy\n{ "allow": ["allowed.test"] }\n' >"$P/.sluice/policy.json"
sb --allow-network --ask -- sh -c "$CODE http://other.test/remember" >"$LAB_DIR/r.out" 2>/dev/null &
runpid=$!
js=$(wait_asks 1)
out=$("$CTL" approve "$(jq -r '.[0].id' <<<"$js")" --remember project --project "$P" 2>"$LAB_DIR/r.err")
check_eq "approve --remember project" 0 "$?"
check_match "... says which file now allows it" "$P/\\.sluice/policy\\.json now allows other\\.test:80" "$out"
wait "$runpid"
check_eq "... the held request went through" 200 "$(cat "$LAB_DIR/r.out")"
check_eq "the project file allows both its old and the approved host" '["allowed.test","other.test:80"]' \
	"$(jq -c .allow "$P/.sluice/policy.json")"
check "... it is a valid policy" "$CTL" policy check "$P/.sluice/policy.json"
check_match "the old file, with its comment, is kept next to it" '^// the project policy' "$(cat "$P/.sluice/policy.json.bak")"
check_match "... and sluicectl said so" 'had comments' "$(cat "$LAB_DIR/r.err")"
asks_before=$(jq -c 'select(.decision == "ask")' "$AUDIT" | wc -l)
out=$(sb --allow-network --ask -- sh -c "$CODE http://other.test/later" 2>/dev/null)
check_eq "a new session of the project reaches it without asking" 200 "$out"
check_eq "... nothing was held" "$asks_before" "$(jq -c 'select(.decision == "ask")' "$AUDIT" | wc -l)"
check_match "... allowed by the remembered rule" "$P/\\.sluice/policy\\.json" \
	"$(jq -r 'select(.host == "other.test" and .decision == "allow") | .rule' "$AUDIT" | tail -1)"
# ---- --remember user: the approving user's own policy file ----
sb --quiet --allow-network --ask -- sh -c "$CODE http://registry.test/user" >"$LAB_DIR/u.out" 2>"$LAB_DIR/u.err" &
runpid=$!
js=$(wait_asks 1)
out=$(env -u XDG_CONFIG_HOME HOME="$H" "$CTL" approve "$(jq -r '.[0].id' <<<"$js")" --remember user)
check_match "approve --remember user writes ~/.config/sluice/policy.json (created)" \
	"$H/\\.config/sluice/policy\\.json now allows registry\\.test:80" "$out"
wait "$runpid"
check_eq "... the held request reached the registry (its 404 for an unknown package, not a 403)" 404 "$(cat "$LAB_DIR/u.out")"
check_eq "with --quiet, sluice run announces nothing" "" "$(cat "$LAB_DIR/u.err")"
check_eq "... the new file holds just that" '{"allow":["registry.test:80"]}' "$(jq -c . "$H/.config/sluice/policy.json")"
check_eq "a later session of that user reaches it, without --ask (the registry's 404)" 404 \
	"$(sb --allow-network -- sh -c "$CODE http://registry.test/again" 2>/dev/null)"

# ---- an approval never reaches past the organisation: sluiced reads /etc/sluice again before it ----
sb --allow-network --ask --ask-timeout 30 -- sh -c "$CODE http://evil.test/org" >"$LAB_DIR/g.out" 2>/dev/null &
runpid=$!
js=$(wait_asks 1)
gid=$(jq -r '.[0].id' <<<"$js")
printf '{ "deny": ["evil.test"] }\n' >"$LAB_DIR/etc-sluice/policy.json" # the administrator, meanwhile
out=$("$CTL" approve "$gid" 2>&1)
check_eq "approving what the organisation now denies fails (1)" 1 "$?"
check_match "... naming the organisation's rule" "organisation policy forbids it: .*etc-sluice/policy\\.json:1" "$out"
check_eq "... and the request is still held" "$gid" "$(jq -r '.[0].id' <<<"$("$CTL" asks --json)")"
"$CTL" deny "$gid" >/dev/null
wait "$runpid"
check_eq "... until it is denied (403)" 403 "$(cat "$LAB_DIR/g.out")"
rm -f "$LAB_DIR/etc-sluice/policy.json"

# ---- an unprivileged user's own session: they see and decide its held requests themselves ----
as_tu "$SLUICE" run --allow-network --ask -- sh -c "$CODE http://other.test/mine" >"$LAB_DIR/t.out" 2>"$LAB_DIR/t.err" &
runpid=$!
js=$(wait_asks 1)
tid=$(jq -r '.[0].id' <<<"$js")
check_eq "root sees the user's held request, under the user's uid" "$TU_UID" "$(jq -r '.[0].uid' <<<"$js")"
check_eq "the user sees it too" "$tid" "$(as_tu "$CTL" asks --json | jq -r '.[0].id')"
out=$(as_tu "$CTL" approve "$tid" --remember user 2>&1)
check_eq "the user approves it, remembering it in their own policy" 0 "$?"
wait "$runpid"
check_eq "... their request went through" 200 "$(cat "$LAB_DIR/t.out")"
check_match "... their launcher announced it" "held for approval: GET other\\.test:80; .sluicectl approve $tid" "$(cat "$LAB_DIR/t.err")"
check_eq "... the file is the user's" "$TU" "$(stat -c %U "$LAB_DIR/tu-home/.config/sluice/policy.json")"
check_eq "... and allows it" '["other.test:80"]' "$(jq -c .allow "$LAB_DIR/tu-home/.config/sluice/policy.json")"
check_match "the audit line names the user as the approver" "approved by uid $TU_UID" \
	"$(jq -r 'select(.host == "other.test" and .decision == "allow" and (.reason // "" | contains("approved by"))) | .reason' "$AUDIT" | tail -1)"

# root approving into the user's project: the new .sluice and its policy stay the user's
as_tu "$SLUICE" run --quiet --allow-network --ask -- sh -c "$CODE http://evil.test/theirs" >"$LAB_DIR/t2.out" 2>/dev/null &
runpid=$!
js=$(wait_asks 1)
"$CTL" approve "$(jq -r '.[0].id' <<<"$js")" --remember project --project "$LAB_DIR/tu-proj" >/dev/null
check_eq "root approves a user's request with --remember project" 0 "$?"
wait "$runpid"
check_eq "... it went through" 200 "$(cat "$LAB_DIR/t2.out")"
check_eq "... the project's new .sluice and policy.json belong to the user" "$TU $TU" \
	"$(stat -c %U "$LAB_DIR/tu-proj/.sluice" "$LAB_DIR/tu-proj/.sluice/policy.json" | tr '\n' ' ' | sed 's/ $//')"

# root approving into a user's project is done with the user's credentials and follows no symlink of
# theirs (common/fs_safe.h): .sluice or policy.json as a symlink to root's files is refused and the
# target untouched; a root-owned policy.json in their .sluice is replaced by one of theirs; a .sluice
# they cannot write is refused with their EACCES (root would have written it).
mkdir -p "$LAB_DIR/root-dir/.sluice" "$LAB_DIR/tu-p1" "$LAB_DIR/tu-p2/.sluice" "$LAB_DIR/tu-p3/.sluice" "$LAB_DIR/tu-p4/.sluice"
printf '{ "allow": ["registry.test"] }\n' >"$LAB_DIR/root-dir/.sluice/policy.json"
cp "$LAB_DIR/root-dir/.sluice/policy.json" "$LAB_DIR/root-file.json"
ln -s "$LAB_DIR/root-dir/.sluice" "$LAB_DIR/tu-p1/.sluice"
ln -s "$LAB_DIR/root-file.json" "$LAB_DIR/tu-p2/.sluice/policy.json"
printf '{ "allow": [] }\n' >"$LAB_DIR/tu-p3/.sluice/policy.json" # root's file, in their directory
chown -h "$TU:$TU" "$LAB_DIR"/tu-p[1-4] "$LAB_DIR"/tu-p[2-4]/.sluice "$LAB_DIR/tu-p1/.sluice" "$LAB_DIR/tu-p2/.sluice/policy.json"
chmod 555 "$LAB_DIR/tu-p4/.sluice"
sums=$(md5sum "$LAB_DIR/root-dir/.sluice/policy.json" "$LAB_DIR/root-file.json")
as_tu "$SLUICE" run --quiet --allow-network --ask -- sh -c \
	"for p in 81 82 83 84; do curl -s -m 20 -o /dev/null http://evil.test:\$p/ & done; wait" >/dev/null 2>&1 &
runpid=$!
js=$(wait_asks 4)
remember_into() { # PORT DIR: approves the request for evil.test:PORT remembering it in DIR
	"$CTL" approve "$(jq -r --argjson p "$1" '.[] | select(.port == $p) | .id' <<<"$js")" --remember project --project "$2" 2>&1
}
out=$(remember_into 81 "$LAB_DIR/tu-p1")
check_eq "root --remember project: .sluice a symlink to root's directory: refused (1)" 1 "$?"
check_match "... saying the symlink is not followed" "not remembered: .*tu-p1/\.sluice/policy\.json: .*symlink is not followed" "$out"
out=$(remember_into 82 "$LAB_DIR/tu-p2")
check_eq "root --remember project: policy.json a symlink to root's file: refused (1)" 1 "$?"
check_match "... saying so" "tu-p2/\.sluice/policy\.json is a symlink, which is not followed" "$out"
check_eq "... neither of root's files was written through the links" "$sums" \
	"$(md5sum "$LAB_DIR/root-dir/.sluice/policy.json" "$LAB_DIR/root-file.json")"
out=$(remember_into 83 "$LAB_DIR/tu-p3")
check_eq "root --remember project over a root-owned policy.json in the user's .sluice" 0 "$?"
check_eq "... the file written is the project owner's, not root's" "$TU" "$(stat -c %U "$LAB_DIR/tu-p3/.sluice/policy.json")"
check_eq "... and allows it" '["evil.test:83"]' "$(jq -c .allow "$LAB_DIR/tu-p3/.sluice/policy.json")"
out=$(remember_into 84 "$LAB_DIR/tu-p4")
check_eq "root --remember project into a .sluice its owner cannot write: refused (1)" 1 "$?"
check_match "... with the owner's permission error" "Permission denied" "$out"
check_eq "... and nothing written" "" "$(ls -A "$LAB_DIR/tu-p4/.sluice")"
wait "$runpid"

check_match "--remember with a bad layer is refused (2)" '2' "$("$CTL" approve 0123abcd --remember team >/dev/null 2>&1; echo $?)"

check_eq "no sluice process is left" "" "$(pgrep -x sluice)"
# (sluiced's log is checked by the lab; the launchers' stderr went to these files)
check_not "no sanitizer report from any sluice run" grep -l -e 'Sanitizer' -e 'runtime error' "$LAB_DIR"/*.err
done_testing
