# sluiced in a lab (sourced after lab.sh): starting it and waiting until it serves, waiting for a
# condition, and sessions driven through netd-testclient ($CLIENT is the client, $POLICY the default
# policy file). One copy for every lab test that runs sluiced.

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
