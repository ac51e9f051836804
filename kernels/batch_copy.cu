/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt batch kernel: many pieces {dst, src, bytes} in one launch.
 *
 * Compiled at run time by NVRTC (src/jit/jit.c) with p2pt_kernel_abi.h (the
 * tile arithmetic the host uses too), tma_ptx.cuh and batch_tiles.cuh.
 *
 * The tiles, their copy and how the CTAs share a batch are in
 * batch_tiles.cuh; this file holds the entry points.
 *
 * Entry points:
 *   p2pt_batch_copy_s / _l  host descriptors, checked on the host, inline in
 *                           the parameters (up to 128 / 1344)
 *   p2pt_batch_copy_ring    host descriptors, checked on the host, in the
 *                           pinned staging ring: read there in place, each
 *                           block crossing the bus once (shared_block), or
 *                           (P2P_TRANSPORT_BATCH_STAGING=gpu) copied to GPU
 *                           memory by the stream first
 *   p2pt_batch_copy_dev     descriptors and their count in GPU memory, read
 *                           when the kernel runs; every descriptor is
 *                           checked against the registered windows in the
 *                           kernel and a refused one is skipped (not one of
 *                           its bytes is touched). CTA 0 writes the status
 *                           record; CTAs 1.. copy, and CTA 0 too after the
 *                           record where the grid is narrower than the SMs
 *                           and a descriptor a CTA or more (status_copies
 *                           and cta0_copies: a link-bound batch's few CTAs
 *                           each carry ~1/G of its bytes, and an SM left
 *                           idle would be 1/G of its rate; on the full grid
 *                           CTA 0 stays out so that no share starts late).
 *   p2pt_batch_expand       blocks moved by a mapping in GPU memory: the
 *                           mapping's rows and the layers become a device
 *                           batch's count and descriptors in its workspace,
 *                           for p2pt_batch_copy_dev launched behind it.
 *
 * Programmatic dependent launch as in tma_copy.cu: every CTA lets the
 * stream's next grid launch at once, and touches no global memory before
 * griddepcontrol.wait.
 */
#include "p2pt_kernel_abi.h"
#include "tma_ptx.cuh"
#include "batch_tiles.cuh"

#define STATUS_UNROLL 8

/* Host descriptors: this thread's descriptor of the CTA's first block. */
template <typename P> static __device__ void host_batch(const P &p)
{
    pdl_launch_dependents();
    const u32 blocks = (p.count + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK;
    const u32 b = blocks == 0 ? 0 : first_block(blockIdx.x, gridDim.x, blocks);
    const u32 i = b * P2PT_BATCH_BLOCK + threadIdx.x;
    desc_t pre = {0, 0, 0};
    if (i < p.count)
        pre = p.desc[i];
    const pieces from = {(u64)p.desc, 0, 0, 0};
    copy_all<FROM_PARAMS>(from, p.count, blockIdx.x, gridDim.x, false, nullptr, b, pre);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS, P2PT_BATCH_CTAS_PER_SM)
p2pt_batch_copy_s(const __grid_constant__ struct p2pt_batch_small p)
{
    host_batch(p);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS, P2PT_BATCH_CTAS_PER_SM)
p2pt_batch_copy_l(const __grid_constant__ struct p2pt_batch_large p)
{
    host_batch(p);
}

/* This thread's descriptor of block `b` read in place from the pinned ring,
 * the bus crossed once per block: the first of the CTAs serving `b`
 * (c == b: CTA c serves block c % blocks) copies the block to GPU memory
 * and publishes it; the others wait for it (the CTAs before them in the grid are launched first,
 * so the one they wait for runs). Ring memory is p2pt's and no earlier work
 * on the stream reads this slot, so all of it happens before the wait. */
static __device__ desc_t shared_block(const struct p2pt_batch_ring_params &p, u32 b, u32 c,
                                      u32 i)
{
    const desc_t *host = (const desc_t *)p.descs;
    desc_t *copy = (desc_t *)p.shared;
    unsigned long long *ready = (unsigned long long *)p.ready + b;
    desc_t d = {0, 0, 0};
    if (c == b) {
        if (i < p.count) {
            d = host[i];
            copy[i] = d;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(ready), "l"(p.seq)
                         : "memory");
        }
        return d;
    }
    if (threadIdx.x == 0) {
        unsigned long long v;
        for (;;) {
            asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(ready) : "memory");
            if (v == p.seq)
                break;
            __nanosleep(64);
        }
    }
    __syncthreads();
    if (i < p.count) { /* from L2: another SM wrote it */
        d.dst = __ldcg(&copy[i].dst);
        d.src = __ldcg(&copy[i].src);
        d.bytes = __ldcg(&copy[i].bytes);
    }
    return d;
}

/* Host descriptors the host checked into the staging ring
 * (src/engines/transport_tma_ring.c). Copied into GPU memory earlier on the
 * stream: read after the wait. Read from the pinned ring itself
 * (P2PT_RING_HOST): the host wrote them before the launch, so, like
 * parameters, they are planned while the previous grid drains. */
extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS, P2PT_BATCH_CTAS_PER_SM)
p2pt_batch_copy_ring(const __grid_constant__ struct p2pt_batch_ring_params p)
{
    pdl_launch_dependents();
    const bool host = (p.flags & P2PT_RING_HOST) != 0;
    if (!host)
        pdl_wait();
    const pieces P = {p.descs, p.flags, p.layers, p.rows};
    const u32 blocks = (p.count + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK;
    const u32 b = blocks == 0 ? 0 : first_block(blockIdx.x, gridDim.x, blocks);
    const u32 i = b * P2PT_BATCH_BLOCK + threadIdx.x;
    desc_t pre = {0, 0, 0};
    /* Blocks are a few bytes a piece: each CTA reads its own. */
    if (host && blocks != 0 && blocks < gridDim.x && (p.flags & P2PT_RING_BLOCKS) == 0)
        pre = shared_block(p, b, blockIdx.x, i);
    else if (i < p.count)
        pre = piece_at(P, i);
    if (host)
        copy_all<FROM_PARAMS>(P, p.count, blockIdx.x, gridDim.x, false, nullptr, b, pre);
    else
        copy_all<FROM_RING>(P, p.count, blockIdx.x, gridDim.x, false, nullptr, b, pre);
}

/* CTA 0 of a device batch: check every descriptor and write the status
 * record, while the other CTAs copy (and then copy the last share, with
 * status_copies). */
static __device__ void write_status(const struct p2pt_batch_dev_params &p, u32 seen, u32 n)
{
    __shared__ u32 skipped, first_bad, reasons;
    const desc_t *descs = (const desc_t *)p.descs;
    if (threadIdx.x == 0) {
        skipped = 0;
        first_bad = 0xffffffffu;
        reasons = 0;
    }
    copiers_sync();
    u32 my_skipped = 0, my_first = 0xffffffffu, my_reasons = 0;
    /* STATUS_UNROLL descriptors per thread in flight at once: one CTA reads
     * them all, and a round trip per descriptor would make it the last CTA
     * to finish by far. */
    for (u32 base = 0; base < n; base += STATUS_UNROLL * P2PT_BATCH_THREADS) {
        desc_t dd[STATUS_UNROLL];
#pragma unroll
        for (int k = 0; k < STATUS_UNROLL; k++) {
            const u32 i = base + k * P2PT_BATCH_THREADS + threadIdx.x;
            dd[k] = i < n ? descs[i] : desc_t{0, 0, 0};
        }
#pragma unroll
        for (int k = 0; k < STATUS_UNROLL; k++) {
            const u32 i = base + k * P2PT_BATCH_THREADS + threadIdx.x;
            const u32 why = refuse(dd[k].dst, dd[k].src, dd[k].bytes, p);
            if (why != 0) {
                my_skipped++;
                my_first = my_first < i ? my_first : i;
                my_reasons |= why;
            }
        }
    }
    if (my_skipped != 0) {
        atomicAdd(&skipped, my_skipped);
        atomicMin(&first_bad, my_first);
        atomicOr(&reasons, my_reasons);
    }
    copiers_sync();
    if (threadIdx.x == 0) {
        struct p2pt_batch_status_record *st = (struct p2pt_batch_status_record *)p.workspace;
        st->count = seen;
        st->skipped = skipped + (seen - n);
        st->copied = n - skipped;
        st->first_bad = first_bad != 0xffffffffu ? first_bad : seen > n ? n : 0xffffffffu;
        st->reasons = reasons | (seen > n ? P2PT_BATCH_SKIPPED_OVER_MAX : 0u);
    }
}

/* Whether CTA 0 copies too, after the status record, in a batch of `n`
 * descriptors: where the grid is narrower than the SMs (status_copies) and
 * there is at least a descriptor a CTA. With fewer, its place would get
 * no tile, and its pass over the descriptors would only delay the end of
 * the batch and its signal (a count exchange of a few pieces). */
static __device__ __forceinline__ bool cta0_copies(const struct p2pt_batch_dev_params &p, u32 n)
{
    return p.status_copies && n >= gridDim.x;
}

/* The copy CTAs, G, and this one's place among them, c: CTAs 1.. are
 * 0..; CTA 0, busy with the status record first, takes the last place
 * where it copies. */
static __device__ __forceinline__ void copier(bool cta0, u32 *G, u32 *c)
{
    *G = gridDim.x - (cta0 ? 0 : 1);
    *c = blockIdx.x == 0 ? *G - 1 : blockIdx.x - 1;
}

/* `share` added to semaphore `mark` of each of the batch's runs. After the
 * caller's fence.acq_rel.sys a relaxed atomic at system scope is a release
 * (the PTX memory model's release pattern); red.release.sys would issue a
 * fence of its own for each run. */
static __device__ __forceinline__ void add_share(const struct p2pt_batch_dev_params &p, u32 mark,
                                                 unsigned long long share)
{
    const unsigned long long at = (unsigned long long)mark * sizeof(struct p2pt_semaphore);
    for (u32 s = 0; s < p.n_signals; s++)
        asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p.signal[s] + at),
                     "l"(share)
                     : "memory");
}

/*
 * The batch's signals (p2pt_copy_batch_device_signal_async): one signal is
 * 2^32 of a semaphore's value (kernels/signal.cu), and each CTA adds its
 * share of it to every semaphore once its threads are done, so a waiter
 * sees the whole signal exactly when every CTA has finished, with no
 * counter of arrivals to keep between launches. The barrier makes the
 * CTA's writes (its status record, its pieces) happen before thread 0's
 * fence, and the fence, cumulative, orders them before the release at
 * system scope that the waiter's acquire reads. (A batch in parts
 * signals from a warp of its own: signal_parts.)
 */
static __device__ void signal_share(const struct p2pt_batch_dev_params &p)
{
    const unsigned long long share = p2pt_cta_share();
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    asm volatile("fence.acq_rel.sys;" ::: "memory");
    add_share(p, 0, share);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS, P2PT_BATCH_CTAS_PER_SM)
p2pt_batch_copy_dev(const __grid_constant__ struct p2pt_batch_dev_params p)
{
    TRACE(0);
    pdl_launch_dependents();
    pdl_wait();
    TRACE(1);
    const desc_t *descs = (const desc_t *)p.descs;
    /* Read this thread's descriptor of the block it would serve if the
     * count were max_count together with the count itself: one round trip
     * instead of two whenever the count fills max_count's blocks alike. */
    u32 G, c;
    copier(cta0_copies(p, p.max_count), &G, &c);
    const u32 max_blocks = (p.max_count + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK;
    const u32 pre_block = blockIdx.x == 0 ? NO_BLOCK : first_block(c, G, max_blocks);
    const u32 i = pre_block * P2PT_BATCH_BLOCK + threadIdx.x;
    desc_t pre = {0, 0, 0};
    if (blockIdx.x != 0 && i < p.max_count)
        pre = descs[i];
    /* One read of the count for the whole CTA: threads that read it apart
     * while another stream (or the batch itself) changes it would take
     * different shares and part ways at a barrier, a hang. */
    __shared__ u32 count_read;
    if (threadIdx.x == 0)
        count_read = *(const volatile u32 *)p.count;
    __syncthreads();
    const u32 seen = count_read;
    const u32 n = seen < p.max_count ? seen : p.max_count;
    /* The places again for the count read (pre holds block pre_block's
     * descriptors whatever they are; copy_block uses it only there). */
    const bool cta0 = cta0_copies(p, n);
    copier(cta0, &G, &c);
    if (blockIdx.x == 0)
        write_status(p, seen, n);
    if (blockIdx.x != 0 || cta0)
        copy_all<FROM_DEVICE>(pieces{p.descs, 0, 0, 0}, n, c, G, false, &p, pre_block, pre);
#ifdef BATCH_TRACE
    __syncthreads(); /* every warp's last tile */
    TRACE(3);
#endif
    if (p.n_signals != 0)
        signal_share(p);
}

/*
 * The marks entry's signalling warp: part j's share of its signal once
 * the copying threads have passed part j (`done`, which their thread 0
 * raises after their barrier), while they read the next part's
 * descriptors. So the fence, which waits for the SM's writes in flight
 * across the link to land, holds this warp alone, and the copying warps
 * store again once it has completed (`fenced_parts`, wait_fenced), so
 * that their new stores do not hold it. Parts found done together share
 * one fence. The
 * copiers' barrier makes their writes of part j happen before thread 0's
 * release, which this lane's acquire reads; the fence, cumulative, orders
 * them before the releases at system scope (signal_share's argument).
 */
static __device__ void signal_parts(const struct p2pt_batch_dev_params &p, u32 K, const u32 *done)
{
    const unsigned long long share = p2pt_cta_share();
    if ((threadIdx.x & 31) != 0)
        return;
    for (u32 j = 0; j < K;) {
        const u32 d = smem_wait_at_least<100>(done, j + 1);
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        smem_release(&fenced_parts, d);
        for (; j < d; j++)
            add_share(p, j, share);
    }
}

/*
 * A device batch in p.n_marks parts (p2pt_copy_batch_device_marks_async):
 * part j is pieces [j * max_count / K, (j + 1) * max_count / K) of those
 * under the count, which every copy CTA walks as a batch of its own before
 * its share of part j's signal (to semaphore j of each destination's run).
 * No CTA waits for another between parts, and the parts land about in
 * order: a receiver reads part j while the later ones travel.
 * P2PT_BATCH_MARKS_THREADS: the copying threads and a warp that signals
 * (signal_parts), so the copying warps read part j + 1's descriptors
 * while part j's fence completes, and wait for it only before they store
 * (wait_fenced). An entry of its own, one CTA an SM: copy_all
 * inside the loop over the parts needs registers that two CTAs an SM
 * would spill, and the plain batch above keeps its code. A batch across
 * NVLink on a grid narrower than the SMs, of more than one block, comes
 * here too, in one part (n_marks 1), for its equal shares
 * (p.equal_shares): both ways of sharing in one entry need registers that
 * two CTAs an SM would spill.
 */
extern "C" __global__ void __launch_bounds__(P2PT_BATCH_MARKS_THREADS, 1)
p2pt_batch_copy_marks(const __grid_constant__ struct p2pt_batch_dev_params p)
{
    __shared__ u32 done; /* parts the copying threads have passed */
    pdl_launch_dependents();
    pdl_wait();
    const u32 K = p.n_marks > 1 ? p.n_marks : 1;
    if (threadIdx.x == 0) {
        done = 0;
        fenced_parts = 0;
    }
    __syncthreads();
    if (threadIdx.x >= P2PT_BATCH_THREADS) {
        if (p.n_signals != 0)
            signal_parts(p, K, &done);
        return;
    }
    /* One read of the count for the copying threads (p2pt_batch_copy_dev
     * says why). */
    __shared__ u32 count_read;
    if (threadIdx.x == 0)
        count_read = *(const volatile u32 *)p.count;
    copiers_sync();
    const u32 seen = count_read;
    const u32 n = seen < p.max_count ? seen : p.max_count;
    const bool cta0 = cta0_copies(p, n);
    u32 G, c;
    copier(cta0, &G, &c);
    if (blockIdx.x == 0)
        write_status(p, seen, n);
    for (u32 j = 0; j < K; j++) {
        const u32 lo = (u32)((u64)j * p.max_count / K);
        const u32 end = (u32)((u64)(j + 1) * p.max_count / K);
        const u32 hi = end < n ? end : n;
        if ((blockIdx.x != 0 || cta0) && lo < hi) {
            copy_all<FROM_DEVICE>(pieces{p.descs + (u64)lo * sizeof(desc_t), 0, 0, 0}, hi - lo, c,
                                  G, p.equal_shares != 0, &p, NO_BLOCK, desc_t{0, 0, 0},
                                  p.n_signals != 0 ? j : 0);
        }
        if (p.n_signals != 0) {
            copiers_sync();
            if (threadIdx.x == 0)
                smem_release(&done, j + 1);
        }
    }
}

/* The pieces of blocks moved by a mapping in GPU memory
 * (p2pt_copy_blocks_device_async), written where the device batch launched
 * behind this kernel reads them: piece i of this launch (row i % pairs of
 * layer i / pairs) is descriptor first_layer * pairs + i of the workspace.
 * An id outside its layer makes a piece of NULL addresses, which the batch
 * skips as outside every window and reports by its index, so the ids need
 * no check of their own and nothing outside a layer is ever written.
 * Earlier work on the stream writes the mapping and may still read the
 * workspace: nothing is touched before the wait. Layer-major order: the
 * threads of a warp read consecutive rows and write consecutive
 * descriptors. */
extern "C" __global__ void __launch_bounds__(P2PT_EXPAND_THREADS)
p2pt_batch_expand(const __grid_constant__ struct p2pt_expand_params p)
{
    pdl_launch_dependents();
    pdl_wait();
    struct p2pt_blocks_ws_head *head = (struct p2pt_blocks_ws_head *)p.workspace;
    if (p.first_layer == 0 && blockIdx.x == 0) {
        /* Every word of the head defined: the status record's reserved
         * words stay 0, the batch writes the rest. */
        unsigned int *w = (unsigned int *)head;
        const u32 words = sizeof(struct p2pt_blocks_ws_head) / 4;
        const u32 at_count = (u32)(&head->count - w);
        if (threadIdx.x < words)
            w[threadIdx.x] = threadIdx.x == at_count ? p.pieces : 0u;
    }
    desc_t *out = (desc_t *)(head + 1) + (u64)p.first_layer * p.pairs;
    const long long *map = (const long long *)p.mapping;
    const u64 n = (u64)p.n_layers * p.pairs, step = (u64)gridDim.x * blockDim.x;
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const u32 l = (u32)(i / p.pairs), r = (u32)(i - (u64)l * p.pairs);
        const long long s = map[2 * (u64)r], d = map[2 * (u64)r + 1];
        const struct p2pt_expand_layer &L = p.layer[l];
        const bool in = s >= 0 && (u64)s < L.src_blocks && d >= 0 && (u64)d < L.dst_blocks;
        desc_t o;
        o.dst = in ? L.dst + (u64)d * L.bytes : 0ull;
        o.src = in ? L.src + (u64)s * L.bytes : 0ull;
        o.bytes = L.bytes;
        out[i] = o;
    }
}
