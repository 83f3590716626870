/*
 * slow_dns.c
 *		LD_PRELOAD shim for 127_client_dns_timeout.pl: getaddrinfo of the
 *		host name in LE_SLOW_DNS_NAME hangs for 30 s and then fails with
 *		EAI_AGAIN, as a lookup whose name server never answers does.  The
 *		name in LE_MULTI_DNS_NAME resolves to the addresses listed in
 *		LE_MULTI_DNS_ADDRS (comma-separated, in that order), as a name with
 *		several A/AAAA records does.  Every other name is resolved as usual.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*gai_fn) (const char *, const char *, const struct addrinfo *, struct addrinfo **);

int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
			struct addrinfo **res)
{
	static gai_fn real = NULL;
	const char *slow = getenv("LE_SLOW_DNS_NAME");

	if (real == NULL)
		real = (gai_fn) dlsym(RTLD_NEXT, "getaddrinfo");
	if (node != NULL && slow != NULL && strcmp(node, slow) == 0)
	{
		unsigned int left = 30;

		while ((left = sleep(left)) > 0)
			;
		return EAI_AGAIN;
	}
	if (node != NULL && getenv("LE_MULTI_DNS_NAME") != NULL &&
		strcmp(node, getenv("LE_MULTI_DNS_NAME")) == 0)
	{
		char		list[1024];
		struct addrinfo **tail = res;
		struct addrinfo h;

		memset(&h, 0, sizeof(h));
		h.ai_family = AF_UNSPEC;
		h.ai_socktype = hints ? hints->ai_socktype : 0;
		h.ai_flags = AI_NUMERICHOST;
		snprintf(list, sizeof(list), "%s", getenv("LE_MULTI_DNS_ADDRS") ? getenv("LE_MULTI_DNS_ADDRS") : "");
		*res = NULL;
		for (char *save = NULL, *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save))
		{
			if (real(a, service, &h, tail) != 0)
				continue;
			while (*tail != NULL)
				tail = &(*tail)->ai_next;
		}
		return *res ? 0 : EAI_NONAME;
	}
	return real(node, service, hints, res);
}
