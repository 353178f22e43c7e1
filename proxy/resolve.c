/* Asynchronous upstream name resolution: A and AAAA in parallel through the engine's evdns (which
 * talks only to the configured upstream resolver; no search list, no hosts file). */
#include <errno.h>
#include <event2/dns.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_int.h"

struct proxy_resolve {
	proxy_resolve_cb cb; /* NULL once cancelled */
	void *arg;
	struct evdns_request *req4, *req6; /* borrowed from evdns; NULL once answered */
	int outstanding;                   /* evdns callbacks still to come */
	int err4, err6;
	struct sockaddr_storage addrs[PROXY_RESOLVE_MAX];
	size_t n4, n6;
	struct sockaddr_storage v6[PROXY_RESOLVE_MAX / 2];
};

const char *proxy_resolve_strerror(int err)
{
	switch (err) {
	case DNS_ERR_NOTEXIST: return "no such name (NXDOMAIN)";
	case DNS_ERR_NODATA: return "the name has no addresses";
	case DNS_ERR_TIMEOUT: return "the resolver did not answer in time";
	case DNS_ERR_SERVERFAILED: return "the resolver failed (SERVFAIL)";
	case DNS_ERR_REFUSED: return "the resolver refused the query";
	default: return evdns_err_to_string(err);
	}
}

static void finish(struct proxy_resolve *r)
{
	size_t n = r->n4;
	int err = 0;

	/* IPv4 first, then IPv6: the order addresses are tried in. */
	for (size_t i = 0; i < r->n6 && n < PROXY_RESOLVE_MAX; i++)
		r->addrs[n++] = r->v6[i];
	if (n == 0) {
		/* Report the more telling error: a timeout or failure over "no data". */
		err = r->err4 ? r->err4 : r->err6;
		if (r->err4 == DNS_ERR_NODATA && r->err6 && r->err6 != DNS_ERR_NODATA)
			err = r->err6;
		if (!err)
			err = DNS_ERR_NODATA;
	}
	if (r->cb)
		r->cb(err, r->addrs, n, r->arg);
	free(r);
}

static void got(int result, char type, int count, int ttl, void *addresses, void *arg)
{
	struct proxy_resolve *r = arg;
	(void)ttl;

	if (r->cb && result == DNS_ERR_NONE && count > 0) {
		for (int i = 0; i < count; i++) {
			if (type == DNS_IPv4_A && r->n4 < PROXY_RESOLVE_MAX / 2) {
				struct sockaddr_in *s4 = (struct sockaddr_in *)&r->addrs[r->n4++];
				memset(s4, 0, sizeof *s4);
				s4->sin_family = AF_INET;
				memcpy(&s4->sin_addr, (const char *)addresses + 4 * i, 4);
			} else if (type == DNS_IPv6_AAAA && r->n6 < PROXY_RESOLVE_MAX / 2) {
				struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&r->v6[r->n6++];
				memset(s6, 0, sizeof *s6);
				s6->sin6_family = AF_INET6;
				memcpy(&s6->sin6_addr, (const char *)addresses + 16 * i, 16);
			}
		}
	}
	if (type == DNS_IPv4_A) {
		r->err4 = result == DNS_ERR_NONE && count == 0 ? DNS_ERR_NODATA : result;
		r->req4 = NULL;
	} else {
		r->err6 = result == DNS_ERR_NONE && count == 0 ? DNS_ERR_NODATA : result;
		r->req6 = NULL;
	}
	if (--r->outstanding == 0)
		finish(r);
}

struct proxy_resolve *proxy_resolve_start(struct proxy_engine *e, const char *name, proxy_resolve_cb cb, void *arg)
{
	struct proxy_resolve *r = calloc(1, sizeof *r);

	if (!r)
		return NULL;
	r->cb = cb;
	r->arg = arg;
	r->outstanding = 2;
	/* evdns may answer synchronously only on errors it detects at once; count before starting. */
	r->req4 = evdns_base_resolve_ipv4(e->evdns, name, DNS_QUERY_NO_SEARCH, got, r);
	if (!r->req4) {
		r->err4 = DNS_ERR_UNKNOWN;
		r->outstanding--;
	}
	r->req6 = evdns_base_resolve_ipv6(e->evdns, name, DNS_QUERY_NO_SEARCH, got, r);
	if (!r->req6) {
		r->err6 = DNS_ERR_UNKNOWN;
		r->outstanding--;
	}
	if (r->outstanding == 0) {
		free(r);
		return NULL;
	}
	return r;
}

void proxy_resolve_cancel(struct proxy_resolve *r)
{
	struct evdns_request *a, *b;
	if (!r)
		return;
	/* evdns still calls back (with DNS_ERR_CANCEL) for each request; the last callback frees r. */
	r->cb = NULL;
	a = r->req4;
	b = r->req6;
	if (a)
		evdns_cancel_request(NULL, a);
	if (b)
		evdns_cancel_request(NULL, b);
}
