/* MORI-VIZ host side: buffer set-up, reading, Chrome/Perfetto JSON export (see viz.h). */
#include "viz.h"

#include <stdlib.h>
#include <string.h>

int viz_init(void *buf, size_t len, uint32_t warps, uint32_t epw, uint64_t clock_hz, uint32_t wpb, int enabled)
{
	return mori_viz_init(buf, len, warps, epw, clock_hz, wpb, enabled);
}

int viz_read(const void *buf, size_t len, struct viz_trace *t, char *err, size_t errlen)
{
	memset(t, 0, sizeof(*t));
	const struct mori_viz_header *h = buf;
	if (len < sizeof(*h) || h->magic != MORI_VIZ_MAGIC) {
		snprintf(err, errlen, "not a MORI-VIZ buffer (no magic)");
		return -1;
	}
	if (h->version != MORI_VIZ_VERSION) {
		snprintf(err, errlen, "MORI-VIZ buffer version %u (this reader knows %u)", h->version, MORI_VIZ_VERSION);
		return -1;
	}
	uint32_t epw = h->events_per_warp;
	if (!h->warps || !epw || (epw & (epw - 1)) || !h->clock_hz || h->warps > (1u << 24) || epw > (1u << 24) ||
	    mori_viz_bytes(h->warps, epw) > len) {
		snprintf(err, errlen, "bad MORI-VIZ header: %u warps x %u events, %llu Hz in %zu bytes", h->warps, epw,
			 (unsigned long long)h->clock_hz, len);
		return -1;
	}
	const uint32_t *heads = (const uint32_t *)((const char *)buf + mori_viz_heads_off());
	const struct mori_viz_event *ring = (const void *)((const char *)buf + mori_viz_events_off(h->warps));
	size_t total = 0;
	for (uint32_t w = 0; w < h->warps; w++)
		total += heads[w] < epw ? heads[w] : epw;
	t->ev = calloc(total + 1, sizeof(*t->ev));
	if (!t->ev) {
		snprintf(err, errlen, "out of memory for %zu events", total);
		return -1;
	}
	t->clock_hz = h->clock_hz;
	t->warps_per_block = h->warps_per_block;
	for (uint32_t w = 0; w < h->warps; w++) {
		uint32_t head = heads[w], n = head < epw ? head : epw;
		t->lost += head - n;
		for (uint32_t k = 0; k < n; k++) {
			const struct mori_viz_event *e = &ring[(size_t)w * epw + ((head - n + k) & (epw - 1))];
			uint64_t meta = (uint64_t)e->meta;
			int type = (int)(meta & 3);
			if (meta >> 16 != w || type > MORI_VIZ_EV_INSTANT) {
				t->bad++;
				continue;
			}
			struct viz_event *v = &t->ev[t->n++];
			v->warp = w;
			v->block = h->warps_per_block ? w / h->warps_per_block : 0;
			v->slot = (uint32_t)(meta >> 2) & MORI_VIZ_MAX_SLOT;
			v->type = type;
			v->ts = e->ts;
		}
	}
	return 0;
}

void viz_trace_free(struct viz_trace *t)
{
	free(t->ev);
	memset(t, 0, sizeof(*t));
}

int viz_name_set(struct viz_names *nm, const char *spec)
{
	char *end;
	long s = strtol(spec, &end, 10);
	if (end == spec || *end != '=' || s < 0 || s > MORI_VIZ_MAX_SLOT || !end[1])
		return -1;
	nm->name[s] = end + 1;
	return 0;
}

void viz_names_mori(struct viz_names *nm)
{
	nm->name[0] = "copy_batch";
	nm->name[1] = "copy_desc";
	nm->name[2] = "copy_tail";
}

/* A JSON string body (the names come from the command line). */
static void json_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
}

static void slot_name(FILE *f, const struct viz_names *nm, uint32_t slot)
{
	if (nm && nm->name[slot])
		json_str(f, nm->name[slot]);
	else
		fprintf(f, "slot %u", slot);
}

static double us(const struct viz_trace *t, int64_t ts, int64_t t0)
{
	return (double)(ts - t0) * 1e6 / (double)t->clock_hz;
}

/* Metadata: one process per block, one thread per warp, named. */
static void write_tracks(FILE *f, const struct viz_trace *t, int *first)
{
	uint64_t last_warp = UINT64_MAX;
	int64_t last_block = -1;
	for (size_t i = 0; i < t->n; i++) {
		const struct viz_event *e = &t->ev[i];
		if ((int64_t)e->block != last_block) {
			fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%u,\"args\":{\"name\":\"block %u\"}}",
				*first ? "" : ",", e->block, e->block);
			*first = 0;
			last_block = e->block;
		}
		if (e->warp != last_warp) {
			fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%llu,\"args\":{\"name\":\"warp %llu\"}}",
				e->block, (unsigned long long)e->warp, (unsigned long long)e->warp);
			last_warp = e->warp;
		}
	}
}

int viz_write_chrome(FILE *f, const struct viz_trace *t, const struct viz_names *nm, struct viz_stats *st)
{
	memset(st, 0, sizeof(*st));
	int64_t t0 = INT64_MAX;
	for (size_t i = 0; i < t->n; i++)
		if (t->ev[i].ts < t0)
			t0 = t->ev[i].ts;
	/* open[] holds the index of each warp's unmatched BEGINs (a stack: spans nest) */
	size_t *open = malloc((t->n + 1) * sizeof(*open)), nopen = 0;
	if (!open)
		return -1;
	int first = 1;
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"mori-viz\",\"clock_hz\":%llu,"
		   "\"lost_events\":%llu},\n\"traceEvents\":[",
		(unsigned long long)t->clock_hz, (unsigned long long)t->lost);
	write_tracks(f, t, &first);
	for (size_t i = 0; i < t->n; i++) {
		const struct viz_event *e = &t->ev[i];
		if (i && t->ev[i - 1].warp != e->warp) {
			st->unmatched += nopen; /* BEGINs the previous warp never ended */
			nopen = 0;
		}
		if (e->type == MORI_VIZ_EV_BEGIN) {
			open[nopen++] = i;
			continue;
		}
		if (e->type == MORI_VIZ_EV_INSTANT) {
			fprintf(f, "%s\n{\"name\":\"", first ? "" : ",");
			slot_name(f, nm, e->slot);
			fprintf(f, "\",\"ph\":\"i\",\"s\":\"t\",\"ts\":%.3f,\"pid\":%u,\"tid\":%llu}", us(t, e->ts, t0), e->block,
				(unsigned long long)e->warp);
			first = 0;
			st->instants++;
			continue;
		}
		/* END: the innermost open BEGIN of the same slot */
		size_t k = nopen;
		while (k > 0 && t->ev[open[k - 1]].slot != e->slot)
			k--;
		if (k == 0) {
			st->unmatched++;
			continue;
		}
		const struct viz_event *b = &t->ev[open[k - 1]];
		st->unmatched += nopen - k; /* inner BEGINs left open */
		nopen = k - 1;
		fprintf(f, "%s\n{\"name\":\"", first ? "" : ",");
		slot_name(f, nm, e->slot);
		fprintf(f, "\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%u,\"tid\":%llu,\"args\":{\"slot\":%u}}",
			us(t, b->ts, t0), us(t, e->ts, b->ts), e->block, (unsigned long long)e->warp, e->slot);
		first = 0;
		st->spans++;
	}
	st->unmatched += nopen;
	free(open);
	fprintf(f, "\n]}\n");
	return ferror(f) ? -1 : 0;
}
