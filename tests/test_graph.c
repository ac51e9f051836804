/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA graphs: after prepare(device), copies of either transport can be
 * captured (global and thread-local capture modes) and replayed many times
 * with byte-exact results on fresh data each time, local and between two
 * GPUs (push then pull in one graph); a TMA copy captured before
 * prepare fails with status 5 and leaves the capture valid; host batches on
 * another stream during a global capture leave it whole.
 */
#include "batch_test.h"

static const char *const transports[] = {"ce", "tma", "auto"};

/* Capture four copies (odd sizes and co-aligned odd offsets; the largest
 * is over P2P_TRANSPORT_STREAM_MIN's default, so tma captures its streaming
 * kernel), replay the graph 12 times with new source bytes each time. */
static void capture_and_replay(CUstreamCaptureMode mode)
{
    gt_require_gpus(1);
    gt_use_device(0);
    cr_assert_not_null(tcu.cuStreamBeginCapture, "driver lacks stream capture");
    enum { N = 4 };
    static const size_t sizes[N] = {1, 48 * 1024 + 1, 3 * 1024 * 1024 + 13,
                                    9 * 1024 * 1024 + 5};
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        GT_OK(p2pt_prepare(h, 0));
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        struct gt_buf src[N], dst[N];
        for (int i = 0; i < N; i++) {
            src[i] = gt_alloc(sizes[i] + 16);
            dst[i] = gt_alloc(sizes[i] + 16);
        }
        GT_CHECK(tcu.cuStreamBeginCapture(s, mode));
        for (int i = 0; i < N; i++)
            GT_OK(p2pt_copy_async(h, (void *)(dst[i].ptr + 3), (void *)(src[i].ptr + 3),
                                  sizes[i], s));
        CUgraph g;
        CUgraphExec ge;
        GT_CHECK(tcu.cuStreamEndCapture(s, &g));
        if (strcmp(transports[t], "tma") == 0) {
            p2pt_properties p = {sizeof(p)};
            GT_OK(p2pt_get_properties(h, &p));
            cr_assert_eq(p.stream_launches, 1u, "the 9 MiB copy captured its streaming kernel");
        }
        GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
        for (int r = 0; r < 12; r++) {
            for (int i = 0; i < N; i++) {
                gt_fill(&src[i], (uint64_t)(r * 10 + i + 1));
                gt_poison(&dst[i]);
            }
            GT_CHECK(tcu.cuGraphLaunch(ge, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            for (int i = 0; i < N; i++)
                gt_expect_range(&dst[i], 3, &src[i], 3, sizes[i], transports[t]);
        }
        tcu.cuGraphExecDestroy(ge);
        tcu.cuGraphDestroy(g);
        for (int i = 0; i < N; i++) {
            gt_free(&src[i]);
            gt_free(&dst[i]);
        }
        tcu.cuStreamDestroy(s);
        GT_OK(p2pt_finalize(h));
    }
}

Test(graph, copies_replay_byte_exact_in_global_capture_mode)
{
    capture_and_replay(CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* While one stream captures in the global mode (PyTorch's default), host
 * batches on another stream of the same thread make the staging ring (its
 * first allocation) and fill it past its slots (their retirement asks the
 * driver about events): calls that the global mode forbids during a
 * capture, and whose refusal would also fail that capture. The ring makes
 * them relaxed: the batches land, and the captured graph replays exact. */
Test(graph, host_batches_on_another_stream_leave_a_global_capture_whole)
{
    gt_require_gpus(1);
    gt_use_device(0);
    cr_assert_not_null(tcu.cuStreamBeginCapture, "driver lacks stream capture");
    enum { PIECES = 300, PIECE = 200, BATCHES = 70 };
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_prepare(h, 0));
    CUstream cap, eager;
    GT_CHECK(tcu.cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuStreamCreate(&eager, CU_STREAM_NON_BLOCKING));
    struct gt_buf src = gt_alloc(1 << 20), dst = gt_alloc(1 << 20);
    struct gt_buf bsrc = gt_alloc(PIECES * PIECE), bdst = gt_alloc(PIECES * PIECE);
    p2pt_copy_desc d[PIECES];
    for (int i = 0; i < PIECES; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(bdst.ptr + (size_t)(PIECES - 1 - i) * PIECE),
                                (const void *)(uintptr_t)(bsrc.ptr + (size_t)i * PIECE), PIECE};
    gt_fill(&bsrc, 5);
    gt_poison(&bdst);
    GT_CHECK(tcu.cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_GLOBAL));
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 3), (void *)(src.ptr + 3), (1 << 20) - 7, cap));
    for (int k = 0; k < BATCHES; k++)
        GT_OK(p2pt_copy_batch_async(h, d, PIECES, eager));
    CUgraph g;
    CUgraphExec ge;
    GT_CHECK(tcu.cuStreamEndCapture(cap, &g));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
    GT_CHECK(tcu.cuStreamSynchronize(eager));
    unsigned char *src_host = bt_host_copy(&bsrc);
    bt_expect(&bdst, &bsrc, src_host, d, PIECES, NULL, "host batches beside the capture");
    free(src_host);
    for (int r = 0; r < 3; r++) {
        gt_fill(&src, (uint64_t)(r + 11));
        gt_poison(&dst);
        GT_CHECK(tcu.cuGraphLaunch(ge, cap));
        GT_CHECK(tcu.cuStreamSynchronize(cap));
        gt_expect_range(&dst, 3, &src, 3, (1 << 20) - 7, "the captured copy");
    }
    tcu.cuGraphExecDestroy(ge);
    tcu.cuGraphDestroy(g);
    gt_free(&src);
    gt_free(&dst);
    gt_free(&bsrc);
    gt_free(&bdst);
    tcu.cuStreamDestroy(cap);
    tcu.cuStreamDestroy(eager);
    GT_OK(p2pt_finalize(h));
}

Test(graph, copies_replay_byte_exact_in_thread_local_capture_mode)
{
    capture_and_replay(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

Test(graph, tma_capture_before_prepare_fails_with_usage_and_keeps_capture_valid)
{
    gt_require_gpus(1);
    gt_use_device(0);
    /* Criterion runs each test in a fresh process: no module is loaded yet. */
    p2pt_handle *h = gt_handle("tma");
    p2pt_properties before = {sizeof(before)};
    GT_OK(p2pt_get_properties(h, &before));
    cr_assert_eq(before.module_loads, 0, "a module was loaded before any TMA use");
    struct gt_buf src = gt_alloc(4096), dst = gt_alloc(4096);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    p2pt_status st = p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, 4096, s);
    cr_assert_eq(st, P2PT_INVALID_USAGE, "copy during capture before prepare -> %d: %s",
                 (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "prepare") != NULL, "message: %s",
              p2pt_last_error(NULL));
    CUgraph g;
    GT_CHECK(tcu.cuStreamEndCapture(s, &g)); /* the capture is still valid */
    CUgraphExec ge;
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
    tcu.cuGraphExecDestroy(ge);
    tcu.cuGraphDestroy(g);
    /* And after prepare the same copy captures fine. */
    GT_OK(p2pt_prepare(h, 0));
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, 4096, s));
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    tcu.cuGraphDestroy(g);
    gt_free(&src);
    gt_free(&dst);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
}

Test(graph, peer_copies_replay_byte_exact_for_both_transports)
{
    gt_require_gpus(2);
    const size_t n = 8u * 1024 * 1024 + 13;
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        GT_OK(p2pt_peer_enable(h, 0, 1));
        gt_use_device(1);
        struct gt_buf remote = gt_alloc(n + 16);
        gt_use_device(0);
        struct gt_buf local = gt_alloc(n + 16), back = gt_alloc(n + 16);
        GT_OK(p2pt_prepare(h, 0));
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        /* One graph: push local -> GPU 1, then pull it back into `back`. */
        GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        GT_OK(p2pt_copy_async(h, (void *)(remote.ptr + 5), (void *)(local.ptr + 5), n, s));
        GT_OK(p2pt_copy_async(h, (void *)(back.ptr + 5), (void *)(remote.ptr + 5), n, s));
        CUgraph g;
        CUgraphExec ge;
        GT_CHECK(tcu.cuStreamEndCapture(s, &g));
        GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
        for (int r = 0; r < 8; r++) {
            gt_fill(&local, (uint64_t)(r + 900));
            gt_use_device(1);
            gt_poison(&remote);
            gt_use_device(0);
            gt_poison(&back);
            GT_CHECK(tcu.cuGraphLaunch(ge, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            gt_expect_range(&remote, 5, &local, 5, n, transports[t]);
            gt_expect_range(&back, 5, &local, 5, n, transports[t]);
        }
        tcu.cuGraphExecDestroy(ge);
        tcu.cuGraphDestroy(g);
        tcu.cuStreamDestroy(s);
        gt_free(&local);
        gt_free(&back);
        gt_use_device(1);
        gt_free(&remote);
        gt_use_device(0);
        p2pt_finalize(h);
    }
}
