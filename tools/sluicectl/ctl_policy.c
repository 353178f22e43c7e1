/* `sluicectl policy check|explain`: validate policy files and explain a decision. */
#include "config.h"
#include "ctl.h"
#include "policy.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static void check_usage(FILE *f)
{
	fprintf(f, "usage: sluicectl policy check [--layer org|user|project|cli] FILE...\n"
		   "Validates policy files (JSON with comments, or .txt/.list domain lists).\n"
		   "Exit: 0 all valid, 1 some file invalid, 2 usage error.\n");
}

static int parse_layer(const char *s, enum policy_layer *out)
{
	for (int l = 0; l < POLICY_LAYER_COUNT; l++) {
		if (strcmp(s, policy_layer_name((enum policy_layer)l)) == 0) {
			*out = (enum policy_layer)l;
			return 0;
		}
	}
	return -1;
}

static int policy_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "layer", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	enum policy_layer layer = POLICY_LAYER_PROJECT;
	bool layer_set = false;
	int c, bad = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "l:h", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (parse_layer(optarg, &layer) < 0) {
				fprintf(stderr, "sluicectl: unknown layer \"%s\" (org, user, project, cli)\n", optarg);
				return 2;
			}
			layer_set = true;
			break;
		case 'h':
			check_usage(stdout);
			return 0;
		default:
			check_usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		check_usage(stderr);
		return 2;
	}
	for (int i = optind; i < argc; i++) {
		struct policy_builder *b = policy_builder_new();
		struct policy_error err = { 0 };
		struct policy *p = NULL;
		enum policy_layer l = layer;
		char msg[2048];

		if (!b) {
			fprintf(stderr, "sluicectl: out of memory\n");
			return 2;
		}
		/* A file under the system policy directory is an organisation file unless told otherwise. */
		if (!layer_set && strncmp(argv[i], SLUICE_SYSCONFDIR "/", strlen(SLUICE_SYSCONFDIR) + 1) == 0)
			l = POLICY_LAYER_ORG;
		if (policy_builder_add_file(b, l, argv[i], &err) == 0)
			p = policy_builder_compile(b, &err);
		if (p) {
			printf("%s: ok (%zu rule%s, checked as a %s policy)\n", argv[i], policy_rule_count(p),
			       policy_rule_count(p) == 1 ? "" : "s", policy_layer_name(l));
		} else {
			fprintf(stderr, "%s\n", policy_error_format(&err, msg, sizeof msg));
			bad = 1;
		}
		policy_unref(p);
		policy_builder_free(b);
	}
	return bad;
}

static void explain_usage(FILE *f)
{
	fprintf(f,
		"usage: sluicectl policy explain HOST[:PORT][/udp] [--method M] [--policy NAME|FILE]... [--allow PATTERN]...\n"
		"                                [--deny PATTERN]... [--project DIR] [--no-standard-layers]\n"
		"       sluicectl policy explain --path PATH [--project DIR]   (sluice run --fs ask)\n"
		"       sluicectl policy explain METHOD URL [options as above]\n"
		"Says whether a session may reach HOST:PORT (default port 443; /udp: over UDP, which only direct mode\n"
		"opens) and which rule decides, and whether a DNS answer opens the port directly; with METHOD\n"
		"and an http(s) URL, also which HTTP rule decides the request when the host is inspected.\n"
		"Loads the organisation (" SLUICE_SYSCONFDIR "), user and project (--project, default: the current\n"
		"directory) policies, then the command-line ones, as `sluice run` does.\n"
		"Exit: 0 allowed, 1 denied, 2 usage or policy error, 3 held for approval (ask).\n");
}

/* Whether a target "host:port" or "[v6]:port" names its port. */
static bool names_port(const char *t)
{
	const char *c = strchr(t, ':');

	if (t[0] == '[')
		return strstr(t, "]:") != NULL;
	return c && !strchr(c + 1, ':');
}

/* Splits "host", "host:port", "[v6]" or "[v6]:port". */
static int split_target(const char *arg, char *host, size_t hlen, uint16_t *port)
{
	const char *colon = NULL;
	size_t n;

	*port = 443;
	if (arg[0] == '[') {
		const char *rb = strchr(arg, ']');
		if (!rb)
			return -1;
		n = (size_t)(rb - arg) + 1;
		if (rb[1] == ':')
			colon = rb + 1;
		else if (rb[1])
			return -1;
	} else {
		colon = strrchr(arg, ':');
		if (colon && strchr(arg, ':') != colon)
			colon = NULL; /* bare IPv6 without brackets: no port */
		n = colon ? (size_t)(colon - arg) : strlen(arg);
	}
	if (n == 0 || n >= hlen)
		return -1;
	memcpy(host, arg, n);
	host[n] = '\0';
	if (colon) {
		char *end;
		unsigned long p = strtoul(colon + 1, &end, 10);
		if (!colon[1] || *end || p < 1 || p > 65535)
			return -1;
		*port = (uint16_t)p;
	}
	return 0;
}

/* Splits "http(s)://HOST[:PORT][/PATH...]": host and port (default by scheme) and the target from the
 * path on ("/" when there is none). */
static int split_url(const char *url, char *host, size_t hlen, uint16_t *port, const char **target)
{
	static char slash[] = "/";
	const char *rest, *end;
	char auth[600];

	if (strncasecmp(url, "https://", 8) == 0)
		rest = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0)
		rest = url + 7;
	else
		return -1;
	end = rest + strcspn(rest, "/?#");
	if (end == rest || (size_t)(end - rest) >= sizeof auth || memchr(rest, '@', (size_t)(end - rest)))
		return -1;
	memcpy(auth, rest, (size_t)(end - rest));
	auth[end - rest] = '\0';
	if (split_target(auth, host, hlen, port) < 0)
		return -1;
	if (!strchr(auth[0] == '[' ? strchr(auth, ']') : auth, ':'))
		*port = rest == url + 8 ? 443 : 80;
	if (*end == '#')
		return -1;
	*target = *end ? end : slash;
	return 0;
}

static int policy_explain(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "method", required_argument, NULL, 'm' },
		{ "policy", required_argument, NULL, 'p' },
		{ "allow", required_argument, NULL, 'a' },
		{ "deny", required_argument, NULL, 'd' },
		{ "project", required_argument, NULL, 'P' },
		{ "no-standard-layers", no_argument, NULL, 'N' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct policy_builder *b = policy_builder_new();
	struct policy_error err = { 0 };
	struct policy *p = NULL;
	const char *method = NULL, *project = NULL, *url_path = NULL;
	bool standard = true;
	char msg[2048], host[512], canon[POLICY_HOST_MAX + 1], cwd[4096];
	uint16_t port;
	enum policy_proto proto = POLICY_PROTO_TCP;
	int c, rc = 2;
	/* command-line sources are applied after the standard layers, in order */
	char **cli = calloc((size_t)argc + 1, sizeof *cli);
	char *kinds = calloc((size_t)argc + 1, 1);
	int ncli = 0;

	if (!b || !cli || !kinds) {
		fprintf(stderr, "sluicectl: out of memory\n");
		goto out;
	}
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--path") == 0 || strncmp(argv[i], "--path=", 7) == 0) {
			rc = ctl_fsask_explain(argc, argv); /* ctl_fsask.c */
			goto out;
		}
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:a:d:P:Nh", opts, NULL)) != -1) {
		switch (c) {
		case 'm': method = optarg; break;
		case 'p': case 'a': case 'd':
			cli[ncli] = optarg;
			kinds[ncli++] = (char)c;
			break;
		case 'P': project = optarg; break;
		case 'N': standard = false; break;
		case 'h': explain_usage(stdout); rc = 0; goto out;
		default: explain_usage(stderr); goto out;
		}
	}
	if (optind == argc - 2) {
		/* METHOD URL */
		method = argv[optind];
		if (split_url(argv[optind + 1], host, sizeof host, &port, &url_path) < 0) {
			fprintf(stderr, "sluicectl: cannot read \"%s\" as an http:// or https:// URL\n", argv[optind + 1]);
			goto out;
		}
	} else if (optind != argc - 1) {
		explain_usage(stderr);
		goto out;
	} else {
		/* "HOST:PORT/udp" (or "/tcp"): the protocol, as in a rule */
		size_t tl = strlen(argv[optind]);
		char target[POLICY_HOST_MAX + 64];

		if (tl >= sizeof target) {
			fprintf(stderr, "sluicectl: \"%s\" is too long for HOST[:PORT]\n", argv[optind]);
			goto out;
		}
		memcpy(target, argv[optind], tl + 1);
		if (tl > 4 && (strcmp(target + tl - 4, "/udp") == 0 || strcmp(target + tl - 4, "/tcp") == 0)) {
			proto = target[tl - 3] == 'u' ? POLICY_PROTO_UDP : POLICY_PROTO_TCP;
			target[tl - 4] = '\0';
			if (!names_port(target)) {
				fprintf(stderr, "sluicectl: \"%s\": name the port before /%s (HOST:PORT/%s)\n", argv[optind],
					target + tl - 3, target + tl - 3);
				goto out;
			}
		}
		if (split_target(target, host, sizeof host, &port) < 0) {
			fprintf(stderr, "sluicectl: cannot read \"%s\" as HOST[:PORT][/udp] (port 1-65535)\n", argv[optind]);
			goto out;
		}
	}
	if (proto == POLICY_PROTO_UDP && method) {
		fprintf(stderr, "sluicectl: UDP has no HTTP method: drop --method or /udp\n");
		goto out;
	}
	unsigned mbit = 0;
	if (method) {
		mbit = policy_method_from_name(method, strlen(method));
		if (!mbit) {
			fprintf(stderr, "sluicectl: \"%s\" is not an HTTP method\n", method);
			goto out;
		}
	}
	if (!project)
		project = getcwd(cwd, sizeof cwd);
	if (standard && policy_builder_add_standard_layers(b, NULL, getenv("HOME"), project, &err) < 0)
		goto load_error;
	for (int i = 0; i < ncli; i++) {
		int r = kinds[i] == 'p' ? policy_builder_add_policy_arg(b, POLICY_LAYER_CLI, cli[i], &err)
					: policy_builder_add_pattern(b, POLICY_LAYER_CLI, cli[i], kinds[i] == 'd',
								     kinds[i] == 'd' ? "--deny" : "--allow", &err);
		if (r < 0)
			goto load_error;
	}
	p = policy_builder_compile(b, &err);
	if (!p)
		goto load_error;

	struct policy_decision d;
	struct sockaddr_storage ss;
	bool is_addr = false;
	enum policy_canon_err ce = policy_canon_host(host, strlen(host), canon);
	if (ce == POLICY_CANON_IP_LITERAL && policy_parse_ip_literal(host, strlen(host), &ss) == 0) {
		policy_decide_addr_proto(p, (struct sockaddr *)&ss, proto, port, false, &d);
		char abuf[INET6_ADDRSTRLEN];
		bool v6 = ss.ss_family == AF_INET6;
		inet_ntop(ss.ss_family, v6 ? (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
					   : (void *)&((struct sockaddr_in *)&ss)->sin_addr, abuf, sizeof abuf);
		snprintf(canon, sizeof canon, v6 ? "[%s]" : "%s", abuf);
		is_addr = true;
	} else if (ce != POLICY_CANON_OK) {
		fprintf(stderr, "sluicectl: \"%s\": %s\n", host, policy_canon_strerror(ce));
		goto out;
	} else {
		policy_decide_proto(p, canon, proto, port, mbit, &d);
	}
	const char *psfx = proto == POLICY_PROTO_UDP ? "/udp" : "";
	printf("%s:%u%s%s%s: %s\n", canon, port, psfx, method ? " " : "", method ? method : "",
	       policy_verdict_name(d.verdict));
	printf("  %s\n", policy_decision_reason(&d));
	if (d.verdict != POLICY_ALLOW && !is_addr && (!d.rule || !policy_rule_is_deny(d.rule)))
		printf("  to allow it for one run:  sluice run --allow-network --allow %s:%u%s -- CMD\n"
		       "  or in .sluice/policy.json:  {\"allow\": [\"%s:%u%s\"]}\n", canon, port, psfx, canon, port, psfx);
	if (!is_addr && d.verdict == POLICY_ALLOW) {
		/* direct mode: does a DNS answer for the name open this port without the proxy? */
		if (policy_direct_port_allowed(p, canon, proto, port))
			printf("  direct mode: the addresses DNS answers for %s open for %s port %u (for the answer's TTL)\n",
			       canon, policy_proto_name(proto), port);
		else if (proto == POLICY_PROTO_UDP)
			printf("  but UDP is reached only in direct mode: %s\n",
			       policy_get_options(p)->direct ? "this port does not open directly (a single port "
								"an allow rule names for the name)"
							     : "the policy does not turn \"direct\" on");
	}
	rc = d.verdict == POLICY_ALLOW ? 0 : d.verdict == POLICY_ASK ? 3 : 1;
	if (url_path && !is_addr && policy_inspects(p, canon)) {
		struct policy_http_decision *hd = malloc(sizeof *hd);
		if (!hd) {
			fprintf(stderr, "sluicectl: out of memory\n");
			rc = 2;
			goto out;
		}
		policy_decide_http(p, canon, method, strlen(method), url_path, strlen(url_path), hd);
		printf("  inspected: %s %s: %s\n", method, hd->path[0] ? hd->path : url_path, policy_verdict_name(hd->verdict));
		printf("  %s\n", hd->reason);
		if (rc == 0 && hd->verdict != POLICY_ALLOW)
			rc = 1;
		free(hd);
	} else if (url_path && !is_addr) {
		printf("  not inspected: the proxy sees only the host (add an \"inspect\" entry for %s to decide by "
		       "method and path)\n", canon);
	}
	printf("  (%zu rule%s loaded)\n", policy_rule_count(p), policy_rule_count(p) == 1 ? "" : "s");
	goto out;
load_error:
	fprintf(stderr, "sluicectl: %s\n", policy_error_format(&err, msg, sizeof msg));
	rc = 2;
out:
	free(cli);
	free(kinds);
	policy_unref(p);
	policy_builder_free(b);
	return rc;
}

int ctl_policy(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		fprintf(argc < 2 ? stderr : stdout, "usage: sluicectl policy check|explain ...\n");
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "check") == 0)
		return policy_check(argc - 1, argv + 1);
	if (strcmp(argv[1], "explain") == 0)
		return policy_explain(argc - 1, argv + 1);
	fprintf(stderr, "sluicectl: unknown policy command \"%s\" (check, explain)\n", argv[1]);
	return 2;
}
