/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench's flags: the --help text and the parsing, into bench_opt.
 * A bad flag exits 2 with one line naming it, before any driver is looked
 * for. The TMA knobs accept exactly the ranges p2pt itself accepts
 * (src/config.h), so the sweep never asks p2pt for a value it will refuse
 * for its range.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

const char *const bench_transport_names[N_TRANSPORTS] = {"ce", "tma", "auto"};
const char *const bench_path_names[N_PATHS] = {"local", "push", "pull", "bidir"};

struct bench_opts bench_opt;

/* The mode column of --help, and where each description line continues. */
#define MODE_INDENT "                       "
#define MODE_CONTINUE "                                "

static void usage_modes(FILE *f)
{
    fputs("  --mode LIST        ", f);
    for (int m = 0; m < bench_n_modes; m++)
        fprintf(f, "%s, ", bench_modes[m].name);
    fprintf(f, "or all (default %s)\n", bench_modes[0].name);
    for (int m = 0; m < bench_n_modes; m++) {
        const char *line = bench_modes[m].description;
        fprintf(f, MODE_INDENT "%-8s ", bench_modes[m].name);
        for (;;) {
            size_t len = strcspn(line, "\n");
            fprintf(f, "%.*s\n", (int)len, line);
            if (line[len] == '\0')
                break;
            line += len + 1;
            fputs(MODE_CONTINUE, f);
        }
    }
}

static void usage(FILE *f)
{
    char cmin[16], cmax[16];
    fputs(
"usage: p2pt-bench [options]\n"
"\n"
"Measures p2pt's transports side by side, through p2pt's API: ce (the CUDA copy\n"
"engine, cuMemcpyAsync) and tma (the Hopper cp.async.bulk kernel that p2pt\n"
"compiles with NVRTC). SIZE is bytes with an optional binary suffix: 4096, 4K,\n"
"48K, 1M, 1G (K = 1024). LIST is comma-separated: --chunk 32K,48K,64K.\n"
"Options take their value as the next argument, or as --opt=VALUE / -bVALUE.\n"
"\n"
"Copy sizes (table mode; latency mode runs 4K..1M, narrowed by -b/-e):\n"
"  -b SIZE            smallest copy (default 4K)\n"
"  -e SIZE            largest copy (default 1G)\n"
"  -f FACTOR          size multiplier from one row to the next, > 1 (default 2)\n"
"\n"
"Iterations:\n"
"  -w N               warm-up copies before timing each size and transport\n"
"                     (default: as many as one timed batch)\n"
"  -n N               copies per timed batch (default: 256M / size, clamped to\n"
"                     5..100; latency mode's back-to-back batches: 100)\n"
"  -r N               timed batches per size and transport; the median is\n"
"                     reported (default: 20 up to 16M, 10 up to 256M, then 5)\n"
"  -c 0|1             after timing each size, one more copy per transport,\n"
"                     same size and alignment as the timed ones, into a\n"
"                     poisoned destination: every byte compared with a\n"
"                     copy-engine reference (cuMemcpyAsync into a separate\n"
"                     buffer), and 256 guard bytes on each side must stay\n"
"                     untouched (default 1)\n"
"\n"
"What to run:\n", f);
    usage_modes(f);
    fputs(
"  --cold-drop-caches before each cold run, drop the OS page cache (root;\n"
"                     /proc/sys/vm/drop_caches) so NVRTC and the cubin come\n"
"                     from disk as after a reboot\n"
"  --transport LIST   ce, tma, auto, or all (default all); with all three,\n"
"                     tables add auto/best: auto over the better engine\n"
"  --path LIST        local, push, pull, bidir, or all (default local, plus\n"
"                     push, pull and bidir when a second GPU can be reached)\n"
"                       local  stream, source and destination on --device\n"
"                       push   stream and source on --device, destination on\n"
"                              --peer\n"
"                       pull   stream and destination on --device, source on\n"
"                              --peer\n"
"                       bidir  --device -> --peer and --peer -> --device at\n"
"                              once, each on a stream of its source's GPU\n"
"  --device N         the GPU whose stream copies (default 0)\n"
"  --peer M           the second GPU of push, pull and bidir (default: the\n"
"                     first other GPU)\n"
"\n"
"Sweep (each combination goes to its own p2pt_init as P2P_TRANSPORT_* options):\n",
        f);
    fprintf(f,
"  --chunk LIST       TMA chunk sizes, %s..%s (default 16K,32K,48K,64K,96K)\n"
"  --stages LIST      TMA ring stages, %d..%d (default 2,3,4)\n"
"  --max-ctas LIST    CTA caps, 0..%d, 0 = p2pt's automatic grid (default 0)\n",
            bench_fmt_size(P2PT_CHUNK_MIN, cmin, sizeof(cmin)),
            bench_fmt_size(P2PT_CHUNK_MAX, cmax, sizeof(cmax)), P2PT_STAGES_MIN,
            P2PT_STAGES_MAX, P2PT_MAX_CTAS_MAX);
    fputs(
"  --sweep-bytes SIZE copy size of the sweep (default 1G)\n"
"                     Combinations with chunk x stages over 227K are listed\n"
"                     as skipped; p2pt_init/p2pt_prepare errors are printed\n"
"                     in their row.\n"
"\n"
"Batches (--mode batch):\n"
"  --shapes LIST      mixed, COUNTxSIZE or COUNTxSIZE/EVERY=SIZE, e.g.\n"
"                     1024x14K,mixed,8192x4K/64=16K (default\n"
"                     1024x14K,4096x7K,256x4K,16384x2K,16384x32K,64x1M,mixed;\n"
"                     mixed: 1024 pieces, one in 32 of 1M, the rest 64 to 14K;\n"
"                     /EVERY=SIZE: piece i of that size where i % EVERY is 0)\n"
"  --shift N          destinations N bytes (0..15) off co-alignment with their\n"
"                     sources: dst = src + N (mod 16) (default 0)\n"
"  --memory device|host  host: one side in pinned host memory (cuMemAllocHost),\n"
"                     the pool at least 64M; rows that cannot run there are\n"
"                     listed as skipped with the reason (default device)\n"
"  --dir h2d|d2h      with --memory host: sources on the host (h2d, default)\n"
"                     or destinations on the host (d2h)\n"
"  --ctas LIST        also run tma_host and tma_device once per\n"
"                     P2P_TRANSPORT_MAX_CTAS value (0 = automatic), a handle\n"
"                     per value, e.g. 0,16,32,66,132\n"
"  --cub FILE         GPU times of CUB's DeviceMemcpy::Batched for the same\n"
"                     layouts, as bench/experiments/run.sh cub prints them;\n"
"                     t/ref then divides by the better of ref_kernel and CUB\n"
"\n"
"Offload beside compute (--mode overlap):\n"
"  --pieces LIST      piece sizes (default 4K,16K,64K); 32 layers, 128M per\n"
"                     transfer, between one GPU allocation and one pinned host\n"
"                     allocation, both directions\n"
"  --layouts LIST     block (a block's layers at a constant stride on the GPU,\n"
"                     side by side on the host) and/or layer (layer by layer,\n"
"                     random host slots: nothing to coalesce) (default both)\n"
"  --budgets LIST     P2P_TRANSPORT_SM_BUDGET values for tma and auto (alltoall:\n"
"                     auto and auto_host, besides their rows without one):\n"
"                     default (unset) or 0..4096 (default default,0)\n"
"  --gemm N           the bf16 N x N x N cuBLAS GEMM run beside (default 8192)\n"
"  --ref-ctas N       CTAs of 256 threads (8 warps) of the plain warp-per-piece\n"
"                     kernel's rows, the kernel yardstick (default 8 in overlap,\n"
"                     32 in alltoall; 0: no such rows)\n"
"  --cublas PATH      the cuBLAS library to dlopen (default libcublas.so.13,\n"
"                     .12, then under $CUDA_HOME/lib64 and /usr/local/cuda/lib64);\n"
"                     without one the mode prints one line and exits 2\n"
"  --overlap-csv FILE where its rows go (default\n"
"                     bench/results/DATE-GPU-overlap.csv when bench/results/\n"
"                     exists here, else DATE-GPU-overlap.csv)\n"
"\n"
"Alltoall between the GPUs of this process (--mode alltoall):\n"
"  --gpus N           GPUs 0..N-1 take part, N from 2 to every visible GPU (at\n"
"                     most 32; default every visible GPU); with fewer than 2\n"
"                     GPUs the mode says so in one line and exits 1 (beside\n"
"                     other modes it is skipped with that line)\n"
"  --rows N           source rows on every GPU, 1..16777216 (default 16384)\n"
"  --row-bytes LIST   row sizes, multiples of 16 from 16 to 64M, one table\n"
"                     each (default 4K,14K,64K)\n"
"  --frac F           the fraction of its rows a GPU sends to each peer, above 0\n"
"                     and at most 1 (default 0.5): picked at random for every\n"
"                     pair, sent in row order\n"
"  --order row|dest   the order of a batch's pieces (default row): row, in\n"
"                     source row order, a row's peers one after another from\n"
"                     the next GPU on (the order of a MoE dispatch, token by\n"
"                     token); dest, destination by destination from the next\n"
"                     GPU on\n"
"  --nccl PATH        the NCCL library to dlopen (default libnccl.so.2 from the\n"
"                     loader's path, then under $CUDA_HOME/lib64 and\n"
"                     /usr/local/cuda/lib64, then PyTorch's copy,\n"
"                     nvidia/nccl/lib/libnccl.so.2, in the usual Python package\n"
"                     folders); without one the nccl rows say why and the rest\n"
"                     runs. NCCL_NVLS_ENABLE=0 is set before NCCL starts unless\n"
"                     the environment sets it: NVLink multicast stays off\n"
"                     Ways, one row each per row size:\n"
"                       ce_packed     the yardstick: the rows packed beforehand,\n"
"                                     one cuMemcpyAsync per (source, destination)\n"
"                                     pair, issued on the source GPU, a stream\n"
"                                     per pair\n"
"                       nccl          ncclSend/ncclRecv of the packed rows, every\n"
"                                     rank's calls in one group, communicators\n"
"                                     from ncclCommInitAll\n"
"                       plain_kernel  --ref-ctas CTAs of 256 threads on each\n"
"                                     source GPU, a warp per row, 16-byte loads\n"
"                                     and stores, no shared memory, reading the\n"
"                                     device batch's descriptors\n"
"                       ce, tma_host, auto_host  p2pt_copy_batch_async: one\n"
"                                     batch per source GPU with its rows for\n"
"                                     every peer, from the scattered rows\n"
"                       tma, auto     p2pt_copy_batch_device_async: the same\n"
"                                     pieces, descriptors and count in GPU\n"
"                                     memory, windows over the source rows and\n"
"                                     every peer's receive buffer\n"
"                       auto_host, auto again at each --budgets value; a\n"
"                       budget that refuses a device batch (status 6) is a\n"
"                       row saying so. --transport picks among the p2pt ways.\n"
"                     A round: GPU 0's stream records the start, every other\n"
"                     GPU's stream waits for it, every GPU works, GPU 0's stream\n"
"                     waits for them all and records the end (CUDA events);\n"
"                     after one checked round and -w rounds of warm-up (default\n"
"                     3), -r rounds back to back (default 20), median. GB/s per\n"
"                     GPU = the bytes each GPU sends in a round / the round's\n"
"                     time; ctas = the widest grid the way launched\n"
"                     (p2pt_properties.max_grid). -c 1: before each way's checked\n"
"                     round the receive buffers are poisoned; after it every\n"
"                     byte of them must equal what ce_packed received, 4K guard\n"
"                     bytes after each peer's rows included, and ce_packed's\n"
"                     bytes must equal the source rows\n"
"\n"
"Output:\n"
"  --csv FILE         every measurement as one CSV row:\n"
"                     mode,path,transport,bytes,chunk,stages,max_ctas,time_us,gbps,kind,\n"
"                     vs_contig,vs_ref\n"
"                     (chunk, stages, max_ctas: the TMA settings, 0 for ce\n"
"                     and 0 = auto for max_ctas; bytes: one copy's size, also\n"
"                     for bidir, whose gbps adds both directions; kind: bw,\n"
"                     or b2b/b2b_gpu/host/dev/enq for latency, or init/prepare/first/\n"
"                     second/first_median for cold, the same prefixed with\n"
"                     cached_ for cold runs with the cubin cache; cold times\n"
"                     are in us; batch: ROW:SHAPE and ROW_enq:SHAPE, the host\n"
"                     enqueue; vs_contig = contig_ce's GPU time / the row's,\n"
"                     vs_ref = the row's / the better of ref_kernel and CUB,\n"
"                     empty outside batch rows)\n"
"                     --mode alltoall alone writes its own columns there:\n"
"                     gpus,rows,row_bytes,frac,way,sm_budget,max_ctas,\n"
"                     gbps_per_gpu,vs_ce_packed,vs_nccl (sm_budget default when\n"
"                     unset; max_ctas empty for nccl; the ratios are GB/s over\n"
"                     that row's, empty when it did not run); beside other\n"
"                     modes these rows go to FILE with -alltoall before .csv\n"
"  --json FILE        the same records as a JSON array of objects\n"
"  --calibrate-out FILE  where --mode calibrate writes the table (default\n"
"                     p2pt-auto-sm_XY.table in the current directory)\n"
"  -h, --help         this text\n"
"\n"
"Conventions. Bandwidth = payload bytes / time: each copy counts its size once\n"
"(copying N bytes moves N bytes, on any path); bidir adds both directions'\n"
"payloads. GB/s = 1e9 bytes per second. Time = CUDA events around a batch of\n"
"copies divided by the copies in it, median over the batches, after warm-up;\n"
"bidir times both streams from one start to the later end. p2pt_prepare (the\n"
"NVRTC compile and module load) runs before anything is timed. Sources and\n"
"destinations rotate through pools of at least 4x L2, so copies that fit in\n"
"L2 do not find their data there.\n"
"\n"
"Environment: P2P_TRANSPORT_* tune p2pt as in env.md (the sweep passes three\n"
"of them to its own p2pt_init); P2P_CUDA_LIBRARY names the driver library.\n"
"Exit status: 0 done; 1 no GPU, a CUDA or p2pt error, or a failed check;\n"
"2 a bad flag or a bad P2P_TRANSPORT_* value.\n",
        f);
}

static size_t flag_size(const char *flag, const char *v)
{
    unsigned long long b;
    /* Digits, then an optional K, M or G (binary), as env.md's values. */
    if (!p2pt__parse_size(v, &b) || b == 0 || b > (unsigned long long)SIZE_MAX)
        bench_usage_error("%s \"%s\": expected a size above 0 such as 4096, 4K, 48K, 1G", flag,
                          v);
    return (size_t)b;
}

static int flag_int(const char *flag, const char *v, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
        bench_usage_error("%s \"%s\": expected a whole number from %ld to %ld", flag, v, lo,
                          hi);
    return (int)x;
}

#define MAX_NAMES 8
_Static_assert(N_TRANSPORTS <= MAX_NAMES && N_PATHS <= MAX_NAMES &&
                   BENCH_MAX_MODES <= MAX_NAMES,
               "flag_names keeps its flags in MAX_NAMES slots");

/* A comma list of names into flags; "all" sets them all. */
static void flag_names(const char *flag, const char *v, const char *const *names, int n,
                       bool *out)
{
    bool seen[MAX_NAMES] = {false};
    const char *p = v;
    for (;;) {
        size_t len = strcspn(p, ",");
        bool hit = false;
        if (len == 3 && strncasecmp(p, "all", 3) == 0) {
            for (int i = 0; i < n; i++)
                seen[i] = true;
            hit = true;
        }
        for (int i = 0; i < n && !hit; i++)
            if (strlen(names[i]) == len && strncasecmp(p, names[i], len) == 0)
                seen[i] = hit = true;
        if (!hit) {
            char accepted[128] = "";
            for (int i = 0; i < n; i++)
                snprintf(accepted + strlen(accepted), sizeof(accepted) - strlen(accepted),
                         "%s, ", names[i]);
            bench_usage_error("%s \"%s\": \"%.*s\" is not one of %sall", flag, v, (int)len, p,
                              accepted);
        }
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    memcpy(out, seen, sizeof(bool) * (size_t)n);
}

/* Calls `one` for every comma-separated item; returns the count. */
static int flag_list(const char *flag, const char *v, int max,
                     void (*one)(const char *flag, const char *item, int i, void *out),
                     void *out)
{
    char buf[512];
    if (strlen(v) >= sizeof(buf))
        bench_usage_error("%s \"%.40s...\": list too long", flag, v);
    snprintf(buf, sizeof(buf), "%s", v);
    int n = 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*p == '\0')
            bench_usage_error("%s \"%s\": empty item in the list", flag, v);
        if (n == max)
            bench_usage_error("%s \"%s\": at most %d values", flag, v, max);
        one(flag, p, n++, out);
        if (!comma)
            break;
        p = comma + 1;
    }
    return n;
}

static void one_chunk(const char *flag, const char *item, int i, void *out)
{
    size_t b = flag_size(flag, item);
    char lo[16], hi[16];
    if (b < P2PT_CHUNK_MIN || b > P2PT_CHUNK_MAX)
        bench_usage_error("%s \"%s\": expected a chunk from %s to %s (%u bytes)", flag, item,
                          bench_fmt_size(P2PT_CHUNK_MIN, lo, sizeof(lo)),
                          bench_fmt_size(P2PT_CHUNK_MAX, hi, sizeof(hi)), P2PT_CHUNK_MAX);
    ((size_t *)out)[i] = b;
}

static void one_stages(const char *flag, const char *item, int i, void *out)
{
    ((int *)out)[i] = flag_int(flag, item, P2PT_STAGES_MIN, P2PT_STAGES_MAX);
}

static void one_ctas(const char *flag, const char *item, int i, void *out)
{
    ((int *)out)[i] = flag_int(flag, item, 0, P2PT_MAX_CTAS_MAX);
}

/* "default" (-1: no P2P_TRANSPORT_SM_BUDGET) or a budget. */
static void one_budget(const char *flag, const char *item, int i, void *out)
{
    ((int *)out)[i] =
        strcasecmp(item, "default") == 0 ? -1 : flag_int(flag, item, 0, P2PT_MAX_CTAS_MAX);
}

static void one_piece(const char *flag, const char *item, int i, void *out)
{
    size_t b = flag_size(flag, item);
    if (b < 16 || b > 64 * MiB)
        bench_usage_error("%s \"%s\": expected a piece size from 16 bytes to 64M", flag, item);
    ((size_t *)out)[i] = b;
}

static void one_row_bytes(const char *flag, const char *item, int i, void *out)
{
    unsigned long long b = 0;
    if (!p2pt__parse_size(item, &b) || b < 16 || b > 64 * MiB || b % 16 != 0)
        bench_usage_error("%s \"%s\": expected a row size in bytes, a multiple of 16 from 16 "
                          "to 64M, such as 4K, 14K, 64K",
                          flag, item);
    ((size_t *)out)[i] = (size_t)b;
}

static void one_shape(const char *flag, const char *item, int i, void *out)
{
    char why[256];
    if (!batch_shape_parse(item, &((struct batch_shape *)out)[i], why, sizeof(why)))
        bench_usage_error("%s %s", flag, why);
}

/* `a` (0) or `b` (1), ignoring case. */
static int flag_choice(const char *flag, const char *v, const char *a, const char *b)
{
    if (strcasecmp(v, a) == 0)
        return 0;
    if (strcasecmp(v, b) == 0)
        return 1;
    bench_usage_error("%s \"%s\": expected %s or %s", flag, v, a, b);
}

enum opt_id {
    O_HELP, O_B, O_E, O_F, O_W, O_N, O_R, O_C, O_MODE, O_TRANSPORT, O_PATH, O_DEVICE,
    O_PEER, O_CHUNK, O_STAGES, O_MAX_CTAS, O_SWEEP_BYTES, O_CSV, O_JSON, O_DROP_CACHES,
    O_CALIBRATE_OUT, O_SHAPES, O_SHIFT, O_MEMORY, O_DIR, O_CTAS, O_CUB, O_BUDGETS, O_PIECES,
    O_LAYOUTS, O_OVERLAP_CSV, O_CUBLAS, O_GEMM, O_REF_CTAS, O_GPUS, O_ROWS, O_ROW_BYTES,
    O_FRAC, O_ORDER, O_NCCL
};

static const struct {
    const char *name;
    enum opt_id id;
    bool value;
} opt_table[] = {
    {"-h", O_HELP, false},         {"--help", O_HELP, false},
    {"-b", O_B, true},             {"-e", O_E, true},
    {"-f", O_F, true},             {"-w", O_W, true},
    {"-n", O_N, true},             {"-r", O_R, true},
    {"-c", O_C, true},             {"--mode", O_MODE, true},
    {"--transport", O_TRANSPORT, true}, {"--path", O_PATH, true},
    {"--device", O_DEVICE, true},  {"--peer", O_PEER, true},
    {"--chunk", O_CHUNK, true},    {"--stages", O_STAGES, true},
    {"--max-ctas", O_MAX_CTAS, true}, {"--sweep-bytes", O_SWEEP_BYTES, true},
    {"--csv", O_CSV, true},        {"--json", O_JSON, true},
    {"--calibrate-out", O_CALIBRATE_OUT, true},
    {"--cold-drop-caches", O_DROP_CACHES, false},
    {"--shapes", O_SHAPES, true},  {"--shift", O_SHIFT, true},
    {"--memory", O_MEMORY, true},  {"--dir", O_DIR, true},
    {"--ctas", O_CTAS, true},      {"--cub", O_CUB, true},
    {"--budgets", O_BUDGETS, true}, {"--pieces", O_PIECES, true},
    {"--layouts", O_LAYOUTS, true}, {"--overlap-csv", O_OVERLAP_CSV, true},
    {"--cublas", O_CUBLAS, true},  {"--gemm", O_GEMM, true},
    {"--ref-ctas", O_REF_CTAS, true},
    {"--gpus", O_GPUS, true},      {"--rows", O_ROWS, true},
    {"--row-bytes", O_ROW_BYTES, true}, {"--frac", O_FRAC, true},
    {"--order", O_ORDER, true},    {"--nccl", O_NCCL, true},
};

static void make_sizes(struct bench_opts *o)
{
    double s = (double)o->min_bytes;
    size_t prev = 0;
    o->n_sizes = 0;
    for (;;) {
        size_t v = (size_t)(s + 0.5);
        if (s > (double)o->max_bytes + 0.5)
            break;
        if (v > prev) {
            if (o->n_sizes == MAX_SIZES)
                bench_usage_error("-b %zu -e %zu -f %g: more than %d sizes; raise -f",
                                  o->min_bytes, o->max_bytes, o->factor, MAX_SIZES);
            o->sizes[o->n_sizes++] = v;
            prev = v;
        }
        s *= o->factor;
    }
}

static void set_defaults(struct bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->min_bytes = 4 * KiB;
    o->max_bytes = 1 * GiB;
    o->sweep_bytes = 1 * GiB;
    o->factor = 2;
    o->warmup = -1;
    o->check = 1;
    o->transport[T_CE] = o->transport[T_TMA] = o->transport[T_AUTO] = true;
    o->path[P_LOCAL] = true;
    o->mode[0] = true; /* the first mode of the table is the default */
    o->n_chunk = flag_list("--chunk", "16K,32K,48K,64K,96K", MAX_LIST, one_chunk, o->chunk);
    o->n_stages = flag_list("--stages", "2,3,4", MAX_LIST, one_stages, o->stages);
    o->n_max_ctas = flag_list("--max-ctas", "0", MAX_LIST, one_ctas, o->max_ctas);
    o->n_shapes =
        flag_list("--shapes", batch_default_shapes, BATCH_MAX_SHAPES, one_shape, o->shapes);
    o->n_budgets = flag_list("--budgets", "default,0", MAX_LIST, one_budget, o->budgets);
    o->n_pieces = flag_list("--pieces", "4K,16K,64K", MAX_LIST, one_piece, o->pieces);
    o->layouts[0] = o->layouts[1] = true;
    o->gemm = 8192;
    o->ref_ctas = 8;
    o->rows = 16384;
    o->n_row_bytes = flag_list("--row-bytes", "4K,14K,64K", MAX_LIST, one_row_bytes, o->row_bytes);
    o->frac = 0.5;
}

/* Applies flag `id` with value `val` (NULL for a flag without one). */
static void apply(struct bench_opts *o, enum opt_id id, const char *name, const char *val)
{
    const char *mode_names[BENCH_MAX_MODES];
    switch (id) {
    case O_HELP:
        usage(stdout);
        exit(0);
    case O_B: o->min_bytes = flag_size(name, val); break;
    case O_E: o->max_bytes = flag_size(name, val); break;
    case O_F: {
        char *end = NULL;
        errno = 0;
        o->factor = strtod(val, &end);
        if (errno != 0 || end == val || *end != '\0' || !(o->factor > 1.0) ||
            !(o->factor <= 1024.0))
            bench_usage_error("-f \"%s\": expected a number above 1 (and at most 1024)", val);
        break;
    }
    case O_W: o->warmup = flag_int(name, val, 0, 1000000); break;
    case O_N: o->iters = flag_int(name, val, 1, 1000000); break;
    case O_R: o->repeats = flag_int(name, val, 1, 100000); break;
    case O_C: o->check = flag_int(name, val, 0, 1); break;
    case O_MODE:
        for (int m = 0; m < bench_n_modes; m++)
            mode_names[m] = bench_modes[m].name;
        flag_names(name, val, mode_names, bench_n_modes, o->mode);
        break;
    case O_TRANSPORT:
        flag_names(name, val, bench_transport_names, N_TRANSPORTS, o->transport);
        break;
    case O_PATH:
        flag_names(name, val, bench_path_names, N_PATHS, o->path);
        o->path_given = true;
        break;
    case O_DEVICE: o->device = flag_int(name, val, 0, 1023); break;
    case O_PEER:
        o->peer = flag_int(name, val, 0, 1023);
        o->peer_given = true;
        break;
    case O_CHUNK: o->n_chunk = flag_list(name, val, MAX_LIST, one_chunk, o->chunk); break;
    case O_STAGES: o->n_stages = flag_list(name, val, MAX_LIST, one_stages, o->stages); break;
    case O_MAX_CTAS:
        o->n_max_ctas = flag_list(name, val, MAX_LIST, one_ctas, o->max_ctas);
        break;
    case O_SWEEP_BYTES: o->sweep_bytes = flag_size(name, val); break;
    case O_CSV: o->csv = val; break;
    case O_JSON: o->json = val; break;
    case O_CALIBRATE_OUT: o->calibrate_out = val; break;
    case O_DROP_CACHES: o->drop_caches = true; break;
    case O_SHAPES:
        o->n_shapes = flag_list(name, val, BATCH_MAX_SHAPES, one_shape, o->shapes);
        break;
    case O_SHIFT: o->shift = flag_int(name, val, 0, 15); break;
    case O_MEMORY: o->host_memory = flag_choice(name, val, "device", "host") == 1; break;
    case O_DIR:
        o->d2h = flag_choice(name, val, "h2d", "d2h") == 1;
        o->dir_given = true;
        break;
    case O_CTAS: o->n_ctas = flag_list(name, val, MAX_LIST, one_ctas, o->ctas); break;
    case O_CUB: o->cub = val; break;
    case O_BUDGETS: o->n_budgets = flag_list(name, val, MAX_LIST, one_budget, o->budgets); break;
    case O_PIECES: o->n_pieces = flag_list(name, val, MAX_LIST, one_piece, o->pieces); break;
    case O_LAYOUTS: {
        static const char *const names[] = {"block", "layer"};
        flag_names(name, val, names, 2, o->layouts);
        break;
    }
    case O_OVERLAP_CSV: o->overlap_csv = val; break;
    case O_CUBLAS: o->cublas = val; break;
    case O_GEMM: o->gemm = flag_int(name, val, 256, 16384); break;
    case O_REF_CTAS:
        o->ref_ctas = flag_int(name, val, 0, 4096);
        o->ref_ctas_given = true;
        break;
    case O_GPUS: {
        char *end = NULL;
        errno = 0;
        long n = strtol(val, &end, 10);
        if (errno != 0 || end == val || *end != '\0' || n < 2 || n > 32)
            bench_usage_error("--gpus \"%s\": expected a number of GPUs from 2 to every "
                              "visible GPU (at most 32; default every visible GPU)",
                              val);
        o->gpus = (int)n;
        break;
    }
    case O_ROWS: o->rows = (size_t)flag_int(name, val, 1, 1 << 24); break;
    case O_ROW_BYTES:
        o->n_row_bytes = flag_list(name, val, MAX_LIST, one_row_bytes, o->row_bytes);
        break;
    case O_FRAC: {
        char *end = NULL;
        errno = 0;
        o->frac = strtod(val, &end);
        if (errno != 0 || end == val || *end != '\0' || !(o->frac > 0.0) || !(o->frac <= 1.0))
            bench_usage_error("--frac \"%s\": expected a fraction of the rows above 0 and at "
                              "most 1, such as 0.5 (the default)",
                              val);
        break;
    }
    case O_ORDER:
        if (strcmp(val, "row") == 0)
            o->by_dest = false;
        else if (strcmp(val, "dest") == 0)
            o->by_dest = true;
        else
            bench_usage_error("--order \"%s\": expected row (the pieces in source row order, "
                              "a row's peers after one another) or dest (destination by "
                              "destination)",
                              val);
        break;
    case O_NCCL: o->nccl = val; break;
    }
}

void bench_parse_args(int argc, char **argv)
{
    struct bench_opts *o = &bench_opt;
    set_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        char name[32];
        const char *val = NULL;
        if (strncmp(arg, "--", 2) == 0 && strchr(arg, '=') != NULL) {
            size_t len = (size_t)(strchr(arg, '=') - arg);
            snprintf(name, sizeof(name), "%.*s", (int)(len < 31 ? len : 31), arg);
            val = arg + len + 1;
        } else if (arg[0] == '-' && arg[1] != '-' && arg[1] != '\0' && arg[2] != '\0') {
            snprintf(name, sizeof(name), "%.2s", arg); /* -b4K */
            val = arg + 2;
        } else {
            snprintf(name, sizeof(name), "%s", arg);
        }
        int k = -1;
        for (size_t j = 0; j < P2PT_ARRAY_LEN(opt_table); j++)
            if (strcmp(name, opt_table[j].name) == 0)
                k = (int)j;
        if (k < 0)
            bench_usage_error("unknown option \"%s\" (p2pt-bench --help lists them)", arg);
        if (opt_table[k].value && val == NULL) {
            if (i + 1 >= argc)
                bench_usage_error("%s needs a value (p2pt-bench --help)", name);
            val = argv[++i];
        }
        if (!opt_table[k].value && val != NULL)
            bench_usage_error("%s takes no value (got \"%s\")", name, val);
        apply(o, opt_table[k].id, name, val);
    }
    if (o->min_bytes > o->max_bytes)
        bench_usage_error("-b %zu is larger than -e %zu", o->min_bytes, o->max_bytes);
    if (o->peer_given && o->peer == o->device)
        bench_usage_error("--peer %d: the same GPU as --device; pick another one", o->peer);
    if (o->dir_given && !o->host_memory)
        bench_usage_error("--dir applies to --memory host only (add --memory host)");
    if (o->csv && o->json && strcmp(o->csv, o->json) == 0)
        bench_usage_error("--csv and --json both name \"%s\"", o->csv);
    if (bench_alltoall_k(o->frac, o->rows) == 0)
        bench_usage_error("--frac %g of --rows %zu is no row: each GPU must send each peer at "
                          "least one (raise --frac or --rows)",
                          o->frac, o->rows);
    make_sizes(o);
}
