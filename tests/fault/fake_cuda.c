/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA driver that runs on a CPU, for the fault-injection loop
 * (tests/fault/fault_loop.c): two sm_90 devices, their primary contexts, a
 * per-thread context stack, streams, allocations in host memory that pointer
 * attributes know as device or pinned host memory (any other address reads as
 * pageable memory, as the real driver says), peer access, modules (any ELF
 * image loads; other bytes are CUDA_ERROR_INVALID_IMAGE), launches that do
 * nothing and copies that are memcpy, and legacy IPC handles opened in a
 * chosen device's context (an opened handle is memory of its own, mapped for
 * that device alone, peer access or not, as the real driver maps it). Every entry counts its calls and fails
 * on the schedule of fault_plan.h. Reached only through cuGetProcAddress_v2
 * and cuInit, like the real driver's versioned entries.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAULT_LIBRARY "cuda"
#include "fault_plan.h"

#define EXPORT __attribute__((visibility("default")))
#define N_DEV 2
#define STACK_MAX 16

/* A kernel named p2pt_test_fault "faults" when launched: from then on every
 * entry but the error-name ones returns CUDA_ERROR_ILLEGAL_ADDRESS, as a
 * real context does after an out-of-bounds write (a sticky error). */
static _Atomic int sticky;

#define FAULT(name)                                                            \
    do {                                                                       \
        int fault_code_ = fault_hit(name);                                     \
        if (fault_code_ != 0)                                                  \
            return (CUresult)fault_code_;                                      \
        if (sticky != 0 && strncmp(name, "cuGetError", 10) != 0)               \
            return (CUresult)sticky;                                           \
    } while (0)

struct fake_ctx {
    int device;
    unsigned long long id;
};

struct fake_alloc {
    void *base;
    size_t size;
    int device; /* -1: pinned host memory */
    int opened; /* a legacy IPC handle opened in `device`'s context */
    unsigned long long buffer_id;
    struct fake_alloc *next;
};

struct fake_module {
    struct fake_module *next;
    struct fake_function *functions;
};

struct fake_function {
    struct fake_module *module;
    struct fake_function *next;
    char name[64];
};

struct fake_stream {
    CUcontext ctx;
    int capturing;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_ctx primary[N_DEV] = {{0, 1}, {1, 2}};
static int peer_enabled[N_DEV][N_DEV];
static struct fake_alloc *allocs;
static struct fake_module *modules;
static unsigned long long next_buffer_id = 1;
static int initialized;
static _Thread_local CUcontext stack[STACK_MAX];
static _Thread_local int depth;

EXPORT void p2pt_fault_pause(int on);
EXPORT void p2pt_fault_pause(int on) { fault_paused = on; }

/* Calls of entry `name` so far (the tests count the library's driver calls
 * around one operation). */
EXPORT unsigned long p2pt_fake_calls(const char *name);
EXPORT unsigned long p2pt_fake_calls(const char *name)
{
    unsigned long n = 0;
    pthread_mutex_lock(&fault_lock);
    for (int i = 0; i < fault_n_counts; i++)
        if (strcmp(fault_counts[i].name, name) == 0)
            n = fault_counts[i].calls;
    pthread_mutex_unlock(&fault_lock);
    return n;
}

__attribute__((destructor)) static void fake_cuda_exit(void)
{
    fault_census();
    pthread_mutex_lock(&lock);
    while (allocs != NULL) {
        struct fake_alloc *a = allocs;
        allocs = a->next;
        free(a->base);
        free(a);
    }
    while (modules != NULL) {
        struct fake_module *m = modules;
        modules = m->next;
        while (m->functions != NULL) {
            struct fake_function *f = m->functions;
            m->functions = f->next;
            free(f);
        }
        free(m);
    }
    pthread_mutex_unlock(&lock);
}

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

static struct fake_alloc *find_alloc(uintptr_t p)
{
    for (struct fake_alloc *a = allocs; a != NULL; a = a->next)
        if (p >= (uintptr_t)a->base && p < (uintptr_t)a->base + a->size)
            return a;
    return NULL;
}

EXPORT CUresult CUDAAPI cuInit(unsigned int flags)
{
    FAULT("cuInit");
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}

#define READY()                                                                \
    do {                                                                       \
        if (!initialized)                                                      \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
    } while (0)

static CUresult fake_cuDriverGetVersion(int *v)
{
    FAULT("cuDriverGetVersion");
    const char *as = getenv("P2PT_FAKE_DRIVER_VERSION");
    *v = as != NULL ? atoi(as) : 13000;
    return CUDA_SUCCESS;
}

static const struct {
    CUresult r;
    const char *name;
} names[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"},
};

static CUresult fake_cuGetErrorName(CUresult r, const char **s)
{
    FAULT("cuGetErrorName");
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].r == r) {
            *s = names[i].name;
            return CUDA_SUCCESS;
        }
    *s = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuGetErrorString(CUresult r, const char **s)
{
    FAULT("cuGetErrorString");
    *s = r == CUDA_SUCCESS ? "no error" : "injected by the fake driver";
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetCount(int *n)
{
    FAULT("cuDeviceGetCount");
    READY();
    *n = N_DEV;
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGet(CUdevice *d, int ordinal)
{
    FAULT("cuDeviceGet");
    READY();
    if (ordinal < 0 || ordinal >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    FAULT("cuDeviceGetAttribute");
    READY();
    if (d < 0 || d >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 233472; break;
    default: *v = 1; break;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
    FAULT("cuDeviceGetName");
    READY();
    if (d < 0 || d >= N_DEV || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "NVIDIA H100 80GB HBM3");
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b)
{
    FAULT("cuDeviceCanAccessPeer");
    READY();
    if (a < 0 || a >= N_DEV || b < 0 || b >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *can = a != b;
    return CUDA_SUCCESS;
}

static CUresult fake_cuDeviceGetP2PAttribute(int *v, CUdevice_P2PAttribute a, CUdevice src,
                                             CUdevice dst)
{
    FAULT("cuDeviceGetP2PAttribute");
    READY();
    if (src < 0 || src >= N_DEV || dst < 0 || dst >= N_DEV || src == dst)
        return CUDA_ERROR_INVALID_DEVICE;
    *v = a == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : 1;
    return CUDA_SUCCESS;
}

static CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    FAULT("cuDevicePrimaryCtxRetain");
    READY();
    if (d < 0 || d >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    *c = (CUcontext)&primary[d];
    return CUDA_SUCCESS;
}

static CUresult fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
    FAULT("cuDevicePrimaryCtxRelease");
    return d >= 0 && d < N_DEV ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult fake_cuCtxGetCurrent(CUcontext *c)
{
    FAULT("cuCtxGetCurrent");
    READY();
    *c = current();
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxSetCurrent(CUcontext c)
{
    FAULT("cuCtxSetCurrent");
    READY();
    if (c == NULL) {
        if (depth > 0)
            depth--;
        return CUDA_SUCCESS;
    }
    if (depth == 0)
        depth = 1;
    stack[depth - 1] = c;
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxPushCurrent(CUcontext c)
{
    FAULT("cuCtxPushCurrent");
    READY();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (depth == STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    stack[depth++] = c;
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxPopCurrent(CUcontext *c)
{
    FAULT("cuCtxPopCurrent");
    READY();
    if (depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext top = stack[--depth];
    if (c != NULL)
        *c = top;
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxGetDevice(CUdevice *d)
{
    FAULT("cuCtxGetDevice");
    READY();
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = ((struct fake_ctx *)current())->device;
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxGetId(CUcontext c, unsigned long long *id)
{
    FAULT("cuCtxGetId");
    READY();
    if (c == NULL)
        c = current();
    if (c == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    *id = ((struct fake_ctx *)c)->id;
    return CUDA_SUCCESS;
}

static CUresult fake_cuCtxSynchronize(void)
{
    FAULT("cuCtxSynchronize");
    return current() != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult fake_cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
    FAULT("cuCtxEnablePeerAccess");
    READY();
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (peer == NULL || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int from = ((struct fake_ctx *)current())->device, to = ((struct fake_ctx *)peer)->device;
    if (from == to)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    int was = peer_enabled[from][to];
    peer_enabled[from][to] = 1;
    pthread_mutex_unlock(&lock);
    return was ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
}

static CUresult fake_cuStreamCreate(CUstream *s, unsigned flags)
{
    FAULT("cuStreamCreate");
    (void)flags;
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fake_stream *fs = calloc(1, sizeof(*fs));
    if (fs == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fs->ctx = current();
    *s = (CUstream)fs;
    return CUDA_SUCCESS;
}

static CUresult fake_cuStreamDestroy(CUstream s)
{
    FAULT("cuStreamDestroy");
    free(s);
    return CUDA_SUCCESS;
}

static CUresult fake_cuStreamSynchronize(CUstream s)
{
    FAULT("cuStreamSynchronize");
    (void)s;
    return CUDA_SUCCESS;
}

/* The legacy and per-thread default streams (NULL, 0x1, 0x2) belong to the
 * current context; any other handle is a stream made here. */
static CUresult fake_cuStreamGetCtx(CUstream s, CUcontext *c)
{
    FAULT("cuStreamGetCtx");
    READY();
    if ((uintptr_t)s <= 2) {
        if (current() == NULL)
            return CUDA_ERROR_INVALID_CONTEXT;
        *c = current();
        return CUDA_SUCCESS;
    }
    *c = ((struct fake_stream *)s)->ctx;
    return CUDA_SUCCESS;
}

static CUresult fake_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *cs)
{
    FAULT("cuStreamIsCapturing");
    int on = (uintptr_t)s > 2 && ((struct fake_stream *)s)->capturing;
    *cs = on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

/* Capture only marks the stream: the work enqueued meanwhile runs at once
 * (copies are memcpy), and a graph is a token that launches nothing. */
static CUresult fake_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
    FAULT("cuStreamBeginCapture");
    (void)mode;
    if ((uintptr_t)s <= 2 || ((struct fake_stream *)s)->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    ((struct fake_stream *)s)->capturing = 1;
    return CUDA_SUCCESS;
}

static CUresult fake_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    FAULT("cuStreamEndCapture");
    if ((uintptr_t)s <= 2 || !((struct fake_stream *)s)->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    ((struct fake_stream *)s)->capturing = 0;
    *g = (CUgraph)calloc(1, 16);
    return *g != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g,
                                                 unsigned long long flags)
{
    FAULT("cuGraphInstantiateWithFlags");
    (void)flags;
    if (g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *e = (CUgraphExec)calloc(1, 16);
    return *e != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_cuGraphLaunch(CUgraphExec e, CUstream s)
{
    FAULT("cuGraphLaunch");
    (void)s;
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuGraphExecDestroy(CUgraphExec e)
{
    FAULT("cuGraphExecDestroy");
    free(e);
    return CUDA_SUCCESS;
}

static CUresult fake_cuGraphDestroy(CUgraph g)
{
    FAULT("cuGraphDestroy");
    free(g);
    return CUDA_SUCCESS;
}

static CUresult alloc(void **p, size_t bytes, int device)
{
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    void *base = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (a == NULL || base == NULL) {
        free(a);
        free(base);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memset(base, 0, bytes);
    a->base = base;
    a->size = bytes;
    a->device = device;
    pthread_mutex_lock(&lock);
    a->buffer_id = next_buffer_id++;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&lock);
    *p = base;
    return CUDA_SUCCESS;
}

static CUresult release(void *p)
{
    pthread_mutex_lock(&lock);
    for (struct fake_alloc **at = &allocs; *at != NULL; at = &(*at)->next) {
        if ((*at)->base == p) {
            struct fake_alloc *a = *at;
            *at = a->next;
            pthread_mutex_unlock(&lock);
            free(a->base);
            free(a);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemAlloc(CUdeviceptr *dp, size_t bytes)
{
    FAULT("cuMemAlloc");
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    void *p = NULL;
    CUresult r = alloc(&p, bytes, ((struct fake_ctx *)current())->device);
    *dp = (CUdeviceptr)(uintptr_t)p;
    return r;
}

/* A handle carries the exported allocation's address and size. */
static CUresult fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dp)
{
    FAULT("cuIpcGetMemHandle");
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc((uintptr_t)dp);
    struct fake_alloc a = f != NULL ? *f : (struct fake_alloc){0};
    pthread_mutex_unlock(&lock);
    if (f == NULL || a.device < 0 || a.base != (void *)(uintptr_t)dp)
        return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, "fakeipc", 8);
    memcpy(h->reserved + 8, &a.base, sizeof(a.base));
    memcpy(h->reserved + 16, &a.size, sizeof(a.size));
    return CUDA_SUCCESS;
}

/* Opening makes memory of its own (the fake has one process: the bytes are
 * not shared with the exported allocation), known as the opening context's
 * device's and mapped for it alone. */
static CUresult fake_cuIpcOpenMemHandle(CUdeviceptr *dp, CUipcMemHandle h, unsigned flags)
{
    FAULT("cuIpcOpenMemHandle");
    (void)flags;
    size_t size = 0;
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (memcmp(h.reserved, "fakeipc", 8) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(&size, h.reserved + 16, sizeof(size));
    void *p = NULL;
    CUresult r = alloc(&p, size, ((struct fake_ctx *)current())->device);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lock);
    find_alloc((uintptr_t)p)->opened = 1;
    pthread_mutex_unlock(&lock);
    *dp = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult fake_cuIpcCloseMemHandle(CUdeviceptr dp)
{
    FAULT("cuIpcCloseMemHandle");
    return release((void *)(uintptr_t)dp);
}

static CUresult fake_cuMemFree(CUdeviceptr dp)
{
    FAULT("cuMemFree");
    return release((void *)(uintptr_t)dp);
}

static CUresult fake_cuMemAllocHost(void **p, size_t bytes)
{
    FAULT("cuMemAllocHost");
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    return alloc(p, bytes, -1);
}

/* Every flag gives the same memory here: pinned, mapped for both devices. */
static CUresult fake_cuMemHostAlloc(void **p, size_t bytes, unsigned flags)
{
    FAULT("cuMemHostAlloc");
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return alloc(p, bytes, -1);
}

static CUresult fake_cuMemFreeHost(void *p)
{
    FAULT("cuMemFreeHost");
    return release(p);
}

static CUresult fake_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    FAULT("cuMemGetInfo");
    *free_bytes = (size_t)1 << 36;
    *total = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

/* Both sides must be memory a copy engine can reach: an allocation made here
 * (whole range inside it) or host memory the fake does not know. */
static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    if (bytes == 0)
        return CUDA_SUCCESS;
    if (dst == 0 || src == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct fake_alloc *d = find_alloc(dst), *s = find_alloc(src);
    int ok = (d == NULL || dst + bytes <= (uintptr_t)d->base + d->size) &&
             (s == NULL || src + bytes <= (uintptr_t)s->base + s->size);
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s)
{
    FAULT("cuMemcpyAsync");
    (void)s;
    return copy(dst, src, bytes);
}

static CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
    FAULT("cuMemcpyHtoD");
    return copy(dst, (CUdeviceptr)(uintptr_t)src, bytes);
}

static CUresult fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    FAULT("cuMemcpyDtoH");
    return copy((CUdeviceptr)(uintptr_t)dst, src, bytes);
}

static CUresult fake_cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n)
{
    FAULT("cuMemsetD8");
    memset((void *)(uintptr_t)dst, v, n);
    return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count)
{
    if (count == 0 || dsts == NULL || srcs == NULL || sizes == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult r = copy(dsts[i], srcs[i], sizes[i]);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

/* Rows of a 2D copy between UVA pointers, each one a copy. */
static CUresult rows(CUdeviceptr dst, size_t dpitch, CUdeviceptr src, size_t spitch,
                     size_t width, size_t height)
{
    if (width == 0 || height == 0 || (height > 1 && (dpitch < width || spitch < width)))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < height; k++) {
        CUresult r = copy(dst + k * dpitch, src + k * spitch, width);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpy2DAsync(const CUDA_MEMCPY2D *c, CUstream s)
{
    FAULT("cuMemcpy2DAsync");
    (void)s;
    if (c == NULL || c->srcMemoryType != CU_MEMORYTYPE_UNIFIED ||
        c->dstMemoryType != CU_MEMORYTYPE_UNIFIED || c->srcXInBytes || c->srcY ||
        c->dstXInBytes || c->dstY)
        return CUDA_ERROR_INVALID_VALUE;
    return rows(c->dstDevice, c->dstPitch, c->srcDevice, c->srcPitch, c->WidthInBytes,
                c->Height);
}

static CUresult batch_3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops)
{
    if (n == 0 || ops == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; i++) {
        const CUDA_MEMCPY3D_BATCH_OP *o = &ops[i];
        if (o->src.type != CU_MEMCPY_OPERAND_TYPE_POINTER ||
            o->dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER || o->extent.depth != 1)
            return CUDA_ERROR_INVALID_VALUE;
        CUresult r = rows(o->dst.op.ptr.ptr, o->dst.op.ptr.rowLength, o->src.op.ptr.ptr,
                          o->src.op.ptr.rowLength, o->extent.width, o->extent.height);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
                                          unsigned long long flags, CUstream s)
{
    FAULT("cuMemcpy3DBatchAsync");
    (void)flags, (void)s;
    return batch_3d(n, ops);
}

static CUresult fake_cuMemcpy3DBatchAsync_v12080(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
                                                 size_t *fail_idx, unsigned long long flags,
                                                 CUstream s)
{
    FAULT("cuMemcpy3DBatchAsync_v12080");
    (void)flags, (void)s;
    if (fail_idx != NULL)
        *fail_idx = SIZE_MAX;
    return batch_3d(n, ops);
}

static CUresult fake_cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                        size_t count, CUmemcpyAttributes *attrs,
                                        size_t *attr_idxs, size_t n_attrs, CUstream s)
{
    FAULT("cuMemcpyBatchAsync");
    (void)attrs, (void)attr_idxs, (void)n_attrs, (void)s;
    return batch(dsts, srcs, sizes, count);
}

static CUresult fake_cuMemcpyBatchAsync_v12080(CUdeviceptr *dsts, CUdeviceptr *srcs,
                                               size_t *sizes, size_t count,
                                               CUmemcpyAttributes *attrs, size_t *attr_idxs,
                                               size_t n_attrs, size_t *fail_idx, CUstream s)
{
    FAULT("cuMemcpyBatchAsync_v12080");
    (void)attrs, (void)attr_idxs, (void)n_attrs, (void)s;
    if (fail_idx != NULL)
        *fail_idx = SIZE_MAX;
    return batch(dsts, srcs, sizes, count);
}

/* One attribute of `p`; `known` says whether the fake made the memory. */
static CUresult pointer_attribute(void *data, CUpointer_attribute a, CUdeviceptr p, int known)
{
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    struct fake_alloc copy_of = f != NULL ? *f : (struct fake_alloc){0};
    int from = current() != NULL ? ((struct fake_ctx *)current())->device : -1;
    int mapped = f != NULL && (f->device < 0 || f->device == from ||
                               (from >= 0 && !f->opened && peer_enabled[from][f->device]));
    pthread_mutex_unlock(&lock);
    if (f == NULL && known)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = f == NULL ? 0u
                            : copy_of.device < 0 ? (unsigned)CU_MEMORYTYPE_HOST
                                                 : (unsigned)CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = f == NULL ? -2 : copy_of.device < 0 ? 0 : copy_of.device;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned long long *)data = f == NULL ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE
                                                : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!mapped)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)p;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (copy_of.device >= 0)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)p;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)copy_of.base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = copy_of.size;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = copy_of.buffer_id;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = NULL;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = f != NULL && copy_of.device >= 0 && !copy_of.opened;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data =
            f == NULL || copy_of.device < 0 ? NULL : (CUcontext)&primary[copy_of.device];
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p)
{
    FAULT("cuPointerGetAttribute");
    READY();
    return pointer_attribute(data, a, p, 1);
}

/* Unlike cuPointerGetAttribute, unknown memory is success with empty values. */
static CUresult fake_cuPointerGetAttributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                            CUdeviceptr p)
{
    FAULT("cuPointerGetAttributes");
    READY();
    for (unsigned i = 0; i < n; i++) {
        CUresult r = pointer_attribute(data[i], attrs[i], p, 0);
        if (r != CUDA_SUCCESS && attrs[i] != CU_POINTER_ATTRIBUTE_DEVICE_POINTER &&
            attrs[i] != CU_POINTER_ATTRIBUTE_HOST_POINTER)
            return r;
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuModuleLoadData(CUmodule *m, const void *image)
{
    FAULT("cuModuleLoadData");
    READY();
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (image != NULL && strncmp(image, ".version", 8) == 0)
        goto accepted; /* PTX text */
    if (image == NULL || memcmp(image, "\177ELF", 4) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    /* The fake NVRTC's images: the architecture in e_flags, and an empty
     * section header that a damaged file no longer has. */
    const unsigned char *b = image;
    uint16_t machine;
    uint32_t arch;
    memcpy(&machine, b + 0x12, sizeof(machine));
    memcpy(&arch, b + 0x30, sizeof(arch));
    if (machine == 190 && arch != 0 && arch != 90)
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    for (int i = 64; machine == 190 && arch != 0 && i < 128; i++)
        if (b[i] != 0)
            return CUDA_ERROR_INVALID_IMAGE;
accepted:;
    struct fake_module *fm = calloc(1, sizeof(*fm));
    if (fm == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    fm->next = modules;
    modules = fm;
    pthread_mutex_unlock(&lock);
    *m = (CUmodule)fm;
    return CUDA_SUCCESS;
}

static CUresult fake_cuModuleUnload(CUmodule m)
{
    FAULT("cuModuleUnload");
    pthread_mutex_lock(&lock);
    for (struct fake_module **at = &modules; *at != NULL; at = &(*at)->next) {
        if (*at == (struct fake_module *)m) {
            struct fake_module *fm = *at;
            *at = fm->next;
            while (fm->functions != NULL) {
                struct fake_function *f = fm->functions;
                fm->functions = f->next;
                free(f);
            }
            free(fm);
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuModuleGetFunction(CUfunction *fn, CUmodule m, const char *name)
{
    FAULT("cuModuleGetFunction");
    if (m == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_function *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fake_module *fm = (struct fake_module *)m;
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->module = fm;
    pthread_mutex_lock(&lock);
    f->next = fm->functions;
    fm->functions = f;
    pthread_mutex_unlock(&lock);
    *fn = (CUfunction)f;
    return CUDA_SUCCESS;
}

static CUresult fake_cuFuncSetAttribute(CUfunction fn, CUfunction_attribute a, int v)
{
    FAULT("cuFuncSetAttribute");
    if (fn == NULL || v < 0)
        return CUDA_ERROR_INVALID_VALUE;
    (void)a;
    return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned smem,
                                    CUstream s, void **params, void **extra)
{
    FAULT("cuLaunchKernel");
    (void)s, (void)smem, (void)extra, (void)params;
    if (fn == NULL || gx * gy * gz == 0 || bx * by * bz == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (strcmp(((struct fake_function *)fn)->name, "p2pt_test_fault") == 0)
        sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction fn, void **params,
                                      void **extra)
{
    FAULT("cuLaunchKernelEx");
    (void)extra;
    if (c == NULL || fn == NULL || params == NULL || c->gridDimX == 0 || c->blockDimX == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventCreate(CUevent *e, unsigned flags)
{
    FAULT("cuEventCreate");
    (void)flags;
    *e = (CUevent)calloc(1, 16);
    return *e != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_cuEventDestroy(CUevent e)
{
    FAULT("cuEventDestroy");
    free(e);
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventRecord(CUevent e, CUstream s)
{
    FAULT("cuEventRecord");
    (void)s;
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventQuery(CUevent e)
{
    FAULT("cuEventQuery");
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventSynchronize(CUevent e)
{
    FAULT("cuEventSynchronize");
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    FAULT("cuEventElapsedTime");
    *ms = 0.001f;
    return a != NULL && b != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    FAULT("cuStreamWaitEvent");
    (void)s, (void)flags;
    return e != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                       CUstream s)
{
    FAULT("cuMemcpyHtoDAsync");
    (void)s;
    return copy(dst, (CUdeviceptr)(uintptr_t)src, bytes);
}

#define ENTRY(name) {#name, (void *)fake_##name}
static const struct {
    const char *name;
    void *fn;
} table[] = {
    {"cuInit", (void *)cuInit},
    ENTRY(cuDriverGetVersion),
    ENTRY(cuGetErrorName),
    ENTRY(cuGetErrorString),
    ENTRY(cuDeviceGet),
    ENTRY(cuDeviceGetCount),
    ENTRY(cuDeviceGetAttribute),
    ENTRY(cuDeviceGetName),
    ENTRY(cuDeviceCanAccessPeer),
    ENTRY(cuDeviceGetP2PAttribute),
    ENTRY(cuDevicePrimaryCtxRetain),
    ENTRY(cuDevicePrimaryCtxRelease),
    ENTRY(cuCtxGetCurrent),
    ENTRY(cuCtxSetCurrent),
    ENTRY(cuCtxPushCurrent),
    ENTRY(cuCtxPopCurrent),
    ENTRY(cuCtxGetDevice),
    ENTRY(cuCtxGetId),
    ENTRY(cuCtxSynchronize),
    ENTRY(cuCtxEnablePeerAccess),
    ENTRY(cuStreamCreate),
    ENTRY(cuStreamDestroy),
    ENTRY(cuStreamSynchronize),
    ENTRY(cuStreamGetCtx),
    ENTRY(cuStreamIsCapturing),
    ENTRY(cuStreamBeginCapture),
    ENTRY(cuStreamEndCapture),
    ENTRY(cuGraphInstantiateWithFlags),
    ENTRY(cuGraphLaunch),
    ENTRY(cuGraphExecDestroy),
    ENTRY(cuGraphDestroy),
    ENTRY(cuMemAlloc),
    ENTRY(cuMemFree),
    ENTRY(cuIpcGetMemHandle),
    ENTRY(cuIpcOpenMemHandle),
    ENTRY(cuIpcCloseMemHandle),
    ENTRY(cuMemAllocHost),
    ENTRY(cuMemHostAlloc),
    ENTRY(cuMemFreeHost),
    ENTRY(cuMemGetInfo),
    ENTRY(cuMemcpyAsync),
    ENTRY(cuMemcpyBatchAsync),
    ENTRY(cuMemcpy2DAsync),
    ENTRY(cuMemcpy3DBatchAsync),
    ENTRY(cuMemcpyHtoD),
    ENTRY(cuMemcpyDtoH),
    ENTRY(cuMemsetD8),
    ENTRY(cuPointerGetAttribute),
    ENTRY(cuPointerGetAttributes),
    ENTRY(cuModuleLoadData),
    ENTRY(cuModuleUnload),
    ENTRY(cuModuleGetFunction),
    ENTRY(cuFuncSetAttribute),
    ENTRY(cuLaunchKernel),
    ENTRY(cuLaunchKernelEx),
    ENTRY(cuEventCreate),
    ENTRY(cuEventDestroy),
    ENTRY(cuEventRecord),
    ENTRY(cuEventQuery),
    ENTRY(cuEventSynchronize),
    ENTRY(cuEventElapsedTime),
    ENTRY(cuStreamWaitEvent),
    ENTRY(cuMemcpyHtoDAsync),
};
#undef ENTRY

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                            cuuint64_t flags, CUdriverProcAddressQueryResult *found)
{
    FAULT("cuGetProcAddress_v2");
    (void)flags;
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    /* P2PT_FAKE_DRIVER_VERSION=12080: a CUDA 12.8 driver, which has only the
     * older batched copy. */
    const char *as = getenv("P2PT_FAKE_DRIVER_VERSION");
    int driver = as != NULL ? atoi(as) : 13000;
    if (strcmp(symbol, "cuMemcpyBatchAsync") == 0 && version >= 13000 && driver < 13000) {
        *pfn = NULL;
    } else if (strcmp(symbol, "cuMemcpyBatchAsync") == 0 && version < 13000) {
        *pfn = (void *)fake_cuMemcpyBatchAsync_v12080;
    } else if (strcmp(symbol, "cuMemcpy3DBatchAsync") == 0 && version >= 13000 &&
               driver < 13000) {
        *pfn = NULL;
    } else if (strcmp(symbol, "cuMemcpy3DBatchAsync") == 0 && version < 13000) {
        *pfn = (void *)fake_cuMemcpy3DBatchAsync_v12080;
    } else {
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
            if (strcmp(table[i].name, symbol) == 0)
                *pfn = table[i].fn;
    }
    if (found != NULL)
        *found = *pfn != NULL ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
