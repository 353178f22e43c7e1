/* The parser of the VM request (vm-spec.h). Its input crosses from the sandbox into the guest:
 * every record is bounded by len, every count by its array, and nothing is allocated. */
#include "vm-spec.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

static int parse_id(const char *s, unsigned *out)
{
	unsigned long v = 0;
	if (!*s || strlen(s) > 10)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned long)(*s - '0');
	}
	if (v >= UINT_MAX)
		return -1;
	*out = (unsigned)v;
	return 0;
}

int sb_vm_spec_parse(const char *buf, size_t len, struct sb_vm_spec *out, const char **bad)
{
	size_t off = 0;
	bool have_uid = false, have_gid = false;

	memset(out, 0, sizeof *out);
	*bad = "";
	if (len == 0 || len > SB_VM_SPEC_MAX || buf[len - 1] != '\0') {
		*bad = "empty, too long or unterminated";
		return -EINVAL;
	}
	while (off < len) {
		char tag = buf[off++];
		if (off >= len) {
			*bad = "a tag without a value";
			return -EINVAL;
		}
		const char *v = buf + off;
		off += strlen(v) + 1; /* buf[len - 1] is NUL: strlen stops inside buf */
		unsigned id;
		switch (tag) {
		case 'u':
		case 'g':
			if (parse_id(v, &id) < 0) {
				*bad = "a uid or gid that is not a number";
				return -EINVAL;
			}
			if (tag == 'u') {
				out->uid = id;
				have_uid = true;
			} else {
				out->gid = id;
				have_gid = true;
			}
			break;
		case 'c':
		case 'h':
		case 'w':
		case 'r':
			if (v[0] != '/') {
				*bad = "a path that is not absolute";
				return -EINVAL;
			}
			if (tag == 'c')
				out->cwd = v;
			else if (tag == 'h')
				out->home = v;
			else if (out->n_shares == SB_VM_SHARES_MAX) {
				*bad = "too many shares";
				return -EINVAL;
			} else {
				out->share_ro[out->n_shares] = tag == 'r';
				out->shares[out->n_shares++] = v;
			}
			break;
		case 'a':
			if (out->argc == SB_VM_ARGS_MAX) {
				*bad = "too many arguments";
				return -EINVAL;
			}
			out->argv[out->argc++] = v;
			break;
		case 'e':
			if (!strchr(v, '=') || v[0] == '=') {
				*bad = "an environment entry without NAME=";
				return -EINVAL;
			}
			if (out->envc == SB_VM_ENV_MAX) {
				*bad = "too many environment entries";
				return -EINVAL;
			}
			out->envp[out->envc++] = v;
			break;
		default: *bad = "an unknown record"; return -EINVAL;
		}
	}
	if (!have_uid || !have_gid || out->argc == 0 || !out->argv[0][0]) {
		*bad = "no uid, gid or command";
		return -EINVAL;
	}
	out->argv[out->argc] = NULL;
	out->envp[out->envc] = NULL;
	return 0;
}
