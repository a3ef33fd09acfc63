/* moractl: show and steer morid. Human tables by default, --json for machines.
 * Exit 0 on success; 1 with a one-line reason when no daemon answers or it answers an error. */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host_port.h"
#include "invariant.h"
#include "moractl_obs.h"
#include "svc/ctl.h"
#include "mori.h"
#include "wire.h"

static int json;
static int timeout_ms = 3000;
static uint64_t deadline_us; /* --timeout covers the whole command, however many requests */
static char url[400];

static void usage(FILE *f)
{
	fprintf(f,
		"usage: moractl [--runtime-dir DIR | --socket URL] [--json] [--timeout MS] COMMAND\n"
		"  --socket: an absolute path, ipc://PATH or tcp://HOST:PORT\n"
		"commands:\n"
		"  status      version, uptime, pid, config, runtime dir, clients, memory, peers, counters\n"
		"  version     moractl's and the daemon's versions\n"
		"  config      effective configuration (options that need a restart marked)\n"
		"  reload      re-read the configuration file (like SIGHUP); errors keep the old one\n"
		"  topo        GPUs, NICs, CPUs, NUMA: a matrix like nvidia-smi topo -m, and each GPU's NIC ranking\n"
		"  diagnose    checks with verdict (ok, warning, problem, skipped) and remedy; exit 1 on a problem\n"
		"  metrics     morid's Prometheus metrics (the text its metrics_listen endpoint serves)\n"
		"  kv          the KV store (UMBP): keys and bytes per tier, hits, evictions, spills, leases, uids\n"
		"  clients     attached clients\n"
		"  memory      registered memory regions\n"
		"  peers       other nodes' daemons and per-peer counters\n"
		"  transfers   cross-node transfers in flight\n"
		"  nics        RDMA devices and ports: state, MTU, speed, GID, NUMA, PCI, usable or why not\n"
		"  groups      MORI-SHMEM groups: ranks, nodes, heap sizes, state\n"
		"  keygen [--force] FILE  write a new cluster key (mode 0600) for cluster_key_file\n"
		"  help        this text (as --help)\n"
		"The runtime dir defaults to $MORI_RUNTIME_DIR (when set and not empty), else /run/mori.\n");
}

static int time_left_ms(void)
{
	uint64_t now = mori_now_us();
	return now >= deadline_us ? 1 : (int)((deadline_us - now + 999) / 1000);
}

static Mori__Reply *call(Mori__Request *req);

/* Does the daemon at to speak this moractl's protocol? Read with another version's messages its
 * replies could say anything, so every command asks first (once per run). 0, or -1 with the
 * reason in err (no answer, or another protocol). */
static int protocol_ok(const char *to, int ms, char *err, size_t len)
{
	static char checked[sizeof(url)]; /* the url that answered in this protocol */
	if (!strcmp(checked, to))
		return 0;
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Hello h = MORI__HELLO__INIT;
	Mori__Reply *rep;
	h.protocol_version = MORI_PROTOCOL_VERSION;
	h.name = "moractl";
	req.body_case = MORI__REQUEST__BODY_HELLO;
	req.hello = &h;
	if (ctl_call(to, &req, &rep, ms, err, len) != MORI_OK)
		return -1;
	unsigned pv = rep->body_case == MORI__REPLY__BODY_HELLO ? rep->hello->protocol_version : 0;
	int other = rep->code == MORI_EVERSION || (rep->code == 0 && pv != MORI_PROTOCOL_VERSION);
	if (other)
		snprintf(err, len, "the daemon at %s speaks another protocol (%s; this moractl %s speaks %u): use the "
			 "moractl of that morid", to, rep->code ? rep->message : "its hello says so", MORI_VERSION,
			 MORI_PROTOCOL_VERSION);
	else
		snprintf(checked, sizeof(checked), "%s", to);
	mori__reply__free_unpacked(rep, NULL);
	return other ? -1 : 0;
}

static void check_protocol(void)
{
	char err[1024];
	if (protocol_ok(url, time_left_ms(), err, sizeof(err)) != 0) {
		fprintf(stderr, "moractl: %s\n", err);
		exit(1);
	}
}

static Mori__Reply *call(Mori__Request *req)
{
	Mori__Reply *rep;
	char err[512];
	if (req->body_case != MORI__REQUEST__BODY_HELLO)
		check_protocol();
	int rc = ctl_call(url, req, &rep, time_left_ms(), err, sizeof(err));
	if (rc != MORI_OK) {
		fprintf(stderr, "moractl: %s\n", err);
		exit(1);
	}
	if (rep->code != 0) {
		fprintf(stderr, "moractl: daemon: %s (%s)\n", rep->message, mori_strerror(rep->code));
		exit(1);
	}
	return rep;
}

/* call(), and the reply must carry body (a daemon that answers something else: exit 1). */
static Mori__Reply *call_for(Mori__Request *req, int body, const char *what)
{
	Mori__Reply *rep = call(req);
	if ((int)rep->body_case != body) {
		fprintf(stderr, "moractl: daemon sent no %s\n", what);
		exit(1);
	}
	return rep;
}

/* A listing (ListRequest.what: 1 clients, 2 regions, 3 peers, 4 transfers, 5 groups). */
static Mori__Reply *list_call(uint32_t what)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__ListRequest lq = MORI__LIST_REQUEST__INIT;
	lq.what = what;
	req.body_case = MORI__REQUEST__BODY_LIST;
	req.list = &lq;
	return call_for(&req, MORI__REPLY__BODY_LIST, "list");
}

/* The helpers moractl_obs.h declares, shared with moractl_obs.c. (to, ms: not url, timeout_ms,
 * which are this file's globals.) */
Mori__Reply *moractl_ask(const char *to, int ms, const Mori__Request *req, int body, char *err, size_t len)
{
	Mori__Reply *rep;
	if (req->body_case != MORI__REQUEST__BODY_HELLO && protocol_ok(to, ms, err, len) != 0)
		return NULL;
	if (ctl_call(to, req, &rep, ms, err, len) != MORI_OK)
		return NULL;
	if (rep->code != 0 || (int)rep->body_case != body) {
		snprintf(err, len, "daemon: %s (%s)", rep->code ? rep->message : "no answer of that kind",
			 mori_strerror(rep->code ? rep->code : MORI_EPROTO));
		mori__reply__free_unpacked(rep, NULL);
		return NULL;
	}
	return rep;
}

void moractl_print_json(cJSON *o)
{
	char *s = cJSON_Print(o);
	puts(s);
	free(s);
	cJSON_Delete(o);
}

/* By the message's protobuf-c descriptor: the JSON keys have always been the proto field names,
 * so a list of names replaces a cJSON call per field and its cast. */
void moractl_json_fields(cJSON *o, const ProtobufCMessage *m, const char *names)
{
	char list[1024], *save = NULL;
	MORI_REQUIRE(strlen(names) < sizeof(list), "field list of %s too long", m->descriptor->name);
	memcpy(list, names, strlen(names) + 1);
	for (char *key = strtok_r(list, " ", &save); key; key = strtok_r(NULL, " ", &save)) {
		char *name = strchr(key, '=');
		name = name ? (*name = 0, name + 1) : key;
		const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
		MORI_REQUIRE(f && f->label == PROTOBUF_C_LABEL_NONE, "%s has no field %s", m->descriptor->name, name);
		const void *v = (const char *)m + f->offset;
		switch (f->type) {
		case PROTOBUF_C_TYPE_STRING:
			cJSON_AddStringToObject(o, key, *(char *const *)v);
			break;
		case PROTOBUF_C_TYPE_BOOL:
			cJSON_AddBoolToObject(o, key, *(const protobuf_c_boolean *)v);
			break;
		case PROTOBUF_C_TYPE_INT32:
			cJSON_AddNumberToObject(o, key, *(const int32_t *)v);
			break;
		case PROTOBUF_C_TYPE_UINT32:
			cJSON_AddNumberToObject(o, key, *(const uint32_t *)v);
			break;
		case PROTOBUF_C_TYPE_UINT64:
			cJSON_AddNumberToObject(o, key, (double)*(const uint64_t *)v);
			break;
		case PROTOBUF_C_TYPE_DOUBLE:
			cJSON_AddNumberToObject(o, key, *(const double *)v);
			break;
		default:
			MORI_REQUIRE(0, "%s.%s is of a type moractl does not print", m->descriptor->name, name);
		}
	}
}

cJSON *moractl_json_row(cJSON *arr, const ProtobufCMessage *m, const char *names)
{
	cJSON *o = cJSON_CreateObject();
	moractl_json_fields(o, m, names);
	cJSON_AddItemToArray(arr, o);
	return o;
}

/* o[key]: {name: value} of counters. */
static void json_counters(cJSON *o, const char *key, Mori__Counter *const *c, size_t n)
{
	cJSON *obj = cJSON_AddObjectToObject(o, key);
	for (size_t i = 0; i < n; i++)
		cJSON_AddNumberToObject(obj, c[i]->name, (double)c[i]->value);
}

/* call_for() on a request without arguments (ctl_request_empty). */
static Mori__Reply *call_empty(Mori__Request__BodyCase kind, int body, const char *what)
{
	Mori__Request req;
	ProtobufCMessage empty;
	ctl_request_empty(&req, kind, &empty);
	return call_for(&req, body, what);
}

static void fmt_bytes(char *buf, size_t len, uint64_t b)
{
	const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/* RDMA ports the daemon sees. NULL when the daemon does not answer the request. */
static Mori__Reply *nics_call(void)
{
	Mori__Request req;
	ProtobufCMessage empty;
	char err[512];
	ctl_request_empty(&req, MORI__REQUEST__BODY_NICS, &empty);
	return moractl_ask(url, time_left_ms(), &req, MORI__REPLY__BODY_NICS, err, sizeof(err));
}

static void nics_count(unsigned *all, unsigned *usable)
{
	Mori__Reply *rep = nics_call();
	*all = *usable = 0;
	if (!rep)
		return;
	for (size_t i = 0; i < rep->nics->n_nics; i++) {
		(*all)++;
		*usable += rep->nics->nics[i]->usable;
	}
	mori__reply__free_unpacked(rep, NULL);
}

static int cmd_status(void)
{
	Mori__Reply *rep = call_empty(MORI__REQUEST__BODY_STATUS, MORI__REPLY__BODY_STATUS, "status");
	Mori__StatusReply *s = rep->status;
	if (json) {
		cJSON *o = cJSON_CreateObject();
		moractl_json_fields(o, &s->base, "version uptime_us pid config_path runtime_dir clients regions "
			"registered_bytes peers transfers_in_flight gpu node peer_auth peers_unauthenticated");
		unsigned na, nu;
		nics_count(&na, &nu);
		cJSON_AddNumberToObject(o, "nics", na);
		cJSON_AddNumberToObject(o, "nics_usable", nu);
		char ep[32];
		snprintf(ep, sizeof(ep), "%016llx", (unsigned long long)s->epoch);
		cJSON_AddStringToObject(o, "epoch", ep);
		json_counters(o, "counters", s->counters, s->n_counters);
		moractl_print_json(o);
	} else {
		char b[32];
		uint64_t up = s->uptime_us / 1000000;
		fmt_bytes(b, sizeof(b), s->registered_bytes);
		printf("morid %s, pid %d, up %lluh%02llum%02llus, epoch %016llx\n", s->version, s->pid,
		       (unsigned long long)up / 3600, (unsigned long long)up / 60 % 60,
		       (unsigned long long)up % 60, (unsigned long long)s->epoch);
		printf("  %-18s %s\n", "config", s->config_path);
		printf("  %-18s %s\n", "runtime dir", s->runtime_dir);
		printf("  %-18s %s\n", "node address", s->node[0] ? s->node : "(no peer listener)");
		printf("  %-18s %s\n", "peer auth", s->peer_auth);
		if (s->peers_unauthenticated)
			printf("  WARNING: peers are NOT authenticated: anyone who reaches %s can use published memory\n",
			       s->node);
		printf("  %-18s %s\n", "gpu", s->gpu);
		unsigned na, nu;
		nics_count(&na, &nu);
		if (na)
			printf("  %-18s %u (%u usable)\n", "nics", na, nu);
		else
			printf("  %-18s %s\n", "nics", "no RDMA devices");
		printf("  %-18s %u\n", "clients", s->clients);
		printf("  %-18s %u regions, %s\n", "registered memory", s->regions, b);
		printf("  %-18s %u\n", "peers", s->peers);
		printf("  %-18s %u\n", "transfers", s->transfers_in_flight);
		printf("counters:\n");
		for (size_t i = 0; i < s->n_counters; i++)
			printf("  %-28s %llu\n", s->counters[i]->name, (unsigned long long)s->counters[i]->value);
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

static int cmd_version(void)
{
	Mori__Request req = MORI__REQUEST__INIT;
	Mori__Hello h = MORI__HELLO__INIT;
	h.protocol_version = MORI_PROTOCOL_VERSION;
	h.name = "moractl";
	req.body_case = MORI__REQUEST__BODY_HELLO;
	req.hello = &h;
	Mori__Reply *rep = call(&req);
	const char *dv = rep->body_case == MORI__REPLY__BODY_HELLO ? rep->hello->daemon_version : "?";
	unsigned pv = rep->body_case == MORI__REPLY__BODY_HELLO ? rep->hello->protocol_version : 0;
	if (json) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "moractl", MORI_VERSION);
		cJSON_AddStringToObject(o, "morid", dv);
		cJSON_AddNumberToObject(o, "protocol", pv);
		moractl_print_json(o);
	} else {
		printf("moractl %s\nmorid %s (protocol %u)\n", MORI_VERSION, dv, pv);
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

static int cmd_config(void)
{
	Mori__Reply *rep = call_empty(MORI__REQUEST__BODY_CONFIG, MORI__REPLY__BODY_CONFIG, "config");
	Mori__ConfigReply *c = rep->config;
	if (json) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "path", c->path);
		cJSON *v = cJSON_AddObjectToObject(o, "values");
		for (size_t i = 0; i < c->n_entries; i++)
			cJSON_AddStringToObject(v, c->entries[i]->name, c->entries[i]->value);
		moractl_print_json(o);
	} else {
		printf("# %s\n", c->path);
		for (size_t i = 0; i < c->n_entries; i++)
			printf("%-20s = %-24s %s\n", c->entries[i]->name, c->entries[i]->value,
			       c->entries[i]->reloadable ? "" : "(restart to change)");
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

static int cmd_reload(void)
{
	Mori__Request req;
	ProtobufCMessage empty;
	ctl_request_empty(&req, MORI__REQUEST__BODY_RELOAD, &empty);
	Mori__Reply *rep = call(&req);
	if (json)
		puts("{\"reloaded\": true}");
	else
		puts("reloaded");
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

static const char *kind_name(uint32_t k) { return k == MORI_MEM_VRAM ? "vram" : "host"; }

/* The rows of a listing: a table on stdout, or objects appended to arr for --json. */
static void list_clients(const Mori__ListReply *l, cJSON *arr)
{
	char b[32];
	if (!json)
		printf("%-6s %-8s %-6s %-20s %-8s %-12s\n", "ID", "PID", "UID", "NAME", "REGIONS", "BYTES");
	for (size_t i = 0; i < l->n_clients; i++) {
		Mori__ClientInfo *c = l->clients[i];
		if (json) {
			moractl_json_row(arr, &c->base, "id pid uid name regions bytes");
		} else {
			fmt_bytes(b, sizeof(b), c->bytes);
			printf("%-6llu %-8d %-6u %-20s %-8u %-12s\n", (unsigned long long)c->id, c->pid,
			       c->uid, c->name, c->regions, b);
		}
	}
}

static void list_regions(const Mori__ListReply *l, cJSON *arr)
{
	char b[32];
	if (!json)
		printf("%-19s %-8s %-5s %-12s %-6s %-9s %-24s %s\n", "ID", "OWNER", "KIND", "BYTES", "OPENS", "INFLIGHT",
		       "NAME", "ACCESS");
	for (size_t i = 0; i < l->n_regions; i++) {
		Mori__RegionInfo *g = l->regions[i];
		if (json) {
			cJSON *o = moractl_json_row(arr, &g->base, "id owner_pid");
			cJSON_AddStringToObject(o, "kind", kind_name(g->kind));
			moractl_json_fields(o, &g->base, "bytes name opens inflight access");
		} else {
			fmt_bytes(b, sizeof(b), g->bytes);
			printf("%-19llu %-8d %-5s %-12s %-6u %-9u %-24s %s\n", (unsigned long long)g->id,
			       g->owner_pid, kind_name(g->kind), b, g->opens, g->inflight, g->name[0] ? g->name : "-",
			       g->access[0] ? g->access : "-");
		}
	}
}

static void list_peers(const Mori__ListReply *l, cJSON *arr)
{
	char b[32], b2[32];
	/* the daemon's state is "down (why)": the word in its column, the reason last, so that a
	 * long one cannot push the columns after it */
	if (!json)
		printf("%-22s %-10s %-9s %-8s %-12s %-12s %-10s %-7s %-20s %s\n", "ADDRESS", "STATE", "TRANSPORT",
		       "STREAMS", "SENT", "RECEIVED", "TRANSFERS", "ERRORS", "AUTHENTICATED", "REASON");
	for (size_t i = 0; i < l->n_peers; i++) {
		Mori__PeerInfo *p = l->peers[i];
		if (json) {
			moractl_json_row(arr, &p->base, "address state transport streams bytes_sent bytes_received transfers "
				 "errors authenticated=auth");
		} else {
			fmt_bytes(b, sizeof(b), p->bytes_sent);
			fmt_bytes(b2, sizeof(b2), p->bytes_received);
			const char *why = strstr(p->state, " (");
			int wl = why ? (int)(why - p->state) : (int)strlen(p->state);
			printf("%-22s %-10.*s %-9s %-8u %-12s %-12s %-10llu %-7llu ", p->address, wl, p->state,
			       p->transport, p->streams, b, b2, (unsigned long long)p->transfers,
			       (unsigned long long)p->errors);
			if (why) { /* "down (reason)": the reason without its parentheses */
				int rl = (int)strlen(why + 2);
				printf("%-20s %.*s\n", p->auth, rl && why[rl + 1] == ')' ? rl - 1 : rl, why + 2);
			} else {
				printf("%s\n", p->auth);
			}
		}
	}
}

static void list_xfers(const Mori__ListReply *l, cJSON *arr)
{
	char b[32], b2[32];
	if (!json)
		printf("%-8s %-6s %-22s %-5s %-12s %-12s %s\n", "ID", "CLIENT", "PEER", "OP", "BYTES", "DONE", "AGE_MS");
	for (size_t i = 0; i < l->n_xfers; i++) {
		Mori__XferInfo *x = l->xfers[i];
		if (json) {
			moractl_json_row(arr, &x->base, "id client peer op bytes bytes_done age_us");
		} else {
			fmt_bytes(b, sizeof(b), x->bytes);
			fmt_bytes(b2, sizeof(b2), x->bytes_done);
			printf("%-8llu %-6llu %-22s %-5s %-12s %-12s %llu\n", (unsigned long long)x->id,
			       (unsigned long long)x->client, x->peer, x->op, b, b2,
			       (unsigned long long)x->age_us / 1000);
		}
	}
}

/* MORI-SHMEM groups: those this daemon is the root of (every rank) or holds PEs of. */
static void list_groups(const Mori__ListReply *l, cJSON *arr)
{
	if (!json)
		printf("%-24s %-11s %-8s %-9s %-10s %-5s %-10s %-7s %-8s %s\n", "NAME", "ROLE", "STATE", "PES", "HEAP", "KIND",
		       "USED", "ALLOCS", "CALLS", "ROOT");
	for (size_t i = 0; i < l->n_groups; i++) {
		Mori__GroupInfo *g = l->groups[i];
		char heap[32], used[32], pes[24], name[160];
		/* names are per uid: another uid's (root sees every uid's) says whose it is */
		if (g->uid != (uint32_t)getuid())
			snprintf(name, sizeof(name), "%s (uid %u)", g->name, g->uid);
		else
			snprintf(name, sizeof(name), "%s", g->name);
		fmt_bytes(heap, sizeof(heap), g->heap_size);
		fmt_bytes(used, sizeof(used), g->heap_used);
		snprintf(pes, sizeof(pes), "%u/%d", g->joined, g->world_size);
		cJSON *o = moractl_json_row(arr, &g->base, "name uid role root state world_size joined heap_size");
		cJSON *ranks = cJSON_CreateArray(), *nodes = cJSON_CreateArray();
		cJSON_AddStringToObject(o, "heap_kind", kind_name(g->heap_kind));
		moractl_json_fields(o, &g->base, "heap_used allocations calls age_us");
		if (!json)
			printf("%-24s %-11s %-8.8s %-9s %-10s %-5s %-10s %-7u %-8llu %s\n", name, g->role, g->state, pes, heap,
			       kind_name(g->heap_kind), g->role[0] == 'r' ? used : "-", g->allocations,
			       (unsigned long long)g->calls, g->root[0] ? g->root : "(this daemon)");
		if (!json && strlen(g->state) > 8)
			printf("  state: %s\n", g->state);
		for (size_t k = 0; k < g->n_ranks; k++) {
			Mori__GroupRankInfo *r = g->ranks[k];
			moractl_json_row(ranks, &r->base, "rank node pid state");
			int seen = 0;
			for (size_t j = 0; j < k; j++)
				seen |= !strcmp(g->ranks[j]->node, r->node);
			if (!seen)
				cJSON_AddItemToArray(nodes, cJSON_CreateString(r->node));
			if (!json)
				printf("  PE %-5d pid %-8d %-8s %s\n", r->rank, r->pid, r->state, r->node[0] ? r->node : "(this node)");
		}
		cJSON_AddItemToObject(o, "ranks", ranks);
		cJSON_AddItemToObject(o, "nodes", nodes);
	}
}

/* moractl clients, memory, peers, transfers, groups: list_call(what)'s rows, a table or one JSON array. */
static int cmd_list(uint32_t what)
{
	static void (*const rows[])(const Mori__ListReply *, cJSON *) = {
		NULL, list_clients, list_regions, list_peers, list_xfers, list_groups};
	Mori__Reply *rep = list_call(what);
	cJSON *arr = cJSON_CreateArray();
	rows[what](rep->list, arr);
	if (json)
		moractl_print_json(arr);
	else
		cJSON_Delete(arr);
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

static int cmd_nics(void)
{
	Mori__Reply *rep = call_empty(MORI__REQUEST__BODY_NICS, MORI__REPLY__BODY_NICS, "device list");
	Mori__NicsReply *l = rep->nics;
	if (json) {
		cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "nics");
		for (size_t i = 0; i < l->n_nics; i++)
			moractl_json_row(arr, &l->nics[i]->base, "device port state link_layer active_mtu max_mtu speed gbps max_msg "
				 "max_qp_wr gid_index gid gid_type address netdev numa_node pci pci_path fw usable reason");
		moractl_json_fields(o, &l->base, "note transport in_use");
		json_counters(o, "rdma_counters", l->counters, l->n_counters);
		moractl_print_json(o);
	} else if (l->n_nics == 0) {
		printf("%s\n", l->note[0] ? l->note : "no RDMA devices");
	} else {
		printf("%-10s %-4s %-7s %-8s %-5s %-16s %-4s %-26s %-8s %-4s %-12s %s\n", "DEVICE", "PORT",
		       "STATE", "LINK", "MTU", "SPEED", "GID", "ADDRESS", "NETDEV", "NUMA", "PCI", "USE");
		for (size_t i = 0; i < l->n_nics; i++) {
			Mori__NicInfo *e = l->nics[i];
			char gid[16], numa[16];
			snprintf(gid, sizeof(gid), e->gid_index >= 0 ? "%d" : "-", e->gid_index);
			snprintf(numa, sizeof(numa), e->numa_node >= 0 ? "%d" : "-", e->numa_node);
			printf("%-10s %-4u %-7s %-8s %-5u %-16s %-4s %-26s %-8s %-4s %-12s %s%s\n", e->device,
			       e->port, e->state, e->link_layer, e->active_mtu, e->speed, gid,
			       e->address[0] ? e->address : (e->gid[0] ? e->gid : "-"),
			       e->netdev[0] ? e->netdev : "-", numa, e->pci[0] ? e->pci : "virtual",
			       e->usable ? "yes" : "no: ", e->usable ? "" : e->reason);
		}
		if (l->note[0])
			printf("note: %s\n", l->note);
	}
	if (!json && l->transport[0]) {
		printf("transport %s; RDMA: %s\n", l->transport, l->in_use[0] ? l->in_use : "-");
		for (size_t i = 0; i < l->n_counters; i++)
			if (l->counters[i]->value)
				printf("  %-28s %llu\n", l->counters[i]->name, (unsigned long long)l->counters[i]->value);
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

/* keygen: 32 random bytes as 64 hex digits, in a file of mode 0600 (morid refuses a key file
 * others can read). Written to a temporary file beside it, then put in place in one step (link
 * for a new file, rename for --force), so a crash never leaves a short key and nothing but a
 * regular file is ever replaced. */
static int cmd_keygen(const char *path, int force)
{
	uint8_t k[32];
	char hex[66], tmp[4096];
	struct stat st;
	if (!path || !path[0]) {
		fprintf(stderr, "moractl: keygen [--force] FILE (e.g. /etc/mori/cluster.key)\n");
		return 2;
	}
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "moractl: %s exists and is not a regular file: not replaced\n", path);
		return 1;
	}
	if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
		fprintf(stderr, "moractl: getrandom: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", k[i]);
	hex[64] = '\n';
	if (snprintf(tmp, sizeof(tmp), "%s.new.%d", path, (int)getpid()) >= (int)sizeof(tmp)) {
		fprintf(stderr, "moractl: %s: path too long\n", path);
		return 2;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	int ok = fd >= 0 && fchmod(fd, 0600) == 0 && write(fd, hex, 65) == 65 && fsync(fd) == 0;
	int err = errno;
	if (fd >= 0 && close(fd) != 0 && ok) {
		ok = 0;
		err = errno;
	}
	memset(k, 0, sizeof(k));
	memset(hex, 0, sizeof(hex));
	if (ok && (force ? rename(tmp, path) : link(tmp, path)) != 0) {
		ok = 0;
		err = errno;
	}
	if (fd >= 0 && (!ok || !force))
		unlink(tmp);
	if (!ok) {
		fprintf(stderr, "moractl: %s: %s%s\n", path, strerror(err), err == EEXIST ? " (--force replaces it)" : "");
		return 1;
	}
	if (json)
		printf("{\"key_file\": \"%s\"}\n", path);
	else
		printf("wrote a new cluster key to %s (mode 0600): give every morid of the cluster the same file "
		       "(cluster_key_file = %s)\n", path, path);
	return 0;
}

/* argv[*i] is option `name` ("--name VALUE" or "--name=VALUE")? Then its value (the next
 * argument is taken), else NULL. Missing or empty values are usage errors: exit 2. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
	const char *a = argv[*i], *v;
	size_t n = strlen(name);
	if (strncmp(a, name, n) != 0 || (a[n] && a[n] != '='))
		return NULL;
	if (a[n] == '=')
		v = a + n + 1;
	else if (*i + 1 < argc)
		v = argv[++*i];
	else {
		fprintf(stderr, "moractl: option %s needs a value (try --help)\n", name);
		exit(2);
	}
	if (!v[0]) {
		fprintf(stderr, "moractl: option %s: the value is empty\n", name);
		exit(2);
	}
	return v;
}

/* An option given once: its value. Given twice (even with the same value): exit 2, as a
 * second --runtime-dir silently winning could address the wrong daemon. */
static const char *once(const char **seen, const char *name, const char *v)
{
	if (*seen) {
		fprintf(stderr, "moractl: option %s given twice ('%s', then '%s')\n", name, *seen, v);
		exit(2);
	}
	return *seen = v;
}

/* --socket's value as a control URL: an absolute path (a unix socket), ipc://PATH, or
 * tcp://HOST:PORT (host_port.h's rule, as morid's listen option). 0, or -1 when it is none of
 * them (nng would take "notaurl" as a relative socket path and fail later with MORI_ECONN). */
static int socket_url(const char *sock, char *out, size_t len)
{
	char host[HOST_PORT_MAX + 1];
	int port;
	if (sock[0] == '/')
		snprintf(out, len, "ipc://%s", sock);
	else if (!strncmp(sock, "ipc://", 6) && sock[6])
		snprintf(out, len, "%s", sock);
	else if (!strncmp(sock, "tcp://", 6) && host_port_split(sock + 6, host, sizeof(host), &port) == 0)
		snprintf(out, len, "%s", sock);
	else
		return -1;
	return strlen(sock) + 6 < len ? 0 : -1;
}

static int known_command(const char *c)
{
	static const char *const cmds[] = {"status", "version", "config", "reload", "topo", "diagnose", "metrics",
					   "clients", "memory", "peers", "transfers", "nics", "groups", "keygen",
					   "help"};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(c, cmds[i]))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	const char *rundir = getenv("MORI_RUNTIME_DIR"), *v;
	const char *sock = NULL, *cmd = NULL, *arg = NULL, *rundir_opt = NULL, *timeout_opt = NULL;
	int force = 0;
	if (rundir && !rundir[0])
		rundir = NULL; /* MORI_RUNTIME_DIR= (empty): as if unset */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--json") || !strcmp(a, "-j"))
			json = 1;
		else if (!strcmp(a, "--force") && cmd && !strcmp(cmd, "keygen"))
			force = 1;
		else if ((v = opt_value(argc, argv, &i, "--runtime-dir")))
			rundir = once(&rundir_opt, "--runtime-dir", v);
		else if ((v = opt_value(argc, argv, &i, "--socket")))
			sock = once(&sock, "--socket", v);
		else if ((v = opt_value(argc, argv, &i, "--timeout"))) {
			once(&timeout_opt, "--timeout", v);
			char *end;
			long ms = strtol(v, &end, 10);
			if (*end || end == v || ms < 1 || ms > 3600000) {
				fprintf(stderr, "moractl: --timeout %s: milliseconds, 1..3600000\n", v);
				return 2;
			}
			timeout_ms = (int)ms;
		}
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (a[0] == '-') {
			fprintf(stderr, "moractl: unknown option %s (try --help)\n", a);
			return 2;
		} else if (!cmd)
			cmd = a;
		else if (!arg && (!strcmp(cmd, "keygen") || !strcmp(cmd, "help"))) /* help CMD: the usage too */
			arg = a;
		else {
			fprintf(stderr, "moractl: unexpected argument %s\n", a);
			return 2;
		}
	}
	if (cmd && !strcmp(cmd, "help")) { /* as git and systemctl take it; help CMD names a command */
		if (arg && !known_command(arg)) {
			fprintf(stderr, "moractl: help: unknown command '%s' (try --help)\n", arg);
			return 2;
		}
		usage(stdout);
		return 0;
	}
	if (cmd && !strcmp(cmd, "keygen"))
		return cmd_keygen(arg, force);
	if (sock && rundir_opt) {
		fprintf(stderr, "moractl: --runtime-dir and --socket both name the daemon: give one\n");
		return 2;
	}
	deadline_us = mori_now_us() + (uint64_t)timeout_ms * 1000;
	if (sock && socket_url(sock, url, sizeof(url)) != 0) {
		fprintf(stderr, "moractl: --socket %s: not a control socket (an absolute path, ipc://PATH or "
			"tcp://HOST:PORT)\n\n", sock);
		usage(stderr);
		return 2;
	}
	if (!sock)
		ctl_url(url, sizeof(url), rundir ? rundir : "/run/mori");
	if (!cmd || !strcmp(cmd, "status"))
		return cmd_status();
	if (!strcmp(cmd, "version"))
		return cmd_version();
	if (!strcmp(cmd, "config"))
		return cmd_config();
	if (!strcmp(cmd, "reload"))
		return cmd_reload();
	if (!strcmp(cmd, "topo"))
		return moractl_topo(url, timeout_ms, json);
	if (!strcmp(cmd, "diagnose"))
		return moractl_diagnose(url, timeout_ms, json);
	if (!strcmp(cmd, "metrics"))
		return moractl_metrics(url, timeout_ms, json);
	if (!strcmp(cmd, "kv"))
		return moractl_kv(url, timeout_ms, json);
	if (!strcmp(cmd, "clients"))
		return cmd_list(1);
	if (!strcmp(cmd, "memory"))
		return cmd_list(2);
	if (!strcmp(cmd, "peers"))
		return cmd_list(3);
	if (!strcmp(cmd, "transfers"))
		return cmd_list(4);
	if (!strcmp(cmd, "nics"))
		return cmd_nics();
	if (!strcmp(cmd, "groups"))
		return cmd_list(5);
	fprintf(stderr, "moractl: unknown command '%s' (try --help)\n", cmd);
	return 2;
}
