/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The count exchange of an alltoallv (p2pt_count_rows_async,
 * docs/SIGNALS.md): one kernel counts a routing's rows by destination,
 * puts the counts, signals, then writes each row's running count.
 *
 * Without a GPU: every bad argument named with nothing enqueued; a budget
 * of no kernel refuses it with status 6; over the fake driver, explain
 * names the kernel engine and the path "count" whatever P2P_TRANSPORT
 * says, a range past its allocation is refused, and the counters count.
 * On one GPU: random routing (bytes that are 0 or any other value) at odd
 * row counts, 1 to 64 destinations and an odd address, against a loop on
 * the host: every put holds the counts and nothing around them changed,
 * upto holds every running count inside poisoned guards, each semaphore
 * counts one signal; a captured graph replayed follows the routing as it
 * is at each replay. On two GPUs: 300 rounds whose counts change, each
 * put into the other GPU's memory, which waits for the signal and logs
 * what it reads: every round's log holds that round's counts.
 */
#include "gpu_test.h"

Test(count_rows_cpu, a_dead_handle_is_refused_naming_the_call)
{
    void *put = (void *)0x1000;
    gt_expect_status(
        p2pt_count_rows_async(NULL, (void *)0x1000, 4, 2, NULL, &put, 1, NULL, 0, NULL),
        P2PT_INVALID_ARGUMENT, "p2pt_count_rows_async");
    p2pt_choice c = {sizeof(c)};
    gt_expect_status(p2pt_explain_count_rows(NULL, (void *)0x1000, 4, 2, NULL, &put, 1, NULL, 0,
                                             NULL, &c),
                     P2PT_INVALID_ARGUMENT, "p2pt_explain_count_rows");
}

Test(count_rows_fake, arguments_budget_explain_and_counters)
{
    gt_use_fake_driver();
    CUdeviceptr routing, upto, put, sem;
    GT_CHECK(tcu.cuMemAlloc(&routing, 4096));
    GT_CHECK(tcu.cuMemAlloc(&upto, 4096));
    GT_CHECK(tcu.cuMemAlloc(&put, 4096));
    GT_CHECK(tcu.cuMemAlloc(&sem, 4096));
    const CUdeviceptr peer = gt_peer_alloc(4096);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const void *r = (const void *)routing;
    int64_t *up = (int64_t *)upto;
    void *puts[P2PT_COUNT_PUTS_MAX + 1], *sems[P2PT_BATCH_SIGNALS_MAX + 1];
    for (int i = 0; i <= P2PT_COUNT_PUTS_MAX; i++)
        puts[i] = (void *)put;
    for (int i = 0; i <= P2PT_BATCH_SIGNALS_MAX; i++)
        sems[i] = (void *)sem;

    const char *transports[3] = {"ce", "tma", "auto"};
    for (int t = 0; t < 3; t++) {
        p2pt_handle *h = gt_handle_opts(transports[t], NULL);
        gt_expect_status(p2pt_count_rows_async(h, r, P2PT_COUNT_ROWS_MAX + 1u, 2, up, puts, 1, sems,
                                               1, s),
                         P2PT_INVALID_ARGUMENT, "rows 2147483649: expected 0 to 2147483648");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 0, up, puts, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "cols 0: expected 1 to 64");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 65, up, puts, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "cols 65");
        gt_expect_status(p2pt_count_rows_async(h, NULL, 8, 2, up, puts, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "routing is NULL");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, (int64_t *)(upto + 4), puts, 1, sems, 1,
                                               s),
                         P2PT_INVALID_ARGUMENT, "8-byte aligned");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, puts, P2PT_COUNT_PUTS_MAX + 1, sems,
                                               1, s),
                         P2PT_INVALID_ARGUMENT, "65 puts");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, NULL, 2, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "2 puts at");
        void *odd_put[2] = {(void *)put, (void *)(put + 12)};
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, odd_put, 2, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "puts[1]");
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, puts, 1, sems,
                                               P2PT_BATCH_SIGNALS_MAX + 1, s),
                         P2PT_INVALID_ARGUMENT, "up to 64 semaphore");
        void *odd_sem[2] = {(void *)sem, (void *)(sem + 8)};
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, puts, 1, odd_sem, 2, s),
                         P2PT_INVALID_ARGUMENT, "signals[1]");
        /* Ranges the kernel would touch past their allocation. */
        gt_expect_status(p2pt_count_rows_async(h, r, 600, 1, up, puts, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "upto");
        gt_expect_status(p2pt_count_rows_async(h, r, 4097, 1, NULL, puts, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "runs past the end");
        void *late_put[1] = {(void *)(put + 4096 - 8)};
        gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, NULL, late_put, 1, sems, 1, s),
                         P2PT_INVALID_ARGUMENT, "puts[0]");
        p2pt_properties p = gt_props(h);
        cr_assert_eq(p.kernel_launches, 0, "%s: nothing enqueued", transports[t]);
        cr_assert_eq(p.rejected, 13, "%s: every refusal counted", transports[t]);

        /* The kernel engine, whatever P2P_TRANSPORT says; a put on a peer. */
        void *two[2] = {(void *)put, (void *)peer};
        p2pt_choice c = {sizeof(c)};
        GT_OK(p2pt_explain_count_rows(h, r, 8, 2, up, two, 2, sems, 1, s, &c));
        cr_assert_str_eq(c.transport, "tma", "%s: %s", transports[t], c.reason);
        cr_assert_str_eq(c.path, "count");
        cr_assert(strstr(c.reason, "a CTA a destination") != NULL, "%s", c.reason);
        GT_OK(p2pt_count_rows_async(h, r, 8, 2, up, two, 2, sems, 1, s));
        /* No rows: nothing read, the zeros still put and signalled. */
        GT_OK(p2pt_count_rows_async(h, NULL, 0, 2, NULL, two, 2, sems, 1, s));
        p = gt_props(h);
        cr_assert_eq(p.count_exchanges, 2);
        cr_assert_eq(p.signals, 0);
        cr_assert_eq(p.kernel_launches, 2);
        p2pt_finalize(h);
    }
    p2pt_handle *h = gt_handle_opts("auto", "P2P_TRANSPORT_SM_BUDGET=0");
    gt_expect_status(p2pt_count_rows_async(h, r, 8, 2, up, puts, 1, sems, 1, s), P2PT_NOT_SUPPORTED,
                     "SM_BUDGET=0");
    p2pt_finalize(h);
    h = gt_handle_opts("auto", "P2P_TRANSPORT_SM_BUDGET=1"); /* one CTA takes every column */
    GT_OK(p2pt_count_rows_async(h, r, 8, 2, up, puts, 1, sems, 1, s));
    cr_assert_eq(gt_props(h).max_grid, 1);
    p2pt_finalize(h);
    h = gt_handle_opts("tma", NULL);
    GT_OK(p2pt_count_rows_async(h, r, 8, 3, up, puts, 1, sems, 1, s));
    cr_assert_eq(gt_props(h).max_grid, 3, "a CTA a destination");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
}

/* ------------------------------------------------------------ one GPU */

/* Routing bytes: about half zero, the rest any other value (sent). */
static void random_routing(unsigned char *r, size_t n, uint64_t seed)
{
    gt_random(r, n, seed);
    for (size_t i = 0; i < n; i++)
        r[i] = r[i] < 128 ? 0 : r[i];
}

/* The counts and running counts of a rows x cols routing, by a loop. */
static void count_by_loop(const unsigned char *r, uint32_t rows, uint32_t cols, int64_t *counts,
                          int64_t *upto)
{
    for (uint32_t c = 0; c < cols; c++) {
        int64_t n = 0;
        for (uint32_t t = 0; t < rows; t++) {
            n += r[(size_t)t * cols + c] != 0;
            upto[(size_t)c * rows + t] = n;
        }
        counts[c] = n;
    }
}

/* `b`'s payload holds `want` (n bytes) at `off`, and every other byte,
 * guards included, is poison. */
static void expect_bytes(const struct gt_buf *b, size_t off, const void *want, size_t n,
                         const char *what, uint32_t rows, uint32_t cols)
{
    size_t total = b->n + 2 * GT_GUARD;
    unsigned char *got = malloc(total);
    cr_assert_not_null(got);
    GT_CHECK(tcu.cuMemcpyDtoH(got, b->base, total));
    const size_t lo = GT_GUARD + off;
    for (size_t i = 0; i < total; i++) {
        const bool in = i >= lo && i < lo + n;
        const unsigned char w = in ? ((const unsigned char *)want)[i - lo] : GT_POISON;
        if (got[i] != w) {
            const unsigned g = got[i];
            free(got);
            cr_assert_fail("%s of %u x %u: byte %ld past its start is 0x%02x, expected 0x%02x "
                           "(%s)",
                           what, rows, cols, (long)i - (long)lo, g, (unsigned)w,
                           in ? "a wrong count" : "written outside");
        }
    }
    free(got);
}

struct shape {
    uint32_t rows, cols;
};

Test(count_rows_gpu, counts_and_places_match_a_loop_at_odd_sizes)
{
    gt_require_gpus(1);
    gt_use_device(0);
    const struct shape shapes[] = {{0, 2},   {1, 1},    {31, 3},  {33, 2},   {1000, 8},
                                   {4097, 2}, {5000, 64}, {70001, 5}, {4096, 9}};
    const size_t max_cells = 70001 * 5;
    struct gt_buf routing = gt_alloc(max_cells + 1), upto = gt_alloc(max_cells * 8);
    struct gt_buf put[3] = {gt_alloc(64 * 8 + 8), gt_alloc(64 * 8 + 8), gt_alloc(64 * 8 + 8)};
    CUdeviceptr sems;
    GT_CHECK(tcu.cuMemAlloc(&sems, 2 * P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sems, 0, 2 * P2PT_SEMAPHORE_BYTES));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuCtxSynchronize());
    p2pt_handle *h = gt_handle("tma");
    unsigned char *r = malloc(max_cells);
    int64_t *want_up = malloc(max_cells * 8), want[64];
    cr_assert(r && want_up);
    void *puts[3] = {(void *)(put[0].ptr + 8), (void *)(put[1].ptr + 8), (void *)(put[2].ptr + 8)};
    void *signals[2] = {(void *)sems, (void *)(sems + P2PT_SEMAPHORE_BYTES)};

    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        const uint32_t rows = shapes[k].rows, cols = shapes[k].cols;
        const size_t cells = (size_t)rows * cols;
        random_routing(r, cells, 100 + k);
        count_by_loop(r, rows, cols, want, want_up);
        /* The routing one byte past an aligned address: rows of any width. */
        if (cells)
            GT_CHECK(tcu.cuMemcpyHtoD(routing.ptr + 1, r, cells));
        gt_poison(&upto);
        for (int i = 0; i < 3; i++)
            gt_poison(&put[i]);
        GT_OK(p2pt_count_rows_async(h, (const void *)(routing.ptr + 1), rows, cols,
                                    (int64_t *)upto.ptr, puts, 3, signals, 2, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        for (int i = 0; i < 3; i++)
            expect_bytes(&put[i], 8, want, (size_t)cols * 8, "a put", rows, cols);
        expect_bytes(&upto, 0, want_up, cells * 8, "upto", rows, cols);
        uint64_t v[8];
        GT_CHECK(tcu.cuMemcpyDtoH(v, sems, sizeof(v)));
        cr_assert(v[0] == (k + 1) << 32 && v[4] == (k + 1) << 32,
                  "%u x %u: the semaphores count %llu and %llu units, expected %zu", rows, cols,
                  (unsigned long long)(v[0] >> 32), (unsigned long long)(v[4] >> 32), k + 1);
    }
    /* Without upto: the counts alone, nothing else written. */
    gt_poison(&upto);
    gt_poison(&put[0]);
    GT_OK(p2pt_count_rows_async(h, (const void *)(routing.ptr + 1), 4096, 9, NULL, puts, 1, NULL,
                                0, s));
    GT_CHECK(tcu.cuStreamSynchronize(s));
    expect_bytes(&put[0], 8, want, 9 * 8, "a put without upto", 4096, 9);
    expect_bytes(&upto, 0, NULL, 0, "upto not asked for", 4096, 9);
    cr_assert_eq(gt_props(h).count_exchanges, sizeof(shapes) / sizeof(shapes[0]) + 1);
    p2pt_finalize(h);
    for (int i = 0; i < 3; i++)
        gt_free(&put[i]);
    gt_free(&routing);
    gt_free(&upto);
    tcu.cuMemFree(sems);
    free(r);
    free(want_up);
}

Test(count_rows_gpu, a_replayed_graph_counts_the_routing_of_that_replay)
{
    gt_require_gpus(1);
    gt_use_device(0);
    if (tcu.cuStreamBeginCapture == NULL)
        cr_skip_test("the driver has no stream capture");
    enum { ROWS = 2049, COLS = 4, REPLAYS = 4 };
    struct gt_buf routing = gt_alloc(ROWS * COLS), upto = gt_alloc(ROWS * COLS * 8);
    struct gt_buf put = gt_alloc(COLS * 8);
    CUdeviceptr sem;
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuCtxSynchronize());
    p2pt_handle *h = gt_handle("tma");
    GT_OK(p2pt_prepare(h, 0));
    void *puts[1] = {(void *)put.ptr}, *signals[1] = {(void *)sem};
    CUgraph g;
    CUgraphExec x;
    GT_CHECK(tcu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    GT_OK(p2pt_count_rows_async(h, (const void *)routing.ptr, ROWS, COLS, (int64_t *)upto.ptr,
                                puts, 1, signals, 1, s));
    GT_OK(p2pt_wait_async(h, (void *)sem, 1, s));
    GT_CHECK(tcu.cuStreamEndCapture(s, &g));
    GT_CHECK(tcu.cuGraphInstantiateWithFlags(&x, g, 0));
    unsigned char r[ROWS * COLS];
    int64_t want[COLS], *want_up = malloc(ROWS * COLS * 8);
    cr_assert_not_null(want_up);
    for (int replay = 0; replay < REPLAYS; replay++) {
        random_routing(r, sizeof(r), 900 + replay);
        count_by_loop(r, ROWS, COLS, want, want_up);
        GT_CHECK(tcu.cuMemcpyHtoD(routing.ptr, r, sizeof(r)));
        gt_poison(&upto);
        gt_poison(&put);
        GT_CHECK(tcu.cuGraphLaunch(x, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_bytes(&put, 0, want, sizeof(want), "a replay's put", ROWS, COLS);
        expect_bytes(&upto, 0, want_up, ROWS * COLS * 8, "a replay's upto", ROWS, COLS);
    }
    uint64_t v[3];
    GT_CHECK(tcu.cuMemcpyDtoH(v, sem, sizeof(v)));
    cr_assert_eq(v[0], (uint64_t)REPLAYS << 32, "a signal a replay: %llu units",
                 (unsigned long long)(v[0] >> 32));
    cr_assert_eq(v[1], (uint64_t)REPLAYS << 32, "a wait a replay");
    cr_assert_eq(v[2], 0, "no wait timed out");
    tcu.cuGraphExecDestroy(x);
    tcu.cuGraphDestroy(g);
    p2pt_finalize(h);
    gt_free(&routing);
    gt_free(&upto);
    gt_free(&put);
    tcu.cuMemFree(sem);
    free(want_up);
}

/* ------------------------------------------------------------ two GPUs */

Test(count_rows_gpu, counts_put_on_a_peer_are_there_when_its_wait_ends)
{
    gt_require_gpus(2);
    gt_enable_peers();
    enum { ROWS = 4096, COLS = 2, ROUNDS = 300 };
    /* GPU 0: every round's routing, the semaphore GPU 1 signals back.
     * GPU 1: the matrix row GPU 0 puts into, its semaphore, the log. */
    CUcontext a = gt_use_device(0);
    CUdeviceptr routing, back;
    GT_CHECK(tcu.cuMemAlloc(&routing, (size_t)ROUNDS * ROWS * COLS));
    GT_CHECK(tcu.cuMemAlloc(&back, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(back, 0, P2PT_SEMAPHORE_BYTES));
    CUstream sa, sb;
    GT_CHECK(tcu.cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
    CUcontext b = gt_use_device(1);
    CUdeviceptr row, sem, logbuf;
    GT_CHECK(tcu.cuMemAlloc(&row, COLS * 8));
    GT_CHECK(tcu.cuMemAlloc(&sem, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemsetD8(sem, 0, P2PT_SEMAPHORE_BYTES));
    GT_CHECK(tcu.cuMemAlloc(&logbuf, (size_t)ROUNDS * COLS * 8));
    GT_CHECK(tcu.cuMemsetD8(logbuf, GT_POISON, (size_t)ROUNDS * COLS * 8));
    GT_CHECK(tcu.cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
    GT_CHECK(tcu.cuCtxSynchronize());
    p2pt_handle *hb = gt_handle("tma");

    /* Round r's routing sends each row with probability r / ROUNDS, so
     * every round's counts differ from the last. */
    unsigned char *r = malloc((size_t)ROUNDS * ROWS * COLS);
    int64_t *want = malloc((size_t)ROUNDS * COLS * 8), *up = malloc(ROWS * COLS * 8);
    cr_assert(r && want && up);
    gt_random(r, (size_t)ROUNDS * ROWS * COLS, 77);
    for (int k = 0; k < ROUNDS; k++) {
        unsigned char *rk = r + (size_t)k * ROWS * COLS;
        for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
            rk[i] = rk[i] < 256 * k / ROUNDS;
        count_by_loop(rk, ROWS, COLS, want + (size_t)k * COLS, up);
    }
    GT_CHECK(tcu.cuCtxSetCurrent(a));
    GT_CHECK(tcu.cuMemcpyHtoD(routing, r, (size_t)ROUNDS * ROWS * COLS));
    p2pt_handle *ha = gt_handle("tma");
    void *puts[1] = {(void *)row}, *to_b[1] = {(void *)sem};
    for (int k = 0; k < ROUNDS; k++) {
        GT_CHECK(tcu.cuCtxSetCurrent(a));
        if (k > 0)
            GT_OK(p2pt_wait_async(ha, (void *)back, 1, sa)); /* B has logged round k-1 */
        GT_OK(p2pt_count_rows_async(ha, (const void *)(routing + (size_t)k * ROWS * COLS), ROWS,
                                    COLS, NULL, puts, 1, to_b, 1, sa));
        GT_CHECK(tcu.cuCtxSetCurrent(b));
        GT_OK(p2pt_wait_async(hb, (void *)sem, 1, sb));
        GT_OK(p2pt_copy_async(hb, (void *)(logbuf + (size_t)k * COLS * 8), (void *)row, COLS * 8,
                              sb));
        GT_OK(p2pt_signal_async(hb, (void *)back, sb));
    }
    GT_CHECK(tcu.cuStreamSynchronize(sb));
    GT_CHECK(tcu.cuCtxSetCurrent(a));
    GT_CHECK(tcu.cuStreamSynchronize(sa));
    GT_CHECK(tcu.cuCtxSetCurrent(b));
    int64_t *got = malloc((size_t)ROUNDS * COLS * 8);
    cr_assert_not_null(got);
    GT_CHECK(tcu.cuMemcpyDtoH(got, logbuf, (size_t)ROUNDS * COLS * 8));
    for (int k = 0; k < ROUNDS; k++)
        for (int c = 0; c < COLS; c++)
            cr_assert_eq(got[k * COLS + c], want[k * COLS + c],
                         "round %d, column %d: GPU 1 read %lld after the signal, the round's "
                         "count is %lld%s",
                         k, c, (long long)got[k * COLS + c], (long long)want[k * COLS + c],
                         k > 0 && got[k * COLS + c] == want[(k - 1) * COLS + c]
                             ? " (the last round's: a stale read)"
                             : "");
    uint64_t timeouts = 1;
    GT_CHECK(tcu.cuMemcpyDtoH(&timeouts, sem + P2PT_SEMAPHORE_TIMEOUTS, 8));
    cr_assert_eq(timeouts, 0);
    p2pt_finalize(ha);
    p2pt_finalize(hb);
    free(r);
    free(want);
    free(up);
    free(got);
}
