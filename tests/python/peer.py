"""The other process of the Python tests, driven by conftest.Peer over JSON lines on stdin and
stdout. Every region it serves is filled from a seeded numpy generator that the tests rerun
on their side, and every check it answers is a sha256 over the bytes (hashlib: no mori code
in the check).

    peer.py target RUNTIME_DIR KEY SEED     regions np (numpy, reached by cross-memory attach),
                                            ba (bytearray), mf (engine.allocate: a memfd),
                                            f32 (a float32 view at an offset of a larger array)
    peer.py prefill RUNTIME_DIR SEED LAYERS BLOCKS BLOCK_BYTES
                                            a vLLM NIXL connector's prefill worker, on
                                            mori.nixl_compat
    peer.py cuda_target RUNTIME_DIR KEY SEED SIZE
                                            CUDA tensors: u8 (a uint8 view 4 KiB into a larger
                                            tensor) and bf16, filled from the generator
    peer.py cuda_initiator RUNTIME_DIR KEY SEED SIZE
                                            its own CUDA tensor; "run" reads and writes a
                                            cuda_target's tensor and checks what it read
(PYTORCH_CUDA_ALLOC_CONF, from the environment, applies to both CUDA roles.)
"""
import hashlib
import json
import sys
import time
import uuid

import numpy as np

import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


def target(rt, key, seed):
    seed = int(seed)
    eng = IOEngine(key, IOEngineConfig(runtime_dir=rt))
    bufs = {}
    bufs["np"] = pattern(seed, 4 << 20)
    bufs["ba"] = bytearray(pattern(seed + 1, 1 << 20).tobytes())
    big = np.zeros(1 << 18, dtype=np.float32)
    big[4096:] = pattern(seed + 3, ((1 << 18) - 4096) * 4).view(np.float32)
    bufs["f32"] = big[4096:]  # a view starting 16 KiB into the array
    descs = {}
    for name in ("np", "ba", "f32"):
        descs[name] = eng.register(bufs[name])
    descs["mf"] = eng.allocate(4 << 20)
    mv = descs["mf"].buffer()
    mv[:] = pattern(seed + 2, 4 << 20).tobytes()
    bufs["mf"] = mv
    for name, d in descs.items():
        eng.publish(d, "%s/%s" % (key, name))
    reply({"pid": __import__("os").getpid(), "node": eng.node,
           "descs": {n: d.pack().hex() for n, d in descs.items()},
           "sizes": {n: d.size for n, d in descs.items()}})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "hashes":
                mvb = memoryview(bufs[cmd["region"]]).cast("B")
                reply({"h": [sha(mvb[o:o + n]) for o, n in cmd["ranges"]]})
            elif op == "notifs":
                got, deadline = [], time.time() + cmd.get("wait_ms", 2000) / 1000.0
                while len(got) < cmd.get("want", 0) and time.time() < deadline:
                    got += eng.poll_notifications(timeout_ms=50)
                got += eng.poll_notifications()
                reply({"n": [[n.tag, n.region_id, n.from_pid] for n in got]})
            elif op == "inbound":
                st = eng.pop_inbound_transfer_status(cmd["key"], cmd["uid"])
                reply({"found": st is not None and st.Succeeded()})
            elif op == "dereg":
                eng.deregister_memory(descs[cmd["region"]])
                reply({"ok": True})
            elif op == "exit":
                reply({"ok": True})
                break
            else:
                reply({"error": "unknown op %s" % op})
        except mori.MoriError as e:
            reply({"error": str(e), "code": e.code})
    eng.close()


def prefill(rt, seed, layers, blocks, block_bytes, device="cpu"):
    """Register KV caches as vLLM's NIXL connector does (one region per K and per V of each
    layer, (address, length, device, "") tuples), prepare the local block list, publish the
    handshake metadata, then answer for notifications and block hashes. device "cuda": the
    caches are CUDA tensors (memory type VRAM)."""
    from mori.nixl_compat import nixl_agent, nixl_agent_config
    seed, layers, blocks, block_bytes = int(seed), int(layers), int(blocks), int(block_bytes)
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(num_threads=4, capture_telemetry=True,
                                                             runtime_dir=rt))
    host = [pattern(seed + r, blocks * block_bytes) for r in range(2 * layers)]
    if device == "cuda":
        import torch
        caches = [torch.from_numpy(c).to("cuda") for c in host]
        torch.cuda.synchronize()
        addr, mem = [c.data_ptr() for c in caches], "VRAM"
    else:
        caches, addr, mem = host, [c.ctypes.data for c in host], "DRAM"
    caches_data = [(a, blocks * block_bytes, 0, "") for a in addr]
    descs = agent.get_reg_descs(caches_data, mem)
    agent.register_memory(descs, backends=["UCX"])
    blocks_data = [(a + b * block_bytes, block_bytes, 0) for a in addr for b in range(blocks)]
    src = agent.prep_xfer_dlist("NIXL_INIT_AGENT", agent.get_xfer_descs(blocks_data, mem))
    meta = {"engine_id": "prefill-engine", "agent_metadata": agent.get_agent_metadata().hex(),
            "kv_caches_base_addr": addr, "num_blocks": blocks,
            "block_lens": [block_bytes] * (2 * layers), "device_id": 0, "block_size": 16,
            "kv_cache_layout": "HND"}
    reply({"name": agent.name, "meta": meta})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            if op == "notifs":
                got, deadline = {}, time.time() + cmd.get("wait_ms", 5000) / 1000.0
                while sum(len(v) for v in got.values()) < cmd["want"] and time.time() < deadline:
                    for k, v in agent.get_new_notifs().items():
                        got.setdefault(k, []).extend(m.decode() for m in v)
                    time.sleep(0.002)
                reply({"notifs": got})
            elif op == "hashes":
                c = caches[cmd["region"]]
                c = c.cpu().numpy() if device == "cuda" else c
                reply({"h": [sha(c[b * block_bytes:(b + 1) * block_bytes]) for b in cmd["blocks"]]})
            elif op == "dereg":
                agent.deregister_memory(descs)
                reply({"ok": True})
            elif op == "exit":
                agent.release_dlist_handle(src)
                try:
                    agent.deregister_memory(descs)
                except mori.MoriError:
                    pass  # deregistered earlier by the test
                agent.close()
                reply({"ok": True})
                break
        except mori.MoriError as e:
            reply({"error": str(e), "code": e.code})


def _cuda_tensors(size, seed):
    import torch
    big = torch.empty(size + 4096, dtype=torch.uint8, device="cuda")
    u8 = big[4096:]
    u8.copy_(torch.from_numpy(pattern(seed, size)))
    bf16 = torch.from_numpy(pattern(seed + 1, size).view(np.int16).copy()).view(torch.bfloat16).to("cuda")
    torch.cuda.synchronize()
    return big, u8, bf16


def _refused(e, what):
    return {"refused": {"what": what, "code": e.code, "name": e.name, "message": e.message}}


def cuda_target(rt, key, seed, size):
    import torch
    seed, size = int(seed), int(size)
    eng = IOEngine(key, IOEngineConfig(runtime_dir=rt))
    big, u8, bf16 = _cuda_tensors(size, seed)
    try:
        descs = {"u8": eng.register(u8), "bf16": eng.register_torch_tensor(bf16)}
    except mori.MoriError as e:
        reply(_refused(e, "register CUDA tensors of %d bytes (PYTORCH_CUDA_ALLOC_CONF=%s)" % (
            size, __import__("os").environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))))
        return
    tensors = {"u8": u8, "bf16": bf16}
    reply({"descs": {n: d.pack().hex() for n, d in descs.items()}, "sizes": {n: d.size for n, d in descs.items()},
           "ptrs": {n: d.data for n, d in descs.items()}})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "hashes":
            torch.cuda.synchronize()
            host = tensors[cmd["region"]].view(torch.uint8).cpu().numpy()
            reply({"h": [sha(host[o:o + n]) for o, n in cmd["ranges"]]})
        elif cmd["op"] == "exit":
            reply({"ok": True})
            break
    eng.close()


def cuda_initiator(rt, key, seed, size):
    """Read a cuda_target's tensor whole, in a batch and through a prepared list, checking each
    read against the generator; write blocks of a second pattern and say which, for the test
    to check at the target."""
    import torch
    seed, size = int(seed), int(size)
    eng = IOEngine(key, IOEngineConfig(runtime_dir=rt))
    local = torch.zeros(size, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()  # mori's copies run on their own stream
    try:
        ld = eng.register_torch_tensor(local)
    except mori.MoriError as e:
        reply(_refused(e, "register a CUDA tensor of %d bytes" % size))
        return
    reply({"ok": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            reply({"ok": True})
            break
        rd = MemoryDesc.unpack(bytes.fromhex(cmd["desc"]))
        want = pattern(cmd["seed"], size)
        checks = []
        try:
            eng.read(ld, 0, rd, 0, size).result(30)
            torch.cuda.synchronize()
            checks.append(sha(local.cpu().numpy()) == sha(want))
            blk = 64 << 10
            rng = np.random.default_rng(cmd["seed"])
            n = size // blk
            src = rng.choice(n, min(n, 64), replace=False)
            dst = rng.choice(n, len(src), replace=False)
            local.zero_()
            torch.cuda.synchronize()
            eng.batch_read([ld], [[int(d) * blk for d in dst]], [rd], [[int(s) * blk for s in src]], [blk])[0].result(30)
            pl = eng.prepare(ld, rd, [int(d) * blk for d in dst], [int(s) * blk for s in src], blk)
            torch.cuda.synchronize()
            host = local.cpu().numpy()
            checks.append(all(sha(host[d * blk:(d + 1) * blk]) == sha(want[s * blk:(s + 1) * blk])
                              for s, d in zip(src, dst)))
            local.zero_()
            torch.cuda.synchronize()
            pl.read(list(range(0, len(src), 2))).result(30)
            torch.cuda.synchronize()
            host = local.cpu().numpy()
            checks.append(all(sha(host[dst[i] * blk:(dst[i] + 1) * blk]) == sha(want[src[i] * blk:(src[i] + 1) * blk])
                              for i in range(0, len(src), 2)))
            pl.close()
            w = pattern(cmd["seed"] + 100, size)
            local.copy_(torch.from_numpy(w))
            torch.cuda.synchronize()
            wr = [int(s) for s in src[:16]]
            eng.batch_write([ld], [[b * blk for b in wr]], [rd], [[b * blk for b in wr]], [blk])[0].result(30)
            odd = size // 3 + 4097  # one block at an odd offset, then the whole tensor: both cross segments
            eng.write(ld, odd, rd, odd, size // 3).result(30)
            eng.write(ld, 0, rd, 0, size).result(30)
            reply({"checks": checks, "written": [[b * blk, blk] for b in wr] + [[odd, size // 3], [0, size]],
                   "expected": [sha(w[b * blk:(b + 1) * blk]) for b in wr] + [sha(w[odd:odd + size // 3]), sha(w)]})
        except mori.MoriError as e:
            reply({"checks": checks, "failed": str(e), "code": e.code})
    eng.close()


if __name__ == "__main__":
    try:
        {"target": target, "prefill": prefill, "cuda_target": cuda_target,
         "cuda_initiator": cuda_initiator}[sys.argv[1]](*sys.argv[2:])
    except mori.MoriError as e:
        reply({"error": str(e), "code": e.code})
        sys.exit(1)
