/* One way to get a libcurl handle in the manager (the brokers' HTTPS calls, the podman API): the
 * library initialised once, sockets close-on-exec, no signals. */
#ifndef SB_CURL_HANDLE_H
#define SB_CURL_HANDLE_H

#include <curl/curl.h>

/* NULL when memory runs out. The caller sets the rest and calls curl_easy_cleanup(). */
CURL *sb_curl_new(void);

#endif
