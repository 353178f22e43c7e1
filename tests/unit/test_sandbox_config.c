/* Unit tests for sandbox/config.c: the "sandbox" object of the layered config files, the
 * organisation's caps, what a project file may not do, and the value parsers; and the exit note of
 * discarded changes (its sh quoting, config.c; discard.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox.h"
#include "session.h"

static int load(struct sb_config *c, enum sb_cfg_layer layer, const char *json, char *err)
{
	return sb_config_load_json(c, "test.json", json, strlen(json), layer, err, SB_ERR_MAX);
}

static void test_parse_size(void **state)
{
	uint64_t v;
	(void)state;
	assert_int_equal(sb_parse_size("512M", &v), 0);
	assert_int_equal(v, 512ull << 20);
	assert_int_equal(sb_parse_size("2G", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(sb_parse_size("1.5KiB", &v), 0);
	assert_int_equal(v, 1536);
	assert_int_equal(sb_parse_size("4096", &v), 0);
	assert_int_equal(v, 4096);
	assert_int_not_equal(sb_parse_size("", &v), 0);
	assert_int_not_equal(sb_parse_size("-1M", &v), 0);
	assert_int_not_equal(sb_parse_size("12Q", &v), 0);
	assert_int_not_equal(sb_parse_size("M", &v), 0);
	assert_int_not_equal(sb_parse_size("99999999999T", &v), 0);
}

static void test_parse_cpu_io(void **state)
{
	uint64_t v;
	unsigned maj, min;
	(void)state;
	assert_int_equal(sb_parse_cpu("0.5", &v), 0);
	assert_int_equal(v, 500);
	assert_int_equal(sb_parse_cpu("2", &v), 0);
	assert_int_equal(v, 2000);
	assert_int_not_equal(sb_parse_cpu("0", &v), 0);
	assert_int_not_equal(sb_parse_cpu("nan", &v), 0);
	assert_int_not_equal(sb_parse_cpu("2x", &v), 0);
	assert_int_equal(sb_parse_io("8:16:10M", &maj, &min, &v), 0);
	assert_int_equal(maj, 8);
	assert_int_equal(min, 16);
	assert_int_equal(v, 10ull << 20);
	assert_int_not_equal(sb_parse_io("8:10M", &maj, &min, &v), 0);
	assert_int_not_equal(sb_parse_io("/dev/null:1M", &maj, &min, &v), 0); /* not a block device */
	assert_int_not_equal(sb_parse_io(":1:1M", &maj, &min, &v), 0);
}

static void test_layers_and_caps(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	(void)state;

	sb_config_init(&c);
	c.home = strdup("/home/u");
	/* org: forbids unsafe and the bypass; caps memory at 1G */
	assert_int_equal(
	        load(&c, SB_CFG_ORG,
	             "{ // comments are fine\n \"sandbox\": { \"allow_unsafe\": false, \"allow_no_sandbox\": false,"
	             " \"limits\": { \"memory\": \"1G\" } }, \"allow\": [\"x\"] }",
	             err),
	        0);
	assert_true(c.org_forbid_unsafe);
	assert_true(c.org_forbid_no_sandbox);
	assert_false(c.org_forbid_network);
	/* user asks for more memory than the org allows: capped */
	assert_int_equal(
	        load(&c, SB_CFG_USER,
	             "{\"sandbox\": {\"limits\": {\"memory\": \"8G\", \"pids\": 500}, \"profile\": \"plugin\","
	             " \"writable_paths\": [\"~/.npm\"], \"plugin_paths\": [\"/opt/x\"], \"env\": [\"GOPATH\"]}}",
	             err),
	        0);
	assert_int_equal(c.limits.memory_bytes, 1ull << 30);
	assert_int_equal(c.limits.pids, 500);
	assert_int_equal(c.profile, SB_PROFILE_PLUGIN);
	assert_string_equal(c.writable_paths.v[0], "/home/u/.npm");
	assert_int_equal(sb_config_org_caps()->memory_bytes, 1ull << 30);
	/* user may not set org-only keys */
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"allow_unsafe\": true}}", err), 0);
	assert_non_null(strstr(err, "organisation"));
	/* project: may lower limits and tighten the profile, not widen anything */
	assert_int_equal(
	        load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"limits\": {\"pids\": 100}, \"profile\": \"base\"}}", err),
	        0);
	assert_int_equal(c.limits.pids, 100);
	assert_int_equal(c.profile, SB_PROFILE_BASE);
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"limits\": {\"pids\": 100000}}}", err), 0);
	assert_int_equal(c.limits.pids, 100);
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"profile\": \"unsafe\"}}", err), 0);
	assert_int_equal(c.profile, SB_PROFILE_BASE);
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"writable_paths\": [\"~/.ssh\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"env\": [\"AWS_SECRET_ACCESS_KEY\"]}}", err), 0);
	assert_int_equal(c.writable_paths.n, 1);
	sb_config_clear(&c);
}

/* The sixth review: with no disk limit set above it, a project file raised the session's tmpfs past its
 * default (2 GiB or half the memory) to whatever it named ("64G": the host's memory). */
static void test_project_disk_default(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	(void)state;
	sb_config_init(&c);
	assert_int_equal(sb_config_org_caps()->disk_bytes, 0); /* (runs before any test sets one) */
	uint64_t def = sb_scratch_size(&c);
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"limits\": {\"disk\": \"64G\"}}}", err), 0);
	assert_int_equal(sb_scratch_size(&c), def);
	/* lower is taken */
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"limits\": {\"disk\": \"16M\"}}}", err), 0);
	assert_int_equal(sb_scratch_size(&c), 16ull << 20);
	sb_config_clear(&c);
	/* the user may raise it; the project then lowers what the user set, only */
	sb_config_init(&c);
	assert_int_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"limits\": {\"disk\": \"8G\"}}}", err), 0);
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"limits\": {\"disk\": \"64G\"}}}", err), 0);
	assert_int_equal(sb_scratch_size(&c), 8ull << 30);
	sb_config_clear(&c);
}

static void test_bad_input(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	(void)state;

	sb_config_init(&c);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"profile\": \"rawdog\"}}", err), 0);
	assert_non_null(strstr(err, "test.json: sandbox.profile"));
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"limits\": {\"memory\": \"lots\"}}}", err), 0);
	assert_non_null(strstr(err, "sandbox.limits.memory"));
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"limits\": {\"disk\": 1}}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"writable_paths\": [\"relative/path\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"writable_paths\": [\"~/.npm\"]}}", err),
	                     0); /* no home */
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"surprise\": 1}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": [] }", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "[1,2]", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\n  \"profile\": }", err), 0);
	assert_non_null(strstr(err, "test.json:2:"));
	assert_int_not_equal(load(&c, SB_CFG_USER, "{} trailing", err), 0);
	assert_int_equal(load(&c, SB_CFG_USER, "{\"allow\": [\"pypi.org\"]}", err), 0); /* not ours: ignored */
	sb_config_clear(&c);
}

/* masks: every layer adds; unmask only in the org and user layers, never an org mask; disk capped */
static void test_masks_and_disk(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	(void)state;
	sb_config_init(&c);
	c.home = strdup("/home/u");
	assert_int_equal(load(&c, SB_CFG_ORG,
	                      "{\"sandbox\": {\"masks\": [\"~/corp\"], \"limits\": {\"disk\": \"1G\"}}}", err),
	                 0);
	assert_true(sb_strv_contains(&c.masks, "/home/u/corp"));
	assert_true(sb_strv_contains(&c.org_masks, "/home/u/corp"));
	assert_int_equal(c.limits.disk_bytes, 1ull << 30);
	assert_int_equal(sb_config_org_caps()->disk_bytes, 1ull << 30);
	/* the user may unmask a default and add a mask, not unmask the organisation's */
	assert_int_equal(load(&c, SB_CFG_USER,
	                      "{\"sandbox\": {\"unmask\": [\"~/.npmrc\"], \"masks\": [\"/srv/t\"],"
	                      " \"limits\": {\"disk\": \"4G\"}}}",
	                      err),
	                 0);
	assert_true(sb_strv_contains(&c.unmask, "/home/u/.npmrc"));
	assert_true(sb_strv_contains(&c.masks, "/srv/t"));
	assert_int_equal(c.limits.disk_bytes, 1ull << 30); /* capped by the organisation */
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"unmask\": [\"~/corp\"]}}", err), 0);
	assert_non_null(strstr(err, "masked by the organisation"));
	/* ... under any spelling */
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"unmask\": [\"~//x/../corp/\"]}}", err), 0);
	assert_non_null(strstr(err, "masked by the organisation"));
	assert_false(sb_strv_contains(&c.unmask, "/home/u/corp"));
	/* the project may add, never unmask */
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"unmask\": [\"~/.ssh\"]}}", err), 0);
	assert_non_null(strstr(err, "may not widen"));
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"masks\": [\"~/p\"]}}", err), 0);
	assert_true(sb_strv_contains(&c.masks, "/home/u/p"));
	/* bad values */
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"masks\": [\"relative\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"masks\": \"~/x\"}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_ORG, "{\"sandbox\": {\"masks\": [\"/a/..\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"limits\": {\"disk\": \"10\"}}}", err), 0);
	assert_non_null(strstr(err, "limits.disk"));
	sb_config_clear(&c);
}

/* --fs and its keys (fsmode.c): values, layers, the organisation's hold. */
static void test_fs_keys(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX];
	(void)state;

	sb_config_init(&c);
	assert_int_equal(
	        load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs\": \"relaxed\", \"fs_read\": [\"/srv/data/\"]}}", err), 0);
	assert_int_equal(c.fs_mode, SB_FS_RELAXED);
	assert_int_equal(c.fs_read.n, 1);
	assert_string_equal(c.fs_read.v[0], "/srv/data");
	/* a project may only choose the stricter mode */
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"fs\": \"relaxed\"}}", err), 0);
	assert_non_null(strstr(err, "sandbox.fs"));
	assert_int_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"fs\": \"ask\"}}", err), 0);
	assert_int_equal(c.fs_mode, SB_FS_ASK);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs\": \"maybe\"}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs_read\": [\"relative\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs_read\": [\"/a/../etc\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs_read\": [\"/\"]}}", err), 0);
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"allow_fs_remember\": false}}", err), 0);
	assert_non_null(strstr(err, "only the organisation"));
	/* never the whole home, nor what holds it */
	c.home = strdup("/home/u");
	assert_int_not_equal(load(&c, SB_CFG_PROJECT, "{\"sandbox\": {\"fs_read\": [\"~\"]}}", err), 0);
	assert_non_null(strstr(err, "whole home"));
	assert_int_not_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs_read\": [\"/home\"]}}", err), 0);
	assert_int_equal(load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs_read\": [\"~/docs\", \"/home/uu\"]}}", err), 0);
	sb_config_clear(&c);

	/* the organisation fixes the mode and the allow-list: lower layers change neither */
	sb_config_init(&c);
	assert_int_equal(load(&c, SB_CFG_ORG,
	                      "{\"sandbox\": {\"fs\": \"ask\", \"fs_read_fixed\": true, \"allow_fs_remember\": false, "
	                      "\"fs_read\": [\"/srv/org\"]}}",
	                      err),
	                 0);
	assert_true(c.fs_mode_org);
	assert_true(c.org_forbid_fs_remember);
	assert_int_equal(
	        load(&c, SB_CFG_USER, "{\"sandbox\": {\"fs\": \"relaxed\", \"fs_read\": [\"/srv/user\"]}}", err), 0);
	assert_int_equal(c.fs_mode, SB_FS_ASK);
	assert_int_equal(c.fs_read.n, 1);
	assert_string_equal(c.fs_read.v[0], "/srv/org");
	sb_config_clear(&c);
}

/* ---- sb_sh_quote: the exit note's pasteable command (discard.c) and devcontainer's postCreateCommand ----
 * Differential: the quoted line is read back word by word as POSIX sh and as fish read it (the shells a
 * user pastes the note into), and both must give back every word as it was. The readers take what the
 * quoter may emit: blanks between words, bare bytes, '...' segments and a backslash escape outside them.
 * fish reads \' and \\ inside single quotes as escapes (fish-shell.com, "Quotes"); sh reads nothing there. */
#define QWORDS_MAX 16

static size_t read_words(const char *line, bool fish, char out[][64])
{
	size_t n = 0, o = 0;
	bool in_word = false;

	for (const char *p = line; *p; p++) {
		if (*p == ' ') {
			if (in_word)
				out[n++][o] = '\0';
			in_word = false;
			o = 0;
			continue;
		}
		in_word = true;
		if (*p == '\\' && p[1]) { /* outside quotes: the next byte as it is, in both */
			out[n][o++] = *++p;
		} else if (*p == '\'') {
			for (p++; *p && *p != '\''; p++) {
				if (fish && *p == '\\' && (p[1] == '\'' || p[1] == '\\'))
					p++;
				out[n][o++] = *p;
			}
			if (!*p)
				return SIZE_MAX; /* an open quote: the shell waits for more (a paste goes on with it) */
		} else {
			out[n][o++] = *p;
		}
	}
	if (in_word)
		out[n++][o] = '\0';
	return n;
}

static void test_sh_quote(void **state)
{
	/* a word ending in a backslash, then one that would be commands once a quote is left open */
	static const char *const words[] = {"sluice", "run", "--", "x\\", "; id >/tmp/pwned #", "a'b", "\\'",
	                                    "", "it's\\\\", "=ls", "plain-word_1.0/x:y,z@h+%=v"};
	const size_t nw = sizeof words / sizeof *words;
	char out[QWORDS_MAX][64];
	char *line = NULL;
	(void)state;

	for (size_t i = 0; i < nw; i++)
		assert_int_equal(sb_sh_quote(words[i], &line), 0);
	for (int fish = 0; fish < 2; fish++) {
		size_t n = read_words(line, fish, out);
		if (n != nw)
			fail_msg("%s reads %zu words in <%s>, not %zu", fish ? "fish" : "sh", n, line, nw);
		for (size_t i = 0; i < nw; i++)
			if (strcmp(out[i], words[i]) != 0)
				fail_msg("%s reads word %zu of <%s> as <%s>, not <%s>", fish ? "fish" : "sh", i, line,
				         out[i], words[i]);
	}
	/* plain words stay bare; a word zsh would expand (=ls is the path of ls there) is quoted */
	assert_non_null(strstr(line, " plain-word_1.0/x:y,z@h+%=v"));
	assert_non_null(strstr(line, " '=ls' "));
	free(line);
}

/* The exit note (discard.c) shows the project directory: its name is whoever made the directory's (an
 * unpacked archive's top directory, a clone's), and reaches the terminal with no escape sequence; nor
 * does a C1 control of the command's words. */
static void test_exit_note_project_name(void **state)
{
	char base[] = "/tmp/sluice-note-XXXXXX", proj[256], sess[256], path[300], out[4096];
	static char cmd[] = "true", arg[] = "\xc2\x9b" "8m"; /* U+009B: CSI in UTF-8 */
	char *const argv[] = {cmd, arg, NULL};
	struct sb_config c;
	struct sb_session s;
	int fd, saved;
	ssize_t n;
	FILE *f;
	(void)state;

	assert_non_null(mkdtemp(base));
	/* an escape sequence that hides what follows it (conceal), and a title (OSC) */
	snprintf(proj, sizeof proj, "%s/proj\x1b]0;t\x07\x1b[8m", base);
	snprintf(sess, sizeof sess, "%s/sess", base);
	snprintf(path, sizeof path, "%s/upper", sess);
	assert_int_equal(mkdir(proj, 0700), 0);
	assert_int_equal(mkdir(sess, 0700), 0);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/upper/new.txt", sess);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
	sb_config_init(&c);
	c.project_dir = strdup(proj);
	c.project_mode = SB_PROJECT_OVERLAY;
	memset(&s, 0, sizeof s);
	s.cfg = &c;
	s.dir = sess;
	s.scratch_fd = -1;
	s.argv = argv;

	snprintf(path, sizeof path, "%s/stderr", base);
	fflush(stderr);
	assert_true((fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) >= 0);
	assert_true((saved = dup(2)) >= 0);
	dup2(fd, 2);
	sb_discard_summary(&s);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, out, sizeof out - 1, 0);
	close(fd);
	assert_true(n > 0);
	out[n] = '\0';
	assert_non_null(strstr(out, "0 files changed, 1 added, 0 removed"));
	assert_null(strstr(out, "\xc2\x9b"));
	for (ssize_t i = 0; i < n; i++)
		if ((unsigned char)out[i] < 0x20 && out[i] != '\n')
			fail_msg("control byte 0x%02x at %zd of the note: %s", (unsigned char)out[i], i, out);
	sb_config_clear(&c);
	unlink(path);
	snprintf(path, sizeof path, "%s/upper/new.txt", sess);
	unlink(path);
	snprintf(path, sizeof path, "%s/upper", sess);
	rmdir(path);
	rmdir(sess);
	rmdir(proj);
	rmdir(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_parse_size),
	        cmocka_unit_test(test_parse_cpu_io),
	        cmocka_unit_test(test_project_disk_default),
	        cmocka_unit_test(test_layers_and_caps),
	        cmocka_unit_test(test_bad_input),
	        cmocka_unit_test(test_masks_and_disk),
	        cmocka_unit_test(test_fs_keys),
	        cmocka_unit_test(test_sh_quote),
	        cmocka_unit_test(test_exit_note_project_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
