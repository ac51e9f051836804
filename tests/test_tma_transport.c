/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA transport specifically (init with transport "tma"): one kernel
 * launch per copy at any size; non-co-aligned copies go to the copy engine,
 * correct and counted; thirty-two threads making their first copy at once
 * cause exactly one NVRTC compilation; 1 GiB + 13 bytes byte-exact; other
 * chunk and stage settings; prepare on a bad device; prepare doing the
 * compile and load so the copy after it does neither; pageable host memory
 * refused by validation instead of faulting the GPU.
 */
#include <pthread.h>

/* prepare compiles and loads every kernel of the TMA transport. */
#define TMA_KERNELS ((uint64_t)p2pt__kernel_count(&p2pt__transport_tma))

#include "gpu_test.h"

Test(tma, one_copy_is_one_kernel_launch_at_any_size)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    static const size_t sizes[] = {1, 100 * 1024, 256u * 1024 * 1024 + 3};
    struct gt_buf src = gt_alloc(sizes[2] + 16), dst = gt_alloc(sizes[2] + 16);
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++) {
        p2pt_properties a = {sizeof(a)}, b = {sizeof(b)};
        GT_OK(p2pt_get_properties(h, &a));
        gt_fill(&src, i + 1);
        gt_poison(&dst);
        GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 1), (void *)(src.ptr + 1), sizes[i], NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        GT_OK(p2pt_get_properties(h, &b));
        cr_assert_eq(b.tma_launches - a.tma_launches, 1, "%zu bytes took %llu launches", sizes[i],
                     (unsigned long long)(b.tma_launches - a.tma_launches));
        cr_assert_eq(b.ce_copies, a.ce_copies, "a co-aligned copy went to the copy engine");
        gt_expect_range(&dst, 1, &src, 1, sizes[i], "tma");
    }
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

Test(tma, non_coaligned_copy_goes_to_the_copy_engine_and_is_counted)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    const size_t n = 5 * 1024 * 1024 + 3;
    struct gt_buf src = gt_alloc(n + 16), dst = gt_alloc(n + 16);
    gt_fill(&src, 9);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 2), (void *)(src.ptr + 1), n, NULL));
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 2), (void *)(src.ptr + 1), n, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 2, &src, 1, n, "misaligned tma request");
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.ce_fallbacks, 2);
    cr_assert_eq(p.tma_launches, 0);
    cr_assert_eq(p.copies, 2);
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

#define N_FIRST 32

struct first_copy {
    pthread_t tid;
    p2pt_handle *h;
    CUcontext ctx;
    CUdeviceptr src, dst;
    size_t n;
    pthread_barrier_t *go;
    p2pt_status st;
    char why[256];
};

static void *first_copy_main(void *arg)
{
    struct first_copy *f = arg;
    CUstream s = NULL;
    tcu.cuCtxSetCurrent(f->ctx);
    tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    pthread_barrier_wait(f->go);
    f->st = p2pt_copy_async(f->h, (void *)f->dst, (void *)f->src, f->n, s);
    if (f->st != P2PT_SUCCESS)
        snprintf(f->why, sizeof(f->why), "%s", p2pt_last_error(NULL));
    else if (tcu.cuStreamSynchronize(s) != CUDA_SUCCESS)
        f->st = P2PT_CUDA_ERROR;
    tcu.cuStreamDestroy(s);
    return NULL;
}

Test(tma, thirty_two_concurrent_first_copies_compile_once)
{
    gt_require_gpus(1);
    CUcontext ctx = gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.compilations, 0, "fresh process expected");
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_FIRST);
    struct first_copy f[N_FIRST];
    struct gt_buf src[N_FIRST], dst[N_FIRST];
    for (int i = 0; i < N_FIRST; i++) {
        src[i] = gt_alloc(200000 + (size_t)i * 48);
        dst[i] = gt_alloc(src[i].n);
        gt_fill(&src[i], (uint64_t)i + 500);
        f[i] = (struct first_copy){0, h, ctx, src[i].ptr, dst[i].ptr, src[i].n, &go, 0, ""};
        cr_assert_eq(pthread_create(&f[i].tid, NULL, first_copy_main, &f[i]), 0);
    }
    for (int i = 0; i < N_FIRST; i++)
        pthread_join(f[i].tid, NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < N_FIRST; i++) {
        cr_assert_eq(f[i].st, P2PT_SUCCESS, "thread %d: %s", i, f[i].why);
        gt_expect_range(&dst[i], 0, &src[i], 0, src[i].n, "concurrent first copy");
        gt_free(&src[i]);
        gt_free(&dst[i]);
    }
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.compilations, 1, "%llu compilations", (unsigned long long)p.compilations);
    cr_assert_eq(p.module_loads, 1, "%llu module loads", (unsigned long long)p.module_loads);
    cr_assert_eq(p.tma_launches, N_FIRST);
    p2pt_finalize(h);
}

Test(tma, one_gibibyte_plus_thirteen_bytes_is_byte_exact)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t n = (1ull << 30) + 13;
    size_t free_b = 0, total_b = 0;
    GT_CHECK(tcu.cuMemGetInfo(&free_b, &total_b));
    if (free_b < 2 * n + (256u << 20))
        cr_skip_test("needs %zu MiB of free GPU memory, %zu free", (2 * n) >> 20, free_b >> 20);
    p2pt_handle *h = gt_handle("tma");
    struct gt_buf src = gt_alloc(n + 16), dst = gt_alloc(n + 16);
    gt_fill(&src, 1234);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 3), (void *)(src.ptr + 3), n, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 3, &src, 3, n, "1 GiB + 13");
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

Test(tma, other_chunk_and_stage_settings_stay_byte_exact)
{
    gt_require_gpus(1);
    gt_use_device(0);
    static const char *const settings[][2] = {{"16K", "2"}, {"65536", "3"}, {"16", "1"},
                                              {"32K", "6"}, {"200K", "1"}};
    const size_t n = 3 * 1024 * 1024 + 77;
    struct gt_buf src = gt_alloc(n + 16), dst = gt_alloc(n + 16);
    for (size_t i = 0; i < P2PT_ARRAY_LEN(settings); i++) {
        setenv("P2P_TRANSPORT_CHUNK_BYTES", settings[i][0], 1);
        setenv("P2P_TRANSPORT_STAGES", settings[i][1], 1);
        p2pt_handle *h = gt_handle("tma");
        /* 16-byte chunks make ~200k chunks: keep that one small. */
        size_t len = i == 2 ? 100000 + 9 : n;
        gt_fill(&src, i + 70);
        gt_poison(&dst);
        GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 9), (void *)(src.ptr + 9), len, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        char what[64];
        snprintf(what, sizeof(what), "chunk %s x %s stages", settings[i][0], settings[i][1]);
        gt_expect_range(&dst, 9, &src, 9, len, what);
        p2pt_finalize(h);
    }
    unsetenv("P2P_TRANSPORT_CHUNK_BYTES");
    unsetenv("P2P_TRANSPORT_STAGES");
    gt_free(&src);
    gt_free(&dst);
}

/* The streaming kernel, brought down to small sizes with
 * P2P_TRANSPORT_STREAM_MIN=1: CTA edges (4 KiB each), a partial last CTA,
 * every head and tail length, one launch each, and every launch of that
 * kernel. */
Test(tma, the_streaming_kernel_is_byte_exact_at_every_edge)
{
    gt_require_gpus(1);
    gt_use_device(0);
    static const size_t sizes[] = {1,         15,       16,       17,          4096,
                                   4096 + 16, 4096 * 2 - 16, 131072 + 5, 1000003,
                                   8u * 1024 * 1024 + 29};
    static const size_t offs[] = {0, 1, 7, 15};
    const size_t most = 8u * 1024 * 1024 + 64;
    struct gt_buf src = gt_alloc(most), dst = gt_alloc(most);
    p2pt_init_args a = {sizeof(a), NULL, "tma", "P2P_TRANSPORT_STREAM_MIN=1"};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    uint64_t launches = 0;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++)
        for (size_t o = 0; o < P2PT_ARRAY_LEN(offs); o++) {
            gt_fill(&src, i * 10 + o + 500);
            gt_poison(&dst);
            GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + offs[o]), (void *)(src.ptr + offs[o]),
                                  sizes[i], NULL));
            GT_CHECK(tcu.cuCtxSynchronize());
            char what[64];
            snprintf(what, sizeof(what), "streaming kernel, +%zu", offs[o]);
            gt_expect_range(&dst, offs[o], &src, offs[o], sizes[i], what);
            launches++;
        }
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.tma_launches, launches, "one launch per copy");
    cr_assert_eq(p.stream_launches, launches, "every copy on the streaming kernel");
    p2pt_finalize(h);
    gt_free(&src);
    gt_free(&dst);
}

/* Which kernel a copy takes: the streaming kernel for local copies from
 * P2P_TRANSPORT_STREAM_MIN on, the bulk-copy ring below it, with the
 * setting 0, and under a CTA cap (the streaming kernel's grid has a CTA
 * for every 4 KiB). */
Test(tma, the_streaming_kernel_takes_local_copies_from_stream_min)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const size_t min = 1u << 20;
    struct gt_buf src = gt_alloc(min + 16), dst = gt_alloc(min + 16);
    static const struct {
        const char *opts;
        size_t bytes;
        uint64_t streamed;
    } cases[] = {
        {"P2P_TRANSPORT_STREAM_MIN=1M", (1u << 20) - 16, 0},
        {"P2P_TRANSPORT_STREAM_MIN=1M", 1u << 20, 1},
        {"P2P_TRANSPORT_STREAM_MIN=1M", (1u << 20) + 3, 1},
        {"P2P_TRANSPORT_STREAM_MIN=0", 1u << 20, 0},
        {"P2P_TRANSPORT_STREAM_MIN=1M P2P_TRANSPORT_MAX_CTAS=8", 1u << 20, 0},
    };
    for (size_t i = 0; i < P2PT_ARRAY_LEN(cases); i++) {
        p2pt_init_args a = {sizeof(a), NULL, "tma", cases[i].opts};
        p2pt_handle *h = NULL;
        GT_OK(p2pt_init(&a, &h));
        gt_fill(&src, 900 + i);
        gt_poison(&dst);
        GT_OK(p2pt_copy_async(h, (void *)dst.ptr, (void *)src.ptr, cases[i].bytes, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        gt_expect_range(&dst, 0, &src, 0, cases[i].bytes, cases[i].opts);
        p2pt_properties p = {sizeof(p)};
        GT_OK(p2pt_get_properties(h, &p));
        cr_assert_eq(p.tma_launches, 1u, "%s, %zu bytes: one launch", cases[i].opts,
                     cases[i].bytes);
        cr_assert_eq(p.stream_launches, cases[i].streamed, "%s, %zu bytes: %s", cases[i].opts,
                     cases[i].bytes, cases[i].streamed ? "streaming kernel" : "bulk-copy ring");
        p2pt_finalize(h);
    }
    gt_free(&src);
    gt_free(&dst);
}

Test(tma, a_ring_over_the_device_shared_memory_is_refused_at_prepare)
{
    gt_require_gpus(1);
    /* 227 KiB passes the static check at init but not the device's limit
     * once the kernel's own shared memory is counted. */
    setenv("P2P_TRANSPORT_CHUNK_BYTES", "227K", 1);
    setenv("P2P_TRANSPORT_STAGES", "1", 1);
    p2pt_handle *h = gt_handle("tma");
    p2pt_status st = p2pt_prepare(h, 0);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "232448") != NULL &&
                  strstr(p2pt_last_error(NULL), "allows") != NULL,
              "message names the values and the limit: %s", p2pt_last_error(NULL));
    p2pt_finalize(h);
}

Test(tma, prepare_on_a_missing_device_is_status_4)
{
    gt_require_gpus(1);
    p2pt_handle *h = gt_handle("tma");
    p2pt_status st = p2pt_prepare(h, 999);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "999") != NULL, "%s", p2pt_last_error(NULL));
    p2pt_finalize(h);
}

Test(tma, prepare_does_the_one_time_work_and_the_copy_after_it_is_exact)
{
    gt_require_gpus(1);
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_prepare(h, 0));
    GT_OK(p2pt_prepare(h, 0)); /* cheap when done */
    p2pt_properties a = {sizeof(a)}, b = {sizeof(b)};
    GT_OK(p2pt_get_properties(h, &a));
    /* Every kernel: a batch captured later needs its module too. */
    cr_assert_eq(a.compilations, TMA_KERNELS, "prepare compiled %llu times",
                 (unsigned long long)a.compilations);
    cr_assert_eq(a.module_loads, TMA_KERNELS, "prepare loaded %llu modules",
                 (unsigned long long)a.module_loads);
    /* prepare used device 0's primary context: copies there need nothing new. */
    gt_use_device(0);
    const size_t n = 1024 * 1024 + 5;
    struct gt_buf src = gt_alloc(n + 16), dst = gt_alloc(n + 16);
    gt_fill(&src, 4242);
    GT_OK(p2pt_copy_async(h, (void *)(dst.ptr + 5), (void *)(src.ptr + 5), n, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    gt_expect_range(&dst, 5, &src, 5, n, "tma after prepare");
    GT_OK(p2pt_get_properties(h, &b));
    cr_assert_eq(b.compilations, a.compilations, "the copy compiled again");
    cr_assert_eq(b.module_loads, a.module_loads, "the copy loaded the module again");
    cr_assert_eq(b.tma_launches, 1);
    gt_free(&src);
    gt_free(&dst);
    p2pt_finalize(h);
}

Test(tma, pageable_host_memory_is_refused_not_faulted)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    struct gt_buf dst = gt_alloc(1 << 16);
    unsigned char *host = malloc(1 << 16);
    memset(host, 1, 1 << 16);
    p2pt_status st = p2pt_copy_async(h, (void *)dst.ptr, host, 1 << 16, NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "pageable") != NULL, "%s", p2pt_last_error(NULL));
    /* The copy engine handles the same request. */
    p2pt_handle *ce = gt_handle("ce");
    GT_OK(p2pt_copy_async(ce, (void *)dst.ptr, host, 1 << 16, NULL));
    GT_CHECK(tcu.cuCtxSynchronize());
    free(host);
    gt_free(&dst);
    p2pt_finalize(h);
    p2pt_finalize(ce);
}

/*
 * Programmatic dependent launch lets each TMA copy launch while the one
 * before it in the stream is still running; the kernel must not read or
 * write global memory before that one's writes are visible. A dependent
 * chain A -> B -> C -> A, 300 rounds, enqueued with no synchronisation,
 * catches any copy that ran early: B and C start poisoned, so an early read
 * carries poison or stale bytes forward. Odd sizes and offsets put bytes in
 * the plain head and tail stores too. Every third step goes through the
 * driver's own copy engine, so the kernel also orders against non-kernel
 * work. Run with PDL on (default) and off.
 */
static void dependent_chain(const char *pdl)
{
    gt_require_gpus(1);
    setenv("P2P_TRANSPORT_PDL", pdl, 1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static const size_t sizes[] = {4096 + 3, 64 * 1024 + 5, 3u * 1024 * 1024 + 7};
    for (size_t i = 0; i < P2PT_ARRAY_LEN(sizes); i++) {
        size_t n = sizes[i], off = 3;
        struct gt_buf ref = gt_alloc(n + 16), a = gt_alloc(n + 16), b = gt_alloc(n + 16),
                      c = gt_alloc(n + 16);
        gt_fill(&ref, 900 + i);
        GT_CHECK(tcu.cuMemcpyAsync(a.ptr + off, ref.ptr + off, n, NULL));
        GT_CHECK(tcu.cuCtxSynchronize());
        for (int r = 0; r < 300; r++) {
            GT_OK(p2pt_copy_async(h, (void *)(b.ptr + off), (void *)(a.ptr + off), n, s));
            if (r % 3 == 2)
                GT_CHECK(tcu.cuMemcpyAsync(c.ptr + off, b.ptr + off, n, s));
            else
                GT_OK(p2pt_copy_async(h, (void *)(c.ptr + off), (void *)(b.ptr + off), n, s));
            GT_OK(p2pt_copy_async(h, (void *)(a.ptr + off), (void *)(c.ptr + off), n, s));
        }
        GT_CHECK(tcu.cuStreamSynchronize(s));
        gt_expect_range(&a, off, &ref, off, n, "chain end A");
        gt_expect_range(&b, off, &ref, off, n, "chain end B");
        gt_expect_range(&c, off, &ref, off, n, "chain end C");
        gt_free(&ref);
        gt_free(&a);
        gt_free(&b);
        gt_free(&c);
    }
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(h, &p));
    cr_assert_eq(p.pdl, pdl[0] == '1', "properties report P2P_TRANSPORT_PDL=%s", pdl);
    /* per size: 200 rounds of 3 TMA copies, 100 rounds of 2 */
    cr_assert_eq(p.tma_launches, 3 * (200 * 3 + 100 * 2), "%llu launches",
                 (unsigned long long)p.tma_launches);
    GT_CHECK(tcu.cuStreamDestroy(s));
    p2pt_finalize(h);
}

Test(tma, dependent_back_to_back_copies_stay_ordered_with_pdl)
{
    dependent_chain("1");
}

Test(tma, dependent_back_to_back_copies_stay_ordered_without_pdl)
{
    dependent_chain("0");
}

/* No GPU needed: the CTAs of one launch, from a module's device facts. */
Test(tma_grid, one_or_two_ctas_per_sm_as_shared_memory_allows_capped_by_max_ctas)
{
    struct p2pt_config cfg;
    cr_assert_eq(p2pt__config_read(&cfg, NULL, "tma"), P2PT_SUCCESS);
    p2pt_handle *h = NULL;
    cr_assert_eq(p2pt__handle_new(&cfg, NULL, &h), P2PT_SUCCESS);
    struct p2pt_module m;
    memset(&m, 0, sizeof(m));
    m.sm_count = 132;
    m.smem_per_sm = 233472; /* H100: 228 KiB per SM */
    /* The engine's own settings: its launches' cap lives there. */
    struct p2pt_tma_settings *s = p2pt__tma_settings(h);
    /* 192 KiB rings: one per SM; 96 KiB: two; tiny ones: never more than two. */
    cr_assert_eq(p2pt__kernel_ctas(h, &s->launch, &m, 192 * 1024), 132u);
    cr_assert_eq(p2pt__kernel_ctas(h, &s->launch, &m, 96 * 1024), 264u);
    cr_assert_eq(p2pt__kernel_ctas(h, &s->launch, &m, 4096), 264u);
    /* More than an SM holds still counts one CTA per SM: the callers refuse
     * a ring that does not fit before they ask. */
    cr_assert_eq(p2pt__kernel_ctas(h, &s->launch, &m, 300 * 1024), 132u);
    s->launch.max_ctas = 32;
    cr_assert_eq(p2pt__kernel_ctas(h, &s->launch, &m, 96 * 1024), 32u);
    p2pt_finalize(h);
}
