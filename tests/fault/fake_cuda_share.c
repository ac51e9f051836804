/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fake driver's memory shared between processes (fake_cuda.c says what
 * the driver is): a legacy IPC handle names its owner's pid and memfd and
 * opens through /proc/<pid>/fd, mapped for the device whose context opened
 * it; a VMM allocation is a memfd whose exported descriptor is a real one,
 * mapped into reserved address ranges.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"

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
    int fd = ph != NULL ? export_dup(ph->fd, ph->types, type, flags) : -1;
    pthread_mutex_unlock(&lock);
    return export_give(fd, out);
}

static CUresult fake_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                    CUmemAllocationHandleType type)
{
    FAULT("cuMemImportFromShareableHandle");
    int own = -1, device = -1;
    unsigned types = 0;
    size_t size = 0;
    CUresult r = import_memfd(os, type, &own, &size, &device, &types);
    return r != CUDA_SUCCESS ? r : add_phys(own, size, device, types, h);
}

const struct fake_entry fake_share_entries[] = {
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
    ENTRIES_END,
};
