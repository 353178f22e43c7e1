#!/usr/bin/env bash
# proxy_dns: sluice-proxy's DNS proxy in the lab, over UDP and TCP: allowed names are relayed to the
# fake internet's resolver and answered; denied names are answered here and never reach the upstream
# (its query log proves it); forbidden addresses are removed from answers; malformed queries get
# FORMERR/REFUSED or nothing; one audit line per query.
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"

lab_internet_up >/dev/null
lab_session s1 >/dev/null
proxy_start s1 '{
  "allow": ["allowed.test", "*.allowed.test", "private.test", "loop.test", "meta.test", "registry.test", "nothere.test", "big.test"],
  "deny": ["evil.allowed.test"]
}'
lab_dns_add mixed.allowed.test 10.1.2.3
lab_dns_add mixed.allowed.test "$LAB_OTHER4"

lab_dns_mark
check_eq "allowed A over UDP" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A)"
check_eq "allowed AAAA over UDP" "NOERROR id-ok $LAB_ALLOWED6" "$(dns_ask s1 allowed.test AAAA)"
check_eq "allowed A over TCP" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A tcp)"
check_eq "wildcard-allowed name" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 www.allowed.test A)"
check "allowed queries reached the upstream" lab_dns_wait_query allowed.test 2
# The client's letter case is not passed on (it could carry bits to whoever sees the upstream query), and
# the answer still names the question as the client spelt it.
lab_dns_mark
check_eq "mixed-case name: allowed, the decision ignores case" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 AlLoWeD.TeSt A)"
check_eq "mixed-case name over TCP" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 wWw.ALLOWED.test A tcp)"
check "mixed-case names reach the upstream in lower case" lab_dns_wait_query www.allowed.test 3
check_eq "the upstream saw only lower-case names" "A allowed.test A www.allowed.test" \
	"$(lab_dns_queries -v | awk '{ printf "%s%s %s", (NR > 1 ? " " : ""), $1, $2 }')"
check_eq "the answer's question is spelt as the client asked" "AlLoWeD.TeSt" "$(dns_qname s1 AlLoWeD.TeSt A)"
check_eq "so is a rebuilt answer's (an address removed)" "MiXeD.allowed.TEST" "$(dns_qname s1 MiXeD.allowed.TEST A)"
check_eq "allowed name the upstream does not know: its NXDOMAIN passed on" "NXDOMAIN id-ok" \
	"$(dns_ask s1 nothere.test A)"

# Denied names never leave the host.
lab_dns_mark
check_eq "denied name: REFUSED (UDP)" "REFUSED id-ok" "$(dns_ask s1 evil.test A)"
check_eq "denied name: REFUSED (TCP)" "REFUSED id-ok" "$(dns_ask s1 evil.test AAAA tcp)"
check_eq "deny rule beats a wildcard allow" "REFUSED id-ok" "$(dns_ask s1 evil.allowed.test A)"
check_eq "denied TXT (exfiltration channel)" "REFUSED id-ok" "$(dns_ask s1 c2VjcmV0.exfil.evil.test TXT)"
check_eq "names in other case are denied the same" "REFUSED id-ok" "$(dns_ask s1 EVIL.test A)"
# a marker query after them: once it shows up upstream, the denied ones would have too
dns_ask s1 registry.test A >/dev/null
lab_dns_wait_query registry.test 3
queries=$(lab_dns_queries)
check_not "denied names never reached the upstream resolver" grep -qiE 'evil' <<<"$queries"

# Forbidden addresses are removed from answers.
check_eq "allowed name with a private address: address removed" "NOERROR id-ok" "$(dns_ask s1 private.test A)"
check_eq "allowed name with loopback addresses: removed (A)" "NOERROR id-ok" "$(dns_ask s1 loop.test A)"
check_eq "allowed name with loopback addresses: removed (AAAA)" "NOERROR id-ok" "$(dns_ask s1 loop.test AAAA)"
check_eq "metadata address removed" "NOERROR id-ok" "$(dns_ask s1 meta.test A)"
check_eq "mixed answer: only the public address kept" "NOERROR id-ok $LAB_OTHER4" "$(dns_ask s1 mixed.allowed.test A)"

# An answer too big for UDP: the proxy asks the upstream again over TCP; a UDP client gets TC and the
# whole answer over TCP.
for i in $(seq 1 119); do echo "198.18.3.$i big.test"; done >>"$LAB_DIR/dns/hosts"
lab_dns_add big.test 198.18.3.120
out=$(dns_ask s1 big.test A)
check_match "big answer over UDP: truncated (TC), no records" '^NOERROR TC id-ok$' "$out"
out=$(dns_ask s1 big.test A tcp)
check_eq "big answer over TCP: all 120 addresses" 120 "$(wc -w <<<"${out#NOERROR id-ok }")"
check_match "big answer over TCP: first and last address" '198\.18\.3\.1 .*198\.18\.3\.99' "$out"

# Malformed and unusual queries (hex: header, then question).
lab_dns_mark
H=123401000001000000000000                  # id 0x1234, RD, one question
Q=07616c6c6f776564047465737400              # allowed.test
A=00010001                                  # type A, class IN
check_eq "two questions: FORMERR" FORMERR "$(dns_raw s1 123401000002000000000000$Q$A$Q$A)"
check_eq "no question: FORMERR" FORMERR "$(dns_raw s1 123401000000000000000000)"
check_eq "class CH: REFUSED" REFUSED "$(dns_raw s1 $H${Q}00010003)"
check_eq "opcode STATUS: REFUSED" REFUSED "$(dns_raw s1 123411000001000000000000$Q$A)"
check_eq "AXFR: REFUSED" REFUSED "$(dns_raw s1 $H${Q}00fc0001)"
check_eq "query carrying an answer record: FORMERR" FORMERR \
	"$(dns_raw s1 123401000001000100000000$Q${A}c00c000100010000003c000401020304)"
check_eq "TC set in a query: FORMERR" FORMERR "$(dns_raw s1 123403000001000000000000$Q$A)"
check_eq "a response sent to the proxy: no answer" none "$(dns_raw s1 123481800001000000000000$Q$A)"
check_eq "shorter than a header: no answer" none "$(dns_raw s1 12340100)"
check_eq "truncated question: FORMERR" FORMERR "$(dns_raw s1 ${H}07616c6c6f77)"
check_eq "label holding a dot byte (allowed\\.test): REFUSED" REFUSED "$(dns_raw s1 ${H}0c616c6c6f7765642e7465737400$A)"
check_eq "label holding a dot byte (evil\\.allowed.test): REFUSED" REFUSED \
	"$(dns_raw s1 ${H}0c6576696c2e616c6c6f776564047465737400$A)"
check_eq "compression pointer loop: FORMERR" FORMERR "$(dns_raw s1 ${H}c00c$A)"
check_eq "malformed over TCP: FORMERR" FORMERR "$(dns_raw s1 123401000000000000000000 tcp)"
check_eq "the DNS proxy still answers" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A)"
lab_dns_wait_query allowed.test 3
check_not "no refused query reached the upstream" grep -qvxE 'allowed.test' <(lab_dns_queries)

# The audit log.
r=$(audit_wait 'r["protocol"]=="dns" and r["host"]=="evil.test" and r["method"]=="A"')
check_eq "audit: denied query logged" deny "$(jget "$r" decision)"
check_eq "audit: REFUSED status" 5 "$(jget "$r" status)"
check_eq "audit: session" s1 "$(jget "$r" session)"
r=$(audit_find 'r["protocol"]=="dns" and r["host"]=="mixed.allowed.test"')
check_eq "audit: allowed query logged" allow "$(jget "$r" decision)"
check_match "audit: rule of the allow" 'policy-s1.json:[0-9]+:[0-9]+' "$(jget "$r" rule)"
check_eq "audit: kept address" "$LAB_OTHER4" "$(jget "$r" address)"
check_match "audit: stripped addresses noted" 'forbidden ranges removed' "$(jget "$r" reason)"
r=$(audit_find 'r["protocol"]=="dns" and "zone transfer" in (r["reason"] or "")')
check_match "audit: refused malformed query logged with its reason" 'zone transfer' "$(jget "$r" reason)"
# The upstream resolver is down: allowed names get SERVFAIL after the relay timeout, never a hang.
lab_stop dnsmasq || true
t0=$(_lab_now_ms)
check_eq "upstream down: SERVFAIL" "SERVFAIL id-ok" "$(DNS_WAIT=8 lab_exec s1 "$LAB_PYTHON" -c "$_dns_py" ask "$PROXY_GW" registry.test A udp 2>&1 |
	sed 's/^none$/none (client gave up first)/')"
t1=$(_lab_now_ms)
check "upstream down: answered within the relay timeout (4 s) plus a sweep" test $((t1 - t0)) -lt 6000
r=$(audit_wait 'r["protocol"]=="dns" and r["status"]==2')
check_match "audit: the timeout is logged with its reason" 'did not answer' "$(jget "$r" error)"
lab_stop proxy
check_eq "the proxy exits cleanly" 0 "$LAB_STOP_STATUS"
done_testing
