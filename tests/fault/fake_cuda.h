/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of the fake driver share (fake_cuda.c says what the driver
 * is): its records, its state behind one lock, the fault hook that every
 * entry calls first, and each file's table of entries, which
 * cuGetProcAddress_v2 searches. Nothing here is exported: the library is
 * built with hidden visibility, and only EXPORT names leave it.
 *
 *   fake_cuda.c         devices, contexts, streams, graphs; the entry lookup
 *   fake_cuda_memory.c  allocations, copies, pointer attributes
 *   fake_cuda_launch.c  modules, launches, events and the tests' event gate
 *   fake_cuda_share.c   legacy IPC handles and VMM allocations
 *   fake_cuda_pools.c   memory pools, their export and import
 */
#ifndef P2PT_FAKE_CUDA_H
#define P2PT_FAKE_CUDA_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define N_DEV 2

/* The schedule's code for this call of entry `name` (0: run it). One
 * schedule for the whole driver: fault_plan.h's state lives in fake_cuda.c
 * alone. */
int fake_fault_hit(const char *name);

/* A kernel named p2pt_test_fault "faults" when launched: from then on every
 * entry but the error-name ones returns CUDA_ERROR_ILLEGAL_ADDRESS, as a
 * real context does after an out-of-bounds write (a sticky error). */
extern _Atomic int sticky;

#define FAULT(name)                                                            \
    do {                                                                       \
        int fault_code_ = fake_fault_hit(name);                                \
        if (fault_code_ != 0)                                                  \
            return (CUresult)fault_code_;                                      \
        if (sticky != 0 && strncmp(name, "cuGetError", 10) != 0)               \
            return (CUresult)sticky;                                           \
    } while (0)

extern int initialized;

#define READY()                                                                \
    do {                                                                       \
        if (!initialized)                                                      \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
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

/* The driver's state; `lock` guards the lists and the peer table. */
extern pthread_mutex_t lock;
extern struct fake_ctx primary[N_DEV];
extern int peer_enabled[N_DEV][N_DEV];
extern struct fake_alloc *allocs;
extern struct fake_phys *physs;
extern struct fake_map *maps;
extern struct fake_pool *pools;
extern struct fake_pool *default_pool[N_DEV];
extern struct fake_event *events;
extern struct fake_module *modules;
extern unsigned long long next_buffer_id;

/* This thread's current context, and its device (-1: none). */
CUcontext current(void);
int current_device(void);

/* fake_cuda_memory.c: the allocation holding `p` (lock held); give back what
 * an allocation holds (not the record); record one, filled but for its id;
 * whole pages; a memfd whose name says its device and handle types, and
 * that name read back from another process's memfd; the VMM mapping
 * holding `p` (lock held); a copy between memory a copy engine reaches;
 * device memory (`device` >= 0, a memfd) or pinned host memory (-1), and
 * its release. */
struct fake_alloc *find_alloc(uintptr_t p);
void unmap_alloc(struct fake_alloc *a);
void add_alloc(struct fake_alloc *a);
struct fake_alloc *unlink_alloc(void *p, int (*ok)(enum alloc_kind));
size_t pages(size_t bytes);
int make_memfd(size_t bytes, int device, unsigned types);
int memfd_origin(int fd, int *device, unsigned *types);
int export_dup(int fd, unsigned types, CUmemAllocationHandleType type, unsigned long long flags);
CUresult export_give(int fd, void *out);
CUresult import_memfd(void *os, CUmemAllocationHandleType type, int *own, size_t *size,
                      int *device, unsigned *types);
struct fake_map *find_map(uintptr_t p);
CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult alloc(void **p, size_t bytes, int device);
CUresult release(void *p);

/* fake_cuda_launch.c: wait while the tests hold the event gate. */
void wait_for_hold(void);

/* The batched copies of a CUDA 12.8 driver (fake_cuda_memory.c), which
 * cuGetProcAddress_v2 hands out by version. */
CUresult fake_cuMemcpyBatchAsync_v12080(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                        size_t count, CUmemcpyAttributes *attrs,
                                        size_t *attr_idxs, size_t num_attrs, size_t *fail_idx,
                                        CUstream s);
CUresult fake_cuMemcpy3DBatchAsync_v12080(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
                                          size_t *fail_idx, unsigned long long flags,
                                          CUstream s);

/* A file's entries by their driver names. */
struct fake_entry {
    const char *name;
    void *fn;
};
#define ENTRY(name) {#name, (void *)fake_##name}
#define ENTRIES_END {NULL, NULL}

extern const struct fake_entry fake_memory_entries[];
extern const struct fake_entry fake_launch_entries[];
extern const struct fake_entry fake_share_entries[];
extern const struct fake_entry fake_pools_entries[];

#endif /* P2PT_FAKE_CUDA_H */
