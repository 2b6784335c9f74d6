/* Logging for both programs: one JSON object per line on stderr, so logs are machine-readable
 * and a message can never break the line structure: {"ts","level","component","pid","msg"}. The threshold comes from
 * SANDBOX_LOG_LEVEL (debug, info, warn, error; default info). Never logs a nonce or a key. */
#ifndef SB_LOG_H
#define SB_LOG_H

#include <stdint.h>

enum sb_log_level { SB_LOG_DEBUG, SB_LOG_INFO, SB_LOG_WARN, SB_LOG_ERROR };

/* A line's time, "ts": RFC 3339 in UTC with milliseconds ("2026-12-03T09:41:25.693Z"), from
 * milliseconds since the epoch; buf holds SB_LOG_TS_LEN bytes. Returns buf. */
#define SB_LOG_TS_LEN 32
char *sb_log_timestamp(int64_t real_ms, char *buf);

/* Set the program name recorded in every line ("sandbox-agent", "sandbox-manager"). */
void sb_log_init(const char *component);

void sb_log(enum sb_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sb_debug(...) sb_log(SB_LOG_DEBUG, __VA_ARGS__)
#define sb_info(...) sb_log(SB_LOG_INFO, __VA_ARGS__)
#define sb_warn(...) sb_log(SB_LOG_WARN, __VA_ARGS__)
#define sb_error(...) sb_log(SB_LOG_ERROR, __VA_ARGS__)

#endif
