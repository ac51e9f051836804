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
 * Layouts, checks and timing: batch_harness.cuh (p2pt-bench's layouts,
 * CUDA events around 20 back-to-back batches, median of 9).
 */
#include "../../kernels/batch_copy.cu"
#include "batch_harness.cuh"

#ifndef VARIANT
#define VARIANT "default"
#endif
#ifndef BATCH_GRID_PER_SM /* CTAs launched per SM: the library's grid */
#define BATCH_GRID_PER_SM P2PT_BATCH_CTAS_PER_SM
#endif

int main()
{
    const shape shapes[] = {{"256x4K", 256, 4 << 10},     {"1024x14K", 1024, 14 << 10},
                            {"4096x7K", 4096, 7 << 10},   {"16384x2K", 16384, 2 << 10},
                            {"16384x32K", 16384, 32 << 10}, {"64x1M", 64, 1 << 20}};
    harness H;
    harness_init(H);
    /* The status CTA and the copy CTAs, as the library launches them
     * (until 2026-11-24 one more: the last started when another ended). */
    const unsigned G = (unsigned)H.sms * BATCH_GRID_PER_SM;
    for (const shape &sh : shapes) {
        layout L = layout_make(H, sh);
        measure(H, L, "batch_variant", VARIANT, [&](int k) {
            L.p.descs = (unsigned long long)L.descs(H, k);
            p2pt_batch_copy_dev<<<G, P2PT_BATCH_THREADS, 0, H.s>>>(L.p);
        });
    }
    return 0;
}
