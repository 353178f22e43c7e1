#!/usr/bin/env bash
# Resource limits: a cgroup per session (v2 where its controllers are enabled, else v1), memory
# and fork bombs bounded with the OOM kill staying inside, CPU and I/O limits written, cgroups
# namespaced and not escapable, and nothing left behind. Unprivileged users without a delegated
# cgroup get a clear error instead of silently unlimited sessions.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/integration/sandbox_lib.sh"

P=$(newdir root)
cd "$P" || exit 1
# Where session cgroups appear: any hierarchy, named sluice-<session id>.
cg_list() { find /sys/fs/cgroup -maxdepth 6 -type d -name 'sluice-*' 2>/dev/null | sort; }
before=$(cg_list)

# A process of the host outside the session, started first, must outlive the OOM kill; the launcher must
# survive it too and return the session's own exit status (0: the shell echoes after tail dies), not 137.
sleep 120 &
sentinel=$!
out=$(sb root --memory 64M -- sh -c 'head -c 400M /dev/zero | tail -n 1 >/dev/null; echo exit=$?' 2>&1)
launcher_rc=$?
check_match "memory bomb is OOM-killed inside the session (tail killed by SIGKILL)" "exit=137" "$out"
check_eq "the launcher survives the OOM kill and returns the session's exit status" 0 "$launcher_rc"
check "a host process outside the session survives the OOM kill" kill -0 "$sentinel"
kill "$sentinel"
wait "$sentinel" 2>/dev/null
out=$(sb root --pids 40 --ro-bind "$ESC" -- "$ESC/esc_forkbomb" 10000 2>&1)
n=$(sed -n 's/^forks=//p' <<<"$out")
check "fork bomb is bounded by --pids 40 (forks=$n)" test -n "$n" -a "${n:-99999}" -lt 40
check "the session could fork a little (the limit is not zero)" test "${n:-0}" -ge 5

# The limits as the kernel sees them, read from the host while the session runs.
( bg_exec root "$SLUICE" run --cpu 0.5 --memory 100M --pids 77 --io-read-bps 7:0:1M --io-write-bps 7:0:2M -- sleep 3 ) &
lpid=$!
for _ in $(seq 50); do [ -n "$(comm -13 <(echo "$before") <(cg_list))" ] && break; sleep 0.1; done
# limit_vals: the limits in the session's cgroups, as "FILE=VALUE ..."
limit_vals() {
	local d f
	for d in $new; do
		for f in memory.limit_in_bytes memory.max pids.max cpu.cfs_quota_us cpu.max blkio.throttle.read_bps_device blkio.throttle.write_bps_device io.max; do
			[ -f "$d/$f" ] && printf ' %s=%s' "$f" "$(tr '\n' ' ' <"$d/$f")"
		done
	done
}
# the launcher writes the limits after it made the cgroups: read them once the last one the checks want is
# there (or after 3 s), not after a fixed 0.3 s (the session lives 3 s)
for _ in $(seq 30); do
	new=$(comm -13 <(echo "$before") <(cg_list))
	vals=$(limit_vals)
	grep -Eq 'pids\.max=77' <<<"$vals" && grep -Eq 'memory\.(limit_in_bytes|max)=104857600' <<<"$vals" &&
		grep -Eq 'cpu\.cfs_quota_us=50000|cpu\.max=50000 100000' <<<"$vals" && grep -Eq '7:0 (rbps=)?1048576' <<<"$vals" &&
		grep -Eq '7:0 (.*wbps=)?2097152' <<<"$vals" && break
	sleep 0.1
done
check_match "memory limit written (v1 memory.limit_in_bytes or v2 memory.max)" "memory\.(limit_in_bytes|max)=104857600" "$vals"
check_match "pids limit written" "pids\.max=77" "$vals"
check_match "cpu quota is half a core" "cpu\.cfs_quota_us=50000|cpu\.max=50000 100000" "$vals"
check_match "io read limit written" "7:0 (rbps=)?1048576" "$vals"
check_match "io write limit written" "7:0 (.*wbps=)?2097152" "$vals"
wait "$lpid"
# (its own cgroups, by name: other sluice sessions on the machine may come and go meanwhile)
check_eq "after the session its cgroups are removed" "" "$(for d in $new; do [ -e "$d" ] && echo "$d"; done)"

# cgroup namespace: the session sees itself at the root and cannot move into a parent.
check_match "the session's cgroup is the root of its cgroup namespace" "^0::/$" \
	"$(sb root --memory 100M -- cat /proc/self/cgroup | grep '^0::')"
out=$(sb root --profile unsafe --memory 100M -- sh -c '
	for f in /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do
		[ -e "$f" ] && (echo $$ > "$f") 2>/dev/null && echo "MOVED via $f"; done; echo done' 2>&1)
check_eq "cgroup escape: writing a parent's cgroup.procs fails" "done" "$out"

# A limit the machine cannot honour fails closed.
out=$(sb user --memory 100M -- true 2>&1)
code=$?
if [ -w /sys/fs/cgroup/unified ] && [ "$(stat -c %u /sys/fs/cgroup/unified)" = "$TU_UID" ]; then
	check_eq "unprivileged with a delegated cgroup: limits work" 0 "$code"
else
	check_eq "unprivileged without a delegated cgroup: --memory is refused (125)" 125 "$code"
	check_match "... with a message saying why" "cgroup" "$out"
fi
check_eq "unprivileged without limits still runs" 0 "$(rc sb user -- true)"
check_eq "--memory garbage -> 125" 125 "$(rc sb root --memory lots -- true)"
check_eq "--cpu 0 -> 125" 125 "$(rc sb root --cpu 0 -- true)"
check_eq "--io-read-bps without a device -> 125" 125 "$(rc sb root --io-read-bps 5M -- true)"
check_eq "no session directory left" 0 "$(session_dirs root)"
cd / || exit 1
done_testing
