"""Requests from the Mooncake conversation trace, scaled down, and vLLM's block hashes.

The trace gives each prompt as ids of 512-token blocks; equal ids are equal text. Here each id
becomes `tokens_per_id` token ids drawn deterministically from the id, so prompts that share
leading ids share a prefix of tokens, and a prompt's length is its input_length scaled by the
same factor. Where the trace is absent, a built-in synthetic conversation workload (turns that
extend earlier prompts) stands in, and `source` says so.
"""
import hashlib
import json
import os
import random

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "..", "shared", "data", "mooncake_conversation_trace.jsonl")
TRACE_BLOCK = 512  # tokens per hash id in the trace


def find_trace(path=None):
    for p in (path, os.environ.get("MORI_TRACE"),
              os.path.join(os.environ.get("MORI_SHARED", ""), "data", "mooncake_conversation_trace.jsonl")
              if os.environ.get("MORI_SHARED") else None, TRACE):
        if p and os.path.exists(p):
            return p
    return None


def id_tokens(hid, n, vocab):
    rng = np.random.default_rng(1000003 + int(hid))
    return [int(t) for t in rng.integers(1, vocab, size=n)]


def load_requests(count, tokens_per_id, vocab, max_tokens, path=None, skip=0, output_tokens=8):
    """count requests: dicts with id, tokens, output (tokens to generate). Returns (requests,
    source description)."""
    p = find_trace(path)
    reqs = []
    if p:
        with open(p) as f:
            for i, line in enumerate(f):
                if i < skip:
                    continue
                r = json.loads(line)
                n = max(1, min(max_tokens, (r["input_length"] * tokens_per_id + TRACE_BLOCK - 1) // TRACE_BLOCK))
                toks = []
                for hid in r["hash_ids"]:
                    toks += id_tokens(hid, tokens_per_id, vocab)
                toks = toks[:n]
                reqs.append({"id": len(reqs) + 1, "tokens": toks,
                             "output": max(1, min(output_tokens, r["output_length"]))})
                if len(reqs) == count:
                    break
        return reqs, "%s (requests %d..%d, %d tokens per 512-token block)" % (
            os.path.basename(p), skip, skip + len(reqs) - 1, tokens_per_id)
    rnd = random.Random(7)
    convs = []
    for i in range(count):
        if convs and rnd.random() < 0.6:
            c = rnd.choice(convs)
            c.append(10_000 + len(c) + 100 * convs.index(c))
        else:
            convs.append([0, 20_000 + i])  # a shared system prompt, then the first turn
            c = convs[-1]
        toks = []
        for hid in c:
            toks += id_tokens(hid, tokens_per_id, vocab)
        reqs.append({"id": i + 1, "tokens": toks[:max_tokens], "output": output_tokens})
    return reqs, "synthetic conversations (no trace file found; pass --trace)"


def block_hashes(tokens, block_size):
    """vLLM's prefix-caching hashes: one per full block, each chained to the one before it, so
    a block's hash names the whole prefix up to its end."""
    out, parent = [], b""
    for i in range(len(tokens) // block_size):
        blk = np.asarray(tokens[i * block_size:(i + 1) * block_size], dtype=np.int64).tobytes()
        parent = hashlib.sha256(parent + blk).digest()
        out.append(parent.hex())
    return out
