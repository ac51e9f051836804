/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --mode alltoall: an alltoall between the GPUs of one process, the step a
 * MoE layer's dispatch takes. Every GPU sends --frac of its --rows rows to
 * every peer at once (alltoall.h has the layout), measured several ways in
 * one run against two yardsticks: the copy engine moving rows packed
 * beforehand (ce_packed: the same bytes as one copy per GPU pair, with
 * none of the scattered rows' cost) and NCCL's sends and receives of the
 * same packed rows. p2pt takes the rows where they lie: one batch
 * per source GPU holding its pieces for every peer (an alltoallv from one
 * GPU is one batch).
 *
 * A round (alltoall_rounds.c) is timed on GPU 0's clock from a common
 * start to the last GPU's end; rounds run back to back and the median is
 * reported. The host enqueue of a round is inside that window when it is
 * the slower of the two (host batches of many pieces): the table shows it
 * beside the round (enq_us).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alltoall.h"

#define DEFAULT_REF_CTAS 32
#define DEFAULT_ROUNDS 20
#define DEFAULT_WARMUP 3

static const char *const way_names[A2A_N_WAYS] = {
    "ce_packed", "nccl", "plain_kernel", "ce", "tma_host", "tma", "auto_host", "auto"};

/* The run's state: the GPUs and their rounds, NCCL, the plain kernel. */
static struct a2a A;
static struct bench_nccl nccl;  /* A.nccl once its communicators are up */
static char nccl_why[sizeof(bench_err) + 640]; /* bench_err with the library named */
static bool plain_up;
static char plain_why[sizeof(bench_err)];
static int warmup;
static uint32_t batch_max;      /* p2pt_properties.device_batch_max */

static bool is_device_batch(int way) { return way == A2A_TMA || way == A2A_AUTO; }
static bool is_p2pt(int way) { return way >= A2A_CE; }

static const char *way_transport(int way)
{
    return way == A2A_CE ? "ce" : way == A2A_TMA || way == A2A_TMA_HOST ? "tma" : "auto";
}

/* One row of a shape's table. */
struct row {
    int way;
    int budget; /* -1: none set */
    char label[32];
    p2pt_handle *h;
    bool windows;
    double us, enq_us;
    long long ctas; /* the widest grid; -1: not known */
    const char *check;
};

/* NCCL may hold peers' kernels waiting on one another: never leave a
 * failure with its communicators alive. */
static _Noreturn void a2a_fatal(const char *what)
{
    if (A.nccl)
        bench_nccl_close(A.nccl, true);
    A.nccl = NULL;
    bench_fatal("alltoall: %s", what);
}

/* ================================================================ GPUs */

/* The mode's GPUs: --gpus, or every visible one (at most A2A_MAX_GPUS).
 * False: fewer than 2 GPUs, and the mode runs beside others, which go on
 * without it (alone, it stops the program). */
bool bench_alltoall_choose(int count, bool alone)
{
    if (count < 2) {
        if (alone) {
            fprintf(stderr, "p2pt-bench: --mode alltoall: needs 2 GPUs, found %d\n", count);
            exit(1);
        }
        fprintf(stderr, "p2pt-bench: skipping alltoall: needs 2 GPUs, found %d\n", count);
        return false;
    }
    if (bench_opt.gpus > count)
        bench_usage_error("--gpus %d: only %d GPUs are visible (2..%d)", bench_opt.gpus, count,
                          count);
    if (bench_opt.gpus == 0)
        bench_opt.gpus = count < A2A_MAX_GPUS ? count : A2A_MAX_GPUS;
    return true;
}

/* ================================================================ rows */

/* The check of `r`'s round, already waited for; *ok false on a
 * difference (reported after the row). */
static bool row_verify(struct row *r, bool *ok)
{
    *ok = true;
    if (r->way == A2A_CE_PACKED)
        return a2a_verify_reference(&A, r->label, ok);
    if (!a2a_compare_reference(&A, r->label, ok))
        return false;
    return !*ok || !is_device_batch(r->way) || a2a_check_batch_status(&A, r->label, ok);
}

/* The checked round, then the warm-up and the timed rounds. A2A_UNSUPPORTED
 * (bench_err says why) where p2pt refuses the way with status 6. `ref_ok`:
 * ce_packed's bytes passed their check and the compare kernel sees a
 * difference where there is one, so the others can be held to them. */
static enum a2a_res row_run(struct row *r, bool ref_ok)
{
    const bool check = bench_opt.check && (ref_ok || r->way == A2A_CE_PACKED);
    double *t = calloc((size_t)A.rounds, sizeof(double));
    double *enq = calloc((size_t)A.rounds, sizeof(double));
    enum a2a_res e = A2A_FAILED;
    r->check = "-";
    if (t == NULL || enq == NULL) {
        bench_set_err("out of host memory");
        goto out;
    }
    if (check && !a2a_poison(&A, r->way == A2A_CE_PACKED))
        goto out;
    e = a2a_round(&A, r->way, r->h, A.starts[0], A.ends[0], NULL);
    if (e != A2A_OK) {
        if (e == A2A_UNSUPPORTED) {
            char why[sizeof(bench_err)];
            snprintf(why, sizeof(why), "%s", bench_err);
            if (!a2a_drain(&A))
                e = A2A_FAILED;
            snprintf(bench_err, sizeof(bench_err), "%s", why);
        }
        goto out;
    }
    e = A2A_FAILED;
    if (!a2a_round_wait(&A, r->way, A.ends[0]))
        goto out;
    if (check) {
        bool same = true;
        if (!row_verify(r, &same))
            goto out;
        r->check = same ? "ok" : "FAIL";
    }
    for (int w = 0; w < warmup; w++)
        if (a2a_round(&A, r->way, r->h, A.starts[0], A.ends[0], NULL) != A2A_OK)
            goto out;
    if (!a2a_round_wait(&A, r->way, A.ends[0]))
        goto out;
    for (int i = 0; i < A.rounds; i++)
        if (a2a_round(&A, r->way, r->h, A.starts[i], A.ends[i], &enq[i]) != A2A_OK)
            goto out;
    if (!a2a_round_wait(&A, r->way, A.ends[A.rounds - 1]))
        goto out;
    for (int i = 0; i < A.rounds; i++) {
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, A.starts[i], A.ends[i]));
        t[i] = (double)ms * 1e3;
    }
    r->us = bench_median(t, A.rounds);
    r->enq_us = bench_median(enq, A.rounds);
    e = A2A_OK;
    goto out;
fail:
    e = A2A_FAILED;
out:
    free(t);
    free(enq);
    return e;
}

/* Windows for a device batch of `h` on every GPU: its source rows and
 * every peer's receive buffer. */
static bool windows(p2pt_handle *h, bool on)
{
    for (int g = 0; g < A.n; g++)
        for (int d = 0; d < A.n; d++) {
            CUdeviceptr base = d == g ? A.gpu[g].src : A.gpu[d].recv;
            size_t bytes = d == g ? A.rows * A.row_bytes : A.recv_bytes;
            if (!bench_use(&A.gpu[g].g))
                return false;
            if (on)
                P2(p2pt_window_register(h, g, bench_dptr(base), bytes));
            else
                P2(p2pt_window_unregister(h, g, bench_dptr(base)));
        }
    return true;
fail:
    return false;
}

/* A handle of its own for each p2pt row, so that its widest grid is this
 * row's: its transport, the row's budget, prepared on every GPU (status 6
 * there: the row cannot run here, A2A_UNSUPPORTED), windows for device
 * batches. */
static enum a2a_res row_handle_open(struct row *r)
{
    char opts[64] = "";
    if (r->budget >= 0)
        snprintf(opts, sizeof(opts), "P2P_TRANSPORT_SM_BUDGET=%d", r->budget);
    if (!bench_handle_open(way_transport(r->way), opts[0] ? opts : NULL, &r->h, NULL))
        return A2A_FAILED;
    for (int g = 0; g < A.n; g++) {
        if (!bench_use(&A.gpu[g].g))
            return A2A_FAILED;
        p2pt_status st = p2pt_prepare(r->h, g);
        if (st != P2PT_SUCCESS) {
            bench_fail_p2(st, "p2pt_prepare");
            return st == P2PT_NOT_SUPPORTED ? A2A_UNSUPPORTED : A2A_FAILED;
        }
    }
    if (is_device_batch(r->way)) {
        if (!windows(r->h, true))
            return A2A_FAILED;
        r->windows = true;
    }
    return A2A_OK;
}

static bool row_handle_close(struct row *r)
{
    bool ok = true;
    if (r->h == NULL)
        return true;
    if (r->windows)
        ok = windows(r->h, false);
    r->windows = false;
    p2pt_finalize(r->h);
    r->h = NULL;
    return ok;
}

/* The yardsticks' GB/s per GPU, 0 where they did not run. */
struct anchors {
    double ce_packed, nccl;
};

static void print_head(void)
{
    printf("#%13s %7s %5s %11s %9s %10s %7s %10s  check\n", "way", "budget", "ctas",
           "round_us", "GB/s/GPU", "/ce_packed", "/nccl", "enq_us");
}

static void print_skip(const struct row *r, const char *why)
{
    printf("%14s skipped: %s\n", r->label, why);
    fflush(stdout);
}

static void row_report(const struct row *r, const struct anchors *an)
{
    const double bytes = (double)A.count * (double)A.row_bytes;
    const double gbps = bench_gbps(bytes, r->us);
    char budget[16] = "default", ctas[24] = "-", vs_ce[32] = "-", vs_nccl[32] = "-";
    if (r->budget >= 0)
        snprintf(budget, sizeof(budget), "%d", r->budget);
    if (r->ctas >= 0)
        snprintf(ctas, sizeof(ctas), "%lld", r->ctas);
    if (an->ce_packed > 0)
        snprintf(vs_ce, sizeof(vs_ce), "%.3f", gbps / an->ce_packed);
    if (an->nccl > 0)
        snprintf(vs_nccl, sizeof(vs_nccl), "%.3f", gbps / an->nccl);
    printf("%14s %7s %5s %11.2f %9.2f %10s %7s %10.2f  %s\n", r->label, budget, ctas, r->us,
           gbps, vs_ce, vs_nccl, r->enq_us, r->check);
    struct bench_alltoall_record rec = {
        .gpus = A.n,
        .rows = A.rows,
        .row_bytes = A.row_bytes,
        .frac = A.frac,
        .way = way_names[r->way],
        .sm_budget = r->budget,
        .max_ctas = r->ctas,
        .gbps_per_gpu = gbps,
        .vs_ce_packed = an->ce_packed > 0 ? gbps / an->ce_packed : -1,
        .vs_nccl = an->nccl > 0 ? gbps / an->nccl : -1,
    };
    bench_emit_alltoall(&rec);
}

/* Runs one row: false when it did not (a line says why); fatal on a
 * failure. A row that ran is still open (bench_row_begin): the caller
 * prints it, then its check's differences (bench_row_end). */
static bool row_measure(struct row *r, bool ref_ok)
{
    enum a2a_res e = A2A_OK;
    bench_row_begin();
    if (r->way == A2A_NCCL && A.nccl == NULL) {
        print_skip(r, nccl_why);
        bench_row_end();
        return false;
    }
    if (r->way == A2A_PLAIN && !plain_up) {
        print_skip(r, plain_why);
        bench_row_end();
        return false;
    }
    if (is_p2pt(r->way))
        e = row_handle_open(r);
    if (e == A2A_OK)
        e = row_run(r, ref_ok);
    /* The widest grid: none for the copy engine's copies; NCCL's is its own. */
    if (e == A2A_OK) {
        if (r->way == A2A_CE_PACKED)
            r->ctas = 0;
        else if (r->way == A2A_PLAIN)
            r->ctas = bench_ref_ctas(&A.plain[0], (uint32_t)A.count, (unsigned)A.plain_ctas);
        else if (is_p2pt(r->way)) {
            p2pt_properties pr;
            memset(&pr, 0, sizeof(pr));
            pr.size = sizeof(pr);
            p2pt_status st = p2pt_get_properties(r->h, &pr);
            if (st != P2PT_SUCCESS) {
                bench_fail_p2(st, "p2pt_get_properties");
                e = A2A_FAILED;
            }
            r->ctas = pr.max_grid;
        }
    }
    if (e == A2A_UNSUPPORTED) {
        char why[sizeof(bench_err)];
        snprintf(why, sizeof(why), "%s", bench_err);
        if (!row_handle_close(r))
            a2a_fatal(r->label);
        print_skip(r, why);
        bench_row_end();
        return false;
    }
    if (e != A2A_OK || !row_handle_close(r)) {
        char what[64];
        snprintf(what, sizeof(what), "%zu-byte rows, %s", A.row_bytes, r->label);
        a2a_fatal(what);
    }
    return true;
}

static void row_init(struct row *r, int way, int budget)
{
    memset(r, 0, sizeof(*r));
    r->way = way;
    r->budget = budget;
    r->ctas = -1;
    if (budget >= 0)
        snprintf(r->label, sizeof(r->label), "%s@%d", way_names[way], budget);
    else
        snprintf(r->label, sizeof(r->label), "%s", way_names[way]);
}

/* The rows after the yardsticks, in table order. */
static int later_rows(struct row *rows, int max)
{
    const bool *t = bench_opt.transport;
    int n = 0;
    if (A.plain_ctas > 0)
        row_init(&rows[n++], A2A_PLAIN, -1);
    if (t[T_CE])
        row_init(&rows[n++], A2A_CE, -1);
    if (t[T_TMA]) {
        row_init(&rows[n++], A2A_TMA_HOST, -1);
        row_init(&rows[n++], A2A_TMA, -1);
    }
    if (t[T_AUTO]) {
        row_init(&rows[n++], A2A_AUTO_HOST, -1);
        row_init(&rows[n++], A2A_AUTO, -1);
        for (int b = 0; b < bench_opt.n_budgets && n + 2 <= max; b++) {
            if (bench_opt.budgets[b] < 0)
                continue; /* default: the rows above */
            row_init(&rows[n++], A2A_AUTO_HOST, bench_opt.budgets[b]);
            row_init(&rows[n++], A2A_AUTO, bench_opt.budgets[b]);
        }
    }
    return n;
}

/* ============================================================= shapes */

/* Whether the shape fits in 80% of every GPU's free memory; a line says
 * why not. */
static bool shape_fits(void)
{
    char need[32], have[32];
    if (A.count > batch_max) {
        printf("# skipped: %zu pieces per GPU ((GPUs - 1) x %zu rows) are more than a device "
               "batch takes (%u)\n",
               A.count, A.k, batch_max);
        return false;
    }
    size_t want = a2a_shape_bytes(&A);
    for (int g = 0; g < A.n; g++) {
        size_t free_b = 0, total_b = 0;
        if (!bench_use(&A.gpu[g].g))
            goto fail;
        CU(tcu.cuMemGetInfo(&free_b, &total_b));
        if (want > free_b / 10 * 8) {
            printf("# skipped: needs %s on every GPU (sources, packed rows, receive and "
                   "reference buffers), more than 80%% of GPU %d's free %s\n",
                   bench_fmt_size(want, need, sizeof(need)), g,
                   bench_fmt_size(free_b, have, sizeof(have)));
            return false;
        }
    }
    return true;
fail:
    a2a_fatal("free memory");
}

static void run_shape(size_t row_bytes)
{
    char rb[32], per[32], sent[32];
    A.row_bytes = row_bytes;
    A.rows = bench_opt.rows;
    A.frac = bench_opt.frac;
    A.by_dest = bench_opt.by_dest;
    A.k = bench_alltoall_k(A.frac, A.rows);
    A.count = (size_t)(A.n - 1) * A.k;
    A.region = A.k * A.row_bytes + A2A_GUARD;
    A.recv_bytes = (size_t)(A.n - 1) * A.region;
    printf("\n# alltoall, %d GPUs: %zu rows of %s on each, frac %g: %zu rows (%s) from every "
           "GPU to each of its %d peers, %s sent per GPU a round; batches in %s order\n",
           A.n, A.rows, bench_fmt_size(row_bytes, rb, sizeof(rb)), A.frac, A.k,
           bench_fmt_size(A.k * row_bytes, per, sizeof(per)), A.n - 1,
           bench_fmt_size(A.count * row_bytes, sent, sizeof(sent)), A.by_dest ? "dest" : "row");
    if (!shape_fits())
        return;
    if (!a2a_shape_open(&A)) {
        a2a_shape_close(&A);
        a2a_fatal("buffers");
    }
    print_head();
    struct anchors an = {0, 0};
    struct row yard[2], later[6 + 2 * MAX_LIST];
    bool have[2];
    row_init(&yard[0], A2A_CE_PACKED, -1);
    row_init(&yard[1], A2A_NCCL, -1);
    /* The yardsticks first, reported once both are known so that their
     * own ratios are filled in too; their checks' differences after them. */
    have[0] = row_measure(&yard[0], true);
    bool ref_ok = have[0] && strcmp(yard[0].check, "FAIL") != 0;
    if (ref_ok && bench_opt.check) {
        bool can_fail = true;
        if (!a2a_poison(&A, false) || !a2a_compare_can_fail(&A, "the check", &can_fail))
            a2a_fatal("the check");
        ref_ok = can_fail;
    }
    have[1] = row_measure(&yard[1], ref_ok);
    const double bytes = (double)A.count * (double)A.row_bytes;
    an.ce_packed = have[0] ? bench_gbps(bytes, yard[0].us) : 0;
    an.nccl = have[1] ? bench_gbps(bytes, yard[1].us) : 0;
    for (int i = 0; i < 2; i++)
        if (have[i])
            row_report(&yard[i], &an);
    bench_row_end();
    if (!ref_ok && bench_opt.check)
        printf("# no reference to check the other rows against (see above): not checked\n");
    int n = later_rows(later, (int)P2PT_ARRAY_LEN(later));
    for (int i = 0; i < n; i++)
        if (row_measure(&later[i], ref_ok)) {
            row_report(&later[i], &an);
            bench_row_end();
        }
    a2a_shape_close(&A);
}

/* ================================================================ run */

static void print_mode_head(void)
{
    int lo = 1 << 30, hi = -1;
    for (int a = 0; a < A.n; a++)
        for (int b = 0; b < A.n; b++) {
            int rank = -1;
            if (a == b || tcu.cuDeviceGetP2PAttribute(&rank,
                                                      CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
                                                      A.gpu[a].g.dev, A.gpu[b].g.dev) !=
                              CUDA_SUCCESS)
                continue;
            lo = rank < lo ? rank : lo;
            hi = rank > hi ? rank : hi;
        }
    printf("\n# alltoall: GPUs 0..%d of this process:", A.n - 1);
    for (int g = 0; g < A.n; g++)
        printf("%s %s (%d SMs)", g ? "," : "", A.gpu[g].g.name, A.gpu[g].g.sms);
    printf("\n# peer access enabled between every two (p2pt_peer_enable); performance ranks "
           "%d..%d\n",
           lo, hi);
    if (A.nccl)
        printf("# nccl: NCCL %d.%d.%d from %s, %d communicators from ncclCommInitAll, "
               "NCCL_NVLS_ENABLE=%s\n",
               nccl.version / 10000, nccl.version / 100 % 100, nccl.version % 100, nccl.path,
               A.n, getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "?");
    else
        printf("# nccl: %s\n", nccl_why);
    if (A.plain_ctas > 0)
        printf("# plain_kernel: up to %d CTAs of %d threads on each GPU, a warp per row\n",
               A.plain_ctas, BENCH_REF_THREADS);
    printf("# round_us: median of %d rounds back to back, after one checked round and %d "
           "of warm-up, GPU 0's events from a common start to the last GPU's end; "
           "GB/s/GPU: bytes each GPU sends in a round / round_us (1e9); /ce_packed, /nccl: "
           "GB/s over theirs; enq_us: the host's time to enqueue a round (median); ctas: the "
           "widest grid the way launched\n",
           A.rounds, warmup);
    fflush(stdout);
}

static void nccl_open(void)
{
    int ordinals[A2A_MAX_GPUS];
    for (int g = 0; g < A.n; g++)
        ordinals[g] = g;
    if (!bench_nccl_load(&nccl, bench_opt.nccl)) {
        snprintf(nccl_why, sizeof(nccl_why), "%s", bench_err);
        return;
    }
    if (bench_nccl_init(&nccl, ordinals, A.n))
        A.nccl = &nccl;
    else
        snprintf(nccl_why, sizeof(nccl_why), "NCCL %d.%d.%d from %s: %s", nccl.version / 10000,
                 nccl.version / 100 % 100, nccl.version % 100, nccl.path, bench_err);
}

static void plain_open(void)
{
    struct bench_cubin kept = {0};
    A.plain_ctas = bench_opt.ref_ctas_given ? bench_opt.ref_ctas : DEFAULT_REF_CTAS;
    plain_up = A.plain_ctas > 0;
    for (int g = 0; g < A.n && plain_up; g++)
        plain_up = bench_ref_load(&A.plain[g], &A.gpu[g].g, &kept);
    bench_cubin_free(&kept);
    if (A.plain_ctas > 0 && !plain_up)
        snprintf(plain_why, sizeof(plain_why), "%s", bench_err);
}

void bench_run_alltoall(void)
{
    memset(&A, 0, sizeof(A));
    int rounds = bench_opt.repeats ? bench_opt.repeats : DEFAULT_ROUNDS;
    warmup = bench_opt.warmup >= 0 ? bench_opt.warmup : DEFAULT_WARMUP;
    if (!a2a_gpus_open(&A, bench_opt.gpus, rounds))
        a2a_fatal("GPUs");
    if (!a2a_peers_enable(&A, &batch_max))
        a2a_fatal("peer access");
    if (!a2a_patterns(&A))
        a2a_fatal("source patterns");
    if (bench_opt.check && !a2a_check_load(&A))
        a2a_fatal("the check");
    plain_open();
    nccl_open();
    print_mode_head();
    for (int i = 0; i < bench_opt.n_row_bytes; i++)
        run_shape(bench_opt.row_bytes[i]);
    if (bench_alltoall_csv_path())
        printf("# alltoall rows written to %s\n", bench_alltoall_csv_path());
    if (A.nccl)
        bench_nccl_close(A.nccl, false);
    A.nccl = NULL;
    for (int g = 0; g < A.n; g++)
        if (A.plain[g].mod) {
            CU_RELEASE(tcu.cuCtxSetCurrent(A.gpu[g].g.ctx));
            bench_ref_unload(&A.plain[g]);
        }
    a2a_check_unload(&A);
    a2a_gpus_close(&A);
}
