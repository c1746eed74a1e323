/* A fake CUDA driver for the tests of package cuda: the same entry points
 * as libcuda.so.1, with "device memory" that is ordinary heap memory the
 * fake remembers, so the dlopen and calling conventions are exercised on
 * hosts without a GPU. Not the real driver's behaviour beyond what the
 * package relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXALLOC 64
static struct { uint64_t p, n; } dev[MAXALLOC];
static int inited, current;

int cuInit(unsigned flags) { (void)flags; inited = 1; return 0; }
int cuDeviceGetCount(int *n) { if (!inited) return 3; *n = 2; return 0; }
int cuDeviceGet(int *d, int ord) { if (ord < 0 || ord > 1) return 101; *d = ord; return 0; }
int cuDevicePrimaryCtxRetain(uintptr_t *ctx, int d) { *ctx = 0x1000 + d; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxSetCurrent(uintptr_t ctx) { current = (int)(ctx - 0x1000); return 0; }

int cuMemAlloc_v2(uint64_t *p, uint64_t n) {
	for (int i = 0; i < MAXALLOC; i++)
		if (!dev[i].p) {
			void *m = malloc(n);
			if (!m) return 2;
			dev[i].p = (uint64_t)(uintptr_t)m;
			dev[i].n = n | ((uint64_t)current << 56);
			*p = dev[i].p;
			return 0;
		}
	return 2;
}
int cuMemFree_v2(uint64_t p) {
	for (int i = 0; i < MAXALLOC; i++)
		if (dev[i].p == p) { free((void *)(uintptr_t)p); dev[i].p = 0; return 0; }
	return 1;
}
static int find(uint64_t p) {
	for (int i = 0; i < MAXALLOC; i++) {
		uint64_t n = dev[i].n & ((1ull << 56) - 1);
		if (dev[i].p && p >= dev[i].p && p < dev[i].p + n) return i;
	}
	return -1;
}
int cuPointerGetAttribute(void *data, int attr, uint64_t p) {
	int i = find(p);
	if (i < 0) return 1; /* CUDA_ERROR_INVALID_VALUE: not memory the driver knows */
	if (attr == 2) { *(unsigned *)data = 2; return 0; }                     /* DEVICE */
	if (attr == 9) { *(int *)data = (int)(dev[i].n >> 56); return 0; }     /* ordinal */
	return 1;
}
int cuMemHostAlloc(void **pp, uint64_t n, unsigned flags) { (void)flags; *pp = malloc(n); return *pp ? 0 : 2; }
int cuMemFreeHost(void *p) { free(p); return 0; }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, uint64_t n) {
	int i = find(src);
	if (i < 0 || find(src + n - 1) != i) return 1;
	memcpy(dst, (void *)(uintptr_t)src, n);
	return 0;
}
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, uint64_t n) {
	int i = find(dst);
	if (i < 0 || find(dst + n - 1) != i) return 1;
	memcpy((void *)(uintptr_t)dst, src, n);
	return 0;
}
