/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copy-engine transport: cuMemcpyAsync on the caller's stream, and host
 * batches coalesced into few operations (its sink holds the groups the
 * pipeline's pass makes, ce_batch_submit hands them to the driver). The driver
 * picks the engine and the path (NVLink peer write, or a host-staged copy
 * when the two devices cannot reach each other). It runs any request, so it
 * is also the router's fallback (P2PT_CAP_FALLBACK).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "handle.h"
#include "coalesce.h"
#include "registry.h"

/* Per handle: one bit per (stream device, remote device) pair already
 * warned about a staged copy. */
struct ce_state {
    _Atomic uint64_t warned_pairs[P2PT_MAX_DEVICES];
    /* p2pt_properties.ce_copies and ce_operations. */
    _Atomic uint64_t copies, operations;
};

static void ce_count(const struct p2pt_handle *h, uint64_t copies, uint64_t operations)
{
    struct ce_state *cs = p2pt__engine_state(h, &p2pt__transport_ce);
    atomic_fetch_add_explicit(&cs->copies, copies, memory_order_relaxed);
    atomic_fetch_add_explicit(&cs->operations, operations, memory_order_relaxed);
}

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
    if (s->opened_elsewhere)
        P2PT_WARN(&h->log,
                  "copy between device %d (stream) and memory opened in device %d's context "
                  "(address %p, a CUDA IPC handle opened there): no kernel on device %d can "
                  "reach it, so the copy engine moves it, at NVLink speed where peer access "
                  "between the two devices is on (p2pt_peer_enable), else staged through "
                  "host memory. Logged once per device pair",
                  r->device, s->device, p, r->device);
    else
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
    ce_count(h, 1, 1);
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

/* The 2D groups, in one driver call where that is safe, else a call each
 * (else, without 2D copies in the driver, a copy per row). */
static p2pt_status submit_2d(const struct p2pt_copy_group *g, size_t n, bool batch_ok,
                             CUDA_MEMCPY3D_BATCH_OP *ops, CUstream stream)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_cuda *cu = &p2pt__cu;
    if (batch_ok && (cu->cuMemcpy3DBatchAsync != NULL || cu->cuMemcpy3DBatchAsync_v12080)) {
        memset(ops, 0, n * sizeof(*ops));
        for (size_t i = 0; i < n; i++) {
            /* Pointer operands: the element is a byte, a row's length is its
             * pitch, and a layer holds every row (depth 1). */
            ops[i].src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
            ops[i].src.op.ptr.ptr = (CUdeviceptr)g[i].src;
            ops[i].src.op.ptr.rowLength = (size_t)g[i].spitch;
            ops[i].src.op.ptr.layerHeight = (size_t)g[i].height;
            ops[i].dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
            ops[i].dst.op.ptr.ptr = (CUdeviceptr)g[i].dst;
            ops[i].dst.op.ptr.rowLength = (size_t)g[i].dpitch;
            ops[i].dst.op.ptr.layerHeight = (size_t)g[i].height;
            ops[i].extent.width = (size_t)g[i].width;
            ops[i].extent.height = (size_t)g[i].height;
            ops[i].extent.depth = 1;
            ops[i].srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        }
        if (cu->cuMemcpy3DBatchAsync != NULL) {
            P2PT_CU(cu->cuMemcpy3DBatchAsync(n, ops, 0, stream));
        } else {
            size_t fail_at = 0;
            P2PT_CU(cu->cuMemcpy3DBatchAsync_v12080(n, ops, &fail_at, 0, stream));
        }
        return P2PT_SUCCESS;
    }
    for (size_t i = 0; i < n; i++) {
        if (cu->cuMemcpy2DAsync == NULL) {
            for (uint64_t k = 0; k < g[i].height; k++)
                P2PT_CU(cu->cuMemcpyAsync((CUdeviceptr)(g[i].dst + k * g[i].dpitch),
                                          (CUdeviceptr)(g[i].src + k * g[i].spitch),
                                          (size_t)g[i].width, stream));
            continue;
        }
        CUDA_MEMCPY2D c;
        memset(&c, 0, sizeof(c));
        c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
        c.srcDevice = (CUdeviceptr)g[i].src;
        c.srcPitch = (size_t)g[i].spitch;
        c.dstDevice = (CUdeviceptr)g[i].dst;
        c.dstPitch = (size_t)g[i].dpitch;
        c.WidthInBytes = (size_t)g[i].width;
        c.Height = (size_t)g[i].height;
        P2PT_CU(cu->cuMemcpy2DAsync(&c, stream));
    }
out:
    return st;
}

/* The plain groups (their dsts, srcs and sizes): one batched copy where
 * that is safe, else a copy each. */
static p2pt_status submit_1d(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t n,
                             bool batch_ok, CUstream stream)
{
    p2pt_status st = P2PT_SUCCESS;
    if (!batch_ok || n == 1) {
        for (size_t i = 0; i < n; i++)
            P2PT_CU(p2pt__cu.cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream));
        return P2PT_SUCCESS;
    }
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t attr_at = 0;
    if (p2pt__cu.cuMemcpyBatchAsync != NULL) {
        P2PT_CU(p2pt__cu.cuMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &attr_at, 1, stream));
    } else {
        size_t fail_at = 0;
        P2PT_CU(p2pt__cu.cuMemcpyBatchAsync_v12080(dsts, srcs, sizes, n, &attr, &attr_at, 1,
                                                   &fail_at, stream));
    }
out:
    return st;
}

/*
 * Where a host batch's pieces go for the copy engine: its groups
 * (coalesce.h), which the pipeline's pass fills as it checks every piece,
 * then room for the arguments of the driver calls (the 3D ops, the largest
 * per group, and the plain groups' three arrays; not in a dry run), and,
 * where the route waits for the pass, the descriptors it leaves (the
 * pipeline groups them once the copy engine is chosen). One allocation,
 * freed at release.
 */
static const size_t ce_call_bytes =
    sizeof(CUDA_MEMCPY3D_BATCH_OP) + 2 * sizeof(CUdeviceptr) + sizeof(size_t);
_Static_assert(sizeof(CUDA_MEMCPY3D_BATCH_OP) % 8 == 0 && sizeof(struct p2pt_copy_group) % 8 == 0,
               "the descriptors after the groups and call arguments must be aligned");

static p2pt_status ce_batch_sink(struct p2pt_handle *h, const struct p2pt_batch *b,
                                 struct p2pt_batch_sink *s)
{
    (void)h;
    const size_t per = sizeof(struct p2pt_copy_group) + (s->dry ? 0 : ce_call_bytes) +
                       (s->as_descs ? sizeof(struct p2pt_batch_desc) : 0);
    char *mem = b->count <= SIZE_MAX / per ? malloc(b->count * per) : NULL;
    if (mem == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a batch of %zu", b->count);
    p2pt__coalesce_init(&s->groups, (struct p2pt_copy_group *)(void *)mem);
    if (s->as_descs)
        s->descs = (struct p2pt_batch_desc *)(void *)(mem + b->count *
                                                      (per - sizeof(struct p2pt_batch_desc)));
    s->own = mem;
    return P2PT_SUCCESS;
}

static void ce_batch_release(struct p2pt_handle *h, struct p2pt_batch_sink *s)
{
    (void)h;
    free(s->own);
}

/*
 * A host batch through the copy engine, every piece checked and grouped by
 * the pass: the 2D groups go in one cuMemcpy3DBatchAsync and the rest in
 * one cuMemcpyBatchAsync.
 */
static p2pt_status ce_batch_submit(struct p2pt_handle *h, const struct p2pt_batch *b,
                                   struct p2pt_batch_sink *s)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_coalesce *c = &s->groups;
    struct p2pt_copy_group *g = c->g;
    char *mem = s->own;
    void *ops = mem + b->count * sizeof(struct p2pt_copy_group);
    CUdeviceptr *dsts = (CUdeviceptr *)(void *)((char *)ops +
                                                b->count * sizeof(CUDA_MEMCPY3D_BATCH_OP));
    CUdeviceptr *srcs = dsts + b->count;
    size_t *sizes = (size_t *)(srcs + b->count);
    /* 2D groups to the front, plain ones into the arrays of the batched
     * copy, each in the batch's order: the driver takes the pieces of one
     * cuMemcpyBatchAsync in the order given. */
    size_t n2 = 0, n1 = 0;
    for (size_t i = 0; i < c->n; i++) {
        if (p2pt__group_is_2d(&g[i])) {
            g[n2++] = g[i];
        } else {
            dsts[n1] = (CUdeviceptr)g[i].dst;
            srcs[n1] = (CUdeviceptr)g[i].src;
            sizes[n1] = (size_t)(g[i].width * g[i].height);
            n1++;
        }
    }
    const bool batch_ok = batch_call_safe(b->stream);
    if (n2 > 0)
        P2PT_TRY(submit_2d(g, n2, batch_ok, ops, b->stream));
    if (n1 > 0)
        P2PT_TRY(submit_1d(dsts, srcs, sizes, n1, batch_ok, b->stream));
    ce_count(h, b->pieces, c->n);
out:
    return st;
}

static void ce_report(const struct p2pt_handle *h, int e, const void *state, p2pt_properties *p)
{
    const struct ce_state *cs = state;
    p->ce_copies = atomic_load_explicit(&cs->copies, memory_order_relaxed);
    p->ce_operations = atomic_load_explicit(&cs->operations, memory_order_relaxed);
    p->ce_bytes = atomic_load(&h->stats.engine_bytes[e]);
    p->ce_batches = atomic_load(&h->stats.engine_batches[e]);
}

/* A host batch's dry run: its groups, counted in words. */
static void ce_batch_describe(const struct p2pt_handle *h, const struct p2pt_batch *b,
                              const struct p2pt_batch_sink *s, char *why, size_t len)
{
    (void)h;
    const struct p2pt_coalesce *c = &s->groups;
    size_t two_d = 0;
    for (size_t i = 0; i < c->n; i++)
        two_d += p2pt__group_is_2d(&c->g[i]);
    if (len > 0)
        snprintf(why, len,
                 "; %zu pieces grouped into %zu copy-engine operations: %zu 2D copies (runs of "
                 "equal pieces at constant strides) and %zu plain ones (pieces adjacent on both "
                 "sides merged), each kind in one batched driver call where the driver allows",
                 b->pieces, c->n, two_d, c->n - two_d);
}

const struct p2pt_transport p2pt__transport_ce = {
    .name = "ce",
    .caps = P2PT_CAP_STAGED | P2PT_CAP_FALLBACK,
    .min_cc = 0,
    .init = ce_init,
    .fini = ce_fini,
    .report = ce_report,
    .can_copy = ce_can_copy,
    .prepare = ce_prepare,
    .copy = ce_copy,
    .batch_sink = ce_batch_sink,
    .batch_submit = ce_batch_submit,
    .batch_describe = ce_batch_describe,
    .batch_release = ce_batch_release,
    .copy_batch_device = NULL, /* only a kernel reads descriptors from GPU memory */
};
