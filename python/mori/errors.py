"""mori's one error convention in Python: the negative MORI_E* codes of include/mori.h and one
exception type, MoriError, that carries the code, its name and the library's (or the daemon's)
message.

    try:
        engine.read(...)
    except mori.MoriError as e:
        if e.code == mori.MORI_ETIMEDOUT: ...
        print(e.name, e.message)
"""
import enum


class Code(enum.IntEnum):
    """The MORI_E* codes (enum mori_err), without the MORI_ prefix."""
    OK = 0
    EINVAL = -1
    ENOMEM = -2
    ENOENT = -3
    ERANGE = -4
    ETIMEDOUT = -5
    ECANCELED = -6
    EPROTO = -7
    EVERSION = -8
    ECONN = -9
    EPERM = -10
    EBUSY = -11
    EAGAIN = -12
    ESTALE = -13
    EPEERDEAD = -14
    EIO = -15
    ENOTSUP = -16
    EMSGSIZE = -17
    EEXIST = -18
    ENOGPU = -19
    ENOKERNEL = -20
    EINPROGRESS = -21
    ESYS = -22
    EUNREACH = -23


# MORI_OK, MORI_EINVAL, ... as module constants, the names of the C header.
for _c in Code:
    globals()["MORI_" + _c.name] = int(_c)
del _c


def code_name(code):
    """"MORI_EINVAL" for -1; "MORI_E?(-99)" for a code this package does not know."""
    try:
        return "MORI_" + Code(code).name
    except ValueError:
        return "MORI_E?(%d)" % code


class MoriError(Exception):
    """Every failure of the mori package.

    code:    the MORI_E* code (a negative int; compare with mori.MORI_E* or mori.Code)
    name:    its name, "MORI_ETIMEDOUT"
    message: the detail from libmori or the daemon ("transfer deadline expired ...")
    """

    def __init__(self, code, message=""):
        self.code = int(code)
        self.name = code_name(self.code)
        self.message = message or ""
        super().__init__(self.code, self.message)

    def __str__(self):
        return "%s: %s" % (self.name, self.message) if self.message else self.name

    def __repr__(self):
        return "MoriError(%s, %r)" % (self.name, self.message)

    def __reduce__(self):
        return (MoriError, (self.code, self.message))


__all__ = ["Code", "MoriError", "code_name"] + ["MORI_" + c.name for c in Code]
