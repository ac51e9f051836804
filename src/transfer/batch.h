/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batches as they travel from the entry points (api/batch.c) through the
 * operation pipeline (operation.c) to an engine.
 */
#ifndef P2PT_BATCH_H
#define P2PT_BATCH_H

#include "block_plan.h"
#include "coalesce.h"
#include "p2pt_kernel_abi.h"
#include "request.h"
#include "windows.h"

struct p2pt_transport;

/*
 * Where the pass over a host batch puts its pieces (batch_scan.c): the engine
 * that takes them says where (transport.h, batch_sink), the pass writes each
 * non-empty piece, in order, to whatever is set, and the engine's
 * batch_submit enqueues what it holds. It holds no pointer into itself, so
 * the pipeline may move it.
 */
struct p2pt_batch_sink {
    /* Asked by the pipeline before the engine's batch_sink hook: */
    bool dry;      /* a dry run: nothing will be submitted, so take nothing shared
                      (a staging ring's slot) */
    bool as_descs; /* the pieces must stay descriptors (descs set, and nothing
                      else written by the pass): the route waits for the pass, and
                      another engine may take them (the pipeline fills groups) */
    /* Set by the engine, each with room for the batch's count of pieces: */
    struct p2pt_batch_desc *descs; /* the pieces in the kernels' layout */
    struct p2pt_coalesce groups;   /* the copy engine's groups (coalesce.h),
                                      p2pt__coalesce_init'ed; groups.g NULL: none */
    int64_t *rows;  /* blocks kept as blocks: the mapping's rows copied here
                       (2 * rows values), and nothing written a piece */
    /* P2PT_LINK_SLOTS zeroed sums: piece i's bytes (i counting the pieces
       the kernel is handed) added to spread[i % P2PT_LINK_SLOTS], the link
       kernel's dealing (p2pt_kernel_abi.h); NULL: not wanted. Summed in
       dry runs too, so that explain sees what a launch would. */
    uint64_t *spread;
    void *own;      /* the engine's own, for its submit and release */
    /* Set by the pipeline: the engine whose sink it is (NULL: none open). */
    const struct p2pt_transport *engine;
};

/* A host batch: descriptors or blocks, resolved once and read in one pass. */
struct p2pt_batch {
    const p2pt_copy_desc *descs; /* NULL for pieces kept as blocks */
    /* Pieces kept as blocks (p2pt_copy_blocks_async over layers apart):
     * each made where it is read (p2pt__batch_piece); NULL: descs. */
    const struct p2pt_blocks *blocks;
    size_t count;
    const char *fn; /* the entry point, for messages */
    /* Pieces built from blocks (p2pt_copy_blocks_async): piece i is row
     * i % rows of layer i / rows, as messages name it; 0: the caller's
     * descriptors. */
    size_t rows;
    /* `pieces` and `bytes` known before any pass (blocks): a policy that
     * routes by them needs no pass to choose. */
    bool sums_known;
    /* Set by the policy before the pass (policy.h, route_batch): its choice
     * waits for what only the pass finds (the mean piece size of
     * descriptors, or a piece only the copy engine moves); the pieces stay
     * descriptors until then, and the pipeline routes on the pass's sums. */
    bool route_later;
    CUstream stream;
    CUcontext ctx;
    int device; /* the stream's device */
    /* Its first piece with bytes, resolved as a copy (p2pt__batch_first),
     * for a policy that routes by it. */
    struct p2pt_request first;
    /* Blocks whose every layer lies inside one registered window or one
     * mapped allocation on each side, as the start of the pass finds with
     * validation on: none of their pieces can be memory a kernel cannot
     * reach. */
    bool mapped;
    /* What the pass over the pieces found (batch_scan.c), valid once
     * `passed`: */
    bool passed;
    bool refused;   /* it refused a piece: the operation counts as rejected */
    size_t pieces;  /* those with bytes > 0 */
    uint64_t bytes; /* their payload */
    /* Of those, the pieces between pinned host memory and the stream's
     * device, by direction, and those across a peer link (found when the
     * facts are looked up: validation, link caps, the copy engine's groups,
     * or a route that waits). */
    size_t h2d, d2h, peer;
    size_t skewed;  /* pieces whose dst and src differ modulo 16 */
    uint64_t tiles; /* their P2PT_BATCH_TILES: the most CTAs a launch can use */
    /* The first accepted piece with a side only the copy engine moves
     * (p2pt__reach_ce_only), found with validation on: its index, and
     * whether that side is another device's memory not mapped here
     * (P2PT_REACH_UNMAPPED), which sends a batch routed after the pass to
     * the copy engine. An engine that cannot reach it is refused it: the
     * piece as the pass read it (ce_only_piece), checked again without
     * reading the caller's array. */
    bool ce_only;
    size_t ce_only_at;
    p2pt_copy_desc ce_only_piece;
    bool unmapped;
    unsigned passes; /* passes over the pieces so far, whoever made them */
    /* Set by the router for a kernel engine: the CTAs that saturate the
     * host link, h2d and d2h, and a peer link (0: no cap), indexed by
     * P2PT_LINK_*. A launch whose pieces all cross such links takes no
     * more. */
    uint32_t link[P2PT_LINKS];
    /* Where the pass put the pieces for the engine the route chose, from
     * the route step to dispatch (or describe), which releases it. */
    struct p2pt_batch_sink sink;
};

/* Piece i of `b`, wherever it is kept. */
static inline p2pt_copy_desc p2pt__batch_piece(const struct p2pt_batch *b, size_t i)
{
    return p2pt__piece_at(b->descs, b->blocks, i);
}

/* The most CTAs a kernel moving batch `b` may use for its links: when
 * every piece crosses a link (the host link either way, or a peer link),
 * the largest cap of the links its pieces cross; else, or where one of
 * those links has no cap, no cap (0). */
static inline uint32_t p2pt__batch_link_cap(const struct p2pt_batch *b)
{
    const size_t n[P2PT_LINKS] = {b->h2d, b->d2h, b->peer};
    if (b->pieces == 0 || n[0] + n[1] + n[2] != b->pieces)
        return 0;
    uint32_t cap = 0;
    for (int i = 0; i < P2PT_LINKS; i++) {
        if (n[i] != 0 && b->link[i] == 0)
            return 0;
        if (n[i] != 0 && b->link[i] > cap)
            cap = b->link[i];
    }
    return cap;
}

/* Blocks moved by a mapping in GPU memory (p2pt_copy_blocks_device_async):
 * the layers are read on the host (before the call returns), the mapping
 * when the batch runs. Piece l * pairs + r is row r of layer l. */
struct p2pt_device_blocks {
    const p2pt_block_layer *layers;
    size_t stride; /* bytes between the layer records, once checked */
    size_t n_layers;
    const int64_t *mapping; /* GPU memory: `pairs` (src block, dst block) rows */
    uint32_t pairs;
    /* A layout's layers (read and checked when it was made), else the
     * caller's, which the check reads once into `own` (malloc'ed, given
     * back by the entry point) and points `layers` at: the engine then
     * writes the pieces from what was checked. */
    bool kept;
    p2pt_block_layer *own;
};

/* A device-descriptor batch. */
struct p2pt_device_batch {
    const char *fn; /* the entry point, for messages */
    const p2pt_copy_desc *descs;
    const uint32_t *count;
    uint32_t max_count;
    void *workspace;
    /* Blocks (NULL: the caller's descriptors): descs and count lie in the
     * workspace (struct p2pt_blocks_ws_head), where the engine writes them
     * from the blocks on the stream before the batch reads them. */
    struct p2pt_device_blocks *blocks;
    /* The most CTAs its launches may use (0: no cap beyond the handle's),
     * set where its pieces cross a link: by a block layout's swap whose
     * every layer crosses the host link one way (the policy's link CTAs for
     * that direction), and by the pipeline where the windows hold another
     * GPU's memory (the policy's `link peer`): the pieces are unknown
     * until the kernel runs, so the windows stand for them, and a batch
     * that may cross NVLink takes what the link needs. */
    uint32_t grid_cap;
    /* CTA 0 writes the status record and copies nothing, even on a grid
     * narrower than the SMs: set by a swap toward the host, whose link
     * CTAs are what a GEMM beside bears (block_layout.c). */
    bool status_only;
    /* Semaphores the batch signals as it ends (struct p2pt_semaphore in
     * GPU memory the stream's device reaches): the caller's array as the
     * entry point read it once (api/signal.c), before the checks. */
    void *const *signals;
    uint32_t n_signals;
    /* Parts that signal apart (p2pt_copy_batch_device_marks_async): each
     * of `signals` is the first of n_marks semaphores in a row; 1 (set by
     * p2pt__op_device_batch): the batch signals as one. At least 1 past
     * the argument check (args.c), which refuses 0. */
    uint32_t n_marks;
    CUstream stream;
    CUcontext ctx;
    int device;
    const struct p2pt_window_set *windows; /* for `device`; NULL: none */
};

/* Most descriptors one device batch may declare (max_count). */
#define P2PT_DEVICE_BATCH_MAX (1u << 24)

/* The workspace a device batch of `max_count` descriptors needs
 * (p2pt_batch_workspace_bytes): the kernel plans in shared memory, so only
 * its status record. Here, beside the kernel's layout, so that validation
 * sizes the buffer without calling the public API. */
static inline size_t p2pt__batch_workspace_size(uint32_t max_count)
{
    (void)max_count;
    return sizeof(struct p2pt_batch_ws_head);
}

/* The workspace of blocks in GPU memory (p2pt_blocks_workspace_bytes): the
 * device batch's head, the count, and a descriptor a piece; SIZE_MAX when
 * that does not fit in size_t. */
static inline size_t p2pt__blocks_workspace_size(size_t n_layers, uint32_t pairs)
{
    size_t pieces, bytes;
    if (__builtin_mul_overflow(n_layers, (size_t)pairs, &pieces) ||
        __builtin_mul_overflow(pieces, sizeof(struct p2pt_batch_desc), &bytes) ||
        bytes > SIZE_MAX - sizeof(struct p2pt_blocks_ws_head))
        return SIZE_MAX;
    return sizeof(struct p2pt_blocks_ws_head) + bytes;
}

#endif /* P2PT_BATCH_H */
