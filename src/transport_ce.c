/*
 * The copy-engine transport: cuMemcpyAsync on the caller's stream. The driver
 * picks the engine and the path (NVLink peer write, or a host-staged copy
 * when the two devices cannot reach each other).
 */
#include "p2pt_internal.h"

static p2pt_status ce_prepare(struct p2pt_handle *h, int device)
{
    (void)h;
    CUcontext ctx;
    bool pushed;
    p2pt_status st = p2pt__ctx_enter(device, &ctx, &pushed);
    p2pt__ctx_leave(pushed);
    return st;
}

static p2pt_status ce_copy(struct p2pt_handle *h, struct p2pt_copy *c)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_CU(p2pt__cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)c->dst,
                                   (CUdeviceptr)(uintptr_t)c->src, c->bytes, c->stream));
    atomic_fetch_add_explicit(&h->stats.ce_copies, 1, memory_order_relaxed);
out:
    return st;
}

const struct p2pt_transport_ops p2pt__transport_ce = {
    .name = "ce",
    .prepare = ce_prepare,
    .copy = ce_copy,
};
