/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TMA engine's signals and waits: kernels/signal.cu, a one-thread grid
 * each, launched without programmatic dependent launch (a signal must not
 * start before what precedes it on the stream has completed, and nothing
 * after a wait may start before it has seen its signals). A wait gives up
 * after P2P_TRANSPORT_WAIT_TIMEOUT_MS (0: never) and counts it in the
 * semaphore's `timeouts`. A count exchange (p2pt_count_rows in the same
 * file) takes a CTA of P2PT_COUNT_THREADS a destination, at most the
 * handle's grid, launched the same way: it reads a routing that the work
 * before it wrote.
 */
#include <string.h>

#include "tma.h"

const struct p2pt_kernel p2pt__kernel_signal = {
    .name = "signal",
    .file = "kernels/signal.cu",
    .source = p2pt__signal_source,
    .entries = {"p2pt_signal", "p2pt_wait", "p2pt_count_rows", NULL},
    .min_cc = 90,
    .defines = {NULL},
};

static _Thread_local struct p2pt_signal_params sig;
static _Thread_local struct p2pt_wait_params wt;
static _Thread_local struct p2pt_count_params cnt;

static void count_params(const struct p2pt_count_exchange *x)
{
    memset(&cnt, 0, sizeof(cnt));
    cnt.routing = (unsigned long long)(uintptr_t)x->routing;
    cnt.upto = (unsigned long long)(uintptr_t)x->upto;
    cnt.rows = x->rows;
    cnt.cols = x->cols;
    cnt.n_puts = x->n_puts;
    cnt.n_signals = x->n_signals;
    for (uint32_t i = 0; i < x->n_puts; i++)
        cnt.put[i] = (unsigned long long)(uintptr_t)x->puts[i];
    for (uint32_t i = 0; i < x->n_signals; i++)
        cnt.signal[i] = (unsigned long long)(uintptr_t)x->signals[i];
}

p2pt_status p2pt__tma_signal(struct p2pt_handle *h, const struct p2pt_signal *s)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_module *m = NULL;
    CUstream stream = s->stream;
    P2PT_TRY(p2pt__jit_module(s->ctx, &p2pt__kernel_signal, &h->cfg, &h->log, &stream, &m));
    const struct p2pt_launch_settings ls = p2pt__launch_narrowed(p2pt__tma_launch(h));
    void *params[1];
    CUfunction fn;
    unsigned grid = 1, block = 1;
    if (s->exchange != NULL) {
        count_params(s->exchange);
        params[0] = &cnt;
        fn = m->fn[P2PT_SIGNAL_ENTRY_COUNT];
        grid = p2pt__kernel_grid(h, &ls, m, 1); /* a CTA a destination, within the budget */
        if (grid > s->exchange->cols)
            grid = s->exchange->cols;
        block = P2PT_COUNT_THREADS;
    } else if (s->wait) {
        wt.sem = (unsigned long long)(uintptr_t)s->sem;
        wt.count = s->count;
        wt.timeout_ns = (unsigned long long)p2pt__tma_settings(h)->wait_timeout_ms * 1000000ull;
        params[0] = &wt;
        fn = m->fn[P2PT_SIGNAL_ENTRY_WAIT];
    } else {
        sig.sem = (unsigned long long)(uintptr_t)s->sem;
        sig.add = 1;
        params[0] = &sig;
        fn = m->fn[P2PT_SIGNAL_ENTRY_SIGNAL];
    }
    P2PT_TRY(p2pt__kernel_launch(h, &ls, fn, grid, block, 0, stream, params));
out:
    return st;
}
