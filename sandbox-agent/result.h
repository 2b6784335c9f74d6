/* The exec result of DESIGN.md as JSON: the shape `exec` prints, `serve` sends and the
 * manager records. */
#ifndef SB_RESULT_H
#define SB_RESULT_H

#include <jansson.h>

#include "boundary.h"
#include "receipt.h"

/* receipt may be NULL (no receipt could be written: then "receipt" is null). */
json_t *result_to_json(const struct exec_request *req, const struct exec_outcome *out,
		       const struct receipt_info *receipt);

#endif
