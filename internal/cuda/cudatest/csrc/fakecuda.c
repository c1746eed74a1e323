/* A simulated CUDA driver: the entry points of libcuda.so.1 that package
 * cuda uses, with "device memory" the host cannot touch. Each allocation is
 * a memfd mapping kept PROT_NONE; only this library's own copy calls open
 * it (mprotect) for the length of a memcpy, under one lock. Code that
 * dereferences a device pointer directly therefore dies with SIGSEGV
 * instead of passing by luck. IPC handles carry the owner's pid and memfd,
 * so another process of the host opens them through /proc/<pid>/fd.
 * Not the real driver's behaviour beyond what the project relies on. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAXALLOC 256
#define NDEV 2
static struct { uint64_t p, n; int dev, fd, opened; } al[MAXALLOC];
static int inited;
static __thread int current;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

int cuInit(unsigned flags) { (void)flags; inited = 1; return 0; }
int cuDeviceGetCount(int *n) { if (!inited) return 3; *n = NDEV; return 0; }
int cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= NDEV) return 101; *d = ord; return 0; }
int cuDevicePrimaryCtxRetain(uintptr_t *ctx, int d) { *ctx = 0x1000 + d; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxSetCurrent(uintptr_t ctx) { current = (int)(ctx - 0x1000); return 0; }

static uint64_t pagesz(uint64_t n) { uint64_t ps = 4096; return (n + ps - 1) / ps * ps; }

static int add(uint64_t p, uint64_t n, int dev, int fd, int opened) {
	for (int i = 0; i < MAXALLOC; i++)
		if (!al[i].p) { al[i].p = p; al[i].n = n; al[i].dev = dev; al[i].fd = fd; al[i].opened = opened; return 0; }
	return 2;
}

int cuMemAlloc_v2(uint64_t *p, uint64_t n) {
	if (n == 0) return 1;
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	if (fd < 0) return 2;
	if (ftruncate(fd, (off_t)pagesz(n)) != 0) { close(fd); return 2; }
	void *m = mmap(NULL, pagesz(n), PROT_NONE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) { close(fd); return 2; }
	pthread_mutex_lock(&mu);
	int r = add((uint64_t)(uintptr_t)m, n, current, fd, 0);
	pthread_mutex_unlock(&mu);
	if (r) { munmap(m, pagesz(n)); close(fd); return r; }
	*p = (uint64_t)(uintptr_t)m;
	return 0;
}

static int drop(uint64_t p, int opened) {
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXALLOC; i++)
		if (al[i].p == p && al[i].opened == opened) {
			munmap((void *)(uintptr_t)p, pagesz(al[i].n));
			close(al[i].fd);
			al[i].p = 0;
			pthread_mutex_unlock(&mu);
			return 0;
		}
	pthread_mutex_unlock(&mu);
	return 1;
}
int cuMemFree_v2(uint64_t p) { return drop(p, 0); }

/* find returns the allocation holding [p, p+n); mu held. */
static int find(uint64_t p, uint64_t n) {
	for (int i = 0; i < MAXALLOC; i++)
		if (al[i].p && p >= al[i].p && p < al[i].p + al[i].n)
			return (n <= al[i].p + al[i].n - p) ? i : -1;
	return -1;
}
int cuPointerGetAttribute(void *data, int attr, uint64_t p) {
	pthread_mutex_lock(&mu);
	int i = find(p, 1), r = 1; /* CUDA_ERROR_INVALID_VALUE: not memory the driver knows */
	if (i >= 0 && attr == 2) { *(unsigned *)data = 2; r = 0; }         /* CU_MEMORYTYPE_DEVICE */
	if (i >= 0 && attr == 9) { *(int *)data = al[i].dev; r = 0; }      /* device ordinal */
	pthread_mutex_unlock(&mu);
	return r;
}
int cuMemGetAddressRange_v2(uint64_t *base, uint64_t *size, uint64_t p) {
	pthread_mutex_lock(&mu);
	int i = find(p, 1);
	if (i >= 0) { *base = al[i].p; *size = al[i].n; }
	pthread_mutex_unlock(&mu);
	return i < 0 ? 1 : 0;
}
int cuMemHostAlloc(void **pp, uint64_t n, unsigned flags) {
	(void)flags;
	return posix_memalign(pp, 4096, n) ? 2 : 0;
}
int cuMemFreeHost(void *p) { free(p); return 0; }

static void open_(int i) { mprotect((void *)(uintptr_t)al[i].p, pagesz(al[i].n), PROT_READ | PROT_WRITE); }
static void shut(int i) { mprotect((void *)(uintptr_t)al[i].p, pagesz(al[i].n), PROT_NONE); }

/* copy moves n bytes; a device side (index >= 0) is opened only for the copy. */
static int copy(uint64_t dst, int dd, uint64_t src, int sd, uint64_t n) {
	pthread_mutex_lock(&mu);
	int di = dd ? find(dst, n) : -2, si = sd ? find(src, n) : -2;
	if (di == -1 || si == -1) { pthread_mutex_unlock(&mu); return 1; }
	if (di >= 0) open_(di);
	if (si >= 0) open_(si);
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	if (di >= 0) shut(di);
	if (si >= 0) shut(si);
	pthread_mutex_unlock(&mu);
	return 0;
}
int cuMemcpyDtoH_v2(void *dst, uint64_t src, uint64_t n) { return copy((uint64_t)(uintptr_t)dst, 0, src, 1, n); }
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, uint64_t n) { return copy(dst, 1, (uint64_t)(uintptr_t)src, 0, n); }
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, uint64_t n) { return copy(dst, 1, src, 1, n); }
int cuMemcpyPeer(uint64_t dst, uintptr_t dctx, uint64_t src, uintptr_t sctx, uint64_t n) {
	(void)dctx; (void)sctx;
	return copy(dst, 1, src, 1, n);
}

typedef struct { char reserved[64]; } handle;
struct ipc { uint64_t magic, pid, fd, n, dev; };
#define MAGIC 0x6661b3c0da11ull

int cuIpcGetMemHandle(handle *h, uint64_t p) {
	pthread_mutex_lock(&mu);
	int i = find(p, 1);
	if (i < 0 || al[i].p != p || al[i].opened) { pthread_mutex_unlock(&mu); return 1; }
	struct ipc c = {MAGIC, (uint64_t)getpid(), (uint64_t)al[i].fd, al[i].n, (uint64_t)al[i].dev};
	pthread_mutex_unlock(&mu);
	memset(h, 0, sizeof *h);
	memcpy(h, &c, sizeof c);
	return 0;
}
int cuIpcOpenMemHandle_v2(uint64_t *p, handle h, unsigned flags) {
	(void)flags;
	struct ipc c;
	memcpy(&c, &h, sizeof c);
	if (c.magic != MAGIC) return 400;         /* CUDA_ERROR_INVALID_HANDLE */
	if (c.pid == (uint64_t)getpid()) return 201; /* CUDA_ERROR_INVALID_CONTEXT: own handle */
	char path[64];
	snprintf(path, sizeof path, "/proc/%llu/fd/%llu", (unsigned long long)c.pid, (unsigned long long)c.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return 400;
	void *m = mmap(NULL, pagesz(c.n), PROT_NONE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) { close(fd); return 2; }
	pthread_mutex_lock(&mu);
	int r = add((uint64_t)(uintptr_t)m, c.n, (int)c.dev, fd, 1);
	pthread_mutex_unlock(&mu);
	if (r) { munmap(m, pagesz(c.n)); close(fd); return r; }
	*p = (uint64_t)(uintptr_t)m;
	return 0;
}
int cuIpcCloseMemHandle(uint64_t p) { return drop(p, 1); }

/* No asynchronous work exists here: every stream is always idle. */
int cuStreamSynchronize(uintptr_t stream) { (void)stream; return 0; }
