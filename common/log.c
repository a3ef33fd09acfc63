/* Logging, the client-safe part: levels, formatting, stderr. The journal sink lives in
 * common/svc/log_journal.c so that libmori does not link libsystemd. */
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

int mori_log_level = MLOG_NOTICE;
static mori_log_sink *log_sink; /* NULL: stderr */
static const char *log_ident = "mori";
static const char *const level_names[] = {"error", "warn", "notice", "info", "debug"};

void mori_log_setup(const char *ident, int level, mori_log_sink *sink)
{
	log_ident = ident;
	mori_log_level = level;
	log_sink = sink;
}

int mori_log_level_parse(const char *s)
{
	for (int i = 0; i <= MLOG_DEBUG; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

const char *mori_log_level_name(int level)
{
	return level >= 0 && level <= MLOG_DEBUG ? level_names[level] : "?";
}

void mori_log_write(int level, const char *subsys, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_sink) {
		log_sink(level, subsys, log_ident, msg);
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	localtime_r(&ts.tv_sec, &tm);
	fprintf(stderr, "%02d:%02d:%02d.%03ld %s %-6s %-7s %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
		ts.tv_nsec / 1000000, log_ident, level_names[level], subsys, msg);
}

unsigned long long mori_log_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec;
}
