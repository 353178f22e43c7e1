/* The parent proxy's configuration (parent.h): URL, credentials file, no_proxy list. */
#include "parent.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* Frees p and says "what: detail". */
static struct proxy_parent *fail(struct proxy_parent *p, char *err, size_t errlen, const char *what, const char *detail)
{
	snprintf(err, errlen, "%s: %s", what, detail);
	free(p);
	return NULL;
}

/* "http://HOST:PORT" -> host, port. */
static int parse_url(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *h, *end, *colon;
	size_t n;

	if (strncmp(url, "http://", 7) != 0)
		return -EPROTONOSUPPORT;
	h = url + 7;
	end = h + strcspn(h, "/");
	if (*end && strcmp(end, "/") != 0)
		return -EINVAL; /* a path means nothing for a proxy */
	if (memchr(h, '@', (size_t)(end - h)))
		return -EPERM; /* credentials belong in auth_file, never in a URL that gets logged */
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (!rb || rb[1] != ':')
			return -EINVAL;
		n = (size_t)(rb - h - 1);
		colon = rb + 1;
		h++;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - h);
	}
	if (n == 0 || n >= hostlen || (size_t)(end - colon - 1) == 0 || (size_t)(end - colon - 1) >= portlen)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	memcpy(port, colon + 1, (size_t)(end - colon - 1));
	port[end - colon - 1] = '\0';
	if (strspn(port, "0123456789") != strlen(port) || atoi(port) < 1 || atoi(port) > 65535)
		return -EINVAL;
	return 0;
}

/* Reads "user:password" from path into p->auth as "Basic BASE64". The file must be a regular file owned
 * by root (or by us) that neither group nor others can read. */
static int read_auth(struct proxy_parent *p, const char *path, char *err, size_t errlen)
{
	char buf[256];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0) {
		snprintf(err, errlen, "auth_file %s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) ||
	    (st.st_mode & 077)) {
		snprintf(err, errlen,
		         "auth_file %s: must be a regular file owned by root that only its owner can read (chmod 600)",
		         path);
		close(fd);
		return -EPERM;
	}
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "auth_file %s: %s", path, strerror(errno));
		return -EIO;
	}
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if ((size_t)n >= sizeof buf - 1 || !strchr(buf, ':') || buf[0] == ':' || strpbrk(buf, " \t")) {
		snprintf(err, errlen, "auth_file %s: want one line \"user:password\" (at most 254 bytes, no blanks)",
		         path);
		explicit_bzero(buf, sizeof buf);
		return -EINVAL;
	}
	memcpy(p->auth, "Basic ", 6);
	EVP_EncodeBlock((unsigned char *)p->auth + 6, (const unsigned char *)buf, (int)strlen(buf));
	explicit_bzero(buf, sizeof buf);
	return 0;
}

struct proxy_parent *proxy_parent_parse(json_object *o, const char *what, char *err, size_t errlen)
{
	struct proxy_parent *p = calloc(1, sizeof *p);
	char host[256], port[8];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
	json_object *v;
	int r;

	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->resolve = true;
	if (!json_object_is_type(o, json_type_object))
		return fail(p, err, errlen, what, "want an object {\"url\": \"http://HOST:PORT\", ...}");
	json_object_object_foreach(o, key, val)
	{
		if (strcmp(key, "url") && strcmp(key, "auth_file") && strcmp(key, "no_proxy") && strcmp(key, "resolve"))
		{
			char m[300];
			snprintf(m, sizeof m, "unknown key \"%.64s\" (url, auth_file, no_proxy, resolve)", key);
			return fail(p, err, errlen, what, m);
		}
		(void)val;
	}
	if (!json_object_object_get_ex(o, "url", &v) || !json_object_is_type(v, json_type_string))
		return fail(p, err, errlen, what, "\"url\" (\"http://HOST:PORT\") is missing");
	r = parse_url(json_object_get_string(v), host, sizeof host, port, sizeof port);
	if (r == -EPROTONOSUPPORT)
		return fail(p, err, errlen, what, "url: only http://HOST:PORT parent proxies are supported");
	if (r == -EPERM)
		return fail(p, err, errlen, what, "url: put credentials in auth_file, not in the URL");
	if (r < 0)
		return fail(p, err, errlen, what, "url: want http://HOST:PORT");
	snprintf(p->where, sizeof p->where, "%s:%s", host, port);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r != 0 || !ai) {
		char m[300];
		snprintf(m, sizeof m, "url: cannot resolve the parent proxy's host %.200s: %s", host,
		         r ? gai_strerror(r) : "no address");
		return fail(p, err, errlen, what, m);
	}
	memcpy(&p->addr, ai->ai_addr, ai->ai_addrlen);
	p->addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
	if (json_object_object_get_ex(o, "resolve", &v)) {
		if (!json_object_is_type(v, json_type_boolean))
			return fail(p, err, errlen, what, "\"resolve\" must be true or false");
		p->resolve = json_object_get_boolean(v);
	}
	if (json_object_object_get_ex(o, "no_proxy", &v)) {
		size_t n;
		if (!json_object_is_type(v, json_type_array))
			return fail(p, err, errlen, what, "\"no_proxy\" must be an array of host names");
		n = json_object_array_length(v);
		if (n > PROXY_PARENT_NO_PROXY_MAX)
			return fail(p, err, errlen, what, "\"no_proxy\" has more than 256 entries");
		for (size_t i = 0; i < n; i++) {
			json_object *e = json_object_array_get_idx(v, i);
			const char *s = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : NULL;
			enum policy_canon_err ce;

			if (s && s[0] == '.')
				s++; /* ".corp.example" means what "corp.example" means: the name and its subdomains */
			ce = s ? policy_canon_host(s, strlen(s), p->no_proxy[i]) : POLICY_CANON_EMPTY;
			if (ce == POLICY_CANON_IP_LITERAL && strlen(s) <= POLICY_HOST_MAX)
				snprintf(p->no_proxy[i], sizeof p->no_proxy[i], "%s", s);
			else if (ce != POLICY_CANON_OK)
				return fail(p, err, errlen, what,
				            s ? "no_proxy: an entry is not a host name or address" :
				                "no_proxy: entries must be strings");
			p->nno_proxy++;
		}
	}
	if (json_object_object_get_ex(o, "auth_file", &v)) {
		char aerr[512];
		if (!json_object_is_type(v, json_type_string) || json_object_get_string(v)[0] != '/')
			return fail(p, err, errlen, what, "\"auth_file\" must be an absolute path");
		if (read_auth(p, json_object_get_string(v), aerr, sizeof aerr) < 0)
			return fail(p, err, errlen, what, aerr);
	}
	return p;
}

int proxy_parent_load(const char *path, struct proxy_parent **out, char *err, size_t errlen)
{
	json_object *root, *o;
	struct stat st;

	*out = NULL;
	if (stat(path, &st) != 0) {
		if (errno == ENOENT)
			return -ENOENT;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	root = json_object_from_file(path);
	if (!root) {
		snprintf(err, errlen, "%s: not valid JSON (%s)", path, json_util_get_last_err());
		return -EINVAL;
	}
	if (!json_object_object_get_ex(root, "upstream_proxy", &o)) {
		snprintf(err, errlen, "%s: want {\"upstream_proxy\": {\"url\": \"http://HOST:PORT\", ...}}", path);
		json_object_put(root);
		return -EINVAL;
	}
	*out = proxy_parent_parse(o, path, err, errlen);
	json_object_put(root);
	return *out ? 0 : -EINVAL;
}

bool proxy_parent_bypass(const struct proxy_parent *p, const char *canon_host)
{
	size_t hl = strlen(canon_host);

	for (size_t i = 0; i < p->nno_proxy; i++) {
		const char *n = p->no_proxy[i];
		size_t nl = strlen(n);
		if (hl == nl && strcmp(canon_host, n) == 0)
			return true;
		if (hl > nl && canon_host[hl - nl - 1] == '.' && strcmp(canon_host + hl - nl, n) == 0)
			return true;
	}
	return false;
}
