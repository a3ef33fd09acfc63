"""mori.ir: MORI-IR, the shmem device API as LLVM bitcode that other compilers link (ROCm/mori's
mori.ir; NVIDIA ships the same pattern as libnvshmem_device.bc).

    from mori import ir
    ir.find_bitcode()          # the bitcode for this machine's GPU: libmori_shmem_device.bc
                               # (nvptx64) or libmori_shmem_device_gfx942.bc (amdgcn, per arch)
    ir.FUNCTIONS["putmem_nbi_signal_block"]   # {"symbol": ..., "args": [...], "ret": ...}
    ir.SIGNAL_SET, ir.SIGNAL_ADD              # 9, 10 (ROCm/mori's and NVSHMEM's numbers)
    from mori.ir import triton as mt          # Triton wrappers of every function (imports triton)

The ABI (docs/ir.md): every function is extern "C" mori_shmem_<name>; pointers are 64-bit integers
(addresses in this PE's heap, the same offset used at the target PE); int32 returns are 0 or a
negative MORI_E* code. The functions read the PE's state through one module global,
`mori_shmem_state_ptr` (a pointer to struct mori_shmem_state), which the host fills once per loaded
module: mori.shmem.Group.module_init(module), what mori.ir.triton's post-compile hook calls.

The table (libmori_shmem_device.json) is generated with the bitcode from the same source
(MORI_SHMEM_API in include/mori/device/shmem.cuh), never kept by hand. FUNCTIONS keys are the short names
(ROCm/mori's MORI_DEVICE_FUNCTIONS keys); each entry has symbol, args (type strings int32 uint32
int64 uint64 float32 float64), arg_names and ret.
"""
import json
import os

_BC = "libmori_shmem_device.bc"
_AMD_BC = "libmori_shmem_device_%s.bc"
_KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"  # AMD's kernel driver: one directory a GPU or CPU
_TABLE = "libmori_shmem_device.json"
_here = os.path.dirname(os.path.abspath(__file__))


def _dirs():
    """Where the bitcode and its table may be, in search order."""
    out = []
    env = os.environ.get("MORI_IR_DIR")
    if env:
        out.append(env)
    out.append(_here)  # installed beside the package (or copied there)
    root = os.path.dirname(os.path.dirname(_here))  # python/mori/ir -> python
    root = os.path.dirname(root)
    if os.path.isfile(os.path.join(root, "include", "mori", "device", "shmem.cuh")):  # a checkout: its build tree
        b = os.environ.get("B") or "build"
        out.append(os.path.join(b if os.path.isabs(b) else os.path.join(root, b), "kernels", "ir"))
    try:
        from .. import _installed  # written by `make install`
        d = getattr(_installed, "LIBDIR", "")
        if d:
            out.append(os.path.join(d, "mori", "ir"))
    except ImportError:
        pass
    return out


def _find(name, env):
    p = os.environ.get(env)
    if p:
        if not os.path.isfile(p):
            raise FileNotFoundError("$%s names %s, which is not a file" % (env, p))
        return p
    tried = []
    for d in _dirs():
        f = os.path.join(d, name)
        if os.path.isfile(f):
            return f
        tried.append(f)
    raise FileNotFoundError("%s not found; tried %s (build it with `make all`: mk/ir.mk needs clang-16, AMD's hipcc or clang-19; "
                            "or set $%s or $MORI_IR_DIR)" % (name, ", ".join(tried), env))


def gpu_arch():
    """The arch of this machine's first AMD GPU as its compiler names it ("gfx942"), from the
    KFD topology (gfx_target_version 90402: major 9, minor 4, stepping 2); None where there is
    none (an NVIDIA machine, or no GPU). $MORI_GPU_ARCH overrides ("gfx90a", "sm_90")."""
    env = os.environ.get("MORI_GPU_ARCH")
    if env:
        return env
    try:
        nodes = sorted(os.listdir(_KFD_NODES), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return None
    for n in nodes:
        try:
            with open(os.path.join(_KFD_NODES, n, "properties")) as f:
                props = dict(line.split(None, 1) for line in f if len(line.split()) == 2)
            v = int(props.get("gfx_target_version", "0"))
        except (OSError, ValueError):
            continue
        if v:  # CPU nodes have 0
            return "gfx%d%x%x" % (v // 10000, v // 100 % 100, v % 100)
    return None


def find_bitcode(arch=None):
    """Absolute path of the bitcode for arch: libmori_shmem_device.bc (NVIDIA, nvptx64, one file
    for every sm_XX) or, for an AMD "gfxNNN" (target features after a colon are ignored),
    libmori_shmem_device_gfxNNN.bc (amdgcn bitcode is specific to its arch). arch None: this
    machine's GPU (gpu_arch(): an AMD GPU's arch, else NVIDIA's file). $MORI_SHMEM_BC overrides,
    else the first of $MORI_IR_DIR, this package's directory, the checkout's build tree
    ($B/kernels/ir), the installed <libdir>/mori/ir. FileNotFoundError naming every place tried."""
    if arch is None:
        arch = gpu_arch()
    arch = (arch or "").split(":")[0]
    if arch.startswith("gfx"):
        return os.path.abspath(_find(_AMD_BC % arch, "MORI_SHMEM_BC"))
    return os.path.abspath(_find(_BC, "MORI_SHMEM_BC"))


get_bitcode_path = find_bitcode  # ROCm/mori's alias

_table = None


def table():
    """The function table as generated (dict: abi, abi_version, state_global, constants,
    functions: a list of {name, short, ret, args, arg_names}); found beside the bitcode
    ($MORI_IR_TABLE overrides)."""
    global _table
    if _table is None:
        p = os.environ.get("MORI_IR_TABLE")
        if not p:
            try:
                p = os.path.join(os.path.dirname(find_bitcode()), _TABLE)
            except FileNotFoundError:
                p = None
            if not p or not os.path.isfile(p):
                p = _find(_TABLE, "MORI_IR_TABLE")
        with open(p) as f:
            t = json.load(f)
        if t.get("abi") != "mori-ir":
            raise ValueError("%s is not a MORI-IR table" % p)
        _table = t
    return _table


def _functions():
    return {f["short"]: {"symbol": f["name"], "args": list(f["args"]), "arg_names": list(f["arg_names"]),
                         "ret": f["ret"]} for f in table()["functions"]}


def __getattr__(name):
    # FUNCTIONS / constants come from the table, read on first use; triton imports on first use
    if name in ("FUNCTIONS", "MORI_DEVICE_FUNCTIONS"):
        return _functions()
    if name == "STATE_GLOBAL":
        return table()["state_global"]
    if name.isupper() and name in table_constants():
        return table_constants()[name]
    if name == "triton":
        import importlib
        return importlib.import_module(".triton", __name__)
    raise AttributeError("module 'mori.ir' has no attribute %r" % name)


def table_constants():
    """SIGNAL_SET, SIGNAL_ADD, ATOMIC_*, CMP_* as the table gives them (common/shmem_layout.h)."""
    return dict(table()["constants"])


__all__ = ["find_bitcode", "get_bitcode_path", "gpu_arch", "table", "table_constants"]
