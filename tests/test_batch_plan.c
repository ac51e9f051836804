/*
 * Host batches into launch entries (src/batch_plan.c), on a CPU: every byte
 * of every piece is covered exactly once, in order, by entries whose
 * unit_begin is the exact prefix sum of P2PT_BATCH_UNITS (what the kernel's
 * binary search relies on); zero-byte pieces vanish; pieces of 4 GiB or
 * more are cut at whole units below 2^32; a launch stops at the entry
 * capacity; the unit arithmetic itself covers each piece.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

/* Run the plan over the whole batch, launch by launch, and check every
 * entry against the pieces it came from. Returns the number of launches. */
static size_t plan_and_check(const p2pt_copy_desc *d, size_t count, uint32_t unit, size_t cap)
{
    struct p2pt_batch_entry *e = calloc(cap, sizeof(*e));
    cr_assert_not_null(e);
    struct p2pt_batch_cursor cur = {0, 0};
    size_t piece = 0, launches = 0;
    uint64_t at = 0; /* bytes of d[piece] covered so far */
    for (;;) {
        uint32_t total = 0;
        size_t n = p2pt__batch_fill(d, count, &cur, unit, e, cap, &total);
        if (n == 0)
            break;
        launches++;
        cr_assert_leq(n, cap);
        uint64_t units = 0;
        for (size_t i = 0; i < n; i++) {
            while (piece < count && at == d[piece].bytes) {
                piece++;
                at = 0;
            }
            cr_assert_lt(piece, count, "entry %zu of launch %zu past the last piece", i, launches);
            cr_assert_eq(e[i].dst, (uint64_t)(uintptr_t)d[piece].dst + at,
                         "launch %zu entry %zu: dst not where piece %zu continues", launches,
                         i, piece);
            cr_assert_eq(e[i].src, (uint64_t)(uintptr_t)d[piece].src + at);
            cr_assert_gt(e[i].bytes, 0u, "a zero-byte entry");
            cr_assert_eq(e[i].unit_begin, units, "entry %zu: unit_begin %u, prefix sum %llu", i,
                         e[i].unit_begin, (unsigned long long)units);
            uint64_t u = P2PT_BATCH_UNITS(e[i].dst, e[i].src, (uint64_t)e[i].bytes, unit);
            cr_assert_geq(u, 1u);
            /* The units cover the entry: bulk units its body, plain ones all of it. */
            if (P2PT_BATCH_IS_BULK(e[i].dst, e[i].src, (uint64_t)e[i].bytes)) {
                uint64_t head = P2PT_BATCH_HEAD(e[i].dst, (uint64_t)e[i].bytes);
                uint64_t body = P2PT_BATCH_BODY(e[i].dst, (uint64_t)e[i].bytes);
                cr_assert_lt(head, 16u);
                cr_assert_lt(e[i].bytes - head - body, 16u, "tail of 16 or more");
                cr_assert_eq((e[i].dst + head) % 16, 0u);
                cr_assert_geq(u * unit, body);
                cr_assert_lt((u - 1) * unit, body);
            } else {
                cr_assert_geq(u * unit, (uint64_t)e[i].bytes);
                cr_assert_lt((u - 1) * unit, (uint64_t)e[i].bytes);
            }
            units += u;
            at += e[i].bytes;
        }
        cr_assert_eq(total, units, "launch total %u, entries sum to %llu", total,
                     (unsigned long long)units);
    }
    while (piece < count && at == d[piece].bytes) {
        piece++;
        at = 0;
    }
    cr_assert_eq(piece, count, "pieces from %zu on were never planned", piece);
    free(e);
    return launches;
}

Test(batch_plan, every_byte_of_every_piece_once_with_prefix_sum_units)
{
    static p2pt_copy_desc d[3000];
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < 3000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t bytes = (i % 7 == 0) ? 0 : (x % 5 == 0 ? x % (3u << 20) : x % 20000);
        d[i].dst = (void *)(uintptr_t)(0x7f0000000000ull + i * 0x1000000ull + (x >> 40) % 64);
        d[i].src = (const void *)(uintptr_t)(0x7e0000000000ull + i * 0x1000000ull + (x >> 20) % 64);
        d[i].bytes = bytes;
    }
    /* 2571 non-empty pieces: two launches of at most 1344. */
    cr_assert_eq(plan_and_check(d, 3000, 48 * 1024, P2PT_BATCH_LARGE), 2);
    plan_and_check(d, 3000, 4096, P2PT_BATCH_SMALL);
    plan_and_check(d, 3000, 16, 7);
}

Test(batch_plan, zero_byte_pieces_vanish_and_an_empty_batch_has_no_launch)
{
    p2pt_copy_desc d[4] = {{(void *)0x1000, (void *)0x2000, 0},
                           {NULL, NULL, 0},
                           {(void *)0x3000, (void *)0x5000, 100},
                           {(void *)0x4000, (void *)0x6000, 0}};
    struct p2pt_batch_entry e[4];
    struct p2pt_batch_cursor cur = {0, 0};
    uint32_t total = 99;
    cr_assert_eq(p2pt__batch_fill(d, 2, &cur, 4096, e, 4, &total), 0u);
    cr_assert_eq(total, 0u);
    cur = (struct p2pt_batch_cursor){0, 0};
    cr_assert_eq(p2pt__batch_fill(d, 4, &cur, 4096, e, 4, &total), 1u);
    cr_assert_eq(e[0].dst, 0x3000u);
    cr_assert_eq(e[0].bytes, 100u);
    cr_assert_eq(total, 1u, "100 co-aligned bytes are below the bulk minimum: one plain unit");
    cr_assert_eq(p2pt__batch_fill(d, 4, &cur, 4096, e, 4, &total), 0u);
}

Test(batch_plan, pieces_of_4_gib_and_more_are_cut_at_whole_units)
{
    p2pt_copy_desc d[2] = {{(void *)0x10000000000ull, (void *)0x20000000003ull, 9ull << 30},
                           {(void *)0x30000000010ull, (void *)0x40000000010ull, (4ull << 30) + 5}};
    cr_assert_eq(plan_and_check(d, 2, 48 * 1024, P2PT_BATCH_LARGE), 1);
    struct p2pt_batch_entry e[16];
    struct p2pt_batch_cursor cur = {0, 0};
    uint32_t total;
    size_t n = p2pt__batch_fill(d, 2, &cur, 48 * 1024, e, 16, &total);
    cr_assert_eq(n, 5u, "9 GiB in 3 entries, 4 GiB + 5 in 2: got %zu", n);
    cr_assert_eq(e[0].bytes % (48 * 1024), 0u, "a cut splits a unit");
}

Test(batch_plan, the_unit_arithmetic_matches_the_kernel_rules)
{
    /* Co-aligned and at least P2PT_BATCH_BULK_MIN: bulk; otherwise plain. */
    cr_assert(P2PT_BATCH_IS_BULK(0x1003ull, 0x2003ull, 256ull));
    cr_assert_not(P2PT_BATCH_IS_BULK(0x1003ull, 0x2003ull, 255ull));
    cr_assert_not(P2PT_BATCH_IS_BULK(0x1003ull, 0x2004ull, 1ull << 20));
    cr_assert_eq(P2PT_BATCH_HEAD(0x1003ull, 256ull), 13u);
    cr_assert_eq(P2PT_BATCH_BODY(0x1003ull, 256ull), 240u);
    cr_assert_eq(P2PT_BATCH_HEAD(0x1003ull, 5ull), 5u);
    cr_assert_eq(P2PT_BATCH_UNITS(0x1000ull, 0x2000ull, 0ull, 4096ull), 0u);
    cr_assert_eq(P2PT_BATCH_UNITS(0x1000ull, 0x2000ull, 8192ull, 4096ull), 2u);
    cr_assert_eq(P2PT_BATCH_UNITS(0x1001ull, 0x2000ull, 8193ull, 4096ull), 3u);
}
