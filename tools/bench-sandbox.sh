#!/usr/bin/env bash
# Start-up benchmark of the launcher: `sluice run -- true` against bubblewrap and firejail doing
# the same (new namespaces, no network), with hyperfine. Prints hyperfine's table and the median
# of each, and the ratio sluice/bwrap (target: at most 1.5). Needs root for firejail's --net=none
# and for sluice's cgroup; run as a user it benchmarks the unprivileged (user namespace) path.
#   usage: tools/bench-sandbox.sh [BUILD_DIR] [RUNS]     (default: build, 200)
# With SLUICE_BENCH_NETWORK=1 it also times `sluice run --allow-network -- true` (needs netd).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
runs=${2:-200}
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
hyperfine -N --warmup 10 --runs "$runs" --export-json "$work/r.json" "${args[@]}"
python3 - "$work/r.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
for name, x in r.items():
    print(f"{name:32s} median {x['median']*1000:7.2f} ms   mean {x['mean']*1000:7.2f} ms   min {x['min']*1000:6.2f} ms")
s, b = r["sluice run"]["median"], r["bwrap --unshare-all"]["median"]
print(f"sluice/bwrap median ratio: {s/b:.2f} (target <= 1.50)")
PY
