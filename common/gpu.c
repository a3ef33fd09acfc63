#include "gpu.h"

#include <dlfcn.h>
#include <stdio.h>

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_dev_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_ver_fn)(int *);

void gpu_describe(char *buf, size_t len)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(buf, len, "no GPU (libcuda.so.1 not found)");
		return;
	}
	cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
	cu_count_fn cnt = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
	cu_dev_fn dev = (cu_dev_fn)dlsym(h, "cuDeviceGet");
	cu_name_fn name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
	cu_ver_fn ver = (cu_ver_fn)dlsym(h, "cuDriverGetVersion");
	int n = 0, v = 0, d = 0;
	char nm[128] = "?";
	if (!init || !cnt || init(0) != 0 || cnt(&n) != 0 || n == 0) {
		snprintf(buf, len, "no GPU (CUDA driver present, no usable device)");
		return; /* the driver stays loaded: dlclose of libcuda is not safe */
	}
	if (dev && name && dev(&d, 0) == 0)
		name(nm, sizeof(nm), d);
	if (ver)
		ver(&v);
	snprintf(buf, len, "%d x %s (CUDA driver %d.%d)", n, nm, v / 1000, (v % 1000) / 10);
}
