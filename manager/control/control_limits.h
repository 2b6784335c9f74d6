/* The control protocol's limits, stated once for both sides: the front ends (front/) check a value
 * before sending it, so a bad one is a usage error with exit 2 and nothing sent; the daemon's
 * modules enforce the same numbers (records.h, output_keep.h name them for their own code). */
#ifndef SB_CONTROL_LIMITS_H
#define SB_CONTROL_LIMITS_H

#define CONTROL_RECORDS_LIMIT_MAX 200u    /* records: execs per page */
#define CONTROL_SESSIONS_LIMIT_MAX 1000u  /* session.list: sessions per page */
#define CONTROL_NOTE_MAX 4096u            /* resolve: bytes of an operator's note */

/* exec "keep_output": where the whole output is kept, beneath the session's TMPDIR, and how many
 * files a session keeps (the oldest beyond are removed). */
#define CONTROL_KEEP_DIR ".outputs"
#define CONTROL_KEEP_FILES 20

#endif
