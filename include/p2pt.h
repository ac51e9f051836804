/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt: move bytes between GPU buffers on a CUDA stream, through the copy
 * engine ("ce") or a Hopper TMA kernel ("tma"), or through whichever of the
 * two is faster for each copy ("auto", from measured crossovers).
 *
 * This is the direct C API. Frameworks that load the library with dlopen use
 * the table in p2pt_plugin.h instead; both reach the same code.
 *
 * The header needs no CUDA header: streams are `void *` (a CUstream or
 * cudaStream_t, NULL for the legacy default stream) and addresses are
 * unified virtual addresses (any cuMemAlloc/cudaMalloc/pool/VMM pointer).
 *
 * Errors are values. Every call that fails returns a non-zero p2pt_status and
 * stores a detailed text in the calling thread's last-error slot
 * (p2pt_last_error): the bad value, the CUDA error name, the NVRTC log.
 * The library never exits or aborts the process.
 */
#ifndef P2PT_H
#define P2PT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define P2PT_API __attribute__((visibility("default")))
#else
#define P2PT_API
#endif

/* The one place the version is written: CMakeLists.txt reads these three
 * lines for the soname, p2pt.pc and the CMake package. */
#define P2PT_VERSION_MAJOR 0
#define P2PT_VERSION_MINOR 2
#define P2PT_VERSION_PATCH 0
#define P2PT_VERSION_STR_(x) #x
#define P2PT_VERSION_XSTR_(x) P2PT_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH", built from the numbers above. */
#define P2PT_VERSION_STRING                                                    \
    P2PT_VERSION_XSTR_(P2PT_VERSION_MAJOR) "."                                 \
    P2PT_VERSION_XSTR_(P2PT_VERSION_MINOR) "."                                 \
    P2PT_VERSION_XSTR_(P2PT_VERSION_PATCH)

/*
 * Status codes and their strings, from one list (libuv's UV_ERRNO_MAP
 * pattern). The numbers are part of the ABI: never renumber, only append.
 * Every function that takes a handle returns P2PT_INVALID_ARGUMENT for NULL
 * and P2PT_INVALID_USAGE for a handle that is not live (finalized, or never
 * returned by p2pt_init); p2pt_finalize alone accepts both quietly.
 */
#define P2PT_STATUS_MAP(X)                                                     \
    X(SUCCESS, 0, "success")                                                   \
    X(CUDA_ERROR, 1, "CUDA driver error")                                      \
    X(SYSTEM_ERROR, 2, "system error")                                         \
    X(INTERNAL_ERROR, 3, "internal error")                                     \
    X(INVALID_ARGUMENT, 4, "invalid argument")                                 \
    X(INVALID_USAGE, 5, "invalid usage")                                       \
    X(NOT_SUPPORTED, 6, "not supported")                                       \
    X(NO_DRIVER, 7, "no usable CUDA driver")                                   \
    X(COMPILE_ERROR, 8, "kernel compile error")

typedef enum p2pt_status {
#define P2PT_STATUS_ENUM_(name, value, text) P2PT_##name = value,
    P2PT_STATUS_MAP(P2PT_STATUS_ENUM_)
#undef P2PT_STATUS_ENUM_
} p2pt_status;

/*
 * Log levels, numerically equal to NCCL's ncclDebugLogLevel, so that a
 * framework can hand its own ncclDebugLogger_t straight to p2pt.
 */
typedef enum p2pt_log_level {
    P2PT_LOG_NONE = 0,
    P2PT_LOG_VERSION = 1,
    P2PT_LOG_WARN = 2,
    P2PT_LOG_INFO = 3,
    P2PT_LOG_ABORT = 4,
    P2PT_LOG_TRACE = 5,
} p2pt_log_level;

/* Same signature as NCCL's ncclDebugLogger_t. May be called from any thread
 * that calls into p2pt; p2pt never calls it while holding a lock. */
typedef void (*p2pt_logger_t)(p2pt_log_level level, unsigned long flags,
                              const char *file, int line, const char *fmt, ...);

/*
 * Arguments to p2pt_init. Pass NULL for all defaults. `size` must be set to
 * sizeof(p2pt_init_args) as the caller compiled it: fields are only ever
 * appended, and p2pt reads only the fields that `size` covers.
 */
typedef struct p2pt_init_args {
    size_t size;
    /* Optional. NULL: p2pt logs to stderr at the level P2P_TRANSPORT_LOG
     * sets (default WARN). Non-NULL: every message goes to this function,
     * at every level; the framework filters. */
    p2pt_logger_t logger;
    /* Optional transport name ("ce", "tma", "auto"; any case). Overrides
     * the P2P_TRANSPORT environment variable. NULL: the variable decides. */
    const char *transport;
    /* ---- end of the first release ---- */
    /* Optional settings that override the environment for this handle:
     * "NAME=VALUE" items separated by spaces or commas, NAME one of the
     * variables of env.md, e.g. "P2P_TRANSPORT_STAGES=2
     * P2P_TRANSPORT_CHUNK_BYTES=32K". Checked like the environment: an
     * unknown name or a bad value fails p2pt_init with status 4 naming it.
     * NULL: the environment alone. (`transport` above still wins over a
     * P2P_TRANSPORT item.) */
    const char *options;
} p2pt_init_args;

/*
 * What a handle is and what it has done. Set `size` to
 * sizeof(p2pt_properties) before the call; p2pt fills the fields that fit in
 * `size` and leaves the rest untouched. Counters are totals since p2pt_init,
 * updated atomically; they count requests, not completions.
 */
/* Engines p2pt_properties has per-engine slots for. */
#define P2PT_PROPERTIES_ENGINES 4

typedef struct p2pt_properties {
    size_t size;
    const char *transport;  /* "ce", "tma" or "auto"; static storage */
    const char *version;    /* P2PT_VERSION_STRING */
    uint32_t abi_version;   /* the plugin ABI this build serves (1) */
    int driver_version;     /* cuDriverGetVersion, e.g. 13000 */
    size_t chunk_bytes;     /* TMA chunk (P2P_TRANSPORT_CHUNK_BYTES) */
    int stages;             /* TMA ring depth (P2P_TRANSPORT_STAGES) */
    int max_ctas;           /* TMA CTA cap (P2P_TRANSPORT_MAX_CTAS), 0 = auto */
    int validate;           /* P2P_TRANSPORT_VALIDATE */
    uint64_t copies;        /* copy requests accepted (bytes > 0) */
    uint64_t bytes;         /* payload bytes of those requests */
    uint64_t tma_launches;  /* TMA kernel launches (one per TMA copy) */
    uint64_t ce_copies;     /* copies sent to cuMemcpyAsync */
    uint64_t ce_fallbacks;  /* copies sent to the copy engine because the
                               engine chosen for them (by a fixed transport
                               or by auto) cannot run them, e.g. tma with
                               dst and src differing modulo 16 */
    uint64_t compilations;  /* NVRTC compilations in this process (global) */
    uint64_t module_loads;  /* module loads into contexts in this process (global) */
    uint64_t rejected;      /* copies refused by validation (status 4) */
    uint64_t cubin_cache_hits; /* TMA cubins read from P2P_TRANSPORT_CACHE_DIR
                                  instead of compiled (global) */
    int pdl;                /* TMA programmatic dependent launch
                               (P2P_TRANSPORT_PDL) */
    /* ---- end of the first release ---- */
    uint32_t batch_per_launch; /* host descriptors one TMA batch launch takes;
                                  a larger batch is cut into as few launches
                                  as possible */
    uint32_t max_windows;      /* windows per device and handle */
    uint32_t device_batch_max; /* the largest max_count of a device batch */
    uint32_t reserved0;
    uint64_t batches;          /* host-descriptor batches accepted */
    uint64_t batch_pieces;     /* pieces of those batches (bytes > 0) */
    uint64_t device_batches;   /* device-descriptor batches enqueued */
    uint64_t batch_launches;   /* kernel launches made for batches */
    /* ---- end of the batch release ---- */
    const char *auto_table;    /* auto: the table file (P2P_TRANSPORT_AUTO_TABLE)
                                  or "built-in"; NULL for a fixed transport;
                                  valid while the handle lives */
    uint64_t ce_bytes;         /* per engine, whoever chose it (auto, a fixed
                                  transport, a fallback): payload bytes of */
    uint64_t tma_bytes;        /* single copies run by that engine; with
                                  ce_copies and tma_launches, their number */
    uint64_t ce_batches;       /* host batches run by the copy engine */
    uint64_t tma_batches;      /* host and device batches run by tma */
    /* ---- end of the auto release ---- */
    uint64_t stream_launches;  /* of tma_launches, those of the streaming
                                  kernel: local copies of
                                  P2P_TRANSPORT_STREAM_MIN bytes and more */
    /* Every registered engine's counters, by registration order: its name
     * (NULL past the last engine; static storage), the payload bytes of the
     * single copies it ran, the host and device batches it ran, and the
     * copies it was chosen for but could not run (sent to the copy engine;
     * their sum is ce_fallbacks). ce_bytes and the other named fields are
     * the same numbers for ce and tma. */
    const char *engine_name[P2PT_PROPERTIES_ENGINES];
    uint64_t engine_bytes[P2PT_PROPERTIES_ENGINES];
    uint64_t engine_batches[P2PT_PROPERTIES_ENGINES];
    uint64_t engine_fallbacks[P2PT_PROPERTIES_ENGINES];
    /* ---- end of the 0.2 release ---- */
    int32_t sm_budget;         /* P2P_TRANSPORT_SM_BUDGET: -1 none, 0 no
                                  kernel, N at most N CTAs per launch */
    uint32_t max_grid;         /* the widest grid any kernel launch of this
                                  handle used (CTAs) */
    uint64_t kernel_launches;  /* every kernel launch, copies and batches */
    uint64_t ce_operations;    /* operations submitted to the copy engine
                                  (a 1D or 2D copy each; a host batch's
                                  coalesced pieces count once per group) */
    uint64_t signals;          /* p2pt_signal_async calls enqueued */
    uint64_t waits;            /* p2pt_wait_async calls enqueued */
    /* Memory shared between processes (p2pt_share_*): */
    uint64_t share_exports;        /* exports live now */
    uint64_t share_imports_open;   /* imports not yet closed: each successful
                                      p2pt_share_import, one that shares a
                                      mapping too */
    uint64_t share_imports_closed; /* successful p2pt_share_close calls */
    uint64_t share_mappings;       /* mappings held now: one per export and
                                      device, however often imported */
    uint64_t count_exchanges;      /* p2pt_count_rows_async calls enqueued */
} p2pt_properties;

typedef struct p2pt_handle p2pt_handle;

/*
 * Create a handle. Reads the environment once (see env.md), checks it before
 * anything else (a bad P2P_TRANSPORT fails with P2PT_INVALID_ARGUMENT on any
 * machine), then loads the CUDA driver (P2PT_NO_DRIVER when it cannot).
 * Does not create or change any CUDA context. Thread-safe; blocks for the
 * driver load on first use.
 */
P2PT_API p2pt_status p2pt_init(const p2pt_init_args *args, p2pt_handle **out);

/*
 * Destroy a handle. Safe to call twice and with NULL (both succeed and do
 * nothing): p2pt keeps a registry of live handles and never touches one it
 * has already freed. Must not race with other calls on the same handle.
 * Copies already enqueued are unaffected.
 */
P2PT_API p2pt_status p2pt_finalize(p2pt_handle *h);

/* Fill `props` (see p2pt_properties). Thread-safe, never blocks. */
P2PT_API p2pt_status p2pt_get_properties(const p2pt_handle *h,
                                         p2pt_properties *props);

/*
 * Do every one-time step for `device` in the current thread's context for
 * that device (the primary context when none is current): for "tma", compile
 * the kernel with NVRTC (once per process and architecture; skipped when the
 * cubin cache, P2P_TRANSPORT_CACHE_DIR, holds it) and load it (once per
 * context). After prepare, copies on that context are
 * allocation-free and may be captured into a CUDA graph. Blocks (a first
 * compile takes tens to hundreds of milliseconds). Thread-safe; cheap when
 * already done. For "ce" it only checks the device.
 */
P2PT_API p2pt_status p2pt_prepare(p2pt_handle *h, int device);

/*
 * Enqueue a copy of `bytes` bytes from `src` to `dst` on `stream` and return
 * without waiting. Stream-ordered like cuMemcpyAsync. `dst` and `src` may be
 * on different GPUs; the other side must be mapped in the stream's context.
 * bytes == 0 succeeds and enqueues nothing. Overlapping ranges are refused.
 * Thread-safe (many threads may copy through one handle).
 */
P2PT_API p2pt_status p2pt_copy_async(p2pt_handle *h, void *dst,
                                     const void *src, size_t bytes,
                                     void *stream);

/* -------------------------------------------------------------- batches */

/*
 * One piece of a batch: `bytes` bytes from `src` to `dst` (unified virtual
 * addresses, either side on any GPU mapped in the stream's context). The
 * same 24-byte layout for host descriptors and for descriptors in GPU
 * memory (three little-endian 64-bit words: dst, src, bytes).
 */
typedef struct p2pt_copy_desc {
    void *dst;
    const void *src;
    uint64_t bytes;
} p2pt_copy_desc;

/*
 * Enqueue `count` copies on `stream` as ONE stream-ordered operation: work
 * queued on the stream after it sees every piece done; the pieces run in any
 * order and at once, so no piece's destination may overlap another piece's
 * source or destination. The array may be reused as soon as the call
 * returns (graph capture keeps its own copy). Each descriptor is read once:
 * a piece is moved exactly as it was checked, even if another thread
 * changes the array during the call (a race in the caller, whose pieces
 * then move as read before or after the change). Each piece is checked like a
 * single copy (NULL, wrap-around, overlap of its own ranges; with
 * P2P_TRANSPORT_VALIDATE=1 where its addresses live: one pointer query per
 * allocation the batch touches, a cheap range check when both sides lie in
 * windows registered for the stream's device; a piece must lie inside one
 * allocation):
 * a refused piece refuses the whole batch before anything is enqueued
 * (status 4 naming its index). Zero-byte pieces are skipped; count 0
 * succeeds.
 *   tma: one kernel launch (more than 128 pieces: through a pinned staging
 *        ring; without it, one per properties.batch_per_launch pieces),
 *        any size and alignment per piece, every piece through aligned
 *        16-byte loads and stores (shifted where dst and src are not
 *        co-aligned); large pieces are spread over every SM. A batch whose
 *        pieces all have one side in pinned host memory takes only the
 *        CTAs that saturate PCIe (the auto table's `link` lines), and
 *        P2P_TRANSPORT_SM_BUDGET bounds every launch.
 *   ce:  the pieces grouped first: adjacent on both sides merge, runs of
 *        four or more equal pieces at constant strides become 2D copies
 *        (cuMemcpy3DBatchAsync), the rest cuMemcpyBatchAsync, where the
 *        driver has them and it is safe (not the legacy default stream,
 *        not while capturing), else one call per group.
 * Thread-safe; capturable after p2pt_prepare.
 */
P2PT_API p2pt_status p2pt_copy_batch_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                           size_t count, void *stream);

/*
 * Blocks: a cache cut into layers of equal blocks (a KV cache: one layer per
 * attention layer, K and V as layers of their own), moved by a block
 * mapping, as vLLM's swap_blocks does. Layer l's block i is the
 * `block_bytes` bytes at base + i * block_bytes on each side; a block's
 * bytes include any padding, so the stride is the block.
 */
typedef struct p2pt_block_layer {
    size_t size;          /* sizeof(p2pt_block_layer): the array is read at this stride */
    void *dst;            /* the destination layer's block 0 */
    const void *src;      /* the source layer's block 0 */
    uint64_t block_bytes; /* one block, and the distance between blocks, on both sides */
    uint64_t dst_blocks;  /* blocks in the destination layer: ids from 0 to this - 1 */
    uint64_t src_blocks;  /* the same for the source layer */
} p2pt_block_layer;

/*
 * For each of the `pairs` rows (s, d) of `mapping` (int64, row-major, as a
 * [pairs, 2] tensor holds it) and each of the `n_layers` layers: block s of
 * the layer's src to block d of its dst, all of it ONE host batch
 * (p2pt_copy_batch_async's contract, engines and explain included), with
 * the pieces built inside the library: no descriptor array to write.
 * Refused with status 4, before anything is enqueued, naming the row or
 * layer: an id outside its layer, a destination block listed twice, a
 * destination block that another row reads, layers whose blocks overlap,
 * sizes that overflow. `mapping` and `layers` may be reused as soon as the
 * call returns; each is read once, into a copy that the checks and the
 * pieces both use. Thread-safe; capturable after p2pt_prepare.
 */
P2PT_API p2pt_status p2pt_copy_blocks_async(p2pt_handle *h, const p2pt_block_layer *layers,
                                            size_t n_layers, const int64_t *mapping,
                                            size_t pairs, void *stream);

/*
 * Windows: the memory a device-descriptor batch may touch. Register
 * [base, base + bytes) for batches on streams of `device` (its mapping as
 * seen from `device`'s current or primary context: device memory, peer
 * memory mapped there, pinned host memory). The range must lie inside one
 * allocation. At most properties.max_windows per device and handle; a base
 * registered twice is status 5. Unregister before freeing the memory.
 * The window of an import (p2pt_share_import) goes with its close:
 * unregistering it is status 5. Registering and unregistering a window
 * every step is fine: no memory is kept for it.
 * A device batch checks its descriptors against the windows registered
 * when it is enqueued; a CUDA graph keeps the windows of its capture.
 * Thread-safe.
 */
P2PT_API p2pt_status p2pt_window_register(p2pt_handle *h, int device, const void *base,
                                          size_t bytes);
P2PT_API p2pt_status p2pt_window_unregister(p2pt_handle *h, int device, const void *base);

/*
 * The status record a device batch leaves at the start of its workspace,
 * in GPU memory, readable once the batch is done (after the stream, or by
 * later work on it).
 */
typedef struct p2pt_batch_status {
    uint32_t count;     /* the count the batch read from GPU memory */
    uint32_t copied;    /* descriptors copied */
    uint32_t skipped;   /* descriptors refused: not one of their bytes was touched */
    uint32_t first_bad; /* index of the first refused descriptor; UINT32_MAX if none */
    uint32_t reasons;   /* P2PT_BATCH_SKIPPED_* bits of every refusal */
    uint32_t reserved[3];
} p2pt_batch_status;

#define P2PT_BATCH_SKIPPED_WINDOW 1u    /* dst or src range outside every window */
#define P2PT_BATCH_SKIPPED_OVER_MAX 2u  /* index at or past max_count */
#define P2PT_BATCH_SKIPPED_OVERLAP 4u   /* its dst and src ranges overlap */
#define P2PT_BATCH_SKIPPED_TOO_LARGE 8u /* 4 GiB or more, or a range that wraps */

/* Bytes of GPU memory a device batch of up to `max_count` descriptors
 * needs as its workspace: the status record (the same for every max_count
 * today; size the workspace with this call, not with a constant). */
P2PT_API size_t p2pt_batch_workspace_bytes(uint32_t max_count);

/*
 * Enqueue the copies described in GPU memory: `*count` (a uint32_t in GPU
 * memory) descriptors at `descs` (GPU memory, max_count of them readable),
 * both read when the batch runs, so earlier work on `stream` may write them
 * and a captured graph picks up new counts and sizes at every replay.
 * Every descriptor is checked in the kernel: a piece whose dst or src range
 * is not inside one window registered for the stream's device, whose ranges
 * overlap or wrap, or that is 4 GiB or more, is skipped, as is every index
 * at or past max_count; the skipped count, the first bad index and the
 * reasons land in the p2pt_batch_status at the start of `workspace`. No
 * byte outside the windows is ever written, and a bad descriptor never
 * faults the GPU. `workspace` is GPU memory of at least
 * p2pt_batch_workspace_bytes(max_count) bytes, 16-byte aligned, that no
 * other batch uses until this one is done and that shares no byte with
 * descs[0..max_count) or count (status 4). Only kernel transports read GPU
 * descriptors: with "ce" this is status 6. max_count from 1 to
 * properties.device_batch_max. Thread-safe; capturable after p2pt_prepare.
 */
P2PT_API p2pt_status p2pt_copy_batch_device_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                                  const uint32_t *count, uint32_t max_count,
                                                  void *workspace, void *stream);

/* ------------------------------------------------------------- signals */

/*
 * A semaphore: P2PT_SEMAPHORE_BYTES of GPU memory, 16-byte aligned, on the
 * device of the stream that waits on it, zeroed once before first use (and
 * never again: it counts for ever). Other GPUs' streams signal it through
 * peer access or a window shared between processes (p2pt_share_import).
 * docs/SIGNALS.md: what a signal guarantees and how.
 */
#define P2PT_SEMAPHORE_BYTES 32
/* Most semaphores one device batch signals as it ends. */
#define P2PT_BATCH_SIGNALS_MAX 64

/*
 * Signal `sem` (a semaphore the stream's device reaches: its own memory, a
 * peer's, or a window another process shared): once everything before the
 * signal on `stream` is done and its writes are visible at system scope to
 * the semaphore's GPU, the semaphore counts one more signal (a release at
 * system scope). Capturable after p2pt_prepare: every replay signals again.
 * A one-thread kernel of the kernel transport, whatever P2P_TRANSPORT says;
 * status 6 under P2P_TRANSPORT_SM_BUDGET=0. Thread-safe.
 */
P2PT_API p2pt_status p2pt_signal_async(p2pt_handle *h, void *sem, void *stream);

/*
 * Hold `stream` until `count` (1 to 2^31) more signals than at its previous
 * wait have reached `sem`, a semaphore in the stream's device's own memory;
 * then work after the wait on the stream sees everything its signallers
 * wrote before signalling (an acquire at system scope). The count it has
 * waited for is kept in the semaphore, so a captured wait waits for `count`
 * more at every replay. Waits on one semaphore must be ordered (one stream,
 * or streams ordered by events). A one-thread kernel that polls, holding one
 * SM's slot while it waits; with P2P_TRANSPORT_WAIT_TIMEOUT_MS it gives up
 * after that long and counts it in the semaphore (P2PT_SEMAPHORE_TIMEOUTS),
 * and the stream goes on. Status 6 under P2P_TRANSPORT_SM_BUDGET=0.
 */
P2PT_API p2pt_status p2pt_wait_async(p2pt_handle *h, void *sem, uint32_t count, void *stream);
/* Byte offset, in a semaphore, of the uint64 count of waits that timed out. */
#define P2PT_SEMAPHORE_TIMEOUTS 16

/*
 * p2pt_copy_batch_device_async, ending with a signal to each of `signals`
 * (n_signals semaphores, up to P2PT_BATCH_SIGNALS_MAX; the host array is
 * read once, before the call returns: the addresses checked are the ones
 * launched): each counts one signal once every piece
 * of the batch, and its status record, is visible at system scope. So a
 * receiver waits for exactly its senders' batches with no extra launch.
 */
P2PT_API p2pt_status p2pt_copy_batch_device_signal_async(p2pt_handle *h,
                                                         const p2pt_copy_desc *descs,
                                                         const uint32_t *count,
                                                         uint32_t max_count, void *workspace,
                                                         void *const *signals,
                                                         uint32_t n_signals, void *stream);

/* Most parts of a device batch that signal apart. */
#define P2PT_BATCH_MARKS_MAX 16

/*
 * p2pt_copy_batch_device_signal_async in `n_marks` parts that signal apart
 * (1 to P2PT_BATCH_MARKS_MAX, at most max_count): part j is pieces
 * [j * max_count / n_marks, (j + 1) * max_count / n_marks) of those under
 * the count, and each of `signals` (one or more) is the first of n_marks
 * semaphores in a row, P2PT_SEMAPHORE_BYTES apart: semaphore j of each
 * counts one signal once every piece of part j, and the status record, is
 * visible at system scope. The kernel's CTAs walk the parts in order and
 * never wait for each other between them, so the link does not drain
 * between parts and they land about in order: a receiver that waits for
 * semaphore j works on part j while the later parts travel
 * (docs/SIGNALS.md). Its kernel runs one CTA an SM (a plain batch two).
 * With n_marks 1 this is p2pt_copy_batch_device_signal_async.
 */
P2PT_API p2pt_status p2pt_copy_batch_device_marks_async(p2pt_handle *h,
                                                        const p2pt_copy_desc *descs,
                                                        const uint32_t *count,
                                                        uint32_t max_count, void *workspace,
                                                        void *const *signals,
                                                        uint32_t n_signals, uint32_t n_marks,
                                                        void *stream);

/* p2pt_count_rows_async's limits: rows of a routing, its destinations
 * (bytes a row), and the places its counts go. */
#define P2PT_COUNT_ROWS_MAX (1u << 31)
#define P2PT_COUNT_COLS_MAX 64
#define P2PT_COUNT_PUTS_MAX 64

/*
 * The count exchange of an alltoallv whose routing only the GPU knows (a
 * MoE dispatch), in one kernel: a CTA a destination, at most the SM budget
 * (P2P_TRANSPORT_SM_BUDGET, P2P_TRANSPORT_MAX_CTAS). `routing` is `rows` x
 * `cols` bytes, row-major, in memory the stream's device reaches (a torch
 * bool [rows, cols] tensor): byte (t, c) nonzero where row t goes to
 * destination c. The kernel, when it runs:
 *  1. counts the rows to each destination and writes the `cols` counts
 *     (int64) to each of `puts` (n_puts addresses, 8-byte aligned, on any
 *     GPU the stream's device reaches: its own memory, a peer's, a window
 *     another process shared; say a row of every rank's count matrix);
 *  2. signals each of `signals` (n_signals semaphores, up to
 *     P2PT_BATCH_SIGNALS_MAX): each counts one signal once the counts are
 *     visible at system scope at every put;
 *  3. where `upto` is not NULL, writes each row's running count there:
 *     upto[c * rows + t] = the rows up to and including t that go to c
 *     (int64, [cols][rows]; a row's place among them, plus one), for the
 *     sender's own offsets. Work after the call on the stream sees it (a
 *     peer that waited for the signal may not).
 * rows 0 to P2PT_COUNT_ROWS_MAX (0: the counts are zeros, and still put and
 * signalled), cols 1 to P2PT_COUNT_COLS_MAX, n_puts 0 to
 * P2PT_COUNT_PUTS_MAX; the host arrays are read once, before the call
 * returns.
 * Capturable after p2pt_prepare: a replay reads the routing as it is then.
 * A kernel of the kernel transport, whatever P2P_TRANSPORT says; status 6
 * under P2P_TRANSPORT_SM_BUDGET=0. Thread-safe. docs/SIGNALS.md, "The
 * count exchange of an alltoallv".
 */
P2PT_API p2pt_status p2pt_count_rows_async(p2pt_handle *h, const void *routing, uint32_t rows,
                                           uint32_t cols, int64_t *upto, void *const *puts,
                                           uint32_t n_puts, void *const *signals,
                                           uint32_t n_signals, void *stream);

/* Bytes of GPU memory p2pt_copy_blocks_device_async needs as its workspace
 * for n_layers x pairs pieces: the status record at its start, then what
 * the call builds there (the count and one descriptor a piece). SIZE_MAX
 * when that does not fit in size_t. */
P2PT_API size_t p2pt_blocks_workspace_bytes(size_t n_layers, uint32_t pairs);

/*
 * Blocks moved by a mapping that lives in GPU memory: p2pt_copy_blocks_async's
 * pieces (piece l * pairs + r: block s of layer l's src to block d of its
 * dst, for row r = (s, d) of `mapping`), run as ONE device batch
 * (p2pt_copy_batch_device_async's contract) whose descriptors the library
 * writes on the stream, so the host never reads the mapping.
 *   layers:    host array of n_layers records, read once at stride
 *              layers[0].size before the call returns (the launches carry
 *              that copy); checked as p2pt_copy_blocks_async
 *              checks them (the same messages), and block_bytes from 1 to
 *              4 GiB - 1. Layers may share bytes: nothing is compared.
 *   mapping:   GPU memory, `pairs` rows of (src block, dst block) int64,
 *              8-byte aligned, read when the batch runs: earlier work on
 *              `stream` may write it, and a captured graph reads the rows
 *              of the moment at every replay.
 *   workspace: GPU memory of at least p2pt_blocks_workspace_bytes(n_layers,
 *              pairs) bytes, 16-byte aligned, that no other batch uses until
 *              this one is done and that shares no byte with the mapping
 *              (status 4); the p2pt_batch_status at its start is
 *              written whole (its reserved words 0) once the batch has run.
 * Ids are checked when the batch runs: an id outside [0, blocks) of its
 * layer (either side) makes its piece skipped, counted, and named in the
 * status record (first_bad = l * pairs + r, P2PT_BATCH_SKIPPED_WINDOW);
 * nothing outside dst is ever written. Every layer's blocks must lie in
 * windows registered for the stream's device (p2pt_window_register); a
 * piece outside them is skipped and counted the same way. As in vLLM, a
 * destination block listed twice is not looked for: it gets either source.
 * pairs and n_layers from 1, n_layers x pairs at most
 * properties.device_batch_max (status 4 naming both). Only kernel
 * transports: with "ce" this is status 6; P2P_TRANSPORT_SM_BUDGET as for
 * device batches. Thread-safe; capturable after p2pt_prepare.
 */
P2PT_API p2pt_status p2pt_copy_blocks_device_async(p2pt_handle *h, const p2pt_block_layer *layers,
                                                   size_t n_layers, const int64_t *mapping,
                                                   uint32_t pairs, void *workspace, void *stream);

/* -------------------------------------------------------- block layouts */

/*
 * A block layout: a cache's layers (p2pt_block_layer records) checked once
 * and kept, for the mappings swapped on them call after call (a server
 * swaps the same layers at every step). A layout belongs to no handle:
 * making one, checking a mapping against it and freeing it need no driver.
 * The layers' memory must stay allocated, and of the same kind, while the
 * layout lives: which way its pieces cross the host link is learnt at its
 * first swap of a mapping in GPU memory and kept, not asked again.
 */
typedef struct p2pt_block_layout p2pt_block_layout;

/*
 * Check `n_layers` (from 1) layer records, read at stride layers[0].size,
 * as p2pt_copy_blocks_async checks them (the same messages, status 4 naming
 * the layer), and keep a copy in *out: `layers` may be reused as soon as the
 * call returns. Whether layers share bytes is found here, once (the
 * mappings of layers that share none are checked by their ids alone).
 * Status 2 when no memory is left. Thread-safe.
 */
P2PT_API p2pt_status p2pt_block_layout_create(const p2pt_block_layer *layers, size_t n_layers,
                                              p2pt_block_layout **out);

/*
 * Free a layout made by p2pt_block_layout_create. NULL succeeds and does
 * nothing; a pointer that is not a layout is status 4 where its first word
 * tells (a layout already destroyed may not). Must not race with a call
 * that uses the layout; work already enqueued from it is unaffected.
 */
P2PT_API p2pt_status p2pt_block_layout_destroy(p2pt_block_layout *layout);

/*
 * Check `rows` rows (s, d) of `block_mapping` (host memory, int64,
 * row-major [rows, 2]) against `layout` as p2pt_block_layout_swap checks a
 * mapping in host memory, and enqueue nothing: status 4 naming the first
 * bad cell ("block_mapping[r, c] = v: src block ids must be in [0, n)
 * (src[l] has n blocks)") or the rows that race (a destination block listed
 * twice, a block both read and written). When it passes, `record` (host
 * memory; NULL: none) gets the status record of a swap that copied every
 * piece. For a caller that moves the blocks itself (memory no stream
 * reaches); needs no handle or driver. Thread-safe.
 */
P2PT_API p2pt_status p2pt_block_layout_check(const p2pt_block_layout *layout,
                                             const int64_t *block_mapping, size_t rows,
                                             p2pt_batch_status *record);

/* p2pt_block_layout_swap's `flags`: the mapping lives in GPU memory. */
#define P2PT_BLOCK_MAPPING_ON_GPU 1u

/*
 * Swap `rows` rows (s, d) of `block_mapping` (int64, row-major [rows, 2]) on
 * `layout`: for each row and each layer, block s of the layer's src to block
 * d of its dst, all of it ONE stream-ordered batch on `stream`, and its
 * status record written. The library picks the path by where the mapping
 * lives:
 *   flags 0: host memory, read before the call returns. Checked as
 *     p2pt_block_layout_check checks it (refused before anything is
 *     enqueued), then run as p2pt_copy_blocks_async runs its pieces (one
 *     host batch: its engines, host-link CTAs and SM budget). `record_or_
 *     workspace` is host memory for a p2pt_batch_status (or NULL), written
 *     before the call returns: every piece counted as copied.
 *   P2PT_BLOCK_MAPPING_ON_GPU: GPU memory, read when the batch runs (a
 *     captured graph reads the rows of the moment at every replay); run as
 *     p2pt_copy_blocks_device_async runs it (its contract: ids checked in
 *     the kernel, a bad one skipped and counted, the layers inside windows,
 *     rows at most UINT32_MAX, status 6 with "ce"). `record_or_workspace`
 *     is its workspace, p2pt_blocks_workspace_bytes(n_layers, rows) bytes
 *     of GPU memory, 16-byte aligned, whose first 32 bytes become the
 *     status record. Where every layer's pieces cross the host link one way
 *     (GPU memory of the stream's device and pinned host memory), the batch
 *     takes no more CTAs than fill that link: the policy's link CTAs, as a
 *     host batch across the link takes (the auto table's `link` lines).
 * Other bits of `flags` are status 4. rows 0: nothing is enqueued; a host
 * mapping's record says 0 pieces, a GPU mapping's workspace is not written.
 * A record's count saturates at UINT32_MAX. Thread-safe; capturable after
 * p2pt_prepare.
 */
P2PT_API p2pt_status p2pt_block_layout_swap(p2pt_handle *h, p2pt_block_layout *layout,
                                            const int64_t *block_mapping, size_t rows,
                                            unsigned flags, void *record_or_workspace,
                                            void *stream);
/* ---------------------------------------- memory shared between processes */

/*
 * One process per GPU. A process exports a range of device memory it owns
 * as blobs: opaque, versioned bytes that the framework carries to the other
 * processes of the host over its own bootstrap (a TCP store, MPI,
 * torch.distributed). Another process imports them for one of its devices:
 * the range is mapped there and registered as a window of that device, so
 * its copies and batches (host and device descriptors) put into it and get
 * from it.
 *
 * A blob carries the exporter's pid, the host's name and boot id, the
 * exporting GPU's UUID (never an ordinal: CUDA_VISIBLE_DEVICES differs
 * between ranks), a random 128-bit token naming the export, its place in the
 * export (blob i of n) and a checksum. It is valid on the host and in the
 * boot it was made in, while its export lives. It is not a secret that
 * grants access by itself: a VMM or pool export's file descriptors are
 * handed over by the exporting process, to processes of its own uid only
 * (p2pt_share_export); a legacy IPC handle opens for any process that may
 * use the GPU, as CUDA's own handles do.
 */
#define P2PT_SHARE_BLOB_BYTES 256

typedef struct p2pt_share_blob {
    unsigned char bytes[P2PT_SHARE_BLOB_BYTES];
} p2pt_share_blob;

/* An import (p2pt_share_import), until p2pt_share_close. Opaque. */
typedef struct p2pt_share_import p2pt_share_import_t;

/*
 * Export [base, base + bytes), device memory this process owns, as one blob
 * per physical allocation behind the range. `*n_blobs` is the capacity of
 * `blobs` on entry and the number of blobs of the export on return; with
 * `blobs` NULL the call only counts them and exports nothing. A capacity
 * below the count is status 4 naming the count (in the text and in
 * *n_blobs); nothing is exported. What each kind of memory becomes:
 *   cuMemAlloc / cudaMalloc memory, PyTorch's caching allocator included
 *     (a tensor is an offset inside a segment): the segment that holds the
 *     range, as a legacy IPC handle (cuIpcGetMemHandle), and the range's
 *     offset in it; one blob.
 *   VMM memory (cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
 *     PyTorch's expandable segments included: one blob per physical
 *     allocation mapped under the range, each crossing as a file descriptor;
 *     the importer maps them side by side at the same relative offsets.
 *   memory from a pool made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
 *     the pool's descriptor and the allocation's export data; one blob.
 *     CUDA's rule: the exporter frees the allocation only after every
 *     importer closed it.
 * Status 6 with the reason: host memory, memory CUDA does not know, managed
 * memory, memory of cudaMallocAsync's default pool (or any pool without a
 * shareable handle type), VMM memory made without
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, memory this handle imported from
 * another process. Exporting a range already exported returns the same
 * blobs; the same base with another size is status 5. The export lives
 * until p2pt_share_unexport or p2pt_finalize.
 *
 * The file descriptors of VMM and pool exports cross without pidfd_getfd
 * (which needs ptrace permission that Yama's default ptrace_scope=1 refuses
 * between sibling ranks, and that container seccomp profiles often block)
 * and without a daemon: the handle serves them from one thread of the
 * library on an abstract Unix socket whose name, with a random part, is in
 * the blob; started by the first such export, stopped by the last unexport
 * or p2pt_finalize. An importer connects, names the export by its token and
 * receives the descriptor (SCM_RIGHTS). The server answers processes of its
 * own uid only (SO_PEERCRED); the importer checks that the server is the
 * process the blob names. Thread-safe.
 */
P2PT_API p2pt_status p2pt_share_export(p2pt_handle *h, const void *base, size_t bytes,
                                       p2pt_share_blob *blobs, size_t *n_blobs);

/*
 * End the export whose base is `base`: its descriptors are closed and no
 * new import of it starts (an import that has not yet fetched them fails
 * with status 5 or 2). Imports already made stay valid: a VMM import holds
 * the physical memory until it closes. A legacy IPC handle cannot be
 * revoked: CUDA opens it for as long as the memory lives. Status 4 for a
 * base that is not exported by this handle. Thread-safe.
 */
P2PT_API p2pt_status p2pt_share_unexport(p2pt_handle *h, const void *base);

/*
 * Import the `n_blobs` blobs of one export (in any order) for `device`,
 * whose kernels will touch the memory: it is mapped in `device`'s primary
 * context (a legacy IPC handle opened there with
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS; VMM allocations imported, mapped side
 * by side in one reserved range and made readable and writable for
 * `device`; a pool imported, given access for `device`, and the
 * allocation's pointer imported). `*ptr` is the start of the exported range
 * here; [*ptr, *ptr + bytes) is registered as a window of `device`
 * (p2pt_window_register: device batches may touch it; it counts against
 * properties.max_windows). `*imp` names the import for p2pt_share_close.
 * Importing the same export again for the same device returns the same
 * pointer and import and counts it: each import needs its close. So does
 * another export of the same range of the same legacy or pool allocation
 * (an exporter that unexported and exported it again) while that import is
 * open: CUDA would hand the same addresses out again. VMM memory exported
 * again is mapped anew.
 *
 * Nothing is mapped, and the status names what is wrong, when a blob is
 * malformed (not a p2pt blob, a bad checksum, fields that contradict each
 * other), of a newer version (status 6: import with a p2pt as new as the
 * exporter's), made on another host or in another boot of this one, or for
 * a GPU this host does not have; or when the blobs do not form one whole
 * export (blobs of two exports, an index missing or repeated, a range past
 * its allocation): status 4 for each of these.
 * A legacy handle that a context of this process opened elsewhere (PyTorch
 * may have: CUDA opens a handle in one context per device and process) is
 * status 5 with the remedy: register that mapping as a window with
 * p2pt_window_register instead. The descriptor hand-off of VMM and pool
 * memory fails with status 2 naming the step that failed or timed out (each
 * waits a few seconds at most), or status 5 when the exporter no longer has
 * the export. Blobs of this very process: legacy and pool memory is used
 * where it is (its window registered when `device` reaches it); VMM memory
 * is mapped anew.
 *
 * When the exporter exits: a VMM import keeps the physical memory alive
 * until it closes. For legacy IPC and pool memory CUDA leaves the mapping
 * undefined: keep the exporter alive until every importer closed. Thread-safe.
 */
P2PT_API p2pt_status p2pt_share_import(p2pt_handle *h, int device, const p2pt_share_blob *blobs,
                                       size_t n_blobs, void **ptr, p2pt_share_import_t **imp);

/*
 * Close an import. The last close of a mapping unregisters its window, waits
 * for the work queued on it, then unmaps it: never an unmap under a queued
 * kernel. How it waits: while `device` has imports open, every operation
 * this handle enqueues on a stream of that device records an event on that
 * stream (one event per stream, reused), and the close synchronizes the
 * events of every stream that took work since the import. Not covered, to
 * finish before the close: work captured into a CUDA graph and replayed
 * later, work enqueued outside this handle, and work on another device's
 * stream that reaches the memory through peer access. Must not race with
 * calls that enqueue work touching the window. The events live in the
 * contexts of the streams that took work (primary contexts, for PyTorch):
 * a context of your own that enqueued work through this handle while
 * imports were open is destroyed only after those imports are closed (or
 * the handle finalized), since CUDA leaves a destroyed context's handles
 * undefined to pass. Status 4 for an import that
 * is not open on this handle (closed as often as imported, or another
 * handle's). p2pt_finalize closes every import of the handle the same way,
 * then ends its exports. Thread-safe.
 */
P2PT_API p2pt_status p2pt_share_close(p2pt_handle *h, p2pt_share_import_t *imp);

/* ------------------------------------------------------------- choices */

/*
 * Which engine a copy or a batch would go to, and why: with "auto", the
 * table, its band and the facts that decided (path, size, co-alignment,
 * capture); with a fixed transport, that transport or the fallback and its
 * reason. Set `size` to sizeof(p2pt_choice) first; p2pt fills what fits.
 */
typedef struct p2pt_choice {
    size_t size;
    const char *transport; /* "ce" or "tma", static; "none" for 0 bytes */
    const char *path;      /* "local", "push", "pull", "other", or "batch" */
    int32_t device;        /* the stream's device */
    int32_t reserved;
    char reason[512];      /* the decision in words */
} p2pt_choice;

/*
 * Fill `choice` for a copy of `bytes` from `src` to `dst` on `stream`,
 * exactly as p2pt_copy_async would decide it now (the same checks, the same
 * facts; a copy that copy_async would refuse is refused with the same
 * status and text). Enqueues nothing, changes no counter. Thread-safe.
 */
P2PT_API p2pt_status p2pt_explain_copy(p2pt_handle *h, const void *dst, const void *src,
                                       size_t bytes, void *stream, p2pt_choice *choice);
/* The same for a host batch (p2pt_copy_batch_async). */
P2PT_API p2pt_status p2pt_explain_batch(p2pt_handle *h, const p2pt_copy_desc *descs,
                                        size_t count, void *stream, p2pt_choice *choice);
/* The same for a device batch (p2pt_copy_batch_device_async, the same
 * arguments and checks): the kernel transport that reads GPU descriptors,
 * and the grid it takes (at most what a peer link needs where the windows
 * of the stream's device hold another GPU's memory). */
P2PT_API p2pt_status p2pt_explain_batch_device(p2pt_handle *h, const p2pt_copy_desc *descs,
                                               const uint32_t *count, uint32_t max_count,
                                               void *workspace, void *stream,
                                               p2pt_choice *choice);
/* The same for a signal and a wait (p2pt_signal_async, p2pt_wait_async). */
P2PT_API p2pt_status p2pt_explain_signal(p2pt_handle *h, void *sem, void *stream,
                                         p2pt_choice *choice);
P2PT_API p2pt_status p2pt_explain_wait(p2pt_handle *h, void *sem, uint32_t count, void *stream,
                                       p2pt_choice *choice);
/* The same for a count exchange (p2pt_count_rows_async): path "count". */
P2PT_API p2pt_status p2pt_explain_count_rows(p2pt_handle *h, const void *routing, uint32_t rows,
                                             uint32_t cols, int64_t *upto, void *const *puts,
                                             uint32_t n_puts, void *const *signals,
                                             uint32_t n_signals, void *stream,
                                             p2pt_choice *choice);
/* The same for blocks (p2pt_copy_blocks_async). */
P2PT_API p2pt_status p2pt_explain_blocks(p2pt_handle *h, const p2pt_block_layer *layers,
                                         size_t n_layers, const int64_t *mapping, size_t pairs,
                                         void *stream, p2pt_choice *choice);

/* Static string for a status code; "unknown status" for other values. */
P2PT_API const char *p2pt_status_string(p2pt_status status);

/*
 * The calling thread's last error text ("" when none): set by every failing
 * call on any handle, including a failed p2pt_init (pass NULL). The pointer
 * stays valid until the thread's next p2pt call.
 */
P2PT_API const char *p2pt_last_error(const p2pt_handle *h);

/* ---------------------------------------------------------------- peers */

#define P2PT_TOPOLOGY_MAX_DEVICES 32

/* What the driver says about one ordered pair of devices (row can reach
 * column). */
typedef struct p2pt_peer_link {
    int32_t can_access;     /* cuDeviceCanAccessPeer */
    int32_t perf_rank;      /* CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK (lower is faster) */
    int32_t native_atomics; /* CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED */
    int32_t reserved;
} p2pt_peer_link;

/*
 * The peer topology of the devices this process sees (at most
 * P2PT_TOPOLOGY_MAX_DEVICES; more are reported as status 6). Set `size` to
 * sizeof(p2pt_topology_t) first. `island[d]` numbers the group of device d:
 * every two devices of one island can reach each other both ways (an NVLink
 * island); islands are built greedily in device order.
 */
typedef struct p2pt_topology {
    size_t size;
    int32_t device_count;
    int32_t island_count;
    int32_t island[P2PT_TOPOLOGY_MAX_DEVICES];
    p2pt_peer_link link[P2PT_TOPOLOGY_MAX_DEVICES][P2PT_TOPOLOGY_MAX_DEVICES];
} p2pt_topology_t;

/*
 * Enable peer access between the primary contexts of dev_a and dev_b in both
 * directions. Idempotent: access already enabled is success, dev_a == dev_b
 * is a no-op. Leaves the calling thread's current context exactly as it found
 * it, on every path. P2PT_NOT_SUPPORTED when the driver says the devices
 * cannot reach each other; P2PT_INVALID_ARGUMENT for a bad ordinal. Blocks;
 * thread-safe. (Contexts you create yourself: use cuCtxEnablePeerAccess.)
 */
P2PT_API p2pt_status p2pt_peer_enable(p2pt_handle *h, int dev_a, int dev_b);

/* Fill `topo` (see p2pt_topology_t). Creates no context. Thread-safe. */
P2PT_API p2pt_status p2pt_topology(p2pt_handle *h, p2pt_topology_t *topo);

#ifdef __cplusplus
}
#endif

#endif /* P2PT_H */
