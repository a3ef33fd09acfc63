#!/usr/bin/env python3
"""A mixture-of-experts layer in JAX over mori (mori.jax): N processes, one per rank (one per GPU in
production; several may share a GPU under MPS), each with its own JAX. Every rank routes its tokens
to top-k experts spread over the ranks; one jax.jit step dispatches them (MORI-EP), applies each
local expert's weight matrix to the rows it received, combines the outputs back at the tokens' home
ranks, and all-reduces a per-rank statistic (MORI-CCL), all as XLA custom calls on XLA's stream.
Each rank checks its output against numpy.

    examples/jax_moe.py --runtime-dir /tmp/mori [--world-size 2] [--steps 10]

Run from a checkout with PYTHONPATH=python (and MORI_LIB / MORI_XLA_LIB, or B=build with
libmori_xla.so built by `make xla`); a morid must serve the runtime directory. Under MPS set
XLA_PYTHON_CLIENT_PREALLOCATE=false, or the first process takes most of the GPU's memory. Exit
status 0 only if every rank's every step matched.
"""
import argparse
import os
import subprocess
import sys

H, K, EXPERTS_PER_RANK, MAX_TOKENS = 512, 2, 2, 128


def rank_main(a):
    import numpy as np
    import jax
    import jax.numpy as jnp
    from mori import jax as mj, shmem

    rank, world = a.rank, a.world_size
    E = world * EXPERTS_PER_RANK
    cfg = mj.EpDispatchCombineConfig(
        data_type=jnp.float32, rank=rank, world_size=world, hidden_dim=H, scale_dim=0, scale_type_size=4,
        max_token_type_size=4, max_num_inp_token_per_rank=MAX_TOKENS, num_experts_per_rank=EXPERTS_PER_RANK,
        num_experts_per_token=K, timeout_us=30_000_000)
    g = mj.init(heap_size=shmem.RESERVED + cfg.heap_bytes() + (8 << 20), name="jax-moe-example", rank=rank,
                world_size=world, runtime_dir=a.runtime_dir)
    op = mj.EpDispatchCombineOp(cfg, g)
    comm = mj.Communicator(g, scratch_bytes=1 << 20)
    experts = np.random.default_rng(0).standard_normal((E, H, H)).astype(np.float32) / np.sqrt(H)
    mine = jnp.asarray(experts[rank * EXPERTS_PER_RANK:(rank + 1) * EXPERTS_PER_RANK])

    @jax.jit
    def layer(x, weights, indices):
        tok, w, _, idx, count = op.dispatch(x, weights, None, indices)  # [max_recv, H]: rows 0..count-1
        # normal mode sends a token once per rank: weigh this rank's experts' outputs here
        y = sum(jnp.where(idx == rank * EXPERTS_PER_RANK + l, w, 0.0).sum(-1, keepdims=True) *
                jnp.dot(tok, mine[l], precision=jax.lax.Precision.HIGHEST) for l in range(EXPERTS_PER_RANK))
        y = jnp.where((jnp.arange(op.max_recv) < count[0])[:, None], y, 0.0)
        out = op.combine(y, weights, indices)                            # [T, H]: sum over ranks
        return out, comm.all_reduce(jnp.abs(out).sum(keepdims=True))   # every rank's total

    def tokens(step):
        gen = np.random.default_rng([step, rank])
        T = MAX_TOKENS - 8 * rank  # each rank its own count
        x = gen.standard_normal((T, H)).astype(np.float32)
        indices = np.argsort(gen.random((T, E)), axis=1)[:, :K].astype(np.int32)
        return x, gen.random((T, K)).astype(np.float32), indices

    # compile before any rank dispatches: a peer's dispatch waits (up to timeout_us) for ours
    layer = layer.lower(*(jnp.asarray(v) for v in tokens(0))).compile()
    g.barrier_all()
    worst = 0.0
    for step in range(a.steps):
        x, weights, indices = tokens(step)
        T = len(x)
        out, total = layer(jnp.asarray(x), jnp.asarray(weights), jnp.asarray(indices))
        ref = np.zeros((T, H))
        for e in range(E):  # out[t] = sum_k weights[t,k] x[t] @ experts[indices[t,k]]
            t, k = np.nonzero(indices == e)
            np.add.at(ref, t, weights[t, k][:, None] * (x[t].astype(np.float64) @ experts[e]))
        err = float(np.abs(np.asarray(out) - ref).max() / max(1.0, np.abs(ref).max()))
        worst = max(worst, err)
        if err > 1e-4:
            print("rank %d step %d: output differs from numpy by %.3g (relative)" % (rank, step, err))
            return 1
        print("rank %d step %d: %d tokens, output matches numpy (%.1e), |out| summed over ranks %.1f" % (
            rank, step, T, err, float(total[0])))
    op.destroy()
    comm.destroy()
    g.leave()
    print("rank %d: %d steps ok (worst relative difference %.1e)" % (rank, a.steps, worst))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime-dir", default=os.environ.get("MORI_RUNTIME_DIR", "/run/mori"))
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # a child: this rank
    a = ap.parse_args()
    if a.rank >= 0:
        return rank_main(a)
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # an equal SM share under MPS: a rank's waiting kernels must not hold every SM from its peers'
    env.setdefault("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(max(1, 100 // a.world_size)))
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world-size", str(a.world_size),
                               "--steps", str(a.steps), "--runtime-dir", a.runtime_dir], env=env)
             for r in range(a.world_size)]
    codes = [p.wait() for p in procs]
    print("all ranks ok" if not any(codes) else "failed: exit codes %s" % codes)
    return 1 if any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
