/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pass over a host batch's pieces. A batch of 16,384 pieces is 384 KiB
 * of descriptors; reading them once instead of once per step (arguments,
 * facts, sums, the copy into the engine's buffer or the copy engine's
 * groups) is most of what a host batch costs the caller beyond its fixed
 * calls. So the pipeline makes this one pass for every engine, and the
 * engine only says where the pieces go (its sink, batch.h). The loop is
 * written once and specialised by the compiler for each combination of what
 * it checks and writes, so a pass that only checks arguments carries no
 * lookup and no store.
 *
 * Facts: a piece inside registered windows needs no driver call; any other
 * side is located through the batch's allocation memo (alloc_memo.h), one
 * pointer query per allocation the batch touches, so pinned host memory
 * costs what device memory costs. A piece that runs past the end of its
 * allocation is refused like any other failed fact. Blocks are looked up a
 * layer at a time where a layer lies inside one window or allocation on
 * each side; with validation on, every layer before any piece, so that the
 * route knows whether a piece could turn out to be memory a kernel cannot
 * reach.
 *
 * A route that waits for the pass (b->route_later) has the pieces left as
 * descriptors: the engine the route then chooses takes them as they are,
 * copied, or grouped from them (p2pt__batch_pass_fill, their allocations
 * found again in the memo the pass filled), without the caller's pieces
 * being read again. (Noting in the loop where each piece's allocations
 * change would slow every such pass, bench/results/batches.md; the lookups
 * cost only the batches the copy engine then takes.) The sums a loop adds
 * up stay in registers, which is why its struct has no array and each
 * combination of what the pass writes has a function of its own.
 */
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "batch_scan.h"
#include "handle.h"
#include "transport.h"
#include "validate.h"

/* What one pass adds up, and where it writes (the sink's, kept here beside
 * the counters the loop touches for every piece). Fields only, no array: a
 * loop's copy of it then lives in registers. */
struct scan_out {
    size_t pieces, h2d, d2h, peer, skewed;
    uint64_t bytes, tiles;
    struct p2pt_batch_desc *out;
    struct p2pt_coalesce *groups;
    uint64_t *spread; /* the sink's: the link kernel's slots */
};

_Static_assert((P2PT_LINK_SLOTS & (P2PT_LINK_SLOTS - 1)) == 0, "the slots a power of two");

/* `n` pieces of `bytes` each from piece `first` on, into the link kernel's
 * slots (p2pt_batch_sink.spread): whole turns of the slots at once. */
static void spread_run(uint64_t *spread, size_t first, size_t n, uint64_t bytes)
{
    if (n >= P2PT_LINK_SLOTS) {
        const uint64_t each = (uint64_t)(n / P2PT_LINK_SLOTS) * bytes;
        for (size_t k = 0; k < P2PT_LINK_SLOTS; k++)
            spread[k] += each;
        n %= P2PT_LINK_SLOTS; /* what is left starts at `first`'s slot again */
    }
    for (size_t k = 0; k < n; k++)
        spread[(first + k) & (P2PT_LINK_SLOTS - 1)] += bytes;
}

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
static inline __attribute__((always_inline)) bool
window_facts(struct p2pt_batch_pass *p, uintptr_t d, uint64_t dn, uintptr_t s, uint64_t sn,
             struct p2pt_run_facts *f)
{
    const struct p2pt_window_set *ws = p->ws;
    if (ws == NULL || !p2pt__window_holds(ws, d, dn, &p->dst_hint) ||
        !p2pt__window_holds(ws, s, sn, &p->src_hint))
        return false;
    /* A window lies inside one allocation: its range bounds a run. */
    f->dir = window_link(ws, p->dst_hint, p->src_hint);
    f->dlo = ws->w[p->dst_hint].base, f->dhi = ws->w[p->dst_hint].end;
    f->slo = ws->w[p->src_hint].base, f->shi = ws->w[p->src_hint].end;
    return true;
}

/* The facts of a run whose sides lie in the allocations `d` and `s`
 * describe. */
static inline void side_facts(const struct p2pt_side *d, const struct p2pt_side *s, int device,
                              struct p2pt_run_facts *f)
{
    f->dir = p2pt__piece_link(d, s, device);
    f->dlo = d->start, f->dhi = d->start + d->size;
    f->slo = s->start, f->shi = s->start + s->size;
}

/* Both [d, +dn) and [s, +sn) inside remembered allocations that the
 * device maps: their facts (the memo's entries were checked when the
 * driver was asked). */
static inline __attribute__((always_inline)) bool
memo_facts(struct p2pt_batch_pass *p, uintptr_t d, uint64_t dn, uintptr_t s, uint64_t sn,
           struct p2pt_run_facts *f)
{
    const struct p2pt_side *dm, *sm;
    if ((dm = p2pt__memo_find(&p->memo, d, &p->memo_hint[0])) == NULL ||
        (sm = p2pt__memo_find(&p->memo, s, &p->memo_hint[1])) == NULL ||
        dm->reach != P2PT_REACH_MAPPED || sm->reach != P2PT_REACH_MAPPED ||
        p2pt__side_straddles(dm, d, dn) || p2pt__side_straddles(sm, s, sn))
        return false;
    side_facts(dm, sm, p->b->device, f);
    return true;
}

/* Piece i (`d`, as the pass read it), its sides found by the driver or the
 * memo, against what the pass checks them for. A piece with a side only
 * the copy engine moves is noted (the first: b->ce_only); under a route
 * that waits, the first that is another device's unmapped memory makes the
 * pass check the rest as the copy engine would, where the route will send
 * them. */
static p2pt_status check_sides(struct p2pt_batch_pass *p, size_t i, const p2pt_copy_desc *d,
                               const struct p2pt_side *ds, const struct p2pt_side *ss)
{
    struct p2pt_batch *b = p->b;
    const bool ce_only = p2pt__reach_ce_only(ds->reach) || p2pt__reach_ce_only(ss->reach);
    const bool unmapped = ds->reach == P2PT_REACH_UNMAPPED || ss->reach == P2PT_REACH_UNMAPPED;
    if (ce_only && !p->staged && b->route_later && unmapped)
        p->staged = true;
    p2pt_status st = p2pt__piece_check(b, i, d, p->staged, p->fallback, ds, ss);
    if (st == P2PT_SUCCESS && ce_only && !b->ce_only) {
        b->ce_only = true;
        b->ce_only_at = i;
        b->ce_only_piece = *d;
        b->unmapped = unmapped;
    }
    return st;
}

/* The facts of a piece whose two sides were located afresh. */
static inline void located_facts(const struct p2pt_side *ds, const struct p2pt_side *ss,
                                 int device, struct p2pt_run_facts *f)
{
    side_facts(ds, ss, device, f);
    if (ds->size == 0 || ss->size == 0)
        f->dhi = 0; /* memory whose range the driver does not report */
}

/* The facts of piece i, [d, +n) from [s, +n): windows, the memo inline
 * (the common case), else the driver, and the checks, all of the values
 * read once by the loop: a caller's thread that changes the piece
 * meanwhile cannot have one piece checked and another moved. */
static inline __attribute__((always_inline)) p2pt_status
piece_facts(struct p2pt_batch_pass *p, size_t i, uintptr_t d, uintptr_t s, uint64_t n,
            struct p2pt_run_facts *f)
{
    if (window_facts(p, d, n, s, n, f) || memo_facts(p, d, n, s, n, f))
        return P2PT_SUCCESS;
    struct p2pt_side ds, ss;
    const p2pt_copy_desc piece = {(void *)d, (const void *)s, n};
    p2pt_status st = p2pt__piece_sides(p->b, i, &piece, &p->memo, p->memo_hint, &ds, &ss);
    if (st == P2PT_SUCCESS && p->refuse)
        st = check_sides(p, i, &piece, &ds, &ss);
    if (st != P2PT_SUCCESS)
        return st;
    located_facts(&ds, &ss, p->b->device, f);
    return P2PT_SUCCESS;
}

/* `n` pieces across link `dir` (P2PT_LINK_*, -1: none). */
static inline void count_links(struct scan_out *o, int dir, size_t n)
{
    o->h2d += dir == P2PT_LINK_H2D ? n : 0;
    o->d2h += dir == P2PT_LINK_D2H ? n : 0;
    o->peer += dir == P2PT_LINK_PEER ? n : 0;
}

/* Piece i: its arguments, its facts (those of its run when `run` is not
 * NULL), and where it goes. */
static inline __attribute__((always_inline)) p2pt_status
take(struct p2pt_batch_pass *p, size_t i, uintptr_t d, uintptr_t s, uint64_t n,
     const struct p2pt_run_facts *run, const bool facts, const bool write, const bool group,
     struct scan_out *o)
{
    struct p2pt_run_facts f = {-1, 0, 0, 0, 0};
    if (!p2pt__args_ok(d, s, n)) {
        const p2pt_copy_desc piece = {(void *)d, (const void *)s, n};
        return p2pt__piece_args_fail(p->b, i, &piece);
    }
    if (facts) {
        if (run == NULL) {
            p2pt_status st = piece_facts(p, i, d, s, n, &f);
            if (st != P2PT_SUCCESS)
                return st;
            run = &f;
        }
        count_links(o, run->dir, 1);
    }
    if (write) {
        struct p2pt_batch_desc *e = &o->out[o->pieces];
        e->dst = d;
        e->src = s;
        e->bytes = n;
    }
    o->tiles += P2PT_BATCH_TILES((uint64_t)d, n);
    if (group)
        p2pt__coalesce_add(o->groups, d, s, n, run->dlo, run->dhi, run->slo, run->shi);
    o->skewed += ((d ^ s) & 15) != 0;
    o->pieces++;
    o->bytes += n;
    return P2PT_SUCCESS;
}

/* Layer l's facts, for all its blocks where they hold for the whole layer:
 * its dst and src spans inside a window each, or inside a remembered
 * allocation each (asked of the driver through the layer's first piece,
 * whose sides land in *ds and *ss, and *asked true). Refuses nothing: a
 * layer that is not known has its pieces looked up and checked one by one,
 * its first included. */
static p2pt_status layer_lookup(struct p2pt_batch_pass *p, size_t l, struct p2pt_side *ds,
                                struct p2pt_side *ss, bool *asked)
{
    const struct p2pt_blocks *k = p->b->blocks;
    struct p2pt_layer_facts *lf = &p->layers[l];
    const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
    const uintptr_t d = (uintptr_t)L->dst, s = (uintptr_t)L->src;
    const uint64_t dn = L->dst_blocks * L->block_bytes, sn = L->src_blocks * L->block_bytes;
    *asked = false;
    lf->done = true;
    lf->known = L->block_bytes == 0 || window_facts(p, d, dn, s, sn, &lf->f) ||
                memo_facts(p, d, dn, s, sn, &lf->f);
    if (lf->known)
        return P2PT_SUCCESS;
    const p2pt_copy_desc first = p2pt__block_piece(k, l * k->rows);
    p2pt_status st = p2pt__piece_sides(p->b, l * k->rows, &first, &p->memo, p->memo_hint, ds, ss);
    if (st != P2PT_SUCCESS)
        return st;
    *asked = true;
    lf->known = memo_facts(p, d, dn, s, sn, &lf->f);
    return P2PT_SUCCESS;
}

/* Blocks: layer by layer, each piece made from its layer and mapping row
 * here, with its layer's facts where they hold for the whole layer. (The
 * plan keeps blocks only for layers that are apart and ids inside them,
 * which the arguments check still confirms piece by piece.) */
static inline __attribute__((always_inline)) p2pt_status
scan_blocks(struct p2pt_batch_pass *p, const bool facts, const bool write, const bool group,
            struct scan_out *o)
{
    const struct p2pt_blocks *k = p->b->blocks;
    const size_t rows = k->rows, layers = p->b->count / rows;
    const int64_t *map = k->mapping;
    for (size_t l = 0; l < layers; l++) {
        const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
        const uint64_t bb = L->block_bytes;
        if (bb == 0)
            continue;
        if (o->spread != NULL) /* the kernels count every piece of blocks */
            spread_run(o->spread, l * rows, rows, bb);
        struct p2pt_layer_facts *lf = facts ? &p->layers[l] : NULL;
        if (facts && !lf->done) {
            struct p2pt_side ds, ss;
            bool asked;
            p2pt_status st = layer_lookup(p, l, &ds, &ss, &asked);
            if (st != P2PT_SUCCESS)
                return st;
        }
        const bool known = facts && lf->known;
        const uintptr_t dl = (uintptr_t)L->dst, sl = (uintptr_t)L->src;
        if ((!facts || known) && !write && !group && bb % 16 == 0) {
            /* Nothing to write out, and every piece of the layer shares its
             * facts and its alignment: the layer at once. The plan put each
             * piece inside its layer, and layers apart, so each piece's
             * arguments hold (no NULL, no wrap, no overlap). */
            if (facts)
                count_links(o, lf->f.dir, rows);
            o->tiles += rows * P2PT_BATCH_TILES((uint64_t)dl, bb);
            o->skewed += ((dl ^ sl) & 15) != 0 ? rows : 0;
            o->pieces += rows;
            o->bytes += rows * bb;
            continue;
        }
        for (size_t r = 0; r < rows; r++) {
            const uintptr_t d = dl + (uint64_t)map[2 * r + 1] * bb;
            const uintptr_t s = sl + (uint64_t)map[2 * r] * bb;
            p2pt_status st = take(p, l * rows + r, d, s, bb, known ? &lf->f : NULL, facts, write,
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
static p2pt_status scan_blocks_by_block(struct p2pt_batch_pass *p, struct scan_out *o)
{
    const struct p2pt_blocks *k = p->b->blocks;
    const size_t rows = k->rows, layers = p->b->count / rows;
    const int64_t *map = k->mapping;
    for (size_t l = 0; l < layers; l++)
        if (!p->layers[l].done) {
            struct p2pt_side ds, ss;
            bool asked;
            p2pt_status st = layer_lookup(p, l, &ds, &ss, &asked);
            if (st != P2PT_SUCCESS)
                return st;
        }
    const uint64_t bb = p2pt__block_layer_at(k, 0)->block_bytes;
    for (size_t r = 0; r < rows; r++) {
        const uint64_t doff = (uint64_t)map[2 * r + 1] * bb, soff = (uint64_t)map[2 * r] * bb;
        for (size_t l = 0; l < layers; l++) {
            const p2pt_block_layer *L = p2pt__block_layer_at(k, l);
            const struct p2pt_layer_facts *lf = &p->layers[l];
            p2pt_status st = take(p, l * rows + r, (uintptr_t)L->dst + doff,
                                  (uintptr_t)L->src + soff, bb, lf->known ? &lf->f : NULL, true,
                                  false, true, o);
            if (st != P2PT_SUCCESS)
                return st;
        }
    }
    return P2PT_SUCCESS;
}

static inline __attribute__((always_inline)) p2pt_status
scan_loop(struct p2pt_batch_pass *p, const bool facts, const bool write, const bool group,
          struct scan_out *o)
{
    const struct p2pt_batch *b = p->b;
    if (b->blocks != NULL && group && facts && !write &&
        blocks_by_block(b->blocks, b->count / b->blocks->rows))
        return scan_blocks_by_block(p, o);
    if (b->blocks != NULL)
        return scan_blocks(p, facts, write, group, o);
    const p2pt_copy_desc *descs = b->descs;
    const size_t count = b->count;
    for (size_t i = 0; i < count; i++) {
        const uint64_t n = descs[i].bytes;
        if (n == 0)
            continue;
        p2pt_status st = take(p, i, (uintptr_t)descs[i].dst, (uintptr_t)descs[i].src, n, NULL,
                              facts, write, group, o);
        if (st != P2PT_SUCCESS)
            return st;
        if (o->spread != NULL) /* the kernels count the pieces with bytes */
            o->spread[(o->pieces - 1) & (P2PT_LINK_SLOTS - 1)] += n;
    }
    return P2PT_SUCCESS;
}

/* Each combination the pass makes, a function of its own: its loop is
 * compiled on its own, with only what it needs live, and its sums in a
 * local that no call can see (so they stay in registers). */
#define P2PT_PASS_LOOP(name, facts, write, group)                              \
    static __attribute__((noinline)) p2pt_status name(struct p2pt_batch_pass *p,  \
                                                      struct scan_out *out)    \
    {                                                                          \
        struct scan_out o = *out;                                              \
        p2pt_status st = scan_loop(p, facts, write, group, &o);                \
        *out = o;                                                              \
        return st;                                                             \
    }
P2PT_PASS_LOOP(pass_args, false, false, false)
P2PT_PASS_LOOP(pass_args_write, false, true, false)
P2PT_PASS_LOOP(pass_facts, true, false, false)
P2PT_PASS_LOOP(pass_facts_write, true, true, false)
P2PT_PASS_LOOP(pass_groups, true, false, true)
#undef P2PT_PASS_LOOP

p2pt_status p2pt__batch_pass_begin(const struct p2pt_handle *h, struct p2pt_batch *b,
                                   struct p2pt_batch_pass *p)
{
    p->b = b;
    p->ws = p2pt__windows(&h->windows, b->device);
    p->fallback = h->cfg.fallback;
    p->refuse = h->cfg.validate;
    p->staged = false;
    p->dst_hint = p->src_hint = -1;
    p->memo_hint[0] = p->memo_hint[1] = -1;
    p->layers = p->layers_here;
    p2pt__memo_init(&p->memo, b->device);
    /* The first piece's sides, found while routing (auto): their
     * allocations cost no second query. */
    if (b->first.bytes != 0) {
        p2pt__memo_seed(&p->memo, &b->first.dst_side);
        p2pt__memo_seed(&p->memo, &b->first.src_side);
    }
    if (b->blocks == NULL)
        return P2PT_SUCCESS;
    const size_t layers = b->count / b->blocks->rows;
    if (layers > P2PT_PASS_LAYERS && (p->layers = calloc(layers, sizeof(*p->layers))) == NULL) {
        p->layers = p->layers_here;
        b->refused = true; /* as a pass that fails */
        return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: out of host memory for %zu layers", b->fn,
                          layers);
    }
    if (p->layers == p->layers_here)
        memset(p->layers, 0, layers * sizeof(*p->layers));
    if (!p->refuse)
        return P2PT_SUCCESS; /* facts, if wanted, a layer at a time in the pass */
    /* Every layer's facts now: whether any piece could be memory a kernel
     * cannot reach is the route's to know. Known layers hold only mapped
     * memory, so the first layer that is not known starts the first piece
     * that may be such memory. */
    bool all_known = true;
    for (size_t l = 0; l < layers; l++) {
        struct p2pt_side ds, ss;
        bool asked;
        p2pt_status st = layer_lookup(p, l, &ds, &ss, &asked);
        if (st != P2PT_SUCCESS) {
            b->refused = true; /* as a pass that fails */
            return st;
        }
        if (all_known && asked && !p->layers[l].known &&
            (ds.reach == P2PT_REACH_UNMAPPED || ss.reach == P2PT_REACH_UNMAPPED)) {
            b->ce_only = b->unmapped = true;
            b->ce_only_at = l * b->blocks->rows;
            b->ce_only_piece = p2pt__block_piece(b->blocks, b->ce_only_at);
        }
        all_known = all_known && p->layers[l].known;
    }
    b->mapped = all_known;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__batch_pass(struct p2pt_batch_pass *p, const struct p2pt_transport *t,
                             struct p2pt_batch_sink *s)
{
    struct p2pt_batch *b = p->b;
    bool classify = false; /* a kernel engine with a link cap to apply needs each piece's link */
    for (int i = 0; i < P2PT_LINKS; i++)
        classify = classify || (t != NULL && b->link[i] != 0);
    const bool as_descs = s != NULL && s->as_descs;
    const bool group = s != NULL && s->groups.g != NULL && !as_descs;
    const bool write = s != NULL && s->descs != NULL;
    const bool facts = t != NULL && (p->refuse || classify || group || as_descs);
    struct scan_out o = {0, 0, 0, 0, 0, 0, 0, write ? s->descs : NULL,
                         group ? &s->groups : NULL, s != NULL ? s->spread : NULL};
    p2pt_status st;

    p->staged = t != NULL && (t->caps & P2PT_CAP_STAGED) != 0;
    p->refuse = p->refuse && t != NULL;
    if (group)
        st = pass_groups(p, &o);
    else if (facts)
        st = write ? pass_facts_write(p, &o) : pass_facts(p, &o);
    else
        st = write ? pass_args_write(p, &o) : pass_args(p, &o);
    if (group)
        p2pt__coalesce_end(o.groups);
    if (st == P2PT_SUCCESS && s != NULL && s->rows != NULL && !as_descs && b->blocks != NULL)
        memcpy(s->rows, b->blocks->mapping, b->blocks->rows * 2 * sizeof(int64_t));
    b->passed = true;
    b->passes++;
    b->refused = st != P2PT_SUCCESS;
    b->pieces = o.pieces;
    b->h2d = o.h2d;
    b->d2h = o.d2h;
    b->peer = o.peer;
    b->skewed = o.skewed;
    b->bytes = o.bytes;
    b->tiles = o.tiles;
    return st;
}

p2pt_status p2pt__batch_pass_reach(struct p2pt_batch_pass *p, const struct p2pt_transport *t)
{
    struct p2pt_batch *b = p->b;
    if (!p->refuse || !b->ce_only || (t->caps & P2PT_CAP_STAGED) != 0)
        return P2PT_SUCCESS;
    struct p2pt_side ds, ss;
    p2pt_status st = p2pt__piece_sides(b, b->ce_only_at, &b->ce_only_piece, &p->memo,
                                       p->memo_hint, &ds, &ss);
    if (st == P2PT_SUCCESS)
        st = p2pt__piece_check(b, b->ce_only_at, &b->ce_only_piece, false, p->fallback, &ds, &ss);
    b->refused = st != P2PT_SUCCESS;
    return st;
}

p2pt_status p2pt__batch_pass_fill(struct p2pt_batch_pass *p, const struct p2pt_batch_sink *from,
                                  struct p2pt_batch_sink *to)
{
    const size_t n = p->b->pieces;
    const struct p2pt_batch_desc *d = from->descs;
    if (to->descs != NULL && to->descs != d)
        memcpy(to->descs, d, n * sizeof(*d));
    if (to->spread != NULL && to->spread != from->spread)
        for (size_t k = 0; k < n; k++)
            to->spread[k & (P2PT_LINK_SLOTS - 1)] += d[k].bytes;
    if (to->groups.g == NULL)
        return P2PT_SUCCESS;
    /* The bounds of each piece's allocations, as the pass found them: the
     * same windows and the memo it filled (a query only for an allocation
     * it has let go since), no check (every piece has passed). */
    p2pt_status st = P2PT_SUCCESS;
    for (size_t k = 0; k < n && st == P2PT_SUCCESS; k++) {
        const uint64_t dst = d[k].dst, src = d[k].src, bytes = d[k].bytes;
        struct p2pt_run_facts f;
        if (!window_facts(p, dst, bytes, src, bytes, &f) &&
            !memo_facts(p, dst, bytes, src, bytes, &f)) {
            struct p2pt_side ds, ss;
            if ((st = p2pt__memo_side(&p->memo, dst, &p->memo_hint[0], &ds)) != P2PT_SUCCESS ||
                (st = p2pt__memo_side(&p->memo, src, &p->memo_hint[1], &ss)) != P2PT_SUCCESS)
                break;
            located_facts(&ds, &ss, p->b->device, &f);
        }
        p2pt__coalesce_add(&to->groups, dst, src, bytes, f.dlo, f.dhi, f.slo, f.shi);
    }
    p2pt__coalesce_end(&to->groups);
    return st;
}

void p2pt__batch_pass_end(struct p2pt_batch_pass *p)
{
    if (p->layers != p->layers_here)
        free(p->layers);
    p->layers = p->layers_here;
}

p2pt_status p2pt__batch_args(const struct p2pt_handle *h, struct p2pt_batch *b)
{
    struct p2pt_batch_pass p;
    memset(&p, 0, sizeof(p));
    p.b = b;
    p.layers = p.layers_here;
    (void)h;
    p2pt_status st = p2pt__batch_pass(&p, NULL, NULL);
    p2pt__batch_pass_end(&p);
    return st;
}
