/*
 * TMA batches: kernels/batch_copy.cu.
 *
 * Host descriptors travel in the kernel's parameters: the plan
 * (src/batch_plan.c) fills up to 1344 entries per launch (32 KiB of
 * parameters), the small entry point taking 128 when that is enough; a
 * larger batch is as few launches as that allows, back to back on the
 * stream (programmatic dependent launch overlaps each with the previous
 * one's tail). The driver copies the parameters at launch, and graph
 * capture into the graph, so the caller's array is free on return.
 *
 * Device descriptors: up to P2PT_BATCH_DEVICE_ONE in one launch whose CTAs
 * each read and check them (against the windows, passed in the parameters)
 * and plan the same way; more take the plan kernel (one CTA of 1024
 * threads, into the caller's workspace) and the copy kernel right behind
 * it. Measured on an H100 (bench/RESULTS.md): planning 1024 descriptors in
 * every CTA of 128 threads made the one-launch copy slower than the two
 * launches, which cost the host only about 1 us more.
 *
 * The batch ring has more, smaller stages than a single copy's
 * (P2PT_BATCH_UNIT): a 7 KiB piece fills a stage, so the stage count, not
 * the stage size, decides how many bytes are in flight per SM. It uses the
 * shared memory the configured ring would, less the entries' copy.
 */
#include <string.h>

#include "batch_plan.h"
#include "tma.h"

const struct p2pt_kernel p2pt__kernel_batch_copy = {
    .name = "batch_copy",
    .file = "kernels/batch_copy.cu",
    .source = p2pt__batch_copy_source,
    .entries = {"p2pt_batch_copy_s", "p2pt_batch_copy_l", "p2pt_batch_copy_dev1",
                "p2pt_batch_plan", "p2pt_batch_copy_dev", NULL},
    .min_cc = 90,
    .defines = {NULL},
};

/* Per thread: launch parameters are built here (32 KiB is too much for a
 * framework thread's stack); the driver copies them at launch. */
static _Thread_local struct p2pt_batch_large large;
static _Thread_local struct p2pt_batch_small small;
static _Thread_local struct p2pt_batch_dev_params dev;

/* How a batch launch is shaped on one device. */
struct shape {
    unsigned unit, stages;
    unsigned grid;    /* CTAs */
    unsigned entries; /* bytes of shared memory for the entries' copy */
};

/* A ring stage: P2PT_BATCH_UNIT, or the configured chunk when smaller. */
static unsigned batch_unit(const struct p2pt_handle *h)
{
    return h->cfg.chunk_bytes < P2PT_BATCH_UNIT ? (unsigned)h->cfg.chunk_bytes : P2PT_BATCH_UNIT;
}

/* The ring for a launch that copies `n` entries into shared memory: as
 * many stages as the configured ring's bytes hold and the device's shared
 * memory leaves room for beside the entries, at most P2PT_BATCH_MAX_STAGES. */
static p2pt_status shape_for(const struct p2pt_handle *h, const struct p2pt_module *m, size_t n,
                             struct shape *sh)
{
    size_t ring = p2pt__config_smem_bytes(&h->cfg);
    sh->unit = batch_unit(h);
    /* Rounded to 16 bytes, so the ring after them stays aligned. */
    sh->entries = (unsigned)((n * sizeof(struct p2pt_batch_entry) + 15) / 16 * 16);
    if ((size_t)m->smem_per_block_optin < sh->entries + sh->unit)
        return p2pt__fail(P2PT_NOT_SUPPORTED,
                          "a batch launch needs %u bytes of shared memory for its entries "
                          "and one %u-byte stage; device %d allows %d",
                          sh->entries, sh->unit, m->ordinal, m->smem_per_block_optin);
    size_t room = (size_t)m->smem_per_block_optin - sh->entries;
    if (ring > room)
        ring = room;
    size_t stages = ring / sh->unit;
    sh->stages = (unsigned)(stages < 1 ? 1 : stages > P2PT_BATCH_MAX_STAGES
                                                 ? P2PT_BATCH_MAX_STAGES
                                                 : stages);
    sh->grid = p2pt__kernel_ctas(h, m, (size_t)sh->stages * sh->unit + sh->entries);
    return P2PT_SUCCESS;
}

static unsigned smem_of(const struct shape *sh)
{
    return sh->stages * sh->unit + sh->entries;
}

static void fill_head(const struct p2pt_handle *h, const struct shape *sh,
                      struct p2pt_batch_head *head)
{
    memset(head, 0, sizeof(*head));
    head->unit_bytes = sh->unit;
    head->stages = sh->stages;
    head->flags = h->cfg.l2_evict_first ? P2PT_FLAG_EVICT_FIRST : 0u;
}

p2pt_status p2pt__tma_copy_batch(struct p2pt_handle *h, const struct p2pt_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_module *m = NULL;
    struct p2pt_batch_cursor cur = {0, 0};
    struct shape sh;
    CUstream stream = b->stream;

    P2PT_TRY(p2pt__jit_module(b->ctx, &p2pt__kernel_batch_copy, &h->cfg, &h->log, &stream, &m));
    for (;;) {
        uint32_t total = 0;
        size_t n = p2pt__batch_fill(b->descs, b->count, &cur, batch_unit(h), large.entry,
                                    P2PT_BATCH_LARGE, &total);
        if (n == 0)
            break;
        void *param;
        CUfunction fn;
        struct p2pt_batch_head *head;
        if (n <= P2PT_BATCH_SMALL) {
            memcpy(small.entry, large.entry, n * sizeof(large.entry[0]));
            head = &small.head;
            param = &small;
            fn = m->fn[P2PT_BATCH_ENTRY_SMALL];
        } else {
            head = &large.head;
            param = &large;
            fn = m->fn[P2PT_BATCH_ENTRY_LARGE];
        }
        P2PT_TRY(shape_for(h, m, n, &sh));
        fill_head(h, &sh, head);
        head->count = (unsigned)n;
        head->total_units = total;
        unsigned grid = total < sh.grid ? total : sh.grid;
        void *params[] = {param};
        P2PT_TRY(p2pt__kernel_launch(h, fn, grid, P2PT_BATCH_THREADS, smem_of(&sh), stream, params));
        atomic_fetch_add_explicit(&h->stats.batch_launches, 1, memory_order_relaxed);
    }
out:
    return st;
}

p2pt_status p2pt__tma_copy_batch_device(struct p2pt_handle *h, const struct p2pt_device_batch *b)
{
    p2pt_status st = P2PT_SUCCESS;
    const struct p2pt_module *m = NULL;
    struct shape sh;
    CUstream stream = b->stream;
    bool one = b->max_count <= P2PT_BATCH_DEVICE_ONE;

    P2PT_TRY(p2pt__jit_module(b->ctx, &p2pt__kernel_batch_copy, &h->cfg, &h->log, &stream, &m));
    /* Only the one-launch kernel copies the entries into shared memory. */
    P2PT_TRY(shape_for(h, m, one ? b->max_count : 0, &sh));
    memset(&dev, 0, sizeof(dev));
    fill_head(h, &sh, &dev.head);
    dev.head.workspace = (unsigned long long)(uintptr_t)b->workspace;
    dev.descs = (unsigned long long)(uintptr_t)b->descs;
    dev.count = (unsigned long long)(uintptr_t)b->count;
    dev.max_count = b->max_count;
    if (b->windows != NULL) {
        dev.n_windows = (unsigned)b->windows->n;
        memcpy(dev.window, b->windows->w, (size_t)b->windows->n * sizeof(dev.window[0]));
    }
    void *dev_params[] = {&dev};
    if (one) {
        /* Every CTA the device allows: the work is unknown until it runs. */
        P2PT_TRY(p2pt__kernel_launch(h, m->fn[P2PT_BATCH_ENTRY_DEVICE_ONE], sh.grid,
                                  P2PT_BATCH_THREADS, smem_of(&sh), stream, dev_params));
        atomic_fetch_add_explicit(&h->stats.batch_launches, 1, memory_order_relaxed);
        goto out;
    }
    P2PT_TRY(p2pt__kernel_launch(h, m->fn[P2PT_BATCH_ENTRY_PLAN], 1, P2PT_BATCH_PLAN_THREADS, 0,
                              stream, dev_params));
    void *copy_params[] = {&dev.head};
    P2PT_TRY(p2pt__kernel_launch(h, m->fn[P2PT_BATCH_ENTRY_DEVICE], sh.grid, P2PT_BATCH_THREADS,
                              smem_of(&sh), stream, copy_params));
    atomic_fetch_add_explicit(&h->stats.batch_launches, 2, memory_order_relaxed);
out:
    return st;
}
