/* HTTPS inspection inside the sandbox: its trust (docs/proxy.md). When sluiced made a CA for the session
 * (the policy inspects a host), the launcher writes a merged bundle (the host's CA bundle plus the
 * session CA's certificate) into the session directory; the sandbox sees it at the system bundle's
 * path, and the usual variables (SSL_CERT_FILE, CURL_CA_BUNDLE, ...) name it. The CA's key is never
 * here: only sluiced and the engine hold it. */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

#define BUNDLE_MAX (16u << 20) /* the host's bundle: a few hundred KiB in practice */

int sb_ca_bundle_write(const struct sb_session *s, const char *ca_pem, char *err, size_t errlen)
{
	char path[4096], buf[65536];
	cleanup_fd int out = -1, in = -1;
	size_t total = 0, len = strlen(ca_pem);
	ssize_t n;

	snprintf(path, sizeof path, "%s/ca-bundle.crt", s->dir);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (out < 0)
		return sb_err(err, errlen, "cannot write %s: %s", path, strerror(errno));
	in = open(SB_CA_BUNDLE_PATH, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return sb_errc(err, errlen, errno, "HTTPS inspection needs the host's CA bundle %s: %s (install "
		               "ca-certificates)", SB_CA_BUNDLE_PATH, strerror(errno));
	while ((n = read(in, buf, sizeof buf)) > 0) {
		total += (size_t)n;
		if (total > BUNDLE_MAX || write(out, buf, (size_t)n) != n)
			return sb_errc(err, errlen, EIO, "cannot copy %s into %s", SB_CA_BUNDLE_PATH, path);
	}
	if (n < 0)
		return sb_err(err, errlen, "reading %s: %s", SB_CA_BUNDLE_PATH, strerror(errno));
	if (write(out, "\n", 1) != 1 || write(out, ca_pem, len) != (ssize_t)len)
		return sb_errc(err, errlen, EIO, "cannot write %s", path);
	return 0;
}

int sb_ca_bundle_mount(int bundlefd, int rootfd, char *err, size_t errlen)
{
	/* the system bundle comes from the host (read-only): its symlinks are followed inside the new root */
	struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	cleanup_fd int target = (int)syscall(SYS_openat2, rootfd, &SB_CA_BUNDLE_PATH[1], &how, sizeof how); /* relative */
	if (target < 0)
		return sb_err(err, errlen, "cannot replace %s in the sandbox: %s", SB_CA_BUNDLE_PATH, strerror(errno));
	cleanup_fd int tree = open_tree(bundlefd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
	if (tree < 0)
		return sb_err(err, errlen, "cannot clone the session's CA bundle: %s", strerror(errno));
	int r = sb_set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, false,
	                    "the CA bundle", err, errlen);
	return r < 0 ? r : sb_attach(tree, target, SB_CA_BUNDLE_PATH, err, errlen);
}
