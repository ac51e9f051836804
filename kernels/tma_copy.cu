/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt TMA copy kernel: global -> shared -> global with cp.async.bulk.
 *
 * Compiled at run time by NVRTC (src/jit/jit.c), so it includes nothing but
 * p2pt_kernel_abi.h (the constants it shares with the host) and
 * tma_ptx.cuh (the PTX helpers), both handed to NVRTC in memory: plain CUDA
 * C++ and inline PTX. One launch moves a whole copy, whatever its size:
 *
 *   - the host plans the copy (src/plans/chunk_plan.c): an unaligned head (< 16
 *     bytes), a 16-byte aligned body cut into `chunk`-byte chunks (the last
 *     one shorter), and a tail (< 16 bytes);
 *   - a persistent grid: CTA b takes chunks b, b + G, b + 2G, ... so that
 *     neighbouring CTAs stream neighbouring memory (large local copies go
 *     to stream_copy.cu instead);
 *   - in each CTA one elected thread drives a ring of `stages` shared-memory
 *     buffers: a bulk load fills a stage and completes on that stage's
 *     mbarrier (transaction count = chunk bytes); a bulk store drains it; a
 *     stage is refilled only after cp.async.bulk.wait_group.read says the
 *     store that read it is done reading. Loads of later chunks overlap the
 *     stores of earlier ones;
 *   - head and tail bytes are moved by plain loads and stores of CTA 0 and of
 *     the last CTA, in the same launch;
 *   - programmatic dependent launch: src/engines/transport_tma.c launches with
 *     CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (unless
 *     P2P_TRANSPORT_PDL=0). Every CTA lets the stream's next grid launch at
 *     once (launch_dependents), so back-to-back copies do not pay the launch
 *     gap between grids, and nothing touches global memory before
 *     griddepcontrol.wait, which returns once the previous grid in the
 *     stream has completed and its writes are visible. Launched without the
 *     attribute, both instructions are no-ops.
 *
 * Requires sm_90 (Hopper) or newer. dst and src may be on different GPUs
 * (unified addresses, mapped in the launching context).
 */

#include "p2pt_kernel_abi.h"

#include "tma_ptx.cuh"

extern "C" __global__ void __launch_bounds__(P2PT_TMA_THREADS)
p2pt_tma_copy(char *dst, const char *src, u64 head, u64 body, u64 tail, u64 chunks,
              u32 chunk, u32 stages, u32 flags)
{
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) u64 bars[P2PT_MAX_STAGES];
    /* This CTA's chunks: n of them, local chunk k being global chunk
     * first + k * step (src/plans/chunk_plan.c's p2pt__chunk_at for that index). */
    const u64 step = gridDim.x;
    const u64 first = blockIdx.x;
    const u64 n = first >= chunks ? 0 : (chunks - first + step - 1) / step;
    const bool issuer = threadIdx.x == 0 && n > 0;
    const u32 bar0 = smem_u32(bars);
    const u32 ring0 = smem_u32(ring);

    pdl_launch_dependents();
    /* Shared-memory set-up overlaps the previous grid's tail. */
    if (issuer) {
        for (u32 s = 0; s < stages; s++)
            mbar_init(bar0 + 8 * s, 1);
        mbar_init_fence();
    }
    /* No global access before this line: the previous copy in the stream
     * may still be writing what this one reads. */
    pdl_wait();

    /* Plain bytes: the unaligned head by CTA 0, the tail by the last CTA. */
    if (blockIdx.x == 0 && threadIdx.x < head)
        dst[threadIdx.x] = src[threadIdx.x];
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x < tail) {
        u64 o = head + body + threadIdx.x;
        dst[o] = src[o];
    }
    if (!issuer)
        return;

    const bool hint = (flags & P2PT_FLAG_EVICT_FIRST) != 0;
    const u64 policy = hint ? evict_first_policy() : 0;

    char *const body_dst = dst + head;
    const char *const body_src = src + head;

#define CHUNK_OFF(k) ((first + (u64)(k) * step) * (u64)chunk)
#define CHUNK_LEN(k) ((u32)(body - CHUNK_OFF(k) < chunk ? body - CHUNK_OFF(k) : chunk))
#define LOAD(k, s)                                                             \
    do {                                                                       \
        mbar_expect_tx(bar0 + 8 * (s), CHUNK_LEN(k));                          \
        bulk_load(ring0 + (s) * chunk, body_src + CHUNK_OFF(k), CHUNK_LEN(k),  \
                  bar0 + 8 * (s), hint, policy);                               \
    } while (0)

    const u64 prologue = n < stages ? n : stages;
    for (u64 k = 0; k < prologue; k++)
        LOAD(k, (u32)k);

    for (u64 k = 0; k < n; k++) {
        const u32 s = (u32)(k % stages);
        mbar_wait(bar0 + 8 * s, (u32)((k / stages) & 1));
        bulk_store(body_dst + CHUNK_OFF(k), ring0 + s * chunk, CHUNK_LEN(k), hint, policy);
        if (stages == 1) {
            /* The only stage is being read by store k: wait for it. */
            if (k + 1 < n) {
                bulk_wait_read<0>();
                LOAD(k + 1, 0u);
            }
        } else if (k >= 1 && k - 1 + stages < n) {
            /* Refill the stage store k-1 read, once it is done reading;
             * store k may still be reading its own stage. */
            bulk_wait_read<1>();
            LOAD(k - 1 + stages, (u32)((k - 1) % stages));
        }
    }
    /* Shared memory must outlive every bulk store reading it. */
    bulk_wait_all();
#undef LOAD
#undef CHUNK_LEN
#undef CHUNK_OFF
}
