/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver entries a host-side experiment calls itself (batch_call.c,
 * blocks_call.c, copy_call.c): the driver P2P_CUDA_LIBRARY names (the
 * tests' fake, or libcuda.so.1 by default), initialised, and each of
 * `names` looked up through cuGetProcAddress_v2 into `out`. Returns the
 * driver's dlopen handle (for the fake's own exports), or NULL after
 * printing, as `who`, what is missing.
 */
#ifndef P2PT_EXPERIMENTS_DRIVER_ENTRIES_H
#define P2PT_EXPERIMENTS_DRIVER_ENTRIES_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

static void *driver_entries(const char *who, const char *const *names, void **out, size_t n)
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

#endif
