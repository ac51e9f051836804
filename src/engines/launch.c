/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every kernel engine shares: the grid a launch may use on a device
 * and the launch itself (with programmatic dependent launch when asked).
 */
#include <string.h>

#include "launch.h"

/* Never more than two CTAs per SM: one elected thread per CTA keeps its
 * whole ring in flight, so more CTAs only split the same shared memory. */
#define MAX_CTAS_PER_SM 2
#define PER_CTA_SMEM_OVERHEAD 1024 /* driver-reserved shared memory per CTA */

unsigned p2pt__kernel_grid(const struct p2pt_handle *h, const struct p2pt_launch_settings *ls,
                           const struct p2pt_module *m, unsigned per_sm)
{
    return p2pt__grid_capped(h, ls, (uint64_t)per_sm * (uint64_t)m->sm_count);
}

unsigned p2pt__grid_capped(const struct p2pt_handle *h, const struct p2pt_launch_settings *ls,
                           uint64_t g)
{
    if (ls->max_ctas > 0 && (uint64_t)ls->max_ctas < g)
        g = (uint64_t)ls->max_ctas;
    if (h->cfg.sm_budget > 0 && (uint64_t)h->cfg.sm_budget < g)
        g = (uint64_t)h->cfg.sm_budget;
    return g == 0 ? 1u : (unsigned)g;
}

unsigned p2pt__kernel_ctas(const struct p2pt_handle *h, const struct p2pt_launch_settings *ls,
                           const struct p2pt_module *m, size_t smem)
{
    uint64_t per_sm = (uint64_t)m->smem_per_sm / (smem + PER_CTA_SMEM_OVERHEAD);
    if (per_sm > MAX_CTAS_PER_SM)
        per_sm = MAX_CTAS_PER_SM;
    if (per_sm == 0)
        per_sm = 1;
    return p2pt__kernel_grid(h, ls, m, (unsigned)per_sm);
}

/* One launch, with programmatic dependent launch when asked for and the
 * driver has cuLaunchKernelEx (kernels/tma_copy.cu says what the kernel does
 * with it): a copy right behind another one in the stream launches while
 * the first drains. Measured in bench/results/latency.md (back-to-back small
 * copies). */
p2pt_status p2pt__kernel_launch(struct p2pt_handle *h, const struct p2pt_launch_settings *ls,
                                CUfunction fn, unsigned grid, unsigned block, unsigned smem,
                                CUstream stream, void **params)
{
    p2pt_status st = P2PT_SUCCESS;
    /* The budget is a promise to the caller: no launch is ever wider, and
     * budget 0 never gets here (the router sends such work to the copy
     * engine). */
    if (h->cfg.sm_budget >= 0 && grid > (unsigned)h->cfg.sm_budget)
        return p2pt__fail(P2PT_INTERNAL_ERROR,
                          "a launch of %u CTAs under P2P_TRANSPORT_SM_BUDGET=%d", grid,
                          h->cfg.sm_budget);
    /* Under an SM budget, no programmatic dependent launch: a launch that
     * starts early behind the previous one holds its CTAs beside that
     * one's, twice the budget (bench/results/offload.md, step 17). */
    if (ls->pdl && h->cfg.sm_budget < 0 && p2pt__cu.cuLaunchKernelEx != NULL) {
        CUlaunchAttribute pdl;
        memset(&pdl, 0, sizeof(pdl));
        pdl.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        pdl.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig lc;
        memset(&lc, 0, sizeof(lc));
        lc.gridDimX = grid;
        lc.gridDimY = lc.gridDimZ = 1;
        lc.blockDimX = block;
        lc.blockDimY = lc.blockDimZ = 1;
        lc.sharedMemBytes = smem;
        lc.hStream = stream;
        lc.attrs = &pdl;
        lc.numAttrs = 1;
        P2PT_CU(p2pt__cu.cuLaunchKernelEx(&lc, fn, params, NULL));
    } else {
        P2PT_CU(p2pt__cu.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, smem, stream, params,
                                        NULL));
    }
    atomic_fetch_add_explicit(&h->stats.kernel_launches, 1, memory_order_relaxed);
    uint32_t widest = atomic_load_explicit(&h->stats.max_grid, memory_order_relaxed);
    while (grid > widest && !atomic_compare_exchange_weak_explicit(
                                &h->stats.max_grid, &widest, grid, memory_order_relaxed,
                                memory_order_relaxed))
        ;
out:
    return st;
}
