/*
 * The batch mode: many pieces per operation, the shapes MoE dispatch and
 * KV-cache transfers post (count x size, and a mixed batch), local path.
 * Sources are consecutive rows of the source pool (tokens in order);
 * destinations are scattered over the destination pool in shuffled order
 * with random gaps. Pools hold at least 4 x L2 and successive operations
 * rotate over several such layouts, so no operation finds its bytes in L2.
 *
 * Rows (contiguous first: the others are compared with contig_ce), each
 * timed the same way: gpu = CUDA events around `n` back-to-back
 * operations, / n, median of the repeats; enq = host time of one enqueue
 * onto an idle stream, median (timed apart: back to back, a full launch
 * queue would make the host wait for the GPU and enq read as gpu):
 *   tma_host      p2pt_copy_batch_async, tma (descriptors in the launch)
 *   tma_device    p2pt_copy_batch_device_async, tma (descriptors and count
 *                 in GPU memory, checked against registered windows)
 *   ce_batch      p2pt_copy_batch_async, ce (cuMemcpyBatchAsync)
 *   raw_batch     cuMemcpyBatchAsync called directly
 *   tma_loop      one p2pt_copy_async per piece, tma
 *   ce_loop       one p2pt_copy_async per piece, ce
 *   contig_ce     one copy of the same total bytes, ce: the ceiling
 *   contig_tma    the same through tma
 *   auto_host     p2pt_copy_batch_async, auto (the engine its table picks)
 *   auto_device   p2pt_copy_batch_device_async, auto (always the kernel)
 * and auto/best: auto_host's GPU time over the better of tma_host and
 * ce_batch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

struct shape {
    const char *name;
    size_t count, size; /* size 0: mixed */
};

static const struct shape shapes[] = {
    {"1024x14K", 1024, 14 * KiB}, {"4096x7K", 4096, 7 * KiB}, {"256x4K", 256, 4 * KiB},
    {"64x1M", 64, 1 * MiB},       {"mixed", 1024, 0},
};

/* Mixed: one piece in 32 is 1 MiB, the rest 64 B to 14 KiB. */
static size_t piece_size(const struct shape *sh, size_t i)
{
    static const size_t small[] = {64, 1 * KiB, 7 * KiB, 14 * KiB};
    if (sh->size != 0)
        return sh->size;
    return i % 32 == 0 ? 1 * MiB : small[i % 4];
}

/* Descriptors for `sets` layouts, rotated over by successive operations. */
struct layout {
    int sets;
    size_t count, total;
    p2pt_copy_desc *descs;  /* sets x count, host */
    CUdeviceptr dev_descs;  /* the same in GPU memory */
    CUdeviceptr dev_count;  /* count, in GPU memory */
    CUdeviceptr workspace;
};

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static bool layout_make(struct layout *L, const struct shape *sh, const struct bench_dir *d,
                        size_t pool)
{
    memset(L, 0, sizeof(*L));
    L->count = sh->count;
    for (size_t i = 0; i < sh->count; i++)
        L->total += piece_size(sh, i);
    size_t span = 2 * L->total; /* pieces plus gaps of one layout */
    if (span > pool) {
        bench_set_err("a %s batch needs %zu bytes of pool, %zu are there", sh->name, span, pool);
        return false;
    }
    L->sets = (int)(pool / span);
    if (L->sets > 16)
        L->sets = 16;
    L->descs = calloc((size_t)L->sets * L->count, sizeof(*L->descs));
    size_t *order = malloc(L->count * sizeof(*order));
    if (L->descs == NULL || order == NULL) {
        free(order);
        bench_set_err("out of host memory");
        return false;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull ^ sh->count;
    for (int s = 0; s < L->sets; s++) {
        p2pt_copy_desc *D = L->descs + (size_t)s * L->count;
        size_t base = (size_t)s * span, src_at = base, gap = (span - L->total) / L->count;
        for (size_t i = 0; i < L->count; i++)
            order[i] = i;
        for (size_t i = L->count - 1; i > 0; i--) {
            size_t j = (size_t)(rng_next(&x) % (i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (size_t i = 0; i < L->count; i++) {
            D[i].src = bench_dptr(d->src.base + src_at);
            D[i].bytes = piece_size(sh, i);
            src_at += D[i].bytes;
        }
        /* Destinations in shuffled order, 16-byte aligned, random gaps
         * that never use up the room the remaining pieces need. */
        size_t at = base, left = L->total;
        for (size_t k = 0; k < L->count; k++) {
            size_t i = order[k];
            size_t slack = base + span - at - left;
            size_t g = (size_t)(rng_next(&x) % (2 * gap + 1)) / 16 * 16;
            at += g < slack ? g : slack / 16 * 16;
            D[i].dst = bench_dptr(d->dst.base + at);
            at += D[i].bytes;
            left -= D[i].bytes;
        }
    }
    free(order);
    size_t bytes = (size_t)L->sets * L->count * sizeof(*L->descs);
    uint32_t c = (uint32_t)L->count;
    CU(tcu.cuMemAlloc(&L->dev_descs, bytes));
    CU(tcu.cuMemAlloc(&L->dev_count, sizeof(c)));
    CU(tcu.cuMemAlloc(&L->workspace, p2pt_batch_workspace_bytes(c)));
    CU(tcu.cuMemcpyHtoD(L->dev_descs, L->descs, bytes));
    CU(tcu.cuMemcpyHtoD(L->dev_count, &c, sizeof(c)));
    return true;
fail:
    return false;
}

static void layout_free(struct layout *L)
{
    free(L->descs);
    if (L->dev_descs)
        CU_RELEASE(tcu.cuMemFree(L->dev_descs));
    if (L->dev_count)
        CU_RELEASE(tcu.cuMemFree(L->dev_count));
    if (L->workspace)
        CU_RELEASE(tcu.cuMemFree(L->workspace));
}

/* The contiguous copies first: every later row's /contig column divides by
 * contig_ce. */
enum row {
    R_CONTIG_CE, R_CONTIG_TMA, R_TMA_HOST, R_TMA_DEVICE, R_CE_BATCH, R_RAW_BATCH, R_TMA_LOOP,
    R_CE_LOOP, R_AUTO_HOST, R_AUTO_DEVICE, N_ROWS
};
static const char *const row_names[N_ROWS] = {
    "contig_ce", "contig_tma", "tma_host", "tma_device", "ce_batch",
    "raw_batch", "tma_loop",   "ce_loop",  "auto_host",  "auto_device"};

/* Which handle a row measures. */
static int row_transport(int row)
{
    switch (row) {
    case R_TMA_HOST: case R_TMA_DEVICE: case R_TMA_LOOP: case R_CONTIG_TMA: return T_TMA;
    case R_AUTO_HOST: case R_AUTO_DEVICE: return T_AUTO;
    default: return T_CE;
    }
}

/* Enqueue operation `row` on layout set `set`. */
static bool enqueue(int row, const struct layout *L, int set, const struct bench_dir *d)
{
    const p2pt_copy_desc *D = L->descs + (size_t)set * L->count;
    p2pt_handle *ce = bench_handles[T_CE], *tma = bench_handles[row_transport(row)];
    switch (row) {
    case R_TMA_HOST:
    case R_AUTO_HOST:
        P2(p2pt_copy_batch_async(tma, D, L->count, d->s));
        break;
    case R_TMA_DEVICE:
    case R_AUTO_DEVICE:
        P2(p2pt_copy_batch_device_async(
            tma, bench_dptr(L->dev_descs + (size_t)set * L->count * sizeof(*D)),
            bench_dptr(L->dev_count), (uint32_t)L->count, bench_dptr(L->workspace), d->s));
        break;
    case R_CE_BATCH:
        P2(p2pt_copy_batch_async(ce, D, L->count, d->s));
        break;
    case R_RAW_BATCH: {
        static CUdeviceptr dsts[8192], srcs[8192];
        static size_t sizes[8192];
        for (size_t i = 0; i < L->count; i++) {
            dsts[i] = (CUdeviceptr)(uintptr_t)D[i].dst;
            srcs[i] = (CUdeviceptr)(uintptr_t)D[i].src;
            sizes[i] = (size_t)D[i].bytes;
        }
        CUmemcpyAttributes attr;
        memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        size_t at = 0;
        CU(tcu.cuMemcpyBatchAsync(dsts, srcs, sizes, L->count, &attr, &at, 1, d->s));
        break;
    }
    case R_TMA_LOOP:
    case R_CE_LOOP:
        for (size_t i = 0; i < L->count; i++)
            P2(p2pt_copy_async(row == R_TMA_LOOP ? tma : ce, D[i].dst, D[i].src, (size_t)D[i].bytes,
                               d->s));
        break;
    default:
        P2(p2pt_copy_async(row == R_CONTIG_CE ? ce : tma, bench_dptr(d->dst.base),
                           bench_dptr(d->src.base + (size_t)set * 2 * L->total), L->total, d->s));
        break;
    }
    return true;
fail:
    return false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median GPU time and host enqueue time of one operation, microseconds. */
static bool time_row(int row, const struct layout *L, const struct bench_dir *d, double *gpu_us,
                     double *enq_us)
{
    bool loop = row == R_TMA_LOOP || row == R_CE_LOOP;
    int n = loop ? 2 : 20, repeats = loop ? 3 : 9, op = 0;
    double g[16], e[16];
    CUevent a = NULL, b = NULL;
    CU(tcu.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&b, CU_EVENT_DEFAULT));
    for (int w = 0; w < n; w++)
        if (!enqueue(row, L, op++ % L->sets, d))
            goto fail;
    CU(tcu.cuStreamSynchronize(d->s));
    for (int r = 0; r < repeats; r++) {
        CU(tcu.cuStreamSynchronize(d->s));
        double t0 = bench_now_us();
        if (!enqueue(row, L, op++ % L->sets, d))
            goto fail;
        e[r] = bench_now_us() - t0;
        CU(tcu.cuStreamSynchronize(d->s));
        CU(tcu.cuEventRecord(a, d->s));
        for (int k = 0; k < n; k++)
            if (!enqueue(row, L, op++ % L->sets, d))
                goto fail;
        CU(tcu.cuEventRecord(b, d->s));
        CU(tcu.cuEventSynchronize(b));
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, a, b));
        g[r] = ms * 1000.0 / n;
    }
    qsort(g, (size_t)repeats, sizeof(double), cmp_double);
    qsort(e, (size_t)repeats, sizeof(double), cmp_double);
    *gpu_us = g[repeats / 2];
    *enq_us = e[repeats / 2];
    CU_RELEASE(tcu.cuEventDestroy(a));
    CU_RELEASE(tcu.cuEventDestroy(b));
    return true;
fail:
    if (a)
        CU_RELEASE(tcu.cuEventDestroy(a));
    if (b)
        CU_RELEASE(tcu.cuEventDestroy(b));
    return false;
}

/* One operation of `row` into a poisoned destination pool: every piece of
 * set 0 equals its source, every other byte is still poison. */
static const char *check_row(int row, const struct layout *L, const struct bench_dir *d,
                             size_t pool)
{
    if (!bench_opt.check)
        return "-";
    unsigned char *dst = malloc(pool), *src = malloc(pool);
    const char *res = "FAIL";
    if (dst == NULL || src == NULL)
        goto out;
    CU(tcu.cuMemsetD8(d->dst.base, 0xA5, pool));
    CU(tcu.cuCtxSynchronize());
    if (!enqueue(row, L, 0, d))
        goto fail;
    CU(tcu.cuStreamSynchronize(d->s));
    CU(tcu.cuMemcpyDtoH(dst, d->dst.base, pool));
    CU(tcu.cuMemcpyDtoH(src, d->src.base, pool));
    size_t covered = 0;
    for (size_t i = 0; i < L->count; i++) {
        const p2pt_copy_desc *p = &L->descs[i];
        size_t doff = (size_t)((uintptr_t)p->dst - d->dst.base);
        size_t soff = (size_t)((uintptr_t)p->src - d->src.base);
        if (memcmp(dst + doff, src + soff, (size_t)p->bytes) != 0) {
            bench_row_check_failed("%s: piece %zu of %zu differs from its source",
                                   row_names[row], i, L->count);
            goto out;
        }
        memset(dst + doff, 0xA5, (size_t)p->bytes);
        covered += (size_t)p->bytes;
    }
    for (size_t k = 0; k < pool; k++) {
        if (dst[k] != 0xA5) {
            bench_row_check_failed("%s: byte %zu of the destination pool, outside every "
                                   "piece, was written",
                                   row_names[row], k);
            goto out;
        }
    }
    res = covered == L->total ? "ok" : "FAIL";
    goto out;
fail:
    bench_row_check_failed("%s: %s", row_names[row], bench_err);
out:
    if (strcmp(res, "FAIL") == 0)
        bench_failures++;
    free(dst);
    free(src);
    return res;
}

static void run_shape(const struct shape *sh, struct bench_setup *su)
{
    struct bench_dir *d = &su->d[0];
    struct layout L;
    if (!layout_make(&L, sh, d, su->pool))
        bench_fatal("batch %s: layout", sh->name);
    double gpu[N_ROWS], enq[N_ROWS];
    bool have[N_ROWS];
    char tb[32];
    printf("\n# batch %s: %zu pieces, %s in all, %d layouts rotated\n", sh->name, L.count,
           bench_fmt_size(L.total, tb, sizeof(tb)), L.sets);
    printf("#%11s %12s %10s %12s %10s  check\n", "row", "gpu_us", "GB/s", "enq_us", "/contig");
    for (int r = 0; r < N_ROWS; r++) {
        int t = row_transport(r);
        have[r] = bench_opt.transport[t] &&
                  (r != R_RAW_BATCH || tcu.cuMemcpyBatchAsync != NULL);
        if (!have[r])
            continue;
        bench_row_begin();
        if (!time_row(r, &L, d, &gpu[r], &enq[r]))
            bench_fatal("batch %s, %s", sh->name, row_names[r]);
        double gbps = bench_gbps((double)L.total, gpu[r]);
        double contig = have[R_CONTIG_CE] ? bench_gbps((double)L.total, gpu[R_CONTIG_CE]) : 0;
        const char *c = "-";
        if (r == R_TMA_HOST || r == R_TMA_DEVICE || r == R_CE_BATCH || r == R_AUTO_HOST ||
            r == R_AUTO_DEVICE)
            c = check_row(r, &L, d, 2 * L.total);
        printf("%12s %12.2f %10.2f %12.2f %10.3f  %s\n", row_names[r], gpu[r], gbps, enq[r],
               bench_ratio(gbps, contig), c);
        bench_row_end();
        char kind[64];
        snprintf(kind, sizeof(kind), "%s:%s", row_names[r], sh->name);
        bench_emit("batch", "local", t, &bench_default_cfg, L.total, gpu[r], gbps, kind);
        snprintf(kind, sizeof(kind), "%s_enq:%s", row_names[r], sh->name);
        bench_emit("batch", "local", t, &bench_default_cfg, L.total, enq[r], 0, kind);
    }
    if (have[R_TMA_HOST] && have[R_CE_LOOP] && have[R_CE_BATCH])
        printf("# %s: GPU time / ce_loop: tma_host %.4f, tma_device %.4f; / ce_batch: tma_host "
               "%.4f, tma_device %.4f; bandwidth / contig_ce: tma_host %.3f, tma_device %.3f\n",
               sh->name, bench_ratio(gpu[R_TMA_HOST], gpu[R_CE_LOOP]),
               bench_ratio(gpu[R_TMA_DEVICE], gpu[R_CE_LOOP]),
               bench_ratio(gpu[R_TMA_HOST], gpu[R_CE_BATCH]),
               bench_ratio(gpu[R_TMA_DEVICE], gpu[R_CE_BATCH]),
               bench_ratio(gpu[R_CONTIG_CE], gpu[R_TMA_HOST]),
               bench_ratio(gpu[R_CONTIG_CE], gpu[R_TMA_DEVICE]));
    if (have[R_AUTO_HOST] && have[R_TMA_HOST] && have[R_CE_BATCH]) {
        double best = gpu[R_TMA_HOST] < gpu[R_CE_BATCH] ? gpu[R_TMA_HOST] : gpu[R_CE_BATCH];
        printf("# %s: auto/best (GPU time, lower is better): auto_host %.3f of the better of "
               "tma_host and ce_batch; auto_device %.3f of tma_device\n",
               sh->name, bench_ratio(gpu[R_AUTO_HOST], best),
               bench_ratio(gpu[R_AUTO_DEVICE], gpu[R_TMA_DEVICE]));
    }
    layout_free(&L);
}

void bench_run_batch(void)
{
    struct bench_setup su;
    size_t largest = 0;
    for (size_t s = 0; s < P2PT_ARRAY_LEN(shapes); s++) {
        size_t total = 0;
        for (size_t i = 0; i < shapes[s].count; i++)
            total += piece_size(&shapes[s], i);
        largest = 2 * total > largest ? 2 * total : largest;
    }
    if (!bench_setup_open(&su, P_LOCAL, largest))
        bench_fatal("batch: buffers");
    /* The device batches may touch the two pools and nothing else. */
    for (int t = T_TMA; t <= T_AUTO; t++)
        if (bench_opt.transport[t]) {
            P2(p2pt_window_register(bench_handles[t], bench_gpus[0].ordinal,
                                    bench_dptr(su.d[0].src.base), su.pool));
            P2(p2pt_window_register(bench_handles[t], bench_gpus[0].ordinal,
                                    bench_dptr(su.d[0].dst.base), su.pool));
        }
    for (size_t s = 0; s < P2PT_ARRAY_LEN(shapes); s++)
        run_shape(&shapes[s], &su);
    for (int t = T_TMA; t <= T_AUTO; t++)
        if (bench_opt.transport[t]) {
            P2(p2pt_window_unregister(bench_handles[t], bench_gpus[0].ordinal,
                                      bench_dptr(su.d[0].src.base)));
            P2(p2pt_window_unregister(bench_handles[t], bench_gpus[0].ordinal,
                                      bench_dptr(su.d[0].dst.base)));
        }
    bench_setup_close(&su);
    return;
fail:
    bench_fatal("batch: windows");
}
