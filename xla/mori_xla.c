/* libmori_xla.so: MORI-EP's dispatch and combine and MORI-CCL's all-reduce, all-gather,
 * reduce-scatter and all-to-all as XLA FFI handlers, written in C against XLA's C API
 * (xla/ffi/api/c_api.h, which jaxlib ships: jax.ffi.include_dir()). python/mori/jax registers
 * them with jax.ffi.register_ffi_target (api_version 1) and calls them through jax.ffi.ffi_call.
 *
 * Objects. The EP handles and communicators are libmori's (made by Python through libmori, over
 * mori.shmem groups); Python registers each here (mori_xla_ep_register, mori_xla_comm_register)
 * and passes the id it gets as the handler's attribute "op" / "comm". A compiled executable keeps
 * the id: after mori_xla_unregister (before the object is destroyed) its calls fail with a clear
 * error instead of touching freed memory. Ids carry a generation, so a slot reused later does not
 * answer an old id.
 *
 * Buffers. XLA's buffers are used in place wherever libmori accepts any device memory: dispatch's
 * input, weights, scales and indices, combine's expert outputs (the push path: rows copied to
 * their home ranks) and output, every collective's input and output (MORI-CCL stages what it
 * must through its heap scratch itself). Dispatch's results live on the symmetric heap (peers
 * write them there), so the handler copies the receive buffers into XLA's outputs: one
 * device-to-device copy per buffer, of the whole receive area (world x max tokens rows; the filled
 * count is known only on the GPU), rows H x max_token_type_size bytes apart as on the heap.
 *
 * Ordering. Every call enqueues on XLA's stream and returns (no host synchronisation). The
 * handlers are not command-buffer compatible (traits 0): dispatch and combine advance host-side
 * state of their handle at each call, so XLA runs them every time rather than replaying a graph.
 * Calls are serialised by one lock (on GPU heaps they only enqueue work; a host-heap
 * communicator's collective runs to its end on the calling thread, as libmori runs it).
 *
 * The one driver call libmori's API lacks, a device-to-device copy on a stream, is taken from
 * the driver libmori already loaded (dlopen RTLD_NOLOAD: CUDA's cuMemcpyDtoDAsync in the stream's
 * context, or HIP's hipMemcpyDtoDAsync); this library loads no GPU runtime of its own. */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "mori.h"
#include "mori_coll.h"
#include "mori_ep.h"
#include "xla/ffi/api/c_api.h"

#define MORI_XLA_API __attribute__((visibility("default")))

enum { OBJ_FREE = 0, OBJ_EP = 1, OBJ_COMM = 2 };
#define MAX_OBJS 256

struct ep_rec {
	mori_ep_handle *h;
	mori_ep_config cfg;
	int64_t slots;   /* receive rows: max_recv (normal) or experts per rank x max_recv (low-latency) */
	int64_t max_recv;
	int nbins;       /* count entries: 1 (normal) or experts per rank (low-latency) */
	int pending[MORI_EP_MAX_IN_FLIGHT]; /* tokens of each dispatch waiting for its combine, oldest first */
	int head, n;
};

struct obj {
	int kind;
	uint32_t gen;
	mori_client *c; /* for mori_client_last_error */
	mori_comm *comm;
	struct ep_rec ep;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct obj objs[MAX_OBJS];

/* ---- the device copy (see the header comment) ---- */
typedef int (*dtod_fn)(uint64_t dst, uint64_t src, size_t bytes, void *stream);
typedef int (*stream_ctx_fn)(void *stream, void **ctx);
typedef int (*ctx_push_fn)(void *ctx);
typedef int (*ctx_pop_fn)(void **ctx);
static struct {
	int tried;
	const char *why;
	dtod_fn dtod;
	stream_ctx_fn stream_ctx; /* CUDA only */
	ctx_push_fn push;
	ctx_pop_fn pop;
} drv;

static void drv_load(void)
{
	if (drv.tried)
		return;
	drv.tried = 1;
	void *l = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (l) {
		drv.dtod = (dtod_fn)dlsym(l, "cuMemcpyDtoDAsync_v2");
		drv.stream_ctx = (stream_ctx_fn)dlsym(l, "cuStreamGetCtx");
		drv.push = (ctx_push_fn)dlsym(l, "cuCtxPushCurrent_v2");
		drv.pop = (ctx_pop_fn)dlsym(l, "cuCtxPopCurrent_v2");
		if (!drv.dtod || !drv.stream_ctx || !drv.push || !drv.pop)
			drv.dtod = NULL, drv.why = "libcuda.so.1 lacks cuMemcpyDtoDAsync_v2, cuStreamGetCtx or cuCtxPush/PopCurrent_v2";
		return;
	}
	l = dlopen("libamdhip64.so", RTLD_LAZY | RTLD_NOLOAD);
	if (!l)
		l = dlopen("libamdhip64.so.6", RTLD_LAZY | RTLD_NOLOAD);
	if (l && !(drv.dtod = (dtod_fn)dlsym(l, "hipMemcpyDtoDAsync")))
		drv.why = "libamdhip64 lacks hipMemcpyDtoDAsync";
	if (!l)
		drv.why = "no GPU driver is loaded in this process (libmori loads it with its first GPU object)";
}

/* ---- errors ---- */
static XLA_FFI_Error *ffi_err(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static XLA_FFI_Error *ffi_err(const XLA_FFI_Api *api, XLA_FFI_Error_Code code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	XLA_FFI_Error_Create_Args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
	a.message = msg; /* XLA copies it into its status */
	a.errc = code;
	return api->XLA_FFI_Error_Create(&a);
}

static XLA_FFI_Error_Code code_of(int rc)
{
	switch (rc) {
	case MORI_EINVAL: return XLA_FFI_Error_Code_INVALID_ARGUMENT;
	case MORI_ERANGE: return XLA_FFI_Error_Code_OUT_OF_RANGE;
	case MORI_ENOMEM: return XLA_FFI_Error_Code_RESOURCE_EXHAUSTED;
	case MORI_ETIMEDOUT: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
	case MORI_ENOTSUP: return XLA_FFI_Error_Code_UNIMPLEMENTED;
	case MORI_ECANCELED: return XLA_FFI_Error_Code_CANCELLED;
	default: return XLA_FFI_Error_Code_INTERNAL;
	}
}

/* libmori's refusal: its code's name and the client's last error */
static XLA_FFI_Error *lib_err(const XLA_FFI_Api *api, const struct obj *o, const char *what, int rc)
{
	const char *detail = o->c ? mori_client_last_error(o->c) : "";
	return ffi_err(api, code_of(rc), "%s: %s%s%s", what, mori_strerror(rc), detail && *detail ? ": " : "",
		       detail ? detail : "");
}

/* ---- the call frame ---- */

/* The metadata query XLA makes at registration: the header version this library was built with,
 * traits 0 (not command-buffer compatible), no state. 1 when f was that query (*out set). */
static int metadata(XLA_FFI_CallFrame *f, XLA_FFI_Error **out)
{
	/* the base's type by its pointer: XLA renamed it (XLA_FFI_Extension_Base, later XLA_FFI_Extension) */
	__typeof__(f->extension_start) e = f->extension_start;
	if (!e || e->type != XLA_FFI_Extension_Metadata)
		return 0;
	XLA_FFI_Metadata_Extension *m = (XLA_FFI_Metadata_Extension *)e;
	*out = NULL;
	if (e->struct_size < XLA_FFI_Metadata_Extension_STRUCT_SIZE || !m->metadata ||
	    m->metadata->struct_size < XLA_FFI_Metadata_STRUCT_SIZE) {
		/* XLA older than these headers: say so where XLA gave us its API (else XLA reports
		 * the version it did not get) */
		if (f->api)
			*out = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
				       "mori_xla: XLA's metadata query is older than the headers libmori_xla.so was built with");
		return 1;
	}
	m->metadata->api_version.struct_size = XLA_FFI_Api_Version_STRUCT_SIZE;
	m->metadata->api_version.extension_start = NULL;
	m->metadata->api_version.major_version = XLA_FFI_API_MAJOR;
	m->metadata->api_version.minor_version = XLA_FFI_API_MINOR;
	m->metadata->traits = 0;
	return 1;
}

/* NULL when f is an execute-stage call frame this library can read; else the error to return */
static XLA_FFI_Error *frame_check(XLA_FFI_CallFrame *f, const char *what)
{
	if (f->struct_size < XLA_FFI_CallFrame_STRUCT_SIZE)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
			       "%s: XLA's call frame (%zu bytes) is older than this library's headers (%zu): rebuild "
			       "libmori_xla.so against this jaxlib's headers", what, f->struct_size,
			       (size_t)XLA_FFI_CallFrame_STRUCT_SIZE);
	if (f->stage != XLA_FFI_ExecutionStage_EXECUTE)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: called at stage %d, not execute", what,
			       (int)f->stage);
	return NULL;
}

/* Integer attribute `name` (any integer scalar type) into *v: 1 found, 0 absent, -1 not an integer. */
static int attr_int(const XLA_FFI_CallFrame *f, const char *name, int64_t *v)
{
	size_t len = strlen(name);
	for (int64_t i = 0; i < f->attrs.size; i++) {
		const XLA_FFI_ByteSpan *n = f->attrs.names[i];
		if (n->len != len || memcmp(n->ptr, name, len))
			continue;
		if (f->attrs.types[i] != XLA_FFI_AttrType_SCALAR)
			return -1;
		const XLA_FFI_Scalar *s = f->attrs.attrs[i];
		switch (s->dtype) {
		case XLA_FFI_DataType_PRED: *v = *(const uint8_t *)s->value; return 1;
		case XLA_FFI_DataType_S8: *v = *(const int8_t *)s->value; return 1;
		case XLA_FFI_DataType_S16: *v = *(const int16_t *)s->value; return 1;
		case XLA_FFI_DataType_S32: *v = *(const int32_t *)s->value; return 1;
		case XLA_FFI_DataType_S64: *v = *(const int64_t *)s->value; return 1;
		case XLA_FFI_DataType_U8: *v = *(const uint8_t *)s->value; return 1;
		case XLA_FFI_DataType_U16: *v = *(const uint16_t *)s->value; return 1;
		case XLA_FFI_DataType_U32: *v = *(const uint32_t *)s->value; return 1;
		case XLA_FFI_DataType_U64: *v = (int64_t)*(const uint64_t *)s->value; return 1;
		default: return -1;
		}
	}
	return 0;
}

static XLA_FFI_Error *need_int(const XLA_FFI_CallFrame *f, const char *what, const char *name, int64_t *v)
{
	int r = attr_int(f, name, v);
	if (r == 1)
		return NULL;
	return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: attribute %s %s", what, name,
		       r ? "is not an integer scalar" : "is missing");
}

/* Argument or result i as a buffer (NULL when out of range or not a buffer). */
static const XLA_FFI_Buffer *arg(const XLA_FFI_CallFrame *f, int64_t i)
{
	if (i >= f->args.size || f->args.types[i] != XLA_FFI_ArgType_BUFFER)
		return NULL;
	return f->args.args[i];
}

static const XLA_FFI_Buffer *ret(const XLA_FFI_CallFrame *f, int64_t i)
{
	if (i >= f->rets.size || f->rets.types[i] != XLA_FFI_RetType_BUFFER)
		return NULL;
	return f->rets.rets[i];
}

static int64_t elems(const XLA_FFI_Buffer *b)
{
	int64_t n = 1;
	for (int64_t i = 0; i < b->rank; i++)
		n *= b->dims[i];
	return n;
}

/* XLA's element type as mori_dtype, 0 when mori has none */
static mori_dtype mdtype(XLA_FFI_DataType t)
{
	switch (t) {
	case XLA_FFI_DataType_U8: return MORI_UINT8;
	case XLA_FFI_DataType_S32: return MORI_INT32;
	case XLA_FFI_DataType_F16: return MORI_FLOAT16;
	case XLA_FFI_DataType_F32: return MORI_FLOAT32;
	case XLA_FFI_DataType_BF16: return MORI_BFLOAT16;
	case XLA_FFI_DataType_F8E4M3FN:
	case XLA_FFI_DataType_F8E4M3FNUZ: return MORI_FLOAT8_E4M3;
	default: return (mori_dtype)0;
	}
}

/* bytes of one element of XLA type t, 0 for sub-byte and unknown types */
static size_t xla_es(XLA_FFI_DataType t)
{
	switch (t) {
	case XLA_FFI_DataType_PRED: case XLA_FFI_DataType_S8: case XLA_FFI_DataType_U8:
	case XLA_FFI_DataType_F8E5M2: case XLA_FFI_DataType_F8E4M3FN: case XLA_FFI_DataType_F8E4M3FNUZ:
	case XLA_FFI_DataType_F8E5M2FNUZ: case XLA_FFI_DataType_F8E4M3B11FNUZ:
		return 1;
	case XLA_FFI_DataType_S16: case XLA_FFI_DataType_U16: case XLA_FFI_DataType_F16: case XLA_FFI_DataType_BF16:
		return 2;
	case XLA_FFI_DataType_S32: case XLA_FFI_DataType_U32: case XLA_FFI_DataType_F32:
		return 4;
	case XLA_FFI_DataType_S64: case XLA_FFI_DataType_U64: case XLA_FFI_DataType_F64: case XLA_FFI_DataType_C64:
		return 8;
	case XLA_FFI_DataType_C128:
		return 16;
	default:
		return 0;
	}
}

static const char *dtname(mori_dtype d)
{
	switch ((int)d) {
	case MORI_UINT8: return "uint8";
	case MORI_INT32: return "int32";
	case MORI_FLOAT16: return "float16";
	case MORI_FLOAT32: return "float32";
	case MORI_BFLOAT16: return "bfloat16";
	case MORI_FLOAT8_E4M3: return "float8_e4m3";
	default: return "a type mori does not move";
	}
}

static XLA_FFI_Error *stream_of(const XLA_FFI_CallFrame *f, const char *what, void **s)
{
	XLA_FFI_Stream_Get_Args a;
	memset(&a, 0, sizeof(a));
	a.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
	a.ctx = f->ctx;
	XLA_FFI_Error *e = f->api->XLA_FFI_Stream_Get(&a);
	if (e)
		return e;
	*s = a.stream;
	return NULL;
}

/* Look up id (kind): the object, or NULL with *e set. Called with the lock held. */
static struct obj *lookup(const XLA_FFI_CallFrame *f, const char *what, const char *attr, int kind, XLA_FFI_Error **e)
{
	int64_t id;
	if ((*e = need_int(f, what, attr, &id)))
		return NULL;
	int64_t slot = (id & 0xffff) - 1;
	struct obj *o = slot >= 0 && slot < MAX_OBJS ? &objs[slot] : NULL;
	if (!o || o->kind == OBJ_FREE || o->gen != (uint32_t)(id >> 16)) {
		*e = ffi_err(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION,
			     "%s: %s %" PRId64 " is not registered (destroyed, or from another process)", what,
			     kind == OBJ_EP ? "EP op" : "communicator", id);
		return NULL;
	}
	if (o->kind != kind) {
		*e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: id %" PRId64 " is %s, not %s", what, id,
			     o->kind == OBJ_EP ? "an EP op" : "a communicator", kind == OBJ_EP ? "an EP op" : "a communicator");
		return NULL;
	}
	return o;
}

/* A buffer's shape against what the call needs: rank 2 [d0, d1] (d0 < 0: any), element type t
 * (0: any). NULL or the error naming the buffer. */
static XLA_FFI_Error *shape2(const XLA_FFI_CallFrame *f, const char *what, const char *name, const XLA_FFI_Buffer *b,
			     int64_t d0, int64_t d1, XLA_FFI_DataType t)
{
	if (!b)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s is missing", what, name);
	if (b->rank != 2 || (d0 >= 0 && b->dims[0] != d0) || b->dims[1] != d1) {
		char want[48], got[64] = "";
		if (d0 >= 0)
			snprintf(want, sizeof(want), "[%" PRId64 ", %" PRId64 "]", d0, d1);
		else
			snprintf(want, sizeof(want), "[T, %" PRId64 "]", d1);
		for (int64_t i = 0, o = 0; i < b->rank && i < 4 && o < (int64_t)sizeof(got); i++)
			o += snprintf(got + o, sizeof(got) - (size_t)o, "%s%" PRId64, i ? ", " : "", b->dims[i]);
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s must be %s, not [%s%s]", what, name,
			       want, got, b->rank > 4 ? ", ..." : "");
	}
	if (t && b->dtype != t)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %s has XLA element type %d, not %d", what,
			       name, (int)b->dtype, (int)t);
	return NULL;
}

/* A result's size in bytes against the receive area it gets (and its element size). */
static XLA_FFI_Error *ret_bytes(const XLA_FFI_CallFrame *f, const char *what, const char *name, const XLA_FFI_Buffer *b,
				uint64_t bytes, size_t es)
{
	if (!b)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: result %s is missing", what, name);
	size_t bes = xla_es(b->dtype);
	if (bes != es || (uint64_t)elems(b) * bes != bytes)
		return ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT,
			       "%s: result %s holds %" PRId64 " elements of %zu bytes; the receive area is %" PRIu64
			       " bytes of %zu-byte elements", what, name, elems(b), bes, bytes, es);
	return NULL;
}

static XLA_FFI_Error *copy_out(const XLA_FFI_CallFrame *f, const char *what, const XLA_FFI_Buffer *to,
			       const void *from, uint64_t bytes, void *stream)
{
	if (!bytes)
		return NULL;
	drv_load();
	if (!drv.dtod)
		return ffi_err(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, "%s: cannot copy the receive buffers: %s",
			       what, drv.why);
	void *ctx = NULL, *prev = NULL;
	int rc = 0;
	if (drv.stream_ctx && !(rc = drv.stream_ctx(stream, &ctx)))
		rc = drv.push(ctx);
	if (!rc)
		rc = drv.dtod((uint64_t)(uintptr_t)to->data, (uint64_t)(uintptr_t)from, bytes, stream);
	if (ctx)
		drv.pop(&prev);
	if (rc)
		return ffi_err(f->api, XLA_FFI_Error_Code_INTERNAL, "%s: the device copy of %" PRIu64 " bytes failed: driver "
			       "error %d", what, bytes, rc);
	return NULL;
}

/* ---- registration (called by python/mori/jax) ---- */

static int put(int kind, mori_client *c, int64_t *id, struct obj **out)
{
	for (int i = 0; i < MAX_OBJS; i++) {
		struct obj *o = &objs[i];
		if (o->kind != OBJ_FREE)
			continue;
		uint32_t gen = o->gen + 1 ? o->gen + 1 : 1;
		memset(o, 0, sizeof(*o));
		o->kind = kind, o->gen = gen, o->c = c;
		*id = (int64_t)gen << 16 | (i + 1);
		*out = o;
		return MORI_OK;
	}
	return MORI_ENOMEM;
}

/* Register EP handle h (made with cfg, on a group of client c; c may be NULL) for the EP
 * handlers: *id is what their attribute "op" takes. MORI_EINVAL for NULL h/cfg/id or a cfg->size
 * below this library's mori_ep_config; MORI_ENOMEM with MAX_OBJS objects registered; libmori's
 * error from mori_ep_recv_buffers. The handle stays the caller's (unregister before destroy). */
MORI_XLA_API int mori_xla_ep_register(mori_ep_handle *h, mori_client *c, const mori_ep_config *cfg, int64_t *id)
{
	if (!h || !cfg || !id || cfg->size < sizeof(mori_ep_config))
		return MORI_EINVAL;
	mori_ep_recv r;
	int rc = mori_ep_recv_buffers(h, &r);
	if (rc)
		return rc;
	struct obj *o;
	pthread_mutex_lock(&lock);
	if (!(rc = put(OBJ_EP, c, id, &o))) {
		struct ep_rec *e = &o->ep;
		e->h = h;
		e->cfg = *cfg;
		int ll = cfg->kernel_type == MORI_EP_LOW_LATENCY || cfg->kernel_type == MORI_EP_INTERNODE_LL;
		e->nbins = ll ? cfg->num_experts_per_rank : 1;
		e->max_recv = r.max_recv;
		e->slots = r.max_recv * e->nbins;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Register communicator k (of client c, may be NULL) for the collective handlers (attribute
 * "comm"). Errors as mori_xla_ep_register. */
MORI_XLA_API int mori_xla_comm_register(mori_comm *k, mori_client *c, int64_t *id)
{
	if (!k || !id)
		return MORI_EINVAL;
	struct obj *o;
	pthread_mutex_lock(&lock);
	int rc = put(OBJ_COMM, c, id, &o);
	if (!rc)
		o->comm = k;
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Forget id: later calls naming it fail (FAILED_PRECONDITION). MORI_EINVAL for an id not registered. */
MORI_XLA_API int mori_xla_unregister(int64_t id)
{
	int64_t slot = (id & 0xffff) - 1;
	int rc = MORI_EINVAL;
	pthread_mutex_lock(&lock);
	if (slot >= 0 && slot < MAX_OBJS && objs[slot].kind != OBJ_FREE && objs[slot].gen == (uint32_t)(id >> 16)) {
		objs[slot].kind = OBJ_FREE;
		rc = MORI_OK;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

/* Where this library's calls into libmori go (mori_version's address as it resolved it): Python
 * compares it with the libmori it loaded, so that handles are never passed between two copies. */
MORI_XLA_API const void *mori_xla_libmori(void)
{
	return (const void *)&mori_version;
}

/* The XLA FFI API version the handlers were built against (major * 1000 + minor). */
MORI_XLA_API int mori_xla_ffi_version(void)
{
	return XLA_FFI_API_MAJOR * 1000 + XLA_FFI_API_MINOR;
}

/* ---- EP ---- */

static size_t recv_es(const mori_ep_config *c)
{
	return c->quant_type ? 1 : mori_dtype_size(c->data_type);
}

/* The EP handlers' opening: the frame, the 0/1 attributes a1 and a2, then the op looked up under
 * the lock. NULL with the lock held and *o set, else the error with the lock not held. */
static XLA_FFI_Error *ep_enter(XLA_FFI_CallFrame *f, const char *what, const char *a1, int64_t *v1, const char *a2,
			       int64_t *v2, struct obj **o)
{
	XLA_FFI_Error *e = NULL;
	if ((e = frame_check(f, what)) || (e = need_int(f, what, a1, v1)) || (e = need_int(f, what, a2, v2)))
		return e;
	pthread_mutex_lock(&lock);
	if (!(*o = lookup(f, what, "op", OBJ_EP, &e)))
		pthread_mutex_unlock(&lock);
	return e;
}

/* mori_ep_dispatch. Attributes: op (id), has_weights, has_scales (0/1). Arguments: input [T, H]
 * of data_type, indices [T, K] int32, then weights [T, K] float32 when has_weights, scales
 * [T, scale_dim] (scale_type_size-byte elements) when has_scales. Results (the receive area,
 * copied from the heap): tokens (slots x H x max_token_type_size bytes, elements of the received
 * type: fp8 under quant_type), weights [slots x K] float32, indices [slots x K] int32, src_pos
 * [slots] int32, count [bins] int32, then scales (slots x scale stride bytes) when scale_dim > 0. */
static XLA_FFI_Error *ep_dispatch(XLA_FFI_CallFrame *f)
{
	static const char what[] = "mori_ep_dispatch";
	XLA_FFI_Error *e;
	struct obj *o;
	int64_t hw = 0, hs = 0;
	if ((e = ep_enter(f, what, "has_weights", &hw, "has_scales", &hs, &o)))
		return e;
	struct ep_rec *p = &o->ep;
	const mori_ep_config *c = &p->cfg;
	const XLA_FFI_Buffer *in = arg(f, 0), *idx = arg(f, 1), *w = hw ? arg(f, 2) : NULL,
			     *sc = hs ? arg(f, 2 + !!hw) : NULL;
	if (f->args.size != 2 + !!hw + !!hs) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %" PRId64 " arguments, expected %d", what,
			    f->args.size, 2 + !!hw + !!hs);
		goto out;
	}
	if ((e = shape2(f, what, "input", in, -1, c->hidden_dim, 0)))
		goto out;
	int64_t T = in->dims[0], K = c->num_experts_per_token;
	if (mdtype(in->dtype) != c->data_type) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: input is %s, the config's data_type %s", what,
			    dtname(mdtype(in->dtype)), dtname(c->data_type));
		goto out;
	}
	if ((e = shape2(f, what, "indices", idx, T, K, XLA_FFI_DataType_S32)) ||
	    (hw && (e = shape2(f, what, "weights", w, T, K, XLA_FFI_DataType_F32))))
		goto out;
	if (hs) {
		if (!c->scale_dim || c->quant_type) {
			e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: scales given but %s", what,
				    c->quant_type ? "quant_type computes them" : "scale_dim is 0");
			goto out;
		}
		if ((e = shape2(f, what, "scales", sc, T, c->scale_dim, 0)))
			goto out;
		size_t ses = xla_es(sc->dtype);
		if ((int)ses != c->scale_type_size) {
			e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: scales have %zu-byte elements, the "
				    "config's scale_type_size is %d", what, ses, c->scale_type_size);
			goto out;
		}
	}
	uint64_t S = (uint64_t)p->slots, row = (uint64_t)c->hidden_dim * c->max_token_type_size;
	uint64_t sstride = ((uint64_t)c->scale_dim * c->scale_type_size + 15) & ~(uint64_t)15;
	int nret = 5 + (c->scale_dim > 0);
	if (f->rets.size != nret) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %" PRId64 " results, expected %d", what,
			    f->rets.size, nret);
		goto out;
	}
	if ((e = ret_bytes(f, what, "tokens", ret(f, 0), S * row, recv_es(c))) ||
	    (e = ret_bytes(f, what, "weights", ret(f, 1), S * K * 4, 4)) ||
	    (e = ret_bytes(f, what, "indices", ret(f, 2), S * K * 4, 4)) ||
	    (e = ret_bytes(f, what, "src_pos", ret(f, 3), S * 4, 4)) ||
	    (e = ret_bytes(f, what, "count", ret(f, 4), (uint64_t)p->nbins * 4, 4)) ||
	    (c->scale_dim && (e = ret_bytes(f, what, "scales", ret(f, 5), S * sstride, (size_t)c->scale_type_size))))
		goto out;
	void *stream;
	if ((e = stream_of(f, what, &stream)))
		goto out;
	mori_ep_recv r;
	int rc = mori_ep_dispatch(p->h, T ? in->data : NULL, w && T ? w->data : NULL, sc && T ? sc->data : NULL,
				  T ? idx->data : NULL, (int)T, stream, &r);
	if (rc) {
		e = lib_err(f->api, o, what, rc);
		goto out;
	}
	p->pending[(p->head + p->n) % MORI_EP_MAX_IN_FLIGHT] = (int)T;
	p->n++;
	if ((e = copy_out(f, what, ret(f, 0), r.tokens, S * row, stream)) ||
	    (e = copy_out(f, what, ret(f, 1), r.weights, S * K * 4, stream)) ||
	    (e = copy_out(f, what, ret(f, 2), r.indices, S * K * 4, stream)) ||
	    (e = copy_out(f, what, ret(f, 3), r.src_pos, S * 4, stream)) ||
	    (e = copy_out(f, what, ret(f, 4), r.count, (uint64_t)p->nbins * 4, stream)) ||
	    (c->scale_dim && (e = copy_out(f, what, ret(f, 5), r.scales, S * sstride, stream))))
		goto out;
out:
	pthread_mutex_unlock(&lock);
	return e;
}

/* mori_ep_combine. Attributes: op, has_weights, has_indices. Arguments: expert_out (slots x H
 * elements, bfloat16 or float32, dense rows), then weights [T, K] float32 when has_weights,
 * indices [T, K] int32 (the caller's routing, as given to dispatch) when has_indices. Result: out
 * [T, H] of expert_out's type, T the token count of the dispatch this combine takes (the oldest
 * not yet combined). */
static XLA_FFI_Error *ep_combine(XLA_FFI_CallFrame *f)
{
	static const char what[] = "mori_ep_combine";
	XLA_FFI_Error *e;
	struct obj *o;
	int64_t hw = 0, hi = 0;
	if ((e = ep_enter(f, what, "has_weights", &hw, "has_indices", &hi, &o)))
		return e;
	struct ep_rec *p = &o->ep;
	const mori_ep_config *c = &p->cfg;
	const XLA_FFI_Buffer *x = arg(f, 0), *w = hw ? arg(f, 1) : NULL, *idx = hi ? arg(f, 1 + !!hw) : NULL,
			     *y = ret(f, 0);
	if (f->args.size != 1 + !!hw + !!hi || f->rets.size != 1 || !x || !y) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %" PRId64 " arguments and %" PRId64
			    " results, expected %d and 1", what, f->args.size, f->rets.size, 1 + !!hw + !!hi);
		goto out;
	}
	mori_dtype dt = mdtype(x->dtype);
	if ((dt != MORI_BFLOAT16 && dt != MORI_FLOAT32) || (int)mori_dtype_size(dt) > c->max_token_type_size) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: expert outputs are %s; combine takes "
			    "bfloat16 or float32 no wider than max_token_type_size %d", what, dtname(dt),
			    c->max_token_type_size);
		goto out;
	}
	if (elems(x) != p->slots * c->hidden_dim) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: expert outputs hold %" PRId64 " elements, the "
			    "receive layout %" PRId64 " x %d", what, elems(x), p->slots, c->hidden_dim);
		goto out;
	}
	if ((e = shape2(f, what, "out", y, -1, c->hidden_dim, x->dtype)))
		goto out;
	int64_t T = y->dims[0], K = c->num_experts_per_token;
	if ((hw && (e = shape2(f, what, "weights", w, T, K, XLA_FFI_DataType_F32))) ||
	    (hi && (e = shape2(f, what, "indices", idx, T, K, XLA_FFI_DataType_S32))))
		goto out;
	if (!p->n) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_FAILED_PRECONDITION, "%s: no dispatch waits for its combine", what);
		goto out;
	}
	if (p->pending[p->head] != T) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: out has %" PRId64 " rows, but the dispatch this "
			    "combine takes had %d tokens", what, T, p->pending[p->head]);
		goto out;
	}
	void *stream;
	if ((e = stream_of(f, what, &stream)))
		goto out;
	int rc = mori_ep_combine(p->h, dt, x->data, w && T ? w->data : NULL, idx && T ? idx->data : NULL,
				 T ? y->data : NULL, stream);
	if (rc) {
		e = lib_err(f->api, o, what, rc);
		goto out;
	}
	p->head = (p->head + 1) % MORI_EP_MAX_IN_FLIGHT;
	p->n--;
out:
	pthread_mutex_unlock(&lock);
	return e;
}

/* ---- collectives ---- */

enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_ALLTOALL };
static const char *const coll_name[] = {"mori_allreduce", "mori_allgather", "mori_reducescatter", "mori_alltoall"};

/* Attributes: comm (id), and op (mori_redop: 0 sum, 2 max, 3 min) for the reductions. Argument x,
 * result y, one element type; counts from their sizes and the communicator's size n:
 * all-reduce |y| = |x|; all-gather |y| = n |x|; reduce-scatter |x| = n |y|; all-to-all |y| = |x|,
 * a multiple of n (count per peer |x| / n). */
static XLA_FFI_Error *coll(XLA_FFI_CallFrame *f, int which)
{
	const char *what = coll_name[which];
	XLA_FFI_Error *e;
	struct obj *o;
	int64_t op = 0;
	int red = which == C_ALLREDUCE || which == C_REDUCESCATTER;
	if ((e = frame_check(f, what)) || (red && (e = need_int(f, what, "op", &op))))
		return e;
	pthread_mutex_lock(&lock);
	if (!(o = lookup(f, what, "comm", OBJ_COMM, &e)))
		goto out;
	const XLA_FFI_Buffer *x = arg(f, 0), *y = ret(f, 0);
	if (f->args.size != 1 || f->rets.size != 1 || !x || !y) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %" PRId64 " arguments and %" PRId64
			    " results, expected 1 and 1", what, f->args.size, f->rets.size);
		goto out;
	}
	mori_dtype dt = mdtype(x->dtype);
	if (!dt || x->dtype != y->dtype) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: element types %d -> %d: MORI-CCL moves one of "
			    "uint8, int32, float16, float32, bfloat16, float8_e4m3 in and out", what, (int)x->dtype,
			    (int)y->dtype);
		goto out;
	}
	int64_t n = mori_comm_size(o->comm), nx = elems(x), ny = elems(y), count = nx;
	int ok = n > 0;
	switch (which) {
	case C_ALLREDUCE: ok = nx == ny; break;
	case C_ALLGATHER: ok = ny == n * nx; break;
	case C_REDUCESCATTER: ok = nx == n * ny, count = ny; break;
	case C_ALLTOALL: ok = nx == ny && nx % n == 0, count = nx / n; break;
	}
	if (!ok) {
		e = ffi_err(f->api, XLA_FFI_Error_Code_INVALID_ARGUMENT, "%s: %" PRId64 " elements in, %" PRId64 " out do not "
			    "fit %" PRId64 " ranks", what, nx, ny, n);
		goto out;
	}
	void *stream;
	if ((e = stream_of(f, what, &stream)))
		goto out;
	int rc = 0;
	switch (which) {
	case C_ALLREDUCE: rc = mori_allreduce(o->comm, x->data, y->data, (size_t)count, dt, (mori_redop)op, stream); break;
	case C_ALLGATHER: rc = mori_allgather(o->comm, x->data, y->data, (size_t)count, dt, stream); break;
	case C_REDUCESCATTER:
		rc = mori_reducescatter(o->comm, x->data, y->data, (size_t)count, dt, (mori_redop)op, stream);
		break;
	case C_ALLTOALL: rc = mori_alltoall(o->comm, x->data, y->data, (size_t)count, dt, stream); break;
	}
	if (rc)
		e = lib_err(f->api, o, what, rc);
out:
	pthread_mutex_unlock(&lock);
	return e;
}

/* ---- the handlers (XLA_FFI_Handler) ---- */
#define HANDLER(name, body)                                          \
	MORI_XLA_API XLA_FFI_Error *name(XLA_FFI_CallFrame *f)       \
	{                                                            \
		XLA_FFI_Error *m;                                    \
		if (metadata(f, &m))                                 \
			return m;                                    \
		return body;                                         \
	}

HANDLER(mori_xla_ep_dispatch, ep_dispatch(f))
HANDLER(mori_xla_ep_combine, ep_combine(f))
HANDLER(mori_xla_allreduce, coll(f, C_ALLREDUCE))
HANDLER(mori_xla_allgather, coll(f, C_ALLGATHER))
HANDLER(mori_xla_reducescatter, coll(f, C_REDUCESCATTER))
HANDLER(mori_xla_alltoall, coll(f, C_ALLTOALL))
