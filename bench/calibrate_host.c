/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calibrate mode's pinned host memory: the `copy`, `graph` and `batch`
 * lists of h2d (sources in pinned host memory, destinations on the GPU)
 * and d2h (the reverse), and the `link` lines: the CTAs that saturate PCIe
 * in each direction. One pool of host memory from cuMemHostAlloc with
 * CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, mapped for the GPU
 * at the same address (unified addressing), stands in for one side of the
 * local setup's device pools: the source for h2d, the destination for d2h.
 * The sizes, the timing and the tie are mode_calibrate.c's, so these lists
 * follow the same conventions as the local ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calibrate.h"

#define LINK_PIECES 2048          /* pieces of a link batch */
#define LINK_PIECE (16 * KiB)     /* a KV block's layer */
#define LINK_TIE 0.03             /* within this of the best is as good */
static const int link_ctas[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};

/* GPU microseconds of one batch of `d` (median of 7 after a warm-up). */
static double link_batch_time(p2pt_handle *h, const p2pt_copy_desc *d, CUstream s)
{
    enum { REPEATS = 7 };
    double v[REPEATS];
    CUevent a = NULL, b = NULL;
    float ms = 0;
    CU(tcu.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&b, CU_EVENT_DEFAULT));
    P2(p2pt_copy_batch_async(h, d, LINK_PIECES, s));
    for (int r = 0; r < REPEATS; r++) {
        CU(tcu.cuEventRecord(a, s));
        P2(p2pt_copy_batch_async(h, d, LINK_PIECES, s));
        CU(tcu.cuEventRecord(b, s));
        CU(tcu.cuEventSynchronize(b));
        CU(tcu.cuEventElapsedTime(&ms, a, b));
        v[r] = ms * 1e3;
    }
    CU_RELEASE(tcu.cuEventDestroy(a));
    CU_RELEASE(tcu.cuEventDestroy(b));
    return bench_median(v, REPEATS);
fail:
    bench_fatal("calibrate, link CTAs");
}

/*
 * The `link` line of one direction: batches of LINK_PIECES pieces of 16 KiB
 * (a KV block's layer) at scattered GPU slots, through the batch kernel
 * under P2P_TRANSPORT_MAX_CTAS of each of link_ctas[]; the fewest CTAs
 * within LINK_TIE of the best bandwidth saturate the link. The handle is
 * `auto` over a table that sends batches to tma and has no link lines, so
 * no earlier cap shapes the measurement.
 */
static uint32_t cal_link(const struct bench_dir *d, size_t pool, const char *what)
{
    char table[] = "/tmp/p2pt-link-XXXXXX";
    const struct bench_gpu *g = d->g;
    int fd = mkstemp(table);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        bench_set_err("cannot write a table in /tmp");
        bench_fatal("calibrate, link CTAs");
    }
    fprintf(f, "p2pt-auto 1\narch sm_%d%d\ncopy local 0 tma\ncopy push 0 ce\n"
               "copy pull 0 ce\nbatch 0 tma\n",
            g->cc_major, g->cc_minor);
    fclose(f);
    p2pt_copy_desc *D = malloc(LINK_PIECES * sizeof(*D));
    if (D == NULL || pool < 2 * LINK_PIECES * LINK_PIECE)
        bench_fatal("calibrate, link CTAs: %s", D ? "pool too small" : "host memory");
    /* GPU slots scattered (every other one, in reverse), host side dense. */
    const bool d2h = strcmp(what, "d2h") == 0;
    for (size_t i = 0; i < LINK_PIECES; i++) {
        size_t gpu_at = (LINK_PIECES - 1 - i) * 2 * LINK_PIECE, host_at = i * LINK_PIECE;
        D[i].src = bench_dptr(d->src.base + (d2h ? gpu_at : host_at));
        D[i].dst = bench_dptr(d->dst.base + (d2h ? host_at : gpu_at));
        D[i].bytes = LINK_PIECE;
    }
    double gbps[P2PT_ARRAY_LEN(link_ctas)], best = 0;
    printf("\n# calibrate, link CTAs (%s): %d pieces of 16K through the batch kernel\n"
           "#%6s %10s\n",
           what, LINK_PIECES, "ctas", "GB/s");
    for (size_t c = 0; c < P2PT_ARRAY_LEN(link_ctas); c++) {
        char opts[512];
        snprintf(opts, sizeof(opts), "P2P_TRANSPORT_MAX_CTAS=%d P2P_TRANSPORT_AUTO_TABLE=%s",
                 link_ctas[c], table);
        p2pt_handle *h = NULL;
        p2pt_status st;
        if (!bench_handle_open("auto", opts, &h, NULL) || !bench_prepare_on(h, false, &st))
            bench_fatal("calibrate, link CTAs");
        double us = link_batch_time(h, D, d->s);
        p2pt_finalize(h);
        gbps[c] = bench_gbps((double)LINK_PIECES * LINK_PIECE, us);
        best = gbps[c] > best ? gbps[c] : best;
        printf("%7d %10.2f\n", link_ctas[c], gbps[c]);
        bench_emit("calibrate", what, T_TMA, NULL, LINK_PIECES * LINK_PIECE, us, gbps[c],
                   "link");
    }
    unlink(table);
    free(D);
    size_t pick = 0;
    while (gbps[pick] < (1 - LINK_TIE) * best)
        pick++;
    printf("# link %s %d: the fewest CTAs within %.0f%% of the best (%.2f GB/s)\n", what,
           link_ctas[pick], LINK_TIE * 100, best);
    return (uint32_t)link_ctas[pick];
}

void cal_host(struct p2pt_auto_table *tab)
{
    size_t largest = bench_opt.max_bytes > CAL_BATCH_LARGEST ? bench_opt.max_bytes
                                                             : CAL_BATCH_LARGEST;
    struct bench_setup su;
    void *host = NULL;

    if (tcu.cuMemHostAlloc == NULL) {
        bench_set_err("this driver has no cuMemHostAlloc");
        bench_fatal("calibrate, h2d and d2h");
    }
    if (!bench_setup_open(&su, P_LOCAL, largest))
        bench_fatal("calibrate, h2d and d2h: device buffers");
    if (!bench_use(su.d[0].g))
        goto fail;
    CU(tcu.cuMemHostAlloc(&host, su.pool + SLACK,
                          CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    /* Written once so that the copies read what a program would have
     * written (the values are never checked). */
    memset(host, 0x5a, su.pool + SLACK);

    struct bench_arena pinned = {su.d[0].g, (CUdeviceptr)(uintptr_t)host, su.pool};
    struct bench_dir h2d = su.d[0], d2h = su.d[0];
    h2d.src = pinned;
    d2h.dst = pinned;
    cal_copy_lists(&h2d, "h2d", &tab->copy[P2PT_AUTO_H2D], &tab->graph[P2PT_AUTO_H2D]);
    cal_copy_lists(&d2h, "d2h", &tab->copy[P2PT_AUTO_D2H], &tab->graph[P2PT_AUTO_D2H]);
    cal_batch_list(&h2d, su.pool, "h2d", &tab->host_batch[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_H2D)]);
    cal_batch_list(&d2h, su.pool, "d2h", &tab->host_batch[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_D2H)]);
    tab->link[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_H2D)] = cal_link(&h2d, su.pool, "h2d");
    tab->link[P2PT_AUTO_HOST_INDEX(P2PT_AUTO_D2H)] = cal_link(&d2h, su.pool, "d2h");

    CU_RELEASE(tcu.cuCtxSetCurrent(su.d[0].g->ctx));
    CU_RELEASE(tcu.cuMemFreeHost(host));
    bench_setup_close(&su);
    return;
fail:
    if (host != NULL)
        CU_RELEASE(tcu.cuMemFreeHost(host));
    bench_setup_close(&su);
    bench_fatal("calibrate, h2d and d2h: pinned host memory");
}
