/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuBLAS through dlopen: the declarations below are the few cublas_api.h
 * gives (their values are the library's ABI), so the benchmark builds
 * without cuBLAS's headers and runs without cuBLAS until this mode asks
 * for it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

typedef int cublas_status;
#define CUBLAS_OP_N 0
#define CUDA_R_16BF 14
#define CUDA_R_32F 0
#define CUBLAS_COMPUTE_32F 68
#define CUBLAS_GEMM_DEFAULT (-1)

static cublas_status (*create)(void **handle);
static cublas_status (*destroy)(void *handle);
static cublas_status (*set_stream)(void *handle, CUstream s);
static cublas_status (*gemm_ex)(void *handle, int ta, int tb, int m, int n, int k,
                                const void *alpha, const void *a, int at, int lda, const void *b,
                                int bt, int ldb, const void *beta, void *c, int ct, int ldc,
                                int compute, int algo);

bool bench_gemm_load(struct bench_gemm *g, const char *path)
{
    memset(g, 0, sizeof(*g));
    char tried[1024] = "", cand[8][256];
    int n = 0;
    if (path != NULL) {
        snprintf(cand[n++], sizeof(cand[0]), "%s", path);
    } else {
        const char *home = getenv("CUDA_HOME");
        snprintf(cand[n++], sizeof(cand[0]), "libcublas.so.13");
        snprintf(cand[n++], sizeof(cand[0]), "libcublas.so.12");
        if (home != NULL && home[0] != '\0') {
            snprintf(cand[n++], sizeof(cand[0]), "%s/lib64/libcublas.so.13", home);
            snprintf(cand[n++], sizeof(cand[0]), "%s/lib64/libcublas.so.12", home);
        }
        snprintf(cand[n++], sizeof(cand[0]), "/usr/local/cuda/lib64/libcublas.so.13");
        snprintf(cand[n++], sizeof(cand[0]), "/usr/local/cuda/lib64/libcublas.so.12");
    }
    const char *names[8];
    for (int i = 0; i < n; i++)
        names[i] = cand[i];
    g->lib = bench_dlopen_first(names, (size_t)n, g->path, sizeof(g->path), tried,
                                sizeof(tried));
    if (g->lib == NULL) {
        bench_set_err("cuBLAS could not be loaded (tried %s; --cublas PATH names another)",
                      tried);
        return false;
    }
    *(void **)&create = dlsym(g->lib, "cublasCreate_v2");
    *(void **)&destroy = dlsym(g->lib, "cublasDestroy_v2");
    *(void **)&set_stream = dlsym(g->lib, "cublasSetStream_v2");
    *(void **)&gemm_ex = dlsym(g->lib, "cublasGemmEx");
    if (!create || !destroy || !set_stream || !gemm_ex) {
        bench_set_err("%s is not a cuBLAS library (no cublasCreate_v2, cublasSetStream_v2 "
                      "or cublasGemmEx)",
                      g->path);
        dlclose(g->lib);
        g->lib = NULL;
        return false;
    }
    return true;
}

/* Random bf16 in [-1, 1): the top half of a float's bits. */
static bool fill_bf16(CUdeviceptr p, size_t count, uint32_t seed)
{
    const size_t chunk = (size_t)8 << 20;
    uint16_t *h = malloc(chunk * sizeof(*h));
    if (h == NULL) {
        bench_set_err("out of host memory");
        return false;
    }
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < chunk; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        float f = (float)(x >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
        uint32_t bits;
        memcpy(&bits, &f, sizeof(bits));
        h[i] = (uint16_t)(bits >> 16);
    }
    for (size_t done = 0; done < count; done += chunk) {
        size_t k = count - done < chunk ? count - done : chunk;
        CU(tcu.cuMemcpyHtoD(p + done * sizeof(*h), h, k * sizeof(*h)));
    }
    free(h);
    return true;
fail:
    free(h);
    return false;
}

bool bench_gemm_open(struct bench_gemm *g, int n)
{
    size_t bytes = (size_t)n * (size_t)n * 2;
    g->n = n;
    CU(tcu.cuStreamCreate(&g->s, CU_STREAM_NON_BLOCKING));
    CU(tcu.cuMemAlloc(&g->a, bytes));
    CU(tcu.cuMemAlloc(&g->b, bytes));
    CU(tcu.cuMemAlloc(&g->c, bytes));
    if (!fill_bf16(g->a, (size_t)n * n, 1) || !fill_bf16(g->b, (size_t)n * n, 2))
        return false;
    if (create(&g->handle) != 0 || set_stream(g->handle, g->s) != 0) {
        bench_set_err("cublasCreate_v2 / cublasSetStream_v2 failed");
        return false;
    }
    return bench_gemm_run(g, 1) && tcu.cuStreamSynchronize(g->s) == CUDA_SUCCESS;
fail:
    return false;
}

bool bench_gemm_run(struct bench_gemm *g, int count)
{
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < count; i++) {
        cublas_status r = gemm_ex(g->handle, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one,
                                  (void *)(uintptr_t)g->a, CUDA_R_16BF, g->n,
                                  (void *)(uintptr_t)g->b, CUDA_R_16BF, g->n, &zero,
                                  (void *)(uintptr_t)g->c, CUDA_R_16BF, g->n,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (r != 0) {
            bench_set_err("cublasGemmEx failed: status %d", r);
            return false;
        }
    }
    return true;
}

void bench_gemm_close(struct bench_gemm *g)
{
    if (g->handle != NULL)
        destroy(g->handle);
    if (g->a)
        CU_RELEASE(tcu.cuMemFree(g->a));
    if (g->b)
        CU_RELEASE(tcu.cuMemFree(g->b));
    if (g->c)
        CU_RELEASE(tcu.cuMemFree(g->c));
    if (g->s)
        CU_RELEASE(tcu.cuStreamDestroy(g->s));
    memset(g, 0, sizeof(*g));
}
