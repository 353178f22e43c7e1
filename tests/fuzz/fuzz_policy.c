/* Fuzz target: the policy loader (JSON with comments, and plain-text lists), compiled and queried.
 * The first input byte picks the format (0x80: a command-line pattern, 0x40: JSON of the given length,
 * 0x20: a plain-text domain list, else JSON up to the first NUL) and the layer; the rest is the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "policy_int.h" /* policy_load_text: what policy_builder_add_file does with a .txt/.list file */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct policy_builder *b;
	struct policy_error err;
	struct policy *p = NULL;
	struct policy_decision d;
	char *text;

	if (size < 1 || size > 65536)
		return 0;
	b = policy_builder_new();
	text = malloc(size);
	if (!b || !text)
		goto out;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	enum policy_layer layer = (enum policy_layer)(data[0] % POLICY_LAYER_COUNT);
	int r = (data[0] & 0x80) ? policy_builder_add_pattern(b, layer, text, data[0] & 0x40, "--allow", &err)
	      : (data[0] & 0x40) ? policy_builder_add_json(b, layer, "fuzz.json", text, size - 1, &err)
	      : (data[0] & 0x20) ? policy_load_text(b, layer, "fuzz.txt", text, size - 1, &err)
				 : policy_builder_add_json(b, layer, "fuzz.json", text, strlen(text), &err);
	if (r == 0)
		p = policy_builder_compile(b, &err);
	if (p) {
		/* every compiled policy must answer, serialise, and reload to the same size */
		policy_decide(p, "registry.npmjs.org", 443, POLICY_M_GET, &d);
		policy_decide(p, "a.b.c", 0, 0, &d);
		policy_decide_proto(p, "a.b.c", POLICY_PROTO_UDP, 7, 0, &d);
		struct policy_direct_port dp[POLICY_DIRECT_PORTS_MAX];
		size_t ndp = policy_direct_ports(p, "a.b.c", dp, POLICY_DIRECT_PORTS_MAX);
		for (size_t i = 0; i < ndp; i++) /* never a port the DNS proxy or the web proxy serves */
			if (dp[i].port == 0 || dp[i].port == 80 || dp[i].port == 443 ||
			    (dp[i].proto == POLICY_PROTO_UDP && dp[i].port == 53))
				abort();
		char *ser = policy_serialize(p);
		if (ser) {
			struct policy_builder *b2 = policy_builder_new();
			if (b2 && policy_builder_add_json(b2, layer, "ser", ser, strlen(ser), &err) == 0) {
				struct policy *q = policy_builder_compile(b2, &err);
				if (q && policy_rule_count(q) != policy_rule_count(p) && layer == POLICY_LAYER_ORG)
					abort();
				policy_unref(q);
			} else if (b2) {
				abort(); /* a serialised policy must always reload */
			}
			policy_builder_free(b2);
			free(ser);
		}
	}
out:
	policy_unref(p);
	policy_builder_free(b);
	free(text);
	return 0;
}
