/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How memory another process shares answers the driver, and which engine
 * can reach it (docs/IMPORTED_MEMORY.md records what it printed).
 *
 * A child process (the exporter, on GPU 1) makes three allocations and
 * shares each: cuMemAlloc memory by a legacy IPC handle, memory of a pool
 * created with a POSIX file-descriptor handle type (cuMemPoolExportPointer),
 * and VMM memory (cuMemCreate, its descriptor exported). The parent (the
 * importer, whose streams run on GPU 0) imports each the ways a framework
 * does and prints, per case, what GPU 0's context sees:
 *
 *   the pointer attributes p2pt's resolve asks (memory type, ordinal,
 *   access flags, the device pointer through which GPU 0 reaches it, the
 *   owning context, the pool), and what actually works from GPU 0's
 *   context: cuMemsetD8, cuMemcpyAsync and cuMemcpyBatchAsync on a GPU 0
 *   stream (the copy engine), and a kernel's store (only where the device
 *   pointer query succeeded: a kernel store to unmapped memory would
 *   fault the context and end the probe).
 *
 * Each case writes a marker at its own offset; the exporter reads its
 * memory back at the end and prints which markers landed, so "works" means
 * the bytes arrived. Build: cc -std=c11 -I/usr/local/cuda/include
 * ipc_probe.c -L/usr/local/cuda/lib64/stubs -lcuda (run.sh ipc).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (4u << 20)
#define CASES 16
#define STEP (64u << 10) /* case k writes at k * STEP */

static const char *err(CUresult r)
{
    const char *s = "?";
    cuGetErrorName(r, &s);
    return s;
}

#define CK(x)                                                                             \
    do {                                                                                  \
        CUresult r_ = (x);                                                                \
        if (r_ != CUDA_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, err(r_));          \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

struct shared {
    CUipcMemHandle legacy;
    CUmemPoolPtrExportData pool_ptr;
    size_t vmm_size;
};

static void send_fds(int sock, const void *buf, size_t len, const int *fds, int n)
{
    struct iovec io = {(void *)buf, len};
    char ctl[CMSG_SPACE(2 * sizeof(int))];
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    if (n > 0) {
        m.msg_control = ctl;
        m.msg_controllen = CMSG_SPACE(n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    }
    if (sendmsg(sock, &m, 0) != (ssize_t)len) {
        perror("sendmsg");
        exit(1);
    }
}

static void recv_fds(int sock, void *buf, size_t len, int *fds, int n)
{
    struct iovec io = {buf, len};
    char ctl[CMSG_SPACE(2 * sizeof(int))];
    struct msghdr m = {0};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof(ctl);
    if (recvmsg(sock, &m, MSG_WAITALL) != (ssize_t)len) {
        perror("recvmsg");
        exit(1);
    }
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (n > 0 && (c == NULL || c->cmsg_type != SCM_RIGHTS)) {
        fprintf(stderr, "no descriptors received\n");
        exit(1);
    }
    if (n > 0)
        memcpy(fds, CMSG_DATA(c), n * sizeof(int));
}

/* ---- the exporter (GPU 1) ---- */

static int exporter(int sock)
{
    CUdevice d1;
    CUcontext c1;
    CUstream s;
    CK(cuInit(0));
    CK(cuDeviceGet(&d1, 1));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    CK(cuCtxSetCurrent(c1));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct shared sh;
    memset(&sh, 0, sizeof(sh));

    CUdeviceptr legacy;
    CK(cuMemAlloc(&legacy, BYTES));
    CK(cuMemsetD8(legacy, 0x11, BYTES));
    CK(cuIpcGetMemHandle(&sh.legacy, legacy));

    CUmemPoolProps pp;
    memset(&pp, 0, sizeof(pp));
    pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    pp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    pp.location.id = 1;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &pp));
    CUdeviceptr pooled;
    CK(cuMemAllocFromPoolAsync(&pooled, BYTES, pool, s));
    CK(cuMemsetD8Async(pooled, 0x22, BYTES, s));
    CK(cuStreamSynchronize(s));
    int fds[2];
    CK(cuMemPoolExportToShareableHandle(&fds[0], pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                        0));
    CK(cuMemPoolExportPointer(&sh.pool_ptr, pooled));

    CUmemAllocationProp vp;
    memset(&vp, 0, sizeof(vp));
    vp.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    vp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    vp.location.id = 1;
    vp.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &vp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    sh.vmm_size = (BYTES + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle vh;
    CK(cuMemCreate(&vh, sh.vmm_size, &vp, 0));
    CUdeviceptr vmm;
    CK(cuMemAddressReserve(&vmm, sh.vmm_size, 0, 0, 0));
    CK(cuMemMap(vmm, sh.vmm_size, 0, vh, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(vmm, sh.vmm_size, &acc, 1));
    CK(cuMemsetD8(vmm, 0x33, BYTES));
    CK(cuMemExportToShareableHandle(&fds[1], vh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

    send_fds(sock, &sh, sizeof(sh), fds, 2);
    char go;
    if (read(sock, &go, 1) != 1)
        return 1;
    /* Which markers landed in each case's slot: copy, kernel, memset and
     * batched copy, at 0, 4, 8 and 12 KiB into it ("--": not this case's). */
    const CUdeviceptr bufs[3] = {legacy, pooled, vmm};
    const char *names[3] = {"legacy", "pool", "vmm"};
    for (int b = 0; b < 3; b++) {
        printf("exporter %s: case copy/kernel/memset/batch:", names[b]);
        for (int k = 0; k < CASES; k++) {
            unsigned char got[4];
            for (int j = 0; j < 4; j++)
                CK(cuMemcpyDtoH(&got[j], bufs[b] + (CUdeviceptr)k * STEP + 4096u * j, 1));
            if (got[0] == 0x40 + k || got[1] == 0x80 + k || got[2] == 0x40 + k ||
                got[3] == 0x40 + k)
                printf(" %d:%s/%s/%s/%s", k, got[0] == 0x40 + k ? "y" : "n",
                       got[1] == 0x80 + k ? "y" : "n", got[2] == 0x40 + k ? "y" : "n",
                       got[3] == 0x40 + k ? "y" : "n");
        }
        printf("\n");
    }
    fflush(stdout);
    return 0;
}

/* ---- the importer (streams on GPU 0) ---- */

static CUcontext c0, c1;
static CUstream s0;
static CUfunction poke;
static CUdeviceptr local0;

static const char poke_ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry poke(.param .u64 p, .param .u32 v)\n{\n"
    "  .reg .b64 %rd<3>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [v];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  st.global.u8 [%rd2], %r1;\n  ret;\n}\n";

static const char *ctx_name(CUcontext c)
{
    return c == c0 ? "gpu0" : c == c1 ? "gpu1" : c == NULL ? "none" : "other";
}

/* Everything GPU 0's context says of p and does with it; case k's marker
 * is k + 0x40 (copy engine) at k * STEP and k + 0x80 (kernel) 4 KiB after. */
static void probe(int k, const char *what, CUdeviceptr p)
{
    CK(cuCtxSetCurrent(c0));
    unsigned mem_type = 0;
    int ordinal = -2;
    unsigned long long access = 99, bufid = 0, handle_types = 0;
    CUcontext owner = NULL;
    int legacy_ipc = -1, mapped = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_ACCESS_FLAGS,    CU_POINTER_ATTRIBUTE_CONTEXT,
        CU_POINTER_ATTRIBUTE_BUFFER_ID,       CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
        CU_POINTER_ATTRIBUTE_MAPPED,          CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[] = {&mem_type, &ordinal, &access,       &owner, &bufid,
                    &legacy_ipc, &mapped, &handle_types, &start, &size};
    CUresult ra = cuPointerGetAttributes(10, attrs, data, p);
    void *through = NULL;
    CUresult rd = cuPointerGetAttribute(&through, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p);
    CUmemoryPool pool = NULL;
    CUresult rp = cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p);
    /* The same question from the owning device's context. */
    CK(cuCtxSetCurrent(c1));
    void *through1 = NULL;
    CUresult rd1 = cuPointerGetAttribute(&through1, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p);
    CK(cuCtxSetCurrent(c0));
    printf("case %d %s\n  attrs=%s type=%u ordinal=%d access=%llu context=%s buffer_id=%llu "
           "legacy_ipc=%d mapped=%d handle_types=%llu range=%s\n"
           "  device_pointer(gpu0)=%s device_pointer(gpu1)=%s mempool=%s(%s)\n",
           k, what, err(ra), mem_type, ordinal, access, ctx_name(owner), bufid, legacy_ipc,
           mapped, handle_types, start == p && size >= BYTES ? "whole" : "other", err(rd),
           err(rd1), err(rp), pool ? "set" : "null");
    /* The copy engine from GPU 0's context: memset, a copy, a batched copy. */
    const CUdeviceptr at = p + (CUdeviceptr)k * STEP;
    CUresult rm = cuMemsetD8(at + 8192, (unsigned char)(0x40 + k), 16);
    /* The marker on s0 itself, so the copies below read it (a memset on
     * the legacy stream is not ordered with a non-blocking stream). */
    CK(cuMemsetD8Async(local0, (unsigned char)(0x40 + k), 4096, s0));
    CUresult rc = cuMemcpyAsync(at, local0, 4096, s0);
    CUresult rcs = rc == CUDA_SUCCESS ? cuStreamSynchronize(s0) : rc;
    CUdeviceptr dsts[1] = {at + 12288}, srcs[1] = {local0};
    size_t sizes[1] = {512}, attr_at = 0;
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    CUresult rb = cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &attr_at, 1, s0);
    CUresult rbs = rb == CUDA_SUCCESS ? cuStreamSynchronize(s0) : rb;
    printf("  gpu0: memsetD8=%s memcpyAsync=%s/%s memcpyBatchAsync=%s/%s", err(rm), err(rc),
           err(rcs), err(rb), err(rbs));
    if (rd == CUDA_SUCCESS) {
        CUdeviceptr kat = at + 4096;
        unsigned v = 0x80 + (unsigned)k;
        void *args[] = {&kat, &v};
        CUresult rk = cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, s0, args, NULL);
        CUresult rks = rk == CUDA_SUCCESS ? cuStreamSynchronize(s0) : rk;
        printf(" kernel_store=%s/%s\n", err(rk), err(rks));
    } else {
        printf(" kernel_store=not tried (no device pointer for gpu0)\n");
    }
    fflush(stdout);
}

static int importer(int sock)
{
    struct shared sh;
    int fds[2];
    recv_fds(sock, &sh, sizeof(sh), fds, 2);
    CUdevice d0, d1;
    CK(cuInit(0));
    CK(cuDeviceGet(&d0, 0));
    CK(cuDeviceGet(&d1, 1));
    CK(cuDevicePrimaryCtxRetain(&c0, d0));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    CK(cuCtxSetCurrent(c0));
    CK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&local0, 4096));
    CUmodule mod;
    CK(cuModuleLoadData(&mod, poke_ptx));
    CK(cuModuleGetFunction(&poke, mod, "poke"));
    int can = 0;
    CK(cuDeviceCanAccessPeer(&can, d0, d1));
    printf("importer: gpu0 can access gpu1: %d\n", can);

    /* Legacy IPC, opened in GPU 1's context as PyTorch opens it. */
    CK(cuCtxSetCurrent(c1));
    CUdeviceptr in1 = 0;
    CK(cuIpcOpenMemHandle(&in1, sh.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    probe(0, "legacy IPC opened in gpu1's context, peer access off", in1);
    CK(cuCtxSetCurrent(c0));
    CUresult re = cuCtxEnablePeerAccess(c1, 0);
    printf("importer: cuCtxEnablePeerAccess(gpu0 -> gpu1) = %s\n", err(re));
    probe(1, "legacy IPC opened in gpu1's context, peer access on", in1);
    /* The same handle opened again in GPU 1's context, then in GPU 0's. */
    CK(cuCtxSetCurrent(c1));
    CUdeviceptr again = 0;
    CUresult r2 = cuIpcOpenMemHandle(&again, sh.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("importer: second cuIpcOpenMemHandle in gpu1's context = %s (same address: %d)\n",
           err(r2), again == in1);
    CK(cuCtxSetCurrent(c0));
    CUdeviceptr in0 = 0;
    CUresult r0 = cuIpcOpenMemHandle(&in0, sh.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("importer: cuIpcOpenMemHandle in gpu0's context = %s (same address as gpu1's: %d)\n",
           err(r0), in0 == in1);
    if (r0 == CUDA_SUCCESS)
        probe(2, "legacy IPC opened in gpu0's context, peer access on", in0);
    CK(cuCtxSetCurrent(c0));
    printf("importer: cuCtxDisablePeerAccess = %s\n", err(cuCtxDisablePeerAccess(c1)));
    if (r0 == CUDA_SUCCESS)
        probe(3, "legacy IPC opened in gpu0's context, peer access off", in0);
    probe(4, "legacy IPC opened in gpu1's context, peer access off again", in1);

    /* For comparison, memory this process allocated on GPU 1 itself. */
    CK(cuCtxSetCurrent(c1));
    CUdeviceptr own1 = 0;
    CK(cuMemAlloc(&own1, BYTES));
    CK(cuCtxSetCurrent(c0));
    probe(10, "own cuMemAlloc on gpu1, peer access off", own1);
    printf("importer: cuCtxEnablePeerAccess(gpu0 -> gpu1) = %s\n",
           err(cuCtxEnablePeerAccess(c1, 0)));
    probe(11, "own cuMemAlloc on gpu1, peer access on", own1);
    probe(12, "legacy IPC opened in gpu1's context, peer access on (after own alloc)", in1);
    CK(cuCtxDisablePeerAccess(c1));

    /* Pool memory: the pool imported, then the pointer. */
    CUmemoryPool ipool;
    CK(cuCtxSetCurrent(c0));
    CK(cuMemPoolImportFromShareableHandle(&ipool, (void *)(uintptr_t)fds[0],
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUdeviceptr pp = 0;
    CK(cuMemPoolImportPointer(&pp, ipool, &sh.pool_ptr));
    probe(5, "pool import, no access granted to gpu0", pp);
    CUmemAccessDesc a0 = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUresult rpa = cuMemPoolSetAccess(ipool, &a0, 1);
    printf("importer: cuMemPoolSetAccess(gpu0) = %s\n", err(rpa));
    probe(6, "pool import, access granted to gpu0", pp);

    /* VMM: imported, mapped, access for GPU 1 alone, then GPU 0 too. */
    CUmemGenericAllocationHandle vh;
    CK(cuMemImportFromShareableHandle(&vh, (void *)(uintptr_t)fds[1],
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUdeviceptr vp = 0;
    CK(cuMemAddressReserve(&vp, sh.vmm_size, 0, 0, 0));
    CK(cuMemMap(vp, sh.vmm_size, 0, vh, 0));
    CUmemAccessDesc a1 = {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(vp, sh.vmm_size, &a1, 1));
    probe(7, "VMM import, access for gpu1 alone", vp);
    CK(cuMemSetAccess(vp, sh.vmm_size, &a0, 1));
    probe(8, "VMM import, access for gpu0 too", vp);
    /* With access for gpu0 alone: a fresh mapping of the same handle. */
    CUdeviceptr vq = 0;
    CK(cuMemAddressReserve(&vq, sh.vmm_size, 0, 0, 0));
    CK(cuMemMap(vq, sh.vmm_size, 0, vh, 0));
    CK(cuMemSetAccess(vq, sh.vmm_size, &a0, 1));
    probe(9, "VMM import, a second mapping with access for gpu0 alone", vq);

    CK(cuCtxSetCurrent(c0));
    CK(cuStreamSynchronize(s0));
    if (write(sock, "x", 1) != 1)
        return 1;
    return 0;
}

int main(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        _exit(exporter(sv[1]));
    }
    close(sv[1]);
    int rc = importer(sv[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    printf("ipc_probe: importer %d, exporter %d\n", rc,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
