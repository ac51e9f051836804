/* SPDX-License-Identifier: Apache-2.0 */
/*
 * small_copies: an experiment, not part of the library. Two changes to how
 * the TMA kernel starts and ends, for small local copies (the back-to-back
 * and single-copy latency targets of bench/RESULTS.md), against cuMemcpyAsync in
 * the same process:
 *
 *   read-exit  end with cp.async.bulk.wait_group.read 0 (shared memory no
 *              longer read) instead of wait_group 0 (writes performed):
 *              the grid's completion is what makes the writes visible to
 *              the next operation in the stream, as CUTLASS's TMA-store
 *              epilogues rely on;
 *   pdl        programmatic dependent launch: launched with
 *              CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, each
 *              copy lets the next one launch at once
 *              (griddepcontrol.launch_dependents) and waits for the
 *              previous grid's completion and memory flush
 *              (griddepcontrol.wait) before its first global access.
 *
 * The copy is planned as p2pt plans a small local copy: chunks of
 * ceil(bytes / SMs) rounded up to 16, at least 4 KiB, at most 48 KiB, one
 * CTA per chunk, a 4-stage ring. Timing: b2b = 100 copies between two
 * events / 100, median of 9; dev = one copy between two events, median of
 * 101. Copies rotate over 512 MiB per side so they miss L2.
 *
 * Ordering check for every variant: A -> B -> C -> A ... 3000 dependent
 * copies back to back with no synchronisation, B and C poisoned first; any
 * copy that read before its predecessor's writes were visible leaves poison
 * or stale bytes behind.
 *
 *   bench/experiments/run.sh small      (builds and runs this one)
 */
#include <string.h>

#include "common.cuh"

#define F_READ_EXIT 1u
#define F_PDL 2u
#define STAGES 4u
#define POOL (512ull << 20)
#define SLOT (2ull << 20)

__global__ void __launch_bounds__(32)
small_copy(char *dst, const char *src, u64 body, u64 chunks, u32 chunk, u32 flags)
{
    extern __shared__ __align__(128) unsigned char xring[];
    __shared__ __align__(8) u64 bars[STAGES];
    if (flags & F_PDL)
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (threadIdx.x != 0 || blockIdx.x >= chunks)
        return;
    const u32 bar0 = smem_u32(bars), ring0 = smem_u32(xring);
    for (u32 s = 0; s < STAGES; s++)
        mbar_init(bar0 + 8 * s, 1);
    mbar_init_fence();
    if (flags & F_PDL)
        asm volatile("griddepcontrol.wait;" ::: "memory");
    const u64 grid = gridDim.x, first = blockIdx.x;
    const u64 n = (chunks - first + grid - 1) / grid;
#define OFF(k) ((first + (u64)(k) * grid) * (u64)chunk)
#define LEN(k) ((u32)(body - OFF(k) < chunk ? body - OFF(k) : chunk))
#define LOAD(k, s)                                                                     \
    do {                                                                               \
        mbar_expect_tx(bar0 + 8 * (s), LEN(k));                                        \
        bulk_load(ring0 + (s) * chunk, src + OFF(k), LEN(k), bar0 + 8 * (s), false, 0); \
    } while (0)
    const u64 pro = n < STAGES ? n : STAGES;
    for (u64 k = 0; k < pro; k++)
        LOAD(k, (u32)k);
    for (u64 k = 0; k < n; k++) {
        const u32 s = (u32)(k % STAGES);
        mbar_wait(bar0 + 8 * s, (u32)((k / STAGES) & 1));
        bulk_store(dst + OFF(k), ring0 + s * chunk, LEN(k), false, 0);
        if (k >= 1 && k - 1 + STAGES < n) {
            bulk_wait_read<1>();
            LOAD(k - 1 + STAGES, (u32)((k - 1) % STAGES));
        }
    }
    if (flags & F_READ_EXIT)
        bulk_wait_read<0>();
    else
        bulk_wait_all();
#undef LOAD
#undef LEN
#undef OFF
}

static CUfunction g_fn;
static CUstream g_stream;
static int g_sms;

/* -1: copy engine; else kernel flags. */
static void copy(int variant, char *dst, const char *src, u64 bytes)
{
    if (variant < 0) {
        CU(cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, bytes, g_stream));
        return;
    }
    u64 share = (bytes + g_sms - 1) / g_sms;
    share = (share + 15) / 16 * 16;
    if (share < 4096)
        share = 4096;
    if (share > 48 * 1024)
        share = 48 * 1024;
    u32 chunk = (u32)share, flags = (u32)variant;
    u64 chunks = (bytes + chunk - 1) / chunk;
    u32 grid = (u32)(chunks < (u64)g_sms ? chunks : (u64)g_sms);
    void *params[] = {&dst, &src, &bytes, &chunks, &chunk, &flags};
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof(attr));
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = grid, cfg.gridDimY = 1, cfg.gridDimZ = 1;
    cfg.blockDimX = 32, cfg.blockDimY = 1, cfg.blockDimZ = 1;
    cfg.sharedMemBytes = chunk * STAGES;
    cfg.hStream = g_stream;
    cfg.attrs = (flags & F_PDL) ? &attr : NULL;
    cfg.numAttrs = (flags & F_PDL) ? 1 : 0;
    CU(cuLaunchKernelEx(&cfg, g_fn, params, NULL));
}

/* Dependent chain A -> B -> C -> A, 1000 rounds; returns wrong 16-byte units. */
static u64 chain_errors(int variant, u64 bytes, char *scratch)
{
    char *a = scratch, *b = scratch + SLOT, *c = scratch + 2 * SLOT;
    unsigned char *h0 = (unsigned char *)malloc(bytes), *h1 = (unsigned char *)malloc(bytes);
    for (u64 i = 0; i < bytes; i++)
        h0[i] = (unsigned char)(i * 131 + 7 + (i >> 8));
    CK(cudaMemcpy(a, h0, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(b, 0xA5, bytes));
    CK(cudaMemset(c, 0x5A, bytes));
    CK(cudaDeviceSynchronize());
    for (int r = 0; r < 1000; r++) {
        copy(variant, b, a, bytes);
        copy(variant, c, b, bytes);
        copy(variant, a, c, bytes);
    }
    CU(cuStreamSynchronize(g_stream));
    u64 bad = 0;
    char *bufs[3] = {a, b, c};
    for (int k = 0; k < 3; k++) {
        CK(cudaMemcpy(h1, bufs[k], bytes, cudaMemcpyDeviceToHost));
        for (u64 i = 0; i < bytes; i += 16)
            bad += memcmp(h0 + i, h1 + i, bytes - i < 16 ? bytes - i : 16) != 0;
    }
    free(h0);
    free(h1);
    return bad;
}

int main(void)
{
    cudaDeviceProp prop;
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&prop, 0));
    g_sms = prop.multiProcessorCount;
    CK(cudaFuncSetAttribute(small_copy, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            48 * 1024 * STAGES));
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&g_fn, (const void *)small_copy));
    CK(cudaStreamCreateWithFlags((cudaStream_t *)&g_stream, cudaStreamNonBlocking));
    char *src, *dst, *scratch;
    CK(cudaMalloc(&src, POOL));
    CK(cudaMalloc(&dst, POOL));
    CK(cudaMalloc(&scratch, 3 * SLOT));
    CK(cudaMemset(src, 0x3C, POOL));
    CK(cudaDeviceSynchronize());
    printf("device %s, %d SMs\n", prop.name, g_sms);

    const int variants[] = {-1, 0, F_READ_EXIT, F_PDL, F_PDL | F_READ_EXIT};
    const char *names[] = {"ce", "tma", "tma read-exit", "tma pdl", "tma pdl+read-exit"};
    const int nv = 5;
    const u64 sizes[] = {4096, 8192, 16384, 32768, 65536, 131072, 262144};
    const int ns = 7;

    printf("\nordering check (A->B->C->A x 1000, no sync), wrong 16-byte units:\n");
    for (int v = 1; v < nv; v++)
        printf("  %-18s 4K: %llu  64K: %llu  1M: %llu\n", names[v],
               (unsigned long long)chain_errors(variants[v], 4096, scratch),
               (unsigned long long)chain_errors(variants[v], 65536, scratch),
               (unsigned long long)chain_errors(variants[v], 1 << 20, scratch));

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("\n| bytes | what |");
    for (int v = 0; v < nv; v++)
        printf(" %s |", names[v]);
    printf("\n| ---: | --- |");
    for (int v = 0; v < nv; v++)
        printf(" ---: |");
    printf("\n");
    for (int si = 0; si < ns; si++) {
        u64 bytes = sizes[si];
        float b2b[8], dev[8];
        for (int v = 0; v < nv; v++) {
            float t[101];
            u64 slot = 0;
            /* warm-up */
            for (int i = 0; i < 200; i++, slot = (slot + SLOT) % POOL)
                copy(variants[v], dst + slot, src + slot, bytes);
            CU(cuStreamSynchronize(g_stream));
            for (int r = 0; r < 9; r++) {
                CK(cudaEventRecord(e0, (cudaStream_t)g_stream));
                for (int i = 0; i < 100; i++, slot = (slot + SLOT) % POOL)
                    copy(variants[v], dst + slot, src + slot, bytes);
                CK(cudaEventRecord(e1, (cudaStream_t)g_stream));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&t[r], e0, e1));
                t[r] *= 1000.0f / 100; /* us per copy */
            }
            b2b[v] = median_f(t, 9);
            for (int r = 0; r < 101; r++, slot = (slot + SLOT) % POOL) {
                CK(cudaEventRecord(e0, (cudaStream_t)g_stream));
                copy(variants[v], dst + slot, src + slot, bytes);
                CK(cudaEventRecord(e1, (cudaStream_t)g_stream));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&t[r], e0, e1));
                t[r] *= 1000.0f;
            }
            dev[v] = median_f(t, 101);
        }
        printf("| %llu | b2b us (/ce) |", (unsigned long long)bytes);
        for (int v = 0; v < nv; v++)
            printf(v ? " %.2f (%.3f) |" : " %.2f |", b2b[v], b2b[v] / b2b[0]);
        printf("\n| %llu | dev us (/ce) |", (unsigned long long)bytes);
        for (int v = 0; v < nv; v++)
            printf(v ? " %.2f (%.3f) |" : " %.2f |", dev[v], dev[v] / dev[0]);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
