/* `netns create|delete` for other sandbox backends (firejail --netns, podman --network ns:PATH):
 * sluiced makes a network namespace wired like a session (veth, nftables, proxy, DNS) and bind-mounts
 * it under RUN_DIR/netns/; it lives until `netns delete` or until sluiced stops. The same code serves
 * `sluicectl netns` and `sluice netns` (linked into both). The policy is compiled here from the
 * standard layers plus --policy/--allow; sluiced compiles it again under the caller's uid. */
#include "netns_cmd.h"

#include "client.h"
#include "config.h"
#include "policy.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool looks_like_file(const char *p)
{
	size_t n = strlen(p);
	return strchr(p, '/') || (n > 5 && strcmp(p + n - 5, ".json") == 0) ||
	       (n > 4 && strcmp(p + n - 4, ".txt") == 0) || (n > 5 && strcmp(p + n - 5, ".list") == 0);
}

/* The policy for a namespace as policy_serialize() text (malloced), or NULL with err set. */
char *netd_build_cli_policy(char **policies, size_t n_pol, char **allows, size_t n_allow, char *err, size_t errlen)
{
	struct policy_builder *b = policy_builder_new();
	struct policy_error pe;
	struct policy *p = NULL;
	char cwd[PATH_MAX], buf[POLICY_ERR_MAX + 300];
	const char *home = getenv("HOME");
	char *json = NULL;

	memset(&pe, 0, sizeof pe);
	if (!b) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (policy_builder_add_standard_layers(b, SLUICE_SYSCONFDIR, home && home[0] == '/' ? home : NULL,
	                                       getcwd(cwd, sizeof cwd) ? cwd : NULL, &pe) < 0)
		goto fail;
	for (size_t i = 0; i < n_pol; i++)
		if ((looks_like_file(policies[i]) ? policy_builder_add_file(b, POLICY_LAYER_CLI, policies[i], &pe)
		                                  : policy_builder_add_preset(b, POLICY_LAYER_CLI, policies[i], &pe)) <
		    0)
			goto fail;
	for (size_t i = 0; i < n_allow; i++)
		if (policy_builder_add_pattern(b, POLICY_LAYER_CLI, allows[i], false, "--allow", &pe) < 0)
			goto fail;
	if (!(p = policy_builder_compile(b, &pe)))
		goto fail;
	if (!(json = policy_serialize(p)))
		snprintf(err, errlen, "cannot serialise the policy (out of memory)");
	policy_unref(p);
	policy_builder_free(b);
	return json;
fail:
	snprintf(err, errlen, "policy: %s", policy_error_format(&pe, buf, sizeof buf));
	policy_builder_free(b);
	return NULL;
}

static void netns_usage(FILE *f, const char *prog)
{
	fprintf(f,
	        "usage: %s netns create [--name NAME] [--policy NAME|FILE]... [--allow HOST[:PORT]]... [--json]\n"
	        "       %s netns delete ID|NAME\n"
	        "create prints the namespace's path (RUN_DIR/netns/NAME) for firejail --netns, podman --network\n"
	        "ns:PATH or `nsenter --net=PATH`; inside it, use the printed proxy and resolver.\n",
	        prog, prog);
}

static int netns_create(int argc, char **argv, const char *prog)
{
	static const struct option opts[] = {
	        {"name", required_argument, NULL, 'n'}, {"policy", required_argument, NULL, 'p'},
	        {"allow", required_argument, NULL, 'a'}, {"json", no_argument, NULL, 'j'},
	        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
	};
	char **pol = calloc((size_t)argc + 1, sizeof *pol), **allow = calloc((size_t)argc + 1, sizeof *allow);
	size_t n_pol = 0, n_allow = 0;
	const char *name = NULL;
	bool json = false;
	char err[1024] = "", path[4096] = "";
	struct netd_session_reply rep;
	char *policy_json = NULL;
	int opt, rc = 2;

	if (!pol || !allow) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto out;
	}
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n': name = optarg; break;
		case 'p': pol[n_pol++] = optarg; break;
		case 'a': allow[n_allow++] = optarg; break;
		case 'j': json = true; break;
		case 'h':
			netns_usage(stdout, prog);
			rc = 0;
			goto out;
		default: netns_usage(stderr, prog); goto out;
		}
	}
	if (optind != argc) {
		netns_usage(stderr, prog);
		goto out;
	}
	rc = 1;
	if (!(policy_json = netd_build_cli_policy(pol, n_pol, allow, n_allow, err, sizeof err))) {
		fprintf(stderr, "%s: %s\n", prog, err);
		goto out;
	}
	memset(&rep, 0, sizeof rep);
	char cmd[96];
	snprintf(cmd, sizeof cmd, "netns %s", name ? name : "(unnamed)");
	int r = netd_netns_create(name, cmd, policy_json, &rep, path, sizeof path, err, sizeof err);
	if (r < 0) {
		fprintf(stderr, "%s: netns create: %s\n", prog, err[0] ? err : strerror(-r));
		goto out;
	}
	/* From sluiced: bound and plain before printing. */
	rep.id[sizeof rep.id - 1] = rep.gw4[sizeof rep.gw4 - 1] = rep.gw6[sizeof rep.gw6 - 1] = '\0';
	path[sizeof path - 1] = '\0';
	if (json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(rep.id));
		json_object_object_add(o, "path", json_object_new_string(path));
		json_object_object_add(o, "gateway4", rep.gw4[0] ? json_object_new_string(rep.gw4) : NULL);
		json_object_object_add(o, "gateway6", rep.gw6[0] ? json_object_new_string(rep.gw6) : NULL);
		json_object_object_add(o, "proxy_port", json_object_new_int(rep.proxy_port));
		json_object_object_add(o, "socks_port", rep.socks_port ? json_object_new_int(rep.socks_port) : NULL);
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
		json_object_put(o);
	} else {
		printf("%s\n", path);
		char socks[80] = "";
		if (rep.socks_port)
			snprintf(socks, sizeof socks, ", SOCKS5 socks5h://%s:%u", rep.gw4, (unsigned)rep.socks_port);
		fprintf(stderr,
		        "%s: namespace %s (session %s): proxy http://%s:%u%s, resolver %s; delete with `%s netns delete %s`\n",
		        prog, path, rep.id, rep.gw4, (unsigned)rep.proxy_port, socks, rep.gw4, prog, rep.id);
	}
	rc = 0;
out:
	free(policy_json);
	free(pol);
	free(allow);
	return rc;
}

struct find_arg {
	const char *want; /* borrowed */
	char id[64];
};

static void find_cb(const struct netd_session_entry *e, void *arg)
{
	struct find_arg *f = arg;
	const char *base = strrchr(e->netns_path, '/');
	if (!e->netns_path[0])
		return;
	if (strcmp(e->id, f->want) == 0 || (base && strcmp(base + 1, f->want) == 0) || strcmp(e->netns_path, f->want) == 0)
		snprintf(f->id, sizeof f->id, "%s", e->id);
}

static int netns_delete(int argc, char **argv, const char *prog)
{
	struct find_arg f = {0};
	char err[1024] = "";
	int r;

	if (argc != 2 || argv[1][0] == '-') {
		netns_usage(stderr, prog);
		return 2;
	}
	f.want = argv[1];
	if ((r = netd_sessions_list(find_cb, &f, err, sizeof err)) < 0) {
		fprintf(stderr, "%s: netns delete: %s\n", prog, err[0] ? err : strerror(-r));
		return 1;
	}
	if (!f.id[0]) {
		fprintf(stderr, "%s: netns delete: no namespace \"%s\" of yours (see `sluicectl sessions`)\n", prog,
		        argv[1]);
		return 1;
	}
	if ((r = netd_session_end(f.id, err, sizeof err)) < 0) {
		fprintf(stderr, "%s: netns delete: %s\n", prog, err[0] ? err : strerror(-r));
		return 1;
	}
	return 0;
}

int netd_netns_cmd(int argc, char **argv, const char *prog)
{
	if (argc >= 2 && strcmp(argv[1], "create") == 0)
		return netns_create(argc - 1, argv + 1, prog);
	if (argc >= 2 && strcmp(argv[1], "delete") == 0)
		return netns_delete(argc - 1, argv + 1, prog);
	netns_usage(argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? stdout : stderr,
	            prog);
	return argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? 0 : 2;
}
