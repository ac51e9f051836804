/*
 * p2pt batch kernels: many pieces {dst, src, bytes} in one launch.
 *
 * Compiled at run time by NVRTC (src/jit.c) with p2pt_kernel_abi.h (the
 * entry layout and the unit arithmetic the host uses too) and tma_ptx.cuh.
 *
 * Work is cut into units (p2pt_kernel_abi.h): piece i owns global units
 * [unit_begin[i], unit_begin[i + 1]). A persistent grid of G CTAs takes
 * units b, b + G, b + 2G, ... in CTA b, so a 1 MiB piece is spread over
 * many SMs and 64-byte pieces are packed many to a CTA. In each CTA:
 *   - thread 0 drives the shared-memory ring of bulk copies, exactly as
 *     tma_copy.cu does for one copy, over this CTA's bulk units;
 *   - warps 1..3 walk the same units and do the rest with plain loads and
 *     stores: pieces that are not co-aligned (or tiny), and the unaligned
 *     head and tail bytes of bulk pieces (in the CTA that owns unit 0).
 * Finding the piece of a unit is a binary search over unit_begin, resumed
 * from the last answer since a CTA's units only grow.
 *
 * The entries are searched for every unit, so each CTA first copies them
 * into shared memory (after its ring) wherever that is possible.
 *
 * Entry points:
 *   p2pt_batch_copy_s / _l   host descriptors, entries in the parameters
 *                            (up to 128 / 1344 pieces, 32 KiB of parameters)
 *   p2pt_batch_copy_dev1     device descriptors, up to 128, one launch:
 *                            every CTA reads the caller's count and
 *                            descriptors from GPU memory, skips every one
 *                            that is not inside the registered windows (or
 *                            overlaps, or is too large) and plans the rest
 *                            the same way; CTA 0 writes the status record
 *   p2pt_batch_plan          more device descriptors: one CTA plans them
 *                            into the caller's workspace and writes the
 *                            status record...
 *   p2pt_batch_copy_dev      ...and this copies what the plan wrote
 * Programmatic dependent launch as in tma_copy.cu: nothing touches global
 * memory before pdl_wait(), so p2pt_batch_copy_dev, launched right behind
 * the plan, starts as the plan drains and reads its output only once it is
 * complete and visible.
 */
#include "p2pt_kernel_abi.h"
#include "tma_ptx.cuh"

typedef struct p2pt_batch_entry entry_t;

/* The piece that owns global unit g: the last entry in [lo, n) whose
 * unit_begin <= g (entry lo must qualify). First a guess that is exact when
 * the pieces from lo on have one unit each (rows of the same size, the
 * common batch), then a binary search. */
static __device__ __forceinline__ u32 find_piece(const entry_t *e, u32 n, u32 lo, u32 g)
{
    u32 hi = n;
    u32 guess = lo + (g - e[lo].unit_begin);
    if (guess < n) {
        if (e[guess].unit_begin <= g) {
            if (guess + 1 == n || e[guess + 1].unit_begin > g)
                return guess;
            lo = guess;
        } else {
            hi = guess;
        }
    }
    while (hi - lo > 1) {
        const u32 mid = lo + (hi - lo) / 2;
        if (e[mid].unit_begin <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/*
 * Plain copy of n bytes by `nt` threads (t = 0..nt-1). Co-aligned 16:
 * 16-byte vectors between byte-wise ends. Otherwise every store is an
 * aligned 4-byte word of dst, built from the two aligned source words that
 * hold its bytes (a funnel shift), so no access is misaligned and no load
 * leaves the source words the piece touches.
 */
static __device__ void plain_copy(char *d, const char *s, u64 n, u32 t, u32 nt)
{
    if ((((u64)d ^ (u64)s) & 15) == 0) {
        u64 head = (16 - ((u64)d & 15)) & 15;
        if (head > n)
            head = n;
        for (u64 i = t; i < head; i += nt)
            d[i] = s[i];
        const u64 words = (n - head) / 16;
        int4 *dw = (int4 *)(d + head);
        const int4 *sw = (const int4 *)(s + head);
#pragma unroll 4
        for (u64 i = t; i < words; i += nt)
            dw[i] = sw[i];
        for (u64 i = head + words * 16 + t; i < n; i += nt)
            d[i] = s[i];
        return;
    }
    u64 head = (4 - ((u64)d & 3)) & 3;
    if (head > n)
        head = n;
    for (u64 i = t; i < head; i += nt)
        d[i] = s[i];
    const u64 words = (n - head) / 4;
    const char *sp = s + head;
    const u32 o = (u32)((u64)sp & 3);
    const u32 *sa = (const u32 *)(sp - o);
    u32 *dw = (u32 *)(d + head);
#pragma unroll 4
    for (u64 i = t; i < words; i += nt) {
        u32 v = sa[i];
        if (o != 0)
            v = __funnelshift_r(v, sa[i + 1], 8 * o);
        dw[i] = v;
    }
    for (u64 i = head + words * 4 + t; i < n; i += nt)
        d[i] = s[i];
}

/* Warps 1..3: the plain units of this CTA and the heads and tails of the
 * bulk pieces whose unit 0 it owns. */
static __device__ void plain_part(const entry_t *e, u32 n, u32 total, u32 unit)
{
    const u32 t = threadIdx.x - 32, nt = P2PT_BATCH_THREADS - 32;
    u32 lo = 0;
    for (u32 g = blockIdx.x; g < total; g += gridDim.x) {
        lo = find_piece(e, n, lo, g);
        const entry_t p = e[lo];
        char *d = (char *)p.dst;
        const char *s = (const char *)p.src;
        const u32 u = g - p.unit_begin;
        if (P2PT_BATCH_IS_BULK(p.dst, p.src, (u64)p.bytes)) {
            if (u != 0)
                continue;
            const u64 head = P2PT_BATCH_HEAD(p.dst, (u64)p.bytes);
            const u64 tail_at = head + P2PT_BATCH_BODY(p.dst, (u64)p.bytes);
            if (t < head)
                d[t] = s[t];
            if (tail_at + t < p.bytes)
                d[tail_at + t] = s[tail_at + t];
            continue;
        }
        const u64 off = (u64)u * unit;
        const u64 len = p.bytes - off < unit ? p.bytes - off : unit;
        plain_copy(d + off, s + off, len, t, nt);
    }
}

/* Thread 0: the bulk units of this CTA through the ring. `cursor` is the
 * next global unit to look at for a load; st_dst/st_len remember what each
 * stage holds until its store is issued. */
struct bulk_ring {
    const entry_t *e;
    u32 n, total, unit, stages;
    u32 cursor, lo;
    u32 bar0, ring0;
    bool hint;
    u64 policy;
    /* The next bulk unit to load, found ahead of time. */
    bool have_next;
    char *next_dst;
    const char *next_src;
    u32 next_len;
    char *st_dst[P2PT_BATCH_MAX_STAGES];
    u32 st_len[P2PT_BATCH_MAX_STAGES];

    /* Find the next bulk unit of this CTA (have_next false when none). */
    __device__ void find_next()
    {
        have_next = false;
        for (; cursor < total; cursor += gridDim.x) {
            lo = find_piece(e, n, lo, cursor);
            const entry_t p = e[lo];
            if (!P2PT_BATCH_IS_BULK(p.dst, p.src, (u64)p.bytes))
                continue;
            const u64 head = P2PT_BATCH_HEAD(p.dst, (u64)p.bytes);
            const u64 body = P2PT_BATCH_BODY(p.dst, (u64)p.bytes);
            const u64 off = (u64)(cursor - p.unit_begin) * unit;
            next_len = (u32)(body - off < unit ? body - off : unit);
            next_dst = (char *)p.dst + head + off;
            next_src = (const char *)p.src + head + off;
            have_next = true;
            cursor += gridDim.x;
            return;
        }
    }

    /* Load the unit find_next found into stage `s`, and find the one after. */
    __device__ void load(u32 s)
    {
        st_dst[s] = next_dst;
        st_len[s] = next_len;
        mbar_expect_tx(bar0 + 8 * s, next_len);
        bulk_load(ring0 + s * unit, next_src, next_len, bar0 + 8 * s, hint, policy);
        find_next();
    }

    /* The loop of tma_copy.cu with a cursor instead of a known count: the
     * k-th bulk unit of this CTA always lands in stage k % stages. A stage
     * is refilled only when there is something to refill it with, so the
     * last stores of a CTA never wait for each other. */
    __device__ void run()
    {
        u32 loaded = 0;
        find_next();
        while (loaded < stages && have_next)
            load(loaded++);
        for (u32 k = 0; k < loaded; k++) {
            const u32 s = k % stages;
            mbar_wait(bar0 + 8 * s, (k / stages) & 1);
            bulk_store(st_dst[s], ring0 + s * unit, st_len[s], hint, policy);
            if (!have_next)
                continue;
            if (stages == 1) {
                bulk_wait_read<0>();
                load(0);
                loaded++;
            } else if (k >= 1) {
                /* Refill the stage store k-1 read, once it is done reading;
                 * store k may still be reading its own stage. */
                bulk_wait_read<1>();
                load((k - 1) % stages);
                loaded++;
            }
        }
        bulk_wait_all(); /* shared memory must outlive every store reading it */
    }
};

static __device__ void batch_run(const entry_t *e, u32 n, u32 total, u32 unit, u32 stages,
                                 u32 flags, u32 bar0, u32 ring0)
{
    if (threadIdx.x >= 32) {
        plain_part(e, n, total, unit);
        return;
    }
    if (threadIdx.x != 0)
        return;
    bulk_ring r;
    r.e = e;
    r.n = n;
    r.total = total;
    r.unit = unit;
    r.stages = stages;
    r.cursor = blockIdx.x;
    r.lo = 0;
    r.bar0 = bar0;
    r.ring0 = ring0;
    r.hint = (flags & P2PT_FLAG_EVICT_FIRST) != 0;
    r.policy = r.hint ? evict_first_policy() : 0;
    r.run();
}

/* Barriers set up before pdl_wait(): shared memory only, overlapping the
 * previous grid's tail. */
static __device__ __forceinline__ void ring_setup(u64 *bars, u32 stages)
{
    if (threadIdx.x == 0) {
        for (u32 s = 0; s < stages; s++)
            mbar_init(smem_u32(bars) + 8 * s, 1);
        mbar_init_fence();
    }
}

#define BATCH_PROLOGUE(stages)                                                 \
    extern __shared__ __align__(128) unsigned char ring[];                     \
    __shared__ __align__(8) u64 bars[P2PT_BATCH_MAX_STAGES];                   \
    pdl_launch_dependents();                                                   \
    ring_setup(bars, stages);                                                  \
    pdl_wait()

/* The entries' place in shared memory: right after the ring. */
static __device__ __forceinline__ entry_t *smem_entries(unsigned char *ring,
                                                        const struct p2pt_batch_head &h)
{
    return (entry_t *)(ring + (u64)h.stages * h.unit_bytes);
}

/* Host descriptors: parameters -> shared memory, then copy. */
template <typename P> static __device__ void host_batch(const P &p, unsigned char *ring, u64 *bars)
{
    entry_t *e = smem_entries(ring, p.head);
    for (u32 i = threadIdx.x; i < p.head.count; i += blockDim.x)
        e[i] = p.entry[i];
    __syncthreads();
    batch_run(e, p.head.count, p.head.total_units, p.head.unit_bytes, p.head.stages, p.head.flags,
              smem_u32(bars), smem_u32(ring));
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS)
p2pt_batch_copy_s(const __grid_constant__ struct p2pt_batch_small p)
{
    BATCH_PROLOGUE(p.head.stages);
    host_batch(p, ring, bars);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS)
p2pt_batch_copy_l(const __grid_constant__ struct p2pt_batch_large p)
{
    BATCH_PROLOGUE(p.head.stages);
    host_batch(p, ring, bars);
}

/* ------------------------------------------------------------ the plan */

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

/* What one CTA learns planning a device batch. */
struct tally {
    u32 seen, n, skipped, first_bad, reasons, total;
    u64 carry;
    u64 warp_sum[32];
};

/*
 * One CTA (any multiple of 32 threads) reads the count and the descriptors
 * from GPU memory, checks each, and writes entries [0, n) to `out` with
 * unit_begin the prefix sum of the units: a refused descriptor becomes an
 * entry of no byte. Every CTA that runs this computes the same plan.
 */
static __device__ void plan_into(const struct p2pt_batch_dev_params &p, entry_t *out, tally &T)
{
    const u32 t = threadIdx.x, lane = t & 31, w = t >> 5, nw = blockDim.x >> 5;
    if (t == 0) {
        T.seen = *(const volatile u32 *)p.count;
        T.n = T.seen < p.max_count ? T.seen : p.max_count;
        T.skipped = 0;
        T.first_bad = 0xffffffffu;
        T.reasons = 0;
        T.total = 0;
        T.carry = 0;
    }
    __syncthreads();
    const u32 n = T.n;
    const u64 *desc = (const u64 *)p.descs;
    for (u32 base = 0; base < n; base += blockDim.x) {
        const u32 i = base + t;
        entry_t en;
        en.dst = en.src = 0;
        en.bytes = 0;
        u64 units = 0;
        if (i < n) {
            const u64 dst = desc[3 * (u64)i], src = desc[3 * (u64)i + 1],
                      bytes = desc[3 * (u64)i + 2];
            const u32 why = refuse(dst, src, bytes, p);
            if (why != 0) {
                atomicAdd(&T.skipped, 1u);
                atomicMin(&T.first_bad, i);
                atomicOr(&T.reasons, why);
            } else {
                en.dst = dst;
                en.src = src;
                en.bytes = (u32)bytes;
                units = P2PT_BATCH_UNITS(dst, src, bytes, (u64)p.head.unit_bytes);
            }
        }
        /* Exclusive scan of the units over the CTA, after the earlier
         * rounds' carry. */
        u64 x = units;
        for (u32 o = 1; o < 32; o <<= 1) {
            const u64 y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o)
                x += y;
        }
        if (lane == 31)
            T.warp_sum[w] = x;
        __syncthreads();
        if (w == 0) {
            u64 v = lane < nw ? T.warp_sum[lane] : 0;
            for (u32 o = 1; o < 32; o <<= 1) {
                const u64 y = __shfl_up_sync(0xffffffffu, v, o);
                if (lane >= o)
                    v += y;
            }
            T.warp_sum[lane] = v;
        }
        __syncthreads();
        const u64 begin = T.carry + x - units + (w ? T.warp_sum[w - 1] : 0);
        if (i < n) {
            /* Units are numbered in 32 bits: a piece past that is skipped
             * (every later one is too, the numbering only grows). */
            if (begin + units > 0xffffffffull) {
                if (units != 0) {
                    atomicAdd(&T.skipped, 1u);
                    atomicMin(&T.first_bad, i);
                    atomicOr(&T.reasons, P2PT_BATCH_SKIPPED_TOO_LARGE);
                }
                en.bytes = 0;
                en.unit_begin = 0xffffffffu;
            } else {
                en.unit_begin = (u32)begin;
                if (units != 0)
                    atomicMax(&T.total, (u32)(begin + units));
            }
            out[i] = en;
        }
        __syncthreads();
        if (t == 0)
            T.carry += T.warp_sum[nw - 1];
        __syncthreads();
    }
}

/* The status record and what the copy needs of the plan. */
static __device__ void write_status(const struct p2pt_batch_dev_params &p, const tally &T)
{
    struct p2pt_batch_ws_head *wh = (struct p2pt_batch_ws_head *)p.head.workspace;
    wh->count = T.n;
    wh->total_units = T.total;
    wh->status.count = T.seen;
    wh->status.skipped = T.skipped + (T.seen - T.n);
    wh->status.copied = T.n - T.skipped;
    wh->status.first_bad = T.first_bad != 0xffffffffu ? T.first_bad
                           : T.seen > T.n             ? T.n
                                                      : 0xffffffffu;
    wh->status.reasons = T.reasons | (T.seen > T.n ? P2PT_BATCH_SKIPPED_OVER_MAX : 0u);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS)
p2pt_batch_copy_dev1(const __grid_constant__ struct p2pt_batch_dev_params p)
{
    BATCH_PROLOGUE(p.head.stages);
    __shared__ tally T;
    entry_t *e = smem_entries(ring, p.head);
    plan_into(p, e, T);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        write_status(p, T);
    batch_run(e, T.n, T.total, p.head.unit_bytes, p.head.stages, p.head.flags, smem_u32(bars),
              smem_u32(ring));
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_PLAN_THREADS)
p2pt_batch_plan(const __grid_constant__ struct p2pt_batch_dev_params p)
{
    __shared__ tally T;
    pdl_launch_dependents();
    pdl_wait();
    struct p2pt_batch_ws_head *wh = (struct p2pt_batch_ws_head *)p.head.workspace;
    plan_into(p, (entry_t *)(wh + 1), T);
    if (threadIdx.x == 0)
        write_status(p, T);
}

extern "C" __global__ void __launch_bounds__(P2PT_BATCH_THREADS)
p2pt_batch_copy_dev(const __grid_constant__ struct p2pt_batch_head h)
{
    BATCH_PROLOGUE(h.stages);
    const struct p2pt_batch_ws_head *wh = (const struct p2pt_batch_ws_head *)h.workspace;
    const entry_t *e = (const entry_t *)(wh + 1);
    batch_run(e, wh->count, wh->total_units, h.unit_bytes, h.stages, h.flags, smem_u32(bars),
              smem_u32(ring));
}
