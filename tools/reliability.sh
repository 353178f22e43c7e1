#!/usr/bin/env bash
# tools/reliability.sh: the reliability review in one command (docs/reliability.md). Run as root:
#
#   sudo tools/reliability.sh [--asan] [--no-fuzz]
#
# Installs missing Debian packages, builds what it needs, then runs, each bounded in count and time and each
# inside its own lab of network namespaces (no packet leaves them; nothing of the machine's network is
# touched):
#   1. load      tools/bench-load.sh: 10,000 concurrent CONNECT tunnels across 100 sessions (RSS per idle
#                tunnel), descriptors after 10,000 aborted connections, one session's latency while another
#                floods, N decisions = N audit lines
#   2. faults    the fault and load tests of the suite: faults_proxy (upstream reset, half-close, garbage,
#                hung/down resolver), faults_netd (engine kill -9, sluiced kill -9 at each setup step),
#                reliability (the small load checks), proxy_limits (audit log disk full, slowloris, caps),
#                netd (kill -9 after setup)
#   3. valgrind  the proxy's integration tests with sluice-proxy under valgrind memcheck
#   4. asan      (--asan) the same fault, load and proxy tests in an ASan+UBSan build; any sanitizer report
#                in a lab log fails its test (tools/test.sh runs the whole suite under ASan+UBSan)
#   5. fuzz      every libFuzzer target for RELIABILITY_FUZZ_SECONDS (default 20) each, corpora untouched
# and ends with a table of results and figures; it exits non-zero if anything failed. About 8 minutes on a
# 2-core machine once built (457 s measured; the first build adds 5-10). Everything it prints is also written to
# $RELIABILITY_OUT (default build-reliability/reliability-report.txt).
#
# Environment: RELIABILITY_BUILD (build-reliability), RELIABILITY_ASAN_BUILD (build-reliability-asan),
# RELIABILITY_FUZZ_BUILD (build-reliability-fuzz), RELIABILITY_FUZZ_SECONDS, and bench-load.sh's LOAD_*.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src" || exit 2
asan=0 fuzz=1
for a in "$@"; do
	case $a in
	--asan) asan=1 ;;
	--no-fuzz) fuzz=0 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "tools/reliability.sh: unknown option '$a' (use --asan, --no-fuzz)" >&2; exit 2 ;;
	esac
done
if [ "$(id -u)" != 0 ]; then
	echo "tools/reliability.sh: run it as root (sudo tools/reliability.sh): the load and fault tests build labs of network namespaces" >&2
	exit 2
fi
B=${RELIABILITY_BUILD:-build-reliability}
AB=${RELIABILITY_ASAN_BUILD:-build-reliability-asan}
FB=${RELIABILITY_FUZZ_BUILD:-build-reliability-fuzz}
fsecs=${RELIABILITY_FUZZ_SECONDS:-20}
mkdir -p "$B"
OUT=${RELIABILITY_OUT:-$B/reliability-report.txt}
exec > >(tee "$OUT") 2>&1
t_start=$SECONDS
declare -a SUMMARY
status=0
result() { # result PART OK|FAIL DETAIL
	SUMMARY+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")")
	[ "$2" = ok ] || status=1
}
elapsed() { echo "$((SECONDS - $1)) s"; }

echo "== sluice reliability review, $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$src" describe --always --dirty 2>/dev/null), $(nproc) CPUs, kernel $(uname -r)"
"$src/tools/deps.sh" >/dev/null || { echo "tools/deps.sh failed: install the packages of tools/debian-packages.txt"; exit 1; }

# build DIR OPTIONS...: configures (once) and builds
build() {
	local dir=$1
	shift
	[ -f "$dir/build.ninja" ] || meson setup "$dir" "$@" >"$dir.setup.log" 2>&1 || { tail -n 30 "$dir.setup.log"; return 1; }
	ninja -C "$dir" >"$dir.build.log" 2>&1 || { tail -n 40 "$dir.build.log"; return 1; }
}
# suite DIR LABEL TEST...: runs meson tests, records the counts
suite() {
	local dir=$1 label=$2 t0=$SECONDS rc counts p f s
	shift 2
	meson test -C "$dir" --no-rebuild --print-errorlogs "$@" | grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):'
	rc=${PIPESTATUS[0]}
	counts=$(python3 "$src/tests/lib/count-results.py" "$dir/meson-logs/testlog.json" 2>/dev/null) || counts="0 1 0"
	read -r p f s <<<"$counts"
	cp "$dir/meson-logs/testlog.txt" "$B/reliability-$label.log" 2>/dev/null
	if [ "$rc" -eq 0 ] && [ "$f" = 0 ] && [ "$s" = 0 ]; then
		result "$label" ok "$p tests passed ($*) in $(elapsed "$t0")"
	else
		result "$label" FAIL "$p passed, $f failed, $s skipped of: $* (log: $B/reliability-$label.log)"
	fi
}

echo "== building $B (debugoptimized)"
build "$B" -Dbuildtype=debugoptimized || { result build FAIL "$B did not build"; }

echo "== 1. load (tools/bench-load.sh)"
t0=$SECONDS
"$src/tools/bench-load.sh" "$B" 2>&1 | grep -v '^#   ' | tee "$B/bench-load.txt"
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
	result load ok "every load check passed in $(elapsed "$t0") (figures above, also in $B/bench-load.txt)"
else
	result load FAIL "a load check failed (see the table above)"
fi

echo "== 2. faults and small load checks"
suite "$B" faults faults_proxy faults_netd reliability proxy_limits netd

echo "== 3. valgrind (sluice-proxy under memcheck)"
suite "$B" valgrind valgrind-proxy_http valgrind-proxy_dns valgrind-proxy_limits

if [ "$asan" = 1 ]; then
	echo "== 4. ASan+UBSan build ($AB)"
	if build "$AB" -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false; then
		ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
			suite "$AB" asan faults_proxy faults_netd reliability proxy_limits proxy_http proxy_dns netd
	else
		result asan FAIL "$AB did not build"
	fi
fi

if [ "$fuzz" = 1 ]; then
	echo "== 5. fuzzing, ${fsecs} s per target ($FB, clang)"
	t0=$SECONDS
	SLUICE_FUZZ_BUILD=$FB SLUICE_FUZZ_NO_MERGE=1 "$src/tools/fuzz.sh" "$fsecs" | tee "$B/fuzz.txt"
	if [ "${PIPESTATUS[0]}" -eq 0 ] && ! grep -q CRASH "$B/fuzz.txt"; then
		result fuzz ok "$(($(wc -l <"$B/fuzz.txt") - 1)) targets, ${fsecs} s each, no crash ($(elapsed "$t0"))"
	else
		result fuzz FAIL "a fuzz target crashed or did not run (see above)"
	fi
fi

echo
echo "== summary ($(elapsed "$t_start"); report in $OUT)"
printf '  %s\n' "${SUMMARY[@]}"
[ "$status" = 0 ] && echo "== all passed" || echo "== FAILED"
exit "$status"
