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
 */
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

enum alloc_kind {
    A_HEAP,        /* pinned host memory */
    A_MEMFD,       /* cuMemAlloc: a memfd, so that legacy IPC can open it */
    A_RESERVE,     /* cuMemAddressReserve: VMM mappings live inside */
    A_IPC,         /* a legacy IPC handle opened here */
    A_POOL,        /* from a pool of this process */
    A_POOL_IMPORT, /* a pool pointer imported here */
};

struct fake_pool;

struct fake_alloc {
    void *base;
    size_t size;
    int device; /* -1: pinned host memory */
    int opened; /* a legacy IPC handle opened in `device`'s context */
    unsigned long long buffer_id;
    struct fake_alloc *next;
    enum alloc_kind kind;
    int fd;                 /* A_MEMFD, A_IPC: the memfd */
    size_t map_len;         /* bytes mapped (whole pages) */
    unsigned access;        /* A_IPC, A_POOL_IMPORT: the devices that reach it */
    struct fake_pool *pool; /* A_POOL, A_POOL_IMPORT */
    int refs;               /* A_IPC: opens in its context */
    long ipc_pid, ipc_fd;   /* A_IPC: the handle it came from */
};

/* A VMM physical allocation: a memfd, alive while a handle or a mapping
 * holds it. */
struct fake_phys {
    struct fake_phys *next;
    int fd;
    size_t size;
    int device;
    unsigned types;
    int refs;
};

/* A VMM mapping inside a reservation. */
struct fake_map {
    struct fake_map *next;
    uintptr_t at;
    size_t size;
    struct fake_phys *phys;
    unsigned access; /* devices given access by cuMemSetAccess */
};

/* A memory pool: a memfd arena, bump-allocated; or one imported. */
struct fake_pool {
    struct fake_pool *next;
    int fd;
    size_t size, used;
    int device;
    unsigned types;
    char *base; /* NULL for an imported pool */
    unsigned access;
};

struct fake_event {
    struct fake_event *next;
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
static struct fake_phys *physs;
static struct fake_map *maps;
static struct fake_pool *pools;
static struct fake_pool *default_pool[N_DEV];
static struct fake_event *events;
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

/* Give back what an allocation holds (not the record itself). */
static void unmap_alloc(struct fake_alloc *a)
{
    switch (a->kind) {
    case A_HEAP: free(a->base); break;
    case A_MEMFD:
    case A_IPC:
        munmap(a->base, a->map_len);
        close(a->fd);
        break;
    case A_RESERVE:
    case A_POOL_IMPORT: munmap(a->base, a->map_len); break;
    case A_POOL: break; /* inside its pool's arena */
    }
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

static CUcontext current(void) { return depth > 0 ? stack[depth - 1] : NULL; }

static void wait_for_hold(void);

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

static size_t pages(size_t bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg;
}

/* A memfd of `bytes` whose name says its device and handle types. */
static int make_memfd(size_t bytes, int device, unsigned types)
{
    char name[64];
    snprintf(name, sizeof(name), "p2pt-fake-d%d-t%u", device, types);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The device and handle types a memfd of another process was made with. */
static int memfd_origin(int fd, int *device, unsigned *types)
{
    char link[64], target[256];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    const char *at = strstr(target, "p2pt-fake-d");
    return at != NULL && sscanf(at, "p2pt-fake-d%d-t%u", device, types) == 2 ? 0 : -1;
}

/* Record `a` (filled but for its id) as an allocation. */
static void add_alloc(struct fake_alloc *a)
{
    pthread_mutex_lock(&lock);
    a->buffer_id = next_buffer_id++;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&lock);
}

static CUresult alloc(void **p, size_t bytes, int device)
{
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->fd = -1;
    if (device < 0) {
        a->kind = A_HEAP;
        a->base = aligned_alloc(256, (bytes + 255) / 256 * 256);
        if (a->base != NULL)
            memset(a->base, 0, bytes);
    } else {
        a->kind = A_MEMFD;
        a->map_len = pages(bytes);
        a->fd = make_memfd(a->map_len, device, 0);
        a->base = a->fd < 0 ? NULL
                            : mmap(NULL, a->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
        if (a->base == MAP_FAILED)
            a->base = NULL;
        if (a->base == NULL && a->fd >= 0)
            close(a->fd);
        if (a->base == NULL) {
            /* No memfd (a file size limit, as the workload's full-disk run
             * sets): plain memory, which no other process can open. */
            a->kind = A_HEAP;
            a->fd = -1;
            a->base = aligned_alloc(256, (bytes + 255) / 256 * 256);
            if (a->base != NULL)
                memset(a->base, 0, bytes);
        }
    }
    if (a->base == NULL) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->size = bytes;
    a->device = device;
    add_alloc(a);
    *p = a->base;
    return CUDA_SUCCESS;
}

/* Unlink the allocation based at `p` if `ok(kind)`; NULL when none. */
static struct fake_alloc *unlink_alloc(void *p, int (*ok)(enum alloc_kind))
{
    pthread_mutex_lock(&lock);
    for (struct fake_alloc **at = &allocs; *at != NULL; at = &(*at)->next) {
        if ((*at)->base == p && ok((*at)->kind)) {
            struct fake_alloc *a = *at;
            *at = a->next;
            pthread_mutex_unlock(&lock);
            return a;
        }
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static int freeable(enum alloc_kind k)
{
    return k == A_HEAP || k == A_MEMFD || k == A_POOL || k == A_POOL_IMPORT;
}

static CUresult release(void *p)
{
    struct fake_alloc *a = unlink_alloc(p, freeable);
    if (a == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    unmap_alloc(a);
    free(a);
    return CUDA_SUCCESS;
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

/* The VMM mapping holding `p` (lock held). */
static struct fake_map *find_map(uintptr_t p)
{
    for (struct fake_map *m = maps; m != NULL; m = m->next)
        if (p >= m->at && p < m->at + m->size)
            return m;
    return NULL;
}

/* One attribute of `p`; `known` says whether the fake made the memory. */
static CUresult pointer_attribute(void *data, CUpointer_attribute a, CUdeviceptr p, int known)
{
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    struct fake_map *m = NULL;
    if (f != NULL && f->kind == A_RESERVE && (m = find_map(p)) == NULL)
        f = NULL; /* reserved, nothing mapped there */
    struct fake_alloc copy_of = f != NULL ? *f : (struct fake_alloc){0};
    if (m != NULL)
        copy_of.device = m->phys->device;
    int from = current() != NULL ? ((struct fake_ctx *)current())->device : -1;
    unsigned access = m != NULL ? m->access : copy_of.access;
    int mapped;
    if (m != NULL || copy_of.kind == A_IPC || copy_of.kind == A_POOL_IMPORT)
        mapped = f != NULL && from >= 0 && ((access >> from) & 1u);
    else
        mapped = f != NULL && (f->device < 0 || f->device == from ||
                               (from >= 0 && !f->opened && peer_enabled[from][f->device]));
    unsigned long long types = m != NULL               ? m->phys->types
                               : copy_of.pool != NULL ? copy_of.pool->types
                                                      : 0;
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
        /* NONE for a VMM mapping without access for this device; peer
         * memory, opened handles and pools read "read-write" whether or not
         * they are mapped here, as the real driver answers. */
        *(unsigned long long *)data = f == NULL || (m != NULL && !mapped)
                                          ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE
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
        *(CUmemoryPool *)data = f != NULL ? (CUmemoryPool)copy_of.pool : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data =
            f == NULL || copy_of.device < 0 ? NULL : (CUcontext)&primary[copy_of.device];
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        /* cuMemAlloc memory of its own; what was opened from a handle is
         * not exportable again. */
        *(int *)data = f != NULL && copy_of.kind == A_MEMFD && !copy_of.opened;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = types;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = f != NULL;
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

/* The last launch of a device batch entry: its grid and the head of its
 * parameters (struct p2pt_batch_dev_params), for tests of how the library
 * launches what it cannot show through its API. Only these entries: their
 * parameters are known to be at least LAUNCH_HEAD bytes. */
enum { LAUNCH_HEAD = 64 };
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char name[64];
    unsigned grid;
    unsigned char head[LAUNCH_HEAD];
} last_launch;

/* The last launch of any kernel: its entry's name and grid. */
static struct {
    char name[64];
    unsigned grid;
} last_any;

static void record_launch(CUfunction fn, unsigned grid, void **params)
{
    const char *name = ((struct fake_function *)fn)->name;
    pthread_mutex_lock(&launch_lock);
    snprintf(last_any.name, sizeof(last_any.name), "%s", name);
    last_any.grid = grid;
    pthread_mutex_unlock(&launch_lock);
    if (params == NULL || params[0] == NULL ||
        (strcmp(name, "p2pt_batch_copy_dev") != 0 && strcmp(name, "p2pt_batch_copy_marks") != 0))
        return;
    pthread_mutex_lock(&launch_lock);
    snprintf(last_launch.name, sizeof(last_launch.name), "%s", name);
    last_launch.grid = grid;
    memcpy(last_launch.head, params[0], LAUNCH_HEAD);
    pthread_mutex_unlock(&launch_lock);
}

/* The last device batch launch: its entry's name (empty: none yet), grid
 * and the first `n` bytes (at most 64) of its parameters. */
EXPORT void p2pt_fake_last_batch_launch(char *name, size_t name_n, unsigned *grid, void *head,
                                        size_t n);
EXPORT void p2pt_fake_last_batch_launch(char *name, size_t name_n, unsigned *grid, void *head,
                                        size_t n)
{
    pthread_mutex_lock(&launch_lock);
    snprintf(name, name_n, "%s", last_launch.name);
    *grid = last_launch.grid;
    memcpy(head, last_launch.head, n < LAUNCH_HEAD ? n : LAUNCH_HEAD);
    pthread_mutex_unlock(&launch_lock);
}

/* The last launch of any kernel: its entry's name (empty: none yet) and
 * grid. */
EXPORT void p2pt_fake_last_launch(char *name, size_t name_n, unsigned *grid);
EXPORT void p2pt_fake_last_launch(char *name, size_t name_n, unsigned *grid)
{
    pthread_mutex_lock(&launch_lock);
    snprintf(name, name_n, "%s", last_any.name);
    *grid = last_any.grid;
    pthread_mutex_unlock(&launch_lock);
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
    record_launch(fn, gx, params);
    return CUDA_SUCCESS;
}

static CUresult fake_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction fn, void **params,
                                      void **extra)
{
    FAULT("cuLaunchKernelEx");
    (void)extra;
    if (c == NULL || fn == NULL || params == NULL || c->gridDimX == 0 || c->blockDimX == 0)
        return CUDA_ERROR_INVALID_VALUE;
    record_launch(fn, c->gridDimX, params);
    return CUDA_SUCCESS;
}

/* Events are kept in a list (one destroyed is unlinked): an event the
 * library could not destroy is the fake's to free at exit, not a leak. */
static CUresult fake_cuEventCreate(CUevent *e, unsigned flags)
{
    FAULT("cuEventCreate");
    (void)flags;
    struct fake_event *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    ev->next = events;
    events = ev;
    pthread_mutex_unlock(&lock);
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

static CUresult fake_cuEventDestroy(CUevent e)
{
    FAULT("cuEventDestroy");
    pthread_mutex_lock(&lock);
    for (struct fake_event **at = &events; *at != NULL; at = &(*at)->next)
        if (*at == (struct fake_event *)e) {
            *at = (*at)->next;
            pthread_mutex_unlock(&lock);
            free(e);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_HANDLE;
}

/* Work "queued" behind a gate: while held, event queries say not ready and
 * synchronizing an event waits until the test lets go (the tests' stand-in
 * for a kernel still running when a window closes). */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int holding;
static unsigned long waiting_on_hold;

EXPORT void p2pt_fake_hold_events(int on);
EXPORT void p2pt_fake_hold_events(int on)
{
    pthread_mutex_lock(&hold_lock);
    holding = on;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

/* Calls blocked behind the hold right now. */
EXPORT unsigned long p2pt_fake_held_waiters(void);
EXPORT unsigned long p2pt_fake_held_waiters(void)
{
    pthread_mutex_lock(&hold_lock);
    unsigned long n = waiting_on_hold;
    pthread_mutex_unlock(&hold_lock);
    return n;
}

static void wait_for_hold(void)
{
    pthread_mutex_lock(&hold_lock);
    waiting_on_hold++;
    while (holding)
        pthread_cond_wait(&hold_cond, &hold_lock);
    waiting_on_hold--;
    pthread_mutex_unlock(&hold_lock);
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
    pthread_mutex_lock(&hold_lock);
    int held = holding;
    pthread_mutex_unlock(&hold_lock);
    return e == NULL ? CUDA_ERROR_INVALID_HANDLE : held ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

static CUresult fake_cuEventSynchronize(CUevent e)
{
    FAULT("cuEventSynchronize");
    if (e == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    wait_for_hold();
    return CUDA_SUCCESS;
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


/* ------------------------------------------------ memory shared between processes */

static int current_device(void)
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

static CUresult fake_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    FAULT("cuMemGetAddressRange");
    READY();
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    struct fake_map *m = f != NULL && f->kind == A_RESERVE ? find_map(p) : NULL;
    CUresult r = CUDA_SUCCESS;
    if (m != NULL) {
        /* A VMM address: the extent of its one mapping. */
        *base = m->at;
        *size = m->size;
    } else if (f != NULL && f->kind != A_RESERVE && f->kind != A_HEAP) {
        *base = (CUdeviceptr)(uintptr_t)f->base;
        *size = f->size;
    } else {
        r = CUDA_ERROR_NOT_FOUND;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* A legacy handle: this process's pid, the memfd's number, the size and
 * device of the allocation. */
struct fake_ipc {
    char magic[8];
    long pid, fd;
    size_t size;
    int device;
};

static CUresult fake_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    FAULT("cuIpcGetMemHandle");
    READY();
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    int ok = f != NULL && f->kind == A_MEMFD && !f->opened && (uintptr_t)f->base == p;
    struct fake_ipc ipc;
    memset(&ipc, 0, sizeof(ipc)); /* its padding crosses to the other process too */
    memcpy(ipc.magic, "FAKEIPC", 8);
    ipc.pid = (long)getpid();
    ipc.fd = ok ? f->fd : -1;
    ipc.size = ok ? f->size : 0;
    ipc.device = ok ? f->device : -1;
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, &ipc, sizeof(ipc));
    return CUDA_SUCCESS;
}

static int is_ipc(enum alloc_kind k) { return k == A_IPC; }

static CUresult fake_cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    FAULT("cuIpcOpenMemHandle");
    READY();
    struct fake_ipc ipc;
    memcpy(&ipc, h.reserved, sizeof(ipc));
    if (current() == NULL)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || memcmp(ipc.magic, "FAKEIPC", 8) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ipc.pid == (long)getpid()) {
        /* A handle of this very process (the fake has one process where a
         * test needs two): memory of its own, not shared with the exported
         * allocation, known as the opening context's device's and mapped
         * for it alone. */
        void *own = NULL;
        CUresult r = alloc(&own, ipc.size, current_device());
        if (r != CUDA_SUCCESS)
            return r;
        pthread_mutex_lock(&lock);
        find_alloc((uintptr_t)own)->opened = 1;
        pthread_mutex_unlock(&lock);
        *p = (CUdeviceptr)(uintptr_t)own;
        return CUDA_SUCCESS;
    }
    const char *mapped = getenv("P2PT_FAKE_IPC_ALREADY_MAPPED");
    if (mapped != NULL && strcmp(mapped, "1") == 0)
        return CUDA_ERROR_ALREADY_MAPPED;
    pthread_mutex_lock(&lock);
    for (struct fake_alloc *a = allocs; a != NULL; a = a->next)
        if (a->kind == A_IPC && a->ipc_pid == ipc.pid && a->ipc_fd == ipc.fd &&
            a->device == current_device()) {
            /* Opened before in this context: counted, the same pointer. */
            a->refs++;
            *p = (CUdeviceptr)(uintptr_t)a->base;
            pthread_mutex_unlock(&lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&lock);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/fd/%ld", ipc.pid, ipc.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_HANDLE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    void *base = a == NULL ? MAP_FAILED
                           : mmap(NULL, pages(ipc.size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        free(a);
        return CUDA_ERROR_MAP_FAILED;
    }
    /* As the real driver maps it: the opening context's, for its device
     * alone, peer access or not. */
    a->kind = A_IPC;
    a->base = base;
    a->size = ipc.size;
    a->map_len = pages(ipc.size);
    a->fd = fd;
    a->device = current_device();
    a->opened = 1;
    a->access = 1u << current_device();
    a->refs = 1;
    a->ipc_pid = ipc.pid;
    a->ipc_fd = ipc.fd;
    add_alloc(a);
    *p = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
}

static int is_opened_here(enum alloc_kind k) { return k == A_MEMFD || k == A_HEAP; }

static CUresult fake_cuIpcCloseMemHandle(CUdeviceptr p)
{
    FAULT("cuIpcCloseMemHandle");
    READY();
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    if (f != NULL && f->opened && f->kind != A_IPC && (uintptr_t)f->base == p) {
        pthread_mutex_unlock(&lock);
        struct fake_alloc *a = unlink_alloc((void *)(uintptr_t)p, is_opened_here);
        if (a != NULL) {
            unmap_alloc(a);
            free(a);
        }
        return CUDA_SUCCESS;
    }
    int last = f != NULL && f->kind == A_IPC && --f->refs == 0;
    int ok = f != NULL && f->kind == A_IPC;
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    if (last) {
        struct fake_alloc *a = unlink_alloc((void *)(uintptr_t)p, is_ipc);
        if (a != NULL) {
            unmap_alloc(a);
            free(a);
        }
    }
    return CUDA_SUCCESS;
}

#define FAKE_GRANULARITY ((size_t)2 << 20)

static CUresult fake_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    FAULT("cuMemGetAllocationGranularity");
    (void)prop, (void)option;
    *g = FAKE_GRANULARITY;
    return CUDA_SUCCESS;
}

static void phys_put(struct fake_phys *ph)
{
    /* lock held */
    if (--ph->refs > 0)
        return;
    for (struct fake_phys **at = &physs; *at != NULL; at = &(*at)->next)
        if (*at == ph) {
            *at = ph->next;
            break;
        }
    close(ph->fd);
    free(ph);
}

static struct fake_phys *phys_of(CUmemGenericAllocationHandle h)
{
    for (struct fake_phys *ph = physs; ph != NULL; ph = ph->next)
        if ((CUmemGenericAllocationHandle)(uintptr_t)ph == h)
            return ph;
    return NULL;
}

static CUresult add_phys(int fd, size_t size, int device, unsigned types,
                         CUmemGenericAllocationHandle *h)
{
    struct fake_phys *ph = calloc(1, sizeof(*ph));
    if (ph == NULL) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ph->fd = fd;
    ph->size = size;
    ph->device = device;
    ph->types = types;
    ph->refs = 1;
    pthread_mutex_lock(&lock);
    ph->next = physs;
    physs = ph;
    pthread_mutex_unlock(&lock);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    FAULT("cuMemCreate");
    READY();
    if (prop == NULL || flags != 0 || size == 0 || size % FAKE_GRANULARITY != 0 ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
        prop->location.id >= N_DEV)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = make_memfd(size, prop->location.id, (unsigned)prop->requestedHandleTypes);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return add_phys(fd, size, prop->location.id, (unsigned)prop->requestedHandleTypes, h);
}

static CUresult fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
    FAULT("cuMemRelease");
    pthread_mutex_lock(&lock);
    struct fake_phys *ph = phys_of(h);
    if (ph != NULL)
        phys_put(ph);
    pthread_mutex_unlock(&lock);
    return ph != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
                                         CUdeviceptr addr, unsigned long long flags)
{
    FAULT("cuMemAddressReserve");
    READY();
    (void)addr;
    if (size == 0 || size % FAKE_GRANULARITY != 0 || flags != 0 || (align & (align - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *base = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->kind = A_RESERVE;
    a->base = base;
    a->size = a->map_len = size;
    a->fd = -1;
    a->device = -3;
    add_alloc(a);
    *p = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
}

static int is_reserve(enum alloc_kind k) { return k == A_RESERVE; }

static CUresult fake_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    FAULT("cuMemAddressFree");
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    int ok = f != NULL && f->kind == A_RESERVE && (uintptr_t)f->base == p && f->size == size;
    for (struct fake_map *m = maps; ok && m != NULL; m = m->next)
        if (m->at >= p && m->at < p + size)
            ok = 0; /* still mapped */
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc *a = unlink_alloc((void *)(uintptr_t)p, is_reserve);
    if (a != NULL) {
        unmap_alloc(a);
        free(a);
    }
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemMap(CUdeviceptr p, size_t size, size_t offset,
                              CUmemGenericAllocationHandle h, unsigned long long flags)
{
    FAULT("cuMemMap");
    READY();
    if (offset != 0 || flags != 0 || size == 0 || size % FAKE_GRANULARITY != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_map *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    struct fake_phys *ph = phys_of(h);
    struct fake_alloc *f = find_alloc(p);
    int ok = ph != NULL && size <= ph->size && f != NULL && f->kind == A_RESERVE &&
             p + size <= (uintptr_t)f->base + f->size;
    for (struct fake_map *o = maps; ok && o != NULL; o = o->next)
        if (p < o->at + o->size && o->at < p + size)
            ok = 0;
    if (ok && mmap((void *)(uintptr_t)p, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                   ph->fd, 0) == MAP_FAILED)
        ok = 0;
    if (ok) {
        m->at = p;
        m->size = size;
        m->phys = ph;
        ph->refs++;
        m->next = maps;
        maps = m;
    }
    pthread_mutex_unlock(&lock);
    if (!ok)
        free(m);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemUnmap(CUdeviceptr p, size_t size)
{
    FAULT("cuMemUnmap");
    int n = 0;
    pthread_mutex_lock(&lock);
    for (struct fake_map **at = &maps; *at != NULL;) {
        struct fake_map *m = *at;
        if (m->at >= p && m->at + m->size <= p + size) {
            *at = m->next;
            /* The range stays reserved: inaccessible, as before the map. */
            mmap((void *)(uintptr_t)m->at, m->size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
            phys_put(m->phys);
            free(m);
            n++;
        } else {
            at = &m->next;
        }
    }
    pthread_mutex_unlock(&lock);
    return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
    FAULT("cuMemSetAccess");
    if (desc == NULL || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int n = 0;
    pthread_mutex_lock(&lock);
    for (struct fake_map *m = maps; m != NULL; m = m->next) {
        if (m->at < p || m->at + m->size > p + size)
            continue;
        n++;
        for (size_t i = 0; i < count; i++) {
            if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
                desc[i].location.id >= N_DEV)
                continue;
            if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
                m->access &= ~(1u << desc[i].location.id);
            else
                m->access |= 1u << desc[i].location.id;
        }
    }
    pthread_mutex_unlock(&lock);
    return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    FAULT("cuMemRetainAllocationHandle");
    pthread_mutex_lock(&lock);
    struct fake_map *m = find_map((uintptr_t)addr);
    if (m != NULL) {
        m->phys->refs++;
        *h = (CUmemGenericAllocationHandle)(uintptr_t)m->phys;
    }
    pthread_mutex_unlock(&lock);
    return m != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle h)
{
    FAULT("cuMemGetAllocationPropertiesFromHandle");
    pthread_mutex_lock(&lock);
    struct fake_phys *ph = phys_of(h);
    if (ph != NULL) {
        memset(prop, 0, sizeof(*prop));
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = ph->device;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)ph->types;
    }
    pthread_mutex_unlock(&lock);
    return ph != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags)
{
    FAULT("cuMemExportToShareableHandle");
    pthread_mutex_lock(&lock);
    struct fake_phys *ph = phys_of(h);
    int fd = ph != NULL && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
                     (ph->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && flags == 0
                 ? fcntl(ph->fd, F_DUPFD_CLOEXEC, 0)
                 : -1;
    pthread_mutex_unlock(&lock);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                    CUmemAllocationHandleType type)
{
    FAULT("cuMemImportFromShareableHandle");
    int fd = (int)(intptr_t)os, device = -1;
    unsigned types = 0;
    struct stat sb;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &sb) != 0 ||
        memfd_origin(fd, &device, &types) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return add_phys(own, (size_t)sb.st_size, device, types, h);
}

/* ---- pools */

static struct fake_pool *new_pool(int device, unsigned types, size_t size)
{
    struct fake_pool *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return NULL;
    pl->fd = make_memfd(size, device, types);
    pl->size = size;
    pl->device = device;
    pl->types = types;
    pl->access = 1u << device;
    pl->base = pl->fd < 0 ? MAP_FAILED
                          : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, pl->fd, 0);
    if (pl->base == MAP_FAILED) {
        if (pl->fd >= 0)
            close(pl->fd);
        free(pl);
        return NULL;
    }
    pl->next = pools;
    pools = pl;
    return pl;
}

#define FAKE_POOL_BYTES ((size_t)256 << 20)

static CUresult fake_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    FAULT("cuMemPoolCreate");
    READY();
    if (props == NULL || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        props->location.id < 0 || props->location.id >= N_DEV)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = new_pool(props->location.id, (unsigned)props->handleTypes,
                                    FAKE_POOL_BYTES);
    pthread_mutex_unlock(&lock);
    *pool = (CUmemoryPool)pl;
    return pl != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult fake_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
    FAULT("cuDeviceGetDefaultMemPool");
    READY();
    if (d < 0 || d >= N_DEV)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (default_pool[d] == NULL)
        default_pool[d] = new_pool(d, 0, FAKE_POOL_BYTES);
    *pool = (CUmemoryPool)default_pool[d];
    pthread_mutex_unlock(&lock);
    return *pool != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static struct fake_pool *pool_of(CUmemoryPool p)
{
    for (struct fake_pool *pl = pools; pl != NULL; pl = pl->next)
        if ((CUmemoryPool)pl == p)
            return pl;
    return NULL;
}

static CUresult fake_cuMemPoolDestroy(CUmemoryPool pool)
{
    FAULT("cuMemPoolDestroy");
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = pool_of(pool);
    int busy = 0;
    for (struct fake_alloc *a = allocs; pl != NULL && a != NULL; a = a->next)
        busy |= a->pool == pl;
    if (pl != NULL && !busy) {
        for (struct fake_pool **at = &pools; *at != NULL; at = &(*at)->next)
            if (*at == pl) {
                *at = pl->next;
                break;
            }
        for (int d = 0; d < N_DEV; d++)
            if (default_pool[d] == pl)
                default_pool[d] = NULL;
        if (pl->base != NULL)
            munmap(pl->base, pl->size);
        close(pl->fd);
        free(pl);
    }
    pthread_mutex_unlock(&lock);
    return pl != NULL && !busy ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t bytes, CUmemoryPool pool,
                                             CUstream s)
{
    FAULT("cuMemAllocFromPoolAsync");
    (void)s;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = pool_of(pool);
    size_t at = pl != NULL ? pages(pl->used) : 0;
    int ok = pl != NULL && pl->base != NULL && bytes > 0 && at + bytes <= pl->size;
    if (ok)
        pl->used = at + bytes;
    pthread_mutex_unlock(&lock);
    if (!ok) {
        free(a);
        return pl == NULL || bytes == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->kind = A_POOL;
    a->base = pl->base + at;
    a->size = bytes;
    a->fd = -1;
    a->device = pl->device;
    a->pool = pl;
    add_alloc(a);
    *p = (CUdeviceptr)(uintptr_t)a->base;
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    FAULT("cuMemFreeAsync");
    (void)s;
    return release((void *)(uintptr_t)p);
}

static CUresult fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *desc,
                                        size_t count)
{
    FAULT("cuMemPoolSetAccess");
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = pool_of(pool);
    for (size_t i = 0; pl != NULL && i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
            desc[i].location.id >= N_DEV)
            continue;
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE)
            pl->access &= ~(1u << desc[i].location.id);
        else
            pl->access |= 1u << desc[i].location.id;
        /* What is already imported from it follows. */
        for (struct fake_alloc *a = allocs; a != NULL; a = a->next)
            if (a->pool == pl && a->kind == A_POOL_IMPORT)
                a->access = pl->access;
    }
    pthread_mutex_unlock(&lock);
    return pl != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult fake_cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool,
                                                      CUmemAllocationHandleType type,
                                                      unsigned long long flags)
{
    FAULT("cuMemPoolExportToShareableHandle");
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = pool_of(pool);
    int fd = pl != NULL && pl->base != NULL && type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
                     (pl->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && flags == 0
                 ? fcntl(pl->fd, F_DUPFD_CLOEXEC, 0)
                 : -1;
    pthread_mutex_unlock(&lock);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

struct fake_pool_ptr {
    char magic[8];
    size_t offset, size;
};

static CUresult fake_cuMemPoolExportPointer(CUmemPoolPtrExportData *data, CUdeviceptr p)
{
    FAULT("cuMemPoolExportPointer");
    pthread_mutex_lock(&lock);
    struct fake_alloc *f = find_alloc(p);
    int ok = f != NULL && f->kind == A_POOL && (uintptr_t)f->base == p;
    struct fake_pool_ptr e;
    memset(&e, 0, sizeof(e));
    memcpy(e.magic, "FAKEPTR", 8);
    e.offset = ok ? (size_t)((char *)f->base - f->pool->base) : 0;
    e.size = ok ? f->size : 0;
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    memset(data, 0, sizeof(*data));
    memcpy(data->reserved, &e, sizeof(e));
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *os,
                                                        CUmemAllocationHandleType type,
                                                        unsigned long long flags)
{
    FAULT("cuMemPoolImportFromShareableHandle");
    int fd = (int)(intptr_t)os, device = -1;
    unsigned types = 0;
    struct stat sb;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0 || fstat(fd, &sb) != 0 ||
        memfd_origin(fd, &device, &types) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_pool *pl = calloc(1, sizeof(*pl));
    if (pl == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pl->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (pl->fd < 0) {
        free(pl);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pl->size = (size_t)sb.st_size;
    pl->device = device;
    pl->types = types;
    pthread_mutex_lock(&lock);
    pl->next = pools;
    pools = pl;
    pthread_mutex_unlock(&lock);
    *pool = (CUmemoryPool)pl;
    return CUDA_SUCCESS;
}

static CUresult fake_cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool,
                                            CUmemPoolPtrExportData *data)
{
    FAULT("cuMemPoolImportPointer");
    struct fake_pool_ptr e;
    memcpy(&e, data->reserved, sizeof(e));
    pthread_mutex_lock(&lock);
    struct fake_pool *pl = pool_of(pool);
    int ok = pl != NULL && memcmp(e.magic, "FAKEPTR", 8) == 0 && e.size > 0 &&
             e.offset + e.size <= pl->size;
    int fd = ok ? pl->fd : -1;
    pthread_mutex_unlock(&lock);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_alloc *a = calloc(1, sizeof(*a));
    void *base = a == NULL ? MAP_FAILED
                           : mmap(NULL, pages(e.size), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                                  (off_t)e.offset);
    if (base == MAP_FAILED) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->kind = A_POOL_IMPORT;
    a->base = base;
    a->size = e.size;
    a->map_len = pages(e.size);
    a->fd = -1;
    a->device = pl->device;
    a->pool = pl;
    a->access = pl->access;
    add_alloc(a);
    *p = (CUdeviceptr)(uintptr_t)base;
    return CUDA_SUCCESS;
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
    ENTRY(cuDeviceGetUuid),
    ENTRY(cuMemGetAddressRange),
    ENTRY(cuIpcGetMemHandle),
    ENTRY(cuIpcOpenMemHandle),
    ENTRY(cuIpcCloseMemHandle),
    ENTRY(cuMemGetAllocationGranularity),
    ENTRY(cuMemCreate),
    ENTRY(cuMemRelease),
    ENTRY(cuMemAddressReserve),
    ENTRY(cuMemAddressFree),
    ENTRY(cuMemMap),
    ENTRY(cuMemUnmap),
    ENTRY(cuMemSetAccess),
    ENTRY(cuMemRetainAllocationHandle),
    ENTRY(cuMemGetAllocationPropertiesFromHandle),
    ENTRY(cuMemExportToShareableHandle),
    ENTRY(cuMemImportFromShareableHandle),
    ENTRY(cuMemPoolCreate),
    ENTRY(cuMemPoolDestroy),
    ENTRY(cuDeviceGetDefaultMemPool),
    ENTRY(cuMemAllocFromPoolAsync),
    ENTRY(cuMemFreeAsync),
    ENTRY(cuMemPoolSetAccess),
    ENTRY(cuMemPoolExportToShareableHandle),
    ENTRY(cuMemPoolExportPointer),
    ENTRY(cuMemPoolImportFromShareableHandle),
    ENTRY(cuMemPoolImportPointer),
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
