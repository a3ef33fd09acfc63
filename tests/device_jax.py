"""mori.jax on a GPU (tests/device-jax.sh runs it): ranks as processes on one GPU (under MPS), a
group with a VRAM heap on one morid, JAX with its CUDA plugin in every rank.

    python3 tests/device_jax.py --world N --runtime-dir DIR [--iters 100] [--dist]

Each rank, inside jax.jit:
  - ep: a step dispatch -> a per-expert matmul -> combine, for the normal (IntraNode) and the
    low-latency layouts, run --iters times with new routing each time (new tokens, experts,
    weights, -1 slots), compiled once. Every iteration checks the dispatch's receive buffers
    (count, every row bit for bit, weights, indices, source positions, in mori's order: by source
    rank, then token) and the combined output against a numpy reference of the whole MoE layer
    (out[t] = sum_k w[t,k] x[t] @ W[idx[t,k]], float64).
  - coll: all_reduce (sum, max, min), all_gather (stacked, tiled), reduce_scatter (stacked,
    tiled), all_to_all for float32, bfloat16 and int32 (reductions: the float types), several
    sizes, each against jax.lax's collective (psum, pmax, pmin, all_gather, psum_scatter,
    all_to_all) computed on the gathered inputs of every rank under jax.vmap with a named axis, and
    exactly (integer-valued inputs).
  - --dist: the group formed from jax.distributed (process index and count; the unique id through
    its key-value store) and one all-reduce.
Every rank derives every rank's inputs from a shared seed, so it computes the references alone.
The parent prints one line per rank and "ALL OK" or "FAILED"; a rank that fails or passes the
deadline is named with the end of its log."""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEED = 4242
H, K, EPR, M = 256, 4, 4, 64   # hidden size, top-k, experts a rank, max tokens a rank
TMO = 60_000_000               # us: the group's deadline


# ---- the parent ----

def parent(a):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    env.setdefault("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(max(1, 100 // a.world)))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")])
    env.pop("PYTHONOPTIMIZE", None)
    port = None
    if a.dist:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
    logdir = a.logdir or "/tmp/device-jax"
    os.makedirs(logdir, exist_ok=True)
    tag = "%s-w%d" % ("dist" if a.dist else "main", a.world)
    procs, logs = [], []
    for r in range(a.world):
        logs.append(os.path.join(logdir, "%s-rank%d.log" % (tag, r)))
        p = dict(rank=r, world=a.world, runtime_dir=a.runtime_dir, iters=a.iters, dist=a.dist, port=port,
                 name="jax-%s-%d" % (tag, os.getpid()))
        with open(logs[-1], "w") as f:
            procs.append(subprocess.Popen([sys.executable, "-u", os.path.abspath(__file__), "--rank-json", json.dumps(p)],
                                          stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT))
    start, failed_at, killed = time.monotonic(), None, set()
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if now - start > a.deadline or (failed_at is not None and now - failed_at > 30):
            for r, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()  # our own child
                    p.wait()
                    killed.add(r)
            break
        time.sleep(0.2)
    ok = True
    for r, (p, log) in enumerate(zip(procs, logs)):
        text = open(log, errors="replace").read()
        res = [json.loads(ln[7:]) for ln in text.splitlines() if ln.startswith("RESULT ")]
        if r not in killed and p.returncode == 0 and res and res[-1]["ok"]:
            print("%s rank %d: ok: %s" % (tag, r, res[-1]["summary"]))
            continue
        ok = False
        why = ("killed after %.0f s" % (time.monotonic() - start) if r in killed else
               "exit %s: %s" % (p.returncode, res[-1]["summary"] if res else "no RESULT line"))
        print("%s rank %d: FAILED: %s\n    | %s" % (tag, r, why, "\n    | ".join(text.splitlines()[-30:])))
    print("%s: %s (%.0f s)" % (tag, "ALL OK" if ok else "FAILED", time.monotonic() - start))
    return 0 if ok else 1


# ---- inputs and references (numpy) ----

def routing(it, s, T, E, np):
    """Rank s's tokens of iteration it: x [T, H] (j/16, exact in bf16), weights [T, K] f32, indices
    [T, K] int32: K distinct experts a token, about 15% of the slots -1, one token with none."""
    g = np.random.default_rng([SEED, it, s])
    x = (g.integers(-16, 17, (T, H)) / 16).astype(np.float32)
    idx = np.argsort(g.random((T, E)), axis=1)[:, :K].astype(np.int32)
    idx[g.random((T, K)) < 0.15] = -1
    if T:
        idx[(it * 7) % T] = -1
    w = (g.random((T, K)) + 0.1).astype(np.float32)
    return x, w, idx


def expert_weights(E, np):
    g = np.random.default_rng([SEED, 99])
    return (g.integers(-4, 5, (E, H, H)) / 16).astype(np.float32)


def moe_ref(x, w, idx, We, np):
    """out[t] = sum_k w[t,k] x[t] @ We[idx[t,k]] over the slots that name an expert, in float64."""
    out = np.zeros((len(x), H), np.float64)
    xd = x.astype(np.float64)
    for e in range(len(We)):
        t, k = np.nonzero(idx == e)
        if len(t):
            np.add.at(out, t, w[t, k].astype(np.float64)[:, None] * (xd[t] @ We[e].astype(np.float64)))
    return out


def expect_recv(data, me, W, ll, np):
    """Per bin (normal: one; low-latency: one per local expert): rows, weights, indices, positions,
    by source rank, then token (docs/ep.md)."""
    out = []
    for e in ([me * EPR + l for l in range(EPR)] if ll else [None]):
        parts = [[], [], [], []]
        for s, (x, w, idx) in enumerate(data):
            hit = (idx == e) if ll else (idx >= 0) & (idx // EPR == me)
            ts = np.nonzero(hit.any(1))[0]
            pos = s * M + ts
            if ll:
                pos = pos * K + hit[ts].argmax(1)
            for i, v in enumerate((x[ts], w[ts], idx[ts], pos)):
                parts[i].append(v)
        out.append([np.concatenate(p) for p in parts])
    return out


# ---- a rank ----

def rank_ep(p, g, jax, jnp, np, mj):
    W, me = p["world"], p["rank"]
    E = W * EPR
    We = expert_weights(E, np)
    Wl = jnp.asarray(We[me * EPR:(me + 1) * EPR])
    Ts = [M - 7 * s for s in range(W)]  # each rank its own token count (fixed: one compile)
    hi = jax.lax.Precision.HIGHEST
    lines = []
    for kind in (mj.EpDispatchCombineKernelType.IntraNode, mj.EpDispatchCombineKernelType.LowLatency):
        ll = kind == mj.EpDispatchCombineKernelType.LowLatency
        cfg = mj.EpDispatchCombineConfig(
            data_type=jnp.bfloat16, rank=me, world_size=W, hidden_dim=H, scale_dim=0, scale_type_size=4,
            max_token_type_size=4, max_num_inp_token_per_rank=M, num_experts_per_rank=EPR, num_experts_per_token=K,
            kernel_type=kind, timeout_us=30_000_000)
        op = mj.EpDispatchCombineOp(cfg, g)
        R = op.max_recv

        def step(x, w, idx):
            tok, rw, _, ridx, count, pos = op.dispatch(x, w, None, idx, return_src_pos=True)
            t = tok.astype(jnp.float32)
            if ll:  # [EPR, R, H]: expert l's rows; combine weighs them
                y = jnp.einsum("lrh,lhj->lrj", t, Wl, precision=hi)
                valid = jnp.arange(R)[None, :] < count[:, None]
                y = jnp.where(valid[..., None], y, 0.0)
            else:   # [R, H]: a token once per rank; this rank weighs its own experts' outputs
                coef = jnp.stack([jnp.where(ridx == me * EPR + l, rw, 0.0).sum(-1) for l in range(EPR)])
                y = jnp.einsum("lr,rh,lhj->rj", coef, t, Wl, precision=hi)
                y = jnp.where((jnp.arange(R) < count[0])[:, None], y, 0.0)
            out = op.combine(y, w, idx)
            return out, tok, rw, ridx, count, pos

        x0, w0, i0 = routing(0, me, Ts[me], E, np)
        args0 = (jnp.asarray(x0, jnp.bfloat16), jnp.asarray(w0), jnp.asarray(i0))
        fn = jax.jit(step).lower(*args0).compile()
        g.barrier_all()  # every rank compiled: no dispatch waits on a peer's compiler
        t0, rows = time.monotonic(), 0
        for it in range(p["iters"]):
            data = [routing(it, s, Ts[s], E, np) for s in range(W)]
            x, w, idx = data[me]
            out, tok, rw, ridx, count, pos = jax.block_until_ready(
                fn(jnp.asarray(x, jnp.bfloat16), jnp.asarray(w), jnp.asarray(idx)))
            where = "%s iteration %d" % (kind.name, it)
            tok, rw, ridx, count, pos = (np.asarray(a) for a in (tok.astype(jnp.float32), rw, ridx, count, pos))
            want = expect_recv(data, me, W, ll, np)
            counts = [int(c) for c in count]
            assert counts == [len(b[0]) for b in want], "%s: received %s, expected %s" % (
                where, counts, [len(b[0]) for b in want])
            for l, (rx, rws, rids, rpos) in enumerate(want):
                n = len(rx)
                t_, w_, i_, s_ = (tok[l], rw[l], ridx[l], pos[l]) if ll else (tok, rw, ridx, pos)
                assert np.array_equal(t_[:n], rx), "%s bin %d: rows" % (where, l)
                assert np.array_equal(w_[:n], rws), "%s bin %d: weights" % (where, l)
                assert np.array_equal(i_[:n], rids), "%s bin %d: indices" % (where, l)
                assert np.array_equal(s_[:n], rpos), "%s bin %d: source positions" % (where, l)
            rows += sum(counts)
            ref = moe_ref(x, w, idx, We, np)
            got = np.asarray(out).astype(np.float64)
            assert got.shape == ref.shape, (where, got.shape, ref.shape)
            err = np.abs(got - ref).max()
            tol = 1e-4 * max(1.0, np.abs(ref).max())
            assert err <= tol, "%s: combine differs from the reference by %g (tolerance %g)" % (where, err, tol)
        dt = time.monotonic() - t0
        op.status()
        op.destroy()
        lines.append("%s: %d jitted steps, new routing each, %d rows received, dispatch exact, combine within "
                     "1e-4 of numpy (%.1f ms a step with the checks)" % (kind.name, p["iters"], rows,
                                                                          1e3 * dt / p["iters"]))
    return "; ".join(lines)


def lax_refs(jax, jnp, np, X, me, W):
    """The jax.lax collectives on the gathered inputs X [W, ...] under vmap with a named axis, for
    rank me; where jax.lax refuses one under vmap, numpy's (named in the second dict)."""
    v = lambda f, a: jax.vmap(f, axis_name="i")(a)[me]  # noqa: E731
    Xn = np.asarray(X.astype(jnp.float32)).astype(np.float64)
    rows = X.shape[1] // W
    lax = {
        "all_reduce sum": (lambda: v(lambda a: jax.lax.psum(a, "i"), X), lambda: Xn.sum(0)),
        "all_reduce max": (lambda: v(lambda a: jax.lax.pmax(a, "i"), X), lambda: Xn.max(0)),
        "all_reduce min": (lambda: v(lambda a: jax.lax.pmin(a, "i"), X), lambda: Xn.min(0)),
        "all_gather": (lambda: v(lambda a: jax.lax.all_gather(a, "i"), X), lambda: Xn),
        "all_gather tiled": (lambda: v(lambda a: jax.lax.all_gather(a, "i", tiled=True), X),
                             lambda: Xn.reshape(-1, Xn.shape[-1])),
        "reduce_scatter": (lambda: v(lambda a: jax.lax.psum_scatter(a.reshape(W, -1), "i"), X),
                           lambda: Xn.reshape(W, W, -1).sum(0)[me]),
        "reduce_scatter tiled": (lambda: v(lambda a: jax.lax.psum_scatter(a, "i", tiled=True), X),
                                 lambda: Xn.sum(0)[me * rows:(me + 1) * rows]),
        "all_to_all": (lambda: v(lambda a: jax.lax.all_to_all(a, "i", 0, 0, tiled=True), X),
                       lambda: np.concatenate([Xn[r][me * rows:(me + 1) * rows] for r in range(W)])),
    }
    refs, fallback = {}, {}
    for what, (f, g) in lax.items():
        want = g()
        try:
            r = f()
        except Exception as e:  # noqa: B902 - jax.lax refused it under vmap: numpy's reference
            fallback[what] = "%s: %s" % (type(e).__name__, str(e)[:120])
            refs[what] = (None, want)
            continue
        got = np.asarray(r.astype(jnp.float32)).astype(np.float64)
        assert got.shape == want.shape and np.array_equal(got, want), \
            "%s: jax.lax's reference differs from numpy's: the reference itself is wrong" % what
        refs[what] = (r, want)
    return refs, fallback


def rank_coll(p, g, jax, jnp, np, mj):
    W, me = p["world"], p["rank"]
    comm = mj.Communicator(g, scratch_bytes=4 << 20, timeout_us=30_000_000)
    assert (comm.rank(), comm.size()) == (me, W)
    done, fallback = 0, {}
    for dtype in (jnp.float32, jnp.bfloat16, jnp.int32):
        red = dtype != jnp.int32
        for rows in (1, 250, 20000):  # x [W * rows, 3]; 20000: 240 KiB-960 KiB a rank, both all-reduce forms
            def inp(s):
                gen = np.random.default_rng([SEED, s, rows, np.dtype(dtype).itemsize])
                return jnp.asarray(gen.integers(-16, 17, (W * rows, 3)), dtype)
            X = jnp.stack([inp(s) for s in range(W)])
            x = X[me]
            refs, fb = lax_refs(jax, jnp, np, X, me, W)
            fallback.update(fb)
            calls = {
                "all_gather": lambda a: comm.all_gather(a),
                "all_gather tiled": lambda a: mj.all_gather(a, comm, tiled=True),
                "all_to_all": lambda a: mj.all_to_all(a, comm),
            }
            if red:
                calls.update({
                    "all_reduce sum": lambda a: comm.all_reduce(a),
                    "all_reduce max": lambda a: mj.all_reduce(a, comm, "max"),
                    "all_reduce min": lambda a: comm.all_reduce(a, op="min"),
                    "reduce_scatter": lambda a: comm.reduce_scatter(a.reshape(W, -1)),
                    "reduce_scatter tiled": lambda a: mj.reduce_scatter(a, comm, tiled=True),
                })
            compiled = {k: jax.jit(f).lower(x).compile() for k, f in calls.items()}
            g.barrier_all()
            for what, f in compiled.items():
                got = jax.block_until_ready(f(x))
                ref, ra = refs[what]
                where = "%s %s, x %s" % (what, np.dtype(dtype).name, tuple(x.shape))
                if ref is not None:
                    assert got.shape == ref.shape and got.dtype == ref.dtype, "%s: %s %s, expected %s %s" % (
                        where, got.shape, got.dtype, ref.shape, ref.dtype)
                ga = np.asarray(got.astype(jnp.float32)).astype(np.float64)
                assert ga.shape == ra.shape, "%s: shape %s, expected %s" % (where, ga.shape, ra.shape)
                if not np.array_equal(ga, ra):
                    bad = np.argwhere(ga != ra)
                    raise AssertionError("%s: %d elements differ from jax.lax's, the first at %s: %r, expected %r" % (
                        where, len(bad), tuple(bad[0]), ga[tuple(bad[0])], ra[tuple(bad[0])]))
                done += 1
    comm.check()
    comm.destroy()
    return "coll: %d collectives (all_reduce sum/max/min, all_gather, reduce_scatter, all_to_all; stacked and " \
           "tiled; f32, bf16, int32) equal to jax.lax's on the gathered inputs%s" % (done, "".join(
               "; %s against numpy (jax.lax under vmap: %s)" % kv for kv in sorted(fallback.items())))


def rank_main(p):
    import faulthandler
    faulthandler.dump_traceback_later(600, exit=True)
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
        if p["dist"]:
            jax.distributed.initialize("127.0.0.1:%d" % p["port"], num_processes=p["world"], process_id=p["rank"],
                                       local_device_ids=[0])
        jnp.zeros(1).block_until_ready()  # the CUDA context exists before libmori's first call
        from mori import jax as mj
        assert "torch" not in sys.modules, "mori.jax imported torch"
        heap_ep = sum(mj.EpDispatchCombineConfig(
            data_type="bfloat16", rank=p["rank"], world_size=p["world"], hidden_dim=H, scale_dim=0, scale_type_size=4,
            max_token_type_size=4, max_num_inp_token_per_rank=M, num_experts_per_rank=EPR, num_experts_per_token=K,
            kernel_type=k).heap_bytes() for k in (0, 1))
        from mori import shmem
        heap = shmem.RESERVED + heap_ep + (16 << 20)
        if p["dist"]:
            assert (jax.process_index(), jax.process_count()) == (p["rank"], p["world"])
            g = mj.init(heap_size=heap, runtime_dir=p["runtime_dir"], timeout_us=TMO)  # name None: uid via jax
            assert (g.my_pe(), g.n_pes()) == (p["rank"], p["world"])
            comm = mj.Communicator(g, scratch_bytes=1 << 20)
            x = jnp.full((1000,), p["rank"] + 1, jnp.float32)
            y = np.asarray(jax.jit(lambda a: comm.all_reduce(a))(x))
            want = p["world"] * (p["world"] + 1) / 2
            assert (y == want).all(), "all_reduce over the jax.distributed group: %s, expected %s" % (y[:4], want)
            comm.destroy()
            summary = "group from jax.distributed (process %d of %d, unique id through its key-value store): " \
                      "all_reduce ok" % (jax.process_index(), jax.process_count())
        else:
            g = mj.init(heap_size=heap, name=p["name"], rank=p["rank"], world_size=p["world"],
                        runtime_dir=p["runtime_dir"], timeout_us=TMO)
            summary = rank_ep(p, g, jax, jnp, np, mj) + "; " + rank_coll(p, g, jax, jnp, np, mj)
        g.leave()
    except BaseException as e:  # noqa: B902 - reported to the parent, the traceback above it
        traceback.print_exc()
        print("RESULT " + json.dumps({"ok": False, "summary": "%s: %s" % (type(e).__name__, str(e)[:600])}), flush=True)
        os._exit(1)  # at once: morid sees the PE gone, the peers' waits end
    print("RESULT " + json.dumps({"ok": True, "summary": summary}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--runtime-dir")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--dist", action="store_true")
    ap.add_argument("--deadline", type=float, default=420)
    ap.add_argument("--logdir")
    ap.add_argument("--rank-json")
    a = ap.parse_args()
    if a.rank_json:
        rank_main(json.loads(a.rank_json))
    sys.exit(parent(a))
