/* Cutting a descriptor list into chunks: TCP frames and RDMA work requests alike. */
#ifndef MORID_CHUNK_H
#define MORID_CHUNK_H
#include <stdint.h>

#include "mori.h"

/* The next chunk of a descriptor list from cursor c: up to max bytes, running on into following
 * descriptors that continue both ranges (adjacent KV blocks travel as one frame or one work
 * request); zero-length descriptors are skipped. Returns its length (0: the list is done) with
 * the offsets in *loff and *roff, and moves c past it. The one chunker of every transport. */
struct chunk_cursor {
	uint32_t i;               /* descriptor */
	uint64_t off;             /* bytes of it already taken */
};
uint64_t chunk_next(const mori_desc *d, uint32_t n, struct chunk_cursor *c, uint64_t max,
		    uint64_t *loff, uint64_t *roff);
#endif
