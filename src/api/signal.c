/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The signal entry points (p2pt.h): a signal, a wait, a device batch that
 * ends with signals or signals in parts, a count exchange, and their dry
 * runs. Each checks the handle and hands its operation to the pipeline
 * (operation.c).
 */
#include <stddef.h>
#include <string.h>

#include "explain.h"
#include "handles.h"
#include "operation.h"

_Static_assert(sizeof(struct p2pt_semaphore) == P2PT_SEMAPHORE_BYTES &&
                   offsetof(struct p2pt_semaphore, timeouts) == P2PT_SEMAPHORE_TIMEOUTS,
               "p2pt.h's semaphore is the kernels' struct p2pt_semaphore");
_Static_assert(P2PT_BATCH_SIGNALS_MAX == P2PT_BATCH_MAX_SIGNALS,
               "p2pt.h's limit is the kernel's parameter block's");
_Static_assert(P2PT_COUNT_COLS_MAX == P2PT_COUNT_MAX_COLS &&
                   P2PT_COUNT_PUTS_MAX == P2PT_COUNT_MAX_PUTS,
               "p2pt.h's count exchange limits are the kernel's");

static p2pt_status run(p2pt_handle *h, const char *fn, bool wait, void *sem, uint32_t count,
                       void *stream)
{
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    struct p2pt_op op;
    p2pt__op_signal(&op, fn, wait, sem, count, stream);
    return p2pt__op_run(h, &op, NULL);
}

p2pt_status p2pt_signal_async(p2pt_handle *h, void *sem, void *stream)
{
    return run(h, "p2pt_signal_async", false, sem, 1, stream);
}

p2pt_status p2pt_wait_async(p2pt_handle *h, void *sem, uint32_t count, void *stream)
{
    return run(h, "p2pt_wait_async", true, sem, count, stream);
}

/* The caller's array of `n` addresses read once into `here` (room for
 * `max`), so that the checks and the launch use the same addresses though
 * the caller's thread change its array meanwhile; an array the check will
 * refuse (none, or more than `max`) is left as it is. */
static void *const *read_once(void *const *caller, uint32_t n, uint32_t max, void **here)
{
    if (caller == NULL || n == 0 || n > max)
        return caller;
    memcpy(here, caller, n * sizeof(*here));
    return here;
}

/* A device batch that signals, as one (n_marks 1) or in parts. */
static p2pt_status batch(p2pt_handle *h, const char *fn, const p2pt_copy_desc *descs,
                         const uint32_t *count, uint32_t max_count, void *workspace,
                         void *const *signals, uint32_t n_signals, uint32_t n_marks,
                         void *stream)
{
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    struct p2pt_op op;
    void *here[P2PT_BATCH_SIGNALS_MAX];
    p2pt__op_device_batch(&op, fn, descs, count, max_count, workspace, stream);
    op.device.signals = read_once(signals, n_signals, P2PT_BATCH_SIGNALS_MAX, here);
    op.device.n_signals = n_signals;
    op.device.n_marks = n_marks;
    return p2pt__op_run(h, &op, NULL);
}

p2pt_status p2pt_copy_batch_device_signal_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                                const uint32_t *count, uint32_t max_count,
                                                void *workspace, void *const *signals,
                                                uint32_t n_signals, void *stream)
{
    return batch(h, "p2pt_copy_batch_device_signal_async", descs, count, max_count, workspace,
                 signals, n_signals, 1, stream);
}

p2pt_status p2pt_copy_batch_device_marks_async(p2pt_handle *h, const p2pt_copy_desc *descs,
                                               const uint32_t *count, uint32_t max_count,
                                               void *workspace, void *const *signals,
                                               uint32_t n_signals, uint32_t n_marks, void *stream)
{
    return batch(h, "p2pt_copy_batch_device_marks_async", descs, count, max_count, workspace,
                 signals, n_signals, n_marks, stream);
}

/* A count exchange, run or dry (`dry` not NULL). */
static p2pt_status count_rows(p2pt_handle *h, const char *fn, const void *routing, uint32_t rows,
                              uint32_t cols, int64_t *upto, void *const *puts, uint32_t n_puts,
                              void *const *signals, uint32_t n_signals, void *stream,
                              p2pt_choice *dry)
{
    void *puts_here[P2PT_COUNT_PUTS_MAX], *signals_here[P2PT_BATCH_SIGNALS_MAX];
    const struct p2pt_count_exchange x = {
        .routing = routing,
        .rows = rows,
        .cols = cols,
        .upto = upto,
        .puts = read_once(puts, n_puts, P2PT_COUNT_PUTS_MAX, puts_here),
        .n_puts = n_puts,
        .signals = read_once(signals, n_signals, P2PT_BATCH_SIGNALS_MAX, signals_here),
        .n_signals = n_signals};
    struct p2pt_op op;
    p2pt__op_count_rows(&op, fn, &x, stream);
    if (dry != NULL)
        return p2pt__dry_run(h, &op, dry);
    p2pt_status st = p2pt__check_handle(h, fn);
    if (st != P2PT_SUCCESS)
        return st;
    return p2pt__op_run(h, &op, NULL);
}

p2pt_status p2pt_count_rows_async(p2pt_handle *h, const void *routing, uint32_t rows,
                                  uint32_t cols, int64_t *upto, void *const *puts,
                                  uint32_t n_puts, void *const *signals, uint32_t n_signals,
                                  void *stream)
{
    return count_rows(h, "p2pt_count_rows_async", routing, rows, cols, upto, puts, n_puts,
                      signals, n_signals, stream, NULL);
}

p2pt_status p2pt_explain_count_rows(p2pt_handle *h, const void *routing, uint32_t rows,
                                    uint32_t cols, int64_t *upto, void *const *puts,
                                    uint32_t n_puts, void *const *signals, uint32_t n_signals,
                                    void *stream, p2pt_choice *choice)
{
    return count_rows(h, "p2pt_explain_count_rows", routing, rows, cols, upto, puts, n_puts,
                      signals, n_signals, stream, choice);
}

p2pt_status p2pt_explain_signal(p2pt_handle *h, void *sem, void *stream, p2pt_choice *choice)
{
    struct p2pt_op op;
    p2pt__op_signal(&op, "p2pt_explain_signal", false, sem, 1, stream);
    return p2pt__dry_run(h, &op, choice);
}

p2pt_status p2pt_explain_wait(p2pt_handle *h, void *sem, uint32_t count, void *stream,
                              p2pt_choice *choice)
{
    struct p2pt_op op;
    p2pt__op_signal(&op, "p2pt_explain_wait", true, sem, count, stream);
    return p2pt__dry_run(h, &op, choice);
}
