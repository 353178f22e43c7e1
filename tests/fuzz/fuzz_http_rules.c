/* Fuzz target: the request-path normaliser and the HTTP rule matcher of HTTPS inspection
 * (policy/http_rules.c). Input: "PATTERN\nMETHOD TARGET". Checks what the proxy relies on: a normalised
 * path starts with '/', has no empty, "." or ".." segment and normalises to itself (the fully decoded form:
 * the same shape, not idempotent, see check_norm); the glob agrees
 * with a naive recursive reference; and a request the fixed policy allows matches none of its deny
 * rules on either form of the path in any letter case (an escape, a dot segment or a ';' parameter never
 * slips past a deny rule) and has no dot segment that only a lenient server sees (naive_dots). */
#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool ref_glob(const char *p, const char *s)
{
	if (!*p)
		return !*s;
	if (p[0] == '*' && p[1] == '*') {
		while (*p == '*')
			p++;
		for (const char *t = s;; t++) {
			if (ref_glob(p, t))
				return true;
			if (!*t)
				return false;
		}
	}
	if (*p == '*') {
		for (const char *t = s;; t++) {
			if (ref_glob(p + 1, t))
				return true;
			if (!*t || *t == '/')
				return false;
		}
	}
	return *s == *p && ref_glob(p + 1, s + 1);
}

/* idempotent: the path normalises to itself. Not for the fully decoded form (decode_all), which may hold
 * bytes a request target cannot ("?" from %3F, "%" from %25): it is a form to match deny rules on, never
 * read again as a target. */
static void check_norm(const char *path, bool idempotent)
{
	char again[POLICY_PATH_MAX];
	size_t q;

	if (strcmp(path, "*") == 0)
		return;
	if (path[0] != '/' || strstr(path, "//") || strstr(path, "/./") || strstr(path, "/../"))
		abort();
	size_t n = strlen(path);
	if ((n >= 2 && strcmp(path + n - 2, "/.") == 0) || (n >= 3 && strcmp(path + n - 3, "/..") == 0))
		abort();
	if (idempotent &&
	    (policy_path_normalize(path, n, false, again, sizeof again, &q) != POLICY_PATH_OK || strcmp(again, path) != 0))
		abort();
}

/* A naive count of the "." and ".." segments of target's path: split at '/' only, with only %2e/%2E
 * decoded (strict), or split at '/', '\\', %2F and %5C with every escape decoded and each segment cut at
 * its first ';' (lenient: what nginx, Apache or Tomcat may see). An allowed request has as many either
 * way: a dot segment only the lenient reading sees is ambiguous. */
static unsigned naive_dots(const char *target, size_t tlen, bool lenient)
{
	size_t n = 0, i = 0;
	unsigned dots = 0;
	bool cut = false, dotty = true;

	if (tlen && target[0] != '/') { /* absolute form: the path starts at the first '/' after "://" */
		const char *scheme = memmem(target, tlen, "://", 3);
		i = scheme ? (size_t)(scheme + 3 - target) : tlen;
		while (i < tlen && target[i] != '/' && target[i] != '?')
			i++;
	}
	for (;; i++) {
		char c = i < tlen && target[i] != '?' ? target[i] : '\0';
		if (c == '%' && i + 2 < tlen && isxdigit((unsigned char)target[i + 1]) && isxdigit((unsigned char)target[i + 2])) {
			char h[3] = {target[i + 1], target[i + 2], 0}, d = (char)strtol(h, NULL, 16);
			if (lenient || d == '.') {
				c = d;
				i += 2;
			}
		}
		if (c == '\0' || c == '/' || (lenient && c == '\\')) {
			if (dotty && (n == 1 || n == 2))
				dots++;
			if (c == '\0')
				return dots;
			n = 0;
			cut = false;
			dotty = true;
			continue;
		}
		if (lenient && c == ';')
			cut = true;
		if (cut)
			continue;
		n++;
		dotty = dotty && c == '.';
	}
}

static struct policy *fixed_policy(void)
{
	static struct policy *p;
	static const char json[] =
		"{\"allow\": [\"git.test\"], \"inspect\": [{\"host\": \"git.test\", \"deny\": ["
		"{\"path\": \"/**/info/refs\", \"query\": \"service=git-receive-pack\"}, \"POST /**/git-receive-pack\","
		"{\"prefix\": \"/admin\"}], \"allow\": [\"GET,HEAD,POST /**\"]}]}";
	if (!p) {
		struct policy_builder *b = policy_builder_new();
		struct policy_error err;
		if (!b || policy_builder_add_json(b, POLICY_LAYER_USER, "fuzz", json, sizeof json - 1, &err) < 0 ||
		    !(p = policy_builder_compile(b, &err)))
			abort();
		policy_builder_free(b);
	}
	return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char norm[POLICY_PATH_MAX], all[POLICY_PATH_MAX];
	static struct policy_http_decision d;
	const char *in = (const char *)data, *nl, *sp;
	char pat[65], req[2048];
	size_t q;

	if (size > 2000 || memchr(data, '\0', size))
		return 0;
	nl = memchr(in, '\n', size);
	if (!nl || (size_t)(nl - in) >= sizeof pat)
		return 0;
	memcpy(pat, in, (size_t)(nl - in));
	pat[nl - in] = '\0';
	size_t rlen = size - (size_t)(nl - in) - 1;
	memcpy(req, nl + 1, rlen);
	req[rlen] = '\0';
	sp = strchr(req, ' ');
	const char *target = sp ? sp + 1 : req;
	size_t tlen = strlen(target);

	if (policy_path_normalize(target, tlen, false, norm, sizeof norm, &q) == POLICY_PATH_OK) {
		check_norm(norm, true);
		if (q > tlen)
			abort();
		if (strlen(norm) <= 64 && strlen(pat) <= 12 && policy_path_glob(pat, norm) != ref_glob(pat, norm))
			abort();
	}
	if (policy_path_normalize(target, tlen, true, all, sizeof all, &q) == POLICY_PATH_OK)
		check_norm(all, false);

	if (!sp)
		return 0;
	policy_decide_http(fixed_policy(), "git.test", req, (size_t)(sp - req), target, tlen, &d);
	if (d.verdict == POLICY_ALLOW) {
		bool post = (size_t)(sp - req) == 4 && memcmp(req, "POST", 4) == 0;
		if (policy_path_normalize(target, tlen, false, norm, sizeof norm, &q) != POLICY_PATH_OK ||
		    policy_path_normalize(target, tlen, true, all, sizeof all, &q) != POLICY_PATH_OK)
			abort(); /* an unreadable path must be denied */
		if (post && (policy_path_glob("/**/git-receive-pack", norm) || policy_path_glob("/**/git-receive-pack", all)))
			abort();
		/* deny rules hold in any letter case */
		for (char *c = norm; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		for (char *c = all; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		if (post && (policy_path_glob("/**/git-receive-pack", norm) || policy_path_glob("/**/git-receive-pack", all)))
			abort();
		if (strncmp(norm, "/admin", 6) == 0 && (norm[6] == '\0' || norm[6] == '/'))
			abort();
		if (strncmp(all, "/admin", 6) == 0 && (all[6] == '\0' || all[6] == '/'))
			abort();
		if (naive_dots(target, tlen, false) != naive_dots(target, tlen, true))
			abort();
	}
	return 0;
}
