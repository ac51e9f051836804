/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One operation, one pipeline (operation.c). A copy, a host batch and a
 * device batch are one type; p2pt__op_run takes any of them through the
 * same steps: argument checks (args.c), resolve (resolve.c: the stream's
 * context entered once and held until the operation is done), route
 * (router.c and the handle's policy), validate (validate.c), then dispatch
 * to the engine and count, or, for a dry run (p2pt_explain_*), describe the
 * choice instead. A dry run decides exactly as the real call, refusals
 * included, and enqueues and counts nothing.
 */
#ifndef P2PT_OPERATION_H
#define P2PT_OPERATION_H

#include <string.h>

#include "batch.h"
#include "block_plan.h"
#include "signal_op.h"

struct p2pt_handle;

enum p2pt_op_kind {
    P2PT_OP_COPY,         /* p2pt_copy_async */
    P2PT_OP_BATCH,        /* p2pt_copy_batch_async */
    P2PT_OP_DEVICE_BATCH, /* p2pt_copy_batch_device_async */
    P2PT_OP_SIGNAL,       /* p2pt_signal_async, p2pt_wait_async */
};

struct p2pt_op {
    enum p2pt_op_kind kind;
    const char *fn; /* the entry point, for messages */
    /* The kind's own: its constructor fills the arguments, the pipeline
     * the facts. */
    union {
        struct p2pt_request copy;
        struct p2pt_batch batch;
        struct p2pt_device_batch device;
        struct p2pt_signal signal;
    };
};

/* A copy operation for entry point `fn`: only its own part is set (a copy
 * reads nothing else, and this is every copy's enqueue path). */
static inline void p2pt__op_copy(struct p2pt_op *op, const char *fn, void *dst, const void *src,
                                 size_t bytes, void *stream)
{
    op->kind = P2PT_OP_COPY;
    op->fn = fn;
    memset(&op->copy, 0, sizeof(op->copy));
    op->copy.dst = dst;
    op->copy.src = src;
    op->copy.bytes = bytes;
    op->copy.stream = (CUstream)stream;
}

/* A host-batch operation for entry point `fn`. */
static inline void p2pt__op_batch(struct p2pt_op *op, const char *fn, const p2pt_copy_desc *descs,
                                  size_t count, void *stream)
{
    memset(op, 0, sizeof(*op));
    op->kind = P2PT_OP_BATCH;
    op->fn = fn;
    op->batch.descs = descs;
    op->batch.count = count;
    op->batch.stream = (CUstream)stream;
}

/* A host batch whose pieces come from blocks (block_plan.h), written out
 * or kept as blocks: `rows` pieces a layer, so that a refusal names the
 * layer and the row, and its sums known from the plan. */
static inline void p2pt__op_blocks(struct p2pt_op *op, const char *fn,
                                   const struct p2pt_block_pieces *p, void *stream)
{
    p2pt__op_batch(op, fn, p->descs, p->count, stream);
    op->batch.blocks = p->descs == NULL ? &p->blocks : NULL;
    op->batch.rows = p->rows;
    op->batch.pieces = p->pieces;
    op->batch.bytes = p->bytes;
    op->batch.sums_known = p->sums_known;
}

/* A device-batch operation for entry point `fn`. */
static inline void p2pt__op_device_batch(struct p2pt_op *op, const char *fn,
                                         const p2pt_copy_desc *descs, const uint32_t *count,
                                         uint32_t max_count, void *workspace, void *stream)
{
    memset(op, 0, sizeof(*op));
    op->kind = P2PT_OP_DEVICE_BATCH;
    op->fn = fn;
    op->device.fn = fn;
    op->device.descs = descs;
    op->device.count = count;
    op->device.max_count = max_count;
    op->device.workspace = workspace;
    op->device.stream = (CUstream)stream;
    op->device.n_marks = 1;
}

/* A device batch of blocks in GPU memory for entry point `fn`: the
 * argument check (p2pt__device_blocks_check) places its descriptors and
 * count in `workspace`. `k` outlives the operation. */
static inline void p2pt__op_device_blocks(struct p2pt_op *op, const char *fn,
                                          struct p2pt_device_blocks *k, void *workspace,
                                          void *stream)
{
    p2pt__op_device_batch(op, fn, NULL, NULL, 0, workspace, stream);
    op->device.blocks = k;
}

/* A signal (`wait` false) or a wait for `count` signals on semaphore `sem`,
 * for entry point `fn`. */
static inline void p2pt__op_signal(struct p2pt_op *op, const char *fn, bool wait, void *sem,
                                   uint32_t count, void *stream)
{
    memset(op, 0, sizeof(*op));
    op->kind = P2PT_OP_SIGNAL;
    op->fn = fn;
    op->signal.fn = fn;
    op->signal.wait = wait;
    op->signal.sem = sem;
    op->signal.count = count;
    op->signal.stream = (CUstream)stream;
}

/* A count exchange (p2pt_count_rows_async): a signal kind whose kernel
 * makes the payload it signals. */
static inline void p2pt__op_count_rows(struct p2pt_op *op, const char *fn,
                                       const struct p2pt_count_exchange *x, void *stream)
{
    p2pt__op_signal(op, fn, false, NULL, 0, stream);
    op->signal.exchange = x;
}

/*
 * Take `op` through the pipeline for handle `h` (already checked live).
 * `dry` NULL: enqueue and count (a refusal counts in `rejected`). `dry` not
 * NULL: fill *dry (transport, path, device, reason) instead of dispatching.
 */
P2PT_INTERNAL p2pt_status p2pt__op_run(struct p2pt_handle *h, struct p2pt_op *op,
                                       p2pt_choice *dry);

#endif /* P2PT_OPERATION_H */
