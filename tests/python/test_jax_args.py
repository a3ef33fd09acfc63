"""mori.jax's argument handling without jax or a GPU: a stand-in `jax` module (ShapeDtypeStruct,
ffi.ffi_call recording each call and returning zeros of the declared results, ffi.register_ffi_target
recording registrations) replaces the real one, so these run where jax is absent and check what
mori.jax would hand to XLA: the target, the attributes, the operands and the result shapes it
declares, the views it makes of the results, and every refusal (mori.MoriError, MORI_EINVAL, at
trace time). The ops are made without libmori_xla (their _setup, the shapes a config gives); the
handlers themselves are tests/xla_ffi_check.c's (tests/test_xla.sh), the GPU run
tests/device-jax.sh's."""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from mori import MoriError, MORI_EINVAL, MORI_ENOENT, MORI_ENOTSUP


class _SDS:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


class FakeJax:
    """What mori.jax uses of jax, recording calls."""

    def __init__(self, platform="gpu", version="cuda 13000"):
        self.calls, self.registered = [], []
        self.platform, self.version = platform, version

    def modules(self):
        jax = types.ModuleType("jax")
        ffi = types.ModuleType("jax.ffi")
        jnp = types.ModuleType("jax.numpy")
        jax.ShapeDtypeStruct = _SDS
        jnp.float32, jnp.bfloat16, jnp.float8_e4m3fn = np.float32, np.float16, np.uint8  # 4, 2, 1 bytes

        def ffi_call(target, results, has_side_effect=False, **kw):
            def call(*args, **attrs):
                self.calls.append(dict(target=target, results=[(r.shape, r.dtype) for r in results], args=args,
                                       attrs=attrs, has_side_effect=has_side_effect))
                return [np.zeros(r.shape, r.dtype) for r in results]
            return call

        ffi.ffi_call = ffi_call
        ffi.pycapsule = lambda f: ("capsule", f)
        ffi.register_ffi_target = lambda name, fn, platform, api_version: self.registered.append(
            (name, fn, platform, api_version))
        jax.devices = lambda: [types.SimpleNamespace(platform=self.platform,
                                                     client=types.SimpleNamespace(platform_version=self.version))]
        jax.ffi, jax.numpy = ffi, jnp
        return {"jax": jax, "jax.ffi": ffi, "jax.numpy": jnp}


@pytest.fixture
def fake(monkeypatch):
    f = FakeJax()
    for name, mod in f.modules().items():
        monkeypatch.setitem(sys.modules, name, mod)
    return f


def _cfg(**kw):
    from mori.jax import EpDispatchCombineConfig
    args = dict(data_type=np.float32, rank=0, world_size=2, hidden_dim=16, scale_dim=0, scale_type_size=4,
                max_token_type_size=4, max_num_inp_token_per_rank=4, num_experts_per_rank=3, num_experts_per_token=2)
    args.update(kw)
    return EpDispatchCombineConfig(**args)


def _op(cfg, max_recv=8, xid=42):
    from mori.jax import EpDispatchCombineOp
    op = object.__new__(EpDispatchCombineOp)
    op._setup(cfg, max_recv, xid)
    return op


def _comm(n=4, xid=9):
    from mori.jax import Communicator
    c = object.__new__(Communicator)
    c._setup(n, xid)
    return c


def _refused(fn, *want):
    with pytest.raises(MoriError) as e:
        fn()
    assert e.value.code == MORI_EINVAL, e.value
    for w in want:
        assert w in e.value.message, (w, e.value.message)


def test_import_takes_neither_torch_nor_jax():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys, mori.jax as mj; mj.EpDispatchCombineOp; mj.all_reduce; "
            "print(sorted(m for m in ('torch', 'jax') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_config_takes_numpy_dtypes_without_torch():
    from mori.ops.dispatch_combine import _dtype_code
    from mori import _capi
    assert _dtype_code(np.float32) == _capi.FLOAT32
    assert _dtype_code(np.dtype("float32")) == _capi.FLOAT32
    assert _dtype_code("bfloat16") == _capi.BFLOAT16
    _refused(lambda: _dtype_code(np.int64), "int64")
    _refused(lambda: _dtype_code(object()), "is none of")


def test_dispatch_normal(fake):
    op = _op(_cfg())
    T = 3
    x = np.ones((T, 16), np.float32)
    w = np.ones((T, 2), np.float32)
    idx = np.array([[0, 4], [5, -1], [1, 2]], np.int64)  # int64: cast to int32
    tok, rw, sc, ridx, count = op.dispatch(x, w, None, idx)
    c = fake.calls[-1]
    assert c["target"] == "mori_ep_dispatch" and c["has_side_effect"]
    assert c["attrs"] == {"op": 42, "has_weights": 1, "has_scales": 0}
    assert all(type(v) is np.int64 for v in c["attrs"].values())
    assert len(c["args"]) == 3 and c["args"][1].dtype == np.int32 and c["args"][2] is w
    # the heap's rows: H x max_token_type_size bytes of float32 = 16 elements
    assert c["results"] == [((8, 16), np.float32), ((8, 2), np.float32), ((8, 2), np.int32), ((8,), np.int32),
                            ((1,), np.int32)]
    assert tok.shape == (8, 16) and rw.shape == (8, 2) and ridx.shape == (8, 2) and count.shape == (1,)
    assert sc is None
    got = op.dispatch(x, None, None, idx.astype(np.int32), return_src_pos=True)
    assert fake.calls[-1]["attrs"]["has_weights"] == 0 and len(fake.calls[-1]["args"]) == 2
    assert len(got) == 6 and got[5].shape == (8,)


def test_dispatch_wider_rows_are_sliced(fake):
    # max_token_type_size 8 (a combine dtype wider than the dispatch's): rows 32 float32 apart
    op = _op(_cfg(max_token_type_size=8))
    tok = op.dispatch(np.ones((2, 16), np.float32), None, None, np.zeros((2, 2), np.int32))[0]
    assert fake.calls[-1]["results"][0] == ((8, 32), np.float32)
    assert tok.shape == (8, 16)
    _refused(lambda: _op(_cfg(max_token_type_size=2)), "max_token_type_size 2")


def test_dispatch_low_latency(fake):
    from mori.jax import EpDispatchCombineKernelType as KT
    op = _op(_cfg(kernel_type=KT.LowLatency))
    tok, rw, sc, ridx, count, pos = op.dispatch(np.ones((4, 16), np.float32), None, None, np.zeros((4, 2), np.int32),
                                                return_src_pos=True)
    assert fake.calls[-1]["results"][0] == ((24, 16), np.float32)  # 3 experts x 8 slots
    assert fake.calls[-1]["results"][4] == ((3,), np.int32)
    assert tok.shape == (3, 8, 16) and rw.shape == (3, 8, 2) and ridx.shape == (3, 8, 2)
    assert count.shape == (3,) and pos.shape == (3, 8)


def test_dispatch_scales(fake):
    op = _op(_cfg(scale_dim=3, scale_type_size=4))
    s = np.ones((2, 3), np.float32)
    tok, rw, sc, ridx, count = op.dispatch(np.ones((2, 16), np.float32), None, s, np.zeros((2, 2), np.int32))
    c = fake.calls[-1]
    assert c["attrs"]["has_scales"] == 1 and c["args"][2] is s
    assert c["results"][5] == ((8, 4), np.float32)  # 12 bytes a row rounded to 16 on the heap
    assert sc.shape == (8, 3)
    x, i = np.ones((2, 16), np.float32), np.zeros((2, 2), np.int32)
    _refused(lambda: op.dispatch(x, None, None, i), "scale_dim is 3 but scales is None")
    _refused(lambda: op.dispatch(x, None, np.ones((2, 3), np.float64), i), "scale_type_size is 4")
    _refused(lambda: op.dispatch(x, None, np.ones((2, 4), np.float32), i), "dispatch scales has shape (2, 4)")
    _refused(lambda: _op(_cfg()).dispatch(x, None, s, i), "scale_dim is 0")


def test_dispatch_refusals(fake):
    op = _op(_cfg())
    x, i, w = np.ones((2, 16), np.float32), np.zeros((2, 2), np.int32), np.ones((2, 2), np.float32)
    n = len(fake.calls)
    _refused(lambda: op.dispatch(np.ones((2, 8), np.float32), w, None, i), "dispatch input has shape (2, 8)",
             "(T, 16)")
    _refused(lambda: op.dispatch(np.ones((2, 16), np.float16), w, None, i), "float16")
    _refused(lambda: op.dispatch(np.ones((2, 16), np.float64), w, None, i), "float64")
    _refused(lambda: op.dispatch(x, w, None, np.zeros((3, 2), np.int32)), "dispatch indices has shape (3, 2)")
    _refused(lambda: op.dispatch(x, w.astype(np.float64), None, i), "weights are float64")
    _refused(lambda: op.dispatch(x, np.ones((2, 3), np.float32), None, i), "dispatch weights has shape")
    assert len(fake.calls) == n  # nothing reached XLA
    op._id = None
    _refused(lambda: op.dispatch(x, w, None, i), "destroyed")


def test_combine(fake):
    op = _op(_cfg())
    y = np.ones((8, 16), np.float32)
    w, i = np.ones((5, 2), np.float32), np.zeros((5, 2), np.int32)
    out = op.combine(y, w, i)
    c = fake.calls[-1]
    assert c["target"] == "mori_ep_combine" and c["has_side_effect"]
    assert c["attrs"] == {"op": 42, "has_weights": 1, "has_indices": 1}
    assert c["results"] == [((5, 16), np.float32)] and out.shape == (5, 16)
    assert op.combine(y, None, i.astype(np.int64)).shape == (5, 16)
    assert fake.calls[-1]["args"][1].dtype == np.int32 and fake.calls[-1]["attrs"]["has_weights"] == 0
    assert op.combine(y, w, None).shape == (5, 16)
    assert op.combine(y, None, None, num_tokens=7).shape == (7, 16)
    assert len(fake.calls[-1]["args"]) == 1
    _refused(lambda: op.combine(y, None, None), "give indices, weights or num_tokens")
    _refused(lambda: op.combine(y, w, i, num_tokens=4), "num_tokens 4")
    _refused(lambda: op.combine(np.ones((7, 16), np.float32), w, i), "combine input has shape (7, 16)")
    _refused(lambda: op.combine(y.astype(np.float16), w, i), "float16")
    _refused(lambda: op.combine(y, w.astype(np.float64), i), "weights are float64")
    _refused(lambda: op.combine(y, np.ones((5, 3), np.float32), i), "combine weights has shape")
    # low-latency: expert-major layout
    from mori.jax import EpDispatchCombineKernelType as KT
    ll = _op(_cfg(kernel_type=KT.LowLatency))
    assert ll.combine(np.ones((3, 8, 16), np.float32), w, i).shape == (5, 16)
    _refused(lambda: ll.combine(y, w, i), "(3, 8, 16)")


def test_collectives(fake):
    from mori import jax as mj
    comm = _comm()
    x = np.ones((5, 3), np.float32)
    assert comm.all_reduce(x).shape == (5, 3)
    c = fake.calls[-1]
    assert c["target"] == "mori_allreduce" and c["attrs"] == {"comm": 9, "op": 0} and c["has_side_effect"]
    mj.all_reduce(x, comm, "max")
    assert fake.calls[-1]["attrs"]["op"] == 2
    mj.all_reduce(x, comm, op="min")
    assert fake.calls[-1]["attrs"]["op"] == 3
    _refused(lambda: comm.all_reduce(x, "prod"), "op 'prod'")
    _refused(lambda: comm.all_reduce(x.astype(np.int32)), "int32", "reduces")
    assert comm.all_gather(x).shape == (4, 5, 3) and fake.calls[-1]["attrs"] == {"comm": 9}
    assert mj.all_gather(x, comm, tiled=True).shape == (20, 3)
    assert comm.all_gather(x.astype(np.int32)).dtype == np.int32
    _refused(lambda: comm.all_gather(x.astype(np.int64)), "int64")
    _refused(lambda: comm.all_gather(np.float32(1), tiled=True), "scalar")
    assert comm.reduce_scatter(np.ones((4, 3), np.float32)).shape == (3,)
    assert fake.calls[-1]["target"] == "mori_reducescatter"
    assert mj.reduce_scatter(np.ones((8, 3), np.float32), comm, tiled=True).shape == (2, 3)
    _refused(lambda: comm.reduce_scatter(x), "leading axis 5 is not the 4 ranks")
    _refused(lambda: comm.reduce_scatter(x, tiled=True), "not a multiple of")
    assert mj.all_to_all(np.ones((8, 3), np.float32), comm).shape == (8, 3)
    assert fake.calls[-1]["target"] == "mori_alltoall"
    _refused(lambda: comm.all_to_all(np.ones((6, 3), np.float32)), "not a multiple of the 4 ranks")
    comm._id = None
    _refused(lambda: comm.all_reduce(x), "destroyed")


class _FakeLib:
    def __getattr__(self, name):
        return name


def test_register(fake, monkeypatch):
    from mori.jax import _ffi
    monkeypatch.setattr(_ffi, "_platforms", set())
    monkeypatch.setattr(_ffi, "load", lambda: _FakeLib())
    _ffi.register()
    _ffi.register()  # once per platform
    assert sorted(r[0] for r in fake.registered) == sorted(_ffi.TARGETS)
    assert {(r[2], r[3]) for r in fake.registered} == {("CUDA", 1)}
    assert all(r[1] == ("capsule", _ffi.TARGETS[r[0]]) for r in fake.registered)
    fake.version = "rocm 6.4"
    assert _ffi.platform_of_jax() == "ROCM"
    fake.platform = "cpu"
    with pytest.raises(MoriError) as e:
        _ffi.platform_of_jax()
    assert e.value.code == MORI_ENOTSUP


def test_library_not_found(monkeypatch, tmp_path):
    from mori.jax import _ffi
    missing = str(tmp_path / "nowhere" / "libmori_xla.so")
    monkeypatch.setenv("MORI_XLA_LIB", missing)
    monkeypatch.setattr(_ffi, "_xla", None)
    assert _ffi.candidates() == [missing]
    with pytest.raises(MoriError) as e:
        _ffi.load()
    assert e.value.code == MORI_ENOENT and missing in e.value.message and "make xla" in e.value.message


def _built_xla():
    from conftest import BUILD
    return os.path.join(BUILD, "libmori_xla.so")


@pytest.mark.skipif(not os.path.exists(_built_xla()), reason="no libmori_xla.so in the build (make xla needs XLA's "
                    "FFI headers)")
def test_library_with_a_host_group(fake, daemon, monkeypatch):
    """The built library: found in the build tree, calling this process's libmori; a communicator
    of a host-heap group registered (its id in the traced call) and forgotten at destroy; an EP op
    on a host heap refused by libmori with nothing left registered."""
    from mori import shmem, MORI_ENOTSUP
    from mori.jax import _ffi
    import mori.jax as mj
    monkeypatch.delenv("MORI_XLA_LIB", raising=False)
    monkeypatch.setattr(_ffi, "_xla", None)
    monkeypatch.setattr(_ffi, "_platforms", set())
    assert os.path.realpath(_ffi.path()) == os.path.realpath(_built_xla())
    with shmem.join("jax-args-host", 0, 1, heap_size=8 << 20, runtime_dir=daemon.run) as g:
        comm = mj.Communicator(g, scratch_bytes=1 << 20)
        assert sorted(r[0] for r in fake.registered) == sorted(_ffi.TARGETS)
        xid = comm._id
        comm.all_reduce(np.ones(4, np.float32))
        assert fake.calls[-1]["attrs"]["comm"] == xid and comm.size() == 1 and comm.rank() == 0
        comm.destroy()
        assert _ffi.load().mori_xla_unregister(xid) == MORI_EINVAL  # already forgotten
        with pytest.raises(MoriError) as e:
            mj.EpDispatchCombineOp(_cfg(world_size=1), g)
        assert e.value.code == MORI_ENOTSUP, e.value
