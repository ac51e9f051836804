/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host batches into launches (src/plans/batch_plan.c) and the tile arithmetic the
 * batch kernel shares with the host (kernels/p2pt_kernel_abi.h), on a CPU:
 * every non-empty piece is passed on once, in order, with its addresses and
 * size untouched (pieces of 4 GiB and more too); zero-byte pieces vanish; a
 * launch stops at its capacity; the tile count of a launch is the sum of its
 * pieces' tiles; and a piece's tiles cover its head, body and tail: head and
 * tail under 16 bytes, the body 16-byte aligned at the destination, the
 * last tile holding the end of the body; and pieces kept as blocks fill
 * launches as their written-out pieces do.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

/* Run the plan over the whole batch and check every descriptor against the
 * pieces it came from. Returns the number of launches. */
static size_t plan_and_check(const p2pt_copy_desc *d, size_t count, size_t cap)
{
    struct p2pt_batch_desc *e = calloc(cap, sizeof(*e));
    cr_assert_not_null(e);
    struct p2pt_batch_cursor cur = {0};
    size_t piece = 0, launches = 0;
    for (;;) {
        uint64_t tiles = 0, want_tiles = 0;
        size_t n = p2pt__batch_fill(d, NULL, count, &cur, e, cap, &tiles);
        if (n == 0)
            break;
        launches++;
        cr_assert_leq(n, cap);
        for (size_t i = 0; i < n; i++) {
            while (piece < count && d[piece].bytes == 0)
                piece++;
            cr_assert_lt(piece, count, "descriptor %zu of launch %zu has no piece", i, launches);
            cr_assert_eq(e[i].dst, (uint64_t)(uintptr_t)d[piece].dst);
            cr_assert_eq(e[i].src, (uint64_t)(uintptr_t)d[piece].src);
            cr_assert_eq(e[i].bytes, d[piece].bytes);
            want_tiles += P2PT_BATCH_TILES(e[i].dst, e[i].bytes);
            piece++;
        }
        cr_assert_eq(tiles, want_tiles);
    }
    while (piece < count && d[piece].bytes == 0)
        piece++;
    cr_assert_eq(piece, count, "pieces %zu..%zu were never planned", piece, count);
    free(e);
    return launches;
}

Test(batch_plan, random_batches_pass_every_piece_once_in_order)
{
    static p2pt_copy_desc d[3000];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < 3000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        d[i].dst = (void *)(uintptr_t)(0x100000000ull + (x & 0xffffffull));
        d[i].src = (const void *)(uintptr_t)(0x200000000ull + ((x >> 24) & 0xffffffull));
        d[i].bytes = i % 7 == 0 ? 0 : (x >> 40) % (1u << 20);
    }
    cr_assert_eq(plan_and_check(d, 3000, P2PT_BATCH_LARGE), 2); /* 2571 non-empty */
    plan_and_check(d, 3000, P2PT_BATCH_SMALL);
    plan_and_check(d, 3000, 1);
}

Test(batch_plan, zero_byte_pieces_vanish_and_an_empty_batch_has_no_launch)
{
    p2pt_copy_desc d[4] = {{(void *)0x1000, (void *)0x2000, 0},
                           {(void *)0x1000, (void *)0x2000, 0},
                           {(void *)0x3000, (void *)0x4000, 5},
                           {(void *)0x1000, (void *)0x2000, 0}};
    struct p2pt_batch_desc e[4];
    struct p2pt_batch_cursor cur = {0};
    uint64_t tiles = 0;
    cr_assert_eq(p2pt__batch_fill(d, NULL, 2, &cur, e, 4, &tiles), 0u);
    cr_assert_eq(tiles, 0u);
    cur.next = 0;
    cr_assert_eq(p2pt__batch_fill(d, NULL, 4, &cur, e, 4, &tiles), 1u);
    cr_assert_eq(e[0].bytes, 5u);
    cr_assert_eq(tiles, 1u);
    cr_assert_eq(p2pt__batch_fill(d, NULL, 4, &cur, e, 4, &tiles), 0u);
}

Test(batch_plan, pieces_of_4_gib_and_more_stay_whole)
{
    p2pt_copy_desc d[2] = {{(void *)0x10000000000ull, (void *)0x20000000000ull, 5ull << 32},
                           {(void *)0x30000000003ull, (void *)0x40000000000ull, 1ull << 32}};
    cr_assert_eq(plan_and_check(d, 2, P2PT_BATCH_LARGE), 1);
    struct p2pt_batch_desc e[2];
    struct p2pt_batch_cursor cur = {0};
    uint64_t tiles = 0;
    cr_assert_eq(p2pt__batch_fill(d, NULL, 2, &cur, e, 2, &tiles), 2u);
    cr_assert_eq(tiles, (5ull << 32) / P2PT_BATCH_TILE + (1ull << 32) / P2PT_BATCH_TILE);
}

/* What tile k of piece {dst, bytes} writes, as the kernel cuts it: the head
 * in tile 0, body vectors [k * TILE / 16, ...), the tail in the last tile. */
static void mark_tile(uint64_t dst, uint64_t bytes, uint64_t k, unsigned char *seen)
{
    uint64_t h = P2PT_BATCH_HEAD(dst, bytes), nv = P2PT_BATCH_BODY(dst, bytes) / 16;
    uint64_t last = nv == 0 ? 0 : (nv - 1) / (P2PT_BATCH_TILE / 16);
    if (k == 0)
        for (uint64_t i = 0; i < h; i++)
            seen[i]++;
    if (k == last)
        for (uint64_t i = h + 16 * nv; i < bytes; i++)
            seen[i]++;
    for (uint64_t v = k * (P2PT_BATCH_TILE / 16); v < (k + 1) * (P2PT_BATCH_TILE / 16) && v < nv;
         v++) {
        cr_assert_eq((dst + h + 16 * v) % 16, 0u, "body vectors are aligned at the destination");
        for (int b = 0; b < 16; b++)
            seen[h + 16 * v + b]++;
    }
}

Test(batch_plan, the_tiles_of_a_piece_cover_every_byte_once)
{
    static unsigned char seen[3 * P2PT_BATCH_TILE + 64];
    for (uint64_t dst = 0x1000; dst < 0x1010; dst++) {
        for (uint64_t bytes = 0; bytes <= 3 * P2PT_BATCH_TILE + 40; bytes += bytes < 300 ? 1 : 37) {
            memset(seen, 0, sizeof(seen));
            uint64_t tiles = P2PT_BATCH_TILES(dst, bytes);
            cr_assert_eq(tiles == 0, bytes == 0);
            for (uint64_t k = 0; k < tiles; k++)
                mark_tile(dst, bytes, k, seen);
            for (uint64_t i = 0; i < bytes; i++)
                cr_assert_eq(seen[i], 1, "dst %#llx, %llu bytes: byte %llu written %d times",
                             (unsigned long long)dst, (unsigned long long)bytes,
                             (unsigned long long)i, seen[i]);
            cr_assert_lt(P2PT_BATCH_HEAD(dst, bytes), 16u);
            cr_assert_lt(bytes - P2PT_BATCH_HEAD(dst, bytes) - P2PT_BATCH_BODY(dst, bytes), 16u);
        }
    }
}

Test(batch_plan, blocks_fill_launches_with_the_pieces_the_plan_means)
{
    /* Blocks kept as blocks (block_plan.h) fill launches as their written-
     * out pieces do: a layer of 0-byte blocks gives nothing, the others
     * their pieces in layer-major order. */
    enum { LAYERS = 3, ROWS = 5 };
    const uint64_t bb[LAYERS] = {4096, 0, 48};
    p2pt_block_layer ls[LAYERS];
    for (size_t l = 0; l < LAYERS; l++)
        ls[l] = (p2pt_block_layer){sizeof(ls[l]), (void *)(uintptr_t)(0x100000u + l * 0x10000u),
                                   (const void *)(uintptr_t)(0x900000u + l * 0x10000u), bb[l],
                                   8, 8};
    int64_t map[2 * ROWS] = {0, 7, 3, 1, 6, 2, 1, 0, 4, 5};
    struct p2pt_blocks k = {ls, sizeof(ls[0]), map, ROWS};
    p2pt_copy_desc d[LAYERS * ROWS];
    for (size_t i = 0; i < LAYERS * ROWS; i++)
        d[i] = p2pt__block_piece(&k, i);
    struct p2pt_batch_desc from_blocks[4], from_descs[4];
    struct p2pt_batch_cursor a = {0}, b = {0};
    for (;;) {
        uint64_t ta = 0, tb = 0;
        size_t na = p2pt__batch_fill(NULL, &k, LAYERS * ROWS, &a, from_blocks, 4, &ta);
        size_t nb = p2pt__batch_fill(d, NULL, LAYERS * ROWS, &b, from_descs, 4, &tb);
        cr_assert_eq(na, nb);
        cr_assert_eq(ta, tb);
        cr_assert_eq(a.next, b.next);
        if (na == 0)
            break;
        cr_assert_eq(memcmp(from_blocks, from_descs, na * sizeof(from_blocks[0])), 0);
    }
    cr_assert_eq((uintptr_t)d[1].dst, 0x100000u + 1 * 4096);
    cr_assert_eq((uintptr_t)d[1].src, 0x900000u + 3 * 4096);
    cr_assert_null(d[ROWS].dst, "a layer of 0-byte blocks has no addresses");
    cr_assert_eq(d[2 * ROWS + 4].bytes, 48);
    cr_assert_eq((uintptr_t)d[2 * ROWS + 4].dst, 0x120000u + 5 * 48);
}
