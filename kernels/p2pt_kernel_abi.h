/*
 * What the host code (src/) and the kernels (the .cu files beside this one)
 * must agree on, in one place. The host includes this file; the JIT hands
 * the same bytes to NVRTC as an in-memory header (src/jit.c), and they are
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
 * One piece of a batch as the batch kernel reads it, from its parameters
 * (host descriptors) or from the caller's workspace (device descriptors,
 * written there by the plan kernel after checking them). `unit_begin` is
 * the prefix sum of the pieces' work units: piece i owns global units
 * [unit_begin[i], unit_begin[i + 1]). A unit is up to `unit_bytes` of the
 * piece: a bulk chunk of a co-aligned piece's 16-byte body (unit 0 also
 * carries the unaligned head and tail bytes), or a span of a piece copied
 * with plain loads and stores.
 */
struct p2pt_batch_entry {
    unsigned long long dst, src;
    unsigned int bytes; /* < 2^32: larger host pieces are cut into several */
    unsigned int unit_begin;
};

/* What every batch launch passes besides its entries. */
struct p2pt_batch_head {
    unsigned long long workspace; /* device batches: the caller's workspace; 0 otherwise */
    unsigned int count;           /* host batches: entries inline */
    unsigned int total_units;     /* host batches: sum of the entries' units */
    unsigned int unit_bytes;      /* multiple of 16: one ring stage */
    unsigned int stages;          /* ring depth, <= P2PT_BATCH_MAX_STAGES */
    unsigned int flags;           /* P2PT_FLAG_* */
    unsigned int pad;
};

#define P2PT_BATCH_THREADS 128          /* warp 0: bulk issuer; warps 1..3: plain copies */
#define P2PT_BATCH_SMALL 128            /* entries inline in p2pt_batch_copy_s */
#define P2PT_BATCH_LARGE 1344           /* entries inline in p2pt_batch_copy_l: 32 KiB of parameters */
#define P2PT_BATCH_BULK_MIN 256u        /* pieces below this many bytes are copied plainly */
#define P2PT_BATCH_MAX_WINDOWS 64       /* windows one device batch is checked against */
#define P2PT_BATCH_PLAN_THREADS 1024    /* the plan kernel is one CTA of this many threads */
/* The batch ring: stages of at most this many bytes, more of them than a
 * single copy's, so that many small pieces are in flight per SM. */
#define P2PT_BATCH_UNIT (16u * 1024u)
#define P2PT_BATCH_MAX_STAGES 32
/* Device batches of at most this many descriptors take one launch: every
 * CTA reads and checks the descriptors itself. Larger ones take two: the
 * plan kernel, then the copy. */
#define P2PT_BATCH_DEVICE_ONE 128

/*
 * How a piece is cut into units, the same on the host (src/batch_plan.c)
 * and in the kernels. A piece goes through bulk copies when dst and src are
 * co-aligned and it is not tiny; its units then cover the 16-byte aligned
 * body (at least 224 bytes, so at least one unit), and unit 0 also moves the
 * unaligned head and tail. Any other piece is moved by plain loads and
 * stores, `unit` bytes per unit. Zero-byte pieces have no unit.
 */
#define P2PT_BATCH_IS_BULK(dst, src, bytes)                                     \
    (((((dst) ^ (src)) & 15ull) == 0) && (bytes) >= P2PT_BATCH_BULK_MIN)
#define P2PT_BATCH_HEAD(dst, bytes)                                             \
    ((((16ull - ((dst) & 15ull)) & 15ull) < (bytes)) ? ((16ull - ((dst) & 15ull)) & 15ull) \
                                                      : (bytes))
#define P2PT_BATCH_BODY(dst, bytes) (((bytes) - P2PT_BATCH_HEAD(dst, bytes)) & ~15ull)
#define P2PT_BATCH_UNITS(dst, src, bytes, unit)                                 \
    ((bytes) == 0 ? 0ull                                                        \
     : P2PT_BATCH_IS_BULK(dst, src, bytes)                                      \
         ? (P2PT_BATCH_BODY(dst, bytes) + (unit) - 1) / (unit)                  \
         : ((bytes) + (unit) - 1) / (unit))

struct p2pt_batch_small {
    struct p2pt_batch_head head;
    struct p2pt_batch_entry entry[P2PT_BATCH_SMALL];
};

struct p2pt_batch_large {
    struct p2pt_batch_head head;
    struct p2pt_batch_entry entry[P2PT_BATCH_LARGE];
};

/* A registered window: device batches may touch [base, end) only. */
struct p2pt_batch_window {
    unsigned long long base, end;
};

/* Parameters of the device-descriptor kernels (the plan kernel, and the
 * one-launch copy of up to P2PT_BATCH_LARGE descriptors). */
struct p2pt_batch_dev_params {
    struct p2pt_batch_head head;  /* workspace, unit_bytes, stages, flags */
    unsigned long long descs;     /* the caller's {dst, src, bytes} array in GPU memory */
    unsigned long long count;     /* the caller's uint32_t count in GPU memory */
    unsigned int max_count;
    unsigned int n_windows;
    struct p2pt_batch_window window[P2PT_BATCH_MAX_WINDOWS];
};

/*
 * The caller's workspace: the status record (public: p2pt_batch_status),
 * what the copy kernel needs of the plan, then one entry per descriptor.
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
    unsigned int count;       /* entries planned (the count, capped at max_count) */
    unsigned int total_units;
    unsigned int reserved[6];
};

#define P2PT_BATCH_SKIPPED_WINDOW 1u    /* dst or src range outside every window */
#define P2PT_BATCH_SKIPPED_OVER_MAX 2u  /* index at or past max_count */
#define P2PT_BATCH_SKIPPED_OVERLAP 4u   /* dst and src ranges share bytes */
#define P2PT_BATCH_SKIPPED_TOO_LARGE 8u /* 2^32 bytes or more, or a range that wraps */

#endif /* P2PT_KERNEL_ABI_H */
