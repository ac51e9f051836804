/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How copies are timed: CUDA events around batches of copies (medians over
 * batches, after warm-up), the same batches queued behind a gate to see the
 * GPU's rate alone, and single copies as the host and the device see them.
 * The host clock and the median are bench_time.h's.
 */
#include <stdlib.h>

#include "bench.h"

int bench_iters_for(size_t bytes)
{
    if (bench_opt.iters)
        return bench_opt.iters;
    size_t n = 256 * MiB / bytes;
    return n < 5 ? 5 : n > 100 ? 100 : (int)n;
}

int bench_repeats_for(size_t bytes)
{
    if (bench_opt.repeats)
        return bench_opt.repeats;
    return bytes <= 16 * MiB ? 20 : bytes <= 256 * MiB ? 10 : 5;
}

int bench_warmup_for(int iters) { return bench_opt.warmup >= 0 ? bench_opt.warmup : iters; }

static bool enqueue(p2pt_handle *h, struct bench_dir *d, size_t bytes, bool switch_ctx)
{
    if (switch_ctx && !bench_use(d->g))
        goto fail;
    size_t off = bench_slot_offset(d->src.pool, bytes, d->next++);
    P2(p2pt_copy_async(h, bench_dptr(d->dst.base + off), bench_dptr(d->src.base + off), bytes,
                       d->s));
    return true;
fail:
    return false;
}

/* A gate: the stream waits (cuStreamWaitValue32) on a word of pinned host
 * memory that the host sets only once every copy of the batch is enqueued,
 * so the events time the GPU draining a full queue, whatever the host's
 * enqueue rate. */
struct gate {
    volatile uint32_t *word; /* pinned; its host address is its device address (UVA) */
};

/* Two events on `g`'s context, timing or not. */
static bool events_create(const struct bench_gpu *g, CUevent *a, CUevent *b, unsigned flags)
{
    if (!bench_use(g))
        goto fail;
    CU(tcu.cuEventCreate(a, flags));
    if (b != NULL)
        CU(tcu.cuEventCreate(b, flags));
    return true;
fail:
    return false;
}

static void events_destroy(const struct bench_gpu *g, CUevent a, CUevent b)
{
    if (a == NULL && b == NULL)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(g->ctx));
    if (a)
        CU_RELEASE(tcu.cuEventDestroy(a));
    if (b)
        CU_RELEASE(tcu.cuEventDestroy(b));
}

/*
 * Median per-copy time of `n` copies between two events on dirs[0]'s
 * stream, over `repeats` batches, after `warmup` copies. With two
 * directions (bidir) the second stream starts when the first one's start
 * event has passed and the first stream waits for the second one's end
 * before its end event: one start, the later of the two ends, both measured
 * on one GPU's clock (events of two GPUs cannot be compared). `out` is
 * zero when it fails.
 */
static bool time_copies_gated(p2pt_handle *h, struct bench_dir *dirs, int ndirs, size_t bytes,
                              int warmup, int n, int repeats, struct gate *gate,
                              struct bench_timing *out)
{
    CUevent start = NULL, end = NULL, peer_end = NULL;
    double *dev = calloc((size_t)repeats, sizeof(double));
    double *enq = calloc((size_t)repeats, sizeof(double));
    bool ok = false, two = ndirs > 1;
    struct bench_dir *a = &dirs[0], *b = &dirs[ndirs - 1];
    out->us = out->enq_us = 0;
    if (dev == NULL || enq == NULL) {
        bench_set_err("out of host memory");
        goto fail;
    }
    if (!events_create(a->g, &start, &end, CU_EVENT_DEFAULT) ||
        (two && !events_create(b->g, &peer_end, NULL, CU_EVENT_DISABLE_TIMING)) ||
        !bench_use(a->g))
        goto fail;
    for (int i = 0; i < warmup; i++)
        for (int k = 0; k < ndirs; k++)
            if (!enqueue(h, &dirs[k], bytes, two))
                goto fail;
    for (int k = 0; k < ndirs; k++) {
        if (!bench_use(dirs[k].g))
            goto fail;
        CU(tcu.cuStreamSynchronize(dirs[k].s));
    }
    for (int r = 0; r < repeats; r++) {
        if (!bench_use(a->g))
            goto fail;
        if (gate != NULL) {
            __atomic_store_n(gate->word, 0u, __ATOMIC_SEQ_CST);
            CU(tcu.cuStreamWaitValue32(a->s, (CUdeviceptr)(uintptr_t)gate->word, 1,
                                       CU_STREAM_WAIT_VALUE_GEQ));
        }
        CU(tcu.cuEventRecord(start, a->s));
        if (two) {
            if (!bench_use(b->g))
                goto fail;
            CU(tcu.cuStreamWaitEvent(b->s, start, 0));
            if (!bench_use(a->g))
                goto fail;
        }
        double t0 = bench_now_us();
        for (int i = 0; i < n; i++)
            for (int k = 0; k < ndirs; k++)
                if (!enqueue(h, &dirs[k], bytes, two))
                    goto fail;
        double t1 = bench_now_us();
        if (two) {
            if (!bench_use(b->g))
                goto fail;
            CU(tcu.cuEventRecord(peer_end, b->s));
            if (!bench_use(a->g))
                goto fail;
            CU(tcu.cuStreamWaitEvent(a->s, peer_end, 0));
        }
        CU(tcu.cuEventRecord(end, a->s));
        if (gate != NULL)
            __atomic_store_n(gate->word, 1u, __ATOMIC_SEQ_CST);
        CU(tcu.cuEventSynchronize(end));
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, start, end));
        dev[r] = (double)ms * 1e3 / n;
        enq[r] = (t1 - t0) / n;
    }
    out->us = bench_median(dev, repeats);
    out->enq_us = bench_median(enq, repeats);
    ok = true;
fail:
    if (gate != NULL) {
        /* Never leave the stream waiting on a gate nobody will open. */
        __atomic_store_n(gate->word, 1u, __ATOMIC_SEQ_CST);
        if (a->g->ctx) {
            CU_RELEASE(tcu.cuCtxSetCurrent(a->g->ctx));
            CU_RELEASE(tcu.cuStreamSynchronize(a->s));
        }
    }
    if (two && b->g->ctx)
        events_destroy(b->g, peer_end, NULL);
    events_destroy(a->g, start, end);
    free(dev);
    free(enq);
    return ok;
}

bool bench_time_copies(p2pt_handle *h, struct bench_dir *dirs, int ndirs, size_t bytes,
                       int warmup, int n, int repeats, struct bench_timing *out)
{
    return time_copies_gated(h, dirs, ndirs, bytes, warmup, n, repeats, NULL, out);
}

bool bench_time_copies_queued(p2pt_handle *h, struct bench_dir *d, size_t bytes, int warmup,
                              int n, int repeats, struct bench_timing *out)
{
    struct gate gate = {NULL};
    void *word = NULL;
    bool ok = false;
    out->us = out->enq_us = 0;
    if (tcu.cuStreamWaitValue32 == NULL) {
        bench_set_err("this driver has no cuStreamWaitValue32");
        return false;
    }
    if (!bench_use(d->g))
        return false;
    CU(tcu.cuMemAllocHost(&word, 64));
    gate.word = word;
    *gate.word = 1;
    ok = time_copies_gated(h, d, 1, bytes, warmup, n, repeats, &gate, out);
fail:
    if (word != NULL) {
        CU_RELEASE(tcu.cuCtxSetCurrent(d->g->ctx));
        CU_RELEASE(tcu.cuMemFreeHost(word));
    }
    return ok;
}

/*
 * One copy at a time, `samples` times, on an idle stream: the host's view
 * (just before p2pt_copy_async to the return of cuStreamSynchronize) and,
 * in a separate loop so the events do not slow the host's samples, the
 * device's view (events right around the copy). Medians; zero on failure.
 */
bool bench_time_single(p2pt_handle *h, struct bench_dir *d, size_t bytes, int samples,
                       double *host_us, double *dev_us)
{
    CUevent e0 = NULL, e1 = NULL;
    double *hs = calloc((size_t)samples, sizeof(double));
    double *ds = calloc((size_t)samples, sizeof(double));
    bool ok = false;
    *host_us = *dev_us = 0;
    if (hs == NULL || ds == NULL) {
        bench_set_err("out of host memory");
        goto fail;
    }
    if (!events_create(d->g, &e0, &e1, CU_EVENT_DEFAULT))
        goto fail;
    CU(tcu.cuStreamSynchronize(d->s));
    for (int i = 0; i < samples; i++) {
        size_t off = bench_slot_offset(d->src.pool, bytes, d->next++);
        double t0 = bench_now_us();
        P2(p2pt_copy_async(h, bench_dptr(d->dst.base + off), bench_dptr(d->src.base + off),
                           bytes, d->s));
        CU(tcu.cuStreamSynchronize(d->s));
        hs[i] = bench_now_us() - t0;
    }
    for (int i = 0; i < samples; i++) {
        size_t off = bench_slot_offset(d->src.pool, bytes, d->next++);
        float ms = 0;
        CU(tcu.cuEventRecord(e0, d->s));
        P2(p2pt_copy_async(h, bench_dptr(d->dst.base + off), bench_dptr(d->src.base + off),
                           bytes, d->s));
        CU(tcu.cuEventRecord(e1, d->s));
        CU(tcu.cuEventSynchronize(e1));
        CU(tcu.cuEventElapsedTime(&ms, e0, e1));
        ds[i] = (double)ms * 1e3;
    }
    *host_us = bench_median(hs, samples);
    *dev_us = bench_median(ds, samples);
    ok = true;
fail:
    events_destroy(d->g, e0, e1);
    free(hs);
    free(ds);
    return ok;
}
