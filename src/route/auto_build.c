/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A crossover list from measurements (`p2pt-bench --mode calibrate`): each
 * measured size goes to its fastest engine, and a band boundary lies where
 * the winner changes. Kept apart from the text format (auto_table.c) because
 * it is the one part that judges numbers rather than reads them. CUDA-free.
 */
#include <string.h>

#include "auto_table.h"

/* What the parser reads back (auto_table.c): a built list must survive
 * being written to a file. */
#define MAX_SIZE (1ull << 62)
#define PAGE 4096u

/* The smallest m with m * m >= a * b (a < b), in exact integers: a double
 * square root is off by one or more once a * b passes 2^53, and the
 * library links no libm. */
static uint64_t ceil_geomean(uint64_t a, uint64_t b)
{
    __extension__ typedef unsigned __int128 u128;
    u128 target = (u128)a * b;
    uint64_t lo = a, hi = b;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((u128)mid * mid >= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/*
 * Where a band begins when the winner changes between measured sizes a and
 * b: the geometric mean, since calibration sweeps sizes by a factor and the
 * crossover is as likely anywhere between them on that scale; rounded up to
 * 4 KiB so that a calibrated file reads as round sizes. Kept above a, so the
 * size measured for the old winner stays with it (the mean of 0 and b is 0).
 */
static uint64_t boundary(uint64_t a, uint64_t b)
{
    uint64_t m = ceil_geomean(a, b);
    if (m <= a)
        m = a + 1;
    return (m + PAGE - 1) / PAGE * PAGE;
}

p2pt_status p2pt__auto_list_build(struct p2pt_auto_list *out, const uint64_t *sizes, int n,
                                  const double *time, int n_engines, double tie)
{
    struct p2pt_auto_list l;
    uint32_t prev = 0;

    memset(&l, 0, sizeof(l));
    if (n <= 0 || n_engines <= 0 || sizes == NULL || time == NULL)
        return p2pt__fail(P2PT_INVALID_ARGUMENT,
                          "auto list: nothing measured (got %d sizes and %d engines; "
                          "expected at least one of each)",
                          n, n_engines);
    for (int i = 0; i < n; i++) {
        const double *t = time + (size_t)i * (size_t)n_engines;
        unsigned long long size = sizes[i];
        if (i > 0 && sizes[i] <= sizes[i - 1])
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "auto list: sizes not increasing (got %llu after %llu, "
                              "size %d; expected each larger than the one before)",
                              size, (unsigned long long)sizes[i - 1], i);
        if (sizes[i] > MAX_SIZE)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "auto list: size too large (got %llu; expected at most 2^62)",
                              size);
        /* `t[e] > 0` is false for NaN too: a failed timing is not a fast one. */
        int best = -1;
        for (int e = 0; e < n_engines; e++)
            if (t[e] > 0 && (best < 0 || t[e] < t[best]))
                best = e;
        if (best < 0)
            return p2pt__fail(P2PT_INVALID_ARGUMENT,
                              "auto list: no engine measured at %llu bytes (got no time "
                              "above 0; expected at least one)",
                              size);
        uint32_t win = (uint32_t)best;
        if (i > 0 && t[prev] > 0 && t[prev] <= t[best] * (1.0 + tie))
            win = prev;
        if (i == 0) {
            l.band[0].engine = win;
            l.n = 1;
        } else if (win != prev) {
            uint64_t from = boundary(sizes[i - 1], sizes[i]);
            /* Two changes inside one 4 KiB step: the band between them is
             * empty, and the one before it may now continue. */
            if (from <= l.band[l.n - 1].from)
                l.n--;
            if (l.band[l.n - 1].engine != win) {
                if (l.n == P2PT_AUTO_MAX_BANDS)
                    return p2pt__fail(P2PT_INVALID_ARGUMENT,
                                      "auto list: the fastest engine changes too often (got "
                                      "more than %d bands by %llu bytes; expected at most "
                                      "%d: measure with less noise or raise the tie margin)",
                                      P2PT_AUTO_MAX_BANDS, size, P2PT_AUTO_MAX_BANDS);
                l.band[l.n].from = from;
                l.band[l.n].engine = win;
                l.n++;
            }
        }
        prev = win;
    }
    *out = l;
    return P2PT_SUCCESS;
}
