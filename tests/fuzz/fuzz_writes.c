/* Fuzz target: the reader of the launcher's record of what sessions could write
 * (sandbox/writes.c, sb_writes_match). The record lives in the user's home, which a session with the
 * home bound read-write could rewrite. Besides not crashing: a match is reported only for a record
 * line that names a directory holding the file, and the reported id is a terminated string. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char id[SB_ID_LEN];
	if (size > 65536)
		return 0;
	/* the same bytes against a file beneath a likely directory, and against one beneath none */
	memset(id, 'x', sizeof id);
	if (sb_writes_match((const char *)data, size, "/p/sub/.sluice/policy.json", 1000, id, sizeof id) &&
	    memchr(id, '\0', sizeof id) == NULL)
		abort();
	if (sb_writes_match((const char *)data, size, "relative/.sluice/policy.json", 1000, NULL, 0) &&
	    !memmem(data, size, " /", 2))
		abort(); /* a match needs a record line with an absolute directory */
	return 0;
}
