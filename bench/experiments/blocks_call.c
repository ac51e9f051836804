/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host time of p2pt_copy_blocks_async on the library alone: 32 layers x 256
 * blocks of 16 KiB (examples/kv_offload.py's offload, GPU to pinned host),
 * over any driver p2pt can load. Over the fake driver of the tests it is
 * the library's own work with the driver's calls at no cost; it prints the
 * driver calls one copy makes (the fake counts them), then the best and
 * mean of RUNS calls (default 2000). Build and run from the repository
 * root, after a build in build/:
 *
 *   cc -O2 -Iinclude bench/experiments/blocks_call.c -o /tmp/blocks_call \
 *      -Lbuild -lp2pt -ldl -Wl,-rpath,$PWD/build
 *   P2P_TRANSPORT=tma P2P_CUDA_LIBRARY=build/libp2pt_fake_cuda.so \
 *      P2P_NVRTC_LIBRARY=build/libp2pt_fake_nvrtc.so /tmp/blocks_call
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "p2pt.h"
#include "host_call.h"

typedef int CUresult;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* The driver entries a block copy may call, for the fake's counters. */
static const char *const CALLS[] = {
    "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxGetId", "cuEventQuery", "cuEventRecord",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyHtoDAsync", "cuPointerGetAttribute",
    "cuPointerGetAttributes", "cuStreamGetCtx", "cuStreamIsCapturing", "cuMemcpyBatchAsync"};
enum { N_CALLS = sizeof(CALLS) / sizeof(CALLS[0]) };

int main(void)
{
    void *f[4] = {0};
    const char *const names[4] = {"cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc",
                                  "cuMemHostAlloc"};
    void *d = driver_entries("blocks_call", names, f, 4);
    if (d == NULL)
        return 1;
    CUresult (*retain)(CUcontext *, int) = (CUresult(*)(CUcontext *, int))f[0];
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))f[1];
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))f[2];
    CUresult (*host_alloc)(void **, size_t, unsigned) =
        (CUresult(*)(void **, size_t, unsigned))f[3];

    enum { L = 32, G = 1024, H = 512, N = 256 };
    const size_t bb = 16384;
    CUcontext c;
    CUdeviceptr gpu;
    void *host;
    if (retain(&c, 0) || set_current(c) || mem_alloc(&gpu, (size_t)L * G * bb) ||
        host_alloc(&host, (size_t)L * H * bb, 0)) {
        fprintf(stderr, "blocks_call: the driver refused the set-up\n");
        return 1;
    }
    p2pt_handle *h;
    if (p2pt_init(NULL, &h) != P2PT_SUCCESS) {
        fprintf(stderr, "blocks_call: %s\n", p2pt_last_error(NULL));
        return 1;
    }
    p2pt_block_layer layers[L];
    for (int l = 0; l < L; l++)
        layers[l] = (p2pt_block_layer){sizeof(layers[l]), (char *)host + (size_t)l * H * bb,
                                       (void *)(uintptr_t)(gpu + (size_t)l * G * bb), bb, H, G};
    int64_t map[2 * N];
    for (int i = 0; i < N; i++) {
        map[2 * i] = (i * 7) % G;
        map[2 * i + 1] = (i * 13) % H;
    }
    if (p2pt_copy_blocks_async(h, layers, L, map, N, NULL) != P2PT_SUCCESS) {
        fprintf(stderr, "blocks_call: %s\n", p2pt_last_error(h));
        return 1;
    }
    unsigned long (*calls)(const char *) = (unsigned long (*)(const char *))dlsym(d, "p2pt_fake_calls");
    if (calls != NULL) {
        unsigned long before[N_CALLS];
        for (int i = 0; i < N_CALLS; i++)
            before[i] = calls(CALLS[i]);
        p2pt_copy_blocks_async(h, layers, L, map, N, NULL);
        printf("driver calls of one copy:");
        for (int i = 0; i < N_CALLS; i++)
            if (calls(CALLS[i]) != before[i])
                printf(" %s %lu", CALLS[i], calls(CALLS[i]) - before[i]);
        printf("\n");
    }
    const int runs = getenv("RUNS") ? atoi(getenv("RUNS")) : 2000;
    double best = 1e30, total = 0;
    for (int k = 0; k < runs; k++) {
        const double t0 = now_us();
        const p2pt_status st = p2pt_copy_blocks_async(h, layers, L, map, N, NULL);
        const double t = now_us() - t0;
        if (st != P2PT_SUCCESS) {
            fprintf(stderr, "blocks_call: %s\n", p2pt_last_error(h));
            return 1;
        }
        best = t < best ? t : best;
        total += t;
    }
    printf("p2pt_copy_blocks_async, %d layers x %d blocks of %zu bytes: best %.1f us, mean %.1f us "
           "(%d calls)\n", L, N, bb, best, total / runs, runs);
    p2pt_finalize(h);
    return 0;
}
