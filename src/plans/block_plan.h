/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pieces of a block copy (p2pt_copy_blocks_async): a mapping of block
 * ids and a cache's layers become one host batch's descriptors, layer by
 * layer, after the checks a block mapping needs and a descriptor array
 * cannot express (ids inside their layers, no block written twice or
 * written and read). Pure arithmetic, CUDA-free, unit-tested: the
 * addresses are numbers here, where they live is the batch's business.
 */
#ifndef P2PT_BLOCK_PLAN_H
#define P2PT_BLOCK_PLAN_H

#include "common.h"

/* The pieces of a block copy. */
struct p2pt_block_pieces {
    p2pt_copy_desc *descs; /* count of them, malloc'ed: free() */
    size_t count;          /* n_layers * pairs */
    size_t rows;           /* pieces a layer: the mapping's pairs */
    size_t pieces;         /* those with bytes */
    uint64_t bytes;        /* their payload */
    bool sums_known;       /* pieces and bytes hold (false: too many bytes to add up) */
};

/*
 * Check the layers and the mapping, then build the pieces: piece
 * l * pairs + r is row r of layer l (a layer with blocks of 0 bytes gives
 * zero-byte pieces, which a batch skips). On failure status 4 (2: no
 * memory) with a message that starts with `fn` and names the layer or row,
 * and out->descs is NULL with count 0.
 */
P2PT_INTERNAL p2pt_status p2pt__block_plan(const char *fn, const p2pt_block_layer *layers,
                                           size_t n_layers, const int64_t *mapping, size_t pairs,
                                           struct p2pt_block_pieces *out);

#endif /* P2PT_BLOCK_PLAN_H */
