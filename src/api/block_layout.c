/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Block layouts (p2pt.h's p2pt_block_layout_*): a cache's layers checked
 * once and kept, and the one call that swaps a mapping on them. A layout
 * holds what every swap would otherwise find again: a checked copy of the
 * layer records, the facts a mapping's checks need (block_plan.c: the
 * fewest blocks of a layer, whether layers share bytes) and, from its
 * first swap of a mapping in GPU memory, which way its pieces cross the
 * host link.
 *
 * A swap takes the path of the call that does the same work for layers
 * given afresh: a host mapping is checked against the kept facts and runs
 * as blocks.c's host batch; a GPU mapping runs as blocks_device.c's device
 * batch. For a host batch the router finds from the pieces whether they all
 * cross the host link and caps the grid at the policy's link CTAs; a device
 * batch's pieces are read on the GPU, so here the layout tells it, and the
 * router's link CTAs (p2pt__route_link) for that way cap the grid.
 */
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "block_plan.h"
#include "driver.h"
#include "handles.h"
#include "operation.h"
#include "router.h"

/* The first word of every live layout ("p2ptBlkL"): a pointer that is not a
 * layout is refused by name instead of read as one. */
#define LAYOUT_MAGIC 0x70327074426c6b4cull

/* What the layout learnt of the host link, in one word so that threads that
 * swap a new layout at once store the same answer without a lock: bit 63
 * set once known; bits 8-39 the device it holds for; bits 0-7 the way
 * (P2PT_LINK_H2D or P2PT_LINK_D2H) plus one, 0 when the pieces do not all
 * cross the link one way. */
#define LINK_KNOWN (1ull << 63)

struct p2pt_block_layout {
    uint64_t magic;
    struct p2pt_block_facts facts; /* of `layers` below */
    _Atomic uint64_t link;
    p2pt_block_layer layers[]; /* the caller's records, each of size sizeof(p2pt_block_layer) */
};

static p2pt_status check_layout(const p2pt_block_layout *layout, const char *fn)
{
    if (layout == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layout is NULL: expected one made by p2pt_block_layout_create", fn);
    if (layout->magic != LAYOUT_MAGIC)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %p is not a block layout (make one with p2pt_block_layout_create)",
                          fn, (const void *)layout);
    return P2PT_SUCCESS;
}

p2pt_status p2pt_block_layout_create(const p2pt_block_layer *layers, size_t n_layers,
                                     p2pt_block_layout **out)
{
    const char *fn = "p2pt_block_layout_create";
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_block_layout *lay = NULL;
    size_t bytes;

    if (out == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (layers == NULL || n_layers == 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layers %p, n_layers %zu: expected an array of at least one "
                          "p2pt_block_layer record",
                          fn, (const void *)layers, n_layers);
    if (__builtin_mul_overflow(n_layers, sizeof(p2pt_block_layer), &bytes) ||
        __builtin_add_overflow(bytes, sizeof(*lay), &bytes)) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: %zu layers: more than memory can hold", fn,
                        n_layers);
        goto out;
    }
    if ((lay = malloc(bytes)) == NULL) {
        st = p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for a layout of %zu layers", fn,
                        n_layers);
        goto out;
    }
    P2PT_TRY(p2pt__block_layers_copy(fn, layers, n_layers, lay->layers));
    P2PT_TRY(p2pt__block_facts(fn, lay->layers, n_layers, &lay->facts));
    lay->facts.by_cell = true;
    atomic_init(&lay->link, 0);
    lay->magic = LAYOUT_MAGIC;
    *out = lay;
    lay = NULL;
out:
    free(lay);
    return st;
}

p2pt_status p2pt_block_layout_destroy(p2pt_block_layout *layout)
{
    if (layout == NULL)
        return P2PT_SUCCESS;
    p2pt_status st = check_layout(layout, "p2pt_block_layout_destroy");
    if (st != P2PT_SUCCESS)
        return st;
    layout->magic = 0;
    free(layout);
    return P2PT_SUCCESS;
}

/* The record of a swap of `pieces` pieces that copied them all. */
static void write_record(p2pt_batch_status *record, size_t pieces)
{
    if (record == NULL)
        return;
    memset(record, 0, sizeof(*record));
    record->count = record->copied = pieces > UINT32_MAX ? UINT32_MAX : (uint32_t)pieces;
    record->first_bad = UINT32_MAX;
}

p2pt_status p2pt_block_layout_check(const p2pt_block_layout *layout, const int64_t *block_mapping,
                                    size_t rows, p2pt_batch_status *record)
{
    const char *fn = "p2pt_block_layout_check";
    struct p2pt_block_pieces p;
    p2pt_status st = check_layout(layout, fn);
    if (st == P2PT_SUCCESS)
        st = p2pt__block_plan_with(fn, &layout->facts, block_mapping, rows, &p);
    if (st != P2PT_SUCCESS)
        return st;
    write_record(record, p.count);
    p2pt__block_pieces_free(&p);
    return P2PT_SUCCESS;
}

/* A host mapping: checked against the layout's facts, then its pieces as
 * one host batch through the pipeline (blocks.c's run, the layers' checks
 * already made). */
static p2pt_status swap_host(p2pt_handle *h, const char *fn, const p2pt_block_layout *layout,
                             const int64_t *mapping, size_t rows, p2pt_batch_status *record,
                             void *stream)
{
    struct p2pt_block_pieces p;
    struct p2pt_op op;
    p2pt_status st = p2pt__block_plan_with(fn, &layout->facts, mapping, rows, &p);
    if (st != P2PT_SUCCESS)
        return st;
    if (p.count != 0) { /* no piece: the stream is not touched */
        p2pt__op_blocks(&op, fn, &p, stream);
        st = p2pt__op_run(h, &op, NULL);
    }
    const size_t count = p.count;
    p2pt__block_pieces_free(&p);
    if (st == P2PT_SUCCESS)
        write_record(record, count);
    return st;
}

/* `side` for address `p` as device `device` sees it: the one it holds when
 * its allocation contains `p` (layers of one pool are asked once), else
 * located afresh. */
static p2pt_status locate_in(const void *p, int device, struct p2pt_side *side)
{
    const uint64_t a = (uint64_t)(uintptr_t)p;
    if (side->size != 0 && a >= side->start && a - side->start < side->size)
        return P2PT_SUCCESS;
    return p2pt__locate(p, device, side);
}

/* Which way every layer's pieces cross the host link of the stream's
 * device (p2pt__link_dir of each layer's bases: every layer the same way,
 * else none), found once: the memory stays where it is while the layout
 * lives (its contract). */
static p2pt_status find_link(p2pt_block_layout *layout, void *stream, uint64_t *out)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_side dst, src;
    CUcontext ctx = NULL;
    int device = 0, dir = -2; /* -2: no layer seen yet */
    bool pushed = false;

    memset(&dst, 0, sizeof(dst));
    memset(&src, 0, sizeof(src));
    P2PT_TRY(p2pt__stream_enter((CUstream)stream, &ctx, &device, &pushed));
    for (size_t l = 0; l < layout->facts.n_layers && dir != -1; l++) {
        const p2pt_block_layer *L = &layout->layers[l];
        P2PT_TRY(locate_in(L->dst, device, &dst));
        P2PT_TRY(locate_in(L->src, device, &src));
        const int way = p2pt__link_dir(&dst, &src, device);
        dir = dir == -2 || dir == way ? way : -1;
    }
    *out = LINK_KNOWN | (uint64_t)(uint32_t)device << 8 | (uint64_t)(dir < 0 ? 0 : dir + 1);
    atomic_store_explicit(&layout->link, *out, memory_order_relaxed);
out:
    p2pt__stream_leave(pushed);
    return st;
}

/* The grid cap of a GPU mapping's device batch: where the layout's pieces
 * all cross the host link one way, the router's link CTAs for that way on
 * that device (0: none). The engine is asked first, as the pipeline asks
 * it: a transport that reads no GPU descriptors is refused before any
 * driver call. */
static p2pt_status link_cap(p2pt_handle *h, const char *fn, p2pt_block_layout *layout,
                            void *stream, uint32_t *cap, int *way)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_transport *t = NULL;
    uint32_t link[P2PT_LINKS] = {0};
    uint64_t v = atomic_load_explicit(&layout->link, memory_order_relaxed);

    *cap = 0;
    *way = -1;
    P2PT_TRY(p2pt__route_device_batch(h, fn, &t, NULL, 0));
    if ((v & LINK_KNOWN) == 0)
        P2PT_TRY(find_link(layout, stream, &v));
    if ((v & 0xff) == 0)
        return P2PT_SUCCESS;
    P2PT_TRY(p2pt__route_link(h, t, (int)(uint32_t)(v >> 8), link));
    *way = (int)(v & 0xff) - 1;
    *cap = link[*way];
out:
    return st;
}

/* A GPU mapping: blocks_device.c's device batch, its arguments checked
 * before the link is looked for (no driver call for a bad argument), its
 * grid capped by the link where the layout crosses it. */
static p2pt_status swap_gpu(p2pt_handle *h, const char *fn, p2pt_block_layout *layout,
                            const int64_t *mapping, size_t rows, void *workspace, void *stream)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_op op;
    if (rows > UINT32_MAX)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %zu rows: a mapping in GPU memory has at most %u (a device "
                          "batch's count is 32 bits)",
                          fn, rows, UINT32_MAX);
    if (rows == 0)
        return P2PT_SUCCESS;
    struct p2pt_device_blocks k = {layout->layers, sizeof(p2pt_block_layer),
                                   layout->facts.n_layers, mapping, (uint32_t)rows, true, NULL};
    p2pt__op_device_blocks(&op, fn, &k, workspace, stream);
    if ((st = p2pt__device_blocks_check(&op.device)) != P2PT_SUCCESS) {
        /* Counted as the pipeline counts a refused argument. */
        atomic_fetch_add_explicit(&h->stats.rejected, 1, memory_order_relaxed);
        return st;
    }
    int way = -1;
    P2PT_TRY(link_cap(h, fn, layout, stream, &op.device.grid_cap, &way));
    /* Toward the host a third copying CTA slows a GEMM beside by 0.15-0.26
     * (bench/results/offload.md): CTA 0 writes the record and leaves. */
    op.device.status_only = way == P2PT_LINK_D2H;
    st = p2pt__op_run(h, &op, NULL);
out:
    return st;
}

p2pt_status p2pt_block_layout_swap(p2pt_handle *h, p2pt_block_layout *layout,
                                   const int64_t *block_mapping, size_t rows, unsigned flags,
                                   void *record_or_workspace, void *stream)
{
    const char *fn = "p2pt_block_layout_swap";
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st == P2PT_SUCCESS)
        st = check_layout(layout, fn);
    if (st != P2PT_SUCCESS)
        return st;
    if ((flags & ~P2PT_BLOCK_MAPPING_ON_GPU) != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: flags %#x: expected 0 (a mapping in host memory) or "
                          "P2PT_BLOCK_MAPPING_ON_GPU (%#x)",
                          fn, flags, P2PT_BLOCK_MAPPING_ON_GPU);
    if (flags & P2PT_BLOCK_MAPPING_ON_GPU)
        return swap_gpu(h, fn, layout, block_mapping, rows, record_or_workspace, stream);
    return swap_host(h, fn, layout, block_mapping, rows, record_or_workspace, stream);
}
