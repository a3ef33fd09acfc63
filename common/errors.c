/* mori_strerror: one table of error names, shared by morid, libmori and moractl. */
#include "mori.h"

static const char *const names[] = {
	[0] = "MORI_OK: success",
	[1] = "MORI_EINVAL: invalid argument",
	[2] = "MORI_ENOMEM: out of memory",
	[3] = "MORI_ENOENT: no such handle",
	[4] = "MORI_ERANGE: range outside region",
	[5] = "MORI_ETIMEDOUT: deadline expired",
	[6] = "MORI_ECANCELED: cancelled",
	[7] = "MORI_EPROTO: malformed or unknown message",
	[8] = "MORI_EVERSION: protocol version mismatch",
	[9] = "MORI_ECONN: daemon not reachable",
	[10] = "MORI_EPERM: not allowed",
	[11] = "MORI_EBUSY: already registered or in use",
	[12] = "MORI_EAGAIN: queue full",
	[13] = "MORI_ESTALE: stale handle",
	[14] = "MORI_EPEERDEAD: peer has gone",
	[15] = "MORI_EIO: transport failure",
	[16] = "MORI_ENOTSUP: not supported",
	[17] = "MORI_EMSGSIZE: message too large",
	[18] = "MORI_EEXIST: name already published",
	[19] = "MORI_ENOGPU: no GPU",
	[20] = "MORI_ENOKERNEL: no GPU kernel for this architecture",
	[21] = "MORI_EINPROGRESS: in progress",
	[22] = "MORI_ESYS: system call failed",
	[23] = "MORI_EUNREACH: name not published",
};

const char *mori_strerror(int code)
{
	unsigned i = code <= 0 ? 0u - (unsigned)code : ~0u; /* -INT_MIN would overflow */
	if (i < sizeof(names) / sizeof(names[0]) && names[i])
		return names[i];
	return "MORI_E?: unknown error code";
}

const char *mori_version(void) { return MORI_VERSION; }
