#!/usr/bin/env bash
# Fuzzing campaign: builds the libFuzzer targets (clang, ASan+UBSan) and runs each for SECONDS
# (default 300), then merges what it found into tests/fuzz/corpus/NAME (minimised with -merge=1) so
# every later test run replays it. Prints executions and coverage per target. A crash stops with its
# input saved in build-fuzz/tests/fuzz/; add it to the corpus as regress-* once fixed.
# usage: tools/fuzz.sh [SECONDS] [TARGET...]
# SLUICE_FUZZ_BUILD=DIR builds in DIR instead of build-fuzz; SLUICE_FUZZ_NO_MERGE=1 leaves the corpora as
# they are (tools/reliability.sh: a review run does not change the tree).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
secs=${1:-300}; shift || true
"$src/tools/deps.sh"
bdir=${SLUICE_FUZZ_BUILD:-build-fuzz}
if [ ! -f "$bdir/build.ninja" ]; then
	CC=clang meson setup "$bdir" -Dbuildtype=debug -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C "$bdir" >/dev/null
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	# the fuzzer executables (not meson's fuzz_*.p object directories, whose listing is not a target)
	mapfile -t targets < <(cd "$bdir/tests/fuzz" && find . -maxdepth 1 -type f -executable -name 'fuzz_*' |
		sed 's|^\./fuzz_||' | sort)
fi
printf '%-12s %12s %8s %8s %s\n' target execs cov corpus result
for t in "${targets[@]}"; do
	bin="$bdir/tests/fuzz/fuzz_$t"
	corpus="tests/fuzz/corpus/$t"
	scratch=$(mktemp -d)
	log=$(mktemp)
	rc=0
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$bdir/tests/fuzz/" "$scratch" "$corpus" >"$log" 2>&1 || rc=$?
	execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}')
	cov=$(grep -E '#[0-9]+.*DONE' "$log" | grep -o 'cov: [0-9]*' | awk '{print $2}')
	if [ "$rc" -eq 0 ] && [ -n "${SLUICE_FUZZ_NO_MERGE:-}" ]; then
		result=ok
	elif [ "$rc" -eq 0 ]; then
		"$bin" -merge=1 "$corpus" "$scratch" >/dev/null 2>&1 || true
		result=ok
	else
		result="CRASH (see $log)"
	fi
	printf '%-12s %12s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "$(ls "$corpus" | wc -l)" "$result"
	rm -rf "$scratch"
	[ "$rc" -eq 0 ] && rm -f "$log"
done
