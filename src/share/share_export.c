/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Exports: which kind of memory a range is, and its blobs. The driver is
 * asked what the memory is, never told: pool memory (a pool handle),
 * cuMemAlloc memory (legacy IPC capable), VMM memory (an allocation handle
 * behind each mapping), anything else refused with the reason. A range
 * inside a cuMemAlloc segment exports the segment and its offset, as
 * PyTorch's tensors are offsets in its caching allocator's segments. A VMM
 * range is walked mapping by mapping (cuMemGetAddressRange gives one
 * mapping's extent, cuMemRetainAllocationHandle the allocation behind it),
 * a blob and a descriptor each, so PyTorch's expandable segments, many
 * allocations side by side, cross whole.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver.h"
#include "handle.h"
#include "share.h"

struct p2pt_share_export {
    struct p2pt_share_export *next;
    struct p2pt_share_export *live_next; /* among every handle's (live) */
    uintptr_t base;
    size_t bytes;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];
    bool served; /* its descriptors are with the server */
    size_t n;
    p2pt_share_blob *blobs;
};

/* Every live export of this process, over all its handles, by token (an
 * import of this process's own blobs uses the memory where it is, so the
 * export must still stand). Taken after a handle's share lock, never
 * before. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct p2pt_share_export *live;

bool p2pt__share_export_live(const uint8_t token[P2PT_SHARE_TOKEN_BYTES])
{
    bool found = false;
    pthread_mutex_lock(&live_lock);
    for (const struct p2pt_share_export *e = live; e != NULL && !found; e = e->live_next)
        found = memcmp(e->token, token, P2PT_SHARE_TOKEN_BYTES) == 0;
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* What an export is being made of: the blob fields every piece shares,
 * then the pieces and their descriptors. */
struct making {
    struct p2pt_share_desc d;
    size_t n, cap;
    uint64_t *piece_offset, *piece_size;
    int *fds;
};

static void making_free(struct making *m)
{
    for (size_t i = 0; m->fds != NULL && i < m->n; i++)
        if (m->fds[i] >= 0)
            close(m->fds[i]);
    free(m->piece_offset);
    free(m->piece_size);
    free(m->fds);
}

static p2pt_status add_piece(struct making *m, uint64_t offset, uint64_t size, int fd)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        uint64_t *po = realloc(m->piece_offset, cap * sizeof(*po));
        if (po != NULL)
            m->piece_offset = po;
        uint64_t *ps = realloc(m->piece_size, cap * sizeof(*ps));
        if (ps != NULL)
            m->piece_size = ps;
        int *f = realloc(m->fds, cap * sizeof(*f));
        if (f != NULL)
            m->fds = f;
        if (po == NULL || ps == NULL || f == NULL) {
            if (fd >= 0)
                close(fd);
            return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        }
        m->cap = cap;
    }
    m->piece_offset[m->n] = offset;
    m->piece_size[m->n] = size;
    m->fds[m->n] = fd;
    m->n++;
    return P2PT_SUCCESS;
}

static p2pt_status needs(const void *entry, const char *name)
{
    return p2pt__share_needs(entry, "p2pt_share_export", name, "which sharing this memory needs");
}

/* The segment holding the range, [*start, *start + *size), which the range
 * must not run past. */
static p2pt_status segment(uintptr_t base, size_t bytes, CUdeviceptr *start, size_t *size)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(needs(p2pt__cu.cuMemGetAddressRange, "cuMemGetAddressRange"));
    P2PT_CU(p2pt__cu.cuMemGetAddressRange(start, size, (CUdeviceptr)base));
    if (base + bytes > *start + *size)
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_export: [%p, +%zu) runs past the end of its allocation "
                        "[%p, +%zu): export a range inside one allocation",
                        (void *)base, bytes, (void *)(uintptr_t)*start, *size);
out:
    return st;
}

/* cuMemAlloc memory: the segment as a legacy IPC handle. */
static p2pt_status legacy(struct making *m, uintptr_t base, size_t bytes, bool counting)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdeviceptr start = 0;
    size_t size = 0;
    P2PT_TRY(segment(base, bytes, &start, &size));
    if (!counting) {
        CUipcMemHandle ipc;
        P2PT_TRY(needs(p2pt__cu.cuIpcGetMemHandle, "cuIpcGetMemHandle"));
        CUresult r = p2pt__cu.cuIpcGetMemHandle(&ipc, start);
        if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
            st = p2pt__fail(P2PT_NOT_SUPPORTED,
                            "p2pt_share_export: cuIpcGetMemHandle refuses [%p, +%zu) (%s): "
                            "memory this process imported from another, or not a cuMemAlloc "
                            "allocation; only the process that allocated memory exports it",
                            (void *)base, bytes, p2pt__cuda_error_name(r));
            goto out;
        }
        P2PT_CU_RESULT(r, "p2pt__cu.cuIpcGetMemHandle(&ipc, start)");
        _Static_assert(sizeof(ipc) == P2PT_SHARE_PAYLOAD_BYTES,
                       "a legacy handle fills the payload");
        memcpy(m->d.payload, &ipc, sizeof(ipc));
    }
    m->d.kind = P2PT_SHARE_LEGACY;
    m->d.span = size;
    m->d.offset = base - start;
    m->d.exporter_va = start;
    P2PT_TRY(add_piece(m, 0, size, -1));
out:
    return st;
}

/* Pool memory: the pool's descriptor and the allocation's export data. */
static p2pt_status pool(struct making *m, uintptr_t base, size_t bytes, CUmemoryPool pool,
                        bool counting)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdeviceptr start = 0;
    size_t size = 0;
    int fd = -1;
    P2PT_TRY(segment(base, bytes, &start, &size));
    P2PT_TRY(needs(p2pt__cu.cuMemPoolExportToShareableHandle, "cuMemPoolExportToShareableHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemPoolExportPointer, "cuMemPoolExportPointer"));
    /* Asked even when counting: a pool without a shareable handle type is
     * refused before the caller makes room for blobs it cannot have. */
    CUresult r = p2pt__cu.cuMemPoolExportToShareableHandle(
        &fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: [%p, +%zu) is memory of a pool without a shareable "
                        "handle type (cuMemPoolExportToShareableHandle: %s), such as "
                        "cudaMallocAsync's default pool: allocate it from a pool created with "
                        "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                        (void *)base, bytes, p2pt__cuda_error_name(r));
        goto out;
    }
    P2PT_CU_RESULT(r, "p2pt__cu.cuMemPoolExportToShareableHandle(&fd, pool, "
                      "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)");
    if (!counting) {
        CUmemPoolPtrExportData data;
        P2PT_CU(p2pt__cu.cuMemPoolExportPointer(&data, start));
        _Static_assert(sizeof(data) == P2PT_SHARE_PAYLOAD_BYTES, "pool data fills the payload");
        memcpy(m->d.payload, &data, sizeof(data));
    }
    m->d.kind = P2PT_SHARE_POOL;
    m->d.span = size;
    m->d.offset = base - start;
    m->d.exporter_va = start;
    if (counting) {
        close(fd);
        fd = -1;
    }
    st = add_piece(m, 0, size, fd);
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return st;
}

/* One VMM mapping at `addr`: its extent, the allocation behind it, checked
 * and (unless counting) exported into *fd. */
static p2pt_status vmm_piece(uintptr_t addr, int device, bool first, bool counting,
                             CUdeviceptr *start, size_t *size, int *fd)
{
    p2pt_status st = P2PT_SUCCESS;
    CUmemGenericAllocationHandle hnd = 0;
    bool retained = false;
    CUmemAllocationProp prop;

    *fd = -1;
    CUresult r = p2pt__cu.cuMemRetainAllocationHandle(&hnd, (void *)addr);
    if (first && (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED)) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: %p is not cuMemAlloc, pool or VMM memory the driver "
                        "can share (cuMemRetainAllocationHandle: %s): memory imported from "
                        "another process cannot be exported again",
                        (void *)addr, p2pt__cuda_error_name(r));
        goto out;
    }
    P2PT_CU_RESULT(r, "p2pt__cu.cuMemRetainAllocationHandle(&hnd, (void *)addr)");
    retained = true;
    P2PT_CU(p2pt__cu.cuMemGetAddressRange(start, size, (CUdeviceptr)addr));
    memset(&prop, 0, sizeof(prop));
    P2PT_CU(p2pt__cu.cuMemGetAllocationPropertiesFromHandle(&prop, hnd));
    if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: the VMM allocation mapped at %p was created without "
                        "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (its handle types: 0x%x): "
                        "create it with that type in requestedHandleTypes to share it",
                        (void *)addr, (unsigned)prop.requestedHandleTypes);
        goto out;
    }
    if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != device) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: the VMM allocation mapped at %p lives %s %d, not on "
                        "device %d with the start of the range: export each GPU's part alone",
                        (void *)addr,
                        prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? "on device"
                                                                          : "at location type",
                        prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                            ? prop.location.id
                            : (int)prop.location.type,
                        device);
        goto out;
    }
    if (!counting)
        P2PT_CU(p2pt__cu.cuMemExportToShareableHandle(
            fd, hnd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
out:
    if (retained) {
        CUresult rr = p2pt__cu.cuMemRelease(hnd);
        if (rr != CUDA_SUCCESS && st == P2PT_SUCCESS)
            st = p2pt__cuda_fail(rr, "p2pt__cu.cuMemRelease(hnd)", __FILE__, __LINE__);
    }
    if (st != P2PT_SUCCESS && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return st;
}

/* VMM memory: a blob per allocation mapped under the range. */
static p2pt_status vmm(struct making *m, uintptr_t base, size_t bytes, int device, bool counting)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(needs(p2pt__cu.cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemGetAddressRange, "cuMemGetAddressRange"));
    P2PT_TRY(needs(p2pt__cu.cuMemGetAllocationPropertiesFromHandle,
                   "cuMemGetAllocationPropertiesFromHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemExportToShareableHandle, "cuMemExportToShareableHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemRelease, "cuMemRelease"));
    uintptr_t addr = base, end = base + bytes, first = 0;
    while (addr < end) {
        CUdeviceptr start = 0;
        size_t size = 0;
        int fd = -1;
        if (m->n == P2PT_SHARE_MAX_PIECES) {
            st = p2pt__fail(P2PT_NOT_SUPPORTED,
                            "p2pt_share_export: [%p, +%zu) spans more than %d VMM allocations, "
                            "the most one export carries: export it in parts",
                            (void *)base, bytes, P2PT_SHARE_MAX_PIECES);
            goto out;
        }
        P2PT_TRY(vmm_piece(addr, device, m->n == 0, counting, &start, &size, &fd));
        if (m->n == 0)
            first = start;
        if (start > addr || size == 0 || start + size <= addr || (m->n > 0 && start != addr)) {
            if (fd >= 0)
                close(fd);
            st = p2pt__fail(P2PT_INTERNAL_ERROR,
                            "p2pt_share_export: the driver places the mapping at %p at [%p, "
                            "+%zu), which does not follow the one before it",
                            (void *)addr, (void *)(uintptr_t)start, size);
            goto out;
        }
        P2PT_TRY(add_piece(m, start - first, size, fd));
        addr = start + size;
    }
    m->d.kind = P2PT_SHARE_VMM;
    m->d.span = addr - first;
    m->d.offset = base - first;
    m->d.exporter_va = first;
out:
    return st;
}

/* What the memory at `base` is, and its blobs' fields: the caller has
 * entered `device`'s primary context. */
static p2pt_status make(struct making *m, uintptr_t base, size_t bytes, bool counting,
                        int device, unsigned long long legacy_ok, CUmemoryPool pool_handle)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdevice dev;
    CUuuid uuid;

    P2PT_CU(p2pt__cu.cuDeviceGet(&dev, device));
    P2PT_TRY(needs(p2pt__cu.cuDeviceGetUuid, "cuDeviceGetUuid"));
    P2PT_CU(p2pt__cu.cuDeviceGetUuid(&uuid, dev));
    memcpy(m->d.gpu_uuid, uuid.bytes, 16);
    if (pool_handle != NULL)
        P2PT_TRY(pool(m, base, bytes, pool_handle, counting));
    else if (legacy_ok)
        P2PT_TRY(legacy(m, base, bytes, counting));
    else
        P2PT_TRY(vmm(m, base, bytes, device, counting));
out:
    return st;
}

static struct p2pt_share_export *find(struct p2pt_share *sh, uintptr_t base)
{
    for (struct p2pt_share_export *e = sh->exports; e != NULL; e = e->next)
        if (e->base == base)
            return e;
    return NULL;
}

/* Whether `blobs` has room for the `n` blobs of the export of [base,
 * +bytes): *n_blobs becomes `n` when counting (blobs NULL) or refused, and
 * is left alone when there is room. */
static p2pt_status room(uintptr_t base, size_t bytes, size_t n, const p2pt_share_blob *blobs,
                        size_t *n_blobs)
{
    size_t cap = *n_blobs;
    if (blobs != NULL && cap >= n)
        return P2PT_SUCCESS;
    *n_blobs = n;
    if (blobs == NULL)
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "p2pt_share_export: the export of [%p, +%zu) needs %zu blobs and "
                      "*n_blobs gives room for %zu: pass %zu (a call with blobs NULL "
                      "counts them)",
                      (void *)base, bytes, n, cap, n);
}

/* Copy an export's blobs out, or say how many there are. */
static p2pt_status hand_out(const struct p2pt_share_export *e, p2pt_share_blob *blobs,
                            size_t *n_blobs)
{
    p2pt_status st = room(e->base, e->bytes, e->n, blobs, n_blobs);
    if (st != P2PT_SUCCESS || blobs == NULL)
        return st;
    memcpy(blobs, e->blobs, e->n * sizeof(*blobs));
    *n_blobs = e->n;
    return P2PT_SUCCESS;
}

/* A base exported already: the same range hands its blobs out again, a
 * different one is refused. */
static p2pt_status again(const struct p2pt_share_export *old, size_t bytes,
                         p2pt_share_blob *blobs, size_t *n_blobs)
{
    if (old->bytes != bytes)
        return p2pt__fail(P2PT_INVALID_USAGE,
                          "p2pt_share_export: %p is already exported with %zu bytes, not %zu: "
                          "unexport it first",
                          (void *)old->base, old->bytes, bytes);
    return hand_out(old, blobs, n_blobs);
}

/* Where the memory at `base` lives, and refusals that need no context. */
static p2pt_status locate(struct p2pt_share *sh, uintptr_t base, size_t bytes, unsigned *mem_type,
                          int *device, unsigned long long *legacy_ok, CUmemoryPool *pool_handle)
{
    p2pt_status st = P2PT_SUCCESS;
    unsigned long long managed = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                   CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE};
    void *data[] = {mem_type, device, &managed, legacy_ok, pool_handle};

    *mem_type = 0;
    *device = -1;
    *legacy_ok = 0;
    *pool_handle = NULL;
    uint32_t from = p2pt__share_imported_from(sh, base, bytes);
    if (from != 0)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "p2pt_share_export: [%p, +%zu) is memory this handle imported from "
                          "process %u: only the process that owns memory exports it",
                          (void *)base, bytes, from);
    P2PT_CU(p2pt__cu.cuPointerGetAttributes(P2PT_ARRAY_LEN(attrs), attrs, data,
                                            (CUdeviceptr)base));
    if (*mem_type == 0)
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: %p is not memory CUDA knows (pageable host memory, "
                        "or an address never allocated): p2pt shares device memory",
                        (void *)base);
    else if (managed != 0)
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: %p is managed memory (cuMemAllocManaged), which has "
                        "no handle another process can open",
                        (void *)base);
    else if (*mem_type == CU_MEMORYTYPE_HOST)
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: %p is pinned host memory: p2pt shares device memory "
                        "(each process maps its own host memory for its GPU)",
                        (void *)base);
    else if (*mem_type != CU_MEMORYTYPE_DEVICE)
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_export: %p is memory of type %u, not device memory", (void *)base,
                        *mem_type);
    else if (*device < 0 || *device >= P2PT_MAX_DEVICES)
        st = p2pt__fail(P2PT_NOT_SUPPORTED, "p2pt_share_export: %p lives on device %d",
                        (void *)base, *device);
out:
    return st;
}

p2pt_status p2pt__share_export(struct p2pt_handle *h, const void *base, size_t bytes,
                               p2pt_share_blob *blobs, size_t *n_blobs)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_share *sh = NULL;
    struct p2pt_share_export *e = NULL;
    struct making m;
    bool pushed = false, locked = false;
    CUcontext ctx;
    uintptr_t b = (uintptr_t)base;

    memset(&m, 0, sizeof(m));
    if (n_blobs == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_export: n_blobs is NULL: it carries the capacity of "
                          "blobs in and the count out");
    if (base == NULL || bytes == 0 || b + bytes < b)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_export: base %p, %zu bytes: expected a non-NULL base and "
                          "1 or more bytes that do not wrap around",
                          base, bytes);
    P2PT_TRY(p2pt__share_get(h, &sh));
    pthread_mutex_lock(&sh->lock);
    struct p2pt_share_export *old = find(sh, b);
    if (old != NULL)
        st = again(old, bytes, blobs, n_blobs);
    pthread_mutex_unlock(&sh->lock);
    if (old != NULL)
        return st;

    unsigned mem_type;
    int device;
    unsigned long long legacy_ok;
    CUmemoryPool pool_handle;
    P2PT_TRY(locate(sh, b, bytes, &mem_type, &device, &legacy_ok, &pool_handle));
    P2PT_TRY(p2pt__ctx_enter_primary(device, &ctx, &pushed));
    bool counting = blobs == NULL;
    P2PT_TRY(make(&m, b, bytes, counting, device, legacy_ok, pool_handle));
    st = room(b, bytes, m.n, blobs, n_blobs);
    if (st != P2PT_SUCCESS || counting)
        goto out;

    e = calloc(1, sizeof(*e));
    if (e == NULL || (e->blobs = calloc(m.n, sizeof(*e->blobs))) == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    e->base = b;
    e->bytes = bytes;
    e->n = m.n;
    P2PT_TRY(p2pt__share_random(e->token, sizeof(e->token)));
    const struct p2pt_share_host *here = p2pt__share_host();
    m.d.version = P2PT_SHARE_VERSION;
    m.d.count = (uint16_t)m.n;
    m.d.pid = (uint32_t)getpid();
    memcpy(m.d.token, e->token, sizeof(e->token));
    memcpy(m.d.boot_id, here->boot_id, sizeof(here->boot_id));
    m.d.host_hash = here->host_hash;
    memcpy(m.d.host, here->host, sizeof(here->host));
    m.d.bytes = bytes;

    pthread_mutex_lock(&sh->lock);
    locked = true;
    if ((old = find(sh, b)) != NULL) {
        /* Another thread exported the same base meanwhile: its export stands. */
        st = again(old, bytes, blobs, n_blobs);
        goto out;
    }
    if (m.d.kind != P2PT_SHARE_LEGACY) {
        if (sh->server == NULL)
            P2PT_TRY(p2pt__share_server_start(&sh->server, &sh->server_name));
        /* The server owns the descriptors from here on, also when it fails. */
        int *fds = m.fds;
        m.fds = NULL;
        st = p2pt__share_server_add(sh->server, e->token, fds, m.n);
        free(fds);
        if (st != P2PT_SUCCESS) {
            if (p2pt__share_server_idle(sh->server)) {
                p2pt__share_server_stop(sh->server);
                sh->server = NULL;
            }
            goto out;
        }
        e->served = true;
        m.d.server = sh->server_name;
    }
    for (size_t i = 0; i < m.n; i++) {
        m.d.index = (uint16_t)i;
        m.d.piece_offset = m.piece_offset[i];
        m.d.piece_size = m.piece_size[i];
        p2pt__share_blob_write(&m.d, &e->blobs[i]);
    }
    e->next = sh->exports;
    sh->exports = e;
    pthread_mutex_lock(&live_lock);
    e->live_next = live;
    live = e;
    pthread_mutex_unlock(&live_lock);
    atomic_fetch_add(&sh->exports_live, 1);
    st = hand_out(e, blobs, n_blobs);
    e = NULL;
out:
    if (locked)
        pthread_mutex_unlock(&sh->lock);
    p2pt__ctx_leave(pushed);
    making_free(&m);
    if (e != NULL)
        free(e->blobs);
    free(e);
    return st;
}

/* Unlink and end export `e` (the caller holds the lock); the server stops
 * with its last export. */
static void end_export(struct p2pt_share *sh, struct p2pt_share_export *e)
{
    if (e->served && sh->server != NULL) {
        p2pt__share_server_remove(sh->server, e->token);
        if (p2pt__share_server_idle(sh->server)) {
            p2pt__share_server_stop(sh->server);
            sh->server = NULL;
        }
    }
    pthread_mutex_lock(&live_lock);
    for (struct p2pt_share_export **at = &live; *at != NULL; at = &(*at)->live_next)
        if (*at == e) {
            *at = e->live_next;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    atomic_fetch_sub(&sh->exports_live, 1);
    free(e->blobs);
    free(e);
}

p2pt_status p2pt__share_unexport(struct p2pt_handle *h, const void *base)
{
    struct p2pt_share *sh = atomic_load(&h->share);
    struct p2pt_share_export *e = NULL;
    if (sh != NULL) {
        pthread_mutex_lock(&sh->lock);
        for (struct p2pt_share_export **at = &sh->exports; *at != NULL; at = &(*at)->next) {
            if ((*at)->base == (uintptr_t)base) {
                e = *at;
                *at = e->next;
                end_export(sh, e);
                break;
            }
        }
        pthread_mutex_unlock(&sh->lock);
    }
    if (e == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_unexport: %p is not the base of an export of this handle",
                          base);
    return P2PT_SUCCESS;
}

void p2pt__share_exports_end(struct p2pt_share *sh)
{
    pthread_mutex_lock(&sh->lock);
    while (sh->exports != NULL) {
        struct p2pt_share_export *e = sh->exports;
        sh->exports = e->next;
        end_export(sh, e);
    }
    if (sh->server != NULL) {
        p2pt__share_server_stop(sh->server);
        sh->server = NULL;
    }
    pthread_mutex_unlock(&sh->lock);
}
