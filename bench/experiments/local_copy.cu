/* SPDX-License-Identifier: Apache-2.0 */
/*
 * local_copy: an experiment, not part of the library. Which SM-issued
 * pattern matches or beats cuMemcpyAsync for a same-device copy of 64 MiB,
 * 256 MiB and 1 GiB? (At those sizes the driver's device-to-device copy is
 * a kernel on the SMs rather than on a copy engine: the probe mode shows
 * it, the ncu mode counts its CTAs, and p2pt's streaming kernel copies its
 * shape; bench/RESULTS.md has the history.) The kernels and the list of
 * variants are in local_variants.cuh.
 *
 *   local_copy [bytes...]      the comparison, single launches (default 64 MiB
 *                              256 MiB 1 GiB)
 *   local_copy b2b [bytes...]  the same variants, one copy alone and 8 back to
 *                              back (as p2pt-bench times them)
 *   local_copy probe [bytes]   how many SMs the driver's copy needs (256 MiB)
 *   local_copy ncu [bytes]     one profiler range per variant (8, 7 and 6 copies
 *                              back to back), for ncu --replay-mode range
 *                              (bench/experiments/run.sh ncu)
 *
 * Comparison, per size: every variant (and the copy engine) is checked once
 * byte for byte: destination and a 4 KiB guard on each side poisoned with
 * 0xA5, copy, bytes counted on the GPU against the source (and the guards
 * against 0xA5). Then 2 warm-up copies each, then ROUNDS rounds: in each,
 * cuMemcpyAsync then every variant (order rotated per round), each one copy
 * between two CUDA events. Rounds interleave so that a drifting machine
 * moves the copy engine and the variants alike. Reported: median time,
 * GB/s (payload bytes / 1e9 / s), "vs CE" = CE median / variant median
 * (>= 1 is at least as fast), and "per-round" = median over rounds of
 * CE time / variant time in the same round.
 *
 * Probe: K CTAs that each fill a whole SM (all its shared memory and all
 * its registers) spin on stream A; once resident, a copy goes on stream B.
 * "done while held" at K = all SMs means the copy needs no SM (a copy
 * engine); below that, the smallest K at which it waits for the release
 * says how many SMs it needs. Each K also runs our vector copy as a
 * control: it must not finish while every SM is held. A copy not done
 * while held has the hold (~0.1 s) in its event time.
 *
 * Nothing waits forever: host waits poll with a watchdog, the bulk kernel's
 * mbarrier waits and the probe's spinners time out.
 */
#include <cuda_profiler_api.h>
#include <time.h>

#include "local_variants.cuh"

#define ROUNDS 21
#define GUARD 4096ull
#define WATCHDOG_S 20.0 /* one copy of 1 GiB takes < 1 ms */
#define MAXV 80
#define MAXSIZES 8
static_assert(sizeof g_vs / sizeof g_vs[0] <= MAXV, "raise MAXV");

static uint4 *g_src, *g_dst;
static char *g_dst_base; /* GUARD | dst | GUARD */
static uint4 *g_ref;     /* GUARD bytes of 0xA5 */
static unsigned long long *g_bad, *g_hbad; /* device counter, pinned host copy */
static unsigned *g_timeouts;
static cudaStream_t g_s;
static cudaEvent_t g_e0, g_e1;
static int g_sms, g_smem_sm, g_smem_optin;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Wait for e, polling; give up (exit, which ends the context and its
 * kernels) after WATCHDOG_S. */
static void wait_ev(cudaEvent_t e, const char *what)
{
    const double t0 = now_s();
    for (;;) {
        cudaError_t r = cudaEventQuery(e);
        if (r == cudaSuccess)
            return;
        if (r != cudaErrorNotReady) {
            fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(r));
            exit(1);
        }
        if (now_s() - t0 > WATCHDOG_S) {
            fprintf(stderr, "%s: not done after %.0f s, giving up\n", what, WATCHDOG_S);
            exit(3);
        }
    }
}

/* Let f take all the dynamic shared memory a CTA may have beside its
 * static shared memory; returns that many bytes. */
static int allow_max_smem(const void *f)
{
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, f));
    const int dyn = g_smem_optin - (int)fa.sharedSizeBytes;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
    return dyn;
}

static void sync_stream(cudaStream_t s, const char *what)
{
    CK(cudaEventRecord(g_e1, s));
    wait_ev(g_e1, what);
}

/* p2pt's kernel, with programmatic dependent launch where the variant asks
 * for it (as src/transport_tma.c launches it). */
static cudaError_t launch_p2pt(const struct variant *v, const void *fn, dim3 grid, u32 smem,
                               cudaStream_t s, void **args)
{
    cudaLaunchAttribute pdl;
    cudaLaunchConfig_t lc = {};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    lc.gridDim = grid;
    lc.blockDim = dim3(v->block);
    lc.dynamicSmemBytes = smem;
    lc.stream = s;
    lc.attrs = v->vflags & V_PDL ? &pdl : NULL;
    lc.numAttrs = v->vflags & V_PDL ? 1 : 0;
    return cudaLaunchKernelExC(&lc, fn, args);
}

/* Enqueue one copy of `bytes` from g_src to g_dst on s; -1 if it did not launch. */
static int launch(const struct variant *v, u64 bytes, cudaStream_t s)
{
    u64 n16 = bytes / 16;
    char *d = (char *)g_dst;
    const char *sr = (const char *)g_src;
    dim3 grid, block(v->block);
    void *vargs[] = {&g_dst, &g_src, &n16};
    cudaError_t e = cudaSuccess;
    switch (v->kind) {
    case K_CE:
        if (cuMemcpyAsync((CUdeviceptr)g_dst, (CUdeviceptr)g_src, bytes, (CUstream)s) ==
            CUDA_SUCCESS)
            return 0;
        fprintf(stderr, "cuMemcpyAsync failed\n");
        return -1;
    case K_VEC:
        grid = dim3((unsigned)((n16 + v->a - 1) / v->a));
        e = cudaLaunchKernel((const void *)v->fn, grid, block, vargs, 0, s);
        break;
    case K_PERSIST:
        e = cudaLaunchKernel((const void *)v->fn, dim3(g_sms * v->a), block, vargs, 0, s);
        break;
    case K_BULK: {
        u64 per = (u64)v->a * v->b;
        u32 chunk = v->a, n = v->b;
        void *args[] = {&d, &sr, &bytes, &chunk, &n, &g_timeouts};
        grid = dim3((unsigned)((bytes + per - 1) / per));
        e = cudaLaunchKernel((const void *)bulk_group, grid, block, args, chunk * n, s);
        break;
    }
    case K_P2PT: {
        /* src/transport_tma.c: CTAs per SM = smem/SM / (ring + 1 KiB
         * reserved), at most 2; never more CTAs than chunks. */
        u32 chunk = v->a, stages = v->b, smem = chunk * stages;
        u32 flags = v->vflags & V_EF ? P2PT_FLAG_EVICT_FIRST : 0u;
        u64 per_sm = (u64)g_smem_sm / (smem + 1024), zero = 0;
        per_sm = per_sm > 2 ? 2 : per_sm == 0 ? 1 : per_sm;
        u64 chunks = (bytes + chunk - 1) / chunk, ctas = per_sm * g_sms;
        void *args[] = {&d, &sr, &zero, &bytes, &zero, &chunks, &chunk, &stages, &flags};
        grid = dim3((unsigned)(chunks < ctas ? chunks : ctas));
        e = launch_p2pt(v, (const void *)p2pt_tma_copy, grid, smem, s, args);
        break;
    }
    case K_P2PT_VEC: {
        /* src/transport_tma.c: a CTA for every 4 KiB */
        u64 zero = 0;
        void *args[] = {&d, &sr, &zero, &bytes, &zero};
        grid = dim3((unsigned)((bytes + 16 * P2PT_STREAM_THREADS - 1) / (16 * P2PT_STREAM_THREADS)));
        e = launch_p2pt(v, (const void *)p2pt_stream_copy, grid, 0, s, args);
        break;
    }
    }
    if (e != cudaSuccess)
        fprintf(stderr, "%s: launch: %s\n", v->name, cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : -1;
}

/* Bytes wrong after one copy into a poisoned destination (guards included);
 * ~0 if it did not launch. */
static u64 check(const struct variant *v, u64 bytes)
{
    CK(cudaMemsetAsync(g_dst_base, 0xA5, bytes + 2 * GUARD, g_s));
    CK(cudaMemsetAsync(g_bad, 0, sizeof *g_bad, g_s));
    if (launch(v, bytes, g_s))
        return ~0ull;
    count_diff<<<g_sms * 4, 512, 0, g_s>>>(g_dst, g_src, bytes / 16, g_bad);
    count_diff<<<1, 256, 0, g_s>>>((const uint4 *)g_dst_base, g_ref, GUARD / 16, g_bad);
    count_diff<<<1, 256, 0, g_s>>>((const uint4 *)((char *)g_dst + bytes), g_ref, GUARD / 16,
                                   g_bad);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(g_hbad, g_bad, sizeof *g_bad, cudaMemcpyDeviceToHost, g_s));
    sync_stream(g_s, v->name);
    return *g_hbad;
}

/* n copies back to back between two events, in ms; -1 if one did not launch. */
static float time_n(const struct variant *v, u64 bytes, int n)
{
    float ms;
    CK(cudaEventRecord(g_e0, g_s));
    for (int i = 0; i < n; i++)
        if (launch(v, bytes, g_s))
            return -1;
    CK(cudaEventRecord(g_e1, g_s));
    wait_ev(g_e1, v->name);
    CK(cudaEventElapsedTime(&ms, g_e0, g_e1));
    return ms;
}

static float g_ratio[MAXSIZES][MAXV]; /* vs CE per size, for the summary */

static void compare(u64 bytes, int si)
{
    static float t[MAXV][ROUNDS], ce[ROUNDS], tmp[ROUNDS];
    u64 bad[MAXV];
    unsigned timeouts = 0;
    const double gb = bytes / 1e9;
    const u64 ce_bad = check(&g_ce, bytes);
    if (ce_bad == ~0ull)
        exit(1);
    for (int i = 0; i < g_nv; i++)
        bad[i] = check(&g_vs[i], bytes);
    for (int k = 0; k < 2; k++) {
        (void)launch(&g_ce, bytes, g_s);
        for (int i = 0; i < g_nv; i++)
            if (bad[i] != ~0ull)
                (void)launch(&g_vs[i], bytes, g_s);
    }
    sync_stream(g_s, "warm-up");
    for (int r = 0; r < ROUNDS; r++) {
        ce[r] = time_n(&g_ce, bytes, 1);
        /* Rotate the order: no variant always follows the same one. */
        for (int k = 0; k < g_nv; k++) {
            int i = (k + r) % g_nv;
            t[i][r] = bad[i] == ~0ull ? -1 : time_n(&g_vs[i], bytes, 1);
        }
    }
    CK(cudaMemcpy(&timeouts, g_timeouts, sizeof timeouts, cudaMemcpyDeviceToHost));
    memcpy(tmp, ce, sizeof ce);
    const float cem = median_f(tmp, ROUNDS);
    printf("\n### %llu bytes (%.0f MiB), %d rounds\n\n", (unsigned long long)bytes,
           bytes / 1048576.0, ROUNDS);
    printf("| variant | us | GB/s | vs CE | per-round | bad bytes |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| %s | %.1f | %.1f | 1.000 | 1.000 | %llu%s |\n", g_ce.name, cem * 1e3,
           gb / (cem * 1e-3), (unsigned long long)ce_bad, ce_bad ? " BAD" : "");
    int best = -1;
    for (int i = 0; i < g_nv; i++) {
        g_ratio[si][i] = 0;
        if (bad[i] == ~0ull) {
            printf("| %s | - | - | - | - | did not launch |\n", g_vs[i].name);
            continue;
        }
        for (int r = 0; r < ROUNDS; r++)
            tmp[r] = ce[r] / t[i][r];
        const float pr = median_f(tmp, ROUNDS);
        memcpy(tmp, t[i], sizeof tmp);
        const float m = median_f(tmp, ROUNDS);
        g_ratio[si][i] = bad[i] ? 0 : cem / m;
        printf("| %s | %.1f | %.1f | %.3f | %.3f | %llu%s |\n", g_vs[i].name, m * 1e3,
               gb / (m * 1e-3), cem / m, pr, (unsigned long long)bad[i], bad[i] ? " BAD" : "");
        if (!bad[i] && (best < 0 || g_ratio[si][i] > g_ratio[si][best]))
            best = i;
    }
    if (best >= 0)
        printf("\nbest at %llu bytes: %s, %.3f of CE\n", (unsigned long long)bytes,
               g_vs[best].name, g_ratio[si][best]);
    if (timeouts)
        printf("WARNING: %u bulk mbarrier waits timed out\n", timeouts);
    CK(cudaMemset(g_timeouts, 0, sizeof *g_timeouts));
}

/* ---- back to back: N copies between two events, as p2pt-bench times them ---- */

#define B2B_N 8
#define B2B_ROUNDS 11

static float g_b2b[MAXSIZES][MAXV], g_steady[MAXSIZES][MAXV]; /* vs CE, for the summary */

/*
 * Per variant and round: one copy alone (t1) and B2B_N back to back (tN,
 * no event between them, so programmatic dependent launch can overlap one
 * grid's start with the previous one's end). Per copy = tN / N; steady =
 * (tN - t1) / (N - 1), a copy's cost once the stream is busy, without the
 * first launch. Ratios are CE over the variant (>= 1: at least as fast).
 */
static void back_to_back(u64 bytes, int si)
{
    static float t1[MAXV + 1][B2B_ROUNDS], tn[MAXV + 1][B2B_ROUNDS], tmp[B2B_ROUNDS];
    static float st[MAXV + 1][B2B_ROUNDS];
    const struct variant *vs[MAXV + 1];
    u64 bad[MAXV + 1];
    const int nv = g_nv + 1; /* 0 is the copy engine */
    vs[0] = &g_ce;
    for (int i = 0; i < g_nv; i++)
        vs[i + 1] = &g_vs[i];
    for (int i = 0; i < nv; i++)
        bad[i] = check(vs[i], bytes);
    if (bad[0] == ~0ull)
        exit(1);
    for (int i = 0; i < nv; i++)
        if (bad[i] != ~0ull)
            (void)time_n(vs[i], bytes, 2);
    for (int r = 0; r < B2B_ROUNDS; r++)
        for (int k = 0; k < nv; k++) {
            int i = (k + r) % nv;
            if (bad[i] == ~0ull)
                continue;
            t1[i][r] = time_n(vs[i], bytes, 1);
            tn[i][r] = time_n(vs[i], bytes, B2B_N);
            st[i][r] = (tn[i][r] - t1[i][r]) / (B2B_N - 1);
        }
    float m1[MAXV + 1], mn[MAXV + 1], ms[MAXV + 1];
    for (int i = 0; i < nv; i++) {
        if (bad[i] == ~0ull)
            continue;
        memcpy(tmp, t1[i], sizeof tmp);
        m1[i] = median_f(tmp, B2B_ROUNDS);
        memcpy(tmp, tn[i], sizeof tmp);
        mn[i] = median_f(tmp, B2B_ROUNDS) / B2B_N;
        memcpy(tmp, st[i], sizeof tmp);
        ms[i] = median_f(tmp, B2B_ROUNDS);
    }
    const double gb = bytes / 1e9;
    printf("\n### back to back, %llu bytes (%.0f MiB), %d rounds of 1 and %d copies\n\n",
           (unsigned long long)bytes, bytes / 1048576.0, B2B_ROUNDS, B2B_N);
    printf("| variant | alone us | per copy us | steady us | steady GB/s | vs CE per copy | "
           "vs CE steady | per-round per copy | bad bytes |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    int best = -1;
    for (int i = 0; i < nv; i++) {
        const char *name = vs[i]->name;
        if (bad[i] == ~0ull) {
            printf("| %s | - | - | - | - | - | - | - | did not launch |\n", name);
            continue;
        }
        for (int r = 0; r < B2B_ROUNDS; r++)
            tmp[r] = tn[0][r] / tn[i][r];
        const float pr = median_f(tmp, B2B_ROUNDS);
        printf("| %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %llu%s |\n", name,
               m1[i] * 1e3, mn[i] * 1e3, ms[i] * 1e3, gb / (ms[i] * 1e-3), mn[0] / mn[i],
               ms[0] / ms[i], pr, (unsigned long long)bad[i], bad[i] ? " BAD" : "");
        if (i > 0) {
            g_b2b[si][i - 1] = bad[i] ? 0 : mn[0] / mn[i];
            g_steady[si][i - 1] = bad[i] ? 0 : ms[0] / ms[i];
            if (!bad[i] && (best < 0 || g_b2b[si][i - 1] > g_b2b[si][best]))
                best = i - 1;
        }
    }
    if (best >= 0)
        printf("\nbest back to back at %llu bytes: %s, %.3f of CE per copy\n",
               (unsigned long long)bytes, g_vs[best].name, g_b2b[si][best]);
}

/* ---- probe: does the driver's copy need free SMs, and how many? ---- */

struct hold_flags {
    volatile int release;
    int pad[31];
    volatile int arrived[1024];
    volatile int timed_out[1024];
};

#define HOLD_LIMIT_NS 250000000ull /* spinners let go by themselves after 250 ms */
#define RESIDENT_WAIT_S 0.05
#define HELD_POLL_S 0.10

static int sum_flags(const volatile int *f, int n)
{
    int s = 0;
    for (int i = 0; i < n; i++)
        s += f[i];
    return s;
}

/*
 * K spinning CTAs, one per SM, on stream sa; once they are resident, the
 * copy v on g_s; did it complete while they still held their SMs? Then
 * release, and time the copy from its events (queueing included).
 */
static void probe_one(int K, const struct variant *v, u64 bytes, int smem, struct hold_flags *h,
                      struct hold_flags *hd, u32 *sink, cudaStream_t sa, cudaEvent_t eh)
{
    memset((void *)h, 0, sizeof *h);
    __sync_synchronize();
    if (K > 0) {
        const volatile int *rel = &hd->release;
        volatile int *arr = hd->arrived, *tmo = hd->timed_out;
        u64 lim = HOLD_LIMIT_NS;
        void *args[] = {&rel, &arr, &tmo, &lim, &sink};
        CK(cudaLaunchKernel((const void *)hold_sm, dim3(K), dim3(1024), args, (size_t)smem,
                            sa));
    }
    CK(cudaEventRecord(eh, sa));
    const int want = K < g_sms ? K : g_sms;
    double t0 = now_s();
    while (sum_flags(h->arrived, K) < want && now_s() - t0 < RESIDENT_WAIT_S)
        ;
    const int resident = sum_flags(h->arrived, K);
    CK(cudaEventRecord(g_e0, g_s));
    if (launch(v, bytes, g_s))
        exit(1);
    CK(cudaEventRecord(g_e1, g_s));
    t0 = now_s();
    double seen = -1; /* host time from enqueue to completion while held */
    while (now_s() - t0 < HELD_POLL_S) {
        cudaError_t r = cudaEventQuery(g_e1);
        if (r == cudaSuccess) {
            seen = now_s() - t0;
            break;
        }
        if (r != cudaErrorNotReady)
            CK(r);
    }
    h->release = 1;
    __sync_synchronize();
    wait_ev(g_e1, "probe copy");
    wait_ev(eh, "probe spinners");
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, g_e0, g_e1));
    const int early = sum_flags(h->timed_out, K);
    char held[32] = "no";
    if (seen >= 0)
        snprintf(held, sizeof held, "yes (%.2f ms)", seen * 1e3);
    printf("| %d | %d | %s | %s | %.3f | %.1f | %d%s |\n", K, resident, v->name, held, ms,
           bytes / 1e9 / (ms * 1e-3), early, early ? " (hold ended early)" : "");
}

static void probe(u64 bytes)
{
    struct hold_flags *h, *hd;
    u32 *sink;
    cudaStream_t sa;
    cudaEvent_t eh;
    cudaFuncAttributes fa;
    cudaDeviceProp p;
    int occ = 0;
    CK(cudaGetDeviceProperties(&p, 0));
    CK(cudaHostAlloc((void **)&h, sizeof *h, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&hd, h, 0));
    CK(cudaMalloc(&sink, 32 * sizeof *sink));
    CK(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking));
    CK(cudaEventCreate(&eh));
    const int smem = allow_max_smem((const void *)hold_sm);
    CK(cudaFuncGetAttributes(&fa, hold_sm));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, hold_sm, 1024, smem));
    /* A CTA beside a spinner would need registers or shared memory it left. */
    printf("spinner CTA: 1024 threads x %d registers (SM has %d: %s), %d + %zu reserved bytes "
           "of shared memory (SM has %d: %s), %d per SM\n",
           fa.numRegs, p.regsPerMultiprocessor,
           fa.numRegs * 1024 >= p.regsPerMultiprocessor ? "all held" : "NOT all held",
           smem, p.reservedSharedMemPerBlock, g_smem_sm,
           smem + (int)p.reservedSharedMemPerBlock >= g_smem_sm ? "all held" : "NOT all held",
           occ);
    /* K below the SM count, then all SMs, then twice that (queued CTAs too) */
    int ks[] = {0, 16, 33, 66, 99, 120, 128, g_sms, 2 * g_sms};
    printf("\ncopy of %llu bytes while K SMs spin (released after %.0f ms at most)\n\n"
           "| K | resident | copy | done while held | event ms | GB/s | spinners timed out |\n"
           "| ---: | ---: | --- | --- | ---: | ---: | ---: |\n",
           (unsigned long long)bytes, HELD_POLL_S * 1e3);
    for (int i = 0; i < (int)(sizeof ks / sizeof ks[0]); i++) {
        if ((i < 7 && ks[i] >= g_sms) || ks[i] > 1024)
            continue;
        probe_one(ks[i], &g_ce, bytes, smem, h, hd, sink, sa, eh);
        /* A kernel of ours must not finish while every SM is held: that
         * shows the spinners really hold their SMs. */
        probe_one(ks[i], variant_named(BEST_GUESS), bytes, smem, h, hd, sink, sa, eh);
    }
    CK(cudaFreeHost(h));
}

/* ---- ncu: one profiler range per variant, copies back to back ---- */
/* Range i holds B2B_N - i copies, so that its DRAM bytes name it even when
 * ncu drops a range and numbers the others from 0. Every range opens with
 * an empty kernel: ncu drops a range holding only cuMemcpyAsync
 * ("RecordStatusEmpty"), while the counters of a range count whatever the
 * GPU does in it, the driver's copy kernel included. */
static void ncu_ranges(u64 bytes)
{
    const struct variant *v[] = {&g_ce, variant_named(P2PT_SHIPPED), variant_named(BEST_GUESS)};
    for (int i = 0; i < 3; i++) /* checks double as warm-ups, outside any range */
        printf("range %d: %d x %s (bad bytes %llu)\n", i, B2B_N - i, v[i]->name,
               (unsigned long long)check(v[i], bytes));
    for (int i = 0; i < 3; i++) {
        CK(cudaProfilerStart());
        range_mark<<<1, 32, 0, g_s>>>();
        for (int k = 0; k < B2B_N - i; k++)
            if (launch(v[i], bytes, g_s))
                exit(1);
        CK(cudaProfilerStop());
        sync_stream(g_s, v[i]->name);
    }
}

/* One row per variant, a column per size: a[size][variant] (and / b[...]). */
static void summary(const char *what, const u64 *sizes, int ns, float (*a)[MAXV],
                    float (*b)[MAXV])
{
    printf("\n### summary: %s (ratio of medians; 0 = bad or did not launch)\n\n| variant |",
           what);
    for (int i = 0; i < ns; i++)
        printf(" %llu MiB |", (unsigned long long)(sizes[i] >> 20));
    printf("\n| --- |");
    for (int i = 0; i < ns; i++)
        printf(" ---: |");
    for (int v = 0; v < g_nv; v++) {
        printf("\n| %s |", g_vs[v].name);
        for (int i = 0; i < ns; i++)
            if (b)
                printf(" %.3f / %.3f |", a[i][v], b[i][v]);
            else
                printf(" %.3f |", a[i][v]);
    }
    printf("\n");
}

static u64 parse_bytes(const char *s)
{
    char *end;
    u64 b = strtoull(s, &end, 0);
    if (*end || b == 0 || b % 16) {
        fprintf(stderr, "local_copy: '%s': bytes must be a positive multiple of 16\n", s);
        exit(2);
    }
    return b;
}

int main(int argc, char **argv)
{
    const int mode = argc > 1 && !strcmp(argv[1], "probe") ? 1
                     : argc > 1 && !strcmp(argv[1], "ncu") ? 2
                     : argc > 1 && !strcmp(argv[1], "b2b") ? 3
                                                           : 0;
    u64 sizes[MAXSIZES] = {64ull << 20, 256ull << 20, 1ull << 30};
    int ns = mode == 1 || mode == 2 ? 1 : 3;
    if (mode == 1 || mode == 2)
        sizes[0] = argc > 2 ? parse_bytes(argv[2]) : 256ull << 20;
    else if (argc > 1 + (mode == 3))
        for (ns = 0; ns < argc - 1 - (mode == 3) && ns < MAXSIZES; ns++)
            sizes[ns] = parse_bytes(argv[ns + 1 + (mode == 3)]);
    u64 max = 0;
    for (int i = 0; i < ns; i++)
        max = sizes[i] > max ? sizes[i] : max;

    cudaDeviceProp prop;
    int drv = 0;
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaDriverGetVersion(&drv));
    g_sms = prop.multiProcessorCount;
    g_smem_sm = (int)prop.sharedMemPerMultiprocessor;
    g_smem_optin = (int)prop.sharedMemPerBlockOptin;
    printf("device %s, %d SMs, L2 %d MiB, smem/SM %d, optin %d, driver %d\n", prop.name, g_sms,
           prop.l2CacheSize >> 20, g_smem_sm, g_smem_optin, drv);
    (void)allow_max_smem((const void *)bulk_group);
    (void)allow_max_smem((const void *)p2pt_tma_copy);
    CK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g_e0));
    CK(cudaEventCreate(&g_e1));
    CK(cudaMalloc(&g_src, max));
    CK(cudaMalloc(&g_dst_base, max + 2 * GUARD));
    g_dst = (uint4 *)(g_dst_base + GUARD);
    CK(cudaMalloc(&g_ref, GUARD));
    CK(cudaMalloc(&g_bad, sizeof *g_bad));
    CK(cudaMalloc(&g_timeouts, sizeof *g_timeouts));
    CK(cudaMallocHost(&g_hbad, sizeof *g_hbad));
    CK(cudaMemset(g_ref, 0xA5, GUARD));
    CK(cudaMemset(g_timeouts, 0, sizeof *g_timeouts));
    fill_random<<<g_sms * 4, 512, 0, g_s>>>(g_src, max / 16, 12345);
    CK(cudaGetLastError());
    sync_stream(g_s, "fill");

    if (mode == 1) {
        probe(sizes[0]);
        return 0;
    }
    if (mode == 2) {
        ncu_ranges(sizes[0]);
        return 0;
    }
    if (mode == 3) {
        for (int i = 0; i < ns; i++)
            back_to_back(sizes[i], i);
        summary("back to back, vs CE per copy / steady", sizes, ns, g_b2b, g_steady);
        return 0;
    }
    for (int i = 0; i < ns; i++)
        compare(sizes[i], i);
    summary("vs CE", sizes, ns, g_ratio, NULL);
    return 0;
}
