#!/usr/bin/env bash
# Start-up benchmark of the launcher: `sluice run -- true` against bubblewrap and firejail doing
# the same (new namespaces, no network), with hyperfine. Prints hyperfine's table and the median
# of each, and the ratio sluice/bwrap (target: at most 1.5). Needs root for firejail's --net=none
# and for sluice's cgroup; run as a user it benchmarks the unprivileged (user namespace) path.
#   usage: tools/bench-sandbox.sh [BUILD_DIR] [RUNS] [ROUNDS]   (default: build, 200, 3)
# hyperfine runs one command's runs back to back, so load from other work on the machine lands on
# one command more than another: ROUNDS repeats the whole comparison and the summary reports each
# round's ratio and their median.
# With SLUICE_BENCH_NETWORK=1 it also times `sluice run --allow-network -- true` (needs netd).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
runs=${2:-200}
rounds=${3:-3}
sluice="$build/sandbox/sluice"
for t in hyperfine bwrap firejail; do
	command -v "$t" >/dev/null || { echo "bench-sandbox: $t missing: tools/deps.sh --bench" >&2; exit 1; }
done
[ -x "$sluice" ] || { echo "bench-sandbox: $sluice not built" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cmds=(
	"$sluice run -- true"
	"bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --ro-bind /etc /etc --dev /dev --proc /proc --tmpfs /tmp true"
	"firejail --quiet --noprofile --net=none true"
)
names=("sluice run" "bwrap --unshare-all" "firejail --net=none")
if [ -n "${SLUICE_BENCH_NETWORK:-}" ]; then
	cmds+=("$sluice run --allow-network -- true")
	names+=("sluice run --allow-network")
fi
args=()
for i in "${!cmds[@]}"; do args+=(-n "${names[$i]}" "${cmds[$i]}"); done
for r in $(seq "$rounds"); do
	echo "== round $r of $rounds"
	hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/r$r.json" "${args[@]}"
done
python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
ratios, med = [], {}
for r in range(1, rounds + 1):
    res = {x["command"]: x for x in json.load(open(f"{work}/r{r}.json"))["results"]}
    for name, x in res.items():
        med.setdefault(name, []).append(x["median"] * 1000)
    ratios.append(res["sluice run"]["median"] / res["bwrap --unshare-all"]["median"])
for name, ms in med.items():
    print(f"{name:30s} median per round: " + ", ".join(f"{m:6.2f}" for m in ms) + " ms")
print("sluice/bwrap median ratio per round: " + ", ".join(f"{x:.2f}" for x in ratios))
print(f"sluice/bwrap median ratio (median of rounds): {statistics.median(ratios):.2f} (target <= 1.50)")
PY
