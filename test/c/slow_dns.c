/*
 * slow_dns.c
 *		LD_PRELOAD shim for 127_client_dns_timeout.pl: getaddrinfo of the
 *		host name in LE_SLOW_DNS_NAME hangs for 30 s and then fails with
 *		EAI_AGAIN, as a lookup whose name server never answers does.  Every
 *		other name is resolved as usual.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
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
	return real(node, service, hints, res);
}
