/* A splice pump: moves bytes from one socket to another through a pipe with splice(2), so bulk bytes
 * are not copied through user space. Used by tunnels (until end of file), by HTTP bodies whose
 * framing the proxy knows (a number of bytes, then back to the parser), and by chunked bodies (framed
 * runs: the owner's framer, asked at each run's end, says how many bytes the next run is). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct splice_pump;

#define SPLICE_PUMP_ALL UINT64_MAX /* a limit: until src reaches end of file */

enum splice_pump_event {
	SPLICE_PUMP_MOVED,     /* n bytes were read from src (they are in the pipe or already in dst) */
	SPLICE_PUMP_DONE,      /* the limit was read and all of it written to dst */
	SPLICE_PUMP_EOF,       /* src reached end of file before the limit; all it sent was written to dst */
	SPLICE_PUMP_READ_ERR,  /* reading src failed (errno in n) */
	SPLICE_PUMP_WRITE_ERR, /* writing dst failed (errno in n); what was in the pipe is lost */
	SPLICE_PUMP_BAD_FRAMING, /* framed runs: the framer refused the bytes (the owner knows why); what
	                          * was in the pipe (the runs before, all checked) was written */
};
/* Every event but MOVED stops the pump first, so the callback may free it then (not on MOVED). */
typedef void (*splice_pump_cb)(struct splice_pump *p, enum splice_pump_event ev, size_t n, void *arg);

/* A pump with its pipe (1 MiB when the kernel allows), stopped. NULL (errno set) when no pipe or event
 * could be had: the caller keeps moving bytes through user space. */
struct splice_pump *splice_pump_new(struct event_base *base, splice_pump_cb cb, void *arg);
/* Moves at most limit bytes from src to dst (non-blocking sockets the caller reads and writes nothing
 * else on until the pump stops). Returns 0 or -errno. */
int splice_pump_start(struct splice_pump *p, int src, int dst, uint64_t limit);
/* Framed runs: more() is called each time the current run's bytes were read from src, to say how
 * many the next run is (the bytes it may read without looking at them: framing the owner has checked
 * by peeking at src, and the data that framing announces). It returns 0 with *limit > 0 (and *last
 * when that run ends the body: SPLICE_PUMP_DONE once it is written), -EAGAIN when src has nothing to
 * look at yet (the pump waits for it, writing what it holds), -ENODATA when src reached end of file
 * (SPLICE_PUMP_EOF), -EPROTO for framing it refuses (SPLICE_PUMP_BAD_FRAMING, after what the pipe holds
 * was written), or another -errno (SPLICE_PUMP_READ_ERR). Runs follow one another within one wake-up,
 * and the pipe is written when it is full or src has nothing more, not at every run's end. more() only
 * looks at src (MSG_PEEK) and must not read it, nor stop or free the pump. */
typedef int (*splice_pump_more_cb)(struct splice_pump *p, int src, uint64_t *limit, bool *last, void *arg);
/* Starts framed runs, the first of limit bytes (0: more() is asked first). Returns 0 or -errno. */
int splice_pump_start_framed(struct splice_pump *p, int src, int dst, uint64_t limit, splice_pump_more_cb more);
/* Stops without an event; bytes still in the pipe are dropped (the connection is going away). */
void splice_pump_stop(struct splice_pump *p);
bool splice_pump_running(const struct splice_pump *p);
void splice_pump_free(struct splice_pump *p); /* NULL no-op */
