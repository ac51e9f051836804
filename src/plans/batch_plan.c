/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host batches into launches: the non-empty pieces in order, at most a
 * launch's worth at a time, and their tile count, which bounds the grid
 * (tests/test_batch_plan.c and fuzz/fuzz_batch_plan.c check it). The kernel
 * needs nothing else from the host: it scans the tile counts itself.
 */
#include "batch_plan.h"

_Static_assert(sizeof(struct p2pt_batch_desc) == sizeof(p2pt_copy_desc),
               "the kernel reads descriptors in the public p2pt_copy_desc layout");

size_t p2pt__batch_fill(const p2pt_copy_desc *descs, const struct p2pt_blocks *blocks,
                        size_t count, struct p2pt_batch_cursor *cur, struct p2pt_batch_desc *out,
                        size_t cap, uint64_t *tiles)
{
    size_t n = 0;
    uint64_t t = 0;
    size_t next = cur->next;
    while (n < cap && next < count) {
        const p2pt_copy_desc piece = p2pt__piece_at(descs, blocks, next++), *d = &piece;
        const uint64_t bytes = d->bytes;
        if (bytes == 0)
            continue;
        const uint64_t dst = (uint64_t)(uintptr_t)d->dst;
        out[n].dst = dst;
        out[n].src = (uint64_t)(uintptr_t)d->src;
        out[n].bytes = bytes;
        t += P2PT_BATCH_TILES(dst, bytes);
        n++;
    }
    cur->next = next;
    *tiles = t;
    return n;
}
