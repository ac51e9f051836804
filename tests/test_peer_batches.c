/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Batches whose pieces cross NVLink (docs/USAGE.md, "Peer batches"): an
 * alltoallv from one GPU is one batch, its pieces pushing to every peer,
 * pulling from them, between two peers, and local, mixed at random sizes
 * and offsets, exact under `tma`, `auto` and `ce` (host descriptors) and as
 * a device batch, every byte of every destination pool checked, the gaps
 * between pieces included. A link-bound batch takes only the CTAs the
 * link needs: a host batch whose every piece crosses a peer link, and a
 * device batch whose windows hold another GPU's memory, at most the
 * policy's `link peer` CTAs (32 on sm_90), shown by explain; a batch with
 * local pieces keeps the whole grid. The SM budget applies: 0 sends host
 * batches to the copy engine and refuses device batches, N caps the grid.
 * A peer that is not mapped is refused with the remedy, nothing written.
 * Such a device batch's CTAs take equal shares of its pieces (the marks
 * entry in one part), cut inside blocks and rows at any count and grid;
 * one on GPU 0 alone keeps whole blocks.
 * Over the fake driver (the routing and the grids, on any machine) and on
 * two to four GPUs.
 */
#include "batch_test.h"

#define MAX_GPUS 4
#define PIECES 2000
#define PIECE_MAX 40000

struct pools {
    int n;                        /* GPUs in use */
    struct gt_buf src[MAX_GPUS];  /* on GPU g */
    struct gt_buf dst[MAX_GPUS];
    unsigned char *src_host[MAX_GPUS];
    size_t used[MAX_GPUS];        /* destination bytes laid out so far */
};

static int gpus_in_use(void)
{
    int count = 0;
    GT_CHECK(tcu.cuDeviceGetCount(&count));
    return count < MAX_GPUS ? count : MAX_GPUS;
}

/* Pools on the first `n` GPUs (0: every GPU in use, up to MAX_GPUS). */
static void pools_make(struct pools *p, int n, uint64_t seed)
{
    memset(p, 0, sizeof(*p));
    p->n = n != 0 ? n : gpus_in_use();
    for (int g = 0; g < p->n; g++) {
        gt_use_device(g);
        p->src[g] = gt_alloc(1u << 20);
        gt_fill(&p->src[g], seed + (uint64_t)g);
        p->dst[g] = gt_alloc(bt_pool_bytes(PIECES, PIECE_MAX));
        p->src_host[g] = bt_host_copy(&p->src[g]);
    }
    gt_use_device(0);
}

static void pools_free(struct pools *p)
{
    for (int g = 0; g < p->n; g++) {
        gt_free(&p->src[g]);
        gt_free(&p->dst[g]);
        free(p->src_host[g]);
    }
}

/* A piece from GPU `from`'s pool to GPU `to`'s, `bytes` long at random
 * offsets, after a random gap in the destination pool. */
static p2pt_copy_desc piece(struct pools *p, struct bt_rng *r, int from, int to, uint64_t bytes)
{
    p->used[to] += 1 + bt_next(r) % 300;
    cr_assert_leq(p->used[to] + bytes, p->dst[to].n);
    size_t soff = (size_t)(bt_next(r) % (p->src[from].n - bytes + 1));
    p2pt_copy_desc d = {(void *)(uintptr_t)(p->dst[to].ptr + p->used[to]),
                        (const void *)(uintptr_t)(p->src[from].ptr + soff), bytes};
    p->used[to] += bytes;
    return d;
}

/* Which pool holds `a` (-1: none). */
static int pool_of(const struct gt_buf *b, int n, const void *a)
{
    for (int g = 0; g < n; g++)
        if ((uintptr_t)a >= b[g].ptr && (uintptr_t)a < b[g].ptr + b[g].n + 1)
            return g;
    return -1;
}

/* Every destination pool, guards and gaps included, holds exactly the
 * pieces of `d` and poison elsewhere. */
static void expect_pools(const struct pools *p, const p2pt_copy_desc *d, size_t n,
                         const char *what)
{
    for (int g = 0; g < p->n; g++) {
        const struct gt_buf *dst = &p->dst[g];
        size_t total = dst->n + 2 * GT_GUARD;
        unsigned char *want = malloc(total), *got = malloc(total);
        cr_assert(want && got);
        memset(want, GT_POISON, total);
        for (size_t i = 0; i < n; i++) {
            if (pool_of(p->dst, p->n, d[i].dst) != g || d[i].bytes == 0)
                continue;
            int from = pool_of(p->src, p->n, d[i].src);
            memcpy(want + ((uintptr_t)d[i].dst - dst->base),
                   p->src_host[from] + ((uintptr_t)d[i].src - p->src[from].ptr),
                   (size_t)d[i].bytes);
        }
        gt_read(dst, got, dst->base, total);
        /* Byte by byte only where they differ: a check per byte of two
         * 80 MB pools took most of a test's 34 s. */
        if (memcmp(got, want, total) != 0)
            for (size_t k = 0; k < total; k++)
                cr_assert_eq(got[k], want[k], "%s: GPU %d's destination pool byte %zu is 0x%02x, "
                                              "expected 0x%02x", what, g, k, got[k], want[k]);
        free(want);
        free(got);
    }
}

/* Each pool poisoned from its own GPU (without peer access another's
 * cannot set it). */
static void poison_pools(struct pools *p)
{
    for (int g = 0; g < p->n; g++) {
        gt_use_device(g);
        gt_poison(&p->dst[g]);
    }
    gt_use_device(0);
}

/* Device descriptors for `d` on GPU 0, every pool a window of device 0. */
struct dev_batch {
    CUdeviceptr descs, count, ws;
    uint32_t n;
};

static struct dev_batch dev_batch_make(const p2pt_copy_desc *d, size_t n)
{
    struct dev_batch b = {0, 0, 0, (uint32_t)n};
    GT_CHECK(tcu.cuMemAlloc(&b.descs, n * sizeof(*d)));
    GT_CHECK(tcu.cuMemAlloc(&b.count, 4));
    GT_CHECK(tcu.cuMemAlloc(&b.ws, p2pt_batch_workspace_bytes(b.n)));
    GT_CHECK(tcu.cuMemcpyHtoD(b.descs, d, n * sizeof(*d)));
    GT_CHECK(tcu.cuMemcpyHtoD(b.count, &b.n, 4));
    return b;
}

static p2pt_status dev_batch_run(p2pt_handle *h, const struct dev_batch *b, CUstream s)
{
    return p2pt_copy_batch_device_async(h, (const p2pt_copy_desc *)(uintptr_t)b->descs,
                                        (const uint32_t *)(uintptr_t)b->count, b->n,
                                        (void *)(uintptr_t)b->ws, s);
}

static p2pt_choice dev_batch_explain(p2pt_handle *h, const struct dev_batch *b, CUstream s)
{
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_batch_device(h, (const p2pt_copy_desc *)(uintptr_t)b->descs,
                                    (const uint32_t *)(uintptr_t)b->count, b->n,
                                    (void *)(uintptr_t)b->ws, s, &c));
    return c;
}

static void dev_batch_free(struct dev_batch *b)
{
    tcu.cuMemFree(b->descs);
    tcu.cuMemFree(b->count);
    tcu.cuMemFree(b->ws);
}

static void windows(p2pt_handle *h, const struct pools *p, bool on)
{
    for (int g = 0; g < p->n; g++) {
        const struct gt_buf *b[2] = {&p->src[g], &p->dst[g]};
        for (int k = 0; k < 2; k++) {
            if (on)
                GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)b[k]->base,
                                           b[k]->n + 2 * GT_GUARD));
            else
                GT_OK(p2pt_window_unregister(h, 0, (void *)(uintptr_t)b[k]->base));
        }
    }
}

Test(peer_gpu, a_batch_mixing_push_pull_local_and_every_peer_is_exact)
{
    gt_require_gpus(2);
    gt_enable_peers_all();
    struct pools p;
    pools_make(&p, 0, 91);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* Pieces between every pair of GPUs (GPU 0's stream runs them all),
     * at random sizes, one in eight empty, co-aligned or not. */
    p2pt_copy_desc *d = malloc(PIECES * sizeof(*d));
    struct bt_rng r = {12345};
    size_t kinds[4] = {0}; /* push, pull, local, between two peers */
    for (size_t i = 0; i < PIECES; i++) {
        int from = (int)(bt_next(&r) % (uint64_t)p.n), to = (int)(bt_next(&r) % (uint64_t)p.n);
        d[i] = piece(&p, &r, from, to, bt_size(&r, PIECE_MAX));
        kinds[from == 0 && to != 0 ? 0 : to == 0 && from != 0 ? 1 : from == to && to == 0 ? 2 : 3]++;
    }
    cr_assert(kinds[0] && kinds[1] && kinds[2], "push %zu, pull %zu, local %zu", kinds[0],
              kinds[1], kinds[2]);
    const char *engines[3] = {"tma", "auto", "ce"};
    for (int e = 0; e < 3; e++) {
        p2pt_handle *h = gt_handle(engines[e]);
        char what[96];
        snprintf(what, sizeof(what), "%s, %d GPUs, host descriptors", engines[e], p.n);
        poison_pools(&p);
        GT_OK(p2pt_copy_batch_async(h, d, PIECES, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_pools(&p, d, PIECES, what);
        if (e < 2) {
            snprintf(what, sizeof(what), "%s, %d GPUs, device descriptors", engines[e], p.n);
            poison_pools(&p);
            struct dev_batch b = dev_batch_make(d, PIECES);
            windows(h, &p, true);
            GT_OK(dev_batch_run(h, &b, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            p2pt_batch_status st;
            GT_CHECK(tcu.cuMemcpyDtoH(&st, b.ws, sizeof(st)));
            cr_assert_eq(st.skipped, 0u, "%s: %u skipped (reasons %#x)", what, st.skipped,
                         st.reasons);
            expect_pools(&p, d, PIECES, what);
            windows(h, &p, false);
            dev_batch_free(&b);
        }
        p2pt_finalize(h);
    }
    free(d);
    tcu.cuStreamDestroy(s);
    pools_free(&p);
}

/* Pushes from GPU 0 to GPU 1, all crossing the peer link; `local` makes
 * the last one GPU 0 to GPU 0. */
static size_t pushes(struct pools *p, p2pt_copy_desc *d, size_t n, bool local)
{
    struct bt_rng r = {777};
    for (size_t i = 0; i < n; i++)
        d[i] = piece(p, &r, 0, local && i == n - 1 ? 0 : 1, 4096 + 16 * (bt_next(&r) % 64));
    return n;
}

/* Over the fake driver, which records each device batch's launch: its
 * entry, and whether its CTAs take equal shares of the pieces (a batch
 * across NVLink on a narrow grid: kernels/batch_tiles.cuh, copy_all). */
static void expect_last_launch(const char *entry, unsigned equal_shares)
{
    if (!gt_on_fake_driver())
        return;
    char name[64];
    unsigned grid = 0;
    struct p2pt_batch_dev_params head;
    bt_fake_last_batch_launch(name, sizeof(name), &grid, &head);
    cr_assert_str_eq(name, entry, "launched %s, expected %s", name, entry);
    cr_assert_eq(head.equal_shares, equal_shares, "%s: equal_shares %u, expected %u", entry,
                 head.equal_shares, equal_shares);
    cr_assert_eq(head.n_marks, 1u, "%s: in %u parts", entry, head.n_marks);
}

static void grids_follow_the_link(void)
{
    gt_enable_peers();
    struct pools p;
    pools_make(&p, 2, 5);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    enum { N = 512 };
    p2pt_copy_desc d[N];
    const uint32_t peer_ctas = 32; /* the built-in sm_90 tables' `link peer` */

    /* Every piece crosses the peer link: at most the link's CTAs. */
    pushes(&p, d, N, false);
    const char *engines[2] = {"tma", "auto"};
    for (int e = 0; e < 2; e++) {
        p2pt_handle *h = gt_handle(engines[e]);
        p2pt_choice c = {sizeof(c)};
        GT_OK(p2pt_explain_batch(h, d, N, s, &c));
        cr_assert_str_eq(c.transport, "tma", "%s", c.reason);
        cr_assert(strstr(c.reason, "512 to or from a peer GPU") && strstr(c.reason, "at most 32"),
                  "%s", c.reason);
        GT_OK(p2pt_copy_batch_async(h, d, N, s));
        cr_assert_leq(gt_props(h).max_grid, peer_ctas, "%s: a grid of %u", engines[e],
                      gt_props(h).max_grid);
        /* A device batch whose windows hold GPU 1's memory. */
        struct dev_batch b = dev_batch_make(d, N);
        windows(h, &p, true);
        c = dev_batch_explain(h, &b, s);
        cr_assert(strstr(c.reason, "hold another GPU's memory") && strstr(c.reason, "at most 32"),
                  "%s", c.reason);
        GT_OK(dev_batch_run(h, &b, s));
        cr_assert_leq(gt_props(h).max_grid, peer_ctas);
        expect_last_launch("p2pt_batch_copy_marks", 1);
        dev_batch_free(&b);
        /* Of one descriptor block at most (a count exchange's G pieces):
         * the plain entry, whose CTAs share the block's tiles. */
        static const size_t small[] = {2, P2PT_BATCH_BLOCK, P2PT_BATCH_BLOCK + 1};
        for (size_t k = 0; k < P2PT_ARRAY_LEN(small); k++) {
            b = dev_batch_make(d, small[k]);
            GT_OK(dev_batch_run(h, &b, s));
            const bool one_block = small[k] <= P2PT_BATCH_BLOCK;
            expect_last_launch(one_block ? "p2pt_batch_copy_dev" : "p2pt_batch_copy_marks",
                               one_block ? 0 : 1);
            dev_batch_free(&b);
        }
        windows(h, &p, false);
        p2pt_finalize(h);
    }
    /* A local piece among them: the batch is not bound by the link. */
    memset(p.used, 0, sizeof(p.used));
    pushes(&p, d, N, true);
    p2pt_handle *h = gt_handle("tma");
    p2pt_choice c = {sizeof(c)};
    GT_OK(p2pt_explain_batch(h, d, N, s, &c));
    cr_assert(strstr(c.reason, "peer GPU") == NULL, "%s", c.reason);
    GT_OK(p2pt_copy_batch_async(h, d, N, s));
    cr_assert_gt(gt_props(h).max_grid, peer_ctas, "a grid of %u", gt_props(h).max_grid);
    /* Only GPU 0's memory in the windows: the whole grid. */
    struct dev_batch b = dev_batch_make(d, N);
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)p.src[0].base, p.src[0].n));
    GT_OK(p2pt_window_register(h, 0, (void *)(uintptr_t)p.dst[0].base, p.dst[0].n));
    c = dev_batch_explain(h, &b, s);
    cr_assert(strstr(c.reason, "another GPU") == NULL, "%s", c.reason);
    p2pt_properties before = gt_props(h);
    GT_OK(dev_batch_run(h, &b, s));
    cr_assert_gt(gt_props(h).kernel_launches, before.kernel_launches);
    expect_last_launch("p2pt_batch_copy_dev", 0);
    dev_batch_free(&b);
    p2pt_finalize(h);

    /* P2P_TRANSPORT_LINK_PEER=48 widens the peer grid, under either
     * policy, and explain names it; a budget still caps it. */
    memset(p.used, 0, sizeof(p.used));
    pushes(&p, d, N, false);
    for (int e = 0; e < 2; e++) {
        p2pt_init_args aw = {sizeof(aw), NULL, engines[e], "P2P_TRANSPORT_LINK_PEER=48"};
        GT_OK(p2pt_init(&aw, &h));
        GT_OK(p2pt_explain_batch(h, d, N, s, &c));
        cr_assert(strstr(c.reason, "at most 48") && strstr(c.reason, "P2P_TRANSPORT_LINK_PEER"),
                  "%s: %s", engines[e], c.reason);
        GT_OK(p2pt_copy_batch_async(h, d, N, s));
        cr_assert_leq(gt_props(h).max_grid, 48, "%s: a grid of %u", engines[e],
                      gt_props(h).max_grid);
        b = dev_batch_make(d, N);
        windows(h, &p, true);
        c = dev_batch_explain(h, &b, s);
        cr_assert(strstr(c.reason, "at most 48 CTAs (P2P_TRANSPORT_LINK_PEER)"), "%s: %s",
                  engines[e], c.reason);
        GT_OK(dev_batch_run(h, &b, s));
        const uint32_t grid = gt_props(h).max_grid;
        cr_assert(grid > peer_ctas && grid <= 48, "%s: a device batch's grid of %u", engines[e],
                  grid);
        windows(h, &p, false);
        dev_batch_free(&b);
        p2pt_finalize(h);
    }
    p2pt_init_args aw20 = {sizeof(aw20), NULL, "auto",
                           "P2P_TRANSPORT_LINK_PEER=48 P2P_TRANSPORT_SM_BUDGET=20"};
    GT_OK(p2pt_init(&aw20, &h));
    b = dev_batch_make(d, N);
    windows(h, &p, true);
    GT_OK(dev_batch_run(h, &b, s));
    cr_assert_leq(gt_props(h).max_grid, 20, "the budget caps the widened grid");
    expect_last_launch("p2pt_batch_copy_marks", 1);
    windows(h, &p, false);
    dev_batch_free(&b);
    p2pt_finalize(h);

    /* A budget of 8: no wider; a budget of 0: the copy engine for the host
     * batch (no kernel) and status 6 for the device batch. */
    memset(p.used, 0, sizeof(p.used));
    pushes(&p, d, N, false);
    p2pt_init_args a8 = {sizeof(a8), NULL, "auto", "P2P_TRANSPORT_SM_BUDGET=8"};
    GT_OK(p2pt_init(&a8, &h));
    GT_OK(p2pt_copy_batch_async(h, d, N, s));
    cr_assert_leq(gt_props(h).max_grid, 8);
    p2pt_finalize(h);
    p2pt_init_args a0 = {sizeof(a0), NULL, "auto", "P2P_TRANSPORT_SM_BUDGET=0"};
    GT_OK(p2pt_init(&a0, &h));
    GT_OK(p2pt_copy_batch_async(h, d, N, s));
    p2pt_properties p0 = gt_props(h);
    cr_assert_eq(p0.kernel_launches, 0);
    cr_assert_eq(p0.ce_batches, 1);
    b = dev_batch_make(d, N);
    windows(h, &p, true);
    cr_assert_eq(dev_batch_run(h, &b, s), P2PT_NOT_SUPPORTED, "%s", p2pt_last_error(NULL));
    windows(h, &p, false);
    dev_batch_free(&b);
    p2pt_finalize(h);
    GT_CHECK(tcu.cuStreamSynchronize(s));
    tcu.cuStreamDestroy(s);
    pools_free(&p);
}

/* Rows of one size across NVLink as a device batch (an alltoallv's): on a
 * narrow grid its CTAs take equal shares of the pieces, so at most counts
 * and grids a share ends inside a descriptor block and inside a row.
 * Counts around the 256-descriptor block, peer grids of 2 to 64 CTAs,
 * rows pushed to GPU 1 and (every third) pulled from it at random offsets,
 * and one piece of 900 KiB that several shares cut. */
static void equal_shares(void)
{
    gt_enable_peers();
    struct pools p;
    pools_make(&p, 2, 11);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    enum { MOST = 3001, ROW = 14336 };
    const uint64_t big = (900u << 10) + 5;
    p2pt_copy_desc *d = malloc(MOST * sizeof(*d));
    cr_assert_not_null(d);
    static const uint32_t counts[] = {1, 7, 257, 1536, MOST};
    static const char *const grids[] = {"P2P_TRANSPORT_LINK_PEER=2", "P2P_TRANSPORT_LINK_PEER=5",
                                        "P2P_TRANSPORT_LINK_PEER=33",
                                        "P2P_TRANSPORT_LINK_PEER=64"};
    for (size_t g = 0; g < P2PT_ARRAY_LEN(grids); g++) {
        p2pt_init_args a = {sizeof(a), NULL, "tma", grids[g]};
        p2pt_handle *h = NULL;
        GT_OK(p2pt_init(&a, &h));
        windows(h, &p, true);
        for (size_t k = 0; k < P2PT_ARRAY_LEN(counts); k++) {
            const uint32_t n = counts[k];
            struct bt_rng r = {31 + k};
            memset(p.used, 0, sizeof(p.used));
            for (uint32_t i = 0; i < n; i++) {
                const int from = i % 3 == 2 ? 1 : 0;
                d[i] = piece(&p, &r, from, 1 - from, n > 2 && i == n / 2 ? big : ROW);
            }
            poison_pools(&p);
            struct dev_batch b = dev_batch_make(d, n);
            GT_OK(dev_batch_run(h, &b, s));
            GT_CHECK(tcu.cuStreamSynchronize(s));
            char what[96];
            snprintf(what, sizeof(what), "%u rows, %s", n, grids[g]);
            expect_pools(&p, d, n, what);
            dev_batch_free(&b);
        }
        windows(h, &p, false);
        p2pt_finalize(h);
    }
    free(d);
    tcu.cuStreamDestroy(s);
    pools_free(&p);
}

Test(peer_gpu, equal_rows_cut_into_shares_at_any_count_and_grid)
{
    gt_require_gpus(2);
    gt_use_device(0);
    equal_shares();
}

Test(peer_fake, link_bound_batches_take_the_peer_links_ctas_and_the_budget_applies)
{
    gt_use_fake_driver();
    grids_follow_the_link();
}

Test(peer_gpu, link_bound_batches_take_the_peer_links_ctas_and_the_budget_applies)
{
    gt_require_gpus(2);
    gt_use_device(0);
    grids_follow_the_link();
}

static void unmapped_peer(void)
{
    /* No peer access: GPU 1's memory is not mapped for GPU 0. */
    struct pools p;
    pools_make(&p, 2, 17);
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    enum { N = 64 };
    p2pt_copy_desc d[N];
    pushes(&p, d, N, false);
    poison_pools(&p);
    p2pt_handle *h = gt_handle("tma");
    p2pt_status st = p2pt_copy_batch_async(h, d, N, s);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "-> %d: %s", (int)st, p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "not mapped for device 0") &&
                  strstr(p2pt_last_error(NULL), "p2pt_peer_enable"),
              "%s", p2pt_last_error(NULL));
    st = p2pt_window_register(h, 0, (void *)(uintptr_t)p.dst[1].base, p.dst[1].n);
    cr_assert_eq(st, P2PT_INVALID_ARGUMENT, "%s", p2pt_last_error(NULL));
    cr_assert(strstr(p2pt_last_error(NULL), "not mapped for device 0"), "%s",
              p2pt_last_error(NULL));
    cr_assert_eq(gt_props(h).kernel_launches, 0, "nothing enqueued");
    GT_CHECK(tcu.cuCtxSynchronize());
    expect_pools(&p, d, 0, "tma refused an unmapped peer");
    p2pt_finalize(h);
    tcu.cuStreamDestroy(s);
    pools_free(&p);
}

Test(peer_fake, a_peer_not_mapped_is_refused_with_the_remedy_and_nothing_written)
{
    gt_use_fake_driver();
    unmapped_peer();
}

Test(peer_gpu, a_peer_not_mapped_is_refused_with_the_remedy_and_nothing_written)
{
    gt_require_gpus(2);
    gt_use_device(0);
    unmapped_peer();
}
