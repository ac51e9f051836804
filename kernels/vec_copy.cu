/*
 * p2pt vector copy kernel: the other shape of the TMA transport's streaming
 * grid for large local copies (P2P_TRANSPORT_STREAM_KERNEL=vector). No bulk
 * copies and no shared memory: each thread loads P2PT_VEC_UNROLL 16-byte
 * vectors into registers, all of them before its first store, with
 * streaming (evict-first) hints, and stores them. A CTA of P2PT_VEC_THREADS
 * threads moves one 64 KiB tile, each warp a contiguous 8 KiB of it (lane l
 * at step j touches vector 32 j + l of its warp's run, so every access is
 * one 512-byte coalesced line per warp); the grid has a CTA for every
 * tile, and the block scheduler hands SMs new tiles as they free up.
 * Measured against the bulk streaming grid and cuMemcpyAsync in
 * bench/experiments/local_copy.cu and bench/RESULTS.md.
 *
 * dst and src are co-aligned (the transport checks): the host passes the
 * unaligned head (< 16 bytes), the body in 16-byte vectors and the tail;
 * CTA 0 copies the head, the last CTA the tail, with plain bytes.
 * Programmatic dependent launch as in tma_copy.cu: nothing touches global
 * memory before griddepcontrol.wait.
 */

#include "p2pt_kernel_abi.h"

#include "tma_ptx.cuh"

static __device__ __forceinline__ uint4 load_cs(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ void store_cs(uint4 *p, uint4 v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

extern "C" __global__ void __launch_bounds__(P2PT_VEC_THREADS)
p2pt_vec_copy(char *dst, const char *src, u64 head, u64 n16, u64 tail)
{
    const u32 U = P2PT_VEC_UNROLL;
    const u64 tile = (u64)P2PT_VEC_THREADS * U; /* vectors per CTA */
    pdl_launch_dependents();
    pdl_wait();
    if (blockIdx.x == 0 && threadIdx.x < head)
        dst[threadIdx.x] = src[threadIdx.x];
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x < tail) {
        u64 o = head + n16 * 16 + threadIdx.x;
        dst[o] = src[o];
    }
    const uint4 *s = (const uint4 *)(src + head);
    uint4 *d = (uint4 *)(dst + head);
    const u64 base = (u64)blockIdx.x * tile;
    const u64 first = base + (u64)(threadIdx.x / 32) * 32 * U + threadIdx.x % 32;
    uint4 v[P2PT_VEC_UNROLL];
    if (base + tile <= n16) {
#pragma unroll
        for (u32 j = 0; j < U; j++)
            v[j] = load_cs(s + first + 32 * j);
#pragma unroll
        for (u32 j = 0; j < U; j++)
            store_cs(d + first + 32 * j, v[j]);
    } else {
#pragma unroll
        for (u32 j = 0; j < U; j++)
            if (first + 32 * j < n16)
                v[j] = load_cs(s + first + 32 * j);
#pragma unroll
        for (u32 j = 0; j < U; j++)
            if (first + 32 * j < n16)
                store_cs(d + first + 32 * j, v[j]);
    }
}
