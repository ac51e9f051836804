/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument checks: the first step of every operation, before any driver
 * call. A copy's pointers and size; a host batch's descriptors, piece by
 * piece; a device batch's buffers.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"

/* The common case of p2pt__check_args, cheap enough for every piece of a
 * batch: nothing to copy, or non-NULL ranges that neither wrap nor overlap. */
static inline bool args_ok(uintptr_t d, uintptr_t s, uint64_t n)
{
    return n == 0 || (d != 0 && s != 0 && n <= UINTPTR_MAX - d && n <= UINTPTR_MAX - s &&
                      (d >= s + n || s >= d + n));
}

p2pt_status p2pt__check_args(void *dst, const void *src, size_t bytes)
{
    uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;

    if (args_ok(d, s, bytes))
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

p2pt_status p2pt__piece_fail(p2pt_status st, size_t i, size_t count)
{
    char why[1536];
    snprintf(why, sizeof(why), "%s", p2pt__last_error_text());
    return p2pt__fail(st, "p2pt_copy_batch_async: piece %zu of %zu: %s", i, count, why);
}

p2pt_status p2pt__batch_check(const char *fn, const p2pt_copy_desc *descs, size_t count,
                              void *stream, struct p2pt_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    if (descs == NULL && count != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: descs is NULL with count %zu", fn, count);
    memset(b, 0, sizeof(*b));
    b->descs = descs;
    b->count = count;
    b->stream = (CUstream)stream;
    size_t pieces = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < count; i++) {
        const uintptr_t d = (uintptr_t)descs[i].dst, s = (uintptr_t)descs[i].src;
        const uint64_t n = descs[i].bytes;
        /* A piece that fails goes through p2pt__check_args for its message. */
        if (!(n <= SIZE_MAX && args_ok(d, s, n))) {
            if (n > SIZE_MAX) {
                st = p2pt__fail(P2PT_INVALID_ARGUMENT, "%llu bytes do not fit in size_t",
                                (unsigned long long)n);
                return p2pt__piece_fail(st, i, count);
            }
            if ((st = p2pt__check_args(descs[i].dst, descs[i].src, (size_t)n)) != 0)
                return p2pt__piece_fail(st, i, count);
        }
        pieces += n != 0;
        bytes += n;
    }
    b->pieces = pieces;
    b->bytes = bytes;
    return P2PT_SUCCESS;
}

p2pt_status p2pt__device_batch_check(const struct p2pt_device_batch *b)
{
    if (b->descs == NULL || b->count == NULL || b->workspace == NULL || b->max_count == 0 ||
        b->max_count > P2PT_DEVICE_BATCH_MAX || (uintptr_t)b->descs % 8 != 0 ||
        (uintptr_t)b->count % 4 != 0 || (uintptr_t)b->workspace % 16 != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "p2pt_copy_batch_device_async: descs %p, count %p, max_count %u, "
                          "workspace %p: expected non-NULL GPU addresses (descs 8-, count 4-, "
                          "workspace 16-byte aligned) and max_count from 1 to %u",
                          (const void *)b->descs, (const void *)b->count, b->max_count,
                          b->workspace, P2PT_DEVICE_BATCH_MAX);
    return P2PT_SUCCESS;
}
