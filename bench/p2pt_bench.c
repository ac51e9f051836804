/*
 * p2pt-bench: the copy engine against the TMA kernel, through p2pt's own API,
 * measured the same way in the same run.
 *
 * Conventions (printed in the header too): bandwidth is payload bytes / time
 * (a copy of N bytes counts N, not 2N), GB/s = 1e9 B/s; device times come
 * from CUDA events around batches of copies, after warm-up, as the median of
 * several repeats; sources and destinations rotate through arenas of at
 * least 4x the L2 cache so small copies are not served from L2; the NVRTC
 * compile and module load happen in p2pt_prepare, before any timing.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "p2pt_internal.h"

/* ------------------------------------------------------------ options */

#define MAX_LIST 16

struct opts {
    size_t min_bytes, max_bytes, sweep_bytes;
    double factor;
    int warmup, iters, check;
    bool transports[2]; /* ce, tma */
    bool paths[4];      /* local, push, pull, bidir */
    bool paths_given;
    bool modes[4];      /* table, sweep, latency, cold */
    size_t chunks[MAX_LIST];
    int n_chunks;
    long stages[MAX_LIST];
    int n_stages;
    long ctas[MAX_LIST];
    int n_ctas;
    int device, peer;
    const char *csv, *json;
};

static const char *const path_names[4] = {"local", "push", "pull", "bidir"};
static const char *const mode_names[4] = {"table", "sweep", "latency", "cold"};
static const char *const tnames[2] = {"ce", "tma"};

static void usage(FILE *f)
{
    fprintf(f,
"usage: p2pt-bench [options]\n"
"Compares p2pt's transports (ce = cuMemcpyAsync, tma = cp.async.bulk kernel).\n"
"  -b SIZE          smallest copy (default 4K)\n"
"  -e SIZE          largest copy (default 1G)\n"
"  -f FACTOR        size multiplication factor (default 4)\n"
"  -w N             warm-up copies per size and transport (default 5)\n"
"  -n N             copies per timed batch (default: 20, fewer for big sizes)\n"
"  -c 0|1           check every byte of each transport's result against a\n"
"                   copy-engine reference (default 1)\n"
"  --transport LIST ce,tma (default both)\n"
"  --path LIST      local,push,pull,bidir (default local; all four with 2 GPUs)\n"
"  --mode LIST      table,sweep,latency,cold or all (default table)\n"
"  --chunk LIST     sweep: TMA chunk sizes (default 16K,32K,48K,64K,96K)\n"
"  --stages LIST    sweep: ring depths (default 2,3,4)\n"
"  --max-ctas LIST  sweep: CTA caps, 0 = auto (default 0)\n"
"  --sweep-bytes SIZE  copy size for the sweep (default 1G)\n"
"  --device N       the stream's GPU (default 0)\n"
"  --peer M         the other GPU for push/pull/bidir (default 1)\n"
"  --csv FILE       also write every measurement as CSV\n"
"  --json FILE      also write every measurement as JSON\n"
"  -h, --help       this text\n"
"SIZE takes K, M, G suffixes (binary: 4K = 4096). Bandwidth = payload bytes\n"
"per second (a copy of N bytes counts N), GB/s = 1e9 B/s; medians of event\n"
"timings after warm-up; buffers rotate over >= 4x L2 so caches do not flatter\n"
"small copies. The TMA settings come from P2P_TRANSPORT_* (env.md); the\n"
"sweep sets them itself.\n");
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("p2pt-bench: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static bool parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    if (s == NULL || *s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30, end++;
    if (errno || *end || v > ~0ull / mul)
        return false;
    *out = (size_t)(v * mul);
    return true;
}

static long parse_long(const char *flag, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die("%s \"%s\": expected an integer from %ld to %ld", flag, s, lo, hi);
    return v;
}

/* Comma list of names into flags. */
static void parse_names(const char *flag, const char *s, const char *const *names, int n,
                        bool *out)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    memset(out, 0, sizeof(bool) * (size_t)n);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int hit = -1;
        for (int i = 0; i < n; i++)
            if (strcasecmp(tok, names[i]) == 0)
                hit = i;
        if (strcasecmp(tok, "all") == 0) {
            for (int i = 0; i < n; i++)
                out[i] = true;
            continue;
        }
        if (hit < 0)
            die("%s \"%s\": unknown \"%s\"", flag, s, tok);
        out[hit] = true;
    }
}

static int parse_size_list(const char *flag, const char *s, size_t *out)
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_LIST || !parse_size(tok, &out[n]))
            die("%s \"%s\": expected up to %d sizes like 48K", flag, s, MAX_LIST);
        n++;
    }
    return n;
}

static int parse_long_list(const char *flag, const char *s, long *out, long lo, long hi)
{
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_LIST)
            die("%s: at most %d values", flag, MAX_LIST);
        out[n++] = parse_long(flag, tok, lo, hi);
    }
    return n;
}

static void parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->min_bytes = 4096;
    o->max_bytes = 1ull << 30;
    o->sweep_bytes = 1ull << 30;
    o->factor = 4;
    o->warmup = 5;
    o->iters = 0;
    o->check = 1;
    o->transports[0] = o->transports[1] = true;
    o->paths[0] = true;
    o->modes[0] = true;
    o->n_chunks = parse_size_list("--chunk", "16K,32K,48K,64K,96K", o->chunks);
    o->n_stages = parse_long_list("--stages", "2,3,4", o->stages, 1, 16);
    o->n_ctas = parse_long_list("--max-ctas", "0", o->ctas, 0, 4096);
    o->peer = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED()                                                                 \
    do {                                                                       \
        if (v == NULL)                                                         \
            die("%s needs a value (see --help)", a);                           \
        i++;                                                                   \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-b")) {
            NEED();
            if (!parse_size(v, &o->min_bytes) || o->min_bytes == 0)
                die("-b \"%s\": expected a size like 4K", v);
        } else if (!strcmp(a, "-e")) {
            NEED();
            if (!parse_size(v, &o->max_bytes) || o->max_bytes == 0)
                die("-e \"%s\": expected a size like 1G", v);
        } else if (!strcmp(a, "-f")) {
            NEED();
            char *end;
            o->factor = strtod(v, &end);
            if (*end || !(o->factor > 1.0))
                die("-f \"%s\": expected a number above 1", v);
        } else if (!strcmp(a, "-w")) {
            NEED();
            o->warmup = (int)parse_long("-w", v, 0, 100000);
        } else if (!strcmp(a, "-n")) {
            NEED();
            o->iters = (int)parse_long("-n", v, 1, 1000000);
        } else if (!strcmp(a, "-c")) {
            NEED();
            o->check = (int)parse_long("-c", v, 0, 1);
        } else if (!strcmp(a, "--transport")) {
            NEED();
            parse_names(a, v, tnames, 2, o->transports);
        } else if (!strcmp(a, "--path")) {
            NEED();
            parse_names(a, v, path_names, 4, o->paths);
            o->paths_given = true;
        } else if (!strcmp(a, "--mode")) {
            NEED();
            parse_names(a, v, mode_names, 4, o->modes);
        } else if (!strcmp(a, "--chunk")) {
            NEED();
            o->n_chunks = parse_size_list(a, v, o->chunks);
        } else if (!strcmp(a, "--stages")) {
            NEED();
            o->n_stages = parse_long_list(a, v, o->stages, 1, 16);
        } else if (!strcmp(a, "--max-ctas")) {
            NEED();
            o->n_ctas = parse_long_list(a, v, o->ctas, 0, 4096);
        } else if (!strcmp(a, "--sweep-bytes")) {
            NEED();
            if (!parse_size(v, &o->sweep_bytes) || o->sweep_bytes == 0)
                die("--sweep-bytes \"%s\": expected a size like 1G", v);
        } else if (!strcmp(a, "--device")) {
            NEED();
            o->device = (int)parse_long(a, v, 0, 1023);
        } else if (!strcmp(a, "--peer")) {
            NEED();
            o->peer = (int)parse_long(a, v, 0, 1023);
        } else if (!strcmp(a, "--csv")) {
            NEED();
            o->csv = v;
        } else if (!strcmp(a, "--json")) {
            NEED();
            o->json = v;
        } else {
            die("unknown option \"%s\" (see --help)", a);
        }
#undef NEED
    }
    if (o->min_bytes > o->max_bytes)
        die("-b %zu is larger than -e %zu", o->min_bytes, o->max_bytes);
}

/* ------------------------------------------------------------ results */

struct record {
    char mode[12], path[8], transport[8], kind[24];
    size_t bytes, chunk;
    long stages, max_ctas;
    double time_us, gbps;
};

static struct record *records;
static size_t n_records, cap_records;

static void record(const char *mode, const char *path, const char *transport, const char *kind,
                   size_t bytes, size_t chunk, long stages, long max_ctas, double us)
{
    if (n_records == cap_records) {
        cap_records = cap_records ? cap_records * 2 : 256;
        records = realloc(records, cap_records * sizeof(*records));
        if (records == NULL)
            die("out of memory");
    }
    struct record *r = &records[n_records++];
    memset(r, 0, sizeof(*r));
    snprintf(r->mode, sizeof(r->mode), "%s", mode);
    snprintf(r->path, sizeof(r->path), "%s", path);
    snprintf(r->transport, sizeof(r->transport), "%s", transport);
    snprintf(r->kind, sizeof(r->kind), "%s", kind);
    r->bytes = bytes;
    r->chunk = chunk;
    r->stages = stages;
    r->max_ctas = max_ctas;
    r->time_us = us;
    r->gbps = us > 0 ? (double)bytes / us / 1e3 : 0;
}

static void write_outputs(const struct opts *o)
{
    if (o->csv) {
        FILE *f = fopen(o->csv, "w");
        if (!f)
            die("cannot write %s: %s", o->csv, strerror(errno));
        fprintf(f, "mode,path,transport,kind,bytes,chunk,stages,max_ctas,time_us,gbps\n");
        for (size_t i = 0; i < n_records; i++) {
            const struct record *r = &records[i];
            fprintf(f, "%s,%s,%s,%s,%zu,%zu,%ld,%ld,%.3f,%.3f\n", r->mode, r->path,
                    r->transport, r->kind, r->bytes, r->chunk, r->stages, r->max_ctas,
                    r->time_us, r->gbps);
        }
        fclose(f);
    }
    if (o->json) {
        FILE *f = fopen(o->json, "w");
        if (!f)
            die("cannot write %s: %s", o->json, strerror(errno));
        fprintf(f, "[\n");
        for (size_t i = 0; i < n_records; i++) {
            const struct record *r = &records[i];
            fprintf(f,
                    "  {\"mode\":\"%s\",\"path\":\"%s\",\"transport\":\"%s\",\"kind\":\"%s\","
                    "\"bytes\":%zu,\"chunk\":%zu,\"stages\":%ld,\"max_ctas\":%ld,"
                    "\"time_us\":%.3f,\"gbps\":%.3f}%s\n",
                    r->mode, r->path, r->transport, r->kind, r->bytes, r->chunk, r->stages,
                    r->max_ctas, r->time_us, r->gbps, i + 1 < n_records ? "," : "");
        }
        fprintf(f, "]\n");
        fclose(f);
    }
}

/* --------------------------------------------------------------- CUDA */

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != CUDA_SUCCESS)                                                \
            die("%s failed: %s (line %d)", #call, p2pt__cuda_error_name(r_), __LINE__); \
    } while (0)

static void ok(p2pt_status st, const char *what)
{
    if (st != P2PT_SUCCESS)
        die("%s: %s: %s", what, p2pt_status_string(st), p2pt_last_error(NULL));
}

static CUcontext ctx_of[64];

static void use(int dev)
{
    if (ctx_of[dev] == NULL) {
        CUdevice d;
        CK(p2pt__cu.cuDeviceGet(&d, dev));
        CK(p2pt__cu.cuDevicePrimaryCtxRetain(&ctx_of[dev], d));
    }
    CK(p2pt__cu.cuCtxSetCurrent(ctx_of[dev]));
}

static int dev_attr(int dev, CUdevice_attribute a)
{
    int v = 0;
    CK(p2pt__cu.cuDeviceGetAttribute(&v, a, dev));
    return v;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* An arena of at least `min_total` bytes on `dev`, filled with random
 * bytes, cut into `slots` slots of `stride` bytes. */
struct arena {
    CUdeviceptr base;
    size_t bytes, stride;
    int slots;
    int dev;
};

static size_t l2_bytes;

static struct arena arena_make(int dev, size_t size)
{
    struct arena a = {0, 0, 0, 0, dev};
    a.stride = (size + 4095) / 4096 * 4096;
    size_t want = 4 * l2_bytes > a.stride ? 4 * l2_bytes : a.stride;
    a.slots = (int)(want / a.stride);
    if (a.slots < 1)
        a.slots = 1;
    if (a.slots > 65536)
        a.slots = 65536;
    a.bytes = (size_t)a.slots * a.stride;
    use(dev);
    CK(p2pt__cu.cuMemAlloc(&a.base, a.bytes));
    CK(p2pt__cu.cuMemsetD8(a.base, 0x3C, a.bytes));
    CK(p2pt__cu.cuCtxSynchronize());
    return a;
}

static void arena_free(struct arena *a)
{
    use(a->dev);
    p2pt__cu.cuMemFree(a->base);
    a->base = 0;
}

static void random_fill(struct arena *a, size_t n, uint64_t seed)
{
    unsigned char *h = malloc(n);
    if (!h)
        die("out of memory");
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(h + i, &x, 8);
    }
    for (size_t i = n & ~(size_t)7; i < n; i++)
        h[i] = (unsigned char)i;
    use(a->dev);
    CK(p2pt__cu.cuMemcpyHtoD(a->base, h, n));
    free(h);
}

/* ------------------------------------------------------------- timing */

static p2pt_handle *handle_for(const char *transport)
{
    p2pt_init_args args = {sizeof(args), NULL, transport};
    p2pt_handle *h = NULL;
    ok(p2pt_init(&args, &h), "p2pt_init");
    return h;
}

static int iters_for(const struct opts *o, size_t bytes)
{
    if (o->iters)
        return o->iters;
    if (bytes >= (256u << 20))
        return 5;
    if (bytes >= (16u << 20))
        return 10;
    return 20;
}

#define REPEATS 7

/* Median per-copy device time (us) of batches of `n` copies src -> dst,
 * rotating slots. */
static double time_batches(p2pt_handle *h, struct arena *src, struct arena *dst, size_t bytes,
                           int n, int warmup, int stream_dev, CUstream s)
{
    CUevent e0, e1;
    use(stream_dev);
    CK(p2pt__cu.cuEventCreate(&e0, 0));
    CK(p2pt__cu.cuEventCreate(&e1, 0));
    int slots = src->slots < dst->slots ? src->slots : dst->slots;
    int k = 0;
    for (int i = 0; i < warmup; i++, k++)
        ok(p2pt_copy_async(h, (void *)(dst->base + (size_t)(k % slots) * dst->stride),
                           (void *)(src->base + (size_t)(k % slots) * src->stride), bytes, s),
           "copy");
    double t[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        CK(p2pt__cu.cuEventRecord(e0, s));
        for (int i = 0; i < n; i++, k++)
            ok(p2pt_copy_async(h, (void *)(dst->base + (size_t)(k % slots) * dst->stride),
                               (void *)(src->base + (size_t)(k % slots) * src->stride), bytes,
                               s),
               "copy");
        CK(p2pt__cu.cuEventRecord(e1, s));
        CK(p2pt__cu.cuEventSynchronize(e1));
        float ms = 0;
        CK(p2pt__cu.cuEventElapsedTime(&ms, e0, e1));
        t[r] = (double)ms * 1e3 / n;
    }
    p2pt__cu.cuEventDestroy(e0);
    p2pt__cu.cuEventDestroy(e1);
    return median(t, REPEATS);
}

/* Check the transport's result byte for byte against a copy-engine copy of
 * the same source. */
static void check_copy(p2pt_handle *h, p2pt_handle *ce, struct arena *src, struct arena *dst,
                       size_t bytes, int stream_dev, CUstream s, const char *what)
{
    size_t off = 3 % 16; /* co-aligned odd offset: exercises head and tail */
    if (bytes + off > src->stride)
        off = 0;
    use(dst->dev);
    CK(p2pt__cu.cuMemsetD8(dst->base, 0xA5, bytes + off + 16));
    CK(p2pt__cu.cuCtxSynchronize());
    use(stream_dev);
    ok(p2pt_copy_async(h, (void *)(dst->base + off), (void *)(src->base + off), bytes, s), what);
    CK(p2pt__cu.cuStreamSynchronize(s));
    /* The reference goes into the second slot, or a fresh buffer. */
    CUdeviceptr ref;
    use(stream_dev);
    CK(p2pt__cu.cuMemAlloc(&ref, bytes));
    ok(p2pt_copy_async(ce, (void *)ref, (void *)(src->base + off), bytes, s), "reference");
    CK(p2pt__cu.cuStreamSynchronize(s));
    unsigned char *a = malloc(bytes + off + 16), *b = malloc(bytes);
    if (!a || !b)
        die("out of memory");
    use(dst->dev);
    CK(p2pt__cu.cuMemcpyDtoH(a, dst->base, bytes + off + 16));
    use(stream_dev);
    CK(p2pt__cu.cuMemcpyDtoH(b, ref, bytes));
    for (size_t i = 0; i < off; i++)
        if (a[i] != 0xA5)
            die("CHECK FAILED: %s: byte before the copy written", what);
    if (memcmp(a + off, b, bytes) != 0)
        die("CHECK FAILED: %s: %zu-byte copy differs from the copy engine", what, bytes);
    for (size_t i = 0; i < 16; i++)
        if (a[off + bytes + i] != 0xA5)
            die("CHECK FAILED: %s: byte after the copy written", what);
    p2pt__cu.cuMemFree(ref);
    free(a);
    free(b);
}

/* Where the buffers and the stream of a path live. */
static void path_devices(int path, const struct opts *o, int *sdev, int *srcdev, int *dstdev)
{
    *sdev = o->device;
    *srcdev = (path == 2) ? o->peer : o->device; /* pull reads the peer */
    *dstdev = (path == 1) ? o->peer : o->device; /* push writes the peer */
}

/* ------------------------------------------------------------- table */

static double bidir_time(p2pt_handle *h, struct arena *a_src, struct arena *a_dst,
                         struct arena *b_src, struct arena *b_dst, size_t bytes, int n,
                         CUstream sa, CUstream sb, const struct opts *o)
{
    /* A's start event gates B's stream; A's stream waits for B's last copy
     * before its end event: A's two events span both directions. */
    CUevent start, end, b_end;
    use(o->device);
    CK(p2pt__cu.cuEventCreate(&start, 0));
    CK(p2pt__cu.cuEventCreate(&end, 0));
    use(o->peer);
    CK(p2pt__cu.cuEventCreate(&b_end, CU_EVENT_DISABLE_TIMING));
    double t[REPEATS];
    int slots = a_src->slots;
    int k = 0;
    for (int r = -1; r < REPEATS; r++) { /* r = -1: warm-up */
        use(o->device);
        CK(p2pt__cu.cuEventRecord(start, sa));
        use(o->peer);
        CK(p2pt__cu.cuStreamWaitEvent(sb, start, 0));
        for (int i = 0; i < n; i++, k++) {
            size_t off = (size_t)(k % slots) * a_src->stride;
            use(o->device);
            ok(p2pt_copy_async(h, (void *)(b_dst->base + off), (void *)(a_src->base + off),
                               bytes, sa),
               "bidir copy");
            use(o->peer);
            ok(p2pt_copy_async(h, (void *)(a_dst->base + off), (void *)(b_src->base + off),
                               bytes, sb),
               "bidir copy");
        }
        use(o->peer);
        CK(p2pt__cu.cuEventRecord(b_end, sb));
        use(o->device);
        CK(p2pt__cu.cuStreamWaitEvent(sa, b_end, 0));
        CK(p2pt__cu.cuEventRecord(end, sa));
        CK(p2pt__cu.cuEventSynchronize(end));
        float ms = 0;
        CK(p2pt__cu.cuEventElapsedTime(&ms, start, end));
        if (r >= 0)
            t[r] = (double)ms * 1e3 / n;
    }
    p2pt__cu.cuEventDestroy(start);
    p2pt__cu.cuEventDestroy(end);
    use(o->peer);
    p2pt__cu.cuEventDestroy(b_end);
    return median(t, REPEATS);
}

static void run_table(const struct opts *o, int ndev)
{
    p2pt_handle *h[2] = {handle_for("ce"), handle_for("tma")};
    for (int d = 0; d < ndev && d < 2; d++) {
        int dev = d == 0 ? o->device : o->peer;
        if (d == 1 && ndev < 2)
            break;
        for (int t = 0; t < 2; t++)
            if (o->transports[t])
                ok(p2pt_prepare(h[t], dev), "p2pt_prepare");
    }
    for (int path = 0; path < 4; path++) {
        if (!o->paths[path])
            continue;
        printf("\n# path %s: %s\n", path_names[path],
               path == 0   ? "src, dst and stream on the device"
               : path == 1 ? "stream and src on the device, dst on the peer"
               : path == 2 ? "stream and dst on the device, src on the peer"
                           : "both GPUs copy into each other at once; GB/s = both payloads / time");
        printf("%12s", "bytes");
        for (int t = 0; t < 2; t++)
            if (o->transports[t])
                printf("  %9s_us %9s_GB/s", tnames[t], tnames[t]);
        if (o->transports[0] && o->transports[1])
            printf("  %7s", "tma/ce");
        printf("\n");
        for (double bd = (double)o->min_bytes; bd <= (double)o->max_bytes * 1.0000001;
             bd *= o->factor) {
            size_t bytes = (size_t)bd;
            int n = iters_for(o, bytes);
            double bw[2] = {0, 0};
            printf("%12zu", bytes);
            if (path == 3) {
                struct arena as = arena_make(o->device, bytes + 64),
                             ad = arena_make(o->device, bytes + 64),
                             bs = arena_make(o->peer, bytes + 64),
                             bdst = arena_make(o->peer, bytes + 64);
                random_fill(&as, bytes + 64, 1);
                random_fill(&bs, bytes + 64, 2);
                CUstream sa, sb;
                use(o->device);
                CK(p2pt__cu.cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
                use(o->peer);
                CK(p2pt__cu.cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
                for (int t = 0; t < 2; t++) {
                    if (!o->transports[t])
                        continue;
                    double us = bidir_time(h[t], &as, &ad, &bs, &bdst, bytes, n, sa, sb, o);
                    bw[t] = 2.0 * (double)bytes / us / 1e3;
                    printf("  %12.2f %14.1f", us, bw[t]);
                    record("table", "bidir", tnames[t], "bandwidth", 2 * bytes, 0, 0, 0, us);
                }
                use(o->device);
                p2pt__cu.cuStreamDestroy(sa);
                use(o->peer);
                p2pt__cu.cuStreamDestroy(sb);
                arena_free(&as);
                arena_free(&ad);
                arena_free(&bs);
                arena_free(&bdst);
            } else {
                int sdev, srcdev, dstdev;
                path_devices(path, o, &sdev, &srcdev, &dstdev);
                struct arena src = arena_make(srcdev, bytes + 64);
                struct arena dst = arena_make(dstdev, bytes + 64);
                random_fill(&src, src.bytes < (512u << 20) ? src.bytes : bytes + 64, 3);
                CUstream s;
                use(sdev);
                CK(p2pt__cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
                for (int t = 0; t < 2; t++) {
                    if (!o->transports[t])
                        continue;
                    double us = time_batches(h[t], &src, &dst, bytes, n, o->warmup, sdev, s);
                    bw[t] = (double)bytes / us / 1e3;
                    printf("  %12.2f %14.1f", us, bw[t]);
                    record("table", path_names[path], tnames[t], "bandwidth", bytes, 0, 0, 0, us);
                    if (o->check)
                        check_copy(h[t], h[0], &src, &dst, bytes, sdev, s, tnames[t]);
                }
                use(sdev);
                p2pt__cu.cuStreamDestroy(s);
                arena_free(&src);
                arena_free(&dst);
            }
            if (o->transports[0] && o->transports[1])
                printf("  %7.3f", bw[1] / bw[0]);
            printf("\n");
            fflush(stdout);
            if (o->factor * bd > (double)o->max_bytes * 1.0000001 && bd < (double)o->max_bytes)
                bd = (double)o->max_bytes / o->factor; /* always end on -e */
        }
    }
    p2pt_finalize(h[0]);
    p2pt_finalize(h[1]);
}

/* ------------------------------------------------------------- sweep */

static void setenv_size(const char *var, long v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%ld", v);
    setenv(var, buf, 1);
}

static void run_sweep(const struct opts *o, int ndev)
{
    size_t bytes = o->sweep_bytes;
    for (int path = 0; path < 2; path++) {
        if (path == 1 && ndev < 2)
            break;
        int sdev, srcdev, dstdev;
        path_devices(path, o, &sdev, &srcdev, &dstdev);
        struct arena src = arena_make(srcdev, bytes + 64), dst = arena_make(dstdev, bytes + 64);
        random_fill(&src, bytes + 64, 4);
        CUstream s;
        use(sdev);
        CK(p2pt__cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        p2pt_handle *ce = handle_for("ce");
        int n = iters_for(o, bytes);
        double ce_us = time_batches(ce, &src, &dst, bytes, n, o->warmup, sdev, s);
        double ce_bw = (double)bytes / ce_us / 1e3;
        record("sweep", path_names[path], "ce", "bandwidth", bytes, 0, 0, 0, ce_us);
        printf("\n# sweep, path %s, %zu bytes: ce %.1f GB/s\n", path_names[path], bytes, ce_bw);
        printf("%8s %7s %9s %10s %8s\n", "chunk", "stages", "max_ctas", "tma_GB/s", "tma/ce");
        for (int c = 0; c < o->n_chunks; c++)
            for (int st = 0; st < o->n_stages; st++)
                for (int m = 0; m < o->n_ctas; m++) {
                    size_t chunk = o->chunks[c];
                    printf("%8zu %7ld %9ld ", chunk, o->stages[st], o->ctas[m]);
                    setenv_size("P2P_TRANSPORT_CHUNK_BYTES", (long)chunk);
                    setenv_size("P2P_TRANSPORT_STAGES", o->stages[st]);
                    setenv_size("P2P_TRANSPORT_MAX_CTAS", o->ctas[m]);
                    p2pt_init_args args = {sizeof(args), NULL, "tma"};
                    p2pt_handle *h = NULL;
                    p2pt_status stt = p2pt_init(&args, &h);
                    if (stt == P2PT_SUCCESS)
                        stt = p2pt_prepare(h, sdev);
                    if (stt != P2PT_SUCCESS) {
                        printf("skipped: %s\n", p2pt_last_error(NULL));
                        if (h)
                            p2pt_finalize(h);
                        continue;
                    }
                    double us = time_batches(h, &src, &dst, bytes, n, o->warmup, sdev, s);
                    double bw = (double)bytes / us / 1e3;
                    printf("%10.1f %8.3f\n", bw, bw / ce_bw);
                    fflush(stdout);
                    record("sweep", path_names[path], "tma", "bandwidth", bytes, chunk,
                           o->stages[st], o->ctas[m], us);
                    p2pt_finalize(h);
                }
        unsetenv("P2P_TRANSPORT_CHUNK_BYTES");
        unsetenv("P2P_TRANSPORT_STAGES");
        unsetenv("P2P_TRANSPORT_MAX_CTAS");
        p2pt_finalize(ce);
        use(sdev);
        p2pt__cu.cuStreamDestroy(s);
        arena_free(&src);
        arena_free(&dst);
    }
}

/* ----------------------------------------------------------- latency */

#define LAT_SAMPLES 200

static void run_latency(const struct opts *o, int ndev)
{
    p2pt_handle *h[2] = {handle_for("ce"), handle_for("tma")};
    ok(p2pt_prepare(h[1], o->device), "p2pt_prepare");
    for (int path = 0; path < 3; path++) {
        if (path > 0 && ndev < 2)
            break;
        int sdev, srcdev, dstdev;
        path_devices(path, o, &sdev, &srcdev, &dstdev);
        printf("\n# latency, path %s: per-copy time of back-to-back copies (b2b, events), "
               "one copy at a time seen by the host (enqueue to completion) and by events\n",
               path_names[path]);
        printf("%9s %9s %9s %9s %9s %9s %9s %8s %8s %8s\n", "bytes", "ce_b2b", "tma_b2b",
               "ce_host", "tma_host", "ce_dev", "tma_dev", "b2b", "host", "dev");
        size_t lo = o->min_bytes > 4096 ? o->min_bytes : 4096;
        size_t hi = o->max_bytes < (1u << 20) ? o->max_bytes : (1u << 20);
        for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
            struct arena src = arena_make(srcdev, bytes + 64), dst = arena_make(dstdev, bytes + 64);
            random_fill(&src, bytes + 64, 5);
            CUstream s;
            use(sdev);
            CK(p2pt__cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            CUevent e0, e1;
            CK(p2pt__cu.cuEventCreate(&e0, 0));
            CK(p2pt__cu.cuEventCreate(&e1, 0));
            double b2b[2], host[2], dev[2];
            for (int t = 0; t < 2; t++) {
                b2b[t] = time_batches(h[t], &src, &dst, bytes, 100, 20, sdev, s);
                double hs[LAT_SAMPLES], ds[LAT_SAMPLES];
                for (int i = 0; i < LAT_SAMPLES; i++) {
                    size_t off = (size_t)(i % src.slots) * src.stride;
                    double t0 = now_us();
                    ok(p2pt_copy_async(h[t], (void *)(dst.base + off), (void *)(src.base + off),
                                       bytes, s),
                       "copy");
                    CK(p2pt__cu.cuStreamSynchronize(s));
                    hs[i] = now_us() - t0;
                    CK(p2pt__cu.cuEventRecord(e0, s));
                    ok(p2pt_copy_async(h[t], (void *)(dst.base + off), (void *)(src.base + off),
                                       bytes, s),
                       "copy");
                    CK(p2pt__cu.cuEventRecord(e1, s));
                    CK(p2pt__cu.cuEventSynchronize(e1));
                    float ms;
                    CK(p2pt__cu.cuEventElapsedTime(&ms, e0, e1));
                    ds[i] = (double)ms * 1e3;
                }
                host[t] = median(hs, LAT_SAMPLES);
                dev[t] = median(ds, LAT_SAMPLES);
                record("latency", path_names[path], tnames[t], "b2b", bytes, 0, 0, 0, b2b[t]);
                record("latency", path_names[path], tnames[t], "host", bytes, 0, 0, 0, host[t]);
                record("latency", path_names[path], tnames[t], "device", bytes, 0, 0, 0, dev[t]);
            }
            printf("%9zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %8.3f %8.3f %8.3f\n", bytes, b2b[0],
                   b2b[1], host[0], host[1], dev[0], dev[1], b2b[1] / b2b[0], host[1] / host[0],
                   dev[1] / dev[0]);
            fflush(stdout);
            p2pt__cu.cuEventDestroy(e0);
            p2pt__cu.cuEventDestroy(e1);
            p2pt__cu.cuStreamDestroy(s);
            arena_free(&src);
            arena_free(&dst);
        }
    }
    p2pt_finalize(h[0]);
    p2pt_finalize(h[1]);
}

/* -------------------------------------------------------------- cold */

/* In a fresh process: the first TMA copy (NVRTC compile + module load +
 * launch + completion), then a second one for comparison. */
static int cold_child(int device)
{
    if (p2pt__cuda_load("libcuda.so.1") != P2PT_SUCCESS)
        die("no CUDA device: %s", p2pt__last_error_text());
    use(device);
    CUdeviceptr a, b;
    CK(p2pt__cu.cuMemAlloc(&a, 1 << 20));
    CK(p2pt__cu.cuMemAlloc(&b, 1 << 20));
    p2pt_handle *h = handle_for("tma");
    double t0 = now_us();
    ok(p2pt_copy_async(h, (void *)b, (void *)a, 1 << 20, NULL), "first copy");
    CK(p2pt__cu.cuCtxSynchronize());
    double t1 = now_us();
    ok(p2pt_copy_async(h, (void *)b, (void *)a, 1 << 20, NULL), "second copy");
    CK(p2pt__cu.cuCtxSynchronize());
    double t2 = now_us();
    printf("%.3f %.3f\n", (t1 - t0) / 1e3, (t2 - t1) / 1e3);
    return 0;
}

static void run_cold(const struct opts *o)
{
    printf("\n# cold first TMA copy (fresh process: NVRTC compile + module load + 1 MiB copy)\n");
    printf("%5s %12s %12s\n", "run", "first_ms", "second_ms");
    double firsts[3];
    for (int r = 0; r < 3; r++) {
        /* popen runs a shell, whose /proc/self/exe is the shell: resolve
         * our own path first. */
        char self[PATH_MAX] = "", cmd[PATH_MAX + 64];
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (len <= 0)
            die("cannot find this program's path: %s", strerror(errno));
        self[len] = '\0';
        snprintf(cmd, sizeof(cmd), "'%s' --cold-child %d", self, o->device);
        FILE *p = popen(cmd, "r");
        double first = -1, second = -1;
        if (p == NULL || fscanf(p, "%lf %lf", &first, &second) != 2)
            die("cold run %d failed", r);
        pclose(p);
        firsts[r] = first;
        printf("%5d %12.1f %12.3f\n", r, first, second);
        record("cold", "local", "tma", "first_copy_ms", 1 << 20, 0, 0, 0, first * 1e3);
    }
    printf("median first copy: %.1f ms\n", median(firsts, 3));
}

/* -------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--cold-child") == 0)
        return cold_child(atoi(argv[2]));
    struct opts o;
    parse(argc, argv, &o);

    const char *lib = getenv("P2P_CUDA_LIBRARY");
    if (p2pt__cuda_load(lib ? lib : "libcuda.so.1") != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-bench: no CUDA device: %s\n", p2pt__last_error_text());
        return 1;
    }
    int ndev = 0;
    CK(p2pt__cu.cuDeviceGetCount(&ndev));
    if (ndev == 0 || o.device >= ndev) {
        fprintf(stderr, "p2pt-bench: no CUDA device %d: the driver sees %d\n", o.device, ndev);
        return 1;
    }
    bool want_peer = o.paths[1] || o.paths[2] || o.paths[3];
    if (ndev < 2 || o.peer >= ndev || o.peer == o.device) {
        if (want_peer && o.paths_given)
            fprintf(stderr, "p2pt-bench: skipping push,pull,bidir: needs 2 GPUs, found %d\n",
                    ndev);
        o.paths[1] = o.paths[2] = o.paths[3] = false;
        ndev = 1;
    } else if (!o.paths_given) {
        o.paths[1] = o.paths[2] = o.paths[3] = true;
    }
    use(o.device);
    if (ndev > 1) {
        p2pt_handle *h = handle_for("ce");
        ok(p2pt_peer_enable(h, o.device, o.peer), "p2pt_peer_enable");
        p2pt_finalize(h);
    }

    char name[256] = "";
    CK(p2pt__cu.cuDeviceGetName(name, sizeof(name), o.device));
    l2_bytes = (size_t)dev_attr(o.device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    int drv = 0;
    CK(p2pt__cu.cuDriverGetVersion(&drv));
    p2pt_handle *probe = handle_for("tma");
    p2pt_properties pr = {sizeof(pr)};
    ok(p2pt_get_properties(probe, &pr), "p2pt_get_properties");
    p2pt_finalize(probe);
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# p2pt-bench %s, %s\n", P2PT_VERSION_STRING, date);
    printf("# device %d: %s, %d SMs, L2 %zu MiB, driver %d; GPUs used: %d\n", o.device, name,
           dev_attr(o.device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), l2_bytes >> 20, drv,
           ndev);
    printf("# tma: chunk %zu B, %d stages, max CTAs %d (0 = auto), validation %s\n",
           pr.chunk_bytes, pr.stages, pr.max_ctas, pr.validate ? "on" : "off");
    printf("# GB/s = payload bytes / s (1e9); time = median per-copy device time (events), "
           "%d repeats after warm-up; buffers rotate over >= 4x L2\n",
           REPEATS);

    if (o.modes[3])
        run_cold(&o); /* first: nothing compiled in this process matters, but keep it early */
    if (o.modes[0])
        run_table(&o, ndev);
    if (o.modes[1])
        run_sweep(&o, ndev);
    if (o.modes[2])
        run_latency(&o, ndev);
    write_outputs(&o);
    return 0;
}
