/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt batch kernel: many pieces {dst, src, bytes} in one launch.
 *
 * Compiled at run time by NVRTC (src/jit/jit.c) with p2pt_kernel_abi.h (the
 * tile arithmetic the host uses too) and tma_ptx.cuh.
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
 * last nb % G). A device batch of more than one block across NVLink on
 * a narrow grid by equal shares: CTA c takes n / G of the pieces, and of
 * a block it shares the same fraction of its tiles (copy_all says why).
 * Each CTA reads its blocks' descriptors (one per thread), scans their
 * tile counts in shared memory, and its warps take the tiles of its range
 * in turn, finding each tile's piece by a binary search in shared memory.
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

#define TILE_VECS (P2PT_BATCH_TILE / 16)
#define PER_LANE (TILE_VECS / 32)
#define WARPS (P2PT_BATCH_THREADS / 32)
#define FULL 0xffffffffu
#define STATUS_UNROLL 8

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

/* The descriptors of one block, their tile counts scanned. */
struct block_smem {
    u64 dst[P2PT_BATCH_BLOCK], src[P2PT_BATCH_BLOCK], bytes[P2PT_BATCH_BLOCK];
    u64 begin[P2PT_BATCH_BLOCK + 1];
    u64 warp_sum[WARPS];
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

/* Exclusive scan of one value per thread over the CTA; returns the prefix
 * and leaves the total in S.begin[P2PT_BATCH_BLOCK]. */
static __device__ u64 block_scan(u64 x, block_smem &S)
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
        S.warp_sum[w] = inc;
    copiers_sync();
    u64 before = 0;
    for (u32 i = 0; i < w; i++)
        before += S.warp_sum[i];
    if (t == P2PT_BATCH_THREADS - 1)
        S.begin[P2PT_BATCH_BLOCK] = before + inc;
    return before + inc - x;
}


/*
 * Block `b` of the descriptors at `descs` (a generic address: kernel
 * parameters or GPU memory), `n` of them in all: read, check (device
 * descriptors), scan, then copy split `split` of `splits` of its tiles.
 * `pre` is this thread's descriptor of block `pre_block`, already loaded
 * (any other block is read here). Host descriptors are kernel parameters,
 * which no earlier grid writes: their CTAs plan while the previous grid
 * drains and wait for it (griddepcontrol.wait) only before the first copy.
 */
/* The last piece of a block whose first tile is <= g, searched from piece
 * `lo` on (a warp's tiles only grow). */
static __device__ __forceinline__ u32 piece_of(const block_smem &S, u64 g, u32 lo, u32 nb)
{
    u32 hi_piece = nb;
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

template <int FROM>
static __device__ void copy_block(const pieces &P, u32 n, u32 b, u32 split, u32 splits, u64 u0,
                                  u64 u1, u32 per, const struct p2pt_batch_dev_params *p,
                                  block_smem &S, u32 pre_block, const desc_t &pre, u32 gate)
{
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5;
    const u32 first = b * P2PT_BATCH_BLOCK;
    const u32 nb = n - first < P2PT_BATCH_BLOCK ? n - first : P2PT_BATCH_BLOCK;
    u64 dst = 0, src = 0, bytes = 0;
    if (t < nb) {
        const desc_t dd = b == pre_block ? pre : piece_at(P, first + t);
        dst = dd.dst;
        src = dd.src;
        bytes = dd.bytes;
        if (FROM == FROM_DEVICE && refuse(dst, src, bytes, *p) != 0)
            bytes = 0;
    }
    S.dst[t] = dst;
    S.src[t] = src;
    S.bytes[t] = bytes;
    S.begin[t] = block_scan(P2PT_BATCH_TILES(dst, bytes), S);
    copiers_sync();
    if (b == pre_block)
        TRACE(2);
    if (FROM == FROM_PARAMS)
        pdl_wait();
    wait_fenced(gate);
    const u64 total = S.begin[P2PT_BATCH_BLOCK];
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
    const u64 g0 = t0 + split + (u64)splits * w;
    /* The warp's tiles g0, g0 + step, ... below hi. A run of small tiles
     * goes two at a time, unrolled by two so that each one's half of `a`
     * is known when the kernel is compiled. */
    u32 lo = 0;
    int4 a[PER_LANE];
    for (u64 g = g0; g < hi;) {
        lo = piece_of(S, g, lo, nb);
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
                lo = piece_of(S, g, lo, nb);
            if (g >= hi || !small_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo])) {
                st_vecs<0, HALF>(pd0, pl0, lane, a);
                break;
            }
            load_small<HALF>(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a, &pd1,
                             &pl1);
            st_vecs<0, HALF>(pd0, pl0, lane, a);
            g += step;
            if (g < hi)
                lo = piece_of(S, g, lo, nb);
            if (g >= hi || !small_tile(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo])) {
                st_vecs<HALF, HALF>(pd1, pl1, lane, a);
                break;
            }
            load_small<0>(S.dst[lo], S.src[lo], S.bytes[lo], g - S.begin[lo], lane, a, &pd0,
                          &pl0);
            st_vecs<HALF, HALF>(pd1, pl1, lane, a);
        }
    }
    copiers_sync(); /* S is refilled by the next block */
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

/* The first block CTA c of G serves by whole blocks, of `blocks`. */
static __device__ __forceinline__ u32 first_block(u32 c, u32 G, u32 blocks)
{
    return blocks <= G ? c % blocks : c * (blocks / G);
}

/* The copy CTAs (`G` of them, this one `c`) over `n` descriptors. By
 * whole blocks: CTA c's R whole blocks, then its turn at the last
 * blocks % G, shared (with no more blocks than CTAs, R is 0, or 1 when
 * they are as many, and the shared turn is the whole batch). By equal
 * shares: the blocks that its share of the pieces touches, counted
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
    __shared__ block_smem S;
    const u32 blocks = (n + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK;
    if (blocks == 0) {
        if (FROM == FROM_PARAMS)
            pdl_wait();
        return;
    }
    /* Equal shares: CTA c's share is units [lo, lo + n) of the batch's
     * n * G, and a block holds `unit` of them. */
    const u64 unit = (u64)P2PT_BATCH_BLOCK * G, lo = (u64)c * n;
    const u32 R = blocks / G, rest = blocks - R * G;
    const u32 b0 = shares ? (u32)(lo / unit) : c * R;
    const u32 turns = shares ? (u32)((lo + n - 1) / unit) - b0 + 1 : R + (rest != 0);
    for (u32 r = 0; r < turns; r++) {
        u32 b = b0 + r, split = 0, splits = 1;
        u64 u0 = 0, u1 = 0;
        if (shares) {
            const u64 at = (u64)b * unit;
            u0 = lo > at ? lo - at : 0;
            u1 = lo + n - at;
        } else if (r == R) { /* block R * G + k, split among the CTAs c with c % rest == k */
            const u32 k = c % rest;
            b = R * G + k;
            split = c / rest;
            splits = (G - 1 - k) / rest + 1;
        }
        copy_block<FROM>(P, n, b, split, splits, u0, u1, shares ? G : 0, p, S, pre_block, pre,
                         r == 0 ? gate : 0);
    }
}

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

/* This CTA's share of one signal: P2PT_SIGNAL_UNIT split over the grid so
 * that the shares add up to exactly one signal whatever its size. */
static __device__ __forceinline__ unsigned long long cta_share()
{
    const unsigned long long unit = P2PT_SIGNAL_UNIT, c = blockIdx.x, G = gridDim.x;
    return (c + 1) * unit / G - c * unit / G;
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
    const unsigned long long share = cta_share();
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
    const u32 pre_block = blockIdx.x == 0 ? 0xffffffffu : first_block(c, G, max_blocks);
    const u32 i = pre_block * P2PT_BATCH_BLOCK + threadIdx.x;
    desc_t pre = {0, 0, 0};
    if (blockIdx.x != 0 && i < p.max_count)
        pre = descs[i];
    const u32 seen = *(const volatile u32 *)p.count;
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
    const unsigned long long share = cta_share();
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
    const u32 seen = *(const volatile u32 *)p.count;
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
                                  G, p.equal_shares != 0, &p, 0xffffffffu, desc_t{0, 0, 0},
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
