# Helpers for the proxy's integration tests (sourced after tap.sh and lab.sh, inside a lab):
# start sluice-proxy on a session's gateway with a policy, and send raw bytes through it.

PROXY_BIN=$SLUICE_BUILD_DIR/proxy/sluice-proxy

# proxy_start SESSION POLICY_JSON [LIMITS_JSON]: writes the config, starts sluice-proxy (lab_bg name
# "proxy") serving HTTP on GW:3128 and DNS on GW:53 for the lab session SESSION, waits until it listens.
# Sets PROXY_GW, PROXY_ADDR, PROXY_AUDIT, PROXY_URL.
proxy_start() {
	local sess=$1 policy=$2 limits=${3:-'{}'} info
	read -r PROXY_ADDR PROXY_GW PROXY_ADDR6 PROXY_GW6 _ < <(lab_session_info "$sess")
	PROXY_AUDIT=$LAB_DIR/audit-$sess.log
	PROXY_URL=http://$PROXY_GW:3128
	mkdir -p "$LAB_DIR/proxy" && chmod 0777 "$LAB_DIR/proxy"
	printf '%s\n' "$policy" >"$LAB_DIR/proxy/policy-$sess.json"
	cat >"$LAB_DIR/proxy/config-$sess.json" <<-EOF
		{
		  // written by tests/lib/proxy-lab.sh
		  "user": "nobody",
		  "audit_log": "$PROXY_AUDIT",
		  "upstream_dns": "$LAB_DNS:53",
		  "limits": $limits,
		  "listen": [
		    {"kind": "http", "address": "$PROXY_GW:3128"},
		    {"kind": "dns", "address": "$PROXY_GW:53"},
		    {"kind": "http", "address": "[$PROXY_GW6]:3128"},
		    {"kind": "dns", "address": "[$PROXY_GW6]:53"}
		  ],
		  "sessions": [
		    {"id": "$sess", "uid": 1000, "command": "test \"$sess\"", "addr4": "$PROXY_ADDR", "gw4": "$PROXY_GW",
		     "addr6": "$PROXY_ADDR6", "gw6": "$PROXY_GW6",
		     "policy": {"files": ["$LAB_DIR/proxy/policy-$sess.json"]}}
		  ]
		}
	EOF
	lab_bg proxy "$PROXY_BIN" --config "$LAB_DIR/proxy/config-$sess.json" --verbose
	lab_wait_port "$sess" "$PROXY_GW" 3128 5 || lab_bail "sluice-proxy did not start: $(tail -n 5 "$(lab_log proxy)")"
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

# jget JSON KEY: a field of a JSON object.
jget() {
	"$LAB_PYTHON" -c 'import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"
}
