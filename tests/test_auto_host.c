/* SPDX-License-Identifier: Apache-2.0 */
/*
 * P2P_TRANSPORT=auto and pinned host memory: the table's h2d and d2h
 * lists. Over the fake driver (tests/fault/fake_cuda.c: two sm_90 devices,
 * pinned host memory that pointer attributes know, copies that are memcpy,
 * kernels that do nothing), so on any machine: with a table file whose host
 * lists are known, a copy between pinned host memory and the stream's
 * device goes where its list says, graph lists included, and a host batch
 * goes where the list of its first piece with bytes says (explain's reason
 * names the list and band; the per-engine counters of the real call
 * agree); pageable memory, host to host and pinned memory to another
 * device stay on path other and go to ce; a table without host lists, and
 * the built-in tables, send host copies to ce and host batches by the
 * `batch` list, as before. Without any driver: a host list naming an engine
 * the table's architecture cannot run fails init. On a GPU: with
 * `copy h2d 0 tma`, `copy d2h 0 ce` and host batch lists, copies from and
 * to cuMemAllocHost, cuMemHostAlloc and cuMemHostRegister memory and host
 * batches run on the named engine, byte-exact with guards; pageable memory
 * goes to ce, byte-exact; and p2pt-bench --mode calibrate writes the host
 * lines.
 */
#include <sys/wait.h>

#include "auto_test.h"
#include "auto_table.h"
#include "batch_test.h"

/* h2d to tma below 1M, ce from there; d2h to ce, to tma in a graph;
 * batches in device memory to ce; h2d batches to tma; d2h batches to ce
 * below a mean of 64K, tma from there. */
#define HOST_TABLE(arch)                                                                      \
    "p2pt-auto 1\narch " arch "\n"                                                            \
    "copy local 0 tma\ncopy push 0 ce\ncopy pull 0 tma\n"                                     \
    "copy h2d 0 tma\ncopy h2d 1M ce\ncopy d2h 0 ce\ngraph d2h 0 tma\n"                         \
    "batch 0 ce\nbatch h2d 0 tma\nbatch d2h 0 ce\nbatch d2h 64K tma\n"

/* The same table without its host lines. */
#define PLAIN_TABLE(arch)                                                                     \
    "p2pt-auto 1\narch " arch "\n"                                                            \
    "copy local 0 tma\ncopy push 0 ce\ncopy pull 0 tma\nbatch 0 tma\n"

Test(auto_host_cpu, a_host_list_naming_an_engine_the_architecture_cannot_run_fails_init)
{
    char path[64];
    table_file(path, "p2pt-auto 1\narch sm_80\ncopy local 0 ce\ncopy push 0 ce\n"
                     "copy pull 0 ce\nbatch 0 ce\nbatch d2h 0 tma\n");
    setenv("P2P_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    const char *msg = init_refused(path);
    cr_assert(strstr(msg, path) && strstr(msg, "tma") && strstr(msg, "sm_80"), "%s", msg);
    unlink(path);
}

static p2pt_handle *handle_with(const char *text, char path[64])
{
    p2pt_handle *h = NULL;
    path[0] = '\0';
    if (text != NULL)
        table_file(path, text);
    GT_OK(init_auto(text ? path : NULL, NULL, &h));
    return h;
}

/* explain, then the real call: `engine` named, the reason holding `why`,
 * and the bytes counted for that engine. */
static void copy_goes_to(p2pt_handle *h, void *dst, const void *src, size_t n, CUstream s,
                         const char *engine, const char *why)
{
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_copy(h, dst, src, n, s, &c));
    cr_assert_str_eq(c.transport, engine, "%zu bytes %p -> %p: %s", n, src, dst, c.reason);
    cr_assert(strstr(c.reason, why) != NULL, "reason lacks \"%s\": %s", why, c.reason);
    cr_assert_str_eq(c.path, "other", "host copies keep their path: %s", c.path);
    p2pt_properties a = gt_props(h);
    GT_OK(p2pt_copy_async(h, dst, src, n, s));
    p2pt_properties b = gt_props(h);
    bool tma = strcmp(engine, "tma") == 0;
    cr_assert_eq(b.tma_bytes - a.tma_bytes, tma ? n : 0, "%s: %s", engine, c.reason);
    cr_assert_eq(b.ce_bytes - a.ce_bytes, tma ? 0 : n, "%s: %s", engine, c.reason);
}

static void batch_goes_to(p2pt_handle *h, const p2pt_copy_desc *d, size_t count, CUstream s,
                          const char *engine, const char *why, const char *not_why)
{
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_batch(h, d, count, s, &c));
    cr_assert_str_eq(c.transport, engine, "%zu pieces: %s", count, c.reason);
    cr_assert_str_eq(c.path, "batch");
    cr_assert(strstr(c.reason, why) != NULL, "reason lacks \"%s\": %s", why, c.reason);
    cr_assert(not_why == NULL || strstr(c.reason, not_why) == NULL, "reason has \"%s\": %s",
              not_why, c.reason);
    p2pt_properties a = gt_props(h);
    GT_OK(p2pt_copy_batch_async(h, d, count, s));
    p2pt_properties b = gt_props(h);
    bool tma = strcmp(engine, "tma") == 0;
    cr_assert_eq(b.tma_batches - a.tma_batches, tma ? 1u : 0u, "%s", c.reason);
    cr_assert_eq(b.ce_batches - a.ce_batches, tma ? 0u : 1u, "%s", c.reason);
}

static void *dptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

Test(auto_host_fake, copies_between_pinned_host_memory_and_the_device_follow_the_host_lists)
{
    gt_use_fake_driver();
    char path[64];
    p2pt_handle *h = handle_with(HOST_TABLE("sm_90"), path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t big = 2u << 20;
    CUdeviceptr dev;
    void *pinned = NULL, *mapped = NULL;
    GT_CHECK(tcu.cuMemAlloc(&dev, big));
    GT_CHECK(tcu.cuMemAllocHost(&pinned, big));
    cr_assert_not_null(tcu.cuMemHostAlloc, "the fake driver has cuMemHostAlloc");
    GT_CHECK(tcu.cuMemHostAlloc(&mapped, big,
                                CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    char *pageable = malloc(big);
    cr_assert_not_null(pageable);

    copy_goes_to(h, dptr(dev), pinned, 4096, s, "tma", "'copy h2d' band from 0 to 1M: tma");
    copy_goes_to(h, dptr(dev), mapped, (1u << 20) - 16, s, "tma", "h2d copy of");
    copy_goes_to(h, dptr(dev), mapped, 1u << 20, s, "ce", "'copy h2d' band from 1M: ce");
    copy_goes_to(h, pinned, dptr(dev), 4096, s, "ce", "'copy d2h' band from 0: ce");
    copy_goes_to(h, mapped, dptr(dev) + 16, 100000, s, "ce", "d2h copy of");
    /* The list says tma; tma cannot align these sides: the fallback, as for
     * any path. */
    copy_goes_to(h, dptr(dev) + 1, (char *)pinned + 2, 4096, s, "ce", "differ modulo 16");
    /* Path other without a list: ce whatever the table says. */
    copy_goes_to(h, dptr(dev), pageable, 4096, s, "ce", "(path other)");
    copy_goes_to(h, pageable, dptr(dev), 4096, s, "ce", "(path other)");
    copy_goes_to(h, mapped, pinned, 4096, s, "ce", "(path other)");
    /* Pinned memory and the other device's memory (mapped here, so the copy
     * engine need not stage it), the stream on device 0. */
    CUcontext here = NULL, there = NULL;
    CUdevice d1;
    CUdeviceptr peer;
    GT_CHECK(tcu.cuCtxGetCurrent(&here));
    GT_CHECK(tcu.cuDeviceGet(&d1, 1));
    GT_CHECK(tcu.cuDevicePrimaryCtxRetain(&there, d1));
    GT_CHECK(tcu.cuCtxSetCurrent(there));
    GT_CHECK(tcu.cuMemAlloc(&peer, 4096));
    GT_CHECK(tcu.cuCtxSetCurrent(here));
    GT_CHECK(tcu.cuCtxEnablePeerAccess(there, 0));
    copy_goes_to(h, dptr(peer), pinned, 4096, s, "ce", "(path other)");

    /* While the stream captures, d2h takes its graph list. */
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    copy_goes_to(h, pinned, dptr(dev), 4096, s, "tma", "'graph d2h' band from 0: tma");
    copy_goes_to(h, dptr(dev), pinned, 4096, s, "tma", "'copy h2d' band");
    CUgraph g;
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    tcu.cuGraphDestroy(g);

    free(pageable);
    tcu.cuMemFreeHost(pinned);
    tcu.cuMemFreeHost(mapped);
    tcu.cuMemFree(dev);
    tcu.cuMemFree(peer);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_host_fake, a_host_batch_follows_the_list_of_its_first_piece_with_bytes)
{
    gt_use_fake_driver();
    char path[64];
    p2pt_handle *h = handle_with(HOST_TABLE("sm_90"), path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t piece = 4096, pool = 64 * 128 * 1024;
    CUdeviceptr dev, dev2;
    void *pinned = NULL;
    GT_CHECK(tcu.cuMemAlloc(&dev, pool));
    GT_CHECK(tcu.cuMemAlloc(&dev2, pool));
    GT_CHECK(tcu.cuMemAllocHost(&pinned, pool));
    char *host = pinned, *pageable = malloc(pool);
    cr_assert_not_null(pageable);
    p2pt_copy_desc d[8];
    for (int i = 0; i < 8; i++) {
        d[i].src = (char *)host + (size_t)i * piece;
        d[i].dst = dptr(dev + (size_t)(7 - i) * (piece + 16));
        d[i].bytes = piece;
    }
    batch_goes_to(h, d, 8, s, "tma", "'batch h2d' band from 0: tma", NULL);
    /* The first piece with bytes decides: here d2h, so the d2h list (mean
     * 4K: ce), whatever the other pieces are. */
    d[0].bytes = 0;
    d[1].src = dptr(dev + pool / 2);
    d[1].dst = host + pool / 2;
    batch_goes_to(h, d, 8, s, "ce", "the first d2h", NULL);
    batch_goes_to(h, d, 8, s, "ce", "'batch d2h' band from 0 to 64K: ce", NULL);
    /* d2h with a mean of 128K: the list's next band. */
    for (int i = 0; i < 8; i++) {
        d[i].src = dptr(dev + (size_t)i * 128 * 1024);
        d[i].dst = host + (size_t)(7 - i) * 128 * 1024;
        d[i].bytes = 128 * 1024;
    }
    batch_goes_to(h, d, 8, s, "tma", "'batch d2h' band from 64K: tma", NULL);
    /* Device memory on both sides, or a pageable first piece: 'batch'. */
    for (int i = 0; i < 8; i++) {
        d[i].src = dptr(dev + (size_t)i * piece);
        d[i].dst = dptr(dev2 + (size_t)i * (piece + 16));
        d[i].bytes = piece;
    }
    batch_goes_to(h, d, 8, s, "ce", "'batch' band from 0: ce", "the first");
    d[0].src = pageable;
    batch_goes_to(h, d, 8, s, "ce", "'batch' band from 0: ce", "the first");

    free(pageable);
    tcu.cuMemFreeHost(pinned);
    tcu.cuMemFree(dev);
    tcu.cuMemFree(dev2);
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_host_fake, without_host_lists_host_memory_is_routed_as_before)
{
    gt_use_fake_driver();
    /* A table file without them; then the built-in table (sm_90), whose
     * measured host lists send single copies to ce and batches of small
     * pieces to tma. */
    for (int builtin = 0; builtin < 2; builtin++) {
        char path[64];
        p2pt_handle *h = handle_with(builtin ? NULL : PLAIN_TABLE("sm_90"), path);
        CUstream s;
        GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUdeviceptr dev;
        void *pinned = NULL;
        GT_CHECK(tcu.cuMemAlloc(&dev, 1u << 20));
        GT_CHECK(tcu.cuMemAllocHost(&pinned, 1u << 20));
        p2pt_copy_desc d[4];
        for (int i = 0; i < 4; i++) {
            d[i].src = (char *)pinned + (size_t)i * 4096;
            d[i].dst = dptr(dev + (size_t)i * 8192);
            d[i].bytes = 4096;
        }
        if (builtin) {
            copy_goes_to(h, dptr(dev), pinned, 4096, s, "ce", "'copy h2d' band from 0: ce");
            copy_goes_to(h, pinned, dptr(dev), 4096, s, "ce", "'copy d2h' band from 0: ce");
            batch_goes_to(h, d, 4, s, "tma", "'batch h2d' band from 0", "'batch' band");
        } else {
            copy_goes_to(h, dptr(dev), pinned, 4096, s, "ce", "has no 'copy h2d' list: ce");
            copy_goes_to(h, pinned, dptr(dev), 4096, s, "ce", "has no 'copy d2h' list: ce");
            /* By the 'batch' list, and without looking at the pieces. */
            batch_goes_to(h, d, 4, s, "tma", "'batch' band from 0: tma", "the first");
        }
        tcu.cuMemFreeHost(pinned);
        tcu.cuMemFree(dev);
        tcu.cuStreamDestroy(s);
        GT_OK(p2pt_finalize(h));
        if (!builtin)
            unlink(path);
    }
}

/* ----------------------------------------------------------------- GPU */

static void require_hopper(void)
{
    gt_require_gpus(1);
    if (device_cc(0) < 90)
        cr_skip_test("needs sm_90 or newer: device 0 is sm_%d (the host lists under test name "
                     "tma)",
                     device_cc(0));
    gt_use_device(0);
}

/* HOST_TABLE for device 0's architecture. */
static p2pt_handle *gpu_handle(char path[64])
{
    char arch[16], text[512];
    snprintf(arch, sizeof(arch), "sm_%d", device_cc(0));
    snprintf(text, sizeof(text), HOST_TABLE("%s"), arch);
    p2pt_handle *h = handle_with(text, path);
    GT_OK(p2pt_prepare(h, 0));
    return h;
}

/* Host memory as the tests allocate it: a gt_buf (host = 1 for every kind
 * but DEVICE, so gt_fill, gt_poison and gt_read reach it directly) and
 * how to free it. */
enum mem { DEVICE, ALLOC_HOST, HOST_ALLOC, REGISTERED, PAGEABLE };
static const char *const mem_names[] = {"device memory", "cuMemAllocHost", "cuMemHostAlloc",
                                        "cuMemHostRegister", "pageable memory"};

struct buf {
    struct gt_buf b;
    enum mem kind;
};

static struct buf buf_new(enum mem kind, size_t n)
{
    struct buf r = {{0, 0, n, 0, 1}, kind};
    size_t total = n + 2 * GT_GUARD;
    void *p = NULL;
    switch (kind) {
    case DEVICE:
        r.b = gt_alloc(n);
        return r;
    case ALLOC_HOST:
        r.b = gt_alloc_host(n);
        return r;
    case HOST_ALLOC:
        cr_assert_not_null(tcu.cuMemHostAlloc, "the driver has no cuMemHostAlloc");
        GT_CHECK(tcu.cuMemHostAlloc(&p, total, CU_MEMHOSTALLOC_DEVICEMAP |
                                                   CU_MEMHOSTALLOC_PORTABLE));
        break;
    case REGISTERED:
    case PAGEABLE:
        total = (total + 4095) / 4096 * 4096;
        p = aligned_alloc(4096, total);
        cr_assert_not_null(p);
        if (kind == REGISTERED) {
            cr_assert_not_null(tcu.cuMemHostRegister, "the driver has no cuMemHostRegister");
            GT_CHECK(tcu.cuMemHostRegister(p, total, CU_MEMHOSTREGISTER_DEVICEMAP |
                                                         CU_MEMHOSTREGISTER_PORTABLE));
        }
        break;
    }
    memset(p, GT_POISON, total);
    r.b.base = (CUdeviceptr)(uintptr_t)p;
    r.b.ptr = r.b.base + GT_GUARD;
    return r;
}

static void buf_free(struct buf *r)
{
    void *p = (void *)(uintptr_t)r->b.base;
    switch (r->kind) {
    case DEVICE:
    case ALLOC_HOST:
        gt_free(&r->b);
        return;
    case HOST_ALLOC:
        tcu.cuMemFreeHost(p);
        break;
    case REGISTERED:
        GT_CHECK(tcu.cuMemHostUnregister(p));
        free(p);
        break;
    case PAGEABLE:
        free(p);
        break;
    }
    r->b.base = r->b.ptr = 0;
}

/* dst's payload [off, off + n) must equal src's [soff, soff + n); every
 * other byte of dst, guards included, still poison. */
static void expect_copied(const struct buf *dst, size_t off, const struct buf *src, size_t soff,
                          size_t n, const char *what)
{
    size_t total = dst->b.n + 2 * GT_GUARD;
    unsigned char *want = malloc(n), *got = malloc(total);
    cr_assert(want && got);
    gt_read(&src->b, want, src->b.ptr + soff, n);
    gt_read(&dst->b, got, dst->b.base, total);
    for (size_t i = 0; i < total; i++) {
        size_t lo = GT_GUARD + off;
        unsigned char w = i >= lo && i < lo + n ? want[i - lo] : GT_POISON;
        if (got[i] != w)
            cr_assert_fail("%s: byte %ld of the copy is 0x%02x, expected 0x%02x (%s)", what,
                           (long)i - (long)lo, got[i], w,
                           i < lo || i >= lo + n ? "outside the copy" : "payload");
    }
    free(want);
    free(got);
}

/* One copy from `from` memory to `to` memory through auto: explain names
 * `engine`, its counters move, the bytes arrive. */
static void gpu_copy(p2pt_handle *h, CUstream s, enum mem to, enum mem from, size_t n,
                     size_t off, const char *engine, const char *why)
{
    struct buf src = buf_new(from, n + 64), dst = buf_new(to, n + 64);
    char what[160];
    snprintf(what, sizeof(what), "%s -> %s, %zu bytes at +%zu", mem_names[from], mem_names[to],
             n, off);
    gt_fill(&src.b, n + off);
    copy_goes_to(h, (void *)(uintptr_t)(dst.b.ptr + off), (void *)(uintptr_t)(src.b.ptr + off),
                 n, s, engine, why);
    GT_CHECK(tcu.cuStreamSynchronize(s));
    expect_copied(&dst, off, &src, off, n, what);
    buf_free(&src);
    buf_free(&dst);
}

Test(auto_host_gpu, pinned_host_copies_run_on_the_engine_the_host_lists_name_byte_exact)
{
    require_hopper();
    char path[64];
    p2pt_handle *h = gpu_handle(path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (enum mem m = ALLOC_HOST; m <= REGISTERED; m++) {
        gpu_copy(h, s, DEVICE, m, 4096 + 3, 0, "tma", "'copy h2d' band from 0 to 1M: tma");
        gpu_copy(h, s, DEVICE, m, 300 * 1024 + 5, 16, "tma", "'copy h2d'");
        gpu_copy(h, s, DEVICE, m, 3u << 20, 48, "ce", "'copy h2d' band from 1M: ce");
        gpu_copy(h, s, m, DEVICE, 4096 + 3, 0, "ce", "'copy d2h' band from 0: ce");
        gpu_copy(h, s, m, DEVICE, 3u << 20, 32, "ce", "'copy d2h'");
    }
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_host_gpu, pageable_memory_still_goes_to_ce_byte_exact)
{
    require_hopper();
    char path[64];
    p2pt_handle *h = gpu_handle(path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    gpu_copy(h, s, DEVICE, PAGEABLE, 64 * 1024 + 7, 0, "ce", "(path other)");
    gpu_copy(h, s, PAGEABLE, DEVICE, 64 * 1024 + 7, 16, "ce", "(path other)");
    gpu_copy(h, s, ALLOC_HOST, PAGEABLE, 4096, 0, "ce", "(path other)");
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

/* A host batch of `n` random pieces (bt_layout) from `from` to `to`. */
static void gpu_batch(p2pt_handle *h, CUstream s, enum mem to, enum mem from, size_t n,
                      uint64_t max, const char *engine, const char *why)
{
    struct buf dst = buf_new(to, bt_pool_bytes(n, max)), src = buf_new(from, 1u << 20);
    gt_fill(&src.b, n + max);
    gt_poison(&dst.b);
    p2pt_copy_desc *d = calloc(n, sizeof(*d));
    cr_assert_not_null(d);
    cr_assert(bt_layout(d, n, &dst.b, &src.b, max, n));
    unsigned char *src_host = bt_host_copy(&src.b);
    batch_goes_to(h, d, n, s, engine, why, NULL);
    GT_CHECK(tcu.cuStreamSynchronize(s));
    char what[128];
    snprintf(what, sizeof(what), "auto batch, %zu pieces, %s -> %s", n, mem_names[from],
             mem_names[to]);
    bt_expect(&dst.b, &src.b, src_host, d, n, NULL, what);
    free(src_host);
    free(d);
    buf_free(&src);
    buf_free(&dst);
}

Test(auto_host_gpu, host_batches_run_on_the_engine_the_host_batch_lists_name_byte_exact)
{
    require_hopper();
    char path[64];
    p2pt_handle *h = gpu_handle(path);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    gpu_batch(h, s, DEVICE, ALLOC_HOST, 500, 16384, "tma", "'batch h2d' band from 0: tma");
    gpu_batch(h, s, DEVICE, HOST_ALLOC, 300, 40000, "tma", "'batch h2d'");
    gpu_batch(h, s, ALLOC_HOST, DEVICE, 500, 16384, "ce", "'batch d2h' band from 0 to 64K: ce");
    gpu_batch(h, s, HOST_ALLOC, DEVICE, 40, 400000, "tma", "'batch d2h' band from 64K: tma");
    gpu_batch(h, s, DEVICE, DEVICE, 300, 16384, "ce", "'batch' band from 0: ce");
    tcu.cuStreamDestroy(s);
    GT_OK(p2pt_finalize(h));
    unlink(path);
}

Test(auto_host_gpu, calibrate_writes_the_host_lines, .timeout = 300)
{
    require_hopper();
#ifndef P2PT_BENCH_PATH
    cr_skip_test("no p2pt-bench: built with -DP2PT_BUILD_BENCH=OFF");
#else
    char path[64], cmd[512];
    table_file(path, "");
    snprintf(cmd, sizeof(cmd), "'%s' --mode calibrate -e 64K --calibrate-out '%s' >'%s.log' 2>&1",
             P2PT_BENCH_PATH, path, path);
    int st = system(cmd);
    char log[80];
    snprintf(log, sizeof(log), "%s.log", path);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "p2pt-bench exited %d; see %s", st, log);
    const char *engines[P2PT_MAX_TRANSPORTS];
    int n = p2pt__engine_names(engines, P2PT_MAX_TRANSPORTS);
    struct p2pt_auto_table t;
    GT_OK(p2pt__auto_table_load(path, engines, n, &t));
    for (int p = P2PT_AUTO_H2D; p < P2PT_AUTO_PATHS; p++)
        cr_expect_gt(t.copy[p].n, 0, "no 'copy %s' line in %s", p2pt__auto_path_names[p], path);
    for (int i = 0; i < P2PT_AUTO_HOST_PATHS; i++)
        cr_expect_gt(t.host_batch[i].n, 0, "no 'batch %s' line in %s",
                     p2pt__auto_path_names[P2PT_AUTO_H2D + i], path);
    unlink(path);
    unlink(log);
#endif
}
