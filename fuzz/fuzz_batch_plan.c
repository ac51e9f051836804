/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness: host batch planning and the tile arithmetic. For any
 * list of pieces (any addresses, sizes up to 2^40) and any capacity, every
 * launch passes on the non-empty pieces in order, untouched, with their
 * tile count, never over its capacity, and the plan ends; for every piece,
 * head and tail are under 16 bytes, the body is 16-byte aligned at the
 * destination and its tiles are exactly enough for it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t cap = (size_t)data[2] % 64 + 1;
    data += 4;
    size -= 4;
    size_t count = size / 24 < 64 ? size / 24 : 64;
    p2pt_copy_desc d[64];
    for (size_t i = 0; i < count; i++) {
        uint64_t v[3];
        memcpy(v, data + 24 * i, 24);
        d[i].dst = (void *)(uintptr_t)(v[0] >> 4);
        d[i].src = (const void *)(uintptr_t)(v[1] >> 4);
        d[i].bytes = v[2] % (1ull << 40);
        const uint64_t dst = v[0] >> 4, n = d[i].bytes;
        const uint64_t h = P2PT_BATCH_HEAD(dst, n), body = P2PT_BATCH_BODY(dst, n);
        const uint64_t tiles = P2PT_BATCH_TILES(dst, n);
        if (h >= 16 || n - h - body >= 16 || body % 16 != 0 || (body && (dst + h) % 16) ||
            (tiles == 0) != (n == 0) || (body && (tiles * P2PT_BATCH_TILE < body ||
                                                   (tiles - 1) * P2PT_BATCH_TILE >= body)))
            abort();
    }
    struct p2pt_batch_desc e[64];
    struct p2pt_batch_cursor cur = {0};
    size_t piece = 0;
    for (int launches = 0;; launches++) {
        if (launches > 1 << 20)
            abort(); /* the plan must end */
        uint64_t tiles = 0, want = 0;
        size_t n = p2pt__batch_fill(d, NULL, count, &cur, e, cap, &tiles);
        if (n == 0)
            break;
        if (n > cap)
            abort();
        for (size_t i = 0; i < n; i++) {
            while (piece < count && d[piece].bytes == 0)
                piece++;
            if (piece >= count || e[i].bytes != d[piece].bytes ||
                e[i].dst != (uint64_t)(uintptr_t)d[piece].dst ||
                e[i].src != (uint64_t)(uintptr_t)d[piece].src)
                abort();
            want += P2PT_BATCH_TILES(e[i].dst, e[i].bytes);
            piece++;
        }
        if (want != tiles)
            abort();
    }
    while (piece < count && d[piece].bytes == 0)
        piece++;
    if (piece != count)
        abort();
    return 0;
}
