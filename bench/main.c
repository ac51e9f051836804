/* SPDX-License-Identifier: Apache-2.0 */
/*
 * p2pt-bench: p2pt's two transports, the copy engine ("ce", cuMemcpyAsync)
 * and the TMA kernel ("tma", cp.async.bulk compiled at run time by NVRTC),
 * and "auto", which picks one of them per copy, measured side by side
 * through p2pt's own API, in one run; and the calibration that writes
 * auto's crossover table for this machine. This file owns
 * the modes' table and the order of a run: flags, the environment check,
 * devices, handles, the header, the modes, the counters, the exit status.
 *
 * What keeps the numbers honest (printed in every header too):
 *  - bandwidth counts each copy's payload once: N bytes copied are N bytes on
 *    any path; bidir adds both directions' payloads; GB/s = 1e9 bytes/s;
 *  - device times are CUDA events around a batch of copies, divided by the
 *    copies in it, the median over repeats, after warm-up;
 *  - p2pt_prepare runs before anything is timed, so the NVRTC compile and
 *    the module load show up only in the cold mode, which measures them;
 *  - sources and destinations rotate through pools of at least 4x the L2
 *    cache, so a copy that fits in L2 never reads what an earlier one left.
 *
 * The benchmark links libp2pt.a and reaches the driver through support/'s
 * table `tcu`, loaded by p2pt's own loader, so like the library it needs no
 * libcuda at link time and runs (to say there is no GPU) on any machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "gemm.h"

/* The first entry is the default of --mode; the order is --help's and the
 * order the modes run in (fresh-process modes first: see their flag). */
const struct bench_mode bench_modes[] = {
    {"table", bench_run_table,
     "median time and GB/s per size, one table per\n"
     "path, every transport in the same row, tma/ce",
     0},
    {"sweep", bench_run_sweep,
     "TMA GB/s for every --chunk x --stages x\n"
     "--max-ctas at --sweep-bytes, on local and push\n"
     "(push with 2 GPUs), next to ce",
     BENCH_MODE_TMA_ONLY},
    {"latency", bench_run_latency,
     "sizes 4K..1M in powers of 2 on local, push,\n"
     "pull: b2b = per-copy time of back-to-back\n"
     "copies (100 between two events, / 100);\n"
     "gpu = the same with the batch queued behind\n"
     "a gate (cuStreamWaitValue32 on pinned host\n"
     "memory) opened once all 100 are enqueued:\n"
     "the GPU's rate alone;\n"
     "host = one copy at a time, host clock from\n"
     "just before p2pt_copy_async to the return of\n"
     "cuStreamSynchronize; dev = one copy between\n"
     "two events; enq = host time to enqueue one\n"
     "copy (b2b near enq: the host is the limit);\n"
     "host and dev are medians of 200 copies",
     0},
    {"batch", bench_run_batch,
     "many pieces per operation, local: shapes\n"
     "1024x14K, 4096x7K, 256x4K, 16384x2K,\n"
     "16384x32K, 64x1M and a mixed batch (--shapes)\n"
     "to scattered destinations; rows tma host and\n"
     "device descriptors, ce batch, raw\n"
     "cuMemcpyBatchAsync, loops of single copies,\n"
     "against one contiguous copy of the same bytes\n"
     "and ref_kernel, a plain warp-per-piece kernel",
     0},
    {"calibrate", bench_run_calibrate,
     "measure ce against tma on this machine and\n"
     "write auto's crossover table: copies 4K..1G\n"
     "(x2) on local, push and pull (two GPUs), back\n"
     "to back and queued behind a gate (graphs),\n"
     "and batches of 64 pieces 4K..4M; the same\n"
     "copies and batches with one side in pinned\n"
     "host memory (h2d, d2h); the table\n"
     "goes to --calibrate-out (default\n"
     "p2pt-auto-sm_XY.table); load it with\n"
     "P2P_TRANSPORT_AUTO_TABLE",
     BENCH_MODE_TMA_ONLY},
    {"overlap", bench_run_overlap,
     "KV-cache offload beside a bf16 cuBLAS GEMM\n"
     "loop (cuBLAS through dlopen): 128M in pieces\n"
     "of --pieces over 32 layers between a GPU pool\n"
     "and a pinned host pool, both directions,\n"
     "--layouts block and layer; per engine and\n"
     "--budgets: host enqueue per piece, GB/s alone\n"
     "and over the contiguous copy, the GEMM's\n"
     "slowdown beside it and beside the contiguous\n"
     "copy-engine copy (the noise floor), GB/s\n"
     "while the GEMM runs; rows to --overlap-csv",
     0},
    {"alltoall", bench_run_alltoall,
     "the first --gpus GPUs of this process each\n"
     "send --frac of their --rows rows of\n"
     "--row-bytes, picked at random, to every peer\n"
     "at once; a round timed from a common start\n"
     "to the last GPU's end, median of\n"
     "back-to-back rounds; ways: ce_packed (rows\n"
     "packed first, one cuMemcpyAsync per GPU\n"
     "pair: the yardstick), nccl, plain_kernel,\n"
     "p2pt's ce, tma_host and auto_host (host\n"
     "batches), tma and auto (device batches),\n"
     "auto and auto_host at --budgets; GB/s per\n"
     "GPU and over ce_packed and nccl; every\n"
     "received byte checked against ce_packed's;\n"
     "rows to --csv (its own columns: see Output)",
     0},
    {"cold", bench_run_cold,
     "the first TMA copy of a fresh process (this\n"
     "program re-run): p2pt_init, then\n"
     "p2pt_prepare + copy + sync, then a second\n"
     "copy; 3 runs with the cubin cache off\n"
     "(NVRTC compile + module load), then 3 with\n"
     "a private cache an earlier run filled\n"
     "(cubin read + module load)",
     BENCH_MODE_FRESH_PROCESS},
};
const int bench_n_modes = (int)P2PT_ARRAY_LEN(bench_modes);
_Static_assert(P2PT_ARRAY_LEN(bench_modes) <= BENCH_MAX_MODES, "raise BENCH_MAX_MODES");

static int mode_index(void (*run)(void))
{
    for (int m = 0; m < bench_n_modes; m++)
        if (bench_modes[m].run == run)
            return m;
    return -1;
}

/* Whether the mode whose entry is `run` was asked for; whether it is the
 * only one; unselect it (a mode that cannot run here, under --mode all). */
static bool mode_on(void (*run)(void))
{
    int m = mode_index(run);
    return m >= 0 && bench_opt.mode[m];
}

static bool mode_alone(void (*run)(void))
{
    int m = mode_index(run);
    for (int i = 0; i < bench_n_modes; i++)
        if (bench_opt.mode[i] != (i == m))
            return false;
    return m >= 0;
}

static void mode_off(void (*run)(void))
{
    int m = mode_index(run);
    if (m >= 0)
        bench_opt.mode[m] = false;
}

/* Whether any selected mode has (want true) or lacks (want false) `flag`. */
static bool any_mode(unsigned flag, bool want)
{
    for (int m = 0; m < bench_n_modes; m++)
        if (bench_opt.mode[m] && ((bench_modes[m].flags & flag) != 0) == want)
            return true;
    return false;
}

static void run_modes(unsigned flag, bool want)
{
    for (int m = 0; m < bench_n_modes; m++)
        if (bench_opt.mode[m] && ((bench_modes[m].flags & flag) != 0) == want)
            bench_modes[m].run();
}

static void print_header(int argc, char **argv, int count)
{
    const struct bench_gpu *gpus = bench_gpus;
    char date[64] = "?", host[256] = "?", l2[32], pool[32], chunk[32];
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv))
        strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", &tmv);
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "?");
    host[sizeof(host) - 1] = '\0';

    p2pt_properties pr;
    memset(&pr, 0, sizeof(pr));
    pr.size = sizeof(pr);
    if (p2pt_get_properties(bench_handles[T_TMA], &pr) != P2PT_SUCCESS)
        bench_fatal("p2pt_get_properties"); /* cannot fail on a live handle */

    printf("# p2pt-bench: p2pt %s (plugin ABI %u), %s, host %s\n", pr.version, pr.abi_version,
           date, host);
    printf("# command:");
    for (int i = 0; i < argc; i++)
        printf(" %s", argv[i]);
    printf("\n# CUDA driver %d.%d (%d); %d GPU%s visible\n", pr.driver_version / 1000,
           pr.driver_version % 1000 / 10, pr.driver_version, count, count == 1 ? "" : "s");
    for (int i = 0; i < (bench_have_peer ? 2 : 1); i++)
        printf("# GPU %d%s: %s, sm_%d%d, %d SMs, L2 %s\n", gpus[i].ordinal,
               i ? " (peer)" : "", gpus[i].name, gpus[i].cc_major, gpus[i].cc_minor,
               gpus[i].sms, bench_fmt_size(gpus[i].l2, l2, sizeof(l2)));
    if (bench_have_peer) {
        int rank = -1;
        if (tcu.cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
                                        gpus[0].dev, gpus[1].dev) != CUDA_SUCCESS)
            rank = -1;
        printf("# peer access GPU %d <-> GPU %d: enabled both ways (performance rank %d)\n",
               gpus[0].ordinal, gpus[1].ordinal, rank);
    }
    char ctas[16] = "auto";
    if (pr.max_ctas)
        snprintf(ctas, sizeof(ctas), "%d", pr.max_ctas);
    printf("# tma settings: chunk %s, %d stages, max CTAs %s, L2 hint %s, validation %s, "
           "PDL %s (P2P_TRANSPORT_*; the sweep sets its own)\n",
           bench_fmt_size(pr.chunk_bytes, chunk, sizeof(chunk)), pr.stages, ctas,
           p2pt__tma_settings(bench_handles[T_TMA])->l2_evict_first ? "evict_first" : "none",
           pr.validate ? "on" : "off", pr.pdl ? "on" : "off");
    printf("# bandwidth = payload bytes / time, each copy counted once (N bytes copied = N "
           "bytes, on any path; bidir adds both directions); GB/s = 1e9 bytes/s\n");
    printf("# time = CUDA events around a batch of copies / copies in it; median over batches "
           "after warm-up (-n %s, -r %s, -w %s); p2pt_prepare ran before any timing\n",
           bench_opt.iters ? "set" : "256M/size in 5..100",
           bench_opt.repeats ? "set" : "20..5 by size",
           bench_opt.warmup >= 0 ? "set" : "one batch");
    printf("# buffers rotate through pools of >= %d x L2 = %s per side, so copies that fit in "
           "L2 miss it; -c %d: %s\n",
           L2_FACTOR, bench_fmt_size(L2_FACTOR * gpus[0].l2, pool, sizeof(pool)),
           bench_opt.check,
           bench_opt.check ? "every byte checked against a copy-engine reference" : "no check");
    fflush(stdout);
}

/* What p2pt says it did: a "tma" figure is only a TMA figure if the copies
 * were kernel launches, not copy-engine fallbacks. */
static void print_counters(void)
{
    for (int t = 0; t < N_TRANSPORTS; t++) {
        p2pt_properties pr;
        memset(&pr, 0, sizeof(pr));
        pr.size = sizeof(pr);
        if (p2pt_get_properties(bench_handles[t], &pr) != P2PT_SUCCESS)
            continue;
        printf("# p2pt counters, %s handle: %llu copies, %llu TMA launches (%llu of the "
               "streaming kernel), %llu copy-engine copies, %llu fallbacks to the copy engine, "
               "%llu rejected",
               bench_transport_names[t], (unsigned long long)pr.copies,
               (unsigned long long)pr.tma_launches, (unsigned long long)pr.stream_launches,
               (unsigned long long)pr.ce_copies,
               (unsigned long long)pr.ce_fallbacks, (unsigned long long)pr.rejected);
        if (t == T_TMA)
            printf("; NVRTC compilations %llu, module loads %llu",
                   (unsigned long long)pr.compilations, (unsigned long long)pr.module_loads);
        if (t == T_AUTO)
            printf("; by engine: ce %llu bytes of copies and %llu batches, tma %llu bytes and "
                   "%llu batches; table %s",
                   (unsigned long long)pr.ce_bytes, (unsigned long long)pr.ce_batches,
                   (unsigned long long)pr.tma_bytes, (unsigned long long)pr.tma_batches,
                   pr.auto_table ? pr.auto_table : "?");
        printf("\n");
        if (t == T_TMA && pr.ce_fallbacks > 0)
            fprintf(stderr, "p2pt-bench: warning: %llu TMA copies went to the copy engine "
                    "(dst and src differ modulo 16): their figures are not TMA figures\n",
                    (unsigned long long)pr.ce_fallbacks);
    }
}

/* Which peer paths were asked for, as "push,pull,bidir". */
static const char *peer_paths(char *buf, size_t len)
{
    buf[0] = '\0';
    for (int p = P_PUSH; p < N_PATHS; p++)
        if (bench_opt.path[p])
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? "," : "",
                     bench_path_names[p]);
    return buf;
}

/* Decides the second GPU and the paths, enabling nothing yet. */
static void choose_paths(int count)
{
    struct bench_opts *o = &bench_opt;
    struct bench_gpu *gpus = bench_gpus;
    char list[64];
    bool asked = o->path[P_PUSH] || o->path[P_PULL] || o->path[P_BIDIR];
    if (o->peer_given && o->peer >= count)
        bench_usage_error("--peer %d: only %d GPU%s visible (0..%d)", o->peer, count,
                          count == 1 ? " is" : "s are", count - 1);
    if (!o->peer_given)
        o->peer = o->device == 0 ? 1 : 0;
    bench_have_peer = count >= 2;
    if (!o->path_given) {
        o->path[P_PUSH] = o->path[P_PULL] = o->path[P_BIDIR] = true;
        asked = true;
    }
    /* Fresh-process modes run without a path. */
    asked = asked && any_mode(BENCH_MODE_FRESH_PROCESS, false);
    if (bench_have_peer) {
        int ab = 0, ba = 0;
        if (!bench_gpu_info(&gpus[1], o->peer))
            bench_fatal("GPU %d", o->peer);
        if (tcu.cuDeviceCanAccessPeer(&ab, gpus[0].dev, gpus[1].dev) != CUDA_SUCCESS ||
            tcu.cuDeviceCanAccessPeer(&ba, gpus[1].dev, gpus[0].dev) != CUDA_SUCCESS)
            ab = ba = 0;
        if (!ab || !ba) {
            if (asked)
                fprintf(stderr,
                        "p2pt-bench: skipping %s: GPU %d and GPU %d cannot access each other "
                        "(cuDeviceCanAccessPeer)\n",
                        peer_paths(list, sizeof(list)), o->device, o->peer);
            bench_have_peer = false;
        }
    } else if (asked) {
        fprintf(stderr, "p2pt-bench: skipping %s: needs 2 GPUs, found %d\n",
                peer_paths(list, sizeof(list)), count);
    }
    if (!bench_have_peer) {
        o->path[P_PUSH] = o->path[P_PULL] = o->path[P_BIDIR] = false;
        o->path[P_LOCAL] = true; /* "continue with local" */
        gpus[1] = gpus[0];       /* never used as a peer; keeps plan_pool simple */
    }
}

/* Contexts, peer access and p2pt_prepare for the modes that run in this
 * process. Without TMA on this GPU, TMA is dropped from the run (and the
 * TMA-only modes with it) rather than failing it. */
static void open_in_process(void)
{
    struct bench_gpu *gpus = bench_gpus;
    bool need_tma = any_mode(BENCH_MODE_TMA_ONLY, true) ||
                    (bench_opt.transport[T_TMA] && any_mode(BENCH_MODE_FRESH_PROCESS, false));
    if (!bench_gpu_open(&gpus[0]))
        bench_fatal("GPU %d: context", gpus[0].ordinal);
    if (bench_have_peer) {
        if (!bench_gpu_open(&gpus[1]))
            bench_fatal("GPU %d: context", gpus[1].ordinal);
        if (!bench_enable_peer_access())
            bench_fatal("peer access between GPU %d and GPU %d", gpus[0].ordinal,
                        gpus[1].ordinal);
    } else {
        gpus[1] = gpus[0];
    }
    p2pt_status st;
    if (!bench_prepare_on(bench_handles[T_CE], bench_have_peer, &st))
        bench_fatal("ce");
    /* auto prepares what its table for this GPU may choose (ce alone where
     * TMA does not run). */
    if (!bench_prepare_on(bench_handles[T_AUTO], bench_have_peer, &st))
        bench_fatal("auto");
    if (!need_tma || bench_prepare_on(bench_handles[T_TMA], bench_have_peer, &st))
        return;
    if (st != P2PT_NOT_SUPPORTED)
        bench_fatal("tma");
    char dropped[128] = "";
    for (int m = 0; m < bench_n_modes; m++)
        if (bench_opt.mode[m] && (bench_modes[m].flags & BENCH_MODE_TMA_ONLY)) {
            snprintf(dropped + strlen(dropped), sizeof(dropped) - strlen(dropped),
                     " and the %s", bench_modes[m].name);
            bench_opt.mode[m] = false;
        }
    fprintf(stderr, "p2pt-bench: skipping tma%s: %s\n", dropped, bench_err);
    bench_opt.transport[T_TMA] = false;
    if (!bench_opt.transport[T_CE]) {
        bench_set_err("no transport left to measure");
        bench_fatal("tma");
    }
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--cold-child") == 0)
        return bench_cold_child(argc, argv);
    bench_parse_args(argc, argv);
    /* The overlap mode needs cuBLAS: without it, one line before anything
     * else (a machine without a GPU included). */
    for (int m = 0; m < bench_n_modes; m++) {
        struct bench_gemm g;
        if (bench_opt.mode[m] && bench_modes[m].run == bench_run_overlap &&
            !bench_gemm_load(&g, bench_opt.cublas)) {
            fprintf(stderr, "p2pt-bench: --mode overlap: %s\n", bench_err);
            return 2;
        }
    }

    /* p2pt_init checks the environment and auto's table before it looks for
     * the driver, so a bad P2P_TRANSPORT_* value or table is named on any
     * machine, GPU or not; only a missing driver goes on to the line below. */
    p2pt_handle *probe = NULL;
    p2pt_status init_st = p2pt_init(NULL, &probe);
    p2pt_finalize(probe);
    if (init_st != P2PT_SUCCESS && init_st != P2PT_NO_DRIVER) {
        fprintf(stderr, "p2pt-bench: %s\n", p2pt_last_error(NULL));
        return 2;
    }

    /* No GPU, no driver: one line, at once. */
    if (p2pt_test_driver_load(getenv("P2P_CUDA_LIBRARY")) != P2PT_SUCCESS) {
        fprintf(stderr, "p2pt-bench: no CUDA device: %s\n", p2pt_last_error(NULL));
        return 1;
    }
    int count = 0;
    CUresult cr = tcu.cuDeviceGetCount(&count);
    if (cr != CUDA_SUCCESS || count == 0) {
        fprintf(stderr, "p2pt-bench: no CUDA device: %s\n",
                cr != CUDA_SUCCESS ? p2pt__cuda_error_name(cr)
                                   : "the driver loaded but reports 0 devices");
        return 1;
    }
    if (bench_opt.device >= count)
        bench_usage_error("--device %d: only %d GPU%s visible (0..%d)", bench_opt.device, count,
                          count == 1 ? " is" : "s are", count - 1);
    if (!bench_gpu_info(&bench_gpus[0], bench_opt.device))
        bench_fatal("GPU %d", bench_opt.device);
    if (mode_on(bench_run_alltoall) &&
        !bench_alltoall_choose(count, mode_alone(bench_run_alltoall)))
        mode_off(bench_run_alltoall);
    choose_paths(count);

    /* Handles need no context; the header shows the TMA handle's settings. */
    for (int t = 0; t < N_TRANSPORTS; t++)
        if (!bench_handle_open(bench_transport_names[t], NULL, &bench_handles[t],
                               t == T_TMA ? &bench_default_cfg : NULL))
            bench_fatal("p2pt_init(\"%s\")", bench_transport_names[t]);
    const bool a2a = mode_on(bench_run_alltoall);
    bench_open_outputs(a2a, a2a && mode_alone(bench_run_alltoall));
    print_header(argc, argv, count);

    run_modes(BENCH_MODE_FRESH_PROCESS, true);
    if (any_mode(BENCH_MODE_FRESH_PROCESS, false)) {
        open_in_process();
        run_modes(BENCH_MODE_FRESH_PROCESS, false);
    }
    /* Asked again: a mode dropped for want of TMA ran nothing to count. */
    if (any_mode(BENCH_MODE_FRESH_PROCESS, false))
        print_counters();

    for (int t = 0; t < N_TRANSPORTS; t++)
        p2pt_finalize(bench_handles[t]);
    bench_check_free();
    if (bench_have_peer)
        bench_gpu_close(&bench_gpus[1]);
    bench_gpu_close(&bench_gpus[0]);
    fflush(stdout);
    if (bench_failures) {
        fprintf(stderr, "p2pt-bench: %d failure%s (see above)\n", bench_failures,
                bench_failures == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
