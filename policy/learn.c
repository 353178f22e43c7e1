/* Learn mode's writer: from the destinations a run reached (host or address, port), the smallest
 * policy that allows them all, in the policy file format. A shipped preset is named when it covers
 * a reached destination (the smallest preset that does, and only presets something still needs);
 * every destination no chosen preset covers becomes one exact "allow" entry per host. Nothing is
 * generalised into a wildcard: a wildcard only comes in through a preset. The result is compiled
 * again and checked against every destination before it is returned. */
#include "policy.h"
#include "policy_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEARN_DEST_MAX   100000u /* distinct destinations one run may record */
#define LEARN_PRESET_MAX 32u     /* presets considered (a bit each) */

struct learn_dest {
	char host[POLICY_HOST_MAX + 1]; /* canonical name, or the address as inet_ntop writes it */
	bool is_addr;
	struct sockaddr_storage addr; /* is_addr only */
	uint16_t port;                /* 0: only looked up in DNS */
	uint32_t covered;             /* bit i: preset i allows it */
};

struct policy_learn {
	struct learn_dest *d; /* owned */
	size_t n, cap;
	size_t compact_at; /* n after the last sort+dedupe */
};

struct learn_preset {
	char name[65];
	size_t nrules;
	struct policy *p; /* owned */
};

struct policy_learn *policy_learn_new(void)
{
	return calloc(1, sizeof(struct policy_learn));
}

void policy_learn_free(struct policy_learn *l)
{
	if (!l)
		return;
	free(l->d);
	free(l);
}

static int dest_cmp(const void *a, const void *b)
{
	const struct learn_dest *x = a, *y = b;
	int r;

	if (x->is_addr != y->is_addr)
		return x->is_addr ? 1 : -1; /* names first, then addresses */
	if ((r = strcmp(x->host, y->host)) != 0)
		return r;
	return (int)x->port - (int)y->port;
}

/* Sorts and removes duplicates. */
static void compact(struct policy_learn *l)
{
	size_t o = 0;

	if (l->n > 1)
		qsort(l->d, l->n, sizeof *l->d, dest_cmp);
	for (size_t i = 0; i < l->n; i++)
		if (o == 0 || dest_cmp(&l->d[o - 1], &l->d[i]) != 0)
			l->d[o++] = l->d[i];
	l->n = l->compact_at = o;
}

int policy_learn_add(struct policy_learn *l, const char *host, uint16_t port)
{
	struct learn_dest x;
	enum policy_canon_err ce;

	memset(&x, 0, sizeof x);
	x.port = port;
	ce = policy_canon_host(host, strlen(host), x.host);
	if (ce == POLICY_CANON_IP_LITERAL) {
		if (policy_parse_ip_literal(host, strlen(host), &x.addr) != 0)
			return -EINVAL;
		x.is_addr = true;
		if (x.addr.ss_family == AF_INET)
			inet_ntop(AF_INET, &((struct sockaddr_in *)&x.addr)->sin_addr, x.host, sizeof x.host);
		else
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&x.addr)->sin6_addr, x.host, sizeof x.host);
	} else if (ce != POLICY_CANON_OK) {
		return -EINVAL;
	}
	if (l->n == l->cap) {
		/* most records repeat a destination: squeeze the duplicates out before growing */
		if (l->n > l->compact_at)
			compact(l);
		if (l->n == l->cap) {
			if (l->cap >= LEARN_DEST_MAX)
				return -E2BIG;
			size_t ncap = l->cap ? l->cap * 2 : 64;
			struct learn_dest *nd = realloc(l->d, ncap * sizeof *nd);
			if (!nd)
				return -ENOMEM;
			l->d = nd;
			l->cap = ncap;
		}
	}
	l->d[l->n++] = x;
	return 0;
}

size_t policy_learn_count(struct policy_learn *l)
{
	compact(l);
	return l->n;
}

/* ---- presets ---- */

static int preset_cmp(const void *a, const void *b)
{
	return strcmp(((const struct learn_preset *)a)->name, ((const struct learn_preset *)b)->name);
}

static void presets_free(struct learn_preset *ps, size_t n)
{
	for (size_t i = 0; i < n; i++)
		policy_unref(ps[i].p);
	free(ps);
}

/* Loads every preset of dir (NULL: the default directory) as a policy of its own. A preset that does
 * not load is left out (it cannot be named in a policy either). */
static int presets_load(const char *dir, struct learn_preset **out, size_t *nout, struct policy_error *err)
{
	struct policy_builder *b = policy_builder_new();
	struct learn_preset *ps = NULL;
	size_t n = 0;
	DIR *d = NULL;
	struct dirent *de;

	*out = NULL;
	*nout = 0;
	if (!b || !(ps = calloc(LEARN_PRESET_MAX, sizeof *ps))) {
		policy_builder_free(b);
		return policy_err(err, "", 0, 0, "out of memory");
	}
	if (dir)
		policy_builder_set_preset_dir(b, dir);
	d = opendir(policy_builder_preset_dir(b));
	while (d && (de = readdir(d)) && n < LEARN_PRESET_MAX) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l < 6 || l - 5 >= sizeof ps[n].name || strcmp(de->d_name + l - 5, ".json") != 0)
			continue;
		memcpy(ps[n].name, de->d_name, l - 5);
		ps[n].name[l - 5] = '\0';
		n++;
	}
	if (d)
		closedir(d);
	qsort(ps, n, sizeof *ps, preset_cmp);
	for (size_t i = 0; i < n; i++) {
		struct policy_error pe;
		if (policy_builder_add_preset(b, POLICY_LAYER_CLI, ps[i].name, &pe) == 0)
			ps[i].p = policy_builder_compile(b, &pe);
		if (!ps[i].p) {
			/* a fresh builder: the failed one may hold half of the preset */
			policy_builder_free(b);
			if (!(b = policy_builder_new())) {
				presets_free(ps, n);
				return policy_err(err, "", 0, 0, "out of memory");
			}
			if (dir)
				policy_builder_set_preset_dir(b, dir);
			continue;
		}
		ps[i].nrules = policy_rule_count(ps[i].p);
	}
	policy_builder_free(b);
	/* keep the ones that loaded */
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (ps[i].p)
			ps[k++] = ps[i];
	*out = ps;
	*nout = k;
	return 0;
}

static bool dest_allowed(const struct policy *p, const struct learn_dest *x)
{
	struct policy_decision dec;

	if (x->is_addr) {
		struct sockaddr_storage ss = x->addr;
		policy_decide_addr(p, (struct sockaddr *)&ss, x->port ? x->port : 443, false, &dec);
	} else {
		policy_decide(p, x->host, x->port, 0, &dec);
	}
	return dec.verdict == POLICY_ALLOW;
}

/* ---- rendering ---- */

struct sbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = true;
			return;
		}
		if (b->s && b->len + (size_t)n < b->cap) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = b->cap ? b->cap * 2 : 4096;
		while (ncap < b->len + (size_t)n + 1)
			ncap *= 2;
		char *ns = realloc(b->s, ncap);
		if (!ns) {
			b->oom = true;
			return;
		}
		b->s = ns;
		b->cap = ncap;
	}
}

/* The header as "// " comment lines, with control bytes replaced (a line break in a command line
 * must not end the comment). */
static void put_header(struct sbuf *b, const char *header)
{
	while (header && *header) {
		size_t n = strcspn(header, "\n");
		sb_printf(b, "//");
		if (n)
			sb_printf(b, " ");
		for (size_t i = 0; i < n; i++) {
			unsigned char ch = (unsigned char)header[i];
			sb_printf(b, "%c", ch < 0x20 || ch == 0x7f ? '?' : (char)ch);
		}
		sb_printf(b, "\n");
		header += n;
		if (*header)
			header++;
	}
}

/* One host's (or address's) entry, from its destinations that no chosen preset covers: bare when
 * the ports it was reached on are 80 and/or 443 (or none: DNS only), which is what a rule without
 * ports allows; else with every port. Returns false when every destination is covered. */
static bool put_entry(struct sbuf *b, const struct learn_dest *d, size_t n, uint32_t chosen, bool first_entry)
{
	bool any = false, other = false, first = true;

	for (size_t i = 0; i < n; i++) {
		if (d[i].covered & chosen)
			continue;
		any = true;
		if (d[i].port && d[i].port != 80 && d[i].port != 443)
			other = true;
	}
	if (!any)
		return false;
	sb_printf(b, "%s\n    ", first_entry ? "" : ",");
	if (d[0].is_addr)
		sb_printf(b, "{\"cidr\": \"%s/%u\"%s", d[0].host, d[0].addr.ss_family == AF_INET6 ? 128 : 32,
		          other ? ", \"ports\": [" : "}");
	else
		sb_printf(b, "\"%s%s", d[0].host, other ? ":" : "\"");
	if (!other)
		return true;
	for (size_t i = 0; i < n; i++) {
		if ((d[i].covered & chosen) || !d[i].port)
			continue;
		sb_printf(b, "%s%u", first ? "" : d[0].is_addr ? ", " : ",", d[i].port);
		first = false;
	}
	sb_printf(b, "%s", d[0].is_addr ? "]}" : "\"");
	return true;
}

char *policy_learn_render(struct policy_learn *l, const char *preset_dir, const char *header,
			  struct policy_learn_summary *sum, struct policy_error *err)
{
	struct learn_preset *ps = NULL;
	size_t nps = 0;
	uint32_t chosen = 0;
	struct sbuf b = {0};
	struct policy_builder *vb = NULL;
	struct policy *vp = NULL;
	char *out = NULL;

	memset(sum, 0, sizeof *sum);
	compact(l);
	if (presets_load(preset_dir, &ps, &nps, err) < 0)
		return NULL;
	for (size_t i = 0; i < l->n; i++) {
		l->d[i].covered = 0;
		for (size_t k = 0; k < nps; k++)
			if (dest_allowed(ps[k].p, &l->d[i]))
				l->d[i].covered |= 1u << k;
	}
	/* Greedy: each destination no chosen preset covers yet takes the smallest preset that covers
	 * it (fewest rules, then name), so `registries` loses to the one registry it contains. */
	for (size_t i = 0; i < l->n; i++) {
		uint32_t m = l->d[i].covered;
		if (!m || (m & chosen))
			continue;
		size_t best = nps;
		for (size_t k = 0; k < nps; k++)
			if ((m & (1u << k)) && (best == nps || ps[k].nrules < ps[best].nrules))
				best = k;
		chosen |= 1u << best;
	}
	/* Then drop a chosen preset that only covers what the others cover too, the largest first. */
	for (;;) {
		size_t drop = nps;
		for (size_t k = 0; k < nps; k++) {
			if (!(chosen & (1u << k)))
				continue;
			bool needed = false;
			for (size_t i = 0; i < l->n && !needed; i++)
				needed = (l->d[i].covered & (1u << k)) && !(l->d[i].covered & chosen & ~(1u << k));
			if (!needed && (drop == nps || ps[k].nrules > ps[drop].nrules))
				drop = k;
		}
		if (drop == nps)
			break;
		chosen &= ~(1u << drop);
	}

	put_header(&b, header);
	sb_printf(&b, "{\n");
	if (chosen) {
		bool first = true;
		sb_printf(&b, "  \"presets\": [");
		for (size_t k = 0; k < nps; k++) {
			if (!(chosen & (1u << k)))
				continue;
			sb_printf(&b, "%s\"%s\"", first ? "" : ", ", ps[k].name);
			size_t o = strlen(sum->preset_names);
			if (o + strlen(ps[k].name) + 6 < sizeof sum->preset_names)
				snprintf(sum->preset_names + o, sizeof sum->preset_names - o, "%s%s", first ? "" : ", ", ps[k].name);
			else if (o + 4 < sizeof sum->preset_names && !strstr(sum->preset_names, "..."))
				snprintf(sum->preset_names + o, sizeof sum->preset_names - o, "...");
			first = false;
			sum->presets++;
		}
		sb_printf(&b, "],\n");
	}
	sb_printf(&b, "  \"allow\": [");
	{
		bool first = true;
		for (size_t i = 0, j; i < l->n; i = j) {
			for (j = i; j < l->n && l->d[j].is_addr == l->d[i].is_addr && strcmp(l->d[j].host, l->d[i].host) == 0; j++)
				;
			if (put_entry(&b, l->d + i, j - i, chosen, first)) {
				first = false;
				sum->hosts++;
			}
		}
		sb_printf(&b, "%s]\n}\n", first ? "" : "\n  ");
	}
	if (!(vb = policy_builder_new()))
		b.oom = true;
	if (b.oom) {
		policy_err(err, "", 0, 0, "out of memory");
		goto out;
	}
	/* The promise: the written policy allows every destination of the run. */
	if (preset_dir)
		policy_builder_set_preset_dir(vb, preset_dir);
	if (policy_builder_add_json(vb, POLICY_LAYER_CLI, "learned policy", b.s, b.len, err) < 0 ||
	    !(vp = policy_builder_compile(vb, err)))
		goto out;
	for (size_t i = 0; i < l->n; i++) {
		if (!dest_allowed(vp, &l->d[i])) {
			policy_err(err, "", 0, 0, "the learned policy would not allow %s:%u (a bug: please report it)",
				   l->d[i].host, l->d[i].port);
			goto out;
		}
	}
	sum->destinations = l->n;
	out = b.s;
	b.s = NULL;
out:
	policy_unref(vp);
	policy_builder_free(vb);
	presets_free(ps, nps);
	free(b.s);
	return out;
}
