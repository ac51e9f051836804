/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the experiments in this folder share: p2pt's copy kernels and their
 * PTX helpers (kernels/tma_copy.cu and stream_copy.cu are included, so the
 * variants issue exactly p2pt's instructions), error-check macros, random
 * source data and a median.
 */
#ifndef P2PT_EXPERIMENTS_COMMON_CUH
#define P2PT_EXPERIMENTS_COMMON_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../kernels/tma_copy.cu"    /* u64, u32, smem_u32, mbar_*, bulk_* */
#include "../../kernels/stream_copy.cu" /* p2pt_stream_copy */
#include "check.cuh"

/* Pseudo-random source data, a different stream per seed. */
__global__ void fill_random(uint4 *p, u64 n16, u64 seed)
{
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += (u64)gridDim.x * blockDim.x) {
        u64 x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
        p[i] = make_uint4((u32)x, (u32)(x >> 32), (u32)(x * 3), (u32)(x >> 7));
    }
}

/* Only the experiments prefetch. */
static __device__ __forceinline__ void bulk_prefetch(const char *g, u32 n)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(g), "r"(n) : "memory");
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static float median_f(float *v, int n)
{
    qsort(v, n, sizeof(v[0]), cmp_float);
    return v[n / 2];
}

#endif
