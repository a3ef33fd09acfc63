"""mori.ops: MORI-EP's MoE dispatch and combine (include/mori_ep.h) over torch tensors, with
ROCm/mori's names (mori.ops.EpDispatchCombineConfig, EpDispatchCombineOp, EpDispatchCombineKernelType).

    from mori import shmem, ops
    g = shmem.join("moe", rank, world, heap_size=..., heap_kind="vram")
    cfg = ops.EpDispatchCombineConfig(data_type=torch.bfloat16, rank=rank, world_size=world,
                                      hidden_dim=7168, scale_dim=0, scale_type_size=4,
                                      max_token_type_size=2, max_num_inp_token_per_rank=4096,
                                      num_experts_per_rank=32, num_experts_per_token=8)
    op = ops.EpDispatchCombineOp(cfg, g)            # collective
    out, out_w, out_s, out_i, count = op.dispatch(x, weights, None, indices)
    y = op.combine(expert_out, weights, indices)    # [T, H]
    op.destroy()                                    # collective

The buffers dispatch returns are views of this rank's heap (no copy), valid until the next
dispatch; count is a one-element int32 device tensor (no host synchronisation). Normal mode:
rows 0..count-1 of out are filled; low-latency mode: out is [num_experts_per_rank, world x max,
H] with count [num_experts_per_rank] (DeepEP's packed_recv_x / packed_recv_count).
Errors raise mori.MoriError with the MORI_E* code and libmori's message.
"""
from ..errors import MoriError  # noqa: F401
from .dispatch_combine import (EpDispatchCombineKernelType, EpDispatchCombineConfig, EpDispatchCombineOp,  # noqa: F401
                               tuning_lookup)

__all__ = ["EpDispatchCombineKernelType", "EpDispatchCombineConfig", "EpDispatchCombineOp", "tuning_lookup"]

for _c in (EpDispatchCombineKernelType, EpDispatchCombineConfig, EpDispatchCombineOp):  # shown as mori.ops's
    _c.__module__ = __name__
del _c
