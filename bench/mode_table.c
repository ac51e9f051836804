/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table mode: bandwidth per copy size, one table per path, every
 * selected transport in the same row (tma/ce when both, auto/best: auto over
 * the faster engine, when all three), each size checked after it is timed.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void print_head(int path, size_t pool)
{
    const struct bench_gpu *gpus = bench_gpus;
    char ps[32];
    static const char *const what[N_PATHS] = {
        "stream, source and destination on GPU %d",
        "stream and source on GPU %d, destination on GPU %d",
        "stream and destination on GPU %d, source on GPU %d",
        "GPU %d -> GPU %d and back at once, a stream on each; GB/s adds both directions",
    };
    printf("\n# table, path %s: ", bench_path_names[path]);
    printf(what[path], gpus[0].ordinal, gpus[1].ordinal);
    printf("; pool %s per side%s\n#%9s %12s", bench_fmt_size(pool, ps, sizeof(ps)),
           pool < L2_FACTOR * gpus[0].l2 ? " (under 4 x L2: GPU memory is short)" : "", "size",
           "bytes");
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (bench_opt.transport[t])
            printf(" %9s_us %7s_GB/s", bench_transport_names[t], bench_transport_names[t]);
    if (bench_opt.transport[T_CE] && bench_opt.transport[T_TMA])
        printf(" %8s", "tma/ce");
    if (bench_auto_vs_best(bench_opt.transport))
        printf(" %9s", "auto/best");
    printf("  check\n");
}

static void run_size(struct bench_setup *su, size_t bytes)
{
    const char *path = bench_path_names[su->path];
    int n = bench_iters_for(bytes), r = bench_repeats_for(bytes), w = bench_warmup_for(n);
    double bw[N_TRANSPORTS] = {0};
    const char *check = bench_opt.check ? "ok" : "-";
    char sz[32];
    printf("%10s %12zu", bench_fmt_size(bytes, sz, sizeof(sz)), bytes);
    bench_row_begin();
    for (int t = 0; t < N_TRANSPORTS; t++) {
        if (!bench_opt.transport[t])
            continue;
        struct bench_timing tm;
        if (!bench_time_copies(bench_handles[t], su->d, su->ndirs, bytes, w, n, r, &tm))
            bench_fatal("table, path %s, %s, %zu bytes", path, bench_transport_names[t], bytes);
        bw[t] = bench_gbps((double)bytes * su->ndirs, tm.us);
        printf(" %12.2f %12.2f", tm.us, bw[t]);
        bench_emit("table", path, t, &bench_default_cfg, bytes, tm.us, bw[t], "bw");
        const char *c = bench_check_all(bench_handles[t], su, bytes, t, path);
        if (strcmp(c, "FAIL") == 0)
            check = c;
    }
    if (bench_opt.transport[T_CE] && bench_opt.transport[T_TMA])
        printf(" %8.3f", bench_ratio(bw[T_TMA], bw[T_CE]));
    if (bench_auto_vs_best(bench_opt.transport))
        printf(" %9.3f", bench_auto_best(bw, true));
    printf("  %s\n", check);
    bench_row_end();
}

void bench_run_table(void)
{
    size_t largest = bench_opt.sizes[bench_opt.n_sizes - 1];
    for (int p = 0; p < N_PATHS; p++) {
        if (!bench_opt.path[p])
            continue;
        struct bench_setup su;
        if (!bench_setup_open(&su, p, largest))
            bench_fatal("table, path %s: buffers", bench_path_names[p]);
        print_head(p, su.pool);
        for (int i = 0; i < bench_opt.n_sizes; i++)
            run_size(&su, bench_opt.sizes[i]);
        bench_setup_close(&su);
    }
}
