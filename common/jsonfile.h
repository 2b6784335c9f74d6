/* Loading a JSON file with the descriptor close-on-exec (jansson's json_load_file uses fopen
 * without it, and both programs clone and exec while other threads read files). */
#ifndef SB_JSONFILE_H
#define SB_JSONFILE_H

#include <jansson.h>

/* Like json_load_file; on an open failure jerr->text says why. */
json_t *sb_json_load_path(const char *path, size_t flags, json_error_t *jerr);

#endif
