/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signals (docs/SIGNALS.md): a signal adds one to a semaphore once
 * everything before it on its stream is visible to the semaphore's GPU; a
 * wait holds its stream until `count` more signals than at its last wait
 * arrive, and a device batch may end with a signal per destination.
 *
 * Without a GPU: every bad argument named with nothing enqueued; a budget
 * of no kernel refuses both with status 6; over the fake driver, explain
 * names the kernel engine whatever P2P_TRANSPORT says, the counters count,
 * and a wait on another GPU's memory is refused. On two GPUs: 1,000 rounds
 * of a ping-pong whose data changes every round (GPU 0 pushes a round's
 * bytes with a device batch that signals GPU 1; GPU 1 waits, copies what
 * arrived into that round's slot of a log, and signals GPU 0 back before
 * GPU 0 may overwrite it): every slot holds its own round's bytes, never a
 * stale one; and a captured graph of the exchange, replayed, waits for
 * that replay's signal (the receiver's replay launched first stays
 * pending until the sender's runs).
 */
#include <time.h>

#include "gpu_test.h"

Test(signals_cpu, a_dead_handle_is_refused_naming_the_call)
{
    gt_expect_status(p2pt_signal_async(NULL, (void *)0x1000, NULL), P2PT_INVALID_ARGUMENT,
                     "p2pt_signal_async");
    gt_expect_status(p2pt_wait_async(NULL, (void *)0x1000, 1, NULL), P2PT_INVALID_ARGUMENT,
                     "p2pt_wait_async");
}

Test(signals_fake, arguments_budget_explain_and_counters)
{
    gt_use_fake_driver();
    CUdeviceptr sem, descs, count, ws;
    GT_CHECK(tcu.cuMemAlloc(&sem, 4096));
    GT_CHECK(tcu.cuMemAlloc(&descs, 4096));
    GT_CHECK(tcu.cuMemAlloc(&count, 64));
    GT_CHECK(tcu.cuMemAlloc(&ws, 4096));
    const CUdeviceptr peer = gt_peer_alloc(4096);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    const char *transports[3] = {"ce", "tma", "auto"};
    for (int t = 0; t < 3; t++) {
        p2pt_handle *h = gt_handle_opts(transports[t], NULL);
        gt_expect_status(p2pt_signal_async(h, NULL, s), P2PT_INVALID_ARGUMENT, "sem");
        gt_expect_status(p2pt_signal_async(h, (void *)(sem + 8), s), P2PT_INVALID_ARGUMENT,
                         "16-byte aligned");
        gt_expect_status(p2pt_wait_async(h, (void *)sem, 0, s), P2PT_INVALID_ARGUMENT, "count 0");
        gt_expect_status(p2pt_wait_async(h, (void *)sem, (1u << 31) + 1, s), P2PT_INVALID_ARGUMENT,
                         "1 to 2147483648");
        /* The waiter's semaphore is its own device's memory. */
        gt_expect_status(p2pt_wait_async(h, (void *)peer, 1, s), P2PT_INVALID_ARGUMENT,
                         "another GPU's memory");
        void *many[P2PT_BATCH_SIGNALS_MAX + 1];
        for (int i = 0; i <= P2PT_BATCH_SIGNALS_MAX; i++)
            many[i] = (void *)sem;
        /* ce reads no GPU descriptors: refused before its arguments. */
        const bool ce = t == 0;
        gt_expect_status(p2pt_copy_batch_device_signal_async(
                             h, (const p2pt_copy_desc *)descs, (const uint32_t *)count, 1,
                             (void *)ws, many, P2PT_BATCH_SIGNALS_MAX + 1, s),
                         ce ? P2PT_NOT_SUPPORTED : P2PT_INVALID_ARGUMENT,
                         ce ? "cannot read descriptors" : "up to 64 semaphore");
        p2pt_properties p = gt_props(h);
        cr_assert_eq(p.kernel_launches, 0, "%s: nothing enqueued", transports[t]);

        /* A signal to a peer's semaphore and a wait on its own: the kernel
         * engine, whatever P2P_TRANSPORT says. */
        p2pt_choice c = {sizeof(c)};
        GT_OK(p2pt_explain_signal(h, (void *)peer, s, &c));
        cr_assert_str_eq(c.transport, "tma", "%s: %s", transports[t], c.reason);
        cr_assert_str_eq(c.path, "signal");
        GT_OK(p2pt_explain_wait(h, (void *)sem, 3, s, &c));
        cr_assert_str_eq(c.path, "wait");
        cr_assert(strstr(c.reason, "one-thread kernel") != NULL, "%s", c.reason);
        GT_OK(p2pt_signal_async(h, (void *)peer, s));
        GT_OK(p2pt_wait_async(h, (void *)sem, 3, s));
        p = gt_props(h);
        cr_assert_eq(p.signals, 1);
        cr_assert_eq(p.waits, 1);
        cr_assert_eq(p.kernel_launches, 2);
        p2pt_finalize(h);
    }
    /* No kernel allowed: status 6 with the reason, for both. */
    p2pt_handle *h = gt_handle_opts("auto", "P2P_TRANSPORT_SM_BUDGET=0");
    gt_expect_status(p2pt_signal_async(h, (void *)peer, s), P2PT_NOT_SUPPORTED, "SM_BUDGET=0");
    gt_expect_status(p2pt_wait_async(h, (void *)sem, 1, s), P2PT_NOT_SUPPORTED, "SM_BUDGET=0");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

/* ------------------------------------------------------------ two GPUs */

#define SLOT 65536     /* a round's bytes */
#define ROUNDS 1000

struct side {
    CUcontext ctx;
    CUstream s;
    p2pt_handle *h;
};

static void wait_done(CUstream s)
{
    GT_CHECK(tcu.cuStreamSynchronize(s));
}

Test(signals_gpu, a_thousand_rounds_of_changing_data_never_show_a_stale_byte)
{
    gt_require_gpus(2);
    gt_enable_peers();
    struct side a, b;
    /* GPU 0: the rounds' sources, a send buffer's descriptors, the
     * semaphore GPU 1 signals back. GPU 1: the receive buffer, its
     * semaphore, and the log of every round. */
    a.ctx = gt_use_device(0);
    CUdeviceptr src, descs, count, ws, back;
    GT_CHECK(tcu.cuMemAlloc(&src, (size_t)ROUNDS * SLOT));
    GT_CHECK(tcu.cuMemAlloc(&descs, (size_t)ROUNDS * sizeof(p2pt_copy_desc)));
    GT_CHECK(tcu.cuMemAlloc(&count, 4));
    GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(1)));
    GT_CHECK(tcu.cuMemAlloc(&back, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(back, 0, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuStreamCreate(&a.s, CU_STREAM_NON_BLOCKING));
    b.ctx = gt_use_device(1);
    CUdeviceptr recv, sem, logbuf;
    GT_CHECK(tcu.cuMemAlloc(&recv, SLOT));
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemAlloc(&logbuf, (size_t)ROUNDS * SLOT));
    GT_CHECK(tcu.cuMemsetD8(logbuf, GT_POISON, (size_t)ROUNDS * SLOT));
    GT_CHECK(tcu.cuStreamCreate(&b.s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuCtxSynchronize());

    /* Every round's source bytes differ; round r's descriptor sends them. */
    unsigned char *host = malloc((size_t)ROUNDS * SLOT);
    gt_random(host, (size_t)ROUNDS * SLOT, 2026);
    gt_use_device(0);
    GT_CHECK(tcu.cuMemcpyHtoD(src, host, (size_t)ROUNDS * SLOT));
    p2pt_copy_desc *d = malloc(ROUNDS * sizeof(*d));
    for (int r = 0; r < ROUNDS; r++)
        d[r] = (p2pt_copy_desc){(void *)recv, (void *)(src + (size_t)r * SLOT), SLOT};
    GT_CHECK(tcu.cuMemcpyHtoD(descs, d, ROUNDS * sizeof(*d)));
    uint32_t one = 1;
    GT_CHECK(tcu.cuMemcpyHtoD(count, &one, 4));
    a.h = gt_handle("tma");
    GT_OK(p2pt_window_register(a.h, 0, (void *)src, (size_t)ROUNDS * SLOT));
    GT_OK(p2pt_window_register(a.h, 0, (void *)recv, SLOT));
    gt_use_device(1);
    b.h = gt_handle("tma");

    void *to_b[1] = {(void *)sem};
    for (int r = 0; r < ROUNDS; r++) {
        GT_CHECK(tcu.cuCtxSetCurrent(a.ctx));
        if (r > 0)
            GT_OK(p2pt_wait_async(a.h, (void *)back, 1, a.s)); /* B has taken round r-1 */
        GT_OK(p2pt_copy_batch_device_signal_async(a.h, (const p2pt_copy_desc *)(descs +
                                                      (size_t)r * sizeof(p2pt_copy_desc)),
                                                  (const uint32_t *)count, 1, (void *)ws, to_b,
                                                  1, a.s));
        GT_CHECK(tcu.cuCtxSetCurrent(b.ctx));
        GT_OK(p2pt_wait_async(b.h, (void *)sem, 1, b.s));
        GT_OK(p2pt_copy_async(b.h, (void *)(logbuf + (size_t)r * SLOT), (void *)recv, SLOT,
                              b.s));
        GT_OK(p2pt_signal_async(b.h, (void *)back, b.s));
    }
    wait_done(b.s);
    GT_CHECK(tcu.cuCtxSetCurrent(a.ctx));
    wait_done(a.s);
    GT_CHECK(tcu.cuCtxSetCurrent(b.ctx));
    unsigned char *got = malloc((size_t)ROUNDS * SLOT);
    GT_CHECK(tcu.cuMemcpyDtoH(got, logbuf, (size_t)ROUNDS * SLOT));
    for (int r = 0; r < ROUNDS; r++)
        if (memcmp(got + (size_t)r * SLOT, host + (size_t)r * SLOT, SLOT) != 0) {
            int stale = r > 0 && memcmp(got + (size_t)r * SLOT, host + (size_t)(r - 1) * SLOT,
                                        SLOT) == 0;
            cr_assert_fail("round %d's slot does not hold its bytes%s", r,
                           stale ? ": it holds round r-1's (a stale read)" : "");
        }
    uint64_t timeouts = 1;
    GT_CHECK(tcu.cuMemcpyDtoH(&timeouts, sem + P2PT_SEMAPHORE_TIMEOUTS, 8));
    cr_assert_eq(timeouts, 0);
    cr_assert_eq(gt_props(b.h).waits, ROUNDS);
    p2pt_finalize(b.h);
    p2pt_finalize(a.h);
    free(host);
    free(got);
    free(d);
}

Test(signals_gpu, a_replayed_graph_waits_for_that_replays_signal)
{
    gt_require_gpus(2);
    gt_enable_peers();
    if (tcu.cuStreamBeginCapture == NULL)
        cr_skip_test("the driver has no stream capture");
    struct side a, b;
    b.ctx = gt_use_device(1);
    CUdeviceptr sem, flagged;
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemAlloc(&flagged, 4096));
    GT_CHECK(tcu.cuStreamCreate(&b.s, CU_STREAM_NON_BLOCKING));
    b.h = gt_handle("tma");
    GT_OK(p2pt_prepare(b.h, 1));
    a.ctx = gt_use_device(0);
    CUdeviceptr src;
    GT_CHECK(tcu.cuMemAlloc(&src, 4096));
    GT_CHECK(tcu.cuStreamCreate(&a.s, CU_STREAM_NON_BLOCKING));
    a.h = gt_handle("tma");
    GT_OK(p2pt_prepare(a.h, 0));

    /* A: copy its bytes into B's buffer, then signal B. B: wait. */
    CUgraph ga, gb;
    CUgraphExec xa, xb;
    GT_CHECK(tcu.cuStreamBeginCapture(a.s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GT_OK(p2pt_copy_async(a.h, (void *)flagged, (void *)src, 4096, a.s));
    GT_OK(p2pt_signal_async(a.h, (void *)sem, a.s));
    GT_CHECK(tcu.cuStreamEndCapture(a.s, &ga));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&xa, ga, 0));
    GT_CHECK(tcu.cuCtxSetCurrent(b.ctx));
    GT_CHECK(tcu.cuStreamBeginCapture(b.s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GT_OK(p2pt_wait_async(b.h, (void *)sem, 1, b.s));
    GT_CHECK(tcu.cuStreamEndCapture(b.s, &gb));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&xb, gb, 0));

    for (int replay = 0; replay < 5; replay++) {
        /* The receiver's replay first: it must wait for this replay's signal,
         * not pass on the last one's. */
        GT_CHECK(tcu.cuCtxSetCurrent(b.ctx));
        GT_CHECK(tcu.cuGraphLaunch(xb, b.s));
        struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
        CUresult q = tcu.cuStreamQuery(b.s);
        cr_assert_eq(q, CUDA_ERROR_NOT_READY, "replay %d: the wait passed before its signal (%d)",
                     replay, (int)q);
        GT_CHECK(tcu.cuCtxSetCurrent(a.ctx));
        GT_CHECK(tcu.cuGraphLaunch(xa, a.s));
        wait_done(a.s);
        GT_CHECK(tcu.cuCtxSetCurrent(b.ctx));
        wait_done(b.s);
    }
    uint64_t v[4];
    GT_CHECK(tcu.cuMemcpyDtoH(v, sem, sizeof(v)));
    cr_assert_eq(v[0], 5ull << 32, "value %llu: five signals", (unsigned long long)v[0]);
    cr_assert_eq(v[1], 5ull << 32, "expected %llu: five waits", (unsigned long long)v[1]);
    cr_assert_eq(v[2], 0, "no wait timed out");
    tcu.cuGraphExecDestroy(xb);
    tcu.cuGraphDestroy(gb);
    GT_CHECK(tcu.cuCtxSetCurrent(a.ctx));
    tcu.cuGraphExecDestroy(xa);
    tcu.cuGraphDestroy(ga);
    p2pt_finalize(a.h);
    p2pt_finalize(b.h);
}

Test(signals_gpu, a_wait_that_times_out_counts_it_and_lets_the_stream_go)
{
    gt_require_gpus(1);
    gt_use_device(0);
    CUdeviceptr sem;
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle_opts("tma", "P2P_TRANSPORT_WAIT_TIMEOUT_MS=100");
    GT_OK(p2pt_wait_async(h, (void *)sem, 1, s));
    GT_CHECK(tcu.cuStreamSynchronize(s)); /* returns: nobody signals */
    uint64_t timeouts = 0;
    GT_CHECK(tcu.cuMemcpyDtoH(&timeouts, sem + P2PT_SEMAPHORE_TIMEOUTS, 8));
    cr_assert_eq(timeouts, 1);
    p2pt_finalize(h);
}
