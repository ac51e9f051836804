/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --mode overlap: KV-cache offload beside compute. A transfer of 128 MiB in
 * pieces of --pieces bytes over 32 layers moves between one GPU allocation
 * (the layers share it, each block a slot in every layer) and one pinned
 * host allocation, in both directions, while a bf16 cuBLAS GEMM loop runs
 * on another stream. Per piece size, layout, direction, engine and SM
 * budget it measures:
 *   - host enqueue: the p2pt_copy_batch_async call, ns per piece (median);
 *   - alone: the batch's GB/s (CUDA events around back-to-back batches,
 *     median), and its ratio to one contiguous copy-engine copy of the same
 *     bytes between the same pools, timed the same way;
 *   - gemm_x: the GEMM loop's time beside back-to-back batches over its
 *     time alone, measured just before the case; ce_gemm_x, the same beside
 *     the contiguous copy, is the noise floor of that ratio in the same run;
 *   - overlap: GB/s of the batches that completed while the GEMM ran.
 * Layouts: block (a block's layers at a constant stride on the GPU, side by
 * side on the host: what the copy engine can group) and layer (layer by
 * layer, random host slots: nothing to group). No windows are registered.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemm.h"

#define TRANSFER ((size_t)128 << 20)
#define LAYERS 32
#define REPEATS 7
#define GEMM_LOOP_US 30000.0 /* a GEMM loop long enough to hold many batches */

static const char *const layout_names[2] = {"block", "layer"};

struct pools {
    CUdeviceptr gpu;  /* LAYERS layers of 2 x blocks slots */
    void *host;       /* 2 x TRANSFER: room for random slots */
    CUstream s;
    CUevent ev[2];
};

/* A random permutation of [0, n) (xorshift, fixed seed: the same layout in
 * every run). */
static size_t *permutation(size_t n, uint64_t seed)
{
    size_t *p = malloc(n * sizeof(*p));
    if (p == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        p[i] = i;
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = (size_t)(x % (i + 1)), t = p[i];
        p[i] = p[j], p[j] = t;
    }
    return p;
}

/* The transfer's descriptors for `piece`-byte pieces. */
static bool build(const struct pools *pl, int layout, bool d2h, size_t piece,
                  p2pt_copy_desc *d, size_t *count)
{
    const size_t pieces = TRANSFER / piece, blocks = pieces / LAYERS;
    const size_t layer_stride = 2 * blocks * piece;
    size_t *slot = permutation(2 * blocks, 11), *hslot = permutation(2 * pieces, 13);
    if (slot == NULL || hslot == NULL) {
        free(slot), free(hslot);
        bench_set_err("out of host memory");
        return false;
    }
    size_t k = 0;
    for (size_t outer = 0; outer < (layout == 0 ? blocks : LAYERS); outer++)
        for (size_t inner = 0; inner < (layout == 0 ? LAYERS : blocks); inner++) {
            size_t b = layout == 0 ? outer : inner, l = layout == 0 ? inner : outer;
            uint64_t g = pl->gpu + l * layer_stride + slot[b] * piece;
            uint64_t h = (uint64_t)(uintptr_t)pl->host +
                         (layout == 0 ? (b * LAYERS + l) : hslot[l * blocks + b]) * piece;
            d[k].dst = (void *)(uintptr_t)(d2h ? h : g);
            d[k].src = (const void *)(uintptr_t)(d2h ? g : h);
            d[k].bytes = piece;
            k++;
        }
    free(slot), free(hslot);
    *count = k;
    return true;
}

/* One operation of a case: a p2pt batch, the contiguous copy, or the
 * pieces as one cuMemcpyBatchAsync (the raw yardstick). */
struct op {
    p2pt_handle *h; /* NULL: the contiguous copy, or raw[] */
    const p2pt_copy_desc *d;
    size_t n;
    CUdeviceptr dst, src;
    CUdeviceptr *raw_dst, *raw_src; /* raw: the pieces' arrays */
    size_t *raw_size;
    const struct bench_ref *ref; /* the plain kernel over descriptors in GPU memory */
    CUdeviceptr ref_descs, ref_count;
};

static bool enqueue(const struct op *o, CUstream s, double *enq_us)
{
    double t0 = bench_now_us();
    if (o->h != NULL) {
        P2(p2pt_copy_batch_async(o->h, o->d, o->n, s));
    } else if (o->ref != NULL) {
        if (!bench_ref_launch(o->ref, o->ref_descs, o->ref_count, (uint32_t)o->n,
                              (unsigned)bench_opt.ref_ctas, s))
            goto fail;
    } else if (o->raw_dst != NULL) {
        CUmemcpyAttributes attr;
        memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        size_t at = 0;
        CU(tcu.cuMemcpyBatchAsync(o->raw_dst, o->raw_src, o->raw_size, o->n, &attr, &at, 1, s));
    } else {
        CU(tcu.cuMemcpyAsync(o->dst, o->src, TRANSFER, s));
    }
    if (enq_us)
        *enq_us = bench_now_us() - t0;
    return true;
fail:
    return false;
}

/* Median GPU time (us) per operation alone, and its median host enqueue
 * time: BACK_TO_BACK operations between two events, so that the host's
 * enqueue of one overlaps the GPU's run of the one before, as in a stream
 * the host keeps ahead of the GPU (the enqueue is reported on its own). */
#define BACK_TO_BACK 4
static bool time_alone(const struct pools *pl, const struct op *o, double *us, double *enq)
{
    double t[REPEATS], e[REPEATS * BACK_TO_BACK];
    float ms = 0;
    if (!enqueue(o, pl->s, NULL))
        return false;
    CU(tcu.cuStreamSynchronize(pl->s));
    for (int r = 0; r < REPEATS; r++) {
        CU(tcu.cuEventRecord(pl->ev[0], pl->s));
        for (int k = 0; k < BACK_TO_BACK; k++)
            if (!enqueue(o, pl->s, &e[r * BACK_TO_BACK + k]))
                return false;
        CU(tcu.cuEventRecord(pl->ev[1], pl->s));
        CU(tcu.cuEventSynchronize(pl->ev[1]));
        CU(tcu.cuEventElapsedTime(&ms, pl->ev[0], pl->ev[1]));
        t[r] = ms * 1e3 / BACK_TO_BACK;
    }
    *us = bench_median(t, REPEATS);
    if (enq)
        *enq = bench_median(e, REPEATS * BACK_TO_BACK);
    return true;
fail:
    return false;
}

/* Per-GEMM time of a loop of `count` GEMMs alone (median of 3 loops). */
static bool gemm_alone(struct bench_gemm *g, CUevent ev[2], int count, double *us)
{
    double t[3];
    float ms = 0;
    for (int r = 0; r < 3; r++) {
        CU(tcu.cuEventRecord(ev[0], g->s));
        if (!bench_gemm_run(g, count))
            return false;
        CU(tcu.cuEventRecord(ev[1], g->s));
        CU(tcu.cuEventSynchronize(ev[1]));
        CU(tcu.cuEventElapsedTime(&ms, ev[0], ev[1]));
        t[r] = ms * 1e3 / count;
    }
    *us = bench_median(t, 3);
    return true;
fail:
    return false;
}

#define MAX_OPS 256

/*
 * The GEMM loop beside back-to-back operations on the copy stream: *gemm_us
 * per GEMM, and *gbps the operations that completed while the loop ran. The
 * operations must outlast the loop, or the GEMM's tail would run alone: the
 * run is repeated with more of them until they do (at most 3 times).
 */
static bool beside(const struct pools *pl, struct bench_gemm *g, CUevent gev[2],
                   CUevent *done, int gemms, const struct op *o, double op_us,
                   double gemm_us_alone, double *gemm_us, double *gbps)
{
    int k = (int)(1.5 * gemms * gemm_us_alone / (op_us > 1 ? op_us : 1)) + 2;
    float ms = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        if (k > MAX_OPS)
            k = MAX_OPS;
        CU(tcu.cuEventRecord(gev[0], g->s));
        if (!bench_gemm_run(g, gemms))
            return false;
        CU(tcu.cuEventRecord(gev[1], g->s));
        CU(tcu.cuEventRecord(done[0], pl->s));
        for (int i = 0; i < k; i++) {
            if (!enqueue(o, pl->s, NULL))
                return false;
            CU(tcu.cuEventRecord(done[i + 1], pl->s));
        }
        CU(tcu.cuStreamSynchronize(g->s));
        CU(tcu.cuStreamSynchronize(pl->s));
        float loop = 0, last = 0;
        CU(tcu.cuEventElapsedTime(&loop, gev[0], gev[1]));
        CU(tcu.cuEventElapsedTime(&last, gev[0], done[k]));
        *gemm_us = loop * 1e3 / gemms;
        /* The operations that completed while the GEMM loop ran. */
        int in = 0;
        for (int i = 1; i <= k; i++) {
            CU(tcu.cuEventElapsedTime(&ms, gev[0], done[i]));
            if (ms <= loop)
                in = i;
        }
        *gbps = 0;
        if (in > 0) {
            CU(tcu.cuEventElapsedTime(&ms, done[0], done[in]));
            *gbps = bench_gbps((double)TRANSFER * in, ms * 1e3);
        }
        if (last >= loop || k == MAX_OPS)
            return true;
        k = (int)(k * (loop / (last > 0 ? last : 1)) * 1.3) + 2;
    }
    return true;
fail:
    return false;
}

static FILE *open_csv(const struct bench_gpu *gpu, char *path, size_t len)
{
    if (bench_opt.overlap_csv != NULL) {
        snprintf(path, len, "%s", bench_opt.overlap_csv);
    } else {
        char date[16] = "date", name[128];
        time_t now = time(NULL);
        struct tm tmv;
        if (gmtime_r(&now, &tmv))
            strftime(date, sizeof(date), "%Y-%m-%d", &tmv);
        /* "NVIDIA H100 80GB HBM3" -> "h100": the word after the vendor. */
        const char *w = strchr(gpu->name, ' ');
        snprintf(name, sizeof(name), "%s", w ? w + 1 : gpu->name);
        name[strcspn(name, " ")] = '\0';
        for (char *c = name; *c; c++)
            *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        snprintf(path, len, "%s%s-%s-overlap.csv",
                 access("bench/results", W_OK) == 0 ? "bench/results/" : "", date, name);
    }
    FILE *f = fopen(path, "w");
    if (f != NULL)
        fprintf(f, "shape,layout,dir,engine,sm_budget,pieces,piece_bytes,enqueue_ns_per_piece,"
                   "alone_gbps,contig_gbps,gemm_x,ce_gemm_x,overlap_gbps\n");
    return f;
}

void bench_run_overlap(void)
{
    const struct bench_gpu *gpu = &bench_gpus[0];
    struct bench_gemm g;
    struct pools pl;
    memset(&pl, 0, sizeof(pl));
    CUevent gev[2] = {NULL, NULL}, done[MAX_OPS + 1];
    memset(done, 0, sizeof(done));
    char path[512], sz[16];
    p2pt_copy_desc *d = NULL;
    CUdeviceptr *raw_dst = NULL, *raw_src = NULL;
    size_t *raw_size = NULL;
    FILE *csv = NULL;
    struct bench_ref ref;
    bool ref_ok = false;
    CUdeviceptr ref_descs = 0, ref_count = 0;

    if (!bench_gemm_load(&g, bench_opt.cublas))
        bench_fatal("overlap");
    if (!bench_use(gpu) || !bench_gemm_open(&g, bench_opt.gemm))
        bench_fatal("overlap: the %dx%dx%d GEMM (%s)", bench_opt.gemm, bench_opt.gemm,
                    bench_opt.gemm, g.path);
    size_t smallest = TRANSFER;
    for (int i = 0; i < bench_opt.n_pieces; i++)
        smallest = bench_opt.pieces[i] < smallest ? bench_opt.pieces[i] : smallest;
    const size_t most = TRANSFER / smallest;
    d = malloc(most * sizeof(*d));
    raw_dst = malloc(most * sizeof(*raw_dst));
    raw_src = malloc(most * sizeof(*raw_src));
    raw_size = malloc(most * sizeof(*raw_size));
    if (d == NULL || raw_dst == NULL || raw_src == NULL || raw_size == NULL)
        bench_fatal("overlap: descriptors");
    CU(tcu.cuMemAlloc(&pl.gpu, 2 * TRANSFER + SLACK));
    CU(tcu.cuMemHostAlloc(&pl.host, 2 * TRANSFER + SLACK, 0));
    CU(tcu.cuMemsetD8(pl.gpu, 0x5a, 2 * TRANSFER));
    for (size_t i = 0; i < 2 * TRANSFER; i += 4096)
        ((unsigned char *)pl.host)[i] = (unsigned char)(i >> 12);
    CU(tcu.cuStreamCreate(&pl.s, CU_STREAM_NON_BLOCKING));
    CU(tcu.cuMemAlloc(&ref_descs, most * sizeof(*d)));
    CU(tcu.cuMemAlloc(&ref_count, sizeof(uint32_t)));
    ref_ok = bench_opt.ref_ctas > 0 && bench_ref_load(&ref, gpu, NULL);
    if (bench_opt.ref_ctas > 0 && !ref_ok)
        fprintf(stderr, "p2pt-bench: overlap: no plain-kernel rows: %s\n", bench_err);
    for (int i = 0; i < 2; i++) {
        CU(tcu.cuEventCreate(&pl.ev[i], 0));
        CU(tcu.cuEventCreate(&gev[i], 0));
    }
    for (int i = 0; i <= MAX_OPS; i++)
        CU(tcu.cuEventCreate(&done[i], 0));
    CU(tcu.cuCtxSynchronize());
    if ((csv = open_csv(gpu, path, sizeof(path))) == NULL) {
        bench_set_err("cannot write %s", path);
        bench_fatal("overlap");
    }

    double one_gemm = 0;
    if (!gemm_alone(&g, gev, 2, &one_gemm))
        goto fail;
    int gemms = (int)(GEMM_LOOP_US / (one_gemm > 1 ? one_gemm : 1));
    gemms = gemms < 4 ? 4 : gemms > 400 ? 400 : gemms;
    printf("\n# overlap: %zu MiB per transfer, %d layers, GPU pool and one pinned host pool "
           "(cuMemHostAlloc), no windows; beside %d bf16 %dx%dx%d GEMMs (%s, %.0f us each "
           "alone, %.0f TFLOP/s)\n",
           TRANSFER >> 20, LAYERS, gemms, g.n, g.n, g.n, g.path, one_gemm,
           2.0 * g.n * g.n * (double)g.n / one_gemm / 1e6);
    printf("# enq = host enqueue per piece; alone and contig GB/s with copy/contig; gemm_x = "
           "GEMM time beside / alone just before; ce_x = the same beside the contiguous "
           "copy-engine copy (noise floor); during = GB/s while the GEMM ran\n");
    printf("%-10s %-6s %-4s %-5s %-7s %9s %8s %8s %6s %7s %6s %8s %6s %6s %5s\n", "shape",
           "layout", "dir", "eng", "budget", "enq_ns/pc", "alone", "contig", "ratio",
           "gemm_x", "ce_x", "during", "ratio", "launch", "grid");

    for (int pi = 0; pi < bench_opt.n_pieces; pi++) {
        const size_t piece = bench_opt.pieces[pi];
        char shape[32];
        snprintf(shape, sizeof(shape), "%zux%s", TRANSFER / piece,
                 bench_fmt_size(piece, sz, sizeof(sz)));
        for (int layout = 0; layout < 2; layout++) {
            if (!bench_opt.layouts[layout])
                continue;
            for (int dir = 0; dir < 2; dir++) {
                const bool d2h = dir == 0;
                size_t n = 0;
                if (!build(&pl, layout, d2h, piece, d, &n))
                    goto fail;
                struct op contig = {NULL, NULL, 0, d2h ? (CUdeviceptr)(uintptr_t)pl.host : pl.gpu,
                                    d2h ? pl.gpu : (CUdeviceptr)(uintptr_t)pl.host,
                                    NULL, NULL, NULL, NULL, 0, 0};
                double contig_us = 0;
                if (!time_alone(&pl, &contig, &contig_us, NULL))
                    goto fail;
                const double contig_gbps = bench_gbps((double)TRANSFER, contig_us);
                /* The yardstick of the copy engine without grouping: the
                 * pieces as they are, in one cuMemcpyBatchAsync (stdout
                 * only: the CSV's engines are p2pt's). */
                if (tcu.cuMemcpyBatchAsync != NULL) {
                    struct op raw = {NULL, NULL, n, 0, 0, raw_dst, raw_src, raw_size,
                                     NULL, 0, 0};
                    for (size_t i = 0; i < n; i++) {
                        raw_dst[i] = (CUdeviceptr)(uintptr_t)d[i].dst;
                        raw_src[i] = (CUdeviceptr)(uintptr_t)d[i].src;
                        raw_size[i] = (size_t)d[i].bytes;
                    }
                    double us = 0, enq = 0;
                    if (!time_alone(&pl, &raw, &us, &enq))
                        goto fail;
                    const double alone = bench_gbps((double)TRANSFER, us);
                    printf("%-10s %-6s %-4s %-5s %-7s %9.1f %8.1f %8.1f %6.3f   (one "
                           "cuMemcpyBatchAsync of the pieces, alone)\n",
                           shape, layout_names[layout], d2h ? "d2h" : "h2d", "raw", "-",
                           enq * 1e3 / (double)n, alone, contig_gbps,
                           bench_ratio(alone, contig_gbps));
                }
                /* The plain kernel a user writes (a warp per piece, 16-byte
                 * vectors, no shared memory) on --ref-ctas CTAs: alone and
                 * beside the GEMM (stdout only). */
                if (ref_ok && bench_opt.ref_ctas > 0) {
                    uint32_t cnt = (uint32_t)n;
                    CU(tcu.cuMemcpyHtoD(ref_descs, d, n * sizeof(*d)));
                    CU(tcu.cuMemcpyHtoD(ref_count, &cnt, sizeof(cnt)));
                    struct op r = {NULL, NULL, n, 0, 0, NULL, NULL, NULL, &ref, ref_descs,
                                   ref_count};
                    double us = 0, ga = 0, gb = 0, during = 0;
                    if (!time_alone(&pl, &r, &us, NULL) || !gemm_alone(&g, gev, gemms, &ga) ||
                        !beside(&pl, &g, gev, done, gemms, &r, us, ga, &gb, &during))
                        goto fail;
                    const double alone = bench_gbps((double)TRANSFER, us);
                    printf("%-10s %-6s %-4s %-5s %-7d %9s %8.1f %8.1f %6.3f %7.3f %6s %8.1f "
                           "%6.3f   (plain warp-per-piece kernel)\n",
                           shape, layout_names[layout], d2h ? "d2h" : "h2d", "ref",
                           bench_opt.ref_ctas, "-", alone, contig_gbps,
                           bench_ratio(alone, contig_gbps), bench_ratio(gb, ga), "-", during,
                           bench_ratio(during, contig_gbps));
                }
                for (int t = 0; t < N_TRANSPORTS; t++) {
                    if (!bench_opt.transport[t])
                        continue;
                    for (int bi = 0; bi < bench_opt.n_budgets; bi++) {
                        const int budget = bench_opt.budgets[bi];
                        /* ce holds no SM: a budget changes nothing there. */
                        if (t == T_CE && budget >= 0)
                            continue;
                        char opts[64] = "", budget_text[16] = "default";
                        if (budget >= 0) {
                            snprintf(opts, sizeof(opts), "P2P_TRANSPORT_SM_BUDGET=%d", budget);
                            snprintf(budget_text, sizeof(budget_text), "%d", budget);
                        }
                        p2pt_handle *h = NULL;
                        if (!bench_handle_open(bench_transport_names[t], opts[0] ? opts : NULL,
                                               &h, NULL))
                            goto fail;
                        p2pt_status pst;
                        if (!bench_prepare_on(h, false, &pst)) {
                            p2pt_finalize(h);
                            goto fail;
                        }
                        struct op batch = {h, d, n, 0, 0, NULL, NULL, NULL, NULL, 0, 0};
                        double us = 0, enq = 0, ga = 0, gb = 0, gc = 0, during = 0, unused;
                        bool ok = time_alone(&pl, &batch, &us, &enq) &&
                                  gemm_alone(&g, gev, gemms, &ga) &&
                                  beside(&pl, &g, gev, done, gemms, &contig, contig_us, ga, &gc,
                                         &unused) &&
                                  beside(&pl, &g, gev, done, gemms, &batch, us, ga, &gb,
                                         &during);
                        p2pt_properties pr;
                        memset(&pr, 0, sizeof(pr));
                        pr.size = sizeof(pr);
                        p2pt_get_properties(h, &pr);
                        p2pt_finalize(h);
                        if (!ok)
                            goto fail;
                        const double alone = bench_gbps((double)TRANSFER, us);
                        const double gx = bench_ratio(gb, ga), cx = bench_ratio(gc, ga);
                        const double enq_ns = enq * 1e3 / (double)n;
                        printf("%-10s %-6s %-4s %-5s %-7s %9.1f %8.1f %8.1f %6.3f %7.3f %6.3f "
                               "%8.1f %6.3f %6llu %5u\n",
                               shape, layout_names[layout], d2h ? "d2h" : "h2d",
                               bench_transport_names[t], budget_text, enq_ns, alone,
                               contig_gbps, bench_ratio(alone, contig_gbps), gx, cx, during,
                               bench_ratio(during, contig_gbps),
                               (unsigned long long)pr.kernel_launches, pr.max_grid);
                        fflush(stdout);
                        fprintf(csv, "%s,%s,%s,%s,%s,%zu,%zu,%.1f,%.2f,%.2f,%.4f,%.4f,%.2f\n",
                                shape, layout_names[layout], d2h ? "d2h" : "h2d",
                                bench_transport_names[t], budget_text, n, piece, enq_ns, alone,
                                contig_gbps, gx, cx, during);
                        fflush(csv);
                    }
                }
            }
        }
    }
    printf("# overlap rows written to %s\n", path);
    goto out;
fail:
    bench_fatal("overlap");
out:
    if (csv)
        fclose(csv);
    for (int i = 0; i <= MAX_OPS; i++)
        if (done[i])
            CU_RELEASE(tcu.cuEventDestroy(done[i]));
    for (int i = 0; i < 2; i++) {
        if (pl.ev[i])
            CU_RELEASE(tcu.cuEventDestroy(pl.ev[i]));
        if (gev[i])
            CU_RELEASE(tcu.cuEventDestroy(gev[i]));
    }
    if (pl.s)
        CU_RELEASE(tcu.cuStreamDestroy(pl.s));
    if (pl.gpu)
        CU_RELEASE(tcu.cuMemFree(pl.gpu));
    if (pl.host)
        CU_RELEASE(tcu.cuMemFreeHost(pl.host));
    if (ref_ok)
        bench_ref_unload(&ref);
    if (ref_descs)
        CU_RELEASE(tcu.cuMemFree(ref_descs));
    if (ref_count)
        CU_RELEASE(tcu.cuMemFree(ref_count));
    bench_gemm_close(&g);
    free(d);
    free(raw_dst);
    free(raw_src);
    free(raw_size);
}
