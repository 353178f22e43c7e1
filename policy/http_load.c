/* HTTPS inspection in the policy, read from and written to policy files: the "inspect" list's entries
 * (hosts or wildcards, their HTTP allow and deny rules, log_query) and the credentials the proxy adds to
 * a host's requests, checked like the rest of parse.c with file:line:col, and their serialisation (what
 * sluiced and the engine receive). http_rules.c decides requests by what is loaded here.
 *
 * Secrets are read here, in the process that loads the file (the launcher, as the launching user); the
 * serialised policy carries them to sluiced and the engine, never into the sandbox. A project policy
 * (shipped with untrusted code) cannot name a credential. Path patterns are normalised by the same
 * normaliser as request paths (policy_path_normalize), so a rule and a request compare like with like. */
#include "policy_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_MAX      4096 /* a credential's secret */
#define RULES_PER_ENTRY 256

/* ---- loading ---- */

static bool is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
			return false;
	return true;
}

static bool is_env_name(const char *s)
{
	if (!*s || isdigit((unsigned char)*s))
		return false;
	for (; *s; s++)
		if (!(isalnum((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

static bool is_field_value(const char *s)
{
	for (; *s; s++)
		if (((unsigned char)*s < 0x20 && *s != '\t') || *s == 0x7f)
			return false;
	return true;
}

/* Parses and normalises a path pattern into the arena. */
static const char *load_pattern(const struct jctx *c, const char *path, const char *text)
{
	char norm[POLICY_PATTERN_MAX + 8];
	size_t qoff;
	enum policy_path_err pe;

	if (text[0] != '/') {
		policy_jfail(c, path, "a path pattern starts with '/' (\"%.64s\")", text);
		return NULL;
	}
	if (strlen(text) > POLICY_PATTERN_MAX) {
		policy_jfail(c, path, "path pattern longer than %d bytes", POLICY_PATTERN_MAX);
		return NULL;
	}
	if (strchr(text, '?')) {
		policy_jfail(c, path, "a path pattern has no query: match a query parameter with \"query\": \"name=value\"");
		return NULL;
	}
	pe = policy_path_normalize(text, strlen(text), false, norm, sizeof norm, &qoff);
	if (pe != POLICY_PATH_OK) {
		policy_jfail(c, path, "path pattern \"%.64s\": %s", text, policy_path_strerror(pe));
		return NULL;
	}
	const char *s = policy_arena_strndup(&c->b->arena, norm, strlen(norm));
	if (!s)
		policy_jfail(c, path, "out of memory");
	return s;
}

static int parse_methods(const struct jctx *c, const char *path, const char *list, size_t len, unsigned *out)
{
	size_t i = 0;

	while (i < len) {
		size_t j = i;
		while (j < len && list[j] != ',')
			j++;
		unsigned bit = policy_method_from_name(list + i, j - i);
		if (!bit || bit == POLICY_M_OTHER)
			return policy_jfail(c, path, "unknown method \"%.*s\" (GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE)",
					    (int)(j - i > 32 ? 32 : j - i), list + i);
		*out |= bit;
		i = j + 1;
	}
	return 0;
}

/* "GLOB" or "METHOD[,METHOD...] GLOB", or {"methods": [...], "path"|"prefix": ..., "query": ...}. */
static int load_rule(const struct jctx *c, const char *path, json_object *v, bool deny, struct policy_http_rule *r)
{
	char sub[700];

	memset(r, 0, sizeof *r);
	r->deny = deny;
	if (json_object_is_type(v, json_type_string)) {
		const char *t = json_object_get_string(v), *sp = strchr(t, ' ');
		if (sp) {
			if (parse_methods(c, path, t, (size_t)(sp - t), &r->methods) < 0)
				return -EINVAL;
			t = sp + 1;
		}
		if (!(r->path = load_pattern(c, path, t)))
			return -EINVAL;
	} else if (json_object_is_type(v, json_type_object)) {
		json_object *pathv = NULL, *prefixv = NULL;
		json_object_object_foreach(v, key, val) {
			snprintf(sub, sizeof sub, "%s/%s", path, key);
			if (strcmp(key, "path") == 0)
				pathv = val;
			else if (strcmp(key, "prefix") == 0)
				prefixv = val;
			else if (strcmp(key, "methods") == 0) {
				if (!json_object_is_type(val, json_type_array) || json_object_array_length(val) == 0)
					return policy_jfail(c, sub, "\"methods\" must be a non-empty list such as [\"GET\", \"HEAD\"]");
				for (size_t i = 0; i < json_object_array_length(val); i++) {
					json_object *m = json_object_array_get_idx(val, i);
					char msub[720];
					snprintf(msub, sizeof msub, "%s/%zu", sub, i);
					if (!json_object_is_type(m, json_type_string))
						return policy_jfail(c, msub, "a method is a string such as \"GET\"");
					const char *ms = json_object_get_string(m);
					if (!*ms || strchr(ms, ',') ||
					    parse_methods(c, msub, ms, strlen(ms), &r->methods) < 0)
						return policy_jfail(c, msub, "unknown method \"%.32s\"", ms);
				}
			} else if (strcmp(key, "query") == 0) {
				if (!json_object_is_type(val, json_type_string) || !*json_object_get_string(val) ||
				    !is_field_value(json_object_get_string(val)) || strlen(json_object_get_string(val)) > 256)
					return policy_jfail(c, sub, "\"query\" is one parameter, \"name=value\" or \"name\"");
				r->query = policy_arena_strndup(&c->b->arena, json_object_get_string(val),
								 strlen(json_object_get_string(val)));
				if (!r->query)
					return policy_jfail(c, sub, "out of memory");
			} else if (c->compiled && strcmp(key, "where") == 0) {
				if (!json_object_is_type(val, json_type_string) || !*json_object_get_string(val) ||
				    strlen(json_object_get_string(val)) >= POLICY_WHERE_MAX || !is_field_value(json_object_get_string(val)))
					return policy_jfail(c, sub, "bad \"where\"");
				r->where = policy_arena_strndup(&c->b->arena, json_object_get_string(val),
								strlen(json_object_get_string(val)));
				if (!r->where)
					return policy_jfail(c, sub, "out of memory");
			} else if (strcmp(key, "comment") != 0) {
				return policy_jfail(c, strcat(sub, "#key"), "unknown key \"%s\" in an HTTP rule (methods, path, prefix, query, comment)", key);
			}
		}
		if (!!pathv == !!prefixv)
			return policy_jfail(c, path, "an HTTP rule needs exactly one of \"path\" (a glob) and \"prefix\"");
		snprintf(sub, sizeof sub, "%s/%s", path, pathv ? "path" : "prefix");
		json_object *pv = pathv ? pathv : prefixv;
		if (!json_object_is_type(pv, json_type_string))
			return policy_jfail(c, sub, "a path pattern is a string such as \"/myorg/**\"");
		r->prefix = prefixv != NULL;
		if (r->prefix && strchr(json_object_get_string(pv), '*'))
			return policy_jfail(c, sub, "a \"prefix\" has no '*': use \"path\" for a glob");
		if (!(r->path = load_pattern(c, sub, json_object_get_string(pv))))
			return -EINVAL;
	} else {
		return policy_jfail(c, path, "an HTTP rule is a string (\"GET /myorg/**\") or an object "
				    "({\"methods\": [...], \"path\": ..., \"query\": ...})");
	}
	if (!r->where && !(r->where = policy_json_where(c, path)))
		return policy_jfail(c, path, "out of memory");
	return 0;
}

/* Reads the secret from a file (as the loading user) or the loader's environment. */
static int read_secret(const struct jctx *c, const char *path, const char *file, const char *env, char *out,
		       size_t outlen)
{
	size_t n = 0;

	if (env) {
		const char *v = getenv(env);
		if (!v || !*v)
			return policy_jfail(c, path, "the credential's secret comes from the environment variable %s, "
					    "which is not set: export it before starting sluice", env);
		n = strlen(v);
		if (n >= outlen)
			return policy_jfail(c, path, "the secret in %s is longer than %zu bytes", env, outlen - 1);
		memcpy(out, v, n + 1);
	} else {
		char full[4096];
		const char *home = getenv("HOME");
		if (strncmp(file, "~/", 2) == 0 && home && *home)
			snprintf(full, sizeof full, "%s/%s", home, file + 2);
		else if (file[0] == '/')
			snprintf(full, sizeof full, "%s", file);
		else
			return policy_jfail(c, path, "\"secret_file\" must be an absolute path or start with ~/");
		int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
		if (fd < 0)
			return policy_jfail(c, path, "cannot read the credential's secret file %s: %s", full, strerror(errno));
		ssize_t r;
		while (n < outlen - 1 && (r = read(fd, out + n, outlen - 1 - n)) > 0)
			n += (size_t)r;
		close(fd);
		out[n] = '\0';
		while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
			out[--n] = '\0';
		if (n == 0)
			return policy_jfail(c, path, "the credential's secret file %s is empty", full);
	}
	if (!is_field_value(out) || strlen(out) != n)
		return policy_jfail(c, path, "the credential's secret has a control byte (it must fit in an HTTP header)");
	return 0;
}

static int load_credential(const struct jctx *c, const char *path, json_object *v, struct policy_credential *cr)
{
	char sub[700], secret[SECRET_MAX + 1], value[SECRET_MAX + 1024];
	json_object *hdr = NULL, *senv = NULL, *sfile = NULL, *sval = NULL, *ph = NULL, *phenv = NULL, *cwhere = NULL;
	int rc = -EINVAL;

	if (c->layer == POLICY_LAYER_PROJECT && !c->compiled)
		return policy_jfail(c, path, "a project policy cannot name a credential (it ships with the code it would "
				    "hand the secret to): put it in your user policy (~/.config/sluice/policy.json)");
	if (!json_object_is_type(v, json_type_object))
		return policy_jfail(c, path, "\"credential\" is an object: {\"header\": \"Authorization: Bearer {secret}\", "
				    "\"secret_env\": \"NAME\" or \"secret_file\": \"~/.token\", \"placeholder_env\": \"NAME\"}");
	json_object_object_foreach(v, key, val) {
		snprintf(sub, sizeof sub, "%s/%s", path, key);
		json_object **slot = strcmp(key, "header") == 0           ? &hdr
				     : strcmp(key, "secret_env") == 0      ? &senv
				     : strcmp(key, "secret_file") == 0     ? &sfile
				     : strcmp(key, "placeholder_env") == 0 ? &phenv
				     : c->compiled && strcmp(key, "secret") == 0      ? &sval
				     : c->compiled && strcmp(key, "placeholder") == 0 ? &ph
				     : c->compiled && strcmp(key, "where") == 0       ? &cwhere
										      : NULL;
		if (!slot && strcmp(key, "comment") == 0)
			continue;
		if (!slot)
			return policy_jfail(c, strcat(sub, "#key"), "unknown key \"%s\" in a credential (header, secret_env, secret_file, "
					    "placeholder_env)", key);
		if (!json_object_is_type(val, json_type_string))
			return policy_jfail(c, sub, "\"%s\" must be a string", key);
		*slot = val;
	}
	snprintf(sub, sizeof sub, "%s/header", path);
	if (!hdr)
		return policy_jfail(c, path, "a credential needs \"header\", e.g. \"Authorization: Bearer {secret}\"");
	const char *h = json_object_get_string(hdr), *colon = strchr(h, ':');
	char name[128];
	if (!colon || (size_t)(colon - h) >= sizeof name)
		return policy_jfail(c, sub, "\"header\" is \"Name: value with {secret}\"");
	memcpy(name, h, (size_t)(colon - h));
	name[colon - h] = '\0';
	const char *tmpl = colon + 1;
	while (*tmpl == ' ' || *tmpl == '\t')
		tmpl++;
	const char *mark = strstr(tmpl, "{secret}");
	if (!is_token(name) || !is_field_value(tmpl) || !mark || strstr(mark + 1, "{secret}") ||
	    strlen(tmpl) > 1000)
		return policy_jfail(c, sub, "\"header\" is \"Name: value\" with {secret} once in the value, no control bytes");
	if (strcasecmp(name, "host") == 0 || strcasecmp(name, "content-length") == 0 ||
	    strcasecmp(name, "transfer-encoding") == 0 || strcasecmp(name, "connection") == 0)
		return policy_jfail(c, sub, "\"%s\" frames the request: a credential cannot set it", name);

	if (c->compiled) {
		if (!sval || !ph || !phenv)
			return policy_jfail(c, path, "compiled credential needs \"secret\", \"placeholder\" and \"placeholder_env\"");
		snprintf(secret, sizeof secret, "%s", json_object_get_string(sval));
		if (!is_field_value(secret) || strlen(json_object_get_string(sval)) > SECRET_MAX)
			return policy_jfail(c, path, "bad compiled secret");
	} else {
		snprintf(sub, sizeof sub, "%s/%s", path, senv ? "secret_env" : "secret_file");
		if (c->b->no_secret_reads)
			return policy_jfail(c, sub, "a credential's secret is read by the launcher, as you (sluice run sends "
			                    "it compiled); sluiced does not read \"secret_env\" or \"secret_file\" for a client");
		if (!!senv == !!sfile)
			return policy_jfail(c, path, "a credential needs exactly one of \"secret_env\" and \"secret_file\"");
		if (senv && !is_env_name(json_object_get_string(senv)))
			return policy_jfail(c, sub, "\"secret_env\" is an environment variable name");
		if (read_secret(c, sub, sfile ? json_object_get_string(sfile) : NULL,
				senv ? json_object_get_string(senv) : NULL, secret, sizeof secret) < 0)
			goto out;
	}
	const char *phe = phenv ? json_object_get_string(phenv) : senv ? json_object_get_string(senv) : NULL;
	snprintf(sub, sizeof sub, "%s/placeholder_env", path);
	if (!phe)
		return policy_jfail(c, path, "a credential with \"secret_file\" needs \"placeholder_env\": the variable "
				    "the sandbox sees the placeholder in");
	if (!is_env_name(phe) || strlen(phe) > 128)
		return policy_jfail(c, sub, "\"placeholder_env\" is an environment variable name");
	char phbuf[POLICY_PLACEHOLDER_LEN + 1];
	if (ph) {
		const char *s = json_object_get_string(ph);
		if (strlen(s) != sizeof phbuf - 1 || strncmp(s, POLICY_PLACEHOLDER_PREFIX, sizeof POLICY_PLACEHOLDER_PREFIX - 1) != 0 ||
		    !is_token(s))
			return policy_jfail(c, path, "bad compiled placeholder");
		snprintf(phbuf, sizeof phbuf, "%s", s);
	} else {
		unsigned char rnd[16];
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			return policy_jfail(c, path, "cannot make a placeholder: getrandom: %s", strerror(errno));
		int o = snprintf(phbuf, sizeof phbuf, "%s", POLICY_PLACEHOLDER_PREFIX);
		for (size_t i = 0; i < sizeof rnd; i++)
			o += snprintf(phbuf + o, sizeof phbuf - (size_t)o, "%02x", rnd[i]);
	}
	/* the value with the secret in place of {secret} */
	snprintf(value, sizeof value, "%.*s%s%s", (int)(mark - tmpl), tmpl, secret, mark + 8);
	cr->header = policy_arena_strndup(&c->b->arena, name, strlen(name));
	cr->value = policy_arena_strndup(&c->b->arena, value, strlen(value));
	cr->placeholder = policy_arena_strndup(&c->b->arena, phbuf, strlen(phbuf));
	cr->placeholder_env = policy_arena_strndup(&c->b->arena, phe, strlen(phe));
	if (cwhere && *json_object_get_string(cwhere) && strlen(json_object_get_string(cwhere)) < POLICY_WHERE_MAX &&
	    is_field_value(json_object_get_string(cwhere)))
		cr->where = policy_arena_strndup(&c->b->arena, json_object_get_string(cwhere), strlen(json_object_get_string(cwhere)));
	else
		cr->where = policy_json_where(c, path);
	if (!cr->header || !cr->value || !cr->placeholder || !cr->placeholder_env || !cr->where)
		rc = policy_jfail(c, path, "out of memory");
	else
		rc = 0;
out:
	explicit_bzero(secret, sizeof secret);
	explicit_bzero(value, sizeof value);
	return rc;
}

static int push_entry(struct policy_builder *b, const struct policy_inspect *e)
{
	if (b->ninspects == b->capinspects) {
		size_t cap = b->capinspects ? b->capinspects * 2 : 8;
		if (cap > 4096)
			return -E2BIG;
		struct policy_inspect *n = realloc(b->inspects, cap * sizeof *n);
		if (!n)
			return -ENOMEM;
		b->inspects = n;
		b->capinspects = cap;
	}
	b->inspects[b->ninspects++] = *e;
	return 0;
}

static int load_entry(const struct jctx *c, const char *path, json_object *v)
{
	struct policy_inspect e = { .layer = c->layer };
	struct policy_rule pr = { 0 };
	char sub[600], why[POLICY_ERR_MAX];
	json_object *host = NULL, *allow = NULL, *deny = NULL, *cred = NULL;

	if (!json_object_is_type(v, json_type_object))
		return policy_jfail(c, path, "an inspect entry is an object: {\"host\": \"github.com\", \"allow\": [...], "
				    "\"deny\": [...]}");
	json_object_object_foreach(v, key, val) {
		snprintf(sub, sizeof sub, "%s/%s", path, key);
		if (strcmp(key, "host") == 0)
			host = val;
		else if (strcmp(key, "allow") == 0)
			allow = val;
		else if (strcmp(key, "deny") == 0)
			deny = val;
		else if (strcmp(key, "credential") == 0)
			cred = val;
		else if (strcmp(key, "log_query") == 0) {
			if (!json_object_is_type(val, json_type_boolean))
				return policy_jfail(c, sub, "\"log_query\" must be true or false");
			e.log_query = json_object_get_boolean(val);
		} else if (strcmp(key, "comment") == 0 || (c->compiled && (strcmp(key, "where") == 0 || strcmp(key, "layer") == 0)))
			;
		else
			return policy_jfail(c, strcat(sub, "#key"), "unknown key \"%s\" in an inspect entry (host, allow, deny, credential, "
					    "log_query, comment)", key);
	}
	snprintf(sub, sizeof sub, "%s/host", path);
	if (!host || !json_object_is_type(host, json_type_string))
		return policy_jfail(c, host ? sub : path, "an inspect entry needs \"host\": a name or *.domain");
	const char *ht = json_object_get_string(host);
	if (strchr(ht, ':'))
		return policy_jfail(c, sub, "\"host\" takes a name only: inspection applies on every port the host is allowed on");
	if (policy_parse_pattern(c->b, ht, &pr, why, sizeof why) < 0)
		return policy_jfail(c, sub, "%s", why);
	e.pattern = pr.pattern;
	e.suffix = pr.suffix;
	e.wild = pr.pat == PAT_WILDCARD;
	if (c->compiled) {
		json_object *w, *l;
		if (!json_object_object_get_ex(v, "where", &w) || !json_object_is_type(w, json_type_string) ||
		    !json_object_object_get_ex(v, "layer", &l) || !json_object_is_type(l, json_type_string) ||
		    strlen(json_object_get_string(w)) >= POLICY_WHERE_MAX || !is_field_value(json_object_get_string(w)))
			return policy_jfail(c, path, "compiled inspect entry needs string \"where\" and \"layer\"");
		e.where = policy_arena_strndup(&c->b->arena, json_object_get_string(w), strlen(json_object_get_string(w)));
		e.layer = c->layer;
		for (int l2 = 0; l2 < POLICY_LAYER_COUNT; l2++)
			if (strcmp(json_object_get_string(l), policy_layer_name((enum policy_layer)l2)) == 0 && l2 > (int)c->layer)
				e.layer = (enum policy_layer)l2; /* never stronger than the layer it is loaded at */
	} else {
		e.where = policy_json_where(c, path);
	}
	if (!e.where)
		return policy_jfail(c, path, "out of memory");

	size_t na = allow ? (json_object_is_type(allow, json_type_array) ? json_object_array_length(allow) : SIZE_MAX) : 0;
	size_t nd = deny ? (json_object_is_type(deny, json_type_array) ? json_object_array_length(deny) : SIZE_MAX) : 0;
	if (na == SIZE_MAX || nd == SIZE_MAX)
		return policy_jfail(c, path, "\"allow\" and \"deny\" of an inspect entry are lists of HTTP rules");
	if (na + nd > RULES_PER_ENTRY)
		return policy_jfail(c, path, "more than %d HTTP rules in one inspect entry", RULES_PER_ENTRY);
	if (na + nd) {
		e.rules = policy_arena_alloc(&c->b->arena, (na + nd) * sizeof *e.rules);
		if (!e.rules)
			return policy_jfail(c, path, "out of memory");
	}
	for (size_t i = 0; i < nd + na; i++) {
		bool is_deny = i < nd;
		size_t k = is_deny ? i : i - nd;
		snprintf(sub, sizeof sub, "%s/%s/%zu", path, is_deny ? "deny" : "allow", k);
		if (load_rule(c, sub, json_object_array_get_idx(is_deny ? deny : allow, k), is_deny, &e.rules[e.nrules]) < 0)
			return -EINVAL;
		e.nrules++;
	}
	if (cred) {
		snprintf(sub, sizeof sub, "%s/credential", path);
		if (load_credential(c, sub, cred, &e.cred) < 0)
			return -EINVAL;
	}
	int r = push_entry(c->b, &e);
	return r < 0 ? policy_jfail(c, path, "too many inspect entries") : 0;
}

int policy_inspect_load_json(const struct jctx *c, json_object *v)
{
	char sub[64];

	if (!json_object_is_type(v, json_type_array))
		return policy_jfail(c, "/inspect", "\"inspect\" must be a list of {\"host\": ..., \"allow\": [...], \"deny\": [...]}");
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		snprintf(sub, sizeof sub, "/inspect/%zu", i);
		if (load_entry(c, sub, json_object_array_get_idx(v, i)) < 0)
			return -EINVAL;
	}
	return 0;
}

/* ---- serialisation ---- */

json_object *policy_methods_json(unsigned methods)
{
	json_object *ma = json_object_new_array();

	for (unsigned bit = 1; ma && bit <= POLICY_M_TRACE; bit <<= 1)
		if (methods & bit)
			json_object_array_add(ma, json_object_new_string(policy_method_name(bit)));
	return ma;
}

static json_object *rule_json(const struct policy_http_rule *r)
{
	json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	if (r->methods)
		json_object_object_add(o, "methods", policy_methods_json(r->methods));
	json_object_object_add(o, r->prefix ? "prefix" : "path", json_object_new_string(r->path));
	if (r->query)
		json_object_object_add(o, "query", json_object_new_string(r->query));
	json_object_object_add(o, "where", json_object_new_string(r->where));
	return o;
}

int policy_inspect_serialize(const struct policy *p, json_object *root)
{
	json_object *list;

	if (!p->ninspects)
		return 0;
	if (!(list = json_object_new_array()))
		return -ENOMEM;
	for (size_t i = 0; i < p->ninspects; i++) {
		const struct policy_inspect *e = &p->inspects[i];
		json_object *o = json_object_new_object(), *al = json_object_new_array(), *dl = json_object_new_array();
		if (!o || !al || !dl) {
			json_object_put(o);
			json_object_put(al);
			json_object_put(dl);
			json_object_put(list);
			return -ENOMEM;
		}
		json_object_object_add(o, "host", json_object_new_string(e->pattern));
		json_object_object_add(o, "where", json_object_new_string(e->where));
		json_object_object_add(o, "layer", json_object_new_string(policy_layer_name(e->layer)));
		if (e->log_query)
			json_object_object_add(o, "log_query", json_object_new_boolean(true));
		for (size_t k = 0; k < e->nrules; k++)
			json_object_array_add(e->rules[k].deny ? dl : al, rule_json(&e->rules[k]));
		json_object_object_add(o, "allow", al);
		json_object_object_add(o, "deny", dl);
		if (e->cred.header) {
			json_object *c = json_object_new_object();
			char h[1200];
			/* the template is gone once loaded: the compiled form carries the finished value */
			snprintf(h, sizeof h, "%s: {secret}", e->cred.header);
			json_object_object_add(c, "header", json_object_new_string(h));
			json_object_object_add(c, "secret", json_object_new_string(e->cred.value));
			json_object_object_add(c, "placeholder", json_object_new_string(e->cred.placeholder));
			json_object_object_add(c, "placeholder_env", json_object_new_string(e->cred.placeholder_env));
			json_object_object_add(c, "where", json_object_new_string(e->cred.where));
			json_object_object_add(o, "credential", c);
		}
		json_object_array_add(list, o);
	}
	json_object_object_add(root, "inspect", list);
	return 0;
}
