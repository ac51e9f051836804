/*
 * The batch entry points (p2pt.h): host descriptors and device
 * descriptors. Like a single copy: check the handle and every piece's
 * arguments, resolve the stream once, check the pieces' facts when
 * validation is on (a range check for pieces inside registered windows, a
 * driver query per piece otherwise), hand the batch to the transport.
 */
#include <stdio.h>
#include <string.h>

#include "handle.h"

/* The last error, prefixed with which piece it is about. */
static p2pt_status piece_fail(p2pt_status st, size_t i, size_t count)
{
    char why[1536];
    snprintf(why, sizeof(why), "%s", p2pt__last_error_text());
    return p2pt__fail(st, "p2pt_copy_batch_async: piece %zu of %zu: %s", i, count, why);
}

/* With validation on: can the transport do every piece? Pieces inside
 * windows registered for the stream's device are known to be mapped there;
 * the others are located one by one (the stream's context is current). */
static p2pt_status check_facts(const struct p2pt_handle *h, const struct p2pt_batch *b,
                               bool staged_ok)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_window_set *ws = p2pt__windows(h, b->device);
    int dst_hint = -1, src_hint = -1; /* destinations and sources sit in different windows */
    for (size_t i = 0; i < b->count; i++) {
        const p2pt_copy_desc *d = &b->descs[i];
        if (d->bytes == 0)
            continue;
        if (p2pt__window_holds(ws, (uint64_t)(uintptr_t)d->dst, d->bytes, &dst_hint) &&
            p2pt__window_holds(ws, (uint64_t)(uintptr_t)d->src, d->bytes, &src_hint))
            continue;
        struct p2pt_request r;
        memset(&r, 0, sizeof(r));
        r.dst = d->dst;
        r.src = d->src;
        r.bytes = d->bytes;
        r.stream = b->stream;
        r.ctx = b->ctx;
        r.device = b->device;
        if ((st = p2pt__locate(r.dst, r.device, &r.dst_side)) != P2PT_SUCCESS ||
            (st = p2pt__locate(r.src, r.device, &r.src_side)) != P2PT_SUCCESS ||
            (st = p2pt__refuse(&r, staged_ok)) != P2PT_SUCCESS)
            return piece_fail(st, i, b->count);
    }
    return st;
}

/* A transport without a batch slot: every piece through the single-copy
 * path (resolved, routed and validated one by one). */
static p2pt_status loop_copies(p2pt_handle *h, const struct p2pt_batch *b)
{
    for (size_t i = 0; i < b->count; i++) {
        const p2pt_copy_desc *d = &b->descs[i];
        p2pt_status st = p2pt_copy_async(h, d->dst, d->src, (size_t)d->bytes, b->stream);
        if (st != P2PT_SUCCESS)
            return piece_fail(st, i, b->count);
    }
    return P2PT_SUCCESS;
}

p2pt_status p2pt__batch_check(const char *fn, const p2pt_copy_desc *descs, size_t count,
                              void *stream, struct p2pt_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    if (descs == NULL && count != 0)
        return p2pt__fail(P2PT_INVALID_ARGUMENT, "%s: descs is NULL with count %zu", fn, count);
    memset(b, 0, sizeof(*b));
    b->descs = descs;
    b->count = count;
    b->stream = (CUstream)stream;
    for (size_t i = 0; i < count; i++) {
        if (descs[i].bytes > SIZE_MAX) {
            st = p2pt__fail(P2PT_INVALID_ARGUMENT, "%llu bytes do not fit in size_t",
                            (unsigned long long)descs[i].bytes);
            return piece_fail(st, i, count);
        }
        if ((st = p2pt__check_args(descs[i].dst, descs[i].src, (size_t)descs[i].bytes)) != 0)
            return piece_fail(st, i, count);
        b->pieces += descs[i].bytes != 0;
        b->bytes += descs[i].bytes;
    }
    return P2PT_SUCCESS;
}

p2pt_status p2pt_copy_batch_async(p2pt_handle *h, const p2pt_copy_desc *descs, size_t count,
                                  void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_batch_async");
    bool pushed = false;
    struct p2pt_batch b;

    if (st != P2PT_SUCCESS)
        return st;
    if (count == 0)
        return P2PT_SUCCESS;
    if ((st = p2pt__batch_check("p2pt_copy_batch_async", descs, count, stream, &b)) != 0)
        goto rejected;
    if (b.pieces != 0) {
        const struct p2pt_transport *t = NULL;
        P2PT_TRY(p2pt__stream_enter(b.stream, &b.ctx, &b.device, &pushed));
        P2PT_TRY(p2pt__route_batch(h, &b, &t, NULL, 0));
        if (t->copy_batch == NULL) {
            P2PT_TRY(loop_copies(h, &b));
        } else {
            if (h->cfg.validate &&
                (st = check_facts(h, &b, (t->caps & P2PT_CAP_STAGED) != 0)) != P2PT_SUCCESS)
                goto rejected;
            P2PT_TRY(t->copy_batch(h, &b));
        }
        atomic_fetch_add_explicit(&h->stats.engine_batches[p2pt__transport_index(t)], 1,
                                  memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&h->stats.batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->stats.batch_pieces, b.pieces, memory_order_relaxed);
out:
    p2pt__ctx_leave(pushed);
    return st;
rejected:
    p2pt__ctx_leave(pushed);
    atomic_fetch_add_explicit(&h->stats.rejected, 1, memory_order_relaxed);
    return st;
}

size_t p2pt_batch_workspace_bytes(uint32_t max_count)
{
    return sizeof(struct p2pt_batch_ws_head) + (size_t)max_count * sizeof(struct p2pt_batch_entry);
}

/* The last device batch whose buffers this thread checked: a framework
 * replays the same few, so each is checked once, not per call. Addresses
 * alone are not enough: memory freed and allocated again can come back at
 * the same address with another size, so each buffer's allocation id
 * (CU_POINTER_ATTRIBUTE_BUFFER_ID, unique over the process's lifetime) must
 * match too. */
struct checked_buffers {
    CUcontext ctx;
    const void *descs, *count, *workspace;
    uint32_t max_count;
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

p2pt_status p2pt_copy_batch_device_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                         const uint32_t *count, uint32_t max_count,
                                         void *workspace, void *stream)
{
    p2pt_status st = p2pt__check_handle(h, "p2pt_copy_batch_device_async");
    bool pushed = false;
    struct p2pt_device_batch b;

    if (st != P2PT_SUCCESS)
        return st;
    /* auto: the engine that reads descriptors from GPU memory. */
    const struct p2pt_transport *t = h->transport ? h->transport : &p2pt__transport_tma;
    if (t->copy_batch_device == NULL)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "p2pt_copy_batch_device_async: the %s transport cannot read "
                          "descriptors from GPU memory (only a kernel can); use "
                          "P2P_TRANSPORT=tma",
                          t->name);
    if (descs == NULL || count == NULL || workspace == NULL || max_count == 0 ||
        max_count > P2PT_DEVICE_BATCH_MAX || (uintptr_t)descs % 8 != 0 ||
        (uintptr_t)count % 4 != 0 || (uintptr_t)workspace % 16 != 0) {
        st = p2pt__fail(P2PT_INVALID_ARGUMENT,
                        "p2pt_copy_batch_device_async: descs %p, count %p, max_count %u, "
                        "workspace %p: expected non-NULL GPU addresses (descs 8-, count 4-, "
                        "workspace 16-byte aligned) and max_count from 1 to %u",
                        (const void *)descs, (const void *)count, max_count, workspace,
                        P2PT_DEVICE_BATCH_MAX);
        goto rejected;
    }
    memset(&b, 0, sizeof(b));
    b.descs = descs;
    b.count = count;
    b.max_count = max_count;
    b.workspace = workspace;
    b.stream = (CUstream)stream;
    P2PT_TRY(p2pt__stream_enter(b.stream, &b.ctx, &b.device, &pushed));
    b.windows = p2pt__windows(h, b.device);
    if (h->cfg.validate) {
        const unsigned long long id[3] = {buffer_id(descs), buffer_id(count),
                                          buffer_id(workspace)};
        bool same = last_checked.ctx == b.ctx && last_checked.descs == descs &&
                    last_checked.count == count && last_checked.workspace == workspace &&
                    last_checked.max_count == max_count;
        for (int i = 0; i < 3; i++)
            same = same && id[i] != 0 && id[i] == last_checked.id[i];
        if (!same) {
            if ((st = p2pt__check_range("p2pt_copy_batch_device_async: descs", descs,
                                        (size_t)max_count * sizeof(*descs), b.device)) != 0 ||
                (st = p2pt__check_range("p2pt_copy_batch_device_async: count", count,
                                        sizeof(*count), b.device)) != 0 ||
                (st = p2pt__check_range("p2pt_copy_batch_device_async: workspace", workspace,
                                        p2pt_batch_workspace_bytes(max_count), b.device)) != 0)
                goto rejected;
            last_checked = (struct checked_buffers){b.ctx, descs, count, workspace, max_count,
                                                    {id[0], id[1], id[2]}};
        }
    }
    P2PT_TRY(t->copy_batch_device(h, &b));
    atomic_fetch_add_explicit(&h->stats.device_batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->stats.engine_batches[p2pt__transport_index(t)], 1,
                              memory_order_relaxed);
out:
    p2pt__ctx_leave(pushed);
    return st;
rejected:
    p2pt__ctx_leave(pushed);
    atomic_fetch_add_explicit(&h->stats.rejected, 1, memory_order_relaxed);
    return st;
}
