#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_port.h"
#include "log.h"

enum opt_type { T_STR, T_INT };

struct opt {
	const char *name;
	enum opt_type type;
	size_t off, size;     /* field in struct config */
	int64_t min, max;     /* T_INT bounds */
	const char *def;
	int reloadable;
	const char *help;
};

static int check_addr(const char *name, const char *value, char *err, size_t errlen)
{
	char host[256];
	int port;
	if (value[0] && host_port_split(value, host, sizeof(host), &port) != 0) {
		snprintf(err, errlen, "%s: '%s' is not host:port (port 1..65535)", name, value);
		return -1;
	}
	return 0;
}

static int check_addrs(const char *name, const char *value, char *err, size_t errlen)
{
	char list[1024], *save = NULL;
	snprintf(list, sizeof(list), "%s", value);
	for (char *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
		if (check_addr(name, tok, err, errlen) != 0)
			return -1;
	return 0;
}

/* Options checked when set, so that a file's error has its line. */
static const struct {
	const char *name;
	int (*check)(const char *name, const char *value, char *err, size_t errlen);
} checks[] = {{"listen", check_addr}, {"advertise", check_addr}, {"peers", check_addrs}};

#define S(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
static const struct opt opts[] = {
	{"runtime_dir", T_STR, S(runtime_dir), 0, 0, "/run/mori", 0, "directory of morid.sock, session socket and lock"},
	{"log_level", T_STR, S(log_level), 0, 0, "notice", 1, "error, warn, notice, info or debug"},
	{"log_target", T_STR, S(log_target), 0, 0, "auto", 0, "auto (journal under systemd), stderr or journal"},
	{"allow_uids", T_STR, S(allow_uids), 0, 0, "", 1, "uids allowed to connect (comma list); empty: daemon's uid and root"},
	{"socket_mode", T_INT, S(socket_mode), 0, 0777, "0660", 0, "mode of the sockets in runtime_dir (octal)"},
	{"max_message_bytes", T_INT, S(max_message_bytes), 1024, 64 << 20, "4194304", 1, "largest control message accepted"},
	{"max_clients", T_INT, S(max_clients), 1, 65536, "1024", 1, "most attached clients"},
	{"listen", T_STR, S(listen), 0, 0, "", 0, "peer listener host:port for other nodes; empty: none"},
	{"advertise", T_STR, S(advertise), 0, 0, "", 0, "address other nodes use to reach this one; empty: listen"},
	{"peers", T_STR, S(peers), 0, 0, "", 1, "peer daemons to connect at start (comma list host:port)"},
	{"data_streams", T_INT, S(data_streams), 1, 16, "4", 1, "TCP data streams per peer"},
	{"transfer_timeout_ms", T_INT, S(transfer_timeout_ms), 1, 3600000, "30000", 1, "default transfer deadline"},
	{"ring_entries", T_INT, S(ring_entries), 64, 65536, "4096", 0, "submission/completion ring entries (power of two)"},
	{"rdma_device", T_STR, S(rdma_device), 0, 0, "", 0, "RDMA verbs device to use (e.g. mlx5_0); empty: every usable one"},
	{"rdma_port", T_INT, S(rdma_port), 0, 255, "0", 0, "RDMA port number; 0: every active port"},
	{"rdma_gid_index", T_INT, S(rdma_gid_index), -1, 1023, "-1", 0, "GID index; -1: RoCEv2 GID of the first IPv4, else IPv6, address"},
	{"rdma_include", T_STR, S(rdma_include), 0, 0, "", 0, "RDMA devices to use (comma list of names or globs); empty: all"},
	{"rdma_exclude", T_STR, S(rdma_exclude), 0, 0, "", 0, "RDMA devices never to use (comma list of names or globs)"},
	{"rdma_qp_timeout", T_INT, S(rdma_qp_timeout), 1, 31, "14", 1, "QP local ACK timeout exponent (4.096 us * 2^n) for new QPs"},
	{"rdma_retry_cnt", T_INT, S(rdma_retry_cnt), 0, 7, "7", 1, "QP transport retries before an error, for new QPs"},
	{"rdma_rnr_retry", T_INT, S(rdma_rnr_retry), 0, 7, "7", 1, "QP receiver-not-ready retries (7: forever), for new QPs"},
	{"transport", T_STR, S(transport), 0, 0, "auto", 0, "cross-node transport: auto (RDMA where both ends have it, else TCP), tcp or rdma"},
	{"metrics_listen", T_STR, S(metrics_listen), 0, 0, "", 0, "Prometheus metrics over HTTP (GET /metrics) on host:port; empty: off"},
	{"rdma_busy_poll", T_INT, S(rdma_busy_poll), 0, 1, "0", 1, "1: while transfers are in flight morid's loop polls the completion queue instead of sleeping on its channel (lower latency, one core busy)"},
	{"rdma_qps_per_peer", T_INT, S(rdma_qps_per_peer), 1, 16, "2", 0, "RDMA queue pairs per peer daemon (transfers striped over them)"},
	{"client_max_regions", T_INT, S(client_max_regions), 1, 1 << 20, "16384", 1, "regions one client may have registered at once"},
	{"client_max_lists", T_INT, S(client_max_lists), 1, 1 << 20, "4096", 1, "prepared cross-node descriptor lists one client may hold"},
	{"client_max_backlog", T_INT, S(client_max_backlog), 1024, 1 << 26, "1048576", 1, "completions held for a client whose completion queue is full; beyond it the client is detached (notifications from others: dropped past half of it)"},
	{"client_max_list_descs", T_INT, S(client_max_list_descs), 1, 1 << 24, "1048576", 1, "descriptors in one prepared cross-node list (24 bytes each)"},
	{"client_max_groups", T_INT, S(client_max_groups), 1, 1 << 16, "64", 1, "MORI-SHMEM groups one client may be a PE of at once (joining or joined; each host-heap PE holds 3 descriptors in morid)"},
	{"client_max_list_bytes", T_INT, S(client_max_list_bytes), 4096, 1ll << 40, "268435456", 1, "bytes of prepared-list descriptors one client may make morid hold, all its lists together"},
	{"node_max_regions", T_INT, S(node_max_regions), 1, 1 << 24, "262144", 1, "regions all clients together may have registered at once (each client also within client_max_regions)"},
	{"node_max_lists", T_INT, S(node_max_lists), 1, 1 << 24, "65536", 1, "prepared cross-node descriptor lists all clients together may hold, those being read included"},
	{"node_max_list_bytes", T_INT, S(node_max_list_bytes), 4096, 1ll << 42, "1073741824", 1, "bytes of prepared-list descriptors all clients together may make morid hold (each client also within client_max_list_bytes)"},
	{"cluster_key_file", T_STR, S(cluster_key_file), 0, 0, "", 0, "cluster key (64 hex digits, mode 0600; moractl keygen makes one): peers authenticate with it; empty: peers are not authenticated"},
	{"insecure_peers", T_INT, S(insecure_peers), 0, 1, "0", 0, "1: allow a non-loopback listen address without cluster_key_file (anyone who reaches it can use published memory)"},
	{"local_fds_pct", T_INT, S(local_fds_pct), 0, 90, "25", 0, "percent of the descriptor limit (RLIMIT_NOFILE) kept for local sessions and moractl: the peer listener accepts no unauthenticated connection into it; 0: none kept"},
	{"max_client_peers", T_INT, S(max_client_peers), 1, 1000, "64", 1, "peers a client's open may add that are not reached yet (not in peers=); one never reached goes 10 s after its last use"},
	{"peer_dead_ms", T_INT, S(peer_dead_ms), 1000, 600000, "15000", 1, "a data stream whose link stays silent this long (keepalive, unacknowledged data) is down; its transfers end at their deadlines (new streams)"},
	{"arena_mib", T_INT, S(arena_mib), 1, 1024, "64", 0, "per-client argument arena for cross-node batches, MiB"},
	{"shmem_heap_size", T_INT, S(shmem_heap_size), 1 << 20, 1ll << 40, "1073741824", 1, "MORI-SHMEM: bytes of a PE's symmetric heap when its group names no size (new groups)"},
	{"shmem_ring_entries", T_INT, S(shmem_ring_entries), 64, 65536, "1024", 1, "MORI-SHMEM: proxy ring entries per PE, a power of two (new groups)"},
	{"shmem_proxy_spin_us", T_INT, S(shmem_proxy_spin_us), 0, 1000000, "2000", 1, "MORI-SHMEM: the proxy polls its rings on every loop turn (yielding the CPU when a turn finds nothing) for this long after the last request, then on a 1 ms timer (10 ms after 1 s without requests); 0: the timer alone"},
	{"kv_dram_bytes", T_INT, S(kv_dram_bytes), 0, 1ll << 44, "1073741824", 0, "UMBP: bytes of the KV store's DRAM tier (memfd pages, taken from the kernel only as values are written); 0: no store"},
	{"kv_slab_bytes", T_INT, S(kv_slab_bytes), 1 << 20, 1ll << 32, "67108864", 0, "UMBP: bytes of one memfd of the DRAM tier (a multiple of 4096); a value over a quarter of it gets a memfd of its own"},
	{"kv_value_max", T_INT, S(kv_value_max), 64ll << 20, 1ll << 36, "67108864", 0, "UMBP: largest value, bytes (at least 64 MiB)"},
	{"kv_policy", T_STR, S(kv_policy), 0, 0, "default", 0, "UMBP: eviction policy (lru, default: docs/umbp.md)"},
	{"kv_high_watermark", T_INT, S(kv_high_watermark), 1, 100, "95", 1, "UMBP: percent of kv_dram_bytes past which a put evicts (or spills) values ..."},
	{"kv_low_watermark", T_INT, S(kv_low_watermark), 0, 100, "85", 1, "UMBP: ... until the DRAM tier is down to this percent"},
	{"kv_promote_on_read", T_INT, S(kv_promote_on_read), 0, 1, "1", 1, "UMBP: a get of a value on SSD brings it back into DRAM (else it is read into a slot freed after the get)"},
	{"kv_uid_quota_bytes", T_INT, S(kv_uid_quota_bytes), 0, 1ll << 46, "0", 1, "UMBP: bytes one uid may store, both tiers (at it, its own values are evicted first); 0: no quota"},
	{"kv_batch_max", T_INT, S(kv_batch_max), 1, 512, "256", 1, "UMBP: keys of one request (libmori splits larger batches)"},
	{"kv_timeout_ms", T_INT, S(kv_timeout_ms), 1, 3600000, "10000", 1, "UMBP: a client call's deadline unless it gives one"},
	{"kv_lease_max_ms", T_INT, S(kv_lease_max_ms), 10, 3600000, "30000", 1, "UMBP: a get's lease or a put's reservation ends after this; its slot may then be reused"},
	{"kv_ssd_dir", T_STR, S(kv_ssd_dir), 0, 0, "", 0, "KV store: directory of the SSD tier's segment files (a local SSD's filesystem, writable by morid); empty: no SSD tier"},
	{"kv_index", T_STR, S(kv_index), 0, 0, "local", 0, "UMBP: the cluster index: local (this node alone, no Redis) or redis://HOST:PORT/DB (every morid publishes its keys there; docs/umbp.md)"},
	{"kv_index_ttl_ms", T_INT, S(kv_index_ttl_ms), 300, 3600000, "10000", 0, "UMBP: a node's index entries leave the index this long after its last heartbeat (heartbeats every third of it); kept by Redis's clock alone"},
	{"kv_index_timeout_ms", T_INT, S(kv_index_timeout_ms), 50, 600000, "2000", 0, "UMBP: Redis must connect, and answer a command in flight, within this; else the index is down (lookups fail with MORI_ECONN) until it reconnects"},
	{"kv_ssd_bytes", T_INT, S(kv_ssd_bytes), 0, 1ll << 50, "0", 0, "KV store: bytes the SSD tier may take in kv_ssd_dir; 0: 90 % of the filesystem's free space at start"},
};
#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const struct opt *find(const char *name)
{
	char norm[64];
	size_t i;
	for (i = 0; name[i] && i < sizeof(norm) - 1; i++)
		norm[i] = name[i] == '-' ? '_' : name[i];
	norm[i] = 0;
	for (size_t k = 0; k < NOPTS; k++)
		if (strcmp(opts[k].name, norm) == 0)
			return &opts[k];
	return NULL;
}

int config_known(const char *name)
{
	return find(name) != NULL;
}

int config_set(struct config *cfg, const char *name, const char *value, char *err, size_t errlen)
{
	const struct opt *o = find(name);
	if (!o) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -1;
	}
	char *field = (char *)cfg + o->off;
	for (size_t k = 0; k < sizeof(checks) / sizeof(checks[0]); k++)
		if (!strcmp(checks[k].name, o->name) && checks[k].check(o->name, value, err, errlen) != 0)
			return -1;
	if (o->type == T_STR) {
		if (strlen(value) >= o->size) {
			snprintf(err, errlen, "%s: value longer than %zu bytes", o->name, o->size - 1);
			return -1;
		}
		strcpy(field, value);
		return 0;
	}
	if (o->min == 0 && o->max == 1) { /* a switch: words too */
		static const char *const on[] = {"true", "yes", "on"}, *const off[] = {"false", "no", "off"};
		for (int i = 0; i < 3; i++)
			if (!strcasecmp(value, on[i]) || !strcasecmp(value, off[i])) {
				*(int64_t *)field = !strcasecmp(value, on[i]);
				return 0;
			}
	}
	char *end;
	errno = 0;
	long long v = strtoll(value, &end, 0);
	while (*end == ' ' || *end == '\t')
		end++;
	if (errno || end == value || *end) {
		snprintf(err, errlen, "%s: '%s' is not an integer", o->name, value);
		return -1;
	}
	if (v < o->min || v > o->max) {
		if (o->def[0] == '0' && o->def[1]) /* an octal option (socket_mode): bounds in octal */
			snprintf(err, errlen, "%s: '%s' out of bounds [%#llo, %#llo] (octal, e.g. 0660)", o->name, value,
				 (long long)o->min, (long long)o->max);
		else
			snprintf(err, errlen, "%s: %lld out of bounds [%lld, %lld]", o->name, v, (long long)o->min,
				 (long long)o->max);
		return -1;
	}
	*(int64_t *)field = v;
	return 0;
}

void config_defaults(struct config *cfg)
{
	char err[128];
	memset(cfg, 0, sizeof(*cfg));
	for (size_t k = 0; k < NOPTS; k++)
		if (config_set(cfg, opts[k].name, opts[k].def, err, sizeof(err)) != 0)
			abort(); /* a bad built-in default is a programming error */
}

struct parse_ctx {
	struct config *cfg;
	FILE *f;
	char *err;
	size_t errlen;
	int line;      /* lines read so far: the handler runs on the line just read */
	int failed;    /* line of the first rejected key or over-long line; 0 if none */
	long bytes;    /* read so far: at most CONFIG_FILE_MAX */
	int seen[NOPTS]; /* the line that set each option, 0 if none yet: a second one is an error */
};

/* inih's ini_parse() hides line numbers from the handler and keeps going after an error, so a
 * later bad key could be reported with an earlier syntax error's line. Reading the lines
 * ourselves tells us where the handler is, and stops at the first rejected line. Bytes are read
 * one at a time, not with fgets, so that a NUL byte is seen (fgets + strlen would end the line
 * there and take a zero-filled file for an empty one), and the whole file is bounded. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse_ctx *p = stream;
	if (p->failed)
		return NULL;
	int n = 0, ch = EOF;
	while (n < num - 1 && (ch = getc(p->f)) != EOF) {
		if (++p->bytes > CONFIG_FILE_MAX) {
			snprintf(p->err, p->errlen, "file longer than %d bytes", CONFIG_FILE_MAX);
			p->failed = p->line + 1;
			return NULL;
		}
		if (ch == 0) {
			snprintf(p->err, p->errlen, "NUL byte (not a text file)");
			p->failed = p->line + 1;
			return NULL;
		}
		str[n++] = (char)ch;
		if (ch == '\n')
			break;
	}
	if (n == 0)
		return NULL;
	str[n] = 0;
	p->line++;
	if (n == num - 1 && str[n - 1] != '\n') {
		int next = getc(p->f);
		if (next != EOF) {
			snprintf(p->err, p->errlen, "line longer than %d bytes", num - 2);
			p->failed = p->line;
			return NULL;
		}
	}
	return str;
}

static int on_kv(void *user, const char *section, const char *name, const char *value)
{
	struct parse_ctx *p = user;
	if (p->failed)
		return 0;
	if (section[0] && strcmp(section, "morid") != 0) {
		snprintf(p->err, p->errlen, "unknown section [%s]", section);
		p->failed = p->line;
		return 0;
	}
	const struct opt *o = find(name);
	if (o && p->seen[o - opts]) {
		snprintf(p->err, p->errlen, "%s is already set at line %d", o->name, p->seen[o - opts]);
		p->failed = p->line;
		return 0;
	}
	if (config_set(p->cfg, name, value, p->err, p->errlen) != 0) {
		p->failed = p->line;
		return 0;
	}
	p->seen[o - opts] = p->line;
	return 1;
}

int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen)
{
	char why[200] = "";
	struct parse_ctx p = {.cfg = cfg, .err = why, .errlen = sizeof(why)};
	struct stat st;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer (this also runs at SIGHUP, on the
	 * event loop); only a regular file is read, so /dev/zero and the like never reach the parser */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0) {
		snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: is %s, not a configuration file", path,
			 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
		close(fd);
		return -1;
	}
	if (st.st_size > CONFIG_FILE_MAX) {
		snprintf(err, errlen, "%s: %lld bytes, more than a configuration file's %d", path,
			 (long long)st.st_size, CONFIG_FILE_MAX);
		close(fd);
		return -1;
	}
	if (fcntl(fd, F_SETFL, 0) != 0 || !(p.f = fdopen(fd, "r"))) {
		snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	int rc = ini_parse_stream(read_line, &p, on_kv, &p);
	int read_error = ferror(p.f);
	fclose(p.f);
	if (rc > 0 && (!p.failed || rc < p.failed))
		snprintf(err, errlen, "%s:%d: syntax error", path, rc);
	else if (p.failed)
		snprintf(err, errlen, "%s:%d: %s", path, p.failed, why);
	else if (rc != 0 || read_error)
		snprintf(err, errlen, "%s:%d: read error", path, p.line);
	else
		return 0;
	return -1;
}

int config_validate(struct config *cfg, char *err, size_t errlen)
{
	if (mori_log_level_parse(cfg->log_level) < 0) {
		snprintf(err, errlen, "log_level: '%s' is not one of error, warn, notice, info, debug",
			 cfg->log_level);
		return -1;
	}
	if (strcmp(cfg->log_target, "auto") && strcmp(cfg->log_target, "stderr") &&
	    strcmp(cfg->log_target, "journal")) {
		snprintf(err, errlen, "log_target: '%s' is not auto, stderr or journal", cfg->log_target);
		return -1;
	}
	if (strcmp(cfg->transport, "auto") && strcmp(cfg->transport, "tcp") && strcmp(cfg->transport, "rdma")) {
		snprintf(err, errlen, "transport: '%s' is not auto, tcp or rdma", cfg->transport);
		return -1;
	}
	if (cfg->ring_entries & (cfg->ring_entries - 1)) {
		snprintf(err, errlen, "ring_entries: %lld is not a power of two", (long long)cfg->ring_entries);
		return -1;
	}
	if (cfg->shmem_ring_entries & (cfg->shmem_ring_entries - 1)) {
		snprintf(err, errlen, "shmem_ring_entries: %lld is not a power of two", (long long)cfg->shmem_ring_entries);
		return -1;
	}
	if (cfg->kv_low_watermark > cfg->kv_high_watermark) {
		snprintf(err, errlen, "kv_low_watermark (%lld) is above kv_high_watermark (%lld)",
			 (long long)cfg->kv_low_watermark, (long long)cfg->kv_high_watermark);
		return -1;
	}
	if (strcmp(cfg->kv_index, "local") != 0 && strncmp(cfg->kv_index, "redis://", 8) != 0) {
		snprintf(err, errlen, "kv_index: %s is neither local nor redis://HOST:PORT/DB", cfg->kv_index);
		return -1;
	}
	if (cfg->kv_slab_bytes % 4096) {
		snprintf(err, errlen, "kv_slab_bytes: %lld is not a multiple of 4096", (long long)cfg->kv_slab_bytes);
		return -1;
	}
	const char *addrs[3][2] = {{"listen", cfg->listen}, {"advertise", cfg->advertise},
				   {"metrics_listen", cfg->metrics_listen}};
	for (int i = 0; i < 3; i++) {
		char host[256];
		int port;
		const char *a = addrs[i][1];
		if (a[0] && host_port_split(a, host, sizeof(host), &port) != 0) {
			snprintf(err, errlen, "%s: '%s' is not host:port (port 1..65535)", addrs[i][0], a);
			return -1;
		}
	}
	if (cfg->listen[0] && !cfg->cluster_key_file[0] && !cfg->insecure_peers) {
		char host[256];
		int port;
		struct in_addr a4;
		host_port_split(cfg->listen, host, sizeof(host), &port);
		int loopback = !strcmp(host, "localhost") || !strcmp(host, "::1") ||
			       (inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127);
		if (!loopback) {
			snprintf(err, errlen, "listen: %s is not a loopback address and no cluster_key_file is set, so "
				 "peers could not be authenticated: set cluster_key_file (moractl keygen makes one), or "
				 "insecure_peers = true to run without", cfg->listen);
			return -1;
		}
	}
	if (cfg->runtime_dir[0] != '/') {
		snprintf(err, errlen, "runtime_dir: '%s' is not an absolute path", cfg->runtime_dir);
		return -1;
	}
	cfg->nuids = 0;
	char buf[sizeof(cfg->allow_uids)];
	strcpy(buf, cfg->allow_uids);
	for (char *save, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		char *end;
		errno = 0;
		long long v = strtoll(tok, &end, 10);
		/* uid_t is 32 bits and (uid_t)-1 means "no uid": a larger value must not wrap to a
		 * real one (2^32 once became root) */
		if (*end || errno || v < 0 || v >= (long long)UINT32_MAX) {
			snprintf(err, errlen, "allow_uids: '%s' is not a uid (0..%u)", tok, UINT32_MAX - 1);
			return -1;
		}
		if (cfg->nuids >= CFG_MAX_UIDS) {
			snprintf(err, errlen, "allow_uids: more than %d uids", CFG_MAX_UIDS);
			return -1;
		}
		cfg->uids[cfg->nuids++] = (uid_t)v;
	}
	if (cfg->nuids == 0) {
		cfg->uids[cfg->nuids++] = getuid();
		if (getuid() != 0)
			cfg->uids[cfg->nuids++] = 0;
	}
	return 0;
}

int config_reload_allowed(const struct config *old, const struct config *new, char *err,
			  size_t errlen)
{
	for (size_t k = 0; k < NOPTS; k++) {
		if (opts[k].reloadable)
			continue;
		if (memcmp((const char *)old + opts[k].off, (const char *)new + opts[k].off, opts[k].size)) {
			snprintf(err, errlen, "%s cannot change at reload (restart morid)", opts[k].name);
			return -1;
		}
	}
	return 0;
}

int config_entry(const struct config *cfg, int i, const char **name, char *value, size_t vlen,
		 int *reloadable, const char **help)
{
	if (i < 0 || (size_t)i >= NOPTS)
		return 0;
	const struct opt *o = &opts[i];
	const char *field = (const char *)cfg + o->off;
	*name = o->name;
	*reloadable = o->reloadable;
	*help = o->help;
	if (o->type == T_STR)
		snprintf(value, vlen, "%s", field);
	else if (strcmp(o->name, "socket_mode") == 0)
		snprintf(value, vlen, "0%llo", (long long)*(const int64_t *)field);
	else
		snprintf(value, vlen, "%lld", (long long)*(const int64_t *)field);
	return 1;
}

int config_uid_allowed(const struct config *cfg, uid_t uid)
{
	for (int i = 0; i < cfg->nuids; i++)
		if (cfg->uids[i] == uid)
			return 1;
	return 0;
}
