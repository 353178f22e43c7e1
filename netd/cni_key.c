/* Validation of the container id and interface name of a CNI request (cni_key.h). */
#include "cni_key.h"

#include <string.h>

static bool id_char(char c, bool first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return !first && (c == '_' || c == '.' || c == '-');
}

static bool id_valid_n(const char *id, size_t n)
{
	if (n == 0 || n > NETD_CNI_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!id_char(id[i], i == 0))
			return false;
	return true;
}

bool netd_cni_id_valid(const char *id)
{
	return id && id_valid_n(id, strlen(id));
}

bool netd_cni_ifname_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 15 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f || c == '/' || c == ':')
			return false;
	}
	return true;
}

bool netd_cni_key_valid(const char *key)
{
	const char *slash = key ? strchr(key, '/') : NULL;

	return slash && id_valid_n(key, (size_t)(slash - key)) && netd_cni_ifname_valid(slash + 1);
}
