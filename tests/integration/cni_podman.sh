#!/usr/bin/env bash
# Podman end to end (docs/cni.md): Podman 4 with its CNI backend runs containers on a network whose conflist
# uses sluice-cni. `podman run --network sluice-net IMAGE` reaches an allowed lab host and is refused a denied
# one (audited with the container id); nothing is left behind after `podman rm -f` or after kill -9 of the
# container. Everything of podman's is private to the lab: containers.conf (CONTAINERS_CONF), the CNI plugin
# and network directories, storage (--root/--runroot); the image is imported from a locally built rootfs
# (tests/lib/cni-image.sh), never pulled.
. "$SLUICE_SOURCE_DIR/tests/lib/tap.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/lab.sh"
lab_enter "$@"
_lab_need podman crun curl "$LAB_PYTHON"
[ -x /usr/lib/cni/loopback ] || skip_all "containernetworking-plugins is not installed (/usr/lib/cni/loopback)"

B=$SLUICE_BUILD_DIR
RUN=/run/sluice
AUDIT=$LAB_DIR/audit.log
POOL4=100.64.0.0/16 POOL6=2001:db8:100::/64
export SLUICE_RUN_DIR=$RUN
. "$SLUICE_SOURCE_DIR/tests/lib/cni-image.sh"
. "$SLUICE_SOURCE_DIR/tests/lib/netd-lab.sh" # start_sluiced, eventually

lab_internet_up
mkdir -p "$LAB_DIR/etc-sluice"

# podman's world, all inside the lab. Podman and libcni also write below /var/lib (the image blob cache in
# /var/lib/containers/cache, CNI results in /var/lib/cni) whatever --root says: a tmpfs over each, in the lab's
# private mount namespace, keeps the host's untouched.
for d in /var/lib/cni /var/lib/containers; do
	mkdir -p "$d" && mount -n -t tmpfs -o mode=0700 lab-podman "$d" || lab_bail "cannot put a tmpfs over $d"
done
# crun refuses to run on a hybrid cgroup hierarchy (v1 controllers, v2 without any); this machine has one.
# The lab's mount namespace gets the unified hierarchy alone on /sys/fs/cgroup (the host keeps its view),
# and the containers run without a cgroup of their own (--cgroups=disabled): the network is what is tested.
if [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ]; then
	mount -n -t cgroup2 lab-cgroup2 /sys/fs/cgroup || lab_bail "cannot mount the unified cgroup hierarchy for crun"
fi
P=$LAB_DIR/podman
mkdir -p "$P/cni-bin" "$P/cni-net" "$P/root" "$P/runroot" "$P/tmp"
ln -s "$B/cni/sluice-cni" "$P/cni-bin/sluice-cni"
cat >"$P/containers.conf" <<-CONF
	[containers]
	netns = "private"
	log_driver = "k8s-file"
	[network]
	network_backend = "cni"
	cni_plugin_dirs = ["$P/cni-bin", "/usr/lib/cni"]
	network_config_dir = "$P/cni-net"
	[engine]
	cgroup_manager = "cgroupfs"
	events_logger = "file"
	events_logfile_path = "$P/events.log"
	tmp_dir = "$P/tmp"
	runtime = "crun"
CONF
cat >"$P/cni-net/sluice-net.conflist" <<-CONF
	{
	  "cniVersion": "1.0.0",
	  "name": "sluice-net",
	  "plugins": [
	    {"type": "sluice-cni", "runDir": "$RUN", "policy": {"allow": ["allowed.test"]}}
	  ]
	}
CONF
export CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf
printf '[storage]\ndriver = "vfs"\nrunroot = "%s"\ngraphroot = "%s"\n' "$P/runroot" "$P/root" >"$CONTAINERS_STORAGE_CONF"
pm() { podman --root "$P/root" --runroot "$P/runroot" --storage-driver vfs --cgroup-manager cgroupfs "$@"; }
RUNOPTS=(--cgroups=disabled --network sluice-net)
lab_defer "podman --root '$P/root' --runroot '$P/runroot' --storage-driver vfs rm -af -t 0 >/dev/null 2>&1"

no_residue() {
	! ip -o link | grep -q ' sl-' &&
		[ -z "$("$B/tools/sluicectl/sluicectl" sessions 2>/dev/null | grep cni)" ] &&
		! nft list set inet sluice src4 | grep -q '100\.64\.'
}

check "sluiced starts" start_sluiced
TAR=$(cni_image_tar)
check "the test image's rootfs is built (cached in the build directory)" test -s "$TAR"
check "podman imports it (no registry)" sh -c "podman --root '$P/root' --runroot '$P/runroot' --storage-driver vfs \
	import '$TAR' localhost/sluice-cni-test:1 >/dev/null"
check "podman sees the sluice-net network (CNI backend)" sh -c \
	"podman --root '$P/root' --runroot '$P/runroot' --storage-driver vfs network ls --format '{{.Name}}' | grep -qx sluice-net"

IMG=localhost/sluice-cni-test:1
out=$(pm run --rm "${RUNOPTS[@]}" "$IMG" curl -s -o /dev/null -w '%{http_code}' -m 10 http://allowed.test/podman 2>>"$P/podman.err")
check_eq "a container reaches an allowed lab host" 200 "$out"
out=$(pm run --name denied "${RUNOPTS[@]}" "$IMG" curl -s -o /dev/null -w '%{http_code}' -m 10 --resolve evil.test:80:$LAB_EVIL4 http://evil.test/podman 2>>"$P/podman.err")
check_eq "... and is refused a denied one" 403 "$out"
CID=$(pm inspect --format '{{.Id}}' denied)
check "the denial is audited with the container id and name" eventually grep -q \
	"\"command\":\"cni sluice-net container=$CID pod=denied\".*\"host\":\"evil.test\".*\"decision\":\"deny\"" "$AUDIT"
out=$(pm run --rm "${RUNOPTS[@]}" "$IMG" sh -c 'cat /etc/resolv.conf; nslookup allowed.test; echo "rc=$?"; nslookup evil.test; echo "rc=$?"' 2>>"$P/podman.err")
check_match "the container's resolver is sluice's DNS on the gateway" "nameserver 100\.64\.0\.1" "$out"
check_match "... which answers an allowed name" "Address: $LAB_ALLOWED4" "$out"
check_match "... and refuses a denied one" "rc=0.*rc=1" "$(printf '%s' "$out" | tr '\n' ' ')"
check_not "evil.test was never reached" grep -q evil.test <(lab_http_requests)
check "a container that ran to its end leaves nothing after podman rm -f" sh -c \
	"podman --root '$P/root' --runroot '$P/runroot' --storage-driver vfs rm -f denied >/dev/null"
check "... no link, session or nftables element" eventually no_residue

pm run -d --name long "${RUNOPTS[@]}" "$IMG" sleep 600 >/dev/null 2>>"$P/podman.err"
check "a long-running container has a session" eventually sh -c \
	"'$B/tools/sluicectl/sluicectl' sessions | grep -q 'cni sluice-net container='"
check "... which podman rm -f ends with nothing left" sh -c \
	"podman --root '$P/root' --runroot '$P/runroot' --storage-driver vfs rm -f -t 0 long >/dev/null"
check "... no link, session or nftables element" eventually no_residue

pm run -d --name victim "${RUNOPTS[@]}" "$IMG" sleep 600 >/dev/null 2>>"$P/podman.err"
PID=$(pm inspect --format '{{.State.Pid}}' victim)
check "the container to kill has a session" eventually sh -c \
	"'$B/tools/sluicectl/sluicectl' sessions | grep -q 'cni sluice-net container='"
if [[ $PID =~ ^[0-9]+$ ]] && [ "$PID" -gt 1 ]; then
	check "a container to kill -9 runs (pid $PID)" kill -0 "$PID"
	kill -9 "$PID"
else
	check "a container to kill -9 runs (pid '$PID')" false
fi
check "after kill -9 of the container podman cleans up: no link, session or nftables element" eventually no_residue
pm rm -f victim >/dev/null 2>&1
check "no container namespace is left" sh -c "! ls /run/netns 2>/dev/null | grep -q cni-"

[ "$tap_failed" = 0 ] || sed 's/^/# podman: /' "$P/podman.err"
done_testing
