/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the link kernel's pieces are dealt to its warps. A host-to-GPU batch
 * of pinned pieces takes the link kernel (kernels/link_copy.cu), a warp a
 * piece, only where no warp would carry more than twice its share of the
 * bytes; else the batch kernel, which deals 8 KiB tiles. Each layout is
 * checked against a model written here from the kernel's rule (piece i to
 * slot i % P2PT_LINK_SLOTS, slot s to warp s % warps), not from the
 * library's sums: explain names the kernel the model picks and, for the
 * batch kernel, the model's ratio; over the fake driver the launch is of
 * that kernel's entry; on a GPU every layout is byte-exact, guards
 * included, on the default grid, on 3 CTAs and under an SM budget of 2,
 * and through auto. Layouts: equal 4 KiB pieces; one piece in 32 of 1 MiB (all on
 * two warps); 160 pieces of 64 KiB (some warps three, some two: within
 * twice); one in 64 of 64 KiB among 256-byte ones; 4,096 of 16 KiB whose
 * first is 600 KiB (within twice; under auto, passed to the copy engine
 * first); and blocks whose big
 * layers land on the same warps, whose slots the pass sums a layer at a
 * time.
 */
#include "batch_test.h"

/* The h2d link's CTAs in the built-in tables (the fake driver's H100 and
 * the GPU machines'): the link kernel's grid, a warp a piece up to it. */
#define LINK_H2D_CTAS 8

enum { POOL = 80 << 20 };

static CUstream new_stream(void)
{
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

/* The heaviest warp's bytes over its share, dealing `n` pieces of
 * `bytes[i]` as the link kernel does on a grid of at most `most` CTAs. */
static double model_heavy(const uint64_t *bytes, size_t n, size_t most)
{
    const size_t warps_a_cta = P2PT_LINK_THREADS / 32;
    size_t ctas = (n + warps_a_cta - 1) / warps_a_cta;
    ctas = ctas < most ? ctas : most;
    const size_t warps = ctas * warps_a_cta;
    uint64_t load[P2PT_LINK_SLOTS] = {0}, total = 0, heaviest = 0;
    for (size_t i = 0; i < n; i++) {
        load[(i % P2PT_LINK_SLOTS) % warps] += bytes[i];
        total += bytes[i];
    }
    for (size_t w = 0; w < warps; w++)
        heaviest = load[w] > heaviest ? load[w] : heaviest;
    return (double)heaviest * (double)warps / (double)total;
}

/* Piece sizes of layout `k` (count in *n): see the file's comment. */
static void layout_sizes(int k, uint64_t *bytes, size_t *n)
{
    switch (k) {
    case 0:
        *n = 1024;
        for (size_t i = 0; i < *n; i++)
            bytes[i] = 4096;
        break;
    case 1:
        *n = 1024;
        for (size_t i = 0; i < *n; i++)
            bytes[i] = i % 32 == 0 ? 1 << 20 : 4096;
        break;
    case 2:
        *n = 160;
        for (size_t i = 0; i < *n; i++)
            bytes[i] = 64 << 10;
        break;
    case 3:
        *n = 2048;
        for (size_t i = 0; i < *n; i++)
            bytes[i] = i % 64 == 0 ? 64 << 10 : 256;
        break;
    default:
        *n = 4096;
        for (size_t i = 0; i < *n; i++)
            bytes[i] = i == 0 ? 600 << 10 : 16 << 10;
        break;
    }
}

/* Explain's words for a batch whose model says `heavy`: the link kernel
 * within twice, else the batch kernel naming the ratio. */
static void expect_kernel(const char *reason, double heavy, const char *what)
{
    const bool link = heavy <= 2.0;
    cr_expect((strstr(reason, "link kernel") != NULL) == link, "%s (model %.2f): %s", what,
              heavy, reason);
    if (link)
        return;
    char ratio[32];
    snprintf(ratio, sizeof(ratio), "carry %.1fx its share", heavy);
    cr_expect(strstr(reason, "through the batch kernel") && strstr(reason, ratio),
              "%s: expected the batch kernel and \"%s\": %s", what, ratio, reason);
}

/* Over the fake driver, the entry the last launch ran, on at most `most`
 * CTAs. */
static void expect_launch(double heavy, unsigned most, const char *what)
{
    if (!gt_on_fake_driver())
        return;
    char name[64];
    unsigned grid = 0;
    bt_fake_last_launch(name, sizeof(name), &grid);
    cr_expect_str_eq(name, heavy <= 2.0 ? "p2pt_link_copy" : "p2pt_batch_copy_ring", "%s", what);
    cr_expect_leq(grid, most, "%s: a grid of %u", what, grid);
}

/* Each layout on a handle of `engine` with `options`, whose grid is at most
 * `most` CTAs: P2P_TRANSPORT_MAX_CTAS=3 leaves 24 warps, which do not
 * divide the slots (some warps are dealt six slots, some five), and an SM
 * budget of 2 leaves 16. Under
 * auto the route waits for the pass (the tables' `batch h2d` lists hold two
 * engines) and every layout's mean sends it to tma: a layout whose first
 * piece is larger than the tables' tma band (1 MiB, 600 KiB) is passed into
 * the copy engine's descriptors first, and the slots are summed from them
 * when tma is chosen. */
static void descriptor_layouts(const char *engine, const char *options, unsigned most)
{
    struct gt_buf gpu = gt_alloc(POOL), host = gt_alloc_host(POOL);
    uint64_t *bytes = calloc(4096, sizeof(*bytes));
    p2pt_copy_desc *d = calloc(4096, sizeof(*d));
    cr_assert(bytes && d);
    CUstream s = new_stream();
    gt_fill(&host, 31);
    for (int k = 0; k < 5; k++) {
        size_t n = 0, at = 0;
        layout_sizes(k, bytes, &n);
        struct bt_rng r = {57 + (uint64_t)k};
        for (size_t i = 0; i < n; i++) {
            /* Co-aligned at a random offset, a gap of poison after each. */
            at = (at + 15) / 16 * 16 + bt_next(&r) % 16;
            d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(gpu.ptr + at),
                                    (const void *)(uintptr_t)(host.ptr + at), bytes[i]};
            at += bytes[i] + 16;
        }
        cr_assert_lt(at, (size_t)POOL, "layout %d fits its pool", k);
        const double heavy = model_heavy(bytes, n, most);
        char what[96];
        snprintf(what, sizeof(what), "layout %d (%zu pieces), %s, %s", k, n, engine,
                 options ? options : "defaults");
        p2pt_handle *h = gt_handle_opts(engine, options);
        p2pt_choice c;
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        GT_OK(p2pt_explain_batch(h, d, n, s, &c));
        expect_kernel(c.reason, heavy, what);
        unsigned char *src_host = bt_host_copy(&host);
        gt_poison(&gpu);
        GT_OK(p2pt_copy_batch_async(h, d, n, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_launch(heavy, most, what);
        if (!gt_on_fake_driver())
            bt_expect(&gpu, &host, src_host, d, n, NULL, what);
        free(src_host);
        p2pt_finalize(h);
    }
    free(bytes);
    free(d);
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(link_dealing_fake, the_link_kernel_takes_only_batches_it_deals_evenly)
{
    gt_use_fake_driver();
    descriptor_layouts("tma", NULL, LINK_H2D_CTAS);
    descriptor_layouts("tma", "P2P_TRANSPORT_MAX_CTAS=3", 3);
    descriptor_layouts("tma", "P2P_TRANSPORT_SM_BUDGET=2", 2);
    descriptor_layouts("auto", NULL, LINK_H2D_CTAS);
}

Test(link_dealing_gpu, the_link_kernel_takes_only_batches_it_deals_evenly)
{
    gt_use_gpu();
    descriptor_layouts("tma", NULL, LINK_H2D_CTAS);
    descriptor_layouts("tma", "P2P_TRANSPORT_MAX_CTAS=3", 3);
    descriptor_layouts("tma", "P2P_TRANSPORT_SM_BUDGET=2", 2);
    descriptor_layouts("auto", NULL, LINK_H2D_CTAS);
}

/* Blocks: `layers` layers of `rows` rows, a big layer's blocks `big_bytes`,
 * the others' 4 KiB, each layer's source and destination in its own stretch
 * (apart, so they stay blocks), a reversed mapping. */
static void block_layouts(void)
{
    struct gt_buf gpu = gt_alloc(POOL), host = gt_alloc_host(POOL);
    CUstream s = new_stream();
    gt_fill(&host, 32);
    /* 8 layers of 17 rows, layers 0 and 4 big: pieces 0-16 and 68-84 on
     * warps 0-16 and 4-20 of 64. 2 layers of 300 rows (more than the
     * slots: the pass adds whole turns at once), the first big. */
    const struct {
        size_t layers, rows;
        unsigned big; /* a bit per big layer */
        uint64_t big_bytes;
    } cases[] = {{8, 17, 0x11, 256 << 10}, {2, 300, 0x1, 64 << 10}, {3, 300, 0x0, 0}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const size_t layers = cases[c].layers, rows = cases[c].rows;
        p2pt_block_layer ls[8];
        int64_t *map = calloc(2 * rows, sizeof(*map));
        uint64_t *bytes = calloc(layers * rows, sizeof(*bytes));
        p2pt_copy_desc *d = calloc(layers * rows, sizeof(*d));
        cr_assert(map && bytes && d);
        for (size_t i = 0; i < rows; i++)
            map[2 * i] = (int64_t)i, map[2 * i + 1] = (int64_t)(rows - 1 - i);
        size_t at = 0;
        for (size_t l = 0; l < layers; l++) {
            const uint64_t bb = (cases[c].big >> l) & 1 ? cases[c].big_bytes : 4096;
            /* One block of poison past each layer's end. */
            ls[l] = (p2pt_block_layer){sizeof(ls[l]), (void *)(uintptr_t)(gpu.ptr + at),
                                       (const void *)(uintptr_t)(host.ptr + at), bb, rows, rows};
            for (size_t i = 0; i < rows; i++) {
                bytes[l * rows + i] = bb;
                d[l * rows + i] = (p2pt_copy_desc){
                    (void *)(uintptr_t)(gpu.ptr + at + (uint64_t)map[2 * i + 1] * bb),
                    (const void *)(uintptr_t)(host.ptr + at + (uint64_t)map[2 * i] * bb), bb};
            }
            at += (rows + 1) * bb;
        }
        cr_assert_lt(at, (size_t)POOL, "case %zu fits its pool", c);
        const double heavy = model_heavy(bytes, layers * rows, LINK_H2D_CTAS);
        char what[64];
        snprintf(what, sizeof(what), "blocks: %zu layers of %zu rows", layers, rows);
        p2pt_handle *h = gt_handle("tma");
        p2pt_choice ch;
        memset(&ch, 0, sizeof(ch));
        ch.size = sizeof(ch);
        GT_OK(p2pt_explain_blocks(h, ls, layers, map, rows, s, &ch));
        expect_kernel(ch.reason, heavy, what);
        unsigned char *src_host = bt_host_copy(&host);
        gt_poison(&gpu);
        GT_OK(p2pt_copy_blocks_async(h, ls, layers, map, rows, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_launch(heavy, LINK_H2D_CTAS, what);
        if (!gt_on_fake_driver())
            bt_expect(&gpu, &host, src_host, d, layers * rows, NULL, what);
        free(src_host);
        p2pt_finalize(h);
        free(map);
        free(bytes);
        free(d);
    }
    gt_free(&gpu);
    gt_free(&host);
    GT_CHECK(tcu.cuStreamDestroy(s));
}

Test(link_dealing_fake, blocks_take_the_link_kernel_only_where_dealt_evenly)
{
    gt_use_fake_driver();
    block_layouts();
}

Test(link_dealing_gpu, blocks_take_the_link_kernel_only_where_dealt_evenly)
{
    gt_use_gpu();
    block_layouts();
}
