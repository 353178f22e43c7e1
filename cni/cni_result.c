/* Building and checking the CNI result (cni_result.h). */
#include "cni_result.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

/* prev[key] as an array copy, or a new empty array; NULL when present but not an array. */
static struct json_object *array_of(struct json_object *prev, const char *key)
{
	struct json_object *v, *out = NULL;

	if (!prev || !json_object_object_get_ex(prev, key, &v) || json_object_is_type(v, json_type_null))
		return json_object_new_array();
	if (!json_object_is_type(v, json_type_array) || json_object_deep_copy(v, &out, NULL) < 0)
		return NULL;
	return out;
}

static void add_ip(struct json_object *ips, const char *addr, unsigned plen, const char *gw, size_t iface)
{
	struct json_object *o = json_object_new_object();
	char buf[64];

	snprintf(buf, sizeof buf, "%s/%u", addr, plen);
	json_object_object_add(o, "address", json_object_new_string(buf));
	json_object_object_add(o, "gateway", json_object_new_string(gw));
	json_object_object_add(o, "interface", json_object_new_int((int)iface));
	json_object_array_add(ips, o);
}

static void add_route(struct json_object *routes, const char *dst, const char *gw)
{
	struct json_object *o = json_object_new_object();

	json_object_object_add(o, "dst", json_object_new_string(dst));
	json_object_object_add(o, "gw", json_object_new_string(gw));
	json_object_array_add(routes, o);
}

struct json_object *cni_result_build(const char *cni_version, struct json_object *prev,
				     const struct netd_session_reply *r, const char *ifname, const char *netns,
				     const char *host_mac, const char *mac, struct cni_err *e)
{
	struct json_object *res = json_object_new_object(), *ifs = array_of(prev, "interfaces");
	struct json_object *ips = array_of(prev, "ips"), *routes = array_of(prev, "routes");
	struct json_object *dns = json_object_new_object(), *ns = json_object_new_array(), *o;
	char host_if[32];
	size_t idx;

	if (!res || !ifs || !ips || !routes || !dns || !ns) {
		cni_fail(e, CNI_E_DECODE, "prevResult: \"interfaces\", \"ips\" and \"routes\" must be arrays");
		json_object_put(res);
		json_object_put(ifs);
		json_object_put(ips);
		json_object_put(routes);
		json_object_put(dns);
		json_object_put(ns);
		return NULL;
	}
	snprintf(host_if, sizeof host_if, "sl-%s", r->id);
	o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(host_if));
	if (host_mac && host_mac[0])
		json_object_object_add(o, "mac", json_object_new_string(host_mac));
	json_object_array_add(ifs, o);
	o = json_object_new_object();
	json_object_object_add(o, "name", json_object_new_string(ifname));
	if (mac && mac[0])
		json_object_object_add(o, "mac", json_object_new_string(mac));
	json_object_object_add(o, "sandbox", json_object_new_string(netns));
	json_object_array_add(ifs, o);
	idx = json_object_array_length(ifs) - 1;
	add_ip(ips, r->addr4, 32, r->gw4, idx);
	add_route(routes, "0.0.0.0/0", r->gw4);
	if (r->addr6[0]) {
		add_ip(ips, r->addr6, 128, r->gw6, idx);
		add_route(routes, "::/0", r->gw6);
	}
	json_object_array_add(ns, json_object_new_string(r->gw4));
	json_object_object_add(dns, "nameservers", ns);
	json_object_object_add(res, "cniVersion", json_object_new_string(cni_version));
	json_object_object_add(res, "interfaces", ifs);
	json_object_object_add(res, "ips", ips);
	json_object_object_add(res, "routes", routes);
	json_object_object_add(res, "dns", dns);
	return res;
}

static bool has_ip(struct json_object *ips, const char *addr, unsigned plen, size_t iface)
{
	char want[64];

	snprintf(want, sizeof want, "%s/%u", addr, plen);
	for (size_t i = 0; i < json_object_array_length(ips); i++) {
		struct json_object *o = json_object_array_get_idx(ips, i), *a, *n;

		if (json_object_object_get_ex(o, "address", &a) && json_object_is_type(a, json_type_string) &&
		    strcmp(json_object_get_string(a), want) == 0 && json_object_object_get_ex(o, "interface", &n) &&
		    json_object_is_type(n, json_type_int) && json_object_get_int64(n) == (int64_t)iface)
			return true;
	}
	return false;
}

int cni_result_check(struct json_object *result, const struct netd_session_reply *r, const char *ifname,
		     const char *netns, struct cni_err *e)
{
	struct json_object *ifs, *ips;
	size_t n;

	if (!json_object_object_get_ex(result, "interfaces", &ifs) || !json_object_is_type(ifs, json_type_array) ||
	    !json_object_object_get_ex(result, "ips", &ips) || !json_object_is_type(ips, json_type_array))
		return cni_fail(e, CNI_E_CHECK, "CHECK: prevResult has no \"interfaces\" and \"ips\" arrays");
	n = json_object_array_length(ifs);
	for (size_t i = 0; i < n; i++) {
		struct json_object *o = json_object_array_get_idx(ifs, i), *nm, *sb;

		if (!json_object_object_get_ex(o, "name", &nm) || !json_object_object_get_ex(o, "sandbox", &sb) ||
		    !json_object_is_type(nm, json_type_string) || !json_object_is_type(sb, json_type_string) ||
		    strcmp(json_object_get_string(nm), ifname) != 0 || strcmp(json_object_get_string(sb), netns) != 0)
			continue;
		if (!has_ip(ips, r->addr4, 32, i))
			return cni_fail(e, CNI_E_CHECK, "CHECK: the session's address %s/32 is not in prevResult", r->addr4);
		if (r->addr6[0] && !has_ip(ips, r->addr6, 128, i))
			return cni_fail(e, CNI_E_CHECK, "CHECK: the session's address %s/128 is not in prevResult", r->addr6);
		return 0;
	}
	return cni_fail(e, CNI_E_CHECK, "CHECK: prevResult has no interface %s in %s", ifname, netns);
}
