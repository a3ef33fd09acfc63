"""torch tensors through mori.io: CPU tensors of any dtype and views at an offset (needs torch),
CUDA tensors between two processes with PyTorch's default allocator and with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (needs torch and a GPU), and libmori's own VRAM
allocations (needs a GPU). Without torch or a GPU these skip, saying so.

A tensor from expandable segments larger than one segment spans several VMM allocations mapped
back to back; libmori registers it as one region, so a refusal fails the test with
libmori's reason."""
import hashlib

import pytest

import mori
from mori.io import IOEngine, IOEngineConfig, MemoryDesc, MemoryLocationType
from peer import pattern

try:
    import torch
except ImportError:
    torch = None

need_torch = pytest.mark.skipif(torch is None, reason="no torch (PyTorch is not installed)")
need_cuda = pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                               reason="no torch with CUDA (torch missing or no GPU)")


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


@need_torch
def test_cpu_tensors_any_dtype_and_views(daemon):
    with IOEngine("tcpu-a", IOEngineConfig(runtime_dir=daemon.run)) as a, \
            IOEngine("tcpu-b", IOEngineConfig(runtime_dir=daemon.run)) as b:
        for dtype in (torch.float32, torch.bfloat16, torch.int8, torch.float16):
            big = torch.arange(1 << 16).to(dtype)
            view = big[1000:]                    # a view at an offset
            dst = torch.zeros(view.numel(), dtype=dtype)
            dv, dd = a.register_torch_tensor(view), b.register(dst)
            assert dv.data == view.data_ptr() and dv.size == view.numel() * view.element_size()
            a.write(dv, 0, MemoryDesc.unpack(dd.pack()), 0, dv.size).result(5)
            assert torch.equal(dst, view)
            a.deregister_memory(dv)
            b.deregister_memory(dd)
        with pytest.raises(mori.MoriError) as ei:
            a.register_torch_tensor(torch.zeros(8, 8).t())
        assert ei.value.code == mori.MORI_EINVAL
        with pytest.raises(mori.MoriError) as ei:
            a.register_torch_tensor(torch.zeros(8, device="meta"))
        assert ei.value.code == mori.MORI_ENOTSUP


def _cuda_pair(daemon, peer_factory, alloc_conf, size):
    env = {"PYTORCH_CUDA_ALLOC_CONF": alloc_conf}  # None: PyTorch's default allocator
    seed = 77 + size % 1000
    how = "PYTORCH_CUDA_ALLOC_CONF=%s" % (alloc_conf or "(default)")

    def registered(p):
        r = p.hello.get("refused")
        assert r is None, "libmori refuses CUDA tensors under %s: %s: %s" % (how, r["name"], r["message"])
        return p
    key = "%d%s" % (size, "x" if alloc_conf else "")
    tgt = registered(peer_factory("cuda_target", daemon.run, "ct" + key, seed, size, env=env))
    ini = registered(peer_factory("cuda_initiator", daemon.run, "ci" + key, seed, size, env=env))
    for region, s in (("u8", seed), ("bf16", seed + 1)):
        res = ini.call("run", desc=tgt.hello["descs"][region], seed=s)
        assert "failed" not in res, "%s %s: %s" % (how, region, res)
        assert res["checks"] == [True, True, True], "%s %s: reads differ from the generator" % (how, region)
        got = tgt.call("hashes", region=region, ranges=res["written"])["h"]
        assert got == res["expected"], "%s %s: written blocks differ at the target" % (how, region)


@need_cuda
@pytest.mark.parametrize("size", [4 << 20, 96 << 20])
def test_cuda_tensors_two_processes(daemon, peer_factory, size):
    _cuda_pair(daemon, peer_factory, None, size)


@need_cuda
@pytest.mark.parametrize("size", [4 << 20, 96 << 20])
def test_cuda_tensors_expandable_segments(daemon, peer_factory, size):
    """Tensors from PyTorch's expandable segments (VMM memory, mapped in 20 MiB pieces: the
    96 MiB tensor spans several, registered as one region; whole-tensor reads and writes cross
    every segment boundary)."""
    _cuda_pair(daemon, peer_factory, "expandable_segments:True", size)


def _have_gpu(daemon):
    with IOEngine("probe", IOEngineConfig(runtime_dir=daemon.run)) as e:
        try:
            e.deregister_memory(e.allocate(1 << 20, MemoryLocationType.GPU))
            return True
        except mori.MoriError as x:
            if x.code in (mori.MORI_ENOGPU, mori.MORI_ENOKERNEL):
                return x.message
            raise


def test_vram_allocations(daemon, nodes):
    """libmori's VRAM (engine.allocate(GPU)), filled and read back through host regions of the
    same engine; to a peer on the node and across nodes (staged by the daemons)."""
    why = _have_gpu(daemon)
    if why is not True:
        pytest.skip("no GPU: %s" % why)
    for irt, trt, node in ((daemon.run, daemon.run, None), (nodes[0].run, nodes[1].run, nodes[1].addr)):
        with IOEngine("vram-t", IOEngineConfig(runtime_dir=trt)) as t, \
                IOEngine("vram-i", IOEngineConfig(runtime_dir=irt)) as e:
            size = 8 << 20
            tv = t.allocate(size, "GPU")
            th = t.allocate(size)
            want = pattern(11, size)
            th.buffer()[:] = want.tobytes()
            t.write(th, 0, tv, 0, size).result(10)          # host -> VRAM inside one engine
            t.publish(tv, "vram/t")
            ev = e.allocate(size, "GPU")
            eh = e.allocate(size)
            r = e.open_remote("vram/t", node)
            e.read(ev, 0, r, 0, size).result(30)           # peer VRAM -> our VRAM
            e.read(eh, 0, ev, 0, size).result(30)          # our VRAM -> host, to check
            assert sha(eh.buffer()) == sha(want)
            w = pattern(12, size)
            eh.buffer()[:] = w.tobytes()
            e.write(eh, 0, r, 0, size).result(30)          # host -> peer VRAM
            t.read(th, 0, tv, 0, size).result(30)
            assert sha(th.buffer()) == sha(w)
