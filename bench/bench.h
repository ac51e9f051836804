/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench's shared declarations: only what more than one of its files
 * needs. Each file owns one concern and says which at its top:
 *
 *   main.c         the mode table and the order of a run; header, counters
 *   options.c      usage text and flag parsing
 *   output.c       messages and errors, table rows, CSV and JSON records
 *   gpu.c          devices, contexts, peer access, buffer pools, streams,
 *                  p2pt handles
 *   timing.c       CUDA-event timing of batches and of single copies
 *   check.c        byte checks of destinations
 *   ref_kernel.c   the plain warp-per-piece reference kernel (batch,
 *                  overlap and alltoall modes); NVRTC kernels' loads
 *   batch_layout.h batch shapes and layouts (shared with bench/experiments/)
 *   mode_*.c       one measuring mode each (table, sweep, latency, cold)
 *   calibrate_host.c  the calibrate mode's pinned host memory lists
 *                  (calibrate.h: what it shares with mode_calibrate.c)
 *   alltoall_rounds.c, alltoall_buffers.c, alltoall_check.c  the
 *                  alltoall mode's rounds, buffers and check (alltoall.h:
 *                  what they share with mode_alltoall.c); nccl.c (nccl.h)
 *                  NCCL through dlopen
 *   dlopen.c       the first of a list of libraries that loads (cuBLAS,
 *                  NCCL)
 *
 * A new mode is one file defining bench_run_NAME, its prototype below and
 * one entry in bench_modes (main.c); --mode and --help follow the table.
 *
 * The driver is reached through support/'s table `tcu`, never through the
 * library's own `p2pt__cu`, which holds only what the library calls.
 */
#ifndef P2PT_BENCH_H
#define P2PT_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch_layout.h"
#include "bench_time.h"
#include "p2pt.h"
#include "p2pt_internal.h"
#include "test_driver.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define L2_FACTOR 4 /* pools hold at least this many L2 caches */

/* The engines, then auto (a choice between them per copy, not an engine). */
enum { T_CE, T_TMA, T_AUTO, N_TRANSPORTS };
enum { P_LOCAL, P_PUSH, P_PULL, P_BIDIR, N_PATHS };

extern const char *const bench_transport_names[N_TRANSPORTS];
extern const char *const bench_path_names[N_PATHS];

/* ================================================================ modes */

enum {
    /* Measures fresh child processes: runs before this process makes any
     * context, so a child can make its own on an exclusive-process GPU. */
    BENCH_MODE_FRESH_PROCESS = 1u << 0,
    /* Measures TMA whatever --transport says; dropped where TMA is not
     * supported. */
    BENCH_MODE_TMA_ONLY = 1u << 1,
};

struct bench_mode {
    const char *name;        /* as --mode takes it */
    void (*run)(void);
    const char *description; /* --help lines, '\n' between them */
    unsigned flags;          /* BENCH_MODE_* */
};

#define BENCH_MAX_MODES 8
extern const struct bench_mode bench_modes[];
extern const int bench_n_modes;

void bench_run_table(void);
void bench_run_sweep(void);
void bench_run_latency(void);
void bench_run_cold(void);
void bench_run_batch(void);
void bench_run_calibrate(void);
void bench_run_overlap(void);
void bench_run_alltoall(void);
/* Called once the GPUs are counted, before anything is printed, when the
 * alltoall mode is selected (`alone`: no other mode is): its GPUs
 * (--gpus), or why it cannot run (one line: exit 1 when it runs alone,
 * false beside other modes, which then go on without it). */
bool bench_alltoall_choose(int count, bool alone);
/* The hidden --cold-child entry point of bench_run_cold's children. */
int bench_cold_child(int argc, char **argv);

/* ============================================================== options */

#define MAX_LIST 32   /* values in one --chunk/--stages/--max-ctas list */
#define MAX_SIZES 128 /* rows of one table */

struct bench_opts {
    size_t min_bytes, max_bytes, sweep_bytes;
    double factor;
    int warmup;  /* -1: one batch */
    int iters;   /* 0: by size */
    int repeats; /* 0: by size */
    int check;
    bool transport[N_TRANSPORTS];
    bool path[N_PATHS];
    bool path_given;
    bool mode[BENCH_MAX_MODES]; /* indexed like bench_modes */
    size_t chunk[MAX_LIST];
    int n_chunk;
    int stages[MAX_LIST];
    int n_stages;
    int max_ctas[MAX_LIST];
    int n_max_ctas;
    int device, peer;
    bool peer_given;
    const char *csv, *json;
    const char *calibrate_out; /* --calibrate-out; NULL: p2pt-auto-sm_XY.table */
    bool drop_caches;
    /* batch mode */
    struct batch_shape shapes[BATCH_MAX_SHAPES];
    int n_shapes;
    int shift;              /* --shift: destinations this far off co-alignment */
    bool host_memory;       /* --memory host: one side in pinned host memory */
    bool d2h;               /* --dir d2h (destinations on the host), else h2d */
    bool dir_given;
    int ctas[MAX_LIST];     /* --ctas: P2P_TRANSPORT_MAX_CTAS values */
    int n_ctas;
    const char *cub;        /* --cub FILE: bench/experiments/run.sh cub's lines */
    size_t sizes[MAX_SIZES];
    int n_sizes;
    /* overlap mode */
    int budgets[MAX_LIST]; /* -1: default (no budget) */
    int n_budgets;
    size_t pieces[MAX_LIST];
    int n_pieces;
    bool layouts[2]; /* block-major, layer-major with random host slots */
    const char *overlap_csv, *cublas;
    int gemm;
    int ref_ctas; /* the plain kernel's CTAs in its rows; 0: none */
    bool ref_ctas_given; /* else each mode's own default */
    /* alltoall mode */
    int gpus;              /* 0: every visible GPU */
    size_t rows;
    size_t row_bytes[MAX_LIST];
    int n_row_bytes;
    double frac;
    bool by_dest;          /* --order dest: a batch's pieces destination by destination */
    const char *nccl;      /* --nccl PATH; NULL: the usual places */
};

extern struct bench_opts bench_opt;

/* The alltoall mode's k, the rows each GPU sends each peer: --frac of
 * --rows, rounded to the nearest. */
static inline size_t bench_alltoall_k(double frac, size_t rows)
{
    return (size_t)(frac * (double)rows + 0.5);
}

/* Exits 0 after --help, 2 on a bad flag. */
void bench_parse_args(int argc, char **argv);

/* ============================================================== dlopen */

/* The first of `names[0 .. n)` that dlopen loads (RTLD_NOW | RTLD_LOCAL),
 * its name copied to `path`; each that does not load is appended to
 * `tried` (", " between). NULL when none loads. */
void *bench_dlopen_first(const char *const *names, size_t n, char *path, size_t path_len,
                         char *tried, size_t tried_len);

/* =============================================================== output */

/* Why the last helper that returned false failed; one line. */
extern char bench_err[2048];
/* Checks, cold runs and releases that failed: any of them makes the exit
 * status 1 once everything else has run. */
extern int bench_failures;

void bench_one_line(char *s);
void bench_set_err(const char *fmt, ...) P2PT_PRINTF(1, 2);
void bench_fail_cu(CUresult r, const char *text, const char *file, int line);
void bench_fail_p2(p2pt_status st, const char *text);
void bench_cu_release(CUresult r, const char *text, const char *file, int line);
_Noreturn void bench_usage_error(const char *fmt, ...) P2PT_PRINTF(1, 2);
/* A run-time failure: what was being measured, then bench_err; exit 1. */
_Noreturn void bench_fatal(const char *fmt, ...) P2PT_PRINTF(1, 2);
/* "48K", "1G", or plain bytes when no suffix is exact. */
const char *bench_fmt_size(size_t b, char *buf, size_t len);

/* Helpers return bool; CU and P2 need a label `fail` for their cleanup. */
#define CU(call)                                                               \
    do {                                                                       \
        CUresult cu_r_ = (call);                                               \
        if (cu_r_ != CUDA_SUCCESS) {                                           \
            bench_fail_cu(cu_r_, #call, __FILE__, __LINE__);                   \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

#define P2(call)                                                               \
    do {                                                                       \
        p2pt_status p2_s_ = (call);                                            \
        if (p2_s_ != P2PT_SUCCESS) {                                           \
            bench_fail_p2(p2_s_, #call);                                       \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* Releases: a failure is reported and counted, never fatal (the process is
 * finishing that piece of work anyway). */
#define CU_RELEASE(call) bench_cu_release((call), #call, __FILE__, __LINE__)

/* A table row is printed piece by piece: between these two, a fatal message
 * starts on a new line and check failures wait for the row's end. */
void bench_row_begin(void);
void bench_row_end(void);
void bench_row_check_failed(const char *fmt, ...) P2PT_PRINTF(1, 2);

struct bench_tma_cfg {
    size_t chunk;
    int stages, max_ctas;
};

/* Opens --csv and --json; they are closed at exit. With the alltoall mode
 * its rows go to a CSV of their own: --csv itself when it runs alone, else
 * one named beside it. */
void bench_open_outputs(bool alltoall, bool alone);
/* One measurement (`cfg` NULL or ignored for ce: its TMA columns are 0). */
void bench_emit(const char *mode, const char *path, int transport,
                const struct bench_tma_cfg *cfg, size_t bytes, double time_us, double gbps,
                const char *kind);
/* The same with a batch row's ratios in the vs_contig and vs_ref columns
 * (contig_ce's GPU time over the row's; the row's over the better anchor's). */
void bench_emit_ratios(const char *mode, const char *path, int transport,
                       const struct bench_tma_cfg *cfg, size_t bytes, double time_us,
                       double gbps, const char *kind, double vs_contig, double vs_ref);

/* One row of the alltoall mode (--csv's columns when it runs alone). */
struct bench_alltoall_record {
    int gpus;
    size_t rows, row_bytes;
    double frac;
    const char *way;
    int sm_budget;         /* -1: default (unset) */
    long long max_ctas;    /* -1: not known (an empty cell) */
    double gbps_per_gpu;
    double vs_ce_packed;   /* -1: that row did not run (an empty cell) */
    double vs_nccl;
};
void bench_emit_alltoall(const struct bench_alltoall_record *r);
/* Where the alltoall rows go; NULL without --csv. */
const char *bench_alltoall_csv_path(void);

/* GB/s of `bytes` in `us`; 0 rather than inf for a zero reading, so the
 * JSON stays valid whatever the clock says. */
static inline double bench_gbps(double bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0; }
static inline double bench_ratio(double a, double b) { return b > 0 ? a / b : 0; }
/* Are ce, tma and auto all measured (the auto/best column)? */
static inline bool bench_auto_vs_best(const bool *transport)
{
    return transport[T_CE] && transport[T_TMA] && transport[T_AUTO];
}
/* auto's figure over the better engine's: higher_is_better for bandwidth
 * (auto / max), else times (auto / min). */
static inline double bench_auto_best(const double *v, bool higher_is_better)
{
    double a = v[T_CE], b = v[T_TMA];
    double best = higher_is_better ? (a > b ? a : b) : (a < b ? a : b);
    return bench_ratio(v[T_AUTO], best);
}
static inline void *bench_dptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* ================================================================= GPUs */

struct bench_gpu {
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* primary context, retained; NULL until bench_gpu_open */
    char name[128];
    int sms, cc_major, cc_minor;
    size_t l2;
};

/* [0] = --device (every stream but bidir's second), [1] = --peer (a copy
 * of [0] when there is no usable peer). */
extern struct bench_gpu bench_gpus[2];
extern bool bench_have_peer;

/* Allocated past every pool: room for the check's guard bytes. */
#define SLACK 4096
/* What checked destinations and their guards hold before the copy. */
#define BENCH_POISON 0xA5

/* A pool that copies rotate through, with SLACK bytes allocated past it. */
struct bench_arena {
    const struct bench_gpu *g;
    CUdeviceptr base;
    size_t pool;
};

/* One direction of copying: a stream on `g` moving src -> dst, and a
 * reference buffer on `g` for the check. */
struct bench_dir {
    const struct bench_gpu *g;
    CUstream s;
    struct bench_arena src, dst, ref;
    unsigned long next; /* rotation counter, kept across sizes and transports */
};

/* Everything one path needs; bidir has two directions. */
struct bench_setup {
    int path;
    int ndirs;
    size_t pool;
    struct bench_dir d[2];
};

bool bench_use(const struct bench_gpu *g);
bool bench_gpu_info(struct bench_gpu *g, int ordinal);
bool bench_gpu_open(struct bench_gpu *g);
void bench_gpu_close(struct bench_gpu *g);
bool bench_enable_peer_access(void);
/* Sources repeat a random pattern with a prime period, so a block written
 * to the wrong place cannot line up with the pattern and pass a check:
 * byte o of a filled buffer is pattern[o % BENCH_PATTERN_PERIOD]. */
#define BENCH_PATTERN_PERIOD 1000003u
/* One period of the pattern of `seed`. */
void bench_pattern(uint64_t seed, unsigned char *out, size_t n);
/* `total` bytes at `base` on `g` filled with `pattern` (one period). */
bool bench_fill(const struct bench_gpu *g, CUdeviceptr base, size_t total,
                const unsigned char *pattern);
/* Buffers for copies of up to `largest` bytes on `path`, sources filled. */
bool bench_setup_open(struct bench_setup *su, int path, size_t largest);
void bench_setup_close(struct bench_setup *su);
/* Where copy number `i` of `bytes` starts in a pool of `pool` bytes. */
size_t bench_slot_offset(size_t pool, size_t bytes, unsigned long i);

/* The table's and latency's handles: one per transport, tuned by the
 * environment alone (auto's table: P2P_TRANSPORT_AUTO_TABLE or built-in);
 * the TMA one's settings. */
extern p2pt_handle *bench_handles[N_TRANSPORTS];
extern struct bench_tma_cfg bench_default_cfg;

/* p2pt_init for `transport` with p2pt_init_args.options `options` (NULL:
 * the environment alone); `cfg`, when not NULL, gets the TMA settings. */
bool bench_handle_open(const char *transport, const char *options, p2pt_handle **h,
                       struct bench_tma_cfg *cfg);
/* p2pt_prepare on --device, and on --peer with `peer_too`. */
bool bench_prepare_on(p2pt_handle *h, bool peer_too, p2pt_status *st_out);

/* =============================================================== timing */

struct bench_timing {
    double us;     /* median device time per copy (bidir: per pair of copies) */
    double enq_us; /* median host time to enqueue one copy (pair) */
};

int bench_iters_for(size_t bytes);
int bench_repeats_for(size_t bytes);
int bench_warmup_for(int iters);
bool bench_time_copies(p2pt_handle *h, struct bench_dir *dirs, int ndirs, size_t bytes,
                       int warmup, int n, int repeats, struct bench_timing *out);
/* Back-to-back copies queued behind a gate: the GPU's per-copy rate alone.
 * False, with bench_err saying why, where the driver offers no stream wait. */
bool bench_time_copies_queued(p2pt_handle *h, struct bench_dir *d, size_t bytes, int warmup,
                              int n, int repeats, struct bench_timing *out);
bool bench_time_single(p2pt_handle *h, struct bench_dir *d, size_t bytes, int samples,
                       double *host_us, double *dev_us);

/* ================================================================ check */

/* Checks every direction of `su` when -c 1; returns the row's check column:
 * "ok", "FAIL" (counted, explained after the row) or "-" (not checked). */
const char *bench_check_all(p2pt_handle *h, struct bench_setup *su, size_t bytes,
                            int transport, const char *what);
void bench_check_free(void);
/* A device batch's status record at `workspace` (in the current context)
 * must say that all `posted` pieces were copied and none skipped: `*ok`
 * false, the record reported after the row, when it does not; `whose`
 * names the record there ("the", "GPU 1's"). False when the read failed. */
bool bench_check_batch_status(CUdeviceptr workspace, size_t posted, const char *label,
                              const char *whose, bool *ok);

/* =========================================================== ref kernel */

/* A cubin kept from one GPU's load for the next GPU of the same
 * architecture, so that a kernel loaded on every GPU of a run is compiled
 * once, not once per GPU: zeroed before the first load, bench_cubin_free
 * after the last. */
struct bench_cubin {
    const char *source; /* what it was compiled from */
    int arch;
    void *data;
};
void bench_cubin_free(struct bench_cubin *c);

/* `source` compiled with NVRTC for g's architecture (unless `kept`, NULL
 * or as above, holds that cubin) and its function `entry` loaded in g's
 * context; false with bench_err, which `what` starts, saying why. */
bool bench_jit_load(const char *source, const char *entry, const char *what,
                    const struct bench_gpu *g, struct bench_cubin *kept, CUmodule *mod,
                    CUfunction *fn);

/* The reference kernel, loaded in one GPU's context. */
struct bench_ref {
    CUmodule mod;
    CUfunction fn;
    int sms;
};

/* bench_jit_load of the reference kernel on `g` (`kept`: as there). */
bool bench_ref_load(struct bench_ref *r, const struct bench_gpu *g, struct bench_cubin *kept);
#define BENCH_REF_THREADS 256 /* threads of one of its CTAs: 8 warps */

/* One launch copying the `*count` pieces (count in GPU memory, at most
 * `max_count`) of the p2pt_copy_desc array `descs` in GPU memory, on at
 * most `most` CTAs of BENCH_REF_THREADS (0: as many as a warp per piece
 * needs, up to a full GPU). */
bool bench_ref_launch(const struct bench_ref *r, CUdeviceptr descs, CUdeviceptr count,
                      uint32_t max_count, unsigned most, CUstream s);
/* The CTAs bench_ref_launch gives those arguments. */
unsigned bench_ref_ctas(const struct bench_ref *r, uint32_t max_count, unsigned most);
void bench_ref_unload(struct bench_ref *r);

#endif /* P2PT_BENCH_H */
