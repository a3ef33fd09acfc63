/* moractl topo, diagnose and metrics: what the node has and how it is wired, what
 * is wrong with it and how to fix it, and morid's Prometheus metrics. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "moractl_obs.h"
#include "mori.h"
#include "svc/ctl.h"

/* A request without arguments (ctl_request_empty) and its reply (moractl_ask), or NULL with the
 * reason in err. */
static Mori__Reply *ask(const char *url, int timeout_ms, Mori__Request__BodyCase kind, int body, char *err,
			size_t len)
{
	Mori__Request req;
	ProtobufCMessage empty;
	ctl_request_empty(&req, kind, &empty);
	return moractl_ask(url, timeout_ms, &req, body, err, len);
}

/* ask(), saying why on stderr when it gets no answer. */
static Mori__Reply *ask_or_say(const char *url, int timeout_ms, Mori__Request__BodyCase kind, int body)
{
	char err[512];
	Mori__Reply *rep = ask(url, timeout_ms, kind, body, err, sizeof(err));
	if (!rep)
		fprintf(stderr, "moractl: %s\n", err);
	return rep;
}

/* ---- topo ---- */

static void nic_label(const Mori__TopoNic *n, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%u", n->device, n->port);
}

static const char *numa_cpus(const Mori__TopoReply *t, int numa)
{
	for (size_t i = 0; i < t->n_numa; i++)
		if (t->numa[i]->id == numa)
			return t->numa[i]->cpus;
	return "-";
}

static void topo_json(const Mori__TopoReply *t)
{
	cJSON *o = cJSON_CreateObject(), *g = cJSON_AddArrayToObject(o, "gpus"), *n = cJSON_AddArrayToObject(o, "nics");
	for (size_t i = 0; i < t->n_gpus; i++)
		moractl_json_row(g, &t->gpus[i]->base, "index name arch pci numa_node memory_bytes");
	for (size_t i = 0; i < t->n_nics; i++)
		moractl_json_row(n, &t->nics[i]->base, "device port pci numa_node gbps usable state netdev");
	cJSON *m = cJSON_AddArrayToObject(o, "numa");
	for (size_t i = 0; i < t->n_numa; i++)
		moractl_json_row(m, &t->numa[i]->base, "id cpus memory_bytes");
	cJSON_AddNumberToObject(o, "cpus", t->cpus);
	const struct { const char *key; Mori__TopoLink **v; size_t n; } mats[] = {
		{"gpu_gpu", t->gpu_gpu, t->n_gpu_gpu}, {"gpu_nic", t->gpu_nic, t->n_gpu_nic}};
	for (int k = 0; k < 2; k++) {
		cJSON *a = cJSON_AddArrayToObject(o, mats[k].key);
		for (size_t i = 0; i < mats[k].n; i++)
			moractl_json_row(a, &mats[k].v[i]->base, k ? "gpu=a nic=b kind hops" : "a b kind hops p2p p2p_rank atomics");
	}
	cJSON *r = cJSON_AddArrayToObject(o, "ranking");
	for (size_t i = 0; i < t->n_ranking; i++) {
		const Mori__TopoRank *k = t->ranking[i];
		cJSON *e = cJSON_CreateObject(), *order = cJSON_AddArrayToObject(e, "nics");
		cJSON_AddNumberToObject(e, "gpu", k->gpu);
		for (size_t j = 0; j < k->n_nics; j++)
			cJSON_AddItemToArray(order, cJSON_CreateNumber(k->nics[j]));
		cJSON_AddNumberToObject(e, "chosen", k->chosen);
		cJSON_AddItemToArray(r, e);
	}
	moractl_json_fields(o, &t->base, "gpu_note nic_note rdma_in_use");
	moractl_print_json(o);
}

static const Mori__TopoLink *cell(Mori__TopoLink **v, size_t n, int a, int b)
{
	for (size_t i = 0; i < n; i++)
		if (v[i]->a == a && v[i]->b == b)
			return v[i];
	return NULL;
}

static void topo_matrix(const Mori__TopoReply *t)
{
	char lab[80];
	printf("%-8s", "");
	for (size_t i = 0; i < t->n_gpus; i++)
		printf(" GPU%-5zu", i);
	for (size_t i = 0; i < t->n_nics; i++) {
		nic_label(t->nics[i], lab, sizeof(lab));
		printf(" %-10s", lab);
	}
	printf(" %-16s %s\n", "CPU AFFINITY", "NUMA");
	for (size_t a = 0; a < t->n_gpus; a++) {
		printf("GPU%-5zu", a);
		for (size_t b = 0; b < t->n_gpus; b++) {
			const Mori__TopoLink *l = cell(t->gpu_gpu, t->n_gpu_gpu, (int)a, (int)b);
			printf(" %-8s", l ? l->kind : "?");
		}
		for (size_t n = 0; n < t->n_nics; n++) {
			const Mori__TopoLink *l = cell(t->gpu_nic, t->n_gpu_nic, (int)a, (int)n);
			printf(" %-10s", l ? l->kind : "?");
		}
		int numa = t->gpus[a]->numa_node;
		char nb[16];
		snprintf(nb, sizeof(nb), numa >= 0 ? "%d" : "-", numa);
		printf(" %-16s %s\n", numa >= 0 ? numa_cpus(t, numa) : "-", nb);
	}
	puts("\nLegend: X self; PIX at most one PCIe switch; PXB several PCIe bridges; PHB through the PCIe host\n"
	     "bridge; NODE across host bridges of one NUMA node; SYS across NUMA nodes; XGMI/NVLINK where the\n"
	     "driver reports the link; ? unknown (no PCI parent)");
	if (t->n_gpus > 1) {
		puts("\nP2P access (OK yes, NS not supported, ? unknown; rank: the driver's performance rank)");
		for (size_t a = 0; a < t->n_gpus; a++) {
			printf("  GPU%-3zu", a);
			for (size_t b = 0; b < t->n_gpus; b++) {
				const Mori__TopoLink *l = cell(t->gpu_gpu, t->n_gpu_gpu, (int)a, (int)b);
				char s[24];
				if (a == b)
					snprintf(s, sizeof(s), "X");
				else if (l && l->p2p_rank >= 0)
					snprintf(s, sizeof(s), "%s/r%d", l->p2p > 0 ? "OK" : l->p2p == 0 ? "NS" : "?", l->p2p_rank);
				else
					snprintf(s, sizeof(s), "%s", l && l->p2p > 0 ? "OK" : l && l->p2p == 0 ? "NS" : "?");
				printf(" %-8s", s);
			}
			putchar('\n');
		}
	}
}

static void topo_human(const Mori__TopoReply *t)
{
	char lab[80], mem[32];
	if (!t->n_gpus)
		printf("GPUs: none (%s)\n", t->gpu_note[0] ? t->gpu_note : "no GPU");
	for (size_t i = 0; i < t->n_gpus; i++) {
		const Mori__TopoGpu *g = t->gpus[i];
		snprintf(mem, sizeof(mem), "%.1f GiB", (double)g->memory_bytes / (1 << 30));
		printf("GPU%d  %s (%s), %s, pci %s, numa %d\n", g->index, g->name, g->arch, mem, g->pci[0] ? g->pci : "?",
		       g->numa_node);
	}
	if (!t->n_nics)
		printf("NICs: none (%s)\n", t->nic_note[0] ? t->nic_note : "no RDMA devices");
	for (size_t i = 0; i < t->n_nics; i++) {
		const Mori__TopoNic *n = t->nics[i];
		nic_label(n, lab, sizeof(lab));
		printf("NIC%zu  %s %s, %g Gb/s, pci %s, numa %d, netdev %s%s\n", i, lab, n->state, n->gbps,
		       n->pci[0] ? n->pci : "virtual", n->numa_node, n->netdev[0] ? n->netdev : "-",
		       n->usable ? "" : " (not usable)");
	}
	printf("CPUs: %u", t->cpus);
	for (size_t i = 0; i < t->n_numa; i++)
		printf("%s node%d %s (%.1f GiB)", i ? ";" : ", NUMA:", t->numa[i]->id, t->numa[i]->cpus,
		       (double)t->numa[i]->memory_bytes / (1 << 30));
	printf("\n");
	if (t->n_gpus) {
		putchar('\n');
		topo_matrix(t);
	}
	if (t->n_gpus && t->n_nics) {
		puts("\nNIC ranking per GPU (speed, then PCI distance, then NUMA; * the NIC the GPU uses)");
		for (size_t i = 0; i < t->n_ranking; i++) {
			const Mori__TopoRank *k = t->ranking[i];
			printf("  GPU%d:", k->gpu);
			for (size_t j = 0; j < k->n_nics; j++) {
				int n = k->nics[j];
				const Mori__TopoLink *l = cell(t->gpu_nic, t->n_gpu_nic, k->gpu, n);
				nic_label(t->nics[n], lab, sizeof(lab));
				printf("%s %s%s (%g Gb/s, %s, numa %d)", j ? "," : "", n == k->chosen ? "*" : "", lab,
				       t->nics[n]->gbps, l ? l->kind : "?", t->nics[n]->numa_node);
			}
			putchar('\n');
		}
	}
	if (t->rdma_in_use[0])
		printf("\nRDMA transport: %s\n", t->rdma_in_use);
}

int moractl_topo(const char *url, int timeout_ms, int json)
{
	Mori__Reply *rep = ask_or_say(url, timeout_ms, MORI__REQUEST__BODY_TOPO, MORI__REPLY__BODY_TOPO);
	if (!rep)
		return 1;
	if (json)
		topo_json(rep->topo);
	else
		topo_human(rep->topo);
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}

/* ---- diagnose ---- */

static const char *verdict_name(uint32_t v)
{
	static const char *const n[] = {"ok", "warning", "problem", "skipped"};
	return v <= 3 ? n[v] : "?";
}

/* The check moractl makes itself: its own RLIMIT_MEMLOCK, as clients started from this shell
 * inherit it. */
static Mori__DiagCheck *shell_memlock(char *detail, size_t dl)
{
	static Mori__DiagCheck c = MORI__DIAG_CHECK__INIT;
	struct rlimit rl;
	c.name = "shell_memlock";
	c.remedy = "";
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (1ull << 30)) {
		c.verdict = 0;
		snprintf(detail, dl, "clients started from this shell may lock %s",
			 rl.rlim_cur == RLIM_INFINITY ? "unlimited memory" : "1 GiB or more");
	} else {
		c.verdict = 1;
		snprintf(detail, dl, "clients started from this shell may lock %llu KiB (pinned staging buffers need more)",
			 (unsigned long long)rl.rlim_cur / 1024);
		c.remedy = "ulimit -l unlimited (as root, or raise the hard limit in /etc/security/limits.conf) before "
			   "starting the serving processes";
	}
	c.detail = detail;
	return &c;
}

int moractl_diagnose(const char *url, int timeout_ms, int json)
{
	char err[512], detail[600], sd[300];
	Mori__Reply *rep = ask(url, timeout_ms, MORI__REQUEST__BODY_DIAGNOSE, MORI__REPLY__BODY_DIAGNOSE, err, sizeof(err));
	Mori__DiagCheck none = MORI__DIAG_CHECK__INIT, *daemon = &none;
	Mori__DiagCheck *list[64];
	size_t n = 0;
	if (!rep) {
		snprintf(detail, sizeof(detail), "%s", err);
		none.name = "morid";
		none.verdict = 2;
		none.detail = detail;
		none.remedy = "start it (systemctl start morid) or name its runtime dir (--runtime-dir, $MORI_RUNTIME_DIR)";
		list[n++] = daemon;
	} else {
		for (size_t i = 0; i < rep->diagnose->n_checks && n < 63; i++)
			list[n++] = rep->diagnose->checks[i];
	}
	list[n++] = shell_memlock(sd, sizeof(sd));
	int count[4] = {0};
	for (size_t i = 0; i < n; i++)
		count[list[i]->verdict <= 3 ? list[i]->verdict : 2]++;
	if (json) {
		cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "checks");
		for (size_t i = 0; i < n; i++) {
			cJSON *e = moractl_json_row(a, &list[i]->base, "name");
			cJSON_AddStringToObject(e, "verdict", verdict_name(list[i]->verdict));
			moractl_json_fields(e, &list[i]->base, "detail remedy");
		}
		cJSON_AddNumberToObject(o, "ok", count[0]);
		cJSON_AddNumberToObject(o, "warnings", count[1]);
		cJSON_AddNumberToObject(o, "problems", count[2]);
		cJSON_AddNumberToObject(o, "skipped", count[3]);
		moractl_print_json(o);
	} else {
		printf("%-15s %-8s %s\n", "CHECK", "VERDICT", "DETAIL");
		for (size_t i = 0; i < n; i++) {
			printf("%-15s %-8s %s\n", list[i]->name, verdict_name(list[i]->verdict), list[i]->detail);
			if (list[i]->remedy[0])
				printf("%-15s %-8s remedy: %s\n", "", "", list[i]->remedy);
		}
		printf("%d ok, %d warnings, %d problems, %d skipped\n", count[0], count[1], count[2], count[3]);
	}
	if (rep)
		mori__reply__free_unpacked(rep, NULL);
	return count[2] ? 1 : 0;
}

/* ---- metrics ---- */

int moractl_metrics(const char *url, int timeout_ms, int json)
{
	Mori__Reply *rep = ask_or_say(url, timeout_ms, MORI__REQUEST__BODY_METRICS, MORI__REPLY__BODY_METRICS);
	if (!rep)
		return 1;
	if (json) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "format", "prometheus-text-0.0.4");
		cJSON_AddStringToObject(o, "text", rep->metrics->text);
		moractl_print_json(o);
	} else {
		fputs(rep->metrics->text, stdout);
	}
	mori__reply__free_unpacked(rep, NULL);
	return 0;
}
