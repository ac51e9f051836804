/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where a device batch's time goes, CTA by CTA, on p2pt-bench's own
 * layouts (bench/batch_layout.h: the same pieces, gaps and pools, the same
 * layouts rotated) and launched as the library launches it (its grid,
 * programmatic dependent launch, back to back).
 *
 * The batch kernel is built with BATCH_TRACE (kernels/batch_copy.cu): per
 * CTA, the global timer at entry, after the wait for the previous grid,
 * when its first block of descriptors is read and scanned, and when its
 * last tile is done, and the SM it ran on. The last of n back-to-back
 * batches is the one left in the buffer. Per shape it prints:
 *
 *   trace_time  GPU µs per batch (CUDA events around n back-to-back
 *               batches, median of 9) of p2pt's kernel, untraced, of the
 *               plain warp-per-piece kernel of bench/ref_kernel.c (its
 *               grid), and of one cudaMemcpyAsync of the same bytes
 *   trace_ctas  percentiles over the copy CTAs, µs from the moment the
 *               previous grid was done (the earliest wait's end): when
 *               the wait ended, how long planning took, when the CTA ended;
 *               the status CTA's end and that of the copy CTAs on its SM;
 *               the batch's span
 *   trace_sms   per SM (the status CTA's left out): how far apart its two
 *               copy CTAs end, percentiles of its last CTA's end, and the
 *               correlation of those ends between two traces (do the same
 *               SMs finish last every time?)
 *   trace_split the copy CTAs' mean end by how many CTAs share their
 *               block (a CTA of a block split 4 ways has more tiles than
 *               one split 5 ways)
 *   trace_units GPU µs of unit_copy (unit_copy.cuh): a CTA per 8 KiB
 *               unit mapped by tables built before the launch, the
 *               ceiling of a pre-pass design (shapes whose pieces are
 *               whole vectors)
 *
 *   batch_trace [--shapes LIST]   (default 16384x2K,16384x32K,1024x14K,64x1M)
 */
#define BATCH_TRACE 1
#include "../../kernels/batch_copy.cu"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../batch_layout.h"
#include "check.cuh"
#include "unit_copy.cuh"

/* bench/ref_kernel.c's plain kernel, the same source. */
struct ref_desc {
    char *dst;
    const char *src;
    unsigned long long bytes;
};
__global__ void ref_copy(const ref_desc *d, const unsigned *count)
{
    unsigned lane = threadIdx.x & 31, n = *count;
    unsigned warps = gridDim.x * (blockDim.x / 32);
    for (unsigned p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < n; p += warps) {
        char *dst = d[p].dst;
        const char *src = d[p].src;
        unsigned long long b = d[p].bytes, i = 0;
        unsigned long long a = (unsigned long long)dst | (unsigned long long)src;
        if ((a & 15) == 0)
            for (i = lane; i < b / 16; i += 32)
                ((int4 *)dst)[i] = ((const int4 *)src)[i];
        else if ((a & 3) == 0)
            for (i = lane; i < b / 4; i += 32)
                ((int *)dst)[i] = ((const int *)src)[i];
        unsigned long long done = (a & 15) == 0 ? b / 16 * 16 : (a & 3) == 0 ? b / 4 * 4 : 0;
        for (i = done + lane; i < b; i += 32)
            dst[i] = src[i];
    }
}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double pct(std::vector<double> v, double p)
{
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(p / 100.0 * (double)(v.size() - 1) + 0.5))];
}

struct gpu {
    int sms = 0;
    size_t pool = 0;
    char *src = nullptr, *dst = nullptr;
    unsigned long long *trace = nullptr;
    cudaStream_t s;
    cudaEvent_t e0, e1;
};

/* n back-to-back launches of `f(k)` (layout k), GPU µs per launch, median of 9. */
template <typename F> static float timed(gpu &g, int n, int sets, int &op, F f)
{
    std::vector<float> t;
    for (int w = 0; w < n; w++)
        f(op++ % sets);
    for (int r = 0; r < 9; r++) {
        float ms = 0;
        CK(cudaEventRecord(g.e0, g.s));
        for (int k = 0; k < n; k++)
            f(op++ % sets);
        CK(cudaEventRecord(g.e1, g.s));
        CK(cudaEventSynchronize(g.e1));
        CK(cudaEventElapsedTime(&ms, g.e0, g.e1));
        t.push_back(ms * 1000 / n);
    }
    CK(cudaGetLastError());
    return median(t);
}

/* Per SM, from two traces: how far apart its copy CTAs end, and whether
 * the SMs whose last CTA ends late in one trace do so in the other (the
 * correlation of the SMs' last ends, µs from each trace's start). */
static void sm_report(const char *name, const std::vector<unsigned long long> &a,
                      const std::vector<unsigned long long> &b, unsigned G)
{
    auto last_per_sm = [&](const std::vector<unsigned long long> &t,
                           std::map<unsigned, std::vector<double>> &ends) {
        unsigned long long t0 = ~0ull;
        for (unsigned c = 1; c < G; c++)
            t0 = t[5 * c + 1] ? std::min(t0, t[5 * c + 1]) : t0;
        for (unsigned c = 1; c < G; c++)
            if (t[5 * c + 3] != 0 && t[5 * c + 4] != t[4])
                ends[(unsigned)t[5 * c + 4]].push_back((t[5 * c + 3] - t0) / 1e3);
    };
    std::map<unsigned, std::vector<double>> ea, eb;
    last_per_sm(a, ea);
    last_per_sm(b, eb);
    std::vector<double> within, la, lb;
    for (auto &kv : ea) {
        const std::vector<double> &v = kv.second;
        if (v.size() == 2)
            within.push_back(std::fabs(v[0] - v[1]));
        auto o = eb.find(kv.first);
        if (o == eb.end())
            continue;
        la.push_back(*std::max_element(v.begin(), v.end()));
        lb.push_back(*std::max_element(o->second.begin(), o->second.end()));
    }
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < la.size(); i++)
        ma += la[i] / la.size(), mb += lb[i] / lb.size();
    for (size_t i = 0; i < la.size(); i++) {
        sab += (la[i] - ma) * (lb[i] - mb);
        saa += (la[i] - ma) * (la[i] - ma);
        sbb += (lb[i] - mb) * (lb[i] - mb);
    }
    if (within.empty() || la.size() < 2)
        return;
    printf("trace_sms shape=%s sms=%zu within_sm_end_gap_us p50=%.2f p90=%.2f "
           "sm_last_end_us p10=%.2f p50=%.2f p90=%.2f corr_between_traces=%.2f\n",
           name, la.size(), pct(within, 50), pct(within, 90), pct(la, 10), pct(la, 50),
           pct(la, 90), sab / std::sqrt(saa * sbb + 1e-30));
}

static void one_shape(gpu &g, const batch_shape &sh)
{
    const size_t count = sh.count, total = batch_total(&sh), span = batch_span(&sh);
    const int sets = (int)std::min((size_t)BATCH_MAX_SETS, g.pool / span);
    std::vector<size_t> soff(count), doff(count), order(count);
    std::vector<p2pt_batch_desc> h((size_t)sets * count);
    for (int s = 0; s < sets; s++) {
        batch_place(&sh, 0, s, soff.data(), doff.data(), order.data());
        for (size_t i = 0; i < count; i++)
            h[(size_t)s * count + i] = {(unsigned long long)(g.dst + doff[i]),
                                        (unsigned long long)(g.src + soff[i]),
                                        (unsigned long long)batch_piece_size(&sh, i)};
    }
    p2pt_batch_desc *d = nullptr;
    unsigned *cnt = nullptr;
    void *ws = nullptr;
    CK(cudaMalloc(&d, h.size() * sizeof(h[0])));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(h[0]), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&cnt, 4));
    const unsigned n32 = (unsigned)count;
    CK(cudaMemcpy(cnt, &n32, 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&ws, sizeof(p2pt_batch_ws_head)));

    p2pt_batch_dev_params p;
    memset(&p, 0, sizeof(p));
    p.count = (unsigned long long)cnt;
    p.workspace = (unsigned long long)ws;
    p.max_count = n32;
    p.n_windows = 2;
    p.window[0] = {(unsigned long long)g.src, (unsigned long long)(g.src + g.pool)};
    p.window[1] = {(unsigned long long)g.dst, (unsigned long long)(g.dst + g.pool)};
    const unsigned G = (unsigned)g.sms * P2PT_BATCH_CTAS_PER_SM;
    cudaLaunchAttribute pdl[1];
    pdl[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(G);
    cfg.blockDim = dim3(P2PT_BATCH_THREADS);
    cfg.stream = g.s;
    cfg.attrs = pdl;
    cfg.numAttrs = 1;
    auto batch = [&](int k) {
        p.descs = (unsigned long long)(d + (size_t)k * count);
        CK(cudaLaunchKernelEx(&cfg, p2pt_batch_copy_dev, p));
    };
    const unsigned ref_ctas =
        (unsigned)std::min<size_t>((count + 7) / 8, (size_t)g.sms * 64 / 8);
    auto ref = [&](int k) {
        ref_copy<<<ref_ctas, 256, 0, g.s>>>((const ref_desc *)(d + (size_t)k * count), cnt);
    };
    auto contig = [&](int k) {
        CK(cudaMemcpyAsync(g.dst + (size_t)k * span, g.src + (size_t)k * span, total,
                           cudaMemcpyDeviceToDevice, g.s));
    };
    /* The unit tables of every layout (unit_copy.cuh). */
    unit_tables ut;
    const bool whole = unit_tables_make(ut, h.data(), count, sets, total);
    auto unitf = [&](int k) { unit_launch(ut, d, count, k, g.s); };
    /* Layout 0 once into a poisoned span, 16 of its pieces compared with
     * their sources: the units first, then p2pt's kernel. */
    auto layout0_ok = [&](auto run) {
        CK(cudaMemset(g.dst, 0xA5, span));
        CK(cudaDeviceSynchronize()); /* the stream does not wait for stream 0 */
        run(0);
        CK(cudaStreamSynchronize(g.s));
        CK(cudaGetLastError());
        bool same = true;
        for (size_t i = 0; i < count && same; i += count / 16 + 1) {
            const size_t b = h[i].bytes;
            std::vector<unsigned char> x(b), y(b);
            CK(cudaMemcpy(x.data(), (void *)h[i].dst, b, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(y.data(), (void *)h[i].src, b, cudaMemcpyDeviceToHost));
            same = memcmp(x.data(), y.data(), b) == 0;
        }
        return same;
    };
    const bool unit_ok = whole && layout0_ok(unitf);
    const bool ok = layout0_ok(batch);
    size_t want = (256ull << 20) / total;
    const int n = want < 2 ? 2 : want > 20 ? 20 : (int)want;
    int op = 0;
    unsigned long long *none = nullptr;
    CK(cudaMemcpyToSymbol(p2pt_batch_trace, &none, sizeof(none)));
    const float t_batch = timed(g, n, sets, op, batch);
    const float t_ref = timed(g, n, sets, op, ref);
    const float t_contig = timed(g, n, sets, op, contig);
    const float t_batch2 = timed(g, n, sets, op, batch);
    const float t_units = whole ? timed(g, n, sets, op, unitf) : 0;

    /* A trace: n back to back, the last one's records stay. Two of them,
     * to see whether the same SMs are the slow ones. */
    auto traced = [&]() {
        CK(cudaMemset(g.trace, 0, (size_t)G * 5 * 8));
        CK(cudaMemcpyToSymbol(p2pt_batch_trace, &g.trace, sizeof(g.trace)));
        CK(cudaDeviceSynchronize());
        for (int k = 0; k < n; k++)
            batch(op++ % sets);
        CK(cudaStreamSynchronize(g.s));
        CK(cudaMemcpyToSymbol(p2pt_batch_trace, &none, sizeof(none)));
        std::vector<unsigned long long> t((size_t)G * 5);
        CK(cudaMemcpy(t.data(), g.trace, t.size() * 8, cudaMemcpyDeviceToHost));
        return t;
    };
    const std::vector<unsigned long long> tr = traced(), tr2 = traced();

    printf("trace_time shape=%s sets=%d n=%d batch_us=%.2f,%.2f ref_us=%.2f contig_us=%.2f "
           "batch/contig=%.3f batch/ref=%.3f check=%s\n",
           sh.name, sets, n, t_batch, t_batch2, t_ref, t_contig, t_contig / t_batch,
           t_batch / t_ref, ok ? "ok" : "FAILED");
    if (whole)
        printf("trace_units shape=%s units=%zu units_us=%.2f units/contig=%.3f "
               "units/batch_time=%.3f check=%s\n",
               sh.name, ut.units, t_units, t_contig / t_units, t_units / t_batch,
               unit_ok ? "ok" : "FAILED");
    unsigned long long t0 = ~0ull, tend = 0;
    for (unsigned c = 1; c < G; c++)
        t0 = std::min(t0, tr[5 * c + 1]);
    std::vector<double> wait, plan, end;
    std::map<unsigned, std::vector<double>> by_split;
    const unsigned blocks = (unsigned)((count + P2PT_BATCH_BLOCK - 1) / P2PT_BATCH_BLOCK);
    std::vector<unsigned long long> all;
    for (unsigned c = 1; c < G; c++) {
        const unsigned long long *r = &tr[5 * c];
        if (r[1] == 0 || r[3] == 0)
            continue;
        wait.push_back((r[1] - t0) / 1e3);
        if (r[2] != 0)
            plan.push_back((r[2] - r[1]) / 1e3);
        end.push_back((r[3] - t0) / 1e3);
        tend = std::max(tend, r[3]);
        if (blocks <= G - 1) {
            const unsigned b = (c - 1) % blocks;
            by_split[(G - 2 - b) / blocks + 1].push_back((r[3] - t0) / 1e3);
        }
        all.push_back(r[1]);
        all.push_back(r[3]);
    }
    std::sort(all.begin(), all.end());
    unsigned long long tick = ~0ull;
    for (size_t i = 1; i < all.size(); i++)
        if (all[i] > all[i - 1])
            tick = std::min(tick, all[i] - all[i - 1]);
    if (end.empty()) {
        printf("trace_ctas shape=%s no records\n", sh.name);
        return;
    }
    const double status_end = tr[3] ? (tr[3] - (double)t0) / 1e3 : -1;
    /* The copy CTAs on the status CTA's SM: they have it to themselves
     * once the status CTA is done. */
    std::string mates;
    for (unsigned c = 1; c < G; c++)
        if (tr[5 * c + 4] == tr[4] && tr[5 * c + 3] != 0) {
            char one[32];
            snprintf(one, sizeof(one), "%s%.2f", mates.empty() ? "" : ",",
                     (tr[5 * c + 3] - (double)t0) / 1e3);
            mates += one;
        }
    printf("trace_ctas shape=%s ctas=%zu timer_tick_ns=%llu span_us=%.2f status_end_us=%.2f "
           "status_sm_mates_end_us=%s\n",
           sh.name, end.size(), tick, (tend - t0) / 1e3, status_end,
           mates.empty() ? "none" : mates.c_str());
    const double ps[] = {0, 10, 50, 90, 100};
    const char *names[] = {"wait_end", "plan", "end"};
    std::vector<double> *vs[] = {&wait, &plan, &end};
    for (int k = 0; k < 3; k++) {
        if (vs[k]->empty())
            continue;
        printf("trace_ctas shape=%s %s_us", sh.name, names[k]);
        for (double q : ps)
            printf(" p%g=%.2f", q, pct(*vs[k], q));
        printf("\n");
    }
    sm_report(sh.name, tr, tr2, G);
    for (auto &kv : by_split) {
        double m = 0;
        for (double e : kv.second)
            m += e;
        printf("trace_split shape=%s ctas_per_block=%u ctas=%zu mean_end_us=%.2f max_end_us=%.2f\n",
               sh.name, kv.first, kv.second.size(), m / kv.second.size(),
               *std::max_element(kv.second.begin(), kv.second.end()));
    }
    fflush(stdout);
    CK(cudaFree(d));
    unit_tables_free(ut);
    CK(cudaFree(cnt));
    CK(cudaFree(ws));
}

int main(int argc, char **argv)
{
    const char *list = "16384x2K,16384x32K,1024x14K,64x1M";
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string(argv[i]) == "--shapes")
            list = argv[i + 1];
    batch_shape shapes[BATCH_MAX_SHAPES], largest_default;
    size_t n_shapes = 0;
    char why[256];
    if (!batch_shape_list(list, shapes, BATCH_MAX_SHAPES, &n_shapes, why, sizeof(why))) {
        fprintf(stderr, "batch_trace: --shapes %s\n", why);
        return 2;
    }
    /* The pools p2pt-bench's default run has: its largest shape sets them. */
    batch_shape_parse("16384x32K", &largest_default, why, sizeof(why));
    size_t largest = batch_span(&largest_default);
    for (size_t i = 0; i < n_shapes; i++)
        largest = std::max(largest, batch_span(&shapes[i]));
    gpu g;
    int l2 = 0;
    CK(cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    g.pool = std::max((size_t)4 * l2, largest);
    CK(cudaMalloc(&g.src, g.pool + 4096));
    CK(cudaMalloc(&g.dst, g.pool + 4096));
    std::vector<unsigned char> fill(g.pool + 4096);
    for (size_t i = 0; i < fill.size(); i++)
        fill[i] = (unsigned char)(i * 2654435761u >> 13);
    CK(cudaMemcpy(g.src, fill.data(), fill.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(g.dst, 0, g.pool + 4096));
    CK(cudaMalloc(&g.trace, (size_t)g.sms * P2PT_BATCH_CTAS_PER_SM * 5 * 8));
    CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g.e0));
    CK(cudaEventCreate(&g.e1));
    CK(cudaDeviceSynchronize());
    for (size_t i = 0; i < n_shapes; i++)
        one_shape(g, shapes[i]);
    return 0;
}
