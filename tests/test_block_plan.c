/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A block mapping into a host batch's pieces (src/plans/block_plan.c), on a
 * CPU: piece l * pairs + r is row r of layer l, addresses from each layer's
 * bases and its block bytes (odd sizes, a layer of zero-byte blocks, ids at
 * either end of a layer); and every refusal names what it refuses: ids
 * outside a layer or negative, a destination block listed twice, a block
 * both read and written where layers share bytes, two rows writing the same
 * bytes through interleaved layers, layer records of the wrong size, NULL
 * arrays, layers past the end of the address space. Nothing is built when
 * something is refused.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"

#define FN "p2pt_copy_blocks_async"

static p2pt_block_layer layer(uintptr_t dst, uintptr_t src, uint64_t bb, uint64_t dst_blocks,
                              uint64_t src_blocks)
{
    p2pt_block_layer l = {sizeof(l), (void *)dst, (const void *)src, bb, dst_blocks, src_blocks};
    return l;
}

/* The plan must refuse with status 4 and a message holding each of `words`. */
static void expect_refused(const p2pt_block_layer *layers, size_t n_layers,
                           const int64_t *mapping, size_t pairs, const char *const *words)
{
    struct p2pt_block_pieces p = {.descs = (p2pt_copy_desc *)1, .count = 7, .rows = 7,
                                  .pieces = 7, .bytes = 7, .sums_known = true};
    p2pt_status st = p2pt__block_plan(FN, layers, n_layers, mapping, pairs, &p);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "status %d (%s)", st, p2pt_last_error(NULL));
    cr_assert_null(p.descs);
    cr_assert_eq(p.count, 0);
    const char *msg = p2pt_last_error(NULL);
    cr_assert(strncmp(msg, FN ": ", strlen(FN) + 2) == 0, "%s", msg);
    for (; *words; words++)
        cr_assert(strstr(msg, *words) != NULL, "'%s' not in: %s", *words, msg);
}

Test(block_plan, builds_layer_major_pieces_from_bases_and_block_bytes)
{
    enum { LAYERS = 5, PAIRS = 97 };
    const uint64_t bb[LAYERS] = {4100, 16384, 0, 3, 65536};
    p2pt_block_layer ls[LAYERS];
    for (int l = 0; l < LAYERS; l++)
        ls[l] = layer(0x10000000000ull * (l + 1), 0x700000000000ull + 0x10000000000ull * l,
                      bb[l], 300 + l, 200 + l);
    int64_t map[2 * PAIRS];
    srand(7);
    for (int r = 0; r < PAIRS; r++) {
        map[2 * r] = r == 0 ? 0 : r == 1 ? 199 : rand() % 200;
        map[2 * r + 1] = r == 0 ? 299 : 3 * r; /* distinct, both ends */
    }
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, ls, LAYERS, map, PAIRS, &p), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_assert_null(p.descs, "layers apart are kept as blocks, not written out");
    cr_assert_eq(p.count, (size_t)LAYERS * PAIRS);
    cr_assert_eq(p.rows, PAIRS);
    cr_assert_eq(p.pieces, (size_t)(LAYERS - 1) * PAIRS, "the layer of 0-byte blocks has none");
    cr_assert(p.sums_known);
    cr_assert_eq(p.bytes, PAIRS * (4100ull + 16384 + 0 + 3 + 65536));
    for (int l = 0; l < LAYERS; l++)
        for (int r = 0; r < PAIRS; r++) {
            const p2pt_copy_desc piece = p2pt__block_pieces_at(&p, l * PAIRS + r), *e = &piece;
            cr_assert_eq(e->bytes, bb[l]);
            if (bb[l] == 0)
                continue;
            cr_assert_eq((uintptr_t)e->dst, (uintptr_t)ls[l].dst + map[2 * r + 1] * bb[l]);
            cr_assert_eq((uintptr_t)e->src, (uintptr_t)ls[l].src + map[2 * r] * bb[l]);
        }
    p2pt__block_pieces_free(&p);
}

Test(block_plan, nothing_to_build_is_success_with_no_pieces)
{
    p2pt_block_layer l = layer(0x1000, 0x900000, 16, 4, 4);
    int64_t map[2] = {0, 0};
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, &l, 1, map, 0, &p), P2PT_SUCCESS);
    cr_assert(p.descs == NULL && p.count == 0 && p.pieces == 0 && p.bytes == 0);
    cr_assert_eq(p2pt__block_plan(FN, NULL, 0, map, 1, &p), P2PT_SUCCESS);
    cr_assert(p.descs == NULL && p.count == 0);
}

Test(block_plan, ids_outside_a_layer_are_refused_naming_row_and_layer)
{
    p2pt_block_layer ls[3] = {layer(0x100000, 0x900000, 64, 10, 8),
                              layer(0x200000, 0xa00000, 64, 10, 5),
                              layer(0x300000, 0xb00000, 64, 9, 8)};
    int64_t src_high[6] = {0, 0, 4, 1, 5, 2};
    expect_refused(ls, 3, src_high, 3, (const char *[]){"row 2", "src block 5", "layer 1",
                                                        "5 src blocks", NULL});
    int64_t dst_high[4] = {0, 9, 1, 2};
    expect_refused(ls, 3, dst_high, 2, (const char *[]){"row 0", "dst block 9", "layer 2",
                                                        NULL});
    int64_t negative[4] = {0, 1, -1, 2};
    expect_refused(ls, 3, negative, 2, (const char *[]){"row 1", "src block -1",
                                                        "ids start at 0", NULL});
}

Test(block_plan, a_destination_block_listed_twice_is_refused_naming_both_rows)
{
    p2pt_block_layer ls[2] = {layer(0x100000, 0x900000, 64, 10, 10),
                              layer(0x200000, 0xa00000, 64, 10, 10)};
    int64_t map[8] = {0, 1, 1, 7, 2, 3, 3, 7};
    expect_refused(ls, 2, map, 4, (const char *[]){"rows 1 and 3", "dst block 7",
                                                   "may appear once", NULL});
}

Test(block_plan, a_repeat_among_the_ids_of_a_huge_pool_is_found_too)
{
    /* Pools too large for a bitmap of their ids: the ids are sorted. */
    const uint64_t huge = 1ull << 36;
    p2pt_block_layer ls[2] = {layer(0x100000, 0x300000000000ull, 16, huge, 4),
                              layer(0x100000000000ull, 0x400000000000ull, 16, huge, 4)};
    int64_t map[8] = {0, (int64_t)huge - 1, 1, 5, 2, 1ll << 35, 3, (int64_t)huge - 1};
    expect_refused(ls, 2, map, 4, (const char *[]){"rows 0 and 3", "may appear once", NULL});
    map[7] = 6;
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, ls, 2, map, 4, &p), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_assert_eq(p.count, 8);
    p2pt__block_pieces_free(&p);
}

Test(block_plan, one_tensor_as_both_sides_refuses_a_block_read_and_written)
{
    /* A copy inside one layer: blocks move to free slots, fine; a block
     * that is both a destination and another row's source is a race. */
    p2pt_block_layer same = layer(0x100000, 0x100000, 4096, 16, 16);
    int64_t ok[4] = {0, 8, 1, 9};
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, &same, 1, ok, 2, &p), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_assert_eq(p.count, 2);
    cr_assert_not_null(p.descs, "layers that share bytes are written out, checked by address");
    cr_assert_eq((uintptr_t)p.descs[1].dst, 0x100000u + 9 * 4096);
    cr_assert_eq((uintptr_t)p.descs[1].src, 0x100000u + 1 * 4096);
    p2pt__block_pieces_free(&p);
    int64_t race[4] = {0, 8, 8, 9};
    expect_refused(&same, 1, race, 2, (const char *[]){"layer 0, row 0 writes", "layer 0, row 1 reads",
                                                      "both a source and a destination", NULL});
}

Test(block_plan, interleaved_layers_that_write_the_same_bytes_are_refused)
{
    /* Layers of a [blocks, 2 layers] tensor: layer l's block i at
     * base + (2i + l) * 64; with the block as its stride (128 bytes) each
     * layer's block covers its neighbour's. */
    p2pt_block_layer ls[2] = {layer(0x100000, 0x900000, 128, 8, 8),
                              layer(0x100040, 0x900040, 128, 8, 8)};
    int64_t map[2] = {0, 3};
    expect_refused(ls, 2, map, 1, (const char *[]){"pieces write the same bytes", NULL});
}

Test(block_plan, bad_records_and_arrays_are_refused)
{
    p2pt_block_layer ls[2] = {layer(0x100000, 0x900000, 64, 4, 4),
                              layer(0x200000, 0xa00000, 64, 4, 4)};
    int64_t map[2] = {0, 1};
    p2pt_block_layer small = ls[0];
    small.size = 8;
    expect_refused(&small, 1, map, 1, (const char *[]){"layers[0].size is 8",
                                                       "sizeof(p2pt_block_layer)", NULL});
    ls[1].size = sizeof(p2pt_block_layer) + 8;
    expect_refused(ls, 2, map, 1, (const char *[]){"layer 1: size", NULL});
    ls[1].size = sizeof(p2pt_block_layer);
    expect_refused(NULL, 2, map, 1, (const char *[]){"n_layers 2", NULL});
    expect_refused(ls, 2, NULL, 1, (const char *[]){"1 pairs", NULL});
    p2pt_block_layer nul = layer(0, 0x900000, 64, 4, 4);
    expect_refused(&nul, 1, map, 1, (const char *[]){"layer 0: dst is NULL", NULL});
    p2pt_block_layer huge = layer(UINTPTR_MAX - 4096, 0x900000, 4096, 2, 2);
    expect_refused(&huge, 1, map, 1, (const char *[]){"past the end of the address space", NULL});
    /* A size no record has: misaligned (the records would be read at odd
     * addresses), or past any p2pt's (read past the array). */
    char want[64];
    const size_t bad[] = {sizeof(p2pt_block_layer) + 4, P2PT_BLOCK_LAYER_MAX_SIZE + 8,
                          SIZE_MAX - 7};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        p2pt_block_layer odd = ls[0];
        odd.size = bad[k];
        snprintf(want, sizeof(want), "layers[0].size is %zu;", bad[k]);
        expect_refused(&odd, 1, map, 1, (const char *[]){want, NULL});
    }
}

/* A later p2pt's longer record, at its own stride, is read as this one. */
Test(block_plan, longer_records_are_read_at_their_stride)
{
    enum { STRIDE = sizeof(p2pt_block_layer) + 16 };
    _Alignas(p2pt_block_layer) unsigned char recs[2 * STRIDE];
    memset(recs, 0xee, sizeof(recs));
    p2pt_block_layer ls[2] = {layer(0x100000, 0x900000, 64, 4, 4),
                              layer(0x200000, 0xa00000, 64, 4, 4)};
    for (int l = 0; l < 2; l++) {
        ls[l].size = STRIDE;
        memcpy(recs + l * STRIDE, &ls[l], sizeof(ls[l]));
    }
    int64_t map[2] = {0, 1};
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, (const p2pt_block_layer *)recs, 2, map, 1, &p),
                 P2PT_SUCCESS, "%s", p2pt_last_error(NULL));
    cr_expect_eq(p.count, 2);
    p2pt__block_pieces_free(&p);
}

Test(block_plan, many_layers_are_checked_by_address)
{
    /* More layers than are compared pairwise: disjoint ones still pass,
     * and a repeated destination is still refused. */
    enum { LAYERS = 300, PAIRS = 64 };
    p2pt_block_layer *ls = calloc(LAYERS, sizeof(*ls));
    cr_assert_not_null(ls);
    for (size_t l = 0; l < LAYERS; l++)
        ls[l] = layer(0x100000000ull + l * 0x100000, 0x900000000ull + l * 0x100000, 1024, 128,
                      128);
    int64_t map[2 * PAIRS];
    for (int r = 0; r < PAIRS; r++)
        map[2 * r] = r, map[2 * r + 1] = 127 - r;
    struct p2pt_block_pieces p;
    cr_assert_eq(p2pt__block_plan(FN, ls, LAYERS, map, PAIRS, &p), P2PT_SUCCESS, "%s",
                 p2pt_last_error(NULL));
    cr_assert_eq(p.count, (size_t)LAYERS * PAIRS);
    cr_assert_not_null(p.descs, "too many layers to compare: written out, checked by address");
    p2pt__block_pieces_free(&p);
    map[2 * 5 + 1] = map[2 * 9 + 1];
    expect_refused(ls, LAYERS, map, PAIRS, (const char *[]){"row 5", "row 9",
                                                            "write the same bytes", NULL});
    free(ls);
}
