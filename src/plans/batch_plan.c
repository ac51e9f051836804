/*
 * Host batches into launches. The kernel finds the piece of each unit by
 * a binary search over the entries' unit_begin, so an entry list is only
 * correct if unit_begin is the exact prefix sum of P2PT_BATCH_UNITS: this
 * file is the one place that computes it on the host
 * (tests/test_batch_plan.c and fuzz/fuzz_batch_plan.c check it).
 */
#include "batch_plan.h"

size_t p2pt__batch_fill(const p2pt_copy_desc *descs, size_t count, struct p2pt_batch_cursor *cur,
                        uint32_t unit, struct p2pt_batch_entry *out, size_t cap, uint32_t *total)
{
    size_t n = 0;
    uint64_t units = 0;
    /* Whole units per entry, so a cut never splits a bulk chunk. */
    const uint64_t max_entry = P2PT_BATCH_MAX_ENTRY_BYTES / unit * unit;
    /* The unit is a power of two unless a small P2P_TRANSPORT_CHUNK_BYTES
     * says otherwise: then a shift does what the division would (this loop
     * runs once per piece on the caller's thread). */
    int shift = -1;
    if ((unit & (unit - 1)) == 0)
        for (shift = 0; (1u << shift) != unit; shift++)
            ;

    while (n < cap && cur->next < count) {
        const p2pt_copy_desc *d = &descs[cur->next];
        if (cur->offset >= d->bytes) {
            cur->next++;
            cur->offset = 0;
            continue;
        }
        const uint64_t left = d->bytes - cur->offset;
        const uint64_t bytes = left < max_entry ? left : max_entry;
        const uint64_t dst = (uint64_t)(uintptr_t)d->dst + cur->offset;
        const uint64_t src = (uint64_t)(uintptr_t)d->src + cur->offset;
        /* One entry has at most 2^32 / 16 units, far below the limit, so
         * only a launch that already holds entries can pass it. */
        uint64_t u;
        if (shift < 0) {
            u = P2PT_BATCH_UNITS(dst, src, bytes, (uint64_t)unit);
        } else {
            const uint64_t span = P2PT_BATCH_IS_BULK(dst, src, bytes) ? P2PT_BATCH_BODY(dst, bytes)
                                                                      : bytes;
            u = (span + unit - 1) >> shift;
        }
        if (units + u > P2PT_BATCH_MAX_UNITS)
            break;
        out[n].dst = dst;
        out[n].src = src;
        out[n].bytes = (uint32_t)bytes;
        out[n].unit_begin = (uint32_t)units;
        units += u;
        n++;
        cur->offset += bytes;
        if (cur->offset >= d->bytes) {
            cur->next++;
            cur->offset = 0;
        }
    }
    *total = (uint32_t)units;
    return n;
}
