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

static int ix_ce, n_engines; /* the copy engine's registry index; how many engines */


/* The copy and graph lists of one path between GPUs. */
static void calibrate_path(int path, struct p2pt_auto_table *tab)
{
    struct bench_setup su;
    if (!bench_setup_open(&su, path, bench_opt.max_bytes))
        bench_fatal("calibrate, path %s: buffers", bench_path_names[path]);
    cal_copy_lists(&su.d[0], bench_path_names[path], &tab->copy[path], &tab->graph[path]);
    bench_setup_close(&su);
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
