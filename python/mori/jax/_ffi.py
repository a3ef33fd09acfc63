"""libmori_xla.so for mori.jax: finding it, checking that it calls the libmori this process
loaded, registering its handlers as XLA FFI targets, and the ffi_call wrapper every op uses.

The library is looked up, in order, at: $MORI_XLA_LIB (nothing else is tried when it is set);
beside the libmori that was loaded; inside the package; the build tree ($B, as mori._lib finds
libmori there); then "libmori_xla.so" through the system's loader. It is built where XLA's FFI
headers are (`make xla`, docs/python.md)."""
import ctypes
import os
import threading

from .. import _lib
from ..errors import MoriError, MORI_EINVAL, MORI_ENOENT, MORI_ENOMEM, MORI_ENOTSUP

# target name (what jax.ffi.ffi_call names) -> the library's handler symbol
TARGETS = {
    "mori_ep_dispatch": "mori_xla_ep_dispatch",
    "mori_ep_combine": "mori_xla_ep_combine",
    "mori_allreduce": "mori_xla_allreduce",
    "mori_allgather": "mori_xla_allgather",
    "mori_reducescatter": "mori_xla_reducescatter",
    "mori_alltoall": "mori_xla_alltoall",
}
_P, _I64 = ctypes.c_void_p, ctypes.c_int64
_PROTOS = {
    "mori_xla_ep_register": (ctypes.c_int, [_P, _P, _P, ctypes.POINTER(_I64)]),
    "mori_xla_comm_register": (ctypes.c_int, [_P, _P, ctypes.POINTER(_I64)]),
    "mori_xla_unregister": (ctypes.c_int, [_I64]),
    "mori_xla_libmori": (_P, []),
    "mori_xla_ffi_version": (ctypes.c_int, []),
}
_lock = threading.Lock()
_xla = None
_xla_path = None
_platforms = set()  # platforms whose targets are registered with jax


def candidates():
    """The paths load() tries, in order."""
    env = os.environ.get("MORI_XLA_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = []
    try:
        paths.append(os.path.join(os.path.dirname(os.path.abspath(_lib.path())), "libmori_xla.so"))
    except (MoriError, TypeError):
        pass
    paths.append(os.path.join(here, "libmori_xla.so"))
    paths += [os.path.join(os.path.dirname(p), "libmori_xla.so") for p in _lib._build_dir_candidates()]
    seen, out = set(), []
    for p in paths:
        if p not in seen and os.path.exists(p):
            seen.add(p)
            out.append(p)
    return out + ["libmori_xla.so"]


def load():
    """libmori_xla (ctypes.CDLL), loaded after libmori so that its libmori.so.1 is the copy this
    process already has. MoriError(MORI_ENOENT) naming every path tried; MORI_ENOTSUP when the one
    found resolves libmori elsewhere (two copies would not share handles)."""
    global _xla, _xla_path
    if _xla is not None:
        return _xla
    mori = _lib.load()
    with _lock:
        if _xla is not None:
            return _xla
        tried = []
        for path in candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                continue
            missing = [n for n in list(_PROTOS) + list(TARGETS.values()) if not hasattr(lib, n)]
            if missing:
                tried.append("%s (lacks %s)" % (path, ", ".join(missing)))
                continue
            for name, (res, args) in _PROTOS.items():
                f = getattr(lib, name)
                f.restype, f.argtypes = res, args
            ours = ctypes.cast(mori.mori_version, _P).value
            theirs = lib.mori_xla_libmori()
            if ours != theirs:
                raise MoriError(MORI_ENOTSUP, "%s calls another libmori than %s (this process's): put it beside that "
                                "one, or set MORI_LIB to the libmori it was linked with" % (path, _lib.path()))
            _xla, _xla_path = lib, path
            return lib
        raise MoriError(MORI_ENOENT, "libmori_xla.so not found; tried: " + "; ".join(tried) +
                        " (build it with `make xla` where jaxlib's XLA FFI headers are, or set MORI_XLA_LIB)")


def path():
    load()
    return _xla_path


def platform_of_jax():
    """"CUDA" or "ROCM": the XLA platform of jax's default GPU backend. MORI_ENOTSUP without a GPU."""
    import jax
    d = jax.devices()[0]
    if d.platform not in ("gpu", "cuda", "rocm"):
        raise MoriError(MORI_ENOTSUP, "mori.jax runs on GPUs; jax's default device is %s" % (d,))
    ver = str(getattr(getattr(d, "client", None), "platform_version", "") or "").lower()
    return "ROCM" if d.platform == "rocm" or "rocm" in ver or "hip" in ver else "CUDA"


def register(platform=None):
    """Register every mori target with jax for platform ("CUDA", "ROCM"; None: jax's GPU's),
    once per platform. Every op and collective calls it before its first trace."""
    if platform is not None and platform in _platforms:
        return
    lib = load()
    import jax
    plat = platform or platform_of_jax()
    with _lock:
        if plat in _platforms:
            return
        for name, sym in TARGETS.items():
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, sym)), platform=plat, api_version=1)
        _platforms.add(plat)


def check(rc, what):
    """MoriError for libmori_xla's registration codes (they carry no message of their own)."""
    if rc < 0:
        why = {MORI_EINVAL: "bad arguments or an unknown id", MORI_ENOMEM: "every registration slot is taken (256 objects)"}
        raise MoriError(rc, "%s: %s" % (what, why.get(rc, _lib.strerror(rc))))


def call(target, results, args, **attrs):
    """jax.ffi.ffi_call of a mori target: never removed or merged by XLA (has_side_effect: every
    rank must make the same calls in the same order), attributes as int64 scalars."""
    import jax
    import numpy as np
    f = jax.ffi.ffi_call(target, results, has_side_effect=True)
    return f(*args, **{k: np.int64(v) for k, v in attrs.items()})
