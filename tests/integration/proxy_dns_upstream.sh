#!/usr/bin/env bash
# proxy_dns_upstream: the engine's two DNS clients (its resolver for HTTP/CONNECT destinations, and the DNS
# proxy's relay) against an upstream resolver that answers every AAAA query with an error, as some corporate
# resolvers do (REFUSED with the question, REFUSED as a bare header, NOTIMP). Such an answer is the answer to
# that one question: under load, every A lookup of every other name still succeeds, requests are served on
# their IPv4 address, and the error comes straight back to the DNS client (issue 22, item 7).
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"

LG=$LAB_LIB_DIR/loadgen.py
RESOLVER=198.18.0.55
lab_internet_up >/dev/null
lab_session s1 >/dev/null
ip -n inet addr add "$RESOLVER/24" dev eth0
lab_bg refusedns -n inet "$LAB_PYTHON" "$LG" refusedns "$RESOLVER" "$LAB_DNS:53"
# the checks below ask it at once: wait until it serves (it says so), or a slow start reads as a wrong answer
for _ in $(seq 200); do grep -q '^refusedns on' "$(lab_log refusedns)" 2>/dev/null && break; sleep 0.05; done
grep -q '^refusedns on' "$(lab_log refusedns)" 2>/dev/null || lab_bail "the refusing resolver did not start"

proxy_start s1 '{"allow": ["allowed.test", "*.allowed.test"]}'
proxy_use_resolver s1 "$RESOLVER:53"
CURL=(lab_exec s1 curl -sS --noproxy '' -x "$PROXY_URL")

# Each variant once, by hand: the error is the AAAA question's answer, at once.
check_eq "relay: AAAA refused upstream (with the question): REFUSED" "REFUSED id-ok" "$(dns_ask s1 one.allowed.test AAAA)"
check_eq "relay: AAAA refused upstream (a bare header): REFUSED" "REFUSED id-ok" "$(dns_ask s1 bare1.allowed.test AAAA)"
check_eq "relay: AAAA not implemented upstream: NOTIMP" "NOTIMP id-ok" "$(dns_ask s1 notimp1.allowed.test AAAA)"
check_eq "relay: A of the same names still answered" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 bare1.allowed.test A)"
for v in one bare2 notimp2 MiXeD3; do
	t0=$(_lab_now_ms)
	code=$("${CURL[@]}" -m 20 -o /dev/null -w '%{http_code}' "http://$v.allowed.test/" 2>/dev/null)
	dt=$(($(_lab_now_ms) - t0))
	check_eq "resolver: $v.allowed.test (AAAA refused) is served on its A address" 200 "$code"
	check "resolver: without waiting for a timeout (${dt} ms)" test "$dt" -lt 1500
done

# Under load: 900 names (a third of each variant), 32 at a time; each a GET through the proxy (A + AAAA
# lookups by the engine's resolver) and A and AAAA queries through the DNS proxy: 1,800 refused AAAA
# questions upstream in all.
out=$(lab_exec s1 "$LAB_PYTHON" "$LG" lookups "$PROXY_ADDR@$PROXY_GW" 900 32 allowed.test)
diag "lookups under load: $out"
field() { "$LAB_PYTHON" -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])[sys.argv[2]]))' "$out" "$1"; }
check_eq "under load: every GET was served (900 x 200)" 900 "$(field get_200)"
check_eq "under load: no GET failed" "{}" "$(field get_other)"
check_eq "under load: every A query answered with its address" 900 "$(field a_ok)"
check_eq "under load: every AAAA query got the upstream's error at once" 900 "$(field aaaa_error)"
check_eq "under load: nothing else came back for AAAA" "{}" "$(field aaaa_other)"
check_eq "the upstream was asked in lower case only (resolver and relay; issue 22, item 8)" 0 \
	"$(lab_dns_queries | grep -c '[A-Z]')"
check_not "the engine never gave up on its resolver" grep -qiE 'nameservers? (have|has) failed|nameserver .* is down' \
	"$(lab_log proxy)"

sleep 0.3
r=$(audit_find 'r["protocol"]=="dns" and r["host"]=="bare1.allowed.test" and r["method"]=="AAAA"')
check_eq "audit: the refused AAAA is logged as allowed" allow "$(jget "$r" decision)"
check_eq "audit: with the upstream's rcode (REFUSED)" 5 "$(jget "$r" status)"
lab_stop proxy
check_eq "the proxy exits cleanly" 0 "$LAB_STOP_STATUS"
done_testing
