/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block entry points (p2pt.h): a block mapping over a cache's layers
 * becomes the pieces of one host batch (block_plan.c), which takes the
 * operation pipeline as p2pt_copy_batch_async's descriptors do. The pieces
 * live for the call only: a host batch's pass reads them before it returns.
 * The plan reads the caller's layers and mapping once, into copies that
 * live as long.
 */
#include <stdlib.h>

#include "block_plan.h"
#include "explain.h"
#include "handles.h"

/* Plan the pieces, run them through the pipeline (a dry run when `choice`
 * is not NULL), free them. */
static p2pt_status run_blocks(p2pt_handle *h, const char *fn, const p2pt_block_layer *layers,
                              size_t n_layers, const int64_t *mapping, size_t pairs,
                              void *stream, p2pt_choice *choice)
{
    struct p2pt_block_pieces p;
    struct p2pt_op op;
    p2pt_status st = p2pt__block_plan(fn, layers, n_layers, mapping, pairs, &p);
    if (st != P2PT_SUCCESS || (p.count == 0 && choice == NULL))
        return st; /* a real run of no pieces touches nothing, stream included */
    p2pt__op_blocks(&op, fn, &p, stream);
    st = choice != NULL ? p2pt__dry_run(h, &op, choice) : p2pt__op_run(h, &op, NULL);
    p2pt__block_pieces_free(&p);
    return st;
}

p2pt_status p2pt_copy_blocks_async(p2pt_handle *h, const p2pt_block_layer *layers,
                                   size_t n_layers, const int64_t *mapping, size_t pairs,
                                   void *stream)
{
    const char *fn = "p2pt_copy_blocks_async";
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    return run_blocks(h, fn, layers, n_layers, mapping, pairs, stream, NULL);
}

p2pt_status p2pt_explain_blocks(p2pt_handle *h, const p2pt_block_layer *layers, size_t n_layers,
                                const int64_t *mapping, size_t pairs, void *stream,
                                p2pt_choice *choice)
{
    const char *fn = "p2pt_explain_blocks";
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    if (choice == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: choice is NULL", fn);
    return run_blocks(h, fn, layers, n_layers, mapping, pairs, stream, choice);
}
