"""MORI-EP's launch tuning from Python: mori.ops.tuning_lookup asks libmori's table
(mori_ep_tuning_lookup, compiled from data/ep_tuning/*.json), so Python and C cannot pick
differently. The expected launch shapes are read from the JSON files here, not from libmori."""
import json
import os

from mori import ops

RULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "ep_tuning")


def cfg(kt, W, M, H, dt, wpb=0, bn=0):
    return ops.EpDispatchCombineConfig(
        data_type=dt, rank=0, world_size=W, hidden_dim=H, scale_dim=0, scale_type_size=4,
        max_token_type_size=4 if dt == "fp32" else 2, max_num_inp_token_per_rank=M, num_experts_per_rank=4,
        num_experts_per_token=2, warp_num_per_block=wpb, block_num=bn, kernel_type=kt)


def rule(name, i=0):
    with open(os.path.join(RULES, name)) as f:
        return json.load(f)["rules"][i]


def test_exact_rule():
    # the shape the rule was measured at: its warps, and blocks_per_sm x the SMs given
    r = rule("sm_90_h200_IntraNode_ep8.json")
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, r["num_tokens"], r["hidden_dim"], "fp8")
    sm = 16
    want_blocks = r["block_num"] or r["blocks_per_sm"] * sm
    assert ops.tuning_lookup(c, "sm_90", sm) == (r["warp_per_block"], want_blocks,
                                                 "sm_90_h200_IntraNode_ep8.json rule 0")


def test_callers_values_stay():
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, 4096, 7168, "fp8", wpb=4, bn=9)
    assert ops.tuning_lookup(c, "sm_90", 16)[:2] == (4, 9)
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, 4096, 7168, "fp8", wpb=4)
    assert ops.tuning_lookup(c, "sm_90", 16)[0] == 4


def test_no_rule_gives_the_default():
    # no sm_12x rule: 16 warps, 4 blocks an SM (100 SMs)
    c = cfg(ops.EpDispatchCombineKernelType.LowLatency, 4, 128, 7168, "bf16")
    assert ops.tuning_lookup(c, "sm_120", 100) == (16, 400, "built-in default (no rule for sm_120 IntraNodeLL)")


def test_bad_arguments():
    c = cfg(ops.EpDispatchCombineKernelType.IntraNode, 8, 4096, 7168, "fp8")
    for arch, sm in ((90, 16), ("sm_90", 2 ** 40), ("sm_90", 1.5)):
        try:
            ops.tuning_lookup(c, arch, sm)
        except ops.MoriError:
            continue
        raise AssertionError("tuning_lookup(%r, %r) did not raise" % (arch, sm))
