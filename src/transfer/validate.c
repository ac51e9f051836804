/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Validation: with P2P_TRANSPORT_VALIDATE=1, the resolved facts of an
 * operation against what the engine the router chose can do. A refusal is
 * status 4 with the remedy; the lookups behind the facts happened in
 * resolve, whatever the setting, so only the verdict depends on it.
 */
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "args.h"
#include "batch.h"
#include "handle.h"
#include "transport.h"
#include "alloc_memo.h"
#include "signal_op.h"
#include "validate.h"

/* `fallback` is the engine that runs any request, which the remedy names
 * (the handle's configuration has it from the registry). Memory only the
 * copy engine moves passes for an engine that stages (P2PT_CAP_STAGED); no
 * engine moves pool or VMM memory without an access grant. */
static p2pt_status refuse_side(const struct p2pt_request *r, const struct p2pt_side *s,
                               const char *name, const void *p, bool staged, const char *fallback)
{
    if (s->reach == P2PT_REACH_MAPPED || (p2pt__reach_ce_only(s->reach) && staged))
        return P2PT_SUCCESS;
    return p2pt__unreachable(name, p, s, r->device,
                             p2pt__reach_ce_only(s->reach) ? fallback : NULL);
}

p2pt_status p2pt__refuse(const struct p2pt_request *r, bool staged, const char *fallback)
{
    p2pt_status st = refuse_side(r, &r->dst_side, "dst", r->dst, staged, fallback);
    if (st == P2PT_SUCCESS)
        st = refuse_side(r, &r->src_side, "src", r->src, staged, fallback);
    return st;
}

p2pt_status p2pt__piece_sides(const struct p2pt_batch *b, size_t i, const p2pt_copy_desc *d,
                              struct p2pt_alloc_memo *memo, int hints[2], struct p2pt_side *dst,
                              struct p2pt_side *src)
{
    p2pt_status st = P2PT_SUCCESS;
    if ((st = p2pt__memo_side(memo, (uint64_t)(uintptr_t)d->dst, &hints[0], dst)) != P2PT_SUCCESS ||
        (st = p2pt__memo_side(memo, (uint64_t)(uintptr_t)d->src, &hints[1], src)) != P2PT_SUCCESS)
        return p2pt__piece_fail(st, b, i);
    return P2PT_SUCCESS;
}

p2pt_status p2pt__piece_check(const struct p2pt_batch *b, size_t i, const p2pt_copy_desc *d,
                              bool staged, const char *fallback, const struct p2pt_side *dst,
                              const struct p2pt_side *src)
{
    p2pt_status st = P2PT_SUCCESS;
    const uint64_t a_dst = (uint64_t)(uintptr_t)d->dst, a_src = (uint64_t)(uintptr_t)d->src;
    const struct p2pt_side *sides[2] = {dst, src};
    const uint64_t at[2] = {a_dst, a_src};
    for (int k = 0; k < 2; k++)
        if (p2pt__side_straddles(sides[k], at[k], d->bytes))
            return p2pt__piece_fail(
                p2pt__fail(P2PT_INVALID_ARGUMENT,
                           "%s [%p, +%llu) runs past the end of its allocation [%p, +%llu): "
                           "a piece must lie inside one allocation",
                           k == 0 ? "dst" : "src", (void *)(uintptr_t)at[k],
                           (unsigned long long)d->bytes, (void *)(uintptr_t)sides[k]->start,
                           (unsigned long long)sides[k]->size),
                b, i);
    struct p2pt_request r;
    r.dst = d->dst;
    r.src = d->src;
    r.device = b->device;
    r.dst_side = *dst;
    r.src_side = *src;
    if ((st = p2pt__refuse(&r, staged, fallback)) != P2PT_SUCCESS)
        return p2pt__piece_fail(st, b, i);
    return P2PT_SUCCESS;
}

/* The last device batch whose buffers this thread checked: a framework
 * replays the same few, so each is checked once, not per call. Addresses
 * alone are not enough: memory freed and allocated again can come back at
 * the same address with another size, so each buffer's allocation id
 * (CU_POINTER_ATTRIBUTE_BUFFER_ID, unique over the process's lifetime) must
 * match too. */
struct checked_buffers {
    CUcontext ctx;
    const void *descs, *count, *workspace; /* blocks: the mapping for descs */
    uint32_t max_count;
    uint32_t pairs; /* blocks: the mapping's rows; 0: descriptors */
    unsigned long long id[3];
};
static _Thread_local struct checked_buffers last_checked;

/* p's allocation id; 0 where the driver knows no allocation (never equal to
 * a remembered id, and the range check then says what is wrong). */
static unsigned long long buffer_id(const void *p)
{
    unsigned long long id = 0;
    if (p2pt__cu.cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                       (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
        return 0;
    return id;
}

p2pt_status p2pt__validate_copy(const struct p2pt_handle *h, const struct p2pt_request *r,
                                const struct p2pt_transport *t)
{
    if (!h->cfg.validate)
        return P2PT_SUCCESS;
    return p2pt__refuse(r, (t->caps & P2PT_CAP_STAGED) != 0, h->cfg.fallback);
}

/* The buffers of device batch `b` where the driver says they are: its
 * descriptors, count and workspace, or, for blocks, the mapping and the
 * whole workspace (the descriptors and the count lie in it). */
static p2pt_status check_buffers(const struct p2pt_device_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    char what[96];
    const struct p2pt_device_blocks *k = b->blocks;
    if (k != NULL) {
        snprintf(what, sizeof(what), "%s: mapping", b->fn);
        P2PT_TRY(p2pt__check_range(what, k->mapping, (size_t)k->pairs * 2 * sizeof(int64_t),
                                   b->device, NULL));
        snprintf(what, sizeof(what), "%s: workspace", b->fn);
        P2PT_TRY(p2pt__check_range(what, b->workspace,
                                   p2pt__blocks_workspace_size(k->n_layers, k->pairs),
                                   b->device, NULL));
        goto out;
    }
    snprintf(what, sizeof(what), "%s: descs", b->fn);
    P2PT_TRY(p2pt__check_range(what, b->descs, (size_t)b->max_count * sizeof(*b->descs),
                               b->device, NULL));
    snprintf(what, sizeof(what), "%s: count", b->fn);
    P2PT_TRY(p2pt__check_range(what, b->count, sizeof(*b->count), b->device, NULL));
    snprintf(what, sizeof(what), "%s: workspace", b->fn);
    P2PT_TRY(p2pt__check_range(what, b->workspace, p2pt__batch_workspace_size(b->max_count),
                               b->device, NULL));
out:
    return st;
}

p2pt_status p2pt__validate_device_batch(const struct p2pt_handle *h,
                                        const struct p2pt_device_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    if (!h->cfg.validate)
        return P2PT_SUCCESS;
    const void *first = b->blocks != NULL ? (const void *)b->blocks->mapping : b->descs;
    const uint32_t pairs = b->blocks != NULL ? b->blocks->pairs : 0;
    const unsigned long long id[3] = {buffer_id(first), buffer_id(b->count),
                                      buffer_id(b->workspace)};
    bool same = last_checked.ctx == b->ctx && last_checked.descs == first &&
                last_checked.count == b->count && last_checked.workspace == b->workspace &&
                last_checked.max_count == b->max_count && last_checked.pairs == pairs;
    for (int i = 0; i < 3; i++)
        same = same && id[i] != 0 && id[i] == last_checked.id[i];
    if (same)
        return P2PT_SUCCESS;
    P2PT_TRY(check_buffers(b));
    last_checked = (struct checked_buffers){b->ctx,         first,        b->count,
                                            b->workspace,   b->max_count, pairs,
                                            {id[0], id[1], id[2]}};
out:
    return st;
}

/* Each of n semaphore addresses: `bytes` the stream's device reaches. */
static p2pt_status check_signals(const char *fn, void *const *signals, uint32_t n, size_t bytes,
                                 int device)
{
    p2pt_status st = P2PT_SUCCESS;
    char what[96];
    for (uint32_t i = 0; i < n && st == P2PT_SUCCESS; i++) {
        snprintf(what, sizeof(what), "%s: signals[%u]", fn, i);
        st = p2pt__check_range(what, signals[i], bytes, device, NULL);
    }
    return st;
}

p2pt_status p2pt__validate_batch_signals(const struct p2pt_handle *h,
                                         const struct p2pt_device_batch *b)
{
    if (!h->cfg.validate)
        return P2PT_SUCCESS;
    return check_signals(b->fn, b->signals, b->n_signals,
                         (size_t)P2PT_SEMAPHORE_BYTES * b->n_marks, b->device);
}

/* Every range a count exchange's kernel reads or writes: memory the
 * stream's device reaches, inside one allocation. */
static p2pt_status validate_count_rows(const struct p2pt_signal *s)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_count_exchange *x = s->exchange;
    const size_t cells = (size_t)x->rows * x->cols;
    char what[96];
    if (cells != 0) {
        snprintf(what, sizeof(what), "%s: routing", s->fn);
        P2PT_TRY(p2pt__check_range(what, x->routing, cells, s->device, NULL));
        if (x->upto != NULL) {
            snprintf(what, sizeof(what), "%s: upto", s->fn);
            P2PT_TRY(p2pt__check_range(what, x->upto, cells * 8, s->device, NULL));
        }
    }
    for (uint32_t i = 0; i < x->n_puts; i++) {
        snprintf(what, sizeof(what), "%s: puts[%u]", s->fn, i);
        P2PT_TRY(p2pt__check_range(what, x->puts[i], (size_t)x->cols * 8, s->device, NULL));
    }
    st = check_signals(s->fn, x->signals, x->n_signals, P2PT_SEMAPHORE_BYTES, s->device);
out:
    return st;
}

p2pt_status p2pt__validate_signal(const struct p2pt_handle *h, const struct p2pt_signal *s)
{
    p2pt_status st = P2PT_SUCCESS;
    struct p2pt_side side;
    char what[96];
    if (!h->cfg.validate)
        return P2PT_SUCCESS;
    if (s->exchange != NULL)
        return validate_count_rows(s);
    snprintf(what, sizeof(what), "%s: sem", s->fn);
    P2PT_TRY(p2pt__check_range(what, s->sem, P2PT_SEMAPHORE_BYTES, s->device, &side));
    if (s->wait && (side.host || side.device != s->device))
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "%s: sem %p is %s, and a stream of device %d waits on memory of its own "
                        "device: the semaphore lives with its waiter, and its signallers reach "
                        "it through peer access or a shared window",
                        s->fn, s->sem, side.host ? "host memory" : "another GPU's memory",
                        s->device);
out:
    return st;
}
