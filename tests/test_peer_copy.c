/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies between two GPUs, for both transports: push (stream and source on
 * GPU 0, destination on GPU 1) and pull (stream and destination on GPU 0,
 * source on GPU 1), byte-exact with guards at sizes from 1 byte to 64 MiB + 5
 * and odd co-aligned offsets; both directions at once on two streams; and,
 * for the copy engine, a copy between GPUs without peer access still
 * completes (the driver stages it through the host) and the framework's
 * logger gets exactly one WARN for that device pair.
 */
#include <stdarg.h>

#include "gpu_test.h"

static const char *const transports[] = {"ce", "tma", "auto"};
static const size_t sizes[] = {1, 4096 + 3, 48 * 1024 + 1, 64u * 1024 * 1024 + 5};

/* Copy on a stream of `stream_dev` from a buffer on `src_dev` to one on
 * `dst_dev`, every size, offset 7 on both sides. */
static void copy_between(const char *transport, int stream_dev, int src_dev, int dst_dev)
{
    const size_t cap = sizes[P2PT_ARRAY_LEN(sizes) - 1] + 16;
    gt_use_device(src_dev);
    struct gt_buf src = gt_alloc(cap);
    gt_use_device(dst_dev);
    struct gt_buf dst = gt_alloc(cap);
    gt_use_device(stream_dev);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle(transport);
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++) {
        gt_fill(&src, i + 31);
        gt_poison(&dst);
        GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 7), (void *)(src.ptr + 7), sizes[i], s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        char what[96];
        snprintf(what, sizeof(what), "%s GPU%d -> GPU%d on a GPU%d stream", transport, src_dev,
                 dst_dev, stream_dev);
        gt_expect_range(&dst, 7, &src, 7, sizes[i], what);
    }
    if (strcmp(transport, "tma") == 0) {
        p2pt_properties p = {sizeof(p)};
        GT_OK(p2pt_get_properties(h, &p));
        cr_assert_eq(p.tma_launches, P2PT_ARRAY_LEN(sizes), "every peer copy ran as TMA");
    }
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    gt_free(&dst);
}

Test(peer_copy, push_from_gpu0_into_gpu1_both_transports)
{
    gt_require_gpus(2);
    gt_enable_peers();
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++)
        copy_between(transports[t], 0, 0, 1);
}

Test(peer_copy, pull_from_gpu1_into_gpu0_both_transports)
{
    gt_require_gpus(2);
    gt_enable_peers();
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++)
        copy_between(transports[t], 0, 1, 0);
}

Test(peer_copy, push_and_pull_from_gpu1_side_both_transports)
{
    gt_require_gpus(2);
    gt_enable_peers();
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        copy_between(transports[t], 1, 1, 0);
        copy_between(transports[t], 1, 0, 1);
    }
}

Test(peer_copy, both_directions_at_once_on_two_streams)
{
    gt_require_gpus(2);
    gt_enable_peers();
    const size_t n = 96u * 1024 * 1024 + 5;
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        struct gt_buf a_src, a_dst, b_src, b_dst;
        CUstream sa, sb;
        gt_use_device(0);
        a_src = gt_alloc(n);
        a_dst = gt_alloc(n);
        GT_CHECK(tcu.cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
        gt_use_device(1);
        b_src = gt_alloc(n);
        b_dst = gt_alloc(n);
        GT_CHECK(tcu.cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
        gt_fill(&a_src, 1);
        gt_fill(&b_src, 2);
        p2pt_handle *h = gt_handle(transports[t]);
        GT_OK(p2pt_prepare(h, 0));
        GT_OK(p2pt_prepare(h, 1));
        GT_OK(p2pt_copy_async(h, (void *)b_dst.ptr, (void *)a_src.ptr, n, sa)); /* 0 -> 1 */
        GT_OK(p2pt_copy_async(h, (void *)a_dst.ptr, (void *)b_src.ptr, n, sb)); /* 1 -> 0 */
        GT_CHECK(tcu.cuStreamSynchronize(sb));
        gt_use_device(0);
        GT_CHECK(tcu.cuStreamSynchronize(sa));
        gt_expect_range(&b_dst, 0, &a_src, 0, n, transports[t]);
        gt_expect_range(&a_dst, 0, &b_src, 0, n, transports[t]);
        p2pt_finalize(h);
        tcu.cuStreamDestroy(sa);
        gt_use_device(1);
        tcu.cuStreamDestroy(sb);
        gt_free(&a_src);
        gt_free(&a_dst);
        gt_free(&b_src);
        gt_free(&b_dst);
    }
}

/* A framework's logger (NCCL's signature): counts the not-peer-to-peer
 * warnings p2pt sends it. */
static int not_peer_warnings;

static void counting_logger(p2pt_log_level level, unsigned long flags, const char *file,
                            int line, const char *fmt, ...)
{
    (void)flags, (void)file, (void)line;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == P2PT_LOG_WARN && strstr(msg, "not peer-to-peer") != NULL)
        not_peer_warnings++;
}

Test(peer_copy, ce_without_peer_access_still_completes)
{
    gt_require_gpus(2);
    /* A fresh process: nothing enabled peer access. */
    const size_t n = 8 * 1024 * 1024 + 3;
    gt_use_device(1);
    struct gt_buf src = gt_alloc(n);
    gt_fill(&src, 8);
    gt_use_device(0);
    struct gt_buf dst = gt_alloc(n);
    p2pt_init_args args = {sizeof(args), counting_logger, "ce"};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&args, &h));
    for (int i = 0; i < 3; i++) {
        gt_poison(&dst);
        GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, n, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        gt_expect_range(&dst, 0, &src, 0, n, "ce between GPUs without peer access");
    }
    cr_assert_eq(not_peer_warnings, 1, "one WARN per device pair, got %d", not_peer_warnings);
    /* TMA on the same request is refused with the remedy, not a GPU fault. */
    p2pt_handle *t = gt_handle("tma");
    p2pt_status st = p2pt_copy_async(t, (void *)dst.ptr, (void *)src.ptr, n, NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "cuCtxEnablePeerAccess") != NULL, "%s",
              p2pt_last_error(NULL));
    p2pt_finalize(t);
    p2pt_finalize(h);
    gt_free(&dst);
    gt_use_device(1);
    gt_free(&src);
}
