/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt's signals: a semaphore (struct p2pt_semaphore, p2pt_kernel_abi.h) in
 * the waiter's GPU memory, which other GPUs' streams (in this process or
 * another, through a shared window) add to and the waiter's stream waits on.
 * docs/SIGNALS.md states what a signal guarantees and how.
 *
 * Why kernels and not the driver's stream memory operations: a value that
 * cuStreamWriteValue64 writes or cuStreamWaitValue64 waits for is fixed when
 * the operation is enqueued, so a graph replayed would find the first
 * replay's value already there; and cuStreamWaitValue64 orders the remote
 * writes that arrived before the flag only with CU_STREAM_WAIT_VALUE_FLUSH,
 * which the H100s measured here do not offer (CAN_FLUSH_REMOTE_WRITES 0).
 * Here the waiter keeps the count it has waited for in the semaphore itself
 * (`expected`), every wait moves it on by `count` signals, and the ordering
 * is the PTX memory model's: a signal is a release at system scope after a
 * fence, a wait an acquire at system scope.
 *
 * Both are one-thread grids launched without programmatic dependent launch:
 * a signal starts after everything before it on its stream has completed,
 * and nothing after a wait starts before it has seen its signals.
 *
 * The count exchange of an alltoallv (p2pt_count_rows) is a signal with
 * its payload made in the same launch: a CTA a destination counts a
 * routing's rows, puts the count into every rank's matrix and adds its
 * share of the signals; each row's running count, its place, which only
 * the sender reads, comes last.
 */
#include "p2pt_kernel_abi.h"

extern "C" __global__ void p2pt_signal(const __grid_constant__ struct p2pt_signal_params p)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return; /* one add, whatever the launch */
    unsigned long long *v = &((struct p2pt_semaphore *)p.sem)->value;
    asm volatile("fence.acq_rel.sys;\n\t"
                 "red.release.sys.global.add.u64 [%0], %1;" ::"l"(v),
                 "l"(p.add * P2PT_SIGNAL_UNIT)
                 : "memory");
}

extern "C" __global__ void p2pt_wait(const __grid_constant__ struct p2pt_wait_params p)
{
    if (threadIdx.x != 0 || blockIdx.x != 0)
        return; /* one waiter: `expected` moves on once */
    struct p2pt_semaphore *s = (struct p2pt_semaphore *)p.sem;
    /* Only this stream's waits touch `expected`: a plain read and write. */
    const unsigned long long target = s->expected + p.count * P2PT_SIGNAL_UNIT;
    s->expected = target;
    unsigned long long t0, now, v;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned ns = 32;
    for (;;) {
        asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(&s->value) : "memory");
        /* Wraps are fine: the difference, read as signed, says who is ahead. */
        if ((long long)(v - target) >= 0)
            return;
        if (p.timeout_ns != 0) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
            if (now - t0 > p.timeout_ns) {
                atomicAdd(&s->timeouts, 1ull);
                return;
            }
        }
        __nanosleep(ns);
        ns = ns < 1024 ? 2 * ns : ns;
    }
}

/*
 * A CTA of P2PT_COUNT_THREADS threads a destination (column), CTA k
 * taking columns k, k + grid, ... where the grid is narrower. A column's
 * bytes come into shared memory a chunk of rows at a time (all 4,096 rows
 * of a MoE step in one), then warp w takes a run of whole groups of 32
 * rows, and a ballot of a group's bytes gives both the group's count and
 * each row's place in it; the warps' counts, scanned by every warp, give
 * each warp's start. Each CTA puts its columns' counts, and once they are
 * visible at system scope adds its share of one signal, so a waiter's
 * signal is whole only when every column's count is there (the batch
 * kernel's shares, batch_copy.cu); the last chunk's places are written
 * after the signal, off the peers' path. One CTA over every column took 8.5 us
 * for 4,096 rows of 2 destinations and 18.8 us of 8, issue-bound on its
 * one SM (bench/results/peer.md 5zc).
 */
#define COUNT_WARPS (P2PT_COUNT_THREADS / 32) /* at most 32: a warp scans their counts */
#define COUNT_CHUNK_ROWS 32768

/* This CTA's share of each signal, once its columns' counts are put:
 * every thread's puts happen before thread 0's fence (the barrier), and
 * the fence, cumulative, orders them before the release at system scope
 * that the waiter's acquire reads (batch_copy.cu's signal_share). */
static __device__ void signal_share(const struct p2pt_count_params &p)
{
    const unsigned long long share = p2pt_cta_share();
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.sys;" ::: "memory");
        for (unsigned s = 0; s < p.n_signals; s++)
            asm volatile("red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p.signal[s]),
                         "l"(share)
                         : "memory");
    }
}

extern "C" __global__ void __launch_bounds__(P2PT_COUNT_THREADS, 1)
    p2pt_count_rows(const __grid_constant__ struct p2pt_count_params p)
{
    __shared__ unsigned char sent_to[COUNT_CHUNK_ROWS]; /* a chunk of one column */
    __shared__ unsigned warp_rows[COUNT_WARPS];
    const unsigned char *routing = (const unsigned char *)p.routing;
    long long *upto = (long long *)p.upto;
    const unsigned rows = p.rows, cols = p.cols;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned below = (1u << lane) - 1;

    for (unsigned c = blockIdx.x; c < cols; c += gridDim.x) {
        unsigned long long run = 0; /* rows of earlier chunks to c */
        unsigned r0 = 0;
        do {
            const unsigned n = min((unsigned)COUNT_CHUNK_ROWS, rows - r0);
            __syncthreads(); /* the last chunk's bytes and warp counts read */
            const unsigned char *from = routing + (size_t)r0 * cols + c;
#pragma unroll 8
            for (unsigned t = threadIdx.x; t < n; t += blockDim.x)
                sent_to[t] = from[(size_t)t * cols];
            __syncthreads();
            const unsigned groups = (n + 31) / 32;
            const unsigned per = (groups + COUNT_WARPS - 1) / COUNT_WARPS;
            const unsigned g_lo = min(warp * per, groups), g_hi = min(g_lo + per, groups);
            unsigned m = 0; /* this warp's rows to c */
            for (unsigned g = g_lo; g < g_hi; g++) {
                const unsigned t = g * 32 + lane;
                m += __popc(__ballot_sync(~0u, t < n && sent_to[t] != 0));
            }
            if (lane == 0)
                warp_rows[warp] = m;
            __syncthreads();
            /* Every warp scans the warps' counts, lane i holding warp i's. */
            unsigned sum = lane < COUNT_WARPS ? warp_rows[lane] : 0;
            for (unsigned o = 1; o < 32; o *= 2) {
                const unsigned up = __shfl_up_sync(~0u, sum, o);
                if (lane >= o)
                    sum += up;
            }
            const unsigned long long start = run + __shfl_sync(~0u, sum, warp) - m;
            run += __shfl_sync(~0u, sum, 31);
            if (r0 + n == rows) { /* c counted: into every put */
                for (unsigned i = threadIdx.x; i < p.n_puts; i += blockDim.x)
                    ((unsigned long long *)p.put[i])[c] = run;
                if (c + gridDim.x >= cols) /* this CTA's last: signal before the places */
                    signal_share(p);
            }
            if (upto != nullptr) {
                /* upto[c][t]: the rows up to and including t to c. */
                unsigned long long at = start;
                long long *out = upto + (size_t)c * rows + r0;
                for (unsigned g = g_lo; g < g_hi; g++) {
                    const unsigned t = g * 32 + lane;
                    const unsigned sent = __ballot_sync(~0u, t < n && sent_to[t] != 0);
                    if (t < n)
                        out[t] = (long long)(at + __popc(sent & below) + ((sent >> lane) & 1));
                    at += __popc(sent);
                }
            }
            r0 += n;
        } while (r0 < rows);
    }
}
