/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The calibrate mode: measure ce against tma on this machine and write the
 * crossover table `auto` reads (src/route/auto_table.h gives the format):
 *
 *   copy  <path>  copies of 4K..1G (powers of 2, within -b/-e) back to back
 *                 between two events, as the table mode times them: the
 *                 host's enqueue cost counts, as it does for a framework
 *                 issuing copies one by one;
 *   graph <path>  the same copies queued behind a gate that opens once all
 *                 are enqueued (the GPU's rate alone, what a graph replay
 *                 sees), up to 16M; above that the two agree;
 *   batch         host batches of 64 pieces of 4K..4M each, scattered, one
 *                 p2pt_copy_batch_async per operation, tma against ce;
 *   copy, graph and batch h2d and d2h
 *                 the same three with one side in pinned host memory
 *                 (calibrate_host.c).
 *
 * Every time is the mean of two medians taken in alternating order (ce
 * first, then tma first), so drift on a shared machine hits both. Each list
 * goes to p2pt__auto_list_build with a 2 % tie: an engine within 2 % of the
 * faster keeps the band it is in. Push and pull need a second GPU; without
 * one they are copied from the built-in table for this GPU, and the file
 * says so. The file is read back with the library's own parser before the
 * mode reports success.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auto_table.h"
#include "bench.h"
#include "calibrate.h"

#define CAL_MIN (4 * KiB)
#define GRAPH_MAX (16 * MiB)
#define BATCH_MIN (4 * KiB)
#define TIE 0.02
#define MAX_CAL 32

static int ix_ce, ix_tma, n_engines; /* registry indices of the two engines */

/* Time (us) of `bytes` copies on `d` by transport `t`: back to back, or
 * queued. */
static double copy_time(struct bench_dir *d, const char *what, int t, size_t bytes, bool queued)
{
    int n = bench_iters_for(bytes), r = bench_repeats_for(bytes), w = bench_warmup_for(n);
    struct bench_timing tm;
    bool ok = queued ? bench_time_copies_queued(bench_handles[t], d, bytes, w, n, r, &tm)
                     : bench_time_copies(bench_handles[t], d, 1, bytes, w, n, r, &tm);
    if (!ok)
        bench_fatal("calibrate, path %s, %s, %zu bytes", what, bench_transport_names[t], bytes);
    return tm.us;
}

/* Both engines at one size, twice in alternating order; *ce and *tma get
 * the means. */
static void both(struct bench_dir *d, const char *what, size_t bytes, bool queued, double *ce,
                 double *tma)
{
    double c1 = copy_time(d, what, T_CE, bytes, queued);
    double t1 = copy_time(d, what, T_TMA, bytes, queued);
    double t2 = copy_time(d, what, T_TMA, bytes, queued);
    double c2 = copy_time(d, what, T_CE, bytes, queued);
    *ce = (c1 + c2) / 2;
    *tma = (t1 + t2) / 2;
}

static void put(double *time, int i, double ce, double tma)
{
    time[i * n_engines + ix_ce] = ce;
    time[i * n_engines + ix_tma] = tma;
}

void cal_copy_lists(struct bench_dir *d, const char *what, struct p2pt_auto_list *copy_list,
                    struct p2pt_auto_list *graph_list)
{
    size_t lo = bench_opt.min_bytes > CAL_MIN ? bench_opt.min_bytes : CAL_MIN;
    size_t hi = bench_opt.max_bytes;
    uint64_t sizes[MAX_CAL];
    double copy[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0}, graph[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0};
    int n = 0;
    printf("\n# calibrate, path %s, microseconds per copy: b2b = back to back (table mode), "
           "queued = behind a gate (the GPU alone; graphs); each the mean of two medians\n",
           what);
    printf("#%9s %10s %10s %8s %10s %10s %8s\n", "size", "b2b_ce", "b2b_tma", "faster", "q_ce",
           "q_tma", "faster");
    for (size_t b = lo; b <= hi && n < MAX_CAL; b *= 2, n++) {
        double c, t, qc, qt;
        both(d, what, b, false, &c, &t);
        if (b <= GRAPH_MAX)
            both(d, what, b, true, &qc, &qt);
        else
            qc = c, qt = t;
        sizes[n] = b;
        put(copy, n, c, t);
        put(graph, n, qc, qt);
        char sz[32];
        printf("%10s %10.2f %10.2f %8s %10.2f %10.2f %8s\n", bench_fmt_size(b, sz, sizeof(sz)),
               c, t, t < c ? "tma" : "ce", qc, qt, qt < qc ? "tma" : "ce");
        bench_emit("calibrate", what, T_CE, NULL, b, c, bench_gbps((double)b, c), "b2b");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, b, t, bench_gbps((double)b, t),
                   "b2b");
        bench_emit("calibrate", what, T_CE, NULL, b, qc, bench_gbps((double)b, qc), "queued");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, b, qt,
                   bench_gbps((double)b, qt), "queued");
    }
    if (p2pt__auto_list_build(copy_list, sizes, n, copy, n_engines, TIE) != 0 ||
        p2pt__auto_list_build(graph_list, sizes, n, graph, n_engines, TIE) != 0) {
        bench_set_err("%s", p2pt__last_error_text());
        bench_fatal("calibrate, path %s: bands", what);
    }
    /* Graph bands that agree with the copy bands cost a capture query for
     * nothing: leave them out. */
    if (memcmp(graph_list, copy_list, sizeof(*copy_list)) == 0)
        memset(graph_list, 0, sizeof(*graph_list));
}

/* The copy and graph lists of one path between GPUs. */
static void calibrate_path(int path, struct p2pt_auto_table *tab)
{
    struct bench_setup su;
    if (!bench_setup_open(&su, path, bench_opt.max_bytes))
        bench_fatal("calibrate, path %s: buffers", bench_path_names[path]);
    cal_copy_lists(&su.d[0], bench_path_names[path], &tab->copy[path], &tab->graph[path]);
    bench_setup_close(&su);
}

/* GPU time (us) of one batch operation: `n` back to back between events,
 * median of 7; layouts rotate so no operation reads what one left in L2. */
static double batch_time(p2pt_handle *h, const p2pt_copy_desc *D, int sets,
                         const struct bench_dir *d, const char *what)
{
    enum { N = 10, REPEATS = 7 };
    double v[REPEATS];
    CUevent a = NULL, b = NULL;
    int op = 0;
    CU(tcu.cuEventCreate(&a, CU_EVENT_DEFAULT));
    CU(tcu.cuEventCreate(&b, CU_EVENT_DEFAULT));
    for (int k = 0; k < N; k++, op++)
        P2(p2pt_copy_batch_async(h, D + (size_t)(op % sets) * CAL_BATCH_COUNT,
                                 CAL_BATCH_COUNT, d->s));
    for (int r = 0; r < REPEATS; r++) {
        CU(tcu.cuEventRecord(a, d->s));
        for (int k = 0; k < N; k++, op++)
            P2(p2pt_copy_batch_async(h, D + (size_t)(op % sets) * CAL_BATCH_COUNT,
                                     CAL_BATCH_COUNT, d->s));
        CU(tcu.cuEventRecord(b, d->s));
        CU(tcu.cuEventSynchronize(b));
        float ms = 0;
        CU(tcu.cuEventElapsedTime(&ms, a, b));
        v[r] = ms * 1000.0 / N;
    }
    CU_RELEASE(tcu.cuEventDestroy(a));
    CU_RELEASE(tcu.cuEventDestroy(b));
    return bench_median(v, REPEATS);
fail:
    bench_fatal("calibrate, batches, %s", what);
}

void cal_batch_list(const struct bench_dir *d, size_t pool, const char *what,
                    struct p2pt_auto_list *out)
{
    uint64_t sizes[MAX_CAL];
    double time[MAX_CAL * P2PT_MAX_TRANSPORTS] = {0};
    int n = 0;
    size_t gap = CAL_BATCH_GAP;
    p2pt_copy_desc *D = malloc(16 * CAL_BATCH_COUNT * sizeof(*D));
    if (D == NULL)
        bench_fatal("calibrate, batches: host memory");
    printf("\n# calibrate, batches of %d pieces (%s, destinations %zu bytes apart), GPU "
           "microseconds per batch, each the mean of two medians\n",
           CAL_BATCH_COUNT, what, gap);
    printf("#%9s %10s %10s %8s\n", "piece", "ce_batch", "tma_batch", "faster");
    for (size_t m = BATCH_MIN; m <= CAL_BATCH_MAX && n < MAX_CAL; m *= 4, n++) {
        size_t span = CAL_BATCH_COUNT * (m + gap);
        int sets = (int)(pool / span);
        sets = sets > 16 ? 16 : sets < 1 ? 1 : sets;
        for (int s = 0; s < sets; s++)
            for (int i = 0; i < CAL_BATCH_COUNT; i++) {
                p2pt_copy_desc *p = &D[s * CAL_BATCH_COUNT + i];
                /* pieces in reverse order on the destination side */
                p->src = bench_dptr(d->src.base + (size_t)s * span + (size_t)i * m);
                p->dst = bench_dptr(d->dst.base + (size_t)s * span +
                                    (size_t)(CAL_BATCH_COUNT - 1 - i) * (m + gap));
                p->bytes = m;
            }
        double c1 = batch_time(bench_handles[T_CE], D, sets, d, what);
        double t1 = batch_time(bench_handles[T_TMA], D, sets, d, what);
        double t2 = batch_time(bench_handles[T_TMA], D, sets, d, what);
        double c2 = batch_time(bench_handles[T_CE], D, sets, d, what);
        double c = (c1 + c2) / 2, t = (t1 + t2) / 2;
        sizes[n] = m;
        put(time, n, c, t);
        char sz[32];
        printf("%10s %10.2f %10.2f %8s\n", bench_fmt_size(m, sz, sizeof(sz)), c, t,
               t < c ? "tma" : "ce");
        bench_emit("calibrate", what, T_CE, NULL, m * CAL_BATCH_COUNT, c,
                   bench_gbps((double)m * CAL_BATCH_COUNT, c), "batch64");
        bench_emit("calibrate", what, T_TMA, &bench_default_cfg, m * CAL_BATCH_COUNT, t,
                   bench_gbps((double)m * CAL_BATCH_COUNT, t), "batch64");
    }
    free(D);
    if (p2pt__auto_list_build(out, sizes, n, time, n_engines, TIE) != 0) {
        bench_set_err("%s", p2pt__last_error_text());
        bench_fatal("calibrate, batches, %s: bands", what);
    }
}

static void calibrate_batches(struct p2pt_auto_table *tab)
{
    struct bench_setup su;
    if (!bench_setup_open(&su, P_LOCAL, CAL_BATCH_LARGEST))
        bench_fatal("calibrate, batches: buffers");
    cal_batch_list(&su.d[0], su.pool, "local", &tab->batch);
    bench_setup_close(&su);
}

/* The built-in table this GPU would use, for the paths not measured. */
static bool builtin_for(const struct bench_gpu *g, int cc, const char *const *engines,
                        struct p2pt_auto_table *out)
{
    const struct p2pt_auto_builtin *pick = p2pt__auto_builtin_for(cc, g->name);
    return pick != NULL && p2pt__auto_table_parse(pick->text, strlen(pick->text), "built-in",
                                                  engines, n_engines, out) == P2PT_SUCCESS;
}

static void write_table(const char *path, const struct p2pt_auto_table *tab, bool peers_measured,
                        bool have_builtin, const char *const *engines)
{
    char text[8192], date[64] = "?", host[128] = "?", chunk[32];
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", &tmv);
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';
    p2pt__auto_table_format(tab, engines, text, sizeof(text));
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        bench_set_err("cannot write %s: %s", path, strerror(errno));
        bench_fatal("calibrate");
    }
    fprintf(f,
            "# p2pt crossover table for P2P_TRANSPORT=auto (P2P_TRANSPORT_AUTO_TABLE=%s)\n"
            "# written by p2pt-bench --mode calibrate, p2pt %s, %s, host %s\n"
            "# GPU %d: %s; tma settings: chunk %s, %d stages, max CTAs %d\n",
            path, P2PT_VERSION_STRING, date, host, bench_gpus[0].ordinal, bench_gpus[0].name,
            bench_fmt_size(bench_default_cfg.chunk, chunk, sizeof(chunk)),
            bench_default_cfg.stages, bench_default_cfg.max_ctas);
    fprintf(f, "# h2d and d2h: pinned host memory from cuMemHostAlloc (DEVICEMAP | PORTABLE)\n");
    if (!peers_measured)
        fprintf(f, "# push and pull: not measured (no second GPU); %s\n",
                have_builtin ? "the built-in table's bands" : "the copy engine");
    fputs(text, f);
    if (fclose(f) != 0) {
        bench_set_err("cannot write %s: %s", path, strerror(errno));
        bench_fatal("calibrate");
    }
    struct p2pt_auto_table back;
    if (p2pt__auto_table_load(path, engines, n_engines, &back) != P2PT_SUCCESS) {
        bench_set_err("%s", p2pt__last_error_text());
        bench_fatal("calibrate: reading %s back", path);
    }
    printf("\n# calibrate: wrote %s (read back by p2pt's parser); use it with\n"
           "#   P2P_TRANSPORT=auto P2P_TRANSPORT_AUTO_TABLE=%s\n%s",
           path, path, text);
}

void bench_run_calibrate(void)
{
    const struct bench_gpu *g = &bench_gpus[0];
    const char *engines[P2PT_MAX_TRANSPORTS];
    struct p2pt_auto_table tab, builtin;
    char out[256];

    n_engines = p2pt__engine_names(engines, P2PT_MAX_TRANSPORTS);
    ix_ce = p2pt__transport_index(&p2pt__transport_ce);
    ix_tma = p2pt__transport_index(&p2pt__transport_tma);
    memset(&tab, 0, sizeof(tab));
    tab.cc = g->cc_major * 10 + g->cc_minor;
    snprintf(tab.device, sizeof(tab.device), "%.*s", (int)sizeof(tab.device) - 1, g->name);
    bool have_builtin = builtin_for(g, tab.cc, engines, &builtin);

    calibrate_path(P_LOCAL, &tab);
    bool peers = bench_have_peer;
    for (int p = P_PUSH; p <= P_PULL; p++) {
        if (peers) {
            calibrate_path(p, &tab);
        } else if (have_builtin) {
            tab.copy[p] = builtin.copy[p];
            tab.graph[p] = builtin.graph[p];
        } else {
            tab.copy[p].n = 1;
            tab.copy[p].band[0].engine = (uint32_t)ix_ce;
        }
    }
    calibrate_batches(&tab);
    cal_host(&tab);
    if (bench_opt.calibrate_out == NULL)
        snprintf(out, sizeof(out), "p2pt-auto-sm_%d.table", tab.cc);
    else
        snprintf(out, sizeof(out), "%s", bench_opt.calibrate_out);
    write_table(out, &tab, peers, have_builtin, engines);
}
