/* The GPU runtime layer shared by morid and libmori: the vendor driver API (libcuda.so.1, or
 * libamdhip64.so) loaded with dlopen behind one table, so mori builds and runs without a GPU. */
#ifndef MORI_GPU_H
#define MORI_GPU_H
#include <stddef.h>

/* One line: "no GPU (reason)" or "N x <name> (driver X)". Never initialises a context. */
void gpu_describe(char *buf, size_t len);
#endif
