#include "log.h"

#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <systemd/sd-journal.h>

int mori_log_level = MLOG_NOTICE;
static int to_journal;
static const char *log_ident = "mori";
static const char *const level_names[] = {"error", "warn", "notice", "info", "debug"};

void mori_log_init(const char *ident, int level, int journal)
{
	log_ident = ident;
	mori_log_level = level;
	to_journal = journal;
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
	if (to_journal) {
		static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG};
		sd_journal_send("MESSAGE=%s: %s", subsys, msg, "PRIORITY=%d", prio[level],
				"MORI_SUBSYSTEM=%s", subsys, "SYSLOG_IDENTIFIER=%s", log_ident, NULL);
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
