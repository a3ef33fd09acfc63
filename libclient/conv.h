/* The public API's conventions (include/mori.h), as helpers.
 *
 * Option structs that grow: every public option struct starts with `size_t size` (the caller's
 * sizeof), so a library newer than its caller reads only the fields the caller has (the rest keep
 * their defaults), and one older than its caller refuses a field it does not know instead of
 * ignoring it (the openat2 / clone3 rule). include/mori.h states the contract. */
#ifndef LIBMORI_CONV_H
#define LIBMORI_CONV_H

#include <stddef.h>
#include <string.h>

#include "mori.h"

/* The smallest size a caller may give: the end of the last field the struct had in 1.0, the first
 * release with size fields. Fields are only appended, so these stay as they are. */
#define OPTS_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define OPTS_MIN_XFER OPTS_END(mori_xfer_opts, stream)
#define OPTS_MIN_ACCESS OPTS_END(mori_access, n_nodes)
#define OPTS_MIN_SHMEM OPTS_END(mori_shmem_opts, timeout_us)
#define OPTS_MIN_COMM OPTS_END(mori_comm_opts, algo)
#define OPTS_MIN_EP OPTS_END(mori_ep_config, quant_type)

/* Copy the caller's struct src (src->size bytes) over dst, which holds the defaults and is `have`
 * bytes (this library's sizeof). MORI_EINVAL for a size below min, MORI_ENOTSUP for a nonzero byte
 * past `have` (a field this library does not know); dst is untouched then. dst->size = have. */
static inline int opts_take(void *dst, size_t have, const void *src, size_t min)
{
	size_t n;
	memcpy(&n, src, sizeof(n));
	if (n < min)
		return MORI_EINVAL;
	for (size_t i = have; i < n; i++)
		if (((const unsigned char *)src)[i])
			return MORI_ENOTSUP;
	memcpy(dst, src, n < have ? n : have);
	memcpy(dst, &have, sizeof(have));
	return MORI_OK;
}

/* The _init functions' common part: fill the caller's struct o (size bytes) from defaults (`have`
 * bytes, this library's struct): the fields both sides know get their defaults, bytes past
 * `have` zero; o->size = size. MORI_EINVAL for NULL or a size below min. */
static inline int opts_init(void *o, size_t size, size_t min, const void *defaults, size_t have)
{
	if (!o || size < min)
		return MORI_EINVAL;
	memset(o, 0, size);
	memcpy(o, defaults, size < have ? size : have);
	memcpy(o, &size, sizeof(size));
	return MORI_OK;
}

/* Fill *out (may be NULL) and return code: the one shape of every mori_*_status. */
static inline int status_set(mori_status *out, int code, int pe, const char *message)
{
	if (out) {
		out->code = code;
		out->pe = pe;
		out->message = message ? message : "";
	}
	return code;
}

#endif
