/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the copy engine groups a host batch (src/plans/coalesce.h), on a CPU:
 * pieces adjacent on both sides become one copy; runs of equal pieces at
 * constant strides become one 2D copy (a KV block's layers), shorter runs
 * than four their pieces again; a run never
 * leaves the allocations of its first piece, and a piece whose allocations
 * are unknown stays alone; and, replayed row by row, the groups copy
 * exactly the bytes the pieces name, at odd sizes and offsets, with pieces
 * that break runs in between, for 100,000 pieces.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

#define DLO 0x10000000ull
#define DHI 0x20000000ull
#define SLO 0x40000000ull
#define SHI 0x50000000ull

static void add(struct p2pt_coalesce *c, uint64_t d, uint64_t s, uint64_t n)
{
    p2pt__coalesce_add(c, d, s, n, DLO, DHI, SLO, SHI);
}

Test(coalesce, adjacent_pieces_merge_into_one_copy)
{
    struct p2pt_copy_group g[8];
    struct p2pt_coalesce c;
    p2pt__coalesce_init(&c, g);
    add(&c, DLO, SLO, 100);
    add(&c, DLO + 100, SLO + 100, 7);
    add(&c, DLO + 107, SLO + 107, 4096);
    cr_assert_eq(p2pt__coalesce_end(&c), 1);
    cr_expect_eq(g[0].dst, DLO);
    cr_expect_eq(g[0].src, SLO);
    cr_expect_eq(g[0].width, 4203);
    cr_expect_eq(g[0].height, 1);
    cr_expect_not(p2pt__group_is_2d(&g[0]));
}

Test(coalesce, a_kv_block_of_layers_at_a_stride_is_one_2d_copy)
{
    /* 32 layers of a 16 KiB block: 1 MiB apart on the GPU, side by side on
     * the host. */
    struct p2pt_copy_group g[64];
    struct p2pt_coalesce c;
    p2pt__coalesce_init(&c, g);
    for (int block = 0; block < 2; block++)
        for (int l = 0; l < 32; l++)
            add(&c, DLO + (uint64_t)block * 32 * 16384 + (uint64_t)l * 16384,
                SLO + (uint64_t)block * 3 * 16384 + (uint64_t)l * (1 << 20), 16384);
    cr_assert_eq(p2pt__coalesce_end(&c), 2);
    for (int block = 0; block < 2; block++) {
        cr_expect(p2pt__group_is_2d(&g[block]));
        cr_expect_eq(g[block].width, 16384);
        cr_expect_eq(g[block].height, 32);
        cr_expect_eq(g[block].dpitch, 16384);
        cr_expect_eq(g[block].spitch, 1 << 20);
    }
}

Test(coalesce, a_run_never_leaves_its_first_pieces_allocations)
{
    struct p2pt_copy_group g[8];
    struct p2pt_coalesce c;
    p2pt__coalesce_init(&c, g);
    /* Adjacent addresses, but the second piece's source is another
     * allocation whose range starts where the first one's ends. */
    p2pt__coalesce_add(&c, DLO, SHI - 64, 64, DLO, DHI, SLO, SHI);
    p2pt__coalesce_add(&c, DLO + 64, SHI, 64, DLO, DHI, SHI, SHI + 4096);
    /* Unknown bounds: alone, and it ends the run before it. */
    p2pt__coalesce_add(&c, DLO + 128, SHI + 64, 64, 0, 0, 0, 0);
    p2pt__coalesce_add(&c, DLO + 192, SHI + 128, 64, 0, 0, 0, 0);
    cr_assert_eq(p2pt__coalesce_end(&c), 4);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(g[i].width * g[i].height, 64, "group %d", i);
}

Test(coalesce, strides_must_be_positive_hold_a_row_and_fit_a_pitch)
{
    struct p2pt_copy_group g[8];
    struct p2pt_coalesce c;
    /* Backwards: two groups. */
    p2pt__coalesce_init(&c, g);
    add(&c, DLO + 4096, SLO + 4096, 1024);
    add(&c, DLO, SLO, 1024);
    cr_expect_eq(p2pt__coalesce_end(&c), 2);
    /* Rows that would overlap (stride under the width): two groups. */
    p2pt__coalesce_init(&c, g);
    add(&c, DLO, SLO, 1024);
    add(&c, DLO + 512, SLO + 4096, 1024);
    cr_expect_eq(p2pt__coalesce_end(&c), 2);
    /* A pitch over 2^31 - 1: two groups. */
    p2pt__coalesce_init(&c, g);
    p2pt__coalesce_add(&c, 0, 0x100000000ull, 64, 0, 1ull << 40, 0x100000000ull,
                       0x300000000ull);
    p2pt__coalesce_add(&c, 0x80000000ull, 0x100000100ull, 64, 0, 1ull << 40, 0x100000000ull,
                       0x300000000ull);
    cr_expect_eq(p2pt__coalesce_end(&c), 2);
    /* A fifth row off the stride ends a run of four. */
    p2pt__coalesce_init(&c, g);
    for (int k = 0; k < 4; k++)
        add(&c, DLO + 512 * (uint64_t)k, SLO + 1024 * (uint64_t)k, 256);
    add(&c, DLO + 2048, SLO + 5000, 256);
    cr_expect_eq(p2pt__coalesce_end(&c), 2);
    cr_expect_eq(g[0].height, 4);
    /* A piece of another size ends it too. */
    p2pt__coalesce_init(&c, g);
    for (int k = 0; k < 4; k++)
        add(&c, DLO + 512 * (uint64_t)k, SLO + 1024 * (uint64_t)k, 256);
    add(&c, DLO + 2048, SLO + 4096, 255);
    cr_expect_eq(p2pt__coalesce_end(&c), 2);
    cr_expect_eq(g[0].height, 4);
}

Test(coalesce, runs_under_four_rows_go_back_to_their_pieces)
{
    /* Any two equal pieces whose addresses both rise look like a run of
     * two (64 KiB pieces at random host slots): they stay plain copies,
     * as do runs of three; a run of four is one 2D copy. */
    struct p2pt_copy_group g[16];
    struct p2pt_coalesce c;
    p2pt__coalesce_init(&c, g);
    add(&c, DLO, SLO, 65536);
    add(&c, DLO + 7 * 65536, SLO + 3 * 65536, 65536);
    add(&c, DLO + 2 * 65536, SLO + 9 * 65536, 65536);
    add(&c, DLO + 20 * 65536, SLO + 10 * 65536, 65536);
    add(&c, DLO + 21 * 65536, SLO + 20 * 65536, 65536);
    add(&c, DLO + 22 * 65536, SLO + 30 * 65536, 65536);
    size_t n = p2pt__coalesce_end(&c);
    cr_assert_eq(n, 6, "%zu groups", n);
    for (size_t i = 0; i < n; i++)
        cr_expect_not(p2pt__group_is_2d(&g[i]), "group %zu is %llu rows", i,
                      (unsigned long long)g[i].height);
    cr_expect_eq(g[3].dst, DLO + 20 * 65536);
    cr_expect_eq(g[4].src, SLO + 20 * 65536);
    cr_expect_eq(g[5].dst, DLO + 22 * 65536);
    p2pt__coalesce_init(&c, g);
    for (int k = 0; k < 4; k++)
        add(&c, DLO + 65536 * (uint64_t)k, SLO + 3 * 65536 * (uint64_t)k, 65536);
    cr_assert_eq(p2pt__coalesce_end(&c), 1);
    cr_expect(p2pt__group_is_2d(&g[0]));
    cr_expect_eq(g[0].height, 4);
}

/* Apply the groups to real memory, row by row, as the driver would. */
static void replay(const struct p2pt_copy_group *g, size_t n, uint8_t *dbase, uint64_t dvirt,
                   const uint8_t *sbase, uint64_t svirt)
{
    for (size_t i = 0; i < n; i++)
        for (uint64_t r = 0; r < g[i].height; r++)
            memcpy(dbase + (g[i].dst - dvirt) + r * g[i].dpitch,
                   sbase + (g[i].src - svirt) + r * g[i].spitch, g[i].width);
}

Test(coalesce, groups_copy_exactly_the_pieces_bytes_for_100000_mixed_pieces)
{
    /* Strided runs at odd sizes and offsets, interleaved with pieces that
     * break them, adjacent runs, and empty pieces the pass never adds. */
    const size_t count = 100000, bytes = 64u << 20;
    uint8_t *src = malloc(bytes), *dst = malloc(bytes), *want = malloc(bytes);
    p2pt_copy_desc *d = calloc(count, sizeof(*d));
    struct p2pt_copy_group *g = calloc(count, sizeof(*g));
    cr_assert(src && dst && want && d && g);
    srand(7);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (uint8_t)rand();
    memset(dst, 0xA5, bytes);
    memset(want, 0xA5, bytes);
    uint64_t dv = 0x7f0000000000ull, sv = 0x7e0000000000ull;
    size_t k = 0;
    uint64_t dat = 3, sat = 5;
    while (k < count) {
        int kind = rand() % 4;
        size_t run = 1 + (size_t)(rand() % 40);
        uint64_t n = 1 + (uint64_t)(rand() % 700);
        uint64_t dstride = n + (uint64_t)(rand() % 3) * 17, sstride = n + (uint64_t)(rand() % 5) * 33;
        if (kind == 0) /* adjacent */
            dstride = sstride = n;
        for (size_t r = 0; r < run && k < count; r++, k++) {
            uint64_t pn = kind == 3 && r % 3 == 1 ? 0 : n; /* empty pieces inside runs */
            if (dat + dstride + n >= bytes / 2 || sat + sstride + n >= bytes)
                dat = 3 + (uint64_t)(rand() % 64), sat = 5 + (uint64_t)(rand() % 64);
            d[k].dst = (void *)(uintptr_t)(dv + dat);
            d[k].src = (const void *)(uintptr_t)(sv + sat);
            d[k].bytes = pn;
            dat += dstride;
            sat += sstride;
        }
        dat += 16 + (uint64_t)(rand() % 4096); /* a gap breaks the run */
    }
    /* Destinations must not overlap: keep the first writer of each byte. */
    uint8_t *owner = calloc(bytes, 1);
    cr_assert_not_null(owner);
    struct p2pt_coalesce c;
    p2pt__coalesce_init(&c, g);
    size_t pieces = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t a = (uint64_t)(uintptr_t)d[i].dst - dv, n = d[i].bytes;
        bool clash = false;
        for (uint64_t b = 0; b < n && !clash; b++)
            clash = owner[a + b] != 0;
        if (clash || n == 0)
            continue;
        memset(owner + a, 1, n);
        memcpy(want + a, src + ((uint64_t)(uintptr_t)d[i].src - sv), n);
        p2pt__coalesce_add(&c, (uint64_t)(uintptr_t)d[i].dst, (uint64_t)(uintptr_t)d[i].src, n,
                           dv, dv + bytes, sv, sv + bytes);
        pieces++;
    }
    size_t n = p2pt__coalesce_end(&c);
    cr_assert_lt(n, pieces / 4, "%zu groups for %zu pieces", n, pieces);
    replay(g, n, dst, dv, src, sv);
    cr_assert(memcmp(dst, want, bytes) == 0, "the groups copied other bytes than the pieces");
    free(owner);
    free(src), free(dst), free(want), free(d), free(g);
}
