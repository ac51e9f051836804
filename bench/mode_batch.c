/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch mode: many pieces per operation, the shapes MoE dispatch and
 * KV-cache transfers post (count x size, and a mixed batch; --shapes), local
 * path. Where the pieces lie is bench/batch_layout.h's: sources consecutive,
 * destinations shuffled with random gaps, --shift bytes off co-alignment.
 * Pools hold at least 4 x L2 and successive operations rotate over several
 * layouts, so no operation finds its bytes in L2. --memory host puts the
 * sources (h2d) or the destinations (d2h) in pinned host memory.
 *
 * Rows (the anchors first: the others are compared with them), each timed
 * the same way: gpu = CUDA events around `n` back-to-back operations, / n,
 * median of the repeats; enq = host time of one enqueue onto an idle stream,
 * median (timed apart: back to back, a full launch queue would make the host
 * wait for the GPU and enq read as gpu):
 *   contig_ce     one copy of the same total bytes, ce: the ceiling
 *   ref_kernel    the plain warp-per-piece kernel of ref_kernel.c, one
 *                 launch, reading tma_device's descriptors and count
 *   contig_tma    the contiguous copy through tma
 *   tma_host      p2pt_copy_batch_async, tma (host descriptors)
 *   tma_host_enq  its host enqueue time, per batch and per piece
 *   tma_device    p2pt_copy_batch_device_async, tma (descriptors and count
 *                 in GPU memory, checked against registered windows)
 *   ce_batch      p2pt_copy_batch_async, ce (cuMemcpyBatchAsync)
 *   raw_batch     cuMemcpyBatchAsync called directly
 *   tma_loop      one p2pt_copy_async per piece, tma
 *   ce_loop       one p2pt_copy_async per piece, ce
 *   auto_host     p2pt_copy_batch_async, auto (the engine its table picks)
 *   auto_device   p2pt_copy_batch_device_async, auto (always the kernel)
 * Every row's /contig is contig_ce's GPU time over its own (a fraction of
 * the contiguous bandwidth) and t/ref its GPU time over the better of
 * ref_kernel and CUB (--cub; lower is better, 1 = as fast as the better).
 * With --ctas, tma_host and tma_device run again once per CTA cap.
 * Every row is checked after it is timed: one operation into a poisoned
 * destination span, every piece byte-compared with its source, every other
 * byte of the span (guards included) still poison.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Descriptors for `sets` layouts, rotated over by successive operations. */
struct layout {
    const struct batch_shape *sh;
    int sets;
    size_t count, total, span;
    p2pt_copy_desc *descs;           /* sets x count, host */
    CUdeviceptr *raw_dst, *raw_src;  /* the same for cuMemcpyBatchAsync */
    size_t *raw_size;
    CUdeviceptr dev_descs;           /* descs in GPU memory */
    CUdeviceptr dev_count;           /* count, in GPU memory */
    CUdeviceptr workspace;
};

/* The pools and the stream; a side in pinned host memory when --memory
 * host. */
struct pools {
    struct bench_setup su;
    struct bench_dir *d;
    bool src_host, dst_host;
    size_t pool;
};

static bool layout_make(struct layout *L, const struct batch_shape *sh, const struct pools *P)
{
    memset(L, 0, sizeof(*L));
    L->sh = sh;
    L->count = sh->count;
    L->total = batch_total(sh);
    L->span = batch_span(sh);
    if (L->span > P->pool) {
        bench_set_err("a %s batch needs %zu bytes of pool, %zu are there", sh->name, L->span,
                      P->pool);
        return false;
    }
    L->sets = (int)(P->pool / L->span);
    if (L->sets > BATCH_MAX_SETS)
        L->sets = BATCH_MAX_SETS;
    size_t n = (size_t)L->sets * L->count;
    L->descs = calloc(n, sizeof(*L->descs));
    L->raw_dst = calloc(n, sizeof(*L->raw_dst));
    L->raw_src = calloc(n, sizeof(*L->raw_src));
    L->raw_size = calloc(n, sizeof(*L->raw_size));
    size_t *soff = malloc(L->count * sizeof(size_t)), *doff = malloc(L->count * sizeof(size_t));
    size_t *order = malloc(L->count * sizeof(size_t));
    if (!L->descs || !L->raw_dst || !L->raw_src || !L->raw_size || !soff || !doff || !order) {
        bench_set_err("out of host memory for %zu descriptors", n);
        goto fail_free;
    }
    const struct bench_dir *d = P->d;
    for (int s = 0; s < L->sets; s++) {
        batch_place(sh, (size_t)bench_opt.shift, s, soff, doff, order);
        for (size_t i = 0; i < L->count; i++) {
            size_t k = (size_t)s * L->count + i;
            L->descs[k].dst = bench_dptr(d->dst.base + doff[i]);
            L->descs[k].src = bench_dptr(d->src.base + soff[i]);
            L->descs[k].bytes = batch_piece_size(sh, i);
            L->raw_dst[k] = d->dst.base + doff[i];
            L->raw_src[k] = d->src.base + soff[i];
            L->raw_size[k] = batch_piece_size(sh, i);
        }
    }
    free(soff);
    free(doff);
    free(order);
    size_t bytes = n * sizeof(*L->descs);
    uint32_t c = (uint32_t)L->count;
    CU(tcu.cuMemAlloc(&L->dev_descs, bytes));
    CU(tcu.cuMemAlloc(&L->dev_count, sizeof(c)));
    CU(tcu.cuMemAlloc(&L->workspace, p2pt_batch_workspace_bytes(c)));
    CU(tcu.cuMemcpyHtoD(L->dev_descs, L->descs, bytes));
    CU(tcu.cuMemcpyHtoD(L->dev_count, &c, sizeof(c)));
    return true;
fail_free:
    free(soff);
    free(doff);
    free(order);
fail:
    return false;
}

static void layout_free(struct layout *L)
{
    free(L->descs);
    free(L->raw_dst);
    free(L->raw_src);
    free(L->raw_size);
    if (L->dev_descs)
        CU_RELEASE(tcu.cuMemFree(L->dev_descs));
    if (L->dev_count)
        CU_RELEASE(tcu.cuMemFree(L->dev_count));
    if (L->workspace)
        CU_RELEASE(tcu.cuMemFree(L->workspace));
}

/* The anchors first: every later row is compared with them. */
enum row {
    R_CONTIG_CE, R_REF_KERNEL, R_CONTIG_TMA, R_TMA_HOST, R_TMA_DEVICE, R_CE_BATCH,
    R_RAW_BATCH, R_TMA_LOOP, R_CE_LOOP, R_AUTO_HOST, R_AUTO_DEVICE, N_ROWS
};
static const char *const row_names[N_ROWS] = {
    "contig_ce", "ref_kernel", "contig_tma", "tma_host",  "tma_device", "ce_batch",
    "raw_batch", "tma_loop",   "ce_loop",    "auto_host", "auto_device"};

/* Which handle a row measures (ref_kernel and raw_batch use none: they
 * follow ce's selection). */
static int row_transport(int row)
{
    switch (row) {
    case R_TMA_HOST: case R_TMA_DEVICE: case R_TMA_LOOP: case R_CONTIG_TMA: return T_TMA;
    case R_AUTO_HOST: case R_AUTO_DEVICE: return T_AUTO;
    default: return T_CE;
    }
}

static bool row_is_device_batch(int row)
{
    return row == R_TMA_DEVICE || row == R_AUTO_DEVICE;
}

static struct bench_ref ref;
static bool ref_loaded;
static char ref_why[sizeof(bench_err)]; /* why ref_kernel is not there */

/* Enqueue operation `row` on layout set `set`; `h`: the handle of the p2pt
 * rows. */
static bool enqueue(int row, p2pt_handle *h, const struct layout *L, int set,
                    const struct bench_dir *d)
{
    size_t first = (size_t)set * L->count;
    const p2pt_copy_desc *D = L->descs + first;
    CUdeviceptr dev_descs = L->dev_descs + first * sizeof(*D);
    switch (row) {
    case R_TMA_HOST:
    case R_AUTO_HOST:
    case R_CE_BATCH:
        P2(p2pt_copy_batch_async(h, D, L->count, d->s));
        break;
    case R_TMA_DEVICE:
    case R_AUTO_DEVICE:
        P2(p2pt_copy_batch_device_async(h, bench_dptr(dev_descs), bench_dptr(L->dev_count),
                                        (uint32_t)L->count, bench_dptr(L->workspace), d->s));
        break;
    case R_REF_KERNEL:
        if (!bench_ref_launch(&ref, dev_descs, L->dev_count, (uint32_t)L->count, 0, d->s))
            goto fail;
        break;
    case R_RAW_BATCH: {
        CUmemcpyAttributes attr;
        memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
        size_t at = 0;
        CU(tcu.cuMemcpyBatchAsync(L->raw_dst + first, L->raw_src + first, L->raw_size + first,
                                  L->count, &attr, &at, 1, d->s));
        break;
    }
    case R_TMA_LOOP:
    case R_CE_LOOP:
        for (size_t i = 0; i < L->count; i++)
            P2(p2pt_copy_async(h, D[i].dst, D[i].src, (size_t)D[i].bytes, d->s));
        break;
    default: /* contiguous */
        P2(p2pt_copy_async(h, bench_dptr(d->dst.base + (size_t)set * L->span),
                           bench_dptr(d->src.base + (size_t)set * L->span), L->total, d->s));
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

enum timed { TIMED, SKIPPED, FAILED };

/* Median GPU time and host enqueue time of one operation, microseconds.
 * SKIPPED (bench_err says why) where the first enqueue is refused with
 * --memory host: the row cannot run on that memory. */
static enum timed time_row(int row, p2pt_handle *h, const struct layout *L,
                           const struct bench_dir *d, double *gpu_us, double *enq_us)
{
    bool loop = row == R_TMA_LOOP || row == R_CE_LOOP;
    /* Back-to-back operations per timed batch: about 256M of payload,
     * 2 to 20 operations. */
    size_t want = 256 * MiB / (L->total ? L->total : 1);
    int n = loop ? 2 : want < 2 ? 2 : want > 20 ? 20 : (int)want;
    int repeats = loop ? 3 : 9, op = 0;
    double g[16], e[16];
    CUevent a = NULL, b = NULL;
    CU(tcu.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&b, CU_EVENT_DEFAULT));
    if (!enqueue(row, h, L, op++ % L->sets, d)) {
        CU_RELEASE(tcu.cuEventDestroy(a));
        CU_RELEASE(tcu.cuEventDestroy(b));
        return bench_opt.host_memory ? SKIPPED : FAILED;
    }
    for (int w = 1; w < n; w++)
        if (!enqueue(row, h, L, op++ % L->sets, d))
            goto fail;
    CU(tcu.cuStreamSynchronize(d->s));
    for (int r = 0; r < repeats; r++) {
        CU(tcu.cuStreamSynchronize(d->s));
        double t0 = bench_now_us();
        if (!enqueue(row, h, L, op++ % L->sets, d))
            goto fail;
        e[r] = bench_now_us() - t0;
        CU(tcu.cuStreamSynchronize(d->s));
        CU(tcu.cuEventRecord(a, d->s));
        for (int k = 0; k < n; k++)
            if (!enqueue(row, h, L, op++ % L->sets, d))
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
    return TIMED;
fail:
    if (a)
        CU_RELEASE(tcu.cuEventDestroy(a));
    if (b)
        CU_RELEASE(tcu.cuEventDestroy(b));
    return FAILED;
}

/* `bytes` at `off` of an arena, into `buf` (a plain read on the host side). */
static bool pool_read(const struct bench_arena *a, bool host, size_t off, size_t bytes,
                      unsigned char *buf)
{
    if (host) {
        memcpy(buf, (const unsigned char *)(uintptr_t)a->base + off, bytes);
        return true;
    }
    CU(tcu.cuMemcpyDtoH(buf, a->base + off, bytes));
    return true;
fail:
    return false;
}

/* The first offset at or past `from` in [from, to) whose byte is not poison;
 * `to` if none. */
static size_t first_unpoisoned(const unsigned char *p, size_t from, size_t to)
{
    static unsigned char ref_line[4096];
    if (ref_line[0] != BENCH_POISON)
        memset(ref_line, BENCH_POISON, sizeof(ref_line));
    size_t k = from;
    while (k < to) {
        size_t n = to - k < sizeof(ref_line) ? to - k : sizeof(ref_line);
        if (memcmp(p + k, ref_line, n) != 0)
            break;
        k += n;
    }
    for (; k < to; k++)
        if (p[k] != BENCH_POISON)
            return k;
    return to;
}

/* One operation of `row` (layout set 0) into a poisoned destination span:
 * every piece equals its source, every other byte of the span is still
 * poison; device batches also report no descriptor skipped. Returns the
 * row's check column. */
static const char *check_row(int row, const char *label, p2pt_handle *h,
                             const struct layout *L, const struct pools *P)
{
    if (!bench_opt.check)
        return "-";
    const struct bench_dir *d = P->d;
    bool contig = row == R_CONTIG_CE || row == R_CONTIG_TMA;
    unsigned char *dst = malloc(L->span), *src = malloc(L->total);
    const char *res = "FAIL";
    if (dst == NULL || src == NULL) {
        bench_set_err("out of host memory for the check (%zu bytes)", L->span + L->total);
        goto fail;
    }
    /* The stream does not wait for the memsets: the context does. */
    if (P->dst_host)
        memset((void *)(uintptr_t)d->dst.base, BENCH_POISON, L->span);
    else
        CU(tcu.cuMemsetD8(d->dst.base, BENCH_POISON, L->span));
    if (row_is_device_batch(row))
        CU(tcu.cuMemsetD8(L->workspace, 0xFF, sizeof(p2pt_batch_status)));
    CU(tcu.cuCtxSynchronize());
    if (!enqueue(row, h, L, 0, d))
        goto fail;
    CU(tcu.cuStreamSynchronize(d->s));
    if (!pool_read(&d->dst, P->dst_host, 0, L->span, dst) ||
        !pool_read(&d->src, P->src_host, 0, L->total, src))
        goto fail;
    if (row_is_device_batch(row)) {
        bool ok = true;
        if (!bench_check_batch_status(L->workspace, L->count, label, "the", &ok))
            goto fail;
        if (!ok)
            goto out;
    }
    size_t pieces = contig ? 1 : L->count;
    for (size_t i = 0; i < pieces; i++) {
        size_t doff = 0, soff = 0, bytes = L->total;
        if (!contig) {
            const p2pt_copy_desc *p = &L->descs[i];
            doff = (size_t)((uintptr_t)p->dst - d->dst.base);
            soff = (size_t)((uintptr_t)p->src - d->src.base);
            bytes = (size_t)p->bytes;
        }
        if (memcmp(dst + doff, src + soff, bytes) != 0) {
            size_t k = 0;
            while (dst[doff + k] == src[soff + k])
                k++;
            bench_row_check_failed("%s: piece %zu of %zu (%zu bytes, dst mod 16 = %zu, src mod "
                                   "16 = %zu) differs from its source at byte %zu",
                                   label, i, pieces, bytes,
                                   (size_t)(d->dst.base + doff) % 16,
                                   (size_t)(d->src.base + soff) % 16, k);
            goto out;
        }
        memset(dst + doff, BENCH_POISON, bytes);
    }
    size_t k = first_unpoisoned(dst, 0, L->span);
    if (k < L->span) {
        bench_row_check_failed("%s: byte %zu of the destination span (%zu bytes, guards "
                               "included), outside every piece, was written",
                               label, k, L->span);
        goto out;
    }
    res = "ok";
    goto out;
fail:
    bench_row_check_failed("%s: %s", label, bench_err);
out:
    free(dst);
    free(src);
    return res;
}

/* ------------------------------------------------------------- CUB */

/* CUB's GPU time for `sh` at the current --shift from --cub's file, as
 * bench/experiments/cub_batched.cu prints it ("cub_batched shape=S shift=N
 * gpu_us=T ... check=ok"); 0 when the file has no checked line for it. */
static double cub_us(const struct batch_shape *sh)
{
    if (bench_opt.cub == NULL || bench_opt.host_memory)
        return 0;
    FILE *f = fopen(bench_opt.cub, "r");
    if (f == NULL)
        return 0;
    char line[512], want[64];
    double us = 0;
    snprintf(want, sizeof(want), " shape=%s shift=%d ", sh->name, bench_opt.shift);
    while (fgets(line, sizeof(line), f)) {
        const char *t = strstr(line, "gpu_us=");
        if (strncmp(line, "cub_batched", 11) == 0 && strstr(line, want) && t &&
            strstr(line, " check=ok"))
            us = strtod(t + 7, NULL);
    }
    fclose(f);
    return us;
}

/* ---------------------------------------------------------- the table */

/* The anchors of one shape's rows: contig_ce's GPU time and the better of
 * ref_kernel and CUB (0 where not measured). */
struct anchors {
    double contig, ref;
};

static void print_head(void)
{
    printf("#%13s %10s %9s %8s %8s %10s %10s  check\n", "row", "gpu_us", "GB/s", "/contig",
           "t/ref", "enq_us", "enq_ns/pc");
}

static void print_skip(const char *name, const char *why)
{
    printf("%14s skipped: %s\n", name, why);
}

/* One row of one shape: what it runs and, once timed, its medians. */
struct measured {
    int row;
    p2pt_handle *h;
    char label[32];
    const struct bench_tma_cfg *cfg; /* the TMA settings it ran with */
    double gpu, enq;
};

/* Time one row; false, with a line saying why, when it was skipped. */
static bool row_time(struct measured *m, const struct layout *L, const struct pools *P)
{
    bench_row_begin();
    enum timed t = time_row(m->row, m->h, L, P->d, &m->gpu, &m->enq);
    if (t == FAILED)
        bench_fatal("batch %s, %s", L->sh->name, m->label);
    if (t == SKIPPED)
        print_skip(m->label, bench_err);
    bench_row_end();
    return t == TIMED;
}

/* Check, print and record a timed row against the anchors. */
static void row_report(const struct measured *m, const struct layout *L, const struct pools *P,
                       const struct anchors *A)
{
    double gbps = bench_gbps((double)L->total, m->gpu);
    double vs_contig = bench_ratio(A->contig, m->gpu), vs_ref = bench_ratio(m->gpu, A->ref);
    bench_row_begin();
    const char *c = check_row(m->row, m->label, m->h, L, P);
    printf("%14s %10.2f %9.2f %8.3f %8.3f %10.2f %10.1f  %s\n", m->label, m->gpu, gbps,
           vs_contig, vs_ref, m->enq, m->enq * 1e3 / (double)L->count, c);
    bench_row_end();
    char kind[96];
    int t = row_transport(m->row);
    snprintf(kind, sizeof(kind), "%s:%s", m->label, L->sh->name);
    bench_emit_ratios("batch", "local", t, m->cfg, L->total, m->gpu, gbps, kind, vs_contig,
                      vs_ref);
    snprintf(kind, sizeof(kind), "%s_enq:%s", m->label, L->sh->name);
    bench_emit("batch", "local", t, m->cfg, L->total, m->enq, 0, kind);
}

/* Handles of the --ctas sweep, one per cap, TMA settings otherwise the
 * environment's. */
static p2pt_handle *cap_handles[MAX_LIST];
static struct bench_tma_cfg cap_cfg[MAX_LIST];
/* Why device batches cannot run (windows refused), "" when they can. */
static char windows_why[512];

/* Whether row `r` runs here; prints why not where that is not the user's
 * choice. */
static bool row_runs(int r, const char *label)
{
    if (!bench_opt.transport[row_transport(r)] && r != R_REF_KERNEL) /* the yardstick always runs */
        return false;
    if (r == R_RAW_BATCH && tcu.cuMemcpyBatchAsync == NULL) {
        print_skip(label, "this driver has no cuMemcpyBatchAsync (CUDA 12.8+)");
        return false;
    }
    if (r == R_REF_KERNEL && !ref_loaded) {
        print_skip(label, ref_why);
        return false;
    }
    if (row_is_device_batch(r) && windows_why[0]) {
        print_skip(label, windows_why);
        return false;
    }
    return true;
}

static void measured_init(struct measured *m, int row, p2pt_handle *h, const char *label,
                          const struct bench_tma_cfg *cfg)
{
    memset(m, 0, sizeof(*m));
    m->row = row;
    m->h = h;
    m->cfg = cfg;
    snprintf(m->label, sizeof(m->label), "%s", label);
}

static void run_shape(const struct batch_shape *sh, struct pools *P)
{
    struct layout L;
    if (!layout_make(&L, sh, P))
        bench_fatal("batch %s: layout", sh->name);
    struct measured m[N_ROWS];
    bool have[N_ROWS] = {false};
    char tb[32];
    struct anchors A = {0, 0};
    double cub = cub_us(sh);
    printf("\n# batch %s: %zu pieces, %s in all, shift %d, %s, %d layouts rotated%s\n",
           sh->name, L.count, bench_fmt_size(L.total, tb, sizeof(tb)), bench_opt.shift,
           !bench_opt.host_memory ? "device memory"
           : bench_opt.d2h        ? "d2h: destinations in pinned host memory"
                                  : "h2d: sources in pinned host memory",
           L.sets, cub > 0 ? "" : "; no CUB time (--cub): t/ref is against ref_kernel");
    if (cub > 0)
        printf("# CUB DeviceMemcpy::Batched (--cub): %.2f us\n", cub);
    print_head();
    for (int r = 0; r < N_ROWS; r++)
        measured_init(&m[r], r, bench_handles[row_transport(r)], row_names[r],
                      &bench_default_cfg);
    /* The anchors are timed first and reported once both are known, so
     * that their own ratios are filled in too. */
    for (int r = R_CONTIG_CE; r <= R_REF_KERNEL; r++)
        have[r] = row_runs(r, row_names[r]) && row_time(&m[r], &L, P);
    A.contig = have[R_CONTIG_CE] ? m[R_CONTIG_CE].gpu : 0;
    A.ref = have[R_REF_KERNEL] ? m[R_REF_KERNEL].gpu : 0;
    if (cub > 0 && (A.ref == 0 || cub < A.ref))
        A.ref = cub;
    for (int r = 0; r < N_ROWS; r++) {
        if (r > R_REF_KERNEL)
            have[r] = row_runs(r, row_names[r]) && row_time(&m[r], &L, P);
        if (!have[r])
            continue;
        row_report(&m[r], &L, P, &A);
        if (r == R_TMA_HOST)
            printf("%14s %10s %9s %8s %8s %10.2f %10.1f  -\n", "tma_host_enq", "-", "-", "-",
                   "-", m[r].enq, m[r].enq * 1e3 / (double)L.count);
    }
    if (have[R_TMA_HOST] && have[R_TMA_DEVICE])
        printf("# %s: tma_host GPU time / tma_device %.3f; host enqueue of tma_host %.2f us, "
               "%.1f ns per piece\n",
               sh->name, bench_ratio(m[R_TMA_HOST].gpu, m[R_TMA_DEVICE].gpu),
               m[R_TMA_HOST].enq, m[R_TMA_HOST].enq * 1e3 / (double)L.count);
    if (have[R_AUTO_HOST] && have[R_TMA_HOST] && have[R_CE_BATCH]) {
        double a = m[R_TMA_HOST].gpu, b = m[R_CE_BATCH].gpu;
        printf("# %s: auto/best (GPU time, lower is better): auto_host %.3f of the better of "
               "tma_host and ce_batch",
               sh->name, bench_ratio(m[R_AUTO_HOST].gpu, a < b ? a : b));
        if (have[R_AUTO_DEVICE] && have[R_TMA_DEVICE])
            printf("; auto_device %.3f of tma_device",
                   bench_ratio(m[R_AUTO_DEVICE].gpu, m[R_TMA_DEVICE].gpu));
        putchar('\n');
    }
    if (bench_opt.n_ctas > 0 && bench_opt.transport[T_TMA]) {
        printf("# %s against the CTA cap (P2P_TRANSPORT_MAX_CTAS; 0 = automatic; %d SMs):\n",
               sh->name, bench_gpus[0].sms);
        print_head();
        for (int c = 0; c < bench_opt.n_ctas; c++) {
            const int rows[2] = {R_TMA_HOST, R_TMA_DEVICE};
            for (int k = 0; k < 2; k++) {
                char label[32];
                struct measured cm;
                snprintf(label, sizeof(label), "%s@%d", row_names[rows[k]], bench_opt.ctas[c]);
                measured_init(&cm, rows[k], cap_handles[c], label, &cap_cfg[c]);
                if (row_runs(rows[k], label) && row_time(&cm, &L, P))
                    row_report(&cm, &L, P, &A);
            }
        }
    }
    layout_free(&L);
}

/* ------------------------------------------------------------- pools */

/* Pinned host memory for one side, in place of its device arena. */
static bool host_arena(struct bench_arena *a, bool fill)
{
    void *h = NULL;
    CU_RELEASE(tcu.cuMemFree(a->base));
    a->base = 0;
    CU(tcu.cuMemAllocHost(&h, a->pool + SLACK));
    a->base = (CUdeviceptr)(uintptr_t)h;
    unsigned char *p = h;
    size_t total = a->pool + SLACK, first = total < 1000003 ? total : 1000003;
    if (!fill) {
        memset(p, 0, total);
        return true;
    }
    uint64_t x = 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < first; i++)
        p[i] = (unsigned char)(batch_rng(&x) >> 32);
    for (size_t done = first; done < total;) {
        size_t n = done < total - done ? done : total - done;
        memcpy(p + done, p, n);
        done += n;
    }
    return true;
fail:
    return false;
}

static bool pools_open(struct pools *P)
{
    size_t largest = 0;
    memset(P, 0, sizeof(*P));
    for (int s = 0; s < bench_opt.n_shapes; s++) {
        size_t span = batch_span(&bench_opt.shapes[s]);
        largest = span > largest ? span : largest;
    }
    if (bench_opt.host_memory && largest < 64 * MiB)
        largest = 64 * MiB;
    if (!bench_setup_open(&P->su, P_LOCAL, largest))
        return false;
    P->d = &P->su.d[0];
    P->pool = P->su.pool;
    if (bench_opt.host_memory) {
        P->dst_host = bench_opt.d2h;
        P->src_host = !bench_opt.d2h;
        if (!host_arena(P->src_host ? &P->d->src : &P->d->dst, P->src_host))
            return false;
    }
    return true;
}

static void pools_close(struct pools *P)
{
    struct bench_arena *a = P->src_host ? &P->d->src : P->dst_host ? &P->d->dst : NULL;
    if (a && a->base) {
        CU_RELEASE(tcu.cuMemFreeHost((void *)(uintptr_t)a->base));
        a->base = 0;
    }
    bench_setup_close(&P->su);
}

/* The device batches may touch the two pools and nothing else. */
static void windows(p2pt_handle *h, const struct pools *P, bool on)
{
    const void *bases[2] = {bench_dptr(P->d->src.base), bench_dptr(P->d->dst.base)};
    for (int i = 0; i < 2; i++) {
        p2pt_status st = on ? p2pt_window_register(h, bench_gpus[0].ordinal, bases[i], P->pool)
                            : p2pt_window_unregister(h, bench_gpus[0].ordinal, bases[i]);
        if (st == P2PT_SUCCESS)
            continue;
        /* Host memory refused as a window: the device rows say so and are
         * skipped; unregistering what was never registered is expected. */
        if (on && bench_opt.host_memory) {
            if (windows_why[0] == '\0') {
                snprintf(windows_why, sizeof(windows_why), "p2pt_window_register: %s: %s",
                         p2pt_status_string(st), p2pt_last_error(NULL));
                bench_one_line(windows_why);
            }
            continue;
        }
        if (!on && windows_why[0] != '\0')
            continue;
        bench_fail_p2(st, on ? "p2pt_window_register" : "p2pt_window_unregister");
        bench_fatal("batch: windows");
    }
}

static void cap_handles_open(const struct pools *P)
{
    for (int c = 0; c < bench_opt.n_ctas && bench_opt.transport[T_TMA]; c++) {
        char options[64];
        p2pt_status st;
        snprintf(options, sizeof(options), "P2P_TRANSPORT_MAX_CTAS=%d", bench_opt.ctas[c]);
        if (!bench_handle_open("tma", options, &cap_handles[c], &cap_cfg[c]) ||
            !bench_prepare_on(cap_handles[c], false, &st))
            bench_fatal("batch: p2pt_init with %s", options);
        windows(cap_handles[c], P, true);
    }
}

static void cap_handles_close(const struct pools *P)
{
    for (int c = 0; c < bench_opt.n_ctas; c++)
        if (cap_handles[c]) {
            windows(cap_handles[c], P, false);
            p2pt_finalize(cap_handles[c]);
            cap_handles[c] = NULL;
        }
}

void bench_run_batch(void)
{
    struct pools P;
    if (!pools_open(&P))
        bench_fatal("batch: buffers");
    ref_loaded = bench_ref_load(&ref, &bench_gpus[0], NULL);
    if (!ref_loaded)
        snprintf(ref_why, sizeof(ref_why), "%s", bench_err);
    windows_why[0] = '\0';
    for (int t = T_TMA; t <= T_AUTO; t++)
        if (bench_opt.transport[t])
            windows(bench_handles[t], &P, true);
    cap_handles_open(&P);
    for (int s = 0; s < bench_opt.n_shapes; s++)
        run_shape(&bench_opt.shapes[s], &P);
    cap_handles_close(&P);
    for (int t = T_TMA; t <= T_AUTO; t++)
        if (bench_opt.transport[t])
            windows(bench_handles[t], &P, false);
    if (ref_loaded)
        bench_ref_unload(&ref);
    pools_close(&P);
}
