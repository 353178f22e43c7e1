/* Unit tests for sandbox/devcontainer.c: what a devcontainer.json may set, the variables, the
 * postCreateCommand quoting, and the refusals with their file:line. The project directory does not
 * exist here, so paths are checked lexically only (container.sh covers symlinks on a real tree). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "session.h"

#define NAME "/nonexistent/proj/.devcontainer/devcontainer.json"

static int parse(struct sb_config *c, const char *json, char *err)
{
	sb_config_init(c);
	c->project_dir = strdup("/nonexistent/proj");
	return sb_devcontainer_parse(c, NAME, json, strlen(json), err, SB_ERR_MAX);
}

static void test_full(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX] = "";
	(void)state;
	const char *json = "// comment\n"
	                   "{\n"
	                   "  \"image\": \"localhost/dev:1\",\n"
	                   "  \"containerEnv\": { \"WS\": \"${containerWorkspaceFolder}\", \"B\": "
	                   "\"${localWorkspaceFolderBasename}\" },\n"
	                   "  \"mounts\": [ \"source=${localWorkspaceFolder}/conf,target=/etc/app,type=bind\",\n"
	                   "              \"type=volume,source=cache,target=/cache\", { \"type\": \"tmpfs\", "
	                   "\"target\": \"/t\" } ],\n"
	                   "  \"postCreateCommand\": [ \"echo\", \"it's\" ],\n"
	                   "  \"remoteUser\": \"root\", /* trailing comma */\n"
	                   "}\n";
	assert_int_equal(parse(&c, json, err), 0);
	assert_string_equal(c.ctr.image, "localhost/dev:1");
	assert_null(c.ctr.dockerfile);
	assert_string_equal(c.ctr.workspace, "/workspaces/proj");
	assert_int_equal(c.ctr.env.n, 2);
	assert_string_equal(c.ctr.env.v[0], "WS=/workspaces/proj");
	assert_string_equal(c.ctr.env.v[1], "B=proj");
	assert_int_equal(c.n_binds, 1);
	assert_string_equal(c.binds[0].src, "/nonexistent/proj/conf");
	assert_string_equal(c.binds[0].dst, "/etc/app");
	assert_false(c.binds[0].rw);
	assert_true(c.binds[0].literal);
	assert_int_equal(c.ctr.mounts.n, 2);
	assert_string_equal(c.ctr.mounts.v[0], "type=volume,source=cache,destination=/cache");
	assert_string_equal(c.ctr.mounts.v[1], "type=tmpfs,destination=/t");
	assert_string_equal(c.ctr.post_create, "'echo' 'it'\\''s'");
	assert_null(c.ctr.user);
	assert_string_equal(c.ctr.source, NAME);
	sb_config_clear(&c);
}

static void test_build(void **state)
{
	struct sb_config c;
	char err[SB_ERR_MAX] = "";
	(void)state;
	assert_int_equal(parse(&c,
	                       "{ \"build\": { \"dockerfile\": \"Containerfile\", \"context\": \"..\" },"
	                       " \"workspaceFolder\": \"/src/./app/\" }",
	                       err),
	                 0);
	assert_string_equal(c.ctr.dockerfile, "/nonexistent/proj/.devcontainer/Containerfile");
	assert_string_equal(c.ctr.context, "/nonexistent/proj");
	assert_string_equal(c.ctr.workspace, "/src/app");
	assert_null(c.ctr.image);
	sb_config_clear(&c);
}

/* Each bad file fails with err starting with want (file:line: key: ...). */
static void refused(const char *json, const char *want)
{
	struct sb_config c;
	char err[SB_ERR_MAX] = "";
	assert_int_not_equal(parse(&c, json, err), 0);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("for %s\n  want: %s\n  got:  %s", json, want, err);
	sb_config_clear(&c);
}

static void test_refusals(void **state)
{
	(void)state;
	refused("{\n\"image\": \"x\",\n\"containerEnv\": { \"T\": \"${localEnv:HOME}\" } }",
	        NAME ":3: containerEnv: ${localEnv:HOME}");
	refused("{\n\"image\": \"x\",\n\"containerEnv\": { \"T\": \"${nope}\" } }",
	        NAME ":3: containerEnv: ${nope}: unknown");
	refused("{\n\"image\": \"x\",\n\"containerEnv\": { \"T\": \"${unterminated\" } }",
	        NAME ":3: containerEnv: unterminated");
	refused("{\n\"image\": \"x\",\n\"containerEnv\": { \"1X\": \"v\" } }",
	        NAME ":3: containerEnv: 1X: want a variable");
	refused("{\"image\": \"x\",\n\"mounts\": [\"source=/etc,target=/e,type=bind\"] }",
	        NAME ":2: mounts: bind source /etc");
	refused("{\"image\": \"x\",\n\"mounts\": [\"source=${localWorkspaceFolder}/../x,target=/e\"] }",
	        NAME ":2: mounts: bind source");
	refused("{\"image\": \"x\",\n\"mounts\": [\"type=volume,source=../x,target=/e\"] }",
	        NAME ":2: mounts: volume source");
	refused("{\"image\": \"x\",\n\"mounts\": [\"type=tmpfs,target=/\"] }", NAME ":2: mounts: /: want an absolute");
	refused("{\"image\": \"x\",\n\"mounts\": [\"type=nfs,target=/e\"] }", NAME ":2: mounts: type nfs");
	refused("{\"image\": \"x\",\n\"mounts\": [\"type=bind,bogus=1,target=/e\"] }",
	        NAME ":2: mounts: bogus: unknown");
	refused("{\"image\": \"x\",\n\n\"remoteUser\": \"1000\" }", NAME ":3: remoteUser: 1000: only root");
	refused("{\"image\": \"x\",\n\"remoteUser\": \"vscode\" }", NAME ":2: remoteUser: vscode: want a numeric");
	refused("{\"build\": {\n\"dockerfile\": \"../../../etc/passwd\" } }",
	        NAME ":2: dockerfile: ../../../etc/passwd: must lie inside");
	refused("{\"image\": \"x\", \"build\": { \"dockerfile\": \"D\" } }", NAME ":1: want either");
	refused("{ \"name\": \"no image\" }", NAME ":1: want either");
	refused("{\n\n  \"image\": 3 }", NAME ":3: image: must be a string");
	refused("{\"image\": \"-x\" }", NAME ":1: image: -x: want an image name");
	refused("{\"image\": \"x\", \"dockerComposeFile\": \"c.yml\" }", NAME ":1: dockerComposeFile: Docker Compose");
	refused("{\"image\": \"x\",\n\"postCreateCommand\": { \"a\": \"b\" } }",
	        NAME ":2: postCreateCommand: want a string");
	refused("{\"image\": \"x\",\n\"workspaceFolder\": \"rel\" }",
	        NAME ":2: workspaceFolder: rel: want an absolute");
	refused("{\n  \"image\": \"x\"\n  \"y\": 1 }", NAME ":3:");
	refused("[1]", NAME ":1: the top level must be a JSON object");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_full),
	        cmocka_unit_test(test_build),
	        cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
