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
