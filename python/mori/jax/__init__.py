"""mori.jax: MORI-EP's dispatch and combine and MORI-CCL's collectives for JAX, as XLA FFI custom
calls (libmori_xla.so) usable inside jax.jit. Importing it imports neither jax nor torch; jax is
imported by the first call that needs it.

    import jax, jax.numpy as jnp
    from mori import jax as mj
    g = mj.init(heap_size=1 << 30)          # PE jax.process_index() of jax.process_count()
    cfg = mj.EpDispatchCombineConfig(data_type=jnp.bfloat16, rank=g.my_pe(), world_size=g.n_pes(),
                                     hidden_dim=7168, scale_dim=0, scale_type_size=4,
                                     max_token_type_size=2, max_num_inp_token_per_rank=4096,
                                     num_experts_per_rank=32, num_experts_per_token=8)
    op = mj.EpDispatchCombineOp(cfg, g)      # collective
    comm = mj.Communicator(g)               # collective

    @jax.jit
    def step(x, w, idx):
        tok, rw, _, ridx, count = op.dispatch(x, w, None, idx)
        y = experts(tok, rw, ridx, count)    # [max_recv, H], rows past count ignored
        return comm.all_reduce(op.combine(y, w, idx))

    op.destroy(); comm.destroy(); g.leave()  # collective (block on the outputs first)

The config and the semantics are mori.ops's (docs/ep.md); the collectives take jax.lax's shapes
(docs/python.md, "JAX"). Every rank traces and runs the same calls in the same order; XLA never
removes or merges them (they are side-effecting custom calls). Failures raise mori.MoriError at
trace time for bad arguments, and XLA's error (carrying libmori's message) at run time.
"""
from ..errors import MoriError  # noqa: F401
from ..ops.dispatch_combine import EpDispatchCombineConfig, EpDispatchCombineKernelType  # noqa: F401
from .ops import EpDispatchCombineOp  # noqa: F401
from .ccl import Communicator, all_reduce, all_gather, reduce_scatter, all_to_all  # noqa: F401
from ._ffi import register  # noqa: F401

__all__ = ["init", "register", "EpDispatchCombineConfig", "EpDispatchCombineKernelType", "EpDispatchCombineOp",
           "Communicator", "all_reduce", "all_gather", "reduce_scatter", "all_to_all"]

for _c in (EpDispatchCombineOp, Communicator):  # shown as mori.jax's
    _c.__module__ = __name__
del _c


_inits = 0


def init(heap_size=0, name=None, rank=None, world_size=None, gpu_device=None, root=None, timeout_us=0,
         runtime_dir=None, kv_timeout_ms=60000):
    """Join a MORI-SHMEM group with a VRAM heap as PE `rank` of `world_size` (None: jax.process_index()
    and jax.process_count()): a mori.shmem.Group. name given: the group of that name through the
    node's morid (mori.shmem.join; root for PEs on several nodes). name None: a fresh group whose
    unique id rank 0 makes and hands to the others through jax.distributed's key-value store
    (jax.distributed.initialize first; kv_timeout_ms bounds the wait for it). gpu_device None: the
    CUDA/HIP ordinal of jax's first local device. The other arguments are mori.shmem.join's. Collective."""
    import jax
    from .. import shmem
    from ..errors import MORI_EINVAL
    rank = jax.process_index() if rank is None else rank
    world_size = jax.process_count() if world_size is None else world_size
    if gpu_device is None:
        gpu_device = getattr(jax.local_devices()[0], "local_hardware_id", None)
        gpu_device = -1 if gpu_device is None else gpu_device
    kw = dict(heap_size=heap_size, heap_kind="vram", gpu_device=gpu_device, root=root, timeout_us=timeout_us,
              runtime_dir=runtime_dir)
    if name is not None:
        return shmem.join(name, rank, world_size, **kw)
    global _inits
    key = "mori.jax/uid/%d" % _inits  # every rank makes the same sequence of init calls
    _inits += 1
    try:
        from jax._src.distributed import global_state
        client = global_state.client
    except ImportError:
        client = None
    if world_size > 1 and client is None:
        raise MoriError(MORI_EINVAL, "mori.jax.init without a name needs jax.distributed.initialize() first "
                        "(its key-value store carries the group's unique id); or give name=")
    if world_size == 1:
        uid = shmem.get_unique_id(runtime_dir)
    elif rank == 0:
        uid = shmem.get_unique_id(runtime_dir)
        client.key_value_set_bytes(key, uid)
    else:
        uid = client.blocking_key_value_get_bytes(key, kv_timeout_ms)
    kw.pop("root")
    return shmem.init_uid(uid, rank, world_size, root=root, **kw)
