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
#include "alloc_memo.h"
#include "args.h"
#include "batch_scan.h"
#include "coalesce.h"
#include "handle.h"
#include "transport.h"
#include "validate.h"

struct scan_out {
    size_t pieces, h2d, d2h, skewed;
    uint64_t bytes, tiles;
};

/* Which host-link direction a piece's two sides make: 0 h2d, 1 d2h, -1
 * neither (device memory on both sides, or memory the device cannot map). */
static inline int link_dir(bool dst_host, bool src_host)
{
    return src_host == dst_host ? -1 : src_host ? 0 : 1;
}

static inline __attribute__((always_inline)) p2pt_status
scan_loop(const struct p2pt_batch *b, const struct p2pt_window_set *ws,
          const struct p2pt_transport *t, bool refuse, const char *fallback,
          struct p2pt_alloc_memo *memo, struct p2pt_batch_desc *out,
          struct p2pt_coalesce *groups, const bool facts, const bool write, const bool group,
          struct scan_out *o)
{
    const p2pt_copy_desc *descs = b->descs;
    const size_t count = b->count;
    size_t k = 0, dir_n[2] = {0, 0}, skewed = 0;
    uint64_t bytes = 0, tiles = 0;
    int dst_hint = -1, src_hint = -1; /* destinations and sources sit in different windows */
    int memo_hint[2] = {-1, -1};      /* ... and different allocations */
    const struct p2pt_side *dm, *sm;
    for (size_t i = 0; i < count; i++) {
        const uint64_t n = descs[i].bytes;
        if (n == 0)
            continue;
        const uintptr_t d = (uintptr_t)descs[i].dst, s = (uintptr_t)descs[i].src;
        if (!p2pt__args_ok(d, s, n))
            return p2pt__piece_args_fail(b, i);
        uint64_t dlo = 0, dhi = 0, slo = 0, shi = 0;
        if (facts) {
            int dir;
            if (p2pt__window_holds(ws, d, n, &dst_hint) &&
                p2pt__window_holds(ws, s, n, &src_hint)) {
                /* A window lies inside one allocation: its range bounds a run. */
                dir = link_dir(ws->host[dst_hint], ws->host[src_hint]);
                dlo = ws->w[dst_hint].base, dhi = ws->w[dst_hint].end;
                slo = ws->w[src_hint].base, shi = ws->w[src_hint].end;
            } else if ((dm = p2pt__memo_find(memo, d, &memo_hint[0])) != NULL &&
                       (sm = p2pt__memo_find(memo, s, &memo_hint[1])) != NULL &&
                       dm->reach == P2PT_REACH_MAPPED && sm->reach == P2PT_REACH_MAPPED &&
                       !p2pt__side_straddles(dm, d, n) && !p2pt__side_straddles(sm, s, n)) {
                /* The common case, inline: both sides in remembered
                 * allocations, mapped, the piece inside them. */
                dir = p2pt__link_dir(dm, sm, b->device);
                dlo = dm->start, dhi = dm->start + dm->size;
                slo = sm->start, shi = sm->start + sm->size;
            } else {
                struct p2pt_side ds, ss;
                p2pt_status st = p2pt__piece_facts(b, i, t, refuse, fallback, memo, memo_hint,
                                                   &ds, &ss);
                if (st != P2PT_SUCCESS)
                    return st;
                dir = p2pt__link_dir(&ds, &ss, b->device);
                dlo = ds.start, dhi = ds.start + ds.size;
                slo = ss.start, shi = ss.start + ss.size;
                if (ds.size == 0 || ss.size == 0)
                    dhi = 0; /* memory whose range the driver does not report */
            }
            if (dir >= 0)
                dir_n[dir]++;
        }
        if (write) {
            out[k].dst = d;
            out[k].src = s;
            out[k].bytes = n;
            tiles += P2PT_BATCH_TILES((uint64_t)d, n);
        }
        if (group)
            p2pt__coalesce_add(groups, d, s, n, dlo, dhi, slo, shi);
        skewed += ((d ^ s) & 15) != 0;
        k++;
        bytes += n;
    }
    o->pieces = k;
    o->h2d = dir_n[0];
    o->d2h = dir_n[1];
    o->skewed = skewed;
    o->bytes = bytes;
    o->tiles = tiles;
    return P2PT_SUCCESS;
}

static p2pt_status scan(const struct p2pt_handle *h, struct p2pt_batch *b,
                        const struct p2pt_transport *t, bool want_facts,
                        struct p2pt_batch_desc *out, uint64_t *tiles,
                        struct p2pt_coalesce *groups)
{
    const bool refuse = t != NULL && h->cfg.validate;
    const bool facts = t != NULL && (refuse || want_facts);
    const struct p2pt_window_set *ws = facts ? p2pt__windows(&h->windows, b->device) : NULL;
    struct p2pt_alloc_memo memo;
    struct scan_out o = {0, 0, 0, 0, 0, 0};
    p2pt_status st;
    p2pt__memo_init(&memo, b->device);
    const char *fb = h->cfg.fallback;
    if (groups != NULL)
        st = scan_loop(b, ws, t, refuse, fb, &memo, NULL, groups, true, false, true, &o);
    else if (facts)
        st = out ? scan_loop(b, ws, t, refuse, fb, &memo, out, NULL, true, true, false, &o)
                 : scan_loop(b, ws, t, refuse, fb, &memo, NULL, NULL, true, false, false, &o);
    else
        st = out ? scan_loop(b, NULL, NULL, false, fb, NULL, out, NULL, false, true, false, &o)
                 : scan_loop(b, NULL, NULL, false, fb, NULL, NULL, NULL, false, false, false, &o);
    if (st == P2PT_SUCCESS && b->mean_hi != 0 && o.pieces != 0) {
        const uint64_t mean = o.bytes / o.pieces;
        if (mean < b->mean_lo || mean >= b->mean_hi)
            st = P2PT__ROUTE_AGAIN; /* the sums below are what the route needs */
    }
    b->scanned = true;
    b->passes++;
    b->refused = st != P2PT_SUCCESS && st != P2PT__ROUTE_AGAIN;
    b->pieces = o.pieces;
    b->h2d = o.h2d;
    b->d2h = o.d2h;
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
    /* A kernel engine with a link cap to apply needs each piece's direction. */
    const bool classify = t != NULL && (b->link[0] != 0 || b->link[1] != 0);
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
