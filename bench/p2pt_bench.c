/*
 * p2pt-bench: p2pt's two transports, the copy engine ("ce", cuMemcpyAsync)
 * and the TMA kernel ("tma", cp.async.bulk compiled at run time by NVRTC),
 * measured side by side through p2pt's own API, in one run.
 *
 * Modes (--mode): table (bandwidth per copy size, one table per path), sweep
 * (TMA bandwidth for every chunk x stages x CTA cap at one large size),
 * latency (small copies: back to back, and one at a time as the host and as
 * CUDA events see them), cold (the first copy of a fresh process, NVRTC
 * compile and module load included). Flags follow nccl-tests; --help lists
 * every one.
 *
 * What keeps the numbers honest (printed in every header too):
 *  - bandwidth counts each copy's payload once: N bytes copied are N bytes on
 *    any path; bidir adds both directions' payloads; GB/s = 1e9 bytes/s;
 *  - device times are CUDA events around a batch of copies, divided by the
 *    copies in it, the median over repeats, after warm-up;
 *  - p2pt_prepare runs before anything is timed, so the NVRTC compile and
 *    the module load show up only in the cold mode, which measures them;
 *  - sources and destinations rotate through pools of at least 4x the L2
 *    cache, so a copy that fits in L2 never reads what an earlier one left.
 *
 * The benchmark links libp2pt.a and reaches the driver through p2pt's table
 * of entry points (p2pt__cu), so like the library it needs no libcuda at
 * link time and runs (to say there is no GPU) on any machine.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "p2pt.h"
#include "bench_time.h"
#include "p2pt_internal.h"
#include "test_driver.h"

/* ================================================================ limits */

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

#define MAX_LIST 32        /* values in one --chunk/--stages/--max-ctas list */
#define MAX_SIZES 128      /* rows of one table */
#define SLOT_ALIGN 4096    /* pool slots start on page boundaries */
#define GUARD 256          /* poisoned bytes checked on each side of a checked copy */
#define SLACK 4096         /* allocated past every pool: room for the guards */
#define POISON 0xA5
/* The source pattern repeats with a prime period, so a block written to the
 * wrong place cannot line up with the pattern and pass the check. */
#define PATTERN_PERIOD 1000003u
#define CHECK_CHUNK (64 * MiB) /* host staging for the byte check */
#define L2_FACTOR 4            /* pools hold at least this many L2 caches */
#define LAT_MIN (4 * KiB)
#define LAT_MAX (1 * MiB)
#define LAT_SAMPLES 200 /* one-copy-at-a-time samples per size and transport */
#define LAT_ITERS 100   /* copies per back-to-back batch (latency mode) */
#define COLD_RUNS 3
#define COLD_BYTES (1 * MiB)

enum { T_CE, T_TMA, N_TRANSPORTS };
enum { P_LOCAL, P_PUSH, P_PULL, P_BIDIR, N_PATHS };
enum { M_TABLE, M_SWEEP, M_LATENCY, M_COLD, N_MODES };

static const char *const transport_names[N_TRANSPORTS] = {"ce", "tma"};
static const char *const path_names[N_PATHS] = {"local", "push", "pull", "bidir"};
static const char *const mode_names[N_MODES] = {"table", "sweep", "latency", "cold"};

/* The sweep's knobs: p2pt reads them at p2pt_init (env.md). */
static const char *const sweep_vars[3] = {
    "P2P_TRANSPORT_CHUNK_BYTES", "P2P_TRANSPORT_STAGES", "P2P_TRANSPORT_MAX_CTAS"};

/* ============================================================ utilities */

/* Why the last helper that returned false failed; one line. */
static char g_err[2048];
/* Checks that failed, cold runs that failed, cleanups that failed: any of
 * them makes the exit status 1 after everything else has run. */
static int g_failures;
/* A table row is half printed: a fatal message starts on a new line. */
static bool mid_row;

static void one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t')
            *s = ' ';
}

static void set_err(const char *fmt, ...) P2PT_PRINTF(1, 2);
static void set_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof(g_err), fmt, ap);
    va_end(ap);
    one_line(g_err);
}

/* "cuMemAlloc" out of "tcu.cuMemAlloc(&a->base, n)". */
static const char *call_name(const char *text, char *buf, size_t len)
{
    if (strncmp(text, "tcu.", 9) == 0)
        text += 9;
    size_t n = strcspn(text, "(");
    if (n >= len)
        n = len - 1;
    memcpy(buf, text, n);
    buf[n] = '\0';
    return buf;
}

static void fail_cu(CUresult r, const char *text, int line)
{
    char name[64];
    set_err("%s failed: %s (p2pt_bench.c:%d)", call_name(text, name, sizeof(name)),
            p2pt__cuda_error_name(r), line);
}

static void fail_p2(p2pt_status st, const char *text)
{
    char name[64];
    set_err("%s: %s: %s", call_name(text, name, sizeof(name)), p2pt_status_string(st),
            p2pt_last_error(NULL));
}

/* Helpers return bool; these two need a label `fail` for their cleanup. */
#define CU(call)                                                               \
    do {                                                                       \
        CUresult cu_r_ = (call);                                               \
        if (cu_r_ != CUDA_SUCCESS) {                                           \
            fail_cu(cu_r_, #call, __LINE__);                                   \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

#define P2(call)                                                               \
    do {                                                                       \
        p2pt_status p2_s_ = (call);                                            \
        if (p2_s_ != P2PT_SUCCESS) {                                           \
            fail_p2(p2_s_, #call);                                             \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

/* Releases: a failure is reported and counted, never fatal (the process is
 * finishing that piece of work anyway). */
static void cu_release(CUresult r, const char *text, int line)
{
    if (r == CUDA_SUCCESS)
        return;
    fail_cu(r, text, line);
    fprintf(stderr, "p2pt-bench: warning: %s\n", g_err);
    g_failures++;
}
#define CU_RELEASE(call) cu_release((call), #call, __LINE__)

static _Noreturn void usage_error(const char *fmt, ...) P2PT_PRINTF(1, 2);
static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("p2pt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* A run-time failure: what was being measured, then g_err. */
static _Noreturn void fatal(const char *fmt, ...) P2PT_PRINTF(1, 2);
static _Noreturn void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (mid_row)
        putchar('\n');
    fflush(stdout);
    fputs("p2pt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", g_err);
    va_end(ap);
    exit(1);
}

/* "48K", "1G", or plain bytes when no suffix is exact. */
static const char *fmt_size(size_t b, char *buf, size_t len)
{
    if (b >= GiB && b % GiB == 0)
        snprintf(buf, len, "%zuG", b / GiB);
    else if (b >= MiB && b % MiB == 0)
        snprintf(buf, len, "%zuM", b / MiB);
    else if (b >= KiB && b % KiB == 0)
        snprintf(buf, len, "%zuK", b / KiB);
    else
        snprintf(buf, len, "%zu", b);
    return buf;
}

static void *dptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

/* GB/s of `bytes` in `us`; 0 rather than inf for a zero reading, so the
 * JSON stays valid whatever the clock says. */
static double gbps_of(double bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0; }

static double ratio_of(double a, double b) { return b > 0 ? a / b : 0; }

/* ============================================================== options */

struct opts {
    size_t min_bytes, max_bytes, sweep_bytes;
    double factor;
    int warmup;  /* -1: one batch */
    int iters;   /* 0: by size */
    int repeats; /* 0: by size */
    int check;
    bool transport[N_TRANSPORTS];
    bool path[N_PATHS];
    bool path_given;
    bool mode[N_MODES];
    size_t chunk[MAX_LIST];
    int n_chunk;
    int stages[MAX_LIST];
    int n_stages;
    int max_ctas[MAX_LIST];
    int n_max_ctas;
    int device, peer;
    bool peer_given;
    const char *csv, *json;
    bool drop_caches;
    size_t sizes[MAX_SIZES];
    int n_sizes;
};

static struct opts o;

static void usage(FILE *f)
{
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
"What to run:\n"
"  --mode LIST        table, sweep, latency, cold, or all (default table)\n"
"                       table    median time and GB/s per size, one table per\n"
"                                path, every transport in the same row, tma/ce\n"
"                       sweep    TMA GB/s for every --chunk x --stages x\n"
"                                --max-ctas at --sweep-bytes, on local and push\n"
"                                (push with 2 GPUs), next to ce\n"
"                       latency  sizes 4K..1M in powers of 2 on local, push,\n"
"                                pull: b2b = per-copy time of back-to-back\n"
"                                copies (100 between two events, / 100);\n"
"                                gpu = the same with the batch queued behind\n"
"                                a gate (cuStreamWaitValue32 on pinned host\n"
"                                memory) opened once all 100 are enqueued:\n"
"                                the GPU's rate alone;\n"
"                                host = one copy at a time, host clock from\n"
"                                just before p2pt_copy_async to the return of\n"
"                                cuStreamSynchronize; dev = one copy between\n"
"                                two events; enq = host time to enqueue one\n"
"                                copy (b2b near enq: the host is the limit);\n"
"                                host and dev are medians of 200 copies\n"
"                       cold     the first TMA copy of a fresh process (this\n"
"                                program re-run): p2pt_init, then\n"
"                                p2pt_prepare + copy + sync, then a second\n"
"                                copy; 3 runs with the cubin cache off\n"
"                                (NVRTC compile + module load), then 3 with\n"
"                                a private cache an earlier run filled\n"
"                                (cubin read + module load)\n"
"  --cold-drop-caches before each cold run, drop the OS page cache (root;\n"
"                     /proc/sys/vm/drop_caches) so NVRTC and the cubin come\n"
"                     from disk as after a reboot\n"
"  --transport LIST   ce, tma, or all (default ce,tma)\n"
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
"Sweep (each value is set as P2P_TRANSPORT_* before its own p2pt_init):\n"
"  --chunk LIST       TMA chunk sizes (default 16K,32K,48K,64K,96K)\n"
"  --stages LIST      TMA ring stages (default 2,3,4)\n"
"  --max-ctas LIST    CTA caps, 0 = p2pt's automatic grid (default 0)\n"
"  --sweep-bytes SIZE copy size of the sweep (default 1G)\n"
"                     Combinations with chunk x stages over 227K are listed\n"
"                     as skipped; p2pt_init/p2pt_prepare errors are printed\n"
"                     in their row.\n"
"\n"
"Output:\n"
"  --csv FILE         every measurement as one CSV row:\n"
"                     mode,path,transport,bytes,chunk,stages,max_ctas,time_us,gbps,kind\n"
"                     (chunk, stages, max_ctas: the TMA settings, 0 for ce\n"
"                     and 0 = auto for max_ctas; bytes: one copy's size, also\n"
"                     for bidir, whose gbps adds both directions; kind: bw,\n"
"                     or b2b/b2b_gpu/host/dev/enq for latency, or init/prepare/first/\n"
"                     second/first_median for cold, the same prefixed with\n"
"                     cached_ for cold runs with the cubin cache; cold times\n"
"                     are in us)\n"
"  --json FILE        the same records as a JSON array of objects\n"
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
"Environment: P2P_TRANSPORT_* tune p2pt as in env.md (the sweep sets three of\n"
"them itself); P2P_CUDA_LIBRARY names the driver library.\n"
"Exit status: 0 done; 1 no GPU, a CUDA or p2pt error, or a failed check;\n"
"2 a bad flag.\n",
        f);
}

/* Sizes: digits, then an optional K, M or G (binary), as env.md's values. */
static bool parse_size(const char *s, size_t *out)
{
    unsigned long long v;
    if (!p2pt__parse_size(s, &v) || v > (unsigned long long)SIZE_MAX)
        return false;
    *out = (size_t)v;
    return true;
}

static size_t flag_size(const char *flag, const char *v)
{
    size_t b;
    if (!parse_size(v, &b) || b == 0)
        usage_error("%s \"%s\": expected a size above 0 such as 4096, 4K, 48K, 1G", flag, v);
    return b;
}

static int flag_int(const char *flag, const char *v, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
        usage_error("%s \"%s\": expected a whole number from %ld to %ld", flag, v, lo, hi);
    return (int)x;
}

/* A comma list of names into flags; "all" sets them all. */
static void flag_names(const char *flag, const char *v, const char *const *names, int n,
                       bool *out)
{
    bool seen[8] = {false};
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
            usage_error("%s \"%s\": \"%.*s\" is not one of %sall", flag, v, (int)len, p,
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
        usage_error("%s \"%.40s...\": list too long", flag, v);
    snprintf(buf, sizeof(buf), "%s", v);
    int n = 0;
    char *p = buf;
    for (;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        if (*p == '\0')
            usage_error("%s \"%s\": empty item in the list", flag, v);
        if (n == max)
            usage_error("%s \"%s\": at most %d values", flag, v, max);
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
    if (b > UINT32_MAX)
        usage_error("%s \"%s\": a chunk must stay below 4G", flag, item);
    ((size_t *)out)[i] = b;
}

static void one_stages(const char *flag, const char *item, int i, void *out)
{
    ((int *)out)[i] = flag_int(flag, item, 1, 1024);
}

static void one_ctas(const char *flag, const char *item, int i, void *out)
{
    ((int *)out)[i] = flag_int(flag, item, 0, 1 << 20);
}

enum opt_id {
    O_HELP, O_B, O_E, O_F, O_W, O_N, O_R, O_C, O_MODE, O_TRANSPORT, O_PATH, O_DEVICE,
    O_PEER, O_CHUNK, O_STAGES, O_MAX_CTAS, O_SWEEP_BYTES, O_CSV, O_JSON, O_DROP_CACHES
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
    {"--cold-drop-caches", O_DROP_CACHES, false},
};

static void make_sizes(void)
{
    double s = (double)o.min_bytes;
    size_t prev = 0;
    o.n_sizes = 0;
    for (;;) {
        size_t v = (size_t)(s + 0.5);
        if (s > (double)o.max_bytes + 0.5)
            break;
        if (v > prev) {
            if (o.n_sizes == MAX_SIZES)
                usage_error("-b %zu -e %zu -f %g: more than %d sizes; raise -f", o.min_bytes,
                            o.max_bytes, o.factor, MAX_SIZES);
            o.sizes[o.n_sizes++] = v;
            prev = v;
        }
        s *= o.factor;
    }
}

static void parse_args(int argc, char **argv)
{
    memset(&o, 0, sizeof(o));
    o.min_bytes = 4 * KiB;
    o.max_bytes = 1 * GiB;
    o.sweep_bytes = 1 * GiB;
    o.factor = 2;
    o.warmup = -1;
    o.check = 1;
    o.transport[T_CE] = o.transport[T_TMA] = true;
    o.path[P_LOCAL] = true;
    o.mode[M_TABLE] = true;
    o.n_chunk = flag_list("--chunk", "16K,32K,48K,64K,96K", MAX_LIST, one_chunk, o.chunk);
    o.n_stages = flag_list("--stages", "2,3,4", MAX_LIST, one_stages, o.stages);
    o.n_max_ctas = flag_list("--max-ctas", "0", MAX_LIST, one_ctas, o.max_ctas);

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
            usage_error("unknown option \"%s\" (p2pt-bench --help lists them)", arg);
        if (opt_table[k].value && val == NULL) {
            if (i + 1 >= argc)
                usage_error("%s needs a value (p2pt-bench --help)", name);
            val = argv[++i];
        }
        if (!opt_table[k].value && val != NULL)
            usage_error("%s takes no value (got \"%s\")", name, val);

        switch (opt_table[k].id) {
        case O_HELP:
            usage(stdout);
            exit(0);
        case O_B: o.min_bytes = flag_size(name, val); break;
        case O_E: o.max_bytes = flag_size(name, val); break;
        case O_F: {
            char *end = NULL;
            errno = 0;
            o.factor = strtod(val, &end);
            if (errno != 0 || end == val || *end != '\0' || !(o.factor > 1.0) ||
                !(o.factor <= 1024.0))
                usage_error("-f \"%s\": expected a number above 1 (and at most 1024)", val);
            break;
        }
        case O_W: o.warmup = flag_int(name, val, 0, 1000000); break;
        case O_N: o.iters = flag_int(name, val, 1, 1000000); break;
        case O_R: o.repeats = flag_int(name, val, 1, 100000); break;
        case O_C: o.check = flag_int(name, val, 0, 1); break;
        case O_MODE: flag_names(name, val, mode_names, N_MODES, o.mode); break;
        case O_TRANSPORT:
            flag_names(name, val, transport_names, N_TRANSPORTS, o.transport);
            break;
        case O_PATH:
            flag_names(name, val, path_names, N_PATHS, o.path);
            o.path_given = true;
            break;
        case O_DEVICE: o.device = flag_int(name, val, 0, 1023); break;
        case O_PEER:
            o.peer = flag_int(name, val, 0, 1023);
            o.peer_given = true;
            break;
        case O_CHUNK: o.n_chunk = flag_list(name, val, MAX_LIST, one_chunk, o.chunk); break;
        case O_STAGES: o.n_stages = flag_list(name, val, MAX_LIST, one_stages, o.stages); break;
        case O_MAX_CTAS:
            o.n_max_ctas = flag_list(name, val, MAX_LIST, one_ctas, o.max_ctas);
            break;
        case O_SWEEP_BYTES: o.sweep_bytes = flag_size(name, val); break;
        case O_CSV: o.csv = val; break;
        case O_JSON: o.json = val; break;
        case O_DROP_CACHES: o.drop_caches = true; break;
        }
    }
    if (o.min_bytes > o.max_bytes)
        usage_error("-b %zu is larger than -e %zu", o.min_bytes, o.max_bytes);
    if (o.peer_given && o.peer == o.device)
        usage_error("--peer %d: the same GPU as --device; pick another one", o.peer);
    if (o.csv && o.json && strcmp(o.csv, o.json) == 0)
        usage_error("--csv and --json both name \"%s\"", o.csv);
    make_sizes();
}

/* ========================================================= result files */

static FILE *csv_file, *json_file;
static int json_records;

static FILE *open_output(const char *flag, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        usage_error("%s \"%s\": cannot write: %s", flag, path, strerror(errno));
    return f;
}

/* atexit: a run that stops half way still leaves a valid JSON array. */
static void close_outputs(void)
{
    if (csv_file && fclose(csv_file) != 0)
        fprintf(stderr, "p2pt-bench: writing %s: %s\n", o.csv, strerror(errno));
    if (json_file) {
        fputs(json_records ? "\n]\n" : "]\n", json_file);
        if (fclose(json_file) != 0)
            fprintf(stderr, "p2pt-bench: writing %s: %s\n", o.json, strerror(errno));
    }
    csv_file = json_file = NULL;
}

static void open_outputs(void)
{
    if (o.csv) {
        csv_file = open_output("--csv", o.csv);
        fputs("mode,path,transport,bytes,chunk,stages,max_ctas,time_us,gbps,kind\n", csv_file);
    }
    if (o.json) {
        json_file = open_output("--json", o.json);
        fputs("[", json_file);
    }
    atexit(close_outputs);
}

struct tma_cfg {
    size_t chunk;
    int stages, max_ctas;
};

/* One measurement, written at once so a crash loses nothing before it. */
static void emit(const char *mode, const char *path, int transport, const struct tma_cfg *cfg,
                 size_t bytes, double time_us, double gbps, const char *kind)
{
    struct tma_cfg none = {0, 0, 0};
    if (cfg == NULL || transport != T_TMA)
        cfg = &none;
    if (csv_file) {
        fprintf(csv_file, "%s,%s,%s,%zu,%zu,%d,%d,%.3f,%.3f,%s\n", mode, path,
                transport_names[transport], bytes, cfg->chunk, cfg->stages, cfg->max_ctas,
                time_us, gbps, kind);
        fflush(csv_file);
    }
    if (json_file) {
        fprintf(json_file,
                "%s\n  {\"mode\": \"%s\", \"path\": \"%s\", \"transport\": \"%s\", "
                "\"bytes\": %zu, \"chunk\": %zu, \"stages\": %d, \"max_ctas\": %d, "
                "\"time_us\": %.3f, \"gbps\": %.3f, \"kind\": \"%s\"}",
                json_records ? "," : "", mode, path, transport_names[transport], bytes,
                cfg->chunk, cfg->stages, cfg->max_ctas, time_us, gbps, kind);
        json_records++;
        fflush(json_file);
    }
}

/* ================================================================= GPUs */

struct gpu {
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* primary context, retained; NULL until open_gpu */
    char name[128];
    int sms, cc_major, cc_minor;
    size_t l2;
};

/* [0] = --device (every stream but bidir's second), [1] = --peer. */
static struct gpu gpus[2];
static bool have_peer;

static bool use(const struct gpu *g)
{
    CU(tcu.cuCtxSetCurrent(g->ctx));
    return true;
fail:
    return false;
}

static bool gpu_info(struct gpu *g, int ordinal)
{
    int l2 = 0;
    memset(g, 0, sizeof(*g));
    g->ordinal = ordinal;
    CU(tcu.cuDeviceGet(&g->dev, ordinal));
    CU(tcu.cuDeviceGetName(g->name, (int)sizeof(g->name), g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev));
    CU(tcu.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->cc_major,
                                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->cc_minor,
                                     CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev));
    g->l2 = (size_t)l2;
    return true;
fail:
    return false;
}

static bool open_gpu(struct gpu *g)
{
    CU(tcu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev));
    return true;
fail:
    g->ctx = NULL;
    return false;
}

static void close_gpu(struct gpu *g)
{
    if (g->ctx == NULL)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(NULL));
    CU_RELEASE(tcu.cuDevicePrimaryCtxRelease(g->dev));
    g->ctx = NULL;
}

/* Both ways: push writes into the peer, pull reads from it, and bidir does
 * both from each side. */
static bool enable_peer_access(void)
{
    for (int i = 0; i < 2; i++) {
        if (!use(&gpus[i]))
            goto fail;
        CUresult r = tcu.cuCtxEnablePeerAccess(gpus[1 - i].ctx, 0);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
            fail_cu(r, "cuCtxEnablePeerAccess", __LINE__);
            goto fail;
        }
    }
    return true;
fail:
    return false;
}

/* ============================================================== buffers */

/* A pool that copies rotate through, with SLACK bytes allocated past it. */
struct arena {
    const struct gpu *g;
    CUdeviceptr base;
    size_t pool;
};

static bool arena_alloc(struct arena *a, const struct gpu *g, size_t pool)
{
    a->g = g;
    a->pool = pool;
    a->base = 0;
    if (!use(g))
        goto fail;
    CU(tcu.cuMemAlloc(&a->base, pool + SLACK));
    return true;
fail:
    a->base = 0;
    return false;
}

static void arena_free(struct arena *a)
{
    if (a->base == 0)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(a->g->ctx));
    CU_RELEASE(tcu.cuMemFree(a->base));
    a->base = 0;
}

/* Random bytes with a prime period: one period from the host, then doubled
 * on the device by the copy engine (filling gigabytes from the host would
 * cost seconds of the lead's GPU time). */
static bool arena_fill(struct arena *a, uint64_t seed)
{
    size_t total = a->pool + SLACK;
    size_t first = total < PATTERN_PERIOD ? total : PATTERN_PERIOD;
    unsigned char *h = malloc(first);
    if (h == NULL) {
        set_err("out of host memory (%zu bytes)", first);
        goto fail;
    }
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < first; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        h[i] = (unsigned char)(x >> 32);
    }
    if (!use(a->g))
        goto fail;
    CU(tcu.cuMemcpyHtoD(a->base, h, first));
    for (size_t done = first; done < total;) {
        size_t n = done < total - done ? done : total - done;
        CU(tcu.cuMemcpyAsync(a->base + done, a->base, n, NULL));
        done += n;
    }
    CU(tcu.cuCtxSynchronize());
    free(h);
    return true;
fail:
    free(h);
    return false;
}

static bool arena_clear(struct arena *a)
{
    if (!use(a->g))
        goto fail;
    CU(tcu.cuMemsetD8(a->base, 0, a->pool + SLACK));
    CU(tcu.cuCtxSynchronize());
    return true;
fail:
    return false;
}

/* Where copy number `i` of `bytes` starts: slots of `bytes` rounded up to a
 * page, as many as the pool holds, used in turn. */
static size_t slot_offset(size_t pool, size_t bytes, unsigned long i)
{
    size_t stride = (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    size_t k = pool / stride;
    if (k == 0)
        k = 1;
    return (size_t)(i % k) * stride;
}

/* One direction of copying: a stream on `g` moving src -> dst, and a
 * reference buffer on `g` for the check. */
struct dir {
    const struct gpu *g;
    CUstream s;
    struct arena src, dst, ref;
    unsigned long next; /* rotation counter, kept across sizes and transports */
};

/* Everything one path needs; bidir has two directions. */
struct setup {
    int path;
    int ndirs;
    size_t pool;
    struct dir d[2];
};

/*
 * Pool bytes: at least L2_FACTOR x L2 and at least the largest copy; smaller
 * (but never below the largest copy) when two pools and a reference would
 * not fit in 80% of a GPU's free memory.
 */
static bool plan_pool(size_t largest, bool peer, size_t *pool)
{
    size_t l2 = gpus[0].l2 > gpus[peer].l2 ? gpus[0].l2 : gpus[peer].l2;
    size_t want = L2_FACTOR * l2 > largest ? L2_FACTOR * l2 : largest;
    for (int i = 0; i <= (peer ? 1 : 0); i++) {
        size_t free_b = 0, total_b = 0;
        if (!use(&gpus[i]))
            goto fail;
        CU(tcu.cuMemGetInfo(&free_b, &total_b));
        size_t budget = free_b / 10 * 8;
        size_t fixed = largest + 3 * SLACK;
        if (budget < fixed + 2 * largest) {
            char a[32], b[32];
            set_err("copies of %s need 3 buffers of that size in 80%% of GPU %d's free "
                    "memory, and %s is free",
                    fmt_size(largest, a, sizeof(a)), gpus[i].ordinal,
                    fmt_size(free_b, b, sizeof(b)));
            goto fail;
        }
        if (fixed + 2 * want > budget) {
            want = (budget - fixed) / 2 / MiB * MiB;
            if (want < largest)
                want = largest;
        }
    }
    *pool = want;
    return true;
fail:
    return false;
}

static void setup_close(struct setup *su)
{
    for (int i = 0; i < su->ndirs; i++) {
        struct dir *d = &su->d[i];
        if (d->s) {
            CU_RELEASE(tcu.cuCtxSetCurrent(d->g->ctx));
            CU_RELEASE(tcu.cuStreamDestroy(d->s));
            d->s = NULL;
        }
        arena_free(&d->src);
        arena_free(&d->dst);
        arena_free(&d->ref);
    }
    su->ndirs = 0;
}

static bool dir_open(struct dir *d, const struct gpu *g, const struct gpu *src_g,
                     const struct gpu *dst_g, size_t pool, size_t largest, uint64_t seed)
{
    d->g = g;
    if (!arena_alloc(&d->src, src_g, pool) || !arena_alloc(&d->dst, dst_g, pool) ||
        !arena_alloc(&d->ref, g, largest) || !arena_fill(&d->src, seed) ||
        !arena_clear(&d->dst) || !use(g))
        goto fail;
    CU(tcu.cuStreamCreate(&d->s, CU_STREAM_NON_BLOCKING));
    return true;
fail:
    return false;
}

static bool setup_open(struct setup *su, int path, size_t largest)
{
    const struct gpu *A = &gpus[0], *B = &gpus[1];
    memset(su, 0, sizeof(*su));
    su->path = path;
    su->ndirs = path == P_BIDIR ? 2 : 1;
    if (!plan_pool(largest, path != P_LOCAL, &su->pool))
        goto fail;
    switch (path) {
    case P_LOCAL:
        if (!dir_open(&su->d[0], A, A, A, su->pool, largest, 1))
            goto fail;
        break;
    case P_PUSH:
        if (!dir_open(&su->d[0], A, A, B, su->pool, largest, 2))
            goto fail;
        break;
    case P_PULL:
        if (!dir_open(&su->d[0], A, B, A, su->pool, largest, 3))
            goto fail;
        break;
    default:
        if (!dir_open(&su->d[0], A, A, B, su->pool, largest, 4) ||
            !dir_open(&su->d[1], B, B, A, su->pool, largest, 5))
            goto fail;
        break;
    }
    return true;
fail:
    setup_close(su);
    return false;
}

/* =============================================================== timing */

static int iters_for(size_t bytes)
{
    if (o.iters)
        return o.iters;
    size_t n = 256 * MiB / bytes;
    return n < 5 ? 5 : n > 100 ? 100 : (int)n;
}

static int repeats_for(size_t bytes)
{
    if (o.repeats)
        return o.repeats;
    return bytes <= 16 * MiB ? 20 : bytes <= 256 * MiB ? 10 : 5;
}

static int warmup_for(int iters) { return o.warmup >= 0 ? o.warmup : iters; }

static bool enqueue(p2pt_handle *h, struct dir *d, size_t bytes, bool switch_ctx)
{
    if (switch_ctx && !use(d->g))
        goto fail;
    size_t off = slot_offset(d->src.pool, bytes, d->next++);
    P2(p2pt_copy_async(h, dptr(d->dst.base + off), dptr(d->src.base + off), bytes, d->s));
    return true;
fail:
    return false;
}

struct timing {
    double us;     /* median device time per copy (bidir: per pair of copies) */
    double enq_us; /* median host time to enqueue one copy (pair) */
};

/* A gate for time_copies: the stream waits (cuStreamWaitValue32) on a word of
 * pinned host memory that the host sets only once every copy of the batch is
 * enqueued, so the events time the GPU draining a full queue, whatever the
 * host's enqueue rate. */
struct gate {
    volatile uint32_t *word; /* pinned; its host address is its device address (UVA) */
};

/*
 * Median per-copy time of `n` copies between two events on dirs[0]'s
 * stream, over `repeats` batches, after `warmup` copies. With two
 * directions (bidir) the second stream starts when the first one's start
 * event has passed and the first stream waits for the second one's end
 * before its end event: one start, the later of the two ends, both measured
 * on one GPU's clock (events of two GPUs cannot be compared).
 */
static bool time_copies_gated(p2pt_handle *h, struct dir *dirs, int ndirs, size_t bytes,
                              int warmup, int n, int repeats, struct gate *gate,
                              struct timing *out)
{
    CUevent start = NULL, end = NULL, peer_end = NULL;
    double *dev = calloc((size_t)repeats, sizeof(double));
    double *enq = calloc((size_t)repeats, sizeof(double));
    bool ok = false, two = ndirs > 1;
    struct dir *a = &dirs[0], *b = &dirs[ndirs - 1];
    if (dev == NULL || enq == NULL) {
        set_err("out of host memory");
        goto fail;
    }
    if (!use(a->g))
        goto fail;
    CU(tcu.cuEventCreate(&start, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&end, CU_EVENT_DEFAULT));
    if (two) {
        if (!use(b->g))
            goto fail;
        CU(tcu.cuEventCreate(&peer_end, CU_EVENT_DISABLE_TIMING));
    }
    if (!use(a->g))
        goto fail;
    for (int i = 0; i < warmup; i++)
        for (int k = 0; k < ndirs; k++)
            if (!enqueue(h, &dirs[k], bytes, two))
                goto fail;
    for (int k = 0; k < ndirs; k++) {
        if (!use(dirs[k].g))
            goto fail;
        CU(tcu.cuStreamSynchronize(dirs[k].s));
    }
    for (int r = 0; r < repeats; r++) {
        if (!use(a->g))
            goto fail;
        if (gate != NULL) {
            __atomic_store_n(gate->word, 0u, __ATOMIC_SEQ_CST);
            CU(tcu.cuStreamWaitValue32(a->s, (CUdeviceptr)(uintptr_t)gate->word, 1,
                                            CU_STREAM_WAIT_VALUE_GEQ));
        }
        CU(tcu.cuEventRecord(start, a->s));
        if (two) {
            if (!use(b->g))
                goto fail;
            CU(tcu.cuStreamWaitEvent(b->s, start, 0));
            if (!use(a->g))
                goto fail;
        }
        double t0 = now_us();
        for (int i = 0; i < n; i++)
            for (int k = 0; k < ndirs; k++)
                if (!enqueue(h, &dirs[k], bytes, two))
                    goto fail;
        double t1 = now_us();
        if (two) {
            if (!use(b->g))
                goto fail;
            CU(tcu.cuEventRecord(peer_end, b->s));
            if (!use(a->g))
                goto fail;
            CU(tcu.cuStreamWaitEvent(a->s, peer_end, 0));
        }
        CU(tcu.cuEventRecord(end, a->s));
        if (gate != NULL)
            __atomic_store_n(gate->word, 1u, __ATOMIC_SEQ_CST);
        CU(tcu.cuEventSynchronize(end));
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, start, end));
        dev[r] = (double)ms * 1e3 / n;
        enq[r] = (t1 - t0) / n;
    }
    out->us = median(dev, repeats);
    out->enq_us = median(enq, repeats);
    ok = true;
fail:
    if (gate != NULL) {
        /* Never leave the stream waiting on a gate nobody will open. */
        __atomic_store_n(gate->word, 1u, __ATOMIC_SEQ_CST);
        if (a->g->ctx) {
            CU_RELEASE(tcu.cuCtxSetCurrent(a->g->ctx));
            CU_RELEASE(tcu.cuStreamSynchronize(a->s));
        }
    }
    if (two && b->g->ctx && peer_end) {
        CU_RELEASE(tcu.cuCtxSetCurrent(b->g->ctx));
        CU_RELEASE(tcu.cuEventDestroy(peer_end));
    }
    if (start || end)
        CU_RELEASE(tcu.cuCtxSetCurrent(a->g->ctx));
    if (start)
        CU_RELEASE(tcu.cuEventDestroy(start));
    if (end)
        CU_RELEASE(tcu.cuEventDestroy(end));
    free(dev);
    free(enq);
    return ok;
}

static bool time_copies(p2pt_handle *h, struct dir *dirs, int ndirs, size_t bytes, int warmup,
                        int n, int repeats, struct timing *out)
{
    return time_copies_gated(h, dirs, ndirs, bytes, warmup, n, repeats, NULL, out);
}

/* Back-to-back copies behind a gate (struct gate): the GPU's per-copy time.
 * False, with g_err saying why, where the driver offers no stream wait. */
static bool time_copies_queued(p2pt_handle *h, struct dir *d, size_t bytes, int warmup, int n,
                               int repeats, struct timing *out)
{
    struct gate gate = {NULL};
    void *word = NULL;
    bool ok = false;
    if (tcu.cuStreamWaitValue32 == NULL) {
        set_err("this driver has no cuStreamWaitValue32");
        return false;
    }
    if (!use(d->g))
        return false;
    CU(tcu.cuMemAllocHost(&word, 64));
    gate.word = word;
    *gate.word = 1;
    ok = time_copies_gated(h, d, 1, bytes, warmup, n, repeats, &gate, out);
fail:
    if (word != NULL) {
        CU_RELEASE(tcu.cuCtxSetCurrent(d->g->ctx));
        CU_RELEASE(tcu.cuMemFreeHost(word));
    }
    return ok;
}

/*
 * One copy at a time, `samples` times, on an idle stream: the host's view
 * (just before p2pt_copy_async to the return of cuStreamSynchronize) and,
 * in a separate loop so the events do not slow the host's samples, the
 * device's view (events right around the copy). Medians.
 */
static bool time_single(p2pt_handle *h, struct dir *d, size_t bytes, int samples,
                        double *host_us, double *dev_us)
{
    CUevent e0 = NULL, e1 = NULL;
    double *hs = calloc((size_t)samples, sizeof(double));
    double *ds = calloc((size_t)samples, sizeof(double));
    bool ok = false;
    if (hs == NULL || ds == NULL) {
        set_err("out of host memory");
        goto fail;
    }
    if (!use(d->g))
        goto fail;
    CU(tcu.cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&e1, CU_EVENT_DEFAULT));
    CU(tcu.cuStreamSynchronize(d->s));
    for (int i = 0; i < samples; i++) {
        size_t off = slot_offset(d->src.pool, bytes, d->next++);
        double t0 = now_us();
        P2(p2pt_copy_async(h, dptr(d->dst.base + off), dptr(d->src.base + off), bytes, d->s));
        CU(tcu.cuStreamSynchronize(d->s));
        hs[i] = now_us() - t0;
    }
    for (int i = 0; i < samples; i++) {
        size_t off = slot_offset(d->src.pool, bytes, d->next++);
        float ms = 0;
        CU(tcu.cuEventRecord(e0, d->s));
        P2(p2pt_copy_async(h, dptr(d->dst.base + off), dptr(d->src.base + off), bytes, d->s));
        CU(tcu.cuEventRecord(e1, d->s));
        CU(tcu.cuEventSynchronize(e1));
        CU(tcu.cuEventElapsedTime(&ms, e0, e1));
        ds[i] = (double)ms * 1e3;
    }
    *host_us = median(hs, samples);
    *dev_us = median(ds, samples);
    ok = true;
fail:
    if (e0 || e1)
        CU_RELEASE(tcu.cuCtxSetCurrent(d->g->ctx));
    if (e0)
        CU_RELEASE(tcu.cuEventDestroy(e0));
    if (e1)
        CU_RELEASE(tcu.cuEventDestroy(e1));
    free(hs);
    free(ds);
    return ok;
}

/* ================================================================ check */

/* Pinned host staging for the comparison, allocated on first use. */
static unsigned char *stage_a, *stage_b;
static const struct gpu *stage_owner;

static bool stage_alloc(void)
{
    void *pa = NULL, *pb = NULL;
    if (stage_a)
        return true;
    if (!use(&gpus[0]))
        goto fail;
    CU(tcu.cuMemAllocHost(&pa, CHECK_CHUNK));
    stage_a = pa;
    CU(tcu.cuMemAllocHost(&pb, CHECK_CHUNK));
    stage_b = pb;
    stage_owner = &gpus[0];
    return true;
fail:
    return false;
}

static void stage_free(void)
{
    if (stage_owner == NULL)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(stage_owner->ctx));
    if (stage_a)
        CU_RELEASE(tcu.cuMemFreeHost(stage_a));
    if (stage_b)
        CU_RELEASE(tcu.cuMemFreeHost(stage_b));
    stage_a = stage_b = NULL;
    stage_owner = NULL;
}

/*
 * The copy as timed (same alignment: pool offsets are 256-byte aligned) into
 * a poisoned destination, against a cuMemcpyAsync of the same source into
 * the reference buffer: every byte compared, and GUARD bytes on each side
 * still poisoned. Returns 1 when equal, 0 on a difference (explained in
 * `why`), -1 when a call failed (g_err).
 */
static int check_dir(p2pt_handle *h, struct dir *d, size_t bytes, char *why, size_t why_len)
{
    CUdeviceptr src = d->src.base + GUARD, dst = d->dst.base + GUARD;
    if (!stage_alloc() || !use(d->dst.g))
        goto fail;
    CU(tcu.cuMemsetD8(d->dst.base, POISON, bytes + 2 * GUARD));
    CU(tcu.cuCtxSynchronize());
    if (!use(d->g))
        goto fail;
    CU(tcu.cuMemcpyAsync(d->ref.base, src, bytes, d->s));
    P2(p2pt_copy_async(h, dptr(dst), dptr(src), bytes, d->s));
    CU(tcu.cuStreamSynchronize(d->s));

    if (!use(d->dst.g))
        goto fail;
    CU(tcu.cuMemcpyDtoH(stage_a, d->dst.base, GUARD));
    CU(tcu.cuMemcpyDtoH(stage_a + GUARD, dst + bytes, GUARD));
    for (size_t i = 0; i < 2 * GUARD; i++)
        if (stage_a[i] != POISON) {
            snprintf(why, why_len, "guard byte %s the copy overwritten (offset %s%zu)",
                     i < GUARD ? "before" : "after", i < GUARD ? "-" : "+",
                     i < GUARD ? GUARD - i : i - GUARD);
            return 0;
        }
    for (size_t off = 0; off < bytes; off += CHECK_CHUNK) {
        size_t n = bytes - off < CHECK_CHUNK ? bytes - off : CHECK_CHUNK;
        if (!use(d->dst.g))
            goto fail;
        CU(tcu.cuMemcpyDtoH(stage_a, dst + off, n));
        if (!use(d->g))
            goto fail;
        CU(tcu.cuMemcpyDtoH(stage_b, d->ref.base + off, n));
        if (memcmp(stage_a, stage_b, n) != 0) {
            size_t first = 0, wrong = 0;
            for (size_t i = n; i-- > 0;)
                if (stage_a[i] != stage_b[i]) {
                    first = i;
                    wrong++;
                }
            snprintf(why, why_len,
                     "byte %zu of %zu is 0x%02x, the copy engine wrote 0x%02x (%zu wrong "
                     "byte%s in [%zu, %zu))",
                     off + first, bytes, stage_a[first], stage_b[first], wrong,
                     wrong == 1 ? "" : "s", off, off + n);
            return 0;
        }
    }
    return 1;
fail:
    return -1;
}

/* Differences found while a row is being printed, shown once the row is
 * complete so stderr does not cut a table line in two. */
static char pending[8][512];
static int n_pending;

static void flush_pending(void)
{
    mid_row = false;
    fflush(stdout);
    for (int i = 0; i < n_pending; i++)
        fprintf(stderr, "p2pt-bench: CHECK FAILED: %s\n", pending[i]);
    n_pending = 0;
}

/* Checks every direction; a difference is counted and reported after the
 * row, not fatal, so the rest of the run still reports. Returns the row's
 * check column. */
static const char *check_all(p2pt_handle *h, struct setup *su, size_t bytes, int transport,
                             const char *what)
{
    if (!o.check)
        return "-";
    for (int k = 0; k < su->ndirs; k++) {
        char why[256] = "";
        int r = check_dir(h, &su->d[k], bytes, why, sizeof(why));
        if (r < 0)
            fatal("%s, %s, %zu bytes: check", what, transport_names[transport], bytes);
        if (r == 0) {
            g_failures++;
            if (n_pending < (int)P2PT_ARRAY_LEN(pending))
                snprintf(pending[n_pending++], sizeof(pending[0]),
                         "%s, %s, %zu bytes, GPU %d -> GPU %d: %s", what,
                         transport_names[transport], bytes, su->d[k].src.g->ordinal,
                         su->d[k].dst.g->ordinal, why);
            return "FAIL";
        }
    }
    return "ok";
}

/* ============================================================ transports */

/* The table's and latency's handles: one per transport, environment as the
 * user set it. */
static p2pt_handle *handles[N_TRANSPORTS];
static struct tma_cfg default_cfg;

static bool handle_open(const char *transport, p2pt_handle **h, struct tma_cfg *cfg)
{
    p2pt_init_args args;
    memset(&args, 0, sizeof(args));
    args.size = sizeof(args);
    args.transport = transport;
    *h = NULL;
    P2(p2pt_init(&args, h));
    if (cfg) {
        p2pt_properties pr;
        memset(&pr, 0, sizeof(pr));
        pr.size = sizeof(pr);
        P2(p2pt_get_properties(*h, &pr));
        cfg->chunk = pr.chunk_bytes;
        cfg->stages = pr.stages;
        cfg->max_ctas = pr.max_ctas;
    }
    return true;
fail:
    if (*h)
        p2pt_finalize(*h);
    *h = NULL;
    return false;
}

/* p2pt_prepare on every GPU whose stream will copy with `h`: the compile and
 * the module load happen here, never inside a timed batch. */
static bool prepare_on(p2pt_handle *h, bool peer_too, p2pt_status *st_out)
{
    *st_out = P2PT_SUCCESS;
    for (int i = 0; i <= (peer_too ? 1 : 0); i++) {
        if (!use(&gpus[i]))
            goto fail;
        p2pt_status st = p2pt_prepare(h, gpus[i].ordinal);
        if (st != P2PT_SUCCESS) {
            *st_out = st;
            fail_p2(st, "p2pt_prepare");
            goto fail;
        }
    }
    return true;
fail:
    return false;
}

/* ================================================================= table */

static void print_table_head(int path, size_t pool)
{
    char ps[32];
    static const char *const what[N_PATHS] = {
        "stream, source and destination on GPU %d",
        "stream and source on GPU %d, destination on GPU %d",
        "stream and destination on GPU %d, source on GPU %d",
        "GPU %d -> GPU %d and back at once, a stream on each; GB/s adds both directions",
    };
    printf("\n# table, path %s: ", path_names[path]);
    printf(what[path], gpus[0].ordinal, gpus[1].ordinal);
    printf("; pool %s per side%s\n#%9s %12s", fmt_size(pool, ps, sizeof(ps)),
           pool < L2_FACTOR * gpus[0].l2 ? " (under 4 x L2: GPU memory is short)" : "", "size",
           "bytes");
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (o.transport[t])
            printf(" %9s_us %7s_GB/s", transport_names[t], transport_names[t]);
    if (o.transport[T_CE] && o.transport[T_TMA])
        printf(" %8s", "tma/ce");
    printf("  check\n");
}

static void run_table(void)
{
    size_t largest = o.sizes[o.n_sizes - 1];
    for (int p = 0; p < N_PATHS; p++) {
        if (!o.path[p])
            continue;
        struct setup su;
        if (!setup_open(&su, p, largest))
            fatal("table, path %s: buffers", path_names[p]);
        print_table_head(p, su.pool);
        for (int i = 0; i < o.n_sizes; i++) {
            size_t bytes = o.sizes[i];
            int n = iters_for(bytes), r = repeats_for(bytes), w = warmup_for(n);
            double bw[N_TRANSPORTS] = {0, 0};
            const char *check = o.check ? "ok" : "-";
            char sz[32];
            printf("%10s %12zu", fmt_size(bytes, sz, sizeof(sz)), bytes);
            mid_row = true;
            for (int t = 0; t < N_TRANSPORTS; t++) {
                if (!o.transport[t])
                    continue;
                struct timing tm;
                if (!time_copies(handles[t], su.d, su.ndirs, bytes, w, n, r, &tm))
                    fatal("table, path %s, %s, %zu bytes", path_names[p], transport_names[t],
                          bytes);
                bw[t] = gbps_of((double)bytes * su.ndirs, tm.us);
                printf(" %12.2f %12.2f", tm.us, bw[t]);
                emit("table", path_names[p], t, &default_cfg, bytes, tm.us, bw[t], "bw");
                const char *c = check_all(handles[t], &su, bytes, t, path_names[p]);
                if (strcmp(c, "FAIL") == 0)
                    check = c;
            }
            if (o.transport[T_CE] && o.transport[T_TMA])
                printf(" %8.3f", ratio_of(bw[T_TMA], bw[T_CE]));
            printf("  %s\n", check);
            flush_pending();
        }
        setup_close(&su);
    }
}

/* ================================================================= sweep */

static char *saved_env[3];
static bool saved_set[3];

static void env_save(void)
{
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(sweep_vars[i]);
        saved_set[i] = v != NULL;
        saved_env[i] = v ? strdup(v) : NULL;
        if (v && saved_env[i] == NULL) {
            set_err("out of host memory");
            fatal("sweep");
        }
    }
}

static void env_restore(void)
{
    for (int i = 0; i < 3; i++) {
        int r = saved_set[i] ? setenv(sweep_vars[i], saved_env[i], 1) : unsetenv(sweep_vars[i]);
        if (r != 0) {
            set_err("%s: %s", sweep_vars[i], strerror(errno));
            fatal("sweep: restoring the environment");
        }
    }
}

static void env_forget(void)
{
    for (int i = 0; i < 3; i++) {
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
}

static void env_set(size_t chunk, int stages, int max_ctas)
{
    char v[3][32];
    snprintf(v[0], sizeof(v[0]), "%zu", chunk);
    snprintf(v[1], sizeof(v[1]), "%d", stages);
    snprintf(v[2], sizeof(v[2]), "%d", max_ctas);
    for (int i = 0; i < 3; i++)
        if (setenv(sweep_vars[i], v[i], 1) != 0) {
            set_err("%s: %s", sweep_vars[i], strerror(errno));
            fatal("sweep: setting the environment");
        }
}

/* After a failed copy in the sweep: carry on only if the contexts still
 * work (a fault would poison every later row). */
static void sweep_contexts_alive(bool peer)
{
    for (int i = 0; i <= (peer ? 1 : 0); i++) {
        if (!use(&gpus[i]))
            fatal("sweep");
        CUresult r = tcu.cuCtxSynchronize();
        if (r != CUDA_SUCCESS) {
            fail_cu(r, "cuCtxSynchronize", __LINE__);
            fatal("sweep: GPU %d cannot go on after that error", gpus[i].ordinal);
        }
    }
}

static void sweep_combo(struct setup *su, int path, size_t chunk, int stages, int max_ctas,
                        double ce_bw, int n, int r, int w)
{
    size_t bytes = o.sweep_bytes;
    char c[32], m[16], smem[32];
    snprintf(m, sizeof(m), "%d", max_ctas);
    printf("%10s %7d %9s ", fmt_size(chunk, c, sizeof(c)), stages, max_ctas ? m : "auto");
    mid_row = true;
    if (chunk > P2PT_CHUNK_MAX / (size_t)stages) {
        char lim[32];
        printf("skipped: chunk x stages = %s > %s, the shared memory a CTA can have\n",
               fmt_size(chunk * (size_t)stages, smem, sizeof(smem)),
               fmt_size(P2PT_CHUNK_MAX, lim, sizeof(lim)));
        flush_pending();
        return;
    }
    /* p2pt reads the environment once, in p2pt_init. */
    p2pt_handle *h = NULL;
    struct tma_cfg cfg;
    env_set(chunk, stages, max_ctas);
    bool ok = handle_open("tma", &h, &cfg);
    env_restore();
    p2pt_status st;
    if (!ok || !prepare_on(h, false, &st)) {
        printf("error: %s\n", g_err);
        flush_pending();
        if (h)
            p2pt_finalize(h);
        return;
    }
    struct timing tm;
    if (!time_copies(h, su->d, 1, bytes, w, n, r, &tm)) {
        printf("error: %s\n", g_err);
        flush_pending();
        p2pt_finalize(h);
        sweep_contexts_alive(path != P_LOCAL);
        return;
    }
    double bw = gbps_of((double)bytes, tm.us);
    emit("sweep", path_names[path], T_TMA, &cfg, bytes, tm.us, bw, "bw");
    char what[96];
    snprintf(what, sizeof(what), "sweep, path %s, chunk %s, %d stages, max CTAs %s",
             path_names[path], c, stages, max_ctas ? m : "auto");
    const char *check = check_all(h, su, bytes, T_TMA, what);
    p2pt_properties pr;
    memset(&pr, 0, sizeof(pr));
    pr.size = sizeof(pr);
    char note[64] = "";
    if (p2pt_get_properties(h, &pr) == P2PT_SUCCESS && pr.ce_fallbacks > 0)
        snprintf(note, sizeof(note), "  (%llu copies went to the copy engine)",
                 (unsigned long long)pr.ce_fallbacks);
    printf("%12.2f %12.2f %8.3f  %s%s\n", tm.us, bw, ratio_of(bw, ce_bw), check, note);
    flush_pending();
    p2pt_finalize(h);
}

static void run_sweep(void)
{
    size_t bytes = o.sweep_bytes;
    int n = iters_for(bytes), r = repeats_for(bytes), w = warmup_for(n);
    bool any = false;
    env_save();
    for (int p = P_LOCAL; p <= P_PUSH; p++) {
        if (!o.path[p])
            continue;
        any = true;
        struct setup su;
        if (!setup_open(&su, p, bytes))
            fatal("sweep, path %s: buffers", path_names[p]);
        struct timing ce;
        if (!time_copies(handles[T_CE], su.d, 1, bytes, w, n, r, &ce))
            fatal("sweep, path %s, ce", path_names[p]);
        double ce_bw = gbps_of((double)bytes, ce.us);
        emit("sweep", path_names[p], T_CE, NULL, bytes, ce.us, ce_bw, "bw");
        char what[32];
        snprintf(what, sizeof(what), "sweep, path %s", path_names[p]);
        const char *ce_check = check_all(handles[T_CE], &su, bytes, T_CE, what);
        flush_pending();
        char sz[32];
        printf("\n# sweep, path %s, %s copies (GPU %d -> GPU %d): ce %.2f us, %.2f GB/s "
               "(check %s); TMA settings below\n",
               path_names[p], fmt_size(bytes, sz, sizeof(sz)), su.d[0].src.g->ordinal,
               su.d[0].dst.g->ordinal, ce.us, ce_bw, ce_check);
        printf("#%9s %7s %9s %12s %12s %8s  check\n", "chunk", "stages", "max_ctas", "tma_us",
               "tma_GB/s", "tma/ce");
        for (int ci = 0; ci < o.n_chunk; ci++)
            for (int si = 0; si < o.n_stages; si++)
                for (int mi = 0; mi < o.n_max_ctas; mi++)
                    sweep_combo(&su, p, o.chunk[ci], o.stages[si], o.max_ctas[mi], ce_bw, n, r,
                                w);
        setup_close(&su);
    }
    env_forget();
    if (!any)
        printf("\n# sweep: runs on local and push; --path selects neither\n");
}

/* =============================================================== latency */

static void run_latency(void)
{
    size_t lo = o.min_bytes > LAT_MIN ? o.min_bytes : LAT_MIN;
    size_t hi = o.max_bytes < LAT_MAX ? o.max_bytes : LAT_MAX;
    bool both = o.transport[T_CE] && o.transport[T_TMA];
    bool any = false;
    if (lo > hi) {
        printf("\n# latency: -b/-e leave no size in 4K..1M\n");
        return;
    }
    for (int p = P_LOCAL; p <= P_PULL; p++) {
        if (!o.path[p])
            continue;
        any = true;
        struct setup su;
        if (!setup_open(&su, p, hi))
            fatal("latency, path %s: buffers", path_names[p]);
        printf("\n# latency, path %s (GPU %d -> GPU %d, stream on GPU %d), microseconds: "
               "b2b = per copy, %d back to back between two events; gpu = per copy, the "
               "same batch queued behind a gate that opens once all are enqueued (the GPU's "
               "rate, the host's excluded); host = one copy, p2pt_copy_async to "
               "cuStreamSynchronize return; dev = one copy between two events; enq = host "
               "time to enqueue one copy; medians\n",
               path_names[p], su.d[0].src.g->ordinal, su.d[0].dst.g->ordinal,
               su.d[0].g->ordinal, o.iters ? o.iters : LAT_ITERS);
        printf("#%9s", "size");
        static const char *const group[4] = {"b2b", "gpu", "host", "dev"};
        for (int gi = 0; gi < 4; gi++) {
            for (int t = 0; t < N_TRANSPORTS; t++)
                if (o.transport[t])
                    printf(" %5s_%-3s", group[gi], transport_names[t]);
            if (both)
                printf(" %7s", "tma/ce");
        }
        for (int t = 0; t < N_TRANSPORTS; t++)
            if (o.transport[t])
                printf("   enq_%-3s", transport_names[t]);
        printf("  check\n");

        for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
            double v[4][N_TRANSPORTS] = {{0}}, enq[N_TRANSPORTS] = {0};
            const char *check = o.check ? "ok" : "-";
            int n = o.iters ? o.iters : LAT_ITERS, r = o.repeats ? o.repeats : 20;
            for (int t = 0; t < N_TRANSPORTS; t++) {
                if (!o.transport[t])
                    continue;
                struct timing tm;
                if (!time_copies(handles[t], su.d, 1, bytes, warmup_for(n), n, r, &tm) ||
                    !time_single(handles[t], &su.d[0], bytes, LAT_SAMPLES, &v[2][t], &v[3][t]))
                    fatal("latency, path %s, %s, %zu bytes", path_names[p], transport_names[t],
                          bytes);
                v[0][t] = tm.us;
                enq[t] = tm.enq_us;
                struct timing q;
                if (time_copies_queued(handles[t], &su.d[0], bytes, warmup_for(n), n, r, &q)) {
                    v[1][t] = q.us;
                } else {
                    static bool told;
                    if (!told)
                        printf("# gpu column: not measured (%s)\n", g_err);
                    told = true;
                    v[1][t] = 0;
                }
                static const char *const kind[4] = {"b2b", "b2b_gpu", "host", "dev"};
                for (int k = 0; k < 4; k++)
                    if (v[k][t] > 0)
                        emit("latency", path_names[p], t, &default_cfg, bytes, v[k][t],
                             gbps_of((double)bytes, v[k][t]), kind[k]);
                emit("latency", path_names[p], t, &default_cfg, bytes, enq[t], 0, "enq");
                const char *c = check_all(handles[t], &su, bytes, t, path_names[p]);
                if (strcmp(c, "FAIL") == 0)
                    check = c;
            }
            char sz[32];
            printf("%10s", fmt_size(bytes, sz, sizeof(sz)));
            for (int k = 0; k < 4; k++) {
                for (int t = 0; t < N_TRANSPORTS; t++)
                    if (o.transport[t])
                        printf(" %9.2f", v[k][t]);
                if (both)
                    printf(" %7.3f", ratio_of(v[k][T_TMA], v[k][T_CE]));
            }
            for (int t = 0; t < N_TRANSPORTS; t++)
                if (o.transport[t])
                    printf(" %9.2f", enq[t]);
            printf("  %s\n", check);
            flush_pending();
        }
        setup_close(&su);
    }
    if (!any)
        printf("\n# latency: runs on local, push and pull; --path selects none of them\n");
}

/* ================================================================== cold */

/*
 * The child (hidden flag --cold-child N): a fresh process makes its first
 * TMA copy. The context and buffers are made first, untimed (they are not
 * p2pt's cost); then p2pt_init, and the first p2pt_prepare + copy +
 * cuStreamSynchronize (NVRTC compile and module load included), then a
 * second copy. Prints "cold INIT PREPARE FIRST SECOND" in milliseconds, then
 * p2pt's counts of NVRTC compilations and cubin-cache hits.
 */
static int cold_child(int argc, char **argv)
{
    struct gpu g;
    CUdeviceptr src = 0, dst = 0;
    CUstream s = NULL;
    p2pt_handle *h = NULL;
    unsigned char *host = NULL;
    int rc = 1;
    memset(&g, 0, sizeof(g));
    if (argc != 3) {
        set_err("usage: --cold-child DEVICE");
        goto fail;
    }
    int device = atoi(argv[2]);
    p2pt_status ls = p2pt_test_driver_load(getenv("P2P_CUDA_LIBRARY"));
    if (ls != P2PT_SUCCESS) {
        set_err("no CUDA device: %s", p2pt_last_error(NULL));
        goto fail;
    }
    if (!gpu_info(&g, device) || !open_gpu(&g) || !use(&g))
        goto fail;
    CU(tcu.cuMemAlloc(&src, COLD_BYTES));
    CU(tcu.cuMemAlloc(&dst, COLD_BYTES));
    CU(tcu.cuMemsetD8(src, 0x5A, COLD_BYTES));
    CU(tcu.cuMemsetD8(dst, 0, COLD_BYTES));
    CU(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(tcu.cuCtxSynchronize());

    p2pt_init_args args;
    memset(&args, 0, sizeof(args));
    args.size = sizeof(args);
    args.transport = "tma";
    double t0 = now_us();
    P2(p2pt_init(&args, &h));
    double t1 = now_us();
    P2(p2pt_prepare(h, device));
    double t2 = now_us();
    P2(p2pt_copy_async(h, dptr(dst), dptr(src), COLD_BYTES, s));
    CU(tcu.cuStreamSynchronize(s));
    double t3 = now_us();
    P2(p2pt_copy_async(h, dptr(dst), dptr(src), COLD_BYTES, s));
    CU(tcu.cuStreamSynchronize(s));
    double t4 = now_us();

    host = malloc(COLD_BYTES);
    if (host == NULL) {
        set_err("out of host memory");
        goto fail;
    }
    CU(tcu.cuMemcpyDtoH(host, dst, COLD_BYTES));
    for (size_t i = 0; i < COLD_BYTES; i++)
        if (host[i] != 0x5A) {
            set_err("the first copies are wrong: byte %zu is 0x%02x, not 0x5a", i, host[i]);
            goto fail;
        }
    p2pt_properties props = {sizeof(props)};
    P2(p2pt_get_properties(h, &props));
    printf("cold %.3f %.3f %.3f %.3f %llu %llu\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3,
           (t3 - t1) / 1e3, (t4 - t3) / 1e3, (unsigned long long)props.compilations,
           (unsigned long long)props.cubin_cache_hits);
    rc = 0;
fail:
    if (rc != 0)
        fprintf(stderr, "p2pt-bench --cold-child: %s\n", g_err);
    free(host);
    if (h)
        p2pt_finalize(h);
    if (g.ctx) {
        CU_RELEASE(tcu.cuCtxSetCurrent(g.ctx));
        if (s)
            CU_RELEASE(tcu.cuStreamDestroy(s));
        if (src)
            CU_RELEASE(tcu.cuMemFree(src));
        if (dst)
            CU_RELEASE(tcu.cuMemFree(dst));
        close_gpu(&g);
    }
    fflush(stdout);
    return rc != 0 || g_failures ? 1 : 0;
}

/* Runs this program again as a cold child and reads its numbers: four times
 * in ms, then compilations and cache hits. */
static bool cold_once(double ms[6])
{
    char self[PATH_MAX], dev[16];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        snprintf(self, sizeof(self), "/proc/self/exe");
    else
        self[len] = '\0';
    snprintf(dev, sizeof(dev), "%d", gpus[0].ordinal);
    int fd[2];
    if (pipe(fd) != 0) {
        set_err("pipe: %s", strerror(errno));
        return false;
    }
    fflush(NULL); /* nothing buffered may be written twice */
    pid_t pid = fork();
    if (pid < 0) {
        set_err("fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        char *args[] = {self, "--cold-child", dev, NULL};
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execv(self, args);
        fprintf(stderr, "p2pt-bench: cannot run %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    char buf[512];
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd[0], buf + got, sizeof(buf) - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == sizeof(buf) - 1)
            break;
    }
    buf[got] = '\0';
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            set_err("waitpid: %s", strerror(errno));
            return false;
        }
    if (WIFSIGNALED(status)) {
        set_err("the child was killed by signal %d", WTERMSIG(status));
        return false;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        set_err("the child exited with status %d (its message is above)",
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return false;
    }
    const char *line = strstr(buf, "cold ");
    if (line == NULL || sscanf(line, "cold %lf %lf %lf %lf %lf %lf", &ms[0], &ms[1], &ms[2],
                               &ms[3], &ms[4], &ms[5]) != 6) {
        one_line(buf);
        set_err("unexpected output from the child: \"%.200s\"", buf);
        return false;
    }
    return true;
}

/* NULL, or why the page cache could not be dropped. */
static const char *drop_page_cache(void)
{
    static char why[128];
    sync();
    FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
    if (f == NULL || fputs("3\n", f) < 0 || fclose(f) != 0) {
        snprintf(why, sizeof(why), "%s", strerror(errno));
        if (f != NULL)
            fclose(f);
        return why;
    }
    return NULL;
}

/* COLD_RUNS cold children with P2P_TRANSPORT_CACHE_DIR=cache_dir ("off":
 * NVRTC every time). `prefix` names the CSV kinds; `want_hits`: every run
 * must have read the cubin from the cache (else it must have compiled). */
static void cold_series(const char *cache_dir, const char *prefix, bool want_hits,
                        bool *drop)
{
    double first[COLD_RUNS];
    int ok = 0;
    setenv("P2P_TRANSPORT_CACHE_DIR", cache_dir, 1);
    for (int r = 0; r < COLD_RUNS; r++) {
        double ms[6];
        if (*drop) {
            const char *why = drop_page_cache();
            if (why != NULL) {
                printf("# --cold-drop-caches: cannot drop the page cache (%s; needs root): "
                       "the runs below use a warm page cache\n", why);
                *drop = false;
            }
        }
        if (!cold_once(ms)) {
            printf("%5d failed: %s\n", r + 1, g_err);
            g_failures++;
            continue;
        }
        bool as_expected = want_hits ? (ms[4] == 0 && ms[5] == 1) : (ms[4] == 1 && ms[5] == 0);
        printf("%5d %10.3f %11.3f %10.3f %10.3f %8.0f %6.0f%s\n", r + 1, ms[0], ms[1], ms[2],
               ms[3], ms[4], ms[5], as_expected ? "" : "  <- unexpected: not counted");
        if (!as_expected) {
            g_failures++;
            continue;
        }
        static const char *const kind[4] = {"init", "prepare", "first", "second"};
        for (int k = 0; k < 4; k++) {
            char name[32];
            snprintf(name, sizeof(name), "%s%s", prefix, kind[k]);
            emit("cold", "local", T_TMA, &default_cfg, COLD_BYTES, ms[k] * 1e3, 0, name);
        }
        first[ok++] = ms[2];
    }
    fflush(stdout);
    if (ok > 0) {
        char name[32];
        double m = median(first, ok);
        printf("# first copy (prepare + copy + sync), median of %d: %.3f ms\n", ok, m);
        snprintf(name, sizeof(name), "%sfirst_median", prefix);
        emit("cold", "local", T_TMA, &default_cfg, COLD_BYTES, m * 1e3, 0, name);
    }
}

static void run_cold(void)
{
    char sz[32], dir[64];
    bool drop = o.drop_caches;
    const char *saved = getenv("P2P_TRANSPORT_CACHE_DIR");
    char *restore = saved ? strdup(saved) : NULL;
    printf("\n# cold, GPU %d: a fresh process (this program re-run) makes its first TMA copy "
           "of %s; host clock, milliseconds: init = p2pt_init; first = p2pt_prepare (NVRTC "
           "compile or cubin-cache read, + module load) + copy + cuStreamSynchronize; second = "
           "the next copy + sync; compiles and hits = p2pt's counters; page cache %s\n",
           gpus[0].ordinal, fmt_size(COLD_BYTES, sz, sizeof(sz)),
           drop ? "dropped before each run" : "as it is (warm after the first run)");
    printf("#%4s %10s %11s %10s %10s %8s %6s\n", "run", "init_ms", "prepare_ms", "first_ms",
           "second_ms", "compiles", "hits");
    printf("# cubin cache off (P2P_TRANSPORT_CACHE_DIR=off): NVRTC compiles\n");
    cold_series("off", "", false, &drop);

    snprintf(dir, sizeof(dir), "/tmp/p2pt-bench-cache-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        printf("# cubin cache: cannot make a private directory: %s\n", strerror(errno));
        g_failures++;
    } else {
        /* An earlier process fills the cache (it compiles and saves). */
        double ms[6];
        setenv("P2P_TRANSPORT_CACHE_DIR", dir, 1);
        if (!cold_once(ms) || ms[4] != 1) {
            printf("# cubin cache: the run that fills %s failed: %s\n", dir, g_err);
            g_failures++;
        } else {
            printf("# cubin cache in %s, filled by one earlier run (%.3f ms)\n", dir, ms[2]);
            cold_series(dir, "cached_", true, &drop);
        }
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            printf("# could not remove %s\n", dir);
    }
    if (restore != NULL)
        setenv("P2P_TRANSPORT_CACHE_DIR", restore, 1);
    else
        unsetenv("P2P_TRANSPORT_CACHE_DIR");
    free(restore);
}

/* What p2pt says it did: a "tma" figure is only a TMA figure if the copies
 * were kernel launches, not copy-engine fallbacks. */
static void print_counters(void)
{
    for (int t = 0; t < N_TRANSPORTS; t++) {
        p2pt_properties pr;
        memset(&pr, 0, sizeof(pr));
        pr.size = sizeof(pr);
        if (p2pt_get_properties(handles[t], &pr) != P2PT_SUCCESS)
            continue;
        printf("# p2pt counters, %s handle: %llu copies, %llu TMA launches, %llu copy-engine "
               "copies, %llu fallbacks to the copy engine, %llu rejected",
               transport_names[t], (unsigned long long)pr.copies,
               (unsigned long long)pr.tma_launches, (unsigned long long)pr.ce_copies,
               (unsigned long long)pr.ce_fallbacks, (unsigned long long)pr.rejected);
        if (t == T_TMA)
            printf("; NVRTC compilations %llu, module loads %llu",
                   (unsigned long long)pr.compilations, (unsigned long long)pr.module_loads);
        printf("\n");
        if (t == T_TMA && pr.ce_fallbacks > 0)
            fprintf(stderr, "p2pt-bench: warning: %llu TMA copies went to the copy engine "
                    "(dst and src differ modulo 16): their figures are not TMA figures\n",
                    (unsigned long long)pr.ce_fallbacks);
    }
}

/* ================================================================== main */

static void print_header(int argc, char **argv, int count)
{
    char date[64] = "?", host[256] = "?", l2[32], pool[32], chunk[32];
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", &tmv);
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';

    p2pt_properties pr;
    memset(&pr, 0, sizeof(pr));
    pr.size = sizeof(pr);
    if (p2pt_get_properties(handles[T_TMA], &pr) != P2PT_SUCCESS)
        fatal("p2pt_get_properties"); /* cannot fail on a live handle */

    printf("# p2pt-bench: p2pt %s (plugin ABI %u), %s, host %s\n", pr.version, pr.abi_version,
           date, host);
    printf("# command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# CUDA driver %d.%d (%d); %d GPU%s visible\n", pr.driver_version / 1000,
           pr.driver_version % 1000 / 10, pr.driver_version, count, count == 1 ? "" : "s");
    for (int i = 0; i < (have_peer ? 2 : 1); i++)
        printf("# GPU %d%s: %s, sm_%d%d, %d SMs, L2 %s\n", gpus[i].ordinal,
               i ? " (peer)" : "", gpus[i].name, gpus[i].cc_major, gpus[i].cc_minor,
               gpus[i].sms, fmt_size(gpus[i].l2, l2, sizeof(l2)));
    if (have_peer) {
        int rank = -1;
        if (tcu.cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
                                             gpus[0].dev, gpus[1].dev) != CUDA_SUCCESS)
            rank = -1;
        printf("# peer access GPU %d <-> GPU %d: enabled both ways (performance rank %d)\n",
               gpus[0].ordinal, gpus[1].ordinal, rank);
    }
    char ctas[16] = "auto";
    if (pr.max_ctas)
        snprintf(ctas, sizeof(ctas), "%d", pr.max_ctas);
    printf("# tma settings: chunk %s, %d stages, max CTAs %s, L2 hint %s, validation %s, "
           "PDL %s (P2P_TRANSPORT_*; the sweep sets its own)\n",
           fmt_size(pr.chunk_bytes, chunk, sizeof(chunk)), pr.stages, ctas,
           handles[T_TMA]->cfg.l2_evict_first ? "evict_first" : "none",
           pr.validate ? "on" : "off", pr.pdl ? "on" : "off");
    printf("# bandwidth = payload bytes / time, each copy counted once (N bytes copied = N "
           "bytes, on any path; bidir adds both directions); GB/s = 1e9 bytes/s\n");
    printf("# time = CUDA events around a batch of copies / copies in it; median over batches "
           "after warm-up (-n %s, -r %s, -w %s); p2pt_prepare ran before any timing\n",
           o.iters ? "set" : "256M/size in 5..100", o.repeats ? "set" : "20..5 by size",
           o.warmup >= 0 ? "set" : "one batch");
    printf("# buffers rotate through pools of >= %d x L2 = %s per side, so copies that fit in "
           "L2 miss it; -c %d: %s\n",
           L2_FACTOR, fmt_size(L2_FACTOR * gpus[0].l2, pool, sizeof(pool)), o.check,
           o.check ? "every byte checked against a copy-engine reference" : "no check");
    fflush(stdout);
}

/* Which peer paths were asked for, as "push,pull,bidir". */
static const char *peer_paths(char *buf, size_t len)
{
    buf[0] = '\0';
    for (int p = P_PUSH; p < N_PATHS; p++)
        if (o.path[p])
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? "," : "",
                     path_names[p]);
    return buf;
}

/* Decides the second GPU and the paths, enabling nothing yet. */
static void choose_paths(int count)
{
    char list[64];
    bool asked = o.path[P_PUSH] || o.path[P_PULL] || o.path[P_BIDIR];
    if (o.peer_given && o.peer >= count)
        usage_error("--peer %d: only %d GPU%s visible (0..%d)", o.peer, count,
                    count == 1 ? " is" : "s are", count - 1);
    if (!o.peer_given)
        o.peer = o.device == 0 ? 1 : 0;
    have_peer = count >= 2;
    if (!o.path_given) {
        o.path[P_PUSH] = o.path[P_PULL] = o.path[P_BIDIR] = true;
        asked = true;
    }
    /* Only the cold mode runs without a path. */
    asked = asked && (o.mode[M_TABLE] || o.mode[M_SWEEP] || o.mode[M_LATENCY]);
    if (have_peer) {
        int ab = 0, ba = 0;
        if (!gpu_info(&gpus[1], o.peer))
            fatal("GPU %d", o.peer);
        if (tcu.cuDeviceCanAccessPeer(&ab, gpus[0].dev, gpus[1].dev) != CUDA_SUCCESS ||
            tcu.cuDeviceCanAccessPeer(&ba, gpus[1].dev, gpus[0].dev) != CUDA_SUCCESS)
            ab = ba = 0;
        if (!ab || !ba) {
            if (asked)
                fprintf(stderr,
                        "p2pt-bench: skipping %s: GPU %d and GPU %d cannot access each other "
                        "(cuDeviceCanAccessPeer)\n",
                        peer_paths(list, sizeof(list)), o.device, o.peer);
            have_peer = false;
        }
    } else if (asked) {
        fprintf(stderr, "p2pt-bench: skipping %s: needs 2 GPUs, found %d\n",
                peer_paths(list, sizeof(list)), count);
    }
    if (!have_peer) {
        o.path[P_PUSH] = o.path[P_PULL] = o.path[P_BIDIR] = false;
        o.path[P_LOCAL] = true; /* "continue with local" */
        gpus[1] = gpus[0];      /* never used as a peer; keeps plan_pool simple */
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--cold-child") == 0)
        return cold_child(argc, argv);
    parse_args(argc, argv);

    /* No GPU, no driver: one line, at once. */
    if (p2pt_test_driver_load(getenv("P2P_CUDA_LIBRARY")) != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-bench: no CUDA device: %s\n", p2pt_last_error(NULL));
        return 1;
    }
    int count = 0;
    CUresult cr = tcu.cuDeviceGetCount(&count);
    if (cr != CUDA_SUCCESS || count == 0) {
        fprintf(stderr, "p2pt-bench: no CUDA device: %s\n",
                cr != CUDA_SUCCESS ? p2pt__cuda_error_name(cr)
                                   : "the driver loaded but reports 0 devices");
        return 1;
    }
    if (o.device >= count)
        usage_error("--device %d: only %d GPU%s visible (0..%d)", o.device, count,
                    count == 1 ? " is" : "s are", count - 1);
    if (!gpu_info(&gpus[0], o.device))
        fatal("GPU %d", o.device);
    choose_paths(count);

    /* Handles need no context; the header shows the TMA handle's settings. */
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (!handle_open(transport_names[t], &handles[t], t == T_TMA ? &default_cfg : NULL))
            fatal("p2pt_init(\"%s\")", transport_names[t]);
    open_outputs();
    print_header(argc, argv, count);

    /* Before this process makes any context: a cold child must be able to
     * make its own even on a GPU in exclusive-process mode. */
    if (o.mode[M_COLD])
        run_cold();

    bool need_tma = o.mode[M_SWEEP] ||
                    (o.transport[T_TMA] && (o.mode[M_TABLE] || o.mode[M_LATENCY]));
    if (o.mode[M_TABLE] || o.mode[M_SWEEP] || o.mode[M_LATENCY]) {
        if (!open_gpu(&gpus[0]))
            fatal("GPU %d: context", gpus[0].ordinal);
        if (have_peer) {
            if (!open_gpu(&gpus[1]))
                fatal("GPU %d: context", gpus[1].ordinal);
            if (!enable_peer_access())
                fatal("peer access between GPU %d and GPU %d", gpus[0].ordinal,
                      gpus[1].ordinal);
        } else {
            gpus[1] = gpus[0];
        }
        p2pt_status st;
        if (!prepare_on(handles[T_CE], have_peer, &st))
            fatal("ce");
        if (need_tma && !prepare_on(handles[T_TMA], have_peer, &st)) {
            if (st != P2PT_NOT_SUPPORTED)
                fatal("tma");
            fprintf(stderr, "p2pt-bench: skipping tma%s: %s\n",
                    o.mode[M_SWEEP] ? " and the sweep" : "", g_err);
            o.transport[T_TMA] = false;
            o.mode[M_SWEEP] = false;
            if (!o.transport[T_CE]) {
                set_err("no transport left to measure");
                fatal("tma");
            }
        }
        if (o.mode[M_TABLE])
            run_table();
        if (o.mode[M_SWEEP])
            run_sweep();
        if (o.mode[M_LATENCY])
            run_latency();
    }

    if (o.mode[M_TABLE] || o.mode[M_SWEEP] || o.mode[M_LATENCY])
        print_counters();
    for (int t = 0; t < N_TRANSPORTS; t++)
        p2pt_finalize(handles[t]);
    stage_free();
    if (have_peer)
        close_gpu(&gpus[1]);
    close_gpu(&gpus[0]);
    fflush(stdout);
    if (g_failures) {
        fprintf(stderr, "p2pt-bench: %d failure%s (see above)\n", g_failures,
                g_failures == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
