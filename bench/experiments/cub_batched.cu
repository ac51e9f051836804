/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUB's DeviceMemcpy::Batched on p2pt-bench's batch layouts
 * (bench/batch_layout.h, the same shapes, pieces and --shift), timed as
 * p2pt-bench times its batch rows: pools of at least 4 x L2, up to 16
 * layouts rotated, CUDA events around n back-to-back batches (n = 256M of
 * payload, 2..20), / n, median of 9 repeats after n warm-up batches. Then
 * one batch of layout 0 into a poisoned destination span: every piece
 * byte-compared with its source, every other byte of the span (guards
 * included) still poison.
 *
 *   cub_batched [--shift N] [--shapes LIST]
 *
 * One line per shape, read by p2pt-bench --cub:
 *   cub_batched shape=S shift=N pieces=P bytes=B gpu_us=T gbps=G check=ok|FAIL
 * Exit status 1 when any check failed.
 */
#include <cub/device/device_memcpy.cuh>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../batch_layout.h"
#include "check.cuh"


#define POISON 0xA5

__global__ void fill_random(unsigned char *p, size_t n, unsigned long long seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long x = (i / 8 + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
        p[i] = (unsigned char)(x >> (8 * (i % 8)));
    }
}

struct batch {
    int sets;
    size_t count, total, span;
    void **srcs, **dsts; /* sets x count, GPU memory */
    size_t *sizes;       /* sets x count, GPU memory */
    void *temp;
    size_t temp_bytes;
    std::vector<size_t> soff, doff; /* layout 0, for the check */
};

static cudaError_t run(batch &b, int set, cudaStream_t s)
{
    size_t k = (size_t)set * b.count;
    return cub::DeviceMemcpy::Batched(b.temp, b.temp_bytes, b.srcs + k, b.dsts + k,
                                      b.sizes + k, (::cuda::std::int64_t)b.count, s);
}

static int one_shape(const batch_shape &sh, int shift, size_t l2)
{
    batch b;
    b.count = sh.count;
    b.total = batch_total(&sh);
    b.span = batch_span(&sh);
    size_t pool = std::max((size_t)4 * l2, b.span);
    b.sets = (int)std::min((size_t)BATCH_MAX_SETS, pool / b.span);
    unsigned char *src = NULL, *dst = NULL;
    CK(cudaMalloc(&src, pool + 4096));
    CK(cudaMalloc(&dst, pool + 4096));
    fill_random<<<1024, 256>>>(src, pool + 4096, 0x632BE59BD9B4E019ull ^ sh.count);
    CK(cudaMemset(dst, 0, pool + 4096));
    CK(cudaDeviceSynchronize()); /* the timed stream does not wait for stream 0 */
    size_t n = (size_t)b.sets * b.count;
    std::vector<void *> hs(n), hd(n);
    std::vector<size_t> hz(n), soff(b.count), doff(b.count), order(b.count);
    for (int s = 0; s < b.sets; s++) {
        batch_place(&sh, (size_t)shift, s, soff.data(), doff.data(), order.data());
        if (s == 0)
            b.soff = soff, b.doff = doff;
        for (size_t i = 0; i < b.count; i++) {
            hs[(size_t)s * b.count + i] = src + soff[i];
            hd[(size_t)s * b.count + i] = dst + doff[i];
            hz[(size_t)s * b.count + i] = batch_piece_size(&sh, i);
        }
    }
    CK(cudaMalloc(&b.srcs, n * sizeof(void *)));
    CK(cudaMalloc(&b.dsts, n * sizeof(void *)));
    CK(cudaMalloc(&b.sizes, n * sizeof(size_t)));
    CK(cudaMemcpy(b.srcs, hs.data(), n * sizeof(void *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.dsts, hd.data(), n * sizeof(void *), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.sizes, hz.data(), n * sizeof(size_t), cudaMemcpyHostToDevice));
    b.temp = NULL;
    b.temp_bytes = 0;
    CK(run(b, 0, 0)); /* the temporary storage size */
    CK(cudaMalloc(&b.temp, b.temp_bytes ? b.temp_bytes : 1));

    cudaStream_t st;
    cudaEvent_t e0, e1;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    size_t want = 256 * (size_t)(1 << 20) / b.total;
    int per = want < 2 ? 2 : want > 20 ? 20 : (int)want, repeats = 9, op = 0;
    std::vector<float> g(repeats);
    for (int w = 0; w < per; w++)
        CK(run(b, op++ % b.sets, st));
    CK(cudaStreamSynchronize(st));
    for (int r = 0; r < repeats; r++) {
        CK(cudaEventRecord(e0, st));
        for (int k = 0; k < per; k++)
            CK(run(b, op++ % b.sets, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        g[r] = ms * 1000.0f / per;
    }
    std::sort(g.begin(), g.end());
    double us = g[repeats / 2];

    /* The check: layout 0 into a poisoned span. */
    std::vector<unsigned char> hdst(b.span), hsrc(b.total);
    CK(cudaMemset(dst, POISON, b.span));
    CK(cudaDeviceSynchronize());
    CK(run(b, 0, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(hdst.data(), dst, b.span, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hsrc.data(), src, b.total, cudaMemcpyDeviceToHost));
    const char *check = "ok";
    for (size_t i = 0; i < b.count; i++) {
        size_t bytes = batch_piece_size(&sh, i);
        if (memcmp(&hdst[b.doff[i]], &hsrc[b.soff[i]], bytes) != 0) {
            fprintf(stderr, "cub_batched %s: piece %zu of %zu differs from its source\n",
                    sh.name, i, b.count);
            check = "FAIL";
            break;
        }
        memset(&hdst[b.doff[i]], POISON, bytes);
    }
    for (size_t k = 0; k < b.span && check[0] == 'o'; k++)
        if (hdst[k] != POISON) {
            fprintf(stderr,
                    "cub_batched %s: byte %zu of the destination span, outside every piece, "
                    "was written\n",
                    sh.name, k);
            check = "FAIL";
        }
    printf("cub_batched shape=%s shift=%d pieces=%zu bytes=%zu gpu_us=%.2f gbps=%.2f check=%s\n",
           sh.name, shift, b.count, b.total, us, us > 0 ? (double)b.total / us / 1e3 : 0.0,
           check);
    fflush(stdout);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(b.srcs));
    CK(cudaFree(b.dsts));
    CK(cudaFree(b.sizes));
    CK(cudaFree(b.temp));
    CK(cudaFree(src));
    CK(cudaFree(dst));
    return check[0] == 'o' ? 0 : 1;
}

int main(int argc, char **argv)
{
    int shift = 0;
    const char *list = batch_default_shapes;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shift") == 0 && i + 1 < argc) {
            char *end = NULL;
            long v = strtol(argv[++i], &end, 10);
            if (*end != '\0' || v < 0 || v > 15) {
                fprintf(stderr, "cub_batched: --shift \"%s\": expected 0..15\n", argv[i]);
                return 2;
            }
            shift = (int)v;
        } else if (strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) {
            list = argv[++i];
        } else {
            fprintf(stderr, "usage: cub_batched [--shift N] [--shapes LIST]\n");
            return 2;
        }
    }
    batch_shape shapes[BATCH_MAX_SHAPES];
    size_t n_shapes = 0;
    char why[256];
    if (!batch_shape_list(list, shapes, BATCH_MAX_SHAPES, &n_shapes, why, sizeof(why))) {
        fprintf(stderr, "cub_batched: --shapes %s\n", why);
        return 2;
    }
    int dev = 0, l2 = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    printf("# cub_batched: CUB %d.%d.%d DeviceMemcpy::Batched on %s (%d SMs); GPU time per "
           "batch = CUDA events around n batches / n, median of 9\n",
           CUB_MAJOR_VERSION, CUB_MINOR_VERSION, CUB_SUBMINOR_VERSION, prop.name,
           prop.multiProcessorCount);
    int failed = 0;
    for (size_t i = 0; i < n_shapes; i++)
        failed |= one_shape(shapes[i], shift, (size_t)l2);
    return failed;
}
