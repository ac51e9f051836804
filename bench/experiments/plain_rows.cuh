/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The plain kernel of the peer experiments (peer_batch.cu,
 * peer_alltoall.cu): a warp per row, 16-byte vectors, U loads in flight per
 * lane before their stores, reading p2pt's device descriptors. Include after
 * kernels/batch_copy.cu (the descriptor type).
 */
#ifndef P2PT_EXPERIMENTS_PLAIN_ROWS_CUH
#define P2PT_EXPERIMENTS_PLAIN_ROWS_CUH

template <int U>
__global__ void plain_rows(const p2pt_batch_desc *d, const unsigned *count)
{
    const unsigned lane = threadIdx.x & 31;
    const unsigned warps = gridDim.x * (blockDim.x / 32);
    const unsigned n = *count;
    for (unsigned p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < n; p += warps) {
        int4 *dst = (int4 *)d[p].dst;
        const int4 *src = (const int4 *)d[p].src;
        const unsigned nv = (unsigned)(d[p].bytes / 16);
        unsigned i = lane;
        for (; i + 32 * (U - 1) < nv; i += 32 * U) {
            int4 v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                v[u] = src[i + 32 * u];
#pragma unroll
            for (int u = 0; u < U; u++)
                dst[i + 32 * u] = v[u];
        }
        for (; i < nv; i += 32)
            dst[i] = src[i];
    }
}

#endif /* P2PT_EXPERIMENTS_PLAIN_ROWS_CUH */
