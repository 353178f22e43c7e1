# The test container image (sourced by the container tests; no registry is reachable, nothing is pulled).
#
# ctr_image_ensure        builds, once per build directory, the image localhost/sluice-test:1 into an image store
#                         of its own under $SLUICE_BUILD_DIR/tests/ctr-image (never the host's store): a root
#                         file system of busybox-static (sh and the usual tools) and curl with the libraries it
#                         links, made with `podman import`. Later calls (other scripts, later runs) reuse it; a
#                         lock serialises concurrent builders. Exports CONTAINERS_STORAGE_CONF (that store, which
#                         sluice reads as "the user's" store) and CTR_IMAGE. Bails out when it cannot be built.
# ctr_rootfs DIR          writes that root file system into DIR (also used by the nested-container test).

CTR_IMAGE=localhost/sluice-test:1

ctr_rootfs() {
	local root=$1 lib
	mkdir -p "$root"/bin "$root"/etc "$root"/tmp "$root"/root "$root"/home/user "$root"/proc "$root"/dev \
		"$root"/sys "$root"/usr "$root"/var/tmp || return 1
	chmod 1777 "$root"/tmp "$root"/var/tmp
	cp /bin/busybox "$root"/bin/busybox || return 1
	for lib in sh ls cat echo id env true false sleep mkdir rm cut tr grep sed wc printf test stat head tail ps \
		pwd touch seq kill nc; do
		ln -sf busybox "$root/bin/$lib"
	done
	cp /usr/bin/curl "$root"/bin/curl || return 1
	for lib in $(ldd /usr/bin/curl | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'); do
		mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib" || return 1
	done
	printf 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n' >"$root"/etc/passwd
	printf 'root:x:0:\nuser:x:1000:\n' >"$root"/etc/group
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
	local pod=(env CONTAINERS_CONF="$dir/containers.conf" TMPDIR="$dir/tmp" podman)
	mkdir -p "$dir/tmp"
	(
		flock 9
		"${pod[@]}" image exists "$CTR_IMAGE" 2>/dev/null && exit 0
		rm -rf "$dir/rootfs" && ctr_rootfs "$dir/rootfs" &&
			tar -C "$dir/rootfs" -c . | "${pod[@]}" import --quiet - "$CTR_IMAGE" >/dev/null
	) 9>"$dir/lock" || lab_bail "cannot build the test image $CTR_IMAGE in $dir"
	export CTR_IMAGE
}
