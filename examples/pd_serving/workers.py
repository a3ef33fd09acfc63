"""The prefill worker, the decode worker and the colocated reference, each a loop over JSON
lines (one message a line on stdin, one answer a line on stdout), so the router can run them as
separate processes, each its own morid client.

prefill  holds a paged KV cache registered with mori.io. For a request it loads the stored
         prefix blocks from UMBP into its cache, computes the rest of the prompt (one chunk),
         puts its new full blocks into UMBP, and answers the first token and the request's block
         ids. It keeps the blocks until the decode worker's read notifies it.
decode   reads the request's blocks from the prefill worker's cache by block id, in one batch
         of (layer, K/V, block) descriptors whose notification is the request id, then decodes
         greedily and answers the tokens and the last logits (float32 bytes, hex).
colocated runs both in one process (no mori), with the same chunks: the reference.
"""
import json
import os
import sys
import time

import torch

from model import DTYPES, LlamaModel, LlamaShape, PagedKVCache, greedy


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build_model(cfg):
    shape = LlamaShape(**cfg["shape"])
    dtype, dev = DTYPES[cfg["dtype"]], cfg["device"]
    if cfg.get("transformers"):
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(cfg["seed"])
        hf = LlamaForCausalLM(LlamaConfig(
            vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
            num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
            rope_theta=shape.rope_theta, rms_norm_eps=shape.eps, max_position_embeddings=8192))
        return LlamaModel.from_transformers(hf, dtype=dtype, device=dev), shape
    return LlamaModel(shape, seed=cfg["seed"], dtype=dtype, device=dev), shape


def logits_hex(row):
    return row.detach().float().cpu().numpy().tobytes().hex()


class DictStore:
    """The reference's prefix store: the same puts and gets as UMBP, in a dict."""

    def __init__(self):
        self.d = {}

    def load(self, hashes):
        return [self.d[h].clone() for h in hashes]

    def store(self, hashes, blocks):
        for h, b in zip(hashes, blocks):
            self.d[h] = b.clone()


class UMBPStore:
    """Prefix blocks in the node's UMBP store, one value per block: [layers, 2, block_size,
    kv_heads, head_dim] of the cache's dtype, under the block's chained hash."""

    def __init__(self, runtime_dir, block_shape, dtype, device):
        from mori.umbp import UMBPClient
        self.c = UMBPClient(runtime_dir=runtime_dir, name="prefill-prefix")
        self.shape, self.dtype, self.device = block_shape, dtype, device
        self.bytes = 0

    def load(self, hashes):
        """The stored blocks of hashes, in order, stopping at the first that is gone (evicted
        since the router looked): a prefix of the list."""
        bufs = [torch.empty(self.shape, dtype=self.dtype, device=self.device) for _ in hashes]
        st = self.c.batch_get([h.encode() for h in hashes], bufs)
        out = []
        for b, code in zip(bufs, st):
            if code != 0:
                break
            out.append(b)
            self.bytes += b.numel() * b.element_size()
        return out

    def store(self, hashes, blocks, first_depth):
        if hashes:
            self.c.batch_put([h.encode() for h in hashes], [b.contiguous() for b in blocks],
                             depths=list(range(first_depth, first_depth + len(hashes))))

    def close(self):
        self.c.close()


def prefill_chunk(model, cache, table, tokens, reused, store, hashes, bs):
    """Fill the cache for a prompt whose first `reused` blocks come from the store; return the
    logits of the chunk and the blocks the store was given."""
    if reused:
        data = store.load(hashes[:reused])
        reused = len(data)
        if reused:
            cache.scatter(table[:reused], torch.stack(data))
    logits = model.forward(tokens[reused * bs:], reused * bs, cache, table)
    full = len(tokens) // bs
    return logits, reused, full


def worker(cfg, role):
    """A worker's model, its paged cache (cfg[role + "_blocks"] blocks) and a mori.io engine on
    cfg[role + "_runtime_dir"] with the cache registered: (model, shape, cache, engine, desc)."""
    from mori.io import IOEngine, IOEngineConfig
    model, shape = build_model(cfg)
    cache = PagedKVCache(shape, cfg[role + "_blocks"], cfg["block_size"], DTYPES[cfg["dtype"]], cfg["device"])
    eng = IOEngine(role, IOEngineConfig(runtime_dir=cfg[role + "_runtime_dir"]))
    return model, shape, cache, eng, eng.register_torch_tensor(cache.kv)


def run_prefill(cfg):
    model, shape, cache, eng, desc = worker(cfg, "prefill")
    dev, bs = cfg["device"], cfg["block_size"]
    store = None
    if cfg.get("umbp"):
        store = UMBPStore(cfg["prefill_runtime_dir"], tuple(cache.kv.shape[:2]) + tuple(cache.kv.shape[3:]),
                          cache.kv.dtype, dev)
    emit({"kv": desc.pack().hex(), "num_blocks": cache.num_blocks, "block_bytes": cache.block_bytes()})
    held = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("done"):
            break
        # Free the blocks of requests whose read has completed (the notification follows the data).
        for nt in eng.poll_notifications(timeout_ms=0):
            cache.release(held.pop(nt.tag))
        while len(cache.free) < (len(msg["tokens"]) + bs - 1) // bs:
            got = eng.poll_notifications(timeout_ms=10000)
            if not got:
                raise SystemExit("prefill: no read of requests %s within 10 s" % sorted(held))
            for nt in got:
                cache.release(held.pop(nt.tag))
        t0 = time.perf_counter()
        toks, hashes = msg["tokens"], msg["hashes"]
        table = cache.alloc((len(toks) + bs - 1) // bs)
        load0 = time.perf_counter()
        logits, reused, full = prefill_chunk(model, cache, table, toks, msg["reuse"] if store else 0, store,
                                             hashes, bs)
        sync(dev)
        first = greedy(logits[-1])
        put0 = time.perf_counter()
        if store is not None and full > reused:
            store.store(hashes[reused:full], list(cache.gather(table[reused:full])), reused)
        held[msg["req"]] = table
        emit({"req": msg["req"], "blocks": table, "first": first, "reused": reused,
              "prefill_s": put0 - load0, "put_s": time.perf_counter() - put0, "total_s": time.perf_counter() - t0})
    # Drain: decode has read every request by the time the router says done.
    t_end = time.time() + 10
    while held and time.time() < t_end:
        for nt in eng.poll_notifications(timeout_ms=500):
            cache.release(held.pop(nt.tag))
    if store is not None:
        store.close()
    eng.close()
    emit({"done": True, "unreleased": sorted(held)})


def decode_tokens(model, cache, table, tokens, first, n_out, bs):
    """Greedy decode after a prefill whose first token is `first`: n_out tokens in all (the first
    included); returns them and the logits of the last step (None when n_out is 1)."""
    out, last = [first], None
    pos = len(tokens)
    while len(out) < n_out:
        if pos // bs >= len(table):
            table.extend(cache.alloc(1))
        last = model.forward([out[-1]], pos, cache, table)[-1]
        out.append(greedy(last))
        pos += 1
    return out, last


def run_decode(cfg):
    from mori.io import MemoryDesc
    model, shape, cache, eng, local = worker(cfg, "decode")
    dev, bs = cfg["device"], cfg["block_size"]
    remote = None
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("done"):
            break
        if "kv" in msg:
            remote = MemoryDesc.unpack(bytes.fromhex(msg["kv"]))
            rblocks, rbb = msg["num_blocks"], msg["block_bytes"]
            continue
        rb = msg["blocks"]
        table = cache.alloc(len(rb))
        t0 = time.perf_counter()
        loff = cache.offsets(table)
        roff = [(i * rblocks + b) * rbb for i in range(shape.layers * 2) for b in rb]
        st = eng.batch_read([local], [loff], [remote], [roff], [rbb], [msg["req"]])[0]
        st.result(30)
        sync(dev)
        xfer_s = time.perf_counter() - t0
        if msg.get("corrupt"):
            # A byte flipped after the transfer, as a fault in transit would: the check must see it.
            raw = cache.kv[0, 0, table[0]].view(torch.uint8).view(-1)
            raw[1] ^= 0x40
        t1 = time.perf_counter()
        out, last = decode_tokens(model, cache, table, msg["tokens"], msg["first"], msg["output"], bs)
        sync(dev)
        dec_s = time.perf_counter() - t1
        cache.release(table)
        emit({"req": msg["req"], "tokens": out, "logits": logits_hex(last) if last is not None else "",
              "xfer_s": xfer_s, "decode_s": dec_s, "bytes": st.bytes})
    eng.close()
    emit({"done": True})


def run_colocated(cfg):
    """The reference: each request prefilled with the given reuse (blocks from an in-process
    store holding what the same sequence of puts left), then decoded, in one process."""
    model, shape = build_model(cfg)
    dev, bs = cfg["device"], cfg["block_size"]
    cache = PagedKVCache(shape, cfg["decode_blocks"], bs, DTYPES[cfg["dtype"]], dev)
    store = DictStore()
    for line in sys.stdin:
        msg = json.loads(line)
        if msg.get("done"):
            break
        toks, hashes = msg["tokens"], msg["hashes"]
        t0 = time.perf_counter()
        table = cache.alloc((len(toks) + bs - 1) // bs)
        logits, reused, full = prefill_chunk(model, cache, table, toks, msg["reuse"], store, hashes, bs)
        first = greedy(logits[-1])
        sync(dev)
        ttft = time.perf_counter() - t0
        if msg.get("store", True) and full > reused:
            store.store(hashes[reused:full], list(cache.gather(table[reused:full])))
        out, last = decode_tokens(model, cache, table, toks, first, msg["output"], bs)
        cache.release(table)
        emit({"req": msg["req"], "tokens": out, "logits": logits_hex(last) if last is not None else "",
              "ttft_s": ttft, "reused": reused})
    emit({"done": True})


def main():
    cfg = json.loads(sys.argv[2])
    torch.set_num_threads(int(cfg.get("threads", 1)))
    {"prefill": run_prefill, "decode": run_decode, "colocated": run_colocated}[sys.argv[1]](cfg)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
