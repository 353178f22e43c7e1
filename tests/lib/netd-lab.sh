# Sessions of sluiced in a lab, driven through netd-testclient (sourced after lab.sh; $CLIENT is the
# client, $POLICY the default policy file). One copy for netd.sh, direct.sh, transparent.sh, faults_netd.sh.
declare -A HOLD
# session NAME [POLICY [NEW_POLICY]]: a netns NAME attached through the client, which holds it until it
# gets SIGTERM (HOLD[NAME] is its pid; lab_down ends it); its reply goes to $LAB_DIR/state/NAME.reply.
# NEW_POLICY: the client replaces the session's policy with it on SIGUSR2.
session() {
	local name=$1 out=$LAB_DIR/state/$1.reply i
	ip netns add "$name" || return 1
	"$CLIENT" attach "/run/netns/$name" "${2:-$POLICY}" "test $name" "${3:-}" </dev/null >"$out" 2>&1 &
	HOLD[$name]=$!
	lab_defer "kill -TERM ${HOLD[$name]} 2>/dev/null; wait ${HOLD[$name]} 2>/dev/null"
	for i in $(seq 100); do grep -q '^proxy_port=' "$out" && return 0; sleep 0.05; done
	sed 's/^/# /' "$out"
	return 1
}
# reply NAME KEY: a field of session NAME's reply (id, addr4, gw4, ...)
reply() { sed -n "s/^$2=//p" "$LAB_DIR/state/$1.reply"; }
