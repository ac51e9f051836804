/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The batch, overlap and alltoall modes' yardstick: the plain kernel a user writes in a dozen
 * lines, one warp per piece, pieces dealt round-robin to the warps of one
 * launch, 16-byte vector loads and stores where a piece's two ends are both
 * 16-byte aligned, else words or bytes. It reads the same descriptors and
 * count in GPU memory as p2pt_copy_batch_device_async, so its row measures
 * the same pieces. Compiled with NVRTC through the library's own compile
 * path, for the GPU it runs on; so is the alltoall check's compare kernel,
 * through the same loader (bench_jit_load).
 */
#include <stdlib.h>

#include "bench.h"

/* Descriptors as p2pt_copy_desc lays them out: dst, src, bytes. */
static const char ref_source[] =
    "struct desc { char *dst; const char *src; unsigned long long bytes; };\n"
    "extern \"C\" __global__ void ref_copy(const desc *d, const unsigned *count)\n"
    "{\n"
    "    unsigned lane = threadIdx.x & 31, n = *count;\n"
    "    unsigned warps = gridDim.x * (blockDim.x / 32);\n"
    "    for (unsigned p = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < n; p += warps) {\n"
    "        char *dst = d[p].dst;\n"
    "        const char *src = d[p].src;\n"
    "        unsigned long long b = d[p].bytes, i = 0;\n"
    "        unsigned long long a = (unsigned long long)dst | (unsigned long long)src;\n"
    "        if ((a & 15) == 0)\n"
    "            for (i = lane; i < b / 16; i += 32)\n"
    "                ((int4 *)dst)[i] = ((const int4 *)src)[i];\n"
    "        else if ((a & 3) == 0)\n"
    "            for (i = lane; i < b / 4; i += 32)\n"
    "                ((int *)dst)[i] = ((const int *)src)[i];\n"
    "        unsigned long long done = (a & 15) == 0 ? b / 16 * 16 : (a & 3) == 0 ? b / 4 * 4 : 0;\n"
    "        for (i = done + lane; i < b; i += 32)\n"
    "            dst[i] = src[i];\n"
    "    }\n"
    "}\n";

#define REF_WARPS_PER_SM 64 /* 2048 threads: a full SM on Hopper */

bool bench_jit_load(const char *source, const char *entry, const char *what,
                    const struct bench_gpu *g, struct bench_cubin *kept, CUmodule *mod,
                    CUfunction *fn)
{
    struct bench_cubin own = {0};
    struct bench_cubin *c = kept ? kept : &own;
    const int arch = g->cc_major * 10 + g->cc_minor;
    *mod = NULL;
    if (c->data == NULL || c->source != source || c->arch != arch) {
        size_t size = 0;
        bench_cubin_free(c);
        p2pt_status st = p2pt__jit_compile(source, NULL, arch, getenv("P2P_NVRTC_LIBRARY"),
                                           &c->data, &size);
        if (st != P2PT_SUCCESS) {
            bench_set_err("%s: %s: %s", what, p2pt_status_string(st), p2pt__last_error_text());
            return false;
        }
        c->source = source;
        c->arch = arch;
    }
    if (!bench_use(g))
        goto fail;
    CU(tcu.cuModuleLoadData(mod, c->data));
    CU(tcu.cuModuleGetFunction(fn, *mod, entry));
    bench_cubin_free(&own);
    return true;
fail:
    bench_cubin_free(&own);
    if (*mod)
        CU_RELEASE(tcu.cuModuleUnload(*mod));
    *mod = NULL;
    return false;
}

void bench_cubin_free(struct bench_cubin *c)
{
    free(c->data);
    c->data = NULL;
    c->source = NULL;
}

bool bench_ref_load(struct bench_ref *r, const struct bench_gpu *g, struct bench_cubin *kept)
{
    r->sms = g->sms;
    return bench_jit_load(ref_source, "ref_copy", "ref_kernel", g, kept, &r->mod, &r->fn);
}

/* A warp per piece up to a full GPU (or `most` CTAs, when not 0); beyond,
 * warps take further pieces. */
unsigned bench_ref_ctas(const struct bench_ref *r, uint32_t max_count, unsigned most)
{
    unsigned per_cta = BENCH_REF_THREADS / 32;
    unsigned long long ctas = ((unsigned long long)max_count + per_cta - 1) / per_cta;
    unsigned long long cap = (unsigned long long)r->sms * REF_WARPS_PER_SM / per_cta;
    if (most != 0 && most < cap)
        cap = most;
    if (ctas > cap)
        ctas = cap;
    return ctas == 0 ? 1 : (unsigned)ctas;
}

bool bench_ref_launch(const struct bench_ref *r, CUdeviceptr descs, CUdeviceptr count,
                      uint32_t max_count, unsigned most, CUstream s)
{
    unsigned ctas = bench_ref_ctas(r, max_count, most);
    void *params[] = {&descs, &count};
    CU(tcu.cuLaunchKernel(r->fn, ctas, 1, 1, BENCH_REF_THREADS, 1, 1, 0, s, params, NULL));
    return true;
fail:
    return false;
}

void bench_ref_unload(struct bench_ref *r)
{
    if (r->mod)
        CU_RELEASE(tcu.cuModuleUnload(r->mod));
    r->mod = NULL;
}
