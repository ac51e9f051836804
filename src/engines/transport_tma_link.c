/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TMA batches across links: a batch whose every piece has one side in
 * pinned host memory is bound by PCIe, and one whose pieces go to or come
 * from peer GPUs by NVLink, not by the SMs. The router hands it the CTAs
 * that saturate each link (the table's `link` lines, b->link); this file
 * holds what the TMA engine does with them: how many CTAs a launch then
 * takes, whether the link kernel (kernels/link_copy.cu, host-to-GPU pieces
 * only) runs it, and how a dry run says so, from the sums of the
 * pipeline's pass. The batch and ring files (transport_tma_batch.c,
 * transport_tma_ring.c) apply it.
 */
#include <stdio.h>

#include "tma.h"

const struct p2pt_kernel p2pt__kernel_link_copy = {
    .name = "link_copy",
    .file = "kernels/link_copy.cu",
    .source = p2pt__link_copy_source,
    .entries = {"p2pt_link_copy", NULL},
    .min_cc = 90,
    /* The CTA's size the host launches with, whatever the build set. */
    .defines = {"-DP2PT_LINK_THREADS=" P2PT_XSTR(P2PT_LINK_THREADS), NULL},
};

/* The directions whose batches take the link kernel (1 h2d, 2 d2h; an
 * experiment's build may set it). h2d only: beside a GEMM the batch kernel
 * moved d2h batches at 0.70-0.76 of the contiguous copy on the same 3 CTAs
 * where the link kernel moved 0.52-0.58, and alone as fast
 * (bench/results/offload.md, "the link kernel"). */
#ifndef P2PT_LINK_DIRS
#define P2PT_LINK_DIRS 1
#endif

unsigned p2pt__tma_link_grid(const struct p2pt_batch *b, unsigned most)
{
    uint32_t cap = p2pt__batch_link_cap(b);
    return cap != 0 && cap < most ? cap : most;
}

/* Without PDL: the next batch on the stream would start while this one
 * runs and hold its link CTAs beside this one's, twice the SMs a compute
 * kernel beside them loses (bench/results/offload.md, step 17). */
struct p2pt_launch_settings p2pt__tma_batch_launch(const struct p2pt_handle *h,
                                                   const struct p2pt_batch *b)
{
    const struct p2pt_launch_settings *ls = p2pt__tma_launch(h);
    return p2pt__batch_link_cap(b) != 0 ? p2pt__launch_narrowed(ls) : *ls;
}

bool p2pt__tma_link_kernel(const struct p2pt_batch *b)
{
    return b->count > P2PT_BATCH_SMALL && p2pt__batch_link_cap(b) != 0 && b->skewed == 0 &&
           b->peer == 0 && (b->h2d == 0 || (P2PT_LINK_DIRS & 1)) &&
           (b->d2h == 0 || (P2PT_LINK_DIRS & 2));
}

void p2pt__tma_batch_describe(const struct p2pt_handle *h, const struct p2pt_batch *b,
                              const struct p2pt_batch_sink *s, char *why, size_t len)
{
    (void)s;
    const uint32_t cap = p2pt__batch_link_cap(b);
    if (cap != 0 && len > 0 && b->peer == 0)
        snprintf(why, len,
                 "; every piece crosses the host link (%zu h2d, %zu d2h), so at most %u CTAs "
                 "(the table's 'link' lines)%s",
                 b->h2d, b->d2h, cap,
                 p2pt__tma_link_kernel(b) ? ", through the link kernel (a warp a piece)" : "");
    else if (cap != 0 && len > 0)
        snprintf(why, len,
                 "; every piece crosses a link (%zu to or from a peer GPU, %zu h2d, %zu d2h), "
                 "so at most %u CTAs (the table's 'link' lines%s)",
                 b->peer, b->h2d, b->d2h, cap,
                 h->cfg.link_peer > 0 ? "; P2P_TRANSPORT_LINK_PEER for the peer link" : "");
}
