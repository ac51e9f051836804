/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one pass over a host batch's pieces (batch_scan.c), which the
 * pipeline (operation.c) makes for every engine, in real runs and dry runs
 * alike: each piece read once (a descriptor, or a block made as it is
 * read), its arguments checked, its facts looked up and, with validation
 * on, checked against the engine it goes to, the sums a policy routes by
 * added up, and the piece put where the engine's sink says (batch.h): its
 * descriptors, the copy engine's groups, or, for blocks an engine keeps as
 * blocks, the mapping's rows once. A refusal is the same piece and the same
 * words whatever the engine and whether the run is dry.
 *
 * In order: p2pt__batch_pass_begin (before the route: for blocks, the facts
 * of their layers), p2pt__batch_pass (the pieces, into one sink), and where
 * the route waited for the pass, p2pt__batch_pass_reach and
 * p2pt__batch_pass_fill (the chosen engine's sink from the descriptors the
 * pass left, read from there: the caller's pieces are not read again);
 * p2pt__batch_pass_end in any case.
 */
#ifndef P2PT_BATCH_SCAN_H
#define P2PT_BATCH_SCAN_H

#include "alloc_memo.h"
#include "batch.h"

struct p2pt_handle;
struct p2pt_transport;

/* The facts of a piece, or of a run of pieces that share them (a layer of
 * blocks): the link it crosses (P2PT_LINK_*, -1 none) and the bounds of the
 * windows or allocations its sides lie in (dhi 0: a range the driver does
 * not report). */
struct p2pt_run_facts {
    int dir;
    uint64_t dlo, dhi, slo, shi;
};

/* A layer of blocks: its facts, once looked up (`done`), hold for every
 * block of it when `known` (its spans each inside one window or one mapped
 * allocation). */
struct p2pt_layer_facts {
    struct p2pt_run_facts f;
    bool done, known;
};

#define P2PT_PASS_LAYERS 64 /* layers whose facts the pass holds without allocating */

/* One pass in progress, on the caller's stack. */
struct p2pt_batch_pass {
    struct p2pt_batch *b;
    const struct p2pt_window_set *ws; /* the windows of b->device; NULL: none */
    const char *fallback;             /* the engine a remedy names */
    bool refuse;                      /* validation is on */
    bool staged; /* pieces are checked as for an engine that stages what the
                    device cannot map (P2PT_CAP_STAGED) */
    struct p2pt_alloc_memo memo;
    int dst_hint, src_hint; /* destinations and sources sit in different windows */
    int memo_hint[2];       /* ... and different allocations */
    struct p2pt_layer_facts *layers, layers_here[P2PT_PASS_LAYERS];
};

/*
 * Begin the pass over `b` for handle `h` (the stream's context current):
 * the allocation memo, seeded with the first piece's sides where the policy
 * had them resolved (b->first), and the windows of b->device. For blocks
 * with validation on, the facts of every layer, looked up here and checked
 * with their pieces: b->mapped when every layer is known, and where the
 * first layer that is not has a side of another device's memory not mapped
 * here, b->ce_only_at (its first piece) and b->unmapped. Refuses no piece
 * (the pass checks them); a failed lookup names the piece and fails the
 * pass (b->refused). Call p2pt__batch_pass_end whatever it returns.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_pass_begin(const struct p2pt_handle *h, struct p2pt_batch *b,
                                                 struct p2pt_batch_pass *p);

/*
 * The pass: every piece of b->descs[0 .. b->count) (or of b->blocks) read
 * once, in order. Always: its arguments (NULL with bytes, wrap-around,
 * overlap, more than size_t), named on refusal by p2pt__piece_fail. Its
 * facts (inside the windows by a range check, elsewhere through the memo,
 * one driver query per allocation) when validation is on, the router gave
 * `t` link caps (b->link), or the sink holds groups or descriptors for a
 * route that waits (b->route_later, s->as_descs); with validation on they
 * are checked against `t`: memory only the copy engine moves passes for an
 * engine that stages it, and under a route that waits, the first such
 * piece of another device's memory (P2PT_REACH_UNMAPPED) passes too and the
 * rest are checked as for the copy engine (b->ce_only, b->unmapped: the
 * route sends the batch there). Each non-empty piece goes to what sink `s`
 * holds (with as_descs, its descriptors alone), and its bytes to the sink's
 * link-kernel slots where it has them (s->spread). Sets the sums (b->pieces,
 * bytes, h2d, d2h, peer, skewed, tiles), b->passed and b->passes; on a
 * refusal b->refused.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_pass(struct p2pt_batch_pass *p,
                                           const struct p2pt_transport *t,
                                           struct p2pt_batch_sink *s);

/*
 * After a route that waited for the pass: the piece only the copy engine
 * moves that the pass let through (b->ce_only), refused now, as the pass
 * would have, when validation is on and the chosen engine `t` does not
 * stage such memory.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_pass_reach(struct p2pt_batch_pass *p,
                                                 const struct p2pt_transport *t);

/*
 * The chosen engine's sink `to` from the descriptors the pass left in sink
 * `from` (as_descs; `to` may be `from`): its descriptors copied where they
 * are elsewhere, its link-kernel slots summed (to->spread), its groups
 * made from them as the pass would have made
 * them, each piece's allocations found again in the pass's windows and
 * memo (the driver asked only about one the memo has let go). Reads
 * `from`, not the caller's pieces.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_pass_fill(struct p2pt_batch_pass *p,
                                                const struct p2pt_batch_sink *from,
                                                struct p2pt_batch_sink *to);

P2PT_INTERNAL void p2pt__batch_pass_end(struct p2pt_batch_pass *p);

/*
 * The pass over the pieces' arguments alone, for a batch whose operation
 * failed before its pass (no driver, a bad stream): a refused piece is the
 * error to report. Counts as a pass.
 */
P2PT_INTERNAL p2pt_status p2pt__batch_args(const struct p2pt_handle *h, struct p2pt_batch *b);

#endif /* P2PT_BATCH_SCAN_H */
