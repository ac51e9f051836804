/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a batch of host descriptors becomes kernel launches (batch_plan.c):
 * pure arithmetic, CUDA-free, unit-tested and fuzzed. The tile arithmetic
 * itself is in kernels/p2pt_kernel_abi.h, shared with the kernel.
 */
#ifndef P2PT_BATCH_PLAN_H
#define P2PT_BATCH_PLAN_H

#include "block_plan.h"
#include "common.h"
#include "p2pt_kernel_abi.h"

/* Where the next launch starts: piece `next`. */
struct p2pt_batch_cursor {
    size_t next;
};

/*
 * Fill up to `cap` descriptors for one launch from descs[cur->next ...]
 * (descs NULL: the pieces of `blocks`), passing over zero-byte pieces. Returns the descriptors written (0 once
 * nothing is left); *tiles gets their tiles (P2PT_BATCH_TILES), which is the
 * most CTAs the launch can use; *cur moves past what was taken.
 */
P2PT_INTERNAL size_t p2pt__batch_fill(const p2pt_copy_desc *descs,
                                      const struct p2pt_blocks *blocks, size_t count,
                                      struct p2pt_batch_cursor *cur, struct p2pt_batch_desc *out,
                                      size_t cap, uint64_t *tiles);

#endif /* P2PT_BATCH_PLAN_H */
