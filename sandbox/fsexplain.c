/* `sluicectl policy explain --path P`: which layer decides whether a `--fs ask` session may read P
 * without asking. Mirrors the gate's order (fsgate.c): a masked path is refused (never asked), then
 * the default allow-list (system directories, the project, session /tmp), then each layer's
 * "fs_read" (organisation, user, project; with "fs_read_fixed" only the organisation's), else the
 * open is asked about. Each layer file is read on its own so that its own entries can be named. */
#include "session.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool under(const char *path, const char *base)
{
	size_t n = strlen(base);
	return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static const char *const fs_defaults[] = {"/usr", "/bin", "/sbin", "/lib",     "/lib32", "/lib64", "/libx32", "/etc",
                                          "/opt", "/nix", "/tmp",  "/var/tmp", "/run",   "/dev",   "/proc"};

int sb_fs_explain(const char *path, const char *project, const char *sysconfdir, char *out, size_t outlen)
{
	struct sb_config all, one;
	struct sb_session s;
	char files[3][PATH_MAX], err[SB_ERR_MAX];
	const char *names[3] = {"organisation", "user", "project"};
	const char *xdg = getenv("XDG_CONFIG_HOME");
	int r, verdict = SB_FS_EXPLAIN_ASK;

	sb_config_init(&all);
	memset(&s, 0, sizeof s);
	all.home = NULL;
	{
		const char *h = getenv("HOME");
		if (h && h[0] == '/')
			all.home = strdup(h);
	}
	all.project_dir = project ? strdup(project) : NULL;
	if ((r = sb_config_load_layers(&all, sysconfdir, err, sizeof err)) < 0) {
		snprintf(out, outlen, "%s", err);
		sb_config_clear(&all);
		return -EINVAL;
	}
	s.cfg = &all;
	if (sb_masks_resolve(&s, err, sizeof err) == 0)
		for (size_t i = 0; i < s.mask_paths.n; i++)
			if (under(path, s.mask_paths.v[i])) {
				snprintf(out, outlen, "denied at once, never asked: %s is masked (a secret: %s)", path,
				         s.mask_paths.v[i]);
				verdict = SB_FS_EXPLAIN_DENY;
				goto done;
			}
	for (size_t i = 0; i < sizeof fs_defaults / sizeof fs_defaults[0]; i++)
		if (under(path, fs_defaults[i])) {
			snprintf(out, outlen, "read without asking: the default allow-list has %s", fs_defaults[i]);
			verdict = SB_FS_EXPLAIN_ALLOW;
			goto done;
		}
	if (project && under(path, project)) {
		snprintf(out, outlen, "read without asking: it is in the project %s", project);
		verdict = SB_FS_EXPLAIN_ALLOW;
		goto done;
	}
	snprintf(files[0], PATH_MAX, "%s/policy.json", sysconfdir);
	if (xdg && xdg[0] == '/')
		snprintf(files[1], PATH_MAX, "%s/sluice/policy.json", xdg);
	else
		snprintf(files[1], PATH_MAX, "%s/.config/sluice/policy.json", all.home ? all.home : "/nonexistent");
	snprintf(files[2], PATH_MAX, "%s/.sluice/policy.json", project ? project : "/nonexistent");
	for (int l = 0; l < 3; l++) {
		if (l > 0 && all.org_fs_read_fixed)
			break;
		sb_config_init(&one);
		one.home = all.home ? strdup(all.home) : NULL;
		one.org_fs_read_fixed = false;
		if (sb_config_load_file(&one, files[l], (enum sb_cfg_layer)l, err, sizeof err) == 0)
			for (size_t i = 0; i < one.fs_read.n; i++)
				if (under(path, one.fs_read.v[i])) {
					snprintf(out, outlen,
					         "read without asking: the %s layer (%s) has \"fs_read\": \"%s\"",
					         names[l], files[l], one.fs_read.v[i]);
					verdict = SB_FS_EXPLAIN_ALLOW;
					sb_config_clear(&one);
					goto done;
				}
		sb_config_clear(&one);
	}
	snprintf(out, outlen, "asked about: no layer allows it%s (the first open waits for `sluicectl approve`)",
	         all.org_fs_read_fixed ? " (the organisation fixes the allow-list)" : "");
done:
	sb_masks_free(&s);
	sb_config_clear(&all);
	return verdict;
}
