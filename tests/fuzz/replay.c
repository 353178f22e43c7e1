/* Replays a libFuzzer corpus without libFuzzer: calls LLVMFuzzerTestOneInput on every file of each
 * directory (or file) named on the command line, so every build checks the corpus under its own
 * sanitizers. Fails if a directory is empty or unreadable, so a lost corpus cannot pass silently. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;
	int rc = -1;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		goto out;
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		goto out;
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "replay: cannot read %s\n", path);
	free(buf);
	fclose(f);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (replay_file(argv[i]) != 0)
				return 1;
			count++;
			continue;
		}
		DIR *d = opendir(argv[i]);
		struct dirent *de;
		if (!d)
			return 1;
		while ((de = readdir(d))) {
			char path[4096];
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
			if (replay_file(path) != 0) {
				closedir(d);
				return 1;
			}
			count++;
		}
		closedir(d);
	}
	if (count == 0) {
		fprintf(stderr, "replay: no corpus files found\n");
		return 1;
	}
	printf("replayed %u inputs\n", count);
	return 0;
}
