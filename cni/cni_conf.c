/* Parsing of the CNI network configuration and CNI_ARGS (cni_conf.h). */
#include "cni_conf.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONF_MAX (1u << 20) /* a network configuration larger than 1 MiB is refused */
#define CONF_DEPTH 64

const char *const cni_supported_versions[] = {"1.0.0", NULL};

bool cni_version_supported(const char *v)
{
	for (size_t i = 0; cni_supported_versions[i]; i++)
		if (strcmp(v, cni_supported_versions[i]) == 0)
			return true;
	return false;
}

int cni_fail(struct cni_err *e, enum cni_code code, const char *fmt, ...)
{
	va_list ap;

	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
	return -1;
}

char *cni_err_json(const char *cni_version, const struct cni_err *e)
{
	struct json_object *o = json_object_new_object();
	char *out = NULL;

	if (!o)
		return NULL;
	json_object_object_add(o, "cniVersion", json_object_new_string(cni_version ? cni_version : "1.0.0"));
	json_object_object_add(o, "code", json_object_new_int((int)e->code));
	json_object_object_add(o, "msg", json_object_new_string(e->msg));
	out = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return out;
}

/* A string without control bytes, of at most max bytes. */
static bool clean_str(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static int get_str(struct json_object *o, const char *key, bool required, size_t max, char **out, struct cni_err *e)
{
	struct json_object *v;

	*out = NULL;
	if (!json_object_object_get_ex(o, key, &v) || json_object_is_type(v, json_type_null)) {
		if (required)
			return cni_fail(e, CNI_E_CONFIG, "network configuration: \"%s\" is missing", key);
		return 0;
	}
	if (!json_object_is_type(v, json_type_string))
		return cni_fail(e, CNI_E_CONFIG, "network configuration: \"%s\" must be a string", key);
	/* json-c keeps embedded NULs (\u0000): the C string would be cut at one, so refuse it */
	if (strlen(json_object_get_string(v)) != (size_t)json_object_get_string_len(v) ||
	    !clean_str(json_object_get_string(v), max))
		return cni_fail(e, CNI_E_CONFIG, "network configuration: \"%s\" must be 1-%zu printable bytes", key, max);
	*out = strdup(json_object_get_string(v));
	return *out ? 0 : cni_fail(e, CNI_E_IO, "out of memory");
}

/* A preset name: what policy_builder_add_preset accepts, [a-z0-9_-]. */
static bool preset_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 63)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
			return false;
	return true;
}

int cni_policy_src_parse(struct json_object *v, const char *where, struct cni_policy_src *out, struct cni_err *e)
{
	const char *s;

	out->kind = CNI_POLICY_NONE;
	out->text = NULL;
	if (json_object_is_type(v, json_type_object)) {
		out->kind = CNI_POLICY_INLINE;
		s = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	} else if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		if (strlen(s) != (size_t)json_object_get_string_len(v) || !clean_str(s, 4095))
			return cni_fail(e, CNI_E_CONFIG, "%s: must be 1-4095 printable bytes", where);
		if (s[0] == '/')
			out->kind = CNI_POLICY_FILE;
		else if (preset_name(s))
			out->kind = CNI_POLICY_PRESET;
		else
			return cni_fail(e, CNI_E_CONFIG,
					"%s: \"%s\" is neither a preset name (like \"registries\") nor an absolute path", where, s);
	} else {
		return cni_fail(e, CNI_E_CONFIG, "%s: must be a preset name, an absolute file path or a policy object",
				where);
	}
	out->text = strdup(s);
	return out->text ? 0 : cni_fail(e, CNI_E_IO, "out of memory");
}

/* A per-container deny pattern: checked for shape here (printable, no separators), for meaning by the
 * policy library when the policy is built. */
static bool deny_pattern(const char *s)
{
	return clean_str(s, 300) && !strpbrk(s, " ;,\"\\");
}

static int parse_runtime(struct json_object *rc, struct cni_conf *c, struct cni_err *e)
{
	struct json_object *sl, *v;

	if (!json_object_is_type(rc, json_type_object))
		return cni_fail(e, CNI_E_CONFIG, "network configuration: \"runtimeConfig\" must be an object");
	if (!json_object_object_get_ex(rc, "sluice", &sl))
		return 0;
	if (!json_object_is_type(sl, json_type_object))
		return cni_fail(e, CNI_E_CONFIG, "runtimeConfig: \"sluice\" must be an object");
	json_object_object_foreach(sl, key, val) {
		if (strcmp(key, "policy") != 0 && strcmp(key, "deny") != 0)
			return cni_fail(e, CNI_E_FIELD, "runtimeConfig.sluice: unknown field \"%s\" (known: policy, deny)",
					key);
		(void)val;
	}
	if (get_str(sl, "policy", false, 63, &c->rt_policy, e) < 0)
		return cni_fail(e, CNI_E_CONFIG, "runtimeConfig.sluice.policy: must be a policy name of the network");
	if (json_object_object_get_ex(sl, "deny", &v)) {
		size_t n;

		if (!json_object_is_type(v, json_type_array))
			return cni_fail(e, CNI_E_CONFIG, "runtimeConfig.sluice.deny: must be an array of host patterns");
		n = json_object_array_length(v);
		if (n > CNI_DENY_MAX)
			return cni_fail(e, CNI_E_CONFIG, "runtimeConfig.sluice.deny: at most %d patterns", CNI_DENY_MAX);
		for (size_t i = 0; i < n; i++) {
			struct json_object *p = json_object_array_get_idx(v, i);
			const char *s = json_object_get_string(p);

			if (!json_object_is_type(p, json_type_string) ||
			    strlen(s) != (size_t)json_object_get_string_len(p) || !deny_pattern(s))
				return cni_fail(e, CNI_E_CONFIG, "runtimeConfig.sluice.deny[%zu]: must be a host pattern", i);
			if (!(c->rt_deny[c->rt_ndeny] = strdup(s)))
				return cni_fail(e, CNI_E_IO, "out of memory");
			c->rt_ndeny++;
		}
	}
	return 0;
}

int cni_conf_parse(const char *buf, size_t len, struct cni_conf *c, struct cni_err *e)
{
	struct json_tokener *tok = NULL;
	struct json_object *root = NULL, *v;
	int r = -1;

	memset(c, 0, sizeof *c);
	c->transparent = true;
	if (len == 0)
		return cni_fail(e, CNI_E_DECODE, "no network configuration on stdin");
	if (len > CONF_MAX)
		return cni_fail(e, CNI_E_DECODE, "the network configuration is larger than %u bytes", CONF_MAX);
	if (memchr(buf, '\0', len))
		return cni_fail(e, CNI_E_DECODE, "the network configuration contains a NUL byte");
	tok = json_tokener_new_ex(CONF_DEPTH);
	if (!tok)
		return cni_fail(e, CNI_E_IO, "out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	root = json_tokener_parse_ex(tok, buf, (int)len);
	if (!root || json_tokener_get_error(tok) != json_tokener_success) {
		enum json_tokener_error je = json_tokener_get_error(tok);

		cni_fail(e, CNI_E_DECODE, "the network configuration is not valid JSON (at byte %zu: %s)",
			 json_tokener_get_parse_end(tok),
			 je == json_tokener_success || je == json_tokener_continue ? "unexpected end of input"
										 : json_tokener_error_desc(je));
		goto out;
	}
	/* trailing bytes after the object (whitespace is fine) */
	for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
		if (buf[i] != ' ' && buf[i] != '\n' && buf[i] != '\t' && buf[i] != '\r') {
			cni_fail(e, CNI_E_DECODE, "the network configuration has bytes after its JSON object (at byte %zu)", i);
			goto out;
		}
	if (!json_object_is_type(root, json_type_object)) {
		cni_fail(e, CNI_E_DECODE, "the network configuration must be a JSON object");
		goto out;
	}
	if (get_str(root, "cniVersion", true, 32, &c->cni_version, e) < 0 ||
	    get_str(root, "name", true, 253, &c->name, e) < 0 || get_str(root, "type", true, 253, &c->type, e) < 0 ||
	    get_str(root, "runDir", false, 4000, &c->run_dir, e) < 0)
		goto out;
	if (!cni_version_supported(c->cni_version)) {
		cni_fail(e, CNI_E_VERSION, "CNI version \"%s\" is not supported (sluice-cni speaks 1.0.0)", c->cni_version);
		goto out;
	}
	if (c->run_dir && c->run_dir[0] != '/') {
		cni_fail(e, CNI_E_CONFIG, "network configuration: \"runDir\" must be an absolute path");
		goto out;
	}
	if (json_object_object_get_ex(root, "transparent", &v)) {
		if (!json_object_is_type(v, json_type_boolean)) {
			cni_fail(e, CNI_E_CONFIG, "network configuration: \"transparent\" must be true or false");
			goto out;
		}
		c->transparent = json_object_get_boolean(v);
	}
	if (json_object_object_get_ex(root, "policy", &v) &&
	    cni_policy_src_parse(v, "network configuration \"policy\"", &c->policy, e) < 0)
		goto out;
	if (json_object_object_get_ex(root, "policies", &v)) {
		if (!json_object_is_type(v, json_type_object)) {
			cni_fail(e, CNI_E_CONFIG, "network configuration: \"policies\" must map names to policies");
			goto out;
		}
		json_object_object_foreach(v, pname, pval) {
			struct cni_policy_src tmp;
			char where[128];

			if (!preset_name(pname)) {
				cni_fail(e, CNI_E_CONFIG, "network configuration: policy name \"%.63s\" must be [a-z0-9_-]",
					 pname);
				goto out;
			}
			snprintf(where, sizeof where, "network configuration \"policies\".%s", pname);
			if (cni_policy_src_parse(pval, where, &tmp, e) < 0)
				goto out;
			free(tmp.text);
		}
		c->policies = json_object_get(v);
	}
	if (json_object_object_get_ex(root, "namespaces", &v)) {
		if (!json_object_is_type(v, json_type_object)) {
			cni_fail(e, CNI_E_CONFIG, "network configuration: \"namespaces\" must map pod namespaces to policy names");
			goto out;
		}
		json_object_object_foreach(v, ns, pname) {
			if (!json_object_is_type(pname, json_type_string) || !c->policies ||
			    !json_object_object_get_ex(c->policies, json_object_get_string(pname), NULL)) {
				cni_fail(e, CNI_E_CONFIG, "network configuration: \"namespaces\".%.63s must name one of \"policies\"",
					 ns);
				goto out;
			}
		}
		c->namespaces = json_object_get(v);
	}
	if (json_object_object_get_ex(root, "prevResult", &v) && !json_object_is_type(v, json_type_null)) {
		if (!json_object_is_type(v, json_type_object)) {
			cni_fail(e, CNI_E_CONFIG, "network configuration: \"prevResult\" must be an object");
			goto out;
		}
		c->prev_result = json_object_get(v);
	}
	if (json_object_object_get_ex(root, "runtimeConfig", &v) && parse_runtime(v, c, e) < 0)
		goto out;
	if (c->rt_policy && (!c->policies || !json_object_object_get_ex(c->policies, c->rt_policy, NULL))) {
		cni_fail(e, CNI_E_CONFIG, "runtimeConfig.sluice.policy \"%s\" is not one of the network's \"policies\"",
			 c->rt_policy);
		goto out;
	}
	r = 0;
out:
	json_object_put(root);
	json_tokener_free(tok);
	return r;
}

void cni_conf_clear(struct cni_conf *c)
{
	free(c->cni_version);
	free(c->name);
	free(c->type);
	free(c->run_dir);
	free(c->policy.text);
	json_object_put(c->policies);
	json_object_put(c->namespaces);
	json_object_put(c->prev_result);
	free(c->rt_policy);
	for (size_t i = 0; i < c->rt_ndeny; i++)
		free(c->rt_deny[i]);
	memset(c, 0, sizeof *c);
}

/* A pod namespace or name: a Kubernetes name (DNS-1123: [a-z0-9.-]) or, as Podman passes its container
 * names there, [A-Za-z0-9][A-Za-z0-9_.-]*; at most 253 bytes. Nothing else reaches the audit log. */
static bool k8s_name(const char *s, size_t n)
{
	if (n == 0 || n > 253 || s[0] == '.' || s[0] == '-' || s[0] == '_')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '.' || s[i] == '_'))
			return false;
	return true;
}

static int args_deny(const char *v, size_t n, struct cni_args *a, struct cni_err *e)
{
	size_t i = 0;

	while (i < n) {
		size_t j = i;
		char pat[301];

		while (j < n && v[j] != ',')
			j++;
		if (j - i == 0 || j - i >= sizeof pat)
			return cni_fail(e, CNI_E_ENV, "CNI_ARGS: SLUICE_DENY must be host patterns separated by commas");
		memcpy(pat, v + i, j - i);
		pat[j - i] = '\0';
		if (!deny_pattern(pat))
			return cni_fail(e, CNI_E_ENV, "CNI_ARGS: SLUICE_DENY: \"%s\" is not a host pattern", pat);
		if (a->ndeny >= CNI_DENY_MAX)
			return cni_fail(e, CNI_E_ENV, "CNI_ARGS: SLUICE_DENY: at most %d patterns", CNI_DENY_MAX);
		if (!(a->deny[a->ndeny] = strdup(pat)))
			return cni_fail(e, CNI_E_IO, "out of memory");
		a->ndeny++;
		i = j + 1;
	}
	return 0;
}

int cni_args_parse(const char *s, struct cni_args *a, struct cni_err *e)
{
	memset(a, 0, sizeof *a);
	if (!s)
		return 0;
	if (strlen(s) > 65536)
		return cni_fail(e, CNI_E_ENV, "CNI_ARGS is longer than 64 KiB");
	while (*s) {
		const char *end = strchr(s, ';'), *eq;
		size_t n = end ? (size_t)(end - s) : strlen(s), kn, vn;

		eq = memchr(s, '=', n);
		if (n == 0) {
			s += end ? 1 : 0;
			continue;
		}
		if (!eq || eq == s)
			return cni_fail(e, CNI_E_ENV, "CNI_ARGS: \"%.*s\" is not KEY=VALUE", (int)(n > 64 ? 64 : n), s);
		kn = (size_t)(eq - s);
		vn = n - kn - 1;
		for (size_t i = 0; i < n; i++)
			if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
				return cni_fail(e, CNI_E_ENV, "CNI_ARGS contains a control byte");
#define KEY_IS(k) (kn == strlen(k) && memcmp(s, k, kn) == 0)
		if (KEY_IS("K8S_POD_NAMESPACE") || KEY_IS("K8S_POD_NAME")) {
			char *dst = KEY_IS("K8S_POD_NAME") ? a->pod_name : a->pod_namespace;

			if (!k8s_name(eq + 1, vn))
				return cni_fail(e, CNI_E_ENV, "CNI_ARGS: %.*s is not a Kubernetes name", (int)kn, s);
			memcpy(dst, eq + 1, vn);
			dst[vn] = '\0';
		} else if (KEY_IS("SLUICE_POLICY")) {
			if (vn == 0 || vn >= sizeof a->policy)
				return cni_fail(e, CNI_E_ENV, "CNI_ARGS: SLUICE_POLICY must name one of the network's policies");
			memcpy(a->policy, eq + 1, vn);
			a->policy[vn] = '\0';
		} else if (KEY_IS("SLUICE_DENY")) {
			if (args_deny(eq + 1, vn, a, e) < 0)
				return -1;
		}
#undef KEY_IS
		/* other keys (IgnoreUnknown, K8S_POD_INFRA_CONTAINER_ID, K8S_POD_UID, ...) are not ours */
		s += n + (end ? 1 : 0);
	}
	return 0;
}

void cni_args_clear(struct cni_args *a)
{
	for (size_t i = 0; i < a->ndeny; i++)
		free(a->deny[i]);
	memset(a, 0, sizeof *a);
}

int cni_pick_policy(const struct cni_conf *c, const struct cni_args *a, struct cni_policy_src *out, struct cni_err *e)
{
	const char *picked = c->rt_policy ? c->rt_policy : a->policy[0] ? a->policy : NULL, *held = NULL, *name;
	struct json_object *v;
	char where[128];

	memset(out, 0, sizeof *out);
	if (c->rt_policy && a->policy[0] && strcmp(c->rt_policy, a->policy) != 0)
		return cni_fail(e, CNI_E_CONFIG, "runtimeConfig asks policy \"%s\", CNI_ARGS SLUICE_POLICY \"%s\": pick one",
				c->rt_policy, a->policy);
	if (a->pod_namespace[0] && c->namespaces && json_object_object_get_ex(c->namespaces, a->pod_namespace, &v))
		held = json_object_get_string(v);
	/* The administrator's assignment of a namespace holds: a pod's own pick (its annotations) may name
	 * that policy, never another one, which could be wider. */
	if (held && picked && strcmp(held, picked) != 0)
		return cni_fail(e, CNI_E_CONFIG,
				"pod namespace \"%s\" is held to policy \"%s\" by the network's \"namespaces\"; a "
				"container of it cannot pick \"%s\" (drop the pick, or change \"namespaces\")",
				a->pod_namespace, held, picked);
	name = picked ? picked : held;
	if (!name) {
		if (c->policy.kind == CNI_POLICY_NONE)
			return cni_fail(e, CNI_E_CONFIG, "network \"%s\": no \"policy\" (a preset like \"registries\", a "
					"file path, or a policy object)", c->name);
		out->kind = c->policy.kind;
		out->text = strdup(c->policy.text);
		return out->text ? 0 : cni_fail(e, CNI_E_IO, "out of memory");
	}
	if (!c->policies || !json_object_object_get_ex(c->policies, name, &v))
		return cni_fail(e, CNI_E_CONFIG, "network \"%s\" has no policy named \"%s\" (see its \"policies\")",
				c->name, name);
	snprintf(where, sizeof where, "network configuration \"policies\".%s", name);
	return cni_policy_src_parse(v, where, out, e);
}
