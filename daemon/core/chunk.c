/* The one chunker of descriptor lists (chunk.h). */
#include "chunk.h"

uint64_t chunk_next(const mori_desc *d, uint32_t n, struct chunk_cursor *c, uint64_t max,
		    uint64_t *loff, uint64_t *roff)
{
	while (c->i < n && c->off >= d[c->i].length) {
		c->i++;
		c->off = 0;
	}
	if (c->i >= n || max == 0)
		return 0;
	*loff = d[c->i].local_offset + c->off;
	*roff = d[c->i].remote_offset + c->off;
	uint64_t len = 0;
	for (;;) {
		const mori_desc *x = &d[c->i];
		uint64_t take = x->length - c->off;
		if (take > max - len)
			take = max - len;
		len += take;
		c->off += take;
		if (len == max)
			break;
		/* This descriptor is used up: does the next non-empty one continue on both sides? */
		uint32_t j = c->i + 1;
		while (j < n && d[j].length == 0)
			j++;
		c->i = j;
		c->off = 0;
		if (j >= n || d[j].local_offset != *loff + len || d[j].remote_offset != *roff + len)
			break;
	}
	return len;
}
