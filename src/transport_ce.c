/*
 * The copy-engine transport: cuMemcpyAsync on the caller's stream. The driver
 * picks the engine and the path (NVLink peer write, or a host-staged copy
 * when the two devices cannot reach each other). It runs any request, so it
 * is also the router's fallback.
 */
#include "handle.h"

static bool ce_can_copy(const struct p2pt_handle *h, const struct p2pt_request *r,
                        const char **why)
{
    (void)h;
    (void)r;
    (void)why;
    return true;
}

static p2pt_status ce_prepare(struct p2pt_handle *h, int device)
{
    (void)h;
    CUcontext ctx;
    bool pushed;
    p2pt_status st = p2pt__ctx_enter(device, &ctx, &pushed);
    p2pt__ctx_leave(pushed);
    return st;
}

/* A copy the driver must stage through host memory runs at a fraction of
 * NVLink speed: say so once per device pair. */
static void warn_staged(struct p2pt_handle *h, const struct p2pt_request *r,
                        const struct p2pt_side *s, const void *p)
{
    if (s->reach != P2PT_REACH_UNMAPPED || r->device < 0 || r->device >= P2PT_MAX_DEVICES ||
        s->device < 0 || s->device >= P2PT_MAX_DEVICES)
        return;
    uint64_t bit = 1ull << s->device;
    if (atomic_fetch_or(&h->warned_pairs[r->device], bit) & bit)
        return;
    P2PT_WARN(&h->log,
              "copy between device %d (stream) and device %d (address %p) is not "
              "peer-to-peer: device %d has no access to that memory, so the copy "
              "engine stages it through host memory. Enable peer access "
              "(cuCtxEnablePeerAccess, cuMemSetAccess or cuMemPoolSetAccess) for "
              "NVLink speed. Logged once per device pair",
              r->device, s->device, p, r->device);
}

static p2pt_status ce_copy(struct p2pt_handle *h, const struct p2pt_request *r)
{
    p2pt_status st = P2PT_SUCCESS;
    warn_staged(h, r, &r->dst_side, r->dst);
    warn_staged(h, r, &r->src_side, r->src);
    P2PT_CU(p2pt__cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)r->dst,
                                   (CUdeviceptr)(uintptr_t)r->src, r->bytes, r->stream));
    atomic_fetch_add_explicit(&h->stats.ce_copies, 1, memory_order_relaxed);
out:
    return st;
}

const struct p2pt_transport p2pt__transport_ce = {
    .name = "ce",
    .caps = P2PT_CAP_LOCAL | P2PT_CAP_PEER | P2PT_CAP_STAGED | P2PT_CAP_ANY_ALIGN |
            P2PT_CAP_CAPTURE,
    .min_cc = 0,
    .can_copy = ce_can_copy,
    .prepare = ce_prepare,
    .copy = ce_copy,
};
