/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host-side experiments (batch_call.c, blocks_call.c,
 * copy_call.c) share: the driver entries they call themselves, a clock in
 * nanoseconds, and the order of a sort of timings.
 */
#ifndef P2PT_EXPERIMENTS_HOST_CALL_H
#define P2PT_EXPERIMENTS_HOST_CALL_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The driver P2P_CUDA_LIBRARY names (the tests' fake, or libcuda.so.1 by
 * default), initialised, and each of `names` looked up through
 * cuGetProcAddress_v2 into `out`. Returns the driver's dlopen handle (for
 * the fake's own exports), or NULL after printing, as `who`, what is
 * missing. */
static inline void *driver_entries(const char *who, const char *const *names, void **out, size_t n)
{
    const char *lib = getenv("P2P_CUDA_LIBRARY");
    void *d = dlopen(lib ? lib : "libcuda.so.1", RTLD_NOW);
    if (d == NULL) {
        fprintf(stderr, "%s: %s\n", who, dlerror());
        return NULL;
    }
    int (*gpa)(const char *, void **, int, unsigned long long, void *) =
        (int (*)(const char *, void **, int, unsigned long long, void *))dlsym(
            d, "cuGetProcAddress_v2");
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(d, "cuInit");
    for (size_t i = 0; i < n; i++)
        if (init == NULL || gpa == NULL || gpa(names[i], &out[i], 12000, 0, NULL) != 0 ||
            out[i] == NULL) {
            fprintf(stderr, "%s: no %s in the driver\n", who, names[i]);
            return NULL;
        }
    if (init(0) != 0) {
        fprintf(stderr, "%s: cuInit failed\n", who);
        return NULL;
    }
    return d;
}

static inline double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* qsort's order of doubles, ascending. */
static inline int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
