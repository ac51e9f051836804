/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lists the calibrate mode measures for one path: copies back to back
 * and queued (the copy and graph lists), and host batches (the batch list),
 * ce against tma. mode_calibrate.c asks for the paths between GPUs and
 * calibrate_host.c for those through pinned host memory; both use these,
 * and neither calls the other back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auto_table.h"
#include "bench.h"
#include "calibrate.h"

#define CAL_MIN (4 * KiB)
#define GRAPH_MAX (16 * MiB)
#define BATCH_MIN (4 * KiB)
#define TIE 0.02
#define MAX_CAL 32

static int ix_ce, ix_tma, n_engines; /* registry indices of the two engines */

/* The registry's indices, found at the first list. */
static void find_engines(void)
{
    const char *names[P2PT_MAX_TRANSPORTS];
    n_engines = p2pt__engine_names(names, P2PT_MAX_TRANSPORTS);
    ix_ce = p2pt__transport_index(&p2pt__transport_ce);
    ix_tma = p2pt__transport_index(&p2pt__transport_tma);
}

/* Time (us) of `bytes` copies on `d` by transport `t`: back to back, or
 * queued. */
static double copy_time(struct bench_dir *d, const char *what, int t, size_t bytes, bool queued)
{
    int n = bench_iters_for(bytes), r = bench_repeats_for(bytes), w = bench_warmup_for(n);
    struct bench_timing tm;
    bool ok = queued ? bench_time_copies_queued(bench_handles[t], d, bytes, w, n, r, &tm)
                     : bench_time_copies(bench_handles[t], d, 1, bytes, w, n, r, &tm);
    if (!ok)
        bench_fatal("calibrate, path %s, %s, %zu bytes", what, bench_transport_names[t], bytes);
    return tm.us;
}

/* Both engines at one size, twice in alternating order; *ce and *tma get
 * the means. */
static void both(struct bench_dir *d, const char *what, size_t bytes, bool queued, double *ce,
                 double *tma)
{
    double c1 = copy_time(d, what, T_CE, bytes, queued);
    double t1 = copy_time(d, what, T_TMA, bytes, queued);
    double t2 = copy_time(d, what, T_TMA, bytes, queued);
    double c2 = copy_time(d, what, T_CE, bytes, queued);
    *ce = (c1 + c2) / 2;
    *tma = (t1 + t2) / 2;
}

static void put(double *time, int i, double ce, double tma)
{
    time[i * n_engines + ix_ce] = ce;
    time[i * n_engines + ix_tma] = tma;
}

void cal_copy_lists(struct bench_dir *d, const char *what, struct p2pt_auto_list *copy_list,
                    struct p2pt_auto_list *graph_list)
{
    find_engines();
    size_t lo = bench_opt.min_bytes > CAL_MIN ? bench_opt.min_bytes : CAL_MIN;
    size_t hi = bench_opt.max_bytes;
    uint64_t sizes[MAX_CAL];
    double copy[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0}, graph[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0};
    int n = 0;
    printf("\n# calibrate, path %s, microseconds per copy: b2b = back to back (table mode), "
           "queued = behind a gate (the GPU alone; graphs); each the mean of two medians\n",
           what);
    printf("#%9s %10s %10s %8s %10s %10s %8s\n", "size", "b2b_ce", "b2b_tma", "faster", "q_ce",
           "q_tma", "faster");
    for (size_t b = lo; b <= hi && n < MAX_CAL; b *= 2, n++) {
        double c, t, qc, qt;
        both(d, what, b, false, &c, &t);
        if (b <= GRAPH_MAX)
            both(d, what, b, true, &qc, &qt);
        else
            qc = c, qt = t;
        sizes[n] = b;
        put(copy, n, c, t);
        put(graph, n, qc, qt);
        char sz[32];
        printf("%10s %10.2f %10.2f %8s %10.2f %10.2f %8s\n", bench_fmt_size(b, sz, sizeof(sz)),
               c, t, t < c ? "tma" : "ce", qc, qt, qt < qc ? "tma" : "ce");
        bench_emit("calibrate", what, T_CE, NULL, b, c, bench_gbps((double)b, c), "b2b");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, b, t, bench_gbps((double)b, t),
                   "b2b");
        bench_emit("calibrate", what, T_CE, NULL, b, qc, bench_gbps((double)b, qc), "queued");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, b, qt,
                   bench_gbps((double)b, qt), "queued");
    }
    if (p2pt__auto_list_build(copy_list, sizes, n, copy, n_engines, TIE) != 0 ||
        p2pt__auto_list_build(graph_list, sizes, n, graph, n_engines, TIE) != 0) {
        bench_set_err("%s", p2pt__last_error_text());
        bench_fatal("calibrate, path %s: bands", what);
    }
    /* Graph bands that agree with the copy bands cost a capture query for
     * nothing: leave them out. */
    if (memcmp(graph_list, copy_list, sizeof(*copy_list)) == 0)
        memset(graph_list, 0, sizeof(*graph_list));
}


/* GPU time (us) of one batch operation: `n` back to back between events,
 * median of 7; layouts rotate so no operation reads what one left in L2. */
static double batch_time(p2pt_handle *h, const p2pt_copy_desc *D, int sets,
                         const struct bench_dir *d, const char *what)
{
    enum { N = 10, REPEATS = 7 };
    double v[REPEATS];
    CUevent a = NULL, b = NULL;
    int op = 0;
    CU(tcu.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&b, CU_EVENT_DEFAULT));
    for (int k = 0; k < N; k++, op++)
        P2(p2pt_copy_batch_async(h, D + (size_t)(op % sets) * CAL_BATCH_COUNT,
                                 CAL_BATCH_COUNT, d->s));
    for (int r = 0; r < REPEATS; r++) {
        CU(tcu.cuEventRecord(a, d->s));
        for (int k = 0; k < N; k++, op++)
            P2(p2pt_copy_batch_async(h, D + (size_t)(op % sets) * CAL_BATCH_COUNT,
                                     CAL_BATCH_COUNT, d->s));
        CU(tcu.cuEventRecord(b, d->s));
        CU(tcu.cuEventSynchronize(b));
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, a, b));
        v[r] = ms * 1000.0 / N;
    }
    CU_RELEASE(tcu.cuEventDestroy(a));
    CU_RELEASE(tcu.cuEventDestroy(b));
    return bench_median(v, REPEATS);
fail:
    bench_fatal("calibrate, batches, %s", what);
}

void cal_batch_list(const struct bench_dir *d, size_t pool, const char *what,
                    struct p2pt_auto_list *out)
{
    find_engines();
    uint64_t sizes[MAX_CAL];
    double time[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0};
    int n = 0;
    size_t gap = CAL_BATCH_GAP;
    p2pt_copy_desc *D = malloc(16 * CAL_BATCH_COUNT * sizeof(*D));
    if (D == NULL)
        bench_fatal("calibrate, batches: host memory");
    printf("\n# calibrate, batches of %d pieces (%s, destinations %zu bytes apart), GPU "
           "microseconds per batch, each the mean of two medians\n",
           CAL_BATCH_COUNT, what, gap);
    printf("#%9s %10s %10s %8s\n", "piece", "ce_batch", "tma_batch", "faster");
    for (size_t m = BATCH_MIN; m <= CAL_BATCH_MAX && n < MAX_CAL; m *= 4, n++) {
        size_t span = CAL_BATCH_COUNT * (m + gap);
        int sets = (int)(pool / span);
        sets = sets > 16 ? 16 : sets < 1 ? 1 : sets;
        for (int s = 0; s < sets; s++)
            for (int i = 0; i < CAL_BATCH_COUNT; i++) {
                p2pt_copy_desc *p = &D[s * CAL_BATCH_COUNT + i];
                /* pieces in reverse order on the destination side */
                p->src = bench_dptr(d->src.base + (size_t)s * span + (size_t)i * m);
                p->dst = bench_dptr(d->dst.base + (size_t)s * span +
                                    (size_t)(CAL_BATCH_COUNT - 1 - i) * (m + gap));
                p->bytes = m;
            }
        double c1 = batch_time(bench_handles[T_CE], D, sets, d, what);
        double t1 = batch_time(bench_handles[T_TMA], D, sets, d, what);
        double t2 = batch_time(bench_handles[T_TMA], D, sets, d, what);
        double c2 = batch_time(bench_handles[T_CE], D, sets, d, what);
        double c = (c1 + c2) / 2, t = (t1 + t2) / 2;
        sizes[n] = m;
        put(time, n, c, t);
        char sz[32];
        printf("%10s %10.2f %10.2f %8s\n", bench_fmt_size(m, sz, sizeof(sz)), c, t,
               t < c ? "tma" : "ce");
        bench_emit("calibrate", what, T_CE, NULL, m * CAL_BATCH_COUNT, c,
                   bench_gbps((double)m * CAL_BATCH_COUNT, c), "batch64");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, m * CAL_BATCH_COUNT, t,
                   bench_gbps((double)m * CAL_BATCH_COUNT, t), "batch64");
    }
    free(D);
    if (p2pt__auto_list_build(out, sizes, n, time, n_engines, TIE) != 0) {
        bench_set_err("%s", p2pt__last_error_text());
        bench_fatal("calibrate, batches, %s: bands", what);
    }
}
