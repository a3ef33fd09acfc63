/* Names of the counters moractl status shows (enum counter in morid.h). */
#include "morid.h"

const char *const counter_names[C_COUNT] = {
	"requests", "bad_requests", "denied", "oversize", "clients_total", "clients_died",
	"regions_total", "notifications", "submissions", "bad_submissions", "transfers",
	"transfer_errors", "bytes_sent", "bytes_received", "reloads", "reload_failures",
	"cq_overflows", "vram_bytes_staged", "peer_auth_refused",
	"notifications_dropped", "data_handshakes_dropped",
	"metrics_connections_dropped", "vram_bytes_staged_unpinned",
};
