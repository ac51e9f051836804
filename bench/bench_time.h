/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host clock and median, shared by the benchmark programs in bench/
 * (p2pt-bench and p2pt-validate-cost): header-only so that
 * p2pt-validate-cost needs none of p2pt-bench's files.
 */
#ifndef P2PT_BENCH_TIME_H
#define P2PT_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts `v`. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
