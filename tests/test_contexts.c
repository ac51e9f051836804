/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Contexts and threads: copies on streams of a second, user-created context
 * on the same device; a context destroyed and recreated between TMA copies
 * gets the module loaded again (never a stale handle); 32 threads with their
 * own streams copying at once through shared handles of both transports.
 * Every copy is checked byte-exact with guards.
 */
#include <pthread.h>

#include "gpu_test.h"

static void copy_and_check(p2pt_handle *h, CUstream s, size_t n, size_t off,
                           uint64_t seed, const char *what)
{
    struct gt_buf src = gt_alloc(n + off), dst = gt_alloc(n + off);
    gt_fill(&src, seed);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + off), (void *)(src.ptr + off), n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    gt_expect_range(&dst, off, &src, off, n, what);
    gt_free(&src);
    gt_free(&dst);
}

Test(contexts, copies_work_on_a_second_user_context_of_the_same_device)
{
    gt_require_gpus(1);
    cr_assert_not_null(tcu.cuCtxCreate, "driver lacks cuCtxCreate (v2 ABI)");
    p2pt_handle *ce = gt_handle("ce"), *tma = gt_handle("tma");
    CUcontext primary = gt_use_device(0);
    CUstream ps;
    GT_CHECK(tcu.cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
    copy_and_check(tma, ps, 5 * 1024 * 1024 + 3, 5, 1, "tma, primary context");

    CUdevice dev;
    CUcontext mine;
    GT_CHECK(tcu.cuDeviceGet(&dev, 0));
    GT_CHECK(tcu.cuCtxCreate(&mine, 0, dev));
    cr_assert_neq(mine, primary);
    CUstream ms;
    GT_CHECK(tcu.cuStreamCreate(&ms, CU_STREAM_NON_BLOCKING));
    copy_and_check(ce, ms, 5 * 1024 * 1024 + 3, 5, 2, "ce, user context");
    copy_and_check(tma, ms, 5 * 1024 * 1024 + 3, 5, 3, "tma, user context");
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(tma, &p));
    cr_assert_eq(p.compilations, 1, "one compile for one architecture, got %llu",
                 (unsigned long long)p.compilations);
    cr_assert_eq(p.module_loads, 2, "one module per context, got %llu",
                 (unsigned long long)p.module_loads);
    tcu.cuStreamDestroy(ms);
    GT_CHECK(tcu.cuCtxDestroy(mine));
    GT_CHECK(tcu.cuCtxSetCurrent(primary));
    copy_and_check(tma, ps, 4096 + 3, 0, 4, "tma, primary context again");
    tcu.cuStreamDestroy(ps);
    p2pt_finalize(ce);
    p2pt_finalize(tma);
}

Test(contexts, destroyed_and_recreated_context_gets_the_module_loaded_again)
{
    gt_require_gpus(1);
    cr_assert_not_null(tcu.cuCtxCreate);
    p2pt_handle *tma = gt_handle("tma");
    CUdevice dev;
    GT_CHECK(tcu.cuDeviceGet(&dev, 0));
    for (int round = 0; round < 4; round++) {
        CUcontext c;
        GT_CHECK(tcu.cuCtxCreate(&c, 0, dev));
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        copy_and_check(tma, s, 1024 * 1024 + 7, 9, (uint64_t)round + 10, "tma, recreated context");
        tcu.cuStreamDestroy(s);
        GT_CHECK(tcu.cuCtxDestroy(c));
    }
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(tma, &p));
    cr_assert_eq(p.compilations, 1, "compilations %llu", (unsigned long long)p.compilations);
    cr_assert_eq(p.module_loads, 4, "each new context loads the module: %llu",
                 (unsigned long long)p.module_loads);
    p2pt_finalize(tma);
}

#define N_THREADS 32

struct worker {
    pthread_t tid;
    int index;
    p2pt_handle *h;
    CUcontext ctx;
    pthread_barrier_t *start;
    int failures;
    char why[256];
};

/* Each thread: its own stream and buffers, 8 copies of varying size, checked
 * on the host (no Criterion assertions off the main thread). */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    CUstream s = NULL;
    CUdeviceptr src = 0, dst = 0;
    size_t n = 256 * 1024 + (size_t)w->index * 16 + 5;
    unsigned char *want = malloc(n), *got = malloc(n);
    tcu.cuCtxSetCurrent(w->ctx);
    bool ready = want && got && !tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) &&
                 !tcu.cuMemAlloc(&src, n + 64) && !tcu.cuMemAlloc(&dst, n + 64);
    pthread_barrier_wait(w->start); /* every thread arrives, ready or not */
    if (!ready) {
        snprintf(w->why, sizeof(w->why), "setup failed");
        w->failures++;
        goto out;
    }
    for (int round = 0; round < 8 && !w->failures; round++) {
        size_t len = n - (size_t)round * 4096;
        gt_random(want, len, (uint64_t)(w->index * 100 + round + 1));
        tcu.cuMemcpyHtoD(src + 3, want, len);
        tcu.cuMemsetD8(dst, GT_POISON, n + 64);
        tcu.cuStreamSynchronize(NULL); /* ordered before the copy's stream */
        p2pt_status st = p2pt_copy_async(w->h, (void *)(dst + 3), (void *)(src + 3), len, s);
        if (st != P2PT_SUCCESS || tcu.cuStreamSynchronize(s) != CUDA_SUCCESS) {
            snprintf(w->why, sizeof(w->why), "copy -> %d: %s", (int)st, p2pt_last_error(NULL));
            w->failures++;
            break;
        }
        tcu.cuMemcpyDtoH(got, dst + 3, len);
        if (memcmp(got, want, len) != 0) {
            snprintf(w->why, sizeof(w->why), "thread %d round %d: %zu bytes differ", w->index,
                     round, len);
            w->failures++;
        }
    }
out:
    if (src)
        tcu.cuMemFree(src);
    if (dst)
        tcu.cuMemFree(dst);
    if (s)
        tcu.cuStreamDestroy(s);
    free(want);
    free(got);
    return NULL;
}

Test(threads, thirty_two_threads_with_own_streams_copy_through_both_transports)
{
    gt_require_gpus(1);
    CUcontext ctx = gt_use_device(0);
    p2pt_handle *ce = gt_handle("ce"), *tma = gt_handle("tma");
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N_THREADS);
    struct worker w[N_THREADS];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < N_THREADS; i++) {
        w[i].index = i;
        w[i].h = (i % 2) ? tma : ce;
        w[i].ctx = ctx;
        w[i].start = &start;
        cr_assert_eq(pthread_create(&w[i].tid, NULL, worker_main, &w[i]), 0);
    }
    int failures = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].failures) {
            failures++;
            cr_log_error("thread %d (%s): %s", i, (i % 2) ? "tma" : "ce", w[i].why);
        }
    }
    pthread_barrier_destroy(&start);
    cr_assert_eq(failures, 0, "%d of %d threads failed", failures, N_THREADS);
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(tma, &p));
    cr_assert_eq(p.tma_launches, 16 * 8, "one launch per TMA copy: %llu",
                 (unsigned long long)p.tma_launches);
    p2pt_finalize(ce);
    p2pt_finalize(tma);
}
