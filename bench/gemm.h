/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The compute that offload runs beside (gemm.c): a bf16 N x N x N cuBLAS
 * GEMM, cuBLAS reached through dlopen by the benchmark alone (the library
 * never links or loads it).
 */
#ifndef P2PT_BENCH_GEMM_H
#define P2PT_BENCH_GEMM_H

#include <stdbool.h>

#include "bench.h"

struct bench_gemm {
    void *lib;    /* libcublas, dlopen'ed */
    void *handle; /* cublasHandle_t */
    int n;
    CUdeviceptr a, b, c;
    CUstream s;
    char path[256]; /* the library that loaded */
};

/* dlopen cuBLAS (`path`, or the usual names and folders) and fetch its
 * entries; no GPU needed. False with bench_err naming what was tried. */
bool bench_gemm_load(struct bench_gemm *g, const char *path);
/* A handle on a stream of its own in the current context, and random bf16
 * operands of n x n. */
bool bench_gemm_open(struct bench_gemm *g, int n);
/* Enqueue `count` GEMMs on g->s. */
bool bench_gemm_run(struct bench_gemm *g, int count);
void bench_gemm_close(struct bench_gemm *g);

#endif /* P2PT_BENCH_GEMM_H */
