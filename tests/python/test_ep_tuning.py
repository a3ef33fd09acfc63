"""MORI-EP's launch tuning table from Python: mori.ops reads kernels/ep_tuning/*.json
itself and must pick what libmori's compiled copy picks (mori_ep_tuning_lookup) for every shape of
a grid (architectures exact, of a family and unknown; every kernel type; ep sizes 1..16; tokens,
hidden sizes and dtypes around and between the rules'), and keep the caller's non-zero values."""
import ctypes
import itertools

from mori import ops


def cfg(arch_kt, W, M, H, dt, wpb=0, bn=0):
    return ops.EpDispatchCombineConfig(
        data_type=dt, rank=0, world_size=W, hidden_dim=H, scale_dim=0, scale_type_size=4,
        max_token_type_size=4 if dt == "fp32" else 2, max_num_inp_token_per_rank=M, num_experts_per_rank=4,
        num_experts_per_token=2, warp_num_per_block=wpb, block_num=bn, kernel_type=arch_kt)


def c_lookup(c, arch, sm):
    cc = c._c()
    which = ctypes.create_string_buffer(160)
    assert ops._L().mori_ep_tuning_lookup(ctypes.byref(cc), arch.encode(), sm, which, len(which)) == 0
    return cc.warp_num_per_block, cc.block_num, which.value.decode()


def test_python_and_c_pick_the_same():
    assert ops.tuning_rules(), "no rules found in %s" % ops.tuning_dir()
    n = 0
    for arch, kt, W, M, H, dt, sm in itertools.product(
            ("sm_90", "sm_92", "sm_80", "sm_100", "gfx942"), list(ops.EpDispatchCombineKernelType),
            (1, 2, 3, 5, 8, 16), (1, 128, 129, 4096, 9000), (2048, 7168, 8192), ("bf16", "fp8"), (16, 132)):
        c = cfg(kt, W, M, H, dt)
        assert ops.tuning_lookup(c, arch, sm) == c_lookup(c, arch, sm), (arch, kt, W, M, H, dt, sm)
        n += 1
    assert n == 5 * len(ops.EpDispatchCombineKernelType) * 6 * 5 * 3 * 2 * 2


def test_h200_rules_and_override():
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, 4096, 7168, "fp8")
    assert ops.tuning_lookup(c, "sm_90", 16) == (16, 64, "sm_90_h200_IntraNode_ep8.json rule 0")
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, 4096, 7168, "fp8", wpb=4, bn=9)
    assert ops.tuning_lookup(c, "sm_90", 16)[:2] == (4, 9) == c_lookup(c, "sm_90", 16)[:2]
    c = cfg(ops.EpDispatchCombineKernelType.LowLatency, 4, 128, 7168, "bf16")
    w = ops.tuning_lookup(c, "sm_120", 100)
    assert w == (16, 400, "built-in default (no rule for sm_120 IntraNodeLL)") == c_lookup(c, "sm_120", 100)
