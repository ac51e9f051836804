/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signals as they travel from the entry points (api/signal.c) through the
 * operation pipeline (operation.c) to an engine: a signal adds one to a
 * semaphore (struct p2pt_semaphore, kernels/p2pt_kernel_abi.h) on any GPU
 * the stream's device reaches; a wait holds the stream until `count` more
 * signals than at its last wait have reached a semaphore of the stream's
 * own device. A count exchange (p2pt_count_rows_async) is a signal whose
 * payload its own kernel makes: a routing's rows counted by destination,
 * the counts put, then the signals. docs/SIGNALS.md says what they
 * guarantee.
 */
#ifndef P2PT_SIGNAL_OP_H
#define P2PT_SIGNAL_OP_H

#include "request.h"

/* A count exchange's arguments (p2pt.h, p2pt_count_rows_async). */
struct p2pt_count_exchange {
    const void *routing; /* rows x cols bytes, row-major */
    uint32_t rows, cols;
    int64_t *upto; /* [cols][rows] running counts; NULL: none */
    void *const *puts;
    uint32_t n_puts;
    void *const *signals;
    uint32_t n_signals;
};

struct p2pt_signal {
    const char *fn; /* the entry point, for messages */
    bool wait;      /* a wait; else a signal */
    void *sem;      /* the semaphore, in GPU memory */
    uint32_t count; /* a wait's signals */
    CUstream stream;
    CUcontext ctx;
    int device; /* the stream's */
    const struct p2pt_count_exchange *exchange; /* non-NULL: a count exchange
                                                   (wait, sem, count unused) */
};

/* Most signals one wait may wait for. */
#define P2PT_WAIT_MAX_COUNT (1u << 31)

#endif /* P2PT_SIGNAL_OP_H */
