/* morid configuration: one table of options (redis static_configs[]), each with type, bounds,
 * default and whether SIGHUP may change it. Parse into a fresh struct, validate, then swap. */
#ifndef MORID_CONFIG_H
#define MORID_CONFIG_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CFG_MAX_UIDS 32
#define CONFIG_FILE_MAX (1 << 20) /* bytes: a configuration file is text of a few KiB */
#define CFG_MAX_PEERS 32

struct config {
	char runtime_dir[256];
	char log_level[16];
	char allow_uids[256];      /* comma list; empty: the daemon's own uid and root */
	int64_t max_message_bytes;
	int64_t max_clients;
	char listen[128];          /* peer listener host:port; empty: no cross-node service */
	char advertise[128];       /* address peers should use; empty: the listen address */
	char peers[1024];          /* comma list of host:port, contacted at start */
	int64_t data_streams;
	int64_t transfer_timeout_ms;
	int64_t ring_entries;
	int64_t arena_mib;
	int64_t client_max_regions;  /* per-client caps: what one client can make the daemon hold */
	int64_t client_max_lists;
	int64_t client_max_backlog;
	int64_t client_max_list_descs; /* descriptors in one prepared list */
	int64_t client_max_list_bytes; /* bytes of prepared-list descriptors one client may hold */
	int64_t client_max_groups;   /* MORI-SHMEM groups one client may be a PE of at once */
	int64_t node_max_regions;    /* node-wide caps: what all clients together can make it hold */
	int64_t node_max_lists;
	int64_t node_max_list_bytes;
	char cluster_key_file[256];  /* peer authentication; empty: none */
	int64_t insecure_peers;      /* 1: listen on a non-loopback address without a key */
	int64_t local_fds_pct;       /* share of RLIMIT_NOFILE the peer listener leaves to local sessions */
	int64_t max_client_peers;    /* peers added for clients' opens, not yet reached */
	int64_t peer_dead_ms;        /* data streams: keepalive idle and TCP_USER_TIMEOUT */
	int64_t socket_mode;
	char log_target[16];       /* auto, stderr, journal */
	/* RDMA (transport/rdma/) */
	char rdma_device[64];      /* verbs device to use; empty: every usable one */
	int64_t rdma_port;         /* 0: every active port */
	int64_t rdma_gid_index;    /* -1: the RoCEv2 GID of the first IPv4, else IPv6, address */
	char rdma_include[256];    /* comma list of device names or globs; empty: all */
	char rdma_exclude[256];
	int64_t rdma_qp_timeout;   /* local ACK timeout exponent: 4.096 us * 2^n */
	int64_t rdma_retry_cnt;
	int64_t rdma_rnr_retry;    /* 7: retry forever */
	char transport[8];         /* auto, tcp, rdma: cross-node transport choice */
	char metrics_listen[128];  /* Prometheus HTTP endpoint host:port (metrics.c); empty: off */
	int64_t rdma_qps_per_peer;
	int64_t rdma_busy_poll;    /* 1: spin on the CQ while transfers are in flight */
	int64_t shmem_heap_size;   /* MORI-SHMEM: a PE's heap when its join names no size */
	int64_t shmem_ring_entries; /* MORI-SHMEM: proxy ring entries per PE (power of two) */
	int64_t shmem_proxy_spin_us; /* MORI-SHMEM: the proxy's busy-poll window after a request */
	/* UMBP, the KV store (kv/) */
	int64_t kv_dram_bytes;     /* DRAM tier capacity; 0: no store */
	int64_t kv_slab_bytes;     /* one memfd of the DRAM tier */
	int64_t kv_value_max;      /* largest value */
	char kv_policy[32];        /* eviction policy name (kv_policy_parse) */
	int64_t kv_high_watermark; /* percent of kv_dram_bytes: a put past it evicts ... */
	int64_t kv_low_watermark;  /* ... down to this */
	int64_t kv_promote_on_read;
	int64_t kv_uid_quota_bytes; /* per uid, both tiers; 0: none */
	int64_t kv_batch_max;      /* items of one request */
	int64_t kv_timeout_ms;     /* default deadline of a client's call */
	int64_t kv_lease_max_ms;   /* longest a get's lease or a put's reservation lives */
	char kv_ssd_dir[256];      /* KV store: the SSD tier's directory; empty: no SSD tier */
	char kv_index[300];        /* UMBP cluster index: "local" or redis://HOST:PORT/DB */
	int64_t kv_index_ttl_ms;   /* a node's index entries live this long past its last heartbeat */
	int64_t kv_index_timeout_ms; /* Redis connect and answer deadline */
	int64_t kv_ssd_bytes;      /* KV store: the SSD tier's size on disk; 0: 90 % of free space */

	/* derived at validation */
	uid_t uids[CFG_MAX_UIDS];
	int nuids;
};

/* Defaults into cfg. */
void config_defaults(struct config *cfg);
/* Parse an INI file over cfg (keys in section [morid] or none). On error returns -1 and writes
 * "file:line: reason" into err. */
int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen);
/* Set one option by name ("ring_entries" or "ring-entries"). Returns 0, or -1 with reason. */
int config_set(struct config *cfg, const char *name, const char *value, char *err, size_t errlen);
/* 1 when name (with '-' or '_') is an option of the table */
int config_known(const char *name);
/* Cross-field checks and derived values. */
int config_validate(struct config *cfg, char *err, size_t errlen);
/* Is a change from old to new allowed at reload? Names the first non-reloadable change. */
int config_reload_allowed(const struct config *old, const struct config *new, char *err,
			  size_t errlen);

/* Iterate the table for moractl config. Returns 0 past the end. */
int config_entry(const struct config *cfg, int i, const char **name, char *value, size_t vlen,
		 int *reloadable, const char **help);

int config_uid_allowed(const struct config *cfg, uid_t uid);
#endif
