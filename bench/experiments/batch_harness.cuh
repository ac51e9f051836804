/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What batch_variants.cu and batch_shapes.cu share: device batches of
 * uniform pieces laid out as p2pt-bench's batch mode lays them (sources
 * consecutive rows, destinations shuffled with gaps, pools of 4 x L2 and
 * more, up to 8 layouts rotated), the check of a batch over whole pieces,
 * and its time against one cudaMemcpyAsync of the same bytes: CUDA events
 * around 20 back-to-back batches, median of 9 rounds, the two interleaved.
 * Include after kernels/batch_copy.cu (the descriptor and parameter types).
 */
#ifndef P2PT_EXPERIMENTS_BATCH_HARNESS_CUH
#define P2PT_EXPERIMENTS_BATCH_HARNESS_CUH

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.cuh"

struct shape {
    const char *name;
    size_t count, size;
};

/* The pools, the source bytes on the host, the descriptor buffers. */
struct harness {
    int sms = 0;
    size_t pool = 1200ull << 20;
    char *src = nullptr, *dst = nullptr;
    std::vector<unsigned char> h;
    p2pt_batch_desc *d_descs = nullptr;
    unsigned *d_count = nullptr;
    void *ws = nullptr;
    cudaStream_t s;
    cudaEvent_t e0, e1;
};

static void harness_init(harness &H)
{
    CK(cudaDeviceGetAttribute(&H.sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&H.src, H.pool));
    CK(cudaMalloc(&H.dst, 2 * H.pool));
    H.h.resize(H.pool);
    for (size_t i = 0; i < H.pool; i++)
        H.h[i] = (unsigned char)(i * 2654435761u >> 13);
    CK(cudaMemcpy(H.src, H.h.data(), H.pool, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&H.d_descs, 16384 * 8 * sizeof(p2pt_batch_desc)));
    CK(cudaMalloc(&H.d_count, 4));
    CK(cudaMalloc(&H.ws, 64));
    CK(cudaStreamCreateWithFlags(&H.s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&H.e0));
    CK(cudaEventCreate(&H.e1));
}

/* The layouts of one shape, in GPU memory, and a device batch's
 * parameters for them (descs set per layout by the caller). */
struct layout {
    shape sh;
    size_t total;
    int sets;
    std::vector<p2pt_batch_desc> d;
    p2pt_batch_dev_params p;

    const p2pt_batch_desc *descs(const harness &H, int k) const
    {
        return H.d_descs + (size_t)k * sh.count;
    }
};

static layout layout_make(const harness &H, const shape &sh)
{
    layout L;
    L.sh = sh;
    L.total = sh.count * sh.size;
    L.sets = (int)std::max<size_t>(1, std::min<size_t>(8, H.pool / (2 * L.total + 1)));
    L.d.resize(sh.count * L.sets);
    srand(7);
    for (int k = 0; k < L.sets; k++) {
        std::vector<size_t> slot(sh.count);
        for (size_t i = 0; i < sh.count; i++)
            slot[i] = i;
        for (size_t i = sh.count; i > 1; i--)
            std::swap(slot[i - 1], slot[rand() % i]);
        for (size_t i = 0; i < sh.count; i++) {
            p2pt_batch_desc &x = L.d[k * sh.count + i];
            x.src = (unsigned long long)(H.src + (k * L.total + i * sh.size) % (H.pool - sh.size));
            x.dst = (unsigned long long)(H.dst + k * 2 * L.total + slot[i] * (sh.size + 64));
            x.bytes = sh.size;
        }
    }
    CK(cudaMemcpy(H.d_descs, L.d.data(), L.d.size() * sizeof(L.d[0]), cudaMemcpyHostToDevice));
    unsigned n = (unsigned)sh.count;
    CK(cudaMemcpy(H.d_count, &n, 4, cudaMemcpyHostToDevice));
    memset(&L.p, 0, sizeof(L.p));
    L.p.count = (unsigned long long)H.d_count;
    L.p.workspace = (unsigned long long)H.ws;
    L.p.max_count = n;
    L.p.n_windows = 2;
    L.p.window[0] = {(unsigned long long)H.src, (unsigned long long)(H.src + H.pool)};
    L.p.window[1] = {(unsigned long long)H.dst, (unsigned long long)(H.dst + 2 * H.pool)};
    return L;
}

/* Run batch(0) on a poisoned destination pool and compare 16 of its pieces
 * with their sources; then time batch(k), rotating over the layouts,
 * against one contiguous copy of the same bytes, and print one line:
 * `tag` variant=... shape=... batch_us contig_us batch/contig_bw check. */
template <typename F>
static void measure(harness &H, const layout &L, const char *tag, const char *variant, F batch)
{
    const shape &sh = L.sh;
    CK(cudaMemset(H.dst, 0xA5, 2 * H.pool));
    batch(0);
    CK(cudaStreamSynchronize(H.s));
    CK(cudaGetLastError());
    bool ok = true;
    std::vector<unsigned char> got(sh.size);
    for (size_t i = 0; i < sh.count && ok; i += sh.count / 16 + 1) {
        CK(cudaMemcpy(got.data(), (void *)L.d[i].dst, sh.size, cudaMemcpyDeviceToHost));
        ok = memcmp(got.data(), H.h.data() + ((char *)L.d[i].src - H.src), sh.size) == 0;
    }
    const int reps = 9, per = 20;
    std::vector<float> tb, tc;
    for (int r = 0; r < reps + 1; r++) {
        float ms;
        CK(cudaEventRecord(H.e0, H.s));
        for (int i = 0; i < per; i++)
            batch((r * per + i) % L.sets);
        CK(cudaEventRecord(H.e1, H.s));
        CK(cudaEventSynchronize(H.e1));
        CK(cudaEventElapsedTime(&ms, H.e0, H.e1));
        if (r)
            tb.push_back(ms * 1000 / per);
        CK(cudaEventRecord(H.e0, H.s));
        for (int i = 0; i < per; i++) {
            const size_t k = (size_t)((r * per + i) % L.sets);
            CK(cudaMemcpyAsync(H.dst + k * 2 * L.total, H.src + k * L.total, L.total,
                               cudaMemcpyDeviceToDevice, H.s));
        }
        CK(cudaEventRecord(H.e1, H.s));
        CK(cudaEventSynchronize(H.e1));
        CK(cudaEventElapsedTime(&ms, H.e0, H.e1));
        if (r)
            tc.push_back(ms * 1000 / per);
    }
    CK(cudaGetLastError());
    std::sort(tb.begin(), tb.end());
    std::sort(tc.begin(), tc.end());
    printf("%s variant=%s shape=%s batch_us=%.2f contig_us=%.2f batch/contig_bw=%.3f "
           "check=%s\n",
           tag, variant, sh.name, tb[reps / 2], tc[reps / 2], tc[reps / 2] / tb[reps / 2],
           ok ? "ok" : "FAILED");
    fflush(stdout);
}

#endif /* P2PT_EXPERIMENTS_BATCH_HARNESS_CUH */
