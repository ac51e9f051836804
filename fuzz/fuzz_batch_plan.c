/*
 * libFuzzer harness: host batch planning. For any list of pieces (any
 * addresses, sizes up to 2^40, any unit and capacity), the entries of every
 * launch cover every byte of every piece exactly once and in order, with
 * unit_begin the exact prefix sum of the units and no launch over its
 * capacity or the unit limit; the plan always ends.
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
    uint32_t unit = (((uint32_t)data[0] << 8 | data[1]) % 4096 + 1) * 16;
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
    }
    struct p2pt_batch_entry e[64];
    struct p2pt_batch_cursor cur = {0, 0};
    size_t piece = 0;
    uint64_t at = 0;
    for (int launches = 0;; launches++) {
        if (launches > 1 << 20)
            abort(); /* the plan must end */
        uint32_t total = 0;
        size_t n = p2pt__batch_fill(d, count, &cur, unit, e, cap, &total);
        if (n == 0)
            break;
        if (n > cap || total > P2PT_BATCH_MAX_UNITS)
            abort();
        uint64_t units = 0;
        for (size_t i = 0; i < n; i++) {
            while (piece < count && at == d[piece].bytes) {
                piece++;
                at = 0;
            }
            if (piece >= count || e[i].bytes == 0 || e[i].unit_begin != units ||
                e[i].dst != (uint64_t)(uintptr_t)d[piece].dst + at ||
                e[i].src != (uint64_t)(uintptr_t)d[piece].src + at)
                abort();
            units += P2PT_BATCH_UNITS(e[i].dst, e[i].src, (uint64_t)e[i].bytes, unit);
            at += e[i].bytes;
        }
        if (units != total)
            abort();
    }
    while (piece < count && at == d[piece].bytes) {
        piece++;
        at = 0;
    }
    if (piece != count)
        abort();
    return 0;
}
