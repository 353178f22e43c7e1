#!/usr/bin/env bash
# bench-https.sh [BUILD_DIR]: HTTPS inspection (policy "inspect", docs/proxy.md) of sluice-proxy against Squid
# with ssl-bump (Debian's squid-openssl), in one run inside a private lab (tests/lib/lab.sh: its own network,
# mount and pid namespaces; no packet leaves them). Needs root and the bench packages (tools/deps.sh --bench):
# squid-openssl, nginx-light (the HTTPS origin), curl. Not part of the test suite.
#
#   keep-alive requests/s: BENCH_CLIENTS (default 4) curl processes, each BENCH_REQS (default 2000) GETs of a
#                          tiny response over one kept-alive inspected TLS connection (curl's URL globbing)
#   bulk MB/s:             one curl download of BENCH_BULK_MIB (default 256) MiB through the inspecting proxy,
#                          and the proxy's CPU seconds per GiB
# Both proxies decrypt, check and re-encrypt (each with its own CA, trusted by the client; each verifies the
# origin against the lab's CA); "direct" is curl to the origin without a proxy, for scale. Median of
# BENCH_ROUNDS (default 3) rounds whose order rotates.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=${1:-${SLUICE_BUILD_DIR:-$src/build}}
SLUICE_BUILD_DIR=$(cd "$SLUICE_BUILD_DIR" && pwd) || exit 2
. "$src/tests/lib/tap.sh"
. "$src/tests/lib/lab.sh"
. "$src/tests/lib/proxy-lab.sh"
lab_enter "$@"
_lab_need squid nginx curl openssl
clients=${BENCH_CLIENTS:-4} reqs=${BENCH_REQS:-2000} light_reqs=${BENCH_LIGHT_REQS:-5000} new_reqs=${BENCH_NEW_REQS:-250} mib=${BENCH_BULK_MIB:-256} rounds=${BENCH_ROUNDS:-3}
PORT=9443

lab_internet_up >/dev/null
lab_session s1 >/dev/null
read -r S_ADDR GW _ < <(lab_session_info s1)
# (bench.allowed.test: the lab resolves *.allowed.test, and its certificate names it)

# ---- the origin: nginx with the lab's certificate, a tiny response and a big file
W=$LAB_DIR/nginx
mkdir -p "$W/www/bulk" && chmod -R 0755 "$W"
truncate -s "${mib}M" "$W/www/bulk/file"
. "$src/tools/bench-nginx.sh"
bench_nginx nginx "$W" "    listen $PORT ssl;
    ssl_certificate $LAB_DIR/tls/server.pem;
    ssl_certificate_key $LAB_DIR/tls/server.key;
    location = /small { default_type text/plain; return 200 \"ok\\n\"; }
    location /bulk/ { root $W/www; }"
lab_wait_port inet "$LAB_ALLOWED4" "$PORT" 5 || lab_bail "nginx did not start: $(cat "$W/error.log")"

# ---- sluice-proxy: a session whose policy inspects bench.allowed.test; the engine trusts the lab's CA
cat >"$LAB_DIR/policy.json" <<JSON
{"allow": ["bench.allowed.test:$PORT"], "inspect": [{"host": "bench.allowed.test", "allow": ["GET /small", "GET /bulk/**"]}]}
JSON
mkdir -p "$LAB_DIR/proxy" && chmod 0777 "$LAB_DIR/proxy"
cat >"$LAB_DIR/proxy/config.json" <<JSON
{"user": "nobody", "audit_log": "$LAB_DIR/proxy/audit.log", "upstream_dns": "$LAB_DNS:53",
 "listen": [{"kind": "http", "address": "$GW:3128"}, {"kind": "dns", "address": "$GW:53"}],
 "sessions": [{"id": "s1", "uid": 1000, "command": "bench", "addr4": "$S_ADDR", "gw4": "$GW",
               "ca_cert": "$LAB_DIR/proxy/ca.pem", "policy": {"files": ["$LAB_DIR/policy.json"]}}]}
JSON
SLUICE_TLS_TRUST=$LAB_CA lab_bg proxy "$SLUICE_BUILD_DIR/proxy/sluice-proxy" --config "$LAB_DIR/proxy/config.json"
lab_wait_port s1 "$GW" 3128 5 || lab_bail "sluice-proxy did not start: $(tail -n 5 "$(lab_log proxy)")"
contenders=(3128 3129 direct)
if [ -n "${BENCH_AB_BUILD:-}" ]; then
	mkdir -p "$LAB_DIR/proxyb" && chmod 0777 "$LAB_DIR/proxyb"
	sed -e "s|$LAB_DIR/proxy/|$LAB_DIR/proxyb/|g" -e "s|$GW:3128|$GW:3130|" -e 's|, {"kind": "dns"[^}]*}||' \
		"$LAB_DIR/proxy/config.json" >"$LAB_DIR/proxyb/config.json"
	SLUICE_TLS_TRUST=$LAB_CA lab_bg proxyb "$BENCH_AB_BUILD/proxy/sluice-proxy" --config "$LAB_DIR/proxyb/config.json"
	lab_wait_port s1 "$GW" 3130 5 || lab_bail "sluice-proxy B did not start: $(tail -n 5 "$(lab_log proxyb)")"
	contenders=(3128 3130 3129 direct)
fi

# ---- Squid with ssl-bump: its own CA, leaf certificates from security_file_certgen, the lab's CA upstream
Q=$LAB_DIR/squid
mkdir -p "$Q" && chmod 0777 "$Q"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj "/CN=squid bench CA" \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
	-keyout "$Q/ca.key" -out "$Q/ca.pem" 2>/dev/null
chmod 0644 "$Q/ca.key" "$Q/ca.pem"
/usr/lib/squid/security_file_certgen -c -s "$Q/ssl_db" -M 16MB >/dev/null && chown -R proxy "$Q/ssl_db"
printf '%s\n' "http_port $GW:3129 ssl-bump tls-cert=$Q/ca.pem tls-key=$Q/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB" \
	"sslcrtd_program /usr/lib/squid/security_file_certgen -s $Q/ssl_db -M 16MB" "sslcrtd_children 4" \
	"acl step1 at_step SslBump1" "ssl_bump peek step1" "ssl_bump bump all" "tls_outgoing_options cafile=$LAB_CA" \
	"http_access allow all" "cache deny all" "dns_nameservers $LAB_DNS" "hosts_file none" "pinger_enable off" \
	"workers 1" "access_log none" "cache_log $Q/cache.log" "pid_filename $Q/squid.pid" "coredump_dir $Q" \
	"cache_effective_user proxy" "shutdown_lifetime 0 seconds" >"$Q/squid.conf"
lab_bg squid squid -N -f "$Q/squid.conf"
lab_wait_port s1 "$GW" 3129 10 || lab_bail "squid did not start: $(tail -n 5 "$Q/cache.log")"
lab_forward on # the direct path

declare -A CA=([3128]=$LAB_DIR/proxy/ca.pem [3130]=$LAB_DIR/proxyb/ca.pem [3129]=$Q/ca.pem [direct]=$LAB_CA)
declare -A PIDNAME=([3128]=proxy [3130]=proxyb [3129]=squid)
cpu_ticks() {
	if [ "$1" = direct ]; then echo 0; else awk '{ print $14 + $15 }' "/proc/$(lab_pid "${PIDNAME[$1]}")/stat"; fi
}
# light_run PORT|direct: "requests/s cpu_us_per_request" of bench-https-client's $clients connections x
# $light_reqs requests ("0 -" if any failed; "-" for the CPU of the direct path)
# (light_run PORT|direct N new: N requests per thread, each on a new connection: CONNECT, TLS handshake)
light_run() {
	local where=$1 out n secs t0 t1 proxy=- pport=0
	[ "$where" = direct ] || proxy=$GW pport=$where
	t0=$(cpu_ticks "$where")
	out=$(lab_exec s1 "$SLUICE_BUILD_DIR/tools/bench-https-client" "$proxy" "$pport" bench.allowed.test "$PORT" /small \
		"${CA[$where]}" "$clients" "${2:-$light_reqs}" ${3:+"$3"}) || { echo "0 -"; return; }
	t1=$(cpu_ticks "$where")
	read -r n secs <<<"$out"
	awk -v n="$n" -v s="$secs" -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v d="$where" \
		'BEGIN { printf "%.0f %s\n", n / s, d == "direct" ? "-" : sprintf("%.1f", t / hz * 1e6 / n) }'
}
via() { [ "$1" = direct ] && echo "--noproxy bench.allowed.test" || echo "-x http://$GW:$1"; }
# rps_run PORT|direct: keep-alive requests/s of $clients curls, $reqs requests each ("0" if any failed)
rps_run() {
	local where=$1 t0 t1 i ok pids=()
	t0=$(date +%s%N)
	for ((i = 0; i < clients; i++)); do
		# shellcheck disable=SC2046
		lab_exec s1 curl -s -m 120 $(via "$where") --cacert "${CA[$where]}" -o /dev/null -w '%{http_code}\n' \
			"https://bench.allowed.test:$PORT/small?[1-$reqs]" >"$LAB_DIR/rps.$i" &
		pids+=($!)
	done
	wait "${pids[@]}" # (not a bare wait: the lab's servers are children of this shell too)
	t1=$(date +%s%N)
	ok=$(cat "$LAB_DIR"/rps.* | grep -c '^200$')
	[ "$ok" -eq $((clients * reqs)) ] || { echo 0; return; }
	awk -v n="$ok" -v ns="$((t1 - t0))" 'BEGIN { printf "%.0f\n", n / (ns / 1e9) }'
}
# bulk_run PORT|direct: "MB/s cpu_s_per_GiB" of one download ("0 -" if incomplete; "-" for the CPU of the
# direct path)
bulk_run() {
	local where=$1 out speed size t0 t1
	t0=$(cpu_ticks "$where")
	# shellcheck disable=SC2046
	out=$(lab_exec s1 curl -sS -m 300 $(via "$1") --cacert "${CA[$where]}" -o /dev/null \
		-w '%{speed_download} %{size_download}' "https://bench.allowed.test:$PORT/bulk/file")
	t1=$(cpu_ticks "$where")
	read -r speed size <<<"$out"
	[ "${size:-0}" = $((mib * 1048576)) ] || { echo "0 -"; return; }
	awk -v s="$speed" -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" -v d="$where" -v mib="$mib" \
		'BEGIN { printf "%.0f %s\n", s / 1e6, d == "direct" ? "-" : sprintf("%.2f", t / hz * 1024 / mib) }'
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }

echo "# warming up"
for p in "${contenders[@]}"; do
	[ "$p" = direct ] || light_run "$p" >/dev/null
done
if [ -n "${BENCH_PROFILE:-}" ]; then
	mkdir -p "$BENCH_PROFILE"
	# traced FILE RUN PORT TRACER...: RUN (light_run or bulk_run) through PORT with TRACER attached to the proxy
	traced() {
		local out=$1 run=$2 p=$3 prec
		shift 3
		"$@" -p "$(lab_pid "${PIDNAME[$p]}")" -o "$BENCH_PROFILE/$out" 2>/dev/null &
		prec=$!
		sleep 0.5
		echo "# $out: $($run "$p")"
		kill -INT "$prec"
		wait "$prec"
	}
	for p in "${contenders[@]}"; do
		[ "$p" != direct ] || continue
		traced "perf.$p.data" light_run "$p" perf record -q -g
		traced "strace.$p.txt" light_run "$p" strace -c -f
		traced "strace-bulk.$p.txt" bulk_run "$p" strace -c -f
		[ -z "${BENCH_PERF_EVENTS:-}" ] || traced "stat.$p.txt" light_run "$p" perf stat -e "$BENCH_PERF_EVENTS"
	done
	exit 0
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
nc=${#contenders[@]}
declare -A S
for ((round = 1; round <= rounds; round++)); do
	for ((k = 0; k < nc; k++)); do
		p=${contenders[(k + round) % nc]}
		read -r l cpu < <(light_run "$p")
		read -r nl ncpu < <(light_run "$p" "$new_reqs" new)
		r=$(rps_run "$p")
		read -r b bcpu < <(bulk_run "$p")
		echo "# round $round via $p: $l requests/s ($cpu us CPU/request), new connection each $nl/s ($ncpu us CPU each)," \
			"curl $r requests/s, $b MB/s ($bcpu CPU s/GiB)"
		S[light_$p]+=" $l" S[cpu_$p]+=" $cpu" S[new_$p]+=" $nl" S[ncpu_$p]+=" $ncpu" S[rps_$p]+=" $r" S[bulk_$p]+=" $b"
		S[bcpu_$p]+=" $bcpu"
	done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A R
for key in "${!S[@]}"; do
	# shellcheck disable=SC2086
	case ${S[$key]} in *-*) R[$key]=- ;; *) R[$key]=$(median ${S[$key]}) ;; esac
done
inspected=$(grep -c '"protocol":"https"' "$LAB_DIR/proxy/audit.log")
row() { printf '%-50s %12s %12s %12s %12s\n' "$@"; }
b=() bs=()
[ -z "${BENCH_AB_BUILD:-}" ] || b=("sluice B") bs=(3130)
cell() { local k=$1 p; for p in 3128 "${bs[@]}" 3129 direct; do printf '%s\n' "${R[${k}_$p]:-}"; done; }
echo
echo "HTTPS inspection benchmark ($(nproc) CPUs, median of $rounds rounds, kernel $(uname -r))"
echo "load average before: $load_before, after: $load_after"
[ -z "${BENCH_AB_BUILD:-}" ] || echo "sluice: $SLUICE_BUILD_DIR; sluice B: $BENCH_AB_BUILD"
row "" sluice "${b[@]}" "squid bump" direct
mapfile -t v < <(cell light); row "keep-alive requests/s ($clients conns x $light_reqs, light client)" "${v[@]}"
mapfile -t v < <(cell cpu); row "  proxy CPU us/request" "${v[@]}"
mapfile -t v < <(cell new); row "new connection each: requests/s ($clients x $new_reqs)" "${v[@]}"
mapfile -t v < <(cell ncpu); row "  proxy CPU us/request" "${v[@]}"
mapfile -t v < <(cell rps); row "keep-alive requests/s ($clients curls x $reqs)" "${v[@]}"
mapfile -t v < <(cell bulk); row "bulk MB/s ($mib MiB, one download)" "${v[@]}"
mapfile -t v < <(cell bcpu); row "  proxy CPU s/GiB" "${v[@]}"
echo
echo "ratios (target >= 1.5):"
echo "  keep-alive requests/s sluice/squid (light client)  $(ratio "${R[light_3128]}" "${R[light_3129]}")"
echo "  proxy CPU per request squid/sluice                 $(ratio "${R[cpu_3129]}" "${R[cpu_3128]}")"
echo "  new connection each requests/s sluice/squid       $(ratio "${R[new_3128]}" "${R[new_3129]}")"
echo "  keep-alive requests/s sluice/squid (curl)          $(ratio "${R[rps_3128]}" "${R[rps_3129]}")"
echo "  bulk MB/s sluice/squid                             $(ratio "${R[bulk_3128]}" "${R[bulk_3129]}")"
if [ -n "${BENCH_AB_BUILD:-}" ]; then
	echo "  sluice B/squid: light $(ratio "${R[light_3130]}" "${R[light_3129]}"), new connection each $(ratio "${R[new_3130]}" "${R[new_3129]}"), curl $(ratio "${R[rps_3130]}" "${R[rps_3129]}"), bulk $(ratio "${R[bulk_3130]}" "${R[bulk_3129]}")"
fi
echo "  sluice wrote $inspected audit records of inspected requests"
