/* The environment step: the command starts from an empty environment plus a whitelist (PATH,
 * HOME, TERM, LANG, LC_*, USER, LOGNAME, TZ, then names from config "env" and --env NAME), the
 * values given with --env NAME=VALUE, the proxy variables of a networked session, and
 * SLUICE_SESSION. Secrets in the launcher's environment (tokens, agent sockets) stay outside. */
#include "session.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const sb_env_default[] = {"PATH", "HOME", "TERM", "LANG", "LC_*", "USER", "LOGNAME", "TZ"};

static bool name_matches(const char *pat, const char *name, size_t namelen)
{
	size_t pl = strlen(pat);
	if (pl && pat[pl - 1] == '*')
		return namelen >= pl - 1 && strncmp(pat, name, pl - 1) == 0;
	return pl == namelen && strncmp(pat, name, namelen) == 0;
}

bool sb_env_name_allowed(const struct sb_config *cfg, const char *name, size_t namelen)
{
	for (size_t i = 0; i < sizeof sb_env_default / sizeof sb_env_default[0]; i++)
		if (name_matches(sb_env_default[i], name, namelen))
			return true;
	for (size_t i = 0; i < cfg->env_keep.n; i++)
		if (name_matches(cfg->env_keep.v[i], name, namelen))
			return true;
	return false;
}

struct envv {
	char **v;
	size_t n;
};

/* Sets NAME=VALUE (entry is "NAME=VALUE"), replacing an earlier value of NAME. */
static int env_put(struct envv *e, const char *entry)
{
	size_t nl = strcspn(entry, "=");
	for (size_t i = 0; i < e->n; i++) {
		if (strncmp(e->v[i], entry, nl) == 0 && e->v[i][nl] == '=') {
			char *d = strdup(entry);
			if (!d)
				return -ENOMEM;
			free(e->v[i]);
			e->v[i] = d;
			return 0;
		}
	}
	char **nv = realloc(e->v, (e->n + 2) * sizeof *nv);
	if (!nv)
		return -ENOMEM;
	e->v = nv;
	if (!(e->v[e->n] = strdup(entry)))
		return -ENOMEM;
	e->n++;
	e->v[e->n] = NULL;
	return 0;
}

static int env_putf(struct envv *e, const char *name, const char *value)
{
	char *s = NULL;
	if (asprintf(&s, "%s=%s", name, value) < 0)
		return -ENOMEM;
	int r = env_put(e, s);
	free(s);
	return r;
}

char **sb_env_build(const struct sb_session *s, const struct sb_go *go, char **environ_in)
{
	const struct sb_config *cfg = s->cfg;
	struct envv e = {NULL, 0};
	int r = 0;

	for (char **p = environ_in; p && *p && r == 0; p++) {
		const char *eq = strchr(*p, '=');
		if (eq && sb_env_name_allowed(cfg, *p, (size_t)(eq - *p)))
			r = env_put(&e, *p);
	}
	if (r == 0 && !getenv("PATH"))
		r = env_putf(&e, "PATH", "/usr/local/bin:/usr/bin:/bin");
	if (r == 0 && cfg->home)
		r = env_putf(&e, "HOME", cfg->home);
	for (size_t i = 0; i < cfg->env_set.n && r == 0; i++)
		r = env_put(&e, cfg->env_set.v[i]);
	if (r == 0 && go->proxy_url[0]) {
		static const char *const pv[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"};
		for (size_t i = 0; i < 4 && r == 0; i++)
			r = env_putf(&e, pv[i], go->proxy_url);
		if (r == 0)
			r = env_putf(&e, "NO_PROXY", "localhost,127.0.0.1,::1");
		if (r == 0)
			r = env_putf(&e, "no_proxy", "localhost,127.0.0.1,::1");
	}
	/* Tools that speak only SOCKS: the same policy through the gateway's SOCKS5 front, names resolved by
	 * sluice (socks5h). Clients that know HTTP_PROXY prefer it for http and https. */
	if (r == 0 && go->socks_url[0])
		r = env_putf(&e, "ALL_PROXY", go->socks_url);
	if (r == 0 && go->socks_url[0])
		r = env_putf(&e, "all_proxy", go->socks_url);
	if (r == 0 && cfg->allow_containers) {
		/* nest.c wrote these; the runtime directory is the sandbox's own /run */
		r = env_putf(&e, "CONTAINERS_CONF", "/run/sluice-containers/containers.conf");
		if (r == 0)
			r = env_putf(&e, "CONTAINERS_STORAGE_CONF", "/run/sluice-containers/storage.conf");
		if (r == 0)
			r = env_putf(&e, "XDG_RUNTIME_DIR", "/run");
	}
	if (r == 0 && go->have_ca) {
		/* HTTPS inspection: the system bundle (with the session CA in it), named for every client */
		static const char *const cv[] = {"SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "PIP_CERT",
		                                 "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "CARGO_HTTP_CAINFO"};
		for (size_t i = 0; i < sizeof cv / sizeof cv[0] && r == 0; i++)
			r = env_putf(&e, cv[i], SB_CA_BUNDLE_PATH);
	}
	/* credentials' placeholders ("NAME=VALUE\n" lines): they replace whatever the name held */
	for (const char *p = go->cred_env; r == 0 && *p && p < go->cred_env + sizeof go->cred_env;) {
		const char *nl = memchr(p, '\n', (size_t)(go->cred_env + sizeof go->cred_env - p));
		char line[sizeof go->cred_env];
		if (!nl)
			break;
		snprintf(line, sizeof line, "%.*s", (int)(nl - p), p);
		if (strchr(line, '='))
			r = env_put(&e, line);
		p = nl + 1;
	}
	if (r == 0)
		r = env_putf(&e, "SLUICE_SESSION", s->id);
	if (r == 0 && !e.v)
		r = -ENOMEM;
	if (r < 0) {
		sb_env_free(e.v);
		return NULL;
	}
	return e.v;
}

void sb_env_free(char **env)
{
	if (!env)
		return;
	for (char **p = env; *p; p++)
		free(*p);
	free(env);
}

char *sb_find_program(const char *name)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, ":");
		if (n && p[0] == '/' && n + strlen(name) + 2 < sizeof buf) {
			snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, name);
			if (access(buf, X_OK) == 0)
				return strdup(buf);
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return NULL;
}
