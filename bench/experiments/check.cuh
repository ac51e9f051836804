/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The experiments' error checks: a failed runtime (CK) or driver (CU) call
 * prints where and why, and ends the program.
 */
#ifndef P2PT_EXPERIMENTS_CHECK_CUH
#define P2PT_EXPERIMENTS_CHECK_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                  \
                    cudaGetErrorString(e_));                                           \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
#define CU(x)                                                                          \
    do {                                                                               \
        CUresult r_ = (x);                                                             \
        if (r_ != CUDA_SUCCESS) {                                                      \
            const char *s_ = "?";                                                      \
            cuGetErrorName(r_, &s_);                                                   \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);             \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#endif /* P2PT_EXPERIMENTS_CHECK_CUH */
