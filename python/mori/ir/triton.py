"""mori.ir.triton: MORI-IR's device functions inside @triton.jit kernels (ROCm/mori's mori.ir.triton;
PyTorch's NVSHMEM Triton integration has the same three parts: wrappers, extern_libs, a hook).

    import triton, triton.language as tl
    from mori import shmem
    from mori.ir import triton as mt

    g = shmem.join("job", rank, world, heap_kind="vram", heap_size=64 << 20)
    mt.install_hook(g)          # every kernel compiled from now on that links the bitcode gets
                                # its mori_shmem_state_ptr filled (Group.module_init)

    @triton.jit
    def ring(dst, src, sig, nbytes, nxt):
        mt.putmem_nbi_signal_block(dst, src, nbytes, sig, 1, mt.SIGNAL_SET, nxt, 0)
        mt.signal_wait_until(sig, mt.CMP_EQ, 1)

    ring[(1,)](..., extern_libs=mt.extern_libs())

Every function of the table (mori.ir.FUNCTIONS) is a wrapper here under its short name
(putmem_nbi_signal_block for mori_shmem_putmem_nbi_signal_block), built from the table, never
listed by hand. Arguments are cast to the declared types: pointers (Triton pointers, or integer
addresses) to uint64, PEs and ops to int32. Scalars only: each call is made by every thread of the
program instance, so use the _block functions for puts and gets (all threads cooperate, as the
scope requires); the _thread forms would run once per thread. Waits (signal_wait_until,
*_wait_until*) may be called by every thread. Constants (SIGNAL_SET, SIGNAL_ADD, CMP_EQ, ...)
are tl.constexpr, usable inside kernels.
"""
import inspect
import threading

import triton
import triton.language as tl
from triton.language import core

from . import find_bitcode, table

LIB_NAME = "mori_shmem"  # the extern_libs key, and the library name of the extern calls

_TYPES = {"int32": tl.int32, "uint32": tl.uint32, "int64": tl.int64, "uint64": tl.uint64,
          "float32": tl.float32, "float64": tl.float64}
# how the installed Triton passes its code generator to builtins: _semantic (3.4 and later) or _builder
_SEM = "_semantic" if "_semantic" in inspect.signature(core.extern_elementwise).parameters else "_builder"


def extern_libs():
    """The extern_libs launch option for kernels that call these functions:
    {"mori_shmem": path of libmori_shmem_device.bc}."""
    return {LIB_NAME: find_bitcode()}


get_extern_libs = extern_libs  # ROCm/mori's name


def _make(short, symbol, args, ret, names):
    at = tuple(_TYPES[a] for a in args)
    rt = _TYPES[ret]
    sig = "%s(%s) -> %s" % (symbol, ", ".join("%s %s" % (t, n) for t, n in zip(args, names)), ret)

    def fn(*a, **kw):
        sem = kw.get(_SEM)
        if len(a) != len(at):
            raise TypeError("%s takes %d arguments (%s), not %d" % (short, len(at), sig, len(a)))
        cast = [tl.cast(x, t, **{_SEM: sem}) for x, t in zip(a, at)]
        return core.extern_elementwise(LIB_NAME, "", cast, {at: (symbol, rt)}, is_pure=False, **{_SEM: sem})

    fn.__name__ = fn.__qualname__ = short
    fn.__doc__ = "MORI-IR %s (include/mori/device/shmem.cuh, docs/ir.md)." % sig
    # the code generator passes the semantic object by keyword; declare it so it is accepted
    fn.__signature__ = inspect.Signature(
        [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
         inspect.Parameter(_SEM, inspect.Parameter.KEYWORD_ONLY, default=None)])
    return core.extern(fn)


def _build():
    ns = {}
    for f in table()["functions"]:
        ns[f["short"]] = _make(f["short"], f["name"], f["args"], f["ret"], f["arg_names"])
    for k, v in table()["constants"].items():
        ns[k] = tl.constexpr(v)
    return ns


_ops = _build()
globals().update(_ops)

# ---- module set-up: the post-compile hook ----

_lock = threading.Lock()
_group = None
_done = set()  # (device, module handle) already set up


def _links_us(kernel):
    libs = getattr(getattr(kernel, "metadata", None), "extern_libs", None) or ()
    bc = find_bitcode()
    return any(name == LIB_NAME or path == bc for name, path in libs)


def init_kernel(kernel, group=None):
    """Fill the state global of a compiled Triton kernel's module (a CompiledKernel, e.g. from
    kernel.warmup(...) or a launch's return value) with group's state (default: the group given to
    install_hook). Loads the module if Triton has not yet. Returns True when it set it up, False
    when the kernel does not link the bitcode. MoriError from Group.module_init (MORI_ENOTSUP for a
    host heap, MORI_EINVAL when the module lacks mori_shmem_state_ptr)."""
    g = group or _group
    if g is None:
        raise RuntimeError("mori.ir.triton: no group (install_hook(group) or init_kernel(kernel, group))")
    if hasattr(kernel, "result"):  # an asynchronous compile's future
        kernel = kernel.result()
    if not _links_us(kernel):
        return False
    kernel._init_handles()
    mod = int(kernel.module)
    key = (id(g), mod)
    with _lock:
        if key in _done:
            return True
        g.module_init(mod)
        _done.add(key)
    return True


def _hook(*args, **kw):
    try:
        fn = kw["fn"].jit_function
        device = kw["compile"]["device"]
        kernel = fn.device_caches[device][0].get(kw["key"])
    except (KeyError, AttributeError, TypeError):
        kernel = None
    if kernel is not None:
        init_kernel(kernel)
    prev = _hook.prev
    return prev(*args, **kw) if prev else None


_hook.prev = None


def install_hook(group):
    """Make every Triton kernel compiled from now on in this process that links the bitcode ready
    to run on `group` (a mori.shmem.Group with a VRAM heap): Triton's jit_post_compile_hook
    (triton.knobs.runtime) loads the kernel's module and calls group.module_init on it, as
    NVSHMEM's nvshmemx_cumodule_init and ROCm/mori's shmem_module_init hooks do. A hook already
    installed by someone else still runs after ours. Kernels compiled before this call are not
    seen: use init_kernel for them."""
    global _group
    from triton import knobs
    _group = group
    cur = knobs.runtime.jit_post_compile_hook
    if cur is not _hook:
        _hook.prev = cur
        knobs.runtime.jit_post_compile_hook = _hook


def uninstall_hook():
    """Put back the hook that install_hook found, and forget the group."""
    global _group
    from triton import knobs
    if knobs.runtime.jit_post_compile_hook is _hook:
        knobs.runtime.jit_post_compile_hook = _hook.prev
    _hook.prev = None
    _group = None


__all__ = ["extern_libs", "get_extern_libs", "install_hook", "uninstall_hook", "init_kernel", "LIB_NAME"] + \
    sorted(_ops)
