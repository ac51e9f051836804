/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host path costs per operation, on the library alone: the driver
 * calls and the host time of one p2pt_copy_async (p2pt-bench's tma_loop
 * row: one call per piece) and of one host batch (p2pt_copy_batch_async,
 * its tma_host and auto_host rows), at the batch mode's shapes 1024x14K
 * and 4096x7K: local device memory from cuMemAlloc, in no window, sources
 * consecutive, destinations shuffled. Over the fake driver of the tests
 * (tests/fault/fake_cuda.c) each driver call costs what the fake does (a
 * counter under a lock), far less than a real driver's, so the counts are
 * what to carry to a GPU. Each line: the driver calls of one operation
 * (those the fake counts), then the best and the median of RUNS samples
 * (default 101) of the host time per operation; a loop sample times one
 * call per piece of the shape. TRANSPORT (tma, auto or ce) keeps one;
 * WINDOWS=1 registers the shapes' buffers as windows of the handle first,
 * as p2pt-bench's batch mode does with its pools. SYNC=1 synchronizes the
 * stream after each sample, untimed: on a GPU the launch queue then never
 * fills, so a sample is the host's time alone, not the GPU's pace.
 * Build and run from the repository root, after a build in build/:
 *
 *   cc -O2 -Iinclude bench/experiments/copy_call.c -o /tmp/copy_call \
 *      -Lbuild -lp2pt -ldl -Wl,-rpath,$PWD/build
 *   P2P_CUDA_LIBRARY=build/libp2pt_fake_cuda.so \
 *      P2P_NVRTC_LIBRARY=build/libp2pt_fake_nvrtc.so /tmp/copy_call
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "p2pt.h"
#include "host_call.h"

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

/* Every entry a copy could call (src/cuda/cuda_loader.c's table, less
 * set-up and sharing), for the fake's counters. */
static const char *const CALLS[] = {
    "cuCtxGetCurrent",     "cuCtxSetCurrent",     "cuCtxPushCurrent",      "cuCtxPopCurrent",
    "cuCtxGetDevice",      "cuCtxGetId",          "cuStreamGetCtx",        "cuStreamIsCapturing",
    "cuDeviceGetAttribute", "cuDeviceCanAccessPeer", "cuDeviceGetP2PAttribute",
    "cuPointerGetAttribute", "cuPointerGetAttributes", "cuMemGetAddressRange",
    "cuMemcpyAsync",       "cuMemcpy2DAsync",     "cuMemcpyBatchAsync",    "cuMemcpy3DBatchAsync",
    "cuMemcpyHtoDAsync",   "cuLaunchKernel",      "cuLaunchKernelEx",      "cuEventRecord",
    "cuEventQuery",        "cuEventSynchronize",  "cuFuncSetAttribute",    "cuModuleGetFunction"};
enum { N_CALLS = sizeof(CALLS) / sizeof(CALLS[0]) };

static unsigned long (*fake_calls)(const char *);
static CUresult (*stream_sync)(CUstream);
static int sync_each;

struct shape {
    const char *name;
    size_t n, bytes;
    p2pt_copy_desc *d;
    CUdeviceptr src, dst;
};

static p2pt_status op(p2pt_handle *h, const struct shape *s, int loop, CUstream stream)
{
    if (!loop)
        return p2pt_copy_batch_async(h, s->d, s->n, stream);
    for (size_t i = 0; i < s->n; i++) {
        const p2pt_status st = p2pt_copy_async(h, s->d[i].dst, s->d[i].src, s->d[i].bytes, stream);
        if (st != P2PT_SUCCESS)
            return st;
    }
    return P2PT_SUCCESS;
}

static int run(p2pt_handle *h, const struct shape *s, int loop, CUstream stream, int runs,
               const char *transport)
{
    char line[512] = "";
    size_t at = 0;
    if (fake_calls != NULL) {
        unsigned long before[N_CALLS];
        for (int i = 0; i < N_CALLS; i++)
            before[i] = fake_calls(CALLS[i]);
        if (op(h, s, loop, stream) != P2PT_SUCCESS)
            goto fail;
        for (int i = 0; i < N_CALLS && at < sizeof(line); i++) {
            const unsigned long n = fake_calls(CALLS[i]) - before[i];
            if (n != 0)
                at += (size_t)snprintf(line + at, sizeof(line) - at, " %s %.6g", CALLS[i],
                                       loop ? (double)n / s->n : (double)n);
        }
    }
    double *t = malloc((size_t)runs * sizeof(*t));
    if (t == NULL) {
        fprintf(stderr, "copy_call: out of memory for %d timings\n", runs);
        return 1;
    }
    for (int k = -3; k < runs; k++) {
        const double t0 = now_ns();
        const p2pt_status st = op(h, s, loop, stream);
        const double dt = now_ns() - t0;
        if (sync_each && stream_sync(stream) != 0) {
            fprintf(stderr, "copy_call: cuStreamSynchronize failed\n");
            free(t);
            return 1;
        }
        if (st != P2PT_SUCCESS) {
            free(t);
            goto fail;
        }
        if (k >= 0)
            t[k] = loop ? dt / s->n : dt;
    }
    qsort(t, (size_t)runs, sizeof(*t), cmp);
    printf("%-4s %-5s %-8s best %9.1f ns, median %9.1f ns per %s (%.2f ns/piece)\n", transport,
           loop ? "loop" : "batch", s->name, t[0], t[runs / 2], loop ? "call" : "batch",
           loop ? t[runs / 2] : t[runs / 2] / s->n);
    printf("     driver calls per %s:%s\n", loop ? "call" : "batch", line);
    free(t);
    return 0;
fail:
    fprintf(stderr, "copy_call: %s %s: %s\n", transport, s->name, p2pt_last_error(h));
    return 1;
}

int main(void)
{
    void *f[5] = {0};
    const char *const names[5] = {"cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc",
                                  "cuStreamCreate", "cuStreamSynchronize"};
    void *d = driver_entries("copy_call", names, f, 5);
    if (d == NULL)
        return 1;
    CUresult (*retain)(CUcontext *, int) = (CUresult(*)(CUcontext *, int))f[0];
    CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))f[1];
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))f[2];
    CUresult (*stream_create)(CUstream *, unsigned) = (CUresult(*)(CUstream *, unsigned))f[3];
    stream_sync = (CUresult(*)(CUstream))f[4];
    sync_each = getenv("SYNC") != NULL && atoi(getenv("SYNC")) != 0;
    fake_calls = (unsigned long (*)(const char *))dlsym(d, "p2pt_fake_calls");

    struct shape shapes[] = {{"1024x14K", 1024, 14 << 10, NULL, 0, 0},
                             {"4096x7K", 4096, 7 << 10, NULL, 0, 0}};
    CUcontext c;
    CUstream stream;
    if (retain(&c, 0) || set_current(c) || stream_create(&stream, 1)) {
        fprintf(stderr, "copy_call: the driver refused the set-up\n");
        return 1;
    }
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        struct shape *s = &shapes[k];
        if (mem_alloc(&s->src, s->n * s->bytes) || mem_alloc(&s->dst, s->n * s->bytes)) {
            fprintf(stderr, "copy_call: the driver refused the set-up\n");
            return 1;
        }
        s->d = malloc(s->n * sizeof(*s->d));
        /* Piece i lands in slot (i * 7919) % n: shuffled, no two adjacent. */
        for (size_t i = 0; i < s->n; i++)
            s->d[i] =
                (p2pt_copy_desc){(void *)(uintptr_t)(s->dst + (i * 7919) % s->n * s->bytes),
                                 (const void *)(uintptr_t)(s->src + i * s->bytes), s->bytes};
    }
    const char *transports[] = {"tma", "auto", "ce"};
    const int runs = getenv("RUNS") ? atoi(getenv("RUNS")) : 101;
    const char *only = getenv("TRANSPORT");
    const int windows = getenv("WINDOWS") != NULL && atoi(getenv("WINDOWS")) != 0;
    for (size_t k = 0; k < sizeof(transports) / sizeof(transports[0]); k++) {
        if (only != NULL ? strcmp(only, transports[k]) != 0 : strcmp(transports[k], "ce") == 0)
            continue;
        p2pt_init_args a = {sizeof(a), NULL, transports[k], NULL};
        p2pt_handle *h;
        if (p2pt_init(&a, &h) != P2PT_SUCCESS || p2pt_prepare(h, 0) != P2PT_SUCCESS) {
            fprintf(stderr, "copy_call: %s\n", p2pt_last_error(NULL));
            return 1;
        }
        for (size_t i = 0; windows && i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            const size_t span = shapes[i].n * shapes[i].bytes;
            if (p2pt_window_register(h, 0, (void *)(uintptr_t)shapes[i].src, span) ||
                p2pt_window_register(h, 0, (void *)(uintptr_t)shapes[i].dst, span)) {
                fprintf(stderr, "copy_call: %s\n", p2pt_last_error(h));
                return 1;
            }
        }
        printf("%s%s\n", transports[k], windows ? ", buffers in windows" : ", no windows");
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
            for (int loop = 1; loop >= 0; loop--)
                if (run(h, &shapes[i], loop, stream, runs, transports[k]) != 0)
                    return 1;
        p2pt_finalize(h);
    }
    return 0;
}
