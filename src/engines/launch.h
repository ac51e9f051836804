/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every kernel engine shares (launch.c): how many CTAs a launch may
 * use on a device, and the launch itself.
 */
#ifndef P2PT_LAUNCH_H
#define P2PT_LAUNCH_H

#include "handle.h"
#include "jit.h"

/* What a kernel engine's own settings say about its launches. These
 * helpers read no engine's settings: each engine hands in its own (the TMA
 * engine's P2P_TRANSPORT_MAX_CTAS and P2P_TRANSPORT_PDL). */
struct p2pt_launch_settings {
    int max_ctas; /* CTAs per launch at most; 0 = no cap */
    int pdl;      /* programmatic dependent launch, 0 or 1 */
};

/* `g` CTAs capped by ls->max_ctas and P2P_TRANSPORT_SM_BUDGET; at least
 * one. */
P2PT_INTERNAL unsigned p2pt__grid_capped(const struct p2pt_handle *h,
                                         const struct p2pt_launch_settings *ls, uint64_t g);
/* `per_sm` CTAs per SM of the module's device, capped by ls->max_ctas and
 * P2P_TRANSPORT_SM_BUDGET; at least one. */
P2PT_INTERNAL unsigned p2pt__kernel_grid(const struct p2pt_handle *h,
                                         const struct p2pt_launch_settings *ls,
                                         const struct p2pt_module *m, unsigned per_sm);
/* CTAs of `smem` bytes of dynamic shared memory each one launch may use on
 * the module's device: one or two per SM as that memory allows, capped the
 * same way. */
P2PT_INTERNAL unsigned p2pt__kernel_ctas(const struct p2pt_handle *h,
                                         const struct p2pt_launch_settings *ls,
                                         const struct p2pt_module *m, size_t smem);
/* Launch `fn` on `stream`, with programmatic dependent launch when ls->pdl
 * asks for it, no SM budget is set and the driver has cuLaunchKernelEx;
 * counted in the handle's kernel_launches and max_grid. A grid over the SM
 * budget is an internal error, never a launch. */
P2PT_INTERNAL p2pt_status p2pt__kernel_launch(struct p2pt_handle *h,
                                              const struct p2pt_launch_settings *ls,
                                              CUfunction fn, unsigned grid, unsigned block,
                                              unsigned smem, CUstream stream, void **params);

/* `ls` for a launch narrowed to leave the SMs to other work (a batch
 * across the host link on its link CTAs): without programmatic dependent
 * launch, as under an SM budget (p2pt__kernel_launch). */
static inline struct p2pt_launch_settings p2pt__launch_narrowed(const struct p2pt_launch_settings *ls)
{
    struct p2pt_launch_settings n = *ls;
    n.pdl = 0;
    return n;
}

#endif /* P2PT_LAUNCH_H */
