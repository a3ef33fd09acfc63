"""A Llama-architecture decoder with a paged KV cache laid out as vLLM lays it out.

Weights are random, seeded (no checkpoint can be downloaded where this runs), in the shapes of
a Llama config: RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU MLP. Where
Hugging Face transformers is installed, `LlamaModel.from_transformers` takes the weights of a
`LlamaForCausalLM` built from a `LlamaConfig`, so the forward pass here can be checked against
transformers' own.

The KV cache is vLLM's paged layout: per layer a K and a V tensor of
    [num_blocks, block_size, num_kv_heads, head_dim]
held as one tensor kv[layer, 0 or 1, block, slot, head, dim], so a block's K or V of one layer
is one contiguous range of bytes (what mori moves by block id). A sequence owns a block table,
the ids of its blocks in order; token t lives in block table[t // block_size], slot
t % block_size.

Prefill may run in chunks: the tokens of a chunk attend to the cache (positions before the
chunk) and causally to each other. Running the same chunks in the same order gives the same
bits, whichever process runs them: that is what the disaggregated pair is checked against.
"""
import math
from dataclasses import dataclass, asdict

import torch


@dataclass
class LlamaShape:
    vocab: int = 512
    hidden: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 2
    head_dim: int = 32
    ffn: int = 512
    rope_theta: float = 10000.0
    eps: float = 1e-5

    def to_dict(self):
        return asdict(self)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class LlamaModel:
    """Weights and the forward pass; no autograd (inference only)."""

    def __init__(self, shape, seed=0, dtype=torch.float32, device="cpu"):
        self.shape, self.dtype, self.device = shape, dtype, device
        g = torch.Generator().manual_seed(seed)
        s = shape

        def w(*dims):
            return (torch.randn(*dims, generator=g) / math.sqrt(dims[-1])).to(dtype).to(device)

        self.embed = w(s.vocab, s.hidden) * math.sqrt(s.hidden)
        self.layers = []
        for _ in range(s.layers):
            self.layers.append({
                "ln1": torch.ones(s.hidden, dtype=dtype, device=device),
                "q": w(s.heads * s.head_dim, s.hidden), "k": w(s.kv_heads * s.head_dim, s.hidden),
                "v": w(s.kv_heads * s.head_dim, s.hidden), "o": w(s.hidden, s.heads * s.head_dim),
                "ln2": torch.ones(s.hidden, dtype=dtype, device=device),
                "gate": w(s.ffn, s.hidden), "up": w(s.ffn, s.hidden), "down": w(s.hidden, s.ffn),
            })
        self.norm = torch.ones(s.hidden, dtype=dtype, device=device)
        self.lm_head = w(s.vocab, s.hidden)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim))
        self.inv_freq = inv.to(device)

    @classmethod
    def from_transformers(cls, hf_model, dtype=torch.float32, device="cpu"):
        """Take the weights of a transformers LlamaForCausalLM (built from a LlamaConfig)."""
        c = hf_model.config
        shape = LlamaShape(vocab=c.vocab_size, hidden=c.hidden_size, layers=c.num_hidden_layers,
                           heads=c.num_attention_heads, kv_heads=c.num_key_value_heads,
                           head_dim=c.hidden_size // c.num_attention_heads, ffn=c.intermediate_size,
                           rope_theta=float(getattr(c, "rope_theta", 10000.0)), eps=c.rms_norm_eps)
        m = cls.__new__(cls)
        m.shape, m.dtype, m.device = shape, dtype, device
        sd = {k: v.detach().to(dtype).to(device) for k, v in hf_model.state_dict().items()}
        m.embed = sd["model.embed_tokens.weight"]
        m.layers = []
        for i in range(shape.layers):
            p = "model.layers.%d." % i
            m.layers.append({
                "ln1": sd[p + "input_layernorm.weight"], "q": sd[p + "self_attn.q_proj.weight"],
                "k": sd[p + "self_attn.k_proj.weight"], "v": sd[p + "self_attn.v_proj.weight"],
                "o": sd[p + "self_attn.o_proj.weight"], "ln2": sd[p + "post_attention_layernorm.weight"],
                "gate": sd[p + "mlp.gate_proj.weight"], "up": sd[p + "mlp.up_proj.weight"],
                "down": sd[p + "mlp.down_proj.weight"],
            })
        m.norm = sd["model.norm.weight"]
        m.lm_head = sd.get("lm_head.weight", m.embed)
        inv = 1.0 / (shape.rope_theta ** (torch.arange(0, shape.head_dim, 2, dtype=torch.float32) / shape.head_dim))
        m.inv_freq = inv.to(device)
        return m

    # -----------------------------------------------------------------------------------------

    def _rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.shape.eps)).to(x.dtype) * w

    def _rope(self, x, pos):
        """x [n, heads, dim], pos [n]: rotate-half form, as transformers' Llama."""
        f = pos.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos()[:, None, :].to(x.dtype), emb.sin()[:, None, :].to(x.dtype)
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
        return x * cos + rot * sin

    @torch.no_grad()
    def forward(self, tokens, start, cache, table):
        """Run tokens (a list of ids at positions start, start+1, ...) over the cache, whose
        positions 0..start-1 of this sequence are already filled; write the chunk's K and V into
        the cache through the block table; return the logits of every token of the chunk
        [n, vocab] (float32)."""
        s, n = self.shape, len(tokens)
        dev = self.device
        pos = torch.arange(start, start + n, device=dev)
        x = self.embed[torch.tensor(tokens, device=dev)]
        bs = cache.block_size
        tbl = torch.tensor(table, device=dev, dtype=torch.long)
        end = start + n
        blk, slot = tbl[pos // bs], pos % bs
        all_pos = torch.arange(end, device=dev)
        all_blk, all_slot = tbl[all_pos // bs], all_pos % bs
        group = s.heads // s.kv_heads
        scale = 1.0 / math.sqrt(s.head_dim)
        mask = all_pos[None, :] <= pos[:, None]  # [n, end]: causal over the cache and the chunk
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["ln1"])
            q = (h @ L["q"].T).view(n, s.heads, s.head_dim)
            k = (h @ L["k"].T).view(n, s.kv_heads, s.head_dim)
            v = (h @ L["v"].T).view(n, s.kv_heads, s.head_dim)
            q, k = self._rope(q, pos), self._rope(k, pos)
            cache.kv[li, 0, blk, slot] = k
            cache.kv[li, 1, blk, slot] = v
            K = cache.kv[li, 0, all_blk, all_slot]  # [end, kv_heads, dim]
            V = cache.kv[li, 1, all_blk, all_slot]
            K = K.repeat_interleave(group, dim=1)
            V = V.repeat_interleave(group, dim=1)
            att = torch.einsum("nhd,thd->hnt", q.float(), K.float()) * scale
            att = att.masked_fill(~mask[None], float("-inf")).softmax(-1)
            o = torch.einsum("hnt,thd->nhd", att, V.float()).to(x.dtype).reshape(n, s.heads * s.head_dim)
            x = x + o @ L["o"].T
            h = self._rms(x, L["ln2"])
            x = x + (torch.nn.functional.silu(h @ L["gate"].T) * (h @ L["up"].T)) @ L["down"].T
        x = self._rms(x, self.norm)
        return (x @ self.lm_head.T).float()


class PagedKVCache:
    """kv[layer, 0/1, block, slot, kv_head, dim]: vLLM's per-layer K and V caches in one tensor,
    with a free list of blocks."""

    def __init__(self, shape, num_blocks, block_size=16, dtype=torch.float32, device="cpu"):
        self.block_size, self.num_blocks = block_size, num_blocks
        self.kv = torch.zeros(shape.layers, 2, num_blocks, block_size, shape.kv_heads, shape.head_dim,
                              dtype=dtype, device=device)
        self.free = list(range(num_blocks - 1, -1, -1))

    def block_bytes(self):
        """Bytes of one block of one layer's K (or V): the unit mori moves."""
        return self.kv[0, 0, 0].numel() * self.kv.element_size()

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError("KV cache: %d blocks wanted, %d free" % (n, len(self.free)))
        return [self.free.pop() for _ in range(n)]

    def release(self, blocks):
        self.free.extend(reversed(blocks))

    def offsets(self, blocks):
        """Byte offsets, in the cache tensor, of every (layer, K/V, block) of blocks, layer-major:
        the descriptor list of a transfer of these blocks."""
        bb, nb = self.block_bytes(), self.num_blocks
        lk = range(self.kv.shape[0] * 2)
        return [(i * nb + b) * bb for i in lk for b in blocks]

    def gather(self, blocks):
        """The blocks' KV as one tensor [n, layers, 2, block_size, kv_heads, dim] (a copy): what
        the prefix store keeps per block."""
        return self.kv[:, :, blocks].permute(2, 0, 1, 3, 4, 5).contiguous()

    def scatter(self, blocks, data):
        self.kv[:, :, blocks] = data.permute(1, 2, 0, 3, 4, 5).to(self.kv.dtype)


def greedy(logits_row):
    return int(torch.argmax(logits_row).item())
