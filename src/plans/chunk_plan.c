/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a copy is cut up for the TMA kernel. Pure arithmetic, no CUDA, so every
 * size and offset can be checked exhaustively on a CPU (tests/test_chunk_plan.c);
 * kernels/tma_copy.cu computes p2pt__chunk_at the same way.
 *
 * cp.async.bulk needs 16-byte aligned addresses and sizes on both sides. Only
 * when dst and src are equal modulo 16 can one shift (the head) align both;
 * the bytes before it and the < 16 after the last full unit (the tail) are
 * moved with plain loads and stores.
 */
#include "chunk_plan.h"

p2pt_status p2pt__chunk_plan(uintptr_t dst, uintptr_t src, size_t bytes,
                             size_t chunk_bytes, struct p2pt_chunk_plan *plan)
{
    if (chunk_bytes == 0 || chunk_bytes % P2PT_ALIGN != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "chunk size %zu is not a positive multiple of %u",
                          chunk_bytes, P2PT_ALIGN);
    plan->bytes = bytes;
    plan->chunk = chunk_bytes;
    plan->coaligned = (dst % P2PT_ALIGN) == (src % P2PT_ALIGN);
    if (!plan->coaligned) {
        plan->head = bytes;
        plan->body = plan->tail = 0;
        plan->chunks = 0;
        return P2PT_SUCCESS;
    }
    size_t head = (P2PT_ALIGN - dst % P2PT_ALIGN) % P2PT_ALIGN;
    if (head > bytes)
        head = bytes;
    size_t rest = bytes - head;
    plan->head = head;
    plan->body = rest - rest % P2PT_ALIGN;
    plan->tail = rest % P2PT_ALIGN;
    plan->chunks = plan->body / chunk_bytes + (plan->body % chunk_bytes != 0);
    return P2PT_SUCCESS;
}

void p2pt__chunk_at(const struct p2pt_chunk_plan *plan, uint64_t i, size_t *offset,
                    size_t *len)
{
    size_t start = (size_t)i * plan->chunk;
    size_t left = plan->body - start;
    *offset = plan->head + start;
    *len = left < plan->chunk ? left : plan->chunk;
}
