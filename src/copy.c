/*
 * What every copy goes through before a transport sees it: argument checks
 * that need no GPU (NULL, wrap-around, overlap), then, with
 * P2P_TRANSPORT_VALIDATE=1 (the default), a look at where the two addresses
 * live as seen from the stream's context, so that a copy the stream's device
 * cannot reach is refused with a remedy instead of faulting the GPU.
 * Also the helpers that find or enter a context for a device.
 */
#include <stdio.h>

#include "p2pt_internal.h"

p2pt_status p2pt__check_device(int device, const char *what)
{
    p2pt_status st = P2PT_SUCCESS;
    int count = 0;
    P2PT_CU(p2pt__cu.cuDeviceGetCount(&count));
    if (device < 0 || device >= count)
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s %d does not exist: %d CUDA device%s visible (0..%d)", what,
                        device, count, count == 1 ? " is" : "s are", count - 1);
out:
    return st;
}

p2pt_status p2pt__ctx_enter(int device, CUcontext *ctx, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdevice dev;
    CUcontext cur = NULL;

    *pushed = false;
    P2PT_TRY(p2pt__check_device(device, "device"));
    P2PT_CU(p2pt__cu.cuDeviceGet(&dev, device));
    P2PT_CU(p2pt__cu.cuCtxGetCurrent(&cur));
    if (cur != NULL) {
        CUdevice cur_dev;
        P2PT_CU(p2pt__cu.cuCtxGetDevice(&cur_dev));
        if (cur_dev == dev) {
            *ctx = cur;
            goto out;
        }
    }
    /* The primary context, retained and never released: it must outlive the
     * module p2pt loads into it, and frameworks keep it alive anyway. */
    P2PT_CU(p2pt__cu.cuDevicePrimaryCtxRetain(ctx, dev));
    P2PT_CU(p2pt__cu.cuCtxPushCurrent(*ctx));
    *pushed = true;
out:
    return st;
}

void p2pt__ctx_leave(bool pushed)
{
    if (pushed) {
        CUcontext popped;
        p2pt__cu.cuCtxPopCurrent(&popped);
    }
}

/* Where `p` lives, as the current context sees it. */
struct where {
    unsigned mem_type; /* CUmemorytype, 0 when CUDA does not know the address */
    int ordinal;
    unsigned long long access; /* CUDA_POINTER_ATTRIBUTE_ACCESS_FLAGS */
};

/* Unlike cuPointerGetAttribute, cuPointerGetAttributes succeeds for unknown
 * addresses and leaves the defaults, which is what we want for pageable host
 * memory. The caller decides whether a failure is an error. */
static CUresult locate(const void *p, struct where *w)
{
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_ACCESS_FLAGS};
    w->mem_type = 0;
    w->ordinal = -1;
    w->access = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
    void *data[] = {&w->mem_type, &w->ordinal, &w->access};
    return p2pt__cu.cuPointerGetAttributes(3, attrs, data, (CUdeviceptr)(uintptr_t)p);
}

void p2pt__copy_locate(struct p2pt_copy *c)
{
    if (c->located)
        return;
    /* A lookup that fails leaves -1: the caller only uses this to choose
     * how to cut the copy, never to refuse it. */
    struct where w;
    locate(c->dst, &w);
    c->dst_dev = w.ordinal;
    locate(c->src, &w);
    c->src_dev = w.ordinal;
    c->located = true;
}

static void warn_not_peer(struct p2pt_handle *h, int stream_dev, int remote_dev,
                          const void *p)
{
    if (stream_dev < 0 || stream_dev >= P2PT_MAX_DEVICES || remote_dev < 0 ||
        remote_dev >= P2PT_MAX_DEVICES)
        return;
    uint64_t bit = 1ull << remote_dev;
    if (atomic_fetch_or(&h->warned_pairs[stream_dev], bit) & bit)
        return;
    P2PT_WARN(&h->log,
              "copy between device %d (stream) and device %d (address %p) is not "
              "peer-to-peer: device %d has no access to that memory, so the copy "
              "engine stages it through host memory. Enable peer access "
              "(cuCtxEnablePeerAccess, cuMemSetAccess or cuMemPoolSetAccess) for "
              "NVLink speed. Logged once per device pair",
              stream_dev, remote_dev, p, stream_dev);
}

/* With validation on: can the stream's device reach both addresses? Records
 * the stream's context and both devices in `c` for the transport. */
static p2pt_status check_reach(struct p2pt_handle *h, struct p2pt_copy *c)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext sctx = NULL, cur = NULL;
    CUdevice sdev = 0;
    bool pushed = false;
    bool tma = h->ops == &p2pt__transport_tma;

    P2PT_CU(p2pt__cu.cuStreamGetCtx(c->stream, &sctx));
    if (sctx == NULL) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "stream %p has no CUDA context (the default stream needs a "
                        "current context on this thread)",
                        (void *)c->stream);
        goto out;
    }
    c->ctx = sctx;
    P2PT_CU(p2pt__cu.cuCtxGetCurrent(&cur));
    if (cur != sctx) {
        P2PT_CU(p2pt__cu.cuCtxPushCurrent(sctx));
        pushed = true;
    }
    P2PT_CU(p2pt__cu.cuCtxGetDevice(&sdev));
    const void *ptrs[2] = {c->dst, c->src};
    const char *names[2] = {"dst", "src"};
    int *devs[2] = {&c->dst_dev, &c->src_dev};
    for (int i = 0; i < 2; i++) {
        struct where w;
        P2PT_CU(locate(ptrs[i], &w));
        *devs[i] = w.ordinal;
        if (w.mem_type == 0) {
            /* Pageable host memory: the copy engine copes (synchronously);
             * a kernel would fault. */
            if (tma) {
                st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                                "%s %p is not memory CUDA knows (pageable host "
                                "memory?): the TMA transport needs device memory or "
                                "pinned, mapped host memory",
                                names[i], ptrs[i]);
                goto out;
            }
            continue;
        }
        bool reachable = w.access != CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
        if (reachable && w.mem_type == CU_MEMORYTYPE_DEVICE && w.ordinal != (int)sdev) {
            /* ACCESS_FLAGS reads "read-write" for peer memory whether or not
             * it is mapped here (seen on H200, driver 580, for cuMemAlloc and
             * pool memory); asking for the pointer through which this
             * context would reach it fails exactly when it cannot. */
            void *through = NULL;
            CUresult r = p2pt__cu.cuPointerGetAttribute(
                &through, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)ptrs[i]);
            if (r == CUDA_ERROR_INVALID_VALUE)
                reachable = false;
            else
                P2PT_CU(r);
        }
        if (reachable)
            continue;
        /* The copy engine stages unmapped cuMemAlloc memory through the host,
         * but refuses pool memory the stream's device has no access to
         * (CUDA_ERROR_INVALID_VALUE, seen on H200): say why up front. */
        CUmemoryPool pool = NULL;
        if (!tma && p2pt__cu.cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                                   (CUdeviceptr)(uintptr_t)ptrs[i]) ==
                        CUDA_SUCCESS &&
            pool != NULL) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s %p is memory-pool memory of device %d that device %d, "
                            "where the stream runs, has no access to: grant it with "
                            "cuMemPoolSetAccess",
                            names[i], ptrs[i], w.ordinal, (int)sdev);
            goto out;
        }
        if (tma) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                            "%s %p (device %d) is not mapped for device %d, where "
                            "the stream runs: enable access first "
                            "(cuCtxEnablePeerAccess, cuMemSetAccess or "
                            "cuMemPoolSetAccess), or use P2P_TRANSPORT=ce",
                            names[i], ptrs[i], w.ordinal, (int)sdev);
            goto out;
        }
        warn_not_peer(h, (int)sdev, w.ordinal, ptrs[i]);
    }
    c->located = true;
out:
    if (pushed) {
        CUcontext popped;
        p2pt__cu.cuCtxPopCurrent(&popped);
    }
    return st;
}

p2pt_status p2pt__copy_check(struct p2pt_handle *h, struct p2pt_copy *c)
{
    p2pt_status st = P2PT_SUCCESS;
    void *dst = c->dst;
    const void *src = c->src;
    size_t bytes = c->bytes;
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

    if (bytes == 0)
        return P2PT_SUCCESS;
    if (dst == NULL || src == NULL) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "copy of %zu bytes with dst=%p and src=%p: both must be "
                        "non-NULL when bytes > 0",
                        bytes, dst, src);
        goto out;
    }
    if (bytes > UINTPTR_MAX - d || bytes > UINTPTR_MAX - s) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "copy of %zu bytes from src=%p to dst=%p wraps around the "
                        "end of the address space",
                        bytes, src, dst);
        goto out;
    }
    if (d < s + bytes && s < d + bytes) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "overlapping ranges: dst [%p, %p) and src [%p, %p) share "
                        "bytes; p2pt copies like memcpy, not memmove",
                        dst, (void *)(d + bytes), src, (void *)(s + bytes));
        goto out;
    }
    if (h->cfg.validate)
        P2PT_TRY(check_reach(h, c));
out:
    if (st != P2PT_SUCCESS)
        atomic_fetch_add_explicit(&h->stats.rejected, 1, memory_order_relaxed);
    return st;
}
