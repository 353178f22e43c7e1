#!/usr/bin/env bash
# proxy_dns_cache: the DNS proxy's answer cache (limits.dns_cache_entries), shared by two sessions with
# different policies. An answer is kept for its TTL and handed out with the TTL lowered; a session whose
# policy denies the name gets REFUSED although the answer is cached; a cached answer is filtered for the
# asking session's policy (a private address kept for the session whose policy allows the range, removed
# for the other); every query, cached or not, has its audit record (issue 16).
set -u
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/proxy-lab.sh"
lab_enter "$@"

LAB_DNS_TTL=4 lab_internet_up >/dev/null
lab_session s1 >/dev/null
lab_session s2 >/dev/null
read -r s2a s2g _ < <(lab_session_info s2)
mkdir -p "$LAB_DIR/proxy"
# s1 may use the private range private.test resolves to (a CIDR rule, at the organisation layer); s2 may not,
# and s2 may not use allowed.test at all.
printf '{"allow": [{"cidr": "10.255.255.0/24"}]}\n' >"$LAB_DIR/proxy/private-cidr.json"
printf '{"allow": ["private.test", "registry.test"]}\n' >"$LAB_DIR/proxy/s2.json"
PROXY_EXTRA_SESSIONS=",{\"id\": \"s2\", \"addr4\": \"$s2a\", \"gw4\": \"$s2g\",
  \"policy\": {\"files\": [\"$LAB_DIR/proxy/s2.json\"]}}"
PROXY_EXTRA_LISTEN=",{\"kind\": \"dns\", \"address\": \"$s2g:53\"}"
proxy_start s1 '{"allow": ["allowed.test", "*.allowed.test", "private.test", "registry.test"]}' \
	'{"dns_cache_entries": 100}'
# the organisation layer for s1: its policy object gets org_files
sed -i "s|\"files\": \\[\"$LAB_DIR/proxy/policy-s1.json\"\\]|&, \"org_files\": [\"$LAB_DIR/proxy/private-cidr.json\"]|" \
	"$LAB_DIR/proxy/config-s1.json"
grep -q private-cidr "$LAB_DIR/proxy/config-s1.json" || lab_bail "could not give s1 its CIDR rule"
lab_stop proxy
proxy_bg "$LAB_DIR/proxy/config-s1.json" --verbose
lab_wait_port s1 "$PROXY_GW" 3128 "$PROXY_WAIT" || lab_bail "sluice-proxy did not restart"
S1_GW=$PROXY_GW
ask2() { PROXY_GW=$s2g dns_ask s2 "$@"; }

# Kept for its TTL, handed out aged.
lab_dns_mark
check_eq "first query: answered by the upstream" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A)"
ttl1=$(dns_ttl s1 allowed.test A)
sleep 1.2
check_eq "again: the same answer" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A)"
ttl2=$(dns_ttl s1 allowed.test A)
check "the kept answer's TTL is lowered by its age ($ttl1 then $ttl2)" test "$ttl2" -lt "$ttl1"
check_eq "in another letter case: from the cache too, spelt as asked" "AlLoWeD.test" "$(dns_qname s1 AlLoWeD.test A)"
dns_ask s1 registry.test A >/dev/null # a marker: once it shows up upstream, the others would have
lab_dns_wait_query registry.test 3
check_eq "the upstream was asked once for allowed.test A" 1 "$(lab_dns_queries -v | grep -c '^A allowed.test ')"

# Per policy: the cache holds answers, not decisions.
check_eq "s2, whose policy does not allow allowed.test: REFUSED although it is cached" "REFUSED id-ok" \
	"$(ask2 allowed.test A)"
check_eq "s1 with the CIDR rule: private.test keeps its private address" "NOERROR id-ok $LAB_PRIVATE4" \
	"$(dns_ask s1 private.test A)"
lab_dns_mark
check_eq "s2 without it: the cached answer is filtered for s2 (address removed)" "NOERROR id-ok" \
	"$(ask2 private.test A)"
check_eq "s1 again: its address is still there" "NOERROR id-ok $LAB_PRIVATE4" "$(dns_ask s1 private.test A)"
PROXY_GW=$s2g dns_ask s2 registry.test AAAA >/dev/null
lab_dns_wait_query registry.test 3
check_eq "those answers came from the cache (the upstream was not asked for private.test)" 0 \
	"$(lab_dns_queries | grep -c '^private.test$')"

# Gone after the TTL (4 s here).
sleep 4.2
lab_dns_mark
check_eq "after the TTL: answered again" "NOERROR id-ok $LAB_ALLOWED4" "$(dns_ask s1 allowed.test A)"
check "after the TTL: the upstream is asked again" lab_dns_wait_query allowed.test 3

# Every query has its audit record, cached or not.
sleep 0.3
n=$("$LAB_PYTHON" -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]) if (lambda r: r["protocol"] == "dns" and r["host"] == "allowed.test"
    and r["session"] == "s1")(json.loads(l))))' "$PROXY_AUDIT")
check_eq "audit: one record per allowed.test query of s1 (6)" 6 "$n"
r=$(audit_find 'r["protocol"]=="dns" and r["session"]=="s2" and r["host"]=="allowed.test"')
check_eq "audit: s2's refused query is a denial" deny "$(jget "$r" decision)"
PROXY_GW=$S1_GW
lab_stop proxy
check_eq "the proxy exits cleanly" 0 "$LAB_STOP_STATUS"
done_testing
