/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sweep mode: TMA bandwidth at --sweep-bytes for every --chunk x
 * --stages x --max-ctas, on local and push, next to the copy engine.
 *
 * Each combination gets a handle of its own, tuned through
 * p2pt_init_args.options: the process environment is never touched, so
 * what the user set in P2P_TRANSPORT_* still tunes everything else and
 * nothing has to be put back. The sweep is of the bulk-copy ring, so its
 * handles keep large local copies off the streaming kernel.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* After a failed copy: carry on only if the contexts still work (a fault
 * would poison every later row). */
static void contexts_alive(bool peer)
{
    for (int i = 0; i <= (peer ? 1 : 0); i++) {
        if (!bench_use(&bench_gpus[i]))
            bench_fatal("sweep");
        CUresult r = tcu.cuCtxSynchronize();
        if (r != CUDA_SUCCESS) {
            bench_fail_cu(r, "cuCtxSynchronize", __FILE__, __LINE__);
            bench_fatal("sweep: GPU %d cannot go on after that error", bench_gpus[i].ordinal);
        }
    }
}

/* One row: p2pt_init/p2pt_prepare errors and failed timings are printed in
 * it; the sweep goes on with the next combination. */
static void combo(struct bench_setup *su, size_t chunk, int stages, int max_ctas, double ce_bw,
                  int n, int r, int w)
{
    const char *path = bench_path_names[su->path];
    size_t bytes = bench_opt.sweep_bytes;
    char c[32], m[16], smem[32], options[160];
    snprintf(m, sizeof(m), "%d", max_ctas);
    printf("%10s %7d %9s ", bench_fmt_size(chunk, c, sizeof(c)), stages, max_ctas ? m : "auto");
    bench_row_begin();
    if (chunk > P2PT_CHUNK_MAX / (size_t)stages) {
        char lim[32];
        printf("skipped: chunk x stages = %s > %s, the shared memory a CTA can have\n",
               bench_fmt_size(chunk * (size_t)stages, smem, sizeof(smem)),
               bench_fmt_size(P2PT_CHUNK_MAX, lim, sizeof(lim)));
        bench_row_end();
        return;
    }
    snprintf(options, sizeof(options),
             "P2P_TRANSPORT_CHUNK_BYTES=%zu P2P_TRANSPORT_STAGES=%d P2P_TRANSPORT_MAX_CTAS=%d "
             "P2P_TRANSPORT_STREAM_MIN=0",
             chunk, stages, max_ctas);
    p2pt_handle *h = NULL;
    struct bench_tma_cfg cfg;
    p2pt_status st;
    if (!bench_handle_open("tma", options, &h, &cfg) || !bench_prepare_on(h, false, &st)) {
        printf("error: %s\n", bench_err);
        bench_row_end();
        if (h)
            p2pt_finalize(h);
        return;
    }
    struct bench_timing tm;
    if (!bench_time_copies(h, su->d, 1, bytes, w, n, r, &tm)) {
        printf("error: %s\n", bench_err);
        bench_row_end();
        p2pt_finalize(h);
        contexts_alive(su->path != P_LOCAL);
        return;
    }
    double bw = bench_gbps((double)bytes, tm.us);
    bench_emit("sweep", path, T_TMA, &cfg, bytes, tm.us, bw, "bw");
    char what[96];
    snprintf(what, sizeof(what), "sweep, path %s, chunk %s, %d stages, max CTAs %s", path, c,
             stages, max_ctas ? m : "auto");
    const char *check = bench_check_all(h, su, bytes, T_TMA, what);
    p2pt_properties pr;
    memset(&pr, 0, sizeof(pr));
    pr.size = sizeof(pr);
    char note[64] = "";
    if (p2pt_get_properties(h, &pr) == P2PT_SUCCESS && pr.ce_fallbacks > 0)
        snprintf(note, sizeof(note), "  (%llu copies went to the copy engine)",
                 (unsigned long long)pr.ce_fallbacks);
    printf("%12.2f %12.2f %8.3f  %s%s\n", tm.us, bw, bench_ratio(bw, ce_bw), check, note);
    bench_row_end();
    p2pt_finalize(h);
}

void bench_run_sweep(void)
{
    const struct bench_opts *o = &bench_opt;
    size_t bytes = o->sweep_bytes;
    int n = bench_iters_for(bytes), r = bench_repeats_for(bytes), w = bench_warmup_for(n);
    bool any = false;
    for (int p = P_LOCAL; p <= P_PUSH; p++) {
        if (!o->path[p])
            continue;
        any = true;
        const char *path = bench_path_names[p];
        struct bench_setup su;
        if (!bench_setup_open(&su, p, bytes))
            bench_fatal("sweep, path %s: buffers", path);
        struct bench_timing ce;
        if (!bench_time_copies(bench_handles[T_CE], su.d, 1, bytes, w, n, r, &ce))
            bench_fatal("sweep, path %s, ce", path);
        double ce_bw = bench_gbps((double)bytes, ce.us);
        bench_emit("sweep", path, T_CE, NULL, bytes, ce.us, ce_bw, "bw");
        char what[32];
        snprintf(what, sizeof(what), "sweep, path %s", path);
        const char *ce_check = bench_check_all(bench_handles[T_CE], &su, bytes, T_CE, what);
        bench_row_end();
        char sz[32];
        printf("\n# sweep, path %s, %s copies (GPU %d -> GPU %d): ce %.2f us, %.2f GB/s "
               "(check %s); TMA settings below\n",
               path, bench_fmt_size(bytes, sz, sizeof(sz)), su.d[0].src.g->ordinal,
               su.d[0].dst.g->ordinal, ce.us, ce_bw, ce_check);
        printf("#%9s %7s %9s %12s %12s %8s  check\n", "chunk", "stages", "max_ctas", "tma_us",
               "tma_GB/s", "tma/ce");
        for (int ci = 0; ci < o->n_chunk; ci++)
            for (int si = 0; si < o->n_stages; si++)
                for (int mi = 0; mi < o->n_max_ctas; mi++)
                    combo(&su, o->chunk[ci], o->stages[si], o->max_ctas[mi], ce_bw, n, r, w);
        bench_setup_close(&su);
    }
    if (!any)
        printf("\n# sweep: runs on local and push; --path selects neither\n");
}
