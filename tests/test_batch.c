/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host-descriptor batches (p2pt_copy_batch_async) on both transports:
 * random batches of 1 to 10,000 pieces of 0 bytes to 8 MiB, at random
 * offsets (co-aligned or not), sources shared between pieces, are byte
 * exact with every gap between destinations untouched; every (dst, src)
 * alignment pair of short pieces; launches are split at the documented
 * maximum; a captured batch replays on new data; 32 threads at once; bad
 * pieces refuse the whole batch before anything is enqueued, naming the
 * piece. The argument checks that need no GPU run on CPU machines too.
 */
#include "batch_test.h"

static const char *const transports[] = {"ce", "tma", "auto"};

/* One random batch through `h` on `s`, checked byte for byte. Returns its
 * pieces of one byte or more. */
static size_t random_batch(p2pt_handle *h, CUstream s, size_t n, uint64_t max, uint64_t seed,
                           const char *what)
{
    struct gt_buf src = gt_alloc(max + 8192);
    struct gt_buf dst = gt_alloc(bt_pool_bytes(n, max));
    gt_fill(&src, seed);
    p2pt_copy_desc *d = malloc(n * sizeof(*d));
    cr_assert_not_null(d);
    cr_assert(bt_layout(d, n, &dst, &src, max, seed));
    unsigned char *src_host = bt_host_copy(&src);
    size_t pieces = 0;
    for (size_t i = 0; i < n; i++)
        pieces += d[i].bytes != 0;
    GT_OK(p2pt_copy_batch_async(h, d, n, s));
    /* The array may be reused at once: scribble over it. */
    memset(d + n / 2, 0xEE, (n - n / 2) * sizeof(*d));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    cr_assert(bt_layout(d, n, &dst, &src, max, seed)); /* the same layout again */
    bt_expect(&dst, &src, src_host, d, n, NULL, what);
    free(src_host);
    free(d);
    gt_free(&src);
    gt_free(&dst);
    return pieces;
}

Test(batch, random_batches_are_byte_exact_with_every_gap_untouched)
{
    gt_require_gpus(1);
    gt_use_device(0);
    static const struct {
        size_t n;
        uint64_t max;
    } shapes[] = {{1, 8u << 20},  {7, 8u << 20},    {128, 1u << 20}, {129, 64u << 10},
                  {1344, 20000},  {1345, 20000},    {3000, 16384},   {10000, 4096}};
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        uint64_t launches = 0;
        for (size_t k = 0; k < P2PT_ARRAY_LEN(shapes); k++) {
            char what[96];
            snprintf(what, sizeof(what), "%s, %zu pieces up to %llu bytes", transports[t],
                     shapes[k].n, (unsigned long long)shapes[k].max);
            size_t pieces =
                random_batch(h, s, shapes[k].n, shapes[k].max, 1000 * (uint64_t)t + k + 1, what);
            /* One launch: through the staging ring above 128 pieces, in
             * the parameters below. */
            launches += pieces != 0;
        }
        p2pt_properties p = {sizeof(p)};
        GT_OK(p2pt_get_properties(h, &p));
        cr_assert_eq(p.batches, P2PT_ARRAY_LEN(shapes), "%llu batches counted",
                     (unsigned long long)p.batches);
        if (t == 1) {
            cr_assert_eq(p.batch_per_launch, P2PT_BATCH_LARGE);
            /* One launch per batch, whatever its size. */
            cr_assert_eq(p.batch_launches, launches, "%llu launches, expected %llu",
                         (unsigned long long)p.batch_launches, (unsigned long long)launches);
            cr_assert_eq(p.tma_launches, 0, "a batch made single-copy launches");
        }
        tcu.cuStreamDestroy(s);
        GT_OK(p2pt_finalize(h));
    }
}

Test(batch, every_alignment_pair_of_short_and_bulk_pieces)
{
    gt_require_gpus(1);
    gt_use_device(0);
    /* 16 x 16 alignment pairs x sizes around the plain/bulk boundary. */
    static const uint64_t sizes[] = {1, 15, 17, 255, 256, 257, 4099};
    enum { N = 16 * 16 * 7 };
    static p2pt_copy_desc d[N];
    struct gt_buf src = gt_alloc(64 * 1024);
    struct gt_buf dst = gt_alloc(N * 4400);
    gt_fill(&src, 77);
    unsigned char *src_host = bt_host_copy(&src);
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        gt_poison(&dst);
        size_t n = 0, at = 0;
        for (int a = 0; a < 16; a++)
            for (int b = 0; b < 16; b++)
                for (size_t k = 0; k < P2PT_ARRAY_LEN(sizes); k++) {
                    at = (at + 64 + 15) / 16 * 16;
                    d[n].dst = (void *)(uintptr_t)(dst.ptr + at + a);
                    d[n].src = (const void *)(uintptr_t)(src.ptr + 1024 * k + b);
                    d[n].bytes = sizes[k];
                    at += a + sizes[k];
                    n++;
                }
        cr_assert_leq(at, dst.n);
        GT_OK(p2pt_copy_batch_async(h, d, n, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        bt_expect(&dst, &src, src_host, d, n, NULL, transports[t]);
        GT_OK(p2pt_finalize(h));
    }
    free(src_host);
    gt_free(&src);
    gt_free(&dst);
}

Test(batch, a_captured_batch_replays_on_new_data)
{
    gt_require_gpus(1);
    gt_use_device(0);
    cr_assert_not_null(tcu.cuStreamBeginCapture, "driver lacks stream capture");
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        GT_OK(p2pt_prepare(h, 0));
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        enum { N = 1500 };
        static p2pt_copy_desc d[N];
        struct gt_buf src = gt_alloc(40000);
        struct gt_buf dst = gt_alloc(bt_pool_bytes(N, 20000));
        cr_assert(bt_layout(d, N, &dst, &src, 20000, 5));
        GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        GT_OK(p2pt_copy_batch_async(h, d, N, s));
        CUgraph g;
        CUgraphExec ge;
        GT_CHECK(tcu.cuStreamEndCapture(s, &g));
        GT_CHECK(tcu.cuGraphInstantiateWithFlags(&ge, g, 0));
        memset(d, 0, sizeof(d)); /* the graph holds its own copy */
        cr_assert(bt_layout(d, N, &dst, &src, 20000, 5));
        for (int r = 0; r < 3; r++) {
            gt_fill(&src, 100 + (uint64_t)r);
            gt_poison(&dst);
            unsigned char *src_host = bt_host_copy(&src);
            GT_CHECK(tcu.cuGraphLaunch(ge, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            bt_expect(&dst, &src, src_host, d, N, NULL, transports[t]);
            free(src_host);
        }
        tcu.cuGraphExecDestroy(ge);
        tcu.cuGraphDestroy(g);
        gt_free(&src);
        gt_free(&dst);
        tcu.cuStreamDestroy(s);
        GT_OK(p2pt_finalize(h));
    }
}

struct thread_job {
    p2pt_handle *h;
    int index;
    const char *transport;
};

static void *batch_thread(void *arg)
{
    struct thread_job *j = arg;
    gt_use_device(0);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    char what[64];
    snprintf(what, sizeof(what), "%s thread %d", j->transport, j->index);
    for (int r = 0; r < 3; r++)
        random_batch(j->h, s, 200 + 37 * (size_t)j->index, 30000,
                     (uint64_t)j->index * 10 + (uint64_t)r + 1, what);
    tcu.cuStreamDestroy(s);
    return NULL;
}

Test(batch, thirty_two_threads_batch_through_one_handle)
{
    gt_require_gpus(1);
    gt_use_device(0);
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        pthread_t th[32];
        struct thread_job jobs[32];
        for (int i = 0; i < 32; i++) {
            jobs[i] = (struct thread_job){h, i, transports[t]};
            cr_assert_eq(pthread_create(&th[i], NULL, batch_thread, &jobs[i]), 0);
        }
        for (int i = 0; i < 32; i++)
            pthread_join(th[i], NULL);
        p2pt_properties p = {sizeof(p)};
        GT_OK(p2pt_get_properties(h, &p));
        cr_assert_eq(p.batches, 96);
        GT_OK(p2pt_finalize(h));
    }
}

Test(batch, a_bad_piece_refuses_the_whole_batch_naming_it)
{
    gt_require_gpus(1);
    gt_use_device(0);
    struct gt_buf src = gt_alloc(4096), dst = gt_alloc(8192);
    static char pageable[4096];
    for (int t = 0; t < (int)P2PT_ARRAY_LEN(transports); t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        gt_poison(&dst);
        p2pt_copy_desc d[3] = {{(void *)(uintptr_t)dst.ptr, (void *)(uintptr_t)src.ptr, 100},
                               {(void *)(uintptr_t)(dst.ptr + 200), (void *)(uintptr_t)src.ptr, 100},
                               {(void *)(uintptr_t)(dst.ptr + 400), (void *)(uintptr_t)(dst.ptr + 450), 100}};
        cr_assert_eq(p2pt_copy_batch_async(h, d, 3, NULL), P2PT_INVALID_ARGUMENT);
        cr_assert(strstr(p2pt_last_error(NULL), "piece 2 of 3") != NULL, "%s",
                  p2pt_last_error(NULL));
        cr_assert(strstr(p2pt_last_error(NULL), "overlapping") != NULL, "%s",
                  p2pt_last_error(NULL));
        if (t == 1) {
            /* Pageable memory: the copy engine stages it, a kernel cannot. */
            d[2].src = pageable;
            cr_assert_eq(p2pt_copy_batch_async(h, d, 3, NULL), P2PT_INVALID_ARGUMENT);
            cr_assert(strstr(p2pt_last_error(NULL), "pageable") != NULL, "%s",
                      p2pt_last_error(NULL));
        }
        GT_CHECK(tcu.cuCtxSynchronize());
        struct gt_buf none = gt_alloc(1);
        bt_expect(&dst, &none, NULL, d, 0, NULL, "nothing was enqueued");
        gt_free(&none);
        GT_OK(p2pt_finalize(h));
    }
    gt_free(&src);
    gt_free(&dst);
}

/* ------------------------------------------------- no GPU needed for these */

/* Without a driver the stream cannot even be resolved: the pieces'
 * arguments still decide, as if they had been checked first. */
Test(batch_args, bad_pieces_are_status_4_naming_the_piece_whatever_else_fails)
{
    p2pt_handle *h = bt_cpu_handle("tma", NULL);
    char buf[256];
    p2pt_copy_desc d[3] = {{buf, buf + 128, 16}, {buf + 32, NULL, 8}, {buf, buf + 64, 4}};
    cr_assert_eq(p2pt_copy_batch_async(h, d, 0, NULL), P2PT_SUCCESS, "count 0 is a no-op");
    cr_assert_eq(p2pt_copy_batch_async(h, NULL, 3, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_batch_async(h, d, 3, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "piece 1 of 3") != NULL, "%s", p2pt_last_error(NULL));
    d[1].src = buf + 30; /* overlaps its own dst */
    cr_assert_eq(p2pt_copy_batch_async(h, d, 3, NULL), P2PT_INVALID_ARGUMENT);
    cr_assert(strstr(p2pt_last_error(NULL), "overlapping") != NULL, "%s", p2pt_last_error(NULL));
    /* Only empty pieces: nothing to do, no driver needed. */
    p2pt_copy_desc e[2] = {{NULL, NULL, 0}, {buf, buf, 0}};
    cr_assert_eq(p2pt_copy_batch_async(h, e, 2, NULL), P2PT_SUCCESS);
    cr_assert_eq(atomic_load(&h->stats.rejected), 3);
    p2pt_finalize(h);
}

Test(batch_args, device_batches_need_a_kernel_transport_and_sane_arguments)
{
    p2pt_handle *ce = bt_cpu_handle("ce", NULL), *tma = bt_cpu_handle("tma", NULL);
    uint64_t fake[16];
    cr_assert_eq(p2pt_copy_batch_device_async(ce, (void *)fake, (void *)fake, 4, fake, NULL),
                 P2PT_NOT_SUPPORTED);
    cr_assert(strstr(p2pt_last_error(NULL), "P2P_TRANSPORT=tma") != NULL, "%s",
              p2pt_last_error(NULL));
    cr_assert_eq(p2pt_copy_batch_device_async(tma, NULL, (void *)fake, 4, fake, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_batch_device_async(tma, (void *)fake, (void *)fake, 0, fake, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_batch_device_async(tma, (void *)fake, (void *)fake,
                                              P2PT_DEVICE_BATCH_MAX + 1, fake, NULL),
                 P2PT_INVALID_ARGUMENT);
    cr_assert_eq(p2pt_copy_batch_device_async(tma, (void *)fake, (void *)fake, 4,
                                              (char *)fake + 8, NULL),
                 P2PT_INVALID_ARGUMENT, "a workspace that is not 16-byte aligned");
    cr_assert(strstr(p2pt_last_error(NULL), "16-byte") != NULL, "%s", p2pt_last_error(NULL));
    cr_assert_eq(p2pt_batch_workspace_bytes(10), sizeof(p2pt_batch_status) + 32);
    cr_assert_eq(p2pt_batch_workspace_bytes(1u << 24), p2pt_batch_workspace_bytes(1));
    p2pt_finalize(ce);
    p2pt_finalize(tma);
}

Test(batch_args, the_descriptor_layout_is_the_documented_one)
{
    cr_assert_eq(sizeof(p2pt_copy_desc), 24);
    cr_assert_eq(offsetof(p2pt_copy_desc, src), 8);
    cr_assert_eq(offsetof(p2pt_copy_desc, bytes), 16);
    cr_assert_eq(sizeof(struct p2pt_batch_desc), sizeof(p2pt_copy_desc));
    cr_assert_eq(offsetof(struct p2pt_batch_desc, bytes), offsetof(p2pt_copy_desc, bytes));
    cr_assert_eq(sizeof(struct p2pt_batch_ws_head), 64);
    cr_assert_eq(sizeof(p2pt_batch_status), sizeof(struct p2pt_batch_status_record));
    /* The large launch's parameters fit the 32,764 bytes a kernel may take. */
    cr_assert_leq(sizeof(struct p2pt_batch_large), 32764);
    cr_assert_leq(sizeof(struct p2pt_batch_dev_params), 4096);
}
