/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The libraries p2pt-bench loads only when a mode asks for them (cuBLAS in
 * gemm.c, NCCL in nccl.c): the first of a list of names that dlopen takes,
 * and every other one tried, for the line that says where none was.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

void *bench_dlopen_first(const char *const *names, size_t n, char *path, size_t path_len,
                         char *tried, size_t tried_len)
{
    for (size_t i = 0; i < n; i++) {
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib != NULL) {
            snprintf(path, path_len, "%s", names[i]);
            return lib;
        }
        snprintf(tried + strlen(tried), tried_len - strlen(tried), "%s%s",
                 tried[0] ? ", " : "", names[i]);
    }
    return NULL;
}
