# The test container image (sourced by the container tests; no registry is reachable, nothing is pulled).
#
# ctr_image_ensure        builds, once per build directory, the image localhost/sluice-test:1 into an image store
#                         of its own under $SLUICE_BUILD_DIR/tests/ctr-image (never the host's store): `podman
#                         import` of cni_image_tar's root file system (tests/lib/cni-image.sh: busybox-static and
#                         curl with the libraries it links). Later calls (other scripts, later runs) reuse it; a
#                         lock serialises concurrent builders. Exports CONTAINERS_STORAGE_CONF (that store, which
#                         sluice reads as "the user's" store) and CTR_IMAGE. Bails out when it cannot be built.
#                         At the lab's exit (lab_defer) it runs ctr_image_release.
# ctr_image_release       unmounts whatever is mounted at or beneath the store, deepest first, in the caller's
#                         mount namespace. Podman's overlay driver bind-mounts GRAPH/overlay onto itself and never
#                         unmounts it: where Podman ran on the store outside a lab (by hand, or a run interrupted
#                         before its lab took over) that mount stays in the host's namespace, where `rm -rf build`
#                         fails on it (EBUSY) and every later lab inherits a copy. The container tests call it
#                         before lab_enter (the host's namespace), so a second run and `rm -rf build` work.
# ctr_image_mounts        prints the mount points at or beneath the store (the caller's namespace).

. "$SLUICE_SOURCE_DIR/tests/lib/cni-image.sh"
CTR_IMAGE=localhost/sluice-test:1

ctr_image_mounts() {
	local dir=$SLUICE_BUILD_DIR/tests/ctr-image
	# mountinfo's 5th field, octal escapes (\040 for a space) decoded
	awk -v d="$dir" '{ p = $5; gsub(/\\040/, " ", p); if (p == d || index(p, d "/") == 1) print p }' /proc/self/mountinfo
}

ctr_image_release() {
	local m n=0
	while m=$(ctr_image_mounts | awk '{ print length($0) " " $0 }' | sort -rn | head -n 1 | cut -d' ' -f2-) &&
		[ -n "$m" ] && [ "$n" -lt 64 ]; do
		umount -n "$m" 2>/dev/null || umount -n -l "$m" || return 1
		echo "# ctr-image: unmounted a leftover mount on $m"
		n=$((n + 1))
	done
	[ -z "$(ctr_image_mounts)" ]
}

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
	lab_defer ctr_image_release
	local pod=(env CONTAINERS_CONF="$dir/containers.conf" TMPDIR="$dir/tmp" podman)
	mkdir -p "$dir/tmp"
	(
		flock 9
		"${pod[@]}" image exists "$CTR_IMAGE" 2>/dev/null && exit 0
		tar=$(cni_image_tar) && "${pod[@]}" import --quiet "$tar" "$CTR_IMAGE" >/dev/null
	) 9>"$dir/lock" || lab_bail "cannot build the test image $CTR_IMAGE in $dir"
	export CTR_IMAGE
}
