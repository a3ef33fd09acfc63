// libmori's embedded image is this one translation unit: every kernel libmori launches, so that
// one module per device holds them all (nvcc builds a fatbin from a single source).
#include "copy.cu"
#include "copy_service.cu" // after copy.cu: uses copy_piece
#include "shmem.cu"
#include "ep.cu"
#include "ep_internode.cu" // MORI-EP across nodes (issue 14): uses ep.cu's helpers
#include "coll.cu"
#include "coll_xnode.cu" // after shmem.cu and coll.cu: it uses both
