/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The windows' snapshots (src/transfer/windows.c) over the fake driver: a
 * register or unregister that finds no operation running frees what it
 * replaced, so a framework that registers a tensor's window every step
 * and drops it again holds no more memory after a million steps than
 * after one; an operation in flight keeps every snapshot it may read; and
 * host batches reading the windows while another thread registers and
 * unregisters them read only live snapshots (the sanitizer build of the
 * suite would see a read of a freed one).
 */
#include <pthread.h>

#include "gpu_test.h"
#include "handle.h"
#include "windows.h"

#define BYTES 65536u

static p2pt_handle *fake_handle(void)
{
    gt_use_fake_driver();
    return gt_handle("ce");
}

Test(windows, a_window_registered_and_dropped_every_step_keeps_no_snapshot)
{
    p2pt_handle *h = fake_handle();
    struct gt_buf a = gt_alloc(BYTES), b = gt_alloc(BYTES);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)a.ptr, BYTES));
    for (int step = 0; step < 1000; step++) {
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)b.ptr, BYTES));
        GT_OK(p2pt_copy_async(h, (void *)(uintptr_t)b.ptr, (void *)(uintptr_t)a.ptr, 64, NULL));
        GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)b.ptr));
    }
    cr_expect_eq(p2pt__windows_retained(&h->windows), 0);
    const struct p2pt_window_set *ws = p2pt__windows(&h->windows, 0);
    cr_assert_not_null(ws);
    cr_expect_eq(ws->n, 1);
    cr_expect_eq(ws->w[0].base, (uint64_t)a.ptr);
    p2pt_finalize(h);
    gt_free(&a);
    gt_free(&b);
}

Test(windows, an_operation_in_flight_keeps_what_it_may_read_until_it_ends)
{
    p2pt_handle *h = fake_handle();
    struct gt_buf a = gt_alloc(BYTES);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)a.ptr, BYTES));
    p2pt__windows_enter(&h->windows); /* an operation begins */
    const struct p2pt_window_set *held = p2pt__windows(&h->windows, 0);
    cr_assert_not_null(held);
    for (int k = 0; k < 3; k++) {
        GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)a.ptr));
        GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)a.ptr, BYTES));
    }
    cr_expect_eq(p2pt__windows_retained(&h->windows), 6, "every replaced snapshot kept");
    cr_expect_eq(held->n, 1, "what the operation holds is still there");
    cr_expect_eq(held->w[0].base, (uint64_t)a.ptr);
    p2pt__windows_leave(&h->windows);
    GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)a.ptr));
    cr_expect_eq(p2pt__windows_retained(&h->windows), 0, "freed by the first write after");
    p2pt_finalize(h);
    gt_free(&a);
}

struct churn {
    p2pt_handle *h;
    CUdeviceptr at;
    _Atomic int stop;
    int failures;
};

static void *churn_windows(void *arg)
{
    struct churn *c = arg;
    while (!atomic_load(&c->stop)) {
        if (p2pt_window_register(c->h, 0, (void *)(uintptr_t)c->at, BYTES) != P2PT_SUCCESS ||
            p2pt_window_unregister(c->h, 0, (void *)(uintptr_t)c->at) != P2PT_SUCCESS)
            c->failures++;
    }
    return NULL;
}

Test(windows, batches_read_live_snapshots_while_another_thread_churns_them)
{
    p2pt_handle *h = fake_handle();
    struct gt_buf src = gt_alloc(BYTES), dst = gt_alloc(BYTES), other = gt_alloc(BYTES);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)src.ptr, BYTES));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)dst.ptr, BYTES));
    struct churn c = {h, other.ptr, 0, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, churn_windows, &c), 0);
    enum { PIECES = 300 }; /* the pass over them looks each piece up in the windows */
    p2pt_copy_desc d[PIECES];
    for (int i = 0; i < PIECES; i++)
        d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(dst.ptr + 200u * (unsigned)i),
                                (const void *)(uintptr_t)(src.ptr + 200u * (unsigned)i), 200};
    for (int round = 0; round < 2000; round++)
        GT_OK(p2pt_copy_batch_async(h, d, PIECES, NULL));
    atomic_store(&c.stop, 1);
    pthread_join(t, NULL);
    cr_expect_eq(c.failures, 0);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)other.ptr, BYTES));
    cr_expect_eq(p2pt__windows_retained(&h->windows), 0);
    p2pt_finalize(h);
    gt_free(&src);
    gt_free(&dst);
    gt_free(&other);
}
