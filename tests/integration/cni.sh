#!/usr/bin/env bash
# sluice-cni driven directly per the CNI spec (environment + network configuration on stdin), against
# sluiced in the lab: ADD wires a namespace (result with the pool address, gateway route, DNS), traffic is
# decided by the network's policy (transparent mode: the container has no proxy variables), the audit log
# names the container and the pod, per-container narrowing (CNI_ARGS, runtimeConfig) only narrows, the
# organisation layer caps it, CHECK verifies, DEL releases everything and is idempotent, VERSION, and
# malformed configurations and environments get CNI error objects with their codes.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need curl nft "$LAB_PYTHON" setpriv

B=$SLUICE_BUILD_DIR
PLUGIN=$B/cni/sluice-cni
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
GW4=100.64.0.1
export SLUICE_RUN_DIR=$RUN

lab_internet_up
mkdir -p "$LAB_DIR/etc-sluice"
# the organisation forbids other.test, whatever a network's policy allows
echo '{ "deny": ["other.test"] }' >"$LAB_DIR/etc-sluice/policy.json"
chmod 0644 "$LAB_DIR/etc-sluice/policy.json"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually
audit_has() { grep -q -- "$1" "$AUDIT"; }

CONF='{"cniVersion": "1.0.0", "name": "sluice-net", "type": "sluice-cni", "runDir": "'$RUN'",
  "policy": {"allow": ["allowed.test", "other.test"]},
  "policies": {"registry-only": {"allow": ["registry.test"]}}, "namespaces": {"ci": "registry-only"}}'
# cni CMD ID NETNS [CONF [CNI_ARGS]]: runs the plugin as a runtime would; stdout in $OUT, exit status in $RC
cni() {
	OUT=$(printf '%s' "${4:-$CONF}" | env -i PATH="$PATH" CNI_COMMAND="$1" CNI_CONTAINERID="$2" CNI_NETNS="$3" \
		CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni CNI_ARGS="${5:-}" SLUICE_PRESET_DIR="$SLUICE_PRESET_DIR" "$PLUGIN" 2>/dev/null)
	RC=$?
}
jq_() { printf '%s' "$OUT" | "$LAB_PYTHON" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# code CMD ID NETNS CONF [ARGS]: the CNI error code the plugin answers with ("" when it succeeded)
code() { cni "$@"; [ "$RC" -ne 0 ] && jq_ 'd["code"]'; }
# get ID URL: HTTP status a container sees without any proxy setting (transparent mode)
get() { ip netns exec "$1" curl -s -o /dev/null -w '%{http_code}' -m 10 --noproxy '*' \
	--resolve "${2#http://}:80:$LAB_ALLOWED4" "$2/cni"; }

check "sluiced starts" start_sluiced

cni VERSION "" "" '{"cniVersion": "1.0.0"}'
check_eq "VERSION answers" "0 1.0.0" "$RC $(jq_ '" ".join(d["supportedVersions"])')"

ip netns add c1
cni ADD ctr1 /run/netns/c1 "$CONF" "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-1;K8S_POD_INFRA_CONTAINER_ID=ctr1"
RESULT1=$OUT
diag "$OUT"
check_eq "ADD succeeds" 0 "$RC"
ADDR1=$(jq_ 'd["ips"][0]["address"]')
check_match "the result has a pool address on the container's interface" '^100\.64\.[0-9]+\.[0-9]+/32$' "$ADDR1"
check_eq "... with the gateway, on the sandbox interface" "$GW4 eth0 /run/netns/c1" \
	"$(jq_ 'd["ips"][0]["gateway"], d["interfaces"][d["ips"][0]["interface"]]["name"], d["interfaces"][d["ips"][0]["interface"]]["sandbox"]')"
check_eq "... a default route via the gateway and the gateway as DNS" "0.0.0.0/0 $GW4 $GW4" \
	"$(jq_ 'd["routes"][0]["dst"], d["routes"][0]["gw"], d["dns"]["nameservers"][0]')"
HOSTIF1=$(jq_ 'd["interfaces"][0]["name"]')
check_eq "... and the container interface's MAC" "$(cat /sys/class/net/lo/address >/dev/null; ip netns exec c1 cat /sys/class/net/eth0/address)" \
	"$(jq_ 'd["interfaces"][1]["mac"]')"
check "the container's eth0 has that address" sh -c "ip -n c1 -o addr show dev eth0 | grep -q ' ${ADDR1}'"
check "... and a default route via the gateway" sh -c "ip -n c1 route show default | grep -q 'via $GW4'"
check "sluicectl sessions lists the container" sh -c \
	"'$B/tools/sluicectl/sluicectl' sessions | grep -q 'cni sluice-net container=ctr1 pod=shop/web-1'"

check_eq "the container reaches an allowed host (transparent, no proxy setting)" 200 "$(get c1 http://allowed.test)"
check_eq "... and is refused a denied one" 403 "$(get c1 http://evil.test)"
check "the denial is audited with the container id and the pod" eventually audit_has \
	'"command":"cni sluice-net container=ctr1 pod=shop/web-1".*"host":"evil.test".*"decision":"deny"'
check_eq "the organisation's deny beats the network's allow" 403 "$(get c1 http://other.test)"
# resolve NS NAME: the A record the gateway's DNS proxy answers for NAME ("" when refused)
resolve() {
	ip netns exec "$1" "$LAB_PYTHON" - "$GW4" "$2" <<-'PY'
		import socket, struct, sys
		gw, name = sys.argv[1], sys.argv[2]
		q = struct.pack(">HHHHHH", 0x5c1c, 0x0100, 1, 0, 0, 0)
		q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
		s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5); s.sendto(q, (gw, 53))
		r = s.recv(4096); an = struct.unpack(">H", r[6:8])[0]; i = len(q)
		for _ in range(an):
		    i += 2 if r[i] & 0xc0 else r.index(b"\0", i) + 1 - i
		    t, _, _, ln = struct.unpack(">HHIH", r[i:i + 10]); i += 10
		    if t == 1: print(socket.inet_ntoa(r[i:i + 4])); break
		    i += ln
	PY
}
check_eq "DNS on the gateway answers an allowed name" "$LAB_ALLOWED4" "$(resolve c1 allowed.test)"
check_eq "... and refuses a denied one" "" "$(resolve c1 evil.test)"

# CHECK: against the result of ADD; a changed result or another namespace fails
CHK=$(printf '%s' "$CONF" | "$LAB_PYTHON" -c 'import json,sys; c=json.load(sys.stdin); c["prevResult"]=json.loads(sys.argv[1]); print(json.dumps(c))' "$RESULT1")
cni CHECK ctr1 /run/netns/c1 "$CHK"
check_eq "CHECK passes for the live session" 0 "$RC"
ip netns add other
check_eq "CHECK fails (code 102) when the namespace is another" 102 "$(code CHECK ctr1 /run/netns/other "$CHK")"
check_eq "CHECK fails (code 102) for an unknown container" 102 "$(code CHECK nosuch /run/netns/c1 "$CHK")"
check_eq "CHECK without prevResult is a config error (7)" 7 "$(code CHECK ctr1 /run/netns/c1 "$CONF")"
check_eq "a second ADD for the same container is refused" 100 "$(code ADD ctr1 /run/netns/other)"

# only root may ask for CNI sessions (sluiced checks SO_PEERCRED): an unprivileged caller gets EPERM
ip netns add c8
OUT=$(printf '%s' "$CONF" | setpriv --reuid 65534 --regid 65534 --clear-groups env -i PATH="$PATH" CNI_COMMAND=ADD \
	CNI_CONTAINERID=ctr8 CNI_NETNS=/run/netns/c8 CNI_IFNAME=eth0 "$PLUGIN" 2>/dev/null)
check_match "an unprivileged caller's ADD is refused by sluiced" 'only root' "$(jq_ 'd["msg"]')"
OUT=$(printf '%s' "$CONF" | setpriv --reuid 65534 --regid 65534 --clear-groups env -i PATH="$PATH" CNI_COMMAND=DEL \
	CNI_CONTAINERID=ctr1 CNI_IFNAME=eth0 "$PLUGIN" 2>/dev/null)
check_match "... and so is its DEL of another's container" 'only root' "$(jq_ 'd["msg"]')"
check "... which still has its session" sh -c "'$B/tools/sluicectl/sluicectl' sessions | grep -q container=ctr1"

# per-container narrowing: a deny from CNI_ARGS, a named policy from runtimeConfig; never wider
ip netns add c2
cni ADD ctr2 /run/netns/c2 "$CONF" "SLUICE_DENY=allowed.test"
check_eq "ADD with CNI_ARGS SLUICE_DENY" 0 "$RC"
check_eq "... the container is refused what it denied" 403 "$(get c2 http://allowed.test)"
ip netns add c3
RCONF=$(printf '%s' "$CONF" | "$LAB_PYTHON" -c 'import json,sys; c=json.load(sys.stdin); c["runtimeConfig"]={"sluice": {"policy": "registry-only"}}; print(json.dumps(c))')
cni ADD ctr3 /run/netns/c3 "$RCONF"
check_eq "ADD with runtimeConfig picking a named policy" 0 "$RC"
check_eq "... that policy applies (allowed.test is not in it)" 403 "$(get c3 http://allowed.test)"
check_match "... and what it allows is reached (the registry answers)" '^(200|404)$' "$(get c3 http://registry.test)"
FPOL=$LAB_DIR/tmp/cni-file-policy.json
echo '{ "allow": ["registry.test"] }' >"$FPOL"
ip netns add c6
cni ADD ctr6 /run/netns/c6 '{"cniVersion": "1.0.0", "name": "file-net", "type": "sluice-cni", "runDir": "'$RUN'", "policy": "'$FPOL'"}'
check_eq "ADD with a policy file path" 0 "$RC"
check_match "... the file's policy applies (allowed.test refused, the registry answers)" "^403 (200|404)$" "$(get c6 http://allowed.test) $(get c6 http://registry.test)"
cni DEL ctr6 /run/netns/c6
ip netns add c7
OUT=$(printf '%s' "$CONF" | env -i PATH="$PATH" CNI_COMMAND=ADD CNI_CONTAINERID=ctr7 CNI_NETNS=/run/netns/c7 \
	CNI_IFNAME=net1 CNI_PATH=/usr/lib/cni "$PLUGIN" 2>/dev/null)
check_eq "ADD with CNI_IFNAME net1: the result names it" net1 "$(jq_ 'd["interfaces"][1]["name"]')"
check "... and the container has net1 with the address and the default route" sh -c \
	"ip -n c7 -o addr show dev net1 | grep -q '$(jq_ 'd["ips"][0]["address"]')' && ip -n c7 route show default | grep -q 'dev net1'"
OUT=$(printf '%s' "$CONF" | env -i PATH="$PATH" CNI_COMMAND=DEL CNI_CONTAINERID=ctr7 CNI_IFNAME=net1 "$PLUGIN" 2>&1)
check "... and DEL of ctr7/net1 removes it" eventually sh -c "! ip -n c7 link show net1 >/dev/null 2>&1"
ip netns add c5
cni ADD ctr5 /run/netns/c5 "$CONF" "K8S_POD_NAMESPACE=ci;K8S_POD_NAME=job-1"
check_eq "ADD of a pod in a namespace the network maps to a named policy" 0 "$RC"
check_eq "... that policy applies to it" 403 "$(get c5 http://allowed.test)"
cni DEL ctr5 /run/netns/c5
check_eq "a policy name the network does not define is refused (7)" 7 \
	"$(code ADD ctr4 /run/netns/c3 "$CONF" "SLUICE_POLICY=everything")"
check_eq "a bad deny pattern in CNI_ARGS is refused (4)" 4 "$(code ADD ctr4 /run/netns/c3 "$CONF" "SLUICE_DENY=a b")"

# DEL releases everything and is idempotent
nft list set inet sluice src4 >"$LAB_DIR/tmp/src4.before"
check "the session's address is in the anti-spoofing set" grep -q "${ADDR1%/32}" "$LAB_DIR/tmp/src4.before"
cni DEL ctr1 /run/netns/c1
check_eq "DEL succeeds" 0 "$RC"
check "... the host-side link goes" eventually sh -c "! ip link show '$HOSTIF1' >/dev/null 2>&1"
check "... and the container's eth0" eventually sh -c "! ip -n c1 link show eth0 >/dev/null 2>&1"
check_not "... and its nftables elements" sh -c "nft list set inet sluice src4 | grep -q '${ADDR1%/32}'"
check_not "... and sluiced's session" sh -c "'$B/tools/sluicectl/sluicectl' sessions | grep -q container=ctr1"
cni DEL ctr1 /run/netns/c1
check_eq "a second DEL succeeds too" 0 "$RC"
cni DEL ctr1 ""
check_eq "DEL without a namespace (the runtime lost it) succeeds" 0 "$RC"
NORUN='{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "runDir": "/run/no-sluiced", "policy": "registries"}'
cni DEL ctr1 "" "$NORUN"
check_eq "DEL when sluiced is not running succeeds (nothing to release)" 0 "$RC"
cni ADD ctr9 /run/netns/c1 "$NORUN"
check_eq "ADD when sluiced is not running fails (100)" "1 100" "$RC $(jq_ 'd["code"]')"
check_match "... saying how to start it" 'sluiced is not running' "$(jq_ 'd["msg"]')"

# malformed configurations and environments: CNI error objects with their codes
check_eq "not JSON (6)" 6 "$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", ')"
check_eq "trailing bytes (6)" 6 "$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0"} x')"
check_eq "an unsupported version (1)" 1 \
	"$(code ADD x /run/netns/c1 '{"cniVersion": "0.3.1", "name": "n", "type": "sluice-cni", "policy": "registries"}')"
check_eq "no name (7)" 7 "$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "type": "sluice-cni", "policy": "registries"}')"
check_eq "no policy (7)" 7 "$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni"}')"
check_eq "a policy that is neither preset nor path (7)" 7 \
	"$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "policy": "../x"}')"
check_eq "an unknown preset (101)" 101 \
	"$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "policy": "nosuch"}')"
cni ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "policy": {"allow": ["*.com"]}}'
check_eq "an unsafe inline rule (101)" "1 101" "$RC $(jq_ 'd["code"]')"
check_match "... naming the rule" '\*\.com' "$(jq_ 'd["msg"]')"
check_eq "a missing policy file (101)" 101 \
	"$(code ADD x /run/netns/c1 '{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "policy": "/nonexistent.json"}')"
check_eq "an unknown runtimeConfig.sluice field (2)" 2 "$(code ADD x /run/netns/c1 \
	'{"cniVersion": "1.0.0", "name": "n", "type": "sluice-cni", "policy": "registries", "runtimeConfig": {"sluice": {"allow": ["x.test"]}}}')"
check_eq "a bad container id (4)" 4 "$(code ADD '-bad' /run/netns/c1)"
check_eq "a missing CNI_COMMAND (4)" 4 "$(code '' x /run/netns/c1)"
check_eq "an unknown CNI_COMMAND (4)" 4 "$(code GC x /run/netns/c1)"
: >"$LAB_DIR/tmp/notns"
cni ADD x "$LAB_DIR/tmp/notns"
check_eq "CNI_NETNS that is not a namespace: sluiced refuses it (100)" "1 100" "$RC $(jq_ 'd["code"]')"
check_match "... saying so" 'not a namespace' "$(jq_ 'd["msg"]')"
check_eq "CNI_NETNS that does not exist (3)" 3 "$(code ADD x /run/netns/nosuch)"

for c in ctr2 ctr3; do cni DEL $c /run/netns/x; done
check "after every DEL no sl- link is left" eventually sh -c "! ip -o link | grep -q ' sl-'"
check_eq "... and sluiced has no session" "" "$("$B/tools/sluicectl/sluicectl" sessions 2>/dev/null | grep cni)"

done_testing
