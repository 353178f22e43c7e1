# Load in a lab (sourced after tap.sh and lab.sh, inside a lab; used by tests/integration/reliability.sh and
# tools/bench-load.sh): many proxy sessions from one network namespace, an echo server on the internet, and
# the engine's descriptors and memory read from /proc.
#
# load_up NSESS [LIMITS_JSON]   netns "load" on a veth (host side "loadh"): session i (0..NSESS-1) is the
#                        address 100.126.(100 + i/250).(i%250 + 1)/16 in "load"; all talk to one gateway,
#                        100.126.0.1 on the host, where sluice-proxy listens, HTTP on 3128 and SOCKS5 on 1080 (as under sluiced, whose
#                        sessions share a gateway and are told apart by source address).
#                        Each session may CONNECT to allowed.test ports 7001-7004 (an asyncio echo server in
#                        inet) and GET allowed.test; nothing else. Sets LOAD_PID (the engine), LOAD_AUDIT,
#                        LOAD_SESSIONS (file of "SRC GW" lines), LOAD_S1 and LOAD_S2 ("SRC@GW" of sessions 1, 2)
# load_gen ARGS...       runs tests/lib/loadgen.py in "load" (see its docstring)
# load_fds               the engine's open descriptors;  load_rss_kb: its VmRSS in KiB
# load_wait_fds N [S]    waits (default 10 s) until the engine has at most N descriptors; prints the count
# load_audit_lines       lines in the audit log
# json_get JSON KEY      a field of a JSON object

LOAD_TARGETS="allowed.test:7001 allowed.test:7002 allowed.test:7003 allowed.test:7004"

_load_addr() { # _load_addr THIRD_OCTET_BASE I: 100.126.(BASE + I/250).(I%250 + 1)
	echo "100.126.$(($1 + $2 / 250)).$(($2 % 250 + 1))"
}

load_up() {
	local n=$1 limits=${2:-'{}'} i src gw sessions="" listen cfg=$LAB_DIR/load/config.json
	mkdir -p "$LAB_DIR/load" && chmod 0777 "$LAB_DIR/load"
	_lab_veth load loadh
	{
		echo "addr add 100.126.0.1/16 dev loadh"
		echo "link set loadh up"
	} | ip -batch - || lab_bail "load_up: host side"
	{
		for ((i = 0; i < n; i++)); do echo "addr add $(_load_addr 100 "$i")/16 dev eth0"; done
		echo "link set eth0 up"
	} | ip -n load -batch - || lab_bail "load_up: load side"
	: >"$LAB_DIR/load/sessions"
	for ((i = 0; i < n; i++)); do
		src=$(_load_addr 100 "$i") gw=100.126.0.1
		echo "$src $gw" >>"$LAB_DIR/load/sessions"
		sessions+="${sessions:+,}{\"id\": \"load$((i + 1))\", \"uid\": 1000, \"command\": \"load $((i + 1))\", \"addr4\": \"$src\", \"gw4\": \"$gw\", \"policy\": {\"allow\": [\"allowed.test:80,7001-7004\"]}}"
	done
	LOAD_SESSIONS=$LAB_DIR/load/sessions
	LOAD_AUDIT=$LAB_DIR/load/audit.log
	LOAD_S1=$(_load_addr 100 0)@100.126.0.1
	LOAD_S2=$(_load_addr 100 1)@100.126.0.1
	listen='{"kind": "http", "address": "100.126.0.1:3128"}, {"kind": "socks5", "address": "100.126.0.1:1080"}'
	cat >"$cfg" <<-EOF
		{
		  "user": "nobody",
		  "audit_log": "$LOAD_AUDIT",
		  "upstream_dns": "$LAB_DNS:53",
		  "limits": $limits,
		  "listen": [$listen],
		  "sessions": [$sessions]
		}
	EOF
	lab_bg echo7000 -n inet "$LAB_PYTHON" "$LAB_LIB_DIR/loadgen.py" echo 7001 7002 7003 7004
	proxy_bg "$cfg"
	LOAD_PID=$(lab_pid proxy)
	lab_wait_port load 100.126.0.1 3128 "$PROXY_WAIT" || lab_bail "sluice-proxy did not start: $(tail -n 5 "$(lab_log proxy)")"
	lab_wait_port inet "$LAB_ALLOWED4" 7004 5 || lab_bail "the echo server did not start: $(tail -n 5 "$(lab_log echo7000)")"
	export LOAD_SESSIONS LOAD_AUDIT LOAD_S1 LOAD_S2 LOAD_PID
}

load_gen() { ip netns exec load "$LAB_PYTHON" "$LAB_LIB_DIR/loadgen.py" "$@"; }
load_fds() { local f=(/proc/"$LOAD_PID"/fd/*); echo "${#f[@]}"; }
load_rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$LOAD_PID/status"; }
load_audit_lines() { if [ -f "$LOAD_AUDIT" ]; then wc -l <"$LOAD_AUDIT"; else echo 0; fi; }
load_wait_fds() {
	local want=$1 secs=${2:-10} deadline n
	deadline=$(($(_lab_now_ms) + secs * 1000))
	while :; do
		n=$(load_fds)
		if [ "$n" -le "$want" ] || [ "$(_lab_now_ms)" -ge "$deadline" ]; then
			echo "$n"
			return 0
		fi
		sleep 0.1
	done
}
# load_wait_lines N [S]: waits until the audit log has at least N lines; prints the count
load_wait_lines() {
	local want=$1 secs=${2:-10} deadline n
	deadline=$(($(_lab_now_ms) + secs * 1000))
	while :; do
		n=$(load_audit_lines)
		if [ "$n" -ge "$want" ] || [ "$(_lab_now_ms)" -ge "$deadline" ]; then
			echo "$n"
			return 0
		fi
		sleep 0.1
	done
}
json_get() { "$LAB_PYTHON" -c 'import json,sys; v=json.loads(sys.argv[1] or "{}").get(sys.argv[2]); print("" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v))' "$1" "$2"; }
