/* --fs ask|relaxed: which model of the filesystem a session gets, and the configuration keys that
 * shape it. relaxed is the profile's view (what it does not show does not exist); ask shows the host
 * read-only behind the gate (fsgate.c), where the first open outside the read allow-list waits for a
 * person's decision. Default: ask when the launcher has a terminal (someone is there to decide, with
 * `sluicectl approve` from another one) and CI is not set; relaxed otherwise. The organisation can fix
 * the mode, forbid remembering, and fix the allow-list. */
#include "session.h"

#include "log.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sb_fsmode_resolve(struct sb_config *c, bool cli_set, char *err, size_t errlen)
{
	const char *ci = getenv("CI");
	const char *why;

	if (c->fs_mode == SB_FS_ASK && !cli_set && (c->profile == SB_PROFILE_UNSAFE || c->type != SB_TYPE_LOCAL) &&
	    !c->fs_mode_org) {
		/* a configured default that this run's choices rule out */
		c->fs_mode = SB_FS_RELAXED;
		log_info("fs: relaxed (the configured ask does not apply to %s)",
		         c->type == SB_TYPE_FIREJAIL ? "--sandbox-type firejail"
		         : c->type != SB_TYPE_LOCAL  ? "a container --sandbox-type"
		                                     : "the unsafe profile");
		return 0;
	}
	if (c->fs_mode == SB_FS_ASK) {
		if (c->profile == SB_PROFILE_UNSAFE)
			return sb_errc(err, errlen, EINVAL,
			               "--fs ask and --profile unsafe contradict each other (unsafe shows the whole "
			               "host without asking); use --fs relaxed or another profile");
		if (c->type != SB_TYPE_LOCAL)
			return sb_errc(err, errlen, EINVAL, "--fs ask needs --sandbox-type local");
		log_info("fs: ask (%s)", c->fs_mode_org ? "set by the organisation" : "chosen");
		return 0;
	}
	if (c->fs_mode == SB_FS_RELAXED) {
		log_info("fs: relaxed (%s)", c->fs_mode_org ? "set by the organisation" : "chosen");
		return 0;
	}
	if (c->profile == SB_PROFILE_UNSAFE || c->type != SB_TYPE_LOCAL)
		why = c->type == SB_TYPE_FIREJAIL ? "firejail does the filesystem sandbox"
		      : c->type != SB_TYPE_LOCAL  ? "Podman does the filesystem sandbox"
		                                  : "the unsafe profile shows the host";
	else if (ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0)
		why = "CI is set: nobody is there to decide";
	else if (!isatty(STDIN_FILENO) || !isatty(STDERR_FILENO))
		why = "no terminal: nobody is there to decide";
	else if (access("/dev/fuse", R_OK | W_OK) != 0)
		why = "no usable /dev/fuse for the gate";
	else {
		c->fs_mode = SB_FS_ASK;
		log_info("fs: ask (a terminal is there to see the questions; --fs relaxed to change)");
		return 0;
	}
	c->fs_mode = SB_FS_RELAXED;
	log_info("fs: relaxed (%s; --fs ask to change)", why);
	return 0;
}

static int key_err(char *err, size_t errlen, const char *name, const char *key, const char *msg)
{
	return sb_errc(err, errlen, EINVAL, "%s: sandbox.%s: %s", name, key, msg);
}

int sb_fsmode_config_key(struct sb_config *c, const char *key, struct json_object *val, int layer, const char *name,
                         int *rc, char *err, size_t errlen)
{
	if (strcmp(key, "fs") == 0) {
		const char *v = json_object_is_type(val, json_type_string) ? json_object_get_string(val) : "";
		enum sb_fs_mode m = strcmp(v, "ask") == 0       ? SB_FS_ASK
		                    : strcmp(v, "relaxed") == 0 ? SB_FS_RELAXED
		                    : strcmp(v, "auto") == 0    ? SB_FS_AUTO
		                                                : (enum sb_fs_mode) - 1;
		if ((int)m < 0)
			*rc = key_err(err, errlen, name, key, "must be \"ask\", \"relaxed\" or \"auto\"");
		else if (c->fs_mode_org)
			*rc = 0; /* the organisation's choice stands; the lower layer's is ignored */
		else if (layer == SB_CFG_PROJECT && m != SB_FS_ASK)
			*rc = key_err(err, errlen, name, key,
			              "a project file may only choose \"ask\" (the stricter mode)");
		else {
			c->fs_mode = m;
			c->fs_mode_org = layer == SB_CFG_ORG && m != SB_FS_AUTO;
			*rc = 0;
		}
		return 1;
	}
	if (strcmp(key, "fs_read") == 0) {
		*rc = 0;
		if (!json_object_is_type(val, json_type_array)) {
			*rc = key_err(err, errlen, name, key, "must be a list of absolute paths (or ~/...)");
			return 1;
		}
		if (c->org_fs_read_fixed && layer != SB_CFG_ORG)
			return 1; /* the organisation fixed the allow-list */
		for (size_t i = 0; *rc == 0 && i < json_object_array_length(val); i++) {
			json_object *e = json_object_array_get_idx(val, i);
			const char *p = json_object_is_type(e, json_type_string) ? json_object_get_string(e) : "";
			char *x = sb_expand_home(p, c->home);
			if (!x)
				*rc = sb_errc(err, errlen, ENOMEM, "out of memory");
			else if (x[0] != '/' || strstr(x, "/../") || strstr(x, "/./") || strcmp(x, "/") == 0 ||
			         (strlen(x) >= 3 && strcmp(x + strlen(x) - 3, "/..") == 0))
				*rc = key_err(err, errlen, name, key,
				              "entries must be absolute paths (or ~/...) without \"..\", and not /");
			else {
				size_t n = strlen(x);
				while (n > 1 && x[n - 1] == '/')
					x[--n] = '\0';
				/* the whole home (or what holds it) is too wide a grant for one line */
				size_t hn = c->home ? strlen(c->home) : 0;
				if (c->home && strncmp(c->home, x, n) == 0 &&
				    (c->home[n] == '\0' || c->home[n] == '/') && n <= hn) {
					*rc = key_err(err, errlen, name, key,
					              "an entry may not cover the whole home directory; name what is "
					              "needed in it");
					free(x);
					break;
				}
				if (!sb_strv_contains(&c->fs_read, x))
					*rc = sb_strv_add(&c->fs_read, x);
			}
			free(x);
		}
		return 1;
	}
	if (strcmp(key, "allow_fs_remember") == 0 || strcmp(key, "fs_read_fixed") == 0) {
		if (layer != SB_CFG_ORG) {
			*rc = key_err(err, errlen, name, key, "only the organisation file (/etc/sluice) may set it");
			return 1;
		}
		if (!json_object_is_type(val, json_type_boolean)) {
			*rc = key_err(err, errlen, name, key, "must be true or false");
			return 1;
		}
		if (strcmp(key, "allow_fs_remember") == 0)
			c->org_forbid_fs_remember = !json_object_get_boolean(val);
		else
			c->org_fs_read_fixed = json_object_get_boolean(val);
		*rc = 0;
		return 1;
	}
	return 0;
}
