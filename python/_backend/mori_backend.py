"""The PEP 517 build backend of the mori package (pyproject.toml: requires = [], backend-path), so
`pip install ./python` needs no package index and no setuptools: it writes the wheel itself.

Settings (pip install ./python --config-settings NAME=VALUE; python -m build -C NAME=VALUE):
  libmori=PATH   put this libmori.so into the wheel as mori/libmori.so, which the package then
                 loads before any other (the wheel becomes platform-specific);
  libdir=DIR     record DIR as where libmori is installed (mori/_installed.py, as
                 `make install-python` does), for a libmori that `make install` put there;
  ir=DIR         put MORI-IR's libmori_shmem_device.bc and .json from DIR (a build's kernels/ir)
                 into mori/ir/, where mori.ir finds them.
Without them the wheel is pure Python and finds libmori through $MORI_LIB or the system's loader
(python/README.md).
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

NAME = "mori"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
SUMMARY = "Python package of the mori node service (ctypes over libmori)"


def _version():
    with open(os.path.join(HERE, NAME, "__init__.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("mori/__init__.py has no __version__")
    return m.group(1)


def _metadata():
    v = _version()
    readme = ""
    p = os.path.join(HERE, "README.md")
    if os.path.isfile(p):
        with open(p) as f:
            readme = f.read()
    head = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nLicense: MIT\nRequires-Python: >=3.8\n"
            "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n" % (NAME, v, SUMMARY))
    if readme:
        head += "Description-Content-Type: text/markdown\n\n" + readme
    return head


def _sources():
    """(path in the wheel, path on disk) of every module of the package."""
    out = []
    for d, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") and f != "_installed.py":
                p = os.path.join(d, f)
                out.append((os.path.relpath(p, HERE).replace(os.sep, "/"), p))
    return out


def _setting(cfg, key):
    v = (cfg or {}).get(key)
    if isinstance(v, list):  # given more than once: the last
        v = v[-1]
    return v or None


def _file(path, what):
    p = os.path.abspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError("%s: %s is not a file" % (what, p))
    with open(p, "rb") as f:
        return f.read()


class _Wheel:
    def __init__(self, directory, tag):
        self.dist = "%s-%s" % (NAME, _version())
        self.tag = tag
        self.name = "%s-%s.whl" % (self.dist, tag)
        self.path = os.path.join(directory, self.name)
        self.zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append("%s,sha256=%s,%d" % (arcname, h, len(data)))

    def close(self, pure):
        di = self.dist + ".dist-info/"
        self.add(di + "METADATA", _metadata())
        self.add(di + "WHEEL", "Wheel-Version: 1.0\nGenerator: mori_backend\nRoot-Is-Purelib: %s\nTag: %s\n" % (
            "true" if pure else "false", self.tag))
        self.add(di + "top_level.txt", NAME + "\n")
        self.record.append(di + "RECORD,,")
        info = zipfile.ZipInfo(di + "RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()
        return self.name


def _platform_tag():
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib = _setting(config_settings, "libmori")
    libdir = _setting(config_settings, "libdir")
    ir = _setting(config_settings, "ir")
    w = _Wheel(wheel_directory, _platform_tag() if lib else "py3-none-any")
    for arc, p in _sources():
        with open(p, "rb") as f:
            w.add(arc, f.read())
    if lib:
        w.add(NAME + "/libmori.so", _file(lib, "libmori"), 0o755)
    if libdir:
        w.add(NAME + "/_installed.py", 'LIBDIR = %r\n' % os.path.abspath(libdir))
    if ir:
        for f in ("libmori_shmem_device.bc", "libmori_shmem_device.json"):
            w.add("%s/ir/%s" % (NAME, f), _file(os.path.join(ir, f), "ir"))
    return w.close(pure=not lib)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth file puts this directory on sys.path: the checkout's modules are used as
    they are (and libmori is found in its build tree, as with PYTHONPATH=python)."""
    w = _Wheel(wheel_directory, "py3-none-any")
    w.add("__editable__.%s.pth" % NAME, HERE + "\n")
    return w.close(pure=True)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    name = base + ".tar.gz"
    files = [(arc, p) for arc, p in _sources()]
    for extra in ("pyproject.toml", "README.md", "_backend/mori_backend.py"):
        p = os.path.join(HERE, extra)
        if os.path.isfile(p):
            files.append((extra, p))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        pkg = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size, info.mode = len(pkg), 0o644
        t.addfile(info, io.BytesIO(pkg))
        for arc, p in files:
            t.add(p, arcname="%s/%s" % (base, arc), recursive=False)
    return name
