/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What may share an SM with the GEMM that p2pt-bench's overlap mode runs
 * beside its copies (a bf16 8192^3 cublasGemmEx; on an H200 cuBLAS picks a
 * persistent kernel of 132 CTAs, one an SM, 384 threads of 168 registers
 * and 188.6 KiB of shared memory: bench/results/offload.md, "What the
 * GEMM's kernel holds of an SM").
 *
 * A spinner CTA is put on every SM for 30 ms, then five GEMMs are queued on
 * another stream and timed. A GEMM CTA that cannot sit beside a spinner
 * waits for it to exit, so the five take at least the 30 ms; one that can
 * runs as if alone. Spinners vary in threads, registers (live values kept
 * in the loop), dynamic shared memory and the shared-memory carveout they
 * ask for (an SM's carveout changes only while it is idle: a spinner that
 * lands first fixes it).
 *
 * Output: one line per spinner, its registers as built, the GEMMs' time
 * beside it and alone (just before).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.cuh"

static __device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

/* Spins `ns`, keeping R values live through the loop (registers), touching
 * its dynamic shared memory (`smem` bytes) once. */
template <int R> __global__ void spin(unsigned long long ns, unsigned smem, unsigned *sink)
{
    extern __shared__ unsigned sm[];
    unsigned r[R + 1];
#pragma unroll
    for (int k = 0; k <= R; k++)
        r[k] = threadIdx.x * (k + 3) + blockIdx.x;
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < ns) {
#pragma unroll
        for (int k = 0; k <= R; k++)
            r[k] = r[k] * 2654435761u + (unsigned)k;
    }
    unsigned s = 0;
#pragma unroll
    for (int k = 0; k <= R; k++)
        s ^= r[k];
    if (smem >= 4 * blockDim.x) {
        sm[threadIdx.x] = s;
        __syncwarp();
        s = sm[(threadIdx.x + 1) % 32];
    }
    if (s == 0x12345678u)
        *sink = s;
}

struct gemm {
    cublasHandle_t h;
    int n;
    __nv_bfloat16 *a, *b, *c;
    cudaStream_t s;
};

static float gemm_ms(struct gemm *g, int count)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const float one = 1.0f, zero = 0.0f;
    CK(cudaEventRecord(e0, g->s));
    for (int i = 0; i < count; i++)
        if (cublasGemmEx(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, g->a,
                         CUDA_R_16BF, g->n, g->b, CUDA_R_16BF, g->n, &zero, g->c, CUDA_R_16BF,
                         g->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "cublasGemmEx failed\n");
            exit(1);
        }
    CK(cudaEventRecord(e1, g->s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ms;
}

template <int R>
static void probe(struct gemm *g, cudaStream_t s, int sms, int threads, int smem, int carveout,
                  unsigned *sink)
{
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, spin<R>));
    if (carveout >= 0)
        CK(cudaFuncSetAttribute(spin<R>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                carveout));
    const float alone = gemm_ms(g, 5);
    CK(cudaDeviceSynchronize());
    spin<R><<<sms, threads, smem, s>>>(30000000ull, (unsigned)smem, sink);
    CK(cudaGetLastError());
    const float beside = gemm_ms(g, 5);
    CK(cudaDeviceSynchronize());
    printf("spinner threads=%d regs=%d smem=%d carveout=%d: five GEMMs %.2f ms beside, %.2f "
           "alone -> %s\n",
           threads, fa.numRegs, smem, carveout, beside, alone,
           beside > alone + 15.0f ? "WAITED (no room beside)" : "beside (shared the SM)");
}

int main(void)
{
    struct gemm g;
    g.n = 8192;
    const size_t bytes = (size_t)g.n * g.n * sizeof(__nv_bfloat16);
    CK(cudaMalloc(&g.a, bytes));
    CK(cudaMalloc(&g.b, bytes));
    CK(cudaMalloc(&g.c, bytes));
    CK(cudaMemset(g.a, 0x3c, bytes));
    CK(cudaMemset(g.b, 0x3c, bytes));
    CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
    if (cublasCreate(&g.h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(g.h, g.s) != 0) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    gemm_ms(&g, 3); /* warm up: cuBLAS picks and loads its kernel */
    printf("SMs %d; spinners one a CTA per SM for 30 ms\n", sms);
    /* threads, registers, shared memory, carveout (-1: the default) */
    probe<0>(&g, s, sms, 32, 0, -1, sink);
    probe<0>(&g, s, sms, 32, 0, 100, sink);
    probe<0>(&g, s, sms, 32, 16384, 100, sink);
    probe<0>(&g, s, sms, 32, 32768, 100, sink);
    probe<8>(&g, s, sms, 32, 0, 100, sink);
    probe<20>(&g, s, sms, 32, 0, 100, sink);
    probe<40>(&g, s, sms, 32, 0, 100, sink);
    probe<0>(&g, s, sms, 64, 0, 100, sink);
    probe<0>(&g, s, sms, 128, 0, 100, sink);
    probe<0>(&g, s, sms, 256, 0, 100, sink);
    return 0;
}
