/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Resolve: every fact about one copy request, found once, before the router
 * picks a transport: the stream's context and device, where both addresses
 * live and whether the stream's device can reach them, co-alignment, the
 * path. The lookups are the same whatever P2P_TRANSPORT_VALIDATE says;
 * validation (validate.c) only decides whether a failed fact is refused
 * with a remedy or trusted.
 */
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "p2pt_kernel_abi.h"
#include "batch.h"
#include "elsewhere.h"
#include "request.h"

/*
 * Where `p` lives, as the current context (the stream's) sees it. Unlike
 * cuPointerGetAttribute, cuPointerGetAttributes succeeds for addresses CUDA
 * does not know and leaves the defaults: pageable host memory.
 */
p2pt_status p2pt__locate(const void *p, int stream_dev, struct p2pt_side *side)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdeviceptr dp = (CUdeviceptr)(uintptr_t)p;
    unsigned mem_type = 0;
    int ordinal = -1;
    unsigned long long access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    CUdeviceptr start = 0;
    size_t size = 0;
    /* The allocation's range comes in the same call: a batch remembers it
     * and asks nothing more for later pieces inside it (alloc_memo.c). */
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[] = {&mem_type, &ordinal, &access, &start, &size};

    P2PT_CU(p2pt__cu.cuPointerGetAttributes(5, attrs, data, dp));
    side->device = mem_type == CU_MEMORYTYPE_DEVICE ? ordinal : -1;
    if (mem_type == CU_MEMORYTYPE_DEVICE && ordinal == stream_dev) {
        /* An import of another GPU's export opened in this context: the
         * driver names this device, the bytes cross the peer link. */
        const int there = p2pt__elsewhere_find((uint64_t)dp);
        if (there >= 0)
            side->device = there;
    }
    side->host = mem_type == CU_MEMORYTYPE_HOST;
    side->start = mem_type != 0 && start <= dp && dp - start < size ? (uint64_t)start : 0;
    side->size = side->start != 0 ? (uint64_t)size : 0;
    side->reach = P2PT_REACH_MAPPED;
    side->opened_elsewhere = false;
    if (mem_type == 0) {
        side->reach = P2PT_REACH_NOT_CUDA;
        goto out;
    }
    if (mem_type == CU_MEMORYTYPE_DEVICE && access == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE) {
        /* VMM memory mapped without access for this device: the driver's
         * copies refuse it too (CUDA_ERROR_INVALID_VALUE, seen on H100). */
        side->reach = P2PT_REACH_NO_ACCESS;
        goto out;
    }
    bool reachable = true;
    if (mem_type == CU_MEMORYTYPE_DEVICE && ordinal != stream_dev) {
        /* ACCESS_FLAGS reads "read-write" for peer memory whether or not it
         * is mapped here (seen on H200, driver 580, for cuMemAlloc and pool
         * memory); asking for the pointer through which this context would
         * reach it fails exactly when it cannot. */
        void *through = NULL;
        CUresult r = p2pt__cu.cuPointerGetAttribute(&through, CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                                    dp);
        if (r == CUDA_ERROR_INVALID_VALUE)
            reachable = false;
        else
            P2PT_CU_RESULT(r, "p2pt__cu.cuPointerGetAttribute(&through, "
                                      "CU_POINTER_ATTRIBUTE_DEVICE_POINTER, dp)");
    }
    if (reachable)
        goto out;
    side->reach = P2PT_REACH_UNMAPPED;
    /* The copy engine stages unmapped cuMemAlloc memory through the host,
     * but refuses pool memory the stream's device has no access to
     * (CUDA_ERROR_INVALID_VALUE, seen on H200 and H100). */
    CUmemoryPool pool = NULL;
    if (p2pt__cu.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dp) ==
            CUDA_SUCCESS &&
        pool != NULL) {
        side->reach = P2PT_REACH_UNMAPPED_POOL;
        goto out;
    }
    /* A legacy IPC handle opened in another device's context: that context
     * owns the mapping, and the memory is not exportable again, where the
     * owner's own cuMemAlloc memory is (seen on H100, driver 580). Only the
     * message depends on it. */
    int exportable = 1;
    CUcontext owner = NULL;
    CUpointer_attribute more[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                  CU_POINTER_ATTRIBUTE_CONTEXT};
    void *more_data[] = {&exportable, &owner};
    if (p2pt__cu.cuPointerGetAttributes(2, more, more_data, dp) == CUDA_SUCCESS)
        side->opened_elsewhere = !exportable && owner != NULL;
out:
    return st;
}

p2pt_status p2pt__unreachable(const char *what, const void *p, const struct p2pt_side *s,
                              int device, const char *ce)
{
    char moves[96] = "";
    if (ce != NULL)
        snprintf(moves, sizeof(moves), ", or let the copy engine move it (P2P_TRANSPORT=%s or auto)",
                 ce);
    switch (s->reach) {
    case P2PT_REACH_MAPPED:
        break;
    case P2PT_REACH_NOT_CUDA:
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s %p is not memory CUDA knows (pageable host memory?): a kernel "
                          "on device %d needs device memory or pinned, mapped host memory "
                          "(cuMemHostRegister)%s",
                          what, p, device, moves);
    case P2PT_REACH_UNMAPPED_POOL:
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s %p is memory-pool memory of device %d that device %d, "
                          "where the stream runs, has no access to: grant it with "
                          "cuMemPoolSetAccess",
                          what, p, s->device, device);
    case P2PT_REACH_NO_ACCESS:
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s %p is memory of device %d mapped without access for device %d, "
                          "where the stream runs (a VMM mapping): grant it with "
                          "cuMemSetAccess for device %d; no engine moves it before",
                          what, p, s->device, device, device);
    case P2PT_REACH_UNMAPPED:
        if (s->opened_elsewhere)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "%s %p was opened in device %d's context (a CUDA IPC handle, "
                              "cuIpcOpenMemHandle there), not mapped for device %d, where the "
                              "stream runs: no kernel on device %d can reach it, peer access "
                              "or not. Open the handle with device %d's context current "
                              "(cudaSetDevice(%d) before cudaIpcOpenMemHandle)%s",
                              what, p, s->device, device, device, device, device, moves);
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s %p (device %d) is not mapped for device %d, where the stream "
                          "runs: enable peer access first (p2pt_peer_enable, "
                          "cuCtxEnablePeerAccess, cuMemSetAccess or cuMemPoolSetAccess)%s",
                          what, p, s->device, device, moves);
    }
    return p2pt__fail(P2PT_INTERNAL_ERROR, "unknown reach %d", (int)s->reach);
}

p2pt_status p2pt__stream_enter(CUstream stream, CUcontext *ctx, int *device, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext cur = NULL;
    CUdevice dev = 0;

    *pushed = false;
    /* Only a handle made without p2pt_init (the tests' driverless handles)
     * gets here with no driver: say so rather than call through NULL. */
    if (p2pt__cu.cuStreamGetCtx == NULL)
        return p2pt__fail(P2PT_NO_DRIVER, "no CUDA driver is loaded for this handle");
    P2PT_CU(p2pt__cu.cuStreamGetCtx(stream, ctx));
    if (*ctx == NULL) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "stream %p has no CUDA context (the default stream needs a "
                        "current context on this thread)",
                        (void *)stream);
        goto out;
    }
    P2PT_CU(p2pt__cu.cuCtxGetCurrent(&cur));
    if (cur != *ctx) {
        P2PT_CU(p2pt__cu.cuCtxPushCurrent(*ctx));
        *pushed = true;
    }
    P2PT_CU(p2pt__cu.cuCtxGetDevice(&dev));
    *device = (int)dev;
out:
    return st;
}

void p2pt__stream_leave(bool pushed)
{
    p2pt__ctx_leave(pushed);
}

void p2pt__classify(struct p2pt_request *r)
{
    r->coaligned = (uintptr_t)r->dst % P2PT_ALIGN == (uintptr_t)r->src % P2PT_ALIGN;
    bool dst_here = r->dst_side.device == r->device, src_here = r->src_side.device == r->device;
    if (dst_here && src_here)
        r->path = P2PT_PATH_LOCAL;
    else if (src_here && r->dst_side.device >= 0)
        r->path = P2PT_PATH_PUSH;
    else if (dst_here && r->src_side.device >= 0)
        r->path = P2PT_PATH_PULL;
    else
        r->path = P2PT_PATH_OTHER;
}

const char *p2pt__path_name(enum p2pt_path path)
{
    static const char *const names[] = {"local", "push", "pull", "other"};
    return (unsigned)path < P2PT_ARRAY_LEN(names) ? names[path] : "?";
}

p2pt_status p2pt__resolve_sides(struct p2pt_request *r)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(p2pt__locate(r->dst, r->device, &r->dst_side));
    P2PT_TRY(p2pt__locate(r->src, r->device, &r->src_side));
    p2pt__classify(r);
out:
    return st;
}

p2pt_status p2pt__resolve(struct p2pt_request *r)
{
    p2pt_status st = P2PT_SUCCESS;
    bool pushed = false;

    P2PT_TRY(p2pt__stream_enter(r->stream, &r->ctx, &r->device, &pushed));
    P2PT_TRY(p2pt__resolve_sides(r));
out:
    p2pt__ctx_leave(pushed);
    return st;
}

p2pt_status p2pt__batch_first(struct p2pt_batch *b)
{
    struct p2pt_request *r = &b->first;
    size_t i = 0;

    p2pt_copy_desc d = {NULL, NULL, 0};

    memset(r, 0, sizeof(*r));
    while (i < b->count && (d = p2pt__batch_piece(b, i)).bytes == 0)
        i++;
    if (i == b->count)
        return P2PT_SUCCESS;
    r->dst = d.dst;
    r->src = d.src;
    r->bytes = (size_t)d.bytes;
    r->stream = b->stream;
    r->ctx = b->ctx;
    r->device = b->device;
    return p2pt__resolve_sides(r);
}

p2pt_status p2pt__stream_capturing(CUstream stream, bool *capturing)
{
    p2pt_status st = P2PT_SUCCESS;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    P2PT_CU(p2pt__cu.cuStreamIsCapturing(stream, &cs));
    *capturing = cs != CU_STREAM_CAPTURE_STATUS_NONE;
out:
    return st;
}

p2pt_status p2pt__check_range(const char *what, const void *p, size_t bytes, int device,
                              struct p2pt_side *found)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_side side;
    CUdeviceptr start = 0, dp = (CUdeviceptr)(uintptr_t)p;
    size_t size = 0;

    P2PT_TRY(p2pt__locate(p, device, &side));
    if (found != NULL)
        *found = side;
    if (side.reach != P2PT_REACH_MAPPED) {
        st = p2pt__unreachable(what, p, &side, device, NULL);
        goto out;
    }
    start = (CUdeviceptr)side.start;
    size = (size_t)side.size;
    if (size == 0) {
        P2PT_CU(p2pt__cu.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                               dp));
        P2PT_CU(p2pt__cu.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, dp));
    }
    if (dp + bytes > start + size)
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s [%p, +%zu) runs past the end of its allocation [%p, +%zu): it "
                        "must lie inside one allocation",
                        what, p, bytes, (void *)(uintptr_t)start, size);
out:
    return st;
}

