/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake driver's memory (fake_cuda.c says what the driver is): device
 * allocations are memfds mapped MAP_SHARED (a legacy IPC handle opens them in
 * another process), pinned host memory is the heap, and a copy of any kind
 * is memcpy between memory that a copy engine reaches; pointer attributes
 * know what the fake made, and read any other address as pageable memory,
 * as the real driver does.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_cuda.h"

struct fake_alloc *find_alloc(uintptr_t p)
{
    for (struct fake_alloc *a = allocs; a != NULL; a = a->next)
        if (p >= (uintptr_t)a->base && p < (uintptr_t)a->base + a->size)
            return a;
    return NULL;
}

/* Give back what an allocation holds (not the record itself). */
void unmap_alloc(struct fake_alloc *a)
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

size_t pages(size_t bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg;
}

/* A memfd of `bytes` whose name says its device and handle types. */
int make_memfd(size_t bytes, int device, unsigned types)
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
int memfd_origin(int fd, int *device, unsigned *types)
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

/* Under the lock: a duplicate of memfd `fd` for an export of `type` with
 * `flags` of memory made for handle `types`; -1 where none may be had. */
int export_dup(int fd, unsigned types, CUmemAllocationHandleType type, unsigned long long flags)
{
    return type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
                   (types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) && flags == 0
               ? fcntl(fd, F_DUPFD_CLOEXEC, 0)
               : -1;
}

/* An export's end: the descriptor export_dup gave, into *out. */
CUresult export_give(int fd, void *out)
{
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

/* The descriptor `os` given to an import of `type`: a duplicate of its
 * own in *own, and the memfd's size, device and handle types. */
CUresult import_memfd(void *os, CUmemAllocationHandleType type, int *own, size_t *size,
                      int *device, unsigned *types)
{
    int fd = (int)(intptr_t)os;
    struct stat sb;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &sb) != 0 ||
        memfd_origin(fd, device, types) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (*own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *size = (size_t)sb.st_size;
    return CUDA_SUCCESS;
}

/* Record `a` (filled but for its id) as an allocation. */
void add_alloc(struct fake_alloc *a)
{
    pthread_mutex_lock(&lock);
    a->buffer_id = next_buffer_id++;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&lock);
}

CUresult alloc(void **p, size_t bytes, int device)
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
struct fake_alloc *unlink_alloc(void *p, int (*ok)(enum alloc_kind))
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

CUresult release(void *p)
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
CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
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

CUresult fake_cuMemcpy3DBatchAsync_v12080(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
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

CUresult fake_cuMemcpyBatchAsync_v12080(CUdeviceptr *dsts, CUdeviceptr *srcs,
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
struct fake_map *find_map(uintptr_t p)
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

static CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t bytes,
                                       CUstream s)
{
    FAULT("cuMemcpyHtoDAsync");
    (void)s;
    return copy(dst, (CUdeviceptr)(uintptr_t)src, bytes);
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

const struct fake_entry fake_memory_entries[] = {
    ENTRY(cuMemAlloc),
    ENTRY(cuMemFree),
    ENTRY(cuMemAllocHost),
    ENTRY(cuMemHostAlloc),
    ENTRY(cuMemFreeHost),
    ENTRY(cuMemGetInfo),
    ENTRY(cuMemcpyAsync),
    ENTRY(cuMemcpyHtoD),
    ENTRY(cuMemcpyDtoH),
    ENTRY(cuMemsetD8),
    ENTRY(cuMemcpy2DAsync),
    ENTRY(cuMemcpy3DBatchAsync),
    ENTRY(cuMemcpyBatchAsync),
    ENTRY(cuPointerGetAttribute),
    ENTRY(cuPointerGetAttributes),
    ENTRY(cuMemcpyHtoDAsync),
    ENTRY(cuMemGetAddressRange),
    ENTRIES_END,
};
