# The test container image (sourced by the container tests; no registry is reachable, nothing is pulled).
#
# ctr_image_ensure        builds, once per build directory, the image localhost/sluice-test:1 into an image store
#                         of its own under $SLUICE_BUILD_DIR/tests/ctr-image (never the host's store): `podman
#                         import` of cni_image_tar's root file system (tests/lib/cni-image.sh: busybox-static and
#                         curl with the libraries it links). Later calls (other scripts, later runs) reuse it; a
#                         lock serialises concurrent builders. Exports CONTAINERS_STORAGE_CONF (that store, which
#                         sluice reads as "the user's" store) and CTR_IMAGE. Bails out when it cannot be built.

. "$SLUICE_SOURCE_DIR/tests/lib/cni-image.sh"
CTR_IMAGE=localhost/sluice-test:1

ctr_image_ensure() {
	local dir=$SLUICE_BUILD_DIR/tests/ctr-image
	mkdir -p "$dir" || lab_bail "cannot create $dir"
	cat >"$dir/storage.conf.new" <<-EOF
		[storage]
		driver = "overlay"
		graphroot = "$dir/graph"
		runroot = "$dir/run"
	EOF
	mv "$dir/storage.conf.new" "$dir/storage.conf"
	cat >"$dir/containers.conf" <<-EOF
		[engine]
		events_logger = "none"
		tmp_dir = "$dir/tmp"
		cgroup_manager = "cgroupfs"
	EOF
	export CONTAINERS_STORAGE_CONF=$dir/storage.conf
	local pod=(env CONTAINERS_CONF="$dir/containers.conf" TMPDIR="$dir/tmp" podman)
	mkdir -p "$dir/tmp"
	(
		flock 9
		"${pod[@]}" image exists "$CTR_IMAGE" 2>/dev/null && exit 0
		tar=$(cni_image_tar) && "${pod[@]}" import --quiet "$tar" "$CTR_IMAGE" >/dev/null
	) 9>"$dir/lock" || lab_bail "cannot build the test image $CTR_IMAGE in $dir"
	export CTR_IMAGE
}
