/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt_explain_copy, p2pt_explain_batch and p2pt_explain_batch_device
 * (p2pt_explain_blocks is in blocks.c): what the real call would do with a request, and why, without doing it: the dry run of the same
 * operation pipeline (operation.c), so they decide as the real call does,
 * refusals included; they enqueue nothing and count nothing.
 */
#include <stdio.h>
#include <string.h>

#include "explain.h"
#include "handles.h"

static p2pt_status check_choice(const char *fn, const p2pt_choice *c)
{
    if (c == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: choice is NULL", fn);
    if (c->size < offsetof(p2pt_choice, path))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: choice->size is %zu; set it to sizeof(p2pt_choice) (%zu in "
                          "this build)",
                          fn, c->size, sizeof(p2pt_choice));
    return P2PT_SUCCESS;
}

/* Copy what fits in the caller's struct. */
static void give(p2pt_choice *out, const p2pt_choice *c)
{
    size_t n = out->size < sizeof(*c) ? out->size : sizeof(*c);
    size_t size = out->size;
    memcpy(out, c, n);
    out->size = size;
    if (n == sizeof(*c))
        out->reason[sizeof(out->reason) - 1] = '\0';
}

p2pt_status p2pt__dry_run(p2pt_handle *h, struct p2pt_op *op, p2pt_choice *choice)
{
    p2pt_status st = p2pt__check_handle(h, op->fn);
    p2pt_choice c;

    if (st != P2PT_SUCCESS || (st = check_choice(op->fn, choice)) != P2PT_SUCCESS)
        return st;
    memset(&c, 0, sizeof(c));
    c.device = -1;
    if ((st = p2pt__op_run(h, op, &c)) == P2PT_SUCCESS)
        give(choice, &c);
    return st;
}

p2pt_status p2pt_explain_copy(p2pt_handle *h, const void *dst, const void *src, size_t bytes,
                              void *stream, p2pt_choice *choice)
{
    struct p2pt_op op;
    p2pt__op_copy(&op, "p2pt_explain_copy", (void *)(uintptr_t)dst, src, bytes, stream);
    return p2pt__dry_run(h, &op, choice);
}

p2pt_status p2pt_explain_batch(p2pt_handle *h, const p2pt_copy_desc *descs, size_t count,
                               void *stream, p2pt_choice *choice)
{
    struct p2pt_op op;
    p2pt__op_batch(&op, "p2pt_explain_batch", descs, count, stream);
    return p2pt__dry_run(h, &op, choice);
}

p2pt_status p2pt_explain_batch_device(p2pt_handle *h, const p2pt_copy_desc *descs,
                                      const uint32_t *count, uint32_t max_count, void *workspace,
                                      void *stream, p2pt_choice *choice)
{
    struct p2pt_op op;
    p2pt__op_device_batch(&op, "p2pt_explain_batch_device", descs, count, max_count, workspace,
                          stream);
    return p2pt__dry_run(h, &op, choice);
}
