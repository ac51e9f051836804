/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch kernel's tiles (batch_copy.cu's entries run them): a piece cut
 * into tiles, a tile's copy by one warp, and the copy CTAs' shares of a
 * batch (copy_all). Handed to NVRTC in memory with every kernel
 * (src/jit/jit.c), included by batch_copy.cu alone. With them, what a
 * tile's copy waits on: the marks entry's counts in shared memory and the
 * copying warps' wait for a part's fence (copy_block takes the gate).
 *
 * Why this shape: a batch is bound by how many bytes are in flight, not by
 * how they are issued. Every warp moves one tile (up to 8 KiB of a piece) at
 * a time with all its 16-byte loads issued before its first store, and a
 * CTA keeps 8 warps at it, so each SM holds over 100 KiB in flight whatever
 * the piece sizes; a single issuing thread per CTA (bulk copies) cannot.
 * Tiles of 4 KiB or less go two at a time: the next one's loads are issued
 * before the previous one's stores (load_small and the loop in copy_block).
 *
 * Mapping work without a global prefix sum: the descriptors are cut into
 * blocks of P2PT_BATCH_BLOCK. Mostly by whole blocks: with G copy CTAs
 * and `nb` blocks, CTA c serves block c % nb and is one of the ~G / nb
 * CTAs that split that block's tiles (with more blocks than CTAs, a CTA
 * walks nb / G consecutive blocks of its own, then the CTAs share the
 * last nb % G; its own blocks it plans P2PT_BATCH_TURN_BLOCKS at a time,
 * a turn). A device batch of more than one block across NVLink on a
 * narrow grid by equal shares: CTA c takes n / G of the pieces, and of a
 * block it shares the same fraction of its tiles (copy_all says why).
 * Each CTA reads a turn's descriptors (one a thread a block), scans their
 * tile counts in shared memory, and its warps take the tiles of its range
 * in turn, finding each tile's piece by a search in shared memory, first
 * among the pieces after the warp's last one (piece_of).
 * So a 1 MiB piece is spread over every SM, thousands of 2 KiB pieces are
 * packed a few per warp, and the only cost of the mapping is one read of
 * a descriptor block per CTA (two where an equal share crosses a block's
 * end).
 *
 * A piece whose source is not co-aligned with its destination (dst and src
 * differ modulo 16) is moved with the same aligned 16-byte stores: each lane
 * loads the aligned source vector under its destination vector, takes the
 * next one from its neighbour lane (a shuffle), and funnel-shifts the pair.
 * No byte loops except the < 16 unaligned head and tail bytes of a piece.
 */
#ifndef P2PT_BATCH_TILES_CUH
#define P2PT_BATCH_TILES_CUH

#include "p2pt_kernel_abi.h"
#include "tma_ptx.cuh"

#define TILE_VECS (P2PT_BATCH_TILE / 16)
#define PER_LANE (TILE_VECS / 32)
#define WARPS (P2PT_BATCH_THREADS / 32)
#define FULL 0xffffffffu

typedef struct p2pt_batch_desc desc_t;

/* A barrier of the copying threads alone (named barrier 1): every entry's
 * CTA is its P2PT_BATCH_THREADS, but for the marks entry's signalling warp,
 * which never waits on it. */
static __device__ __forceinline__ void copiers_sync()
{
    asm volatile("bar.sync 1, %0;" ::"n"(P2PT_BATCH_THREADS) : "memory");
}

/* The marks entry's counts in shared memory between its copying warps and
 * its signalling warp, read and raised by atomics at CTA scope:
 * compute-sanitizer's racecheck takes a plain acquire load and release
 * store of shared memory for a race. */
static __device__ __forceinline__ u32 smem_acquire(const u32 *x)
{
    u32 v;
    asm volatile("atom.acquire.cta.shared.or.b32 %0, [%1], 0;"
                 : "=r"(v)
                 : "r"(smem_u32(x))
                 : "memory");
    return v;
}

static __device__ __forceinline__ void smem_release(u32 *x, u32 v)
{
    asm volatile("atom.release.cta.shared.exch.b32 _, [%0], %1;" ::"r"(smem_u32(x)), "r"(v)
                 : "memory");
}

/* Spins until *x is at least v, a nap of `ns` between reads, and returns
 * what it read: the copying warps' wait for a fence and the signalling
 * warp's wait for a part (wait_fenced, signal_parts). */
template <unsigned ns>
static __device__ __forceinline__ u32 smem_wait_at_least(const u32 *x, u32 v)
{
    u32 d;
    while ((d = smem_acquire(x)) < v)
        __nanosleep(ns);
    return d;
}

/* The marks entry: the parts whose fence the signalling warp has completed
 * (signal_parts). */
__shared__ u32 fenced_parts;

/* Each copying warp waits until parts 0 .. gate - 1 are fenced (gate 0:
 * no wait), before its first store of part `gate`: a fence at system scope
 * waits for the SM's stores still in flight, the later ones too, so stores
 * issued during it hold it until they land, and with them the part's
 * signal (at two ranks the first of 8 parts' came 93-196 us into a batch
 * of ~190, bench/results/peer.md 5y). Performance only: ordering needs no
 * gate. */
static __device__ __forceinline__ void wait_fenced(u32 gate)
{
    if (gate == 0)
        return;
    if ((threadIdx.x & 31) == 0)
        smem_wait_at_least<32>(&fenced_parts, gate);
    __syncwarp();
}

/* bench/experiments/batch_trace.cu: with BATCH_TRACE, thread 0 of each CTA
 * writes the global timer at point `at` (0 entry, 1 after the wait for the
 * previous grid, 2 its first block planned, 3 its last tile done) and its
 * SM (4) into p2pt_batch_trace[5 * CTA + at]. Never built by the library. */
#ifdef BATCH_TRACE
__device__ unsigned long long *p2pt_batch_trace;
static __device__ __forceinline__ void trace_at(int at)
{
    unsigned long long t;
    if (threadIdx.x != 0 || p2pt_batch_trace == nullptr)
        return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    p2pt_batch_trace[5 * blockIdx.x + at] = t;
    if (at == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        p2pt_batch_trace[5 * blockIdx.x + 4] = sm;
    }
}
#define TRACE(at) trace_at(at)
#else
#define TRACE(at) ((void)0)
#endif

/* The cache operators of the tile copies (streaming: every byte is used
 * once); bench/experiments/batch_variants.cu compares others. */
#if defined(BATCH_LD_PLAIN)
#define BATCH_LD "ld.global.v4.u32"
#elif defined(BATCH_LD_NC)
#define BATCH_LD "ld.global.nc.v4.u32"
#else
#define BATCH_LD "ld.global.cs.v4.u32"
#endif
#if defined(BATCH_ST_PLAIN)
#define BATCH_ST "st.global.v4.u32"
#else
#define BATCH_ST "st.global.cs.v4.u32"
#endif

static __device__ __forceinline__ int4 ld16(const int4 *p)
{
    int4 v;
    asm volatile(BATCH_LD " {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

static __device__ __forceinline__ void st16(int4 *p, const int4 v)
{
    asm volatile(BATCH_ST " [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}

static __device__ __forceinline__ int4 shfl16(const int4 v, u32 lane)
{
    int4 r;
    r.x = __shfl_sync(FULL, v.x, lane);
    r.y = __shfl_sync(FULL, v.y, lane);
    r.z = __shfl_sync(FULL, v.z, lane);
    r.w = __shfl_sync(FULL, v.w, lane);
    return r;
}

static __device__ __forceinline__ u32 fs(int lo, int hi, u32 s)
{
    return __funnelshift_r((u32)lo, (u32)hi, s);
}

/* Bytes [r, r + 16) of the 32 bytes a:b, r in 1..15, with the word index
 * r / 4 a constant in each branch so that nothing goes to local memory. */
static __device__ __forceinline__ int4 shift16(const int4 a, const int4 b, u32 r)
{
    const u32 s = 8 * (r & 3);
    int4 o;
    switch (r >> 2) {
    case 0:
        o.x = fs(a.x, a.y, s); o.y = fs(a.y, a.z, s); o.z = fs(a.z, a.w, s); o.w = fs(a.w, b.x, s);
        break;
    case 1:
        o.x = fs(a.y, a.z, s); o.y = fs(a.z, a.w, s); o.z = fs(a.w, b.x, s); o.w = fs(b.x, b.y, s);
        break;
    case 2:
        o.x = fs(a.z, a.w, s); o.y = fs(a.w, b.x, s); o.z = fs(b.x, b.y, s); o.w = fs(b.y, b.z, s);
        break;
    default:
        o.x = fs(a.w, b.x, s); o.y = fs(b.x, b.y, s); o.z = fs(b.y, b.z, s); o.w = fs(b.z, b.w, s);
        break;
    }
    return o;
}

/* Tile k's bytes outside the aligned body of piece {d, s, n}: the head
 * before it (tile 0) and the tail after it (the last tile), a byte a lane. */
static __device__ __forceinline__ void copy_edges(u64 d, u64 s, u64 n, u64 k, u32 lane)
{
    const u64 h = P2PT_BATCH_HEAD(d, n);
    const u64 nv = P2PT_BATCH_BODY(d, n) / 16;
    char *dp = (char *)d;
    const char *sp = (const char *)s;
    if (k == 0 && lane < h)
        dp[lane] = sp[lane];
    const u64 tail_at = h + 16 * nv;
    const u64 last = nv == 0 ? 0 : (nv - 1) / TILE_VECS;
    if (k == last && tail_at + lane < n)
        dp[tail_at + lane] = sp[tail_at + lane];
}

/* Vectors j < N of this lane (lane + 32 j < left) between memory and the
 * registers a[H + j]: every load of a tile is issued before its first
 * store by calling ld_vecs, then st_vecs. */
template <int H, int N>
static __device__ __forceinline__ void ld_vecs(const int4 *sv, int left, u32 lane,
                                               int4 (&a)[PER_LANE])
{
#pragma unroll
    for (int j = 0; j < N; j++)
        if ((int)lane + 32 * j < left)
            a[H + j] = ld16(sv + 32 * j);
}

template <int H, int N>
static __device__ __forceinline__ void st_vecs(int4 *dv, int left, u32 lane,
                                               const int4 (&a)[PER_LANE])
{
#pragma unroll
    for (int j = 0; j < N; j++)
        if ((int)lane + 32 * j < left)
            st16(dv + 32 * j, a[H + j]);
}

/*
 * Tile k of piece {d, s, n}, by one whole warp (every lane calls it with the
 * same arguments: the shuffles need all 32), through the warp's registers
 * `a`. Of the aligned body's destination vectors, the tile holds
 * v0 = k * TILE_VECS and the `left` after it (at most TILE_VECS); lane L
 * takes v0 + L + 32 j. The edge bytes move first (moved after the loads,
 * they made ptxas spill registers in some entry points).
 */
static __device__ __forceinline__ void copy_tile(u64 d, u64 s, u64 n, u64 k, u32 lane,
                                                 int4 (&a)[PER_LANE])
{
    const u64 h = P2PT_BATCH_HEAD(d, n);
    const u64 nv = P2PT_BATCH_BODY(d, n) / 16;
    char *dp = (char *)d;
    const char *sp = (const char *)s;
    copy_edges(d, s, n, k, lane);
    const u64 v0 = k * TILE_VECS;
    if (v0 >= nv)
        return;
    /* Vectors this lane may take: lane + 32 j < left. Pointers are formed
     * once per lane, so the unrolled accesses differ by constant offsets. */
    const u64 left64 = nv - v0;
    const int left = left64 < TILE_VECS ? (int)left64 : TILE_VECS;
    int4 *dv = (int4 *)(dp + h) + v0 + lane;
    const u32 r = (u32)((s + h) & 15);
    if (r == 0) {
        ld_vecs<0, PER_LANE>((const int4 *)(sp + h) + v0 + lane, left, lane, a);
        st_vecs<0, PER_LANE>(dv, left, lane, a);
        return;
    }
    /* Not co-aligned: destination vector v takes source bytes from the
     * aligned source vectors v and v + 1. Source vectors up to `left`
     * inclusive each hold bytes of the piece, so each is read. */
    const int4 *sa = (const int4 *)((s + h) & ~15ull) + v0 + lane;
    const int4 zero = make_int4(0, 0, 0, 0);
#pragma unroll
    for (int j = 0; j < PER_LANE; j++)
        a[j] = (int)lane + 32 * j <= left ? ld16(sa + 32 * j) : zero;
    /* The vector after this tile's last, for lane 31's last store. */
    const int4 extra = lane == 0 && TILE_VECS <= left ? ld16(sa + TILE_VECS) : zero;
    const u32 up = (lane + 1) & 31;
#pragma unroll
    for (int j = 0; j < PER_LANE; j++) {
        const int4 same = shfl16(a[j], up);
        const int4 wrap = shfl16(j + 1 < PER_LANE ? a[j + 1 < PER_LANE ? j + 1 : j] : extra, 0);
        if ((int)lane + 32 * j < left)
            st16(dv + 32 * j, shift16(a[j], lane == 31 ? wrap : same, r));
    }
}

/*
 * Small tiles two at a time: a co-aligned tile of at most half a tile's
 * vectors (4 KiB) is loaded into one half of the warp's registers while
 * the previous one, in the other half, waits for its stores, which follow
 * the new loads. So a warp on 2 KiB pieces keeps two pieces' loads in
 * flight and never waits with nothing outstanding.
 */
#define HALF (PER_LANE / 2)

/* Whether tile k of piece {d, s, n} is small (as above). */
static __device__ __forceinline__ bool small_tile(u64 d, u64 s, u64 n, u64 k)
{
    const u64 h = P2PT_BATCH_HEAD(d, n);
    const u64 nv = P2PT_BATCH_BODY(d, n) / 16, v0 = k * TILE_VECS;
    return v0 < nv && nv - v0 <= 32 * HALF && ((s + h) & 15) == 0;
}

/* Small tile k of piece {d, s, n} loaded into the half of `a` at H (its
 * edge bytes moved meanwhile); its stores are left to st_vecs<H, HALF>,
 * to which *pd and *pl say where (this lane's first destination vector)
 * and how many vectors. */
template <int H>
static __device__ __forceinline__ void load_small(u64 d, u64 s, u64 n, u64 k, u32 lane,
                                                  int4 (&a)[PER_LANE], int4 **pd, int *pl)
{
    const u64 h = P2PT_BATCH_HEAD(d, n);
    const u64 v0 = k * TILE_VECS;
    const int left = (int)(P2PT_BATCH_BODY(d, n) / 16 - v0);
    ld_vecs<H, HALF>((const int4 *)((const char *)s + h) + v0 + lane, left, lane, a);
    copy_edges(d, s, n, k, lane);
    *pd = (int4 *)((char *)d + h) + v0 + lane;
    *pl = left;
}

/* Whole blocks a CTA plans at once where it walks several in a row (a
 * turn, copy_all): between turns its warps meet at a barrier and wait for
 * the next descriptors and their scan with nothing in flight, so fewer,
 * longer turns keep a narrow grid's few CTAs busier (2 KiB pieces on 8
 * CTAs 7-8 % faster with 2, 9 % with 4; 4 KiB pieces toward the host on
 * 3 CTAs 0.86-0.88 -> 0.89-0.90 of the contiguous copy). Not 4: with its
 * 33 KiB of shared memory a CTA, a GEMM beside 16 and 64 KiB pieces toward
 * the host slowed ~0.02 more (bench/results/batches.md, "Turns of two
 * blocks"). */
#ifndef P2PT_BATCH_TURN_BLOCKS
#define P2PT_BATCH_TURN_BLOCKS 2
#endif
#define TURN (P2PT_BATCH_TURN_BLOCKS * P2PT_BATCH_BLOCK)

/* The descriptors of one turn (up to P2PT_BATCH_TURN_BLOCKS blocks), their
 * tile counts scanned. */
struct block_smem {
    u64 dst[TURN], src[TURN], bytes[TURN];
    u64 begin[TURN];
    u64 warp_sum[2][WARPS]; /* by block parity: a warp may scan the next block while
                               another still adds up this one's totals */
};

/* Why descriptor {dst, src, bytes} may not be copied (0: it may). */
static __device__ u32 refuse(u64 dst, u64 src, u64 bytes, const struct p2pt_batch_dev_params &p)
{
    if (bytes == 0)
        return 0; /* nothing is touched */
    if (bytes > 0xffffffffull || dst + bytes < dst || src + bytes < src)
        return P2PT_BATCH_SKIPPED_TOO_LARGE;
    bool dst_in = false, src_in = false;
    for (u32 w = 0; w < p.n_windows; w++) {
        const u64 b = p.window[w].base, end = p.window[w].end;
        dst_in = dst_in || (dst >= b && dst + bytes <= end);
        src_in = src_in || (src >= b && src + bytes <= end);
    }
    if (!dst_in || !src_in)
        return P2PT_BATCH_SKIPPED_WINDOW;
    if (dst < src + bytes && src < dst + bytes)
        return P2PT_BATCH_SKIPPED_OVERLAP;
    return 0;
}

/* Exclusive scan of one value per thread over the CTA; returns the prefix.
 * After the caller's next barrier S.warp_sum[h] holds each warp's total. */
static __device__ u64 block_scan(u64 x, block_smem &S, u32 h)
{
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5;
    u64 inc = x;
#pragma unroll
    for (u32 o = 1; o < 32; o <<= 1) {
        const u64 y = __shfl_up_sync(FULL, inc, o);
        if (lane >= o)
            inc += y;
    }
    if (lane == 31)
        S.warp_sum[h][w] = inc;
    copiers_sync();
    u64 before = 0;
    for (u32 i = 0; i < w; i++)
        before += S.warp_sum[h][i];
    return before + inc - x;
}


/* The last piece of a turn whose first tile is <= g, searched from piece
 * `lo` on (a warp's tiles only grow): first among the `win` pieces from
 * lo, where a warp's next tile mostly lies (it is `step` tiles on), else
 * among all the rest. Searched over a whole turn of four blocks at once,
 * 2 KiB pieces on 8 CTAs were 7 % slower than with one-block turns; with
 * the window, 9 % faster (bench/results/batches.md). */
static __device__ __forceinline__ u32 piece_of(const block_smem &S, u64 g, u32 lo, u32 nb,
                                               u32 win)
{
    u32 hi_piece = nb;
    if (nb - lo > win) {
        hi_piece = lo + win;
        if (S.begin[hi_piece - 1] <= g) {
            lo = hi_piece - 1;
            hi_piece = nb;
        }
    }
    while (hi_piece - lo > 1) {
        const u32 mid = (lo + hi_piece) / 2;
        if (S.begin[mid] <= g)
            lo = mid;
        else
            hi_piece = mid;
    }
    return lo;
}

/* Where a launch's descriptors come from. FROM_PARAMS: written by the host
 * before the launch (kernel parameters, or the pinned staging ring read in
 * place), so planned before the wait; FROM_RING: copied into GPU memory by
 * the stream; FROM_DEVICE: written by earlier work, checked here. */
enum { FROM_PARAMS, FROM_RING, FROM_DEVICE };

/* A launch's pieces: descriptors, or blocks made here (P2PT_RING_BLOCKS,
 * p2pt_block_piece in p2pt_kernel_abi.h). */
struct pieces {
    u64 descs;
    u32 flags;
    u64 layers, rows;
};

static __device__ __forceinline__ desc_t piece_at(const pieces &P, u32 i)
{
    return p2pt_block_piece(P.descs, P.flags, P.layers, P.rows, i);
}

/*
 * Blocks b .. b + kb - 1 of the descriptors at `descs` (a generic address:
 * kernel parameters or GPU memory), `n` of them in all: read, check
 * (device descriptors), scan, then copy split `split` of `splits` of their
 * tiles. This thread's descriptor of block `pre_block` is already in S
 * at its place (copy_all; any other block is read here). Host
 * descriptors are kernel parameters, which no earlier grid writes: their
 * CTAs plan while the previous grid drains and wait for it
 * (griddepcontrol.wait) only before the first copy.
 */
template <int FROM>
static __device__ void copy_block(const pieces &P, u32 n, u32 b, u32 kb, u32 split, u32 splits,
                                  u64 u0, u64 u1, u32 per, const struct p2pt_batch_dev_params *p,
                                  block_smem &S, u32 pre_block, u32 gate)
{
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5;
    const u32 first = b * P2PT_BATCH_BLOCK;
    const u32 span = kb * P2PT_BATCH_BLOCK;
    const u32 nb = n - first < span ? n - first : span;
    u64 total = 0;
    if (kb == 1) {
        /* One block (most turns): each descriptor checked as it is read.
         * Through the turn's path below, short batches on the full grid
         * took 1-2 % longer (bench/results/batches.md, "Turns of two
         * blocks"). */
        u64 dst = 0, src = 0, bytes = 0;
        if (t < nb) {
            const desc_t d = b == pre_block ? desc_t{S.dst[t], S.src[t], S.bytes[t]}
                                            : piece_at(P, first + t);
            dst = d.dst;
            src = d.src;
            bytes = d.bytes;
            if (FROM == FROM_DEVICE && refuse(dst, src, bytes, *p) != 0)
                bytes = 0;
        }
        S.dst[t] = dst;
        S.src[t] = src;
        S.bytes[t] = bytes;
        S.begin[t] = block_scan(P2PT_BATCH_TILES(dst, bytes), S, 0);
        copiers_sync();
        for (u32 k = 0; k < WARPS; k++)
            total += S.warp_sum[0][k];
    } else {
        /* Every block's descriptor of this thread read at once (one round
         * trip) and stored, then each block checked and scanned in turn
         * from shared memory (checked from registers, four blocks a turn
         * spilled). */
        desc_t dd[P2PT_BATCH_TURN_BLOCKS];
#pragma unroll
        for (u32 j = 0; j < P2PT_BATCH_TURN_BLOCKS; j++) {
            const u32 i = j * P2PT_BATCH_BLOCK + t;
            dd[j] = desc_t{0, 0, 0};
            if (j < kb && i < nb)
                dd[j] = j == 0 && b == pre_block ? desc_t{S.dst[t], S.src[t], S.bytes[t]}
                                                 : piece_at(P, first + i);
        }
#pragma unroll
        for (u32 j = 0; j < P2PT_BATCH_TURN_BLOCKS; j++) {
            const u32 i = j * P2PT_BATCH_BLOCK + t;
            if (j < kb) {
                S.dst[i] = dd[j].dst;
                S.src[i] = dd[j].src;
                S.bytes[i] = dd[j].bytes;
            }
        }
#pragma unroll
        for (u32 j = 0; j < P2PT_BATCH_TURN_BLOCKS; j++) {
            if (j >= kb)
                continue;
            const u32 i = j * P2PT_BATCH_BLOCK + t;
            const u64 dst = S.dst[i];
            u64 bytes = S.bytes[i];
            if (FROM == FROM_DEVICE && refuse(dst, S.src[i], bytes, *p) != 0)
                S.bytes[i] = bytes = 0;
            S.begin[i] = total + block_scan(P2PT_BATCH_TILES(dst, bytes), S, j & 1);
            copiers_sync();
            for (u32 k = 0; k < WARPS; k++)
                total += S.warp_sum[j & 1][k];
        }
    }
    if (b == pre_block)
        TRACE(2);
    if (FROM == FROM_PARAMS)
        pdl_wait();
    wait_fenced(gate);
    /* This CTA's tiles of the block: all of them (per == 0), or the share
     * [u0, u1) of the block's nb * per units (copy_all), which cuts the
     * tiles in proportion. Tiles dealt round-robin over the block's CTAs
     * (split of splits) and their warps: the tiles in flight at any
     * moment lie together (0-1.5 % faster than a contiguous range per CTA
     * on one GPU: bench/results/batches-2026-11-23.md; a run per warp,
     * bench/results/peer.md 3b, no faster across NVLink). */
    u64 t0 = 0, hi = total;
    if (per != 0) {
        const u64 den = (u64)nb * per;
        t0 = total * u0 / den;
        hi = u1 < den ? total * u1 / den : total;
    }
    const u64 step = (u64)splits * WARPS;
    const u32 win = 4 * splits * WARPS;
    const u64 g0 = t0 + split + (u64)splits * w;
    /* The warp's tiles g0, g0 + step, ... below hi. A run of small tiles
     * goes two at a time, unrolled by two so that each one's half of `a`
     * is known when the kernel is compiled. */
    u32 lo = 0;
    int4 a[PER_LANE];
    for (u64 g = g0; g < hi;) {
        lo = piece_of(S, g, lo, nb, win);
        if (!small_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo])) {
            copy_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a);
            g += step;
            continue;
        }
        int4 *pd0, *pd1;
        int pl0, pl1;
        load_small<0>(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a, &pd0, &pl0);
        for (;;) {
            g += step;
            if (g < hi)
                lo = piece_of(S, g, lo, nb, win);
            if (g >= hi || !small_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo])) {
                st_vecs<0, HALF>(pd0, pl0, lane, a);
                break;
            }
            load_small<HALF>(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a, &pd1,
                             &pl1);
            st_vecs<0, HALF>(pd0, pl0, lane, a);
            g += step;
            if (g < hi)
                lo = piece_of(S, g, lo, nb, win);
            if (g >= hi || !small_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo])) {
                st_vecs<HALF, HALF>(pd1, pl1, lane, a);
                break;
            }
            load_small<0>(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a, &pd0,
                          &pl0);
            st_vecs<HALF, HALF>(pd1, pl1, lane, a);
        }
    }
    copiers_sync(); /* S is refilled by the next turn */
}

/*
 * How the copy CTAs share a batch. Two ways:
 *
 * By whole blocks (host descriptors, and device batches but those below).
 * With more blocks than CTAs, CTA c takes the R = blocks / G whole blocks
 * c * R .. c * R + R - 1, then the CTAs share the last blocks % G blocks
 * as they share a batch of fewer blocks than CTAs: CTA c serves block
 * c % blocks, split among the CTAs that serve it (the ring's shared_block
 * relies on CTA b being one of block b's). So no CTA is left with a whole
 * extra block after the others are done (a block of 64 KiB pieces is
 * 16 MiB), and each CTA reads one block where the blocks are fewer. But
 * where they do not divide among the CTAs evenly, some CTAs carry more:
 * 6 blocks over 32 CTAs split 6, 6, 5, 5, 5, 5 ways, and the CTAs of a
 * 5-way block carry 1.07x the mean.
 *
 * By equal shares (`shares`: a device batch across NVLink on a grid
 * narrower than the SMs, of more than one block, p->equal_shares, which
 * the host launches as p2pt_batch_copy_marks). CTA c takes pieces
 * [c n / G, (c + 1) n / G), a fraction of a block at either end, and
 * within a block a fraction of the pieces is the same fraction of its
 * tiles (copy_block's per). Pieces of one size (rows) so divide exactly
 * whatever n and G, which matters where each CTA's rate is the limit: a
 * link-bound batch's few CTAs each carry ~1/G of its bytes, and the CTA
 * with the most sets its end
 * (bench/results/peer.md 5u: the rows to one peer 9 % faster in four
 * pairs of runs on one machine, mixed in two on another; level where the
 * links are the limit). A piece larger than its neighbours still spreads
 * over the CTAs whose shares cover it. Not on the full grid: there a
 * share that crosses a block's end reads and scans a second block, a
 * round trip more on a batch of ~10 µs (1024 rows of 14 KiB 15 % slower
 * on one H200, peer.md 5u).
 *
 * Either way, at any moment the CTAs work on blocks spread over the whole
 * batch: a batch laid out destination by destination (an alltoallv) keeps
 * every peer's link busy at once instead of one after another
 * (bench/results/peer.md).
 */

#define NO_BLOCK 0xffffffffu

/* A turn's descriptors: one for every instantiation of copy_all in an
 * entry (the ring entry has two). */
__shared__ block_smem turn_smem;

/* The first block CTA c of G serves by whole blocks, of `blocks`. */
static __device__ __forceinline__ u32 first_block(u32 c, u32 G, u32 blocks)
{
    return blocks <= G ? c % blocks : c * (blocks / G);
}

/* The copy CTAs (`G` of them, this one `c`) over `n` descriptors. By
 * whole blocks: CTA c's R whole blocks, P2PT_BATCH_TURN_BLOCKS to a turn,
 * then its turn at the last blocks % G, shared (with no more blocks than
 * CTAs, R is 0, or 1 when they are as many, and the shared turn is the
 * whole batch). By equal shares: the blocks that its share of the pieces
 * touches, counted
 * in units of 1/G of a piece (G units a piece, P2PT_BATCH_BLOCK * G a
 * whole block). One call of copy_block, so that each instantiation
 * inlines it once: the ring kernel instantiates copy_all twice, and with a
 * call site per case it spilled registers (tests/test_jit.c checks every
 * entry). */
template <int FROM>
static __device__ void copy_all(const pieces &P, u32 n, u32 c, u32 G, bool shares,
                                const struct p2pt_batch_dev_params *p, u32 pre_block,
                                const desc_t &pre, u32 gate = 0)
{
    block_smem &S = turn_smem;
    const u32 blocks = (n + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK;
    if (blocks == 0) {
        if (FROM == FROM_PARAMS)
            pdl_wait();
        return;
    }
    /* The descriptor read early, kept in S where copy_block reads it (this
     * thread's own place), not in registers through every turn: so only
     * the first turn may take it (the count may have moved block
     * pre_block to a later turn, whose S the first one overwrites). */
    if (pre_block != NO_BLOCK) {
        S.dst[threadIdx.x] = pre.dst;
        S.src[threadIdx.x] = pre.src;
        S.bytes[threadIdx.x] = pre.bytes;
    }
    /* Equal shares: CTA c's share is units [lo, lo + n) of the batch's
     * n * G, and a block holds `unit` of them. */
    const u64 unit = (u64)P2PT_BATCH_BLOCK * G, lo = (u64)c * n;
    const u32 R = blocks / G, rest = blocks - R * G;
    const u32 b0 = shares ? (u32)(lo / unit) : c * R;
    /* By whole blocks: W turns over the R whole blocks, then the shared one. */
    const u32 W = (R + P2PT_BATCH_TURN_BLOCKS - 1) / P2PT_BATCH_TURN_BLOCKS;
    const u32 turns = shares ? (u32)((lo + n - 1) / unit) - b0 + 1 : W + (rest != 0);
    for (u32 r = 0; r < turns; r++) {
        u32 b = b0 + r, kb = 1, split = 0, splits = 1;
        u64 u0 = 0, u1 = 0;
        if (shares) {
            const u64 at = (u64)b * unit;
            u0 = lo > at ? lo - at : 0;
            u1 = lo + n - at;
        } else if (r < W) {
            b = b0 + r * P2PT_BATCH_TURN_BLOCKS;
            kb = R - r * P2PT_BATCH_TURN_BLOCKS;
            kb = kb < P2PT_BATCH_TURN_BLOCKS ? kb : P2PT_BATCH_TURN_BLOCKS;
        } else { /* block R * G + k, split among the CTAs c with c % rest == k */
            const u32 k = c % rest;
            b = R * G + k;
            split = c / rest;
            splits = (G - 1 - k) / rest + 1;
        }
        copy_block<FROM>(P, n, b, kb, split, splits, u0, u1, shares ? G : 0, p, S,
                         r == 0 ? pre_block : NO_BLOCK, r == 0 ? gate : 0);
    }
}

#endif /* P2PT_BATCH_TILES_CUH */
