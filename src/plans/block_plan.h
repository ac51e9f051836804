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

/* Pieces as blocks: piece l * rows + r is mapping row r in layer l, made
 * where it is read (p2pt__block_piece) instead of written out first. */
struct p2pt_blocks {
    const p2pt_block_layer *layers;
    size_t stride;          /* bytes between the caller's layer records */
    const int64_t *mapping; /* rows (src block, dst block) pairs */
    size_t rows;
};

/* Record l of the caller's `layers`, `stride` bytes apart (their size). */
static inline const p2pt_block_layer *p2pt__layer_record(const p2pt_block_layer *layers,
                                                         size_t stride, size_t l)
{
    return (const p2pt_block_layer *)(const void *)((const char *)layers + l * stride);
}

/* Layer l of `k`. */
static inline const p2pt_block_layer *p2pt__block_layer_at(const struct p2pt_blocks *k, size_t l)
{
    return p2pt__layer_record(k->layers, k->stride, l);
}

/* Piece i of `k`: a layer of 0-byte blocks gives zero-byte pieces with
 * NULL addresses. */
static inline p2pt_copy_desc p2pt__block_piece(const struct p2pt_blocks *k, size_t i)
{
    const size_t l = i / k->rows, r = i % k->rows;
    const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
    const uint64_t bb = L->block_bytes;
    p2pt_copy_desc d;
    d.dst = bb ? (char *)L->dst + (uint64_t)k->mapping[2 * r + 1] * bb : NULL;
    d.src = bb ? (const char *)L->src + (uint64_t)k->mapping[2 * r] * bb : NULL;
    d.bytes = bb;
    return d;
}

/* Piece i of pieces kept written out in `descs`, or (descs NULL) as
 * `blocks`: what every reader of such pieces calls. */
static inline p2pt_copy_desc p2pt__piece_at(const p2pt_copy_desc *descs,
                                            const struct p2pt_blocks *blocks, size_t i)
{
    return descs != NULL ? descs[i] : p2pt__block_piece(blocks, i);
}

/* The pieces of a block copy: written out (descs) where the layers share
 * bytes and the pieces had to be compared by address, else left as blocks
 * (descs NULL), which a batch's pass reads as it goes: 24 bytes a piece
 * neither written nor read again. */
struct p2pt_block_pieces {
    p2pt_copy_desc *descs; /* count of them, malloc'ed, or NULL: see `blocks` */
    /* The caller's mapping, and its layers where they are not a layout's,
     * as read once (malloc'ed): a caller's thread that changes its arrays
     * during the call cannot have one piece checked and another moved. */
    int64_t *own_mapping;
    p2pt_block_layer *own_layers;
    struct p2pt_blocks blocks; /* the layers and mapping: the copies above, or a layout's layers */
    size_t count;          /* n_layers * pairs */
    size_t rows;           /* pieces a layer: the mapping's pairs */
    size_t pieces;         /* those with bytes */
    uint64_t bytes;        /* their payload */
    bool sums_known;       /* pieces and bytes hold (false: too many bytes to add up) */
};

/* Piece i of `p`, wherever it is kept. */
static inline p2pt_copy_desc p2pt__block_pieces_at(const struct p2pt_block_pieces *p, size_t i)
{
    return p2pt__piece_at(p->descs, &p->blocks, i);
}

/* The longest layer record any p2pt may read: records only grow by fields
 * appended, and a size past this is a bad one, not a later p2pt's. */
#define P2PT_BLOCK_LAYER_MAX_SIZE 1024

/*
 * The checks of the caller's `n` layer records (n >= 1) that need no
 * mapping: layers[0].size at least sizeof(p2pt_block_layer), a multiple of
 * its alignment, at most P2PT_BLOCK_LAYER_MAX_SIZE, and every record that
 * size (*stride: bytes between records), each side's blocks
 * inside the address space, a NULL base only without blocks. Status 4 with
 * a message that starts with `fn` and names the layer.
 */
P2PT_INTERNAL p2pt_status p2pt__block_layers_check(const char *fn, const p2pt_block_layer *layers,
                                                   size_t n, size_t *stride);

/*
 * The caller's `n` layer records (n >= 1) read once into `to` (n records
 * of sizeof(p2pt_block_layer), each size set to that), with the record
 * sizes checked as p2pt__block_layers_check checks them. The spans are
 * checked next, on the copy, by the caller (p2pt__block_facts or
 * p2pt__block_layers_check): every later use reads the copy, so what was
 * checked is what is used.
 */
P2PT_INTERNAL p2pt_status p2pt__block_layers_copy(const char *fn, const p2pt_block_layer *layers,
                                                  size_t n, p2pt_block_layer *to);

/* What the checks of a mapping need of its layers, found once
 * (p2pt__block_facts): a block layout (p2pt_block_layout_create) keeps them
 * for every mapping swapped on it. Valid while `layers` is. */
struct p2pt_block_facts {
    const p2pt_block_layer *layers;
    size_t n_layers;
    size_t stride;             /* bytes between the layer records */
    uint64_t min_src, min_dst; /* the fewest blocks of any layer with bytes */
    size_t min_src_at, min_dst_at;
    bool disjoint;             /* no layer's dst meets another's dst or any src */
    /* A bad id named as the cell of the mapping and the range of ids
     * ("block_mapping[r, c] = v: ... must be in [0, n) (src[l] has n
     * blocks)"), as the layout's calls word it; else by its row. */
    bool by_cell;
};

/*
 * The checks of p2pt__block_layers_check on `n` (from 1) layer records,
 * then the facts of them a mapping's checks need. Status 4 naming the layer.
 */
P2PT_INTERNAL p2pt_status p2pt__block_facts(const char *fn, const p2pt_block_layer *layers,
                                            size_t n, struct p2pt_block_facts *f);

/*
 * p2pt__block_plan on layers already checked and the library's own (a
 * layout's, or p2pt__block_plan's copy): the mapping read once, its checks
 * against facts `f`, then the pieces (the same refusals and the same out).
 */
P2PT_INTERNAL p2pt_status p2pt__block_plan_with(const char *fn, const struct p2pt_block_facts *f,
                                                const int64_t *mapping, size_t pairs,
                                                struct p2pt_block_pieces *out);

/*
 * Check the layers and the mapping, then describe the pieces: piece
 * l * pairs + r is row r of layer l (a layer with blocks of 0 bytes gives
 * zero-byte pieces, which a batch skips), written out only where layers
 * share bytes (see struct p2pt_block_pieces). On failure status 4 (2: no
 * memory) with a message that starts with `fn` and names the layer or row,
 * and *out holds nothing. The layers and the mapping are read once, into
 * copies that `out` holds until p2pt__block_pieces_free.
 */
P2PT_INTERNAL p2pt_status p2pt__block_plan(const char *fn, const p2pt_block_layer *layers,
                                           size_t n_layers, const int64_t *mapping, size_t pairs,
                                           struct p2pt_block_pieces *out);

/* What a plan holds (its pieces and its copies), given back; `p` zeroed. */
P2PT_INTERNAL void p2pt__block_pieces_free(struct p2pt_block_pieces *p);

#endif /* P2PT_BLOCK_PLAN_H */
