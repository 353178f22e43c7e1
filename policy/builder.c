/* Building a policy: layers, files, presets, command-line patterns, compilation, serialisation. */
#include "config.h"
#include "policy_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLICY_FILE_MAX (256u << 20) /* a policy file larger than this is a mistake */

/* ---- bulk arrays ---- */

#define BULK_MAP_MIN (4u << 20) /* below this, calloc */

/* Precedes every bulk array, which starts as aligned as malloc's memory. */
struct bulk_hdr {
	size_t map_len; /* 0: from calloc; else the length of the mapping that starts at the header */
	max_align_t data[];
};

void *policy_bulk_calloc(size_t n, size_t size)
{
	struct bulk_hdr *h;
	size_t len;

	if (size && n > (SIZE_MAX - sizeof *h) / size)
		return NULL;
	len = n * size + sizeof *h;
	if (len < BULK_MAP_MIN) {
		h = calloc(1, len);
		if (!h)
			return NULL;
		h->map_len = 0;
		return h->data;
	}
	h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED)
		return NULL;
	(void)madvise(h, len, MADV_HUGEPAGE); /* a hint: without THP it is only slower */
	h->map_len = len;
	return h->data;
}

void policy_bulk_free(void *p)
{
	struct bulk_hdr *h;

	if (!p)
		return;
	h = (struct bulk_hdr *)((char *)p - offsetof(struct bulk_hdr, data));
	if (h->map_len)
		munmap(h, h->map_len);
	else
		free(h);
}

/* ---- arena ---- */

struct policy_arena_chunk {
	struct policy_arena_chunk *next;
	size_t used, size;
	max_align_t data[];
};

void *policy_arena_alloc(struct policy_arena *a, size_t size)
{
	struct policy_arena_chunk *c = a->head;

	size = (size + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
	if (!c || c->size - c->used < size) {
		size_t csize = size > (1u << 20) ? size : (1u << 20);
		c = malloc(sizeof *c + csize);
		if (!c)
			return NULL;
		c->size = csize;
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	void *p = (char *)c->data + c->used;
	c->used += size;
	return p;
}

char *policy_arena_strndup(struct policy_arena *a, const char *s, size_t n)
{
	char *p = policy_arena_alloc(a, n + 1);

	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void policy_arena_release(struct policy_arena *a)
{
	struct policy_arena_chunk *c = a->head, *n;

	for (; c; c = n) {
		n = c->next;
		explicit_bzero(c->data, c->used); /* credentials' secrets live here (http_load.c) */
		free(c);
	}
	a->head = NULL;
}

/* ---- errors and names ---- */

/* Copies src into dst with C0 controls, DEL and UTF-8-encoded C1 controls written as \xNN: messages
 * quote what a (possibly hostile) file says, and end up on a terminal. */
static void copy_escaped(char *dst, size_t len, const char *src)
{
	size_t o = 0;

	for (const unsigned char *c = (const unsigned char *)src; *c && o + 1 < len; c++) {
		bool c1 = c[0] == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f;
		if (*c < 0x20 || *c == 0x7f || c1) {
			if (o + 5 + (c1 ? 4 : 0) >= len)
				break;
			o += (size_t)snprintf(dst + o, len - o, "\\x%02x", *c);
			if (c1)
				o += (size_t)snprintf(dst + o, len - o, "\\x%02x", *++c);
			continue;
		}
		dst[o++] = (char)*c;
	}
	dst[o] = '\0';
}

int policy_err(struct policy_error *err, const char *file, unsigned line, unsigned col, const char *fmt, ...)
{
	char msg[POLICY_ERR_MAX];
	va_list ap;

	if (!err)
		return -EINVAL;
	copy_escaped(err->file, sizeof err->file, file ? file : "");
	err->line = line;
	err->col = col;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	copy_escaped(err->msg, sizeof err->msg, msg);
	return -EINVAL;
}

const char *policy_error_format(const struct policy_error *err, char *buf, size_t len)
{
	if (err->file[0] && err->line)
		snprintf(buf, len, "%s:%u:%u: %s", err->file, err->line, err->col, err->msg);
	else if (err->file[0])
		snprintf(buf, len, "%s: %s", err->file, err->msg);
	else
		snprintf(buf, len, "%s", err->msg);
	return buf;
}

const char *policy_layer_name(enum policy_layer layer)
{
	switch (layer) {
	case POLICY_LAYER_ORG: return "org";
	case POLICY_LAYER_USER: return "user";
	case POLICY_LAYER_PROJECT: return "project";
	case POLICY_LAYER_CLI: return "cli";
	default: return "?";
	}
}

const char *policy_verdict_name(enum policy_verdict v)
{
	return v == POLICY_ALLOW ? "allow" : v == POLICY_ASK ? "ask" : "deny";
}

const char *policy_rule_where(const struct policy_rule *r) { return r ? r->where : ""; }

const char *policy_decision_where(const struct policy_decision *d)
{
	return d->why == POLICY_R_LEARN ? POLICY_LEARN_RULE : policy_rule_where(d->rule);
}
const char *policy_rule_pattern(const struct policy_rule *r) { return r ? r->pattern : ""; }
bool policy_rule_is_deny(const struct policy_rule *r) { return r && r->kind == RULE_DENY; }
enum policy_layer policy_rule_layer(const struct policy_rule *r) { return r ? r->layer : POLICY_LAYER_CLI; }

/* ---- builder ---- */

struct policy_builder *policy_builder_new(void)
{
	struct policy_builder *b = calloc(1, sizeof *b);

	if (!b)
		return NULL;
	b->opts.direct = b->opts.transparent = b->opts.ask = -1;
	b->opts.ask_timeout_s = 60;
	return b;
}

void policy_builder_free(struct policy_builder *b)
{
	if (!b)
		return;
	policy_arena_release(&b->arena);
	policy_bulk_free(b->rules);
	free(b->inspects);
	free(b);
}

void policy_builder_set_preset_dir(struct policy_builder *b, const char *dir)
{
	b->preset_dir = dir;
}

void policy_builder_forbid_secret_reads(struct policy_builder *b)
{
	b->no_secret_reads = true;
}

int policy_builder_reserve(struct policy_builder *b, size_t more)
{
	struct policy_rule *n;
	size_t want;

	if (more > UINT32_MAX - 1 - b->nrules)
		return -E2BIG;
	want = b->nrules + more;
	if (want <= b->caprules)
		return 0;
	if (!(n = policy_bulk_calloc(want, sizeof *n)))
		return -ENOMEM;
	if (b->nrules)
		memcpy(n, b->rules, b->nrules * sizeof *n);
	policy_bulk_free(b->rules);
	b->rules = n;
	b->caprules = want;
	return 0;
}

int policy_builder_push(struct policy_builder *b, const struct policy_rule *r)
{
	if (b->nrules == UINT32_MAX - 1)
		return -E2BIG;
	if (b->nrules == b->caprules) {
		size_t ncap = b->caprules ? b->caprules * 2 : 64;
		struct policy_rule *n = policy_bulk_calloc(ncap, sizeof *n);
		if (!n)
			return -ENOMEM;
		if (b->nrules)
			memcpy(n, b->rules, b->nrules * sizeof *n);
		policy_bulk_free(b->rules);
		b->rules = n;
		b->caprules = ncap;
	}
	b->rules[b->nrules] = *r;
	b->rules[b->nrules].seq = (uint32_t)b->nrules;
	b->rules[b->nrules].next = UINT32_MAX;
	b->nrules++;
	return 0;
}

/* An organisation file must be root's and not writable by anyone else, or it caps nothing. */
static int check_org_stat(const char *path, const struct stat *st, struct policy_error *err)
{
	if (st->st_uid != 0 || (st->st_mode & 022))
		return policy_err(err, path, 0, 0, "organisation policy must be owned by root and not group- or "
				  "world-writable (fix with: chown root: %s && chmod 644 %s)", path, path);
	return 0;
}

/* Reads a whole regular file (no FIFOs or devices: a policy path must not block or stream). With
 * `org`, the file is checked as an organisation file on the descriptor that is read (no symlinks, no
 * window between the check and the read). */
static int read_file(const char *path, bool org, char **out, size_t *outlen, struct policy_error *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (org ? O_NOFOLLOW : 0));
	struct stat st;
	char *buf = NULL;
	size_t got = 0;

	if (fd < 0) {
		int e = errno;
		if (org && e == ELOOP)
			return policy_err(err, path, 0, 0, "organisation policy is not a regular file (symlinks are refused)");
		return policy_err(err, path, 0, 0, "cannot open: %s", strerror(e)), -e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return policy_err(err, path, 0, 0, "not a regular file");
	}
	if (org && check_org_stat(path, &st, err) < 0) {
		close(fd);
		return -EPERM;
	}
	if ((uint64_t)st.st_size > POLICY_FILE_MAX) {
		close(fd);
		return policy_err(err, path, 0, 0, "file too large (over %u MiB)", POLICY_FILE_MAX >> 20);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return policy_err(err, path, 0, 0, "out of memory");
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 ? errno : EIO;
			free(buf);
			close(fd);
			return policy_err(err, path, 0, 0, "read error: %s", strerror(e));
		}
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	*out = buf;
	*outlen = got;
	return 0;
}

static bool is_text_list(const char *path)
{
	size_t n = strlen(path);
	return (n > 4 && strcmp(path + n - 4, ".txt") == 0) || (n > 5 && strcmp(path + n - 5, ".list") == 0);
}

static int add_file(struct policy_builder *b, enum policy_layer layer, const char *path, bool org_file,
		    struct policy_error *err)
{
	char *text = NULL;
	size_t len = 0;
	int r = read_file(path, org_file, &text, &len, err);

	if (r < 0)
		return r;
	if (is_text_list(path))
		r = policy_load_text(b, layer, path, text, len, err);
	else
		r = policy_load_json(b, layer, path, text, len, false, err);
	free(text);
	return r;
}

int policy_builder_add_file(struct policy_builder *b, enum policy_layer layer, const char *path,
			    struct policy_error *err)
{
	return add_file(b, layer, path, false, err);
}

int policy_builder_add_json(struct policy_builder *b, enum policy_layer layer, const char *name,
			    const char *text, size_t len, struct policy_error *err)
{
	return policy_load_json(b, layer, name, text, len, true, err);
}

static const char *preset_dir(const struct policy_builder *b)
{
	const char *env = getenv("SLUICE_PRESET_DIR");
	struct stat st;

	if (b->preset_dir)
		return b->preset_dir;
	if (env && *env)
		return env;
	if (stat(SLUICE_PRESET_DIR, &st) == 0 && S_ISDIR(st.st_mode))
		return SLUICE_PRESET_DIR;
	return SLUICE_SOURCE_PRESET_DIR;
}

const char *policy_builder_preset_dir(const struct policy_builder *b) { return preset_dir(b); }

int policy_builder_add_preset(struct policy_builder *b, enum policy_layer layer, const char *name,
			      struct policy_error *err)
{
	char path[4096];
	size_t n = strlen(name);
	int r;

	if (n == 0 || n > 64 || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
		return policy_err(err, "", 0, 0, "\"%s\" is not a preset name (lower-case letters, digits, '-')", name);
	if (b->preset_depth >= 4)
		return policy_err(err, "", 0, 0, "presets nest too deeply at \"%s\" (a preset naming itself?)", name);
	snprintf(path, sizeof path, "%s/%s.json", preset_dir(b), name);
	if (access(path, R_OK) != 0) {
		char avail[512] = "";
		DIR *d = opendir(preset_dir(b));
		struct dirent *de;
		while (d && (de = readdir(d))) {
			size_t l = strlen(de->d_name);
			if (l > 5 && strcmp(de->d_name + l - 5, ".json") == 0 && strlen(avail) + l < sizeof avail - 2) {
				strncat(avail, avail[0] ? ", " : "", sizeof avail - strlen(avail) - 1);
				strncat(avail, de->d_name, l - 5);
			}
		}
		if (d)
			closedir(d);
		return policy_err(err, "", 0, 0, "unknown preset \"%s\" (available: %s)", name, avail[0] ? avail : "none found");
	}
	for (const struct policy_preset_seen *s = b->presets_seen; s; s = s->next)
		if (s->layer == layer && strcmp(s->name, name) == 0)
			return 0; /* already there: loading it again would only repeat its rules */
	b->preset_depth++;
	r = policy_builder_add_file(b, layer, path, err);
	b->preset_depth--;
	if (r == 0) {
		struct policy_preset_seen *s = policy_arena_alloc(&b->arena, sizeof *s + n + 1);
		if (!s)
			return policy_err(err, "", 0, 0, "out of memory");
		s->layer = layer;
		memcpy(s->name, name, n + 1);
		s->next = b->presets_seen;
		b->presets_seen = s;
	}
	return r;
}

int policy_builder_add_policy_arg(struct policy_builder *b, enum policy_layer layer, const char *arg,
				  struct policy_error *err)
{
	size_t n = strlen(arg);

	if (strchr(arg, '/') || (n > 5 && strcmp(arg + n - 5, ".json") == 0) || is_text_list(arg))
		return policy_builder_add_file(b, layer, arg, err);
	return policy_builder_add_preset(b, layer, arg, err);
}

int policy_builder_add_pattern(struct policy_builder *b, enum policy_layer layer, const char *pattern, bool deny,
			       const char *origin, struct policy_error *err)
{
	struct policy_rule r = { .layer = layer, .kind = deny ? RULE_DENY : RULE_ALLOW };
	char why[POLICY_ERR_MAX], w[POLICY_WHERE_MAX];

	if (policy_parse_pattern(b, pattern, &r, why, sizeof why) < 0)
		return policy_err(err, origin, 0, 0, "%s", why);
	snprintf(w, sizeof w, "%s %s", origin, pattern);
	r.where = policy_arena_strndup(&b->arena, w, strlen(w));
	if (!r.where)
		return policy_err(err, origin, 0, 0, "out of memory");
	if (policy_builder_push(b, &r) < 0)
		return policy_err(err, origin, 0, 0, "out of memory");
	return 0;
}

void policy_builder_set_options(struct policy_builder *b, const struct policy_options *o)
{
	if (o->direct)
		b->opts.direct = 1;
	if (o->transparent)
		b->opts.transparent = 1;
	if (o->ask)
		b->opts.ask = 1;
	if (o->ask_timeout_s)
		b->opts.ask_timeout_s = o->ask_timeout_s;
	if (o->learn)
		b->opts.learn = true;
}

/* A directory holding organisation files must be root's and not writable by others either: whoever
 * can write it can delete /etc/sluice/policy.json, and with it the ceiling. Missing is fine (1). */
static int check_org_dir(const char *path, struct policy_error *err)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return errno == ENOENT ? 1 : policy_err(err, path, 0, 0, "cannot stat: %s", strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return policy_err(err, path, 0, 0, "organisation policy directory is not a directory");
	if (st.st_uid != 0 || (st.st_mode & 022))
		return policy_err(err, path, 0, 0, "organisation policy directory must be owned by root and not group- "
				  "or world-writable (fix with: chown root: %s && chmod 755 %s)", path, path);
	return 0;
}

static int add_if_exists(struct policy_builder *b, enum policy_layer layer, const char *path, struct policy_error *err)
{
	struct stat st;

	if (layer == POLICY_LAYER_ORG) {
		if (lstat(path, &st) < 0)
			return errno == ENOENT ? 0 : policy_err(err, path, 0, 0, "cannot stat: %s", strerror(errno));
		/* ownership, mode and type are checked on the descriptor that is read (read_file) */
		return add_file(b, layer, path, true, err);
	}
	if (access(path, F_OK) != 0)
		return 0;
	return policy_builder_add_file(b, layer, path, err);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int policy_builder_add_org_layers(struct policy_builder *b, const char *sysconfdir, struct policy_error *err)
{
	char path[4096];
	int r;

	if (!sysconfdir)
		sysconfdir = SLUICE_SYSCONFDIR;
	if ((r = check_org_dir(sysconfdir, err)) < 0)
		return r;
	snprintf(path, sizeof path, "%s/policy.json", sysconfdir);
	if ((r = add_if_exists(b, POLICY_LAYER_ORG, path, err)) < 0)
		return r;
	/* policy.d/\*.json in name order, so the result does not depend on directory order */
	snprintf(path, sizeof path, "%s/policy.d", sysconfdir);
	if ((r = check_org_dir(path, err)) < 0)
		return r;
	DIR *d = r == 0 ? opendir(path) : NULL;
	if (d) {
		char **names = NULL;
		size_t n = 0;
		struct dirent *de;
		r = 0;
		while ((de = readdir(d))) {
			size_t l = strlen(de->d_name);
			if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".json") != 0)
				continue;
			char **nn = realloc(names, (n + 1) * sizeof *nn);
			if (!nn || !(nn[n] = strdup(de->d_name))) {
				names = nn ? nn : names;
				r = policy_err(err, path, 0, 0, "out of memory");
				break;
			}
			names = nn;
			n++;
		}
		closedir(d);
		if (r == 0 && n)
			qsort(names, n, sizeof *names, cmp_str);
		for (size_t i = 0; i < n; i++) {
			char f[4400];
			snprintf(f, sizeof f, "%s/%s", path, names[i]);
			if (r == 0)
				r = add_if_exists(b, POLICY_LAYER_ORG, f, err);
			free(names[i]);
		}
		free(names);
		if (r < 0)
			return r;
	}
	return 0;
}

int policy_builder_add_standard_layers(struct policy_builder *b, const char *sysconfdir, const char *home,
				       const char *project_dir, struct policy_error *err)
{
	char path[4096];
	const char *xdg = getenv("XDG_CONFIG_HOME");
	int r;

	if ((r = policy_builder_add_org_layers(b, sysconfdir, err)) < 0)
		return r;
	if (xdg && *xdg)
		snprintf(path, sizeof path, "%s/sluice/policy.json", xdg);
	else if (home)
		snprintf(path, sizeof path, "%s/.config/sluice/policy.json", home);
	else
		path[0] = '\0';
	if (path[0] && (r = add_if_exists(b, POLICY_LAYER_USER, path, err)) < 0)
		return r;
	if (project_dir) {
		snprintf(path, sizeof path, "%s/.sluice/policy.json", project_dir);
		if ((r = add_if_exists(b, POLICY_LAYER_PROJECT, path, err)) < 0)
			return r;
	}
	return 0;
}

struct policy *policy_builder_compile(struct policy_builder *b, struct policy_error *err)
{
	struct policy *p;

	/* Learn mode is asked for explicitly (--learn): running without it would not be what the user
	 * asked for, so a pin-off by the organisation is an error rather than a silent downgrade. */
	if (b->opts.learn && b->opts.org_forbids_learn) {
		policy_err(err, b->opts.org_learn_where, 0, 0,
			   "learn mode (--learn) is forbidden by the organisation policy (\"learn\": false)");
		return NULL;
	}
	p = calloc(1, sizeof *p);
	if (!p) {
		policy_err(err, "", 0, 0, "out of memory");
		return NULL;
	}
	p->refs = 1;
	/* The policy takes the builder's rules and strings; the builder is left empty and reusable. */
	p->arena = b->arena;
	b->arena.head = NULL;
	b->presets_seen = NULL;
	p->rules = b->rules;
	p->nrules = b->nrules;
	b->rules = NULL;
	b->nrules = b->caprules = 0;
	p->inspects = b->inspects;
	p->ninspects = b->ninspects;
	b->inspects = NULL;
	b->ninspects = b->capinspects = 0;

	for (size_t i = 0; i < p->nrules; i++) {
		if (p->rules[i].kind == RULE_CEILING)
			p->has_ceiling = true;
		if (p->rules[i].pat == PAT_CIDR)
			p->ncidr++;
	}
	if (p->ncidr) {
		p->cidr = malloc(p->ncidr * sizeof *p->cidr);
		if (!p->cidr)
			goto oom;
		size_t k = 0;
		for (size_t i = 0; i < p->nrules; i++)
			if (p->rules[i].pat == PAT_CIDR)
				p->cidr[k++] = (uint32_t)i;
	}
	p->trie = policy_trie_build(p->rules, p->nrules, err);
	if (!p->trie) {
		policy_unref(p);
		return NULL;
	}

	const struct policy_opt_state *o = &b->opts;
	p->opts.direct = o->direct == 1 && !o->org_forbids_direct;
	p->opts.transparent = o->transparent == 1 && !o->org_forbids_transparent;
	p->opts.ask = o->ask == 1 && !o->org_forbids_ask;
	p->opts.ask_timeout_s = o->ask_timeout_s;
	p->opts.learn = o->learn;
	/* Remember pins so a serialised copy reloaded at the org layer keeps them. */
	p->org_pins = (o->org_forbids_direct ? 1u : 0) | (o->org_forbids_transparent ? 2u : 0) | (o->org_forbids_ask ? 4u : 0);
	p->org_pins |= o->org_forbids_learn ? 8u : 0;
	return p;
oom:
	policy_err(err, "", 0, 0, "out of memory");
	policy_unref(p);
	return NULL;
}

struct policy *policy_ref(struct policy *p)
{
	if (p)
		__atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
	return p;
}

void policy_unref(struct policy *p)
{
	if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	policy_trie_free(p->trie);
	free(p->cidr);
	policy_bulk_free(p->rules);
	free(p->inspects);
	policy_arena_release(&p->arena); /* (secrets of credentials are in it: see http_load.c) */
	free(p);
}

const struct policy_options *policy_get_options(const struct policy *p) { return &p->opts; }
size_t policy_rule_count(const struct policy *p) { return p->nrules; }

/* ---- serialisation ---- */

void policy_rule_ports_str(const struct policy_rule *r, char *buf, size_t len)
{
	size_t o = 0;

	if (r->any_port || (r->nports == 0 && r->kind == RULE_DENY)) {
		snprintf(buf, len, "any port");
		return;
	}
	if (r->nports == 0) {
		snprintf(buf, len, "ports 80,443");
		return;
	}
	o += (size_t)snprintf(buf, len, "port%s ", r->nports > 1 || r->ports[0].lo != r->ports[0].hi ? "s" : "");
	for (unsigned i = 0; i < r->nports && o < len; i++) {
		if (r->ports[i].lo == r->ports[i].hi)
			o += (size_t)snprintf(buf + o, len - o, "%s%u", i ? "," : "", r->ports[i].lo);
		else
			o += (size_t)snprintf(buf + o, len - o, "%s%u-%u", i ? "," : "", r->ports[i].lo, r->ports[i].hi);
	}
}

char *policy_serialize(const struct policy *p)
{
	json_object *root = json_object_new_object(), *rules = json_object_new_array(), *opts = json_object_new_object();
	char *out = NULL;

	if (!root || !rules || !opts)
		goto out;
	json_object_object_add(root, "sluice-compiled", json_object_new_int(1));
	json_object_object_add(opts, "direct", json_object_new_boolean(p->opts.direct));
	json_object_object_add(opts, "transparent", json_object_new_boolean(p->opts.transparent));
	json_object_object_add(opts, "ask", json_object_new_boolean(p->opts.ask));
	json_object_object_add(opts, "ask_timeout", json_object_new_int((int)p->opts.ask_timeout_s));
	json_object_object_add(opts, "org_forbids_direct", json_object_new_boolean(p->org_pins & 1));
	json_object_object_add(opts, "org_forbids_transparent", json_object_new_boolean(p->org_pins & 2));
	json_object_object_add(opts, "org_forbids_ask", json_object_new_boolean(p->org_pins & 4));
	json_object_object_add(opts, "learn", json_object_new_boolean(p->opts.learn));
	json_object_object_add(opts, "org_forbids_learn", json_object_new_boolean(p->org_pins & 8));
	json_object_object_add(root, "options", opts);
	opts = NULL;
	for (size_t i = 0; i < p->nrules; i++) {
		const struct policy_rule *r = &p->rules[i];
		json_object *o = json_object_new_object();
		if (!o)
			goto out;
		json_object_object_add(o, r->pat == PAT_CIDR ? "cidr" : "host", json_object_new_string(r->pattern));
		if (r->any_port) {
			json_object_object_add(o, "ports", json_object_new_string("*"));
		} else if (r->nports) {
			json_object *pa = json_object_new_array();
			for (unsigned k = 0; k < r->nports; k++) {
				char t[16];
				snprintf(t, sizeof t, "%u-%u", r->ports[k].lo, r->ports[k].hi);
				json_object_array_add(pa, json_object_new_string(t));
			}
			json_object_object_add(o, "ports", pa);
		}
		if (r->protos) {
			json_object *pa = json_object_new_array();
			if (r->protos & POLICY_PB_TCP)
				json_object_array_add(pa, json_object_new_string("tcp"));
			if (r->protos & POLICY_PB_UDP)
				json_object_array_add(pa, json_object_new_string("udp"));
			json_object_object_add(o, "protocol", pa);
		}
		if (r->methods)
			json_object_object_add(o, "methods", policy_methods_json(r->methods));
		json_object_object_add(o, "where", json_object_new_string(r->where));
		json_object_object_add(o, "layer", json_object_new_string(policy_layer_name(r->layer)));
		json_object_object_add(o, "kind", json_object_new_string(r->kind == RULE_DENY ? "deny"
									 : r->kind == RULE_CEILING ? "ceiling" : "allow"));
		json_object_array_add(rules, o);
	}
	json_object_object_add(root, "rules", rules);
	rules = NULL;
	if (policy_inspect_serialize(p, root) < 0)
		goto out;
	const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	out = s ? strdup(s) : NULL;
out:
	json_object_put(rules);
	json_object_put(opts);
	json_object_put(root);
	return out;
}
