/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument checks: the first step of every operation, before any driver
 * call. A copy's pointers and size; a host batch's array (its pieces are
 * checked in the pass over the descriptors, batch_scan.c, with the
 * messages made here); a device batch's buffers, and blocks in GPU memory:
 * their layers on the host, their mapping and workspace by address.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "signal_op.h"

p2pt_status p2pt__check_args(void *dst, const void *src, size_t bytes)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

    if (p2pt__args_ok(d, s, bytes))
        return P2PT_SUCCESS;
    if (dst == NULL || src == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "copy of %zu bytes with dst=%p and src=%p: both must be "
                          "non-NULL when bytes > 0",
                          bytes, dst, src);
    if (bytes > UINTPTR_MAX - d || bytes > UINTPTR_MAX - s)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "copy of %zu bytes from src=%p to dst=%p wraps around the "
                          "end of the address space",
                          bytes, src, dst);
    if (d < s + bytes && s < d + bytes)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "overlapping ranges: dst [%p, %p) and src [%p, %p) share "
                          "bytes; p2pt copies like memcpy, not memmove",
                          dst, (void *)(d + bytes), src, (void *)(s + bytes));
    return P2PT_SUCCESS;
}

p2pt_status p2pt__piece_fail(p2pt_status st, const struct p2pt_batch *b, size_t i)
{
    char why[1536];
    snprintf(why, sizeof(why), "%s", p2pt__last_error_text());
    if (b->rows != 0)
        return p2pt__fail(st, "%s: layer %zu, row %zu (piece %zu of %zu): %s", b->fn,
                          i / b->rows, i % b->rows, i, b->count, why);
    return p2pt__fail(st, "%s: piece %zu of %zu: %s", b->fn, i, b->count, why);
}

p2pt_status p2pt__batch_head(const char *fn, struct p2pt_batch *b)
{
    if (b->descs == NULL && b->blocks == NULL && b->count != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: descs is NULL with count %zu", fn,
                          b->count);
    /* No array holds more (a negative count cast, an n - 1 of 0): the
     * pass would read past any the caller has. */
    if (b->descs != NULL && b->count > PTRDIFF_MAX / sizeof(p2pt_copy_desc))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: count %zu: no array of p2pt_copy_desc holds that many (at most "
                          "%zu); pass the number of descriptors in descs",
                          fn, b->count, (size_t)(PTRDIFF_MAX / sizeof(p2pt_copy_desc)));
    b->fn = fn;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__piece_args_fail(const struct p2pt_batch *b, size_t i, const p2pt_copy_desc *d)
{
    p2pt_status st;
    if (d->bytes > SIZE_MAX)
        st = p2pt__fail(P2PT_INVALID_ARGUMENT, "%llu bytes do not fit in size_t",
                        (unsigned long long)d->bytes);
    else
        st = p2pt__check_args(d->dst, d->src, (size_t)d->bytes);
    return p2pt__piece_fail(st, b, i);
}

/* A semaphore's address: 32 bytes of GPU memory, 16-byte aligned. */
static p2pt_status semaphore_check(const char *fn, const char *what, const void *sem)
{
    if (sem == NULL || (uintptr_t)sem % 16 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %s %p: expected the 16-byte aligned GPU address of a semaphore "
                          "(P2PT_SEMAPHORE_BYTES of GPU memory, zeroed before first use)",
                          fn, what, sem);
    return P2PT_SUCCESS;
}

/* A list of n semaphore addresses, up to P2PT_BATCH_MAX_SIGNALS: the
 * array's presence, then (signals_aligned) each address. */
static p2pt_status signals_listed(const char *fn, void *const *signals, uint32_t n)
{
    if (n > P2PT_BATCH_MAX_SIGNALS || (n != 0 && signals == NULL))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %u signals at %p: expected up to %u semaphore addresses", fn, n,
                          (const void *)signals, P2PT_BATCH_MAX_SIGNALS);
    return P2PT_SUCCESS;
}

static p2pt_status signals_aligned(const char *fn, void *const *signals, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof(what), "signals[%u]", i);
        p2pt_status st = semaphore_check(fn, what, signals[i]);
        if (st != P2PT_SUCCESS)
            return st;
    }
    return P2PT_SUCCESS;
}

/* A count exchange's arguments (p2pt_count_rows_async). */
static p2pt_status count_rows_check(const char *fn, const struct p2pt_count_exchange *x)
{
    if (x->rows > P2PT_COUNT_ROWS_MAX)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: rows %u: expected 0 to %u", fn, x->rows,
                          P2PT_COUNT_ROWS_MAX);
    if (x->cols == 0 || x->cols > P2PT_COUNT_COLS_MAX)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: cols %u: expected 1 to %u destinations (a routing row's bytes)",
                          fn, x->cols, P2PT_COUNT_COLS_MAX);
    if (x->rows != 0 && x->routing == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: routing is NULL: expected %u x %u bytes of GPU memory", fn,
                          x->rows, x->cols);
    if ((uintptr_t)x->upto % 8 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: upto %p: expected NULL or the 8-byte aligned GPU address of "
                          "%u x %u int64",
                          fn, (void *)x->upto, x->cols, x->rows);
    if (x->n_puts > P2PT_COUNT_PUTS_MAX || (x->n_puts != 0 && x->puts == NULL))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %u puts at %p: expected up to %u addresses of the counts' "
                          "copies",
                          fn, x->n_puts, (const void *)x->puts, P2PT_COUNT_PUTS_MAX);
    for (uint32_t i = 0; i < x->n_puts; i++)
        if (x->puts[i] == NULL || (uintptr_t)x->puts[i] % 8 != 0)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "%s: puts[%u] %p: expected the 8-byte aligned GPU address of %u "
                              "int64 (one count a destination)",
                              fn, i, x->puts[i], x->cols);
    p2pt_status st = signals_listed(fn, x->signals, x->n_signals);
    return st != P2PT_SUCCESS ? st : signals_aligned(fn, x->signals, x->n_signals);
}

p2pt_status p2pt__signal_check(const struct p2pt_signal *s)
{
    if (s->exchange != NULL)
        return count_rows_check(s->fn, s->exchange);
    if (s->wait && (s->count == 0 || s->count > P2PT_WAIT_MAX_COUNT))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: count %u: expected the signals to wait for, 1 to %u", s->fn,
                          s->count, P2PT_WAIT_MAX_COUNT);
    return semaphore_check(s->fn, "sem", s->sem);
}

/* Whether [a, a + an) and [b, b + bn) share a byte (both inside the
 * address space: checked by the callers' sizes, which cannot wrap). */
static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + bn && y < x + an;
}

/* The kernel writes the workspace while it reads `what`: sharing bytes,
 * it would read what it wrote (silently the wrong pieces). */
static p2pt_status apart(const char *fn, const void *ws, size_t ws_bytes, const char *what,
                         const void *p, size_t bytes)
{
    if (!overlaps(ws, ws_bytes, p, bytes))
        return P2PT_SUCCESS;
    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                      "%s: workspace [%p, +%zu) overlaps %s [%p, +%zu): the batch writes its "
                      "workspace while it reads %s; give each its own memory",
                      fn, ws, ws_bytes, what, p, bytes, what);
}

p2pt_status p2pt__device_batch_check(const struct p2pt_device_batch *b)
{
    p2pt_status st = signals_listed(b->fn, b->signals, b->n_signals);
    if (st != P2PT_SUCCESS)
        return st;
    if (b->n_marks == 0 || b->n_marks > P2PT_BATCH_MARKS_MAX ||
        (b->n_marks > 1 && (b->n_signals == 0 || b->n_marks > b->max_count)))
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: n_marks %u (max_count %u, %u signals): expected 1 to %u parts, "
                          "at most max_count, and a part's semaphores to signal (n_signals "
                          "at least 1)",
                          b->fn, b->n_marks, b->max_count, b->n_signals, P2PT_BATCH_MARKS_MAX);
    if ((st = signals_aligned(b->fn, b->signals, b->n_signals)) != P2PT_SUCCESS)
        return st;
    if (b->descs == NULL || b->count == NULL || b->workspace == NULL || b->max_count == 0 ||
        b->max_count > P2PT_DEVICE_BATCH_MAX || (uintptr_t)b->descs % 8 != 0 ||
        (uintptr_t)b->count % 4 != 0 || (uintptr_t)b->workspace % 16 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: descs %p, count %p, max_count %u, "
                          "workspace %p: expected non-NULL GPU addresses (descs 8-, count 4-, "
                          "workspace 16-byte aligned) and max_count from 1 to %u",
                          b->fn, (const void *)b->descs, (const void *)b->count, b->max_count,
                          b->workspace, P2PT_DEVICE_BATCH_MAX);
    const size_t ws = p2pt__batch_workspace_size(b->max_count);
    if ((st = apart(b->fn, b->workspace, ws, "descs", b->descs,
                    (size_t)b->max_count * sizeof(p2pt_copy_desc))) != P2PT_SUCCESS ||
        (st = apart(b->fn, b->workspace, ws, "count", b->count, sizeof(uint32_t))) !=
            P2PT_SUCCESS)
        return st;
    return P2PT_SUCCESS;
}

/* A layer's blocks as device batch pieces: at least a byte (an empty block
 * is a mistake here, where the pieces are not looked at on the host), and
 * under the 4 GiB a device batch skips as too large. */
static p2pt_status device_block_bytes(const char *fn, const struct p2pt_device_blocks *k)
{
    for (size_t l = 0; l < k->n_layers; l++) {
        const uint64_t bb = p2pt__layer_record(k->layers, k->stride, l)->block_bytes;
        if (bb == 0 || bb > UINT32_MAX)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "%s: layer %zu: block_bytes %llu: expected 1 to %llu (a device "
                              "batch's pieces are under 4 GiB)",
                              fn, l, (unsigned long long)bb, (unsigned long long)UINT32_MAX);
    }
    return P2PT_SUCCESS;
}

p2pt_status p2pt__device_blocks_check(struct p2pt_device_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_device_blocks *k = b->blocks;
    const char *fn = b->fn;
    size_t pieces = 0;
    if (k->n_layers == 0 || k->pairs == 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: n_layers %zu, pairs %u: expected at least one layer and one "
                          "mapping row",
                          fn, k->n_layers, k->pairs);
    if (k->layers == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: layers is NULL: expected an array of %zu p2pt_block_layer "
                          "records in host memory",
                          fn, k->n_layers);
    if (__builtin_mul_overflow(k->n_layers, (size_t)k->pairs, &pieces) ||
        pieces > P2PT_DEVICE_BATCH_MAX)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: %zu layers x %u pairs: more pieces than a device batch takes "
                          "(properties.device_batch_max: %u)",
                          fn, k->n_layers, k->pairs, P2PT_DEVICE_BATCH_MAX);
    if (k->mapping == NULL || (uintptr_t)k->mapping % 8 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: mapping %p: expected the GPU address of %u (src, dst) int64 "
                          "rows, 8-byte aligned",
                          fn, (const void *)k->mapping, k->pairs);
    if (b->workspace == NULL || (uintptr_t)b->workspace % 16 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "%s: workspace %p: expected GPU memory of "
                          "p2pt_blocks_workspace_bytes(%zu, %u) = %zu bytes, 16-byte aligned",
                          fn, b->workspace, k->n_layers, k->pairs,
                          p2pt__blocks_workspace_size(k->n_layers, k->pairs));
    if (!k->kept && k->own == NULL) {
        if ((k->own = calloc(k->n_layers, sizeof(*k->own))) == NULL)
            return p2pt__fail(P2PT_SYSTEM_ERROR, "%s: no memory for %zu layers", fn,
                              k->n_layers);
        P2PT_TRY(p2pt__block_layers_copy(fn, k->layers, k->n_layers, k->own));
        k->layers = k->own;
    }
    P2PT_TRY(p2pt__block_layers_check(fn, k->layers, k->n_layers, &k->stride));
    P2PT_TRY(device_block_bytes(fn, k));
    P2PT_TRY(apart(fn, b->workspace, p2pt__blocks_workspace_size(k->n_layers, k->pairs),
                   "mapping", k->mapping, (size_t)k->pairs * 2 * sizeof(int64_t)));
    /* The batch the engine writes: its count and descriptors in the
     * workspace, after the status record. */
    struct p2pt_blocks_ws_head *head = b->workspace;
    b->count = &head->count;
    b->descs = (const p2pt_copy_desc *)(const void *)(head + 1);
    b->max_count = (uint32_t)pieces;
out:
    return st;
}
