"""mori: the Python package of the mori node service, over libmori.so (ctypes; no compiler at
install time).

    import mori
    mori.__version__          # this package's version (the library's: mori.lib_version())
    mori.io                   # the IO engine (ROCm/mori's IOEngine shape; include/mori.h)
    mori.nixl_compat          # a NIXL agent (nixl._api.nixl_agent's calls) on mori
    mori.shmem                # MORI-SHMEM's host API: groups, symmetric heaps (include/mori_shmem.h)
    mori.ops                  # MORI-EP: MoE dispatch/combine over torch tensors (include/mori_ep.h)
    mori.ccl                  # MORI-CCL: collectives on a group's heap (include/mori_coll.h)
    mori.ir                   # MORI-IR: the device API's bitcode, its table, Triton wrappers
    mori.umbp                 # UMBP: the node's tiered KV-cache store (include/mori_umbp.h)
    mori.jax                  # MORI-EP and MORI-CCL as XLA custom calls for jax.jit (libmori_xla.so)

Every failure raises mori.MoriError, carrying the MORI_E* code (e.code, e.name) and libmori's or
the daemon's message (e.message). libmori is found through $MORI_LIB, a copy inside the package
(a wheel built with it), the build tree ($B, when run from a checkout with PYTHONPATH=python), the
directory recorded at install, or the system's loader (mori._lib, python/README.md); importing
mori does not load it, the first call that needs it does. mori._capi holds the C API's tables,
which `make check` compares with include/.
"""
__version__ = "1.0.0"  # libmori's (the Makefile's VERSION)

from .errors import *  # noqa: F401,F403  MoriError, Code, code_name, MORI_OK, MORI_EINVAL, ...


def lib_version():
    """libmori's version string (loads the library)."""
    from . import _lib
    return _lib.version()


def lib_path():
    """Where libmori was loaded from (loads the library)."""
    from . import _lib
    return _lib.path()


def strerror(code):
    """libmori's name and text for a MORI_E* code ("MORI_ETIMEDOUT: deadline expired")."""
    from . import _lib
    return _lib.strerror(code)


def __getattr__(name):
    # the subsystems load on first use, so `import mori` stays cheap
    if name in ("io", "nixl_compat", "shmem", "ops", "ccl", "ir", "umbp", "jax"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'mori' has no attribute %r" % name)
