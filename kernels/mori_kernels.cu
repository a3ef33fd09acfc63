// libmori's embedded image is this one translation unit: every kernel libmori launches, so that
// one module per device holds them all, compiled as one program (no -rdc: whole-program
// optimisation of the hot paths, no device link). Each file also compiles alone (mk/kernels.mk
// check-alone), so the order here does not matter.
#include "copy.cu"
#include "copy_service.cu"
#include "shmem.cu"
#include "ep.cu"
#include "ep_internode.cu"
#include "coll.cu"
#include "coll_xnode.cu"
