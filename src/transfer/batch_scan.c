/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pass over a host batch's descriptors. A batch of 16,384 pieces is
 * 384 KiB of descriptors; reading them once instead of once per step
 * (arguments, facts, the copy into the engine's buffer or the copy
 * engine's groups) is most of what a host batch costs the caller beyond
 * its fixed calls. The loop is written once and specialised by the
 * compiler for each combination of what it checks and writes, so a pass
 * that only checks arguments carries no lookup and no store.
 *
 * Facts: a piece inside registered windows needs no driver call; any other
 * side is located through the batch's allocation memo (alloc_memo.h), one
 * pointer query per allocation the batch touches, so pinned host memory
 * costs what device memory costs. A piece that runs past the end of its
 * allocation is refused like any other failed fact.
 */
#include <stdlib.h>

#include "alloc_memo.h"
#include "args.h"
#include "batch_scan.h"
#include "coalesce.h"
#include "handle.h"
#include "transport.h"
#include "validate.h"

struct scan_out {
    size_t pieces, dir[P2PT_LINKS], skewed;
    uint64_t bytes, tiles;
};

/* What every piece's step reads: the batch, where facts come from, where
 * pieces go, and the hints that keep consecutive lookups cheap. */
struct scan_ctx {
    const struct p2pt_batch *b;
    const struct p2pt_window_set *ws;
    const struct p2pt_transport *t;
    bool refuse;
    const char *fallback;
    struct p2pt_alloc_memo *memo;
    struct p2pt_batch_desc *out;
    struct p2pt_coalesce *groups;
    int dst_hint, src_hint; /* destinations and sources sit in different windows */
    int memo_hint[2];       /* ... and different allocations */
};

/* The facts of a piece, or of a run of pieces that share them (a layer of
 * blocks): the link it crosses (P2PT_LINK_*, -1 none) and the bounds of the windows or
 * allocations its sides lie in (dhi 0: a range the driver does not
 * report). */
struct run_facts {
    int dir;
    uint64_t dlo, dhi, slo, shi;
};

/* Which link a piece between two windows crosses: the host link's way when
 * one side is pinned host memory (h2d, d2h), else a peer link when a side
 * is another GPU's memory, else none (-1). */
static inline int window_link(const struct p2pt_window_set *ws, int d, int s)
{
    if (ws->host[d] != ws->host[s])
        return ws->host[s] ? P2PT_LINK_H2D : P2PT_LINK_D2H;
    return !ws->host[d] && (ws->peer[d] || ws->peer[s]) ? P2PT_LINK_PEER : -1;
}

/* Both [d, +dn) and [s, +sn) inside registered windows: their facts. */
static inline bool window_facts(struct scan_ctx *c, uintptr_t d, uint64_t dn, uintptr_t s,
                                uint64_t sn, struct run_facts *f)
{
    const struct p2pt_window_set *ws = c->ws;
    if (!p2pt__window_holds(ws, d, dn, &c->dst_hint) ||
        !p2pt__window_holds(ws, s, sn, &c->src_hint))
        return false;
    /* A window lies inside one allocation: its range bounds a run. */
    f->dir = window_link(ws, c->dst_hint, c->src_hint);
    f->dlo = ws->w[c->dst_hint].base, f->dhi = ws->w[c->dst_hint].end;
    f->slo = ws->w[c->src_hint].base, f->shi = ws->w[c->src_hint].end;
    return true;
}

/* The facts of a run whose sides lie in the allocations `d` and `s`
 * describe. */
static inline void side_facts(const struct p2pt_side *d, const struct p2pt_side *s, int device,
                              struct run_facts *f)
{
    f->dir = p2pt__piece_link(d, s, device);
    f->dlo = d->start, f->dhi = d->start + d->size;
    f->slo = s->start, f->shi = s->start + s->size;
}

/* Both [d, +dn) and [s, +sn) inside remembered allocations that the
 * device maps: their facts (the memo's entries were checked when the
 * driver was asked). */
static inline bool memo_facts(struct scan_ctx *c, uintptr_t d, uint64_t dn, uintptr_t s,
                              uint64_t sn, struct run_facts *f)
{
    const struct p2pt_side *dm, *sm;
    if ((dm = p2pt__memo_find(c->memo, d, &c->memo_hint[0])) == NULL ||
        (sm = p2pt__memo_find(c->memo, s, &c->memo_hint[1])) == NULL ||
        dm->reach != P2PT_REACH_MAPPED || sm->reach != P2PT_REACH_MAPPED ||
        p2pt__side_straddles(dm, d, dn) || p2pt__side_straddles(sm, s, sn))
        return false;
    side_facts(dm, sm, c->b->device, f);
    return true;
}

/* The facts of piece i, [d, +n) from [s, +n): windows, the memo inline
 * (the common case), else the driver, which also refuses. */
static inline __attribute__((always_inline)) p2pt_status
piece_facts(struct scan_ctx *c, size_t i, uintptr_t d, uintptr_t s, uint64_t n,
            struct run_facts *f)
{
    if (window_facts(c, d, n, s, n, f) || memo_facts(c, d, n, s, n, f))
        return P2PT_SUCCESS;
    struct p2pt_side ds, ss;
    p2pt_status st = p2pt__piece_facts(c->b, i, c->t, c->refuse, c->fallback, c->memo,
                                       c->memo_hint, &ds, &ss);
    if (st != P2PT_SUCCESS)
        return st;
    side_facts(&ds, &ss, c->b->device, f);
    if (ds.size == 0 || ss.size == 0)
        f->dhi = 0; /* memory whose range the driver does not report */
    return P2PT_SUCCESS;
}

/* Piece i: its arguments, its facts (those of its run when `run` is not
 * NULL), and where it goes. */
static inline __attribute__((always_inline)) p2pt_status
take(struct scan_ctx *c, size_t i, uintptr_t d, uintptr_t s, uint64_t n,
     const struct run_facts *run, const bool facts, const bool write, const bool group,
     struct scan_out *o)
{
    struct run_facts f = {-1, 0, 0, 0, 0};
    if (!p2pt__args_ok(d, s, n))
        return p2pt__piece_args_fail(c->b, i);
    if (facts) {
        if (run == NULL) {
            p2pt_status st = piece_facts(c, i, d, s, n, &f);
            if (st != P2PT_SUCCESS)
                return st;
            run = &f;
        }
        if (run->dir >= 0)
            o->dir[run->dir]++;
    }
    if (write) {
        struct p2pt_batch_desc *e = &c->out[o->pieces];
        e->dst = d;
        e->src = s;
        e->bytes = n;
    }
    o->tiles += P2PT_BATCH_TILES((uint64_t)d, n);
    if (group)
        p2pt__coalesce_add(c->groups, d, s, n, run->dlo, run->dhi, run->slo, run->shi);
    o->skewed += ((d ^ s) & 15) != 0;
    o->pieces++;
    o->bytes += n;
    return P2PT_SUCCESS;
}

/* Facts that hold for every block of layer L: its whole dst and src spans
 * inside a window each, or inside a remembered allocation each (asked of
 * the driver through the layer's first piece, `first`, which the driver's
 * answer also checks, as the per-piece pass would). *known false: the
 * spans do not lie so (a layer over two allocations), and its pieces are
 * looked up one by one. */
static p2pt_status layer_facts(struct scan_ctx *c, const p2pt_block_layer *L, size_t first,
                               struct run_facts *f, bool *known)
{
    const uintptr_t d = (uintptr_t)L->dst, s = (uintptr_t)L->src;
    const uint64_t dn = L->dst_blocks * L->block_bytes, sn = L->src_blocks * L->block_bytes;
    *known = window_facts(c, d, dn, s, sn, f) || memo_facts(c, d, dn, s, sn, f);
    if (*known)
        return P2PT_SUCCESS;
    const p2pt_copy_desc p = p2pt__block_piece(c->b->blocks, first);
    struct run_facts one;
    p2pt_status st = piece_facts(c, first, (uintptr_t)p.dst, (uintptr_t)p.src, p.bytes, &one);
    if (st == P2PT_SUCCESS)
        *known = memo_facts(c, d, dn, s, sn, f);
    return st;
}

/* Blocks: layer by layer, each piece made from its layer and mapping row
 * here, with its layer's facts where they hold for the whole layer. (The
 * plan keeps blocks only for layers that are apart and ids inside them,
 * which the arguments check still confirms piece by piece.) */
static inline __attribute__((always_inline)) p2pt_status
scan_blocks(struct scan_ctx *c, const bool facts, const bool write, const bool group,
            struct scan_out *o)
{
    const struct p2pt_blocks *k = c->b->blocks;
    const size_t rows = k->rows, layers = c->b->count / rows;
    const int64_t *map = k->mapping;
    for (size_t l = 0; l < layers; l++) {
        const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
        const uint64_t bb = L->block_bytes;
        if (bb == 0)
            continue;
        struct run_facts f;
        bool known = false;
        if (facts) {
            p2pt_status st = layer_facts(c, L, l * rows, &f, &known);
            if (st != P2PT_SUCCESS)
                return st;
        }
        const uintptr_t dl = (uintptr_t)L->dst, sl = (uintptr_t)L->src;
        if (known && !write && !group && bb % 16 == 0) {
            /* Nothing to write out, and every piece of the layer shares its
             * facts and its alignment: the layer at once. The plan put each
             * piece inside its layer, and layers apart, so each piece's
             * arguments hold (no NULL, no wrap, no overlap). */
            if (f.dir >= 0)
                o->dir[f.dir] += rows;
            o->tiles += rows * P2PT_BATCH_TILES((uint64_t)dl, bb);
            o->skewed += ((dl ^ sl) & 15) != 0 ? rows : 0;
            o->pieces += rows;
            o->bytes += rows * bb;
            continue;
        }
        for (size_t r = 0; r < rows; r++) {
            const uintptr_t d = dl + (uint64_t)map[2 * r + 1] * bb;
            const uintptr_t s = sl + (uint64_t)map[2 * r] * bb;
            p2pt_status st = take(c, l * rows + r, d, s, bb, known ? &f : NULL, facts, write,
                                  group, o);
            if (st != P2PT_SUCCESS)
                return st;
        }
    }
    return P2PT_SUCCESS;
}

/* Should the copy engine take blocks block by block? Its groups (coalesce.h)
 * form from consecutive pieces. Layer by layer, a block follows the one
 * before it in the mapping: they merge only where the mapping's rows run
 * on adjacent ids. Block by block, a block's layers follow each other: where
 * the layers sit at constant strides on both sides (a cache cut into layers
 * of one tensor), each block becomes one 2D copy of a row per layer.
 * Whichever order makes fewer groups, as far as the layers and the mapping
 * tell: `rows` 2D copies against a copy per layer for each run of adjacent
 * rows. */
static bool blocks_by_block(const struct p2pt_blocks *k, size_t layers)
{
    if (layers < P2PT_COALESCE_MIN_ROWS || k->rows < 2)
        return false;
    const p2pt_block_layer *L0 = p2pt__block_layer_at(k, 0), *L1 = p2pt__block_layer_at(k, 1);
    const uint64_t bb = L0->block_bytes;
    const uint64_t dstep = (uintptr_t)L1->dst - (uintptr_t)L0->dst;
    const uint64_t sstep = (uintptr_t)L1->src - (uintptr_t)L0->src;
    if (bb == 0 || (uintptr_t)L1->dst <= (uintptr_t)L0->dst ||
        (uintptr_t)L1->src <= (uintptr_t)L0->src || dstep < bb || sstep < bb ||
        dstep > P2PT_COALESCE_MAX_PITCH || sstep > P2PT_COALESCE_MAX_PITCH)
        return false;
    for (size_t l = 2; l < layers; l++) {
        const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
        if (L->block_bytes != bb || (uintptr_t)L->dst - (uintptr_t)L0->dst != l * dstep ||
            (uintptr_t)L->src - (uintptr_t)L0->src != l * sstep)
            return false;
    }
    const int64_t *map = k->mapping;
    size_t runs = 1;
    for (size_t r = 1; r < k->rows; r++)
        runs += map[2 * r] != map[2 * r - 2] + 1 || map[2 * r + 1] != map[2 * r - 1] + 1;
    return k->rows < layers * runs; /* layers * runs <= the batch's count */
}

/* Blocks for the copy engine block by block (blocks_by_block): every
 * layer's facts first, then each mapping row through every layer. */
static p2pt_status scan_blocks_by_block(struct scan_ctx *c, struct scan_out *o)
{
    const struct p2pt_blocks *k = c->b->blocks;
    const size_t rows = k->rows, layers = c->b->count / rows;
    const int64_t *map = k->mapping;
    struct layer_run {
        struct run_facts f;
        bool known; /* f holds for every block of the layer */
    } on_stack[64], *lr = on_stack;
    p2pt_status st = P2PT_SUCCESS;
    if (layers > P2PT_ARRAY_LEN(on_stack) && (lr = malloc(layers * sizeof(*lr))) == NULL)
        return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: out of host memory for %zu layers", c->b->fn,
                          layers);
    for (size_t l = 0; l < layers; l++)
        P2PT_TRY(layer_facts(c, p2pt__block_layer_at(k, l), l * rows, &lr[l].f, &lr[l].known));
    const uint64_t bb = p2pt__block_layer_at(k, 0)->block_bytes;
    for (size_t r = 0; r < rows; r++) {
        const uint64_t doff = (uint64_t)map[2 * r + 1] * bb, soff = (uint64_t)map[2 * r] * bb;
        for (size_t l = 0; l < layers; l++) {
            const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
            P2PT_TRY(take(c, l * rows + r, (uintptr_t)L->dst + doff, (uintptr_t)L->src + soff,
                          bb, lr[l].known ? &lr[l].f : NULL, true, false, true, o));
        }
    }
out:
    if (lr != on_stack)
        free(lr);
    return st;
}

static inline __attribute__((always_inline)) p2pt_status
scan_loop(struct scan_ctx *c, const bool facts, const bool write, const bool group,
          struct scan_out *o)
{
    if (c->b->blocks != NULL && group && facts && !write &&
        blocks_by_block(c->b->blocks, c->b->count / c->b->blocks->rows))
        return scan_blocks_by_block(c, o);
    if (c->b->blocks != NULL)
        return scan_blocks(c, facts, write, group, o);
    const p2pt_copy_desc *descs = c->b->descs;
    const size_t count = c->b->count;
    for (size_t i = 0; i < count; i++) {
        const uint64_t n = descs[i].bytes;
        if (n == 0)
            continue;
        p2pt_status st = take(c, i, (uintptr_t)descs[i].dst, (uintptr_t)descs[i].src, n, NULL,
                              facts, write, group, o);
        if (st != P2PT_SUCCESS)
            return st;
    }
    return P2PT_SUCCESS;
}

static p2pt_status scan(const struct p2pt_handle *h, struct p2pt_batch *b,
                        const struct p2pt_transport *t, bool want_facts,
                        struct p2pt_batch_desc *out, uint64_t *tiles,
                        struct p2pt_coalesce *groups)
{
    const bool refuse = t != NULL && h->cfg.validate;
    const bool facts = t != NULL && (refuse || want_facts);
    struct p2pt_alloc_memo memo;
    struct scan_ctx c = {b,    facts ? p2pt__windows(&h->windows, b->device) : NULL,
                         t,    refuse,
                         h->cfg.fallback,
                         &memo, out,
                         groups, -1, -1, {-1, -1}};
    struct scan_out o = {0, {0, 0, 0}, 0, 0, 0};
    p2pt_status st;
    p2pt__memo_init(&memo, b->device);
    /* The first piece's sides, found while routing (auto): their
     * allocations cost no second query, once they pass the check the
     * first piece would get on its own. */
    const struct p2pt_request *first = &b->first;
    if (facts && first->bytes != 0 && (!refuse || p2pt__refuse(first, t, c.fallback) ==
                                                      P2PT_SUCCESS)) {
        p2pt__memo_seed(&memo, &first->dst_side);
        p2pt__memo_seed(&memo, &first->src_side);
    }
    if (groups != NULL)
        st = scan_loop(&c, true, false, true, &o);
    else if (facts)
        st = out ? scan_loop(&c, true, true, false, &o) : scan_loop(&c, true, false, false, &o);
    else
        st = out ? scan_loop(&c, false, true, false, &o) : scan_loop(&c, false, false, false, &o);
    if (st == P2PT__ROUTE_AGAIN)
        b->unmapped = true; /* a piece only the copy engine moves */
    if (st == P2PT_SUCCESS && b->mean_hi != 0 && o.pieces != 0) {
        const uint64_t mean = o.bytes / o.pieces;
        if (mean < b->mean_lo || mean >= b->mean_hi)
            st = P2PT__ROUTE_AGAIN; /* the sums below are what the route needs */
    }
    b->scanned = true;
    b->passes++;
    b->refused = st != P2PT_SUCCESS && st != P2PT__ROUTE_AGAIN;
    b->pieces = o.pieces;
    b->h2d = o.dir[P2PT_LINK_H2D];
    b->d2h = o.dir[P2PT_LINK_D2H];
    b->peer = o.dir[P2PT_LINK_PEER];
    b->skewed = o.skewed;
    b->bytes = o.bytes;
    if (tiles != NULL)
        *tiles = o.tiles;
    return st;
}

p2pt_status p2pt__batch_scan(const struct p2pt_handle *h, struct p2pt_batch *b,
                             const struct p2pt_transport *t, struct p2pt_batch_desc *out,
                             uint64_t *tiles)
{
    /* A kernel engine with a link cap to apply needs each piece's link. */
    bool classify = false;
    for (int i = 0; i < P2PT_LINKS; i++)
        classify = classify || (t != NULL && b->link[i] != 0);
    return scan(h, b, t, classify, out, tiles, NULL);
}

p2pt_status p2pt__batch_scan_groups(const struct p2pt_handle *h, struct p2pt_batch *b,
                                    const struct p2pt_transport *t,
                                    struct p2pt_coalesce *groups)
{
    p2pt_status st = scan(h, b, t, true, NULL, NULL, groups);
    p2pt__coalesce_end(groups);
    return st;
}
