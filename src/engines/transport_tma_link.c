/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TMA batches across links: a batch whose every piece has one side in
 * pinned host memory is bound by PCIe, and one whose pieces go to or come
 * from peer GPUs by NVLink, not by the SMs. The router hands it the CTAs
 * that saturate each link (the table's `link` lines, b->link); this file
 * holds what the TMA engine does with them: how many CTAs a launch then
 * takes, whether the link kernel (kernels/link_copy.cu: host-to-GPU pieces
 * on all the link's CTAs, 4 KiB or more on average, dealt evenly enough to
 * its warps) runs it rather than the batch kernel, and how a dry run says
 * so, from the sums of the pipeline's pass. The batch and ring files
 * (transport_tma_batch.c, transport_tma_ring.c) apply it.
 */
#include <limits.h>
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

/* How far past its share of the bytes one warp may be dealt before the
 * batch goes to the batch kernel, which deals 8 KiB tiles. Measured on an
 * H200 with one 4 KiB piece in 64 made larger, all of them on one warp of
 * 64: the link kernel was 2.5 % faster at 1.97x (8 KiB) and the batch
 * kernel 2.8 % faster at 2.91x (12 KiB), 1.6x at 7.2x
 * (bench/results/offload.md, "Link kernel or batch kernel"; an
 * experiment's build may set it). */
#ifndef P2PT_LINK_HEAVIEST
#define P2PT_LINK_HEAVIEST 2.0
#endif

/* The smallest mean piece the link kernel takes: a warp copies one piece
 * a bus round trip, where the batch kernel's warps take small tiles two at
 * a time. On an H200, 16384 x 2 KiB took 927-935 us through the link
 * kernel and 689-702 through the batch kernel; from 4 KiB on the two were
 * level (the same section). */
#define P2PT_LINK_MIN_MEAN 4096

unsigned p2pt__tma_link_kernel_grid(const struct p2pt_batch *b, unsigned most)
{
    enum { WARPS = P2PT_LINK_THREADS / 32 };
    const uint64_t count = b->blocks != NULL ? b->count : b->pieces;
    const uint64_t ctas = (count + WARPS - 1) / WARPS;
    unsigned grid = p2pt__tma_link_grid(b, most);
    if (grid > P2PT_LINK_SLOTS / WARPS)
        grid = P2PT_LINK_SLOTS / WARPS;
    return ctas < grid ? (unsigned)ctas : grid;
}

/* The bytes of the heaviest of `warps` warps, each dealt the slots of its
 * index modulo `warps` (kernels/link_copy.cu); *all, every slot's. */
static uint64_t heaviest_warp(const uint64_t *spread, unsigned warps, uint64_t *all)
{
    uint64_t most = 0;
    *all = 0;
    for (unsigned w = 0; w < warps && w < P2PT_LINK_SLOTS; w++) {
        uint64_t sum = 0;
        for (unsigned s = w; s < P2PT_LINK_SLOTS; s += warps)
            sum += spread[s];
        most = sum > most ? sum : most;
        *all += sum;
    }
    return most;
}

enum p2pt_link_choice p2pt__tma_link_choice(const struct p2pt_batch *b, const uint64_t *spread,
                                            unsigned most, double *heavy)
{
    const uint32_t cap = p2pt__batch_link_cap(b);
    if (heavy != NULL)
        *heavy = 0;
    if (!(b->count > P2PT_BATCH_SMALL && cap != 0 && b->skewed == 0 && b->peer == 0 &&
          (b->h2d == 0 || (P2PT_LINK_DIRS & 1)) && (b->d2h == 0 || (P2PT_LINK_DIRS & 2))) ||
        b->pieces == 0)
        return P2PT_LINK_NOT_FOR_IT;
    /* On fewer CTAs than the link's the batch kernel moved 4 KiB pieces
     * 1.2-1.4x faster (6 and 4 of 8 on an H200), 1.8x on 3. */
    if (most < cap)
        return P2PT_LINK_NARROW;
    if (b->bytes / b->pieces < P2PT_LINK_MIN_MEAN)
        return P2PT_LINK_SMALL;
    const unsigned grid = p2pt__tma_link_kernel_grid(b, most);
    const unsigned warps = grid * (P2PT_LINK_THREADS / 32);
    if (spread == NULL || grid == 0)
        return P2PT_LINK_NOT_FOR_IT;
    uint64_t all = 0;
    const uint64_t most_bytes = heaviest_warp(spread, warps, &all);
    /* Slots that do not add up to the batch were not summed by its pass:
     * the batch kernel, which needs no dealing. */
    if (all != b->bytes)
        return P2PT_LINK_NOT_FOR_IT;
    const double h = (double)most_bytes * warps / (double)b->bytes;
    if (heavy != NULL)
        *heavy = h;
    return h <= P2PT_LINK_HEAVIEST ? P2PT_LINK_KERNEL : P2PT_LINK_UNEVEN;
}

void p2pt__tma_batch_describe(const struct p2pt_handle *h, const struct p2pt_batch *b,
                              const struct p2pt_batch_sink *s, char *why, size_t len)
{
    const uint32_t cap = p2pt__batch_link_cap(b);
    char kernel[160] = "";
    double heavy = 0;
    /* The grid a launch would take: the CTA cap and the SM budget narrow it
     * (the module's SM count, which a dry run has not loaded, bounds it far
     * above any link's cap). */
    const unsigned most = p2pt__grid_capped(h, p2pt__tma_launch(h), UINT_MAX);
    switch (p2pt__tma_link_choice(b, s->spread, most, &heavy)) {
    case P2PT_LINK_KERNEL:
        snprintf(kernel, sizeof(kernel), ", through the link kernel (a warp a piece)");
        break;
    case P2PT_LINK_NARROW:
        snprintf(kernel, sizeof(kernel),
                 ", through the batch kernel (a CTA cap or SM budget leaves %u of the link's %u "
                 "CTAs, and the link kernel wants them all)",
                 most, cap);
        break;
    case P2PT_LINK_SMALL:
        snprintf(kernel, sizeof(kernel),
                 ", through the batch kernel (pieces of %llu bytes on average; the link kernel "
                 "wants %u or more)",
                 (unsigned long long)(b->bytes / b->pieces), P2PT_LINK_MIN_MEAN);
        break;
    case P2PT_LINK_UNEVEN:
        snprintf(kernel, sizeof(kernel),
                 ", through the batch kernel (dealt a piece a warp, one warp would carry %.1fx "
                 "its share of the bytes)",
                 heavy);
        break;
    case P2PT_LINK_NOT_FOR_IT:
        break;
    }
    if (cap != 0 && len > 0 && b->peer == 0)
        snprintf(why, len,
                 "; every piece crosses the host link (%zu h2d, %zu d2h), so at most %u CTAs "
                 "(the table's 'link' lines)%s",
                 b->h2d, b->d2h, cap, kernel);
    else if (cap != 0 && len > 0)
        snprintf(why, len,
                 "; every piece crosses a link (%zu to or from a peer GPU, %zu h2d, %zu d2h), "
                 "so at most %u CTAs (the table's 'link' lines%s)",
                 b->peer, b->h2d, b->d2h, cap,
                 h->cfg.link_peer > 0 ? "; P2P_TRANSPORT_LINK_PEER for the peer link" : "");
}
