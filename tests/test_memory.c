/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory that frameworks actually hand to a copy transport:
 *  - stream-ordered pool memory (cuMemAllocFromPoolAsync) on a peer GPU,
 *    without the pool's access granted (both transports refuse with status 4
 *    and the remedy instead of faulting or failing in the driver) and with it
 *    granted;
 *  - virtual-memory-management memory (cuMemCreate + cuMemMap), local and
 *    physically on the peer;
 *  - another process's memory: a child owning GPU 1 exports a buffer as a
 *    POSIX file descriptor over a Unix socket, this process imports and maps
 *    it on GPU 0, pushes bytes into it with TMA, and the owner checks them.
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc_test.h"
#include "gpu_test.h"

static struct gt_buf wrap(CUdeviceptr base, size_t n)
{
    struct gt_buf b = {base, base + GT_GUARD, n};
    return b;
}

/* ------------------------------------------------------------- pools */

Test(pool, peer_pool_memory_needs_access_for_tma_and_copies_once_granted)
{
    gt_require_gpus(2);
    cr_assert_not_null(tcu.cuMemAllocFromPoolAsync, "driver lacks memory pools");
    const size_t n = 2 * 1024 * 1024 + 9;
    CUdevice d1;
    GT_CHECK(tcu.cuDeviceGet(&d1, 1));
    gt_use_device(1);
    CUstream s1;
    GT_CHECK(tcu.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool;
    GT_CHECK(tcu.cuDeviceGetDefaultMemPool(&pool, d1));
    CUdeviceptr pm;
    GT_CHECK(tcu.cuMemAllocFromPoolAsync(&pm, n + 2 * GT_GUARD, pool, s1));
    GT_CHECK(tcu.cuStreamSynchronize(s1));
    struct gt_buf peer = wrap(pm, n);
    gt_fill(&peer, 5);

    gt_use_device(0);
    CUstream s0;
    GT_CHECK(tcu.cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    struct gt_buf local = gt_alloc(n);
    p2pt_handle *tma = gt_handle("tma"), *ce = gt_handle("ce");

    p2pt_status st = p2pt_copy_async(tma, (void *)local.ptr, (void *)peer.ptr, n, s0);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "TMA pull from an unmapped pool -> %d: %s", (int)st,
                 p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "cuMemPoolSetAccess") != NULL, "%s",
              p2pt_last_error(NULL));
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(tma, &p));
    cr_assert_eq(p.rejected, 1);

    /* The copy engine cannot reach it either (the driver answers
     * CUDA_ERROR_INVALID_VALUE): p2pt says so with the remedy. */
    st = p2pt_copy_async(ce, (void *)local.ptr, (void *)peer.ptr, n, s0);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "CE pull from an unmapped pool -> %d: %s", (int)st,
                 p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "cuMemPoolSetAccess") != NULL, "%s",
              p2pt_last_error(NULL));

    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    GT_CHECK(tcu.cuMemPoolSetAccess(pool, &ad, 1));
    gt_poison(&local);
    GT_OK(p2pt_copy_async(tma, (void *)(local.ptr + 7), (void *)(peer.ptr + 7), n - 7, s0));
    GT_CHECK(tcu.cuStreamSynchronize(s0));
    gt_expect_range(&local, 7, &peer, 7, n - 7, "tma pull from a granted peer pool");
    gt_fill(&local, 6);
    gt_poison(&peer);
    GT_OK(p2pt_copy_async(tma, (void *)peer.ptr, (void *)local.ptr, n, s0));
    GT_CHECK(tcu.cuStreamSynchronize(s0));
    gt_expect_range(&peer, 0, &local, 0, n, "tma push into a granted peer pool");

    GT_CHECK(tcu.cuMemFreeAsync(pm, s0));
    GT_CHECK(tcu.cuStreamSynchronize(s0));
    gt_free(&local);
    p2pt_finalize(tma);
    p2pt_finalize(ce);
}

/* --------------------------------------------------------------- VMM */

struct vmm {
    CUmemGenericAllocationHandle handle;
    CUdeviceptr va;
    size_t size;
};

static struct vmm vmm_create(int phys_dev, size_t bytes, bool exportable)
{
    struct vmm v = {0, 0, 0};
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = phys_dev;
    if (exportable)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    GT_CHECK(tcu.cuMemGetAllocationGranularity(&gran, &prop,
                                                     CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    v.size = (bytes + gran - 1) / gran * gran;
    GT_CHECK(tcu.cuMemCreate(&v.handle, v.size, &prop, 0));
    return v;
}

static void vmm_map(struct vmm *v, const int *devs, int ndevs)
{
    GT_CHECK(tcu.cuMemAddressReserve(&v->va, v->size, 0, 0, 0));
    GT_CHECK(tcu.cuMemMap(v->va, v->size, 0, v->handle, 0));
    CUmemAccessDesc ad[4];
    for (int i = 0; i < ndevs; i++) {
        ad[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ad[i].location.id = devs[i];
        ad[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    GT_CHECK(tcu.cuMemSetAccess(v->va, v->size, ad, (size_t)ndevs));
}

static void vmm_destroy(struct vmm *v)
{
    tcu.cuMemUnmap(v->va, v->size);
    tcu.cuMemAddressFree(v->va, v->size);
    tcu.cuMemRelease(v->handle);
}

Test(vmm, mapped_memory_copies_with_both_transports)
{
    gt_require_gpus(1);
    cr_assert_not_null(tcu.cuMemCreate, "driver lacks virtual memory management");
    gt_use_device(0);
    const size_t n = 3 * 1024 * 1024 + 5;
    struct vmm v = vmm_create(0, n + 2 * GT_GUARD, false);
    int devs[1] = {0};
    vmm_map(&v, devs, 1);
    struct gt_buf mapped = wrap(v.va, n);
    struct gt_buf src = gt_alloc(n);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const char *names[2] = {"ce", "tma"};
    for (int t = 0; t < 2; t++) {
        p2pt_handle *h = gt_handle(names[t]);
        gt_fill(&src, (uint64_t)t + 40);
        gt_poison(&mapped);
        GT_OK(p2pt_copy_async(h, (void *)(mapped.ptr + 11), (void *)(src.ptr + 11), n - 11, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        gt_expect_range(&mapped, 11, &src, 11, n - 11, names[t]);
        p2pt_finalize(h);
    }
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    vmm_destroy(&v);
}

Test(vmm, peer_physical_memory_is_refused_until_mapped_for_the_stream_device)
{
    gt_require_gpus(2);
    cr_assert_not_null(tcu.cuMemCreate);
    gt_use_device(0);
    const size_t n = 1024 * 1024 + 3;
    struct vmm v = vmm_create(1, n + 2 * GT_GUARD, false);
    int only1[1] = {1};
    vmm_map(&v, only1, 1); /* GPU 0, where the stream runs, has no access */
    struct gt_buf remote = wrap(v.va, n);
    struct gt_buf src = gt_alloc(n);
    gt_fill(&src, 50);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *tma = gt_handle("tma");
    p2pt_status st = p2pt_copy_async(tma, (void *)remote.ptr, (void *)src.ptr, n, s);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "cuMemSetAccess") != NULL, "%s",
              p2pt_last_error(NULL));
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    GT_CHECK(tcu.cuMemSetAccess(v.va, v.size, &ad, 1));
    gt_poison(&remote);
    GT_OK(p2pt_copy_async(tma, (void *)remote.ptr, (void *)src.ptr, n, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    gt_expect_range(&remote, 0, &src, 0, n, "tma push into peer VMM memory");
    p2pt_finalize(tma);
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    vmm_destroy(&v);
}

/* --------------------------------------------------------------- IPC */

struct ipc_msg {
    char kind;        /* 'R' ready (fd attached), 'S' skip, 'D' done, 'K' ok, 'F' failed */
    uint64_t size;    /* mapping size (R) */
    uint64_t seed;    /* D: the bytes written */
    uint64_t offset;  /* D */
    uint64_t bytes;   /* D */
    char why[200];
};

static int send_msg(int sock, const struct ipc_msg *m, int fd)
{
    return it_send(sock, m, sizeof(*m), fd);
}

static int recv_msg(int sock, struct ipc_msg *m, int *fd)
{
    return it_recv(sock, m, sizeof(*m), fd);
}

#define IPC_BYTES (8u * 1024u * 1024u + 13u)

/* The owner process: GPU 1's memory, exported, then checked. No Criterion
 * assertions here (this is a forked child): it reports through the socket. */
static int ipc_owner(int sock)
{
    struct ipc_msg m;
    memset(&m, 0, sizeof(m));
    int count = 0;
    if (p2pt_test_driver_load("libcuda.so.1") != P2PT_SUCCESS ||
        tcu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 2 ||
        tcu.cuMemCreate == NULL) {
        m.kind = 'S';
        send_msg(sock, &m, -1);
        return 0;
    }
    CUdevice d1;
    CUcontext ctx;
    tcu.cuDeviceGet(&d1, 1);
    tcu.cuDevicePrimaryCtxRetain(&ctx, d1);
    tcu.cuCtxSetCurrent(ctx);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CUmemGenericAllocationHandle hnd;
    CUdeviceptr va;
    int fd = -1;
    if (tcu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))
        return 10;
    size_t size = (IPC_BYTES + 4096 + gran - 1) / gran * gran;
    if (tcu.cuMemCreate(&hnd, size, &prop, 0) ||
        tcu.cuMemAddressReserve(&va, size, 0, 0, 0) || tcu.cuMemMap(va, size, 0, hnd, 0))
        return 11;
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (tcu.cuMemSetAccess(va, size, &ad, 1) || tcu.cuMemsetD8(va, GT_POISON, size) ||
        tcu.cuCtxSynchronize() ||
        tcu.cuMemExportToShareableHandle(&fd, hnd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
        return 12;
    m.kind = 'R';
    m.size = size;
    if (send_msg(sock, &m, fd) != 0)
        return 13;
    close(fd);
    if (recv_msg(sock, &m, NULL) != 0 || m.kind != 'D')
        return 14;
    unsigned char *got = malloc(size), *want = malloc(m.bytes);
    tcu.cuMemcpyDtoH(got, va, size);
    gt_random(want, m.bytes, m.seed);
    struct ipc_msg verdict;
    memset(&verdict, 0, sizeof(verdict));
    verdict.kind = 'K';
    for (size_t i = 0; i < size; i++) {
        bool in = i >= m.offset && i < m.offset + m.bytes;
        unsigned char w = in ? want[i - m.offset] : GT_POISON;
        if (got[i] != w) {
            verdict.kind = 'F';
            snprintf(verdict.why, sizeof(verdict.why),
                     "owner saw byte %zu = 0x%02x, expected 0x%02x (%s)", i, got[i], w,
                     in ? "payload" : "outside the copy");
            break;
        }
    }
    send_msg(sock, &verdict, -1);
    free(got);
    free(want);
    tcu.cuMemUnmap(va, size);
    tcu.cuMemAddressFree(va, size);
    tcu.cuMemRelease(hnd);
    return 0;
}

Test(ipc, another_process_exports_memory_and_tma_pushes_into_it)
{
    struct ipc_msg m;
    int fd;
    pid_t pid;
    const int sock = it_start_child(ipc_owner, "the owner process", &m, sizeof(m), &fd, &pid);
    gt_use_device(0);
    CUmemGenericAllocationHandle hnd;
    GT_CHECK(tcu.cuMemImportFromShareableHandle(&hnd, (void *)(uintptr_t)fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CUdeviceptr va;
    GT_CHECK(tcu.cuMemAddressReserve(&va, m.size, 0, 0, 0));
    GT_CHECK(tcu.cuMemMap(va, m.size, 0, hnd, 0));
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    GT_CHECK(tcu.cuMemSetAccess(va, m.size, &ad, 1));

    const size_t off = 4096 + 5;
    struct gt_buf src = gt_alloc(IPC_BYTES + 16);
    unsigned char *host = malloc(IPC_BYTES);
    gt_random(host, IPC_BYTES, 99);
    GT_CHECK(tcu.cuMemcpyHtoD(src.ptr + 5, host, IPC_BYTES));
    GT_CHECK(tcu.cuCtxSynchronize());
    free(host);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    p2pt_handle *tma = gt_handle("tma");
    GT_OK(p2pt_copy_async(tma, (void *)(va + off), (void *)(src.ptr + 5), IPC_BYTES, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    p2pt_properties p = {sizeof(p)};
    GT_OK(p2pt_get_properties(tma, &p));
    cr_assert_eq(p.tma_launches, 1, "the copy ran as one TMA launch");

    struct ipc_msg done;
    memset(&done, 0, sizeof(done));
    done.kind = 'D';
    done.seed = 99;
    done.offset = off;
    done.bytes = IPC_BYTES;
    struct ipc_msg verdict;
    it_finish_child(sock, pid, &done, &verdict, sizeof(verdict), verdict.why, "the owner process");
    p2pt_finalize(tma);
    tcu.cuStreamDestroy(s);
    gt_free(&src);
    tcu.cuMemUnmap(va, m.size);
    tcu.cuMemAddressFree(va, m.size);
    tcu.cuMemRelease(hnd);
    close(sock);
}
