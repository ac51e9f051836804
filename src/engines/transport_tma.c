/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA transport: one launch per copy, whatever the size: the bulk-copy
 * ring of kernels/tma_copy.cu on a persistent grid, or for large local
 * copies kernels/stream_copy.cu. Read top to bottom: what it can copy,
 * prepare (compile, load, size the grid once per device), then the copy:
 * plan it once from the resolved request, launch. Batches are in
 * transport_tma_batch.c.
 */
#include <stdlib.h>
#include <string.h>

#include "chunk_plan.h"
#include "tma.h"

const struct p2pt_kernel p2pt__kernel_tma_copy = {
    .name = "tma_copy",
    .file = "kernels/tma_copy.cu",
    .source = p2pt__tma_copy_source,
    .entries = {"p2pt_tma_copy", NULL},
    .min_cc = 90,
    .defines = {NULL},
    .dynamic_smem = true,
};

const struct p2pt_kernel p2pt__kernel_stream_copy = {
    .name = "stream_copy",
    .file = "kernels/stream_copy.cu",
    .source = p2pt__stream_copy_source,
    .entries = {"p2pt_stream_copy", NULL},
    .min_cc = 90,
    .defines = {NULL},
};

/* The smallest chunk a copy is split into to reach more SMs: below a few KiB
 * the bulk copies' fixed cost outweighs the parallelism. */
#define MIN_SPLIT_CHUNK 4096u
/* Bytes per CTA of the streaming kernel: a 16-byte unit per thread. */
#define STREAM_CTA_BYTES (16u * P2PT_STREAM_THREADS)

/* Per handle: its settings (tma_settings.c declares them), per device the
 * CTAs one copy launch may use under them, worked out once (prepare or
 * first copy; 0 = not yet), and the counters. */
struct tma_state {
    struct p2pt_tma_settings settings;
    _Atomic uint32_t grid[P2PT_MAX_DEVICES];
    struct p2pt_tma_counters counters;
};

struct p2pt_tma_counters *p2pt__tma_counters(const struct p2pt_handle *h)
{
    struct tma_state *ts = p2pt__engine_state(h, &p2pt__transport_tma);
    return &ts->counters;
}

struct p2pt_tma_settings *p2pt__tma_settings(const struct p2pt_handle *h)
{
    struct tma_state *ts = p2pt__engine_state(h, &p2pt__transport_tma);
    return &ts->settings;
}

const struct p2pt_launch_settings *p2pt__tma_launch(const struct p2pt_handle *h)
{
    return &p2pt__tma_settings(h)->launch;
}

/* The settings as config read them become the engine's own for the
 * handle's lifetime. */
static p2pt_status tma_init(const struct p2pt_handle *h, void **state)
{
    struct tma_state *ts = calloc(1, sizeof(struct tma_state));
    if (ts == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a p2pt handle");
    ts->settings = *p2pt__tma_settings_in(&h->cfg);
    *state = ts;
    return P2PT_SUCCESS;
}

static void tma_fini(void *state)
{
    free(state);
}

static bool tma_can_copy(const struct p2pt_handle *h, const struct p2pt_request *r,
                         const char **why)
{
    (void)h;
    if (!r->coaligned) {
        /* No shift aligns both sides for cp.async.bulk; the copy engine
         * handles any alignment at full speed. */
        *why = "dst and src differ modulo 16, so no bulk copy can align both";
        return false;
    }
    return true;
}

/*
 * The CTAs one launch may use on the module's device under this handle's
 * configuration, worked out once per (handle, device) and kept in the
 * engine's state for the handle: the ring must fit the device's shared memory (status 4 naming
 * both otherwise), then p2pt__kernel_ctas for that ring.
 */
p2pt_status p2pt__tma_grid(struct p2pt_handle *h, const struct p2pt_module *m, uint32_t *grid)
{
    struct tma_state *ts = p2pt__engine_state(h, &p2pt__transport_tma);
    if (m->ordinal >= 0 && m->ordinal < P2PT_MAX_DEVICES &&
        (*grid = atomic_load_explicit(&ts->grid[m->ordinal], memory_order_relaxed)) != 0)
        return P2PT_SUCCESS;
    const struct p2pt_tma_settings *s = &ts->settings;
    size_t need = p2pt__tma_smem_bytes(s);
    if (need > (size_t)m->smem_per_block_optin)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "P2P_TRANSPORT_CHUNK_BYTES=%zu x P2P_TRANSPORT_STAGES=%d "
                          "needs %zu bytes of shared memory per CTA; device %d allows "
                          "%d",
                          s->chunk_bytes, s->stages, need, m->ordinal,
                          m->smem_per_block_optin);
    *grid = p2pt__kernel_ctas(h, &s->launch, m, need);
    if (m->ordinal >= 0 && m->ordinal < P2PT_MAX_DEVICES)
        atomic_store_explicit(&ts->grid[m->ordinal], *grid, memory_order_relaxed);
    return P2PT_SUCCESS;
}

/* Both kernels: a batch captured into a graph needs its module loaded
 * before capture just as a single copy does. */
static p2pt_status tma_prepare(struct p2pt_handle *h, int device)
{
    p2pt_status st = P2PT_SUCCESS;
    CUcontext ctx = NULL;
    bool pushed = false;
    const struct p2pt_module *m = NULL;
    uint32_t grid;

    P2PT_TRY(p2pt__ctx_enter(device, &ctx, &pushed));
    for (int k = 0; k < p2pt__kernel_count(&p2pt__transport_tma); k++) {
        P2PT_TRY(p2pt__jit_module(ctx, p2pt__transport_tma.kernels[k], &h->cfg, &h->log, NULL,
                                  &m));
        P2PT_TRY(p2pt__tma_grid(h, m, &grid));
    }
out:
    p2pt__ctx_leave(pushed);
    return st;
}

/*
 * The chunk size for one copy. P2P_TRANSPORT_CHUNK_BYTES is the maximum: a
 * local copy with fewer chunks than the grid has CTAs leaves SMs idle and
 * makes each CTA move its one chunk serially (a 64 KiB copy is two CTAs of
 * one 48 KiB chunk each), so such a copy is cut finer, down to
 * MIN_SPLIT_CHUNK, until every CTA has a share. Copies over NVLink keep full
 * chunks: fewer and larger bulk copies were faster there
 * (bench/results/experiments.md, split experiment).
 */
static size_t chunk_for(const struct p2pt_handle *h, const struct p2pt_request *r,
                        uint64_t grid)
{
    size_t chunk = p2pt__tma_settings(h)->chunk_bytes;
    size_t body = r->bytes; /* an upper bound of the aligned body is enough */
    if (r->path != P2PT_PATH_LOCAL || body / chunk >= grid)
        return chunk;
    size_t share = (size_t)((body + grid - 1) / grid);
    share = (share + P2PT_ALIGN - 1) / P2PT_ALIGN * P2PT_ALIGN;
    if (share < MIN_SPLIT_CHUNK)
        share = MIN_SPLIT_CHUNK;
    return share < chunk ? share : chunk;
}

/*
 * Whether a copy takes kernels/stream_copy.cu: a local copy from
 * P2P_TRANSPORT_STREAM_MIN on. Copies over NVLink were not measured with
 * it; a CTA cap (P2P_TRANSPORT_MAX_CTAS) asks for the grid that honours it;
 * and its grid, a CTA for every 4 KiB, must stay within CUDA's 2^31 - 1
 * CTAs (8 TiB). So does an SM budget.
 */
static bool takes_stream_kernel(const struct p2pt_handle *h, const struct p2pt_request *r)
{
    const struct p2pt_tma_settings *s = p2pt__tma_settings(h);
    return r->path == P2PT_PATH_LOCAL && s->stream_min != 0 && r->bytes >= s->stream_min &&
           s->launch.max_ctas == 0 && h->cfg.sm_budget < 0 &&
           r->bytes <= (uint64_t)0x7fffffffu * STREAM_CTA_BYTES;
}

/* A large local copy: kernels/stream_copy.cu, a CTA for every 4 KiB of the
 * body. */
static p2pt_status stream_copy(struct p2pt_handle *h, const struct p2pt_request *r)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_chunk_plan plan;
    const struct p2pt_module *m = NULL;
    CUstream stream = r->stream;

    P2PT_TRY(p2pt__chunk_plan((uintptr_t)r->dst, (uintptr_t)r->src, r->bytes, STREAM_CTA_BYTES,
                              &plan));
    uint64_t ctas = (plan.body + STREAM_CTA_BYTES - 1) / STREAM_CTA_BYTES;
    P2PT_TRY(p2pt__jit_module(r->ctx, &p2pt__kernel_stream_copy, &h->cfg, &h->log, &stream, &m));
    char *d = r->dst;
    const char *s = r->src;
    unsigned long long head = plan.head, body = plan.body, tail = plan.tail;
    void *params[] = {&d, &s, &head, &body, &tail};
    P2PT_TRY(p2pt__kernel_launch(h, p2pt__tma_launch(h), m->fn[P2PT_STREAM_ENTRY_COPY],
                                 ctas == 0 ? 1u : (unsigned)ctas, P2PT_STREAM_THREADS, 0, stream,
                                 params));
    atomic_fetch_add_explicit(&p2pt__tma_counters(h)->launches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p2pt__tma_counters(h)->stream_launches, 1, memory_order_relaxed);
out:
    return st;
}

static p2pt_status tma_copy(struct p2pt_handle *h, const struct p2pt_request *r)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_chunk_plan plan;
    const struct p2pt_module *m = NULL;
    CUstream stream = r->stream;
    uint32_t most;

    if (takes_stream_kernel(h, r))
        return stream_copy(h, r);
    const struct p2pt_tma_settings *set = p2pt__tma_settings(h);
    P2PT_TRY(p2pt__jit_module(r->ctx, &p2pt__kernel_tma_copy, &h->cfg, &h->log, &stream, &m));
    P2PT_TRY(p2pt__tma_grid(h, m, &most));
    P2PT_TRY(p2pt__chunk_plan((uintptr_t)r->dst, (uintptr_t)r->src, r->bytes,
                              chunk_for(h, r, most), &plan));

    char *d = r->dst;
    const char *s = r->src;
    unsigned long long head = plan.head, body = plan.body, tail = plan.tail;
    unsigned long long chunks = plan.chunks;
    unsigned chunk = (unsigned)plan.chunk, stages = (unsigned)set->stages;
    unsigned flags = set->l2_evict_first ? P2PT_FLAG_EVICT_FIRST : 0u;
    void *params[] = {&d, &s, &head, &body, &tail, &chunks, &chunk, &stages, &flags};
    uint64_t ctas = plan.chunks < most ? plan.chunks : most;
    if (r->grid_cap != 0 && ctas > r->grid_cap)
        ctas = r->grid_cap; /* the host link's CTAs: more only hold SMs */
    unsigned grid = ctas == 0 ? 1u : (unsigned)ctas;
    /* The ring is sized for this copy's chunk, which may be smaller than
     * the configured one. */
    unsigned smem = plan.chunks ? (unsigned)(plan.chunk * (size_t)stages) : 0;
    P2PT_TRY(p2pt__kernel_launch(h, &set->launch, m->fn[P2PT_TMA_ENTRY_COPY], grid,
                                 P2PT_TMA_THREADS, smem, stream, params));
    atomic_fetch_add_explicit(&p2pt__tma_counters(h)->launches, 1, memory_order_relaxed);
out:
    return st;
}

/* Its counters, and its settings in the properties that have always
 * reported them (chunk_bytes, stages, max_ctas, pdl). */
static void tma_report(const struct p2pt_handle *h, int e, const void *state,
                       p2pt_properties *p)
{
    const struct tma_state *ts = state;
    const struct p2pt_tma_counters *c = &ts->counters;
    p->chunk_bytes = ts->settings.chunk_bytes;
    p->stages = ts->settings.stages;
    p->max_ctas = ts->settings.launch.max_ctas;
    p->pdl = ts->settings.launch.pdl;
    p->tma_launches = atomic_load_explicit(&c->launches, memory_order_relaxed);
    p->stream_launches = atomic_load_explicit(&c->stream_launches, memory_order_relaxed);
    p->batch_launches = atomic_load_explicit(&c->batch_launches, memory_order_relaxed);
    p->tma_bytes = atomic_load(&h->stats.engine_bytes[e]);
    p->tma_batches = atomic_load(&h->stats.engine_batches[e]);
}

const struct p2pt_transport p2pt__transport_tma = {
    .name = "tma",
    .caps = P2PT_CAP_DEVICE_BATCH | P2PT_CAP_SIGNAL,
    .min_cc = 90,
    .settings = &p2pt__tma_settings_decl,
    .init = tma_init,
    .fini = tma_fini,
    .report = tma_report,
    .can_copy = tma_can_copy,
    .prepare = tma_prepare,
    .copy = tma_copy,
    .batch_sink = p2pt__tma_batch_sink,
    .batch_submit = p2pt__tma_batch_submit,
    .batch_describe = p2pt__tma_batch_describe,
    .batch_release = p2pt__tma_batch_release,
    .copy_batch_device = p2pt__tma_copy_batch_device,
    .signal = p2pt__tma_signal,
    .kernels = {&p2pt__kernel_tma_copy, &p2pt__kernel_stream_copy, &p2pt__kernel_batch_copy,
                &p2pt__kernel_link_copy, &p2pt__kernel_signal, NULL},
};
