/* libmori_xla.so's handlers driven as XLA drives them, without XLA or a GPU: call frames built
 * here with XLA's C API structs (the headers libmori_xla.so was built against) and a fake
 * XLA_FFI_Api that records the error it is asked to create. The metadata query XLA makes at
 * registration; refusals (wrong stage, missing or unknown attributes and ids, an id of the other
 * kind, shapes and types that do not fit, a destroyed object); and the four collectives end to end
 * on host-heap communicators of 1 and 3 forked PEs (host heaps run on the calling thread, the
 * stream is ignored), each result against values computed here. Built by mk/xla.mk where the XLA
 * FFI headers are; tests/test_xla.sh runs it. */
#include <check.h>
#include <inttypes.h>

#include "harness.h"
#include "pe_harness.h"
#include "mori_coll.h"
#include "mori_ep.h"
#include "xla/ffi/api/c_api.h"

XLA_FFI_Error *mori_xla_ep_dispatch(XLA_FFI_CallFrame *f);
XLA_FFI_Error *mori_xla_ep_combine(XLA_FFI_CallFrame *f);
XLA_FFI_Error *mori_xla_allreduce(XLA_FFI_CallFrame *f);
XLA_FFI_Error *mori_xla_allgather(XLA_FFI_CallFrame *f);
XLA_FFI_Error *mori_xla_reducescatter(XLA_FFI_CallFrame *f);
XLA_FFI_Error *mori_xla_alltoall(XLA_FFI_CallFrame *f);
int mori_xla_ep_register(mori_ep_handle *h, mori_client *c, const mori_ep_config *cfg, int64_t *id);
int mori_xla_comm_register(mori_comm *k, mori_client *c, int64_t *id);
int mori_xla_unregister(int64_t id);
const void *mori_xla_libmori(void);
int mori_xla_ffi_version(void);

static XLA_FFI_Handler *const handlers[] = {mori_xla_ep_dispatch, mori_xla_ep_combine, mori_xla_allreduce,
					    mori_xla_allgather, mori_xla_reducescatter, mori_xla_alltoall};

/* ---- a fake XLA: the last error created ---- */
static struct {
	int n;
	XLA_FFI_Error_Code code;
	char msg[1024];
} last;

static XLA_FFI_Error *fake_create(XLA_FFI_Error_Create_Args *a)
{
	last.n++;
	last.code = a->errc;
	snprintf(last.msg, sizeof(last.msg), "%s", a->message);
	return (XLA_FFI_Error *)&last;
}

static XLA_FFI_Error *fake_stream(XLA_FFI_Stream_Get_Args *a)
{
	a->stream = NULL;
	return NULL;
}

static XLA_FFI_Api api;

struct frame {
	XLA_FFI_CallFrame f;
	XLA_FFI_ArgType at[6];
	void *av[6];
	XLA_FFI_RetType rt[6];
	void *rv[6];
	XLA_FFI_AttrType tt[6];
	XLA_FFI_ByteSpan *tn[6];
	void *tv[6];
	XLA_FFI_ByteSpan names[6];
	XLA_FFI_Scalar sc[6];
	int64_t vals[6];
};

static void frame_init(struct frame *F)
{
	memset(F, 0, sizeof(*F));
	api.struct_size = XLA_FFI_Api_STRUCT_SIZE;
	api.XLA_FFI_Error_Create = fake_create;
	api.XLA_FFI_Stream_Get = fake_stream;
	F->f.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
	F->f.api = &api;
	F->f.stage = XLA_FFI_ExecutionStage_EXECUTE;
	F->f.args.struct_size = XLA_FFI_Args_STRUCT_SIZE;
	F->f.args.types = F->at, F->f.args.args = F->av;
	F->f.rets.struct_size = XLA_FFI_Rets_STRUCT_SIZE;
	F->f.rets.types = F->rt, F->f.rets.rets = F->rv;
	F->f.attrs.struct_size = XLA_FFI_Attrs_STRUCT_SIZE;
	F->f.attrs.types = F->tt, F->f.attrs.names = F->tn, F->f.attrs.attrs = F->tv;
}

static void add_arg(struct frame *F, XLA_FFI_Buffer *b)
{
	int64_t i = F->f.args.size++;
	F->at[i] = XLA_FFI_ArgType_BUFFER, F->av[i] = b;
}

static void add_ret(struct frame *F, XLA_FFI_Buffer *b)
{
	int64_t i = F->f.rets.size++;
	F->rt[i] = XLA_FFI_RetType_BUFFER, F->rv[i] = b;
}

/* an S64 scalar attribute (XLA sorts attributes by name; the handlers do not rely on it) */
static void add_attr(struct frame *F, const char *name, int64_t v)
{
	int64_t i = F->f.attrs.size++;
	F->names[i].ptr = name, F->names[i].len = strlen(name);
	F->vals[i] = v;
	F->sc[i].dtype = XLA_FFI_DataType_S64, F->sc[i].value = &F->vals[i];
	F->tt[i] = XLA_FFI_AttrType_SCALAR, F->tn[i] = &F->names[i], F->tv[i] = &F->sc[i];
}

static XLA_FFI_Buffer buf(XLA_FFI_DataType t, void *data, int64_t rank, int64_t *dims)
{
	XLA_FFI_Buffer b = {.struct_size = XLA_FFI_Buffer_STRUCT_SIZE, .dtype = t, .data = data, .rank = rank, .dims = dims};
	return b;
}

/* h(F) must fail with code and a message containing want */
#define REFUSED(h, F, code_, want)                                                                       \
	do {                                                                                             \
		last.n = 0;                                                                              \
		ck_assert_ptr_nonnull((h)(&(F)->f));                                                    \
		ck_assert_int_eq(last.n, 1);                                                             \
		ck_assert_msg(last.code == (code_) && strstr(last.msg, want), "code %d, message \"%s\"; wanted %d, \"%s\"", \
			      (int)last.code, last.msg, (int)(code_), want);                             \
	} while (0)

START_TEST(metadata)
{
	for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
		XLA_FFI_Metadata md;
		memset(&md, 0, sizeof(md));
		md.struct_size = XLA_FFI_Metadata_STRUCT_SIZE;
		XLA_FFI_Metadata_Extension ext;
		memset(&ext, 0, sizeof(ext));
		ext.extension_base.struct_size = XLA_FFI_Metadata_Extension_STRUCT_SIZE;
		ext.extension_base.type = XLA_FFI_Extension_Metadata;
		ext.metadata = &md;
		md.traits = 77;
		XLA_FFI_CallFrame f;
		memset(&f, 0, sizeof(f));
		f.struct_size = XLA_FFI_CallFrame_STRUCT_SIZE;
		f.extension_start = &ext.extension_base; /* XLA's query passes no API: nothing may need it */
		ck_assert_ptr_null(handlers[i](&f));
		ck_assert_int_eq(md.api_version.major_version, XLA_FFI_API_MAJOR);
		ck_assert_int_eq(md.api_version.minor_version, XLA_FFI_API_MINOR);
		ck_assert_int_eq(md.traits, 0); /* not command-buffer compatible */
	}
	ck_assert_int_eq(mori_xla_ffi_version(), XLA_FFI_API_MAJOR * 1000 + XLA_FFI_API_MINOR);
	ck_assert_ptr_eq(mori_xla_libmori(), (const void *)&mori_version); /* one libmori in this process */
}
END_TEST

START_TEST(refusals)
{
	struct frame F;
	float x[4], y[4];
	int64_t d4[] = {4};
	XLA_FFI_Buffer bx = buf(XLA_FFI_DataType_F32, x, 1, d4), by = buf(XLA_FFI_DataType_F32, y, 1, d4);
	frame_init(&F);
	add_arg(&F, &bx), add_ret(&F, &by), add_attr(&F, "op", 0);
	REFUSED(mori_xla_allreduce, &F, XLA_FFI_Error_Code_INVALID_ARGUMENT, "attribute comm is missing");
	add_attr(&F, "comm", 12345);
	REFUSED(mori_xla_allreduce, &F, XLA_FFI_Error_Code_FAILED_PRECONDITION, "communicator 12345 is not registered");
	F.f.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
	REFUSED(mori_xla_allreduce, &F, XLA_FFI_Error_Code_INVALID_ARGUMENT, "not execute");

	frame_init(&F);
	add_attr(&F, "op", 7), add_attr(&F, "has_weights", 0), add_attr(&F, "has_scales", 0);
	REFUSED(mori_xla_ep_dispatch, &F, XLA_FFI_Error_Code_FAILED_PRECONDITION, "EP op 7 is not registered");
	frame_init(&F);
	add_attr(&F, "op", 7), add_attr(&F, "has_weights", 0);
	REFUSED(mori_xla_ep_combine, &F, XLA_FFI_Error_Code_INVALID_ARGUMENT, "attribute has_indices is missing");
	/* a string where an integer goes */
	frame_init(&F);
	add_attr(&F, "op", 7), add_attr(&F, "has_weights", 0), add_attr(&F, "has_indices", 0);
	F.tt[2] = XLA_FFI_AttrType_STRING;
	REFUSED(mori_xla_ep_combine, &F, XLA_FFI_Error_Code_INVALID_ARGUMENT, "has_indices is not an integer scalar");

	int64_t id;
	ck_assert_int_eq(mori_xla_ep_register(NULL, NULL, NULL, &id), MORI_EINVAL);
	ck_assert_int_eq(mori_xla_comm_register(NULL, NULL, &id), MORI_EINVAL);
	ck_assert_int_eq(mori_xla_unregister(12345), MORI_EINVAL);
}
END_TEST

/* ---- collectives on host heaps ---- */
static struct test_daemon D;

struct shared {
	char msg[4][PE_MSG_LEN];
};
static struct shared *SH;

static void setup(void)
{
	pe_shared_map(SH);
	ck_assert_int_eq(daemon_start(&D, NULL), 0);
}

static void teardown(void)
{
	int rc = daemon_stop(&D);
	daemon_cleanup(&D);
	pe_shared_unmap(SH);
	ck_assert_int_eq(rc, 0);
}

/* run handler h on x -> y with attrs comm (and op): NULL or the fake's message */
static const char *run(XLA_FFI_Handler *h, XLA_FFI_Buffer *x, XLA_FFI_Buffer *y, int64_t comm, int64_t op)
{
	struct frame F;
	frame_init(&F);
	add_arg(&F, x), add_ret(&F, y), add_attr(&F, "comm", comm), add_attr(&F, "op", op);
	last.n = 0;
	return h(&F.f) ? last.msg : NULL;
}

/* PE pe's input element i: small integers, exact in every type summed over the PEs */
static float val(int pe, int i) { return (float)((pe + 1) * ((i % 13) - 6)); }

#define NE 6 /* elements per PE's part */

static int pe_colls(int pe, int n, void *arg)
{
	mori_client *c = NULL;
	POK(pe, mori_client_open(D.dir, "xla-check", &c));
	mori_shmem_opts so;
	mori_shmem_opts_init(&so, sizeof(so));
	so.heap_size = 8u << 20, so.timeout_us = 20000000;
	mori_group *g = NULL;
	POK(pe, mori_shmem_init(c, n == 1 ? "xla1" : "xla3", pe, n, &so, &g));
	mori_comm_opts co;
	mori_comm_opts_init(&co, sizeof(co));
	co.scratch_bytes = 1u << 20;
	mori_comm *k = NULL;
	POK(pe, mori_comm_create(g, &co, &k));
	int64_t id;
	POK(pe, mori_xla_comm_register(k, c, &id));

	int N = n * NE;
	float x[4 * NE], y[4 * NE];
	int64_t dn[] = {N}, dp[] = {NE}, d2[] = {n, NE};
	for (int i = 0; i < N; i++)
		x[i] = val(pe, i);
	XLA_FFI_Buffer bx = buf(XLA_FFI_DataType_F32, x, 1, dn), by = buf(XLA_FFI_DataType_F32, y, 1, dn);
	const char *e;

	/* all-reduce, sum and max */
	PCHECK(pe, !(e = run(mori_xla_allreduce, &bx, &by, id, MORI_SUM)), "%.300s", e);
	for (int i = 0; i < N; i++) {
		float s = 0;
		for (int r = 0; r < n; r++)
			s += val(r, i);
		PCHECK(pe, y[i] == s, "allreduce sum [%d] %g, expected %g", i, y[i], s);
	}
	PCHECK(pe, !(e = run(mori_xla_allreduce, &bx, &by, id, MORI_MAX)), "%.300s", e);
	for (int i = 0; i < N; i++) {
		float m = val(0, i);
		for (int r = 1; r < n; r++)
			m = val(r, i) > m ? val(r, i) : m;
		PCHECK(pe, y[i] == m, "allreduce max [%d] %g, expected %g", i, y[i], m);
	}
	/* all-gather: NE in, [n, NE] out (rank-major) */
	XLA_FFI_Buffer bxp = buf(XLA_FFI_DataType_F32, x, 1, dp), by2 = buf(XLA_FFI_DataType_F32, y, 2, d2);
	PCHECK(pe, !(e = run(mori_xla_allgather, &bxp, &by2, id, 0)), "%.300s", e);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < NE; i++)
			PCHECK(pe, y[r * NE + i] == val(r, i), "allgather [%d][%d] %g", r, i, y[r * NE + i]);
	/* reduce-scatter: [n, NE] in, NE out: this PE's part summed */
	XLA_FFI_Buffer bx2 = buf(XLA_FFI_DataType_F32, x, 2, d2), byp = buf(XLA_FFI_DataType_F32, y, 1, dp);
	PCHECK(pe, !(e = run(mori_xla_reducescatter, &bx2, &byp, id, MORI_SUM)), "%.300s", e);
	for (int i = 0; i < NE; i++) {
		float s = 0;
		for (int r = 0; r < n; r++)
			s += val(r, pe * NE + i);
		PCHECK(pe, y[i] == s, "reducescatter [%d] %g, expected %g", i, y[i], s);
	}
	/* all-to-all: part r of x to PE r; part r of y from PE r */
	PCHECK(pe, !(e = run(mori_xla_alltoall, &bx, &by, id, 0)), "%.300s", e);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < NE; i++)
			PCHECK(pe, y[r * NE + i] == val(r, pe * NE + i), "alltoall [%d][%d] %g", r, i, y[r * NE + i]);

	/* refused before anything runs (every PE alike, so none waits for another) */
	int64_t dn1[] = {N + 1};
	XLA_FFI_Buffer by1 = buf(XLA_FFI_DataType_F32, y, 1, dn1);
	PCHECK(pe, (e = run(mori_xla_allgather, &bx, &by1, id, 0)) && strstr(e, "do not fit"), "%.300s", e ? e : "accepted");
	XLA_FFI_Buffer bi = buf(XLA_FFI_DataType_S64, x, 1, dp);
	PCHECK(pe, (e = run(mori_xla_allreduce, &bi, &bi, id, 0)) && strstr(e, "element types"), "%.300s", e ? e : "accepted");
	if (n > 1) {
		int64_t d5[] = {N - 1};
		XLA_FFI_Buffer bo = buf(XLA_FFI_DataType_F32, x, 1, d5);
		PCHECK(pe, (e = run(mori_xla_alltoall, &bo, &bo, id, 0)) && strstr(e, "do not fit"), "%.300s",
		       e ? e : "accepted");
	}
	/* libmori's own refusal (an op that does not exist) comes back with its code's name */
	PCHECK(pe, (e = run(mori_xla_allreduce, &bx, &by, id, 99)) && strstr(e, "MORI_EINVAL") &&
			   last.code == XLA_FFI_Error_Code_INVALID_ARGUMENT, "%.300s", e ? e : "accepted");
	/* a communicator's id where an EP op's goes */
	struct frame F;
	frame_init(&F);
	add_attr(&F, "op", id), add_attr(&F, "has_weights", 0), add_attr(&F, "has_scales", 0);
	PCHECK(pe, mori_xla_ep_dispatch(&F.f) && strstr(last.msg, "is a communicator, not an EP op"), "%.300s", last.msg);
	/* forgotten: the id no longer answers, even once its slot is taken again */
	POK(pe, mori_xla_unregister(id));
	PCHECK(pe, mori_xla_unregister(id) == MORI_EINVAL, "unregistered twice");
	PCHECK(pe, (e = run(mori_xla_allreduce, &bx, &by, id, 0)) && strstr(e, "is not registered"), "%.300s",
	       e ? e : "accepted");
	int64_t id2;
	POK(pe, mori_xla_comm_register(k, c, &id2));
	PCHECK(pe, id2 != id, "a reused slot answered the old id %" PRId64, id);
	PCHECK(pe, (e = run(mori_xla_allreduce, &bx, &by, id, 0)) && strstr(e, "is not registered"), "%.300s",
	       e ? e : "accepted");
	POK(pe, mori_xla_unregister(id2));
	POK(pe, mori_comm_destroy(k));
	POK(pe, mori_shmem_finalize(g));
	POK(pe, mori_client_close(c));
	return 0;
}

START_TEST(colls_one)
{
	pe_run_all(1, pe_colls, NULL, 60, 0);
}
END_TEST

START_TEST(colls_three)
{
	pe_run_all(3, pe_colls, NULL, 60, 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("xla_ffi");
	TCase *t = tcase_create("frames");
	tcase_add_test(t, metadata);
	tcase_add_test(t, refusals);
	suite_add_tcase(s, t);
	t = tcase_create("collectives");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, colls_one);
	tcase_add_test(t, colls_three);
	suite_add_tcase(s, t);
	return run_suite(s);
}
