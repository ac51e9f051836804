/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake driver's memory pools (fake_cuda.c says what the driver is): a
 * pool is a memfd arena, bump-allocated; its descriptor and a pointer's
 * export data (the arena's offset) import in another process.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

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
    int fd = pl != NULL && pl->base != NULL ? export_dup(pl->fd, pl->types, type, flags) : -1;
    pthread_mutex_unlock(&lock);
    return export_give(fd, out);
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
    int own = -1, device = -1;
    unsigned types = 0;
    size_t size = 0;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = import_memfd(os, type, &own, &size, &device, &types);
    if (r != CUDA_SUCCESS)
        return r;
    struct fake_pool *pl = calloc(1, sizeof(*pl));
    if (pl == NULL) {
        close(own);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pl->fd = own;
    pl->size = size;
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

const struct fake_entry fake_pools_entries[] = {
    ENTRY(cuMemPoolCreate),
    ENTRY(cuDeviceGetDefaultMemPool),
    ENTRY(cuMemPoolDestroy),
    ENTRY(cuMemAllocFromPoolAsync),
    ENTRY(cuMemFreeAsync),
    ENTRY(cuMemPoolSetAccess),
    ENTRY(cuMemPoolExportToShareableHandle),
    ENTRY(cuMemPoolExportPointer),
    ENTRY(cuMemPoolImportFromShareableHandle),
    ENTRY(cuMemPoolImportPointer),
    ENTRIES_END,
};
