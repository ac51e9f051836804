/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Imports: the blobs checked (share_blob.c) and the GPU they name found on
 * this host, before anything is mapped; then the memory mapped in the
 * primary context of the device whose kernels will touch it, and the range
 * registered as that device's window. One mapping per export and device:
 * importing it again counts, and only the last close unmaps, after the
 * work queued on the window is done (share_marks.c).
 *
 * A close that fails part way (a driver call of the unmap) leaves the
 * import in the list with its window gone: closing it again resumes where
 * it stopped, and finalize finishes it.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "driver.h"
#include "elsewhere.h"
#include "handle.h"
#include "share.h"

struct p2pt_share_import {
    struct p2pt_share_import *next;
    int device;
    int kind;
    uint8_t token[P2PT_SHARE_TOKEN_BYTES];
    uint8_t payload[P2PT_SHARE_PAYLOAD_BYTES]; /* legacy, pool: names the allocation */
    uint8_t gpu_uuid[16];                       /* the exporting GPU */
    uint64_t exporter_va;                       /* the span's start in the exporter */
    uint32_t pid;
    int refs;
    bool self;    /* this process's own legacy or pool memory, used where it is */
    bool closing; /* its last close began: only a close takes it further */
    bool window;  /* its window is registered */
    bool counted; /* counted in sh->open[device] */
    uint64_t seq; /* marks after this one are waited for by its close */
    CUdeviceptr va; /* the span's start here */
    uint64_t span, offset, bytes;
    size_t n, mapped; /* VMM pieces, and those mapped */
    uint64_t *piece_offset, *piece_size;
    bool reserved;     /* VMM: the span is reserved */
    bool opened;       /* legacy: the handle is open; pool: the pointer is imported */
    CUmemoryPool pool; /* pool: the imported pool */
};

static p2pt_status needs(const void *entry, const char *name)
{
    return p2pt__share_needs(entry, "p2pt_share_import", name,
                             "which importing this memory needs");
}

/* The GPU UUIDs /proc/driver/nvidia lists, one per line, into `out`; false
 * when it cannot be read (no driver, a container that hides it). */
static bool proc_gpus(char *out, size_t len)
{
    DIR *dir = opendir("/proc/driver/nvidia/gpus");
    size_t used = 0;
    if (dir == NULL)
        return false;
    out[0] = '\0';
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[512], line[256];
        snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        while (fgets(line, sizeof(line), f) != NULL) {
            if (strncmp(line, "GPU UUID:", 9) != 0)
                continue;
            char uuid[64] = "";
            if (sscanf(line + 9, " %63s", uuid) == 1 && used + strlen(uuid) + 2 < len)
                used += (size_t)snprintf(out + used, len - used, "%s\n", uuid);
        }
        fclose(f);
    }
    closedir(dir);
    return true;
}

/* The GPU the blobs name must be on this host: one this process sees (its
 * ordinal in *seen_as), or one the driver lists (another rank's GPU hidden
 * by CUDA_VISIBLE_DEVICES is still this host's; *seen_as -1). */
static p2pt_status check_gpu(const uint8_t *uuid, int *seen_as)
{
    p2pt_status st = P2PT_SUCCESS;
    int count = 0;
    char want[48], seen[1024] = "", listed[2048];
    size_t used = 0;

    *seen_as = -1;
    P2PT_TRY(needs(p2pt__cu.cuDeviceGetUuid, "cuDeviceGetUuid"));
    P2PT_CU(p2pt__cu.cuDeviceGetCount(&count));
    for (int d = 0; d < count; d++) {
        CUdevice dev;
        CUuuid u;
        P2PT_CU(p2pt__cu.cuDeviceGet(&dev, d));
        P2PT_CU(p2pt__cu.cuDeviceGetUuid(&u, dev));
        if (memcmp(u.bytes, uuid, 16) == 0) {
            *seen_as = d;
            goto out;
        }
        char text[48];
        p2pt__share_uuid_text((const uint8_t *)u.bytes, "GPU-", text, sizeof(text));
        if (used + strlen(text) + 3 < sizeof(seen))
            used += (size_t)snprintf(seen + used, sizeof(seen) - used, "%s%s", d ? ", " : "",
                                     text);
    }
    p2pt__share_uuid_text(uuid, "GPU-", want, sizeof(want));
    bool readable = proc_gpus(listed, sizeof(listed));
    for (char *line = listed; readable && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL)
            *nl = '\0';
        if (strcasecmp(line, want) == 0)
            goto out;
        if (nl == NULL)
            break;
        line = nl + 1;
    }
    st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                    "p2pt_share_import: the blobs name GPU %s, which this host does not have: "
                    "this process sees %d GPU%s (%s) and %s",
                    want, count, count == 1 ? "" : "s", used ? seen : "none",
                    readable ? "/proc/driver/nvidia/gpus lists no such GPU"
                             : "/proc/driver/nvidia/gpus cannot be read");
out:
    return st;
}

/* Legacy IPC: the segment opened in the current (primary) context. */
static p2pt_status map_legacy(struct p2pt_share_import *i, const struct p2pt_share_desc *d)
{
    p2pt_status st = P2PT_SUCCESS;
    CUipcMemHandle ipc;
    if (i->self) {
        i->va = d->exporter_va;
        return P2PT_SUCCESS;
    }
    P2PT_TRY(needs(p2pt__cu.cuIpcOpenMemHandle, "cuIpcOpenMemHandle"));
    P2PT_TRY(needs(p2pt__cu.cuIpcCloseMemHandle, "cuIpcCloseMemHandle"));
    memcpy(&ipc, d->payload, sizeof(ipc));
    CUresult r = p2pt__cu.cuIpcOpenMemHandle(&i->va, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r == CUDA_ERROR_ALREADY_MAPPED) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "p2pt_share_import: another context of this process already opened "
                        "this legacy IPC handle of process %u (cuIpcOpenMemHandle: "
                        "CUDA_ERROR_ALREADY_MAPPED): CUDA opens a handle in one context per "
                        "device and process, and PyTorch opens the handles of tensors it "
                        "receives. Register that mapping as a window with "
                        "p2pt_window_register instead",
                        i->pid);
        goto out;
    }
    P2PT_CU_RESULT(r, "p2pt__cu.cuIpcOpenMemHandle(&i->va, ipc, "
                      "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)");
    i->opened = true;
out:
    return st;
}

/* A pool: its descriptor from the exporter, access for the device, the
 * allocation's pointer. */
static p2pt_status map_pool(struct p2pt_share_import *i, const struct p2pt_share_desc *d)
{
    p2pt_status st = P2PT_SUCCESS;
    int fd = -1;
    CUmemPoolPtrExportData data;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, i->device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (i->self) {
        i->va = d->exporter_va;
        return P2PT_SUCCESS;
    }
    P2PT_TRY(needs(p2pt__cu.cuMemPoolImportFromShareableHandle,
                   "cuMemPoolImportFromShareableHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemPoolSetAccess, "cuMemPoolSetAccess"));
    P2PT_TRY(needs(p2pt__cu.cuMemPoolImportPointer, "cuMemPoolImportPointer"));
    P2PT_TRY(needs(p2pt__cu.cuMemPoolDestroy, "cuMemPoolDestroy"));
    P2PT_TRY(needs(p2pt__cu.cuMemFree, "cuMemFree"));
    P2PT_TRY(p2pt__share_fetch(d->pid, d->server, d->token, 1, &fd));
    P2PT_CU(p2pt__cu.cuMemPoolImportFromShareableHandle(
        &i->pool, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    P2PT_CU(p2pt__cu.cuMemPoolSetAccess(i->pool, &access, 1));
    memcpy(&data, d->payload, sizeof(data));
    P2PT_CU(p2pt__cu.cuMemPoolImportPointer(&i->va, i->pool, &data));
    i->opened = true;
out:
    if (fd >= 0)
        close(fd);
    return st;
}

/* VMM: every allocation's descriptor from the exporter, imported, mapped
 * side by side at the exporter's offsets in one reserved span, readable and
 * writable for the device. The mappings hold the allocations: the handles
 * are released once mapped. */
static p2pt_status map_vmm(struct p2pt_share_import *i, const struct p2pt_share_desc *d)
{
    p2pt_status st = P2PT_SUCCESS;
    int *fds = NULL;
    CUmemGenericAllocationHandle *hnd = NULL;
    size_t imported = 0;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, i->device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    P2PT_TRY(needs(p2pt__cu.cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle"));
    P2PT_TRY(needs(p2pt__cu.cuMemAddressReserve, "cuMemAddressReserve"));
    P2PT_TRY(needs(p2pt__cu.cuMemAddressFree, "cuMemAddressFree"));
    P2PT_TRY(needs(p2pt__cu.cuMemMap, "cuMemMap"));
    P2PT_TRY(needs(p2pt__cu.cuMemUnmap, "cuMemUnmap"));
    P2PT_TRY(needs(p2pt__cu.cuMemSetAccess, "cuMemSetAccess"));
    P2PT_TRY(needs(p2pt__cu.cuMemRelease, "cuMemRelease"));
    fds = malloc(i->n * sizeof(*fds));
    hnd = calloc(i->n, sizeof(*hnd));
    if (fds == NULL || hnd == NULL) {
        free(fds);
        fds = NULL;
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    P2PT_TRY(p2pt__share_fetch(d[0].pid, d[0].server, d[0].token, i->n, fds));
    for (size_t k = 0; k < i->n; k++) {
        P2PT_CU(p2pt__cu.cuMemImportFromShareableHandle(
            &hnd[k], (void *)(uintptr_t)fds[k], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        imported++;
        close(fds[k]);
        fds[k] = -1;
    }
    P2PT_CU(p2pt__cu.cuMemAddressReserve(&i->va, i->span, 0, 0, 0));
    i->reserved = true;
    for (size_t k = 0; k < i->n; k++) {
        CUdeviceptr at = i->va + i->piece_offset[k];
        P2PT_CU(p2pt__cu.cuMemMap(at, i->piece_size[k], 0, hnd[k], 0));
        i->mapped++;
        P2PT_CU(p2pt__cu.cuMemSetAccess(at, i->piece_size[k], &access, 1));
    }
out:
    for (size_t k = 0; k < imported; k++) {
        CUresult r = p2pt__cu.cuMemRelease(hnd[k]);
        if (r != CUDA_SUCCESS && st == P2PT_SUCCESS)
            st = p2pt__cuda_fail(r, "p2pt__cu.cuMemRelease(hnd[k])", __FILE__, __LINE__);
    }
    for (size_t k = 0; fds != NULL && k < i->n; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    free(fds);
    free(hnd);
    return st;
}

/* Undo what the mapping did, as far as it got; resumable. The device's
 * primary context is current. */
static p2pt_status unmap(struct p2pt_share_import *i)
{
    p2pt_status st = P2PT_SUCCESS;
    if (i->kind == P2PT_SHARE_LEGACY && i->opened) {
        P2PT_CU(p2pt__cu.cuIpcCloseMemHandle(i->va));
        i->opened = false;
    }
    if (i->kind == P2PT_SHARE_POOL && i->opened) {
        P2PT_CU(p2pt__cu.cuMemFree(i->va));
        i->opened = false;
    }
    if (i->kind == P2PT_SHARE_POOL && i->pool != NULL) {
        P2PT_CU(p2pt__cu.cuMemPoolDestroy(i->pool));
        i->pool = NULL;
    }
    while (i->mapped > 0) {
        size_t k = i->mapped - 1;
        P2PT_CU(p2pt__cu.cuMemUnmap(i->va + i->piece_offset[k], i->piece_size[k]));
        i->mapped--;
    }
    if (i->reserved) {
        P2PT_CU(p2pt__cu.cuMemAddressFree(i->va, i->span));
        i->reserved = false;
    }
out:
    return st;
}

static void import_free(struct p2pt_share_import *i)
{
    if (i == NULL)
        return;
    free(i->piece_offset);
    free(i->piece_size);
    free(i);
}

/* An open import of `device` that `d`'s export maps as it is (the caller
 * holds sh->lock): the same export, or another export of the same range of
 * the same legacy or pool allocation (an exporter that ended its export and
 * exported the range again): the driver would hand the same addresses out
 * again, whose window stands already. */
static struct p2pt_share_import *find(struct p2pt_share *sh, int device,
                                      const struct p2pt_share_desc *d)
{
    for (struct p2pt_share_import *i = sh->imports; i != NULL; i = i->next) {
        if (i->device != device || i->closing)
            continue;
        if (memcmp(i->token, d->token, P2PT_SHARE_TOKEN_BYTES) == 0)
            return i;
        /* The same process, GPU, addresses there, and allocation's name:
         * a pool's name alone may be unique only within its pool. */
        if (d->kind != P2PT_SHARE_VMM && i->kind == d->kind && i->pid == d->pid &&
            i->exporter_va == d->exporter_va && i->span == d->span &&
            i->offset == d->offset && i->bytes == d->bytes &&
            memcmp(i->gpu_uuid, d->gpu_uuid, sizeof(i->gpu_uuid)) == 0 &&
            memcmp(i->payload, d->payload, P2PT_SHARE_PAYLOAD_BYTES) == 0)
            return i;
    }
    return NULL;
}

static void uncount(struct p2pt_share *sh, struct p2pt_share_import *i)
{
    if (!i->counted)
        return;
    i->counted = false;
    if (atomic_fetch_sub(&sh->open[i->device], 1) == 1)
        p2pt__share_marks_drop(sh, i->device);
}

p2pt_status p2pt__share_import(struct p2pt_handle *h, int device, const p2pt_share_blob *blobs,
                               size_t n_blobs, void **ptr, p2pt_share_import_t **imp)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_share *sh = NULL;
    struct p2pt_share_desc *d = NULL;
    struct p2pt_share_import *i = NULL;
    bool pushed = false, map_locked = false;
    CUcontext ctx;

    if (ptr == NULL || imp == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_import: ptr and imp must not be NULL: they receive the "
                          "range and the import");
    *ptr = NULL;
    *imp = NULL;
    P2PT_TRY(p2pt__check_device(device, "p2pt_share_import: device"));
    if (device >= P2PT_MAX_DEVICES) {
        st = p2pt__fail(P2PT_NOT_SUPPORTED,
                        "p2pt_share_import: device %d; p2pt keeps windows for devices 0..%d",
                        device, P2PT_MAX_DEVICES - 1);
        goto out;
    }
    if (n_blobs > P2PT_SHARE_MAX_PIECES) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_import: %zu blobs; an export has %d at most", n_blobs,
                        P2PT_SHARE_MAX_PIECES);
        goto out;
    }
    d = calloc(n_blobs ? n_blobs : 1, sizeof(*d));
    if (d == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    P2PT_TRY(p2pt__share_blobs_check(blobs, n_blobs, d));
    /* Blobs of this process name memory used where it is: only while their
     * export stands is that memory still what was exported. */
    const bool own = d[0].pid == (uint32_t)getpid() && d[0].kind != P2PT_SHARE_VMM;
    if (own && !p2pt__share_export_live(d[0].token)) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "p2pt_share_import: the blobs name %s memory this process (pid %u) "
                        "exported, and that export has ended (p2pt_share_unexport, or its "
                        "handle finalized): its range may hold another allocation now. Export "
                        "the memory again. (Blobs from a process of another PID namespace that "
                        "happens to have this pid are refused the same way.)",
                        d[0].kind == P2PT_SHARE_LEGACY ? "cuMemAlloc" : "pool", d[0].pid);
        goto out;
    }
    int exporter = -1; /* the blobs' GPU, as this process numbers it */
    P2PT_TRY(check_gpu(d[0].gpu_uuid, &exporter));
    P2PT_TRY(p2pt__share_get(h, &sh));
    pthread_mutex_lock(&sh->map_lock);
    map_locked = true;

    pthread_mutex_lock(&sh->lock);
    struct p2pt_share_import *old = find(sh, device, &d[0]);
    if (old != NULL) {
        old->refs++;
        atomic_fetch_add(&sh->imports_open, 1);
        *ptr = (void *)(uintptr_t)(old->va + old->offset);
        *imp = old;
    }
    pthread_mutex_unlock(&sh->lock);
    if (old != NULL)
        goto out;

    i = calloc(1, sizeof(*i));
    if (i == NULL || (i->piece_offset = calloc(n_blobs, sizeof(uint64_t))) == NULL ||
        (i->piece_size = calloc(n_blobs, sizeof(uint64_t))) == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory");
        goto out;
    }
    i->device = device;
    i->kind = d[0].kind;
    memcpy(i->token, d[0].token, sizeof(i->token));
    memcpy(i->payload, d[0].payload, sizeof(i->payload));
    memcpy(i->gpu_uuid, d[0].gpu_uuid, sizeof(i->gpu_uuid));
    i->exporter_va = d[0].exporter_va;
    i->pid = d[0].pid;
    i->self = own;
    i->span = d[0].span;
    i->offset = d[0].offset;
    i->bytes = d[0].bytes;
    i->n = n_blobs;
    for (size_t k = 0; k < n_blobs; k++) {
        i->piece_offset[k] = d[k].piece_offset;
        i->piece_size[k] = d[k].piece_size;
    }
    P2PT_TRY(p2pt__ctx_enter_primary(device, &ctx, &pushed));
    /* Marks start before the window exists: no work can reach it unmarked. */
    atomic_fetch_add(&sh->open[device], 1);
    i->counted = true;
    i->seq = p2pt__share_marks_now(sh);
    if (i->kind == P2PT_SHARE_LEGACY)
        P2PT_TRY(map_legacy(i, &d[0]));
    else if (i->kind == P2PT_SHARE_POOL)
        P2PT_TRY(map_pool(i, &d[0]));
    else
        P2PT_TRY(map_vmm(i, d));
    /* Another GPU's memory unless the blobs name `device` itself: the
     * driver names `device` for a legacy handle opened in its context, so
     * p2pt__locate asks the list of such ranges where the GPU is seen. */
    if (exporter >= 0 && exporter != device)
        P2PT_TRY(p2pt__elsewhere_add(i, (uint64_t)i->va, i->span, exporter));
    P2PT_TRY(p2pt__window_add(&h->windows, device, (void *)(uintptr_t)(i->va + i->offset),
                              (size_t)i->bytes, exporter != device, true));
    i->window = true;
    i->refs = 1;
    pthread_mutex_lock(&sh->lock);
    i->next = sh->imports;
    sh->imports = i;
    pthread_mutex_unlock(&sh->lock);
    atomic_fetch_add(&sh->imports_open, 1);
    atomic_fetch_add(&sh->mappings, 1);
    *ptr = (void *)(uintptr_t)(i->va + i->offset);
    *imp = i;
    i = NULL;
out:
    if (i != NULL) {
        /* Nothing reached the window (it was never registered): undo the
         * mapping as far as it got; its own failure is not the one to
         * report. */
        char first[2048];
        snprintf(first, sizeof(first), "%s", p2pt__last_error_text());
        p2pt__elsewhere_remove(i);
        if (pushed)
            unmap(i);
        p2pt__fail(st, "%s", first);
        if (sh != NULL)
            uncount(sh, i);
        import_free(i);
    }
    p2pt__ctx_leave(pushed);
    if (map_locked)
        pthread_mutex_unlock(&sh->map_lock);
    free(d);
    return st;
}

/* The last close of `i`: its window, the wait, the unmap; resumable. */
static p2pt_status teardown(struct p2pt_handle *h, struct p2pt_share *sh,
                            struct p2pt_share_import *i)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext ctx;
    bool pushed = false;

    if (i->window) {
        P2PT_TRY(p2pt__window_remove(&h->windows, i->device,
                                     (void *)(uintptr_t)(i->va + i->offset), true));
        p2pt__elsewhere_remove(i);
        i->window = false;
        i->closing = true;
    }
    P2PT_TRY(p2pt__share_marks_wait(sh, i->device, i->seq));
    P2PT_TRY(p2pt__ctx_enter_primary(i->device, &ctx, &pushed));
    P2PT_TRY(unmap(i));
    uncount(sh, i);
out:
    p2pt__ctx_leave(pushed);
    return st;
}

/* Unlink `i` from the list. */
static void unlink_import(struct p2pt_share *sh, struct p2pt_share_import *i)
{
    pthread_mutex_lock(&sh->lock);
    for (struct p2pt_share_import **at = &sh->imports; *at != NULL; at = &(*at)->next)
        if (*at == i) {
            *at = i->next;
            break;
        }
    pthread_mutex_unlock(&sh->lock);
}

p2pt_status p2pt__share_close(struct p2pt_handle *h, p2pt_share_import_t *imp)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_share *sh = atomic_load(&h->share);
    bool found = false, last = false;

    if (imp == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "p2pt_share_close: imp is NULL");
    if (sh == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_share_close: %p is not an open import of this handle (it has "
                          "imported nothing)",
                          (void *)imp);
    pthread_mutex_lock(&sh->map_lock);
    pthread_mutex_lock(&sh->lock);
    for (struct p2pt_share_import *i = sh->imports; i != NULL && !found; i = i->next)
        found = i == imp;
    if (found && imp->refs > 1) {
        imp->refs--;
        atomic_fetch_sub(&sh->imports_open, 1);
        atomic_fetch_add(&sh->imports_closed, 1);
    } else {
        last = found;
    }
    pthread_mutex_unlock(&sh->lock);
    if (!found) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_share_close: %p is not an open import of this handle (closed as "
                        "often as it was imported, or imported by another handle)",
                        (void *)imp);
        goto out;
    }
    if (!last)
        goto out;
    P2PT_TRY(teardown(h, sh, imp));
    unlink_import(sh, imp);
    atomic_fetch_sub(&sh->imports_open, 1);
    atomic_fetch_add(&sh->imports_closed, 1);
    atomic_fetch_sub(&sh->mappings, 1);
    import_free(imp);
out:
    pthread_mutex_unlock(&sh->map_lock);
    return st;
}

void p2pt__share_imports_end(struct p2pt_handle *h, struct p2pt_share *sh)
{
    pthread_mutex_lock(&sh->map_lock);
    for (;;) {
        pthread_mutex_lock(&sh->lock);
        struct p2pt_share_import *i = sh->imports;
        if (i != NULL)
            sh->imports = i->next;
        pthread_mutex_unlock(&sh->lock);
        if (i == NULL)
            break;
        /* Best effort: a step that fails leaves its resources to the
         * driver's teardown of the process. */
        teardown(h, sh, i);
        uncount(sh, i);
        atomic_fetch_sub(&sh->imports_open, (uint64_t)i->refs);
        atomic_fetch_sub(&sh->mappings, 1);
        import_free(i);
    }
    pthread_mutex_unlock(&sh->map_lock);
}

uint32_t p2pt__share_imported_from(struct p2pt_share *sh, uintptr_t p, size_t n)
{
    uint32_t pid = 0;
    pthread_mutex_lock(&sh->lock);
    for (struct p2pt_share_import *i = sh->imports; i != NULL && pid == 0; i = i->next)
        if (!i->self && p >= i->va && p + n <= i->va + i->span)
            pid = i->pid;
    pthread_mutex_unlock(&sh->lock);
    return pid;
}
