/*
 * The TMA transport: one launch of kernels/tma_copy.cu per copy, whatever
 * the size. Read top to bottom: plan the copy, send what TMA cannot do to the
 * copy engine, find the kernel loaded in the stream's context, size the grid,
 * launch.
 */
#include <string.h>

#include "p2pt_internal.h"

/* Never more than two CTAs per SM: one elected thread per CTA keeps its
 * whole ring in flight, so more CTAs only split the same shared memory. */
#define MAX_CTAS_PER_SM 2
#define PER_CTA_SMEM_OVERHEAD 1024 /* driver-reserved shared memory per CTA */

static p2pt_status check_smem(const struct p2pt_handle *h, const struct p2pt_module *m)
{
    size_t need = p2pt__config_smem_bytes(&h->cfg);
    if (need > (size_t)m->smem_per_block_optin)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "P2P_TRANSPORT_CHUNK_BYTES=%zu x P2P_TRANSPORT_STAGES=%d "
                          "needs %zu bytes of shared memory per CTA; device %d allows "
                          "%d",
                          h->cfg.chunk_bytes, h->cfg.stages, need, m->ordinal,
                          m->smem_per_block_optin);
    return P2PT_SUCCESS;
}

static p2pt_status tma_prepare(struct p2pt_handle *h, int device)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext ctx = NULL;
    bool pushed = false;
    const struct p2pt_module *m = NULL;

    P2PT_TRY(p2pt__ctx_enter(device, &ctx, &pushed));
    P2PT_TRY(p2pt__jit_module(ctx, &h->cfg, &h->log, NULL, &m));
    P2PT_TRY(check_smem(h, m));
out:
    p2pt__ctx_leave(pushed);
    return st;
}

/* The most CTAs one launch uses for this configuration on this device. */
static uint64_t max_grid(const struct p2pt_handle *h, const struct p2pt_module *m)
{
    size_t smem = p2pt__config_smem_bytes(&h->cfg) + PER_CTA_SMEM_OVERHEAD;
    uint64_t per_sm = (uint64_t)m->smem_per_sm / smem;
    if (per_sm > MAX_CTAS_PER_SM)
        per_sm = MAX_CTAS_PER_SM;
    if (per_sm == 0)
        per_sm = 1;
    uint64_t grid = per_sm * (uint64_t)m->sm_count;
    if (h->cfg.max_ctas > 0 && (uint64_t)h->cfg.max_ctas < grid)
        grid = (uint64_t)h->cfg.max_ctas;
    return grid;
}

/* The smallest chunk a copy is split into to reach more SMs: below a few KiB
 * the bulk copies' fixed cost outweighs the parallelism. */
#define MIN_SPLIT_CHUNK 4096u

/*
 * The chunk size for one local copy. P2P_TRANSPORT_CHUNK_BYTES is the
 * maximum: a copy with fewer chunks than the grid has CTAs leaves SMs idle
 * and makes each CTA move its one chunk serially (a 64 KiB copy is two CTAs
 * of one 48 KiB chunk each), so such a copy is cut finer, down to
 * MIN_SPLIT_CHUNK, until every CTA has a share.
 */
static size_t chunk_for(const struct p2pt_handle *h, size_t body, uint64_t grid)
{
    size_t chunk = h->cfg.chunk_bytes;
    if (grid == 0 || body == 0 || body / chunk >= grid)
        return chunk;
    size_t share = (size_t)((body + grid - 1) / grid);
    share = (share + P2PT_ALIGN - 1) / P2PT_ALIGN * P2PT_ALIGN;
    if (share < MIN_SPLIT_CHUNK)
        share = MIN_SPLIT_CHUNK;
    return share < chunk ? share : chunk;
}

static p2pt_status tma_copy(struct p2pt_handle *h, struct p2pt_copy *c)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_chunk_plan plan;
    void *dst = c->dst;
    const void *src = c->src;
    size_t bytes = c->bytes;
    CUstream stream = c->stream;
    CUcontext ctx = c->ctx; /* known when validation ran */
    const struct p2pt_module *m = NULL;

    P2PT_TRY(p2pt__chunk_plan((uintptr_t)dst, (uintptr_t)src, bytes, h->cfg.chunk_bytes,
                              &plan));
    if (!plan.coaligned) {
        /* No shift aligns both sides for cp.async.bulk: the copy engine
         * handles any alignment at full speed. */
        atomic_fetch_add_explicit(&h->stats.ce_fallbacks, 1, memory_order_relaxed);
        if (atomic_exchange(&h->fallback_logged, 1) == 0)
            P2PT_INFO(&h->log,
                      "tma: dst %p and src %p differ modulo 16; such copies go to the "
                      "copy engine (logged once, counted in ce_fallbacks)",
                      dst, src);
        return p2pt__transport_ce.copy(h, c);
    }

    if (ctx == NULL)
        P2PT_CU(p2pt__cu.cuStreamGetCtx(stream, &ctx));
    if (ctx == NULL) {
        st = p2pt__fail(P2PT_INVALID_USAGE,
                        "stream %p has no CUDA context (the default stream needs a "
                        "current context on this thread)",
                        (void *)stream);
        goto out;
    }
    P2PT_TRY(p2pt__jit_module(ctx, &h->cfg, &h->log, &stream, &m));
    P2PT_TRY(check_smem(h, m));
    uint64_t most = max_grid(h, m);
    /* Only local copies are split finer: over NVLink, fewer and larger bulk
     * copies were faster at 1-2 MiB (bench/RESULTS.md, split experiment). */
    bool candidate = plan.body != 0 && plan.chunks < most;
    if (candidate)
        p2pt__copy_locate(c);
    if (candidate && c->dst_dev == m->ordinal && c->src_dev == m->ordinal) {
        size_t chunk_bytes = chunk_for(h, plan.body, most);
        if (chunk_bytes != plan.chunk)
            P2PT_TRY(
                p2pt__chunk_plan((uintptr_t)dst, (uintptr_t)src, bytes, chunk_bytes, &plan));
    }

    char *d = dst;
    const char *s = src;
    unsigned long long head = plan.head, body = plan.body, tail = plan.tail;
    unsigned long long chunks = plan.chunks;
    unsigned chunk = (unsigned)plan.chunk, stages = (unsigned)h->cfg.stages;
    uint64_t ctas = plan.chunks < most ? plan.chunks : most;
    unsigned flags = h->cfg.l2_evict_first ? P2PT_TMA_FLAG_EVICT_FIRST : 0u;
    void *params[] = {&d, &s, &head, &body, &tail, &chunks, &chunk, &stages, &flags};
    unsigned grid = ctas == 0 ? 1u : (unsigned)ctas;
    /* The ring is sized for this copy's chunk, which may be below the
     * configured one. */
    unsigned smem = plan.chunks ? (unsigned)(plan.chunk * (size_t)h->cfg.stages) : 0;
    if (h->cfg.pdl && p2pt__cu.cuLaunchKernelEx != NULL) {
        /* Programmatic dependent launch (kernels/tma_copy.cu says what the
         * kernel does with it): a copy right behind another one in the
         * stream launches while the first drains. Measured in
         * bench/RESULTS.md (back-to-back small copies). */
        CUlaunchAttribute pdl;
        memset(&pdl, 0, sizeof(pdl));
        pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        pdl.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig lc;
        memset(&lc, 0, sizeof(lc));
        lc.gridDimX = grid;
        lc.gridDimY = lc.gridDimZ = 1;
        lc.blockDimX = P2PT_TMA_THREADS;
        lc.blockDimY = lc.blockDimZ = 1;
        lc.sharedMemBytes = smem;
        lc.hStream = stream;
        lc.attrs = &pdl;
        lc.numAttrs = 1;
        P2PT_CU(p2pt__cu.cuLaunchKernelEx(&lc, m->fn, params, NULL));
    } else {
        P2PT_CU(p2pt__cu.cuLaunchKernel(m->fn, grid, 1, 1, P2PT_TMA_THREADS, 1, 1, smem,
                                        stream, params, NULL));
    }
    atomic_fetch_add_explicit(&h->stats.tma_launches, 1, memory_order_relaxed);
out:
    return st;
}

const struct p2pt_transport_ops p2pt__transport_tma = {
    .name = "tma",
    .prepare = tma_prepare,
    .copy = tma_copy,
};
