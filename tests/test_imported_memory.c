/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory another process shared (docs/IMPORTED_MEMORY.md): a CUDA IPC
 * handle that the importer opened in another device's context is memory no
 * kernel on the stream's device can reach, peer access or not, but the copy
 * engine moves it. So `auto` sends copies and host batches that touch it to
 * the copy engine (explain says why), `tma` refuses them naming the context
 * and the remedy with nothing enqueued, and a window over it (what a device
 * batch needs) is refused with the same cause. Opened in the stream
 * device's own context it is that device's to reach, kernels included.
 * Pool memory without an access grant is refused by every engine, and
 * moves once granted.
 *
 * Over the fake driver (tests/fault/fake_cuda.c opens a handle as memory of
 * its own, mapped for the opening context's device alone), on any machine;
 * then for real in two processes on two GPUs: the exporter (GPU 1) shares
 * cuMemAlloc memory by a legacy handle and pool memory by its pool's file
 * descriptor, the importer (streams on GPU 0) opens them as frameworks do,
 * and the exporter checks every byte of its memory at the end: what was
 * moved, exactly, and nothing else.
 */
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "batch_test.h"
#include "gpu_test.h"
#include "ipc_test.h"

static p2pt_choice explain(p2pt_handle *h, void *dst, const void *src, size_t n, CUstream s)
{
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_copy(h, dst, src, n, s, &c));
    return c;
}

#define expect_refused(call, must) expect_refused_(call, must, #call)
static void expect_refused_(p2pt_status st, const char *const *must, const char *call)
{
    const char *msg = p2pt_last_error(NULL);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "%s -> %d, expected a refusal: %s", call, (int)st,
                 st == P2PT_SUCCESS ? "" : msg);
    for (; *must != NULL; must++)
        cr_assert(strstr(msg, *must) != NULL, "the message lacks \"%s\": %s", *must, msg);
}

/* The words every refusal of memory opened in GPU 1's context holds. */
static const char *const opened_in_1[] = {"opened in device 1's context", "not mapped for device 0",
                                          "cudaSetDevice(0)", NULL};

/* A legacy handle to device 1 memory, opened in device `in`'s context, as
 * the fake driver opens it; device 0 current after. */
static CUdeviceptr fake_import(size_t n, int in)
{
    CUdeviceptr owned, opened;
    CUipcMemHandle ipc;
    gt_use_device(1);
    GT_CHECK(tcu.cuMemAlloc(&owned, n));
    GT_CHECK(tcu.cuIpcGetMemHandle(&ipc, owned));
    gt_use_device(in);
    GT_CHECK(tcu.cuIpcOpenMemHandle(&opened, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    gt_use_device(0);
    return opened;
}

Test(imported_fake, auto_sends_copies_of_memory_opened_in_another_context_to_ce)
{
    gt_use_fake_driver();
    gt_enable_peers(); /* peer access does not map an opened handle */
    const size_t n = 4096 + 7;
    CUdeviceptr in1 = fake_import(n, 1), local;
    GT_CHECK(tcu.cuMemAlloc(&local, n));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle("auto");
    /* A push and a pull (the built-in table's pull list says tma). */
    const void *dsts[2] = {(void *)in1, (void *)local}, *srcs[2] = {(void *)local, (void *)in1};
    for (int k = 0; k < 2; k++) {
        p2pt_choice c = explain(h, (void *)dsts[k], srcs[k], n, s);
        cr_assert_str_eq(c.transport, "ce", "%s", c.reason);
        cr_assert(strstr(c.reason, "opened in its own context") &&
                      strstr(c.reason, "not mapped for device 0"),
                  "%s", c.reason);
        p2pt_properties a = gt_props(h);
        GT_OK(p2pt_copy_async(h, (void *)dsts[k], srcs[k], n, s));
        p2pt_properties b = gt_props(h);
        cr_assert_eq(b.ce_bytes - a.ce_bytes, n, "%s", c.reason);
        cr_assert_eq(b.tma_bytes, a.tma_bytes);
    }
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

Test(imported_fake, tma_refuses_it_naming_the_context_and_the_remedy)
{
    gt_use_fake_driver();
    gt_enable_peers();
    const size_t n = 65537;
    CUdeviceptr in1 = fake_import(n, 1), local;
    GT_CHECK(tcu.cuMemAlloc(&local, n));
    GT_CHECK(tcu.cuMemsetD8(in1, GT_POISON, n));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle("tma");
    expect_refused(p2pt_copy_async(h, (void *)in1, (void *)local, n, s), opened_in_1);
    expect_refused(p2pt_copy_async(h, (void *)local, (void *)in1, n, s), opened_in_1);
    p2pt_properties p = gt_props(h);
    cr_assert_eq(p.rejected, 2);
    cr_assert_eq(p.ce_bytes + p.tma_bytes, 0, "nothing moved");
    unsigned char got[64];
    GT_CHECK(tcu.cuMemcpyDtoH(got, in1, sizeof(got)));
    for (size_t i = 0; i < sizeof(got); i++)
        cr_assert_eq(got[i], GT_POISON, "byte %zu written", i);
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

Test(imported_fake, a_host_batch_with_such_a_piece_goes_to_ce_under_auto_and_is_refused_by_tma)
{
    gt_use_fake_driver();
    gt_enable_peers();
    const size_t n = 1 << 20;
    CUdeviceptr in1 = fake_import(n, 1), local, other;
    GT_CHECK(tcu.cuMemAlloc(&local, n));
    GT_CHECK(tcu.cuMemAlloc(&other, n));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* Local pieces first, so that the first piece says tma and only the
     * pass finds the one no kernel reaches. */
    p2pt_copy_desc d[4] = {{(void *)other, (void *)local, 4096},
                           {(void *)(other + 8192), (void *)(local + 8192), 15},
                           {(void *)(in1 + 5), (void *)(local + 65536), 4097},
                           {(void *)(other + 131072), (void *)(local + 131072), 1}};
    p2pt_handle *a = gt_handle("auto");
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_batch(a, d, 4, s, &c));
    cr_assert_str_eq(c.transport, "ce", "%s", c.reason);
    cr_assert(strstr(c.reason, "a piece of the batch") != NULL, "%s", c.reason);
    p2pt_properties before = gt_props(a);
    GT_OK(p2pt_copy_batch_async(a, d, 4, s));
    p2pt_properties after = gt_props(a);
    cr_assert_eq(after.ce_batches - before.ce_batches, 1);
    cr_assert_eq(after.tma_batches, before.tma_batches);
    p2pt_finalize(a);

    p2pt_handle *t = gt_handle("tma");
    const char *const piece[] = {"piece 2", "opened in device 1's context", NULL};
    expect_refused(p2pt_copy_batch_async(t, d, 4, s), piece);
    cr_assert_eq(gt_props(t).tma_launches, 0, "nothing enqueued");
    p2pt_finalize(t);
    tcu.cuStreamDestroy(s);
}

Test(imported_fake, a_window_over_it_is_refused_with_the_same_cause)
{
    gt_use_fake_driver();
    gt_enable_peers();
    const size_t n = 4096;
    CUdeviceptr in1 = fake_import(n, 1);
    p2pt_handle *h = gt_handle("tma");
    expect_refused(p2pt_window_register(h, 0, (void *)in1, n), opened_in_1);
    p2pt_finalize(h);
}

Test(imported_fake, opened_in_the_stream_devices_context_it_is_that_devices_to_reach)
{
    gt_use_fake_driver();
    const size_t n = 4096;
    CUdeviceptr in0 = fake_import(n, 0), local;
    GT_CHECK(tcu.cuMemAlloc(&local, n));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_window_register(h, 0, (void *)in0, n));
    GT_OK(p2pt_copy_async(h, (void *)in0, (void *)local, n, s));
    cr_assert_eq(gt_props(h).tma_bytes, n);
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

/* ------------------------------------------------- two processes, two GPUs */

#define REGION ((size_t)16 << 18) /* 4 MiB: 16 slots */
#define SLOT ((size_t)1 << 18)
#define LEGACY_SEED 71
#define POOL_SEED 72
#define SRC_SEED 73
#define MAX_WRITES 32

/* What the importer wrote: region 0 the legacy memory, 1 the pool's;
 * [doff, doff + len) from the importer's source pattern at soff. */
struct written {
    uint32_t region;
    uint64_t doff, soff, len;
};

struct imsg {
    char kind; /* 'R' ready (pool fd attached), 'S' skip, 'D' done, 'K' ok, 'F' failed */
    CUipcMemHandle legacy;
    CUmemPoolPtrExportData pool_ptr;
    uint32_t n;
    struct written w[MAX_WRITES];
    char why[240];
};

static int send_imsg(int sock, const struct imsg *m, int fd)
{
    return it_send(sock, m, sizeof(*m), fd);
}

static int recv_imsg(int sock, struct imsg *m, int *fd)
{
    return it_recv(sock, m, sizeof(*m), fd);
}

/* The exporter: GPU 1's cuMemAlloc and pool memory, shared, then checked
 * byte for byte against what the importer says it wrote. A forked child:
 * no Criterion assertions, it reports through the socket. */
static int exporter(int sock)
{
    struct imsg m;
    memset(&m, 0, sizeof(m));
    int count = 0;
    if (p2pt_test_driver_load("libcuda.so.1") != P2PT_SUCCESS ||
        tcu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 2 ||
        tcu.cuIpcGetMemHandle == NULL || tcu.cuMemPoolCreate == NULL) {
        m.kind = 'S';
        send_imsg(sock, &m, -1);
        return 0;
    }
    CUdevice d1;
    CUcontext ctx;
    CUstream s;
    tcu.cuDeviceGet(&d1, 1);
    tcu.cuDevicePrimaryCtxRetain(&ctx, d1);
    tcu.cuCtxSetCurrent(ctx);
    if (tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        return 10;
    CUdeviceptr mem[2];
    unsigned char *want[2] = {malloc(REGION), malloc(REGION)};
    gt_random(want[0], REGION, LEGACY_SEED);
    gt_random(want[1], REGION, POOL_SEED);
    CUmemPoolProps pp;
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 1;
    CUmemoryPool pool;
    int fd = -1;
    if (tcu.cuMemAlloc(&mem[0], REGION) || tcu.cuIpcGetMemHandle(&m.legacy, mem[0]) ||
        tcu.cuMemPoolCreate(&pool, &pp) ||
        tcu.cuMemAllocFromPoolAsync(&mem[1], REGION, pool, s) || tcu.cuStreamSynchronize(s) ||
        tcu.cuMemcpyHtoD(mem[0], want[0], REGION) || tcu.cuMemcpyHtoD(mem[1], want[1], REGION) ||
        tcu.cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                             0) ||
        tcu.cuMemPoolExportPointer(&m.pool_ptr, mem[1]))
        return 11;
    m.kind = 'R';
    if (send_imsg(sock, &m, fd) != 0)
        return 12;
    close(fd);
    if (recv_imsg(sock, &m, NULL) != 0 || m.kind != 'D')
        return 13;
    unsigned char *src = malloc(REGION), *got = malloc(REGION);
    gt_random(src, REGION, SRC_SEED);
    for (uint32_t i = 0; i < m.n && i < MAX_WRITES; i++)
        memcpy(want[m.w[i].region] + m.w[i].doff, src + m.w[i].soff, m.w[i].len);
    struct imsg verdict;
    memset(&verdict, 0, sizeof(verdict));
    verdict.kind = 'K';
    for (int r = 0; r < 2 && verdict.kind == 'K'; r++) {
        tcu.cuMemcpyDtoH(got, mem[r], REGION);
        for (size_t i = 0; i < REGION; i++)
            if (got[i] != want[r][i]) {
                verdict.kind = 'F';
                snprintf(verdict.why, sizeof(verdict.why),
                         "the exporter's %s memory holds 0x%02x at byte %zu, expected 0x%02x",
                         r == 0 ? "cuMemAlloc" : "pool", got[i], i, want[r][i]);
                break;
            }
    }
    send_imsg(sock, &verdict, -1);
    tcu.cuMemFreeAsync(mem[1], s);
    tcu.cuStreamSynchronize(s);
    tcu.cuMemFree(mem[0]);
    return 0;
}

struct importer {
    CUstream s;
    CUdeviceptr src;      /* GPU 0: REGION bytes of the source pattern */
    unsigned char *pattern; /* the same on the host */
    struct imsg done;
};

static void wrote(struct importer *im, uint32_t region, uint64_t doff, uint64_t soff,
                  uint64_t len)
{
    cr_assert_lt(im->done.n, MAX_WRITES);
    im->done.w[im->done.n++] = (struct written){region, doff, soff, len};
}

/* A copy of [soff, +len) of the source to `base` + doff through `h`, which
 * must succeed on `engine`. */
static void copy_in(struct importer *im, p2pt_handle *h, const char *engine, uint32_t region,
                    CUdeviceptr base, uint64_t doff, uint64_t soff, uint64_t len)
{
    p2pt_choice c = explain(h, (void *)(base + doff), (void *)(im->src + soff), len, im->s);
    cr_assert_str_eq(c.transport, engine, "%s", c.reason);
    GT_OK(p2pt_copy_async(h, (void *)(base + doff), (void *)(im->src + soff), len, im->s));
    wrote(im, region, doff, soff, len);
}

/* Three odd pieces into `base` + at (and, first, one between two local
 * buffers, so that the first piece does not decide) through `h`. */
static p2pt_status batch_in(struct importer *im, p2pt_handle *h, CUdeviceptr base, uint64_t at,
                            CUdeviceptr scratch, bool record, uint32_t region)
{
    const uint64_t off[3] = {at + 1, at + 4096 + 3, at + 65536 + 9};
    const uint64_t len[3] = {15, 4097, 65537};
    p2pt_copy_desc d[4] = {{(void *)scratch, (void *)im->src, 4096}};
    for (int k = 0; k < 3; k++)
        d[k + 1] = (p2pt_copy_desc){(void *)(base + off[k]), (void *)(im->src + 7 * k + 1),
                                    len[k]};
    p2pt_status st = p2pt_copy_batch_async(h, d, 4, im->s);
    if (st == P2PT_SUCCESS && record)
        for (int k = 0; k < 3; k++)
            wrote(im, region, off[k], 7 * k + 1, len[k]);
    return st;
}

/* A device batch of one odd piece into `base` + doff, its window and the
 * source's registered on device 0. */
static void device_batch_in(struct importer *im, p2pt_handle *h, uint32_t region,
                            CUdeviceptr base, uint64_t doff, uint64_t len)
{
    GT_OK(p2pt_window_register(h, 0, (void *)base, REGION));
    GT_OK(p2pt_window_register(h, 0, (void *)im->src, REGION));
    p2pt_copy_desc d = {(void *)(base + doff), (void *)(im->src + 3), len};
    uint32_t one = 1;
    CUdeviceptr descs, count, ws;
    GT_CHECK(tcu.cuMemAlloc(&descs, sizeof(d)));
    GT_CHECK(tcu.cuMemAlloc(&count, 4));
    GT_CHECK(tcu.cuMemAlloc(&ws, p2pt_batch_workspace_bytes(1)));
    GT_CHECK(tcu.cuMemcpyHtoD(descs, &d, sizeof(d)));
    GT_CHECK(tcu.cuMemcpyHtoD(count, &one, 4));
    GT_OK(p2pt_copy_batch_device_async(h, (void *)descs, (void *)count, 1, (void *)ws, im->s));
    GT_CHECK(tcu.cuStreamSynchronize(im->s));
    p2pt_batch_status bs;
    GT_CHECK(tcu.cuMemcpyDtoH(&bs, ws, sizeof(bs)));
    cr_assert_eq(bs.copied, 1, "skipped %u (reasons %#x)", bs.skipped, bs.reasons);
    wrote(im, region, doff, 3, len);
    GT_OK(p2pt_window_unregister(h, 0, (void *)base));
    GT_OK(p2pt_window_unregister(h, 0, (void *)im->src));
    tcu.cuMemFree(descs);
    tcu.cuMemFree(count);
    tcu.cuMemFree(ws);
}

Test(imported_gpu, ipc_handles_opened_in_either_context_and_pool_imports_move_where_an_engine_reaches_them)
{
    struct imsg m;
    int fd;
    pid_t pid;
    const int sock = it_start_child(exporter, "the exporter", &m, sizeof(m), &fd, &pid);

    /* As PyTorch opens a handle: in the owning device's context. */
    gt_use_device(1);
    CUdeviceptr in1, in0, pooled;
    GT_CHECK(tcu.cuIpcOpenMemHandle(&in1, m.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    gt_use_device(0);
    CUmemoryPool pool;
    GT_CHECK(tcu.cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    GT_CHECK(tcu.cuMemPoolImportPointer(&pooled, pool, &m.pool_ptr));

    struct importer im;
    memset(&im, 0, sizeof(im));
    im.done.kind = 'D';
    GT_CHECK(tcu.cuStreamCreate(&im.s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuMemAlloc(&im.src, REGION));
    im.pattern = malloc(REGION);
    gt_random(im.pattern, REGION, SRC_SEED);
    GT_CHECK(tcu.cuMemcpyHtoD(im.src, im.pattern, REGION));
    struct gt_buf scratch = gt_alloc(REGION);
    p2pt_handle *ce = gt_handle("ce"), *tma = gt_handle("tma"), *aut = gt_handle("auto");

    /* Pool memory without an access grant for GPU 0 (and no peer access
     * yet): no engine moves it. */
    const char *const pool_words[] = {"cuMemPoolSetAccess", NULL};
    p2pt_handle *all[3] = {ce, tma, aut};
    for (int k = 0; k < 3; k++)
        expect_refused(p2pt_copy_async(all[k], (void *)pooled, (void *)im.src, 4096, im.s),
                       pool_words);
    gt_enable_peers(); /* GPU 0's context current: the second open is GPU 0's */
    GT_CHECK(tcu.cuIpcOpenMemHandle(&in0, m.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));

    /* Opened in GPU 1's context: the copy engine's, auto's through it. */
    copy_in(&im, aut, "ce", 0, in1, 0 * SLOT + 7, 3, 65537);
    copy_in(&im, ce, "ce", 0, in1, 1 * SLOT + 1, 5, 4097);
    GT_OK(batch_in(&im, aut, in1, 2 * SLOT, scratch.ptr, true, 0));
    GT_OK(batch_in(&im, ce, in1, 3 * SLOT, scratch.ptr, true, 0));
    expect_refused(p2pt_copy_async(tma, (void *)(in1 + 4 * SLOT), (void *)im.src, 4096, im.s),
                   opened_in_1);
    gt_poison(&scratch);
    const char *const piece[] = {"piece 1", "opened in device 1's context", NULL};
    expect_refused(batch_in(&im, tma, in1, 5 * SLOT, scratch.ptr, false, 0), piece);
    expect_refused(p2pt_window_register(tma, 0, (void *)in1, REGION), opened_in_1);
    cr_assert_eq(gt_props(tma).tma_launches, 0, "tma enqueued nothing");
    /* A pull from it through auto: the exporter's own bytes. */
    GT_OK(p2pt_copy_async(aut, (void *)scratch.ptr, (void *)(in1 + 15 * SLOT + 3), 65537, im.s));
    GT_CHECK(tcu.cuStreamSynchronize(im.s));
    unsigned char *owner = malloc(REGION), *pulled = malloc(65537);
    gt_random(owner, REGION, LEGACY_SEED);
    gt_read(&scratch, pulled, scratch.ptr, 65537);
    cr_assert_eq(memcmp(pulled, owner + 15 * SLOT + 3, 65537), 0, "the pull read other bytes");

    /* Opened again in GPU 0's context. The driver maps it anew for GPU 0
     * (at another address: bench/experiments/ipc_probe.c on H100, driver
     * 580), which makes it every engine's, device batches too. Where it
     * hands back GPU 1's mapping (the same address, as a second open in the
     * same context does: what an H200 run saw while this test, by mistake,
     * still had GPU 1's context current here), that stays out of GPU 0's
     * kernels' reach: refused as before. tma copies co-aligned (dst
     * and src equal modulo 16): a copy that is not goes to the copy engine,
     * as every tma copy does. */
    if (in0 != in1) {
        copy_in(&im, tma, "tma", 0, in0, 6 * SLOT + 9, 9, 65537);
        GT_OK(batch_in(&im, tma, in0, 7 * SLOT, scratch.ptr, true, 0));
        device_batch_in(&im, tma, 0, in0, 8 * SLOT + 5, 4097);
        device_batch_in(&im, aut, 0, in0, 9 * SLOT + 13, 65537);
    } else {
        expect_refused(p2pt_copy_async(tma, (void *)(in0 + 6 * SLOT), (void *)im.src, 4096,
                                       im.s),
                       opened_in_1);
    }
    copy_in(&im, ce, "ce", 0, in0, 10 * SLOT + 2, 1, 1);

    /* Granted, the pool memory is every engine's. */
    CUmemAccessDesc a0 = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    GT_CHECK(tcu.cuMemPoolSetAccess(pool, &a0, 1));
    copy_in(&im, tma, "tma", 1, pooled, 0 * SLOT + 3, 3, 65537);
    copy_in(&im, ce, "ce", 1, pooled, 1 * SLOT + 5, 2, 4097);
    GT_OK(batch_in(&im, aut, pooled, 2 * SLOT, scratch.ptr, true, 1));
    device_batch_in(&im, tma, 1, pooled, 3 * SLOT + 1, 65537);
    GT_CHECK(tcu.cuStreamSynchronize(im.s));

    struct imsg verdict;
    it_finish_child(sock, pid, &im.done, &verdict, sizeof(verdict), verdict.why, "the exporter");
    p2pt_finalize(ce);
    p2pt_finalize(tma);
    p2pt_finalize(aut);
    free(owner);
    free(pulled);
    free(im.pattern);
    gt_free(&scratch);
    tcu.cuIpcCloseMemHandle(in0);
    gt_use_device(1);
    tcu.cuIpcCloseMemHandle(in1);
    close(sock);
}
