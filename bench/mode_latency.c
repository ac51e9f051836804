/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The latency mode: small copies (4K..1M, powers of 2) on local, push and
 * pull, each seen five ways: back to back between two events (b2b), the
 * same batch queued behind a gate (gpu: the GPU's rate, the host's
 * excluded), one copy at a time by the host clock (host) and by events
 * (dev), and the host time to enqueue one (enq); tma/ce, and auto/best
 * (auto over the faster engine) when all three transports run.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define LAT_MIN (4 * KiB)
#define LAT_MAX (1 * MiB)
#define LAT_SAMPLES 200 /* one-copy-at-a-time samples per size and transport */
#define LAT_ITERS 100   /* copies per back-to-back batch */

/* The four timed columns, in table order, and their CSV kinds. */
enum { C_B2B, C_GPU, C_HOST, C_DEV, N_COLUMNS };
static const char *const column[N_COLUMNS] = {"b2b", "gpu", "host", "dev"};
static const char *const kind[N_COLUMNS] = {"b2b", "b2b_gpu", "host", "dev"};

static void print_head(const struct bench_setup *su, bool both)
{
    const struct bench_dir *d = &su->d[0];
    printf("\n# latency, path %s (GPU %d -> GPU %d, stream on GPU %d), microseconds: "
           "b2b = per copy, %d back to back between two events; gpu = per copy, the "
           "same batch queued behind a gate that opens once all are enqueued (the GPU's "
           "rate, the host's excluded); host = one copy, p2pt_copy_async to "
           "cuStreamSynchronize return; dev = one copy between two events; enq = host "
           "time to enqueue one copy; medians\n",
           bench_path_names[su->path], d->src.g->ordinal, d->dst.g->ordinal, d->g->ordinal,
           bench_opt.iters ? bench_opt.iters : LAT_ITERS);
    printf("#%9s", "size");
    for (int k = 0; k < N_COLUMNS; k++) {
        for (int t = 0; t < N_TRANSPORTS; t++)
            if (bench_opt.transport[t])
                printf(" %5s_%-3s", column[k], bench_transport_names[t]);
        if (both)
            printf(" %7s", "tma/ce");
        if (bench_auto_vs_best(bench_opt.transport))
            printf(" %9s", "auto/best");
    }
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (bench_opt.transport[t])
            printf("   enq_%-3s", bench_transport_names[t]);
    printf("  check\n");
}

/* Every column of transport `t` at `bytes` into v[][t] and enq[t]; returns
 * the check column. */
static const char *measure(struct bench_setup *su, int t, size_t bytes,
                           double v[N_COLUMNS][N_TRANSPORTS], double enq[N_TRANSPORTS])
{
    const char *path = bench_path_names[su->path];
    p2pt_handle *h = bench_handles[t];
    int n = bench_opt.iters ? bench_opt.iters : LAT_ITERS;
    int r = bench_opt.repeats ? bench_opt.repeats : 20;
    struct bench_timing tm, q;
    if (!bench_time_copies(h, su->d, 1, bytes, bench_warmup_for(n), n, r, &tm) ||
        !bench_time_single(h, &su->d[0], bytes, LAT_SAMPLES, &v[C_HOST][t], &v[C_DEV][t]))
        bench_fatal("latency, path %s, %s, %zu bytes", path, bench_transport_names[t], bytes);
    v[C_B2B][t] = tm.us;
    enq[t] = tm.enq_us;
    if (bench_time_copies_queued(h, &su->d[0], bytes, bench_warmup_for(n), n, r, &q)) {
        v[C_GPU][t] = q.us;
    } else {
        static bool told;
        if (!told)
            printf("# gpu column: not measured (%s)\n", bench_err);
        told = true;
        v[C_GPU][t] = 0;
    }
    for (int k = 0; k < N_COLUMNS; k++)
        if (v[k][t] > 0)
            bench_emit("latency", path, t, &bench_default_cfg, bytes, v[k][t],
                       bench_gbps((double)bytes, v[k][t]), kind[k]);
    bench_emit("latency", path, t, &bench_default_cfg, bytes, enq[t], 0, "enq");
    return bench_check_all(h, su, bytes, t, path);
}

static void run_size(struct bench_setup *su, size_t bytes, bool both)
{
    double v[N_COLUMNS][N_TRANSPORTS] = {{0}}, enq[N_TRANSPORTS] = {0};
    const char *check = bench_opt.check ? "ok" : "-";
    for (int t = 0; t < N_TRANSPORTS; t++) {
        if (!bench_opt.transport[t])
            continue;
        const char *c = measure(su, t, bytes, v, enq);
        if (strcmp(c, "FAIL") == 0)
            check = c;
    }
    char sz[32];
    printf("%10s", bench_fmt_size(bytes, sz, sizeof(sz)));
    for (int k = 0; k < N_COLUMNS; k++) {
        for (int t = 0; t < N_TRANSPORTS; t++)
            if (bench_opt.transport[t])
                printf(" %9.2f", v[k][t]);
        if (both)
            printf(" %7.3f", bench_ratio(v[k][T_TMA], v[k][T_CE]));
        if (bench_auto_vs_best(bench_opt.transport))
            printf(" %9.3f", bench_auto_best(v[k], false));
    }
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (bench_opt.transport[t])
            printf(" %9.2f", enq[t]);
    printf("  %s\n", check);
    bench_row_end();
}

void bench_run_latency(void)
{
    size_t lo = bench_opt.min_bytes > LAT_MIN ? bench_opt.min_bytes : LAT_MIN;
    size_t hi = bench_opt.max_bytes < LAT_MAX ? bench_opt.max_bytes : LAT_MAX;
    bool both = bench_opt.transport[T_CE] && bench_opt.transport[T_TMA];
    bool any = false;
    if (lo > hi) {
        printf("\n# latency: -b/-e leave no size in 4K..1M\n");
        return;
    }
    for (int p = P_LOCAL; p <= P_PULL; p++) {
        if (!bench_opt.path[p])
            continue;
        any = true;
        struct bench_setup su;
        if (!bench_setup_open(&su, p, hi))
            bench_fatal("latency, path %s: buffers", bench_path_names[p]);
        print_head(&su, both);
        for (size_t bytes = lo; bytes <= hi; bytes *= 2)
            run_size(&su, bytes, both);
        bench_setup_close(&su);
    }
    if (!any)
        printf("\n# latency: runs on local, push and pull; --path selects none of them\n");
}
