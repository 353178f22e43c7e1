#!/usr/bin/env bash
# sluice run: exit statuses, namespaces, environment whitelist, signals, timeout, privileges,
# file descriptors and the bypass, as root and as an unprivileged user.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

for m in $MODES; do
	P=$(newdir "$m")
	cd "$P" || exit 1
	check_eq "$m: exit status passes through" 7 "$(rc sb "$m" -- sh -c 'exit 7')"
	check_eq "$m: killed by SIGTERM -> 143" 143 "$(rc sb "$m" -- sh -c 'kill -TERM $$')"
	check_eq "$m: command not found -> 127" 127 "$(rc sb "$m" -- /no/such/command)"
	check_eq "$m: not executable -> 126" 126 "$(rc sb "$m" -- /etc/passwd)"
	check_eq "$m: bad option -> 125" 125 "$(rc sb "$m" --profile bogus -- true)"
	check_eq "$m: no command -> 125" 125 "$(rc sb "$m")"
	# a mistyped option: getopt's line and where the options are, not the 56-line usage burying it
	check_eq "$m: unknown option -> 125" 125 "$(rc sb "$m" --memroy 1G -- true)"
	check_eq "$m: unknown option: named, then where the options are" \
		"sluice run: unrecognized option '--memroy'|sluice run: the options are in \`sluice run --help\` and sluice(1)" \
		"$(sb "$m" --memroy 1G -- true 2>&1 | paste -sd'|')"
	# an option's value left out before "--": getopt would take "--" as the value (and the command's name as
	# the next option's or as the command)
	check_eq "$m: --env -- cmd: refused, 125" 125 "$(rc sb "$m" --env -- true)"
	check_eq "$m: --env -- cmd: says the value is missing" \
		'sluice: --env wants a value, and "--" ends the options: write --env NAME[=VALUE] ... -- COMMAND' \
		"$(sb "$m" --env -- true 2>&1)"
	check_match "$m: --allow -- cmd too" '^sluice: --allow wants a value' "$(sb "$m" --allow-network --allow -- true 2>&1)"
	out=$(sb "$m" -- sh -c 'hostname; id -u; echo $$; set -- /proc/[0-9]*; echo $#' 2>&1)
	# pid 1 (init) and the shell itself: nothing of the host
	check_eq "$m: hostname, uid, pid 2, only the session's processes" \
		"sluice $( [ "$m" = root ] && echo 0 || echo "$TU_UID") 2 2" "$(echo $out)"
	check_eq "$m: --hostname" "build1" "$(sb "$m" --hostname build1 -- hostname)"
	net=$(sb "$m" -- sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "')
	check_eq "$m: network namespace holds only lo" "lo" "$net"
	lo=$(sb "$m" -- bash -c 'exec 3<>/dev/tcp/127.0.0.1/9 2>&1' 2>&1)
	check_match "$m: lo is up (connection refused, not unreachable)" "Connection refused" "$lo"
	st=$(sb "$m" -- cat /proc/self/status)
	check_match "$m: no effective capabilities" "CapEff:[[:space:]]+0000000000000000" "$st"
	check_match "$m: empty bounding set" "CapBnd:[[:space:]]+0000000000000000" "$st"
	check_match "$m: no ambient capabilities" "CapAmb:[[:space:]]+0000000000000000" "$st"
	check_match "$m: no_new_privs" "NoNewPrivs:[[:space:]]+1" "$st"
	check_match "$m: seccomp filter" "Seccomp:[[:space:]]+2" "$st"
	fds=$(sb "$m" -- sh -c 'ls /proc/self/fd | tr "\n" " "' 7</etc/hostname 9</etc/hostname)
	check_eq "$m: no inherited fds beyond 0-2" "0 1 2 3 " "$fds"

	env_out=$(SB_ENV="SECRET_TOKEN=s3cr3t KEEPME=kept LC_TIME=C" sb "$m" --env KEEPME --env FOO=bar -- env)
	check_not "$m: unlisted variable is not passed" grep -q SECRET_TOKEN <<<"$env_out"
	check_match "$m: --env NAME passes it" "^KEEPME=kept$|KEEPME=kept" "$env_out"
	check_match "$m: --env NAME=VALUE sets it" "FOO=bar" "$env_out"
	check_match "$m: LC_* passes" "LC_TIME=C" "$env_out"
	check_match "$m: SLUICE_SESSION is set" "SLUICE_SESSION=[0-9a-f]{16}" "$env_out"
	check_eq "$m: bad --env name -> 125" 125 "$(rc sb "$m" --env 'A-B=1' -- true)"

	# Signals sent to the launcher reach the command.
	( bg_exec "$m" "$SLUICE" run -- sh -c 'trap "exit 42" TERM; echo ready; while :; do sleep 0.1; done' ) >"$P/out.sig" 2>&1 &
	lpid=$!
	for _ in $(seq 50); do grep -q ready "$P/out.sig" 2>/dev/null && break; sleep 0.1; done
	kill -TERM "$lpid"
	wait "$lpid"
	check_eq "$m: SIGTERM to the launcher is forwarded to the command" 42 "$?"

	# The command cannot signal the launcher's process group.
	( trap 'echo GOT > "$P/usr1"' USR1; sb "$m" -- sh -c 'kill -USR1 0' >/dev/null 2>&1; sleep 0.2 )
	check_not "$m: kill(0) inside does not reach the launcher's process group" test -e "$P/usr1"

	# Wall-clock limit: the whole session dies, nothing is left behind.
	marker="30$RANDOM"
	start=$(date +%s)
	code=$(rc sb "$m" --timeout 1 -- sh -c "sleep $marker & setsid sleep $marker & sleep $marker")
	check_eq "$m: --timeout -> 124" 124 "$code"
	# (promptly: not when the sleeps of days end; 10 s, not 5, for a session's start and teardown under ASan
	# on a loaded machine, counted in whole seconds)
	check "$m: --timeout ends the session promptly" test $(( $(date +%s) - start )) -le 10
	check_not "$m: no process of the session survives the timeout" pgrep -f "sleep $marker"

	# A daemon (setsid, double fork) does not outlive the session.
	marker="31$RANDOM"
	sb "$m" -- sh -c "setsid sh -c 'sleep $marker &' ; sleep 0.2" >/dev/null 2>&1
	sleep 0.2
	check_not "$m: a setsid double-forked daemon is gone after the session" pgrep -f "sleep $marker"
	check_eq "$m: no session directory left" 0 "$(session_dirs "$m")"

	# Interactive use on a terminal (script(1) gives a pty): the sandbox is the foreground process
	# group, so reading the terminal works and ^C reaches the command.
	tty_run() { as "$m" timeout 20 script -qec "$1" /dev/null; }
	out=$(printf 'hello\n' | tty_run "$SLUICE run -- sh -c 'read x; echo got:\$x'" 2>&1)
	check_match "$m: a terminal program can read the terminal" "got:hello" "$out"
	out=$( (sleep 1; printf '\003') | { tty_run "$SLUICE run -- sh -c 'sleep 5; echo not-interrupted'"; echo "rc=$?"; } 2>&1)
	check_match "$m: ^C on the terminal interrupts the command (130)" "rc=130" "$out"
	check_not "$m: ... before it finished" grep -q not-interrupted <<<"$out"
	check "$m: debugging inside works (strace of the session's own processes)" sb "$m" -- strace -f -o /dev/null true

	# The session dies with the launcher, even when the launcher is killed outright.
	marker="32$RANDOM"
	( bg_exec "$m" "$SLUICE" run -- sh -c "echo \$SLUICE_SESSION; sleep $marker" ) >"$P/out.kill" 2>&1 &
	lpid=$!
	for _ in $(seq 50); do [ -s "$P/out.kill" ] && pgrep -f "^sleep $marker" >/dev/null && break; sleep 0.1; done
	check "$m: (test) the session is running" pgrep -f "^sleep $marker"
	# A session that records nothing in a session directory has none: an empty lock file of its id
	# marks it live (docs/sandbox.md, step 2), and a session started meanwhile leaves it alone.
	sid=$(head -1 "$P/out.kill")
	if [ "$m" = root ]; then sbase="$ROOT_RT/sluice"; else sbase="/var/tmp/sluice-$TU_UID"; fi
	check "$m: a running session without records has a lock file, not a directory" test -f "$sbase/$sid" -a ! -d "$sbase/$sid"
	sb "$m" -- true
	check "$m: ... which a session started meanwhile leaves alone" test -f "$sbase/$sid"
	kill -KILL "$lpid"
	wait "$lpid" 2>/dev/null
	for _ in $(seq 20); do pgrep -f "sleep $marker" >/dev/null || break; sleep 0.1; done
	check_not "$m: killing the launcher (SIGKILL) kills the session" pgrep -f "sleep $marker"
	# What a SIGKILLed launcher leaves (its lock file, or session directory, and cgroups) the next one removes.
	check_match "$m: (test) the killed session reported its id" "^[0-9a-f]{16}$" "$sid"
	# (its pid 1 may stay a zombie for a moment, keeping the cgroup busy: a later launcher retries)
	for _ in $(seq 30); do sb "$m" -- true; [ "$(session_dirs "$m")" = 0 ] && break; sleep 0.2; done
	check_eq "$m: a later session reaps the dead one's directory" 0 "$(session_dirs "$m")"
	check_eq "$m: ... and its cgroups" "" "$(find /sys/fs/cgroup -maxdepth 6 -type d -name "sluice-$sid" 2>/dev/null)"

	# Network: none by default. --allow-network goes through netd: when the netd client is built
	# in (sluiced exists), root gets a wired session (embedded netd) inside a throwaway network
	# namespace that plays the host, and a user without sluiced gets a clear error; without it,
	# --allow-network fails closed.
	if [ -x "$SLUICE_BUILD_DIR/netd/sluiced" ]; then
		if [ "$m" = root ]; then
			RUN=$(newdir root)
			# The embedded proxy engine needs a resolver it can open a socket to: a route to
			# 198.18.0.0/15 (a benchmark range) over a veth pair whose far end has no address
			# (packets go nowhere) and a private /etc/resolv.conf naming 198.18.0.53.
			printf 'nameserver 198.18.0.53\n' >"$RUN/resolv.conf"
			out=$(SLUICE_RUN_DIR="$RUN" unshare --net --mount sh -c 'ip link set lo up &&
				ip link add d0 type veth peer name d1 && ip link set d1 up &&
				ip addr add 198.18.0.1/15 dev d0 && ip link set d0 up &&
				mount --bind "$2/resolv.conf" /etc/resolv.conf &&
				env -i HOME="$1" PATH=/usr/bin:/bin SLUICE_RUN_DIR="$2" "$3" run --allow-network \
				--allow example.test --audit-log "$2/audit.log" -- \
				sh -c "cat /etc/resolv.conf; env; cut -d: -f1 /proc/net/dev"' _ "$ROOT_HOME" "$RUN" "$SLUICE" 2>&1)
			check_match "$m: --allow-network: resolv.conf names the gateway" "nameserver [0-9.]+" "$out"
			check_match "$m: --allow-network: HTTPS_PROXY points at the gateway's proxy" "HTTPS_PROXY=http://[0-9.]+:[0-9]+" "$out"
			check_match "$m: --allow-network: no_proxy for loopback" "no_proxy=localhost,127.0.0.1,::1" "$out"
			check_match "$m: --allow-network: ALL_PROXY points at the gateway's SOCKS5 front" "ALL_PROXY=socks5h://[0-9.]+:1080" "$out"
			check_match "$m: --allow-network: the session has eth0" "eth0" "$out"
		else
			out=$(SB_ENV="SLUICE_RUN_DIR=$P/no-sluiced" sb "$m" --allow-network --allow example.test -- true 2>&1)
			check_eq "$m: --allow-network without sluiced fails closed (125)" 125 "$?"
			check_match "$m: ... saying how to start sluiced" "sluiced" "$out"
		fi
	else
		out=$(sb "$m" --allow-network --allow pypi.org -- true 2>&1)
		check_eq "$m: --allow-network without netd fails closed (125)" 125 "$?"
		check_match "$m: ... saying why" "not available in this build" "$out"
	fi
	out=$(sb "$m" --allow-network --allow '*' -- true 2>&1)
	check_eq "$m: an unsafe --allow pattern is refused by the policy (125)" 125 "$?"
	check_match "$m: ... with the policy's reason" "policy: --allow" "$out"
	check_eq "$m: --allow without --allow-network -> 125" 125 "$(rc sb "$m" --allow pypi.org -- true)"

	# The bypass: loud, logged, and a real bypass (host UTS namespace).
	log="$P/audit.log"
	[ "$m" = root ] || { touch "$log"; chown "$TU" "$log"; }
	out=$(sb "$m" --no-sandbox-i-mean-it --audit-log "$log" -- sh -c 'hostname; exit 3' 2>&1)
	code=$?
	check_eq "$m: bypass passes the exit status" 3 "$code"
	check_match "$m: bypass prints a loud warning" "WITHOUT ANY SANDBOX" "$out"
	check_match "$m: bypass runs on the host" "$(hostname)" "$out"
	check_match "$m: bypass is written to the audit log" '"event":"no-sandbox".*"command":"sh -c hostname; exit 3"' "$(cat "$log")"
	check_eq "$m: --profile never means the bypass" 125 "$(rc sb "$m" --profile none -- true)"
	cd / || exit 1
done
done_testing
