/* The protected set (issue 22, item 1): project paths whose change would widen the next session or
 * run code outside the sandbox: sluice's own policy (.sluice/), version control (.git/, where
 * hooks, core.hooksPath, core.fsmonitor and filter drivers live), editor tasks, direnv,
 * package-manager rc files and build files that run code. A sandboxed command must not get such a
 * change onto the host without the user's word:
 *
 *  - --project-mode rw: .sluice/ and .git are bound read-only over the project (sb_protect_mount_rw);
 *    an empty .sluice/ is made first when there is none, and a .git that appears during the session
 *    is renamed aside at exit (sb_protect_rw_begin/_end).
 *  - --apply, --save, `sluicectl session save`: protected changes are listed separately and applied
 *    only with an explicit flag (overlay.c asks sb_protect_match for each path of the upper dir;
 *    sb_protect_split_patch routes each file's part of a diff into changes.patch or protected.patch).
 *
 * The list is the defaults below plus the "protected_paths" of every configuration layer (a layer can
 * add, never remove). A pattern without a '/' (other than a trailing one) matches a path component at
 * any depth ("Makefile", ".npmrc"); one with a '/' inside is anchored at the project root
 * ("/.github/workflows/"); a trailing '/' covers the directory and everything beneath it. Components
 * are matched with fnmatch ("*.mk"). */
#include "session.h"

#include "log.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const sb_protect_defaults[] = {
        /* sluice's policy for the next session */
        ".sluice/",
        /* version control: hooks, config (hooksPath, fsmonitor, filters), attributes, submodules */
        ".git/", ".gitmodules", ".gitattributes", ".hg/",
        /* editors, dev containers, direnv: run on open or on cd */
        ".vscode/", ".idea/", ".devcontainer/", ".envrc",
        /* package managers: registries, scripts, hooks, runners */
        ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "pip.conf", ".pypirc", ".cargo/", ".bundle/", ".mvn/",
        /* build files and hooks that run code */
        "Makefile", "makefile", "GNUmakefile", "*.mk", "package.json", "setup.py", "setup.cfg", "pyproject.toml",
        "conftest.py", "build.rs", "CMakeLists.txt", "meson.build", "Rakefile", "Gemfile", "justfile", "Justfile",
        "build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts", "pom.xml",
        ".pre-commit-config.yaml", ".husky/", "/.github/workflows/", "/.gitlab-ci.yml"};

/* Whether relpath (relative to the project, no leading "./") is covered by one pattern. */
static bool match_one(const char *pattern, const char *relpath)
{
	char pat[PATH_MAX], path[PATH_MAX];
	size_t pl = strlen(pattern);
	bool dir = pl > 0 && pattern[pl - 1] == '/';
	if (pl >= sizeof pat || strlen(relpath) >= sizeof path)
		return true; /* cannot tell: protected */
	snprintf(pat, sizeof pat, "%.*s", (int)(pl - dir), pattern);
	const char *p = pat[0] == '/' ? pat + 1 : pat;
	bool anchored = strchr(pat, '/') != NULL;
	snprintf(path, sizeof path, "%s", relpath);

	/* Try each prefix of the path that ends at a component boundary: an anchored pattern against
	 * the whole prefix, an unanchored one against the prefix's last component. A match on a
	 * proper prefix counts only for a directory pattern. */
	for (char *end = path;; end++) {
		if (*end != '/' && *end != '\0')
			continue;
		char saved = *end;
		*end = '\0';
		const char *last = strrchr(path, '/');
		const char *subject = anchored ? path : last ? last + 1 : path;
		bool m = fnmatch(p, subject, anchored ? FNM_PATHNAME : 0) == 0;
		*end = saved;
		if (m && (saved == '\0' || dir))
			return true;
		if (saved == '\0')
			return false;
	}
}

bool sb_protect_match(const struct sb_config *c, const char *relpath)
{
	while (relpath[0] == '.' && relpath[1] == '/')
		relpath += 2;
	for (size_t i = 0; i < sizeof sb_protect_defaults / sizeof sb_protect_defaults[0]; i++)
		if (match_one(sb_protect_defaults[i], relpath))
			return true;
	for (size_t i = 0; i < c->protected_paths.n; i++)
		if (match_one(c->protected_paths.v[i], relpath))
			return true;
	return false;
}

/* ---- --project-mode rw ---- */

static const char *const sb_rw_readonly[] = {".sluice", ".git"};

int sb_protect_rw_begin(struct sb_session *s, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	struct stat st;
	if (c->project_mode != SB_PROJECT_RW || !c->project_dir)
		return 0;
	cleanup_fd int proj = open(c->project_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (proj < 0 || fstat(proj, &st) < 0)
		return sb_err(err, errlen, "cannot open the project %s: %s", c->project_dir, strerror(errno));
	/* An empty .sluice/ to mount read-only: the command cannot create the next session's policy. */
	if (mkdirat(proj, ".sluice", 0755) == 0) {
		if (fchownat(proj, ".sluice", st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
			return sb_err(err, errlen, "cannot hand %s/.sluice to the project's owner: %s", c->project_dir,
			              strerror(errno));
	} else if (errno != EEXIST) {
		return sb_err(err, errlen, "cannot create %s/.sluice (to keep it read-only): %s", c->project_dir,
		              strerror(errno));
	}
	s->protect_git_absent = fstatat(proj, ".git", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT;
	return 0;
}

void sb_protect_rw_end(const struct sb_session *s)
{
	const struct sb_config *c = s->cfg;
	char aside[64];
	struct stat st;
	if (c->project_mode != SB_PROJECT_RW || !c->project_dir || !s->protect_git_absent)
		return;
	cleanup_fd int proj = open(c->project_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (proj < 0 || fstatat(proj, ".git", &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	/* A repository the command made: its hooks and config would run the next time the user runs
	 * git here. It is kept, under a name git does not look at. */
	snprintf(aside, sizeof aside, ".git.sluice-%s", s->id);
	if (renameat(proj, ".git", proj, aside) < 0)
		log_warnx("the session created %s/.git and it cannot be renamed aside (%s): check its hooks and "
		          "config before running git there",
		          c->project_dir, strerror(errno));
	else
		log_warnx("the session created %s/.git; it was renamed to %s (its hooks and config are not "
		          "trusted): review it, then `mv %s .git` to use it",
		          c->project_dir, aside, aside);
}

int sb_protect_mount_rw(const struct sb_session *s, int rootfd, char *err, size_t errlen)
{
	const struct sb_config *c = s->cfg;
	char path[PATH_MAX];
	int r;
	if (c->project_mode != SB_PROJECT_RW)
		return 0;
	for (size_t i = 0; i < sizeof sb_rw_readonly / sizeof sb_rw_readonly[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", strcmp(c->project_dir, "/") ? c->project_dir : "",
		         sb_rw_readonly[i]);
		/* a symlink there (to a gitdir elsewhere in the project) would leave its target writable */
		cleanup_fd int fd = sb_open_beneath(rootfd, path, O_PATH, err, errlen);
		if (fd == -ENOENT)
			continue;
		if (fd == -ELOOP)
			return sb_errc(err, errlen, ELOOP,
			               "%s is a symlink: --project-mode rw keeps it read-only and will not follow it "
			               "(use --project-mode overlay)",
			               path);
		if (fd < 0)
			return fd;
		cleanup_fd int tree =
		        open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE);
		if (tree < 0)
			return sb_err(err, errlen, "cannot bind %s read-only: %s", path, strerror(errno));
		if ((r = sb_set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true, path, err,
		                     errlen)) < 0 ||
		    (r = sb_attach(tree, fd, path, err, errlen)) < 0)
			return r;
		log_debug("protected (read-only): %s", path);
	}
	return 0;
}

/* ---- patches ---- */

/* The project-relative path a section header of `diff -ruN --no-dereference a b` names, or NULL when
 * the line is not one this parser can vouch for (the caller then treats the section as protected).
 * Names hold no control characters (sb_protect_check_names), so every header is one line. */
static char *section_path(const char *line)
{
	static const char diff[] = "diff -ruN --no-dereference a/", file[] = "File a/";
	static const char *const and_differ[] = {"Binary files a/", "Symbolic links a/"};
	size_t n = strlen(line);
	if (strncmp(line, diff, sizeof diff - 1) == 0) { /* ...a/P b/P */
		const char *rest = line + sizeof diff - 1;
		size_t rl = n - (sizeof diff - 1);
		if (rl < 5 || (rl - 3) % 2)
			return NULL;
		size_t pl = (rl - 3) / 2;
		if (strncmp(rest + pl, " b/", 3) || strncmp(rest, rest + pl + 3, pl))
			return NULL;
		return strndup(rest, pl);
	}
	for (size_t i = 0; i < sizeof and_differ / sizeof and_differ[0]; i++) { /* ...a/P and b/P differ */
		size_t a = strlen(and_differ[i]);
		if (strncmp(line, and_differ[i], a))
			continue;
		const char *rest = line + a;
		size_t rl = n - a, fixed = strlen(" and b/") + strlen(" differ");
		if (rl <= fixed || (rl - fixed) % 2 || strcmp(line + n - 7, " differ"))
			return NULL;
		size_t pl = (rl - fixed) / 2;
		if (strncmp(rest + pl, " and b/", 7) || strncmp(rest, rest + pl + 7, pl))
			return NULL;
		return strndup(rest, pl);
	}
	if (strncmp(line, file, sizeof file - 1) == 0) { /* File a/P is a T while file b/P is a T */
		const char *rest = line + sizeof file - 1;
		for (const char *is = strstr(rest, " is a "); is; is = strstr(is + 1, " is a ")) {
			size_t pl = (size_t)(is - rest);
			char probe[PATH_MAX + 32];
			if (pl >= PATH_MAX)
				return NULL;
			snprintf(probe, sizeof probe, " while file b/%.*s is a ", (int)pl, rest);
			if (strstr(is, probe))
				return strndup(rest, pl);
		}
	}
	return NULL;
}

int sb_protect_check_names(int dirfd, const char *relpath, char *bad, size_t badlen)
{
	DIR *d = sb_opendir_dup(dirfd);
	struct dirent *de;
	int r = 0;
	if (!d)
		return -errno;
	while (r == 0 && (de = readdir(d))) {
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		for (const unsigned char *p = (const unsigned char *)name; *p; p++)
			if (*p < 0x20 || *p == 0x7f) {
				snprintf(bad, badlen, "%s/%s", relpath, name);
				for (char *q = bad; *q; q++)
					if ((unsigned char)*q < 0x20 || *q == 0x7f)
						*q = '?';
				r = -EILSEQ;
				break;
			}
		if (r == 0 && de->d_type == DT_DIR) {
			cleanup_fd int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			char subpath[PATH_MAX];
			snprintf(subpath, sizeof subpath, "%s/%s", relpath, name);
			r = sub < 0 ? -errno : sb_protect_check_names(sub, subpath, bad, badlen);
		}
	}
	closedir(d);
	return r;
}

int sb_protect_split_patch(const struct sb_config *c, int in, FILE *plain, FILE *prot, struct sb_strv *protected_paths)
{
	FILE *f = fdopen(in, "r");
	cleanup_free char *line = NULL;
	size_t cap = 0;
	FILE *cur = prot; /* until the first header: nothing should come before one */
	int r = 0;
	if (!f) {
		close(in);
		return -errno;
	}
	for (ssize_t n; (n = getline(&line, &cap, f)) > 0;) {
		bool body = strchr(" +-@\\", line[0]) != NULL;
		if (!body) {
			bool nl = line[n - 1] == '\n';
			if (nl)
				line[n - 1] = '\0';
			cleanup_free char *path = section_path(line);
			bool p = !path || sb_protect_match(c, path);
			if (!path)
				log_warnx("a line of the diff names no path this parser can check; it is treated as a "
				          "protected change: %.200s",
				          line);
			cur = p ? prot : plain;
			if (p && (r = sb_strv_add(protected_paths, path ? path : "?")) < 0)
				break;
			if (nl)
				line[n - 1] = '\n';
		}
		if (fwrite(line, 1, (size_t)n, cur) != (size_t)n) {
			r = -errno;
			break;
		}
	}
	if (r == 0 && ferror(f))
		r = -EIO;
	fclose(f);
	return r;
}
