/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A device batch in parts that signal apart
 * (p2pt_copy_batch_device_marks_async, docs/SIGNALS.md): part j is pieces
 * [j * max_count / K, (j + 1) * max_count / K) under the count, and
 * semaphore j of each run counts one signal once part j is visible.
 *
 * Without a GPU: every bad n_marks named with nothing enqueued; over the
 * fake driver one launch and the counters. On one GPU: odd pieces at odd
 * offsets into a guarded buffer, the count short of max_count (the last
 * parts hold nothing to copy and still signal), a second stream that waits
 * for each part alone and copies what that part wrote (never poison), and
 * a captured graph replayed three times (three signals a semaphore). On two
 * GPUs: the same parts pushed into the peer's buffer, signalling its
 * semaphores, its stream taking each part as it lands.
 */
#include "gpu_test.h"

Test(signal_marks_fake, bad_parts_are_named_and_nothing_is_enqueued)
{
    gt_use_fake_driver();
    CUdeviceptr sem, descs, count, ws;
    GT_CHECK(tcu.cuMemAlloc(&sem, 4096));
    GT_CHECK(tcu.cuMemAlloc(&descs, 4096));
    GT_CHECK(tcu.cuMemAlloc(&count, 64));
    GT_CHECK(tcu.cuMemAlloc(&ws, 4096));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle("tma");
    void *sems[2] = {(void *)sem, (void *)(sem + 1024)};
    const p2pt_copy_desc *d = (const p2pt_copy_desc *)descs;
    const uint32_t *n = (const uint32_t *)count;
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, sems, 2, 0, s),
                     P2PT_INVALID_ARGUMENT, "n_marks 0");
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 64, (void *)ws, sems, 2,
                                                        P2PT_BATCH_MARKS_MAX + 1, s),
                     P2PT_INVALID_ARGUMENT, "n_marks 17");
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 3, (void *)ws, sems, 2, 4, s),
                     P2PT_INVALID_ARGUMENT, "at most max_count");
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, NULL, 0, 2, s),
                     P2PT_INVALID_ARGUMENT, "n_signals at least 1");
    void *odd[1] = {(void *)(sem + 8)};
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, odd, 1, 2, s),
                     P2PT_INVALID_ARGUMENT, "16-byte aligned");
    cr_assert_eq(gt_props(h).kernel_launches, 0, "nothing enqueued");
    /* One part with no signal is the plain batch; parts are one launch. */
    GT_OK(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, NULL, 0, 1, s));
    GT_OK(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, sems, 2, 4, s));
    p2pt_properties p = gt_props(h);
    cr_assert_eq(p.kernel_launches, 2);
    cr_assert_eq(p.device_batches, 2);
    p2pt_finalize(h);
    /* The copy engine reads no descriptors in GPU memory. */
    h = gt_handle("ce");
    gt_expect_status(p2pt_copy_batch_device_marks_async(h, d, n, 8, (void *)ws, sems, 2, 4, s),
                     P2PT_NOT_SUPPORTED, "cannot read descriptors");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

/* ------------------------------------------------------------ on GPUs */

#define PIECES 203 /* max_count */
#define COUNT 181  /* the count: the last parts are short or empty */
#define PARTS 7
#define PIECE 5003 /* bytes; odd */
#define STRIDE (PIECE + 21)

struct parts {
    struct gt_buf src, dst, log;
    CUdeviceptr descs, count, ws, sems;
    p2pt_copy_desc d[PIECES];
};

/* Piece i: PIECE bytes from src + i * STRIDE + 3 to dst + i * STRIDE + 7. */
static void parts_setup(struct parts *P, CUcontext src_ctx, CUcontext dst_ctx)
{
    GT_CHECK(tcu.cuCtxSetCurrent(dst_ctx));
    P->dst = gt_alloc((size_t)PIECES * STRIDE + 16);
    P->log = gt_alloc((size_t)PIECES * STRIDE + 16);
    GT_CHECK(tcu.cuMemAlloc(&P->sems, PARTS * P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(P->sems, 0, PARTS * P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuCtxSynchronize()); /* zeroed before any wait reads them */
    GT_CHECK(tcu.cuCtxSetCurrent(src_ctx));
    P->src = gt_alloc((size_t)PIECES * STRIDE + 16);
    gt_fill(&P->src, 4242);
    for (int i = 0; i < PIECES; i++)
        P->d[i] = (p2pt_copy_desc){(void *)(P->dst.ptr + (size_t)i * STRIDE + 7),
                                   (void *)(P->src.ptr + (size_t)i * STRIDE + 3), PIECE};
    GT_CHECK(tcu.cuMemAlloc(&P->descs, sizeof(P->d)));
    GT_CHECK(tcu.cuMemcpyHtoD(P->descs, P->d, sizeof(P->d)));
    GT_CHECK(tcu.cuMemAlloc(&P->count, 4));
    uint32_t c = COUNT;
    GT_CHECK(tcu.cuMemcpyHtoD(P->count, &c, 4));
    GT_CHECK(tcu.cuMemAlloc(&P->ws, p2pt_batch_workspace_bytes(PIECES)));
    GT_CHECK(tcu.cuCtxSynchronize());
}

/* Part j's pieces under the count: [lo, hi). */
static void part_range(int j, uint32_t *lo, uint32_t *hi)
{
    *lo = (uint32_t)((uint64_t)j * PIECES / PARTS);
    uint32_t end = (uint32_t)((uint64_t)(j + 1) * PIECES / PARTS);
    *hi = end < COUNT ? end : COUNT;
    if (*lo > *hi)
        *lo = *hi;
}

/* The sender's handle: the two buffers registered as windows of device
 * `ordinal`, so that its batches check their pieces against them. */
static void parts_register(p2pt_handle *h, int ordinal, const struct parts *P)
{
    GT_OK(p2pt_window_register(h, ordinal, (void *)P->src.base, P->src.n + 2 * GT_GUARD));
    GT_OK(p2pt_window_register(h, ordinal, (void *)P->dst.base, P->dst.n + 2 * GT_GUARD));
}

/* The batch in PARTS parts on the sender's stream, each signalling its
 * own semaphore of the run at P->sems. */
static void send_parts(p2pt_handle *h, const struct parts *P, CUstream s)
{
    void *sems[1] = {(void *)P->sems};
    GT_OK(p2pt_copy_batch_device_marks_async(h, (const p2pt_copy_desc *)P->descs,
                                             (const uint32_t *)P->count, PIECES, (void *)P->ws,
                                             sems, 1, PARTS, s));
}

/* On the receiver's stream: for each part, wait for its semaphore alone,
 * then copy the bytes that part wrote into the log (on that stream, so a
 * part read before it landed would leave poison in the log). */
static void take_parts(p2pt_handle *h, const struct parts *P, CUstream s)
{
    for (int j = 0; j < PARTS; j++) {
        GT_OK(p2pt_wait_async(h, (void *)(P->sems + (size_t)j * P2PT_SEMAPHORE_BYTES), 1, s));
        uint32_t lo, hi;
        part_range(j, &lo, &hi);
        if (lo < hi) {
            const size_t at = (size_t)lo * STRIDE, bytes = (size_t)(hi - lo) * STRIDE;
            GT_OK(p2pt_copy_async(h, (void *)(P->log.ptr + at), (void *)(P->dst.ptr + at), bytes,
                                  s));
        }
    }
}

/* dst and the log: the first COUNT pieces' bytes, poison everywhere else;
 * every semaphore counted `times` signals, and the status record says
 * COUNT copied. */
static void parts_check(const struct parts *P, CUcontext dst_ctx, CUcontext src_ctx, int times)
{
    GT_CHECK(tcu.cuCtxSetCurrent(dst_ctx));
    const size_t total = P->dst.n + 2 * GT_GUARD;
    unsigned char *want = malloc(total), *got = malloc(total), *src = malloc(P->src.n);
    cr_assert(want && got && src);
    GT_CHECK(tcu.cuMemcpyDtoH(src, P->src.ptr, P->src.n));
    memset(want, GT_POISON, total);
    for (int i = 0; i < COUNT; i++)
        memcpy(want + GT_GUARD + (size_t)i * STRIDE + 7, src + (size_t)i * STRIDE + 3, PIECE);
    const struct gt_buf *bufs[2] = {&P->dst, &P->log};
    for (int b = 0; b < 2; b++) {
        GT_CHECK(tcu.cuMemcpyDtoH(got, bufs[b]->base, total));
        for (size_t k = 0; k < total; k++)
            if (got[k] != want[k]) {
                long rel = (long)k - GT_GUARD;
                cr_assert_fail("%s: byte %ld (piece %ld) is 0x%02x, expected 0x%02x",
                               b ? "the log of the parts" : "dst", rel, rel / STRIDE,
                               (unsigned)got[k], (unsigned)want[k]);
            }
    }
    for (int j = 0; j < PARTS; j++) {
        uint64_t v[4];
        GT_CHECK(tcu.cuMemcpyDtoH(v, P->sems + (size_t)j * P2PT_SEMAPHORE_BYTES, sizeof(v)));
        cr_assert_eq(v[0], (uint64_t)times << 32, "part %d: value %llu, %d signals", j,
                     (unsigned long long)v[0], times);
        cr_assert_eq(v[2], 0, "part %d: a wait timed out", j);
    }
    GT_CHECK(tcu.cuCtxSetCurrent(src_ctx));
    p2pt_batch_status st;
    GT_CHECK(tcu.cuMemcpyDtoH(&st, P->ws, sizeof(st)));
    cr_assert_eq(st.copied, COUNT);
    cr_assert_eq(st.skipped, 0);
    free(want);
    free(got);
    free(src);
}

Test(signal_marks_gpu, each_part_is_in_when_its_semaphore_says_so_and_replays_count)
{
    gt_require_gpus(1);
    CUcontext ctx = gt_use_device(0);
    struct parts P;
    parts_setup(&P, ctx, ctx);
    CUstream s, r;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuStreamCreate(&r, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle("tma");
    /* Kernels loaded before any wait spins: a module loaded while a wait
     * holds the GPU would wait for it, and the signal it waits for would
     * never be enqueued (docs/SIGNALS.md). */
    GT_OK(p2pt_prepare(h, 0));
    parts_register(h, 0, &P);
    /* The batch alone: every part's semaphore holds one signal after it. */
    send_parts(h, &P, s);
    GT_CHECK(tcu.cuStreamSynchronize(s));
    uint64_t v[PARTS * 4];
    GT_CHECK(tcu.cuMemcpyDtoH(v, P.sems, sizeof(v)));
    for (int j = 0; j < PARTS; j++)
        cr_assert_eq(v[4 * j], 1ull << 32,
                     "part %d's semaphore holds %#llx after the batch (parts 0-6: %#llx %#llx "
                     "%#llx %#llx %#llx %#llx %#llx)", j, (unsigned long long)v[4 * j],
                     (unsigned long long)v[0], (unsigned long long)v[4], (unsigned long long)v[8],
                     (unsigned long long)v[12], (unsigned long long)v[16],
                     (unsigned long long)v[20], (unsigned long long)v[24]);
    /* Then the receiver's waits enqueued first: each holds until its part. */
    gt_poison(&P.dst);
    take_parts(h, &P, r);
    take_parts(h, &P, r); /* the first round's signals are there: one wait each passes */
    send_parts(h, &P, s);
    GT_CHECK(tcu.cuStreamSynchronize(s));
    GT_CHECK(tcu.cuStreamSynchronize(r));
    parts_check(&P, ctx, ctx, 2);

    /* Captured, replayed three times: every replay signals every part again. */
    if (tcu.cuStreamBeginCapture != NULL) {
        CUgraph g;
        CUgraphExec x;
        GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        send_parts(h, &P, s);
        take_parts(h, &P, s);
        GT_CHECK(tcu.cuStreamEndCapture(s, &g));
        GT_CHECK(tcu.cuGraphInstantiateWithFlags(&x, g, 0));
        gt_poison(&P.dst);
        gt_poison(&P.log);
        for (int i = 0; i < 3; i++)
            GT_CHECK(tcu.cuGraphLaunch(x, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        parts_check(&P, ctx, ctx, 5);
        tcu.cuGraphExecDestroy(x);
        tcu.cuGraphDestroy(g);
    }
    p2pt_finalize(h);
}

Test(signal_marks_gpu, parts_pushed_to_a_peer_land_in_order_of_their_semaphores)
{
    gt_require_gpus(2);
    gt_enable_peers();
    CUcontext a = gt_use_device(0), b = gt_use_device(1);
    struct parts P;
    parts_setup(&P, a, b);
    CUstream sa, sb;
    GT_CHECK(tcu.cuCtxSetCurrent(b));
    GT_CHECK(tcu.cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
    p2pt_handle *hb = gt_handle("tma");
    GT_OK(p2pt_prepare(hb, 1)); /* before its waits spin (above) */
    take_parts(hb, &P, sb);
    GT_CHECK(tcu.cuCtxSetCurrent(a));
    GT_CHECK(tcu.cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
    p2pt_handle *ha = gt_handle("tma");
    GT_OK(p2pt_prepare(ha, 0));
    parts_register(ha, 0, &P);
    send_parts(ha, &P, sa);
    GT_CHECK(tcu.cuStreamSynchronize(sa));
    GT_CHECK(tcu.cuCtxSetCurrent(b));
    GT_CHECK(tcu.cuStreamSynchronize(sb));
    parts_check(&P, b, a, 1);
    p2pt_finalize(ha);
    p2pt_finalize(hb);
}
