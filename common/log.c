/* JSON-lines logging on stderr (see log.h). Uses jansson so any byte in a message is escaped, and
 * textesc_json_dumps so that no character a terminal acts on reaches the operator raw. */
#include "log.h"
#include "clock.h"
#include "textesc.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_component = "infra-sandbox";
static int log_threshold = -1;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void sb_log_init(const char *component)
{
	log_component = component;
}

static int log_threshold_get(void)
{
	const char *env;

	if (log_threshold >= 0)
		return log_threshold;
	log_threshold = SB_LOG_INFO;
	env = getenv("SANDBOX_LOG_LEVEL");
	for (int i = 0; env != NULL && i < 4; i++)
		if (strcmp(env, level_names[i]) == 0)
			log_threshold = i;
	return log_threshold;
}

/* A string, not the float seconds it was: a double printed back as 1796285189.6930001 is neither
 * the millisecond it meant nor a time a person or a log tool reads at a glance. */
char *sb_log_timestamp(int64_t real_ms, char *buf)
{
	time_t secs = (time_t)(real_ms / 1000);
	struct tm tm;
	size_t n;

	if (real_ms < 0 || gmtime_r(&secs, &tm) == NULL ||
	    (n = strftime(buf, SB_LOG_TS_LEN - 6, "%Y-%m-%dT%H:%M:%S", &tm)) == 0) {
		snprintf(buf, SB_LOG_TS_LEN, "1970-01-01T00:00:00.000Z");
		return buf;
	}
	snprintf(buf + n, SB_LOG_TS_LEN - n, ".%03dZ", (int)(real_ms % 1000));
	return buf;
}

/* One write per line, its newline included. stderr is unbuffered, so each stdio call is written as
 * it comes, and musl (the static programs' libc) writes "%s\n" as two: the text, then the newline.
 * A file opened O_APPEND (the process backend's agent.log, shared with the network helper) or a pipe
 * keeps one write whole, so the line cannot be cut by another process's. *text is the caller's to
 * free, grown in place to hold the newline. */
static void line_write(char **text)
{
	size_t len = strlen(*text);
	char *whole = realloc(*text, len + 2);

	if (whole == NULL) {
		fprintf(stderr, "%s\n", *text);
		return;
	}
	*text = whole;
	whole[len] = '\n';
	whole[len + 1] = '\0';
	fputs(whole, stderr);
}

void sb_log(enum sb_log_level level, const char *fmt, ...)
{
	char msg[2048], ts[SB_LOG_TS_LEN];
	json_t *line;
	char *text;
	va_list ap;

	if ((int)level < log_threshold_get())
		return;
	/* A message for people: cut at 2 KiB on purpose, so one line can never grow without bound. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* json_stringn_nocheck would accept invalid UTF-8; json_sprintf-free path below keeps
	 * jansson's validation and falls back to a fixed text so a log line is never lost. */
	line = json_pack("{s:s, s:s, s:s, s:i, s:s?}", "ts", sb_log_timestamp(clock_real_ms(), ts),
			 "level", level_names[level], "component", log_component, "pid", (int)getpid(),
			 "msg", msg);
	if (line == NULL)
		line = json_pack("{s:s, s:s, s:s, s:s}", "ts", ts, "level", level_names[level], "component",
				 log_component, "msg", "(log message was not valid UTF-8)");
	text = line ? textesc_json_dumps(line, JSON_COMPACT) : NULL;
	if (text != NULL)
		line_write(&text);
	free(text);
	json_decref(line);
}
