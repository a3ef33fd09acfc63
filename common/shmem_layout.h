/* MORI-SHMEM's layout shared by the GPU device API, libmori and morid: installed with the device
 * API as include/mori/device_host/shmem_layout.h (host, device and shared types apart, as NVSHMEM
 * has them); this name keeps the daemon's and libmori's includes. */
#include "../include/mori/device_host/shmem_layout.h"
