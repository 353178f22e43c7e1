#!/usr/bin/env bash
# live_policy: a running session's policy changed through sluiced (docs/netd.md, "Live policy"):
# `sluicectl session policy ID --allow/--deny` adds rules and `--file` replaces the policy; the next
# request is decided by the new one, a tunnel in flight that the new policy still allows carries on,
# the organisation's ceiling still bounds it, every audit record names the policy version; the session's
# user may change it from outside the session, not from inside it, another user not at all; an
# operator's approval survives kill -9 of the engine; and the engine's DNS cache (--dns-cache) answers a
# repeated question without the upstream, each answer decided and audited, never one filtered for an
# earlier policy. A second session with the same policy text gets sluiced's kept compile of it, and a
# change of the organisation layer on disk (no SIGHUP) is never served that kept compile.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl jq setpriv unshare

B=$SLUICE_BUILD_DIR
SLUICED=$B/netd/sluiced CLIENT=$B/tests/integration/netd-testclient CTL=$B/tools/sluicectl/sluicectl
RUN=/run/sluice AUDIT=$LAB_DIR/audit.log
export SLUICE_RUN_DIR=$RUN
lab_internet_up >/dev/null
mkdir -p "$LAB_DIR/etc-sluice" "$LAB_DIR/tmp"
chmod 755 "$LAB_DIR" "$LAB_DIR/tmp"
# the organisation's ceiling: evil.test can never be allowed
printf '{"ceiling": ["allowed.test", "other.test", "registry.test"]}\n' >"$LAB_DIR/etc-sluice/policy.json"
POLICY=$LAB_DIR/tmp/policy.json
printf '{"allow": ["allowed.test"], "options": {"ask": true, "ask_timeout": 30}}\n' >"$POLICY"
printf '{"allow": ["registry.test"], "options": {"ask": true, "ask_timeout": 30}}\n' >"$LAB_DIR/tmp/file.json"
chmod 0644 "$POLICY" "$LAB_DIR/tmp/file.json"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually, session, reply

check_match "sluiced refuses a bad --dns-cache, saying what it wants" 'dns-cache many: want a number' \
	"$("$SLUICED" --dns-cache many 2>&1; echo "exit $?")"
check "sluiced starts" start_sluiced -- --dns-cache 100
check "session s1 opens" session s1
ID=$(reply s1 id) GW=$(reply s1 gw4) GW4=$(reply s1 gw4)
dns_records() { jq -r --arg n "$1" 'select(.session == "'"$ID"'" and .protocol == "dns" and .host == $n) | .decision' "$AUDIT" | wc -l; }
code() { lab_exec s1 curl -s -m 10 --noproxy '' -x "http://$GW:3128" -o /dev/null -w '%{http_code}' "$@"; }
version_of() { # version_of TARGET: the policy_version of the last audit record for that request target
	jq -r --arg t "$1" 'select(.reason != null or .host != null) | select(.session == "'"$ID"'") |
		select((.host // "") + ":" + (.port|tostring) == $t) | .policy_version' "$AUDIT" | tail -n 1
}

check_eq "allowed.test is allowed" 200 "$(code http://allowed.test/v1)"
check_eq "evil.test is refused (outside the organisation's ceiling: never held)" 403 "$(code http://evil.test/)"
check_eq "the first policy is version 1 in the audit log" 1 "$(version_of allowed.test:80)"

# a slow tunnel that must outlive the policy change
lab_exec s1 curl -s -m 30 --noproxy '' -x "http://$GW:3128" --cacert "$LAB_CA" --limit-rate 4M \
	-o /dev/null -w '%{size_download}' https://allowed.test/bytes/8000000 >"$LAB_DIR/tmp/slow.out" 2>&1 &
slow=$!
sleep 0.5

out=$("$CTL" session policy "$ID" --allow other.test 2>&1)
check_match "root adds an allow rule to the live session" "policy changed" "$out"
check_eq "the next request to other.test is allowed" 200 "$(code http://other.test/v2)"
check_eq "... and its record names policy version 2" 2 "$(version_of other.test:80)"

# the DNS cache: the second question is answered from it (the upstream resolver never sees it), and both
# are decided and audited
a1=$(gw_addrs s1 other.test)
n1=$(dns_records other.test)
lab_dns_mark
a2=$(gw_addrs s1 other.test)
check "dns cache: other.test resolves ($a1), the same the second time" test -n "$a1" -a "$a1" = "$a2" -a "${a1#rcode=}" = "$a1"
check_eq "dns cache: the second question never reached the upstream resolver" 0 "$(lab_dns_queries | grep -c '^other.test$')"
check "dns cache: ... and it has its own audit record" eventually test "$(dns_records other.test)" -gt "$n1"
wait "$slow"
check_eq "the tunnel in flight carried on to its last byte" 8000000 "$(cat "$LAB_DIR/tmp/slow.out")"
out=$("$CTL" session policy "$ID" --allow evil.test 2>&1)
check_eq "the organisation's ceiling bounds a live change: evil.test stays refused" 403 "$(code http://evil.test/)"
out=$("$CTL" session policy "$ID" --deny other.test 2>&1)
check_eq "a deny rule added live wins over the earlier allow" 403 "$(code http://other.test/v4)"
a3=$(gw_addrs s1 other.test)
check "dns cache: the answer kept under the old policy is not given under the new one ($a3)" test "${a3#rcode=}" != "$a3" -a "$a3" != rcode=0
check_match "a bad pattern is refused before anything is sent, with where" 'allow.*\*' \
	"$("$CTL" session policy "$ID" --allow '*' 2>&1)"
out=$("$CTL" session policy "$ID" --file "$LAB_DIR/tmp/file.json" 2>&1)
check_match "--file replaces the policy" "policy replaced" "$out"
check_eq "... registry.test is now allowed" 200 "$(code -H 'Accept: */*' http://registry.test/-/ping)"
code -m 2 http://allowed.test/v5 >/dev/null
check_eq "... allowed.test is no longer allowed: it was held for approval under version 5" 5 \
	"$(jq -r 'select(.session == "'"$ID"'" and .host == "allowed.test" and .decision == "ask") | .policy_version' "$AUDIT" | tail -n 1)"
check_eq "... and the records name version 5" 5 "$(version_of registry.test:80)"
check_match "a policy file with an error is refused with file:line:col" 'file.json:1:[0-9]+' \
	"$(printf '{"allow": [1]}' >"$LAB_DIR/tmp/bad.json"; sed -i 's#.*#{"allow": [1]}#' "$LAB_DIR/tmp/bad.json"; "$CTL" session policy "$ID" --file "$LAB_DIR/tmp/bad.json" 2>&1 | sed 's/bad.json/file.json/')"

# ---- who may: the session's user from outside it, not from inside it, not another user
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
cp "$POLICY" "$LAB_DIR/tmp/upolicy.json" && chmod 0644 "$LAB_DIR/tmp/upolicy.json"
mkdir -m 1777 "$LAB_DIR/u"
$NOBODY unshare --user --map-root-user --net sh -c "
	'$CLIENT' attach /proc/self/ns/net '$LAB_DIR/tmp/upolicy.json' user-live >'$LAB_DIR/u/u.out' 2>&1 &
	for i in \$(seq 100); do grep -q proxy_port= '$LAB_DIR/u/u.out' && break; sleep 0.05; done
	sed -n 's/^id=//p' '$LAB_DIR/u/u.out' >'$LAB_DIR/u/u.id'
	gw=\$(sed -n 's/^gw4=//p' '$LAB_DIR/u/u.out')
	'$CTL' session policy \$(cat '$LAB_DIR/u/u.id') --allow other.test >'$LAB_DIR/u/u.inside' 2>&1
	for i in \$(seq 200); do [ -e '$LAB_DIR/tmp/go' ] && break; sleep 0.05; done
	curl -s -m 10 --noproxy '' -x http://\$gw:3128 -o /dev/null -w '%{http_code}' http://other.test/u >'$LAB_DIR/u/u.curl'
	kill \$!; wait" </dev/null &
upid=$!
check "the user's session opens" eventually test -s "$LAB_DIR/u/u.id"
UID_SESSION=$(cat "$LAB_DIR/u/u.id")
check "... and the try from inside it has ended" eventually test -s "$LAB_DIR/u/u.inside"
check_match "a process inside the session cannot change its policy" "inside the session cannot change" \
	"$(cat "$LAB_DIR/u/u.inside")"
out=$(setpriv --reuid=65533 --regid=65533 --clear-groups "$CTL" session policy "$UID_SESSION" --allow other.test 2>&1)
check_match "another user cannot" "no such session of yours" "$out"
out=$($NOBODY "$CTL" session policy "$UID_SESSION" --allow other.test 2>&1)
check_match "the session's user can, from outside it" "policy changed" "$out"
touch "$LAB_DIR/tmp/go"
wait "$upid"
check_eq "... and the session's next request is decided by the new policy" 200 "$(cat "$LAB_DIR/u/u.curl")"

# ---- root is no exception: a root command inside the session (--sandbox-type firejail runs it as root,
# with the host's /run) cannot change its policy, nor after leaving the namespace (unshare -n), since it
# still descends from a process inside
out=$(lab_exec s1 "$CTL" session policy "$ID" --allow other.test 2>&1)
check_match "root inside the session cannot change its policy" "inside the session cannot change" "$out"
out=$(lab_exec s1 sh -c "unshare --net '$CTL' session policy '$ID' --allow other.test 2>&1; true")
check_match "... nor from a namespace of its own that it made inside" "inside the session cannot change" "$out"

# ---- an approval outlives kill -9 of the engine
lab_exec s1 curl -s -m 40 --noproxy '' -x "http://$GW:3128" -o /dev/null -w '%{http_code}' http://other.test/held \
	>"$LAB_DIR/tmp/held.out" 2>&1 &
held=$!
ask=""
for _ in $(seq 100); do
	ask=$("$CTL" asks --json | jq -r '.[] | select(.host == "other.test") | .id' | head -n 1)
	[ -n "$ask" ] && break
	sleep 0.1
done
check "the request to other.test is held" test -n "$ask"
"$CTL" approve "$ask" >/dev/null
wait "$held"
check_eq "approved, it got its 200" 200 "$(cat "$LAB_DIR/tmp/held.out")"
EPID=$(pgrep -P "$(lab_pid sluiced)" | head -n 1)
kill -9 "$EPID"
check "sluiced restarts the engine" eventually sh -c "[ -n \"\$(pgrep -P $(lab_pid sluiced))\" ] && [ \"\$(pgrep -P $(lab_pid sluiced) | head -n 1)\" != $EPID ]"
served() { [ "$(code -m 3 -H 'Accept: */*' http://registry.test/-/ping)" = 200 ]; }
check "the session is served again" eventually served
check_eq "the restarted engine still knows the approval: other.test passes without being held" 200 \
	"$(code http://other.test/after-restart)"
check_eq "... and nothing was held for it" "" "$("$CTL" asks --json | jq -r '.[] | select(.host == "other.test") | .id')"
# ---- idle upstream connections (up_pool.c) under a policy change: kept across client connections, the
# pool emptied by the change, and a kept-alive upstream whose address the new policy forbids never reused
port_of() { lab_exec s1 curl -s -m 10 --noproxy '' -x "http://$GW:3128" "$1" | jq -r '.client.port // empty'; }
pa=$(port_of http://other.test/pool-a) pb=$(port_of http://other.test/pool-b)
check "two client connections went over one upstream connection ($pa $pb)" test -n "$pa" -a "$pa" = "$pb"
rm -f "$LAB_DIR/tmp/go"
lab_exec s1 "$LAB_PYTHON" - "$GW" "$LAB_DIR/tmp/go" >"$LAB_DIR/tmp/ka.out" 2>&1 <<-'PY' &
	import json, os, socket, sys, time
	s = socket.create_connection((sys.argv[1], 3128), timeout=10)
	f = s.makefile("rb")
	def get(path):
	    s.sendall(b"GET http://other.test%s HTTP/1.1\r\nHost: other.test\r\n\r\n" % path)
	    status = int(f.readline().split()[1])
	    n = 0
	    while True:
	        line = f.readline().strip()
	        if not line:
	            break
	        k, _, v = line.partition(b":")
	        if k.strip().lower() == b"content-length":
	            n = int(v)
	    return status, f.read(n)
	st, body = get(b"/ka-1")
	print(st, json.loads(body)["client"]["port"], flush=True)
	for _ in range(200):
	    if os.path.exists(sys.argv[2]):
	        break
	    time.sleep(0.05)
	print(get(b"/ka-2")[0], flush=True)
	PY
ka=$!
check "a kept-alive client connection got its first answer" eventually test -s "$LAB_DIR/tmp/ka.out"
printf '{"allow": ["other.test", "registry.test"], "deny": [{"cidr": "%s/32"}, {"cidr": "%s/128"}]}\n' "$LAB_OTHER4" "$LAB_OTHER6" >"$LAB_DIR/tmp/narrow.json"
chmod 0644 "$LAB_DIR/tmp/narrow.json"
check_match "the new policy forbids other.test's address, not its name" "policy replaced" \
	"$("$CTL" session policy "$ID" --file "$LAB_DIR/tmp/narrow.json" 2>&1)"
touch "$LAB_DIR/tmp/go"
wait "$ka"
check_eq "the kept-alive upstream is not reused for the next request: refused (403) at the dial" 403 \
	"$(sed -n 2p "$LAB_DIR/tmp/ka.out")"
check_eq "a new client connection does not get the pooled one either: 403" 403 "$(code http://other.test/pool-c)"

# The compile cache (netd/policy_cache.c): s1's first text again, for another session
reused() { grep -c "compiled before: its compiled policy reused" "$(lab_log sluiced)"; }
n0=$(reused)
check "session s2 opens with s1's first policy" session s2
check_eq "sluiced reused its compile of that text (sluiced -v)" $((n0 + 1)) "$(reused)"
code_in() { lab_exec "$1" curl -s -m 10 --noproxy '' -x "http://$GW:3128" -o /dev/null -w '%{http_code}' "$2"; }
check_eq "s2: allowed.test is allowed" 200 "$(code_in s2 http://allowed.test/s2)"
check_eq "s2: evil.test stays refused (the ceiling, in the kept compile too)" 403 "$(code_in s2 http://evil.test/s2)"
# the organisation's ceiling changes on disk, no SIGHUP: a new session is compiled under it, not served the kept one
printf '{"ceiling": ["other.test", "registry.test"]}\n' >"$LAB_DIR/etc-sluice/policy.json"
check "session s3 opens with the same policy after the organisation layer changed" session s3
check_eq "s3: sluiced compiled it again (nothing reused)" $((n0 + 1)) "$(reused)"
check_eq "s3: allowed.test is refused: the changed ceiling holds" 403 "$(code_in s3 http://allowed.test/s3)"
check_eq "s2 keeps the policy it started with (a live session takes a change on SIGHUP)" 200 \
	"$(code_in s2 http://allowed.test/s2-again)"
lab_stop sluiced
done_testing
