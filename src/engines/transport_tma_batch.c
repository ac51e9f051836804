/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TMA batches: kernels/batch_copy.cu, one kernel for host and device
 * descriptors.
 *
 * Host batches: the pipeline's pass (src/transfer/batch_scan.c) reads every
 * piece once and puts it where this engine's sink says, checking them all
 * before anything is enqueued: a refused piece leaves the stream untouched.
 * A batch of more than 128 descriptors goes to the context's staging ring
 * (transport_tma_ring.c), then one launch. Smaller batches, batches
 * captured into a graph, and contexts without a ring travel in the kernel's
 * parameters: up to 1344 non-empty pieces per launch (32 KiB of
 * parameters), the small entry point taking 128 when that is enough; a
 * larger batch goes to a buffer, then as few launches as that allows
 * (src/plans/batch_plan.c), back to back on the stream (programmatic
 * dependent launch overlaps each with the previous one's tail). The driver
 * copies the parameters at launch, and graph capture into the graph, so the
 * caller's array is free on return either way.
 *
 * Device descriptors: one launch; its CTAs read the count and the
 * descriptors from GPU memory and check them against the windows, passed in
 * the parameters. CTA 0 writes the status record into the workspace
 * (and copies too on a grid narrower than the SMs).
 * Blocks in GPU memory (p2pt_copy_blocks_device_async) are a device batch
 * whose count and descriptors the expand kernel writes into the workspace
 * first, on the same stream: a launch per P2PT_EXPAND_LAYERS layers, each
 * writing its layers' descriptors. The batch kernel waits for them as it
 * waits for any earlier writer (griddepcontrol.wait before its first read).
 *
 * The grid: P2PT_BATCH_CTAS_PER_SM CTAs of 8 warps per SM (the kernel's
 * launch bounds), capped by P2P_TRANSPORT_MAX_CTAS and the SM budget, and
 * for host batches by the launch's tile count (a warp per tile is all a
 * small batch can use) and, when every piece crosses the host link, by the
 * CTAs that saturate it (the router's b->link; for a device batch, its
 * grid_cap, which a caller that knows where the pieces lie sets): a
 * transfer that PCIe caps gains nothing from more, and they hold SMs that
 * compute beside it needs.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "batch_plan.h"
#include "tma.h"

const struct p2pt_kernel p2pt__kernel_batch_copy = {
    .name = "batch_copy",
    .file = "kernels/batch_copy.cu",
    .source = p2pt__batch_copy_source,
    .entries = {"p2pt_batch_copy_s", "p2pt_batch_copy_l", "p2pt_batch_copy_dev",
                "p2pt_batch_copy_ring", "p2pt_batch_expand", "p2pt_batch_copy_marks", NULL},
    .min_cc = 90,
    .defines = {NULL},
};

/* Per thread: launch parameters are built here (32 KiB is too much for a
 * framework thread's stack); the driver copies them at launch. */
static _Thread_local struct p2pt_batch_large large;
static _Thread_local struct p2pt_batch_small small;
static _Thread_local struct p2pt_batch_dev_params dev;
static _Thread_local struct p2pt_expand_params expand;

/* Where a host batch's pieces went, from its sink to its release. Per
 * thread, like the parameters: the pipeline holds one batch's sink of an
 * engine at a time on a thread. */
enum where { NOWHERE, RING, PARAMS, BUFFER };
struct tma_batch {
    enum where where;
    const struct p2pt_module *m, *lm; /* the batch kernel's module; the link kernel's */
    unsigned most;                    /* CTAs a launch may use */
    struct p2pt_tma_slot slot;        /* RING */
    struct p2pt_batch_desc *buffer;   /* BUFFER: every piece, for several launches */
    uint64_t spread[P2PT_LINK_SLOTS]; /* the link kernel's slots, summed by the pass (last) */
};
static _Thread_local struct tma_batch held;

/* One launch of up to P2PT_BATCH_LARGE pieces, already in large.desc. */
static p2pt_status launch_params(struct p2pt_handle *h, const struct p2pt_batch *b,
                                 const struct p2pt_module *m, size_t n, uint64_t tiles,
                                 unsigned most, CUstream stream)
{
    const struct p2pt_launch_settings ls = p2pt__tma_batch_launch(h, b);
    p2pt_status st = P2PT_SUCCESS;
    void *param;
    CUfunction fn;
    if (n <= P2PT_BATCH_SMALL) {
        memcpy(small.desc, large.desc, n * sizeof(large.desc[0]));
        small.count = (unsigned)n;
        param = &small;
        fn = m->fn[P2PT_BATCH_ENTRY_SMALL];
    } else {
        large.count = (unsigned)n;
        param = &large;
        fn = m->fn[P2PT_BATCH_ENTRY_LARGE];
    }
    unsigned grid = tiles < most ? (unsigned)tiles : most;
    void *params[] = {param};
    P2PT_TRY(p2pt__kernel_launch(h, &ls, fn, grid, P2PT_BATCH_THREADS, 0, stream,
                                 params));
    atomic_fetch_add_explicit(&p2pt__tma_counters(h)->batch_launches, 1, memory_order_relaxed);
out:
    return st;
}

/* Descriptors for every piece of `b` outside the ring: the parameters
 * when one launch takes them, else a buffer. */
static p2pt_status descriptors(const struct p2pt_batch *b, struct p2pt_batch_sink *s,
                               struct tma_batch *tb)
{
    if (b->count <= P2PT_BATCH_LARGE) {
        s->descs = large.desc;
        tb->where = PARAMS;
        return P2PT_SUCCESS;
    }
    tb->buffer = b->count <= SIZE_MAX / sizeof(*tb->buffer)
                     ? malloc(b->count * sizeof(*tb->buffer))
                     : NULL;
    if (tb->buffer == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "out of host memory for a batch of %zu", b->count);
    s->descs = tb->buffer;
    tb->where = BUFFER;
    return P2PT_SUCCESS;
}

/*
 * Where the pass puts a host batch's pieces: a slot of the context's
 * staging ring for more than P2PT_BATCH_SMALL (descriptors, or the rows of
 * blocks the kernels make the pieces of), else the kernel parameters, else,
 * more than one launch's worth without the ring, a buffer the launches take
 * them from. A dry run takes no slot, and needs the pieces written out only
 * where another engine may take them (as_descs).
 */
p2pt_status p2pt__tma_batch_sink(struct p2pt_handle *h, const struct p2pt_batch *b,
                                 struct p2pt_batch_sink *s)
{
    p2pt_status st = P2PT_SUCCESS;
    struct tma_batch *tb = &held;
    CUstream stream = b->stream;
    bool got = false;

    /* All but the slots, which only a batch that may take the link kernel
     * zeroes (a kilobyte a call for every small batch otherwise). */
    memset(tb, 0, offsetof(struct tma_batch, spread));
    s->own = tb;
    /* Host-link caps: the pass sums the link kernel's slots, for the
     * launch (or a dry run's words) to see how evenly it deals them. */
    if (b->count > P2PT_BATCH_SMALL && (b->link[0] != 0 || b->link[1] != 0)) {
        memset(tb->spread, 0, sizeof(tb->spread));
        s->spread = tb->spread;
    }
    if (s->dry)
        return s->as_descs ? descriptors(b, s, tb) : P2PT_SUCCESS;
    P2PT_TRY(p2pt__jit_module(b->ctx, &p2pt__kernel_batch_copy, &h->cfg, &h->log, &stream,
                              &tb->m));
    tb->most = p2pt__kernel_grid(h, p2pt__tma_launch(h), tb->m, P2PT_BATCH_CTAS_PER_SM);
    if (b->count > P2PT_BATCH_SMALL) {
        /* The link kernel's module, where the router gave host-link caps:
         * the pass finds out whether every piece crosses the link. */
        if (b->link[0] != 0 || b->link[1] != 0)
            P2PT_TRY(p2pt__jit_module(b->ctx, &p2pt__kernel_link_copy, &h->cfg, &h->log,
                                      &stream, &tb->lm));
        P2PT_TRY(p2pt__tma_ring_open(h, b, s, &tb->slot, &got));
        if (got) {
            tb->where = RING;
            goto out;
        }
    }
    st = descriptors(b, s, tb);
out:
    return st;
}

/*
 * The launches of a host batch whose every piece passed: one from the
 * ring or the parameters; from a buffer, as few as the parameters allow
 * (src/plans/batch_plan.c), back to back on the stream (programmatic
 * dependent launch overlaps each with the previous one's tail).
 */
p2pt_status p2pt__tma_batch_submit(struct p2pt_handle *h, const struct p2pt_batch *b,
                                   struct p2pt_batch_sink *s)
{
    p2pt_status st = P2PT_SUCCESS;
    struct tma_batch *tb = s->own;
    const unsigned most = p2pt__tma_link_grid(b, tb->most);
    struct p2pt_batch_cursor cur = {0};
    uint64_t tiles = 0;

    switch (tb->where) {
    case RING:
        return p2pt__tma_ring_submit(h, b, &tb->slot, tb->m, tb->lm, s->spread, tb->most);
    case PARAMS:
        return launch_params(h, b, tb->m, b->pieces, b->tiles, most, b->stream);
    case BUFFER:
        for (;;) {
            _Static_assert(sizeof(struct p2pt_batch_desc) == sizeof(p2pt_copy_desc),
                           "the buffer's descriptors are read as the public ones");
            size_t n = p2pt__batch_fill((const p2pt_copy_desc *)(const void *)tb->buffer, NULL,
                                        b->pieces, &cur, large.desc, P2PT_BATCH_LARGE, &tiles);
            if (n == 0)
                break;
            P2PT_TRY(launch_params(h, b, tb->m, n, tiles, most, b->stream));
        }
        break;
    case NOWHERE:
        st = p2pt__fail(P2PT_INTERNAL_ERROR, "tma: a batch submitted from a dry run's sink");
        break;
    }
out:
    return st;
}

void p2pt__tma_batch_release(struct p2pt_handle *h, struct p2pt_batch_sink *s)
{
    (void)h;
    struct tma_batch *tb = s->own;
    if (tb == NULL)
        return;
    if (tb->where == RING)
        p2pt__tma_ring_close(&tb->slot);
    free(tb->buffer);
    memset(tb, 0, offsetof(struct tma_batch, spread));
}

/* The count and the descriptors of blocks `k` written into the workspace
 * of `b`, by as few expand launches as the parameters allow. The work is a
 * few bytes a piece: a CTA per P2PT_EXPAND_THREADS pieces up to one per SM
 * (capped like every launch, the SM budget included), each thread walking
 * the launch's pieces at the grid's stride. */
static p2pt_status expand_blocks(struct p2pt_handle *h, const struct p2pt_device_batch *b,
                                 const struct p2pt_module *m,
                                 const struct p2pt_launch_settings *ls, CUstream stream)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_device_blocks *k = b->blocks;
    unsigned most = p2pt__kernel_grid(h, ls, m, 1);
    if (b->grid_cap != 0 && b->grid_cap < most)
        most = b->grid_cap;
    for (size_t first = 0; first < k->n_layers; first += P2PT_EXPAND_LAYERS) {
        const size_t n = k->n_layers - first < P2PT_EXPAND_LAYERS ? k->n_layers - first
                                                                  : P2PT_EXPAND_LAYERS;
        memset(&expand, 0, sizeof(expand));
        expand.mapping = (unsigned long long)(uintptr_t)k->mapping;
        expand.workspace = (unsigned long long)(uintptr_t)b->workspace;
        expand.pairs = k->pairs;
        expand.first_layer = (unsigned)first;
        expand.n_layers = (unsigned)n;
        expand.pieces = b->max_count;
        for (size_t l = 0; l < n; l++) {
            const p2pt_block_layer *L = p2pt__layer_record(k->layers, k->stride, first + l);
            expand.layer[l] = (struct p2pt_expand_layer){
                (unsigned long long)(uintptr_t)L->dst, (unsigned long long)(uintptr_t)L->src,
                L->block_bytes, L->dst_blocks, L->src_blocks};
        }
        const uint64_t ctas = ((uint64_t)n * k->pairs + P2PT_EXPAND_THREADS - 1) /
                              P2PT_EXPAND_THREADS;
        const unsigned grid = ctas < most ? (unsigned)ctas : most;
        void *params[] = {&expand};
        P2PT_TRY(p2pt__kernel_launch(h, ls, m->fn[P2PT_BATCH_ENTRY_EXPAND], grid,
                                     P2PT_EXPAND_THREADS, 0, stream, params));
    }
out:
    return st;
}

p2pt_status p2pt__tma_copy_batch_device(struct p2pt_handle *h, const struct p2pt_device_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_module *m = NULL;
    CUstream stream = b->stream;

    /* Narrowed to its link's CTAs: without PDL, as a host batch across the
     * link (p2pt__tma_batch_launch). */
    const struct p2pt_launch_settings ls =
        b->grid_cap != 0 ? p2pt__launch_narrowed(p2pt__tma_launch(h)) : *p2pt__tma_launch(h);

    P2PT_TRY(p2pt__jit_module(b->ctx, &p2pt__kernel_batch_copy, &h->cfg, &h->log, &stream, &m));
    if (b->blocks != NULL)
        P2PT_TRY(expand_blocks(h, b, m, &ls, stream));
    memset(&dev, 0, sizeof(dev));
    dev.workspace = (unsigned long long)(uintptr_t)b->workspace;
    dev.descs = (unsigned long long)(uintptr_t)b->descs;
    dev.count = (unsigned long long)(uintptr_t)b->count;
    dev.max_count = b->max_count;
    if (b->windows != NULL) {
        dev.n_windows = (unsigned)b->windows->n;
        memcpy(dev.window, b->windows->w, (size_t)b->windows->n * sizeof(dev.window[0]));
    }
    dev.n_signals = b->n_signals;
    for (uint32_t i = 0; i < b->n_signals; i++)
        dev.signal[i] = (unsigned long long)(uintptr_t)b->signals[i];
    /* In parts: an entry of its own, one CTA an SM (kernels/batch_copy.cu). */
    const bool marks = b->n_marks > 1;
    dev.n_marks = b->n_marks;
    /* CTA 0 writes the status record; every other copies. The work is
     * unknown until the kernel runs, so the grid is all the cap allows, or
     * what a link needs: a layout's host link (block_layout.c) or a peer
     * link where the windows hold another GPU's memory (operation.c). On a
     * grid narrower than the SMs CTA 0 copies too once the record is
     * written: there each CTA is ~1/grid of the batch's rate (32 CTAs
     * across NVLink, a budget beside a GEMM); not toward the host, where
     * the link's CTAs are already what a GEMM beside bears. */
    unsigned grid = p2pt__kernel_grid(h, &ls, m, marks ? 1 : P2PT_BATCH_CTAS_PER_SM);
    if (b->grid_cap != 0 && b->grid_cap < grid)
        grid = b->grid_cap;
    grid = grid < 2 ? 2 : grid;
    dev.status_copies = grid < (unsigned)m->sm_count && !b->status_only;
    /* Across NVLink on a narrow grid each CTA carries ~1/grid of the batch:
     * there its CTAs take equal shares of the pieces (so no CTA carries
     * more than another), which the marks entry does in one part. The full
     * grid keeps whole descriptor blocks (a share crossing a block's end
     * costs a round trip more: 1024 x 14 KiB 15 % slower), and so do narrow
     * grids on one GPU or toward the host, not measured with shares
     * (kernels/batch_tiles.cuh, copy_all; bench/results/peer.md 5u). So does a batch
     * of one block at most (a count exchange's few pieces): its CTAs share
     * that block's tiles either way, and the plain entry reads its
     * descriptors beside the count (bench/results/peer.md 5v). */
    dev.equal_shares = dev.status_copies && b->max_count > P2PT_BATCH_BLOCK &&
                       b->windows != NULL && b->windows->n_peer > 0;
    void *params[] = {&dev};
    const int entry =
        marks || dev.equal_shares ? P2PT_BATCH_ENTRY_MARKS : P2PT_BATCH_ENTRY_DEVICE;
    const unsigned threads =
        entry == P2PT_BATCH_ENTRY_MARKS ? P2PT_BATCH_MARKS_THREADS : P2PT_BATCH_THREADS;
    P2PT_TRY(p2pt__kernel_launch(h, &ls, m->fn[entry], grid, threads, 0, stream, params));
    atomic_fetch_add_explicit(&p2pt__tma_counters(h)->batch_launches, 1, memory_order_relaxed);
out:
    return st;
}
