#!/usr/bin/env bash
# Benchmark of `sluice run --fs ask` (sandbox/fsgate.c) against `--fs relaxed`:
#  1. a real build inside the sandbox that reads only allowed paths (the compiler, headers and
#     libraries under /usr, the project): this project's common/ and policy/ C files compiled with the
#     build's flags, timed by hyperfine in both modes. Goal: ask within 1.10x of relaxed, since the
#     allow-list is mounted over the gate and never reaches it.
#  2. the cost of one open of a path that goes through the gate (outside the allow-list, allowed by
#     "fs_read" so nobody has to answer): N open+read+close of one file there against the same of a
#     file in /usr, in one process inside one session; per-open microseconds of each.
# Run as root or as a user. Prints hyperfine's table, the ratio, and the per-open figures.
#   usage: tools/bench-fsask.sh [BUILD_DIR] [RUNS] [OPENS]   (default: build, 5, 20000)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
runs=${2:-5}
opens=${3:-20000}
sluice="$build/sandbox/sluice"
command -v hyperfine >/dev/null || { echo "bench-fsask: hyperfine missing: tools/deps.sh --bench" >&2; exit 1; }
command -v python3 >/dev/null || { echo "bench-fsask: python3 missing" >&2; exit 1; }
[ -x "$sluice" ] || { echo "bench-fsask: $sluice not built" >&2; exit 1; }
[ -c /dev/fuse ] || { echo "bench-fsask: no /dev/fuse" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/sluice-bench-fsask.XXXXXX")
# outside every allow-list (not the project, not /tmp or /var/tmp, which the sandbox replaces)
# (a root launch's command runs as an unprivileged uid: root's 0700 home would refuse it)
if [ "$(id -u)" = 0 ]; then gated=$(mktemp -d /var/lib/sluice-bench-gated.XXXXXX); else gated=$(mktemp -d "$HOME/.sluice-bench-gated.XXXXXX"); fi
chmod 755 "$gated"
trap 'rm -rf "$work" "$gated"' EXIT
chmod 755 "$work"
# The workload: every C file of common/ and policy/, compiled as the build does (no linking).
cflags="-std=c17 -O2 -D_GNU_SOURCE -I$src/common -I$src/policy -I$build -I/usr/include/json-c"
compile="cd $src && for f in common/*.c policy/*.c; do cc $cflags -c \"\$f\" -o /tmp/o.o || exit 1; done"
# sanity: the workload compiles inside the sandbox in both modes
for mode in relaxed ask; do
	"$sluice" run -q --fs "$mode" --project "$src" --project-mode ro -- sh -c "$compile" </dev/null ||
		{ echo "bench-fsask: the workload fails in --fs $mode" >&2; exit 1; }
done
hyperfine --warmup 1 --runs "$runs" --export-json "$work/h.json" \
	-n relaxed "$sluice run -q --fs relaxed --project $src --project-mode ro -- sh -c '$compile'" \
	-n ask "$sluice run -q --fs ask --project $src --project-mode ro -- sh -c '$compile'" </dev/null

# Per-open cost: a file outside the allow-list, readable through the gate by "fs_read".
mkdir -p "$work/cfg/sluice"
echo data >"$gated/f"
chmod 644 "$gated/f"
printf '{"sandbox": {"fs_read": ["%s"]}}\n' "$gated" >"$work/cfg/sluice/policy.json"
opener='
import os, sys, time
def per_open(path, n):
    t = time.perf_counter()
    for _ in range(n):
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, 16)
        os.close(fd)
    return (time.perf_counter() - t) / n * 1e6
n = int(sys.argv[2])
per_open(sys.argv[1], 100)
print("%.2f %.2f" % (per_open(sys.argv[1], n), per_open("/usr/include/stdio.h", n)))'
read -r via_gate allowed < <(XDG_CONFIG_HOME="$work/cfg" "$sluice" run -q --fs ask --project "$src" --project-mode ro -- \
	python3 -c "$opener" "$gated/f" "$opens" </dev/null)
[ -n "$allowed" ] || { echo "bench-fsask: the per-open measurement failed" >&2; exit 1; }

python3 - "$work/h.json" "$via_gate" "$allowed" "$opens" <<'EOF'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
rel, ask = r["relaxed"]["median"], r["ask"]["median"]
print("build (common/ + policy/ compiled in the sandbox): relaxed %.3f s, ask %.3f s (medians): ask/relaxed = %.3fx (goal <= 1.10x)"
      % (rel, ask, ask / rel))
print("one open+read+close (%s of each, one session): through the gate (fs_read) %s us, allowed tree (/usr) %s us"
      % (sys.argv[4], sys.argv[2], sys.argv[3]))
EOF
