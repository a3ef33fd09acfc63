/* morid configuration: defaults, bounds, file errors with file:line, reload rules, allow_uids. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../daemon/core/config.h"
#include "host_port_cases.h"

static char path[64];

/* Write text to a fresh temporary file; its path goes to `path`. */
static const char *conf_file(const char *text)
{
	strcpy(path, "/tmp/mori-test-conf-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	size_t n = strlen(text);
	ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
	close(fd);
	return path;
}

static void unlink_conf(void)
{
	if (path[0])
		unlink(path);
	path[0] = 0;
}

/* The value config_entry reports for name, or NULL. */
static const char *entry(const struct config *c, const char *want, int *reloadable)
{
	static char value[1100];
	const char *name, *help;
	int rl;
	for (int i = 0; config_entry(c, i, &name, value, sizeof(value), &rl, &help); i++)
		if (!strcmp(name, want)) {
			if (reloadable)
				*reloadable = rl;
			return value;
		}
	return NULL;
}

START_TEST(defaults)
{
	struct config c;
	char err[256] = "";
	config_defaults(&c);
	ck_assert_str_eq(c.runtime_dir, "/run/mori");
	ck_assert_str_eq(c.log_level, "notice");
	ck_assert_str_eq(c.log_target, "auto");
	ck_assert_str_eq(c.allow_uids, "");
	ck_assert_int_eq(c.socket_mode, 0660);
	ck_assert_int_eq(c.max_message_bytes, 4 << 20);
	ck_assert_int_eq(c.max_clients, 1024);
	ck_assert_int_eq(c.data_streams, 4);
	ck_assert_int_eq(c.transfer_timeout_ms, 30000);
	ck_assert_int_eq(c.ring_entries, 4096);
	ck_assert_int_eq(c.arena_mib, 64);
	ck_assert_str_eq(c.listen, "");
	ck_assert_str_eq(c.peers, "");
	ck_assert_msg(config_validate(&c, err, sizeof(err)) == 0, "defaults do not validate: %s", err);
	/* shown back the way a config file would spell them */
	ck_assert_str_eq(entry(&c, "socket_mode", NULL), "0660");
	ck_assert_str_eq(entry(&c, "max_message_bytes", NULL), "4194304");
	ck_assert_str_eq(entry(&c, "runtime_dir", NULL), "/run/mori");
}
END_TEST

START_TEST(table_is_complete)
{
	struct config c;
	config_defaults(&c);
	const char *name, *help;
	char value[1100];
	int rl, n = 0;
	for (int i = 0; config_entry(&c, i, &name, value, sizeof(value), &rl, &help); i++, n++) {
		char err[256];
		ck_assert_msg(help && help[0], "%s has no help", name);
		/* every shown value parses back to itself */
		struct config d;
		config_defaults(&d);
		ck_assert_msg(config_set(&d, name, value, err, sizeof(err)) == 0, "%s: %s", name, err);
		ck_assert_int_eq(memcmp(&c, &d, sizeof(c)), 0);
	}
	ck_assert_int_ge(n, 14);
	ck_assert_int_eq(config_entry(&c, n, &name, value, sizeof(value), &rl, &help), 0);
	ck_assert_int_eq(config_entry(&c, -1, &name, value, sizeof(value), &rl, &help), 0);
}
END_TEST

START_TEST(bounds)
{
	struct config c;
	char err[256];
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "max_clients", "1", err, sizeof(err)), 0);
	ck_assert_int_eq(c.max_clients, 1);
	ck_assert_int_eq(config_set(&c, "max_clients", "65536", err, sizeof(err)), 0);
	ck_assert_int_eq(c.max_clients, 65536);
	ck_assert_int_eq(config_set(&c, "max_clients", "0", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "out of bounds"));
	ck_assert_ptr_nonnull(strstr(err, "max_clients"));
	ck_assert_int_eq(config_set(&c, "max_clients", "65537", err, sizeof(err)), -1);
	ck_assert_int_eq(c.max_clients, 65536); /* a refused value leaves the field alone */
	ck_assert_int_eq(config_set(&c, "max_message_bytes", "1023", err, sizeof(err)), -1);
	ck_assert_int_eq(config_set(&c, "max_message_bytes", "1024", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&c, "max_message_bytes", "67108865", err, sizeof(err)), -1);
	ck_assert_int_eq(config_set(&c, "data_streams", "-1", err, sizeof(err)), -1);
	ck_assert_int_eq(config_set(&c, "data_streams", "12abc", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "not an integer"));
	ck_assert_int_eq(config_set(&c, "data_streams", "", err, sizeof(err)), -1);
	ck_assert_int_eq(config_set(&c, "transfer_timeout_ms", "99999999999999999999", err, sizeof(err)), -1);
	/* octal for the mode, like chmod */
	ck_assert_int_eq(config_set(&c, "socket_mode", "0600", err, sizeof(err)), 0);
	ck_assert_int_eq(c.socket_mode, 0600);
	ck_assert_int_eq(config_set(&c, "socket_mode", "01000", err, sizeof(err)), -1);
	ck_assert_int_eq(config_set(&c, "socket_mode", "0689", err, sizeof(err)), -1);
	/* strings longer than their field are refused, not truncated */
	char longv[400];
	memset(longv, 'x', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = 0;
	longv[0] = '/';
	ck_assert_int_eq(config_set(&c, "runtime_dir", longv, err, sizeof(err)), -1);
	ck_assert_str_eq(c.runtime_dir, "/run/mori");
}
END_TEST

START_TEST(validate)
{
	struct config c;
	char err[256];
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "ring_entries", "100", err, sizeof(err)), 0); /* in bounds */
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -1);            /* not a power of two */
	ck_assert_ptr_nonnull(strstr(err, "ring_entries"));
	config_defaults(&c);
	strcpy(c.log_level, "loud");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "log_level"));
	config_defaults(&c);
	strcpy(c.log_target, "syslog");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -1);
	config_defaults(&c);
	strcpy(c.runtime_dir, "relative/dir");
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "absolute"));
}
END_TEST

START_TEST(dashes_and_underscores)
{
	struct config c;
	char err[256];
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "ring-entries", "1024", err, sizeof(err)), 0);
	ck_assert_int_eq(c.ring_entries, 1024);
	ck_assert_int_eq(config_set(&c, "runtime-dir", "/tmp/x", err, sizeof(err)), 0);
	ck_assert_str_eq(c.runtime_dir, "/tmp/x");
	ck_assert_int_eq(config_set(&c, "no-such-option", "1", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "unknown option"));
}
END_TEST

START_TEST(file_good)
{
	struct config c;
	char err[300];
	config_defaults(&c);
	const char *p = conf_file("; comment\n# another\n[morid]\nmax_clients = 77\n"
				  "log_level=debug\n\nring_entries = 0x400\n");
	ck_assert_msg(config_load_file(&c, p, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.max_clients, 77);
	ck_assert_str_eq(c.log_level, "debug");
	ck_assert_int_eq(c.ring_entries, 1024);
	ck_assert_int_eq(c.arena_mib, 64); /* untouched keys keep their default */
	unlink_conf();
	/* keys before any section are accepted too */
	config_defaults(&c);
	p = conf_file("max_clients = 5\n");
	ck_assert_msg(config_load_file(&c, p, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.max_clients, 5);
	unlink_conf();
}
END_TEST

/* Load text and expect failure with "<path>:<line>: " and reason in the message. */
static void expect_file_error(const char *text, int line, const char *reason)
{
	struct config c;
	char err[400], want[128];
	config_defaults(&c);
	const char *p = conf_file(text);
	ck_assert_int_eq(config_load_file(&c, p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:%d: ", p, line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error '%s' does not start with '%s'", err, want);
	ck_assert_msg(strstr(err, reason) != NULL, "error '%s' does not say '%s'", err, reason);
	unlink_conf();
}

START_TEST(file_unknown_key)
{
	expect_file_error("[morid]\nmax_clients = 3\nfrobnicate = yes\n", 3, "unknown option 'frobnicate'");
}
END_TEST

START_TEST(file_out_of_bounds)
{
	expect_file_error("# c\n\n[morid]\n\ndata_streams = 17\n", 5, "out of bounds");
}
END_TEST

START_TEST(file_syntax_error)
{
	expect_file_error("[morid]\nmax_clients = 3\nthis line has no equals sign\nlog_level = debug\n", 3,
			  "syntax error");
}
END_TEST

/* The first error wins, whichever kind it is, and carries its own line. */
START_TEST(file_first_error_wins)
{
	expect_file_error("[morid]\nnot a key value line\nfrobnicate = 1\n", 2, "syntax error");
	expect_file_error("[morid]\nfrobnicate = 1\nnot a key value line\n", 2, "unknown option 'frobnicate'");
	expect_file_error("[morid]\nmax_clients = 0\nmax_clients = 1\n[\n", 2, "out of bounds");
}
END_TEST

START_TEST(file_long_line)
{
	char text[2048];
	int n = snprintf(text, sizeof(text), "[morid]\nmax_clients = 3\npeers = ");
	memset(text + n, 'a', 1000);
	strcpy(text + n + 1000, "\nmax_clients = 4\n");
	expect_file_error(text, 3, "line longer than");
}
END_TEST

START_TEST(file_inline_comment)
{
	struct config c;
	char err[300];
	config_defaults(&c);
	const char *p = conf_file("[morid]\nallow_uids = 0,12345 ; root and the test user\n");
	ck_assert_msg(config_load_file(&c, p, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.allow_uids, "0,12345");
}
END_TEST

START_TEST(file_unknown_section)
{
	expect_file_error("[morid]\nmax_clients = 3\n[other]\nlog_level = debug\n", 4, "unknown section");
}
END_TEST

/* Write n bytes (NULs allowed) to a fresh temporary file; its path goes to `path`. */
static const char *conf_bytes(const char *bytes, size_t n)
{
	strcpy(path, "/tmp/mori-test-conf-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, bytes, n), (ssize_t)n);
	close(fd);
	return path;
}

static void expect_bytes_error(const char *bytes, size_t n, int line, const char *reason)
{
	struct config c;
	char err[400], want[128];
	config_defaults(&c);
	const char *p = conf_bytes(bytes, n);
	ck_assert_int_eq(config_load_file(&c, p, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:%d: ", p, line);
	ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "error '%s' does not start with '%s'", err, want);
	ck_assert_msg(strstr(err, reason) != NULL, "error '%s' does not say '%s'", err, reason);
	unlink_conf();
}

/* NUL bytes are refused with their line (fgets + strlen ended a line at a
 * NUL, so a zero-filled file, what a crash can leave, read as all defaults, and the text after
 * a NUL was dropped). */
START_TEST(file_nul_bytes)
{
	static char zeros[8192];
	expect_bytes_error(zeros, sizeof(zeros), 1, "NUL byte");
	static const char mid[] = "[morid]\nmax_clients = 5\0garbage here\nring_entries = 128\n";
	expect_bytes_error(mid, sizeof(mid) - 1, 2, "NUL byte");
	static const char last[] = "[morid]\nmax_clients = 5\n\n# c\n\0";
	expect_bytes_error(last, sizeof(last) - 1, 5, "NUL byte");
}
END_TEST

/* Only a regular file of at most CONFIG_FILE_MAX bytes is read: /dev/zero was read forever and
 * a FIFO blocked in fopen (both on the event loop at SIGHUP). */
START_TEST(file_not_regular_or_huge)
{
	struct config c;
	char err[400];
	config_defaults(&c);
	ck_assert_int_eq(config_load_file(&c, "/dev/zero", err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "/dev/zero: is not a regular file"), "%s", err);
	char fifo[] = "/tmp/mori-test-fifo-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(fifo));
	char fp[64];
	snprintf(fp, sizeof(fp), "%s/f", fifo);
	ck_assert_int_eq(mkfifo(fp, 0600), 0);
	ck_assert_int_eq(config_load_file(&c, fp, err, sizeof(err)), -1); /* no writer: must not block */
	ck_assert_msg(strstr(err, "is not a regular file"), "%s", err);
	unlink(fp);
	rmdir(fifo);
	/* CONFIG_FILE_MAX + 1 bytes of comment lines */
	size_t n = CONFIG_FILE_MAX + 1;
	char *big = malloc(n);
	ck_assert_ptr_nonnull(big);
	for (size_t i = 0; i < n; i++)
		big[i] = i % 64 == 63 ? '\n' : '#';
	const char *p = conf_bytes(big, n);
	ck_assert_int_eq(config_load_file(&c, p, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "more than a configuration file's 1048576"), "%s", err);
	unlink_conf();
	/* exactly CONFIG_FILE_MAX is fine */
	p = conf_bytes(big, n - 1);
	ck_assert_msg(config_load_file(&c, p, err, sizeof(err)) == 0, "%s", err);
	free(big);
}
END_TEST

START_TEST(file_missing)
{
	struct config c;
	char err[400];
	config_defaults(&c);
	ck_assert_int_eq(config_load_file(&c, "/nonexistent/mori/morid.conf", err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent/mori/morid.conf"));
	ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

START_TEST(reload_rules)
{
	struct config a, b;
	char err[256];
	config_defaults(&a);
	ck_assert_int_eq(config_validate(&a, err, sizeof(err)), 0);
	b = a;
	ck_assert_int_eq(config_reload_allowed(&a, &b, err, sizeof(err)), 0);
	/* reloadable ones may change */
	ck_assert_int_eq(config_set(&b, "log_level", "debug", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&b, "max_clients", "9", err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&b, "allow_uids", "5,6", err, sizeof(err)), 0);
	ck_assert_int_eq(config_validate(&b, err, sizeof(err)), 0);
	ck_assert_msg(config_reload_allowed(&a, &b, err, sizeof(err)) == 0, "%s", err);
	/* every option the table marks as restart-only is refused, by name */
	const char *name, *help;
	char value[1100];
	int rl, refused = 0;
	for (int i = 0; config_entry(&a, i, &name, value, sizeof(value), &rl, &help); i++) {
		if (rl)
			continue;
		/* some other value this option accepts: its default +-1, or a few typical ones */
		char plus[32], minus[32];
		long long v = strtoll(value, NULL, 0);
		snprintf(plus, sizeof(plus), "%lld", v + 1);
		snprintf(minus, sizeof(minus), "%lld", v - 1);
		const char *candidates[] = {plus, minus, "0600", "128", "2", "stderr", "/tmp/elsewhere",
					    "10.0.0.1:7000", "127.0.0.1:7000", "mlx5_0", "tcp", "2097152",
					    "redis://127.0.0.1:6379/0", NULL};
		int changed = 0;
		for (int k = 0; candidates[k] && !changed; k++) {
			b = a;
			if (config_set(&b, name, candidates[k], err, sizeof(err)) != 0 ||
			    config_validate(&b, err, sizeof(err)) != 0 || memcmp(&a, &b, sizeof(a)) == 0)
				continue;
			changed = 1;
			ck_assert_msg(config_reload_allowed(&a, &b, err, sizeof(err)) == -1,
				      "%s changed to %s at reload", name, candidates[k]);
			ck_assert_msg(strstr(err, name) != NULL, "reason '%s' does not name %s", err, name);
		}
		ck_assert_msg(changed, "found no other valid value for %s to try", name);
		refused++;
	}
	ck_assert_int_ge(refused, 5); /* runtime_dir, log_target, socket_mode, ring_entries, arena_mib, ... */
	int reloadable = -1;
	entry(&a, "ring_entries", &reloadable);
	ck_assert_int_eq(reloadable, 0);
	entry(&a, "max_clients", &reloadable);
	ck_assert_int_eq(reloadable, 1);
}
END_TEST

START_TEST(allow_uids)
{
	struct config c;
	char err[256];
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "allow_uids", "0, 12345,7", err, sizeof(err)), 0);
	ck_assert_msg(config_validate(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.nuids, 3);
	ck_assert_int_eq(c.uids[0], 0);
	ck_assert_int_eq(c.uids[1], 12345);
	ck_assert_int_eq(c.uids[2], 7);
	ck_assert(config_uid_allowed(&c, 12345));
	ck_assert(config_uid_allowed(&c, 7));
	ck_assert(!config_uid_allowed(&c, 8));
	ck_assert(!config_uid_allowed(&c, (uid_t)-1));

	/* empty: the daemon's own uid and root */
	config_defaults(&c);
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	ck_assert(config_uid_allowed(&c, getuid()));
	ck_assert(config_uid_allowed(&c, 0));
	ck_assert(!config_uid_allowed(&c, getuid() == 4242 ? 4243 : 4242));

	/* a re-validation starts from scratch (reload) */
	config_set(&c, "allow_uids", "99", err, sizeof(err));
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.nuids, 1);
	ck_assert(!config_uid_allowed(&c, 0) || getuid() == 99);

	/* 2^32 and above are not uids: they once wrapped (2^32 became root, 2^32+12345 uid 12345);
	 * 4294967295 is (uid_t)-1, "no uid" to setuid and chown */
	const char *bad[] = {"abc", "-1", "12x", "1,,two", "4294967296", "4294979641", "4294967295",
			     "99999999999999999999999"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		config_defaults(&c);
		ck_assert_int_eq(config_set(&c, "allow_uids", bad[i], err, sizeof(err)), 0);
		ck_assert_msg(config_validate(&c, err, sizeof(err)) == -1, "'%s' accepted", bad[i]);
		ck_assert_ptr_nonnull(strstr(err, "allow_uids"));
	}
	/* at most CFG_MAX_UIDS */
	char many[256] = "";
	for (int i = 0; i < CFG_MAX_UIDS; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s%d", i ? "," : "", 1000 + i);
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "allow_uids", many, err, sizeof(err)), 0);
	ck_assert_msg(config_validate(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.nuids, CFG_MAX_UIDS);
	ck_assert(config_uid_allowed(&c, 1000 + CFG_MAX_UIDS - 1));
	strcat(many, ",9");
	ck_assert_int_eq(config_set(&c, "allow_uids", many, err, sizeof(err)), 0);
	ck_assert_int_eq(config_validate(&c, err, sizeof(err)), -1);
}
END_TEST

/* tests/host_port_cases.h's table through host_port_split and morid's option checks (listen is set
 * and validated; peers, a comma list of them, holds the long ones). */
START_TEST(host_port_table)
{
	struct config c;
	char err[512], host[256];
	for (size_t i = 0; i < HOST_PORT_NCASES; i++) {
		const struct host_port_case *k = &host_port_cases[i];
		int port = -1, rc = host_port_split(k->addr, host, sizeof(host), &port);
		ck_assert_msg(rc == (k->host ? 0 : -1), "'%s': host_port_split %d", k->addr, rc);
		if (k->host) {
			ck_assert_str_eq(host, k->host);
			ck_assert_int_eq(port, k->port);
		}
		if (!k->addr[0])
			continue; /* an empty listen is "no listener" */
		config_defaults(&c);
		c.insecure_peers = 1; /* not the loopback rule's business here */
		rc = config_set(&c, "listen", k->addr, err, sizeof(err));
		if (rc == 0)
			rc = config_validate(&c, err, sizeof(err));
		ck_assert_msg(rc == (k->host ? 0 : -1), "listen '%s': %d (%s)", k->addr, rc, rc ? err : "");
		if (!k->host)
			ck_assert_msg(strstr(err, "is not host:port"), "listen '%s': %s", k->addr, err);
	}
	/* HOST_PORT_MAX characters and no more; a host longer than the caller's buffer */
	char addr[HOST_PORT_MAX + 2];
	int port;
	ck_assert_int_eq(host_port_split(host_port_long(addr, HOST_PORT_MAX), host, sizeof(host), &port), 0);
	ck_assert_int_eq(strlen(host), HOST_PORT_MAX - 5);
	ck_assert_int_eq(host_port_split(host_port_long(addr, HOST_PORT_MAX + 1), host, sizeof(host), &port), -1);
	ck_assert_int_eq(host_port_split("abcdefgh:1", host, 9, &port), 0);
	ck_assert_int_eq(host_port_split("abcdefghi:1", host, 9, &port), -1);
	config_defaults(&c);
	ck_assert_int_eq(config_set(&c, "peers", host_port_long(addr, HOST_PORT_MAX), err, sizeof(err)), 0);
	ck_assert_int_eq(config_set(&c, "peers", host_port_long(addr, HOST_PORT_MAX + 1), err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "is not host:port"), "%s", err);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("options");
	tcase_set_timeout(tc, 10);
	tcase_add_test(tc, defaults);
	tcase_add_test(tc, table_is_complete);
	tcase_add_test(tc, bounds);
	tcase_add_test(tc, validate);
	tcase_add_test(tc, dashes_and_underscores);
	tcase_add_test(tc, reload_rules);
	tcase_add_test(tc, allow_uids);
	tcase_add_test(tc, host_port_table);
	suite_add_tcase(s, tc);
	TCase *tf = tcase_create("file");
	tcase_set_timeout(tf, 10);
	tcase_add_checked_fixture(tf, NULL, unlink_conf);
	tcase_add_test(tf, file_good);
	tcase_add_test(tf, file_unknown_key);
	tcase_add_test(tf, file_out_of_bounds);
	tcase_add_test(tf, file_syntax_error);
	tcase_add_test(tf, file_unknown_section);
	tcase_add_test(tf, file_first_error_wins);
	tcase_add_test(tf, file_long_line);
	tcase_add_test(tf, file_inline_comment);
	tcase_add_test(tf, file_missing);
	tcase_add_test(tf, file_nul_bytes);
	tcase_add_test(tf, file_not_regular_or_huge);
	suite_add_tcase(s, tf);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
