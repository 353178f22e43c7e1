/* The launcher's configuration: the "sandbox" object of the layered policy files (org
 * /etc/sluice/policy.json, user ~/.config/sluice/policy.json, project .sluice/policy.json), parsed
 * with json-c, plus the value parsers shared with the command line. The policy library ignores
 * the "sandbox" key; this file ignores everything else. The organisation layer caps the others:
 * it may forbid the unsafe profile, the bypass and the network, and its limits are maxima. */
#include "sandbox.h"
#include "session.h"

#include "log.h"
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SB_CONFIG_MAX_BYTES (1 << 20)

int sb_strv_add(struct sb_strv *s, const char *str)
{
	char **nv = realloc(s->v, (s->n + 2) * sizeof *nv);
	if (!nv)
		return -ENOMEM;
	s->v = nv;
	if (!(s->v[s->n] = strdup(str)))
		return -ENOMEM;
	s->n++;
	s->v[s->n] = NULL;
	return 0;
}

int sb_sh_quote(const char *w, char **acc)
{
	size_t n = *acc ? strlen(*acc) : 0, add = 3;
	/* (zsh reads a bare word that begins with '=' as the path of a command: "=ls" is /usr/bin/ls) */
	bool bare = *w != '\0' && *w != '=';

	for (const char *p = w; *p; p++) {
		add += *p == '\'' || *p == '\\' ? 4 : 1;
		bare = bare && (isalnum((unsigned char)*p) || strchr("_-+=%@:,./", *p));
	}
	char *x = realloc(*acc, n + add + 1);
	if (!x)
		return -ENOMEM;
	*acc = x;
	if (n)
		x[n++] = ' ';
	if (!bare)
		x[n++] = '\'';
	/* A ' or a \ goes between two quoted runs, escaped: fish reads \' and \\ inside single quotes as
	 * escapes (sh reads nothing there), so a word ending in \ would leave fish's quote open, and the
	 * next word's ; would end the command there, outside any sandbox. '\'' and '\\' read the same in
	 * sh, bash, zsh and fish. */
	for (const char *p = w; *p; p++) {
		if (*p == '\'' || *p == '\\') {
			memcpy(x + n, *p == '\'' ? "'\\''" : "'\\\\'", 4);
			n += 4;
		} else {
			x[n++] = *p;
		}
	}
	if (!bare)
		x[n++] = '\'';
	x[n] = '\0';
	return 0;
}

bool sb_strv_contains(const struct sb_strv *s, const char *str)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i], str) == 0)
			return true;
	return false;
}

void sb_strv_clear(struct sb_strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

void sb_config_init(struct sb_config *c)
{
	memset(c, 0, sizeof *c);
	c->profile = SB_PROFILE_BASE;
	c->learn_dirfd = -1;
	c->project_mode = SB_PROJECT_OVERLAY;
	c->uid = getuid();
	c->gid = getgid();
}

const char *sb_sandbox_type_name(enum sb_sandbox_type t)
{
	switch (t) {
	case SB_TYPE_LOCAL: return "local";
	case SB_TYPE_FIREJAIL: return "firejail";
	case SB_TYPE_CONTAINER: return "container";
	case SB_TYPE_DEVCONTAINER: return "devcontainer";
	case SB_TYPE_VM: return "vm";
	}
	return "local";
}

void sb_ctr_spec_clear(struct sb_ctr_spec *spec)
{
	free(spec->image);
	free(spec->dockerfile);
	free(spec->context);
	free(spec->workspace);
	free(spec->user);
	free(spec->source);
	sb_strv_clear(&spec->env);
	sb_strv_clear(&spec->mounts);
	free(spec->post_create);
	memset(spec, 0, sizeof *spec);
}

void sb_config_clear(struct sb_config *c)
{
	sb_ctr_spec_clear(&c->ctr);
	free(c->project_dir);
	free(c->home);
	free(c->audit_log);
	free(c->learn_file);
	if (c->learn_dirfd >= 0)
		close(c->learn_dirfd);
	free(c->hostname);
	free(c->run_opt_secret);
	free(c->vm_kernel);
	free(c->vm_initrd);
	sb_strv_clear(&c->writable_paths);
	sb_strv_clear(&c->plugin_paths);
	sb_strv_clear(&c->env_keep);
	sb_strv_clear(&c->env_set);
	sb_strv_clear(&c->protected_paths);
	sb_strv_clear(&c->masks);
	sb_strv_clear(&c->org_masks);
	sb_strv_clear(&c->unmask);
	sb_strv_clear(&c->fs_read);
	sb_strv_clear(&c->policies);
	sb_strv_clear(&c->allows);
	for (size_t i = 0; i < c->n_binds; i++) {
		free(c->binds[i].src);
		free(c->binds[i].dst);
	}
	free(c->binds);
	memset(c, 0, sizeof *c);
}

/* "512M", "2G", "1048576", "1.5G" -> bytes. Suffixes K, M, G, T (powers of 1024), optional "B"/"iB". */
int sb_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;

	if (!s || !*s || !(isdigit((unsigned char)*s) || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || v < 0)
		return -EINVAL;
	double mul = 1;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		mul = 1024.0;
		end++;
		break;
	case 'M':
		mul = 1024.0 * 1024;
		end++;
		break;
	case 'G':
		mul = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 'T':
		mul = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	default: break;
	}
	if (mul > 1 && toupper((unsigned char)end[0]) == 'I' && toupper((unsigned char)end[1]) == 'B')
		end += 2;
	else if (toupper((unsigned char)*end) == 'B')
		end++;
	if (*end)
		return -EINVAL;
	v *= mul;
	if (v < 1 || v > (double)(UINT64_MAX / 2))
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* "2" or "0.5" cores -> millicores (at least 10). */
int sb_parse_cpu(const char *s, uint64_t *millicores)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || v != v)
		return -EINVAL;
	if (v < 0.01 || v > 4096)
		return -ERANGE;
	*millicores = (uint64_t)(v * 1000 + 0.5);
	return 0;
}

/* "MAJ:MIN:RATE" (RATE with size suffixes) or "/dev/NAME:RATE". */
int sb_parse_io(const char *s, unsigned *maj, unsigned *min, uint64_t *bps)
{
	const char *rate;
	struct stat st;

	if (!s)
		return -EINVAL;
	if (s[0] == '/') {
		rate = strrchr(s, ':');
		if (!rate)
			return -EINVAL;
		char dev[PATH_MAX];
		size_t n = (size_t)(rate - s);
		if (n >= sizeof dev)
			return -ENAMETOOLONG;
		memcpy(dev, s, n);
		dev[n] = '\0';
		if (stat(dev, &st) < 0)
			return -errno;
		if (!S_ISBLK(st.st_mode))
			return -ENOTBLK;
		*maj = major(st.st_rdev);
		*min = minor(st.st_rdev);
		rate++;
	} else {
		char *end;
		unsigned long a, b;
		errno = 0;
		a = strtoul(s, &end, 10);
		if (errno || *end != ':' || end == s)
			return -EINVAL;
		const char *p = end + 1;
		b = strtoul(p, &end, 10);
		if (errno || *end != ':' || end == p || a > 4095 || b > 1048575)
			return -EINVAL;
		*maj = (unsigned)a;
		*min = (unsigned)b;
		rate = end + 1;
	}
	return sb_parse_size(rate, bps);
}

char *sb_expand_home(const char *path, const char *home)
{
	char *r = NULL;

	if (path[0] == '~' && (path[1] == '/' || path[1] == '\0')) {
		if (!home)
			return NULL;
		if (asprintf(&r, "%s%s", home, path + 1) < 0)
			return NULL;
		return r;
	}
	return strdup(path);
}

/* ---- the "sandbox" object ---- */

static int cfg_err(char *err, size_t errlen, const char *name, const char *key, const char *what)
{
	snprintf(err, errlen, "%s: sandbox.%s: %s", name, key, what);
	return -EINVAL;
}

static int cfg_strlist(struct sb_strv *dst, json_object *arr, const char *name, const char *key, const char *home,
                       bool expand, bool absolute, char *err, size_t errlen)
{
	if (!json_object_is_type(arr, json_type_array))
		return cfg_err(err, errlen, name, key, "must be an array of strings");
	size_t n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *e = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(e, json_type_string))
			return cfg_err(err, errlen, name, key, "must be an array of strings");
		const char *v = json_object_get_string(e);
		cleanup_free char *x = expand ? sb_expand_home(v, home) : strdup(v);
		if (!x)
			return cfg_err(err, errlen, name, key,
			               "cannot expand '~' (no home directory) or out of memory");
		if (absolute && x[0] != '/')
			return cfg_err(err, errlen, name, key, "paths must be absolute or start with ~/");
		if (!*x || strlen(x) >= PATH_MAX)
			return cfg_err(err, errlen, name, key, "empty or over-long entry");
		if (!sb_strv_contains(dst, x) && sb_strv_add(dst, x) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int cfg_limit_str(json_object *v, char *buf, size_t len)
{
	if (json_object_is_type(v, json_type_string))
		util_strlcpy(buf, json_object_get_string(v), len);
	else if (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
		snprintf(buf, len, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
	else
		return -EINVAL;
	return 0;
}

/* Org limits are maxima: a lower layer (or the command line, applied in main.c) may only ask for
 * less. The project layer may only lower what the user layer set. */
static void cap_limit(uint64_t *cur, uint64_t v, enum sb_cfg_layer layer, uint64_t *org_cap)
{
	if (layer == SB_CFG_ORG) {
		*org_cap = v;
		*cur = v;
		return;
	}
	if (*org_cap && v > *org_cap)
		v = *org_cap;
	if (layer == SB_CFG_PROJECT && *cur && v > *cur)
		v = *cur;
	*cur = v;
}

/* Per-process org caps (the launcher loads one configuration per process). */
static struct sb_limits org_caps;

const struct sb_limits *sb_config_org_caps(void)
{
	return &org_caps;
}

static int cfg_limits(struct sb_config *c, json_object *lim, const char *name, enum sb_cfg_layer layer, char *err,
                      size_t errlen)
{
	char buf[64];
	uint64_t v;

	if (!json_object_is_type(lim, json_type_object))
		return cfg_err(err, errlen, name, "limits", "must be an object");
	json_object_object_foreach(lim, key, val)
	{
		if (cfg_limit_str(val, buf, sizeof buf) < 0)
			return cfg_err(err, errlen, name, "limits", "values must be numbers or strings");
		if (strcmp(key, "cpu") == 0) {
			if (sb_parse_cpu(buf, &v) < 0)
				return cfg_err(err, errlen, name, "limits.cpu",
				               "want a number of cores such as 2 or 0.5");
			cap_limit(&c->limits.cpu_millicores, v, layer, &org_caps.cpu_millicores);
		} else if (strcmp(key, "memory") == 0) {
			if (sb_parse_size(buf, &v) < 0)
				return cfg_err(err, errlen, name, "limits.memory", "want a size such as 512M or 4G");
			cap_limit(&c->limits.memory_bytes, v, layer, &org_caps.memory_bytes);
		} else if (strcmp(key, "disk") == 0) {
			if (sb_parse_size(buf, &v) < 0 || v < SB_DISK_MIN)
				return cfg_err(err, errlen, name, "limits.disk", "want a size of at least 1M such as 2G");
			/* unset is not unlimited but the default size (2 GiB or half the memory: a tmpfs), which
			 * a project file may lower, never raise */
			if (layer == SB_CFG_PROJECT && !c->limits.disk_bytes && v > sb_scratch_size(c))
				v = sb_scratch_size(c);
			cap_limit(&c->limits.disk_bytes, v, layer, &org_caps.disk_bytes);
		} else if (strcmp(key, "pids") == 0) {
			char *end;
			errno = 0;
			v = strtoull(buf, &end, 10);
			if (errno || *end || v == 0 || v > 4194304)
				return cfg_err(err, errlen, name, "limits.pids", "want a count between 1 and 4194304");
			cap_limit(&c->limits.pids, v, layer, &org_caps.pids);
		} else if (strcmp(key, "timeout") == 0) {
			char *end;
			errno = 0;
			v = strtoull(buf, &end, 10);
			if (errno || *end || v == 0 || v > UINT_MAX)
				return cfg_err(err, errlen, name, "limits.timeout",
				               "want seconds (a positive integer)");
			uint64_t t = c->limits.timeout_s, cap = org_caps.timeout_s;
			cap_limit(&t, v, layer, &cap);
			c->limits.timeout_s = (unsigned)t;
			org_caps.timeout_s = (unsigned)cap;
		} else {
			return cfg_err(err, errlen, name, "limits",
			               "unknown key (known: cpu, memory, pids, timeout, disk)");
		}
	}
	return 0;
}

/* Mask paths are compared as text: each is normalised ("//", "/./", "..", a trailing "/") first. */
static int cfg_mask_list(struct sb_strv *dst, json_object *val, const char *name, const char *key, const char *home,
                         char *err, size_t errlen)
{
	struct sb_strv v = {0};
	char norm[PATH_MAX];
	int r = cfg_strlist(&v, val, name, key, home, true, true, err, errlen);
	for (size_t i = 0; r == 0 && i < v.n; i++) {
		if (sb_normalize_abs(v.v[i], norm, sizeof norm) < 0 || strcmp(norm, "/") == 0)
			r = cfg_err(err, errlen, name, key, "\"/\" cannot be masked");
		else if (!sb_strv_contains(dst, norm))
			r = sb_strv_add(dst, norm);
	}
	sb_strv_clear(&v);
	return r;
}

/* "unmask": takes default or user-layer masks off (a user who keeps no secret there, or who wants
 * ~/.npmrc's settings: docs/sandbox.md). The organisation's own masks stay. */
static int cfg_unmask(struct sb_config *c, json_object *val, const char *name, enum sb_cfg_layer layer, char *err,
                      size_t errlen)
{
	struct sb_strv v = {0};
	int r = cfg_mask_list(&v, val, name, "unmask", c->home, err, errlen);
	for (size_t i = 0; r == 0 && i < v.n; i++) {
		if (layer != SB_CFG_ORG && sb_strv_contains(&c->org_masks, v.v[i])) {
			char what[PATH_MAX + 96];
			snprintf(what, sizeof what, "%s is masked by the organisation (/etc/sluice); it stays masked",
			         v.v[i]);
			r = cfg_err(err, errlen, name, "unmask", what);
		} else if (!sb_strv_contains(&c->unmask, v.v[i])) {
			r = sb_strv_add(&c->unmask, v.v[i]);
		}
	}
	sb_strv_clear(&v);
	return r;
}

static int cfg_bool(json_object *v, bool *out)
{
	if (!json_object_is_type(v, json_type_boolean))
		return -EINVAL;
	*out = json_object_get_boolean(v);
	return 0;
}

/* "BASE:COUNT": the uids a root launch may run sessions as; none may be 0 or overflow 32 bits. */
static int cfg_uid_range(struct sb_config *c, json_object *v, const char *name, char *err, size_t errlen)
{
	const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
	char *end;
	errno = 0;
	unsigned long long base = strtoull(s, &end, 10), count = 0;
	if (!errno && end != s && *end == ':') {
		const char *p = end + 1;
		count = strtoull(p, &end, 10);
		if (errno || end == p || *end)
			count = 0;
	}
	if (count == 0 || base == 0 || base + count - 1 >= 0xfffffffeull)
		return cfg_err(err, errlen, name, "root_uid_range",
		               "want \"BASE:COUNT\" (uids BASE to BASE+COUNT-1, not 0, below 4294967294)");
	c->root_uid_base = (uid_t)base;
	c->root_uid_count = (uint32_t)count;
	return 0;
}

void sb_text_position(const char *text, size_t len, size_t off, size_t *line, size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < len; i++) {
		if (text[i] == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

int sb_json_parse(const char *name, const char *text, size_t len, struct json_object **out, char *err, size_t errlen)
{
	json_tokener *tok;
	json_object *root;

	*out = NULL;
	if (len > INT_MAX) {
		snprintf(err, errlen, "%s: file too large", name);
		return -EFBIG;
	}
	if (!(tok = json_tokener_new()))
		return -ENOMEM;
	root = json_tokener_parse_ex(tok, text, (int)len);
	if (!root || json_tokener_get_error(tok) != json_tokener_success || json_tokener_get_parse_end(tok) < len) {
		/* The line and column of the offending byte for the message. */
		size_t line, col;
		sb_text_position(text, len, json_tokener_get_parse_end(tok), &line, &col);
		snprintf(err, errlen, "%s:%zu:%zu: invalid JSON: %s", name, line, col,
		         json_tokener_get_error(tok) == json_tokener_success
		                 ? "unexpected data after the end"
		                 : json_tokener_error_desc(json_tokener_get_error(tok)));
		json_object_put(root);
		json_tokener_free(tok);
		return -EINVAL;
	}
	json_tokener_free(tok);
	*out = root;
	return 0;
}

int sb_config_load_json(struct sb_config *c, const char *name, const char *text, size_t len, enum sb_cfg_layer layer,
                        char *err, size_t errlen)
{
	json_object *root = NULL, *sb;
	int r;

	if ((r = sb_json_parse(name, text, len, &root, err, errlen)) < 0)
		return r;
	if (!json_object_is_type(root, json_type_object)) {
		snprintf(err, errlen, "%s: the top level must be a JSON object", name);
		r = -EINVAL;
		goto out;
	}
	if (!json_object_object_get_ex(root, "sandbox", &sb))
		goto out; /* this file has no sandbox settings */
	if (!json_object_is_type(sb, json_type_object)) {
		r = cfg_err(err, errlen, name, "", "\"sandbox\" must be an object");
		goto out;
	}
	json_object_object_foreach(sb, key, val)
	{
		/* A repository's own .sluice/policy.json must not widen its sandbox: no host paths, no
		 * environment pass-through (it could name a secret), no looser profile. */
		if (layer == SB_CFG_PROJECT &&
		    (strcmp(key, "writable_paths") == 0 || strcmp(key, "plugin_paths") == 0 ||
		     strcmp(key, "env") == 0 || strcmp(key, "unmask") == 0)) {
			r = cfg_err(err, errlen, name, key,
			            "a project file may not widen the sandbox; set it in ~/.config/sluice/policy.json");
			goto out;
		}
		if (sb_fsmode_config_key(c, key, val, (int)layer, name, &r, err, errlen)) {
			/* --fs and its allow-list: fsmode.c */
		} else if (strcmp(key, "profile") == 0) {
			enum sb_profile prev_profile = c->profile;
			const char *p = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
			if (strcmp(p, "base") == 0)
				c->profile = SB_PROFILE_BASE;
			else if (strcmp(p, "plugin") == 0)
				c->profile = SB_PROFILE_PLUGIN;
			else if (strcmp(p, "unsafe") == 0)
				c->profile = SB_PROFILE_UNSAFE;
			else
				r = cfg_err(err, errlen, name, "profile", "must be \"base\", \"plugin\" or \"unsafe\"");
			if (r == 0 && layer == SB_CFG_PROJECT && c->profile > prev_profile) {
				c->profile = prev_profile;
				r = cfg_err(err, errlen, name, "profile",
				            "a project file may only choose a tighter profile than the user's");
			}
		} else if (strcmp(key, "writable_paths") == 0) {
			r = cfg_strlist(&c->writable_paths, val, name, key, c->home, true, true, err, errlen);
		} else if (strcmp(key, "protected_paths") == 0) {
			/* every layer may add (a narrowing); none removes the defaults */
			r = cfg_strlist(&c->protected_paths, val, name, key, NULL, false, false, err, errlen);
			for (size_t i = 0; r == 0 && i < c->protected_paths.n; i++)
				if (strstr(c->protected_paths.v[i], "..") || strcmp(c->protected_paths.v[i], "/") == 0)
					r = cfg_err(err, errlen, name, key,
					            "patterns are project-relative, without \"..\"");
		} else if (strcmp(key, "masks") == 0) {
			/* every layer may add (a narrowing); the organisation's cannot be taken off */
			r = cfg_mask_list(&c->masks, val, name, key, c->home, err, errlen);
			if (r == 0 && layer == SB_CFG_ORG)
				r = cfg_mask_list(&c->org_masks, val, name, key, c->home, err, errlen);
		} else if (strcmp(key, "unmask") == 0) {
			r = cfg_unmask(c, val, name, layer, err, errlen);
		} else if (strcmp(key, "plugin_paths") == 0) {
			r = cfg_strlist(&c->plugin_paths, val, name, key, c->home, true, true, err, errlen);
		} else if (strcmp(key, "env") == 0) {
			r = cfg_strlist(&c->env_keep, val, name, key, NULL, false, false, err, errlen);
		} else if (strcmp(key, "limits") == 0) {
			r = cfg_limits(c, val, name, layer, err, errlen);
		} else if (strcmp(key, "hostname") == 0) {
			const char *h = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
			if (!*h || strlen(h) > 64)
				r = cfg_err(err, errlen, name, key, "must be a string of 1 to 64 bytes");
			else {
				free(c->hostname);
				c->hostname = strdup(h);
			}
		} else if (strcmp(key, "allow_unsafe") == 0 || strcmp(key, "allow_no_sandbox") == 0 ||
		           strcmp(key, "allow_network") == 0 || strcmp(key, "allow_keep_root_uid") == 0 ||
		           strcmp(key, "allow_masked_binds") == 0) {
			bool b;
			if (layer != SB_CFG_ORG)
				r = cfg_err(err, errlen, name, key,
				            "only the organisation file (/etc/sluice) may set it");
			else if (cfg_bool(val, &b) < 0)
				r = cfg_err(err, errlen, name, key, "must be true or false");
			else if (strcmp(key, "allow_unsafe") == 0)
				c->org_forbid_unsafe = !b;
			else if (strcmp(key, "allow_no_sandbox") == 0)
				c->org_forbid_no_sandbox = !b;
			else if (strcmp(key, "allow_keep_root_uid") == 0)
				c->org_forbid_keep_root_uid = !b;
			else if (strcmp(key, "allow_masked_binds") == 0)
				c->org_allow_masked_binds = b;
			else
				c->org_forbid_network = !b;
		} else if (strcmp(key, "root_uid_range") == 0) {
			r = layer != SB_CFG_ORG ? cfg_err(err, errlen, name, key,
			                                  "only the organisation file (/etc/sluice) may set it")
			                        : cfg_uid_range(c, val, name, err, errlen);
		} else {
			r = cfg_err(err, errlen, name, key,
			            "unknown key (known: profile, fs, fs_read, writable_paths, plugin_paths, protected_paths, masks, "
			            "unmask, env, "
			            "limits, hostname, "
			            "allow_unsafe, allow_no_sandbox, allow_network, allow_keep_root_uid, "
			            "allow_masked_binds, allow_fs_remember, fs_read_fixed, "
			            "root_uid_range)");
		}
		if (r < 0)
			goto out;
	}
out:
	json_object_put(root);
	return r;
}

int sb_config_load_file(struct sb_config *c, const char *path, enum sb_cfg_layer layer, char *err, size_t errlen)
{
	cleanup_fd int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	cleanup_free char *buf = NULL;
	struct stat st;
	size_t len = 0;

	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -EINVAL;
	}
	/* An organisation file anyone can edit caps nothing: refuse it (same rule as the policy). */
	if (layer == SB_CFG_ORG && (st.st_uid != 0 || (st.st_mode & 022))) {
		snprintf(err, errlen, "%s: refusing an organisation file not owned by root or writable by others",
		         path);
		return -EPERM;
	}
	if (st.st_size > SB_CONFIG_MAX_BYTES) {
		snprintf(err, errlen, "%s: larger than %d bytes", path, SB_CONFIG_MAX_BYTES);
		return -EFBIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s: read: %s", path, strerror(errno));
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return sb_config_load_json(c, path, buf, len, layer, err, errlen);
}

int sb_config_load_layers(struct sb_config *c, const char *sysconfdir, char *err, size_t errlen)
{
	char path[PATH_MAX];
	const char *xdg = getenv("XDG_CONFIG_HOME");
	int r;

	snprintf(path, sizeof path, "%s/policy.json", sysconfdir);
	if ((r = sb_config_load_file(c, path, SB_CFG_ORG, err, errlen)) < 0)
		return r;
	if (xdg && xdg[0] == '/')
		snprintf(path, sizeof path, "%s/sluice/policy.json", xdg);
	else if (c->home)
		snprintf(path, sizeof path, "%s/.config/sluice/policy.json", c->home);
	else
		path[0] = '\0';
	if (path[0] && (r = sb_config_load_file(c, path, SB_CFG_USER, err, errlen)) < 0)
		return r;
	if (c->project_dir) {
		snprintf(path, sizeof path, "%s/.sluice/policy.json", c->project_dir);
		if ((r = sb_config_load_file(c, path, SB_CFG_PROJECT, err, errlen)) < 0)
			return r;
	}
	return 0;
}
