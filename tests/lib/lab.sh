# The network test lab (sourced by integration tests, after tests/lib/tap.sh). docs/testing.md has the
# topology diagram and a worked example; this header is the API reference.
#
# lab_enter "$@"          first line of a test: re-executes the script as pid 1 of fresh network, mount and
#                         pid namespaces (the script becomes "the host": only lo, no route anywhere), with a
#                         private tmpfs on /run (so /run/netns and /run/sluice are the lab's own), a lab
#                         resolv.conf, TMPDIR inside the lab, and lab_down as the EXIT trap. When the script
#                         ends, however it ends, the kernel removes every namespace, process and mount it made.
#                         skip_all when not root or namespaces are unavailable.
# lab_internet_up         netns "inet" on a veth: DNS (dnsmasq) on $LAB_DNS, HTTP echo on 80/8080, HTTPS on
#                         443/8443 (CA in $LAB_CA), TCP echo on 22 and 7, UDP echo on 7, an npm registry and a
#                         PyPI simple index (/simple/, wheels under /packages/) at registry.test. The host gets
#                         routes to the internet prefixes only.
# lab_lan_up              netns "lan", a host on the host's LAN (192.0.2.0/24): HTTP echo on 80, TCP echo on 22.
# lab_session NAME [ADDR4[/LEN] GW4]
#                         netns NAME wired to the host by a veth (host side sess<N>, session side eth0) with
#                         default routes via the host side; prints "ADDR4 GW4" and sets LAB_S_ADDR4, LAB_S_GW4,
#                         LAB_S_ADDR6, LAB_S_GW6, LAB_S_IF (host-side interface). Call it directly, not in $(...),
#                         if you want the variables. Default scheme: N-th session 100.127.N.1/31 via 100.127.N.0,
#                         2001:db8:100:N::2/64 via 2001:db8:100:N::1 (N in hex).
# lab_session_info NAME   prints "ADDR4 GW4 ADDR6 GW6 HOSTIF" of a session.
# lab_forward on|off      IP forwarding in the host ns (off by default: a session reaches nothing but the host
#                         until a test, or sluice's netd, decides otherwise).
# lab_route_back PREFIX   return route for PREFIX (a session pool) in inet and lan (100.64.0.0/10 and
#                         2001:db8:100::/40 are routed back already).
# lab_exec NS CMD...      runs CMD in netns NS (ip netns exec); NS "host" runs it in the host ns.
# lab_bg NAME [-n NS] CMD...
#                         starts executable CMD in the background (in NS if given), stdin /dev/null, output to
#                         $LAB_DIR/log/NAME.log; records its pid (LAB_BG_PID, lab_pid NAME).
# lab_stop NAME           TERM (KILL after $LAB_STOP_TIMEOUT s) a process started by lab_bg and reaps it;
#                         sets LAB_STOP_STATUS to its exit status (127 if it was not a child of this shell).
# lab_pid NAME / lab_log NAME   print the pid / the log file of a lab_bg process.
# lab_wait_port NS ADDR PORT [SECONDS]   waits (default 5 s) until a TCP connect to ADDR:PORT from NS succeeds.
# lab_dns_add NAME ADDR   adds an A/AAAA record (NAME may be "*.domain" for a wildcard); an ADDR inside the
#                         internet prefixes (198.18.0.0/15, 2001:db8:1::/48) is also added to the inet ns.
# lab_inet_addr ADDR      makes the internet answer on ADDR too (every service listens on the wildcard).
# lab_dns_mark            remembers the current end of the DNS query log; lab_dns_queries then starts there.
# lab_dns_queries [-v]    names the internet's DNS server was asked for, in order (-v: "TYPE NAME CLIENT").
# lab_dns_wait_query NAME [SECONDS]   waits until NAME shows up in the query log.
# lab_http_requests [inet|lan]        access log of the fake web servers, one JSON object per request, written
#                         before the reply is sent (fields: time server scheme sni client local method host target
#                         status body_length [note]).
# lab_defer CMD...        runs CMD (a string for eval) first in lab_down, last registered first.
# lab_down                stops everything (also the EXIT trap of the lab's own shell, never of a child it forked;
#                         idempotent). On failure it prints the tail of every lab log as TAP diagnostics.
#                         LAB_KEEP=DIR copies $LAB_DIR to DIR first. A
#                         sanitizer (ASan, UBSan, LSan) or valgrind report in any lab log fails the test
#                         ("Bail out!", exit 1) even when every check passed; lab_down then returns 1.
# lab_bail MSG            "Bail out!" and exit 1 (lab set-up errors end the test).
#
# Variables: LAB_DIR (private, removed with the lab), LAB_ID, LAB_CA, LAB_DNS, LAB_DNS6, LAB_HOST4/6 and
# LAB_INET4/6 (the host<->internet link), LAB_REGISTRY4/6, LAB_ALLOWED4/6, LAB_OTHER4/6, LAB_EVIL4/6,
# LAB_PRIVATE4, LAB_META4, LAB_LAN_HOST4/6 and LAB_LAN4/6, LAB_NPM_PACKAGES, LAB_PYPI_PACKAGES, LAB_PYTHON.
#
# Safety: nothing here runs before lab_enter has moved the script into its own namespaces; there is no default
# route in any lab namespace, so no packet can leave the machine; every name (netns, interface, /run path) is
# private to this lab, so any number of labs can run at the same time.

LAB_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_PYTHON=${LAB_PYTHON:-$(command -v /usr/bin/python3 || command -v python3 || echo python3)}
LAB_STOP_TIMEOUT=${LAB_STOP_TIMEOUT:-2}

# The address plan (docs/testing.md draws it). 198.18.0.0/15 is the RFC 2544 benchmark range, 2001:db8::/32
# and 192.0.2.0/24 are documentation ranges, 100.64.0.0/10 is CGNAT space: none of it is routed on the
# machine, and the lab never has a default route anyway.
LAB_HOST4=198.18.0.1 LAB_HOST6=2001:db8::1
LAB_INET4=198.18.0.2 LAB_INET6=2001:db8::2
LAB_DNS=198.18.0.53 LAB_DNS6=2001:db8::53
LAB_REGISTRY4=198.18.1.10 LAB_REGISTRY6=2001:db8:1::10
LAB_ALLOWED4=198.18.1.11 LAB_ALLOWED6=2001:db8:1::11
LAB_OTHER4=198.18.1.12 LAB_OTHER6=2001:db8:1::12
LAB_EVIL4=198.18.1.13 LAB_EVIL6=2001:db8:1::13
LAB_PRIVATE4=10.255.255.1 # private.test: only ever resolved, never contacted
LAB_META4=169.254.169.254 # meta.test
LAB_LAN_HOST4=192.0.2.1 LAB_LAN_HOST6=2001:db8:2::1
LAB_LAN4=192.0.2.2 LAB_LAN6=2001:db8:2::2
LAB_SESSION_POOL4=100.64.0.0/10 LAB_SESSION_POOL6=2001:db8:100::/40
LAB_NPM_PACKAGES="sluice-demo left-pad @sluice/scoped"
LAB_PYPI_PACKAGES="sluice-demo sluice-forbidden"
export LAB_PYPI_PACKAGES LAB_HOST4 LAB_HOST6 LAB_INET4 LAB_INET6 LAB_DNS LAB_DNS6 LAB_REGISTRY4 LAB_REGISTRY6 LAB_ALLOWED4 \
	LAB_ALLOWED6 LAB_OTHER4 LAB_OTHER6 LAB_EVIL4 LAB_EVIL6 LAB_PRIVATE4 LAB_META4 LAB_LAN_HOST4 LAB_LAN_HOST6 \
	LAB_LAN4 LAB_LAN6 LAB_NPM_PACKAGES LAB_PYTHON

lab_bail() {
	echo "Bail out! lab: $*"
	exit 1
}

# _lab_now_ms: wall clock in milliseconds (no fork).
_lab_now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

_lab_need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || skip_all "the lab needs '$t' (tools/deps.sh installs it)"
	done
}

_lab_inside() {
	[ -n "${LAB_DIR:-}" ] && [ -d "${LAB_DIR:-/nonexistent}" ] && [ "${LAB_INSIDE:-}" = "$LAB_ID" ] ||
		lab_bail "${FUNCNAME[1]} called outside a lab: call lab_enter \"\$@\" first"
}

_lab_name_ok() {
	[[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$ ]] || lab_bail "bad name '$1' (letters, digits, _.-; at most 32)"
}

lab_enter() {
	if [ "${LAB_INSIDE:-}" = pending ] && [ "$$" = 1 ]; then
		_lab_setup || lab_bail "could not set the lab up"
		return 0
	fi
	[ "$(id -u)" = 0 ] || skip_all "the lab needs root (it creates network, mount and pid namespaces)"
	_lab_need unshare ip mount nsenter timeout
	local err
	if ! err=$(unshare --net --mount --pid --fork --kill-child --mount-proc true 2>&1); then
		skip_all "cannot create namespaces for the lab: ${err:-unshare failed}"
	fi
	# --kill-child: if this unshare process dies (a test timeout kills it), the kernel kills the script,
	# which is pid 1 of the new pid namespace, and with it every process of the lab.
	LAB_INSIDE=pending exec unshare --net --mount --propagation private --pid --fork --kill-child \
		--mount-proc -- "$BASH" "$0" "$@"
}

# _lab_setup: runs as pid 1 of the new namespaces, before the test body.
_lab_setup() {
	LAB_ID=$(printf '%08x' "$SRANDOM")
	export LAB_ID LAB_INSIDE=$LAB_ID
	ip link set lo up && "$BASH" -c "$_LAB_NO_DAD" || return 1
	_lab_private_run || return 1
	LAB_DIR=/run/lab-$LAB_ID
	mkdir -p "$LAB_DIR"/{log,state,pids,dns,tls,npm} || return 1
	chmod 0755 "$LAB_DIR" "$LAB_DIR"/* || return 1
	mkdir -m 1777 "$LAB_DIR/tmp" && mkdir -p /run/netns /run/sluice || return 1
	export LAB_DIR TMPDIR=$LAB_DIR/tmp LAB_CA=$LAB_DIR/tls/ca.pem
	# Every program in the lab resolves through the fake internet's DNS server.
	printf 'nameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n' "$LAB_DNS" "$LAB_DNS6" \
		>"$LAB_DIR/resolv.conf"
	if [ -e /etc/resolv.conf ]; then
		mount -n --bind "$LAB_DIR/resolv.conf" /etc/resolv.conf || return 1
	fi
	trap '_lab_exit' EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# _lab_private_run: a fresh tmpfs on /run. What the machine had in /run stays visible (bind mounts, through
# an fd to the old /run), except netns, sluice and mount, which start empty and belong to the lab. mount -n:
# no utab write, -c: the source is /proc/PID/fd/N/..., which must not be canonicalised to /run/... .
_lab_private_run() {
	local fd e name
	exec {fd}</run || return 1
	mount -n -t tmpfs -o mode=0755,nosuid,nodev lab-run /run || return 1
	for e in "/proc/$$/fd/$fd"/* "/proc/$$/fd/$fd"/.[!.]*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		name=${e##*/}
		case $name in netns | sluice | mount) continue ;; esac
		if [ -L "$e" ]; then
			ln -s "$(readlink "$e")" "/run/$name"
		elif [ -d "$e" ]; then
			mkdir "/run/$name" && mount -n -c --rbind "$e" "/run/$name"
		else
			: >"/run/$name" && mount -n -c --bind "$e" "/run/$name"
		fi || echo "# lab: could not carry /run/$name into the lab (ignored)"
	done
	exec {fd}<&-
}

# (Only the lab's own shell takes it down. A child the shell forked for `cmd &` or `( ... )` holds the shell's
# traps until it resets them or execs: a TERM in that window (lab_stop right after lab_bg, on a loaded
# machine) ran `exit 143` and then this EXIT trap in the child, whose lab_down stopped every lab service and
# removed $LAB_DIR under the running test: lab_smoke's dnsmasq died so, 150 lab_bg + lab_stop lost the lab
# within 18-52 rounds. Such a child just exits.)
_lab_exit() {
	local rc=$?
	[ "$BASHPID" = "$$" ] || exit "$rc"
	lab_down "$rc" || [ "$rc" -ne 0 ] || rc=1
	exit "$rc"
}

# _lab_sanitizer_check: after every lab process has stopped, a sanitizer or valgrind report in any lab log
# fails the test, even if every check passed: a daemon that aborted under ASan and was restarted (sluiced
# restarts its engine) would otherwise go unnoticed. Also a valgrind run that ended before its report (it was
# killed) counts. Prints "Bail out!" and the reports; returns 1 if there was any.
_LAB_SANITIZER_RE='AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|ThreadSanitizer|runtime error:|ERROR SUMMARY: [1-9]'
_lab_sanitizer_check() {
	local f bad=0 started ended
	for f in "$LAB_DIR"/log/*; do
		[ -s "$f" ] || continue
		if grep -Eq "$_LAB_SANITIZER_RE" "$f"; then
			echo "Bail out! lab: a sanitizer/valgrind report in the lab log ${f##*/}"
			grep -E -m 20 -A 12 "$_LAB_SANITIZER_RE" "$f" | head -n 80 | sed 's/^/#   /'
			bad=1
		fi
		started=$(grep -c 'Memcheck, a memory error detector' "$f")
		ended=$(grep -c 'ERROR SUMMARY:' "$f")
		if [ "$started" -gt "$ended" ]; then
			echo "Bail out! lab: valgrind in ${f##*/} was stopped before its report ($started runs, $ended reports)"
			bad=1
		fi
	done
	return "$bad"
}

lab_defer() {
	_lab_inside
	printf '%s\n' "$*" >>"$LAB_DIR/state/defer"
}

# _lab_alive PID: the process exists and is not a zombie.
_lab_alive() {
	local stat
	read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

# _lab_kill_wait SECONDS PID...: TERM, then KILL whatever still runs after SECONDS.
_lab_kill_wait() {
	local secs=$1 p left deadline
	shift
	[ "$#" -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null
	deadline=$(($(_lab_now_ms) + secs * 1000))
	while :; do
		left=()
		for p in "$@"; do _lab_alive "$p" && left+=("$p"); done
		[ "${#left[@]}" -eq 0 ] && return 0
		[ "$(_lab_now_ms)" -ge "$deadline" ] && break
		sleep 0.02
	done
	echo "# lab: killing pids ${left[*]} (still running ${secs}s after SIGTERM)"
	kill -KILL "${left[@]}" 2>/dev/null
	return 0
}

lab_down() {
	local rc=${1:-0} f p name pids=() strays=() line
	[ -n "${LAB_DIR:-}" ] && [ -d "$LAB_DIR" ] || return 0
	trap - EXIT
	if [ -f "$LAB_DIR/state/defer" ]; then
		local defer=()
		mapfile -t defer <"$LAB_DIR/state/defer"
		for ((f = ${#defer[@]} - 1; f >= 0; f--)); do eval "${defer[f]}" || true; done
	fi
	for f in "$LAB_DIR"/pids/*; do
		[ -f "$f" ] && read -r p <"$f" && pids+=("$p")
	done
	_lab_kill_wait "$LAB_STOP_TIMEOUT" "${pids[@]}"
	# Anything else still running in the lab's pid namespace was started without lab_bg.
	for f in /proc/[0-9]*; do
		p=${f#/proc/}
		[ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] || ! _lab_alive "$p" || strays+=("$p")
	done
	if [ "${#strays[@]}" -gt 0 ]; then
		for p in "${strays[@]}"; do
			read -r line 2>/dev/null <"/proc/$p/comm" && echo "# lab: stopping stray process $p ($line)"
		done
		_lab_kill_wait 1 "${strays[@]}"
	fi
	local sanitizer=0
	_lab_sanitizer_check || sanitizer=1
	if [ "$rc" -ne 0 ]; then
		for f in "$LAB_DIR"/log/*; do
			[ -s "$f" ] || continue
			echo "# ---- lab log ${f##*/} (last 15 lines)"
			tail -n 15 "$f" | sed 's/^/#   /'
		done
	fi
	if [ -n "${LAB_KEEP:-}" ]; then
		mkdir -p "$LAB_KEEP" && cp -a "$LAB_DIR" "$LAB_KEEP/" && echo "# lab: kept $LAB_KEEP/lab-$LAB_ID"
	fi
	for f in /run/netns/*; do
		[ -e "$f" ] && ip netns del "${f##*/}"
	done
	umount -n /etc/resolv.conf 2>/dev/null
	rm -rf "$LAB_DIR"
	LAB_DIR=
	return "$sanitizer"
}

# --------------------------------------------------------------------------------------------- processes

lab_bg() {
	_lab_inside
	local name=${1:-} ns=
	shift || true
	_lab_name_ok "$name"
	if [ "${1:-}" = -n ]; then
		ns=${2:-}
		shift 2 || lab_bail "lab_bg $name: -n needs a namespace"
	fi
	[ "$#" -gt 0 ] || lab_bail "lab_bg $name: no command"
	[ ! -e "$LAB_DIR/pids/$name" ] || lab_bail "lab_bg: '$name' is already running"
	[ "$(type -t "$1")" != function ] || lab_bail "lab_bg $name: '$1' is a shell function; give an executable"
	local log=$LAB_DIR/log/$name.log
	if [ -n "$ns" ] && [ "$ns" != host ]; then
		[ -e "/run/netns/$ns" ] || lab_bail "lab_bg $name: no netns '$ns'"
		ip netns exec "$ns" "$@" </dev/null >>"$log" 2>&1 &
	else
		"$@" </dev/null >>"$log" 2>&1 &
	fi
	LAB_BG_PID=$!
	echo "$LAB_BG_PID" >"$LAB_DIR/pids/$name"
}

lab_pid() {
	local p
	read -r p 2>/dev/null <"$LAB_DIR/pids/$1" || return 1
	echo "$p"
}

lab_log() { echo "$LAB_DIR/log/$1.log"; }

lab_stop() {
	_lab_inside
	local name=$1 p
	p=$(lab_pid "$name") || lab_bail "lab_stop: no process '$name'"
	_lab_kill_wait "$LAB_STOP_TIMEOUT" "$p"
	rm -f "$LAB_DIR/pids/$name"
	LAB_STOP_STATUS=0
	wait "$p" 2>/dev/null || LAB_STOP_STATUS=$?
	return 0
}

# ---------------------------------------------------------------------------------------------- namespaces

lab_exec() {
	local ns=${1:-}
	shift || true
	if [ "$ns" = host ]; then
		"$@"
	else
		ip netns exec "$ns" "$@"
	fi
}

# _lab_nsenter NS CMD...: like lab_exec but only joins the netns (cheaper: no /sys remount); for probes.
_lab_nsenter() {
	local ns=$1
	shift
	if [ "$ns" = host ]; then "$@"; else nsenter --net="/run/netns/$ns" -- "$@"; fi
}

lab_wait_port() {
	local ns=$1 addr=$2 port=$3 secs=${4:-5} deadline
	deadline=$(($(_lab_now_ms) + secs * 1000))
	while :; do
		_lab_nsenter "$ns" timeout 1 "$BASH" -c 'exec 3<>"/dev/tcp/$0/$1"' "$addr" "$port" 2>/dev/null &&
			return 0
		if [ "$(_lab_now_ms)" -ge "$deadline" ]; then
			echo "# lab: nothing answers on $addr port $port (netns $ns) after ${secs}s"
			return 1
		fi
		sleep 0.02
	done
}

# _lab_wait_file FILE SECONDS PID: waits for FILE while process PID lives.
_lab_wait_file() {
	local file=$1 secs=$2 pid=$3 deadline
	deadline=$(($(_lab_now_ms) + secs * 1000))
	while [ ! -e "$file" ]; do
		_lab_alive "$pid" || return 1
		[ "$(_lab_now_ms)" -lt "$deadline" ] || return 1
		sleep 0.01
	done
}

lab_forward() {
	_lab_inside
	local v
	case ${1:-} in on) v=1 ;; off) v=0 ;; *) lab_bail "lab_forward on|off" ;; esac
	echo "$v" >/proc/sys/net/ipv4/ip_forward && echo "$v" >/proc/sys/net/ipv6/conf/all/forwarding ||
		lab_bail "lab_forward: cannot set forwarding"
}

lab_route_back() {
	_lab_inside
	local prefix=$1
	if [ -e /run/netns/inet ]; then
		if [[ $prefix == *:* ]]; then
			ip -n inet route replace "$prefix" via "$LAB_HOST6"
		else
			ip -n inet route replace "$prefix" via "$LAB_HOST4"
		fi || lab_bail "lab_route_back $prefix: failed in inet"
	fi
	if [ -e /run/netns/lan ]; then
		if [[ $prefix == *:* ]]; then
			ip -n lan route replace "$prefix" via "$LAB_LAN_HOST6"
		else
			ip -n lan route replace "$prefix" via "$LAB_LAN_HOST4"
		fi || lab_bail "lab_route_back $prefix: failed in lan"
	fi
	printf '%s\n' "$prefix" >>"$LAB_DIR/state/route-back"
}

# No IPv6 duplicate address detection in the lab: it would leave link-local addresses "tentative" for a
# second or two, and neighbour discovery (hence every IPv6 packet through a gateway) waits for them.
_LAB_NO_DAD='for c in all default; do echo 0 >/proc/sys/net/ipv6/conf/$c/accept_dad; done'

# _lab_veth NS HOSTIF: a netns NS with eth0, the peer of HOSTIF in the host ns; lo up in NS.
_lab_veth() {
	[ ! -e "/run/netns/$1" ] || lab_bail "netns '$1' exists already"
	ip netns add "$1" &&
		nsenter --net="/run/netns/$1" -- "$BASH" -c "$_LAB_NO_DAD" &&
		ip link add name "$2" type veth peer name eth0 netns "$1" &&
		ip -n "$1" link set lo up ||
		lab_bail "could not create netns '$1' with a veth to the host"
}

# ------------------------------------------------------------------------------------------------ internet

_lab_make_certs() {
	local d=$LAB_DIR/tls san name
	san="DNS:*.test"
	for name in registry.test allowed.test other.test evil.test private.test loop.test meta.test; do
		san="$san,DNS:$name"
	done
	san="$san,DNS:*.registry.test,DNS:*.allowed.test,DNS:*.other.test,DNS:*.evil.test"
	san="$san,IP:$LAB_REGISTRY4,IP:$LAB_ALLOWED4,IP:$LAB_OTHER4,IP:$LAB_EVIL4,IP:$LAB_REGISTRY6"
	# P-256 keys: generated in milliseconds, unlike RSA.
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
		-keyout "$d/ca.key" -out "$d/ca.pem" -subj "/O=sluice test lab/CN=sluice lab CA $LAB_ID" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
		>"$LAB_DIR/log/openssl.log" 2>&1 &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
			-CA "$d/ca.pem" -CAkey "$d/ca.key" -keyout "$d/server.key" -out "$d/server.pem" \
			-subj "/O=sluice test lab/CN=registry.test" -addext "subjectAltName=$san" \
			-addext "basicConstraints=critical,CA:FALSE" -addext "keyUsage=critical,digitalSignature" \
			-addext "extendedKeyUsage=serverAuth" >>"$LAB_DIR/log/openssl.log" 2>&1 &&
		chmod 0644 "$d"/*
}

_lab_dns_files() {
	local d=$LAB_DIR/dns
	cat >"$d/hosts" <<-EOF
		$LAB_REGISTRY4 registry.test
		$LAB_REGISTRY6 registry.test
		$LAB_ALLOWED4 allowed.test
		$LAB_ALLOWED6 allowed.test
		$LAB_OTHER4 other.test
		$LAB_OTHER6 other.test
		$LAB_EVIL4 evil.test
		$LAB_EVIL6 evil.test
		$LAB_PRIVATE4 private.test
		127.0.0.1 loop.test
		::1 loop.test
		$LAB_META4 meta.test
	EOF
	# dnsmasq reads nothing of the machine's: no /etc/dnsmasq.conf, /etc/hosts or /etc/resolv.conf. It is
	# authoritative for .test (local=/test/: unknown names get NXDOMAIN) and forwards nothing anywhere.
	cat >"$d/dnsmasq.conf" <<-EOF
		no-resolv
		no-hosts
		no-poll
		no-negcache
		addn-hosts=$d/hosts
		listen-address=$LAB_DNS
		listen-address=$LAB_DNS6
		bind-interfaces
		port=53
		local=/test/
		domain-needed
		local-ttl=${LAB_DNS_TTL:-60}
		log-queries
		log-facility=$LAB_DIR/log/dnsmasq.log
		pid-file=$LAB_DIR/state/dnsmasq.pid
		user=root
		group=root
	EOF
	local n
	for n in registry allowed other evil; do
		local v4=LAB_${n^^}4 v6=LAB_${n^^}6
		printf 'address=/%s.test/%s\naddress=/%s.test/%s\n' "$n" "${!v4}" "$n" "${!v6}"
	done >"$d/wildcards.conf"
	echo "conf-file=$d/wildcards.conf" >>"$d/dnsmasq.conf"
	chmod 0644 "$d"/*
}

_lab_dnsmasq_start() {
	lab_bg dnsmasq -n inet dnsmasq --keep-in-foreground --conf-file="$LAB_DIR/dns/dnsmasq.conf"
}

lab_internet_up() {
	_lab_inside
	[ ! -e "$LAB_DIR/state/inet" ] || return 0
	_lab_need dnsmasq openssl "$LAB_PYTHON"
	local t0 a ready=$LAB_DIR/state/fakenet-inet.ready pkgs=() p
	t0=$(_lab_now_ms)
	_lab_veth inet inet0
	ip -batch - <<-EOF || lab_bail "lab_internet_up: host side"
		addr add $LAB_HOST4/24 dev inet0
		addr add $LAB_HOST6/64 dev inet0 nodad
		link set inet0 up
	EOF
	{
		echo "addr add $LAB_INET4/24 dev eth0"
		echo "addr add $LAB_DNS/24 dev eth0"
		echo "addr add $LAB_INET6/64 dev eth0 nodad"
		echo "addr add $LAB_DNS6/64 dev eth0 nodad"
		echo "link set eth0 up"
		for a in "$LAB_REGISTRY4" "$LAB_ALLOWED4" "$LAB_OTHER4" "$LAB_EVIL4"; do echo "addr add $a/32 dev lo"; done
		for a in "$LAB_REGISTRY6" "$LAB_ALLOWED6" "$LAB_OTHER6" "$LAB_EVIL6"; do
			echo "addr add $a/128 dev lo nodad"
		done
		echo "route add $LAB_SESSION_POOL4 via $LAB_HOST4"
		echo "route add $LAB_SESSION_POOL6 via $LAB_HOST6"
	} | ip -n inet -batch - || lab_bail "lab_internet_up: internet side"
	ip -batch - <<-EOF || lab_bail "lab_internet_up: host routes"
		route add 198.18.0.0/15 via $LAB_INET4
		route add 2001:db8:1::/48 via $LAB_INET6
	EOF
	if [ -f "$LAB_DIR/state/route-back" ]; then
		while read -r p; do lab_route_back "$p"; done <"$LAB_DIR/state/route-back"
	fi
	_lab_make_certs || lab_bail "lab_internet_up: openssl failed: $(tail -n 3 "$LAB_DIR/log/openssl.log")"
	_lab_dns_files
	_lab_dnsmasq_start
	for p in $LAB_NPM_PACKAGES; do pkgs+=(--npm-package "$p"); done
	for p in $LAB_PYPI_PACKAGES; do pkgs+=(--pypi-package "$p"); done
	lab_bg fakenet-inet -n inet "$LAB_PYTHON" "$LAB_LIB_DIR/fakenet.py" --name inet \
		--http 80 --http 8080 --https 443 --https 8443 --tcp-echo 22 --tcp-echo 7 --udp-echo 7 \
		--cert "$LAB_DIR/tls/server.pem" --key "$LAB_DIR/tls/server.key" \
		--npm-host registry.test "${pkgs[@]}" --npm-dump "$LAB_DIR/npm" \
		--access-log "$LAB_DIR/log/http-inet.jsonl" --ready "$ready"
	_lab_wait_file "$ready" 10 "$(lab_pid fakenet-inet)" ||
		lab_bail "the fake internet's web server did not start (see the log below): $(tail -n 5 "$(lab_log fakenet-inet)")"
	lab_wait_port inet "$LAB_DNS" 53 5 ||
		lab_bail "dnsmasq did not start: $(tail -n 5 "$(lab_log dnsmasq)" "$LAB_DIR/log/dnsmasq.log" 2>/dev/null)"
	: >"$LAB_DIR/state/inet"
	LAB_INTERNET_UP_MS=$(($(_lab_now_ms) - t0))
	echo "# lab: internet up in ${LAB_INTERNET_UP_MS} ms"
}

lab_lan_up() {
	_lab_inside
	[ ! -e "$LAB_DIR/state/lan" ] || return 0
	_lab_need "$LAB_PYTHON"
	local ready=$LAB_DIR/state/fakenet-lan.ready p
	_lab_veth lan lan0
	ip -batch - <<-EOF || lab_bail "lab_lan_up: host side"
		addr add $LAB_LAN_HOST4/24 dev lan0
		addr add $LAB_LAN_HOST6/64 dev lan0 nodad
		link set lan0 up
	EOF
	ip -n lan -batch - <<-EOF || lab_bail "lab_lan_up: lan side"
		addr add $LAB_LAN4/24 dev eth0
		addr add $LAB_LAN6/64 dev eth0 nodad
		link set eth0 up
		route add $LAB_SESSION_POOL4 via $LAB_LAN_HOST4
		route add $LAB_SESSION_POOL6 via $LAB_LAN_HOST6
	EOF
	if [ -f "$LAB_DIR/state/route-back" ]; then
		while read -r p; do lab_route_back "$p"; done <"$LAB_DIR/state/route-back"
	fi
	lab_bg fakenet-lan -n lan "$LAB_PYTHON" "$LAB_LIB_DIR/fakenet.py" --name lan --http 80 --tcp-echo 22 \
		--access-log "$LAB_DIR/log/http-lan.jsonl" --ready "$ready"
	_lab_wait_file "$ready" 10 "$(lab_pid fakenet-lan)" ||
		lab_bail "the LAN's web server did not start: $(tail -n 5 "$(lab_log fakenet-lan)")"
	: >"$LAB_DIR/state/lan"
}

lab_session() {
	_lab_inside
	local name=${1:-} n addr4 len4 gw4 addr6 gw6 ifname
	_lab_name_ok "$name"
	case $name in host | inet | lan) lab_bail "lab_session: '$name' is reserved" ;; esac
	n=0
	[ -f "$LAB_DIR/state/session-count" ] && read -r n <"$LAB_DIR/state/session-count"
	n=$((n + 1))
	[ "$n" -le 255 ] || lab_bail "lab_session: at most 255 sessions per lab"
	echo "$n" >"$LAB_DIR/state/session-count"
	if [ "$#" -ge 3 ]; then
		addr4=${2%/*} len4=31 gw4=$3
		[[ $2 == */* ]] && len4=${2#*/}
	elif [ "$#" -eq 1 ]; then
		addr4=100.127.$n.1 len4=31 gw4=100.127.$n.0
	else
		lab_bail "usage: lab_session NAME [ADDR4[/LEN] GW4]"
	fi
	gw6=$(printf '2001:db8:100:%x::1' "$n") addr6=$(printf '2001:db8:100:%x::2' "$n")
	ifname=sess$n
	_lab_veth "$name" "$ifname"
	ip -batch - <<-EOF || lab_bail "lab_session $name: host side"
		addr add $gw4/$len4 dev $ifname
		addr add $gw6/64 dev $ifname nodad
		link set $ifname up
		route replace $addr4/32 dev $ifname
	EOF
	ip -n "$name" -batch - <<-EOF || lab_bail "lab_session $name: session side"
		addr add $addr4/$len4 dev eth0
		addr add $addr6/64 dev eth0 nodad
		link set eth0 up
		route add default via $gw4 dev eth0 onlink
		route add default via $gw6 dev eth0 onlink
	EOF
	echo "$addr4 $gw4 $addr6 $gw6 $ifname" >"$LAB_DIR/state/session-$name"
	LAB_S_ADDR4=$addr4 LAB_S_GW4=$gw4 LAB_S_ADDR6=$addr6 LAB_S_GW6=$gw6 LAB_S_IF=$ifname
	echo "$addr4 $gw4"
}

lab_session_info() {
	cat "$LAB_DIR/state/session-$1" 2>/dev/null || lab_bail "lab_session_info: no session '$1'"
}

# -------------------------------------------------------------------------------------------------- DNS

lab_inet_addr() {
	_lab_inside
	[ -e "$LAB_DIR/state/inet" ] || lab_bail "lab_inet_addr: call lab_internet_up first"
	if [[ $1 == *:* ]]; then
		ip -n inet addr replace "$1/128" dev lo nodad
	else
		ip -n inet addr replace "$1/32" dev lo
	fi || lab_bail "lab_inet_addr $1: failed"
}

# _lab_in_internet ADDR: ADDR lies in 198.18.0.0/15 (outside the link /24) or 2001:db8:1::/48 (textually).
_lab_in_internet() {
	local a=${1,,}
	if [[ $a =~ ^198\.(18|19)\.([0-9]+)\.[0-9]+$ ]]; then
		[ "${BASH_REMATCH[1]}.${BASH_REMATCH[2]}" != 18.0 ]
	else
		[[ $a == 2001:db8:1:* ]]
	fi
}

_lab_dns_reloads() {
	grep -c "read $LAB_DIR/dns/hosts" "$LAB_DIR/log/dnsmasq.log" 2>/dev/null || true
}

lab_dns_add() {
	_lab_inside
	[ -e "$LAB_DIR/state/inet" ] || lab_bail "lab_dns_add: call lab_internet_up first"
	local name=${1,,} addr=${2:-} before deadline p
	[[ $name =~ ^(\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] && [ -n "$addr" ] ||
		lab_bail "usage: lab_dns_add NAME ADDR (got '$*')"
	_lab_in_internet "$addr" && lab_inet_addr "$addr"
	if [[ $name == '*.'* ]]; then
		# Wildcards are dnsmasq configuration (address=/domain/addr): restart it.
		echo "address=/${name#\*.}/$addr" >>"$LAB_DIR/dns/wildcards.conf"
		lab_stop dnsmasq
		_lab_dnsmasq_start
		lab_wait_port inet "$LAB_DNS" 53 5 || lab_bail "dnsmasq did not restart"
		return 0
	fi
	before=$(_lab_dns_reloads)
	echo "$addr $name" >>"$LAB_DIR/dns/hosts"
	p=$(lab_pid dnsmasq) && kill -HUP "$p" || lab_bail "lab_dns_add: dnsmasq is not running"
	deadline=$(($(_lab_now_ms) + 5000))
	while [ "$(_lab_dns_reloads)" -le "$before" ]; do
		[ "$(_lab_now_ms)" -lt "$deadline" ] || lab_bail "lab_dns_add: dnsmasq did not reload its hosts file"
		sleep 0.01
	done
}

lab_dns_mark() {
	_lab_inside
	stat -c %s "$LAB_DIR/log/dnsmasq.log" >"$LAB_DIR/state/dns-mark" 2>/dev/null || echo 0 >"$LAB_DIR/state/dns-mark"
}

# dnsmasq logs "query[AAAA] name from 198.18.0.1" for every query it receives.
lab_dns_queries() {
	_lab_inside
	local mark=0
	[ -f "$LAB_DIR/state/dns-mark" ] && read -r mark <"$LAB_DIR/state/dns-mark"
	[ -f "$LAB_DIR/log/dnsmasq.log" ] || return 0
	tail -c "+$((mark + 1))" "$LAB_DIR/log/dnsmasq.log" |
		sed -n 's/^.*: query\[\([A-Za-z0-9]*\)\] \([^ ]*\) from \([^ ]*\)$/\1 \2 \3/p' |
		if [ "${1:-}" = -v ]; then cat; else awk '{ print $2 }'; fi
}

lab_dns_wait_query() {
	local name=${1,,} secs=${2:-5} deadline
	deadline=$(($(_lab_now_ms) + secs * 1000))
	until lab_dns_queries | grep -qxF -- "$name"; do
		[ "$(_lab_now_ms)" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

lab_http_requests() {
	_lab_inside
	cat "$LAB_DIR/log/http-${1:-inet}.jsonl" 2>/dev/null || true
}
