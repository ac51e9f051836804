/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batches as they travel from the entry points (api/batch.c) through the
 * operation pipeline (operation.c) to an engine.
 */
#ifndef P2PT_BATCH_H
#define P2PT_BATCH_H

#include "block_plan.h"
#include "p2pt_kernel_abi.h"
#include "request.h"
#include "windows.h"

/* A host-descriptor batch, resolved once and read in one pass. */
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
     * routes by them needs no pass of its own. */
    bool sums_known;
    /* A policy that routes by the mean piece size before any pass guesses
     * it (auto: the first piece's size) and sets the sizes for which its
     * choice holds: the pass that finds the batch's mean outside
     * [mean_lo, mean_hi) ends with P2PT__ROUTE_AGAIN before anything is
     * enqueued, and the pipeline routes again on the sums it found. So a
     * batch of equal pieces is read once, and any batch goes where its mean
     * says. mean_hi 0: no guess to check. */
    uint64_t mean_lo, mean_hi;
    /* Set by a policy that would rather route again than refuse (auto):
     * a piece with a side that only the copy engine moves
     * (p2pt__reach_ce_only) ends a kernel engine's pass with
     * P2PT__ROUTE_AGAIN and sets `unmapped`, before anything is enqueued. */
    bool reroute_unmapped;
    bool unmapped;
    CUstream stream;
    CUcontext ctx;
    int device; /* the stream's device */
    /* Its first piece with bytes, resolved as a copy (p2pt__batch_first),
     * for a policy that routes by it. */
    struct p2pt_request first;
    /* What the pass over the descriptors found (batch_scan.c), valid once
     * `scanned`: */
    bool scanned;
    bool refused;   /* it refused a piece: the operation counts as rejected */
    size_t pieces;  /* those with bytes > 0 */
    uint64_t bytes; /* their payload */
    /* Of those, the pieces between pinned host memory and the stream's
     * device, by direction, and those across a peer link (found when
     * link[] is set or the facts are needed anyway). */
    size_t h2d, d2h, peer;
    size_t skewed;  /* pieces whose dst and src differ modulo 16 */
    unsigned passes; /* passes over the descriptors so far, whoever made them */
    /* Set by the router for a kernel engine: the CTAs that saturate the
     * host link, h2d and d2h, and a peer link (0: no cap), indexed by
     * P2PT_LINK_*. A launch whose pieces all cross such links takes no
     * more. */
    uint32_t link[P2PT_LINKS];
};

/* Piece i of `b`, wherever it is kept. */
static inline p2pt_copy_desc p2pt__batch_piece(const struct p2pt_batch *b, size_t i)
{
    return p2pt__piece_at(b->descs, b->blocks, i);
}

/* What a pass returns when the batch's mean piece size is outside the
 * guess its engine was chosen for (mean_lo, mean_hi), or it found a piece
 * only the copy engine moves (reroute_unmapped): not an error, and never
 * returned by an entry point. */
#define P2PT__ROUTE_AGAIN ((p2pt_status)0x100)

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
    size_t stride; /* bytes between the caller's layer records, once checked */
    size_t n_layers;
    const int64_t *mapping; /* GPU memory: `pairs` (src block, dst block) rows */
    uint32_t pairs;
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
    CUstream stream;
    CUcontext ctx;
    int device;
    const struct p2pt_window_set *windows; /* for `device`; NULL: none */
    /* Set by the pipeline where the windows hold another GPU's memory: the
     * CTAs a peer link needs (the policy's `link peer`; 0: no cap). The
     * pieces are unknown until the kernel runs, so the windows stand for
     * them: a batch that may cross NVLink takes what the link needs. */
    uint32_t peer_cap;
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
