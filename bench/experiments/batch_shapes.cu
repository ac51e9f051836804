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
 * Layouts, checks and timing as batch_variants.cu's (batch_harness.cuh):
 * every variant's first batch of each shape is checked over whole pieces,
 * then timed against one cudaMemcpyAsync of the same bytes.
 */
#include <string>

#include "../../kernels/batch_copy.cu"
#include "batch_harness.cuh"

#define SW_THREADS 256

/* Vector g of the concatenated bodies: piece g / nvp, vector g % nvp. */
static __device__ __forceinline__ void vec_at(const desc_t *d, u32 g, u32 nvp, int4 **dp,
                                              const int4 **sp)
{
    const u32 piece = g / nvp, off = g - piece * nvp;
    *dp = (int4 *)__ldg(&d[piece].dst) + off;
    *sp = (const int4 *)__ldg(&d[piece].src) + off;
}

/* The K vectors g0 + SW_THREADS k (those below nv) of one thread: every
 * load before the first store. */
template <int K> static __device__ __forceinline__ void copy_unit(const desc_t *d, u32 g0, u32 nvp,
                                                                   u32 nv)
{
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
__global__ void __launch_bounds__(SW_THREADS) drv(const desc_t *d, u32 nvp, u32 nv)
{
    copy_unit<K>(d, blockIdx.x * (SW_THREADS * K) + threadIdx.x, nvp, nv);
}

template <int K>
__global__ void __launch_bounds__(SW_THREADS) stride(const desc_t *d, u32 nvp, u32 nv)
{
    const u32 step = gridDim.x * SW_THREADS * K;
    for (u32 g0 = blockIdx.x * (SW_THREADS * K) + threadIdx.x; g0 < nv; g0 += step)
        copy_unit<K>(d, g0, nvp, nv);
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
        copy_unit<2>(d, u * 2 * SW_THREADS + threadIdx.x, nvp, nv);
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
    int4 a[PER_LANE];
    for (u32 t = blockIdx.x * (P2PT_BATCH_THREADS / 32) + (threadIdx.x >> 5); t < tiles;
         t += warps) {
        const u32 piece = t / tpp;
        copy_tile(__ldg(&d[piece].dst), __ldg(&d[piece].src), __ldg(&d[piece].bytes),
                  t - piece * tpp, lane, a);
    }
}

int main(int argc, char **argv)
{
    const shape shapes[] = {{"1024x14K", 1024, 14 << 10}, {"4096x7K", 4096, 7 << 10},
                            {"16384x2K", 16384, 2 << 10},  {"16384x32K", 16384, 32 << 10},
                            {"64x1M", 64, 1 << 20}};
    const std::string only = argc > 1 ? argv[1] : "";
    harness H;
    harness_init(H);
    const int sms = H.sms;
    int occ_stride1 = 0, occ_stride4 = 0, occ_ticket = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_stride1, stride<1>, SW_THREADS, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_stride4, stride<4>, SW_THREADS, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ_ticket, ticket, SW_THREADS, 0));
    printf("batch_shapes sms=%d stride_ctas_per_sm=%d stride4_ctas_per_sm=%d tile=%u\n", sms,
           occ_stride1, occ_stride4, P2PT_BATCH_TILE);
    u32 *ctr;
    CK(cudaMalloc(&ctr, 8));
    CK(cudaMemset(ctr, 0, 8));
    const cudaStream_t s = H.s;
    const unsigned G = (unsigned)sms * P2PT_BATCH_CTAS_PER_SM;
    const char *variants[] = {"kernel", "drv", "drv2", "stride", "stride4", "ticket", "wtile"};
    for (const shape &sh : shapes) {
        if (!only.empty() && only.find(sh.name) == std::string::npos)
            continue;
        layout L = layout_make(H, sh);
        const u32 nvp = (u32)(sh.size / 16), nv = (u32)(sh.count * nvp);
        const u32 tpp = (nvp + TILE_VECS - 1) / TILE_VECS, tiles = (u32)sh.count * tpp;
        for (const char *v : variants) {
            const std::string var = v;
            measure(H, L, "batch_shape", v, [&](int k) {
                const desc_t *dk = L.descs(H, k);
                if (var == "kernel") {
                    L.p.descs = (unsigned long long)dk;
                    p2pt_batch_copy_dev<<<G, P2PT_BATCH_THREADS, 0, s>>>(L.p);
                } else if (var == "drv") {
                    drv<1><<<(nv + SW_THREADS - 1) / SW_THREADS, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else if (var == "drv2") {
                    drv<2><<<(nv + 2 * SW_THREADS - 1) / (2 * SW_THREADS), SW_THREADS, 0, s>>>(
                        dk, nvp, nv);
                } else if (var == "stride") {
                    stride<1><<<sms * occ_stride1, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else if (var == "stride4") {
                    stride<4><<<sms * occ_stride4, SW_THREADS, 0, s>>>(dk, nvp, nv);
                } else if (var == "ticket") {
                    ticket<<<sms * occ_ticket, SW_THREADS, 0, s>>>(dk, nvp, nv, ctr);
                } else {
                    wtile<<<G, P2PT_BATCH_THREADS, 0, s>>>(dk, tpp, tiles);
                }
            });
        }
    }
    return 0;
}
