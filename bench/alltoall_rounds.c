/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The alltoall mode's rounds: the GPUs, streams and events of a run, peer
 * access between every two GPUs, and one round of a way on every GPU
 * between two events of GPU 0 (events of two GPUs cannot be compared):
 * GPU 0's stream records the start, every other GPU's stream waits for
 * it, every GPU runs its part, GPU 0's stream waits for every GPU's done
 * event and records the end. Back-to-back rounds each have their own two
 * events, so each is timed alone with no host wait between them.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alltoall.h"

#define NCCL_WAIT_S 120 /* a round of NCCL's still running after this has hung */

bool a2a_gpus_open(struct a2a *A, int n, int rounds)
{
    A->n = n;
    A->rounds = rounds;
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (!bench_gpu_info(&G->g, g) || !bench_gpu_open(&G->g) || !bench_use(&G->g))
            return false;
        CU(tcu.cuStreamCreate(&G->main, CU_STREAM_NON_BLOCKING));
        CU(tcu.cuEventCreate(&G->go, CU_EVENT_DISABLE_TIMING));
        CU(tcu.cuEventCreate(&G->done, CU_EVENT_DISABLE_TIMING));
        for (int d = 0; d < A->n; d++) {
            if (d == g)
                continue;
            CU(tcu.cuStreamCreate(&G->pair[d], CU_STREAM_NON_BLOCKING));
            CU(tcu.cuEventCreate(&G->pair_done[d], CU_EVENT_DISABLE_TIMING));
        }
    }
    A->starts = calloc((size_t)A->rounds, sizeof(*A->starts));
    A->ends = calloc((size_t)A->rounds, sizeof(*A->ends));
    if (A->starts == NULL || A->ends == NULL) {
        bench_set_err("out of host memory");
        return false;
    }
    if (!bench_use(&A->gpu[0].g))
        return false;
    for (int r = 0; r < A->rounds; r++) {
        CU(tcu.cuEventCreate(&A->starts[r], CU_EVENT_DEFAULT));
        CU(tcu.cuEventCreate(&A->ends[r], CU_EVENT_DEFAULT));
    }
    return true;
fail:
    return false;
}

void a2a_gpus_close(struct a2a *A)
{
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        if (G->g.ctx == NULL)
            continue;
        CU_RELEASE(tcu.cuCtxSetCurrent(G->g.ctx));
        for (int r = 0; g == 0 && r < A->rounds; r++) {
            if (A->starts && A->starts[r])
                CU_RELEASE(tcu.cuEventDestroy(A->starts[r]));
            if (A->ends && A->ends[r])
                CU_RELEASE(tcu.cuEventDestroy(A->ends[r]));
        }
        for (int d = 0; d < A->n; d++) {
            if (G->pair[d])
                CU_RELEASE(tcu.cuStreamDestroy(G->pair[d]));
            if (G->pair_done[d])
                CU_RELEASE(tcu.cuEventDestroy(G->pair_done[d]));
        }
        if (G->go)
            CU_RELEASE(tcu.cuEventDestroy(G->go));
        if (G->done)
            CU_RELEASE(tcu.cuEventDestroy(G->done));
        if (G->main)
            CU_RELEASE(tcu.cuStreamDestroy(G->main));
        free(G->pattern);
        bench_gpu_close(&G->g);
    }
    free(A->starts);
    free(A->ends);
    A->starts = A->ends = NULL;
}

/* Through main.c's ce handle, open for the whole run. */
bool a2a_peers_enable(struct a2a *A, uint32_t *batch_max)
{
    p2pt_handle *h = bench_handles[T_CE];
    p2pt_properties pr;
    memset(&pr, 0, sizeof(pr));
    pr.size = sizeof(pr);
    P2(p2pt_get_properties(h, &pr));
    *batch_max = pr.device_batch_max;
    for (int a = 0; a < A->n; a++)
        for (int b = a + 1; b < A->n; b++)
            P2(p2pt_peer_enable(h, a, b));
    return true;
fail:
    return false;
}

/* ============================================================ a round */

/* GPU g's part of a round: on its main stream, or forked over its pair
 * streams and joined back (ce_packed). */
static enum a2a_res enqueue_one(struct a2a *A, int way, p2pt_handle *h, int g)
{
    struct a2a_gpu *G = &A->gpu[g];
    const size_t bytes = A->k * A->row_bytes;
    p2pt_status st = P2PT_SUCCESS;
    const char *call = "p2pt_copy_batch_async";
    switch (way) {
    case A2A_CE_PACKED:
        /* Destinations from the next GPU on, as the batches are laid out
         * (alltoall_buffers.c). */
        CU(tcu.cuEventRecord(G->go, G->main));
        for (int i = 1; i < A->n; i++) {
            const int d = (g + i) % A->n;
            CU(tcu.cuStreamWaitEvent(G->pair[d], G->go, 0));
            CU(tcu.cuMemcpyAsync(A->gpu[d].ref + a2a_recv_offset(A, g, d),
                                 G->packed + a2a_packed_offset(A, g, d), bytes, G->pair[d]));
            CU(tcu.cuEventRecord(G->pair_done[d], G->pair[d]));
            CU(tcu.cuStreamWaitEvent(G->main, G->pair_done[d], 0));
        }
        return A2A_OK;
    case A2A_PLAIN:
        return bench_ref_launch(&A->plain[g], G->descs, G->count, (uint32_t)A->count,
                                (unsigned)A->plain_ctas, G->main)
                   ? A2A_OK
                   : A2A_FAILED;
    case A2A_TMA:
    case A2A_AUTO:
        call = "p2pt_copy_batch_device_async";
        st = p2pt_copy_batch_device_async(h, bench_dptr(G->descs), bench_dptr(G->count),
                                          (uint32_t)A->count, bench_dptr(G->workspace),
                                          G->main);
        break;
    default:
        st = p2pt_copy_batch_async(h, G->hdescs, A->count, G->main);
        break;
    }
    if (st == P2PT_SUCCESS)
        return A2A_OK;
    bench_fail_p2(st, call);
    return st == P2PT_NOT_SUPPORTED ? A2A_UNSUPPORTED : A2A_FAILED;
fail:
    return A2A_FAILED;
}

/* NCCL: every rank's sends and receives of the packed rows in one group. */
static enum a2a_res enqueue_nccl(struct a2a *A)
{
    const size_t bytes = A->k * A->row_bytes;
    if (!bench_nccl_group_start(A->nccl))
        return A2A_FAILED;
    for (int g = 0; g < A->n; g++) {
        struct a2a_gpu *G = &A->gpu[g];
        for (int p = 0; p < A->n; p++) {
            if (p == g)
                continue;
            if (!bench_nccl_send(A->nccl, g, G->packed + a2a_packed_offset(A, g, p), bytes, p,
                                 G->main) ||
                !bench_nccl_recv(A->nccl, g, G->recv + a2a_recv_offset(A, p, g), bytes, p,
                                 G->main))
                return A2A_FAILED;
        }
    }
    return bench_nccl_group_end(A->nccl) ? A2A_OK : A2A_FAILED;
}

enum a2a_res a2a_round(struct a2a *A, int way, p2pt_handle *h, CUevent start, CUevent end,
                       double *enq_us)
{
    double t0 = bench_now_us();
    enum a2a_res e = A2A_OK;
    if (!bench_use(&A->gpu[0].g))
        goto fail;
    CU(tcu.cuEventRecord(start, A->gpu[0].main));
    for (int g = 1; g < A->n; g++) {
        if (!bench_use(&A->gpu[g].g))
            goto fail;
        CU(tcu.cuStreamWaitEvent(A->gpu[g].main, start, 0));
    }
    if (way == A2A_NCCL) {
        e = enqueue_nccl(A);
    } else {
        for (int g = 0; g < A->n && e == A2A_OK; g++)
            e = bench_use(&A->gpu[g].g) ? enqueue_one(A, way, h, g) : A2A_FAILED;
    }
    if (e != A2A_OK)
        return e;
    for (int g = 1; g < A->n; g++) {
        if (!bench_use(&A->gpu[g].g))
            goto fail;
        CU(tcu.cuEventRecord(A->gpu[g].done, A->gpu[g].main));
        if (!bench_use(&A->gpu[0].g))
            goto fail;
        CU(tcu.cuStreamWaitEvent(A->gpu[0].main, A->gpu[g].done, 0));
    }
    if (!bench_use(&A->gpu[0].g))
        goto fail;
    CU(tcu.cuEventRecord(end, A->gpu[0].main));
    if (enq_us)
        *enq_us = bench_now_us() - t0;
    return A2A_OK;
fail:
    return A2A_FAILED;
}

/* NCCL's kernels wait on their peers: a failed peer would hold them for
 * ever, so its rounds are polled, its communicators asked for errors, and
 * a round still running after NCCL_WAIT_S fails. */
bool a2a_round_wait(struct a2a *A, int way, CUevent end)
{
    if (!bench_use(&A->gpu[0].g))
        return false;
    if (way != A2A_NCCL) {
        CU(tcu.cuEventSynchronize(end));
        return true;
    }
    double t0 = bench_now_us();
    for (;;) {
        CUresult q = tcu.cuEventQuery(end);
        if (q == CUDA_SUCCESS)
            return true;
        if (q != CUDA_ERROR_NOT_READY) {
            bench_fail_cu(q, "cuEventQuery", __FILE__, __LINE__);
            return false;
        }
        if (!bench_nccl_healthy(A->nccl))
            return false;
        if (bench_now_us() - t0 > NCCL_WAIT_S * 1e6) {
            bench_set_err("an NCCL round still runs after %d s: a hang", NCCL_WAIT_S);
            return false;
        }
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
fail:
    return false;
}

bool a2a_drain(struct a2a *A)
{
    for (int g = 0; g < A->n; g++) {
        if (!bench_use(&A->gpu[g].g))
            return false;
        CU(tcu.cuCtxSynchronize());
    }
    return true;
fail:
    return false;
}
