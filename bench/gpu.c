/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the measurements run on: the devices and their primary contexts,
 * peer access, the buffer pools copies rotate through, the streams, and the
 * p2pt handles with p2pt_prepare done before anything is timed.
 *
 * Pools are at least L2_FACTOR x L2 so that a copy that fits in L2 never
 * reads what an earlier one left there.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SLOT_ALIGN 4096 /* pool slots start on page boundaries */

struct bench_gpu bench_gpus[2];
bool bench_have_peer;
p2pt_handle *bench_handles[N_TRANSPORTS];
struct bench_tma_cfg bench_default_cfg;

/* ============================================================ devices */

bool bench_use(const struct bench_gpu *g)
{
    CU(tcu.cuCtxSetCurrent(g->ctx));
    return true;
fail:
    return false;
}

bool bench_gpu_info(struct bench_gpu *g, int ordinal)
{
    int l2 = 0;
    memset(g, 0, sizeof(*g));
    g->ordinal = ordinal;
    CU(tcu.cuDeviceGet(&g->dev, ordinal));
    CU(tcu.cuDeviceGetName(g->name, (int)sizeof(g->name), g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev));
    CU(tcu.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                g->dev));
    CU(tcu.cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                g->dev));
    g->l2 = (size_t)l2;
    return true;
fail:
    return false;
}

bool bench_gpu_open(struct bench_gpu *g)
{
    CU(tcu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev));
    return true;
fail:
    g->ctx = NULL;
    return false;
}

void bench_gpu_close(struct bench_gpu *g)
{
    if (g->ctx == NULL)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(NULL));
    CU_RELEASE(tcu.cuDevicePrimaryCtxRelease(g->dev));
    g->ctx = NULL;
}

/* Both ways: push writes into the peer, pull reads from it, and bidir does
 * both from each side. */
bool bench_enable_peer_access(void)
{
    for (int i = 0; i < 2; i++) {
        if (!bench_use(&bench_gpus[i]))
            goto fail;
        CUresult r = tcu.cuCtxEnablePeerAccess(bench_gpus[1 - i].ctx, 0);
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
            bench_fail_cu(r, "cuCtxEnablePeerAccess", __FILE__, __LINE__);
            goto fail;
        }
    }
    return true;
fail:
    return false;
}

/* ============================================================== buffers */

static bool arena_alloc(struct bench_arena *a, const struct bench_gpu *g, size_t pool)
{
    a->g = g;
    a->pool = pool;
    a->base = 0;
    if (!bench_use(g))
        goto fail;
    CU(tcu.cuMemAlloc(&a->base, pool + SLACK));
    return true;
fail:
    a->base = 0;
    return false;
}

static void arena_free(struct bench_arena *a)
{
    if (a->base == 0)
        return;
    CU_RELEASE(tcu.cuCtxSetCurrent(a->g->ctx));
    CU_RELEASE(tcu.cuMemFree(a->base));
    a->base = 0;
}

void bench_pattern(uint64_t seed, unsigned char *out, size_t n)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)(batch_rng(&x) >> 32);
}

/* One period from the host, then doubled on the device by the copy engine:
 * filling gigabytes from the host would take seconds of GPU time. */
bool bench_fill(const struct bench_gpu *g, CUdeviceptr base, size_t total,
                const unsigned char *pattern)
{
    size_t first = total < BENCH_PATTERN_PERIOD ? total : BENCH_PATTERN_PERIOD;
    if (!bench_use(g))
        goto fail;
    CU(tcu.cuMemcpyHtoD(base, pattern, first));
    for (size_t done = first; done < total;) {
        size_t n = done < total - done ? done : total - done;
        CU(tcu.cuMemcpyAsync(base + done, base, n, NULL));
        done += n;
    }
    CU(tcu.cuCtxSynchronize());
    return true;
fail:
    return false;
}

static bool arena_fill(struct bench_arena *a, uint64_t seed)
{
    unsigned char *h = malloc(BENCH_PATTERN_PERIOD);
    if (h == NULL) {
        bench_set_err("out of host memory (%u bytes)", BENCH_PATTERN_PERIOD);
        return false;
    }
    bench_pattern(seed, h, BENCH_PATTERN_PERIOD);
    bool ok = bench_fill(a->g, a->base, a->pool + SLACK, h);
    free(h);
    return ok;
}

static bool arena_clear(struct bench_arena *a)
{
    if (!bench_use(a->g))
        goto fail;
    CU(tcu.cuMemsetD8(a->base, 0, a->pool + SLACK));
    CU(tcu.cuCtxSynchronize());
    return true;
fail:
    return false;
}

/* Slots of `bytes` rounded up to a page, as many as the pool holds, used in
 * turn. */
size_t bench_slot_offset(size_t pool, size_t bytes, unsigned long i)
{
    size_t stride = (bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
    size_t k = pool / stride;
    if (k == 0)
        k = 1;
    return (size_t)(i % k) * stride;
}

/*
 * Pool bytes: at least L2_FACTOR x L2 and at least the largest copy; smaller
 * (but never below the largest copy) when two pools and a reference would
 * not fit in 80% of a GPU's free memory.
 */
static bool plan_pool(size_t largest, bool peer, size_t *pool)
{
    const struct bench_gpu *gpus = bench_gpus;
    size_t l2 = gpus[0].l2 > gpus[peer].l2 ? gpus[0].l2 : gpus[peer].l2;
    size_t want = L2_FACTOR * l2 > largest ? L2_FACTOR * l2 : largest;
    for (int i = 0; i <= (peer ? 1 : 0); i++) {
        size_t free_b = 0, total_b = 0;
        if (!bench_use(&gpus[i]))
            goto fail;
        CU(tcu.cuMemGetInfo(&free_b, &total_b));
        size_t budget = free_b / 10 * 8;
        size_t fixed = largest + 3 * SLACK;
        if (budget < fixed + 2 * largest) {
            char a[32], b[32];
            bench_set_err("copies of %s need 3 buffers of that size in 80%% of GPU %d's free "
                          "memory, and %s is free",
                          bench_fmt_size(largest, a, sizeof(a)), gpus[i].ordinal,
                          bench_fmt_size(free_b, b, sizeof(b)));
            goto fail;
        }
        if (fixed + 2 * want > budget) {
            want = (budget - fixed) / 2 / MiB * MiB;
            if (want < largest)
                want = largest;
        }
    }
    *pool = want;
    return true;
fail:
    return false;
}

void bench_setup_close(struct bench_setup *su)
{
    for (int i = 0; i < su->ndirs; i++) {
        struct bench_dir *d = &su->d[i];
        if (d->s) {
            CU_RELEASE(tcu.cuCtxSetCurrent(d->g->ctx));
            CU_RELEASE(tcu.cuStreamDestroy(d->s));
            d->s = NULL;
        }
        arena_free(&d->src);
        arena_free(&d->dst);
        arena_free(&d->ref);
    }
    su->ndirs = 0;
}

static bool dir_open(struct bench_dir *d, const struct bench_gpu *g,
                     const struct bench_gpu *src_g, const struct bench_gpu *dst_g, size_t pool,
                     size_t largest, uint64_t seed)
{
    d->g = g;
    if (!arena_alloc(&d->src, src_g, pool) || !arena_alloc(&d->dst, dst_g, pool) ||
        !arena_alloc(&d->ref, g, largest) || !arena_fill(&d->src, seed) ||
        !arena_clear(&d->dst) || !bench_use(g))
        goto fail;
    CU(tcu.cuStreamCreate(&d->s, CU_STREAM_NON_BLOCKING));
    return true;
fail:
    return false;
}

bool bench_setup_open(struct bench_setup *su, int path, size_t largest)
{
    const struct bench_gpu *A = &bench_gpus[0], *B = &bench_gpus[1];
    memset(su, 0, sizeof(*su));
    su->path = path;
    su->ndirs = path == P_BIDIR ? 2 : 1;
    if (!plan_pool(largest, path != P_LOCAL, &su->pool))
        goto fail;
    switch (path) {
    case P_LOCAL:
        if (!dir_open(&su->d[0], A, A, A, su->pool, largest, 1))
            goto fail;
        break;
    case P_PUSH:
        if (!dir_open(&su->d[0], A, A, B, su->pool, largest, 2))
            goto fail;
        break;
    case P_PULL:
        if (!dir_open(&su->d[0], A, B, A, su->pool, largest, 3))
            goto fail;
        break;
    default:
        if (!dir_open(&su->d[0], A, A, B, su->pool, largest, 4) ||
            !dir_open(&su->d[1], B, B, A, su->pool, largest, 5))
            goto fail;
        break;
    }
    return true;
fail:
    bench_setup_close(su);
    return false;
}

/* ============================================================== handles */

bool bench_handle_open(const char *transport, const char *options, p2pt_handle **h,
                       struct bench_tma_cfg *cfg)
{
    p2pt_init_args args;
    memset(&args, 0, sizeof(args));
    args.size = sizeof(args);
    args.transport = transport;
    args.options = options;
    *h = NULL;
    P2(p2pt_init(&args, h));
    if (cfg) {
        p2pt_properties pr;
        memset(&pr, 0, sizeof(pr));
        pr.size = sizeof(pr);
        P2(p2pt_get_properties(*h, &pr));
        cfg->chunk = pr.chunk_bytes;
        cfg->stages = pr.stages;
        cfg->max_ctas = pr.max_ctas;
    }
    return true;
fail:
    if (*h)
        p2pt_finalize(*h);
    *h = NULL;
    return false;
}

/* The compile and the module load happen here, never inside a timed batch. */
bool bench_prepare_on(p2pt_handle *h, bool peer_too, p2pt_status *st_out)
{
    *st_out = P2PT_SUCCESS;
    for (int i = 0; i <= (peer_too ? 1 : 0); i++) {
        if (!bench_use(&bench_gpus[i]))
            goto fail;
        p2pt_status st = p2pt_prepare(h, bench_gpus[i].ordinal);
        if (st != P2PT_SUCCESS) {
            *st_out = st;
            bench_fail_p2(st, "p2pt_prepare");
            goto fail;
        }
    }
    return true;
fail:
    return false;
}
