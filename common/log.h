/* Logging with levels and subsystems, cheap when off (redis serverLog, knot-resolver lib/log.h).
 * To stderr, or to the journal when stderr is the journal (JOURNAL_STREAM) or log_target=journal. */
#ifndef MORI_LOG_H
#define MORI_LOG_H
#include <stdarg.h>

enum mori_log_level { MLOG_ERR = 0, MLOG_WARN, MLOG_NOTICE, MLOG_INFO, MLOG_DEBUG };

extern int mori_log_level;

/* Where a formatted message goes instead of stderr (ident: the program's name). */
typedef void mori_log_sink(int level, const char *subsys, const char *ident, const char *msg);
/* Program name, level and sink (NULL: stderr). Without a call: "mori", notice, stderr, which
 * is what libmori runs with. */
void mori_log_setup(const char *ident, int level, mori_log_sink *sink);
/* mori_log_setup with the journal as sink when to_journal (common/svc/log_journal.c: morid and
 * tools only, it links libsystemd). */
void mori_log_init(const char *ident, int level, int to_journal);
/* Parse "error|warn|notice|info|debug"; -1 if unknown. */
int mori_log_level_parse(const char *s);
const char *mori_log_level_name(int level);
void mori_log_write(int level, const char *subsys, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define mlog(level, subsys, ...)                                            \
	do {                                                                \
		if ((level) <= mori_log_level)                              \
			mori_log_write((level), (subsys), __VA_ARGS__);     \
	} while (0)
#define mlog_err(s, ...) mlog(MLOG_ERR, s, __VA_ARGS__)
#define mlog_warn(s, ...) mlog(MLOG_WARN, s, __VA_ARGS__)
#define mlog_notice(s, ...) mlog(MLOG_NOTICE, s, __VA_ARGS__)
#define mlog_info(s, ...) mlog(MLOG_INFO, s, __VA_ARGS__)
#define mlog_debug(s, ...) mlog(MLOG_DEBUG, s, __VA_ARGS__)

/* Seconds on a monotonic clock, for mlog_ratelimited. */
unsigned long long mori_log_now_s(void);
/* At most one message every period_s seconds from this call site, then how many were left
 * out: for what a flood (refused requests, connection storms, a peer retrying with the wrong
 * key) would otherwise log once per event. */
#define mlog_every(period_s, level, subsys, ...)                                                    \
	do {                                                                                        \
		static unsigned long long last_s_ = ~0ull, skipped_;                                \
		unsigned long long now_s_ = mori_log_now_s();                                       \
		if (last_s_ == ~0ull || now_s_ - last_s_ >= (unsigned long long)(period_s)) {       \
			if (skipped_)                                                               \
				mlog((level), (subsys), "(%llu similar messages left out)", skipped_); \
			last_s_ = now_s_;                                                           \
			skipped_ = 0;                                                               \
			mlog((level), (subsys), __VA_ARGS__);                                       \
		} else {                                                                            \
			skipped_++;                                                                 \
		}                                                                                   \
	} while (0)
#define mlog_ratelimited(level, subsys, ...) mlog_every(1, level, subsys, __VA_ARGS__)

#endif
