#!/usr/bin/env bash
# Start-up benchmark of the launcher (issue 16): `sluice run -- true` against bubblewrap and firejail
# set up as alike as they allow, and `sluice run --allow-network -- true` with the embedded network
# helper and through sluiced, in one run, with hyperfine. Prints each row's median per round, the
# ratios against the issue's goals, and writes everything (commands, load averages, per-round medians,
# ratios, goals met or not) as JSON.
#   usage: tools/bench-sandbox.sh [BUILD_DIR] [RUNS] [ROUNDS]   (default: build, 200, 3)
#   SLUICE_BENCH_JSON=FILE   where the JSON goes (default BUILD_DIR/bench-sandbox.json)
#   SLUICE_BENCH_NETWORK=0   leaves the network rows (and the lab) out; they need root
#   SLUICE_BENCH_BASELINE=OTHER_BUILD_DIR   adds "(baseline)" rows: the same sluice commands from another
#                            build (say, of main), to measure a change before and after in the same run
#
# Two phases, each ROUNDS rounds; a round is one hyperfine run of every row of its phase, in an order
# that rotates from round to round, then an interleaved pass: RUNS iterations, each running every row
# once in a shuffled order, timed by the script (wall clock, and user+system CPU from wait4). hyperfine
# runs one row's runs back to back, so on a shared machine load from other work lands on one row more
# than another (on the 2-core development VM at a load average of 10, a round's sluice/bwrap ratio went
# from 0.7 to 2.9); the interleaved pass pairs each iteration's rows under the same load, and the goals
# are judged on the median of its per-iteration ratios (then the median of the rounds). The 1-minute load
# average is recorded before and after each round. The interleaved pass spawns a row written `env VAR=...
# CMD` as CMD with VAR in its environment (hyperfine's rows exec env(1) first: ~0.75 ms more, here).
#  - host: sluice run, bwrap, firejail (and the slow rows below), in the invoking namespaces;
#  - lab (root): the script again as pid 1 of a lab (tests/lib/lab.sh: fresh network, mount and pid
#    namespaces, no route out) with sluiced started there: sluice run and bwrap again (the baseline of
#    the network rows, in the same setting), `--allow-network` through sluiced, and with the embedded
#    helper (a run directory without sluiced's socket). firejail is not timed there: inside the lab's
#    PID namespace it runs the command without its sandbox ("existing sandbox").
#
# What each is given (a root launch; docs/sandbox.md "Start-up (measured)"):
#  - sluice run: its defaults: user (the command as an unprivileged uid), mount, pid, ipc, uts, network
#    and cgroup namespaces, a session cgroup, a tmpfs root with the system directories bound read-only,
#    one scratch tmpfs for /tmp, /var/tmp, /run and the home, /dev (tmpfs, device binds, devpts, shm),
#    /proc, the masks over secrets, the project directory (an overlay), rlimits, no capabilities,
#    no_new_privs, its seccomp filter;
#  - bwrap: --unshare-all (user, mount, pid, ipc, uts, network, cgroup) --die-with-parent --cap-drop ALL,
#    the same system directories (read-only binds, symlinks as symlinks), tmpfs /tmp, /var/tmp, /run and
#    $HOME, --dev, --proc, --remount-ro /: no seccomp filter (bwrap takes one only as a compiled
#    program), no cgroup, no masks, no project overlay, and uid 0 stays uid 0;
#  - firejail --noprofile --net=none --ipc-namespace --private-dev --private-tmp --caps.drop=all
#    --nonewprivs --seccomp: its own mount and pid namespaces and default seccomp list.
#
# Slow rows, timed in a second hyperfine run per round with SLUICE_BENCH_SLOW_RUNS (default 20) runs
# (host phase):
#   - "srt (sandbox-runtime)": Anthropic's sandbox-runtime, a Node program wrapping bwrap, as `srt true`
#     with its default settings (it starts its HTTP and SOCKS bridges). SLUICE_BENCH_SRT=PATH uses that
#     srt; otherwise it is installed with npm into the temporary work directory (never into the tree);
#     SLUICE_BENCH_SRT=none leaves it out. It needs node, socat and ripgrep (tools/deps.sh --bench).
#   - "node + bwrap": `node -e` spawning the same bwrap command as above through child_process: the
#     floor of any Node wrapper (the interpreter's start plus bwrap), measured when node is there.
#
# SLUICE_BENCH_CONTAINERS=1 (root, podman) adds the container types (issue 18) as slow rows, with the test
# image (tests/lib/ctr-image.sh, built once under BUILD/tests/ctr-image): `--sandbox-type container`,
# `--sandbox-type devcontainer` (a devcontainer.json naming that image), and `--allow-containers` as a fast
# row; in the lab phase `--sandbox-type container --allow-network` through sluiced.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
self=$src/tools/$(basename "$0")
build=$(cd "${1:-$src/build}" && pwd)
runs=${2:-200}
rounds=${3:-3}
slow_runs=${SLUICE_BENCH_SLOW_RUNS:-20}
sluice="$build/sandbox/sluice"
phase=${SLUICE_BENCH_PHASE:-host}
baseline=""
if [ -n "${SLUICE_BENCH_BASELINE:-}" ]; then
	baseline=$(cd "$SLUICE_BENCH_BASELINE" && pwd)/sandbox/sluice
	[ -x "$baseline" ] || { echo "bench-sandbox: $baseline not built" >&2; exit 1; }
fi

# bwrap's arguments: the system directories sluice shows (sandbox/mounts.c), then the rest.
bwrap_args=(--unshare-all --die-with-parent --cap-drop ALL)
for d in usr bin sbin lib lib32 lib64 libx32 etc opt nix; do
	if [ -L "/$d" ]; then
		bwrap_args+=(--symlink "$(readlink "/$d")" "/$d")
	elif [ -d "/$d" ]; then
		bwrap_args+=(--ro-bind "/$d" "/$d")
	fi
done
bwrap_args+=(--dev /dev --proc /proc --tmpfs /tmp --tmpfs /var/tmp --tmpfs /run)
[ -n "${HOME:-}" ] && [ "$HOME" != / ] && bwrap_args+=(--tmpfs "$HOME")
bwrap_args+=(--remount-ro / true)
firejail_args=(--quiet --noprofile --net=none --ipc-namespace --private-dev --private-tmp --caps.drop=all
	--nonewprivs --seccomp true)

loadavg() { cut -d' ' -f1 /proc/loadavg; }

# run_rounds PREFIX: ROUNDS hyperfine runs of names[]/cmds[] (rotating order) into $work/PREFIX<r>.json,
# with the load average before and after each in $work/PREFIX<r>.load
run_rounds() {
	local prefix=$1 r i n=${#cmds[@]} args
	for r in $(seq "$rounds"); do
		args=()
		for i in $(seq 0 $((n - 1))); do
			local j=$(((i + r - 1) % n))
			args+=(-n "${names[$j]}" "${cmds[$j]}")
		done
		echo "== $phase phase, round $r of $rounds (load average $(loadavg))"
		local before
		before=$(loadavg)
		# with a baseline, its failed launches must not end the run (the interleaved pass below still
		# fails on any failure of the current build)
		hyperfine -N ${baseline:+-i} --warmup 10 --runs "$runs" --export-json "$work/$prefix$r.json" "${args[@]}"
		echo "interleaved: $runs iterations of every row in a shuffled order"
		printf '%s\n' "${names[@]}" >"$work/names"
		printf '%s\n' "${cmds[@]}" >"$work/cmds"
		python3 - "$work/names" "$work/cmds" "$runs" "$work/${prefix}i$r.json" <<'PY'
import json, os, random, shlex, sys, time
names = open(sys.argv[1]).read().splitlines()
cmds = [shlex.split(c) for c in open(sys.argv[2]).read().splitlines()]
runs, out = int(sys.argv[3]), sys.argv[4]
# A row written `env VAR=VALUE... CMD` is spawned as CMD with VAR set: exec'ing env(1) first cost ~0.75 ms
# of wall and CPU on the development VM, which only the network rows (the ones that name a run directory)
# paid, so their ratio against `sluice run` counted a process that is no part of sluice's start-up.
envs = []
for i, c in enumerate(cmds):
    env, j = dict(os.environ), 0
    if c[0] == "env":
        j = 1
        while j < len(c) and "=" in c[j] and not c[j].startswith("-"):
            k, v = c[j].split("=", 1)
            env[k] = v
            j += 1
    cmds[i] = c[j:]
    envs.append(env)

res = {n: {"wall_ms": [], "cpu_ms": []} for n in names}
devnull = os.open(os.devnull, os.O_RDWR)
for it in range(runs + 3):  # the first 3 iterations warm up
    order = list(range(len(names)))
    random.shuffle(order)
    for i in order:
        t0 = time.perf_counter()
        pid = os.posix_spawnp(cmds[i][0], cmds[i], envs[i],
                              file_actions=[(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)])
        _, st, ru = os.wait4(pid, 0)
        wall = (time.perf_counter() - t0) * 1e3
        ok = os.waitstatus_to_exitcode(st) == 0
        if not ok and not names[i].endswith("(baseline)"):
            sys.exit(f"bench-sandbox: {names[i]} failed (status {os.waitstatus_to_exitcode(st)})")
        if it >= 3:
            # a failed baseline launch (its own bugs) is counted and left out of the pairs
            res[names[i]]["wall_ms"].append(wall if ok else None)
            res[names[i]]["cpu_ms"].append((ru.ru_utime + ru.ru_stime) * 1e3 if ok else None)
            res[names[i]]["failed"] = res[names[i]].get("failed", 0) + (not ok)
json.dump(res, open(out, "w"))
PY
		echo "$before $(loadavg)" >"$work/$prefix$r.load"
		if [ "${#slow_cmds[@]}" -gt 0 ]; then
			args=()
			for i in "${!slow_cmds[@]}"; do args+=(-n "${slow_names[$i]}" "${slow_cmds[$i]}"); done
			hyperfine -N --warmup 2 --runs "$slow_runs" --export-json "$work/${prefix}s$r.json" "${args[@]}"
		fi
	done
}

if [ "$phase" = lab ]; then
	# the lab phase: lab_enter re-executes this script as pid 1 of fresh network, mount and pid namespaces
	work=$SLUICE_BENCH_WORK
	export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=$build
	set +eu
	. "$src/tests/lib/tap.sh"
	. "$src/tests/lib/lab.sh"
	lab_enter "$@"
	set -eu
	trap '_lab_exit' EXIT # the lab's own trap stops sluiced and removes the lab
	cd "$work"
	# sluiced in the lab: its pool is CGNAT space, its upstream DNS an address nothing answers on (the
	# sessions run `true`); the embedded helper is what a client gets when the run dir has no socket.
	mkdir -p "$work/etc-sluice" "$work/no-daemon"
	lab_bg sluiced "$build/netd/sluiced" --run-dir /run/sluice --audit-log "$work/audit.log" \
		--pool4 100.64.0.0/16 --pool6 2001:db8:100::/64 --upstream-dns 198.18.0.53 --sysconfdir "$work/etc-sluice"
	for _ in $(seq 200); do
		grep -q "proxy engine .* running" "$(lab_log sluiced)" 2>/dev/null && break
		sleep 0.05
	done
	grep -q "proxy engine .* running" "$(lab_log sluiced)" ||
		{ echo "bench-sandbox: sluiced did not start: $(tail -n 5 "$(lab_log sluiced)")" >&2; exit 1; }
	names=("sluice run" "bwrap" "sluice run --allow-network (sluiced)" "sluice run --allow-network (embedded)")
	cmds=("$sluice run -- true" "bwrap ${bwrap_args[*]}"
		"env SLUICE_RUN_DIR=/run/sluice $sluice run --allow-network -- true"
		"env SLUICE_RUN_DIR=$work/no-daemon $sluice run --allow-network -- true")
	if [ -n "$baseline" ]; then
		names+=("sluice run (baseline)" "sluice run --allow-network (embedded) (baseline)"
			"sluice run --allow-network (sluiced) (baseline)")
		# the same run directory: helpers of two run directories in one network namespace lease the same
		# gateway address and fight over it (the proxy's port "already in use", the table deleted under the
		# other); in one directory the namespace lock (netd/core.c, on main since issue 16) orders them
		cmds+=("$baseline run -- true" "env SLUICE_RUN_DIR=$work/no-daemon $baseline run --allow-network -- true"
			"env SLUICE_RUN_DIR=/run/sluice $baseline run --allow-network -- true")
	fi
	slow_cmds=() slow_names=()
	if [ -n "${SLUICE_BENCH_CONTAINERS:-}" ]; then
		. "$src/tests/lib/ctr-image.sh"
		ctr_image_ensure
		slow_cmds+=("env SLUICE_RUN_DIR=/run/sluice $sluice run --sandbox-type container --image $CTR_IMAGE --allow-network -- true")
		slow_names+=("sluice run --sandbox-type container --allow-network (sluiced)")
	fi
	for i in "${!slow_names[@]}"; do printf 'lab\t%s\t%s\n' "${slow_names[$i]}" "${slow_cmds[$i]}"; done >"$work/commands-lab.tsv"
	run_rounds l
	# the "(sluiced)" row must really have gone through the daemon, not fallen back to the embedded helper
	served=$(grep -cE 'session [0-9a-f]+: uid' "$(lab_log sluiced)" || true)
	echo "sluiced served $served sessions"
	[ "$served" -gt 0 ] || { echo "bench-sandbox: sluiced served no session: the (sluiced) row is wrong" >&2; exit 1; }
	exit 0
fi

for t in hyperfine bwrap firejail python3; do
	command -v "$t" >/dev/null || { echo "bench-sandbox: $t missing: tools/deps.sh --bench" >&2; exit 1; }
done
[ -x "$sluice" ] || { echo "bench-sandbox: $sluice not built" >&2; exit 1; }
network=1
if [ "${SLUICE_BENCH_NETWORK:-1}" = 0 ]; then
	network=0
elif [ "$(id -u)" != 0 ]; then
	echo "bench-sandbox: not root: the network rows (and the lab) are left out" >&2
	network=0
elif [ ! -x "$build/netd/sluiced" ]; then
	echo "bench-sandbox: $build/netd/sluiced not built" >&2
	exit 1
fi
json=${SLUICE_BENCH_JSON:-$build/bench-sandbox.json}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
names=("sluice run" "bwrap" "firejail")
cmds=("$sluice run -- true" "bwrap ${bwrap_args[*]}" "firejail ${firejail_args[*]}")
if [ -n "$baseline" ]; then
	names+=("sluice run (baseline)")
	cmds+=("$baseline run -- true")
fi

# The Node-based wrappers (and the container types).
slow_cmds=() slow_names=()
if [ -n "${SLUICE_BENCH_CONTAINERS:-}" ]; then
	export SLUICE_SOURCE_DIR=$src SLUICE_BUILD_DIR=$build
	command -v lab_bail >/dev/null || lab_bail() { echo "bench-sandbox: $*" >&2; exit 1; }
	. "$src/tests/lib/ctr-image.sh"
	ctr_image_ensure # exports CONTAINERS_STORAGE_CONF: sluice reads the image from that store
	mkdir -p "$work/dc/.devcontainer"
	printf '{ "image": "%s" }\n' "$CTR_IMAGE" >"$work/dc/.devcontainer/devcontainer.json"
	cmds+=("$sluice run --allow-containers -- true")
	names+=("sluice run --allow-containers")
	slow_cmds+=("$sluice run --sandbox-type container --image $CTR_IMAGE -- true"
		"env -C $work/dc $sluice run --sandbox-type devcontainer -- true")
	slow_names+=("sluice run --sandbox-type container" "sluice run --sandbox-type devcontainer")
fi
srt=${SLUICE_BENCH_SRT:-}
if [ -z "$srt" ] && command -v npm >/dev/null; then
	if timeout 300 npm install --no-audit --no-fund --silent --prefix "$work/srt" @anthropic-ai/sandbox-runtime \
		>"$work/npm.log" 2>&1; then
		srt=$work/srt/node_modules/.bin/srt
	else
		echo "bench-sandbox: could not install @anthropic-ai/sandbox-runtime (see below); leaving it out" >&2
		tail -n 5 "$work/npm.log" >&2
	fi
fi
if [ -n "$srt" ] && [ "$srt" != none ]; then
	mkdir -p "$work/srt-home"
	if HOME=$work/srt-home "$srt" true >"$work/srt-check.log" 2>&1; then
		slow_cmds+=("env HOME=$work/srt-home $srt true")
		slow_names+=("srt (sandbox-runtime)")
	else
		echo "bench-sandbox: srt does not run here, leaving it out: $(tail -n 3 "$work/srt-check.log")" >&2
	fi
fi
if command -v node >/dev/null; then
	js="process.exit(require('child_process').spawnSync('bwrap', process.argv.slice(1), {stdio: 'inherit'}).status)"
	slow_cmds+=("node -e \"$js\" -- ${bwrap_args[*]}")
	slow_names+=("node + bwrap")
fi

run_rounds h
if [ "$network" = 1 ]; then
	SLUICE_BENCH_PHASE=lab SLUICE_BENCH_WORK=$work "$self" "$build" "$runs" "$rounds"
fi
{
	for i in "${!names[@]}"; do printf 'host\t%s\t%s\n' "${names[$i]}" "${cmds[$i]}"; done
	for i in "${!slow_names[@]}"; do printf 'host\t%s\t%s\n' "${slow_names[$i]}" "${slow_cmds[$i]}"; done
} >"$work/commands.tsv"
python3 - "$work" "$rounds" "$runs" "$json" "$sluice" "$work/no-daemon" <<'PY'
import json, os, platform, statistics, sys, time
work, rounds, runs, out, sluice, nodaemon = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
commands = {"host": {}, "lab": {}}
for tsv in ("commands.tsv", "commands-lab.tsv"):
    if os.path.exists(f"{work}/{tsv}"):
        for line in open(f"{work}/{tsv}"):
            ph, name, cmd = line.rstrip("\n").split("\t")
            commands[ph][name] = cmd
phases = {}
for ph, prefix in (("host", "h"), ("lab", "l")):
    rs = []
    for r in range(1, rounds + 1):
        f = f"{work}/{prefix}{r}.json"
        if not os.path.exists(f):
            continue
        res = {x["command"]: x for x in json.load(open(f))["results"]}
        if os.path.exists(f"{work}/{prefix}s{r}.json"):
            res.update({x["command"]: x for x in json.load(open(f"{work}/{prefix}s{r}.json"))["results"]})
        before, after = open(f"{work}/{prefix}{r}.load").read().split()
        rs.append({"round": r, "load_before": float(before), "load_after": float(after),
                   "results": {n: {"median_ms": x["median"] * 1e3, "mean_ms": x["mean"] * 1e3,
                                   "stddev_ms": (x.get("stddev") or 0) * 1e3, "min_ms": x["min"] * 1e3,
                                   "user_ms": x["user"] * 1e3, "system_ms": x["system"] * 1e3,
                                   "runs": len(x["times"])} for n, x in res.items()}})
    if rs:
        phases[ph] = rs
if "lab" in phases:
    commands["lab"].update({n: commands["host"].get(n, "") for n in ("sluice run", "bwrap")})
    commands["lab"]["sluice run --allow-network (sluiced)"] = f"env SLUICE_RUN_DIR=/run/sluice {sluice} run --allow-network -- true"
    commands["lab"]["sluice run --allow-network (embedded)"] = f"env SLUICE_RUN_DIR=(a directory without sluiced) {sluice} run --allow-network -- true"
    if "sluice run (baseline)" in commands["host"]:
        b = commands["host"]["sluice run (baseline)"].split(" run ")[0]
        commands["lab"]["sluice run (baseline)"] = f"{b} run -- true"
        commands["lab"]["sluice run --allow-network (embedded) (baseline)"] = f"env SLUICE_RUN_DIR=(the same) {b} run --allow-network -- true"
        commands["lab"]["sluice run --allow-network (sluiced) (baseline)"] = f"env SLUICE_RUN_DIR=/run/sluice {b} run --allow-network -- true"

inter = {}
for ph, prefix in (("host", "h"), ("lab", "l")):
    for r in range(1, rounds + 1):
        f = f"{work}/{prefix}i{r}.json"
        if os.path.exists(f):
            inter.setdefault(ph, []).append(json.load(open(f)))

def paired(ph, a, b, key="wall_ms"):
    """per round: the median over iterations of a's time / b's time in the same iteration"""
    out = []
    for rd in inter.get(ph, []):
        if a in rd and b in rd:
            out.append(statistics.median(x / y for x, y in zip(rd[a][key], rd[b][key]) if x and y))
    return out

def per_round(ph, f):
    return [f(r["results"]) for r in phases.get(ph, []) if f(r["results"]) is not None]

def ratio(a, b):
    return lambda res: res[a]["median_ms"] / res[b]["median_ms"] if a in res and b in res else None

def med(ph, name):
    v = per_round(ph, lambda res: res[name]["median_ms"] if name in res else None)
    return statistics.median(v) if v else None

medians = {ph: {n: med(ph, n) for n in phases[ph][0]["results"]} for ph in phases}
ratios, goals = {}, []
def add_ratio(key, ph, a, b, goal=None, kind="<="):
    v = per_round(ph, ratio(a, b))
    if not v:
        return
    ratios[key] = {"per_round": v, "median": statistics.median(v)}
    if goal is not None:
        m = statistics.median(v)
        goals.append({"measure": key, "value": round(m, 3), "goal": f"{kind} {goal}",
                      "met": m <= goal if kind == "<=" else m >= goal})
def add_paired(key, ph, a, b, goal=None):
    v = paired(ph, a, b)
    if not v:
        return
    c = paired(ph, a, b, "cpu_ms")
    ratios[key + " [interleaved]"] = {"per_round": v, "median": statistics.median(v),
                                      "cpu_per_round": c, "cpu_median": statistics.median(c)}
    if goal is not None:
        m = statistics.median(v)
        goals.append({"measure": key + " [interleaved, paired per iteration]", "value": round(m, 3),
                      "goal": f"<= {goal}", "met": m <= goal})
add_paired("sluice run / bwrap", "host", "sluice run", "bwrap", 1.1)
add_paired("sluice run / firejail", "host", "sluice run", "firejail")
add_paired("sluice run / bwrap (lab)", "lab", "sluice run", "bwrap")
add_paired("--allow-network through sluiced / sluice run (lab)", "lab", "sluice run --allow-network (sluiced)",
           "sluice run", 1.2)
add_paired("sluice run / sluice run (baseline)", "host", "sluice run", "sluice run (baseline)")
add_paired("--allow-network embedded / embedded (baseline) (lab)", "lab", "sluice run --allow-network (embedded)",
           "sluice run --allow-network (embedded) (baseline)")
add_paired("--allow-network through sluiced / sluiced (baseline) (lab)", "lab", "sluice run --allow-network (sluiced)",
           "sluice run --allow-network (sluiced) (baseline)")
add_paired("--allow-network through sluiced (baseline) / sluice run (baseline) (lab)", "lab",
           "sluice run --allow-network (sluiced) (baseline)", "sluice run (baseline)")
def mm(ph, n, key):
    return statistics.median(statistics.median(x for x in rd[n][key] if x is not None) for rd in inter[ph])
inter_med = {ph: {n: mm(ph, n, "wall_ms") for n in inter[ph][0]} for ph in inter}
inter_cpu = {ph: {n: mm(ph, n, "cpu_ms") for n in inter[ph][0]} for ph in inter}
inter_failed = {ph: {n: sum(rd[n].get("failed", 0) for rd in inter[ph]) for n in inter[ph][0]} for ph in inter}
add_ratio("sluice run / bwrap", "host", "sluice run", "bwrap")
add_ratio("sluice run / firejail", "host", "sluice run", "firejail")
add_ratio("sluice run / bwrap (lab)", "lab", "sluice run", "bwrap")
add_ratio("--allow-network through sluiced / sluice run (lab)", "lab", "sluice run --allow-network (sluiced)", "sluice run")
add_ratio("--allow-network embedded / sluice run (lab)", "lab", "sluice run --allow-network (embedded)", "sluice run")
add_ratio("sluice run (baseline) / bwrap", "host", "sluice run (baseline)", "bwrap")
add_ratio("sluice run / sluice run (baseline)", "host", "sluice run", "sluice run (baseline)")
add_ratio("--allow-network embedded / embedded (baseline) (lab)", "lab", "sluice run --allow-network (embedded)",
          "sluice run --allow-network (embedded) (baseline)")
for slow in ("srt (sandbox-runtime)", "node + bwrap"):
    add_ratio(f"{slow} / sluice run", "host", slow, "sluice run", 20 if slow.startswith("srt") else None, ">=")
emb = inter_med.get("lab", {}).get("sluice run --allow-network (embedded)")
if emb is not None:
    goals.append({"measure": "--allow-network embedded, ms [interleaved: median of round medians]",
                  "value": round(emb, 2), "goal": "<= 30", "met": emb <= 30})

for ph in phases:
    print(f"-- {ph} phase: median per round (ms), load average before-after")
    for n in phases[ph][0]["results"]:
        vals = ", ".join(f"{r['results'][n]['median_ms']:7.2f}" for r in phases[ph] if n in r["results"])
        print(f"   {n:40s} {vals}   median {medians[ph][n]:7.2f}")
    print("   load average: " + ", ".join(f"{r['load_before']:.2f}-{r['load_after']:.2f}" for r in phases[ph]))
for ph in inter_med:
    print(f"-- {ph} phase, interleaved: median of round medians (ms), wall / CPU (user+system, what wait4 counts)")
    for n in inter_med[ph]:
        f = inter_failed[ph][n]
        print(f"   {n:40s} {inter_med[ph][n]:7.2f} / {inter_cpu[ph][n]:6.2f}" + (f"   ({f} launches failed)" if f else ""))
for k, v in ratios.items():
    print(f"{k}: " + ", ".join(f"{x:.2f}" for x in v["per_round"]) + f" (median {v['median']:.2f})")
for g in goals:
    print(f"goal: {g['measure']} = {g['value']} (want {g['goal']}): {'met' if g['met'] else 'NOT met'}")
doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "kernel": platform.release(),
       "cpus": os.cpu_count(), "runs": runs, "rounds": rounds, "commands": commands, "phases": phases,
       "medians_ms": medians, "interleaved": inter, "interleaved_medians_ms": inter_med,
       "interleaved_cpu_ms": inter_cpu, "interleaved_failed": inter_failed, "ratios": ratios, "goals": goals}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
print(f"JSON: {out}")
PY
