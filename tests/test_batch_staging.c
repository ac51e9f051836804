/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host batches through the TMA staging ring (src/engines/transport_tma_ring.c),
 * with the kernel reading the descriptors from GPU memory (the default) and
 * straight from the pinned ring (P2P_TRANSPORT_BATCH_STAGING=host): the
 * ring wraps under 32 threads and streams; a ring-sized batch refused at a
 * late piece (the pass over the descriptors has written the ring by then)
 * enqueues nothing, and the next batch reuses the slot; a batch of empty
 * pieces launches nothing; a full ring sends batches to the parameters
 * path without waiting. Every destination byte checked after poisoning.
 */
#include <unistd.h>

#include "batch_test.h"

static p2pt_handle *tma_handle(const char *options)
{
    p2pt_init_args a = {sizeof(a), NULL, "tma", options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    return h;
}

/* One thread's share of the ring test: `rounds` batches on its own stream,
 * each into its own destination pool, none waited for until the end. */
struct ring_job {
    p2pt_handle *h;
    int index;
};

enum { RING_ROUNDS = 30, RING_PIECES = 600, RING_MAX = 32 };

static void *ring_thread(void *arg)
{
    struct ring_job *j = arg;
    gt_use_device(0);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct gt_buf src = gt_alloc(4096);
    gt_fill(&src, 100 + (uint64_t)j->index);
    struct gt_buf dst[RING_ROUNDS];
    static _Thread_local p2pt_copy_desc d[RING_PIECES];
    for (int r = 0; r < RING_ROUNDS; r++) {
        dst[r] = gt_alloc(bt_pool_bytes(RING_PIECES, RING_MAX));
        cr_assert(bt_layout(d, RING_PIECES, &dst[r], &src, RING_MAX,
                            (uint64_t)j->index * 1000 + (uint64_t)r));
        GT_OK(p2pt_copy_batch_async(j->h, d, RING_PIECES, s));
    }
    GT_CHECK(tcu.cuStreamSynchronize(s));
    unsigned char *src_host = bt_host_copy(&src);
    for (int r = 0; r < RING_ROUNDS; r++) {
        char what[64];
        snprintf(what, sizeof(what), "thread %d, batch %d", j->index, r);
        cr_assert(bt_layout(d, RING_PIECES, &dst[r], &src, RING_MAX,
                            (uint64_t)j->index * 1000 + (uint64_t)r));
        bt_expect(&dst[r], &src, src_host, d, RING_PIECES, NULL, what);
        gt_free(&dst[r]);
    }
    free(src_host);
    gt_free(&src);
    tcu.cuStreamDestroy(s);
    return NULL;
}

/* 32 x 30 batches of 600 descriptors: about 14 MB through an 8 MiB ring
 * per context, so slots are reused while other streams still run. */
static void ring_wraps(const char *options)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = tma_handle(options);
    GT_OK(p2pt_prepare(h, 0));
    pthread_t th[32];
    struct ring_job jobs[32];
    for (int i = 0; i < 32; i++) {
        jobs[i] = (struct ring_job){h, i};
        cr_assert_eq(pthread_create(&th[i], NULL, ring_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 32; i++)
        pthread_join(th[i], NULL);
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.batches, 32u * RING_ROUNDS);
    cr_assert_eq(p.batch_launches, 32u * RING_ROUNDS, "one launch per batch through the ring");
    p2pt_finalize(h);
}

Test(batch_staging, the_ring_wraps_under_32_threads_and_streams)
{
    ring_wraps("P2P_TRANSPORT_BATCH_STAGING=gpu");
}

Test(batch_staging, the_ring_read_by_the_kernel_from_host_memory_wraps_too)
{
    ring_wraps("P2P_TRANSPORT_BATCH_STAGING=host");
}

/* A full ring never holds the call: over the fake driver, its events held
 * (the GPU "behind a wait"), ring-sized batches past the ring's slots go
 * by the parameters path and every call returns; once the events complete
 * the ring serves again. The calls used to wait for the oldest slot, under
 * the ring's lock, for as long as the GPU stood still. */
Test(batch_staging, a_full_ring_sends_batches_to_the_parameters_path_without_waiting)
{
    gt_use_fake_driver();
    p2pt_handle *h = tma_handle(NULL);
    enum { PIECES = 200, BATCHES = 80 };
    struct gt_buf src = gt_alloc(PIECES * 64), dst = gt_alloc(PIECES * 64);
    p2pt_copy_desc d[PIECES];
    for (int i = 0; i < PIECES; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + 64u * (unsigned)i),
                                (const void *)(uintptr_t)(src.ptr + 64u * (unsigned)i), 48};
    void (*hold)(int) = (void (*)(int))gt_fake_sym("p2pt_fake_hold_events");
    hold(1);
    alarm(30); /* a call that waits fails this test, not the suite's time */
    int ring = 0, params = 0;
    char name[64];
    unsigned grid;
    for (int k = 0; k < BATCHES; k++) {
        GT_OK(p2pt_copy_batch_async(h, d, PIECES, NULL));
        bt_fake_last_launch(name, sizeof(name), &grid);
        ring += strcmp(name, "p2pt_batch_copy_ring") == 0;
        params += strcmp(name, "p2pt_batch_copy_l") == 0;
    }
    alarm(0);
    hold(0);
    cr_expect_gt(ring, 0, "the ring served the first batches");
    cr_expect_gt(params, 0, "the batches past a full ring took the parameters");
    cr_expect_eq(ring + params, BATCHES, "%d by the ring, %d by the parameters", ring, params);
    GT_OK(p2pt_copy_batch_async(h, d, PIECES, NULL));
    bt_fake_last_launch(name, sizeof(name), &grid);
    cr_expect_str_eq(name, "p2pt_batch_copy_ring", "the ring serves again once its slots are done");
    p2pt_finalize(h);
    gt_free(&src);
    gt_free(&dst);
}

/* The same on a GPU, the way it hung: a stream held by a wait whose signal
 * this thread enqueues only after its batches. More ring-sized batches
 * than the ring has slots queue behind the wait, every call returns, then
 * the signal (on another stream) lets them all run, and every byte lands. */
Test(batch_staging, batches_behind_a_wait_this_thread_releases_later_all_return_and_land)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = tma_handle(NULL);
    GT_OK(p2pt_prepare(h, 0));
    enum { PIECES = 300, PIECE = 160, BATCHES = 80 };
    CUstream held, other;
    GT_CHECK(tcu.cuStreamCreate(&held, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
    CUdeviceptr sem;
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    struct gt_buf src = gt_alloc(PIECES * PIECE), dst = gt_alloc(BATCHES * PIECES * PIECE);
    gt_fill(&src, 17);
    gt_poison(&dst);
    p2pt_copy_desc *d = malloc(sizeof(*d) * PIECES * BATCHES);
    cr_assert_not_null(d);
    GT_OK(p2pt_wait_async(h, (void *)(uintptr_t)sem, 1, held));
    alarm(60); /* a call that waits for the GPU would never return: fail, not hang */
    for (int k = 0; k < BATCHES; k++) {
        p2pt_copy_desc *b = d + (size_t)k * PIECES;
        for (int i = 0; i < PIECES; i++)
            b[i] = (p2pt_copy_desc){
                (void *)(uintptr_t)(dst.ptr + ((size_t)k * PIECES + (size_t)(PIECES - 1 - i)) *
                                                  PIECE),
                (const void *)(uintptr_t)(src.ptr + (size_t)i * PIECE), PIECE};
        GT_OK(p2pt_copy_batch_async(h, b, PIECES, held));
    }
    alarm(0);
    GT_OK(p2pt_signal_async(h, (void *)(uintptr_t)sem, other));
    GT_CHECK(tcu.cuStreamSynchronize(held));
    unsigned char *src_host = bt_host_copy(&src);
    bt_expect(&dst, &src, src_host, d, (size_t)PIECES * BATCHES, NULL,
              "batches queued behind the wait");
    free(src_host);
    free(d);
    gt_free(&src);
    gt_free(&dst);
    GT_CHECK(tcu.cuMemFree(sem));
    tcu.cuStreamDestroy(held);
    tcu.cuStreamDestroy(other);
    p2pt_finalize(h);
}

/* A batch large enough for the ring whose last piece is refused: the pass
 * writes the ring before it reaches that piece, yet nothing may be
 * enqueued, and the slot must serve the next batch. Then a batch of only
 * empty pieces: nothing launched, counted as a batch. */
static void refused_then_reused(const char *options)
{
    gt_require_gpus(1);
    gt_use_device(0);
    enum { N = 600, MAX = 64 };
    static char pageable[4096];
    static p2pt_copy_desc d[N];
    p2pt_handle *h = tma_handle(options);
    struct gt_buf src = gt_alloc(bt_pool_bytes(N, MAX)), dst = gt_alloc(bt_pool_bytes(N, MAX));
    gt_fill(&src, 7);
    unsigned char *src_host = bt_host_copy(&src);
    cr_assert(bt_layout(d, N, &dst, &src, MAX, 11));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)dst.base, dst.n + 2 * GT_GUARD));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)src.base, src.n + 2 * GT_GUARD));
    p2pt_properties before = {sizeof(before)}, after = {sizeof(after)};

    for (int round = 0; round < 3; round++) {
        gt_poison(&dst);
        GT_OK(p2pt_get_properties(h, &before));
        if (d[N - 1].bytes == 0)
            d[N - 1].bytes = 1; /* an empty piece is never looked at */
        const void *keep = d[N - 1].src;
        d[N - 1].src = pageable; /* outside the windows, and pageable */
        cr_assert_eq(p2pt_copy_batch_async(h, d, N, NULL), P2PT_INVALID_ARGUMENT);
        cr_assert(strstr(p2pt_last_error(NULL), "piece 599 of 600") != NULL, "%s",
                  p2pt_last_error(NULL));
        cr_assert(strstr(p2pt_last_error(NULL), "pageable") != NULL, "%s", p2pt_last_error(NULL));
        d[N - 1].src = keep;
        d[N / 2].bytes = UINT64_MAX; /* past size_t: refused by its arguments */
        cr_assert_eq(p2pt_copy_batch_async(h, d, N, NULL), P2PT_INVALID_ARGUMENT);
        cr_assert(strstr(p2pt_last_error(NULL), "piece 300 of 600") != NULL, "%s",
                  p2pt_last_error(NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        GT_OK(p2pt_get_properties(h, &after));
        cr_assert_eq(after.batch_launches, before.batch_launches, "a refused batch launched");
        cr_assert_eq(after.rejected, before.rejected + 2);
        struct gt_buf none = gt_alloc(1);
        bt_expect(&dst, &none, NULL, d, 0, NULL, "a refused batch touched a destination");
        gt_free(&none);
        cr_assert(bt_layout(d, N, &dst, &src, MAX, 11 + (uint64_t)round));
        GT_OK(p2pt_copy_batch_async(h, d, N, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        bt_expect(&dst, &src, src_host, d, N, NULL, "the batch after a refusal");
    }

    static p2pt_copy_desc empty[N];
    for (int i = 0; i < N; i++)
        empty[i] = (p2pt_copy_desc){(void *)(uintptr_t)dst.ptr, (void *)(uintptr_t)src.ptr, 0};
    GT_OK(p2pt_get_properties(h, &before));
    GT_OK(p2pt_copy_batch_async(h, empty, N, NULL));
    GT_OK(p2pt_get_properties(h, &after));
    cr_assert_eq(after.batches, before.batches + 1);
    cr_assert_eq(after.batch_launches, before.batch_launches, "an empty batch launched");
    cr_assert_eq(after.batch_pieces, before.batch_pieces);
    free(src_host);
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

Test(batch_staging, a_refused_ring_sized_batch_enqueues_nothing_and_frees_its_slot)
{
    refused_then_reused("P2P_TRANSPORT_BATCH_STAGING=gpu");
}

Test(batch_staging, the_same_with_the_kernel_reading_host_memory)
{
    refused_then_reused("P2P_TRANSPORT_BATCH_STAGING=host");
}
