/* --sandbox-type vm, in the sandbox's pid 1 (still privileged over the session's network namespace),
 * with --allow-network: the session's network handed to the guest. The guest takes over the IPv4
 * address of the session's eth0 (netd's /32 with a link route to the gateway); eth0 is bridged with a
 * new tap0 whose fd QEMU gets, so the guest's packets leave through the session's veth and meet the
 * same gateway, proxy, DNS, nftables and audit log. The namespace keeps no address (IPv4 taken off,
 * IPv6 turned off), so QEMU itself has no network. See docs/sandbox.md. */
#include "session.h"

#include "log.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* The IPv4 default gateway of dev in this network namespace (/proc/self/net/route). */
static int default_gw(const char *dev, struct in_addr *gw)
{
	FILE *f = fopen("/proc/self/net/route", "re");
	char line[256], ifn[IFNAMSIZ + 1];
	unsigned dst, g, flags;
	int r = -ENOENT;
	if (!f)
		return -errno;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "%16s %x %x %x", ifn, &dst, &g, &flags) == 4 && strcmp(ifn, dev) == 0 && dst == 0 &&
		    g != 0) {
			gw->s_addr = g; /* the file shows the address in network order, as hex */
			r = 0;
			break;
		}
	fclose(f);
	return r;
}

static int set_up(int sk, const char *name, char *err, size_t errlen)
{
	struct ifreq ifr = {0};
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(sk, SIOCGIFFLAGS, &ifr) < 0)
		return sb_err(err, errlen, "vm network: %s: %s", name, strerror(errno));
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sk, SIOCSIFFLAGS, &ifr) < 0)
		return sb_err(err, errlen, "vm network: %s up: %s", name, strerror(errno));
	return 0;
}

/* No IPv6 on the namespace's side of the bridge: the namespace keeps no address of its own (the
 * guest has IPv4 only). A kernel without IPv6 has no such file. */
static int no_ipv6(const char *dev, char *err, size_t errlen)
{
	char path[96];
	snprintf(path, sizeof path, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", dev);
	cleanup_fd int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || write(fd, "1", 1) != 1)
		return sb_err(err, errlen, "vm network: cannot turn IPv6 off on %s: %s", dev, strerror(errno));
	return 0;
}

int sb_vm_net_setup(struct sb_session *s, char *err, size_t errlen)
{
	struct ifreq ifr = {0};
	struct in_addr addr, mask, gw;
	char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN];
	int r;

	if (s->cfg->type != SB_TYPE_VM || !s->cfg->allow_network)
		return 0;
	cleanup_fd int sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (sk < 0)
		return sb_err(err, errlen, "vm network: socket: %s", strerror(errno));
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
	if (ioctl(sk, SIOCGIFADDR, &ifr) < 0)
		return sb_err(err, errlen, "vm network: the session's eth0 has no IPv4 address: %s", strerror(errno));
	addr = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
	if (ioctl(sk, SIOCGIFNETMASK, &ifr) < 0)
		return sb_err(err, errlen, "vm network: eth0 netmask: %s", strerror(errno));
	mask = ((struct sockaddr_in *)&ifr.ifr_netmask)->sin_addr;
	if ((r = default_gw("eth0", &gw)) < 0)
		return sb_errc(err, errlen, -r, "vm network: the session has no default route on eth0");
	int prefix = __builtin_popcount(ntohl(mask.s_addr));
	inet_ntop(AF_INET, &addr, a, sizeof a);
	inet_ntop(AF_INET, &gw, g, sizeof g);
	snprintf(s->vm_net, sizeof s->vm_net, "%s/%d,%s", a, prefix, g);

	/* The guest takes the address over: the namespace keeps none (setting 0.0.0.0 deletes it). */
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	memset(&ifr.ifr_addr, 0, sizeof ifr.ifr_addr);
	sin->sin_family = AF_INET;
	if (ioctl(sk, SIOCSIFADDR, &ifr) < 0)
		return sb_err(err, errlen, "vm network: cannot take the address off eth0: %s", strerror(errno));

	cleanup_fd int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tap < 0)
		return sb_err(err, errlen, "vm network: /dev/net/tun: %s", strerror(errno));
	struct ifreq tr = {0};
	snprintf(tr.ifr_name, sizeof tr.ifr_name, "tap0");
	tr.ifr_flags = IFF_TAP | IFF_NO_PI;
	if (ioctl(tap, TUNSETIFF, &tr) < 0)
		return sb_err(err, errlen, "vm network: cannot create tap0: %s", strerror(errno));
	if (ioctl(sk, SIOCBRADDBR, "br0") < 0)
		return sb_err(err, errlen, "vm network: cannot create the bridge br0: %s", strerror(errno));
	static const char *const ports[] = {"eth0", "tap0"};
	for (size_t i = 0; i < 2; i++) {
		struct ifreq br = {0};
		snprintf(br.ifr_name, sizeof br.ifr_name, "br0");
		br.ifr_ifindex = (int)if_nametoindex(ports[i]);
		if (!br.ifr_ifindex || ioctl(sk, SIOCBRADDIF, &br) < 0)
			return sb_err(err, errlen, "vm network: cannot add %s to br0: %s", ports[i], strerror(errno));
	}
	if ((r = no_ipv6("eth0", err, errlen)) < 0 || (r = no_ipv6("tap0", err, errlen)) < 0 ||
	    (r = no_ipv6("br0", err, errlen)) < 0)
		return r;
	if ((r = set_up(sk, "tap0", err, errlen)) < 0 || (r = set_up(sk, "br0", err, errlen)) < 0)
		return r;
	s->vm_tap = steal_fd(&tap);
	log_debug("vm network: guest %s, tap0 and eth0 bridged", s->vm_net);
	return 0;
}
