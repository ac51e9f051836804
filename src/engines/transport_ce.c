/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copy-engine transport: cuMemcpyAsync on the caller's stream. The driver
 * picks the engine and the path (NVLink peer write, or a host-staged copy
 * when the two devices cannot reach each other). It runs any request, so it
 * is also the router's fallback (P2PT_CAP_FALLBACK).
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "handle.h"
#include "transport.h"

/* Per handle: one bit per (stream device, remote device) pair already
 * warned about a staged copy. */
struct ce_state {
    _Atomic uint64_t warned_pairs[P2PT_MAX_DEVICES];
};

static p2pt_status ce_init(const struct p2pt_handle *h, void **state)
{
    (void)h;
    *state = calloc(1, sizeof(struct ce_state));
    if (*state == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a p2pt handle");
    return P2PT_SUCCESS;
}

static void ce_fini(void *state)
{
    free(state);
}

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
    struct ce_state *cs = p2pt__engine_state(h, &p2pt__transport_ce);
    uint64_t bit = 1ull << s->device;
    if (atomic_fetch_or(&cs->warned_pairs[r->device], bit) & bit)
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

/* Can the driver's batched copy take this batch? Published reports: it
 * rejects the legacy default stream and zero-byte entries, and under graph
 * capture it may return success while the copies are dropped; so not on the
 * default streams, not while capturing, and never with an empty piece. */
static bool batch_call_safe(CUstream s)
{
    if (p2pt__cu.cuMemcpyBatchAsync == NULL && p2pt__cu.cuMemcpyBatchAsync_v12080 == NULL)
        return false;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return false;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    return p2pt__cu.cuStreamIsCapturing(s, &cs) == CUDA_SUCCESS &&
           cs == CU_STREAM_CAPTURE_STATUS_NONE;
}

static p2pt_status ce_copy_batch(struct p2pt_handle *h, struct p2pt_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    CUdeviceptr *dsts = NULL, *srcs = NULL;
    size_t *sizes = NULL, n = 0;

    if (!batch_call_safe(b->stream)) {
        for (size_t i = 0; i < b->count; i++) {
            const p2pt_copy_desc *d = &b->descs[i];
            if (d->bytes != 0)
                P2PT_CU(p2pt__cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)d->dst,
                                               (CUdeviceptr)(uintptr_t)d->src, (size_t)d->bytes,
                                               b->stream));
        }
        n = b->pieces;
        goto out;
    }
    dsts = malloc(b->pieces * sizeof(*dsts));
    srcs = malloc(b->pieces * sizeof(*srcs));
    sizes = malloc(b->pieces * sizeof(*sizes));
    if (dsts == NULL || srcs == NULL || sizes == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a batch of %zu", b->pieces);
        goto out;
    }
    for (size_t i = 0; i < b->count; i++) {
        const p2pt_copy_desc *d = &b->descs[i];
        if (d->bytes == 0)
            continue;
        dsts[n] = (CUdeviceptr)(uintptr_t)d->dst;
        srcs[n] = (CUdeviceptr)(uintptr_t)d->src;
        sizes[n] = (size_t)d->bytes;
        n++;
    }
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t attr_at = 0;
    if (p2pt__cu.cuMemcpyBatchAsync != NULL) {
        P2PT_CU(p2pt__cu.cuMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &attr_at, 1, b->stream));
    } else {
        size_t fail_at = 0;
        P2PT_CU(p2pt__cu.cuMemcpyBatchAsync_v12080(dsts, srcs, sizes, n, &attr, &attr_at, 1,
                                                   &fail_at, b->stream));
    }
out:
    if (st == P2PT_SUCCESS)
        atomic_fetch_add_explicit(&h->stats.ce_copies, n, memory_order_relaxed);
    free(dsts);
    free(srcs);
    free(sizes);
    return st;
}

const struct p2pt_transport p2pt__transport_ce = {
    .name = "ce",
    .caps = P2PT_CAP_LOCAL | P2PT_CAP_PEER | P2PT_CAP_STAGED | P2PT_CAP_ANY_ALIGN |
            P2PT_CAP_CAPTURE | P2PT_CAP_BATCH | P2PT_CAP_FALLBACK,
    .min_cc = 0,
    .init = ce_init,
    .fini = ce_fini,
    .can_copy = ce_can_copy,
    .prepare = ce_prepare,
    .copy = ce_copy,
    .copy_batch = ce_copy_batch,
    .copy_batch_device = NULL, /* only a kernel reads descriptors from GPU memory */
};
