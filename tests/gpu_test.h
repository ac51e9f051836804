/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small GPU helpers for the integration tests (graphs, contexts, threads,
 * pools): a device check that skips with the reason, the fake driver and
 * its call counters, buffers with random contents, and a byte-exact check
 * of a destination against its source.
 * Static inline so each test file stays self-contained.
 */
#ifndef P2PT_GPU_TEST_H
#define P2PT_GPU_TEST_H

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2pt_internal.h"
#include "test_driver.h"

#define GT_CHECK(call)                                                         \
    do {                                                                       \
        CUresult gt_r_ = (call);                                               \
        cr_assert_eq(gt_r_, CUDA_SUCCESS, "%s failed: %s (%d)", #call,         \
                     p2pt__cuda_error_name(gt_r_), (int)gt_r_);                \
    } while (0)

#define GT_OK(expr)                                                            \
    do {                                                                       \
        p2pt_status gt_s_ = (expr);                                            \
        cr_assert_eq(gt_s_, P2PT_SUCCESS, "%s -> %d (%s): %s", #expr, (int)gt_s_, \
                     p2pt_status_string(gt_s_), p2pt_last_error(NULL));        \
    } while (0)

/*
 * Every test skipped for want of a device words it one way, "no CUDA device:
 * why" or "needs N CUDA devices: found M", so that scripts/test.sh counts
 * them under one reason. P2PT_TEST_NO_GPU=1 (the sanitizer and valgrind runs,
 * where the driver's allocations confuse the checkers) skips them all.
 */
#define GT_SKIP_NO_GPU_ASKED()                                                 \
    do {                                                                       \
        const char *gt_no_ = getenv("P2PT_TEST_NO_GPU");                       \
        if (gt_no_ != NULL && strcmp(gt_no_, "1") == 0)                        \
            cr_skip_test("no CUDA device: P2PT_TEST_NO_GPU=1 asks for none");  \
    } while (0)

/* Whether scripts/test.sh's valgrind phase runs this test
 * (P2PT_TEST_UNDER_VALGRIND=1): there NVRTC's compiles and long random
 * loops take minutes. */
static inline bool gt_under_valgrind(void)
{
    const char *v = getenv("P2PT_TEST_UNDER_VALGRIND");
    return v != NULL && strcmp(v, "1") == 0;
}

/* Skip unless `n` CUDA devices are usable. */
static inline void gt_require_gpus(int n)
{
    /* Tests count NVRTC compilations: a cubin cached on disk by an earlier
     * test (or run) would make those counts lie. The cache's own tests
     * (test_cubin_cache.c) set a private directory after this call. */
    setenv("P2P_TRANSPORT_CACHE_DIR", "off", 1);
    GT_SKIP_NO_GPU_ASKED();
    const char *lib = getenv("P2P_CUDA_LIBRARY");
    if (p2pt_test_driver_load(lib ? lib : "libcuda.so.1") != P2PT_SUCCESS)
        cr_skip_test("no CUDA device: %s", p2pt__last_error_text());
    int count = 0;
    if (tcu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < n) {
        if (n == 1)
            cr_skip_test("no CUDA device: the driver sees none");
        cr_skip_test("needs %d CUDA devices: found %d", n, count);
    }
}

static inline CUcontext gt_use_device(int ordinal)
{
    CUdevice dev;
    CUcontext ctx;
    GT_CHECK(tcu.cuDeviceGet(&dev, ordinal));
    GT_CHECK(tcu.cuDevicePrimaryCtxRetain(&ctx, dev));
    GT_CHECK(tcu.cuCtxSetCurrent(ctx));
    return ctx;
}

/* Every later driver call of this test process goes to the fake driver
 * (tests/fault/fake_cuda.c: two sm_90 devices, copies that are memcpy,
 * kernels that do nothing), device 0 current; skips where it is not
 * built. */
static inline void gt_use_fake_driver(void)
{
#ifdef P2PT_FAKE_CUDA_PATH
    setenv("P2P_CUDA_LIBRARY", P2PT_FAKE_CUDA_PATH, 1);
    setenv("P2P_NVRTC_LIBRARY", P2PT_FAKE_NVRTC_PATH, 1);
    setenv("P2P_TRANSPORT_CACHE_DIR", "off", 1);
    cr_assert_eq(p2pt_test_driver_load(P2PT_FAKE_CUDA_PATH), P2PT_SUCCESS, "%s",
                 p2pt__last_error_text());
    gt_use_device(0);
#else
    cr_skip_test("no fake driver: tests/fault/ is not built here");
#endif
}

/* Whether gt_use_fake_driver sent this test process to the fake driver. */
static inline bool gt_on_fake_driver(void)
{
#ifdef P2PT_FAKE_CUDA_PATH
    const char *lib = getenv("P2P_CUDA_LIBRARY");
    return lib != NULL && strcmp(lib, P2PT_FAKE_CUDA_PATH) == 0;
#else
    return false;
#endif
}

/* The fake driver's own entry `name` (its counters, its hold on events);
 * the fake driver must be loaded. */
static inline void *gt_fake_sym(const char *name)
{
#ifdef P2PT_FAKE_CUDA_PATH
    void *lib = dlopen(P2PT_FAKE_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(lib, "the fake driver is loaded");
    void *fn = dlsym(lib, name);
    dlclose(lib);
    cr_assert_not_null(fn, "the fake driver has no %s", name);
    return fn;
#else
    (void)name;
    cr_skip_test("no fake driver: tests/fault/ is not built here");
    return NULL;
#endif
}

/* Calls of fake driver entry `entry` so far. */
static inline unsigned long gt_fake_calls(const char *entry)
{
    unsigned long (*f)(const char *) =
        (unsigned long (*)(const char *))gt_fake_sym("p2pt_fake_calls");
    return f(entry);
}

/* Device 0 of the real driver, current; skips without one. */
static inline void gt_use_gpu(void)
{
    gt_require_gpus(1);
    gt_use_device(0);
}

/* Every field of the handle's properties. */
static inline p2pt_properties gt_props(const p2pt_handle *h)
{
    p2pt_properties p;
    memset(&p, 0, sizeof(p));
    p.size = sizeof(p);
    GT_OK(p2pt_get_properties(h, &p));
    return p;
}

static inline p2pt_handle *gt_handle(const char *transport)
{
    p2pt_init_args a = {sizeof(a), NULL, transport};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    return h;
}

/* The same with `options` (a handle's "NAME=value" list, or NULL). */
static inline p2pt_handle *gt_handle_opts(const char *transport, const char *options)
{
    p2pt_init_args a = {sizeof(a), NULL, transport, options};
    p2pt_handle *h = NULL;
    GT_OK(p2pt_init(&a, &h));
    return h;
}

/* `st` is `want`, and the last error's message says `words`. */
static inline void gt_expect_status(p2pt_status st, p2pt_status want, const char *words)
{
    const char *msg = p2pt_last_error(NULL);
    cr_assert_eq(st, want, "-> %d (want %d): %s", (int)st, (int)want, msg);
    cr_assert(strstr(msg, words) != NULL, "the message lacks \"%s\": %s", words, msg);
}

static inline void gt_random(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}

#define GT_POISON 0xA5
/* 4 KiB on each side: a misplaced 16-byte unit or a short run past either
 * end lands in a guard, not in memory the check never reads. */
#define GT_GUARD 4096

/* A device buffer of n bytes plus GT_GUARD poisoned bytes on each side. */
struct gt_buf {
    CUdeviceptr base; /* guard starts here */
    CUdeviceptr ptr;  /* payload */
    size_t n;
    uint64_t seed;    /* of the last gt_fill (0: never filled), for messages */
    int host;         /* pinned host memory (gt_alloc_host), mapped for the GPU */
};

static inline struct gt_buf gt_alloc(size_t n)
{
    struct gt_buf b = {0, 0, n, 0, 0};
    GT_CHECK(tcu.cuMemAlloc(&b.base, n + 2 * GT_GUARD));
    b.ptr = b.base + GT_GUARD;
    GT_CHECK(tcu.cuMemsetD8(b.base, GT_POISON, n + 2 * GT_GUARD));
    GT_CHECK(tcu.cuCtxSynchronize());
    return b;
}

static inline void gt_fill(struct gt_buf *b, uint64_t seed)
{
    unsigned char *h = malloc(b->n);
    cr_assert_not_null(h);
    gt_random(h, b->n, seed);
    if (b->host)
        memcpy((void *)(uintptr_t)b->ptr, h, b->n);
    else
        GT_CHECK(tcu.cuMemcpyHtoD(b->ptr, h, b->n));
    free(h);
    b->seed = seed;
    /* Setup runs on the legacy default stream, which non-blocking streams do
     * not wait for: finish it before a copy is enqueued elsewhere. */
    GT_CHECK(tcu.cuCtxSynchronize());
}

static inline void gt_poison(struct gt_buf *b)
{
    if (b->host) {
        memset((void *)(uintptr_t)b->base, GT_POISON, b->n + 2 * GT_GUARD);
        return;
    }
    GT_CHECK(tcu.cuMemsetD8(b->base, GT_POISON, b->n + 2 * GT_GUARD));
    GT_CHECK(tcu.cuCtxSynchronize());
}

/* dst's payload bytes [off, off + n) must equal src's [src_off, src_off + n);
 * every other byte of dst, guards included, must still be poison. */
static inline void gt_expect_range(const struct gt_buf *dst, size_t off,
                                   const struct gt_buf *src, size_t src_off, size_t n,
                                   const char *what)
{
    size_t total = dst->n + 2 * GT_GUARD;
    unsigned char *want = malloc(n ? n : 1), *got = malloc(total);
    cr_assert(want && got);
    if (n)
        GT_CHECK(tcu.cuMemcpyDtoH(want, src->ptr + src_off, n));
    GT_CHECK(tcu.cuMemcpyDtoH(got, dst->base, total));
    size_t lo = GT_GUARD + off, hi = lo + n;
    for (size_t i = 0; i < total; i++) {
        unsigned char w = (i >= lo && i < hi) ? want[i - lo] : GT_POISON;
        if (got[i] != w) {
            long at = (long)i - (long)lo;
            unsigned g = got[i];
            free(want);
            free(got);
            cr_assert_fail("%s: %zu-byte copy src+%zu -> dst+%zu: byte %ld (relative to "
                           "the copy) is 0x%02x, expected 0x%02x (%s; source seed %llu)",
                           what, n, src_off, off, at, g, (unsigned)w,
                           i < lo || i >= hi ? "written outside the copy" : "wrong payload",
                           (unsigned long long)src->seed);
        }
    }
    free(want);
    free(got);
}

/* The same in pinned host memory (cuMemAllocHost: mapped for every device
 * with unified addressing, so its host pointer is its GPU address too). */
static inline struct gt_buf gt_alloc_host(size_t n)
{
    struct gt_buf b = {0, 0, n, 0, 1};
    void *p = NULL;
    GT_CHECK(tcu.cuMemAllocHost(&p, n + 2 * GT_GUARD));
    memset(p, GT_POISON, n + 2 * GT_GUARD);
    b.base = (CUdeviceptr)(uintptr_t)p;
    b.ptr = b.base + GT_GUARD;
    return b;
}

/* Read n bytes at `at` of buffer b (device or pinned host memory). */
static inline void gt_read(const struct gt_buf *b, void *out, CUdeviceptr at, size_t n)
{
    if (b->host)
        memcpy(out, (const void *)(uintptr_t)at, n);
    else
        GT_CHECK(tcu.cuMemcpyDtoH(out, at, n));
}

static inline void gt_free(struct gt_buf *b)
{
    if (b->base && b->host)
        tcu.cuMemFreeHost((void *)(uintptr_t)b->base);
    else if (b->base)
        tcu.cuMemFree(b->base);
    b->base = b->ptr = 0;
}

/* Peer access both ways with the driver directly, as a framework would (so
 * that the tests do not depend on p2pt_peer_enable, tested on its own in
 * test_topology.c); "already enabled" counts as success. Skips the test
 * when the GPUs cannot reach each other. Leaves GPU 0's context current,
 * as gt_enable_peers_all does. */
static inline void gt_enable_peers(void)
{
    CUdevice d[2];
    CUcontext c[2];
    for (int i = 0; i < 2; i++) {
        GT_CHECK(tcu.cuDeviceGet(&d[i], i));
        c[i] = gt_use_device(i);
    }
    for (int i = 0; i < 2; i++) {
        int can = 0;
        GT_CHECK(tcu.cuDeviceCanAccessPeer(&can, d[i], d[1 - i]));
        if (!can)
            cr_skip_test("GPU %d cannot access GPU %d as a peer (cuDeviceCanAccessPeer)", i,
                         1 - i);
        GT_CHECK(tcu.cuCtxSetCurrent(c[i]));
        CUresult r = tcu.cuCtxEnablePeerAccess(c[1 - i], 0);
        if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
            r = CUDA_SUCCESS;
        cr_assert_eq(r, CUDA_SUCCESS, "cuCtxEnablePeerAccess GPU %d -> GPU %d: %s", i, 1 - i,
                     p2pt__cuda_error_name(r));
    }
    gt_use_device(0);
}

/* `bytes` of GPU 1's memory, with peer access on both ways (gt_enable_peers)
 * and GPU 0's context current again: a peer's address for a test's
 * arguments, over the fake driver or two GPUs. */
static inline CUdeviceptr gt_peer_alloc(size_t bytes)
{
    CUdeviceptr p;
    gt_use_device(1);
    GT_CHECK(tcu.cuMemAlloc(&p, bytes));
    gt_enable_peers();
    return p;
}

/* Peer access between every pair of the visible GPUs (the first 8),
 * skipping the test when a pair cannot reach each other; GPU 0's context
 * current after. */
static inline void gt_enable_peers_all(void)
{
    int n = 0;
    GT_CHECK(tcu.cuDeviceGetCount(&n));
    n = n < 8 ? n : 8;
    CUdevice d[8];
    CUcontext c[8];
    for (int i = 0; i < n; i++) {
        GT_CHECK(tcu.cuDeviceGet(&d[i], i));
        c[i] = gt_use_device(i);
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j)
                continue;
            int can = 0;
            GT_CHECK(tcu.cuDeviceCanAccessPeer(&can, d[i], d[j]));
            if (!can)
                cr_skip_test("GPU %d cannot access GPU %d as a peer (cuDeviceCanAccessPeer)", i,
                             j);
            GT_CHECK(tcu.cuCtxSetCurrent(c[i]));
            CUresult r = tcu.cuCtxEnablePeerAccess(c[j], 0);
            if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
                r = CUDA_SUCCESS;
            cr_assert_eq(r, CUDA_SUCCESS, "cuCtxEnablePeerAccess GPU %d -> GPU %d: %s", i, j,
                         p2pt__cuda_error_name(r));
        }
    gt_use_device(0);
}

#endif
