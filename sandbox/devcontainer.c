/* `--sandbox-type devcontainer`: reads the project's .devcontainer/devcontainer.json (or
 * .devcontainer.json) into the container spec that container.c runs. The file lives in the
 * repository, so it is untrusted: it is read beneath the project without following any symlink
 * (common/fs_safe.h), bounded, parsed with json-c (comments and trailing commas allowed, as in VS
 * Code), and it may only describe the container, never widen the sandbox:
 *
 *  - image, or build.dockerfile and build.context (both inside the project);
 *  - workspaceFolder (default /workspaces/NAME), containerEnv, remoteUser/containerUser as a numeric
 *    "UID[:GID]" or "root" (exactly one uid is mapped into the container: container.c);
 *  - mounts: bind sources inside the project only (read-only), volumes (session-local) and tmpfs;
 *  - postCreateCommand as a string or an array of words;
 *  - ${localWorkspaceFolder}, ${localWorkspaceFolderBasename}, ${containerWorkspaceFolder} and
 *    ${containerWorkspaceFolderBasename} are substituted; ${localEnv:...} is refused (it would copy
 *    the launcher's environment, secrets included, into the container).
 *
 * Other keys (features, customizations, forwardPorts, ...) are not sluice's business and ignored.
 * Every error names file:line of the key at fault. */
#include "session.h"

#include "fs_safe.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define SB_DEVC_MAX_BYTES (256 * 1024)

struct devc {
	struct sb_config *c; /* borrowed */
	const char *name;    /* borrowed; the file, for messages */
	const char *text;    /* borrowed; its bytes (to find a key's line) */
	size_t len;
	char *err;
	size_t errlen;
	bool check_real; /* the paths exist on this host: resolve them (not when fuzzing) */
};

/* The line of the first `"key"` in the text: json-c keeps no positions, and a key's first
 * occurrence is where a person looks. */
static size_t key_line(const struct devc *d, const char *key)
{
	char pat[80];
	size_t pl, line, col;
	int n = snprintf(pat, sizeof pat, "\"%s\"", key);
	if (n <= 0 || (size_t)n >= sizeof pat)
		return 1;
	pl = (size_t)n;
	for (size_t i = 0; i + pl <= d->len; i++)
		if (memcmp(d->text + i, pat, pl) == 0) {
			sb_text_position(d->text, d->len, i, &line, &col);
			return line;
		}
	return 1;
}

static int devc_err(const struct devc *d, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int devc_err(const struct devc *d, const char *key, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(d->err, d->errlen, "%s:%zu: %s: ", d->name, key_line(d, key), key);
	if (n < 0 || (size_t)n >= d->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(d->err + n, d->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b && b[1] ? b + 1 : path;
}

/* Substitutes the ${...} variables sluice knows into a malloced copy; NULL with the reason in err. */
static char *substitute(const struct devc *d, const char *key, const char *in)
{
	const struct sb_config *c = d->c;
	const char *ws = c->ctr.workspace ? c->ctr.workspace : "";
	size_t cap = strlen(in) + 1, o = 0;
	char *out = malloc(cap);

	if (!out)
		return NULL;
	for (const char *p = in; *p;) {
		const char *val = NULL;
		size_t skip = 1;
		if (p[0] == '$' && p[1] == '{') {
			const char *end = strchr(p, '}');
			size_t vl = end ? (size_t)(end - p - 2) : 0;
			static const char *const names[] = {"localWorkspaceFolder", "localWorkspaceFolderBasename",
			                                    "containerWorkspaceFolder",
			                                    "containerWorkspaceFolderBasename"};
			const char *vals[] = {c->project_dir, base_name(c->project_dir), ws, base_name(ws)};
			for (size_t i = 0; end && i < 4; i++)
				if (strlen(names[i]) == vl && strncmp(p + 2, names[i], vl) == 0)
					val = vals[i];
			if (!val) {
				free(out);
				devc_err(d, key, "%s%.*s: %s", end ? "" : "unterminated ", end ? (int)(vl + 3) : 24, p,
				         end && strncmp(p + 2, "localEnv:", 9) == 0
				                 ? "the launcher's environment is not copied into the container (use "
				                   "--env NAME)"
				                 : "unknown variable (known: localWorkspaceFolder, "
				                   "localWorkspaceFolderBasename, "
				                   "containerWorkspaceFolder, containerWorkspaceFolderBasename)");
				return NULL;
			}
			skip = vl + 3;
		}
		size_t add = val ? strlen(val) : 1;
		if (o + add + 1 > cap) {
			cap = (o + add + 1) * 2;
			char *n = realloc(out, cap);
			if (!n) {
				free(out);
				return NULL;
			}
			out = n;
		}
		memcpy(out + o, val ? val : p, add);
		o += add;
		p += skip;
	}
	out[o] = '\0';
	return out;
}

/* An image reference that is not one: a storage transport ("oci-archive:/path", "dir:/path",
 * "docker-archive:/path", "containers-storage:[vfs@/graph+/run]name", "docker-daemon:", "docker://")
 * makes Podman and Buildah, as root, read the host path it names, outside the project, or make a store
 * there (tried: Podman 4.3 with --pull=never created one at a path of the file's choosing); a variable
 * where the transport would be ("$BASE", "${REG}/x") can expand to one, and a quote or an escape
 * ("oci\\-archive:") hides one from this reading. Returns what it found, or NULL
 * for a plain reference ("localhost/dev:1", "base:${VARIANT}", a stage name). */
static const char *image_ref_trouble(const char *ref, size_t len)
{
	static const char *const transports[] = {"containers-storage", "dir",    "docker-archive", "docker-daemon",
	                                         "oci",                "oci-archive", "ostree",     "sif",
	                                         "tarball"};
	const char *colon = memchr(ref, ':', len);
	size_t pl = colon ? (size_t)(colon - ref) : len;

	for (size_t i = 0; i < len; i++)
		if (ref[i] && strchr("\"'\\`", ref[i]))
			return "quoting or an escape (the builder reads the word after removing them)";
	if (memchr(ref, '$', pl))
		return "a variable before the image's tag";
	if (memchr(ref, '[', len))
		return "a storage location";
	if (!colon)
		return NULL;
	if (len - pl >= 3 && strncmp(colon, "://", 3) == 0)
		return "a transport";
	for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++)
		if (strlen(transports[i]) == pl && strncasecmp(ref, transports[i], pl) == 0)
			return "a storage transport";
	return NULL;
}

static bool has_ctl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return true;
	return false;
}

/* A string value (after substitution), malloced; NULL with the reason in err. */
static char *get_str(const struct devc *d, const char *key, json_object *v)
{
	if (!json_object_is_type(v, json_type_string)) {
		devc_err(d, key, "must be a string");
		return NULL;
	}
	const char *s = json_object_get_string(v);
	if (strlen(s) != (size_t)json_object_get_string_len(v) || has_ctl(s) || strlen(s) > PATH_MAX / 2) {
		devc_err(d, key, "must not hold control characters or NUL bytes, nor be over %d bytes", PATH_MAX / 2);
		return NULL;
	}
	char *r = substitute(d, key, s);
	if (!r && !d->err[0])
		snprintf(d->err, d->errlen, "out of memory");
	return r;
}

/* path (absolute, or relative to base) normalised lexically into out. */
static int join_clean(const char *base, const char *path, char *out, size_t len)
{
	char buf[PATH_MAX * 2];

	if ((size_t)snprintf(buf, sizeof buf, "%s/%s", path[0] == '/' ? "" : base, path) >= sizeof buf)
		return -ENAMETOOLONG;
	return sb_normalize_abs(buf, out, len);
}

static bool inside(const char *path, const char *dir)
{
	size_t dl = strlen(dir);
	return strncmp(path, dir, dl) == 0 && (path[dl] == '\0' || path[dl] == '/');
}

/* A path the file names on the host (relative to the devcontainer.json's directory): must stay
 * inside the project. The launcher opens it later without following symlinks out (binds.c, and
 * podman build reads the context). */
static char *project_path(const struct devc *d, const char *key, json_object *v, const char *base)
{
	char out[PATH_MAX];
	cleanup_free char *s = get_str(d, key, v);
	if (!s)
		return NULL;
	if (join_clean(base, s, out, sizeof out) < 0 || !inside(out, d->c->project_dir)) {
		devc_err(d, key, "%s: must lie inside the project %s", s, d->c->project_dir);
		return NULL;
	}
	if (strpbrk(out, ",:=")) {
		devc_err(d, key, "%s: ',', ':' and '=' cannot be passed to podman", out);
		return NULL;
	}
	/* Podman (root) reads these following symlinks: where they really lead must be the project too. */
	char real[PATH_MAX];
	if (!d->check_real)
		return strdup(out);
	if (!realpath(out, real)) {
		devc_err(d, key, "%s: %s", out, strerror(errno));
		return NULL;
	}
	if (!inside(real, d->c->project_dir)) {
		devc_err(d, key, "%s leads to %s, outside the project (a symlink)", out, real);
		return NULL;
	}
	return strdup(real);
}

/* A path in the container: absolute, lexically clean, and usable in a --mount value. */
static int container_path(const struct devc *d, const char *key, const char *s, char *out, size_t len)
{
	if (s[0] != '/' || join_clean("/", s, out, len) < 0 || strcmp(out, "/") == 0 || strpbrk(out, ",:="))
		return devc_err(d, key, "%s: want an absolute path in the container (not /, without ',', ':' or '=')",
		                s);
	return 0;
}

/* "UID[:GID]" or "root": container.c maps that one uid to the session's. */
static int parse_user(const struct devc *d, const char *key, json_object *v)
{
	cleanup_free char *s = get_str(d, key, v);
	char *end;
	if (!s)
		return -EINVAL;
	if (strcmp(s, "root") == 0 || strcmp(s, "0") == 0) {
		free(d->c->ctr.user);
		d->c->ctr.user = NULL;
		return 0;
	}
	errno = 0;
	unsigned long u = strtoul(s, &end, 10), g = u;
	if (!errno && end != s && *end == ':') {
		const char *p = end + 1;
		g = strtoul(p, &end, 10);
		if (end == p)
			end = (char *)"x";
	}
	if (errno || *end || s[0] == '-' || s[0] == '+' || u > 65535 || g > 65535)
		return devc_err(
		        d, key,
		        "%s: want a numeric \"UID\" or \"UID:GID\" below 65536, or \"root\" (sluice maps exactly "
		        "one uid into the container and cannot look names up in the image)",
		        s);
	/* Podman 4.3 cannot mount an image from the user's store (an additional store) for a single
	 * mapped uid other than 0 (its idmapped lower layers fail with EACCES): refuse rather than fail
	 * later. The command runs as uid 0 of the container, which is the session's unprivileged uid. */
	if (u != 0 || g != 0)
		return devc_err(
		        d, key,
		        "%s: only root (uid 0 of the container, which is the session's unprivileged host uid) is "
		        "supported; remove it or set it to \"root\"",
		        s);
	char buf[32];
	snprintf(buf, sizeof buf, "%lu:%lu", u, g);
	free(d->c->ctr.user);
	return (d->c->ctr.user = strdup(buf)) ? 0 : -ENOMEM;
}

/* One "mounts" entry: "type=bind,source=S,target=T[,readonly]" or the object form. */
static int parse_mount(const struct devc *d, json_object *m, const char *base)
{
	char type[16] = "bind", target[PATH_MAX];
	cleanup_free char *src = NULL, *tgt = NULL, *flat = NULL;
	const char *key = "mounts";

	if (json_object_is_type(m, json_type_string)) {
		if (!(flat = get_str(d, key, m)))
			return -EINVAL;
		for (char *tokp = NULL, *t = strtok_r(flat, ",", &tokp); t; t = strtok_r(NULL, ",", &tokp)) {
			char *eq = strchr(t, '=');
			size_t kl = eq ? (size_t)(eq - t) : strlen(t);
			const char *val = eq ? eq + 1 : "";
			if (kl == 4 && strncmp(t, "type", 4) == 0) {
				if (strlen(val) >= sizeof type)
					return devc_err(d, key, "type=%s: want bind, volume or tmpfs", val);
				util_strlcpy(type, val, sizeof type);
			} else if ((kl == 6 && strncmp(t, "source", 6) == 0) ||
			           (kl == 3 && strncmp(t, "src", 3) == 0)) {
				free(src);
				if (!(src = strdup(val)))
					return -ENOMEM;
			} else if ((kl == 6 && strncmp(t, "target", 6) == 0) ||
			           (kl == 3 && strncmp(t, "dst", 3) == 0) ||
			           (kl == 11 && strncmp(t, "destination", 11) == 0)) {
				free(tgt);
				if (!(tgt = strdup(val)))
					return -ENOMEM;
			} else if (!(kl == 8 && strncmp(t, "readonly", 8) == 0) &&
			           !(kl == 2 && strncmp(t, "ro", 2) == 0) &&
			           !(kl == 10 && strncmp(t, "consistency", 10) == 0)) {
				return devc_err(d, key, "%.*s: unknown option (known: type, source, target, readonly)",
				                (int)kl, t);
			}
		}
	} else if (json_object_is_type(m, json_type_object)) {
		json_object *v;
		if (json_object_object_get_ex(m, "type", &v)) {
			cleanup_free char *t = get_str(d, key, v);
			if (!t)
				return -EINVAL;
			if (strlen(t) >= sizeof type)
				return devc_err(d, key, "type %s: want bind, volume or tmpfs", t);
			util_strlcpy(type, t, sizeof type);
		}
		if (json_object_object_get_ex(m, "source", &v) && !(src = get_str(d, key, v)))
			return -EINVAL;
		if (json_object_object_get_ex(m, "target", &v) && !(tgt = get_str(d, key, v)))
			return -EINVAL;
	} else {
		return devc_err(d, key, "each mount must be a string or an object");
	}
	if (!tgt)
		return devc_err(d, key, "a mount needs a target");
	int r = container_path(d, key, tgt, target, sizeof target);
	if (r < 0)
		return r;
	if (strcmp(type, "bind") == 0) {
		/* Host paths: only the project's own files, read-only (the project itself is the
		 * workspace with overlay semantics; a second, writable view would bypass them). */
		char host[PATH_MAX];
		if (!src || join_clean(base, src, host, sizeof host) < 0 || !inside(host, d->c->project_dir))
			return devc_err(d, key,
			                "bind source %s: a devcontainer.json may bind paths inside the project only "
			                "(the repository must not widen its sandbox); bind others with --ro-bind",
			                src ? src : "(none)");
		struct sb_bind *nb = realloc(d->c->binds, (d->c->n_binds + 1) * sizeof *nb);
		if (!nb)
			return -ENOMEM;
		d->c->binds = nb;
		/* literal: opened without following any symlink (binds.c), so a link in the repository
		 * cannot lead the bind out of the project */
		nb[d->c->n_binds] =
		        (struct sb_bind){.src = strdup(host), .dst = strdup(target), .rw = false, .literal = true};
		d->c->n_binds++;
		if (!nb[d->c->n_binds - 1].src || !nb[d->c->n_binds - 1].dst)
			return -ENOMEM;
		return 0;
	}
	char spec[PATH_MAX + 128];
	if (strcmp(type, "volume") == 0) {
		/* A named volume lives in the session's own store: it starts empty and goes with it. */
		if (!src || !*src ||
		    strspn(src, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != strlen(src) ||
		    src[0] == '.' || src[0] == '-')
			return devc_err(d, key, "volume source %s: want a volume name (letters, digits, _ . -)",
			                src ? src : "(none)");
		snprintf(spec, sizeof spec, "type=volume,source=%s,destination=%s", src, target);
	} else if (strcmp(type, "tmpfs") == 0) {
		snprintf(spec, sizeof spec, "type=tmpfs,destination=%s", target);
	} else {
		return devc_err(d, key, "type %s: want bind, volume or tmpfs", type);
	}
	return sb_strv_add(&d->c->ctr.mounts, spec);
}

static int parse_post_create(const struct devc *d, json_object *v)
{
	const char *key = "postCreateCommand";
	char *acc = NULL;

	if (json_object_is_type(v, json_type_string)) {
		acc = get_str(d, key, v);
	} else if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 0) {
		if (!(acc = calloc(1, 1)))
			return -ENOMEM;
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			cleanup_free char *w = get_str(d, key, json_object_array_get_idx(v, i));
			if (!w || sb_sh_quote(w, &acc) < 0) {
				free(acc);
				return -EINVAL;
			}
		}
	} else {
		return devc_err(d, key,
		                "want a string or a non-empty array of strings (the object form, commands run "
		                "in parallel, is not supported)");
	}
	if (!acc)
		return -EINVAL;
	free(d->c->ctr.post_create);
	d->c->ctr.post_create = acc;
	return 0;
}

int sb_devcontainer_parse(struct sb_config *c, const char *name, const char *text, size_t len, char *err, size_t errlen)
{
	struct devc d = {c, name, text, len, err, errlen, c->project_dir && access(c->project_dir, F_OK) == 0};
	json_object *root = NULL, *v, *build = NULL;
	char base[PATH_MAX], ws[PATH_MAX];
	int r;

	err[0] = '\0';
	if (!c->project_dir || c->project_dir[0] != '/')
		return sb_errc(err, errlen, EINVAL, "%s: no project directory", name);
	/* Relative paths are relative to the file's directory (.devcontainer/ or the project). */
	if (join_clean(c->project_dir, name[0] == '/' ? name : ".devcontainer/devcontainer.json", base, sizeof base) <
	    0)
		return sb_errc(err, errlen, ENAMETOOLONG, "%s: path too long", name);
	*strrchr(base, '/') = '\0';
	if (!inside(base, c->project_dir))
		util_strlcpy(base, c->project_dir, sizeof base);
	if ((r = sb_json_parse(name, text, len, &root, err, errlen)) < 0)
		return r;
	if (!json_object_is_type(root, json_type_object)) {
		r = sb_errc(err, errlen, EINVAL, "%s:1: the top level must be a JSON object", name);
		goto out;
	}
	/* The workspace first: the other values may name it. */
	snprintf(ws, sizeof ws, "/workspaces/%s", base_name(c->project_dir));
	if (json_object_object_get_ex(root, "workspaceFolder", &v)) {
		cleanup_free char *s = get_str(&d, "workspaceFolder", v);
		if (!s || (r = container_path(&d, "workspaceFolder", s, ws, sizeof ws)) < 0) {
			r = -EINVAL;
			goto out;
		}
	}
	free(c->ctr.workspace);
	if (!(c->ctr.workspace = strdup(ws))) {
		r = -ENOMEM;
		goto out;
	}
	bool has_image = json_object_object_get_ex(root, "image", &v);
	if (has_image) {
		free(c->ctr.image);
		if (!(c->ctr.image = get_str(&d, "image", v))) {
			r = -EINVAL;
			goto out;
		}
		if (!*c->ctr.image || c->ctr.image[0] == '-' || strpbrk(c->ctr.image, " \t") ||
		    strlen(c->ctr.image) > 255) {
			r = devc_err(&d, "image", "%s: want an image name (no spaces, at most 255 bytes)",
			             c->ctr.image);
			goto out;
		}
		const char *why = image_ref_trouble(c->ctr.image, strlen(c->ctr.image));
		if (why) {
			r = devc_err(&d, "image",
			             "%s: %s names where Podman (root) reads an image on the host, outside the project; "
			             "want an image name of your store (\"localhost/dev:1\")",
			             c->ctr.image, why);
			goto out;
		}
	}
	if (json_object_object_get_ex(root, "dockerComposeFile", &v)) {
		r = devc_err(&d, "dockerComposeFile",
		             "Docker Compose is not supported; name an image or build.dockerfile");
		goto out;
	}
	if (json_object_object_get_ex(root, "build", &build)) {
		if (!json_object_is_type(build, json_type_object)) {
			r = devc_err(&d, "build", "must be an object");
			goto out;
		}
		if (!json_object_object_get_ex(build, "dockerfile", &v)) {
			r = devc_err(&d, "build", "needs \"dockerfile\"");
			goto out;
		}
		free(c->ctr.dockerfile);
		if (!(c->ctr.dockerfile = project_path(&d, "dockerfile", v, base))) {
			r = -EINVAL;
			goto out;
		}
		free(c->ctr.context);
		c->ctr.context = json_object_object_get_ex(build, "context", &v) ? project_path(&d, "context", v, base)
		                                                                 : strdup(base);
		if (!c->ctr.context) {
			r = -EINVAL;
			goto out;
		}
	} else if (json_object_object_get_ex(root, "dockerFile", &v)) {
		/* the older spelling, relative to the file */
		free(c->ctr.dockerfile);
		free(c->ctr.context);
		c->ctr.context = strdup(base);
		if (!(c->ctr.dockerfile = project_path(&d, "dockerFile", v, base)) || !c->ctr.context) {
			r = -EINVAL;
			goto out;
		}
	}
	if (has_image == (c->ctr.dockerfile != NULL)) {
		r = sb_errc(err, errlen, EINVAL, "%s:1: want either \"image\" or \"build\": {\"dockerfile\": ...}",
		            name);
		goto out;
	}
	if (json_object_object_get_ex(root, "containerEnv", &v)) {
		if (!json_object_is_type(v, json_type_object)) {
			r = devc_err(&d, "containerEnv", "must be an object of strings");
			goto out;
		}
		json_object_object_foreach(v, k, val)
		{
			size_t kl = strlen(k);
			if (!kl || strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != kl ||
			    (k[0] >= '0' && k[0] <= '9')) {
				r = devc_err(&d, "containerEnv", "%s: want a variable name (letters, digits, _)", k);
				goto out;
			}
			cleanup_free char *s = get_str(&d, "containerEnv", val);
			char *entry = NULL;
			if (!s || asprintf(&entry, "%s=%s", k, s) < 0) {
				r = -EINVAL;
				goto out;
			}
			r = sb_strv_add(&c->ctr.env, entry);
			free(entry);
			if (r < 0)
				goto out;
		}
	}
	if (json_object_object_get_ex(root, "mounts", &v)) {
		if (!json_object_is_type(v, json_type_array)) {
			r = devc_err(&d, "mounts", "must be an array");
			goto out;
		}
		for (size_t i = 0; i < json_object_array_length(v); i++)
			if ((r = parse_mount(&d, json_object_array_get_idx(v, i), base)) < 0)
				goto out;
	}
	/* remoteUser is who the tools run as; containerUser the container's default: sluice runs the
	 * command as remoteUser when it is given, else as containerUser. */
	if (json_object_object_get_ex(root, "containerUser", &v) && (r = parse_user(&d, "containerUser", v)) < 0)
		goto out;
	if (json_object_object_get_ex(root, "remoteUser", &v) && (r = parse_user(&d, "remoteUser", v)) < 0)
		goto out;
	if (json_object_object_get_ex(root, "postCreateCommand", &v) && (r = parse_post_create(&d, v)) < 0)
		goto out;
	free(c->ctr.source);
	r = (c->ctr.source = strdup(name)) ? 0 : -ENOMEM;
out:
	if (r < 0 && !err[0])
		snprintf(err, errlen, "%s: %s", name, strerror(-r));
	json_object_put(root);
	return r;
}

/* ---- the build's Dockerfile ---- */

/* Blanks between words: every byte that is not printable ASCII, so that no other spacing a builder may
 * read as one (\v, \f, U+00A0) hides a flag from this check (reading too many is refused, not passed). */
static bool blank(char c)
{
	return (unsigned char)c <= ' ' || (unsigned char)c >= 0x7f;
}

/* The end of the word at p. */
static const char *word_end(const char *p, const char *end)
{
	while (p < end && !blank(*p))
		p++;
	return p;
}

static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end && blank(*p))
		p++;
	return p;
}

static bool word_is(const char *p, const char *w, const char *kw)
{
	return (size_t)(w - p) == strlen(kw) && strncasecmp(p, kw, strlen(kw)) == 0;
}

/* The image of a FROM, or a COPY's (or ADD's) --from=: an image reference, never a transport. */
static int dockerfile_image(const char *name, unsigned lineno, const char *what, const char *p, const char *w,
                            char *err, size_t errlen)
{
	const char *why = image_ref_trouble(p, (size_t)(w - p));

	if (!why)
		return 0;
	return sb_errc(err, errlen, EPERM,
	               "%s:%u: %s %.*s: %s: the build runs as root on the host, where it would read (or make) "
	               "what that names outside the project; name an image of your store (a tag may be a "
	               "variable: base:${VARIANT})",
	               name, lineno, what, (int)(w - p > 96 ? 96 : w - p), p, why);
}

/* Checks one logical line (continuations joined) of a Dockerfile: a RUN (or ONBUILD RUN) with flags;
 * the image of a FROM and a COPY or ADD --from= (dockerfile_image). */
static int dockerfile_line(const char *name, unsigned lineno, const char *p, const char *end, char *err, size_t errlen)
{
	const char *w;

	p = skip_blanks(p, end);
	if (p == end || *p == '#')
		return 0;
	w = word_end(p, end);
	if (word_is(p, w, "ONBUILD")) {
		p = skip_blanks(w, end);
		w = word_end(p, end);
	}
	if (word_is(p, w, "FROM") || word_is(p, w, "COPY") || word_is(p, w, "ADD")) {
		bool from = word_is(p, w, "FROM");
		int r = 0;
		/* every word of a FROM (its image, and "AS name", which pass) but flags; every --from= */
		for (p = skip_blanks(w, end); p < end && r == 0; p = skip_blanks(w, end)) {
			w = word_end(p, end);
			if (w - p > 7 && strncasecmp(p, "--from=", 7) == 0)
				r = dockerfile_image(name, lineno, "--from", p + 7, w, err, errlen);
			else if (from && (w - p < 2 || p[0] != '-' || p[1] != '-'))
				r = dockerfile_image(name, lineno, "FROM", p, w, err, errlen);
		}
		return r;
	}
	if (!word_is(p, w, "RUN"))
		return 0;
	p = skip_blanks(w, end);
	if (end - p >= 2 && p[0] == '-' && p[1] == '-')
		return sb_errc(err, errlen, EPERM,
		               "%s:%u: RUN %.*s: flags of RUN (--mount, --network, --security) are refused: the build "
		               "runs as root on the host's file system, where they act (a cache mount's id reaches "
		               "any host path: CVE-2024-9675 in the Podman of Debian 12); drop the flag, or build "
		               "the image yourself and name it in \"image\"",
		               name, lineno, (int)(word_end(p, end) - p > 64 ? 64 : word_end(p, end) - p), p);
	return 0;
}

/* One reading of the file with esc as the continuation character. */
static int dockerfile_read(const char *name, const char *text, size_t len, char esc, char *err, size_t errlen)
{
	const char *p = text, *end = text + len;
	char *logical = NULL;
	size_t cap = 0, n = 0;
	unsigned lineno = 0, first = 0;
	int r = 0;

	while (p < end && r == 0) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		lineno++;
		const char *t = skip_blanks(p, eol);
		/* a comment or blank line: nothing (inside a continuation, it does not end it either; a
		 * comment never continues) */
		if (t == eol || *t == '#') {
			p = eol + 1;
			continue;
		}
		const char *tail = eol;
		while (tail > p && (tail[-1] == ' ' || tail[-1] == '\t' || tail[-1] == '\r'))
			tail--;
		bool cont = tail > p && tail[-1] == esc;
		size_t add = (size_t)((cont ? tail - 1 : eol) - p);
		if (n == 0)
			first = lineno;
		if (n + add + 1 > cap) {
			size_t ncap = (n + add + 1) * 2;
			char *nl = realloc(logical, ncap);
			if (!nl) {
				r = sb_errc(err, errlen, ENOMEM, "%s: out of memory", name);
				break;
			}
			logical = nl;
			cap = ncap;
		}
		memcpy(logical + n, p, add);
		n += add;
		logical[n++] = ' '; /* a continuation joins words apart */
		if (!cont) {
			r = dockerfile_line(name, first, logical, logical + n, err, errlen);
			n = 0;
		}
		p = eol + 1;
	}
	if (r == 0 && n > 0)
		r = dockerfile_line(name, first, logical, logical + n, err, errlen);
	free(logical);
	return r;
}

int sb_dockerfile_check(const char *name, const char *text, size_t len, char *err, size_t errlen)
{
	int r;

	err[0] = '\0';
	if (len > SB_DOCKERFILE_MAX_BYTES)
		return sb_errc(err, errlen, EFBIG, "%s: over %d bytes", name, SB_DOCKERFILE_MAX_BYTES);
	if (memchr(text, '\0', len))
		return sb_errc(err, errlen, EINVAL, "%s: a NUL byte (not a Dockerfile)", name);
	/* Read with both continuation characters ("# escape=`" chooses the other one): a directive this
	 * check read otherwise than the builder cannot hide a flag on a continued line. */
	if ((r = dockerfile_read(name, text, len, '\\', err, errlen)) < 0)
		return r;
	return dockerfile_read(name, text, len, '`', err, errlen);
}

/* Reads the file NAME of the project's directory SUB ("" for the project itself) with no symlink
 * followed on the way (common/fs_safe.h), at most SB_DEVC_MAX_BYTES. */
static int read_in_project(const char *project, const char *sub, const char *name, char **text, size_t *len)
{
	cleanup_fd int pfd = fs_safe_open_dir(project);
	if (pfd < 0)
		return pfd;
	cleanup_fd int dfd = *sub ? fs_safe_open_subdir(pfd, sub, false, 0) : dup(pfd);
	if (dfd < 0)
		return *sub ? dfd : -errno;
	return fs_safe_read(dfd, name, SB_DEVC_MAX_BYTES, text, len, NULL);
}

int sb_devcontainer_load(struct sb_config *c, char *err, size_t errlen)
{
	static const char *const where[][2] = {{".devcontainer", "devcontainer.json"}, {"", ".devcontainer.json"}};
	char path[PATH_MAX];
	cleanup_free char *buf = NULL;
	size_t i, len = 0;
	int r = -ENOENT;

	for (i = 0; i < sizeof where / sizeof where[0] && r == -ENOENT; i++)
		r = read_in_project(c->project_dir, where[i][0], where[i][1], &buf, &len);
	if (r < 0)
		return sb_errc(err, errlen, -r, "--sandbox-type devcontainer: %s/.devcontainer/devcontainer.json: %s%s",
		               c->project_dir, strerror(-r),
		               r == -ENOENT  ? " (or use --sandbox-type container --image IMAGE)"
		               : r == -ELOOP ? " (a symlink: name the real file)"
		               : r == -EFBIG ? " (larger than 256 KiB)"
		                             : "");
	i--;
	snprintf(path, sizeof path, "%s/%s%s%s", c->project_dir, where[i][0], *where[i][0] ? "/" : "", where[i][1]);
	return sb_devcontainer_parse(c, path, buf, len, err, errlen);
}
