/* Files in someone else's tree, written on their behalf: the policy files that `sluicectl approve
 * --remember` (and any other writer of the layered policy files) updates in a user's project or home.
 *
 * A privileged caller (root approving into a user's project) must not be steered by the tree's owner:
 * no symlink is followed once the starting directory is opened (every component opened with openat
 * and O_NOFOLLOW|O_DIRECTORY, so a component swapped for a symlink between a check and a use is
 * refused with ELOOP), every later step is relative to a directory fd (a rename of the path after the
 * walk changes nothing: the fd still names the directory that was opened), a file is replaced by a
 * temporary file renamed over it in the same directory (never written through, never half-written),
 * and the work runs with the credentials of the directory's owner (fs_safe_run_as: a forked child that
 * drops to them), so the kernel refuses whatever the owner could not do themselves.
 *
 * Also a directory of the caller's own opened so that no other local user can have chosen what it holds
 * (fs_safe_open_owned_dir, fs_safe_open_owned_file: the VM cache, whose kernel and initramfs are booted).
 *
 * All functions return 0 (or an fd) or -errno. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Opens the directory at the absolute PATH by a walk from "/" that follows no symlink in any
 * component (a caller resolves the user's path with realpath(3) first; a component that became a
 * symlink since is refused with -ELOOP). Returns an O_DIRECTORY|O_CLOEXEC fd. */
int fs_safe_open_dir(const char *path);

/* Opens the directory REL ("a/b", relative, no "." or ".." or empty component) beneath DFD by the same
 * walk; with create, a missing component is made with mkdirat(mode) (the caller's fs credentials own
 * it). Returns an fd, -ENOENT when missing and !create, -EINVAL for a bad REL. */
int fs_safe_open_subdir(int dfd, const char *rel, bool create, mode_t mode);

/* Reads the regular file NAME (one component) in DFD, not following a symlink, at most MAX bytes:
 * *text is malloced and NUL-terminated (the caller frees it), *len its length, *st (optional) the
 * file's stat. -ENOENT when absent, -ELOOP for a symlink, -EFBIG over MAX, -EINVAL if not a regular
 * file. */
int fs_safe_read(int dfd, const char *name, size_t max, char **text, size_t *len, struct stat *st);

/* Replaces NAME in DFD with LEN bytes of TEXT: a new temporary file in DFD (O_EXCL|O_NOFOLLOW, MODE),
 * written and fsynced, then renamed over NAME in the same DFD. A symlink or hard link at NAME is
 * replaced, never written through. The new file belongs to the caller's fs credentials. */
int fs_safe_replace(int dfd, const char *name, const char *text, size_t len, mode_t mode);

/* Runs fn(arg, err, errlen) as UID:GID (the owner of the tree to be written) and returns its result
 * (0 or -errno), with err filled by fn. When the caller is root and UID is not 0: in a forked child that
 * takes UID's supplementary groups (or GID alone), GID and UID for real, effective, saved and fs ids
 * and so loses every capability before fn runs; fn's message and result come back over a pipe. Else
 * in-process. fn must not rely on changing the caller's memory. The caller's stdout is flushed first
 * (fn's output is not printed twice). */
int fs_safe_run_as(uid_t uid, gid_t gid, int (*fn)(void *arg, char *err, size_t errlen), void *arg, char *err,
                   size_t errlen);

/* Opens the directory at the absolute PATH that only UID and root can have made what it is (a cache
 * whose files a privileged program then trusts: the VM's kernel and initramfs). Walks from "/" one
 * component at a time with openat: every directory on the way must be owned by UID or root and not
 * writable by group or others unless sticky (/tmp), a symlink on the way is followed only when UID or
 * root owns it (at most 40), and PATH itself must not be a symlink, must be owned by UID or root and
 * not writable by group or others. With create, missing components are made with mkdirat(mode) (the
 * caller's fs credentials own them). Returns an O_DIRECTORY|O_CLOEXEC fd and, when RESOLVED is not
 * NULL, the path without symlinks in RESOLVED; or -errno with the reason (a path and what is wrong
 * with it) in WHY: -EPERM wrong owner or writable by others, -ELOOP PATH is a symlink or too many. */
int fs_safe_open_owned_dir(const char *path, uid_t uid, bool create, mode_t mode, char *resolved, size_t rlen,
                           char *why, size_t whylen);

/* Opens the regular file NAME (one component) in DFD for reading, not following a symlink, and only
 * when UID or root owns it and neither group nor others may write it. Returns an fd, -ENOENT when
 * absent, -ELOOP for a symlink, -EINVAL if not a regular file, -EPERM for a wrong owner or mode (WHY
 * says which). */
int fs_safe_open_owned_file(int dfd, const char *name, uid_t uid, char *why, size_t whylen);
