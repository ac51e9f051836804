/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tma_variants: an experiment, not part of the library. It times variants of
 * the TMA copy kernel's issuing pattern against cuMemcpyAsync in the same
 * process, to find where the large-copy gap to the copy engine comes from
 * (bench/RESULTS.md, "Targets and where they stand"), and the host cost of the launch itself.
 *
 * Build and run on a Hopper machine (bench/experiments/run.sh does both):
 *   nvcc -O3 -arch=sm_90 -o tma_variants tma_variants.cu -lcuda
 *   ./tma_variants [bytes]            (default 1 GiB)
 *
 * Variants of the bulk kernel (one launch moves the whole copy):
 *   order   il   = CTA b takes chunks b, b+G, b+2G ... (what p2pt ships)
 *           slab = CTA b takes one contiguous run of chunks
 *   warps   W warps per CTA, each lane 0 driving its own ring of `stages`
 *   pf      also prefetch into L2 (cp.async.bulk.prefetch.L2) the chunk
 *           `pf` ring-lengths ahead of the next load
 * and a plain vector-copy kernel (16-byte loads/stores, grid-stride) as the
 * reference for what SM-issued copies reach on this chip.
 *
 * Every variant is checked once byte-for-byte (destination poisoned first)
 * before it is timed: median of 9 single launches timed by CUDA events,
 * after 2 warm-ups. The copy engine is timed before and after all variants.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common.cuh"

#define MAXW 8
#define MAXS 16

/*
 * The bulk kernel, generalised. A "lane" is one issuing thread (lane 0 of a
 * warp) with its own ring; there are G*W lanes. Lane v moves lane-chunks
 * k = 0..n-1, whose global chunk index depends on the order.
 */
__global__ void __launch_bounds__(32 * MAXW)
bulk_copy(char *dst, const char *src, u64 body, u64 chunks, u32 chunk, u32 stages, u32 slab,
          u32 pf)
{
    extern __shared__ __align__(128) unsigned char xring[];
    __shared__ __align__(8) u64 bars[MAXW * MAXS];
    const u32 w = threadIdx.x / 32;
    if (threadIdx.x % 32 != 0)
        return;
    const u64 W = blockDim.x / 32;
    const u64 lanes = (u64)gridDim.x * W;
    const u64 v = (u64)blockIdx.x * W + w;
    if (v >= chunks)
        return;
    u64 first, step, n;
    if (slab) {
        u64 lo = v * chunks / lanes, hi = (v + 1) * chunks / lanes;
        first = lo, step = 1, n = hi - lo;
    } else {
        first = v, step = lanes, n = (chunks - v + lanes - 1) / lanes;
    }
    const u32 bar0 = smem_u32(bars) + 8 * MAXS * w;
    const u32 ring0 = smem_u32(xring) + w * stages * chunk;
    for (u32 s = 0; s < stages; s++)
        mbar_init(bar0 + 8 * s, 1);
    mbar_init_fence();
#define OFF(k) ((first + (u64)(k) * step) * (u64)chunk)
#define LEN(k) ((u32)(body - OFF(k) < chunk ? body - OFF(k) : chunk))
#define LOAD(k, s)                                                                     \
    do {                                                                               \
        mbar_expect_tx(bar0 + 8 * (s), LEN(k));                                        \
        bulk_load(ring0 + (s) * chunk, src + OFF(k), LEN(k), bar0 + 8 * (s), false, 0); \
        if (pf && (k) + (u64)pf * stages < n)                                          \
            bulk_prefetch(src + OFF((k) + (u64)pf * stages), LEN((k) + (u64)pf * stages)); \
    } while (0)
    const u64 pro = n < stages ? n : stages;
    for (u64 k = 0; k < pro; k++)
        LOAD(k, (u32)k);
    for (u64 k = 0; k < n; k++) {
        const u32 s = (u32)(k % stages);
        mbar_wait(bar0 + 8 * s, (u32)((k / stages) & 1));
        bulk_store(dst + OFF(k), ring0 + s * chunk, LEN(k), false, 0);
        if (k >= 1 && k - 1 + stages < n) {
            bulk_wait_read<1>();
            LOAD(k - 1 + stages, (u32)((k - 1) % stages));
        }
    }
    bulk_wait_all();
#undef LOAD
#undef LEN
#undef OFF
}

/* Plain 16-byte copy, grid-stride, 4 independent loads in flight per thread. */
__global__ void __launch_bounds__(1024) vec_copy(uint4 *dst, const uint4 *src, u64 n16, u32 cs)
{
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a, b, c, d;
        if (cs) {
            a = __ldcs(src + i), b = __ldcs(src + i + stride);
            c = __ldcs(src + i + 2 * stride), d = __ldcs(src + i + 3 * stride);
            __stcs(dst + i, a), __stcs(dst + i + stride, b);
            __stcs(dst + i + 2 * stride, c), __stcs(dst + i + 3 * stride, d);
        } else {
            a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
            dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
        }
    }
    for (; i < n16; i += stride)
        dst[i] = src[i];
}

__global__ void empty_kernel() {}

__global__ void count_diff(const uint4 *a, const uint4 *b, u64 n16, u64 *bad)
{
    u64 local = 0;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += (u64)gridDim.x * blockDim.x) {
        uint4 x = a[i], y = b[i];
        local += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
    }
    if (local)
        atomicAdd(bad, local);
}

/* ---- host ---- */
struct variant {
    const char *name;
    int vec;                  /* 1: vec_copy */
    u32 chunk, stages, warps; /* bulk */
    u32 slab, pf;
    u32 grid_per_sm; /* CTAs per SM (0: as many as fit, capped at 2 like p2pt) */
    u32 threads, cs; /* vec */
};

static char *g_dst, *g_src;
static u64 g_bytes;
static cudaStream_t g_stream;
static int g_sms, g_smem_sm, g_smem_optin;

static int launch(const struct variant *v)
{
    if (v->vec) {
        u64 n16 = g_bytes / 16;
        vec_copy<<<g_sms * v->grid_per_sm, v->threads, 0, g_stream>>>(
            (uint4 *)g_dst, (const uint4 *)g_src, n16, v->cs);
        return cudaGetLastError() == cudaSuccess ? 0 : -1;
    }
    u32 smem = v->chunk * v->stages * v->warps;
    if ((int)smem > g_smem_optin)
        return -1;
    u32 per_sm = v->grid_per_sm;
    if (per_sm == 0) {
        per_sm = g_smem_sm / (smem + 1024);
        if (per_sm > 2)
            per_sm = 2;
        if (per_sm == 0)
            per_sm = 1;
    }
    u64 chunks = (g_bytes + v->chunk - 1) / v->chunk;
    bulk_copy<<<g_sms * per_sm, 32 * v->warps, smem, g_stream>>>(
        g_dst, g_src, g_bytes, chunks, v->chunk, v->stages, v->slab, v->pf);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

static float median_ms(int (*fn)(const struct variant *), const struct variant *v)
{
    cudaEvent_t a, b;
    float t[9];
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 2; i++)
        if (fn(v))
            return -1;
    for (int i = 0; i < 9; i++) {
        CK(cudaEventRecord(a, g_stream));
        fn(v);
        CK(cudaEventRecord(b, g_stream));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[i], a, b));
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return median_f(t, 9);
}

static int ce(const struct variant *v)
{
    (void)v;
    return cudaMemcpyAsync(g_dst, g_src, g_bytes, cudaMemcpyDeviceToDevice, g_stream) ==
                   cudaSuccess
               ? 0
               : -1;
}

static u64 check(int (*fn)(const struct variant *), const struct variant *v, u64 *bad_d)
{
    u64 bad = 0;
    CK(cudaMemsetAsync(g_dst, 0xA5, g_bytes, g_stream));
    CK(cudaMemsetAsync(bad_d, 0, sizeof(u64), g_stream));
    if (fn(v))
        return ~0ull;
    count_diff<<<g_sms * 4, 512, 0, g_stream>>>((const uint4 *)g_dst, (const uint4 *)g_src,
                                                g_bytes / 16, bad_d);
    CK(cudaMemcpyAsync(&bad, bad_d, sizeof bad, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaStreamSynchronize(g_stream));
    return bad;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Host cost per enqueue: median over 15 batches of 200 calls, each batch
 * followed by a synchronize (not timed). */
static double enqueue_us(int what, char *dst, const char *src, CUfunction fbulk,
                         CUfunction fempty)
{
    double t[15];
    u64 bytes = 4096, chunks = 1;
    u32 chunk = 4096, stages = 4, slab = 0, pf = 0;
    void *p8[] = {&dst, &src, &bytes, &chunks, &chunk, &stages, &slab, &pf};
    for (int r = 0; r < 16; r++) {
        double t0 = now_us();
        for (int i = 0; i < 200; i++) {
            switch (what) {
            case 0: CU(cuLaunchKernel(fempty, 1, 1, 1, 32, 1, 1, 0, g_stream, NULL, NULL)); break;
            case 1:
                CU(cuLaunchKernel(fbulk, 1, 1, 1, 32, 1, 1, chunk * stages, g_stream, p8, NULL));
                break;
            case 2:
                CU(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes,
                                 (CUstream)g_stream));
                break;
            case 3:
                CU(cuLaunchKernel(fbulk, 132, 1, 1, 32, 1, 1, chunk * stages, g_stream, p8,
                                  NULL));
                break;
            }
        }
        double t1 = now_us();
        CK(cudaStreamSynchronize(g_stream));
        if (r > 0)
            t[r - 1] = (t1 - t0) / 200;
    }
    for (int i = 0; i < 15; i++)
        for (int j = i + 1; j < 15; j++)
            if (t[j] < t[i]) {
                double x = t[i];
                t[i] = t[j], t[j] = x;
            }
    return t[7];
}

int main(int argc, char **argv)
{
    g_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (1ull << 30);
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaSetDevice(dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    g_sms = prop.multiProcessorCount;
    g_smem_sm = (int)prop.sharedMemPerMultiprocessor;
    g_smem_optin = (int)prop.sharedMemPerBlockOptin;
    printf("device %s, %d SMs, L2 %d MiB, smem/SM %d, optin %d; copy %llu bytes\n",
           prop.name, g_sms, prop.l2CacheSize >> 20, g_smem_sm, g_smem_optin,
           (unsigned long long)g_bytes);
    CK(cudaFuncSetAttribute(bulk_copy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            g_smem_optin - 8 * MAXW * MAXS));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&g_src, g_bytes));
    CK(cudaMalloc(&g_dst, g_bytes));
    u64 *bad_d;
    CK(cudaMalloc(&bad_d, sizeof(u64)));
    fill_random<<<g_sms * 4, 512, 0, g_stream>>>((uint4 *)g_src, g_bytes / 16, 12345);
    CK(cudaStreamSynchronize(g_stream));

    const u32 K = 1024;
    struct variant vs[] = {
        {"il 48Kx4 w1 (p2pt default)", 0, 48 * K, 4, 1, 0, 0, 0, 0, 0},
        {"il 48Kx2 w1 2/SM", 0, 48 * K, 2, 1, 0, 0, 2, 0, 0},
        {"il 32Kx6 w1", 0, 32 * K, 6, 1, 0, 0, 1, 0, 0},
        {"il 16Kx12 w1", 0, 16 * K, 12, 1, 0, 0, 1, 0, 0},
        {"il 96Kx2 w1", 0, 96 * K, 2, 1, 0, 0, 1, 0, 0},
        {"slab 48Kx4 w1", 0, 48 * K, 4, 1, 1, 0, 1, 0, 0},
        {"slab 32Kx6 w1", 0, 32 * K, 6, 1, 1, 0, 1, 0, 0},
        {"il 48Kx4 pf1", 0, 48 * K, 4, 1, 0, 1, 1, 0, 0},
        {"il 48Kx4 pf2", 0, 48 * K, 4, 1, 0, 2, 1, 0, 0},
        {"il 24Kx4 w2", 0, 24 * K, 4, 2, 0, 0, 1, 0, 0},
        {"il 12Kx4 w4", 0, 12 * K, 4, 4, 0, 0, 1, 0, 0},
        {"il 16Kx3 w4", 0, 16 * K, 3, 4, 0, 0, 1, 0, 0},
        {"il 8Kx3 w8", 0, 8 * K, 3, 8, 0, 0, 1, 0, 0},
        {"slab 12Kx4 w4", 0, 12 * K, 4, 4, 1, 0, 1, 0, 0},
        {"il 48Kx4 w1 1/SM, 120 SMs", 0, 48 * K, 4, 1, 0, 0, 1, 0, 0},
        {"vec 1/SM x1024", 1, 0, 0, 0, 0, 0, 1, 1024, 0},
        {"vec 2/SM x1024", 1, 0, 0, 0, 0, 0, 2, 1024, 0},
        {"vec 4/SM x512", 1, 0, 0, 0, 0, 0, 4, 512, 0},
        {"vec 4/SM x512 .cs", 1, 0, 0, 0, 0, 0, 4, 512, 1},
        {"vec 8/SM x256", 1, 0, 0, 0, 0, 0, 8, 256, 0},
    };
    const int nv = (int)(sizeof vs / sizeof vs[0]);

    u64 bad = check(ce, NULL, bad_d);
    float ce0 = median_ms(ce, NULL);
    printf("ce (before)                     %8.1f us %8.1f GB/s  bad=%llu\n", ce0 * 1e3,
           g_bytes / (ce0 * 1e6), (unsigned long long)bad);
    float vt[64];
    u64 vbad[64];
    for (int i = 0; i < nv; i++) {
        int sms = g_sms;
        if (strstr(vs[i].name, "120 SMs"))
            g_sms = 120;
        vbad[i] = check(launch, &vs[i], bad_d);
        vt[i] = median_ms(launch, &vs[i]);
        g_sms = sms;
    }
    float ce1 = median_ms(ce, NULL);
    printf("ce (after)                      %8.1f us %8.1f GB/s\n", ce1 * 1e3,
           g_bytes / (ce1 * 1e6));
    float cem = (ce0 + ce1) / 2;
    printf("\n| variant | us | GB/s | vs CE | bad bytes16 |\n| --- | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < nv; i++) {
        if (vt[i] < 0) {
            printf("| %s | - | - | - | did not launch |\n", vs[i].name);
            continue;
        }
        printf("| %s | %.1f | %.1f | %.3f | %llu |\n", vs[i].name, vt[i] * 1e3,
               g_bytes / (vt[i] * 1e6), cem / vt[i], (unsigned long long)vbad[i]);
    }

    /* Host enqueue cost. */
    CUfunction fb, fe;
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&fb, (const void *)bulk_copy));
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&fe, (const void *)empty_kernel));
    printf("\nhost enqueue cost per call (median of 15 x 200 calls):\n");
    printf("  cuLaunchKernel empty kernel, no params     %.2f us\n",
           enqueue_us(0, g_dst, g_src, fb, fe));
    printf("  cuLaunchKernel bulk 4 KiB, 8 params, 1 CTA %.2f us\n",
           enqueue_us(1, g_dst, g_src, fb, fe));
    printf("  cuLaunchKernel bulk, 8 params, 132 CTAs    %.2f us\n",
           enqueue_us(3, g_dst, g_src, fb, fe));
    printf("  cuMemcpyAsync 4 KiB D2D                    %.2f us\n",
           enqueue_us(2, g_dst, g_src, fb, fe));
    return 0;
}
