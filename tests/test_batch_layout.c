/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch benchmark's shapes and layouts (bench/batch_layout.h), which
 * p2pt-bench, the CUB comparison and the batch trace all measure: shape
 * lists parse or name the bad item (the one-in-EVERY form too), and every
 * layout keeps its destinations apart, inside the span, clear of its
 * guards and at the asked offset from co-alignment. CPU only.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "../bench/batch_layout.h"

Test(batch_layout, shape_lists_parse_or_name_the_bad_item)
{
    struct batch_shape s[3];
    size_t n = 99;
    char why[256];
    cr_assert(batch_shape_list("16384x2K,64x1M", s, 3, &n, why, sizeof(why)));
    cr_assert_eq(n, 2);
    cr_assert(s[0].count == 16384 && s[0].size == 2048 && s[1].count == 64 &&
              s[1].size == (1u << 20));
    cr_assert(batch_shape_list("mixed", s, 3, &n, why, sizeof(why)));
    cr_assert(n == 1 && s[0].size == 0 && s[0].count == 1024);
    cr_assert(batch_shape_list("8192x4K/64=16K,7x13/3=5", s, 3, &n, why, sizeof(why)), "%s", why);
    cr_assert(n == 2 && s[0].count == 8192 && s[0].size == 4096 && s[0].every == 64 &&
              s[0].big == 16384 && s[1].every == 3 && s[1].big == 5);
    cr_assert(batch_piece_size(&s[0], 0) == 16384 && batch_piece_size(&s[0], 1) == 4096 &&
              batch_piece_size(&s[0], 128) == 16384 && batch_piece_size(&s[0], 8191) == 4096);
    static const char *const bad_every[] = {"8x4K/0=1K", "8x4K/64", "8x4K/64=", "8x4K/=1K",
                                            "8x4K/2=0", "8x4K/2=1Kx", "1024x1K/2=5G"};
    for (size_t k = 0; k < sizeof(bad_every) / sizeof(bad_every[0]); k++) {
        cr_assert_not(batch_shape_list(bad_every[k], s, 3, &n, why, sizeof(why)), "%s",
                      bad_every[k]);
        cr_assert(strstr(why, bad_every[k]) && strstr(why, "COUNTxSIZE/EVERY=SIZE"), "%s", why);
    }

    cr_assert_not(batch_shape_list("1x1,2x2,3x3,4x4", s, 3, &n, why, sizeof(why)));
    cr_assert(strstr(why, "at most 3") != NULL, "%s", why);
    cr_assert_not(batch_shape_list("1024x14K,bogus", s, 3, &n, why, sizeof(why)));
    cr_assert(strstr(why, "\"bogus\"") != NULL && strstr(why, "COUNTxSIZE") != NULL, "%s", why);
    cr_assert_not(batch_shape_list("1024x14K,", s, 3, &n, why, sizeof(why)), "an empty item");
    cr_assert_not(batch_shape_list("0x4K", s, 3, &n, why, sizeof(why)), "a zero count");
    cr_assert_not(batch_shape_list("2x3G", s, 3, &n, why, sizeof(why)), "over 4G in all");
    char longer[200];
    memset(longer, '1', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    cr_assert_not(batch_shape_list(longer, s, 3, &n, why, sizeof(why)), "a 199-digit item");
}

static int by_offset(const void *a, const void *b)
{
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

Test(batch_layout, every_layout_keeps_its_pieces_apart_inside_its_span_at_the_shift)
{
    static const char *const shapes[] = {"16384x2K", "1024x14K", "64x1M", "mixed", "7x13",
                                         "4096x4K/64=64K", "9x100/2=7"};
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        struct batch_shape sh;
        char why[256];
        cr_assert(batch_shape_parse(shapes[k], &sh, why, sizeof(why)), "%s", why);
        const size_t n = sh.count, span = batch_span(&sh);
        size_t *soff = malloc(n * sizeof(size_t)), *doff = malloc(n * sizeof(size_t));
        size_t *order = malloc(n * sizeof(size_t)), *pairs = malloc(2 * n * sizeof(size_t));
        cr_assert(soff && doff && order && pairs);
        for (size_t shift = 0; shift < 16; shift += 7)
            for (int set = 0; set < 3; set++) {
                batch_place(&sh, shift, set, soff, doff, order);
                const size_t base = (size_t)set * span;
                for (size_t i = 0; i < n; i++) {
                    const size_t bytes = batch_piece_size(&sh, i);
                    cr_assert((doff[i] - soff[i]) % 16 == shift, "%s piece %zu: shift %zu",
                              shapes[k], i, (doff[i] - soff[i]) % 16);
                    cr_assert(doff[i] >= base + BATCH_GUARD &&
                                  doff[i] + bytes <= base + span - BATCH_GUARD,
                              "%s set %d piece %zu leaves its span's guarded middle", shapes[k],
                              set, i);
                    cr_assert(soff[i] >= base && soff[i] + bytes <= base + span);
                    pairs[2 * i] = doff[i];
                    pairs[2 * i + 1] = bytes;
                }
                qsort(pairs, n, 2 * sizeof(size_t), by_offset);
                for (size_t i = 1; i < n; i++)
                    cr_assert(pairs[2 * i] >= pairs[2 * i - 2] + pairs[2 * i - 1],
                              "%s set %d: two destinations overlap", shapes[k], set);
            }
        free(soff);
        free(doff);
        free(order);
        free(pairs);
    }
}
