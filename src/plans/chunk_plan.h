/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How one copy is cut up for the TMA kernel (chunk_plan.c). Pure arithmetic,
 * CUDA-free, unit-tested and fuzzed; the kernel computes p2pt__chunk_at the
 * same way.
 */
#ifndef P2PT_CHUNK_PLAN_H
#define P2PT_CHUNK_PLAN_H

#include "common.h"
#include "p2pt_kernel_abi.h"

/*
 * Offsets are relative to the start of the copy.
 *   [0, head)                 plain loads and stores (dst not yet 16-aligned)
 *   [head, head + body)       16-byte aligned, cut into `chunks` chunks of
 *                             `chunk` bytes, the last one possibly shorter
 *   [head + body, bytes)      the tail, plain loads and stores (< 16 bytes)
 * When dst and src differ modulo 16 `coaligned` is false and the whole copy
 * is head (body = tail = 0): no TMA possible.
 */
struct p2pt_chunk_plan {
    size_t bytes;
    size_t head;
    size_t body;
    size_t tail;
    size_t chunk;
    uint64_t chunks;
    bool coaligned;
};

/* P2PT_INVALID_ARGUMENT when chunk_bytes is zero or not a multiple of 16. */
P2PT_INTERNAL p2pt_status p2pt__chunk_plan(uintptr_t dst, uintptr_t src, size_t bytes,
                                           size_t chunk_bytes, struct p2pt_chunk_plan *plan);
/* Offset (from the copy's start) and length of body chunk `i` < chunks. */
P2PT_INTERNAL void p2pt__chunk_at(const struct p2pt_chunk_plan *plan, uint64_t i,
                                  size_t *offset, size_t *len);

#endif /* P2PT_CHUNK_PLAN_H */
