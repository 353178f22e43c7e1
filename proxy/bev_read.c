/* The engine's reads on its plain socket bufferevents (clients of the HTTP, CONNECT, SOCKS5 and
 * transparent fronts, connected upstreams): libevent's own read callback asks the socket how much it
 * holds (ioctl FIONREAD) before every read, a system call per read that the proxy does not need (two per
 * keep-alive request, issue 16). This callback does what libevent 2.1's does (bufferevent_sock.c,
 * bufferevent_readcb) with one recv: the same bounds (the read high watermark, max_single_read, and at
 * most 4096 bytes a read, libevent's EVBUFFER_MAX_READ), the same callbacks (the read callback through
 * bufferevent_trigger, watermarks respected; end of file and errors through bufferevent_trigger_event
 * with reading disabled first), and everything else of the bufferevent unchanged: enabling, disabling,
 * the high-watermark suspension, timeouts (a read timeout goes to libevent's callback), freeing. Only
 * the read event's callback is replaced (its struct is public in event2/bufferevent_struct.h); TLS
 * bufferevents and the DNS fronts keep libevent's. The engine sets no rate limits, the one part of
 * libevent's callback left out. Bytes read that cannot be added (no memory) end the connection as a
 * read error, never vanish from the stream. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <sys/socket.h>

#include "proxy_int.h"

#define BEV_READ_MAX 4096 /* libevent 2.1's EVBUFFER_MAX_READ: what one read callback takes at most */

static event_callback_fn libevent_readcb; /* libevent's own (the same for every socket bufferevent) */

static void readcb(evutil_socket_t fd, short what, void *arg)
{
	struct bufferevent *bev = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char buf[BEV_READ_MAX];
	size_t high = 0, len = evbuffer_get_length(in);
	ev_ssize_t howmuch = BEV_READ_MAX, readmax = bufferevent_get_max_single_read(bev);
	ssize_t n;
	int err, added;
	short ev = BEV_EVENT_READING;

	if (what == EV_TIMEOUT) {
		libevent_readcb(fd, what, arg);
		return;
	}
	bufferevent_getwatermark(bev, EV_READ, NULL, &high);
	if (high && len >= high) {
		libevent_readcb(fd, what, arg); /* (it suspends reading until the input drains) */
		return;
	}
	if (high && (ev_ssize_t)(high - len) < howmuch)
		howmuch = (ev_ssize_t)(high - len);
	if (readmax > 0 && readmax < howmuch)
		howmuch = readmax;
	/* Into a buffer here, then added: a chain reserved for the most a read may bring (4 KiB) is a
	 * malloc glibc's per-thread cache does not serve, where the bytes of a small request fit the 1 KiB
	 * chain evbuffer_add makes (or the last chain's room), as after libevent's FIONREAD. */
	n = recv(fd, buf, (size_t)howmuch, 0);
	err = errno;
	if (n > 0) {
		evbuffer_unfreeze(in, 0); /* (a socket bufferevent keeps its input's end frozen but while it reads) */
		added = evbuffer_add(in, buf, (size_t)n);
		evbuffer_freeze(in, 0);
		if (added != 0) {
			n = -1;
			err = ENOMEM;
		}
	}
	if (n > 0) {
		bufferevent_trigger(bev, EV_READ, 0); /* (the callback may free bev) */
		return;
	}
	if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
		return; /* nothing after all: the event stays */
	ev |= n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR;
	bufferevent_disable(bev, EV_READ);
	errno = err; /* (event callbacks read the socket's error from errno) */
	bufferevent_trigger_event(bev, ev, 0);
}

ssize_t proxy_bev_read_now(struct bufferevent *bev, size_t max)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t have = evbuffer_get_length(in), room = max > have ? max - have : 0;
	struct evbuffer_iovec v;
	ssize_t n = -1;

	if (room == 0)
		return 0;
	evbuffer_unfreeze(in, 0); /* (a socket bufferevent keeps its input's end frozen but while it reads) */
	if (evbuffer_reserve_space(in, (ev_ssize_t)room, &v, 1) == 1) {
		n = recv(bufferevent_getfd(bev), v.iov_base, v.iov_len < room ? v.iov_len : room, MSG_DONTWAIT);
		if (n > 0) {
			v.iov_len = (size_t)n;
			evbuffer_commit_space(in, &v, 1);
		}
	}
	evbuffer_freeze(in, 0);
	return n > 0 ? n : 0;
}

void proxy_bev_fast_read(struct bufferevent *bev)
{
	struct event *ev = &bev->ev_read;
	bool reading;

	if (bufferevent_getfd(bev) < 0 || event_get_callback(ev) == readcb)
		return;
	if (!libevent_readcb) {
		/* libevent's callback is static: a socket bufferevent of our own shows it */
		struct bufferevent *probe = bufferevent_socket_new(bufferevent_get_base(bev), -1, 0);
		if (!probe)
			return;
		libevent_readcb = event_get_callback(&probe->ev_read);
		bufferevent_free(probe);
	}
	if (event_get_callback(ev) != libevent_readcb)
		return; /* not a socket bufferevent (TLS, a filter): left alone */
	reading = (bufferevent_get_enabled(bev) & EV_READ) != 0;
	if (reading)
		bufferevent_disable(bev, EV_READ);
	event_assign(ev, bufferevent_get_base(bev), bufferevent_getfd(bev), event_get_events(ev), readcb, bev);
	if (reading)
		bufferevent_enable(bev, EV_READ);
}
