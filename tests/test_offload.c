/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Offload beside compute: host batches between pinned host memory and the
 * GPU. Each case runs twice: over the fake driver (tests/fault/fake_cuda.c,
 * any machine; copies are memcpy, kernels do nothing) and on a real GPU
 * (skipped without one, with the reason). It proves:
 *   - the pass asks the driver once per allocation a batch touches, not
 *     once per piece (counted over the fake driver), and stays as strict:
 *     pageable memory among pinned pieces, and a piece that runs past the
 *     end of its allocation, are refused naming the piece; pools freed and
 *     allocated again between batches, pinned and device memory swapping
 *     places, are asked about again;
 *   - the copy engine groups a KV cache's block-major batch into one 2D
 *     copy per block and a layer-major batch of random slots into no fewer
 *     operations than it must, byte-exact with guards, in both directions,
 *     at odd sizes and offsets, for 100,000 pieces;
 *   - P2P_TRANSPORT_SM_BUDGET=0 launches no kernel (counter) and says so in
 *     explain; a budget of N never launches a grid wider than N (counter);
 *   - a tma batch whose pieces all cross the host link launches no more
 *     CTAs than the table's `link` lines (counter).
 */
#include "batch_test.h"

/* ------------------------------------------------------------ set-up */

static p2pt_handle *handle_opts(const char *transport, const char *options)
{
    p2pt_init_args a = {sizeof(a), NULL, transport, options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    return h;
}

static CUstream new_stream(void)
{
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

/* A KV cache's offload: `blocks` blocks of `layers` pieces of `n` bytes.
 * On the GPU side a block's layers sit `stride` apart (one allocation for
 * every layer); on the host side a block's pieces are side by side. Block
 * b's GPU slot is slot[b]; its host slot is b. h2d: host to GPU. */
static p2pt_copy_desc *kv_batch(const struct gt_buf *gpu, const struct gt_buf *host,
                                size_t blocks, size_t layers, size_t n, size_t stride,
                                const size_t *slot, size_t off, bool h2d)
{
    p2pt_copy_desc *d = calloc(blocks * layers, sizeof(*d));
    cr_assert_not_null(d);
    for (size_t b = 0; b < blocks; b++)
        for (size_t l = 0; l < layers; l++) {
            CUdeviceptr g = gpu->ptr + off + l * stride + slot[b] * n;
            CUdeviceptr c = host->ptr + off + (b * layers + l) * n;
            p2pt_copy_desc *e = &d[b * layers + l];
            e->dst = (void *)(uintptr_t)(h2d ? g : c);
            e->src = (const void *)(uintptr_t)(h2d ? c : g);
            e->bytes = n;
        }
    return d;
}

/* Run batch `d` on `s`, then check the whole destination pool. */
static void run_and_check(p2pt_handle *h, CUstream s, struct gt_buf *dst, struct gt_buf *src,
                          const p2pt_copy_desc *d, size_t n, const char *what)
{
    unsigned char *src_host = bt_host_copy(src);
    gt_poison(dst);
    GT_OK(p2pt_copy_batch_async(h, d, n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    if (!gt_on_fake_driver() || strcmp(gt_props(h).transport, "ce") == 0 || gt_props(h).kernel_launches == 0)
        bt_expect(dst, src, src_host, d, n, NULL, what);
    free(src_host);
}

/* ----------------------------------------------- one query per allocation */

static void memo_counts(void)
{
    const size_t blocks = 64, layers = 32, n = 4096, stride = blocks * n;
    struct gt_buf gpu = gt_alloc(layers * stride), host = gt_alloc_host(blocks * layers * n);
    size_t slot[64];
    for (size_t b = 0; b < blocks; b++)
        slot[b] = (b * 37) % blocks;
    p2pt_copy_desc *d = kv_batch(&gpu, &host, blocks, layers, n, stride, slot, 0, false);
    CUstream s = new_stream();
    const char *engines[] = {"ce", "tma", "auto"};
    for (int e = 0; e < 3; e++) {
        p2pt_handle *h = gt_handle(engines[e]);
        unsigned long before = gt_fake_calls("cuPointerGetAttributes") +
                               gt_fake_calls("cuPointerGetAttribute");
        GT_OK(p2pt_copy_batch_async(h, d, blocks * layers, s));
        unsigned long queries = gt_fake_calls("cuPointerGetAttributes") +
                                gt_fake_calls("cuPointerGetAttribute") - before;
        /* Two allocations, one query each: auto's first piece, located to
         * route the batch, is not asked about again. */
        cr_expect_eq(queries, 2, "%s: %lu pointer queries for %zu pinned-host pieces",
                     engines[e], queries, blocks * layers);
        /* The same pieces as blocks: one query per allocation too. */
        p2pt_block_layer ls[32];
        int64_t map[2 * 64];
        for (size_t l = 0; l < layers; l++)
            ls[l] = (p2pt_block_layer){sizeof(ls[l]),
                                       (void *)(uintptr_t)(host.ptr + l * blocks * n),
                                       (const void *)(uintptr_t)(gpu.ptr + l * stride), n,
                                       blocks, blocks};
        for (size_t b = 0; b < blocks; b++)
            map[2 * b] = (int64_t)b, map[2 * b + 1] = (int64_t)slot[b];
        before = gt_fake_calls("cuPointerGetAttributes") + gt_fake_calls("cuPointerGetAttribute");
        GT_OK(p2pt_copy_blocks_async(h, ls, layers, map, blocks, s));
        queries = gt_fake_calls("cuPointerGetAttributes") + gt_fake_calls("cuPointerGetAttribute") -
                  before;
        cr_expect_eq(queries, 2, "%s: %lu pointer queries for %zu blocks", engines[e], queries,
                     blocks * layers);
        GT_CHECK(tcu.cuStreamSynchronize(s));
        p2pt_finalize(h);
    }
    free(d);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, the_pass_asks_the_driver_once_per_allocation)
{
    gt_use_fake_driver();
    memo_counts();
}

/* ------------------------------ no early start for batches that leave SMs */

/* Launches through cuLaunchKernelEx (with the PDL attribute) and through
 * cuLaunchKernel (without) of one host batch of `n` pieces `d`. */
static void launches_of(p2pt_handle *h, const p2pt_copy_desc *d, size_t n, CUstream s,
                        unsigned long *ex, unsigned long *plain)
{
    const unsigned long e0 = gt_fake_calls("cuLaunchKernelEx"), p0 = gt_fake_calls("cuLaunchKernel");
    GT_OK(p2pt_copy_batch_async(h, d, n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    *ex = gt_fake_calls("cuLaunchKernelEx") - e0;
    *plain = gt_fake_calls("cuLaunchKernel") - p0;
}

static void pdl_where_it_belongs(void)
{
    const size_t blocks = 64, layers = 8, n = 4096, stride = blocks * n;
    struct gt_buf gpu = gt_alloc(layers * stride), host = gt_alloc_host(blocks * layers * n),
                  gpu2 = gt_alloc(layers * stride);
    size_t slot[64];
    for (size_t b = 0; b < blocks; b++)
        slot[b] = b;
    CUstream s = new_stream();
    unsigned long ex, plain;
    for (size_t count = 100; count <= blocks * layers; count += blocks * layers - 100) {
        p2pt_handle *h = handle_opts("tma", NULL);
        /* Every piece across the host link, on its link CTAs: no early start
         * (a second batch would hold its CTAs beside the first's). Through
         * the parameters (100 pieces) and through the ring (512). */
        p2pt_copy_desc *d = kv_batch(&gpu, &host, blocks, layers, n, stride, slot, 0, false);
        launches_of(h, d, count, s, &ex, &plain);
        cr_expect(ex == 0 && plain == 1, "%zu pieces to host: %lu with PDL, %lu without", count,
                  ex, plain);
        /* GPU to GPU: the full grid, with PDL. */
        for (size_t i = 0; i < count; i++)
            d[i].dst = (void *)(uintptr_t)(gpu2.ptr + i * n);
        launches_of(h, d, count, s, &ex, &plain);
        cr_expect(ex == 1 && plain == 0, "%zu pieces GPU to GPU: %lu with PDL, %lu without",
                  count, ex, plain);
        p2pt_finalize(h);
        /* Under an SM budget: none. */
        h = handle_opts("tma", "P2P_TRANSPORT_SM_BUDGET=4");
        launches_of(h, d, count, s, &ex, &plain);
        cr_expect(ex == 0 && plain == 1, "%zu pieces under a budget: %lu with PDL, %lu without",
                  count, ex, plain);
        p2pt_finalize(h);
        free(d);
    }
    gt_free(&gpu);
    gt_free(&gpu2);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, batches_that_leave_sms_to_others_never_start_early)
{
    gt_use_fake_driver();
    pdl_where_it_belongs();
}

/* ---------------------------------------- strict as before, and never stale */

static void memo_refusals(void)
{
    struct gt_buf gpu = gt_alloc(1 << 20), host = gt_alloc_host(1 << 20);
    unsigned char *pageable = malloc(8192);
    cr_assert_not_null(pageable);
    p2pt_copy_desc d[64];
    for (size_t i = 0; i < 64; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(host.ptr + i * 8192),
                                (const void *)(uintptr_t)(gpu.ptr + i * 8192), 8192};
    CUstream s = new_stream();
    p2pt_handle *tma = gt_handle("tma"), *ce = gt_handle("ce");
    /* Pageable memory among pinned pieces: tma refuses it, naming piece 17. */
    d[17].dst = pageable;
    cr_assert_eq(p2pt_copy_batch_async(tma, d, 64, s), P2PT_INVALID_ARGUMENT);
    const char *msg = p2pt_last_error(NULL);
    cr_expect(strstr(msg, "17") && strstr(msg, "not memory CUDA knows"), "%s", msg);
    /* The copy engine stages it: accepted, and copied. */
    GT_OK(p2pt_copy_batch_async(ce, d, 64, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    unsigned char want[64];
    gt_read(&gpu, want, gpu.ptr + 17 * 8192, sizeof(want));
    cr_expect(memcmp(pageable, want, sizeof(want)) == 0, "the staged piece was copied");
    /* A piece that runs past the end of its allocation, by one byte:
     * refused by both engines, naming it. */
    d[17].dst = (void *)(uintptr_t)(host.ptr + host.n + GT_GUARD - 4096);
    d[17].bytes = 4097;
    d[17].src = (const void *)(uintptr_t)gpu.ptr;
    p2pt_handle *both[] = {tma, ce};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(p2pt_copy_batch_async(both[k], d, 64, s), P2PT_INVALID_ARGUMENT);
        msg = p2pt_last_error(NULL);
        cr_expect(strstr(msg, "17") && strstr(msg, "runs past the end of its allocation"),
                  "%s", msg);
    }
    p2pt_finalize(tma);
    p2pt_finalize(ce);
    free(pageable);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, pageable_memory_and_pieces_past_their_allocation_are_refused)
{
    gt_use_fake_driver();
    memo_refusals();
}

Test(offload_gpu, pageable_memory_and_pieces_past_their_allocation_are_refused)
{
    gt_use_gpu();
    memo_refusals();
}

/* Two batches; between them both pools are freed and allocated again with
 * pinned and device memory swapping roles (and, often, addresses). */
static void memo_not_stale(const char *transport)
{
    const size_t n = 4 << 20;
    CUstream s = new_stream();
    p2pt_handle *h = gt_handle(transport);
    for (int round = 0; round < 4; round++) {
        bool host_first = round % 2 == 0;
        struct gt_buf a = host_first ? gt_alloc_host(n) : gt_alloc(n);
        struct gt_buf b = host_first ? gt_alloc(n) : gt_alloc_host(n);
        gt_fill(&a, 100 + (uint64_t)round);
        p2pt_copy_desc d[256];
        for (size_t i = 0; i < 256; i++)
            d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(b.ptr + (255 - i) * 16384 + 3),
                                    (const void *)(uintptr_t)(a.ptr + i * 16384 + 3), 16381};
        char what[64];
        snprintf(what, sizeof(what), "%s round %d", transport, round);
        run_and_check(h, s, &b, &a, d, 256, what);
        gt_free(&a);
        gt_free(&b);
    }
    p2pt_finalize(h);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, pools_freed_and_allocated_again_are_asked_about_again)
{
    gt_use_fake_driver();
    memo_not_stale("ce");
    memo_not_stale("tma");
}

Test(offload_gpu, pools_freed_and_allocated_again_are_asked_about_again)
{
    gt_use_gpu();
    memo_not_stale("ce");
    memo_not_stale("tma");
    memo_not_stale("auto");
}

/* --------------------------------------------------- copy-engine groups */

static void ce_block_major(bool h2d, size_t n, size_t off)
{
    const size_t blocks = 24, layers = 32, gpu_blocks = 40, stride = gpu_blocks * n + 64;
    struct gt_buf gpu = gt_alloc(layers * stride + off), host = gt_alloc_host(blocks * layers * n + off);
    size_t slot[24];
    for (size_t b = 0; b < blocks; b++)
        slot[b] = (b * 7 + 3) % gpu_blocks;
    p2pt_copy_desc *d = kv_batch(&gpu, &host, blocks, layers, n, stride, slot, off, h2d);
    gt_fill(h2d ? &host : &gpu, 7 + n);
    CUstream s = new_stream();
    p2pt_handle *h = handle_opts("ce", NULL);
    char what[96];
    snprintf(what, sizeof(what), "ce block-major %s, %zu-byte pieces at +%zu",
             h2d ? "h2d" : "d2h", n, off);
    run_and_check(h, s, h2d ? &gpu : &host, h2d ? &host : &gpu, d, blocks * layers, what);
    p2pt_properties p = gt_props(h);
    cr_expect_eq(p.ce_operations, blocks, "%s: %llu operations for %zu blocks", what,
                 (unsigned long long)p.ce_operations, blocks);
    /* Explain counts the same groups. */
    p2pt_choice c;
    memset(&c, 0, sizeof(c));
    c.size = sizeof(c);
    GT_OK(p2pt_explain_batch(h, d, blocks * layers, s, &c));
    char want[96];
    snprintf(want, sizeof(want), "%zu pieces grouped into %zu copy-engine operations: %zu 2D",
             blocks * layers, blocks, blocks);
    cr_expect(strstr(c.reason, want) != NULL, "%s: explain says: %s", what, c.reason);
    cr_expect_eq(p.kernel_launches, 0);
    p2pt_finalize(h);
    free(d);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

static void ce_layer_major_random(bool h2d)
{
    const size_t pieces = 2048, n = 4096, slots = 8192;
    struct gt_buf gpu = gt_alloc(pieces * n), host = gt_alloc_host(slots * n);
    p2pt_copy_desc *d = calloc(pieces, sizeof(*d));
    cr_assert_not_null(d);
    /* A permutation of host slots: no two pieces adjacent on both sides
     * unless chance makes them so. */
    size_t *perm = malloc(slots * sizeof(*perm));
    for (size_t i = 0; i < slots; i++)
        perm[i] = i;
    uint64_t x = 12345;
    for (size_t i = slots - 1; i > 0; i--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t j = (size_t)((x >> 33) % (i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (size_t i = 0; i < pieces; i++) {
        CUdeviceptr g = gpu.ptr + i * n, c = host.ptr + perm[i] * n;
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(h2d ? g : c),
                                (const void *)(uintptr_t)(h2d ? c : g), n};
    }
    gt_fill(h2d ? &host : &gpu, 99);
    CUstream s = new_stream();
    p2pt_handle *h = gt_handle("ce");
    run_and_check(h, s, h2d ? &gpu : &host, h2d ? &host : &gpu, d, pieces,
                  h2d ? "ce layer-major h2d" : "ce layer-major d2h");
    p2pt_properties p = gt_props(h);
    cr_expect(p.ce_operations > pieces / 2 && p.ce_operations <= pieces,
              "%llu operations for %zu pieces with nothing to coalesce",
              (unsigned long long)p.ce_operations, pieces);
    p2pt_finalize(h);
    free(perm);
    free(d);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

/* Both ways, KV blocks of 16 KiB and odd sizes at odd offsets. */
static void ce_block_major_cases(void)
{
    ce_block_major(false, 16384, 0);
    ce_block_major(true, 16384, 0);
    ce_block_major(false, 1000, 7);
    ce_block_major(true, 4099, 13);
}

Test(offload_fake, ce_groups_a_block_major_batch_into_one_2d_copy_per_block)
{
    gt_use_fake_driver();
    ce_block_major_cases();
}

Test(offload_gpu, ce_groups_a_block_major_batch_into_one_2d_copy_per_block)
{
    gt_use_gpu();
    ce_block_major_cases();
}

Test(offload_fake, ce_takes_a_layer_major_batch_of_random_slots_piece_by_piece)
{
    gt_use_fake_driver();
    ce_layer_major_random(false);
    ce_layer_major_random(true);
}

Test(offload_gpu, ce_takes_a_layer_major_batch_of_random_slots_piece_by_piece)
{
    gt_use_gpu();
    ce_layer_major_random(false);
    ce_layer_major_random(true);
}

/* 100,000 pieces of random sizes in runs that break and restart: through
 * the copy engine, every byte where it belongs. */
static void ce_many_pieces(void)
{
    const size_t count = 100000;
    struct bt_rng r = {42};
    size_t pool = bt_pool_bytes(count, 600);
    struct gt_buf src = gt_alloc_host(pool), dst = gt_alloc(pool);
    gt_fill(&src, 5);
    p2pt_copy_desc *d = calloc(count, sizeof(*d));
    cr_assert_not_null(d);
    /* Runs of equal pieces at constant strides on both sides, then a gap. */
    size_t k = 0, dat = 1, sat = 3;
    while (k < count) {
        size_t run = 1 + (size_t)(bt_next(&r) % 48), n = 1 + (size_t)(bt_next(&r) % 600);
        size_t ds = n + (size_t)(bt_next(&r) % 3) * 5, ss = n + (size_t)(bt_next(&r) % 2) * 11;
        for (size_t i = 0; i < run && k < count; i++, k++) {
            d[k] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + dat),
                                    (const void *)(uintptr_t)(src.ptr + sat),
                                    i % 11 == 5 ? 0 : n};
            dat += ds;
            sat += ss;
        }
        dat += 1 + bt_next(&r) % 64;
        sat += 1 + bt_next(&r) % 64;
    }
    cr_assert_leq(dat, pool, "the layout fits its pool");
    cr_assert_leq(sat, pool);
    CUstream s = new_stream();
    p2pt_handle *h = gt_handle("ce");
    run_and_check(h, s, &dst, &src, d, count, "ce, 100,000 pieces in broken runs");
    p2pt_properties p = gt_props(h);
    cr_expect_lt(p.ce_operations, count / 4, "%llu operations",
                 (unsigned long long)p.ce_operations);
    p2pt_finalize(h);
    free(d);
    gt_free(&src);
    gt_free(&dst);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, ce_copies_100000_pieces_in_broken_runs_exactly)
{
    gt_use_fake_driver();
    ce_many_pieces();
}

Test(offload_gpu, ce_copies_100000_pieces_in_broken_runs_exactly)
{
    gt_use_gpu();
    ce_many_pieces();
}

/* ------------------------------------------------------------ the budget */

static void budget_zero(void)
{
    struct gt_buf gpu = gt_alloc(8 << 20), host = gt_alloc_host(8 << 20);
    gt_fill(&gpu, 3);
    p2pt_copy_desc d[512];
    for (size_t i = 0; i < 512; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(host.ptr + i * 16384),
                                (const void *)(uintptr_t)(gpu.ptr + i * 16384), 16384};
    CUstream s = new_stream();
    const char *engines[] = {"tma", "auto"};
    for (int e = 0; e < 2; e++) {
        p2pt_handle *h = handle_opts(engines[e], "P2P_TRANSPORT_SM_BUDGET=0");
        run_and_check(h, s, &host, &gpu, d, 512, "budget 0 batch");
        GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)gpu.ptr, (const void *)(uintptr_t)(gpu.ptr + (4 << 20)),
                              1 << 20, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        p2pt_properties p = gt_props(h);
        cr_expect_eq(p.kernel_launches, 0, "%s, budget 0: %llu kernel launches", engines[e],
                     (unsigned long long)p.kernel_launches);
        cr_expect_eq(p.max_grid, 0);
        cr_expect_eq(p.sm_budget, 0);
        cr_expect_gt(p.ce_operations, 0);
        p2pt_choice c;
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        GT_OK(p2pt_explain_batch(h, d, 512, s, &c));
        cr_expect_str_eq(c.transport, "ce");
        cr_expect(strstr(c.reason, "P2P_TRANSPORT_SM_BUDGET=0") != NULL, "%s", c.reason);
        uint32_t *count = (uint32_t *)(uintptr_t)gpu.ptr;
        cr_expect_eq(p2pt_copy_batch_device_async(h, (void *)(uintptr_t)gpu.ptr, count, 4,
                                                  (void *)(uintptr_t)(gpu.ptr + 4096), s),
                     P2PT_NOT_SUPPORTED);
        cr_expect(strstr(p2pt_last_error(NULL), "P2P_TRANSPORT_SM_BUDGET=0") != NULL, "%s",
                  p2pt_last_error(NULL));
        p2pt_finalize(h);
    }
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, budget_zero_launches_no_kernel_and_explain_says_why)
{
    gt_use_fake_driver();
    budget_zero();
}

Test(offload_gpu, budget_zero_launches_no_kernel_and_explain_says_why)
{
    gt_use_gpu();
    budget_zero();
}

static void budget_n(void)
{
    const size_t n = 64 << 20;
    struct gt_buf a = gt_alloc(n), b = gt_alloc(n), host = gt_alloc_host(n);
    gt_fill(&a, 11);
    CUstream s = new_stream();
    p2pt_handle *h = handle_opts("tma", "P2P_TRANSPORT_SM_BUDGET=3");
    /* A large local copy (which would take the streaming kernel's grid),
     * a device batch of large pieces, a pinned-host batch. */
    GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)b.ptr, (const void *)(uintptr_t)a.ptr, n, s));
    p2pt_copy_desc d[16];
    for (size_t i = 0; i < 16; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(b.ptr + i * (n / 16)),
                                (const void *)(uintptr_t)(a.ptr + i * (n / 16)), n / 16};
    run_and_check(h, s, &b, &a, d, 16, "budget 3 device batch");
    for (size_t i = 0; i < 16; i++)
        d[i].dst = (void *)(uintptr_t)(host.ptr + i * (n / 16));
    run_and_check(h, s, &host, &a, d, 16, "budget 3 d2h batch");
    p2pt_properties p = gt_props(h);
    cr_expect_gt(p.kernel_launches, 0);
    cr_expect_leq(p.max_grid, 3, "budget 3: a grid of %u CTAs", p.max_grid);
    cr_expect_eq(p.sm_budget, 3);
    p2pt_finalize(h);
    /* A device batch needs 2 CTAs: budget 1 refuses it. */
    h = handle_opts("tma", "P2P_TRANSPORT_SM_BUDGET=1");
    uint32_t *count = (uint32_t *)(uintptr_t)a.ptr;
    cr_expect_eq(p2pt_copy_batch_device_async(h, (void *)(uintptr_t)a.ptr, count, 4,
                                              (void *)(uintptr_t)(a.ptr + 4096), s),
                 P2PT_NOT_SUPPORTED);
    cr_expect(strstr(p2pt_last_error(NULL), "at least 2 CTAs") != NULL, "%s",
              p2pt_last_error(NULL));
    p2pt_finalize(h);
    gt_free(&a);
    gt_free(&b);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, a_budget_of_n_never_launches_a_wider_grid)
{
    gt_use_fake_driver();
    budget_n();
}

Test(offload_gpu, a_budget_of_n_never_launches_a_wider_grid)
{
    gt_use_gpu();
    budget_n();
}

Test(offload_cpu, the_budget_variable_is_checked_before_any_driver)
{
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    const char *bad[] = {"-1", "4097", "lots", "2.5"};
    for (size_t i = 0; i < 4; i++) {
        char opt[64];
        snprintf(opt, sizeof(opt), "P2P_TRANSPORT_SM_BUDGET=%s", bad[i]);
        p2pt_init_args a = {sizeof(a), NULL, "tma", opt};
        p2pt_handle *h = NULL;
        cr_expect_eq(p2pt_init(&a, &h), P2PT_INVALID_ARGUMENT, "%s", opt);
        const char *msg = p2pt_last_error(NULL);
        cr_expect(strstr(msg, "P2P_TRANSPORT_SM_BUDGET") && strstr(msg, bad[i]) &&
                      strstr(msg, "4096"),
                  "%s", msg);
    }
}

/* ------------------------------------------------------- the link's CTAs */

static void link_caps(void)
{
    const size_t n = 32 << 20;
    struct gt_buf gpu = gt_alloc(n), host = gt_alloc_host(n), gpu2 = gt_alloc(n);
    gt_fill(&gpu, 21);
    gt_fill(&host, 22);
    CUstream s = new_stream();
    p2pt_copy_desc d[2048];
    const size_t k = 2048, piece = n / k;
    /* d2h, then h2d: within each direction's link CTAs (the built-in
     * tables' lines; any GPU here has one of them). */
    struct {
        struct gt_buf *dst, *src;
        const char *what;
        uint32_t most;
    } cases[] = {{&host, &gpu, "d2h", 3}, {&gpu2, &host, "h2d", 8}};
    for (int c = 0; c < 2; c++) {
        p2pt_handle *h = gt_handle("tma");
        for (size_t i = 0; i < k; i++)
            d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(cases[c].dst->ptr + i * piece),
                                    (const void *)(uintptr_t)(cases[c].src->ptr + i * piece),
                                    piece};
        run_and_check(h, s, cases[c].dst, cases[c].src, d, k, cases[c].what);
        p2pt_properties p = gt_props(h);
        cr_expect_gt(p.kernel_launches, 0);
        cr_expect_leq(p.max_grid, cases[c].most, "%s: a grid of %u CTAs", cases[c].what,
                      p.max_grid);
        p2pt_choice ch;
        memset(&ch, 0, sizeof(ch));
        ch.size = sizeof(ch);
        GT_OK(p2pt_explain_batch(h, d, k, s, &ch));
        cr_expect(strstr(ch.reason, "crosses the host link") != NULL, "%s", ch.reason);
        p2pt_finalize(h);
    }
    /* Device to device: the whole grid. */
    p2pt_handle *h = gt_handle("tma");
    for (size_t i = 0; i < k; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(gpu2.ptr + i * piece),
                                (const void *)(uintptr_t)(gpu.ptr + i * piece), piece};
    run_and_check(h, s, &gpu2, &gpu, d, k, "device to device");
    cr_expect_gt(gt_props(h).max_grid, 8, "device to device is not capped: %u",
                 gt_props(h).max_grid);
    p2pt_finalize(h);
    gt_free(&gpu);
    gt_free(&gpu2);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_fake, tma_batches_across_the_host_link_take_only_its_ctas)
{
    gt_use_fake_driver();
    link_caps();
}

Test(offload_gpu, tma_batches_across_the_host_link_take_only_its_ctas)
{
    gt_use_gpu();
    link_caps();
}

/* ------------------------------------------------------ the link kernel */

/* Pieces of random sizes at random offsets between pinned host memory and
 * the GPU: co-aligned h2d ones go to the link kernel (a warp a piece), d2h
 * ones and a batch with one skewed piece to the batch kernel; all
 * byte-exact, guards included. */
static void link_kernel_odd_pieces(bool skew)
{
    const size_t count = 3000, pool = count * 20100 + 4096;
    struct gt_buf gpu = gt_alloc(pool), host = gt_alloc_host(pool);
    p2pt_copy_desc *d = calloc(count, sizeof(*d));
    cr_assert_not_null(d);
    CUstream s = new_stream();
    for (int dir = 0; dir < 2; dir++) {
        struct gt_buf *src = dir == 0 ? &host : &gpu, *dst = dir == 0 ? &gpu : &host;
        gt_fill(src, 70 + (uint64_t)dir);
        struct bt_rng r = {91 + (uint64_t)dir};
        size_t at = 0;
        for (size_t i = 0; i < count; i++) {
            size_t n = 1 + (size_t)(bt_next(&r) % 20000), off = (size_t)(bt_next(&r) % 16);
            at = (at + 15) / 16 * 16 + off;
            /* The same place on both sides: co-aligned, any offset. */
            d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst->ptr + at),
                                    (const void *)(uintptr_t)(src->ptr + at), n};
            at += n;
        }
        cr_assert_lt(at + 1, pool, "the layout fits its pool");
        if (skew) /* one piece's source a byte on: no longer co-aligned */
            d[count / 2].src = (const char *)d[count / 2].src + 1;
        p2pt_handle *h = gt_handle("tma");
        p2pt_choice c;
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        GT_OK(p2pt_explain_batch(h, d, count, s, &c));
        /* h2d co-aligned batches take the link kernel; d2h ones and a
         * skewed piece keep the batch kernel. */
        bool link = strstr(c.reason, "link kernel") != NULL;
        cr_expect(link == (!skew && dir == 0), "%s %s: %s", dir == 0 ? "h2d" : "d2h",
                  skew ? "skewed" : "co-aligned", c.reason);
        char what[64];
        snprintf(what, sizeof(what), "%s, %s", dir == 0 ? "h2d" : "d2h",
                 skew ? "one piece skewed" : "co-aligned");
        run_and_check(h, s, dst, src, d, count, what);
        p2pt_finalize(h);
    }
    free(d);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(offload_gpu, the_link_kernel_copies_odd_pieces_byte_exact)
{
    gt_use_gpu();
    link_kernel_odd_pieces(false);
    link_kernel_odd_pieces(true);
}
