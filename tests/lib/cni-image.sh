# cni_image_tar: prints the path of a tiny container image's root filesystem as a tar (busybox-static, curl
# with the libraries it links copied from the host), built once and cached in the build directory
# ($SLUICE_BUILD_DIR/tests/cni-image/rootfs.tar). No registry is reachable here: `podman import` it (also
# the container tests' image, tests/lib/ctr-image.sh, and the image nest.sh builds inside the sandbox).
cni_image_tar() {
	local dir=$SLUICE_BUILD_DIR/tests/cni-image tar root lib bin
	tar=$dir/rootfs.tar
	if [ -s "$tar" ] && [ "$tar" -nt /usr/bin/curl ] && [ "$tar" -nt /bin/busybox ]; then
		echo "$tar"
		return 0
	fi
	bin=$(command -v curl) || return 1
	root=$(mktemp -d "$dir.XXXXXX" 2>/dev/null || { mkdir -p "$dir" && mktemp -d "$dir/tmp.XXXXXX"; }) || return 1
	mkdir -p "$root"/{bin,usr/bin,etc,tmp,proc,sys,dev,run} && chmod 1777 "$root/tmp" || return 1
	cp /bin/busybox "$root/bin/busybox" || return 1
	for a in sh ls cat echo sleep ip wget nslookup true false id cut tr grep sed wc printf test head tail ps pwd \
		touch seq kill mkdir rm env stat; do ln -s busybox "$root/bin/$a"; done
	cp "$bin" "$root/usr/bin/curl" || return 1
	# the libraries curl links and the dynamic loader, at the same paths as on the host
	for lib in $(ldd "$bin" | awk '/=> \//{print $3} /^\t\/lib/{print $1}'); do
		mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib" || return 1
	done
	printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
	printf 'root:x:0:0:root:/:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"
	mkdir -p "$dir" && tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar" || return 1
	rm -rf "$root"
	echo "$tar"
}
