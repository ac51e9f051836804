/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation pipeline: every copy, host batch and device batch, and
 * their dry runs (p2pt_explain_*), take these steps in this order:
 *
 *   1. check the arguments (args.c), no driver call;
 *   2. resolve (resolve.c): enter the stream's context, held until the
 *      operation is done, and find every fact once;
 *   3. route (router.c): the handle's policy picks the engine; a copy the
 *      engine cannot run goes to the fallback engine, counted and logged;
 *   4. validate (validate.c) the facts against that engine;
 *   5. dispatch to the engine, or describe the choice in a dry run;
 *   6. count.
 *
 * A device batch's engine depends on no fact of the batch, and a transport
 * that cannot take one is refused before its arguments are looked at, so
 * its route comes first.
 *
 * A host batch's pieces are checked (arguments in step 1, facts in step 4)
 * in one pass over its descriptors (batch_scan.c). An engine that writes
 * the descriptors into a buffer of its own (P2PT_CAP_BATCH_SCAN) makes that
 * pass itself, in step 5, before it enqueues anything; otherwise, and in a
 * dry run, step 4 makes it. The outcome is the operation steps 1 and 4
 * would give in order: should a step before the pass fail (no driver, a
 * bad stream), the pieces' arguments are checked then, and a refused piece
 * is the error reported, or a batch of empty pieces succeeds with nothing
 * to do.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "batch_scan.h"
#include "handle.h"
#include "operation.h"
#include "policy.h"
#include "router.h"
#include "validate.h"

static void relaxed_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Step 1. *nothing: the operation has nothing to enqueue. */
static p2pt_status check(struct p2pt_op *op, bool *nothing)
{
    p2pt_status st = P2PT_SUCCESS;
    switch (op->kind) {
    case P2PT_OP_COPY:
        st = p2pt__check_args(op->copy.dst, op->copy.src, op->copy.bytes);
        *nothing = op->copy.bytes == 0;
        break;
    case P2PT_OP_BATCH:
        /* The pieces are read in the pass over the descriptors. */
        st = p2pt__batch_head(op->fn, op->descs, op->count, op->stream, &op->batch);
        *nothing = op->count == 0;
        break;
    case P2PT_OP_DEVICE_BATCH:
        st = p2pt__device_batch_check(&op->device);
        *nothing = false;
        break;
    }
    return st;
}

/* Step 2: the stream's context entered (*pushed: undo with
 * p2pt__stream_leave), then the kind's own facts. */
static p2pt_status resolve(struct p2pt_handle *h, struct p2pt_op *op, bool *pushed)
{
    p2pt_status st = P2PT_SUCCESS;
    switch (op->kind) {
    case P2PT_OP_COPY:
        P2PT_TRY(p2pt__stream_enter(op->copy.stream, &op->copy.ctx, &op->copy.device, pushed));
        P2PT_TRY(p2pt__resolve_sides(&op->copy));
        if (h->policy->needs & P2PT_NEEDS_CAPTURE)
            P2PT_TRY(p2pt__stream_capturing(op->copy.stream, &op->copy.capturing));
        break;
    case P2PT_OP_BATCH:
        P2PT_TRY(p2pt__stream_enter(op->batch.stream, &op->batch.ctx, &op->batch.device, pushed));
        if (h->policy->needs & P2PT_NEEDS_FIRST_PIECE)
            P2PT_TRY(p2pt__batch_first(&op->batch));
        break;
    case P2PT_OP_DEVICE_BATCH:
        P2PT_TRY(p2pt__stream_enter(op->device.stream, &op->device.ctx, &op->device.device,
                                    pushed));
        op->device.windows = p2pt__windows(&h->windows, op->device.device);
        break;
    }
out:
    return st;
}

/* A host batch for an engine without a batch step: every piece through the
 * pipeline as a copy of its own (routed and validated one by one). */
static p2pt_status each_piece(struct p2pt_handle *h, const struct p2pt_batch *b,
                              p2pt_choice *dry)
{
    for (size_t i = 0; i < b->count; i++) {
        const p2pt_copy_desc *d = &b->descs[i];
        struct p2pt_op piece;
        p2pt_choice c;
        p2pt__op_copy(&piece, "p2pt_copy_async", d->dst, d->src, (size_t)d->bytes, b->stream);
        memset(&c, 0, sizeof(c));
        p2pt_status st = p2pt__op_run(h, &piece, dry ? &c : NULL);
        if (st != P2PT_SUCCESS)
            return p2pt__piece_fail(st, i, b->count);
    }
    return P2PT_SUCCESS;
}

/* Steps 3 and 4 of a host batch. *nothing: no piece has bytes. */
static p2pt_status route_batch(struct p2pt_handle *h, struct p2pt_batch *b, bool dry,
                               const struct p2pt_transport **t, char *why, size_t len,
                               bool *nothing)
{
    p2pt_status st = P2PT_SUCCESS;
    if (h->policy->needs & P2PT_NEEDS_BATCH_SUMS) {
        P2PT_TRY(p2pt__batch_scan(h, b, NULL, NULL, NULL));
        if ((*nothing = b->pieces == 0))
            return P2PT_SUCCESS;
    }
    P2PT_TRY(p2pt__route_batch(h, b, t, why, len));
    if (!dry && ((*t)->caps & P2PT_CAP_BATCH_SCAN))
        return P2PT_SUCCESS; /* the engine's own pass */
    /* Without a batch step the pieces' facts are validated as copies. */
    P2PT_TRY(p2pt__batch_scan(h, b, (*t)->copy_batch != NULL ? *t : NULL, NULL, NULL));
    *nothing = b->pieces == 0;
out:
    return st;
}

/* Steps 3 and 4. *refused: validation (or a host batch's pass) said no. */
static p2pt_status route_and_validate(struct p2pt_handle *h, struct p2pt_op *op, bool dry,
                                      const struct p2pt_transport **t, char *why, size_t len,
                                      bool *refused, bool *nothing)
{
    p2pt_status st = P2PT_SUCCESS;
    *refused = false;
    switch (op->kind) {
    case P2PT_OP_COPY:
        P2PT_TRY(p2pt__route(h, &op->copy, t, why, len));
        st = p2pt__validate_copy(h, &op->copy, *t);
        *refused = st != P2PT_SUCCESS;
        break;
    case P2PT_OP_BATCH:
        st = route_batch(h, &op->batch, dry, t, why, len, nothing);
        *refused = op->batch.refused;
        break;
    case P2PT_OP_DEVICE_BATCH:
        st = p2pt__validate_device_batch(h, &op->device);
        *refused = st != P2PT_SUCCESS;
        break;
    }
out:
    return st;
}

/* A host batch whose pass has not run when a step fails with `st`: its
 * pieces' arguments decide, as if they had been checked first. Returns the
 * outcome; *refused: a piece was refused; *nothing: every piece is empty. */
static p2pt_status batch_args_first(struct p2pt_handle *h, struct p2pt_op *op, p2pt_status st,
                                    bool *refused, bool *nothing)
{
    struct p2pt_batch *b = &op->batch;
    if (op->kind != P2PT_OP_BATCH || b->scanned || st == P2PT_SUCCESS)
        return st;
    p2pt_status a = p2pt__batch_scan(h, b, NULL, NULL, NULL);
    if (a != P2PT_SUCCESS) {
        *refused = true;
        return a;
    }
    if (b->pieces == 0) {
        *nothing = true;
        return P2PT_SUCCESS;
    }
    return st;
}

/* Step 5 of a dry run. */
static p2pt_status describe(struct p2pt_handle *h, struct p2pt_op *op,
                            const struct p2pt_transport *t, p2pt_choice *c)
{
    c->transport = t->name;
    switch (op->kind) {
    case P2PT_OP_COPY:
        c->path = p2pt__path_name(op->copy.path);
        c->device = op->copy.device;
        break;
    case P2PT_OP_BATCH:
        c->path = "batch";
        c->device = op->batch.device;
        if (t->copy_batch == NULL)
            return each_piece(h, &op->batch, c);
        break;
    case P2PT_OP_DEVICE_BATCH:
        c->path = "batch";
        c->device = op->device.device;
        break;
    }
    return P2PT_SUCCESS;
}

/* Steps 5 and 6 of a real run. */
static p2pt_status dispatch(struct p2pt_handle *h, struct p2pt_op *op,
                            const struct p2pt_transport *t)
{
    p2pt_status st = P2PT_SUCCESS;
    int e = p2pt__transport_index(t);
    switch (op->kind) {
    case P2PT_OP_COPY:
        P2PT_TRY(t->copy(h, &op->copy));
        relaxed_add(&h->stats.copies, 1);
        relaxed_add(&h->stats.bytes, op->copy.bytes);
        relaxed_add(&h->stats.engine_bytes[e], op->copy.bytes);
        break;
    case P2PT_OP_BATCH:
        if (t->copy_batch == NULL)
            P2PT_TRY(each_piece(h, &op->batch, NULL));
        else
            P2PT_TRY(t->copy_batch(h, &op->batch));
        if (op->batch.pieces == 0)
            break; /* the engine's pass found nothing to do: counted as such */
        relaxed_add(&h->stats.engine_batches[e], 1);
        relaxed_add(&h->stats.batches, 1);
        relaxed_add(&h->stats.batch_pieces, op->batch.pieces);
        break;
    case P2PT_OP_DEVICE_BATCH:
        P2PT_TRY(t->copy_batch_device(h, &op->device));
        relaxed_add(&h->stats.device_batches, 1);
        relaxed_add(&h->stats.engine_batches[e], 1);
        break;
    }
out:
    return st;
}

/* A dry run's answer for an operation with nothing to enqueue. */
static void describe_nothing(const struct p2pt_op *op, p2pt_choice *c)
{
    c->transport = "none";
    c->device = -1;
    if (op->kind == P2PT_OP_COPY) {
        c->path = "other";
        snprintf(c->reason, sizeof(c->reason), "0 bytes: nothing is enqueued");
    } else {
        c->path = "batch";
        snprintf(c->reason, sizeof(c->reason), "no piece has bytes: nothing is enqueued");
    }
}

/* The end of an operation with nothing to enqueue. */
static void count_nothing(struct p2pt_handle *h, const struct p2pt_op *op, p2pt_choice *dry)
{
    if (dry)
        describe_nothing(op, dry);
    else if (op->kind == P2PT_OP_BATCH && op->count != 0)
        relaxed_add(&h->stats.batches, 1);
}

p2pt_status p2pt__op_run(struct p2pt_handle *h, struct p2pt_op *op, p2pt_choice *dry)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_transport *t = NULL;
    char *why = dry ? dry->reason : NULL;
    size_t len = dry ? sizeof(dry->reason) : 0;
    bool pushed = false, nothing = false, refused = false;

    if (op->kind == P2PT_OP_DEVICE_BATCH &&
        (st = p2pt__route_device_batch(h, &t, why, len)) != P2PT_SUCCESS)
        return st;
    if ((st = check(op, &nothing)) != P2PT_SUCCESS) {
        if (dry == NULL)
            relaxed_add(&h->stats.rejected, 1);
        return st;
    }
    if (nothing)
        goto out;
    if ((st = resolve(h, op, &pushed)) != P2PT_SUCCESS)
        goto out;
    if ((st = route_and_validate(h, op, dry != NULL, &t, why, len, &refused, &nothing)) !=
            P2PT_SUCCESS ||
        nothing)
        goto out;
    if (dry)
        st = describe(h, op, t, dry);
    else if ((st = dispatch(h, op, t)) != P2PT_SUCCESS)
        refused = op->kind == P2PT_OP_BATCH && op->batch.refused;
    else if (op->kind == P2PT_OP_BATCH && op->batch.pieces == 0)
        nothing = true, st = P2PT_SUCCESS;
out:
    st = batch_args_first(h, op, st, &refused, &nothing);
    p2pt__stream_leave(pushed);
    if (st == P2PT_SUCCESS && nothing)
        count_nothing(h, op, dry);
    else if (st != P2PT_SUCCESS && refused && dry == NULL)
        relaxed_add(&h->stats.rejected, 1);
    return st;
}
