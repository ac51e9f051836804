/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument checks, the first step of every operation (args.c): what can be
 * refused from the arguments alone, before any driver call.
 */
#ifndef P2PT_ARGS_H
#define P2PT_ARGS_H

#include "batch.h"

/* NULL, wrap-around, overlap: refused before anything else, no CUDA call.
 * bytes == 0 is accepted whatever the pointers. */
P2PT_INTERNAL p2pt_status p2pt__check_args(void *dst, const void *src, size_t bytes);
/* The common case of p2pt__check_args, cheap enough for every piece of a
 * batch: nothing to copy, or non-NULL ranges that neither wrap nor overlap. */
static inline bool p2pt__args_ok(uintptr_t d, uintptr_t s, uint64_t n)
{
    return n == 0 || (n <= SIZE_MAX && d != 0 && s != 0 && n <= UINTPTR_MAX - d &&
                      n <= UINTPTR_MAX - s && (d >= s + n || s >= d + n));
}
/* A host batch as a whole, as its operation's constructor filled it (`fn`
 * names the entry point in messages): NULL descs with a count. Its pieces
 * are checked in the pass over the descriptors (batch_scan.c). */
P2PT_INTERNAL p2pt_status p2pt__batch_head(const char *fn, struct p2pt_batch *b);
/* Piece i of batch `b`, `d` as the pass read it, whose arguments
 * p2pt__args_ok refused: the status and the message that says why. */
P2PT_INTERNAL p2pt_status p2pt__piece_args_fail(const struct p2pt_batch *b, size_t i,
                                                const p2pt_copy_desc *d);
/* A device batch's buffers: non-NULL, aligned, max_count in range; its
 * signals: at most P2PT_BATCH_MAX_SIGNALS, each a semaphore address. */
P2PT_INTERNAL p2pt_status p2pt__device_batch_check(const struct p2pt_device_batch *b);
/* A signal's or a wait's arguments: a semaphore address aligned for
 * struct p2pt_semaphore; a wait's count from 1 to P2PT_WAIT_MAX_COUNT. */
struct p2pt_signal;
P2PT_INTERNAL p2pt_status p2pt__signal_check(const struct p2pt_signal *s);
/* A device batch of blocks (b->blocks, and its workspace, set by the
 * constructor): the counts, the pieces within properties.device_batch_max,
 * the mapping and workspace addresses, the layer records (read once into
 * b->blocks->own unless a layout's: p2pt__block_layers_copy, the messages
 * of p2pt_copy_blocks_async) and their block sizes. Ids are not looked
 * at: they live in GPU memory. On success the blocks' stride is set and
 * `b` is the batch over their pieces: descs, count and max_count in the
 * workspace. */
P2PT_INTERNAL p2pt_status p2pt__device_blocks_check(struct p2pt_device_batch *b);
/* The last error, prefixed with which piece of host batch `b` it is about
 * (its layer and row when it came from blocks). */
P2PT_INTERNAL p2pt_status p2pt__piece_fail(p2pt_status st, const struct p2pt_batch *b, size_t i);

#endif /* P2PT_ARGS_H */
