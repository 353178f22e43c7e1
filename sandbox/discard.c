/* The exit note of a session whose project overlay is about to be discarded: without --save or
 * --apply, what the command wrote to the project (an `npm install`'s node_modules, a build's output)
 * goes away with the session directory. When there is any, one line says how many files changed,
 * were added and removed, and the exact command that keeps them. The upper directory is read as
 * overlayfs left it: a 0:0 character device is a removal (whiteout), an entry without a counterpart
 * in the project is an addition, one with a counterpart a change. Nothing here follows a symlink. */
#include "session.h"

#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DISCARD_DEPTH_MAX 64

struct counts {
	unsigned long changed, added, removed;
};

/* Counts the files beneath an added directory (an empty one counts once). */
static void count_added(int dfd, struct counts *c, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	unsigned long before = c->added;

	if (!d) {
		close(dfd);
		c->added++;
		return;
	}
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int sub = de->d_type == DT_DIR && depth < DISCARD_DEPTH_MAX
		                  ? openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
		                  : -1;
		if (sub >= 0)
			count_added(sub, c, depth + 1);
		else
			c->added++;
	}
	if (c->added == before)
		c->added++;
	closedir(d);
}

/* upper: a directory of the upper layer; lower: the same directory in the project, or -1. */
static void walk(int upper, int lower, struct counts *c, int depth)
{
	DIR *d = fdopendir(upper);
	struct dirent *de;

	if (!d) {
		close(upper);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		struct stat st, lst;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		bool in_lower = lower >= 0 && fstatat(lower, de->d_name, &lst, AT_SYMLINK_NOFOLLOW) == 0;
		if (S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0)) {
			if (in_lower)
				c->removed++;
			continue;
		}
		if (S_ISDIR(st.st_mode) && depth < DISCARD_DEPTH_MAX) {
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				continue;
			if (in_lower && S_ISDIR(lst.st_mode)) {
				int lsub = openat(lower, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				walk(sub, lsub, c, depth + 1);
				if (lsub >= 0)
					close(lsub);
			} else {
				count_added(sub, c, depth + 1);
			}
			continue;
		}
		if (in_lower)
			c->changed++;
		else
			c->added++;
	}
	closedir(d);
}

void sb_discard_summary(const struct sb_session *s)
{
	const struct sb_config *cfg = s->cfg;
	struct counts c = {0, 0, 0};
	char upper[4096], shown[4096];

	if (cfg->quiet || cfg->project_mode != SB_PROJECT_OVERLAY || cfg->save != SB_SAVE_NONE ||
	    !cfg->project_dir || (s->scratch_fd < 0 && !s->dir))
		return;
	/* the upper directory lives in the session's scratch space (scratch.c), else in SESSION/upper */
	snprintf(upper, sizeof upper, "%s/upper", s->dir ? s->dir : "");
	int ufd = s->scratch_fd >= 0 ? openat(s->scratch_fd, "upper", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
	                             : open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (ufd < 0)
		return;
	cleanup_fd int lfd = open(cfg->project_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	walk(ufd, lfd, &c, 0);
	if (c.changed + c.added + c.removed == 0)
		return;
	/* the same command with --save, quoted for sh (a control byte shows as '?', a C1 control in UTF-8 as
	 * '??': not sent to the terminal; other bytes stay, so that the words can be pasted) */
	cleanup_free char *again = NULL;
	bool ok = sb_sh_quote("sluice", &again) == 0 && sb_sh_quote("run", &again) == 0;
	bool secrets = false;
	for (size_t i = 0; ok && i < cfg->run_nopts; i++) {
		const char *w = cfg->run_opts[i], *eq;
		char hidden[512];
		/* an --env VALUE is left out ("NAME=..."): a token a CI script passed would reach its log */
		if (cfg->run_opt_secret && cfg->run_opt_secret[i]) {
			/* "NAME=VALUE", or "--env=NAME=VALUE": NAME begins after the option's '=' */
			const char *name = w[0] == '-' ? strchr(w, '=') : w;
			eq = name ? strchr(name + (w[0] == '-'), '=') : NULL;
			if (eq && eq - w < 400)
				snprintf(hidden, sizeof hidden, "%.*s...", (int)(eq - w + 1), w);
			else
				snprintf(hidden, sizeof hidden, "...");
			w = hidden;
			secrets = true;
		}
		ok = sb_sh_quote(w, &again) == 0;
	}
	ok = ok && sb_sh_quote("--save", &again) == 0 && sb_sh_quote("--", &again) == 0;
	for (size_t i = 0; ok && s->argv && s->argv[i]; i++)
		ok = sb_sh_quote(s->argv[i], &again) == 0;
	for (unsigned char *p = ok ? (unsigned char *)again : NULL; p && *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			*p = '?';
		else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
			p[0] = p[1] = '?';
	fprintf(stderr,
	        "sluice: discarding this session's changes to %s: %lu file%s changed, %lu added, %lu removed\n"
	        "sluice: to keep them, run it again with --save (then `sluicectl session save ID` applies them)"
	        " or --apply%s%s\n",
	        /* the directory's name is whoever made it (an unpacked archive's, a clone's): an escape sequence
	         * in it could hide or fake the command below */
	        util_printable(shown, sizeof shown, cfg->project_dir), c.changed, c.changed == 1 ? "" : "s", c.added,
	        c.removed, ok && secrets ? " (the values given to --env are left out: write them again)" : "",
	        ok ? ":" : ".");
	if (ok)
		fprintf(stderr, "sluice:   %s\n", again);
}
