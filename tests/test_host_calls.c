/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The driver calls of the host path, counted over the fake driver
 * (tests/fault/fake_cuda.c counts every entry), once a first operation has
 * done the one-time work. On a GPU a driver call costs from a fraction of a
 * microsecond to more than one (a pointer query, a launch), where the fake's
 * cost nothing: a call added per copy or per piece shows here, not in any
 * timing on a CPU. It proves:
 *   - one p2pt_copy_async between device buffers in no window makes the
 *     calls of the table below, and no other: under tma, the stream's
 *     context, one pointer query a side and the launch; auto asks too
 *     whether the stream is capturing;
 *   - a host batch's calls do not grow with its pieces: 256, 1024 and 4096
 *     pieces through the staging ring make the calls of the table, two
 *     pointer queries in all (one an allocation), none under tma when both
 *     buffers are windows.
 * A change that needs another call per operation updates the table, saying
 * why.
 */
#include "gpu_test.h"

/* Calls of every fake driver entry so far. */
static unsigned long all_calls(void)
{
    unsigned long (*f)(void) = (unsigned long (*)(void))gt_fake_sym("p2pt_fake_calls_total");
    return f();
}

/* The entries an operation is expected to call, and how often. */
struct expect {
    const char *entry;
    unsigned long calls;
};

static const char *const NAMED[] = {
    "cuStreamGetCtx",         "cuCtxGetCurrent",       "cuCtxGetDevice",
    "cuCtxGetId",             "cuCtxPushCurrent",      "cuCtxPopCurrent",
    "cuStreamIsCapturing",    "cuPointerGetAttributes", "cuPointerGetAttribute",
    "cuMemGetAddressRange",   "cuDeviceGetAttribute",  "cuLaunchKernelEx",
    "cuLaunchKernel",         "cuMemcpyAsync",         "cuMemcpyBatchAsync",
    "cuMemcpyHtoDAsync",      "cuEventRecord",         "cuEventQuery",
    "cuThreadExchangeStreamCaptureMode"};

/* Run `op` once and compare its calls with `want` (n rows): each named
 * entry as the table says (0 where it is absent), and no call of an entry
 * outside NAMED. */
static void expect_calls(const char *what, void (*op)(void *), void *arg,
                         const struct expect *want, size_t n)
{
    unsigned long before[P2PT_ARRAY_LEN(NAMED)];
    for (size_t i = 0; i < P2PT_ARRAY_LEN(NAMED); i++)
        before[i] = gt_fake_calls(NAMED[i]);
    const unsigned long total = all_calls();
    op(arg);
    const unsigned long made = all_calls() - total;
    unsigned long named = 0;
    for (size_t i = 0; i < P2PT_ARRAY_LEN(NAMED); i++) {
        const unsigned long got = gt_fake_calls(NAMED[i]) - before[i];
        unsigned long expected = 0;
        for (size_t k = 0; k < n; k++)
            if (strcmp(want[k].entry, NAMED[i]) == 0)
                expected = want[k].calls;
        cr_expect_eq(got, expected, "%s: %lu calls of %s, expected %lu", what, got, NAMED[i],
                     expected);
        named += got;
    }
    cr_expect_eq(made, named, "%s: %lu driver calls, %lu of them of entries this test names",
                 what, made, named);
}

struct copy_case {
    p2pt_handle *h;
    struct gt_buf *dst, *src;
    size_t bytes;
    CUstream s;
};

static void one_copy(void *arg)
{
    struct copy_case *c = arg;
    GT_OK(p2pt_copy_async(c->h, (void *)c->dst->ptr, (const void *)c->src->ptr, c->bytes, c->s));
}

Test(host_calls, one_copy_asks_the_stream_a_pointer_query_a_side_and_launches)
{
    gt_use_fake_driver();
    struct gt_buf src = gt_alloc(64 << 10), dst = gt_alloc(64 << 10);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static const struct expect tma[] = {{"cuStreamGetCtx", 1},   {"cuCtxGetCurrent", 1},
                                        {"cuCtxGetDevice", 1},   {"cuCtxGetId", 1},
                                        {"cuPointerGetAttributes", 2}, {"cuLaunchKernelEx", 1}};
    static const struct expect autos[] = {
        {"cuStreamGetCtx", 1},         {"cuCtxGetCurrent", 1}, {"cuCtxGetDevice", 1},
        {"cuCtxGetId", 1},             {"cuStreamIsCapturing", 1},
        {"cuPointerGetAttributes", 2}, {"cuLaunchKernelEx", 1}};
    const char *transports[] = {"tma", "auto"};
    const struct expect *want[] = {tma, autos};
    const size_t rows[] = {P2PT_ARRAY_LEN(tma), P2PT_ARRAY_LEN(autos)};
    for (int t = 0; t < 2; t++) {
        p2pt_handle *h = gt_handle(transports[t]);
        GT_OK(p2pt_prepare(h, 0));
        struct copy_case c = {h, &dst, &src, 14 << 10, s};
        one_copy(&c); /* the first: whatever is done once */
        char what[64];
        snprintf(what, sizeof(what), "%s, one copy of 14 KiB", transports[t]);
        expect_calls(what, one_copy, &c, want[t], rows[t]);
        GT_CHECK(tcu.cuStreamSynchronize(s));
        p2pt_finalize(h);
    }
    GT_CHECK(tcu.cuStreamDestroy(s));
    gt_free(&src);
    gt_free(&dst);
}

struct batch_case {
    p2pt_handle *h;
    const p2pt_copy_desc *d;
    size_t n;
    CUstream s;
};

static void one_batch(void *arg)
{
    struct batch_case *c = arg;
    GT_OK(p2pt_copy_batch_async(c->h, c->d, c->n, c->s));
}

Test(host_calls, a_host_batch_asks_the_same_whatever_its_pieces)
{
    gt_use_fake_driver();
    enum { MOST = 4096, PIECE = 7 << 10 };
    struct gt_buf src = gt_alloc((size_t)MOST * PIECE), dst = gt_alloc((size_t)MOST * PIECE);
    p2pt_copy_desc *d = calloc(MOST, sizeof(*d));
    cr_assert_not_null(d);
    /* Sources consecutive, destinations shuffled: no two pieces merge. */
    for (size_t i = 0; i < MOST; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + (i * 7919) % MOST * PIECE),
                                (const void *)(uintptr_t)(src.ptr + i * PIECE), PIECE};
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* The stream's context (three context ids: the stream's, the batch
     * kernel's module, the staging ring's), whether it is capturing, one
     * pointer query a side for the first piece and an allocation each for
     * the rest, the launch, and the ring's slot recorded (slots are retired,
     * their events queried, only when a batch does not fit). */
    static const struct expect scattered[] = {
        {"cuStreamGetCtx", 1},      {"cuCtxGetCurrent", 1},        {"cuCtxGetDevice", 1},
        {"cuCtxGetId", 3},          {"cuStreamIsCapturing", 1},    {"cuPointerGetAttributes", 2},
        {"cuLaunchKernelEx", 1},    {"cuEventRecord", 1}};
    /* Both buffers windows: tma asks nothing about the pieces; auto still
     * locates the first piece, which routes the batch. */
    static const struct expect windows_tma[] = {
        {"cuStreamGetCtx", 1},   {"cuCtxGetCurrent", 1}, {"cuCtxGetDevice", 1},
        {"cuCtxGetId", 3},       {"cuStreamIsCapturing", 1}, {"cuLaunchKernelEx", 1},
        {"cuEventRecord", 1}};
    const char *transports[] = {"tma", "auto"};
    static const size_t counts[] = {256, 1024, MOST};
    for (int t = 0; t < 2; t++)
        for (int windows = 0; windows < 2; windows++) {
            p2pt_handle *h = gt_handle(transports[t]);
            GT_OK(p2pt_prepare(h, 0));
            if (windows) {
                GT_OK(p2pt_window_register(h, 0, (void *)src.ptr, src.n));
                GT_OK(p2pt_window_register(h, 0, (void *)dst.ptr, dst.n));
            }
            struct batch_case c = {h, d, MOST, s};
            one_batch(&c); /* the first: whatever is done once */
            for (size_t k = 0; k < P2PT_ARRAY_LEN(counts); k++) {
                c.n = counts[k];
                char what[96];
                snprintf(what, sizeof(what), "%s, a batch of %zu pieces%s", transports[t],
                         counts[k], windows ? " in windows" : "");
                if (windows && t == 0)
                    expect_calls(what, one_batch, &c, windows_tma,
                                 P2PT_ARRAY_LEN(windows_tma));
                else
                    expect_calls(what, one_batch, &c, scattered, P2PT_ARRAY_LEN(scattered));
            }
            GT_CHECK(tcu.cuStreamSynchronize(s));
            p2pt_finalize(h);
        }
    GT_CHECK(tcu.cuStreamDestroy(s));
    free(d);
    gt_free(&src);
    gt_free(&dst);
}
