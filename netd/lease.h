/* Address-slot leases shared by every sluice instance on a host (sluiced and embedded helpers):
 * slot N of the pools is owned by whoever holds an flock on RUN_DIR/leases/N. A lease whose lock
 * nobody holds belongs to a crashed instance; its one-line record says what to clean up. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define NETD_LEASE_RECORD_MAX 512

/* Takes slot `slot` if free: creates/locks the file and writes `record`. Returns the lock fd
 * (owned by the caller; keep it open for the life of the lease), -EBUSY if held, or -errno. */
int netd_lease_take(const char *dir, unsigned slot, const char *record);
/* Finds and takes a free slot in [first, last], starting at *hint (updated). Returns the fd and
 * sets *slot, or -ENOSPC when every slot is held. `skip` (may be NULL) marks slots known busy. */
int netd_lease_alloc(const char *dir, unsigned first, unsigned last, unsigned *hint, const char *record,
		     bool (*skip)(unsigned slot, void *arg), void *arg, unsigned *slot);
/* Releases a lease: unlinks its file, then closes fd. */
void netd_lease_release(const char *dir, unsigned slot, int fd);

/* Walks every lease file. For a lease nobody holds (a crashed owner) it calls dead(slot, record)
 * and then removes it; for a held lease it calls live(slot, record). Either callback may be NULL. */
int netd_lease_scan(const char *dir, void (*dead)(unsigned slot, const char *record, void *arg),
		    void (*live)(unsigned slot, const char *record, void *arg), void *arg);
