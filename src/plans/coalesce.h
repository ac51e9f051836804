/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the copy engine takes a host batch (coalesce.c): pure arithmetic,
 * CUDA-free, unit-tested. Every operation submitted to the copy engine
 * costs the driver microseconds, so pieces are grouped before they are
 * submitted. Pieces of a batch run in any order by contract, so grouping
 * them is allowed:
 *   - pieces adjacent on both sides become one copy;
 *   - runs of at least P2PT_COALESCE_MIN_ROWS equal pieces whose
 *     destinations and sources advance by constant strides become one 2D
 *     copy (a KV-cache block's layers sit at a constant stride on the GPU
 *     and side by side in the host pool).
 * A run never leaves the allocations of its first piece, on either side:
 * one driver operation must not span two allocations, even where their
 * addresses touch.
 */
#ifndef P2PT_COALESCE_H
#define P2PT_COALESCE_H

#include "common.h"

/* The largest row pitch a 2D copy takes (CU_DEVICE_ATTRIBUTE_MAX_PITCH on
 * Hopper: 2^31 - 1). */
#define P2PT_COALESCE_MAX_PITCH 0x7fffffffull
/* The fewest rows a run needs to become a 2D copy. Any two equal pieces
 * whose addresses both rise look like a run of two, and on an H100 a batch
 * of such pairs (64 KiB pieces at random host slots) moved 0.63 of the
 * contiguous copy as 2D copies against 0.91 as plain ones
 * (bench/results/offload.md): a shorter run goes back to its pieces. */
#define P2PT_COALESCE_MIN_ROWS 4

/* One copy-engine operation: `height` rows of `width` bytes, row k from
 * src + k * spitch to dst + k * dpitch. height 1: a plain copy (pitches 0). */
struct p2pt_copy_group {
    uint64_t dst, src, width, height, dpitch, spitch;
};

/* Is `g` a 2D copy? (A run whose rows are adjacent on both sides is one
 * contiguous copy of width * height bytes.) */
static inline bool p2pt__group_is_2d(const struct p2pt_copy_group *g)
{
    return g->height > 1 && !(g->dpitch == g->width && g->spitch == g->width);
}

/* The grouping of one batch: groups written to `g` (room for as many as
 * the batch has pieces), in the order their first pieces came. */
struct p2pt_coalesce {
    struct p2pt_copy_group *g;
    size_t n;
    bool open;                     /* g[n] is the run being extended */
    uint64_t dlo, dhi, slo, shi;   /* the allocations of its first piece */
};

static inline void p2pt__coalesce_init(struct p2pt_coalesce *c, struct p2pt_copy_group *g)
{
    c->g = g;
    c->n = 0;
    c->open = false;
}

/* Close the open run g[n]: a 2D run of fewer than P2PT_COALESCE_MIN_ROWS
 * rows goes back to its pieces, a plain copy each (there is room: never
 * more groups than pieces). Returns the new count. */
static inline size_t p2pt__coalesce_close(struct p2pt_coalesce *c)
{
    struct p2pt_copy_group r = c->g[c->n];
    if (p2pt__group_is_2d(&r) && r.height < P2PT_COALESCE_MIN_ROWS)
        for (uint64_t k = 0; k < r.height; k++)
            c->g[c->n++] = (struct p2pt_copy_group){r.dst + k * r.dpitch, r.src + k * r.spitch,
                                                    r.width, 1, 0, 0};
    else
        c->n++;
    return c->n;
}

/*
 * Add the piece of `n` > 0 bytes from `s` to `d`. [dlo, dhi) and [slo, shi)
 * are the allocations that hold its two sides (dhi == 0: unknown, and the
 * piece stays a group of its own). Inline: it runs once per piece in the
 * pass over the descriptors.
 */
static inline void p2pt__coalesce_add(struct p2pt_coalesce *c, uint64_t d, uint64_t s,
                                      uint64_t n, uint64_t dlo, uint64_t dhi, uint64_t slo,
                                      uint64_t shi)
{
    struct p2pt_copy_group *r = &c->g[c->n];
    if (c->open && dhi != 0 && dlo == c->dlo && dhi == c->dhi && slo == c->slo &&
        shi == c->shi) {
        if (r->height == 1 && d == r->dst + r->width && s == r->src + r->width) {
            r->width += n; /* adjacent on both sides */
            return;
        }
        if (n == r->width && r->height == 1 && d > r->dst && s > r->src &&
            d - r->dst >= n && s - r->src >= n && d - r->dst <= P2PT_COALESCE_MAX_PITCH &&
            s - r->src <= P2PT_COALESCE_MAX_PITCH) {
            r->dpitch = d - r->dst;
            r->spitch = s - r->src;
            r->height = 2;
            return;
        }
        if (n == r->width && r->height > 1 && d == r->dst + r->height * r->dpitch &&
            s == r->src + r->height * r->spitch) {
            r->height++;
            return;
        }
    }
    if (c->open)
        r = &c->g[p2pt__coalesce_close(c)];
    *r = (struct p2pt_copy_group){d, s, n, 1, 0, 0};
    c->open = dhi != 0;
    c->dlo = dlo;
    c->dhi = dhi;
    c->slo = slo;
    c->shi = shi;
    if (!c->open)
        c->n++; /* a piece with unknown bounds is a group of its own */
}

/* Close the last run; returns the number of groups. */
static inline size_t p2pt__coalesce_end(struct p2pt_coalesce *c)
{
    if (c->open) {
        p2pt__coalesce_close(c);
        c->open = false;
    }
    return c->n;
}

#endif /* P2PT_COALESCE_H */
