/* The journal sink of common/log.c, for morid and the tools (links libsystemd, so never part
 * of libmori). */
#include <syslog.h>
#include <systemd/sd-journal.h>

#include "log.h"

static void journal_sink(int level, const char *subsys, const char *ident, const char *msg)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG};
	sd_journal_send("MESSAGE=%s: %s", subsys, msg, "PRIORITY=%d", prio[level], "MORI_SUBSYSTEM=%s", subsys,
			"SYSLOG_IDENTIFIER=%s", ident, NULL);
}

void mori_log_init(const char *ident, int level, int to_journal)
{
	mori_log_setup(ident, level, to_journal ? journal_sink : NULL);
}
