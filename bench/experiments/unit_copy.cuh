/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit_copy, for bench/experiments/batch_trace.cu: what a batch design
 * whose mapping is built before the launch could do at best. Include
 * after kernels/batch_copy.cu (the descriptor type, ld16 and st16).
 */
#ifndef P2PT_EXPERIMENTS_UNIT_COPY_CUH
#define P2PT_EXPERIMENTS_UNIT_COPY_CUH

#include <algorithm>
#include <vector>

#include "check.cuh"

/*
 * The ceiling of a design whose mapping is built before the launch (by
 * the host, or by a pre-pass kernel): a 256-thread CTA per 8 KiB unit of
 * the batch's concatenated pieces, two 16-byte vectors a thread, CTAs in
 * launch order (the driver's shape, `drv2` in batch_shapes.cu), each CTA
 * finding its unit's pieces through tables built on the host: vbefore[i],
 * the vectors before piece i (n + 1 of them), and first[u], the piece
 * holding unit u's first vector (units + 1). Needs 16-byte aligned pieces
 * of whole vectors, as every shape has at shift 0.
 */
#define UNIT_VECS 512
__global__ void __launch_bounds__(256) unit_copy(const p2pt_batch_desc *d,
                                                 const unsigned long long *vbefore,
                                                 const unsigned *first,
                                                 unsigned long long total_vecs)
{
    __shared__ unsigned long long sv[UNIT_VECS + 2], sd[UNIT_VECS + 1], ss[UNIT_VECS + 1];
    const unsigned long long u0 = (unsigned long long)blockIdx.x * UNIT_VECS;
    const unsigned p0 = first[blockIdx.x], np = first[blockIdx.x + 1] - p0 + 1;
    for (unsigned i = threadIdx.x; i <= np; i += blockDim.x) {
        sv[i] = vbefore[p0 + i];
        if (i < np) {
            sd[i] = d[p0 + i].dst;
            ss[i] = d[p0 + i].src;
        }
    }
    __syncthreads();
    int4 a[2];
    int4 *dp[2] = {nullptr, nullptr};
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const unsigned long long v = u0 + k * 256 + threadIdx.x;
        if (v >= total_vecs)
            continue;
        unsigned lo = 0, hi = np; /* sv[lo] <= v < sv[hi] */
        while (hi - lo > 1) {
            const unsigned mid = (lo + hi) / 2;
            if (sv[mid] <= v)
                lo = mid;
            else
                hi = mid;
        }
        a[k] = ld16((const int4 *)ss[lo] + (v - sv[lo]));
        dp[k] = (int4 *)sd[lo] + (v - sv[lo]);
    }
#pragma unroll
    for (int k = 0; k < 2; k++)
        if (dp[k] != nullptr)
            st16(dp[k], a[k]);
}

/* The tables of `sets` layouts of `count` descriptors each (h, on the
 * host, `total` bytes a layout), in GPU memory. */
struct unit_tables {
    unsigned long long *vbefore = nullptr; /* sets x (count + 1) */
    unsigned *first = nullptr;             /* sets x (units + 1) */
    unsigned long long total_vecs = 0;
    size_t units = 0;
};

/* Build them; false (and nothing built) unless every piece is 16-byte
 * aligned whole vectors. */
static bool unit_tables_make(unit_tables &t, const p2pt_batch_desc *h, size_t count, int sets,
                             size_t total)
{
    t.total_vecs = total / 16;
    t.units = (size_t)((t.total_vecs + UNIT_VECS - 1) / UNIT_VECS);
    for (size_t i = 0; i < (size_t)sets * count; i++)
        if (h[i].bytes < 16 || h[i].bytes % 16 != 0 || h[i].dst % 16 != 0 || h[i].src % 16 != 0)
            return false;
    std::vector<unsigned long long> hv((size_t)sets * (count + 1));
    std::vector<unsigned> hf((size_t)sets * (t.units + 1));
    for (int s = 0; s < sets; s++) {
        unsigned long long *v = &hv[(size_t)s * (count + 1)], at = 0;
        for (size_t i = 0; i < count; i++) {
            v[i] = at;
            at += h[(size_t)s * count + i].bytes / 16;
        }
        v[count] = at;
        size_t piece = 0;
        for (size_t u = 0; u <= t.units; u++) {
            const unsigned long long first_vec = std::min<unsigned long long>(u * UNIT_VECS, at - 1);
            while (v[piece + 1] <= first_vec)
                piece++;
            hf[(size_t)s * (t.units + 1) + u] = (unsigned)piece;
        }
    }
    CK(cudaMalloc(&t.vbefore, hv.size() * 8));
    CK(cudaMalloc(&t.first, hf.size() * 4));
    CK(cudaMemcpy(t.vbefore, hv.data(), hv.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(t.first, hf.data(), hf.size() * 4, cudaMemcpyHostToDevice));
    return true;
}

/* Layout k's batch (descriptors `d`, `count` a layout) on stream s. */
static void unit_launch(const unit_tables &t, const p2pt_batch_desc *d, size_t count, int k,
                        cudaStream_t s)
{
    unit_copy<<<(unsigned)t.units, 256, 0, s>>>(d + (size_t)k * count,
                                              t.vbefore + (size_t)k * (count + 1),
                                              t.first + (size_t)k * (t.units + 1), t.total_vecs);
}

static void unit_tables_free(unit_tables &t)
{
    if (t.vbefore != nullptr)
        CK(cudaFree(t.vbefore));
    if (t.first != nullptr)
        CK(cudaFree(t.first));
    t = unit_tables();
}

#endif /* P2PT_EXPERIMENTS_UNIT_COPY_CUH */
