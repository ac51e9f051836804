/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation pipeline: every copy, host batch and device batch, and
 * their dry runs (p2pt_explain_*), take these steps in this order:
 *
 *   1. check the arguments (args.c), no driver call;
 *   2. resolve (resolve.c): enter the stream's context, held until the
 *      operation is done, and find every fact once, those the handle's
 *      policy asks for (P2PT_NEEDS_*) included, so routing asks the driver
 *      nothing;
 *   3. route (router.c): the handle's policy picks the engine; a copy the
 *      engine cannot run goes to the fallback engine, counted and logged;
 *   4. validate (validate.c) the facts against that engine;
 *   5. dispatch to the engine, or describe the choice in a dry run;
 *   6. count.
 *
 * What differs by kind is data: each kind's steps are a row of `kinds`
 * below, and p2pt__op_run takes any row through the same order. A device
 * batch's engine depends on no fact of the batch, and a transport that
 * cannot take one is refused before its arguments are looked at, so its
 * row routes first; so does a signal's (signals and waits are one kind).
 *
 * A host batch (descriptors, or blocks moved by a mapping) is read once, here,
 * for every engine: steps 3 and 4 are one pass over its pieces
 * (batch_scan.c) that checks each (its arguments, its facts against the
 * engine), sums what the policy routes by (the pieces and bytes, those
 * crossing the host link each way or a peer link, those only the copy
 * engine moves, those skewed) and puts it where the engine's sink says
 * (transport.h: the staging ring, the kernel parameters, the copy
 * engine's groups). The route is made once, as soon as the facts decide
 * it: before the pass when what resolve found does (a fixed engine; blocks,
 * whose sums are known and whose layers the start of the pass looks up),
 * else after it, on its sums, with the pieces left meanwhile as descriptors
 * in the likely engine's sink, which the chosen engine takes from there.
 * Step 5 hands the sink to the engine's submit, or in a dry run to its
 * words: the same pass, stopped before submit. Nothing is enqueued before
 * every piece has passed. The outcome is the operation steps 1 and 4 would
 * give in order: should a step before the pass fail (no driver, a bad
 * stream), the pieces' arguments are checked then, and a refused piece is
 * the error reported, or a batch of empty pieces succeeds with nothing to
 * do.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "batch_scan.h"
#include "handle.h"
#include "operation.h"
#include "policy.h"
#include "router.h"
#include "share.h"
#include "validate.h"

static void relaxed_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Where a step leaves the operation. */
struct op_state {
    const struct p2pt_transport *t;
    char *why; /* a dry run's reason; NULL: a real run */
    size_t len;
    bool dry;
    bool nothing; /* nothing to enqueue: done, successfully */
    bool refused; /* validation (or a host batch's pass) said no: counted as rejected */
};

/* One kind's steps, in the order p2pt__op_run calls them. */
struct op_kind {
    /* Route before the arguments are checked (the engine depends on no
     * fact of the operation). */
    p2pt_status (*route_first)(struct p2pt_handle *h, const struct p2pt_op *op,
                               struct op_state *s);
    /* Step 1, no driver call. */
    p2pt_status (*check)(struct p2pt_op *op, struct op_state *s);
    /* Step 2: enter the stream's context (*pushed: undo with
     * p2pt__stream_leave), then the kind's facts. */
    p2pt_status (*resolve)(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed);
    /* Steps 3 and 4. */
    p2pt_status (*route)(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s);
    /* Step 5 of a dry run. */
    p2pt_status (*describe)(struct p2pt_handle *h, struct p2pt_op *op,
                            const struct p2pt_transport *t, p2pt_choice *c);
    /* Steps 5 and 6 of a real run. */
    p2pt_status (*dispatch)(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s);
    /* When a step fails before the kind's arguments were all read: the
     * outcome the arguments give (NULL: the failure stands). */
    p2pt_status (*args_first)(struct p2pt_handle *h, struct p2pt_op *op, p2pt_status st,
                              struct op_state *s);
    /* An operation with nothing to enqueue: its dry run's path and reason,
     * and whether a real run counts it in `batches`. */
    const char *nothing_path, *nothing_reason;
    bool nothing_counts_batch;
};

/* ---- A copy ---- */

static p2pt_status copy_check(struct p2pt_op *op, struct op_state *s)
{
    s->nothing = op->copy.bytes == 0;
    return p2pt__check_args(op->copy.dst, op->copy.src, op->copy.bytes);
}

static p2pt_status copy_resolve(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(p2pt__stream_enter(op->copy.stream, &op->copy.ctx, &op->copy.device, pushed));
    P2PT_TRY(p2pt__resolve_sides(&op->copy));
    if (h->policy->needs & P2PT_NEEDS_CAPTURE)
        P2PT_TRY(p2pt__stream_capturing(op->copy.stream, &op->copy.capturing));
out:
    return st;
}

/* A copy between pinned host memory and the stream's device through a
 * kernel: no more CTAs than that direction of the host link needs. */
static p2pt_status copy_link_cap(struct p2pt_handle *h, struct p2pt_request *r,
                                 const struct p2pt_transport *t)
{
    p2pt_status st = P2PT_SUCCESS;
    uint32_t link[P2PT_LINKS] = {0};
    int dir = p2pt__link_dir(&r->dst_side, &r->src_side, r->device);
    r->grid_cap = 0;
    if (dir < 0)
        return P2PT_SUCCESS;
    P2PT_TRY(p2pt__route_link(h, t, r->device, link));
    r->grid_cap = link[dir];
out:
    return st;
}

static p2pt_status copy_route(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s)
{
    p2pt_status st = p2pt__route(h, &op->copy, &s->t, s->why, s->len);
    if (st == P2PT_SUCCESS)
        st = copy_link_cap(h, &op->copy, s->t);
    if (st != P2PT_SUCCESS)
        return st;
    st = p2pt__validate_copy(h, &op->copy, s->t);
    s->refused = st != P2PT_SUCCESS;
    return st;
}

static p2pt_status copy_describe(struct p2pt_handle *h, struct p2pt_op *op,
                                 const struct p2pt_transport *t, p2pt_choice *c)
{
    (void)h;
    c->transport = t->name;
    c->path = p2pt__path_name(op->copy.path);
    c->device = op->copy.device;
    return P2PT_SUCCESS;
}

static p2pt_status copy_dispatch(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(s->t->copy(h, &op->copy));
    p2pt__share_mark(h, op->copy.stream, op->copy.ctx, op->copy.device);
    relaxed_add(&h->stats.copies, 1);
    relaxed_add(&h->stats.bytes, op->copy.bytes);
    relaxed_add(&h->stats.engine_bytes[p2pt__transport_index(s->t)], op->copy.bytes);
out:
    return st;
}

/* ---- A host batch ---- */

static p2pt_status batch_check(struct p2pt_op *op, struct op_state *s)
{
    struct p2pt_batch *b = &op->batch;
    s->nothing = b->count == 0;
    /* The pieces are read in the pass over the descriptors. */
    return p2pt__batch_head(op->fn, b);
}

static p2pt_status batch_resolve(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(p2pt__stream_enter(op->batch.stream, &op->batch.ctx, &op->batch.device, pushed));
    if (h->policy->needs & P2PT_NEEDS_FIRST_PIECE)
        P2PT_TRY(p2pt__batch_first(&op->batch));
out:
    return st;
}

/* Where engine `t` wants a batch's pieces (its batch_sink). An engine
 * without a batch step gets its pieces from the caller's batch, one copy
 * each (each_piece): the pipeline keeps descriptors only for a route that
 * waits, where another engine may take them. */
static p2pt_status sink_open(struct p2pt_handle *h, struct p2pt_batch *b,
                             const struct p2pt_transport *t, bool dry, bool as_descs,
                             struct p2pt_batch_sink *s)
{
    memset(s, 0, sizeof(*s));
    s->dry = dry;
    s->as_descs = as_descs;
    s->engine = t;
    if (t->batch_sink != NULL) {
        p2pt_status st = t->batch_sink(h, b, s);
        if (st != P2PT_SUCCESS)
            s->engine = NULL; /* it holds nothing */
        return st;
    }
    if (!as_descs)
        return P2PT_SUCCESS;
    s->descs = b->count <= SIZE_MAX / sizeof(*s->descs) ? malloc(b->count * sizeof(*s->descs))
                                                        : NULL;
    if (s->descs == NULL) {
        s->engine = NULL;
        return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: out of host memory for a batch of %zu",
                          b->fn, b->count);
    }
    s->own = s->descs;
    return P2PT_SUCCESS;
}

static void sink_release(struct p2pt_handle *h, struct p2pt_batch_sink *s)
{
    const struct p2pt_transport *t = s->engine;
    if (t == NULL)
        return;
    if (t->batch_sink == NULL)
        free(s->own);
    else if (t->batch_release != NULL)
        t->batch_release(h, s);
    s->engine = NULL;
}

/* A batch for an engine without a batch step: every piece of the caller's
 * through the pipeline as a copy of its own (routed and validated one by
 * one), under its own index. */
static p2pt_status each_piece(struct p2pt_handle *h, const struct p2pt_batch *b,
                              p2pt_choice *dry)
{
    for (size_t i = 0; i < b->count; i++) {
        const p2pt_copy_desc d = p2pt__batch_piece(b, i);
        struct p2pt_op piece;
        p2pt_choice c;
        p2pt__op_copy(&piece, "p2pt_copy_async", d.dst, d.src, d.bytes, b->stream);
        memset(&c, 0, sizeof(c));
        p2pt_status st = p2pt__op_run(h, &piece, dry ? &c : NULL);
        if (st != P2PT_SUCCESS)
            return p2pt__piece_fail(st, b, i);
    }
    return P2PT_SUCCESS;
}

/* The route a batch waited for, made on the pass's sums. The pieces are
 * descriptors in the sink of the engine named before the pass; another
 * engine chosen now takes them from there into a sink of its own (copied,
 * or grouped), and the first is dropped. (If taking them fails, the chosen
 * engine's sink is still the one released.) */
static p2pt_status route_on_sums(struct p2pt_handle *h, struct p2pt_batch *b,
                                 struct p2pt_batch_pass *pass, struct op_state *s)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_batch_sink chosen;
    P2PT_TRY(p2pt__route_batch(h, b, &s->t, s->why, s->len));
    P2PT_TRY(p2pt__route_link(h, s->t, b->device, b->link));
    P2PT_TRY(p2pt__batch_pass_reach(pass, s->t));
    if (s->t == b->sink.engine) {
        st = p2pt__batch_pass_fill(pass, &b->sink, &b->sink);
        goto out;
    }
    P2PT_TRY(sink_open(h, b, s->t, s->dry, true, &chosen));
    st = p2pt__batch_pass_fill(pass, &b->sink, &chosen);
    sink_release(h, &b->sink);
    b->sink = chosen;
out:
    return st;
}

/*
 * Steps 3 and 4 of a host batch: the one pass over its pieces, and the
 * route once, where the facts decide it. The policy routes before the pass
 * when what is known then decides (a fixed engine; blocks, whose sums are
 * known and whose layers the start of the pass looks up), and the pass puts
 * the pieces where that engine wants them. Otherwise the policy names the
 * likely engine and routes after the pass, on its sums; meanwhile the
 * pieces stay descriptors, which whatever engine it chooses can take.
 * Nothing is enqueued here; the sink goes to dispatch or describe.
 */
static p2pt_status batch_route(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_batch *b = &op->batch;
    struct p2pt_batch_pass pass;
    st = p2pt__batch_pass_begin(h, b, &pass);
    if (st == P2PT_SUCCESS)
        st = p2pt__route_batch(h, b, &s->t, s->why, s->len);
    if (st == P2PT_SUCCESS)
        st = p2pt__route_link(h, s->t, b->device, b->link);
    if (st == P2PT_SUCCESS)
        st = sink_open(h, b, s->t, s->dry, b->route_later, &b->sink);
    if (st == P2PT_SUCCESS)
        st = p2pt__batch_pass(&pass, s->t, &b->sink);
    if (st == P2PT_SUCCESS && b->route_later && b->pieces != 0)
        st = route_on_sums(h, b, &pass, s);
    p2pt__batch_pass_end(&pass);
    s->nothing = st == P2PT_SUCCESS && b->pieces == 0;
    if (st != P2PT_SUCCESS || s->nothing)
        sink_release(h, &b->sink);
    s->refused = b->refused;
    return st;
}

static p2pt_status batch_describe(struct p2pt_handle *h, struct p2pt_op *op,
                                  const struct p2pt_transport *t, p2pt_choice *c)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_batch *b = &op->batch;
    c->transport = t->name;
    c->path = "batch";
    c->device = b->device;
    if (t->batch_sink == NULL) {
        st = each_piece(h, b, c);
    } else if (t->batch_describe != NULL) {
        size_t used = strlen(c->reason);
        t->batch_describe(h, b, &b->sink, c->reason + used, sizeof(c->reason) - used);
    }
    sink_release(h, &b->sink);
    return st;
}

static p2pt_status batch_dispatch(struct p2pt_handle *h, struct p2pt_op *op, struct op_state *s)
{
    struct p2pt_batch *b = &op->batch;
    p2pt_status st = s->t->batch_sink == NULL ? each_piece(h, b, NULL)
                                              : s->t->batch_submit(h, b, &b->sink);
    sink_release(h, &b->sink);
    if (st != P2PT_SUCCESS) {
        s->refused = b->refused;
        return st;
    }
    p2pt__share_mark(h, b->stream, b->ctx, b->device);
    relaxed_add(&h->stats.engine_batches[p2pt__transport_index(s->t)], 1);
    relaxed_add(&h->stats.batches, 1);
    relaxed_add(&h->stats.batch_pieces, b->pieces);
    return P2PT_SUCCESS;
}

/* A host batch whose pass has not run when a step fails with `st`: its
 * pieces' arguments decide, as if they had been checked first. */
static p2pt_status batch_args_first(struct p2pt_handle *h, struct p2pt_op *op, p2pt_status st,
                                    struct op_state *s)
{
    struct p2pt_batch *b = &op->batch;
    if (b->passed)
        return st;
    p2pt_status a = p2pt__batch_args(h, b);
    if (a != P2PT_SUCCESS) {
        s->refused = true;
        return a;
    }
    if (b->pieces == 0) {
        s->nothing = true;
        return P2PT_SUCCESS;
    }
    return st;
}

/* ---- A device batch ---- */

static p2pt_status device_route_first(struct p2pt_handle *h, const struct p2pt_op *op,
                                      struct op_state *s)
{
    return p2pt__route_device_batch(h, op->fn, &s->t, s->why, s->len);
}

/* Blocks in GPU memory are a device batch whose descriptors the engine
 * writes into its workspace: their check places them there. */
static p2pt_status device_check(struct p2pt_op *op, struct op_state *s)
{
    (void)s;
    if (op->device.blocks != NULL)
        return p2pt__device_blocks_check(&op->device);
    return p2pt__device_batch_check(&op->device);
}

static p2pt_status device_resolve(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(p2pt__stream_enter(op->device.stream, &op->device.ctx, &op->device.device, pushed));
    op->device.windows = p2pt__windows(&h->windows, op->device.device);
out:
    return st;
}

static p2pt_status device_validate(struct p2pt_handle *h, struct p2pt_op *op,
                                   struct op_state *s)
{
    struct p2pt_device_batch *b = &op->device;
    p2pt_status st = p2pt__validate_device_batch(h, b);
    if (st == P2PT_SUCCESS)
        st = p2pt__validate_batch_signals(h, b);
    s->refused = st != P2PT_SUCCESS;
    if (st == P2PT_SUCCESS && b->windows != NULL && b->windows->n_peer > 0) {
        uint32_t link[P2PT_LINKS] = {0};
        st = p2pt__route_link(h, s->t, b->device, link);
        const uint32_t peer = link[P2PT_LINK_PEER];
        if (peer != 0 && (b->grid_cap == 0 || peer < b->grid_cap))
            b->grid_cap = peer;
    }
    return st;
}

static p2pt_status device_describe(struct p2pt_handle *h, struct p2pt_op *op,
                                   const struct p2pt_transport *t, p2pt_choice *c)
{
    const struct p2pt_device_batch *b = &op->device;
    c->transport = t->name;
    c->path = "batch";
    c->device = b->device;
    size_t used = strlen(c->reason);
    if (b->grid_cap != 0 && b->windows != NULL && b->windows->n_peer > 0 &&
        used < sizeof(c->reason))
        snprintf(c->reason + used, sizeof(c->reason) - used,
                 "; %d of the windows of device %d hold another GPU's memory, so at most %u "
                 "CTAs (%s)",
                 b->windows->n_peer, b->device, b->grid_cap,
                 h->cfg.link_peer > 0 ? "P2P_TRANSPORT_LINK_PEER" : "the table's 'link peer'");
    return P2PT_SUCCESS;
}

static p2pt_status device_dispatch(struct p2pt_handle *h, struct p2pt_op *op,
                                   struct op_state *s)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(s->t->copy_batch_device(h, &op->device));
    p2pt__share_mark(h, op->device.stream, op->device.ctx, op->device.device);
    relaxed_add(&h->stats.device_batches, 1);
    relaxed_add(&h->stats.engine_batches[p2pt__transport_index(s->t)], 1);
out:
    return st;
}

/* ---- A signal or a wait ---- */

static p2pt_status signal_route_first(struct p2pt_handle *h, const struct p2pt_op *op,
                                      struct op_state *s)
{
    if (op->signal.exchange == NULL)
        return p2pt__route_signal(h, op->fn, &s->t, s->why, s->len);
    if (h->cfg.sm_budget == 0)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "%s: P2P_TRANSPORT_SM_BUDGET=0, and a count exchange is a kernel "
                          "(it counts the routing on the GPU and signals; docs/SIGNALS.md); "
                          "use a budget of 1 or more",
                          op->fn);
    p2pt_status st = p2pt__route_signal(h, op->fn, &s->t, NULL, 0);
    if (st == P2PT_SUCCESS && s->why)
        snprintf(s->why, s->len,
                 "a kernel of %s, a CTA a destination within the SM budget (it counts "
                 "the routing where it lies, puts the counts and signals), whatever "
                 "P2P_TRANSPORT says",
                 s->t->name);
    return st;
}

static p2pt_status signal_check(struct p2pt_op *op, struct op_state *s)
{
    (void)s;
    return p2pt__signal_check(&op->signal);
}

static p2pt_status signal_resolve(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed)
{
    (void)h;
    struct p2pt_signal *g = &op->signal;
    return p2pt__stream_enter(g->stream, &g->ctx, &g->device, pushed);
}

static p2pt_status signal_validate(struct p2pt_handle *h, struct p2pt_op *op,
                                   struct op_state *s)
{
    p2pt_status st = p2pt__validate_signal(h, &op->signal);
    s->refused = st != P2PT_SUCCESS;
    return st;
}

static p2pt_status signal_describe(struct p2pt_handle *h, struct p2pt_op *op,
                                   const struct p2pt_transport *t, p2pt_choice *c)
{
    (void)h;
    c->transport = t->name;
    c->path = op->signal.exchange ? "count" : op->signal.wait ? "wait" : "signal";
    c->device = op->signal.device;
    return P2PT_SUCCESS;
}

static p2pt_status signal_dispatch(struct p2pt_handle *h, struct p2pt_op *op,
                                   struct op_state *s)
{
    p2pt_status st = P2PT_SUCCESS;
    P2PT_TRY(s->t->signal(h, &op->signal));
    p2pt__share_mark(h, op->signal.stream, op->signal.ctx, op->signal.device);
    relaxed_add(op->signal.exchange ? &h->stats.count_exchanges
                : op->signal.wait       ? &h->stats.waits
                                        : &h->stats.signals,
                1);
out:
    return st;
}

static const struct op_kind kinds[] = {
    [P2PT_OP_COPY] = {.check = copy_check,
                      .resolve = copy_resolve,
                      .route = copy_route,
                      .describe = copy_describe,
                      .dispatch = copy_dispatch,
                      .nothing_path = "other",
                      .nothing_reason = "0 bytes: nothing is enqueued"},
    [P2PT_OP_BATCH] = {.check = batch_check,
                       .resolve = batch_resolve,
                       .route = batch_route,
                       .describe = batch_describe,
                       .dispatch = batch_dispatch,
                       .args_first = batch_args_first,
                       .nothing_path = "batch",
                       .nothing_reason = "no piece has bytes: nothing is enqueued",
                       .nothing_counts_batch = true},
    [P2PT_OP_DEVICE_BATCH] = {.route_first = device_route_first,
                              .check = device_check,
                              .resolve = device_resolve,
                              .route = device_validate,
                              .describe = device_describe,
                              .dispatch = device_dispatch},
    [P2PT_OP_SIGNAL] = {.route_first = signal_route_first,
                        .check = signal_check,
                        .resolve = signal_resolve,
                        .route = signal_validate,
                        .describe = signal_describe,
                        .dispatch = signal_dispatch},
};

/* The end of an operation with nothing to enqueue. */
static void count_nothing(struct p2pt_handle *h, const struct op_kind *k, p2pt_choice *dry)
{
    if (dry) {
        dry->transport = "none";
        dry->device = -1;
        dry->path = k->nothing_path;
        snprintf(dry->reason, sizeof(dry->reason), "%s", k->nothing_reason);
    } else if (k->nothing_counts_batch) {
        relaxed_add(&h->stats.batches, 1);
    }
}

static p2pt_status op_run(struct p2pt_handle *h, struct p2pt_op *op, p2pt_choice *dry)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct op_kind *k = &kinds[op->kind];
    struct op_state s = {.why = dry ? dry->reason : NULL,
                         .len = dry ? sizeof(dry->reason) : 0,
                         .dry = dry != NULL};
    bool pushed = false;

    if (k->route_first && (st = k->route_first(h, op, &s)) != P2PT_SUCCESS)
        return st;
    if ((st = k->check(op, &s)) != P2PT_SUCCESS) {
        if (dry == NULL)
            relaxed_add(&h->stats.rejected, 1);
        return st;
    }
    if (s.nothing)
        goto out;
    if ((st = k->resolve(h, op, &pushed)) != P2PT_SUCCESS)
        goto out;
    if ((st = k->route(h, op, &s)) != P2PT_SUCCESS || s.nothing)
        goto out;
    if (dry)
        st = k->describe(h, op, s.t, dry);
    else
        st = k->dispatch(h, op, &s);
out:
    if (k->args_first != NULL && st != P2PT_SUCCESS)
        st = k->args_first(h, op, st, &s);
    p2pt__stream_leave(pushed);
    if (st == P2PT_SUCCESS && s.nothing)
        count_nothing(h, k, dry);
    else if (st != P2PT_SUCCESS && s.refused && dry == NULL)
        relaxed_add(&h->stats.rejected, 1);
    return st;
}

/* Counted in among the windows' readers for the whole run: the snapshots
 * it reads are freed only after it (windows.c). */
p2pt_status p2pt__op_run(struct p2pt_handle *h, struct p2pt_op *op, p2pt_choice *dry)
{
    p2pt__windows_enter(&h->windows);
    p2pt_status st = op_run(h, op, dry);
    p2pt__windows_leave(&h->windows);
    return st;
}
