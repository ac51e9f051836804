/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch kernel (kernels/batch_copy.cu, included here as it is) built
 * with other settings, timed on device batches against one contiguous
 * cudaMemcpyAsync of the same bytes, in the same process: what the tile
 * size, the CTAs per SM and the cache operators do to bandwidth. run.sh
 * batch builds one binary per variant (-D flags: P2PT_BATCH_TILE,
 * P2PT_BATCH_CTAS_PER_SM, BATCH_LD, BATCH_ST; BATCH_GRID_PER_SM launches
 * more CTAs per SM than fit at once) and runs them in turn (BATCH_VARIANTS
 * names a subset).
 *
 * Layouts as p2pt-bench's batch mode: sources consecutive rows, destinations
 * shuffled with gaps, pools of 4 x L2 and more, several layouts rotated;
 * CUDA events around 20 back-to-back batches, median of 9; the first batch
 * of each shape is checked byte for byte.
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../kernels/batch_copy.cu"
#include "check.cuh"


#ifndef VARIANT
#define VARIANT "default"
#endif
#ifndef BATCH_GRID_PER_SM /* copy CTAs launched per SM: the library's grid */
#define BATCH_GRID_PER_SM P2PT_BATCH_CTAS_PER_SM
#endif

struct shape {
    const char *name;
    size_t count, size;
};

int main()
{
    const shape shapes[] = {{"256x4K", 256, 4 << 10}, {"1024x14K", 1024, 14 << 10}, {"4096x7K", 4096, 7 << 10},
                            {"16384x2K", 16384, 2 << 10},  {"16384x32K", 16384, 32 << 10},
                            {"64x1M", 64, 1 << 20}};
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t pool = 1200ull << 20;
    char *src, *dst;
    CK(cudaMalloc(&src, pool));
    CK(cudaMalloc(&dst, 2 * pool));
    std::vector<unsigned char> h(pool);
    for (size_t i = 0; i < pool; i++)
        h[i] = (unsigned char)(i * 2654435761u >> 13);
    CK(cudaMemcpy(src, h.data(), pool, cudaMemcpyHostToDevice));
    p2pt_batch_desc *d_descs;
    unsigned *d_count;
    void *ws;
    CK(cudaMalloc(&d_descs, 16384 * 8 * sizeof(p2pt_batch_desc)));
    CK(cudaMalloc(&d_count, 4));
    CK(cudaMalloc(&ws, 64));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const unsigned G = (unsigned)sms * BATCH_GRID_PER_SM;
    for (const shape &sh : shapes) {
        const size_t total = sh.count * sh.size;
        const int sets = (int)std::max<size_t>(1, std::min<size_t>(8, pool / (2 * total + 1)));
        std::vector<p2pt_batch_desc> d(sh.count * sets);
        srand(7);
        for (int k = 0; k < sets; k++) {
            std::vector<size_t> slot(sh.count);
            for (size_t i = 0; i < sh.count; i++)
                slot[i] = i;
            for (size_t i = sh.count; i > 1; i--)
                std::swap(slot[i - 1], slot[rand() % i]);
            for (size_t i = 0; i < sh.count; i++) {
                p2pt_batch_desc &x = d[k * sh.count + i];
                x.src = (unsigned long long)(src + (k * total + i * sh.size) % (pool - sh.size));
                x.dst = (unsigned long long)(dst + k * 2 * total + slot[i] * (sh.size + 64));
                x.bytes = sh.size;
            }
        }
        CK(cudaMemcpy(d_descs, d.data(), d.size() * sizeof(d[0]), cudaMemcpyHostToDevice));
        unsigned n = (unsigned)sh.count;
        CK(cudaMemcpy(d_count, &n, 4, cudaMemcpyHostToDevice));
        p2pt_batch_dev_params p;
        memset(&p, 0, sizeof(p));
        p.count = (unsigned long long)d_count;
        p.workspace = (unsigned long long)ws;
        p.max_count = n;
        p.n_windows = 2;
        p.window[0] = {(unsigned long long)src, (unsigned long long)(src + pool)};
        p.window[1] = {(unsigned long long)dst, (unsigned long long)(dst + 2 * pool)};
        auto batch = [&](int k) {
            p.descs = (unsigned long long)(d_descs + (size_t)k * sh.count);
            p2pt_batch_copy_dev<<<G + 1, P2PT_BATCH_THREADS, 0, s>>>(p);
        };
        /* Check the first layout. */
        CK(cudaMemset(dst, 0xA5, 2 * pool));
        batch(0);
        CK(cudaStreamSynchronize(s));
        CK(cudaGetLastError());
        bool ok = true;
        std::vector<unsigned char> got(sh.size);
        for (size_t i = 0; i < sh.count && ok; i += sh.count / 16 + 1) {
            CK(cudaMemcpy(got.data(), (void *)d[i].dst, sh.size, cudaMemcpyDeviceToHost));
            ok = memcmp(got.data(), h.data() + ((char *)d[i].src - src), sh.size) == 0;
        }
        const int reps = 9, per = 20;
        std::vector<float> tb, tc;
        for (int r = 0; r < reps + 1; r++) {
            float ms;
            CK(cudaEventRecord(e0, s));
            for (int i = 0; i < per; i++)
                batch((r * per + i) % sets);
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r)
                tb.push_back(ms * 1000 / per);
            CK(cudaEventRecord(e0, s));
            for (int i = 0; i < per; i++)
                CK(cudaMemcpyAsync(dst + (size_t)((r * per + i) % sets) * 2 * total,
                                   src + (size_t)((r * per + i) % sets) * total, total,
                                   cudaMemcpyDeviceToDevice, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r)
                tc.push_back(ms * 1000 / per);
        }
        std::sort(tb.begin(), tb.end());
        std::sort(tc.begin(), tc.end());
        printf("batch_variant variant=%s shape=%s batch_us=%.2f contig_us=%.2f "
               "batch/contig_bw=%.3f check=%s\n",
               VARIANT, sh.name, tb[reps / 2], tc[reps / 2], tc[reps / 2] / tb[reps / 2],
               ok ? "ok" : "FAILED");
    }
    return 0;
}
