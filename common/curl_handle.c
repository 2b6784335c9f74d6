/* curl_handle.h. libcurl before 8.11 opens its sockets without close-on-exec, and the manager
 * starts processes (git, sandboxes) from other threads at any moment: a socket to an API server
 * must not leak into them. So libcurl's sockets are opened here, with SOCK_CLOEXEC in the same
 * call (no window between socket() and fcntl()). */
#include "curl_handle.h"

#include <pthread.h>
#include <sys/socket.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_start(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static curl_socket_t socket_cloexec(void *user, curlsocktype purpose, struct curl_sockaddr *addr)
{
	(void)user;
	(void)purpose;
	return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

CURL *sb_curl_new(void)
{
	CURL *c;

	pthread_once(&curl_once, curl_start);
	c = curl_easy_init();
	if (c == NULL)
		return NULL;
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, socket_cloexec);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); /* the daemon is threaded */
	return c;
}
