/* Fuzz target: what a CNI runtime hands sluice-cni: the network configuration (cni_conf_parse, with its
 * named policies and runtimeConfig), CNI_ARGS (cni_args_parse), and the result built on a prevResult and
 * checked against it. The first byte picks which; the rest is the input. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cni_conf.h"
#include "cni_result.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct netd_session_reply r = {.id = "0123456789", .addr4 = "10.77.0.5", .gw4 = "10.77.0.1",
				       .addr6 = "fd5c::5", .gw6 = "fd5c::1"};
	struct cni_conf c;
	struct cni_args a;
	struct cni_err e;
	char *text;

	if (size < 1 || size > 65536)
		return 0;
	text = malloc(size);
	if (!text)
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	if (data[0] & 1) {
		cni_args_parse(text, &a, &e);
		cni_args_clear(&a);
	} else if (cni_conf_parse(text, size - 1, &c, &e) == 0) {
		struct json_object *res = cni_result_build(c.cni_version, c.prev_result, &r, "eth0", "/run/netns/x", "02:00:00:00:00:01", "", &e);

		if (res)
			cni_result_check(res, &r, "eth0", "/run/netns/x", &e);
		if (c.prev_result)
			cni_result_check(c.prev_result, &r, "eth0", "/run/netns/x", &e);
		json_object_put(res);
		cni_conf_clear(&c);
	} else {
		char *j = cni_err_json(NULL, &e);
		free(j);
		cni_conf_clear(&c);
	}
	free(text);
	return 0;
}
