/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tile counters in a device batch's workspace (kernels/batch_copy.cu):
 * a block of descriptors with more tiles than its warps take in one round
 * shares the rest out through a counter that is valid for one launch only.
 * Whatever the workspace held before (zeros, ones, random bytes, counters
 * of other launches with any count), every launch copies every piece
 * byte-exact, launch after launch on the same workspace, and two batches
 * running at once on two streams with their own workspaces do not mix.
 * (Graph replays on one workspace: test_batch_device.c.)
 */
#include "batch_test.h"

/* A device batch's buffers, descriptors written from the host. */
struct cbatch {
    uint32_t max;
    CUdeviceptr descs, count, ws;
};

static struct cbatch cbatch_alloc(uint32_t max)
{
    struct cbatch b = {max, 0, 0, 0};
    GT_CHECK(tcu.cuMemAlloc(&b.descs, (size_t)max * sizeof(p2pt_copy_desc)));
    GT_CHECK(tcu.cuMemAlloc(&b.count, 4));
    GT_CHECK(tcu.cuMemAlloc(&b.ws, p2pt_batch_workspace_bytes(max)));
    return b;
}

static void cbatch_free(struct cbatch *b)
{
    tcu.cuMemFree(b->descs);
    tcu.cuMemFree(b->count);
    tcu.cuMemFree(b->ws);
}

/* Fill the counters (after the 64-byte head) as `how` says. */
static void fill_counters(const struct cbatch *b, int how, uint64_t seed)
{
    const size_t bytes = p2pt_batch_workspace_bytes(b->max), words = (bytes - 64) / 8;
    uint64_t *w = malloc(words * 8);
    cr_assert_not_null(w);
    struct bt_rng r = {seed * 0x9E3779B97F4A7C15ull + 3};
    for (size_t i = 0; i < words; i++) {
        const uint64_t x = bt_next(&r);
        switch (how) {
        case 0: w[i] = 0; break;
        case 1: w[i] = UINT64_MAX; break;
        case 2: w[i] = x; break;
        /* Another launch's counter: bit 31 of the tag set, any count. */
        case 3: w[i] = (x | 0x8000000000000000ull) & ~0xffffffffull; break;
        case 4: w[i] = (x | 0x8000000000000000ull) & ~0xffff0000ull; break;
        default: w[i] = (x | 0x8000000000000000ull) | 0xfffff000ull; break;
        }
    }
    GT_CHECK(tcu.cuMemcpyHtoD(b->ws + 64, w, words * 8));
    free(w);
}

/* Run `d` (n pieces) as a device batch on `s`; the status must say all
 * were copied. */
static void run_batch(p2pt_handle *h, const struct cbatch *b, CUstream s,
                      const p2pt_copy_desc *d, uint32_t n, const char *what)
{
    GT_CHECK(tcu.cuMemcpyHtoD(b->descs, d, (size_t)n * sizeof(*d)));
    GT_CHECK(tcu.cuMemcpyHtoD(b->count, &n, 4));
    GT_OK(p2pt_copy_batch_device_async(h, (void *)(uintptr_t)b->descs,
                                       (void *)(uintptr_t)b->count, b->max,
                                       (void *)(uintptr_t)b->ws, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    p2pt_batch_status st;
    GT_CHECK(tcu.cuMemcpyDtoH(&st, b->ws, sizeof(st)));
    cr_assert(st.count == n && st.copied == n && st.skipped == 0,
              "%s: status count %u copied %u skipped %u (first %u, reasons %u)", what, st.count,
              st.copied, st.skipped, st.first_bad, st.reasons);
}

Test(batch_counters, any_workspace_contents_and_launch_after_launch)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* 2,500 pieces of up to 40 KiB: 10 blocks of about 600 tiles each,
     * more than the warps of the CTAs that share a block take in a round
     * (26 CTAs of 8 warps on a 132-SM GPU). */
    enum { N = 2500, MAX = 40000 };
    struct cbatch b = cbatch_alloc(N);
    struct gt_buf src = gt_alloc(1 << 20);
    struct gt_buf dst = gt_alloc(bt_pool_bytes(N, MAX));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)src.ptr, src.n));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)dst.ptr, dst.n));
    static p2pt_copy_desc d[N];
    gt_fill(&src, 77);
    unsigned char *src_host = bt_host_copy(&src);
    for (int how = 0; how < 6; how++) {
        fill_counters(&b, how, 100 + how);
        for (int again = 0; again < 3; again++) {
            char what[96];
            snprintf(what, sizeof(what), "counters filled as %d, launch %d on them", how, again);
            cr_assert(bt_layout(d, N, &dst, &src, MAX, 1000 + 10 * how + again));
            gt_poison(&dst);
            run_batch(h, &b, s, d, N, what);
            bt_expect(&dst, &src, src_host, d, N, NULL, what);
        }
    }
    free(src_host);
    cbatch_free(&b);
    gt_free(&src);
    gt_free(&dst);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
}

Test(batch_counters, two_streams_at_once_with_their_own_workspaces)
{
    gt_require_gpus(1);
    gt_use_device(0);
    p2pt_handle *h = gt_handle("tma");
    enum { N = 2048, MAX = 60000, ROUNDS = 4 };
    CUstream s[2];
    struct cbatch b[2];
    struct gt_buf src = gt_alloc(1 << 20), dst[2];
    static p2pt_copy_desc d[2][N];
    gt_fill(&src, 5);
    unsigned char *src_host = bt_host_copy(&src);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)src.ptr, src.n));
    for (int k = 0; k < 2; k++) {
        GT_CHECK(tcu.cuStreamCreate(&s[k], CU_STREAM_NON_BLOCKING));
        b[k] = cbatch_alloc(N);
        dst[k] = gt_alloc(bt_pool_bytes(N, MAX));
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)dst[k].ptr, dst[k].n));
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 2; k++) {
            cr_assert(bt_layout(d[k], N, &dst[k], &src, MAX, 50 + 2 * r + k));
            gt_poison(&dst[k]);
            GT_CHECK(tcu.cuMemcpyHtoD(b[k].descs, d[k], sizeof(d[k])));
            uint32_t n = N;
            GT_CHECK(tcu.cuMemcpyHtoD(b[k].count, &n, 4));
        }
        /* Both enqueued before either is waited for. */
        for (int k = 0; k < 2; k++)
            GT_OK(p2pt_copy_batch_device_async(h, (void *)(uintptr_t)b[k].descs,
                                               (void *)(uintptr_t)b[k].count, N,
                                               (void *)(uintptr_t)b[k].ws, s[k]));
        for (int k = 0; k < 2; k++) {
            char what[64];
            snprintf(what, sizeof(what), "round %d, stream %d", r, k);
            GT_CHECK(tcu.cuStreamSynchronize(s[k]));
            bt_expect(&dst[k], &src, src_host, d[k], N, NULL, what);
        }
    }
    free(src_host);
    for (int k = 0; k < 2; k++) {
        cbatch_free(&b[k]);
        gt_free(&dst[k]);
        tcu.cuStreamDestroy(s[k]);
    }
    gt_free(&src);
    GT_OK(p2pt_finalize(h));
}
