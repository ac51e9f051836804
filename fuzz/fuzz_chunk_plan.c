/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness: chunk planning. For any (dst, src, bytes, chunk) the
 * plan must cover every byte exactly once, in order: head < 16 (or the whole
 * copy when dst and src differ modulo 16), a 16-aligned body cut into chunks
 * no larger than `chunk`, a tail < 16. Checked arithmetically, so sizes up to
 * 2^64 are fair game.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t v[4] = {0, 0, 0, 0};
    memcpy(v, data, size < sizeof(v) ? size : sizeof(v));
    uintptr_t dst = (uintptr_t)v[0], src = (uintptr_t)v[1];
    size_t bytes = (size_t)v[2];
    size_t chunk = (size_t)(v[3] % (1u << 20));
    struct p2pt_chunk_plan plan;
    p2pt_status st = p2pt__chunk_plan(dst, src, bytes, chunk, &plan);
    if (chunk == 0 || chunk % 16 != 0) {
        if (st != P2PT_INVALID_ARGUMENT)
            abort();
        return 0;
    }
    if (st != P2PT_SUCCESS || plan.bytes != bytes)
        abort();
    if (plan.coaligned != (dst % 16 == src % 16))
        abort();
    if (!plan.coaligned) {
        if (plan.head != bytes || plan.body != 0 || plan.tail != 0 || plan.chunks != 0)
            abort();
        return 0;
    }
    if (plan.head >= 16 && plan.head != bytes)
        abort();
    if (plan.body % 16 != 0 || plan.tail >= 16 || plan.head + plan.body + plan.tail != bytes)
        abort();
    if (plan.body != 0 && (dst + plan.head) % 16 != 0)
        abort();
    if (plan.chunks != plan.body / chunk + (plan.body % chunk != 0))
        abort();
    /* First, last and a middle chunk: contiguous, aligned, bounded. */
    uint64_t probe[3] = {0, plan.chunks / 2, plan.chunks ? plan.chunks - 1 : 0};
    for (int i = 0; i < 3 && plan.chunks; i++) {
        size_t off, len;
        p2pt__chunk_at(&plan, probe[i], &off, &len);
        if (off != plan.head + probe[i] * chunk || len == 0 || len > chunk || len % 16 != 0)
            abort();
        if (probe[i] == plan.chunks - 1 && off + len != plan.head + plan.body)
            abort();
    }
    return 0;
}
