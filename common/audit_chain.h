/* Tamper evidence for the audit log: every line carries the SHA-256 of the previous line's hash and
 * its own body, so an edited, removed or reordered line breaks the chain (`sluicectl log verify`).
 *
 * Line format (the writer produces BODY, this module the suffix):
 *     BODY ,"prev":"<64 hex>","hash":"<64 hex>"}\n
 * where BODY is the record's JSON object without its closing brace, and
 *     hash = SHA-256( prev_hex "\n" BODY )
 * The first line of a new log has prev = 64 zeros; a log continued after rotation or restart starts
 * from the last hash of the file before it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define AUDIT_HASH_HEX 64
#define AUDIT_CHAIN_SUFFIX_LEN (9 + AUDIT_HASH_HEX + 10 + AUDIT_HASH_HEX + 2) /* without the newline */

struct audit_chain {
	char prev[AUDIT_HASH_HEX + 1]; /* hex of the last sealed line's hash */
};

void audit_chain_init(struct audit_chain *c);

/* Continues the chain from the last complete line of an existing log (fd open for reading; its
 * offset is not used). Returns 0 (also for an empty file), -EBADMSG if the last line carries no hash,
 * or -errno. */
int audit_chain_resume(struct audit_chain *c, int fd);

/* Computes the suffix for BODY (body_len bytes, starting with '{', no closing brace) into
 * out (AUDIT_CHAIN_SUFFIX_LEN + 1 bytes, NUL-terminated) and advances the chain. Returns 0 or -EIO. */
int audit_chain_seal(struct audit_chain *c, const char *body, size_t body_len, char *out);

enum audit_verify_result {
	AUDIT_VERIFY_OK = 0,
	AUDIT_VERIFY_MALFORMED,  /* not a chained line */
	AUDIT_VERIFY_EDITED,     /* the hash does not match the line */
	AUDIT_VERIFY_BROKEN,     /* prev does not match the previous line: removed or reordered lines */
};

/* Checks one line (without its newline) against the chain; on success advances it. The first line
 * checked with a fresh chain (prev all zeros) that has a non-zero prev is accepted as the start of
 * a continued log and *continued is set. */
/* After a failed line: continue from the hash the line claims (so one edit is reported once), or
 * restart the chain if the line has none. Returns true if the next line must be treated as first. */
bool audit_chain_resync(struct audit_chain *c, const char *line, size_t len);

enum audit_verify_result audit_chain_verify_line(struct audit_chain *c, const char *line, size_t len,
						 bool first, bool *continued);
