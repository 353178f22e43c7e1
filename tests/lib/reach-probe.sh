# What a sandboxed command can reach of the session's scratch space (sandbox/scratch.c: the tmpfs whose
# directories become /tmp, /var/tmp, /run, /dev/shm and the home) and of the masks' source (masks.c: the tmpfs
# holding "empty", of which every masked file is a read-only clone). Neither's root may be reachable: the scratch
# root holds the overlay's upper and work directories and the masks' tmpfs, the masks' source is writable.
#     sh reach-probe.sh local [masks]   inside a local sandbox (with "masks": a masked file must be in the view)
#     sh reach-probe.sh container       inside a --sandbox-type container/devcontainer command: the scratch space
#                                       is Podman's store there, its files bound over /etc/hosts and the like
#     sh reach-probe.sh pid PID [masks] on the host, about process PID: QEMU of --sandbox-type vm, whose view the
#                                       guest gets over the root share (all of it, once the guest is root in it)
# POSIX sh (busybox in the test container image). Prints "reach: ok", or one line per way found.
mode=$1
pid=$$
[ "$mode" = pid ] && pid=$2 && shift
want=${2:-}
mi=/proc/$pid/mountinfo
bad=0
say() { echo "reach: $*"; bad=1; }
[ -r "$mi" ] || say "cannot read $mi"

# device of the mount at MOUNTPOINT (the last one: the visible one)
dev_at() { awk -v m="$1" '$5 == m { d = $3 } END { print d }' "$mi"; }
if [ "$mode" = container ]; then scratch=$(dev_at /etc/hosts); else scratch=$(dev_at /tmp); fi
[ -n "$scratch" ] || say "no scratch space mount found"
# the scratch space: only directories (local: tmp, run, ...; container: Podman's files of this container)
awk -v d="$scratch" '$3 == d && ($4 == "/" || $4 ~ /^\/(masks|upper|work|ctr\/graph)(\/|$)/) {
	print "reach: the scratch space is mounted from " $4 " at " $5 }' "$mi" | grep . && bad=1
# the masks' source: read-only clones of /empty only
masks=$(awk '$4 == "/empty" { print $3; exit }' "$mi")
if [ -n "$masks" ]; then
	awk -v d="$masks" '$3 == d && ($4 != "/empty" || $6 !~ /^ro(,|$)/) {
		print "reach: the masks tmpfs is mounted from " $4 " at " $5 " (" $6 ")" }' "$mi" | grep . && bad=1
fi
[ "$want" = masks ] && [ -z "$masks" ] && say "no masked file (a clone of the masks' /empty) in the view"

# pid 1 of the sandbox (sluice's, which held the scratch space) may not be entered
case $mode in
container)
	for c in /proc/[0-9]*/comm; do
		case $(cat "$c" 2>/dev/null) in sluice | conmon | podman) say "a process of the sandbox is visible: $c" ;; esac
	done ;;
local)
	ls /proc/1/root/ >/dev/null 2>&1 && say "pid 1's root is readable"
	ls /proc/1/fd/ >/dev/null 2>&1 && say "pid 1's descriptors are listed" ;;
esac
# every directory descriptor is on a mount of the view (one on a detached or hidden mount is not in its table)
for f in /proc/$pid/fd/*; do
	[ -d "$f" ] || continue
	m=$(awk '$1 == "mnt_id:" { print $2 }' "/proc/$pid/fdinfo/${f##*/}")
	awk -v m="$m" '$1 == m { found = 1 } END { exit !found }' "$mi" ||
		say "a directory descriptor on a mount outside the view: $f -> $(readlink "$f")"
done
[ $bad = 0 ] && echo "reach: ok"
exit 0
