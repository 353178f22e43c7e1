# sluiced in a lab (sourced after lab.sh): starting it and waiting until it serves, waiting for a
# condition, sessions driven through netd-testclient ($CLIENT is the client, $POLICY the default
# policy file), the addresses the session's gateway answers for a name, and a TCP flow held open
# (live_flow). One copy for every lab test that runs sluiced.

# start_sluiced [VAR=VALUE...] [-- ARG...]: starts sluiced in the lab (lab_bg name "sluiced", its pid in
# LAB_BG_PID) with VAR=VALUE in its environment: run directory $RUN (default $SLUICE_RUN_DIR, else
# /run/sluice), audit log $AUDIT, pools $POOL4 and $POOL6 (default 100.64.0.0/16 and 2001:db8:100::/64), the
# lab's DNS server as upstream, the organisation layer in $SLUICED_SYSCONF (default $LAB_DIR/etc-sluice), -v, then the ARGs.
# Waits (10 s at most) until this instance, not an earlier one (the log is appended to), runs its proxy
# engine and answers on its control socket; 1 when it does not.
start_sluiced() {
	local log=$LAB_DIR/log/sluiced.log run=${RUN:-${SLUICE_RUN_DIR:-/run/sluice}} before i
	local sysconf=${SLUICED_SYSCONF:-$LAB_DIR/etc-sluice} env=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		env+=("$1")
		shift
	done
	[ "${1:-}" != -- ] || shift
	mkdir -p "$sysconf"
	before=$(grep -c "proxy engine .* running" "$log" 2>/dev/null)
	lab_bg sluiced env "${env[@]}" "$SLUICE_BUILD_DIR/netd/sluiced" --run-dir "$run" --audit-log "$AUDIT" \
		--pool4 "${POOL4:-100.64.0.0/16}" --pool6 "${POOL6:-2001:db8:100::/64}" --upstream-dns "$LAB_DNS" --sysconfdir "$sysconf" -v "$@"
	for i in $(seq 200); do
		[ "$(grep -c "proxy engine .* running" "$log" 2>/dev/null)" -gt "${before:-0}" ] &&
			SLUICE_RUN_DIR=$run "$SLUICE_BUILD_DIR/tools/sluicectl/sluicectl" sessions >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	return 1
}

# eventually CMD...: CMD succeeds within 10 s (teardown, NFLOG reports and the log are asynchronous)
eventually() {
	local i
	for i in $(seq 200); do "$@" && return 0; sleep 0.05; done
	return 1
}

# live_flow NS ADDR PORT FILE: in the background ($! is its pid), a TCP flow from NS to ADDR:PORT (the lab's
# echo) that exchanges a line, creates FILE.up, waits for FILE.go, tries one more exchange and writes in
# FILE.out how it went: echo, closed, timeout (no answer within 3 s: the flow was cut) or the error's name
live_flow() {
	lab_exec "$1" "$LAB_PYTHON" - "$2" "$3" "$4" >"$4.out" 2>&1 <<-'PY' &
		import os, socket, sys, time
		s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
		s.sendall(b"SSH-2.0-before\r\n"); s.recv(64)
		open(sys.argv[3] + ".up", "w").close()
		while not os.path.exists(sys.argv[3] + ".go"): time.sleep(0.05)
		try:
		    s.sendall(b"SSH-2.0-after\r\n"); r = s.recv(64); print("echo" if r else "closed")
		except socket.timeout: print("timeout")
		except OSError as e: print(type(e).__name__)
	PY
}

declare -A HOLD
# session NAME [POLICY [NEW_POLICY]]: a netns NAME attached through the client, which holds it until it
# gets SIGTERM (HOLD[NAME] is its pid; lab_down ends it); its reply goes to $LAB_DIR/state/NAME.reply.
# NEW_POLICY: the client replaces the session's policy with it on SIGUSR2. Its command is "test NAME", or
# $SESSION_COMMAND when set (a client chooses it freely).
session() {
	local name=$1 out=$LAB_DIR/state/$1.reply i
	ip netns add "$name" || return 1
	"$CLIENT" attach "/run/netns/$name" "${2:-$POLICY}" "${SESSION_COMMAND:-test $name}" "${3:-}" </dev/null >"$out" 2>&1 &
	HOLD[$name]=$!
	lab_defer "kill -TERM ${HOLD[$name]} 2>/dev/null; wait ${HOLD[$name]} 2>/dev/null"
	for i in $(seq 100); do grep -q '^proxy_port=' "$out" && return 0; sleep 0.05; done
	sed 's/^/# /' "$out"
	return 1
}
# reply NAME KEY: a field of session NAME's reply (id, addr4, gw4, ...)
reply() { sed -n "s/^$2=//p" "$LAB_DIR/state/$1.reply"; }

# gw_addrs NS NAME [AAAA]: asks the session's gateway ($GW4) for NAME's A (or AAAA) records over UDP; prints
# the addresses, or "rcode=N"
gw_addrs() {
	lab_exec "$1" "$LAB_PYTHON" - "$GW4" "$2" "${3:-A}" <<-'PY'
		import random, socket, struct, sys
		gw, name, qt = sys.argv[1], sys.argv[2], 28 if sys.argv[3] == "AAAA" else 1
		qid = random.randrange(65536)
		q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
		q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", qt, 1)
		s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
		s.sendto(q, (gw, 53)); a = s.recv(4096)
		rcode, an = a[3] & 15, struct.unpack(">H", a[6:8])[0]
		def skip(p):
		    while True:
		        n = a[p]
		        if n == 0: return p + 1
		        if n & 0xC0: return p + 2
		        p += n + 1
		p = skip(12) + 4; out = []
		for _ in range(an):
		    p = skip(p); t, c, ttl, ln = struct.unpack(">HHIH", a[p:p + 10]); p += 10
		    if t == 1: out.append(socket.inet_ntoa(a[p:p + 4]))
		    if t == 28: out.append(socket.inet_ntop(socket.AF_INET6, a[p:p + 16]))
		    p += ln
		print(" ".join(out) if rcode == 0 and out else "rcode=%d" % rcode)
	PY
}
