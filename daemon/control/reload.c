/* Configuration at start and at reload (SIGHUP, moractl reload): parse into a fresh struct,
 * validate, check what may change, then swap (knot-resolver ERROR_HANDLING.md); and the
 * STATUS= line systemd shows. */
#include <stdarg.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "core/morid.h"
#include "peer/peer.h"

void morid_notify_status(struct morid *d, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	sd_notifyf(0, "STATUS=%s", buf);
}

/* Command-line overrides are kept to re-apply over the file at every reload (main fills them). */
char **cli_names, **cli_values;
int cli_n;

int load_config(struct morid *d, struct config *cfg, char *err, size_t errlen)
{
	config_defaults(cfg);
	if (d->config_from_file && config_load_file(cfg, d->config_path, err, errlen) != 0)
		return -1;
	for (int i = 0; i < cli_n; i++) {
		char why[300];
		if (config_set(cfg, cli_names[i], cli_values[i], why, sizeof(why)) != 0) {
			snprintf(err, errlen, "command line: %s", why);
			return -1;
		}
	}
	return config_validate(cfg, err, errlen);
}

void apply_log(struct morid *d)
{
	mori_log_level = mori_log_level_parse(d->cfg.log_level);
}

int morid_reload(struct morid *d, char *err, size_t errlen)
{
	struct config fresh;
	sd_notify(0, "RELOADING=1");
	int rc = load_config(d, &fresh, err, errlen);
	if (rc == 0)
		rc = config_reload_allowed(&d->cfg, &fresh, err, errlen);
	if (rc == 0) {
		d->cfg = fresh; /* swap only after parse and validation succeeded */
		apply_log(d);
		peers_reload(d); /* connect peers newly listed in 'peers' */
		/* allow_uids admits sessions, not only new ones: a reload that removes a uid detaches
		 * its clients (their regions, names and PEs end as when they close) */
		list_each(it, &d->clients) {
			struct client *c = list_entry(it, struct client, link);
			if (!c->dying && !config_uid_allowed(&d->cfg, c->uid))
				d->client_kill(c, "its uid is no longer in allow_uids (reload)");
		}
		count(d, C_RELOADS, 1);
		mlog_notice("config", "reloaded %s", d->config_from_file ? d->config_path : "(defaults)");
	} else {
		count(d, C_RELOAD_FAILURES, 1);
		mlog_err("config", "reload failed, old configuration kept: %s", err);
	}
	sd_notify(0, "READY=1");
	morid_notify_status(d, "serving %u clients", d->nclients);
	return rc;
}

