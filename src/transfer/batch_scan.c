/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pass over a host batch's descriptors. A batch of 16,384 pieces is
 * 384 KiB of descriptors; reading them once instead of once per step
 * (arguments, windows, the copy into the engine's buffer) is most of what
 * a host batch costs the caller beyond its fixed calls. The loop is written
 * once and specialised by the compiler for each combination of what it
 * checks and writes, so a pass that only checks arguments carries no
 * window test and no store.
 */
#include "args.h"
#include "batch_scan.h"
#include "handle.h"
#include "transport.h"
#include "validate.h"

struct scan_out {
    size_t pieces;
    uint64_t bytes, tiles;
};

static inline __attribute__((always_inline)) p2pt_status
scan_loop(const struct p2pt_batch *b, const struct p2pt_window_set *ws, bool staged_ok,
          struct p2pt_batch_desc *out, const bool facts, const bool write, struct scan_out *o)
{
    const p2pt_copy_desc *descs = b->descs;
    const size_t count = b->count;
    size_t k = 0;
    uint64_t bytes = 0, tiles = 0;
    int dst_hint = -1, src_hint = -1; /* destinations and sources sit in different windows */
    for (size_t i = 0; i < count; i++) {
        const uint64_t n = descs[i].bytes;
        if (n == 0)
            continue;
        const uintptr_t d = (uintptr_t)descs[i].dst, s = (uintptr_t)descs[i].src;
        if (!p2pt__args_ok(d, s, n))
            return p2pt__piece_args_fail(&descs[i], i, count);
        if (facts && !(p2pt__window_holds(ws, d, n, &dst_hint) &&
                       p2pt__window_holds(ws, s, n, &src_hint))) {
            p2pt_status st = p2pt__piece_facts(b, i, staged_ok);
            if (st != P2PT_SUCCESS)
                return st;
        }
        if (write) {
            out[k].dst = d;
            out[k].src = s;
            out[k].bytes = n;
            tiles += P2PT_BATCH_TILES((uint64_t)d, n);
        }
        k++;
        bytes += n;
    }
    o->pieces = k;
    o->bytes = bytes;
    o->tiles = tiles;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__batch_scan(const struct p2pt_handle *h, struct p2pt_batch *b,
                             const struct p2pt_transport *t, struct p2pt_batch_desc *out,
                             uint64_t *tiles)
{
    const bool facts = t != NULL && h->cfg.validate;
    const struct p2pt_window_set *ws = facts ? p2pt__windows(&h->windows, b->device) : NULL;
    const bool staged_ok = t != NULL && (t->caps & P2PT_CAP_STAGED) != 0;
    struct scan_out o = {0, 0, 0};
    p2pt_status st;
    if (facts)
        st = out ? scan_loop(b, ws, staged_ok, out, true, true, &o)
                 : scan_loop(b, ws, staged_ok, NULL, true, false, &o);
    else
        st = out ? scan_loop(b, NULL, false, out, false, true, &o)
                 : scan_loop(b, NULL, false, NULL, false, false, &o);
    b->scanned = true;
    b->refused = st != P2PT_SUCCESS;
    b->pieces = o.pieces;
    b->bytes = o.bytes;
    if (tiles != NULL)
        *tiles = o.tiles;
    return st;
}
