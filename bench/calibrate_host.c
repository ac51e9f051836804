/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calibrate mode's pinned host memory: the `copy`, `graph` and `batch`
 * lists of h2d (sources in pinned host memory, destinations on the GPU)
 * and d2h (the reverse). One pool of host memory from cuMemHostAlloc with
 * CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE, mapped for the GPU
 * at the same address (unified addressing), stands in for one side of the
 * local setup's device pools: the source for h2d, the destination for d2h.
 * The sizes, the timing and the tie are mode_calibrate.c's, so these lists
 * follow the same conventions as the local ones.
 */
#include <string.h>

#include "calibrate.h"

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
