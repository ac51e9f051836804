/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which grid shape moves a batch of uniform pieces at the speed of one
 * contiguous copy. Pieces of one size let a thread find its piece by one
 * division, so the mapping costs nothing and only the shape differs:
 *
 *   kernel      p2pt's batch kernel as it is (kernels/batch_copy.cu)
 *   drv         the driver's copy shape over the batch: a 256-thread CTA per
 *               4 KiB of the concatenated piece bodies, one 16-byte vector a
 *               thread, CTAs in launch order sweeping the batch front to back
 *   drv2        the same, 2 vectors a thread (8 KiB per CTA)
 *   stride      a persistent grid (as many 256-thread CTAs as fit) sweeping
 *               the same vectors in a grid-stride loop, one vector a thread
 *   stride4     the same, 4 vectors a thread in flight per step
 *   ticket      a persistent grid whose CTAs take 8 KiB units (2 vectors a
 *               thread) in order from a counter in global memory, the next
 *               ticket fetched while a unit is copied: the block scheduler's
 *               order without CTA launches (the last CTA zeroes the counter)
 *   wtile       p2pt's warp tile (copy_tile, all loads of a tile before its
 *               stores), tiles of the whole batch dealt to the persistent
 *               grid's warps in sweep order
 *
 * Layouts, timing and checks as batch_variants.cu: sources consecutive,
 * destinations shuffled with gaps, several layouts rotated, CUDA events
 * around 20 back-to-back batches, median of 9 rounds, against one
 * cudaMemcpyAsync of the same bytes in the same rounds; every variant's
 * first batch of each shape is checked over whole pieces.
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../kernels/batch_copy.cu"
#include "check.cuh"

#define SW_THREADS 256

/* Vector g of the concatenated bodies: piece g / nvp, vector g % nvp. */
static __device__ __forceinline__ void vec_at(const desc_t *d, u32 g, u32 nvp, int4 **dp,
                                              const int4 **sp)
{
    const u32 piece = g / nvp, off = g - piece * nvp;
    *dp = (int4 *)__ldg(&d[piece].dst) + off;
    *sp = (const int4 *)__ldg(&d[piece].src) + off;
}

template <int K>
__global__ void __launch_bounds__(SW_THREADS) drv(const desc_t *d, u32 nvp, u32 nv)
{
    const u32 g0 = blockIdx.x * (SW_THREADS * K) + threadIdx.x;
    int4 a[K];
    int4 *dp[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const u32 g = g0 + k * SW_THREADS;
        if (g < nv) {
            const int4 *sp;
            vec_at(d, g, nvp, &dp[k], &sp);
            a[k] = ld16(sp);
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++)
        if (g0 + k * SW_THREADS < nv)
            st16(dp[k], a[k]);
}

template <int K>
__global__ void __launch_bounds__(SW_THREADS) stride(const desc_t *d, u32 nvp, u32 nv)
{
    const u32 step = gridDim.x * SW_THREADS * K;
    for (u32 g0 = blockIdx.x * (SW_THREADS * K) + threadIdx.x; g0 < nv; g0 += step) {
        int4 a[K];
        int4 *dp[K];
#pragma unroll
        for (int k = 0; k < K; k++) {
            const u32 g = g0 + k * SW_THREADS;
            if (g < nv) {
                const int4 *sp;
                vec_at(d, g, nvp, &dp[k], &sp);
                a[k] = ld16(sp);
            }
        }
#pragma unroll
        for (int k = 0; k < K; k++)
            if (g0 + k * SW_THREADS < nv)
                st16(dp[k], a[k]);
    }
}

__global__ void __launch_bounds__(SW_THREADS) ticket(const desc_t *d, u32 nvp, u32 nv, u32 *ctr)
{
    __shared__ u32 next[2];
    const u32 units = (nv + 2 * SW_THREADS - 1) / (2 * SW_THREADS);
    if (threadIdx.x == 0)
        next[0] = atomicAdd(&ctr[0], 1);
    __syncthreads();
    for (u32 i = 0;; i ^= 1) {
        const u32 u = next[i];
        if (u >= units)
            break;
        if (threadIdx.x == 0)
            next[i ^ 1] = atomicAdd(&ctr[0], 1);
        const u32 g0 = u * 2 * SW_THREADS + threadIdx.x;
        int4 a[2];
        int4 *dp[2];
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const u32 g = g0 + k * SW_THREADS;
            if (g < nv) {
                const int4 *sp;
                vec_at(d, g, nvp, &dp[k], &sp);
                a[k] = ld16(sp);
            }
        }
#pragma unroll
        for (int k = 0; k < 2; k++)
            if (g0 + k * SW_THREADS < nv)
                st16(dp[k], a[k]);
        __syncthreads();
    }
    if (threadIdx.x == 0 && atomicAdd(&ctr[1], 1) == gridDim.x - 1) {
        ctr[0] = 0;
        ctr[1] = 0;
    }
}

__global__ void __launch_bounds__(P2PT_BATCH_THREADS, P2PT_BATCH_CTAS_PER_SM)
wtile(const desc_t *d, u32 tpp, u32 tiles)
{
    const u32 lane = threadIdx.x & 31;
    const u32 warps = gridDim.x * (P2PT_BATCH_THREADS / 32);
    for (u32 t = blockIdx.x * (P2PT_BATCH_THREADS / 32) + (threadIdx.x >> 5); t < tiles;
         t += warps) {
        const u32 piece = t / tpp;
        copy_tile(__ldg(&d[piece].dst), __ldg(&d[piece].src), __ldg(&d[piece].bytes),
                  t - piece * tpp, lane);
    }
}

struct shape {
    const char *name;
    size_t count, size;
};

int main(int argc, char **argv)
{
    const shape shapes[] = {{"1024x14K", 1024, 14 << 10}, {"4096x7K", 4096, 7 << 10},
                            {"16384x2K", 16384, 2 << 10},  {"16384x32K", 16384, 32 << 10},
                            {"64x1M", 64, 1 << 20}};
    const std::string only = argc > 1 ? argv[1] : "";
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int occ_stride1 = 0, occ_stride4 = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_stride1, stride<1>, SW_THREADS, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_stride4, stride<4>, SW_THREADS, 0));
    printf("batch_shapes sms=%d stride_ctas_per_sm=%d stride4_ctas_per_sm=%d tile=%u\n", sms,
           occ_stride1, occ_stride4, P2PT_BATCH_TILE);
    const size_t pool = 1200ull << 20;
    char *src, *dst;
    CK(cudaMalloc(&src, pool));
    CK(cudaMalloc(&dst, 2 * pool));
    std::vector<unsigned char> h(pool);
    for (size_t i = 0; i < pool; i++)
        h[i] = (unsigned char)(i * 2654435761u >> 13);
    CK(cudaMemcpy(src, h.data(), pool, cudaMemcpyHostToDevice));
    p2pt_batch_desc *d_descs;
    unsigned *d_count;
    void *ws;
    CK(cudaMalloc(&d_descs, 16384 * 8 * sizeof(p2pt_batch_desc)));
    CK(cudaMalloc(&d_count, 4));
    CK(cudaMalloc(&ws, 64));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int occ_ticket = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_ticket, ticket, SW_THREADS, 0));
    u32 *ctr;
    CK(cudaMalloc(&ctr, 8));
    CK(cudaMemset(ctr, 0, 8));
    const char *variants[] = {"kernel", "drv", "drv2", "stride", "stride4", "ticket", "wtile"};
    for (const shape &sh : shapes) {
        if (!only.empty() && only.find(sh.name) == std::string::npos)
            continue;
        const size_t total = sh.count * sh.size;
        const int sets = (int)std::max<size_t>(1, std::min<size_t>(8, pool / (2 * total + 1)));
        std::vector<p2pt_batch_desc> d(sh.count * sets);
        srand(7);
        for (int k = 0; k < sets; k++) {
            std::vector<size_t> slot(sh.count);
            for (size_t i = 0; i < sh.count; i++)
                slot[i] = i;
            for (size_t i = sh.count; i > 1; i--)
                std::swap(slot[i - 1], slot[rand() % i]);
            for (size_t i = 0; i < sh.count; i++) {
                p2pt_batch_desc &x = d[k * sh.count + i];
                x.src = (unsigned long long)(src + (k * total + i * sh.size) % (pool - sh.size));
                x.dst = (unsigned long long)(dst + k * 2 * total + slot[i] * (sh.size + 64));
                x.bytes = sh.size;
            }
        }
        CK(cudaMemcpy(d_descs, d.data(), d.size() * sizeof(d[0]), cudaMemcpyHostToDevice));
        unsigned n = (unsigned)sh.count;
        CK(cudaMemcpy(d_count, &n, 4, cudaMemcpyHostToDevice));
        p2pt_batch_dev_params p;
        memset(&p, 0, sizeof(p));
        p.count = (unsigned long long)d_count;
        p.workspace = (unsigned long long)ws;
        p.max_count = n;
        p.n_windows = 2;
        p.window[0] = {(unsigned long long)src, (unsigned long long)(src + pool)};
        p.window[1] = {(unsigned long long)dst, (unsigned long long)(dst + 2 * pool)};
        const u32 nvp = (u32)(sh.size / 16), nv = (u32)(sh.count * nvp);
        const u32 tpp = (nvp + TILE_VECS - 1) / TILE_VECS, tiles = (u32)sh.count * tpp;
        const unsigned G = (unsigned)sms * P2PT_BATCH_CTAS_PER_SM;
        for (const char *v : variants) {
            const std::string var = v;
            auto batch = [&](int k) {
                const desc_t *dk = d_descs + (size_t)k * sh.count;
                if (var == "kernel") {
                    p.descs = (unsigned long long)dk;
                    p2pt_batch_copy_dev<<<G + 1, P2PT_BATCH_THREADS, 0, s>>>(p);
                } else if (var == "drv") {
                    drv<1><<<(nv + SW_THREADS - 1) / SW_THREADS, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else if (var == "drv2") {
                    drv<2><<<(nv + 2 * SW_THREADS - 1) / (2 * SW_THREADS), SW_THREADS, 0, s>>>(
                        dk, nvp, nv);
                } else if (var == "stride") {
                    stride<1><<<sms * occ_stride1, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else if (var == "ticket") {
                    ticket<<<sms * occ_ticket, SW_THREADS, 0, s>>>(dk, nvp, nv, ctr);
                } else if (var == "stride4") {
                    stride<4><<<sms * occ_stride4, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else {
                    wtile<<<G, P2PT_BATCH_THREADS, 0, s>>>(dk, tpp, tiles);
                }
            };
            CK(cudaMemset(dst, 0xA5, 2 * pool));
            batch(0);
            CK(cudaStreamSynchronize(s));
            CK(cudaGetLastError());
            bool ok = true;
            std::vector<unsigned char> got(sh.size);
            for (size_t i = 0; i < sh.count && ok; i += sh.count / 16 + 1) {
                CK(cudaMemcpy(got.data(), (void *)d[i].dst, sh.size, cudaMemcpyDeviceToHost));
                ok = memcmp(got.data(), h.data() + ((char *)d[i].src - src), sh.size) == 0;
            }
            const int reps = 9, per = 20;
            std::vector<float> tb, tc;
            for (int r = 0; r < reps + 1; r++) {
                float ms;
                CK(cudaEventRecord(e0, s));
                for (int i = 0; i < per; i++)
                    batch((r * per + i) % sets);
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r)
                    tb.push_back(ms * 1000 / per);
                CK(cudaEventRecord(e0, s));
                for (int i = 0; i < per; i++)
                    CK(cudaMemcpyAsync(dst + (size_t)((r * per + i) % sets) * 2 * total,
                                       src + (size_t)((r * per + i) % sets) * total, total,
                                       cudaMemcpyDeviceToDevice, s));
                CK(cudaEventRecord(e1, s));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (r)
                    tc.push_back(ms * 1000 / per);
            }
            CK(cudaGetLastError());
            std::sort(tb.begin(), tb.end());
            std::sort(tc.begin(), tc.end());
            printf("batch_shape variant=%s shape=%s batch_us=%.2f contig_us=%.2f "
                   "batch/contig_bw=%.3f check=%s\n",
                   v, sh.name, tb[reps / 2], tc[reps / 2], tc[reps / 2] / tb[reps / 2],
                   ok ? "ok" : "FAILED");
            fflush(stdout);
        }
    }
    return 0;
}
