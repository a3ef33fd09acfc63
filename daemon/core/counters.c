/* Names of the counters moractl status shows (enum counter in morid.h). */
#include "morid.h"

const char *const counter_names[C_COUNT] = {
	"requests", "bad_requests", "denied", "oversize", "clients_total", "clients_died",
	"regions_total", "notifications", "submissions", "bad_submissions", "transfers",
	"transfer_errors", "bytes_sent", "bytes_received", "reloads", "reload_failures",
	"cq_overflows", "vram_bytes_staged", "peer_auth_refused",
	"notifications_dropped", "data_handshakes_dropped",
	"metrics_connections_dropped", "vram_bytes_staged_unpinned",
	/* batches held for their staging copies from VRAM, and the microseconds they waited (from
	 * the write being ready to the copies seen done); frames whose copy to VRAM held their
	 * stream's reading, and for how long */
	"vram_send_waits", "vram_send_wait_us", "vram_recv_waits", "vram_recv_wait_us",
	/* peer listener connections closed before they authenticated (cap, deadline, descriptors) */
	"peer_connections_dropped",
	/* registrations and prepared lists refused at a node_max_* cap */
	"node_cap_refusals",
};
