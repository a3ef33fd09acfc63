#!/usr/bin/env python3
"""Disaggregated serving over mori, end to end: a prefill worker and a decode worker as separate
processes (each a morid client), a router that feeds them requests from the Mooncake
conversation trace, KV blocks moved by mori.io in vLLM's paged layout, and prompt prefixes kept
between requests in UMBP (mori.umbp). Then the same requests colocated in one process with the
same prefill chunks, as the reference: the generated tokens and the last logits must be
identical, bit for bit, or the run fails.

    examples/pd_serving/serve.py --runtime-dir /run/mori --requests 40
    examples/pd_serving/serve.py --prefill-runtime-dir A --decode-runtime-dir B   # two morids
    examples/pd_serving/serve.py --device cuda --dtype bf16 --no-umbp

Per request the router asks UMBP for the prompt's longest stored prefix
(batch_exists_consecutive over the chained hashes of its 16-token blocks, as vLLM computes
them), the prefill worker loads those blocks and computes only the rest, puts its new full
blocks into UMBP, and the decode worker pulls the request's blocks with one batched read whose
notification frees them at the prefill side. Time to first token here is from the router's
request to the decode worker holding the KV and the first token (prefill + transfer).

The model is a Llama-architecture decoder with seeded random weights (no checkpoint can be
downloaded where this runs); --transformers takes them from a transformers LlamaForCausalLM built
from a LlamaConfig. Run from a checkout with PYTHONPATH=python and B=build (or MORI_LIB).
Prints a summary; exit status 0 only if every request matched the reference.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from workload import block_hashes, load_requests  # noqa: E402


class Worker:
    def __init__(self, role, cfg):
        self.role = role
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "workers.py"), role, json.dumps(cfg)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, obj):
        self.p.stdin.write(json.dumps(obj) + "\n")
        self.p.stdin.flush()

    def recv(self):
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("%s worker exited (%s)" % (self.role, self.p.wait()))
        return json.loads(line)

    def finish(self):
        self.send({"done": True})
        last = self.recv()
        self.p.stdin.close()
        rc = self.p.wait(60)
        return last, rc

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100.0 * (len(xs) - 1))))] if xs else 0.0


def run_reference(cfg, reqs, reuse, store):
    """Colocated: every request with the given reuse per request id; returns answers by id."""
    w = Worker("colocated", cfg)
    out = {}
    try:
        for r in reqs:
            w.send({"req": r["id"], "tokens": r["tokens"], "hashes": r["hashes"], "reuse": reuse.get(r["id"], 0),
                    "output": r["output"], "store": store})
            a = w.recv()
            out[a["req"]] = a
        w.finish()
    finally:
        w.kill()
    return out


def run_disaggregated(cfg, reqs, corrupt):
    umbp = None
    if cfg["umbp"]:
        from mori.umbp import UMBPClient
        umbp = UMBPClient(runtime_dir=cfg["prefill_runtime_dir"])
    pre, dec = Worker("prefill", cfg), Worker("decode", cfg)
    res = {}
    try:
        hello = pre.recv()
        dec.send(hello)
        for r in reqs:
            t0 = time.perf_counter()
            full = (len(r["tokens"]) - 1) // cfg["block_size"]  # keep one token to compute
            reuse = umbp.batch_exists_consecutive([h.encode() for h in r["hashes"][:full]]) if umbp else 0
            pre.send({"req": r["id"], "tokens": r["tokens"], "hashes": r["hashes"], "reuse": reuse})
            p = pre.recv()
            dec.send({"req": r["id"], "blocks": p["blocks"], "tokens": r["tokens"], "first": p["first"],
                      "output": r["output"], "corrupt": r["id"] == corrupt})
            d = dec.recv()
            # The decode answer carries its own timings: TTFT = prefill + transfer.
            ttft = (time.perf_counter() - t0) - d["decode_s"]
            res[r["id"]] = dict(d, reused=p["reused"], looked_up=reuse, prefill_s=p["prefill_s"], put_s=p["put_s"],
                                ttft_s=ttft)
        dl, drc = dec.finish()
        pl, prc = pre.finish()
        if drc or prc or pl.get("unreleased"):
            raise SystemExit("workers: decode exit %s, prefill exit %s, blocks never read: %s" % (
                drc, prc, pl.get("unreleased")))
    finally:
        if umbp:
            umbp.close()
        pre.kill()
        dec.kill()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime-dir", help="morid's runtime dir for both workers ($MORI_RUNTIME_DIR, else /run/mori)")
    ap.add_argument("--prefill-runtime-dir")
    ap.add_argument("--decode-runtime-dir")
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--skip", type=int, default=0, help="trace requests to skip first")
    ap.add_argument("--trace", help="the Mooncake conversation trace (default ../shared/data beside the repo)")
    ap.add_argument("--tokens-per-id", type=int, default=32, help="tokens per 512-token block of the trace")
    ap.add_argument("--max-tokens", type=int, default=512, help="prompt length cap, tokens")
    ap.add_argument("--output", type=int, default=8, help="tokens to generate per request (cap)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--transformers", action="store_true", help="weights from a transformers LlamaForCausalLM")
    ap.add_argument("--no-umbp", action="store_true", help="no prefix reuse")
    ap.add_argument("--corrupt", type=int, default=0, help="flip a byte of this request's KV after its transfer")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads per worker")
    ap.add_argument("--kv-namespace", help="prefix of this run's UMBP keys (default: one drawn per run, so the "
                    "colocated reference holds every block the run can reuse; a deployment keys by model id)")
    ap.add_argument("--json", help="write per-request results here")
    a = ap.parse_args()
    rd = a.runtime_dir or os.environ.get("MORI_RUNTIME_DIR") or "/run/mori"
    shape = {"vocab": a.vocab, "hidden": a.hidden, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
             "head_dim": a.hidden // a.heads, "ffn": 2 * a.hidden}
    reqs, source = load_requests(a.requests, a.tokens_per_id, a.vocab, a.max_tokens, a.trace, a.skip, a.output)
    blocks_max = max((len(r["tokens"]) + a.output) // a.block_size + 2 for r in reqs)
    ns = a.kv_namespace or "pd-%s" % os.urandom(6).hex()
    for r in reqs:
        r["hashes"] = ["%s/%s" % (ns, h) for h in block_hashes(r["tokens"], a.block_size)]
    cfg = {"shape": shape, "dtype": a.dtype, "device": a.device, "seed": 1234, "block_size": a.block_size,
           "transformers": a.transformers, "umbp": not a.no_umbp, "threads": a.threads,
           "prefill_runtime_dir": a.prefill_runtime_dir or rd, "decode_runtime_dir": a.decode_runtime_dir or rd,
           "prefill_blocks": 4 * blocks_max, "decode_blocks": 2 * blocks_max}

    dis = run_disaggregated(cfg, reqs, a.corrupt)
    reuse = {i: d["reused"] for i, d in dis.items()}
    ref = run_reference(cfg, reqs, reuse, True)
    whole = run_reference(cfg, reqs, {}, False)

    bad = [i for i in dis if dis[i]["tokens"] != ref[i]["tokens"] or dis[i]["logits"] != ref[i]["logits"]]
    agree = sum(1 for i in dis if dis[i]["tokens"] == whole[i]["tokens"])
    prompt_toks = sum(len(r["tokens"]) for r in reqs)
    saved = sum(dis[r["id"]]["reused"] * a.block_size for r in reqs)
    ttft_d = [d["ttft_s"] * 1e3 for d in dis.values()]
    ttft_c = [w["ttft_s"] * 1e3 for w in whole.values()]
    xfer = [d["xfer_s"] * 1e3 for d in dis.values()]
    nbytes = sum(d["bytes"] for d in dis.values())
    dec_tps = sum(len(d["tokens"]) - 1 for d in dis.values()) / max(1e-9, sum(d["decode_s"] for d in dis.values()))
    print("pd_serving: %d requests from %s" % (len(reqs), source))
    print("  model       Llama-shaped %s, %d layers, hidden %d, %d/%d heads, vocab %d, %s on %s, %s weights" % (
        a.dtype, a.layers, a.hidden, a.heads, a.kv_heads, a.vocab, "paged KV %d-token blocks" % a.block_size,
        a.device, "transformers" if a.transformers else "seeded"))
    print("  TTFT        disaggregated%s p50 %.2f ms p99 %.2f ms; colocated whole-prompt p50 %.2f ms p99 %.2f ms" % (
        "+UMBP" if cfg["umbp"] else "", pct(ttft_d, 50), pct(ttft_d, 99), pct(ttft_c, 50), pct(ttft_c, 99)))
    print("  transfer    %.1f%% of TTFT in mori's KV read (p50 %.3f ms), %.1f MB moved, %.2f GB/s inside reads" % (
        100.0 * sum(xfer) / max(1e-9, sum(ttft_d)), pct(xfer, 50), nbytes / 1e6,
        nbytes / 1e9 / max(1e-9, sum(xfer) / 1e3)))
    print("  reuse       %d of %d prompt tokens not recomputed (%.1f%%), %d requests reused a prefix" % (
        saved, prompt_toks, 100.0 * saved / max(1, prompt_toks), sum(1 for d in dis.values() if d["reused"])))
    print("  decode      %.1f tokens/s per request" % dec_tps)
    print("  agreement   %d of %d requests: tokens equal to a whole-prompt prefill (%s)" % (agree, len(reqs), a.dtype))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"disaggregated": dis, "reference": ref, "whole": whole, "source": source}, f)
    if bad:
        print("pd_serving: MISMATCH against the colocated reference in requests %s" % bad)
        return 1
    print("pd_serving: ok, tokens and last logits identical to the colocated reference for every request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
