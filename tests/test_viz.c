/* MORI-VIZ on a synthetic buffer: the kernels' trace points (kernels/mori_viz.h,
 * compiled here for the host with a fake clock) write the layout of common/viz_layout.h; the
 * host reader and the Chrome/Perfetto exporter (tools/viz/viz.c) give one process per block,
 * one thread per warp, spans named per slot in microseconds. Also: off means nothing written,
 * a ring that wrapped keeps the newest events, a hostile buffer is refused. */
#define MORI_VIZ 1
#include <cJSON.h>
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/mori_viz.h"
#include "../tools/viz/viz.h"

static int64_t now_ticks;
uint64_t mori_viz_host_warp;
int64_t mori_viz_host_clock(void) { return now_ticks += 1000; } /* 1 us a call at 1 GHz */

/* What each warp of a traced copy kernel does: batch { desc; desc } tail. */
static void fake_kernel(struct mori_viz_header *h, uint64_t warp)
{
	mori_viz_host_warp = warp;
	MORI_VIZ_DECL(h);
	MORI_VIZ_BEGIN(MORI_VIZ_SLOT_COPY_BATCH);
	for (int i = 0; i < 2; i++) {
		MORI_VIZ_BEGIN(MORI_VIZ_SLOT_COPY_DESC);
		MORI_VIZ_END(MORI_VIZ_SLOT_COPY_DESC);
	}
	MORI_VIZ_INSTANT(MORI_VIZ_SLOT_COPY_TAIL);
	MORI_VIZ_END(MORI_VIZ_SLOT_COPY_BATCH);
}

static char *export(const struct viz_trace *t, struct viz_stats *st)
{
	static struct viz_names nm;
	memset(&nm, 0, sizeof(nm));
	viz_names_mori(&nm);
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	ck_assert_int_eq(viz_write_chrome(f, t, &nm, st), 0);
	fclose(f);
	return s;
}

START_TEST(tracks_and_spans)
{
	uint32_t warps = 4, epw = 16;
	size_t len = mori_viz_bytes(warps, epw);
	void *buf = malloc(len);
	ck_assert_int_eq(viz_init(buf, len, warps, epw, 1000000000ull, 2, 1), 0);
	now_ticks = 5000000;
	for (uint64_t w = 0; w < warps + 1; w++) /* warp 4 is beyond the buffer: records nothing */
		fake_kernel(buf, w);
	struct viz_trace t;
	char err[200];
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.n, warps * 7);
	ck_assert_uint_eq(t.lost, 0);
	ck_assert_uint_eq(t.bad, 0);
	ck_assert_uint_eq(t.ev[7].warp, 1);
	ck_assert_uint_eq(t.ev[14].block, 1);
	struct viz_stats st;
	char *json = export(&t, &st);
	ck_assert_uint_eq(st.spans, warps * 3);
	ck_assert_uint_eq(st.instants, warps);
	ck_assert_uint_eq(st.unmatched, 0);
	cJSON *o = cJSON_Parse(json);
	ck_assert_msg(o, "not JSON: %s", json);
	cJSON *ev = cJSON_GetObjectItem(o, "traceEvents"), *e;
	int procs = 0, threads = 0, batch = 0, desc = 0, tail = 0;
	cJSON_ArrayForEach(e, ev) {
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
		int pid = cJSON_GetObjectItem(e, "pid")->valueint;
		if (!strcmp(ph, "M")) {
			procs += !strcmp(name, "process_name");
			threads += !strcmp(name, "thread_name");
			continue;
		}
		int tid = cJSON_GetObjectItem(e, "tid")->valueint;
		ck_assert_int_eq(pid, tid / 2); /* block = warp / warps_per_block */
		double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
		if (!strcmp(name, "copy_batch")) {
			batch++;
			ck_assert_str_eq(ph, "X");
			ck_assert_double_eq_tol(cJSON_GetObjectItem(e, "dur")->valuedouble, 6.0, 1e-9); /* 7 events, 1 us apart */
			ck_assert_double_eq_tol(ts, tid * 7.0, 1e-9); /* microseconds from the first event */
		} else if (!strcmp(name, "copy_desc")) {
			desc++;
			ck_assert_double_eq_tol(cJSON_GetObjectItem(e, "dur")->valuedouble, 1.0, 1e-9);
		} else if (!strcmp(name, "copy_tail")) {
			tail++;
			ck_assert_str_eq(ph, "i");
		}
	}
	ck_assert_int_eq(procs, 2);
	ck_assert_int_eq(threads, 4);
	ck_assert_int_eq(batch, 4);
	ck_assert_int_eq(desc, 8);
	ck_assert_int_eq(tail, 4);
	cJSON_Delete(o);
	free(json);
	viz_trace_free(&t);
	free(buf);
}
END_TEST

START_TEST(off_wrap_and_hostile)
{
	uint32_t epw = 4;
	size_t len = mori_viz_bytes(1, epw);
	char *buf = malloc(len);
	struct viz_trace t;
	char err[200];
	/* compiled in, switched off (or no buffer): nothing written */
	ck_assert_int_eq(viz_init(buf, len, 1, epw, 1000000000ull, 0, 0), 0);
	fake_kernel((struct mori_viz_header *)buf, 0);
	fake_kernel(NULL, 0);
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.n, 0);
	viz_trace_free(&t);
	/* 7 events into a ring of 4: the newest 4 stay (END desc, INSTANT, END batch and the
	 * END of the first desc is gone), the ENDs whose BEGIN was lost are unmatched */
	((struct mori_viz_header *)buf)->enabled = 1;
	fake_kernel((struct mori_viz_header *)buf, 0);
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.n, 4);
	ck_assert_uint_eq(t.lost, 3);
	struct viz_stats st;
	free(export(&t, &st));
	ck_assert_uint_eq(st.instants, 1);
	ck_assert_uint_eq(st.spans, 1); /* the second desc: BEGIN and END both kept */
	ck_assert_uint_eq(st.unmatched, 1);
	viz_trace_free(&t);
	/* a meta word naming another warp is not believed */
	struct mori_viz_event *ring = (void *)(buf + mori_viz_events_off(1));
	ring[0].meta = mori_viz_meta(5, 1, MORI_VIZ_EV_BEGIN);
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), 0);
	ck_assert_uint_eq(t.bad, 1);
	viz_trace_free(&t);
	/* hostile headers */
	struct mori_viz_header *h = (void *)buf;
	ck_assert_int_eq(viz_read(buf, 10, &t, err, sizeof(err)), -1);
	h->warps = 1u << 30;
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), -1);
	h->warps = 1;
	h->events_per_warp = 3;
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), -1);
	h->events_per_warp = 4;
	ck_assert_int_eq(viz_read(buf, len - 1, &t, err, sizeof(err)), -1);
	h->magic = 0;
	ck_assert_int_eq(viz_read(buf, len, &t, err, sizeof(err)), -1);
	ck_assert_int_eq(viz_init(buf, len, 1, 3, 1, 0, 1), -1);
	free(buf);
}
END_TEST

START_TEST(slot_names)
{
	static struct viz_names nm;
	ck_assert_int_eq(viz_name_set(&nm, "7=dispatch \"send\""), 0);
	ck_assert_str_eq(nm.name[7], "dispatch \"send\"");
	ck_assert_int_eq(viz_name_set(&nm, "x=1"), -1);
	ck_assert_int_eq(viz_name_set(&nm, "99999=big"), -1);
	ck_assert_int_eq(viz_name_set(&nm, "3="), -1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("viz");
	TCase *tc = tcase_create("viz");
	tcase_add_test(tc, tracks_and_spans);
	tcase_add_test(tc, off_wrap_and_hostile);
	tcase_add_test(tc, slot_names);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
