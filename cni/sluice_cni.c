/* sluice-cni: a CNI plugin (spec 1.0.0: ADD, DEL, CHECK, VERSION) that asks sluiced to wire a container's
 * network namespace as a sluice session: veth, an address of sluiced's pool, a default route to the
 * gateway, nftables, proxy, DNS and audit, as `sluice run --allow-network` gets. The runtime runs it as
 * root with the CNI_* environment and the network configuration on stdin; it prints the result (or a
 * CNI error object) on stdout. docs/cni.md describes the configuration.
 *
 * Trust: sluiced validates this request like any client's (netns fd checked, policy compiled again under
 * the organisation layer, which caps it); the plugin only assembles it. The namespace travels as an fd
 * (SCM_RIGHTS), never as a path sluiced would open. */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_cni.h"
#include "cni_conf.h"
#include "cni_key.h"
#include "cni_result.h"
#include "policy.h"

#define STDIN_MAX (1u << 20)

/* Reads all of stdin (at most STDIN_MAX + 1 bytes, so an oversized configuration is noticed). */
static char *read_stdin(size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);

	while (buf) {
		ssize_t r;

		if (n == cap) {
			char *nb = cap > STDIN_MAX ? NULL : realloc(buf, cap * 2);

			if (!nb)
				break;
			buf = nb;
			cap *= 2;
		}
		r = read(STDIN_FILENO, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*len = n;
			return buf;
		}
		n += (size_t)r;
	}
	*len = n;
	return buf;
}

static int print_json(struct json_object *o)
{
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);

	return printf("%s\n", s) < 0 || fflush(stdout) != 0 ? -1 : 0;
}

/* Builds the session's policy: the source at the user layer (sluiced loads it there too, under its own
 * organisation layer), the container's deny rules on top. Returns policy_serialize() output. */
static char *build_policy(const struct cni_conf *c, const struct cni_args *a, struct cni_err *e)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe = {0};
	struct policy_options opts = {0};
	struct cni_policy_src src = {0};
	struct policy *p = NULL;
	char buf[POLICY_ERR_MAX + 300], *out = NULL;
	int r = -1;

	if (!b) {
		cni_fail(e, CNI_E_IO, "out of memory");
		return NULL;
	}
	if (cni_pick_policy(c, a, &src, e) < 0)
		goto out;
	switch (src.kind) {
	case CNI_POLICY_PRESET:
		r = policy_builder_add_preset(b, POLICY_LAYER_USER, src.text, &pe);
		break;
	case CNI_POLICY_FILE:
		r = policy_builder_add_file(b, POLICY_LAYER_USER, src.text, &pe);
		break;
	case CNI_POLICY_INLINE:
		snprintf(buf, sizeof buf, "network %s policy", c->name);
		r = policy_builder_add_json(b, POLICY_LAYER_USER, buf, src.text, strlen(src.text), &pe);
		break;
	default:
		break;
	}
	for (size_t i = 0; r == 0 && i < c->rt_ndeny; i++)
		r = policy_builder_add_pattern(b, POLICY_LAYER_CLI, c->rt_deny[i], true, "runtimeConfig.sluice.deny", &pe);
	for (size_t i = 0; r == 0 && i < a->ndeny; i++)
		r = policy_builder_add_pattern(b, POLICY_LAYER_CLI, a->deny[i], true, "CNI_ARGS SLUICE_DENY", &pe);
	if (r == 0) {
		opts.transparent = c->transparent;
		policy_builder_set_options(b, &opts);
		p = policy_builder_compile(b, &pe);
	}
	if (r < 0 || !p) {
		cni_fail(e, CNI_E_POLICY, "policy of network \"%s\": %s", c->name, policy_error_format(&pe, buf, sizeof buf));
		goto out;
	}
	if (!(out = policy_serialize(p)))
		cni_fail(e, CNI_E_IO, "out of memory serialising the policy");
out:
	free(src.text);
	policy_unref(p);
	policy_builder_free(b);
	return out;
}

static int daemon_error(int r, const char *what, const char *msg, struct cni_err *e)
{
	if (r == -ENOENT || r == -ECONNREFUSED)
		return cni_fail(e, CNI_E_DAEMON, "%s: sluiced is not running (%s); start it (sluiced.service, or the "
				"sluice DaemonSet) and retry", what, msg);
	if (r == -EAGAIN || r == -EHOSTDOWN)
		return cni_fail(e, CNI_E_RETRY, "%s: %s", what, msg);
	if (r == -EINVAL && strstr(msg, "policy"))
		return cni_fail(e, CNI_E_POLICY, "%s: %s", what, msg);
	return cni_fail(e, CNI_E_DAEMON, "%s: %s", what, msg);
}

static int open_netns(const char *path, int *fd, struct cni_err *e)
{
	if (!path || path[0] != '/')
		return cni_fail(e, CNI_E_ENV, "CNI_NETNS must be the absolute path of the container's network namespace");
	*fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (*fd < 0)
		return cni_fail(e, CNI_E_UNKNOWN, "CNI_NETNS %s: %s", path, strerror(errno));
	return 0;
}

/* The MAC address of interface name in the current network namespace ("" if it cannot be read). */
static void link_mac(const char *name, char out[18])
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	const unsigned char *m = (const unsigned char *)ifr.ifr_hwaddr.sa_data;

	out[0] = '\0';
	if (fd < 0)
		return;
	snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) == 0)
		snprintf(out, 18, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
	close(fd);
}

/* The MACs of the session's two ends for the result (runtimes such as Podman parse them): the host side
 * here, then the container side after entering its namespace (this process ends right after). */
static void session_macs(const char *host_if, int netns_fd, const char *ifname, char host_mac[18], char mac[18])
{
	link_mac(host_if, host_mac);
	mac[0] = '\0';
	if (setns(netns_fd, CLONE_NEWNET) == 0)
		link_mac(ifname, mac);
}

static int cmd_add(const struct cni_conf *c, const struct cni_args *a, const char *key, const char *id,
		   const char *ifname, const char *netns, struct cni_err *e)
{
	struct netd_session_reply reply;
	struct json_object *res = NULL;
	char command[600], msg[1024], host_if[IFNAMSIZ + 8], host_mac[18], mac[18], *policy;
	int fd = -1, r;

	if (!(policy = build_policy(c, a, e)))
		return -1;
	/* what every audit record of the session names: network, container, pod */
	r = snprintf(command, sizeof command, "cni %s container=%.128s", c->name, id);
	if (a->pod_namespace[0] && a->pod_name[0])
		snprintf(command + r, sizeof command - (size_t)r, " pod=%s/%s", a->pod_namespace, a->pod_name);
	else if (a->pod_name[0]) /* Podman passes its container name alone */
		snprintf(command + r, sizeof command - (size_t)r, " pod=%s", a->pod_name);
	if (open_netns(netns, &fd, e) < 0) {
		free(policy);
		return -1;
	}
	r = netd_cni_add(key, fd, ifname, command, policy, &reply, msg, sizeof msg);
	free(policy);
	if (r < 0) {
		close(fd);
		return daemon_error(r, "ADD", msg, e);
	}
	snprintf(host_if, sizeof host_if, "sl-%s", reply.id);
	session_macs(host_if, fd, ifname, host_mac, mac);
	close(fd);
	if (!(res = cni_result_build(c->cni_version, c->prev_result, &reply, ifname, netns, host_mac, mac, e)))
		return -1;
	r = print_json(res);
	json_object_put(res);
	return r < 0 ? cni_fail(e, CNI_E_IO, "writing the result: %s", strerror(errno)) : 0;
}

static int cmd_del(const char *key, struct cni_err *e)
{
	char msg[1024];
	int r = netd_cni_del(key, msg, sizeof msg);

	/* no sluiced: it holds no session (they end with it, and a new instance removes what a crashed one
	 * left), so there is nothing to release and DEL succeeds, as the spec wants */
	if (r == -ENOENT || r == -ECONNREFUSED)
		return 0;
	return r < 0 ? daemon_error(r, "DEL", msg, e) : 0;
}

static int cmd_check(const struct cni_conf *c, const char *key, const char *ifname, const char *netns,
		     struct cni_err *e)
{
	struct netd_session_reply reply;
	char msg[1024];
	int fd = -1, r;

	if (!c->prev_result)
		return cni_fail(e, CNI_E_CONFIG, "CHECK needs prevResult (the result of ADD)");
	if (open_netns(netns, &fd, e) < 0)
		return -1;
	r = netd_cni_check(key, fd, &reply, msg, sizeof msg);
	close(fd);
	if (r == -ENOENT || r == -ESTALE)
		return cni_fail(e, CNI_E_CHECK, "CHECK: %s", msg);
	if (r < 0)
		return daemon_error(r, "CHECK", msg, e);
	return cni_result_check(c->prev_result, &reply, ifname, netns, e);
}

static int cmd_version(void)
{
	struct json_object *o = json_object_new_object(), *v = json_object_new_array();
	int r;

	if (!o || !v) {
		json_object_put(o);
		json_object_put(v);
		return -1;
	}
	for (size_t i = 0; cni_supported_versions[i]; i++)
		json_object_array_add(v, json_object_new_string(cni_supported_versions[i]));
	json_object_object_add(o, "cniVersion", json_object_new_string("1.0.0"));
	json_object_object_add(o, "supportedVersions", v);
	r = print_json(o);
	json_object_put(o);
	return r;
}

static void print_error(const char *version, const struct cni_err *e)
{
	char *j = cni_err_json(version, e);

	fprintf(stderr, "sluice-cni: %s\n", e->msg);
	if (j)
		printf("%s\n", j);
	fflush(stdout);
	free(j);
}

int main(void)
{
	const char *cmd = getenv("CNI_COMMAND"), *id = getenv("CNI_CONTAINERID");
	const char *ifname = getenv("CNI_IFNAME"), *netns = getenv("CNI_NETNS");
	struct cni_conf c = {0};
	struct cni_args a = {0};
	struct cni_err e = {0};
	char key[NETD_CNI_ID_MAX + 20], *in = NULL;
	size_t len = 0;
	int r = -1;

	if (!cmd || !cmd[0]) {
		cni_fail(&e, CNI_E_ENV, "CNI_COMMAND is not set (this is a CNI plugin: a container runtime runs it)");
		goto out;
	}
	if (strcmp(cmd, "VERSION") == 0) {
		r = cmd_version();
		goto out;
	}
	if (strcmp(cmd, "ADD") != 0 && strcmp(cmd, "DEL") != 0 && strcmp(cmd, "CHECK") != 0) {
		cni_fail(&e, CNI_E_ENV, "CNI_COMMAND \"%.32s\" is not supported (ADD, DEL, CHECK, VERSION)", cmd);
		goto out;
	}
	if (!(in = read_stdin(&len))) {
		cni_fail(&e, CNI_E_IO, "reading the network configuration: out of memory");
		goto out;
	}
	/* CNI_ARGS only matter to ADD: a DEL must not fail on them (it has to release what ADD made) */
	if (cni_conf_parse(in, len, &c, &e) < 0 ||
	    (strcmp(cmd, "ADD") == 0 && cni_args_parse(getenv("CNI_ARGS"), &a, &e) < 0))
		goto out;
	if (!netd_cni_id_valid(id)) {
		cni_fail(&e, CNI_E_ENV, "CNI_CONTAINERID must be set: a letter or digit, then letters, digits, _ . -");
		goto out;
	}
	if (!netd_cni_ifname_valid(ifname)) {
		cni_fail(&e, CNI_E_ENV, "CNI_IFNAME must be an interface name of 1-15 bytes");
		goto out;
	}
	snprintf(key, sizeof key, "%s/%s", id, ifname);
	if (c.run_dir && setenv("SLUICE_RUN_DIR", c.run_dir, 1) < 0) {
		cni_fail(&e, CNI_E_IO, "setenv: %s", strerror(errno));
		goto out;
	}
	if (strcmp(cmd, "ADD") == 0)
		r = cmd_add(&c, &a, key, id, ifname, netns, &e);
	else if (strcmp(cmd, "DEL") == 0)
		r = cmd_del(key, &e);
	else
		r = cmd_check(&c, key, ifname, netns, &e);
out:
	if (r < 0) {
		if (!e.msg[0])
			cni_fail(&e, CNI_E_IO, "writing the output failed");
		print_error(c.cni_version, &e);
	}
	cni_conf_clear(&c);
	cni_args_clear(&a);
	free(in);
	return r < 0 ? 1 : 0;
}
