/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA driver that runs on a CPU, for the fault-injection loop
 * (tests/fault/fault_loop.c): two sm_90 devices, their primary contexts, a
 * per-thread context stack, streams, allocations in host memory that pointer
 * attributes know as device or pinned host memory (any other address reads as
 * pageable memory, as the real driver says), peer access, modules (any ELF
 * image loads; other bytes are CUDA_ERROR_INVALID_IMAGE), launches that do
 * nothing and copies that are memcpy, and legacy IPC handles opened in a
 * chosen device's context (an opened handle is mapped for that device alone,
 * peer access or not, as the real driver maps it). Every entry counts its
 * calls and fails on the schedule of fault_plan.h. Reached only through
 * cuGetProcAddress_v2 and cuInit, like the real driver's versioned entries.
 *
 * Memory shared between processes is real shared memory: device memory is
 * a memfd mapped MAP_SHARED, so a legacy IPC handle (its owner's pid and
 * memfd number) opens in another process through /proc/<pid>/fd (in its
 * own process, where the real driver refuses, it opens as memory of its
 * own, not shared, for the tests of one process); a VMM
 * allocation is a memfd whose exported descriptor is a real one, mapped
 * into reserved address ranges; a pool is a memfd arena whose descriptor
 * and pointer data import elsewhere. A memfd's name carries the device and
 * the handle types, for the process that imports it.
 *
 * This file holds the devices, contexts, streams and graphs, and the lookup
 * of every file's entries; fake_cuda.h lists the others.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAULT_LIBRARY "cuda"
#include "fault_plan.h"

#include "fake_cuda.h"

#define STACK_MAX 16

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
struct fake_ctx primary[N_DEV] = {{0, 1}, {1, 2}};
int peer_enabled[N_DEV][N_DEV];
struct fake_alloc *allocs;
struct fake_phys *physs;
struct fake_map *maps;
struct fake_pool *pools;
struct fake_pool *default_pool[N_DEV];
struct fake_event *events;
struct fake_module *modules;
unsigned long long next_buffer_id = 1;
int initialized;
_Atomic int sticky;
static _Thread_local CUcontext stack[STACK_MAX];
static _Thread_local int depth;

int fake_fault_hit(const char *name) { return fault_hit(name); }

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

/* Calls of every entry so far: a call the tests do not name still counts. */
EXPORT unsigned long p2pt_fake_calls_total(void);
EXPORT unsigned long p2pt_fake_calls_total(void)
{
    unsigned long n = 0;
    pthread_mutex_lock(&fault_lock);
    for (int i = 0; i < fault_n_counts; i++)
        n += fault_counts[i].calls;
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
        unmap_alloc(a);
        free(a);
    }
    while (maps != NULL) {
        struct fake_map *m = maps;
        maps = m->next;
        free(m);
    }
    while (physs != NULL) {
        struct fake_phys *ph = physs;
        physs = ph->next;
        close(ph->fd);
        free(ph);
    }
    while (pools != NULL) {
        struct fake_pool *pl = pools;
        pools = pl->next;
        if (pl->base != NULL)
            munmap(pl->base, pl->size);
        close(pl->fd);
        free(pl);
    }
    while (events != NULL) {
        struct fake_event *e = events;
        events = e->next;
        free(e);
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

CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

EXPORT CUresult CUDAAPI cuInit(unsigned int flags)
{
    FAULT("cuInit");
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}

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
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"},
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
    /* P2PT_FAKE_DEVICES=1: a one-GPU machine, for the paths that need two. */
    const char *want = getenv("P2PT_FAKE_DEVICES");
    *n = want && atoi(want) >= 1 && atoi(want) < N_DEV ? atoi(want) : N_DEV;
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
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    wait_for_hold();
    return CUDA_SUCCESS;
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
/* This thread's capture mode: kept and handed back, nothing enforced. */
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult fake_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    FAULT("cuThreadExchangeStreamCaptureMode");
    if (mode == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode was = capture_mode;
    capture_mode = *mode;
    *mode = was;
    return CUDA_SUCCESS;
}

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

int current_device(void)
{
    return current() != NULL ? ((struct fake_ctx *)current())->device : -1;
}

static CUresult fake_cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    FAULT("cuDeviceGetUuid");
    READY();
    if (d < 0 || d >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    memset(u->bytes, 0, sizeof(u->bytes));
    memcpy(u->bytes, "p2pt-fake-gpu-", 14);
    u->bytes[15] = (char)('0' + d);
    return CUDA_SUCCESS;
}

/* The entries of this file; cuInit is exported by name too. */
static const struct fake_entry core_entries[] = {
    {"cuInit", (void *)cuInit},
    ENTRY(cuDriverGetVersion),
    ENTRY(cuGetErrorName),
    ENTRY(cuGetErrorString),
    ENTRY(cuDeviceGetCount),
    ENTRY(cuDeviceGet),
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
    ENTRY(cuThreadExchangeStreamCaptureMode),
    ENTRY(cuStreamBeginCapture),
    ENTRY(cuStreamEndCapture),
    ENTRY(cuGraphInstantiateWithFlags),
    ENTRY(cuGraphLaunch),
    ENTRY(cuGraphExecDestroy),
    ENTRY(cuGraphDestroy),
    ENTRY(cuDeviceGetUuid),
    ENTRIES_END,
};

static const struct fake_entry *const tables[] = {core_entries, fake_memory_entries,
                                                  fake_launch_entries, fake_share_entries,
                                                  fake_pools_entries};

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
        for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
            for (const struct fake_entry *e = tables[t]; e->name != NULL; e++)
                if (strcmp(e->name, symbol) == 0)
                    *pfn = e->fn;
    }
    if (found != NULL)
        *found = *pfn != NULL ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
