#!/usr/bin/env bash
# run-fuzz.sh TARGET CORPUS: fuzzes TARGET for $SLUICE_FUZZ_SECONDS starting from CORPUS (read only: new
# inputs go to a scratch directory). A crash fails the test and leaves the input in the build dir.
set -euo pipefail
target=$1 corpus=$2
secs=${SLUICE_FUZZ_SECONDS:-10}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# not exec: the trap must run to remove the scratch directory; the fuzzer's status is the test's
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	-artifact_prefix="$(dirname "$target")/" "$scratch" "$corpus"
