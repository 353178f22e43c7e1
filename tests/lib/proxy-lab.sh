# Helpers for the proxy's integration tests (sourced after tap.sh and lab.sh, inside a lab):
# start sluice-proxy on a session's gateway with a policy, and send raw bytes through it.

PROXY_BIN=$SLUICE_BUILD_DIR/proxy/sluice-proxy

# Under SLUICE_VALGRIND=1 sluice-proxy runs inside valgrind's memcheck: any error, or memory definitely lost
# at exit, is in its log and lab_down fails the test (see _lab_sanitizer_check in lab.sh); so is a run that
# was killed before valgrind could report. Valgrind is ~20x slower: PROXY_WAIT (seconds to wait for the
# listener) and LAB_STOP_TIMEOUT (for the leak check at exit) are raised.
PROXY_WAIT=5
PROXY_VALGRIND=()
if [ -n "${SLUICE_VALGRIND:-}" ]; then
	PROXY_WAIT=60 LAB_STOP_TIMEOUT=30
	PROXY_VALGRIND=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
		--show-leak-kinds=definite --track-fds=no --num-callers=30)
fi

# proxy_bg CONFIG [ARGS...]: starts sluice-proxy (lab_bg name "proxy") with CONFIG, in valgrind under
# SLUICE_VALGRIND=1. Does not wait.
proxy_bg() {
	local cfg=$1
	shift
	lab_bg proxy "${PROXY_VALGRIND[@]}" "$PROXY_BIN" --config "$cfg" "$@"
}

# proxy_start SESSION POLICY_JSON [LIMITS_JSON]: writes the config, starts sluice-proxy (lab_bg name
# "proxy") serving HTTP on GW:3128 and DNS on GW:53 for the lab session SESSION, waits until it listens.
# Sets PROXY_GW, PROXY_ADDR, PROXY_AUDIT, PROXY_URL. $PROXY_EXTRA_SESSIONS (JSON objects, each with a
# leading comma), $PROXY_EXTRA_LISTEN (listen objects, each with a leading comma: the gateways of the extra
# sessions), $PROXY_AUDIT (path), $PROXY_UPSTREAM_DNS (ADDR:PORT) and $PROXY_EXTRA_CONFIG (top-level members,
# each with a trailing comma) may be set before.
proxy_start() {
	local sess=$1 policy=$2 limits=${3:-'{}'} info
	read -r PROXY_ADDR PROXY_GW PROXY_ADDR6 PROXY_GW6 _ < <(lab_session_info "$sess")
	PROXY_AUDIT=${PROXY_AUDIT:-$LAB_DIR/audit-$sess.log}
	PROXY_URL=http://$PROXY_GW:3128
	mkdir -p "$LAB_DIR/proxy" && chmod 0777 "$LAB_DIR/proxy"
	printf '%s\n' "$policy" >"$LAB_DIR/proxy/policy-$sess.json"
	cat >"$LAB_DIR/proxy/config-$sess.json" <<-EOF
		{
		  // written by tests/lib/proxy-lab.sh
		  "user": "nobody",
		  "audit_log": "$PROXY_AUDIT",
		  "upstream_dns": "${PROXY_UPSTREAM_DNS:-$LAB_DNS:53}",
		  "limits": $limits,
		  ${PROXY_EXTRA_CONFIG:-}
		  "listen": [
		    {"kind": "http", "address": "$PROXY_GW:3128"},
		    {"kind": "dns", "address": "$PROXY_GW:53"},
		    {"kind": "http", "address": "[$PROXY_GW6]:3128"},
		    {"kind": "dns", "address": "[$PROXY_GW6]:53"}
		    ${PROXY_EXTRA_LISTEN:-}
		  ],
		  "sessions": [
		    {"id": "$sess", "uid": 1000, "command": "test \"$sess\"", "addr4": "$PROXY_ADDR", "gw4": "$PROXY_GW",
		     "addr6": "$PROXY_ADDR6", "gw6": "$PROXY_GW6",
		     "policy": {"files": ["$LAB_DIR/proxy/policy-$sess.json"]}}
		    ${PROXY_EXTRA_SESSIONS:-}
		  ]
		}
	EOF
	proxy_bg "$LAB_DIR/proxy/config-$sess.json" --verbose
	lab_wait_port "$sess" "$PROXY_GW" 3128 "$PROXY_WAIT" || lab_bail "sluice-proxy did not start: $(tail -n 5 "$(lab_log proxy)")"
}

# proxy_use_resolver SESSION ADDR:PORT: restarts the proxy started by proxy_start SESSION with ADDR:PORT as
# its upstream resolver (a fake one that misbehaves) and waits until it listens again.
proxy_use_resolver() {
	sed -i "s/\"upstream_dns\": \"[^\"]*\"/\"upstream_dns\": \"$2\"/" "$LAB_DIR/proxy/config-$1.json"
	lab_stop proxy
	proxy_bg "$LAB_DIR/proxy/config-$1.json" --verbose
	lab_wait_port "$1" "$PROXY_GW" 3128 "$PROXY_WAIT" || lab_bail "sluice-proxy did not restart"
}

# raw_http SESSION "BYTES" : sends BYTES (printf %b escapes) to the proxy, prints the status line's code.
raw_http() {
	lab_exec "$1" "$LAB_PYTHON" - "$PROXY_GW" 3128 "$2" <<-'PY'
		import socket, sys
		s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
		s.sendall(sys.argv[3].encode('latin-1').decode('unicode_escape').encode('latin-1'))
		data = b''
		try:
		    while b'\r\n' not in data:
		        chunk = s.recv(4096)
		        if not chunk:
		            break
		        data += chunk
		except socket.timeout:
		    pass
		print(data.split(b' ')[1].decode() if data.startswith(b'HTTP/1.1 ') else 'none')
	PY
}

# audit_last FILTER: the last audit line matching the python expression FILTER (over `r`) as JSON.
audit_find() {
	"$LAB_PYTHON" - "$PROXY_AUDIT" "$1" <<-'PY'
		import json, sys
		found = None
		for line in open(sys.argv[1], encoding='utf-8'):
		    r = json.loads(line)
		    if eval(sys.argv[2], {}, {'r': r}):
		        found = r
		print(json.dumps(found) if found else '')
	PY
}
# audit_wait FILTER: like audit_find, but waits (10 s at most) for such a line: a record is written when
# its exchange ends, which the client may see first (a reset, a close), so a fixed pause before looking
# was a race a loaded machine could lose
audit_wait() {
	local i rec
	for i in $(seq 100); do
		rec=$(audit_find "$1")
		[ -z "$rec" ] || break
		sleep 0.1
	done
	printf '%s\n' "$rec"
}

# jget JSON KEY: a field of a JSON object.
jget() {
	"$LAB_PYTHON" -c 'import json,sys; v=json.loads(sys.argv[1] or "{}").get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"
}

# dns_ask SESSION NAME TYPE [tcp]: asks the proxy's DNS (on the session's gateway) and prints
# "RCODE ID_OK ADDR..." (addresses of A/AAAA answers, sorted).
# dns_raw SESSION HEX [tcp]: sends raw bytes (hex), prints the answer's rcode or "none".
_dns_py='
import socket, struct, sys, random, ipaddress
def name_wire(n):
    out = b""
    for l in n.rstrip(".").split("."):
        out += bytes([len(l)]) + l.encode()
    return out + b"\0"
def xchg(gw, msg, tcp):
    if tcp:
        s = socket.create_connection((gw, 53), timeout=3)
        s.sendall(struct.pack("!H", len(msg)) + msg)
        hdr = b""
        while len(hdr) < 2:
            c = s.recv(2 - len(hdr))
            if not c: return None
            hdr += c
        n = struct.unpack("!H", hdr)[0]; data = b""
        while len(data) < n:
            c = s.recv(n - len(data))
            if not c: return None
            data += c
        return data
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(float(__import__("os").environ.get("DNS_WAIT", "2")))
    s.sendto(msg, (gw, 53))
    try: return s.recvfrom(65535)[0]
    except socket.timeout: return None
def skip_name(d, i):
    while True:
        l = d[i]
        if l == 0: return i + 1
        if l & 0xc0 == 0xc0: return i + 2
        i += 1 + l
mode, gw = sys.argv[1], sys.argv[2]
tcp = len(sys.argv) > 5 and sys.argv[5] == "tcp"
if mode in ("ask", "qname", "ttl"):
    qid = random.randrange(65536)
    qt = {"A": 1, "AAAA": 28, "TXT": 16, "MX": 15}[sys.argv[4]]
    msg = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + name_wire(sys.argv[3]) + struct.pack("!HH", qt, 1)
else:
    msg = bytes.fromhex(sys.argv[3]); qid = struct.unpack("!H", msg[:2])[0] if len(msg) >= 2 else 0
    tcp = len(sys.argv) > 4 and sys.argv[4] == "tcp"
d = xchg(gw, msg, tcp)
if d is None or len(d) < 12:
    print("none"); sys.exit(0)
rid, flags, qd, an = struct.unpack("!HHHH", d[:8])
rc = ["NOERROR","FORMERR","SERVFAIL","NXDOMAIN","NOTIMP","REFUSED"][flags & 15] if (flags & 15) < 6 else str(flags & 15)
if mode == "raw":
    print(rc); sys.exit(0)
if mode == "qname":
    labels, i = [], 12
    while d[i]:
        labels.append(d[i + 1:i + 1 + d[i]].decode()); i += 1 + d[i]
    print(".".join(labels)); sys.exit(0)
i = 12
for _ in range(qd): i = skip_name(d, i) + 4
addrs, ttls = [], []
for _ in range(an):
    i = skip_name(d, i)
    t, c, ttl, rdl = struct.unpack("!HHIH", d[i:i+10]); i += 10
    ttls.append(ttl)
    if t == 1: addrs.append(str(ipaddress.IPv4Address(d[i:i+4])))
    if t == 28: addrs.append(str(ipaddress.IPv6Address(d[i:i+16])))
    i += rdl
if mode == "ttl":
    print(min(ttls) if ttls else "none"); sys.exit(0)
print(rc + (" TC" if flags & 0x0200 else ""), "id-ok" if rid == qid else "id-bad", *sorted(addrs))
'
dns_ask() {
	lab_exec "$1" "$LAB_PYTHON" -c "$_dns_py" ask "$PROXY_GW" "$2" "$3" "${4:-udp}"
}
# dns_qname SESSION NAME TYPE: asks like dns_ask, prints the question name of the answer as spelt there.
# dns_ttl SESSION NAME TYPE: asks like dns_ask, prints the smallest TTL of the answer records ("none").
# Both ask the gateway $PROXY_GW (set it for another session's gateway).
dns_qname() {
	lab_exec "$1" "$LAB_PYTHON" -c "$_dns_py" qname "$PROXY_GW" "$2" "$3" udp
}
dns_ttl() {
	lab_exec "$1" "$LAB_PYTHON" -c "$_dns_py" ttl "$PROXY_GW" "$2" "$3" udp
}
dns_raw() {
	lab_exec "$1" "$LAB_PYTHON" -c "$_dns_py" raw "$PROXY_GW" "$2" "${3:-udp}"
}
