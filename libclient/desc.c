/* libmori: descriptor and index checks, below both transfer paths (xfer.c on the host,
 * gpu_copy.c on the GPU), so that each fault reads the same whichever path finds it. */
#include <stdio.h>

#include "internal.h"

int desc_fault(mori_client *c, const mori_mem *l, const mori_mem *r, const mori_desc *d, size_t i)
{
	if (d->length == 0)
		return set_error(c, MORI_EINVAL, "descriptor %zu: zero length", i);
	if (d->local_offset > l->size || d->length > l->size - d->local_offset)
		return set_error(c, MORI_ERANGE, "descriptor %zu: local [%llu, +%llu) outside region of %llu bytes",
				 i, (unsigned long long)d->local_offset, (unsigned long long)d->length,
				 (unsigned long long)l->size);
	if (d->remote_offset > r->size || d->length > r->size - d->remote_offset)
		return set_error(c, MORI_ERANGE, "descriptor %zu: remote [%llu, +%llu) outside region of %llu bytes",
				 i, (unsigned long long)d->remote_offset, (unsigned long long)d->length,
				 (unsigned long long)r->size);
	return MORI_OK;
}

/* Index checks of prepared-list submissions, on the path of every submission: a loop over fixed
 * blocks of 16 that gcc -O2 vectorises (an early exit, or a bound wider than the indices, keeps
 * it scalar, and then it costs a good part of the copy of a large list). 1 when every
 * idx[0..n) < bound; also copies them to out when out is not NULL. */
static int idx_copy_below(uint32_t *restrict out, const uint32_t *restrict idx, size_t n, size_t bound)
{
	if (bound > UINT32_MAX) { /* every index fits */
		if (out)
			memcpy(out, idx, n * sizeof(*idx));
		return 1;
	}
	uint32_t b = (uint32_t)bound, bad = 0;
	size_t i = 0;
	if (out) {
		for (; i + 16 <= n; i += 16)
			for (int j = 0; j < 16; j++) {
				uint32_t v = idx[i + j];
				out[i + j] = v;
				bad |= v >= b;
			}
		for (; i < n; i++) {
			out[i] = idx[i];
			bad |= idx[i] >= b;
		}
	} else {
		for (; i + 16 <= n; i += 16)
			for (int j = 0; j < 16; j++)
				bad |= idx[i + j] >= b;
		for (; i < n; i++)
			bad |= idx[i] >= b;
	}
	return !bad;
}

int desc_check_idx(mori_client *c, const char *who, const uint32_t *idx, size_t from, size_t to, size_t list_n,
		   uint32_t *stage)
{
	if (idx_copy_below(stage, idx + from, to - from, list_n))
		return MORI_OK;
	for (size_t j = from; j < to; j++) /* name the first bad one */
		if (idx[j] >= list_n)
			return set_error(c, MORI_ERANGE, "%s: index %u at %zu >= list length %zu", who, idx[j], j, list_n);
	return MORI_OK;
}
