/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt link kernel: a host batch whose every piece crosses the host link
 * from pinned host memory to the GPU (KV-cache restore), all co-aligned.
 * (GPU to host stays on the batch kernel: see P2PT_LINK_DIRS in
 * src/engines/transport_tma_link.c.)
 *
 * Compiled at run time by NVRTC (src/jit/jit.c) with p2pt_kernel_abi.h and
 * tma_ptx.cuh.
 *
 * Why this shape: PCIe, not the SMs, bounds such a batch, so the launch is
 * a handful of CTAs (the table's `link` lines) and each must keep many bytes
 * in flight across the bus. A warp takes one piece at a time, each lane
 * issuing up to sixteen 16-byte loads before its stores (8 KiB a warp in
 * flight); no shared memory, no plan. Pieces are dealt to warps through
 * P2PT_LINK_SLOTS slots (p2pt_kernel_abi.h), whose bytes the host sums in
 * its pass: a batch that would leave one warp far more than its share (a
 * 1 MiB piece in every 32 lands on the same two warps) goes to the batch
 * kernel instead, as do pieces under 4 KiB on average and grids narrower
 * than the link's (src/engines/transport_tma_link.c). The descriptors (or
 * the blocks they are made of, P2PT_RING_BLOCKS) stay in the pinned staging
 * ring and are read there in place: each warp loads its next piece's
 * descriptor before it copies the current one, so that read's bus latency
 * hides behind the copy.
 *
 * Programmatic dependent launch as in batch_copy.cu: the ring was written
 * by the host before the launch, so the first descriptor is read before
 * griddepcontrol.wait; nothing the stream's earlier work may write is
 * touched before it.
 */
#include "p2pt_kernel_abi.h"
#include "tma_ptx.cuh"

typedef struct p2pt_batch_desc desc_t;

#define WARPS (P2PT_LINK_THREADS / 32)

static __device__ __forceinline__ int4 ld16(const int4 *p)
{
    int4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ void st16(int4 *p, const int4 v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

/* `n` vectors from s to t, each lane `u` loads in flight before its stores,
 * from vector *v on; *v is left where a whole round no longer fits. */
template <int u>
static __device__ __forceinline__ void copy_rounds(const int4 *s, int4 *t, u64 n, u64 *v)
{
    for (; *v + 32 * (u - 1) < n; *v += 32 * u) {
        int4 r[u];
#pragma unroll
        for (int k = 0; k < u; k++)
            r[k] = ld16(s + *v + 32 * k);
#pragma unroll
        for (int k = 0; k < u; k++)
            st16(t + *v + 32 * k, r[k]);
    }
}

/* The vectors from v on, at most u a lane: each lane's loads, predicated,
 * all in flight before its stores, so that what is left of a piece after its
 * whole rounds crosses the bus in one round trip, not one a vector. */
template <int u>
static __device__ __forceinline__ void copy_last(const int4 *s, int4 *t, u64 n, u64 v)
{
    if (v >= n)
        return;
    const u32 m = (u32)((n - v + 31) / 32); /* this lane's vectors, 1 to u */
    s += v;
    t += v;
    int4 r[u];
#pragma unroll
    for (u32 k = 0; k < u; k++)
        if (k < m)
            r[k] = ld16(s + 32 * k);
#pragma unroll
    for (u32 k = 0; k < u; k++)
        if (k < m)
            st16(t + 32 * k, r[k]);
}

/* A co-aligned piece: bytes before the first 16-byte boundary and after the
 * last one a lane each, the rest in 16-byte vectors: rounds of 8 KiB a warp
 * (16 loads a lane in flight), then one last round of what is left (up to
 * 16 loads a lane), so that any piece of up to 8 KiB is one round, a 4 KiB
 * one eight loads a lane, and a 14 KiB one two rounds. */
static __device__ __forceinline__ void copy_piece(u64 dst, u64 src, u64 n, u32 lane)
{
    u64 head = (16 - (dst & 15)) & 15;
    if (head > n)
        head = n;
    if (lane < head)
        ((char *)dst)[lane] = ((const char *)src)[lane];
    dst += head;
    src += head;
    n -= head;
    const int4 *s = (const int4 *)src;
    int4 *t = (int4 *)dst;
    const u64 vecs = n >> 4;
    u64 v = lane;
    copy_rounds<16>(s, t, vecs, &v);
    copy_last<16>(s, t, vecs, v);
    const u64 tail = n & 15;
    if (lane < tail)
        ((char *)dst)[vecs * 16 + lane] = ((const char *)src)[vecs * 16 + lane];
}

/* The piece after piece i (in slot *s) of the warp whose first slot is
 * `first`, on a grid of `warps`: pieces in rising order, the warp's slots
 * within each turn of P2PT_LINK_SLOTS pieces, then the next turn (where
 * the warps divide the slots, piece i + warps, as a plain stride). */
static __device__ __forceinline__ u32 next_piece(u32 i, u32 *s, u32 first, u32 warps)
{
    const u32 turn = i - *s; /* the turn's first piece */
    *s += warps;
    if (*s < P2PT_LINK_SLOTS)
        return turn + *s;
    *s = first;
    return turn + P2PT_LINK_SLOTS + first;
}

extern "C" __global__ void __launch_bounds__(P2PT_LINK_THREADS)
p2pt_link_copy(const __grid_constant__ struct p2pt_link_params p)
{
    pdl_launch_dependents();
    const bool host = (p.flags & P2PT_RING_HOST) != 0;
    const u32 lane = threadIdx.x & 31, warps = gridDim.x * WARPS;
    /* Slot s holds pieces s, s + P2PT_LINK_SLOTS, ...; this warp's slots
     * are its index, then every `warps` on (the host's grid has at most
     * P2PT_LINK_SLOTS warps; any beyond have none). */
    const u32 first = blockIdx.x * WARPS + threadIdx.x / 32;
    u32 s = first;
    u32 i = first < P2PT_LINK_SLOTS ? first : p.count;
    desc_t d = {0, 0, 0};
    if (!host)
        pdl_wait(); /* the stream's copy wrote the descriptors */
    if (i < p.count)
        d = p2pt_block_piece(p.descs, p.flags, p.layers, p.rows, i);
    if (host)
        pdl_wait();
    while (i < p.count) {
        const u32 next = next_piece(i, &s, first, warps);
        desc_t nd = {0, 0, 0};
        if (next < p.count)
            nd = p2pt_block_piece(p.descs, p.flags, p.layers, p.rows, next);
        copy_piece(d.dst, d.src, d.bytes, lane);
        d = nd;
        i = next;
    }
}
