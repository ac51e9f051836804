/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the host code (src/) and the kernels (the .cu files beside this one)
 * must agree on, in one place. The host includes this file; the JIT hands
 * the same bytes to NVRTC as an in-memory header (src/jit/jit.c), and they are
 * part of every cubin's cache key, so the two sides cannot drift apart.
 *
 * Plain C that both a C11 compiler and NVRTC accept: no includes, fixed-size
 * integer types spelled out.
 */
#ifndef P2PT_KERNEL_ABI_H
#define P2PT_KERNEL_ABI_H

/* cp.async.bulk moves 16-byte units between 16-byte aligned addresses. */
#define P2PT_ALIGN 16u

/* The deepest shared-memory ring a CTA may have (P2P_TRANSPORT_STAGES): the
 * kernel keeps one mbarrier per stage in a static array of this length. */
#define P2PT_MAX_STAGES 16

/* Threads per CTA of the copy kernel: one warp, of which one elected thread
 * issues the bulk copies and all move the unaligned head and tail bytes. */
#define P2PT_TMA_THREADS 32

/* Threads per CTA of the streaming copy kernel (stream_copy.cu): one
 * 16-byte unit each, so a CTA moves 4 KiB. */
#define P2PT_STREAM_THREADS 256

/* `flags` argument of the copy kernel. */
#define P2PT_FLAG_EVICT_FIRST 1u /* L2 evict-first hint on the bulk copies */

/* ------------------------------------------------------------- batches */

/*
 * The batch kernel (batch_copy.cu, batch_tiles.cuh) cuts every piece into
 * tiles: tile k of a piece is up to P2PT_BATCH_TILE bytes of its 16-byte
 * aligned destination body, one warp's work (32 lanes x P2PT_BATCH_TILE /
 * 512 vectors of 16 bytes, every load in flight before the first store). The
 * tile size and the CTAs per SM were chosen among the variants of
 * bench/experiments/batch_variants.cu (bench/RESULTS.md). Tile 0 also moves
 * the unaligned destination head bytes (< 16) and the last tile the tail; a
 * piece too small for a body is one tile of head bytes. The same macros size
 * a batch on the host (src/plans/batch_plan.c) and in the kernel.
 */
#ifndef P2PT_BATCH_TILE /* bench/experiments/batch_variants.cu tries others */
#define P2PT_BATCH_TILE 8192u
#endif
#define P2PT_BATCH_HEAD(dst, bytes)                                             \
    ((((16ull - ((dst) & 15ull)) & 15ull) < (bytes)) ? ((16ull - ((dst) & 15ull)) & 15ull) \
                                                      : (bytes))
#define P2PT_BATCH_BODY(dst, bytes) (((bytes) - P2PT_BATCH_HEAD(dst, bytes)) & ~15ull)
#define P2PT_BATCH_TILES(dst, bytes)                                            \
    ((bytes) == 0 ? 0ull                                                        \
     : P2PT_BATCH_BODY(dst, bytes) == 0                                         \
         ? 1ull                                                                 \
         : (P2PT_BATCH_BODY(dst, bytes) + P2PT_BATCH_TILE - 1) / P2PT_BATCH_TILE)

/* Threads per CTA of the batch kernel: 8 warps, and one descriptor per
 * thread when a CTA reads its block of P2PT_BATCH_BLOCK descriptors. */
#define P2PT_BATCH_THREADS 256
#define P2PT_BATCH_BLOCK 256
/* The entry of batches in parts (p2pt_batch_copy_marks) has one warp more,
 * which signals each part while the others copy the next. */
#define P2PT_BATCH_MARKS_THREADS (P2PT_BATCH_THREADS + 32)
/* CTAs per SM the batch kernel is sized for (its launch bounds: 512
 * threads, at most 128 registers each: a lane holds a whole tile's share). */
#ifndef P2PT_BATCH_CTAS_PER_SM
#define P2PT_BATCH_CTAS_PER_SM 2
#endif
#define P2PT_BATCH_SMALL 128      /* descriptors inline in p2pt_batch_copy_s */
#define P2PT_BATCH_LARGE 1344     /* in p2pt_batch_copy_l: 32 KiB of parameters */
#define P2PT_BATCH_MAX_WINDOWS 64 /* windows one device batch is checked against */

/* One piece as the kernel reads it: the public p2pt_copy_desc layout (three
 * 64-bit words), from its parameters (host descriptors) or from the
 * caller's GPU memory (device descriptors). */
struct p2pt_batch_desc {
    unsigned long long dst, src, bytes;
};

/* Host descriptors, checked on the host, inline in the parameters. */
struct p2pt_batch_small {
    unsigned int count;
    unsigned int reserved[3]; /* the descriptors start 16-byte aligned */
    struct p2pt_batch_desc desc[P2PT_BATCH_SMALL];
};

struct p2pt_batch_large {
    unsigned int count;
    unsigned int reserved[3];
    struct p2pt_batch_desc desc[P2PT_BATCH_LARGE];
};

/* Host descriptors in the staging ring: copied to GPU memory by the
 * stream before the launch, or (P2PT_RING_HOST) read from the pinned ring,
 * written by the host before the launch. */
#define P2PT_RING_HOST 1u
/* Read in place, a block that several CTAs serve crosses the bus once: its
 * first CTA copies it to `shared` (GPU memory, the same offsets as `descs`)
 * and then stores `seq` into ready[block]; the others wait for that value
 * and read the copy. `seq` is new at every launch and has its top 16 bits
 * at P2PT_RING_SEQ_TAG, a value no descriptor field can hold (addresses are
 * below 2^57, sizes below 2^32), so nothing left in the ring's GPU memory
 * is ever taken for it. */
#define P2PT_RING_SEQ_TAG 0xB47Cull
/* Pieces kept as blocks (p2pt_copy_blocks_async over layers that share no
 * bytes) are made by the kernel from the staged mapping and layers instead
 * of being written out by the host piece by piece: with P2PT_RING_BLOCKS,
 * `descs` holds `rows` (src block, dst block) int64 pairs and `layers` one
 * p2pt_ring_layer per layer, and piece i is pair i % rows of layer
 * i / rows: dst + d * bytes from src + s * bytes (the arithmetic of
 * p2pt__block_piece in src/plans/block_plan.h, and of p2pt_block_piece
 * below). Read in place from the pinned ring (P2PT_RING_HOST). */
#define P2PT_RING_BLOCKS 2u
struct p2pt_ring_layer {
    unsigned long long dst, src, bytes;
};
struct p2pt_batch_ring_params {
    unsigned long long descs; /* p2pt_batch_desc[count], or the pairs (P2PT_RING_BLOCKS) */
    unsigned int count;
    unsigned int flags;         /* P2PT_RING_* */
    unsigned long long shared;  /* P2PT_RING_HOST: p2pt_batch_desc[count] in GPU memory */
    unsigned long long ready;   /* P2PT_RING_HOST: one u64 per block of descriptors */
    unsigned long long seq;     /* P2PT_RING_HOST: this launch's ready value */
    unsigned long long layers;  /* P2PT_RING_BLOCKS: p2pt_ring_layer[count / rows] */
    unsigned long long rows;    /* P2PT_RING_BLOCKS: pairs at descs */
};

/* The link kernel (kernels/link_copy.cu): a host batch whose every piece
 * crosses the host link and is co-aligned, its descriptors in the staging
 * ring (read in place with P2PT_RING_HOST, else copied to GPU memory by the
 * stream first). A warp per piece, P2PT_LINK_THREADS / 32 warps a CTA (an
 * experiment's build may set it: NVRTC compiles the kernel with the value
 * the library was built with). */
#ifndef P2PT_LINK_THREADS
#define P2PT_LINK_THREADS 256
#endif
/* How the link kernel deals pieces to warps: piece i to slot
 * i % P2PT_LINK_SLOTS, slot s to warp s % warps (so at most
 * P2PT_LINK_SLOTS warps a launch). The host sums each slot's bytes in its
 * pass over the pieces and so knows what every warp of a grid will carry
 * before it picks the kernel (src/engines/transport_tma_link.c). */
#define P2PT_LINK_SLOTS 128
struct p2pt_link_params {
    unsigned long long descs; /* p2pt_batch_desc[count], or the pairs (P2PT_RING_BLOCKS) */
    unsigned int count;
    unsigned int flags;       /* P2PT_RING_HOST, P2PT_RING_BLOCKS */
    unsigned long long layers; /* P2PT_RING_BLOCKS: p2pt_ring_layer[count / rows] */
    unsigned long long rows;   /* P2PT_RING_BLOCKS: pairs at descs */
};

#ifdef __CUDACC__
/* Piece i of a launch's descriptors, or of its blocks (P2PT_RING_BLOCKS):
 * the pair and the layer are two independent loads. */
static __device__ __forceinline__ struct p2pt_batch_desc
p2pt_block_piece(unsigned long long descs, unsigned int flags, unsigned long long layers,
                 unsigned long long rows, unsigned int i)
{
    if ((flags & P2PT_RING_BLOCKS) == 0)
        return ((const struct p2pt_batch_desc *)descs)[i];
    const unsigned long long l = i / rows, r = i - l * rows;
    const long long *pair = (const long long *)descs + 2 * r;
    const struct p2pt_ring_layer L = ((const struct p2pt_ring_layer *)layers)[l];
    const long long s = pair[0], d = pair[1];
    struct p2pt_batch_desc out;
    out.dst = L.dst + (unsigned long long)d * L.bytes;
    out.src = L.src + (unsigned long long)s * L.bytes;
    out.bytes = L.bytes;
    return out;
}
#endif

/* A registered window: device batches may touch [base, end) only. */
struct p2pt_batch_window {
    unsigned long long base, end;
};

/*
 * Semaphores (kernels/signal.cu, p2pt_signal_async and p2pt_wait_async):
 * P2PT_SEMAPHORE_BYTES of GPU memory on the waiter's device, zeroed before
 * first use. Signallers add to `value` (a release at system scope, after
 * everything before the signal on their stream); the waiter alone keeps
 * `expected`, the count it has waited for so far, so a wait captured in a
 * graph waits for `count` more at every replay instead of for a value
 * fixed when it was captured. `timeouts` counts waits that gave up
 * (P2P_TRANSPORT_WAIT_TIMEOUT_MS).
 */
/* The semaphore's value counts signals in units of 2^32: a device batch's
 * CTAs each add their share of one unit as they finish (batch_copy.cu), so
 * the unit is complete exactly when every CTA is, whatever the grid. */
#define P2PT_SIGNAL_UNIT (1ull << 32)
#ifdef __CUDACC__
/* This CTA's share of one signal: P2PT_SIGNAL_UNIT split over the grid so
 * that the shares add up to exactly one signal whatever its size (the
 * device batch's CTAs, the count exchange's). */
static __device__ __forceinline__ unsigned long long p2pt_cta_share(void)
{
    const unsigned long long unit = P2PT_SIGNAL_UNIT, c = blockIdx.x, G = gridDim.x;
    return (c + 1) * unit / G - c * unit / G;
}
#endif
struct p2pt_semaphore {
    unsigned long long value;
    unsigned long long expected;
    unsigned long long timeouts;
    unsigned long long reserved;
};
struct p2pt_signal_params {
    unsigned long long sem; /* a p2pt_semaphore, local or a peer's */
    unsigned long long add;
};
struct p2pt_wait_params {
    unsigned long long sem;        /* a p2pt_semaphore of the stream's device */
    unsigned long long count;      /* signals to wait for beyond `expected` */
    unsigned long long timeout_ns; /* 0: wait for ever */
};
/* A device batch may end with a signal to each of these semaphores
 * (p2pt_copy_batch_device_signal_async): each CTA, once its writes are
 * visible at system scope, adds its share of one signal (shares that sum
 * to one P2PT_SIGNAL_UNIT), so a waiter sees the whole
 * signal only after every CTA's writes. */
#define P2PT_BATCH_MAX_SIGNALS 64

/*
 * The count exchange of an alltoallv (p2pt_count_rows_async, p2pt_count_rows
 * in signal.cu): `routing` is `rows` x `cols` bytes, row-major, nonzero
 * where a row goes to a destination; a CTA a column (or several) writes
 * its columns' counts (int64) to each `put`, adds its share of one signal
 * to each `signal`, and writes each row's running count to `upto`
 * ([cols][rows] int64; 0: none), the last chunk's after the signal.
 */
#define P2PT_COUNT_MAX_COLS 64
#define P2PT_COUNT_MAX_PUTS 64
#define P2PT_COUNT_THREADS 1024
struct p2pt_count_params {
    unsigned long long routing;
    unsigned long long upto;
    unsigned int rows, cols, n_puts, n_signals;
    unsigned long long put[P2PT_COUNT_MAX_PUTS];
    unsigned long long signal[P2PT_BATCH_MAX_SIGNALS]; /* struct p2pt_semaphore addresses */
};

/* Device descriptors: the count and the descriptors in GPU memory, read
 * when the kernel runs and checked there against the windows. */
struct p2pt_batch_dev_params {
    unsigned long long descs;     /* the caller's {dst, src, bytes} array in GPU memory */
    unsigned long long count;     /* the caller's uint32_t count in GPU memory */
    unsigned long long workspace; /* the caller's workspace: the status record */
    unsigned int max_count;
    unsigned int n_windows;
    unsigned int n_signals; /* semaphores the batch signals as it ends */
    unsigned int n_marks;   /* parts that signal apart (0 or 1: the batch as one) */
    unsigned int status_copies; /* 1: CTA 0 copies too, after the status record */
    unsigned int equal_shares;  /* 1: each copy CTA takes n / G of the pieces (copy_all) */
    struct p2pt_batch_window window[P2PT_BATCH_MAX_WINDOWS];
    unsigned long long signal[P2PT_BATCH_MAX_SIGNALS]; /* struct p2pt_semaphore addresses */
};

/*
 * The caller's workspace: the status record (public: p2pt_batch_status),
 * written by CTA 0 of the device batch kernel (before its share of the
 * copy where the grid is narrower than the SMs: status_copies).
 */
struct p2pt_batch_status_record {
    unsigned int count;     /* the count read from GPU memory */
    unsigned int copied;    /* descriptors accepted and copied */
    unsigned int skipped;   /* descriptors refused (never copied) */
    unsigned int first_bad; /* index of the first refused one; 0xffffffff when none */
    unsigned int reasons;   /* P2PT_BATCH_SKIPPED_* bits */
    unsigned int reserved[3];
};

struct p2pt_batch_ws_head {
    struct p2pt_batch_status_record status;
    unsigned int reserved[8];
};

/*
 * Blocks moved by a mapping in GPU memory (p2pt_copy_blocks_device_async):
 * the expand kernel (p2pt_batch_expand in batch_copy.cu) turns the mapping
 * and the layers into a device batch's count and descriptors inside the
 * caller's workspace, which the device batch kernel then reads as it reads
 * a caller's. The workspace: the device batch's head (the status record),
 * the count, then one descriptor a piece, 16-byte aligned.
 */
struct p2pt_blocks_ws_head {
    struct p2pt_batch_ws_head batch;
    unsigned int count; /* the pieces: every layer's rows */
    unsigned int reserved[3];
};

/* Layers one expand launch carries in its parameters: 64 of 40 bytes keep
 * them under 4 KiB, the parameter space every driver takes; more layers
 * are more launches, each writing its layers' descriptors. */
#define P2PT_EXPAND_LAYERS 64
/* Threads per CTA of the expand kernel: one piece each per step. */
#define P2PT_EXPAND_THREADS 256

/* One layer as the expand kernel reads it (p2pt_block_layer's numbers). */
struct p2pt_expand_layer {
    unsigned long long dst, src, bytes, dst_blocks, src_blocks;
};

/* Piece i of a launch is row i % pairs of its layer i / pairs, and it is
 * descriptor first_layer * pairs + i of the workspace. The launch with
 * first_layer 0 also writes the count and zeroes the head, so that every
 * word of the status record is defined once the batch has run. */
struct p2pt_expand_params {
    unsigned long long mapping;   /* pairs (src, dst) int64 rows in GPU memory */
    unsigned long long workspace; /* a p2pt_blocks_ws_head, then the descriptors */
    unsigned int pairs;
    unsigned int first_layer; /* of the whole call, for layer[0] */
    unsigned int n_layers;    /* in layer[] */
    unsigned int pieces;      /* of the whole call: the count */
    struct p2pt_expand_layer layer[P2PT_EXPAND_LAYERS];
};

#define P2PT_BATCH_SKIPPED_WINDOW 1u    /* dst or src range outside every window */
#define P2PT_BATCH_SKIPPED_OVER_MAX 2u  /* index at or past max_count */
#define P2PT_BATCH_SKIPPED_OVERLAP 4u   /* dst and src ranges share bytes */
#define P2PT_BATCH_SKIPPED_TOO_LARGE 8u /* 2^32 bytes or more, or a range that wraps */

#endif /* P2PT_KERNEL_ABI_H */
