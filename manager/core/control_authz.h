/* What a principal of the control API over TLS may ask (control_authz.c). */
#ifndef SB_CONTROL_AUTHZ_H
#define SB_CONTROL_AUTHZ_H

#include <jansson.h>

#include "principals.h"

struct manager;

/* NULL when principal p may send req (it may be adjusted: a session list limited to p's identity,
 * a resolve's note naming p); else the refusal to answer with. Sessions of identities p may not
 * drive are "not_found"; an op not named here is refused (default deny). */
json_t *control_tls_authorize(struct manager *m, const struct principal *p, json_t *req);

#endif
