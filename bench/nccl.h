/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NCCL for the alltoall mode's yardstick (nccl.c): loaded with dlopen by
 * the benchmark alone, like cuBLAS (gemm.c), so p2pt-bench builds without
 * NCCL's headers and runs without NCCL; only the rows that need it say
 * why they did not run. One process drives every GPU: one communicator per
 * GPU from ncclCommInitAll, and every rank's sends and receives of a round
 * in one group.
 */
#ifndef P2PT_BENCH_NCCL_H
#define P2PT_BENCH_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "bench.h"

#define BENCH_NCCL_MAX_RANKS 32

struct bench_nccl {
    void *lib;                          /* libnccl, dlopen'ed */
    char path[512];                     /* the library that loaded */
    int version;                        /* ncclGetVersion: 22703 is 2.27.3 */
    void *comm[BENCH_NCCL_MAX_RANKS];   /* ncclComm_t per rank; rank r is GPU r */
    int ranks;
};

/* dlopen NCCL (`path`, or libnccl.so.2 from the loader's path, under
 * $CUDA_HOME/lib64 and /usr/local/cuda/lib64, then PyTorch's wheel under
 * the usual Python package folders) and fetch its entries; no GPU needed.
 * False with bench_err naming everything tried. */
bool bench_nccl_load(struct bench_nccl *n, const char *path);
/* One communicator per device of `ordinals` (ncclCommInitAll), with
 * NCCL_NVLS_ENABLE=0 set first unless the environment sets it. */
bool bench_nccl_init(struct bench_nccl *n, const int *ordinals, int count);
bool bench_nccl_group_start(struct bench_nccl *n);
/* `bytes` from `buf` of rank `rank` to rank `peer`, on `s` (a stream of
 * rank's GPU); the same for a receive. Inside a group. */
bool bench_nccl_send(struct bench_nccl *n, int rank, CUdeviceptr buf, size_t bytes, int peer,
                     CUstream s);
bool bench_nccl_recv(struct bench_nccl *n, int rank, CUdeviceptr buf, size_t bytes, int peer,
                     CUstream s);
bool bench_nccl_group_end(struct bench_nccl *n);
/* False, with bench_err naming the rank and NCCL's error, when any
 * communicator reports an asynchronous error (a peer failed mid-round). */
bool bench_nccl_healthy(struct bench_nccl *n);
/* Destroys the communicators (aborts them with `abort`, which does not wait
 * for work in flight: after a failure) and closes the library. */
void bench_nccl_close(struct bench_nccl *n, bool abort);

#endif /* P2PT_BENCH_NCCL_H */
