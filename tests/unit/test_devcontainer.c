/* Unit tests for sandbox/devcontainer.c: what a devcontainer.json may set, the variables, the
 * postCreateCommand quoting, and the refusals with their file:line. The project directory does not
 * exist here, so paths are checked lexically only (container.sh covers symlinks on a real tree). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
	assert_string_equal(c.ctr.post_create, "echo 'it'\\''s'");
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

/* sb_dockerfile_check: 0 for text, or the line it names for a RUN flag. */
static int df(const char *text, char *err, size_t errlen)
{
	return sb_dockerfile_check("D", text, strlen(text), err, errlen);
}

static void expect_flag(const char *text, const char *where)
{
	char err[SB_ERR_MAX];
	assert_int_equal(df(text, err, sizeof err), -EPERM);
	if (!strstr(err, where))
		fail_msg("wanted \"%s\" in \"%s\" for \"%s\"", where, err, text);
}

static void test_dockerfile(void **state)
{
	char err[SB_ERR_MAX];

	(void)state;
	/* what builds need passes */
	assert_int_equal(df("FROM img\nRUN echo --mount=x && make \\\n  --jobs 4\nCOPY . /src\n", err, sizeof err), 0);
	assert_int_equal(df("FROM img\nRUN [\"sh\", \"-c\", \"--mount\"]\nUSER 1000\n", err, sizeof err), 0);
	assert_int_equal(df("# comment\n\nFROM img\nENV A=--mount\nLABEL x=\"RUN --mount\"\n", err, sizeof err), 0);
	assert_int_equal(df("", err, sizeof err), 0);
	/* a RUN flag, however it is spelt or split */
	expect_flag("FROM img\nRUN --mount=type=cache,id=../../../etc,target=/h cat /h/shadow\n", "D:2: RUN --mount");
	expect_flag("FROM img\nrun --network=host true\n", "D:2:");
	expect_flag("FROM img\n\tRuN\t--security=insecure true\n", "D:2:");
	expect_flag("FROM img\nRUN \\\n  --mount=type=bind,source=/,target=/h true\n", "D:2:");
	expect_flag("FROM img\nRUN \\\n# a comment inside\n\n  --mount=x true\n", "D:2:");
	expect_flag("# escape=`\nFROM img\nRUN `\n --mount=x true\n", "D:3:");
	expect_flag("FROM img\nRUN \\\r\n --mount=x true\r\n", "D:2:");
	expect_flag("FROM img\n# a comment that ends in a backslash \\\nRUN --mount=x true\n", "D:3:");
	expect_flag("FROM img\nONBUILD RUN --mount=x true\n", "D:2:");
	expect_flag("FROM img\nRUN\v--mount=x true\n", "D:2:");
	expect_flag("FROM img\nRUN\xc2\xa0--mount=x true\n", "D:2:");
	expect_flag("\xef\xbb\xbfRUN --mount=x true", "D:1:");
	/* not a Dockerfile */
	assert_int_equal(sb_dockerfile_check("D", "RUN\0 --mount", 13, err, sizeof err), -EINVAL);
}

/* The sixth review: an image reference that names a host path. Podman and Buildah (root) take a storage
 * transport in an image name even with --pull=never: "containers-storage:[vfs@/any/path+/run]x" made a
 * store at that path on the old code (tried), "oci-archive:/path" reads the host's file as an image. */
static void accepted_image(const char *image)
{
	struct sb_config c;
	char json[512], err[SB_ERR_MAX] = "";
	snprintf(json, sizeof json, "{\"image\": \"%s\"}", image);
	if (parse(&c, json, err) != 0)
		fail_msg("%s refused: %s", image, err);
	sb_config_clear(&c);
}

static void test_image_transports(void **state)
{
	char err[SB_ERR_MAX];

	(void)state;
	refused("{\n\"image\": \"containers-storage:[vfs@/etc/x+/run/x]foo\"}",
	        NAME ":2: image: containers-storage:[vfs@/etc/x+/run/x]foo: a storage");
	refused("{\"image\": \"oci-archive:/root/backup.tar\"}", NAME ":1: image: oci-archive:/root/backup.tar: a storage transport");
	refused("{\"image\": \"OCI-Archive:/x.tar\"}", NAME ":1: image:");
	refused("{\"image\": \"docker-archive:/x.tar\"}", NAME ":1: image:");
	refused("{\"image\": \"dir:/srv/img\"}", NAME ":1: image:");
	refused("{\"image\": \"oci:${localWorkspaceFolder}/../x\"}", NAME ":1: image:");
	refused("{\"image\": \"docker-daemon:x:1\"}", NAME ":1: image:");
	refused("{\"image\": \"docker://registry.test/x\"}", NAME ":1: image:");
	accepted_image("localhost/dev:1");
	accepted_image("registry.test:5000/team/dev:1.2");
	accepted_image("docker:24-dind");
	accepted_image("alpine");
	accepted_image("x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
	/* the build's FROM and COPY --from: the same, also through a variable, a quote or an escape */
	expect_flag("FROM containers-storage:[vfs@/etc/x+/run/x]foo\n", "D:1: FROM containers-storage:");
	expect_flag("FROM --platform=linux/amd64 oci-archive:/root/b.tar AS base\n", "D:1: FROM oci-archive:");
	expect_flag("ARG B=oci-archive:/root/b.tar\nFROM $B\n", "D:2: FROM $B: a variable");
	expect_flag("ARG R=oci-archive:/root\nFROM ${R}/b.tar\n", "D:2:");
	expect_flag("FROM \"oci-archive:/root/b.tar\"\n", "D:1:");
	expect_flag("FROM oci\\-archive:/root/b.tar\n", "D:1:");
	expect_flag("FROM img\nCOPY --chown=0 --from=dir:/srv/img /a /b\n", "D:2: --from dir:/srv/img");
	expect_flag("FROM img\nONBUILD COPY --from=docker-archive:/x.tar /a /b\n", "D:2:");
	expect_flag("FROM \\\n  tarball:/x.tar\n", "D:1:");
	assert_int_equal(df("ARG VARIANT=12\nFROM mcr.test/devcontainers/base:${VARIANT} AS dev\nFROM docker:24\n"
	                    "COPY --from=dev /a /b\nCOPY --from=0 /c /d\nADD x.tar /e\n",
	                    err, sizeof err),
	                 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_full),
	        cmocka_unit_test(test_build),
	        cmocka_unit_test(test_refusals),
	        cmocka_unit_test(test_dockerfile),
	        cmocka_unit_test(test_image_transports),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
