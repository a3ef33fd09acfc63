/* mori-kvreplay: model presets, the pool's geometry (vLLM's paged layout) and the content
 * derived for every page (the derivation itself is in kvreplay.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kvreplay.h"

static const struct preset presets[] = {
	{"llama3-8b", 32, 8, 128, 2, 2, 16, "Llama-3-8B, bf16, 8 KV heads"},
	{"llama3-70b-tp8", 80, 1, 128, 2, 2, 16, "Llama-3-70B, bf16, one TP-8 rank (1 KV head)"},
	{"qwen3-8b", 36, 8, 128, 2, 2, 16, "Qwen3-8B, bf16, 8 KV heads"},
	{"deepseek-v3-mla", 61, 1, 576, 2, 1, 64, "DeepSeek-V3, bf16 MLA latent (512+64)"},
	{"tiny", 2, 1, 64, 2, 2, 16, "test model: 2 layers, 1 KV head of 64"},
};

const struct preset *preset_find(const char *name)
{
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++)
		if (!strcmp(presets[i].name, name))
			return &presets[i];
	return NULL;
}

int geom_init(struct geom *g, const struct preset *p, int page_tokens, uint64_t pool_blocks,
	      uint64_t pool_mib, char *err, size_t errlen)
{
	memset(g, 0, sizeof(*g));
	g->p = p;
	g->layers = p->layers;
	g->kv = p->kv;
	g->page_tokens = page_tokens ? page_tokens : p->page_tokens;
	if (g->page_tokens <= 0 || g->page_tokens > TRACE_BLOCK_TOKENS ||
	    TRACE_BLOCK_TOKENS % g->page_tokens) {
		snprintf(err, errlen, "page tokens %d must divide %d", g->page_tokens,
			 TRACE_BLOCK_TOKENS);
		return -1;
	}
	g->page_bytes = (uint64_t)g->page_tokens * p->kv_heads * p->head_dim * p->elem_bytes;
	if (g->page_bytes % 8) {
		snprintf(err, errlen, "page of %" PRIu64 " bytes is not a multiple of 8",
			 g->page_bytes);
		return -1;
	}
	g->pages_per_block = TRACE_BLOCK_TOKENS / g->page_tokens;
	g->descs_per_block = (uint64_t)g->layers * g->kv * g->pages_per_block;
	g->bytes_per_block = g->descs_per_block * g->page_bytes;
	if (!pool_blocks)
		pool_blocks = (pool_mib << 20) / g->bytes_per_block;
	if (pool_blocks < 1) {
		snprintf(err, errlen,
			 "the pool holds no whole block (%" PRIu64 " MiB per block with %s)",
			 g->bytes_per_block >> 20, p->name);
		return -1;
	}
	if (pool_blocks > UINT32_MAX / 2) {
		snprintf(err, errlen, "pool of %" PRIu64 " blocks is too large", pool_blocks);
		return -1;
	}
	g->pool_blocks = (uint32_t)pool_blocks;
	g->pool_pages = (uint64_t)g->pool_blocks * g->pages_per_block;
	g->pool_descs = (uint64_t)g->layers * g->kv * g->pool_pages;
	g->pool_bytes = g->pool_descs * g->page_bytes;
	if (g->pool_descs > UINT32_MAX) {
		snprintf(err, errlen, "pool of %" PRIu64 " pages exceeds 32-bit descriptor indices",
			 g->pool_descs);
		return -1;
	}
	return 0;
}

static void fill_page(uint64_t *p, uint64_t words, uint64_t seed)
{
	for (uint64_t i = 0; i < words; i++)
		p[i] = seed + i * GOLDEN;
}

/* Returns the number of mismatching words. */
static uint64_t check_page(const uint64_t *p, uint64_t words, uint64_t seed)
{
	uint64_t bad = 0;
	for (uint64_t i = 0; i < words; i++)
		bad += p[i] != seed + i * GOLDEN;
	return bad;
}

uint64_t block_pages(const struct geom *g, uint8_t *base, uint64_t hash, uint32_t slot,
		     int check)
{
	uint64_t words = g->page_bytes / 8, badpages = 0;
	for (int l = 0; l < g->layers; l++)
		for (int k = 0; k < g->kv; k++)
			for (uint32_t p = 0; p < g->pages_per_block; p++) {
				uint64_t page = (uint64_t)slot * g->pages_per_block + p;
				uint64_t *w = (uint64_t *)(base + (uint64_t)desc_index(g, l, k, page) *
									  g->page_bytes);
				uint64_t seed = page_seed(hash, l, k, p);
				if (check)
					badpages += check_page(w, words, seed) != 0;
				else
					fill_page(w, words, seed);
			}
	return badpages;
}
