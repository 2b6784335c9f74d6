/* Logging for both programs: one JSON object per line on stderr, so logs are machine-readable
 * and a message can never break the line structure. The threshold comes from
 * SANDBOX_LOG_LEVEL (debug, info, warn, error; default info). Never logs a nonce or a key. */
#ifndef SB_LOG_H
#define SB_LOG_H

enum sb_log_level { SB_LOG_DEBUG, SB_LOG_INFO, SB_LOG_WARN, SB_LOG_ERROR };

/* Set the program name recorded in every line ("sandbox-agent", "sandbox-manager"). */
void sb_log_init(const char *component);

void sb_log(enum sb_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sb_debug(...) sb_log(SB_LOG_DEBUG, __VA_ARGS__)
#define sb_info(...) sb_log(SB_LOG_INFO, __VA_ARGS__)
#define sb_warn(...) sb_log(SB_LOG_WARN, __VA_ARGS__)
#define sb_error(...) sb_log(SB_LOG_ERROR, __VA_ARGS__)

#endif
