/* SPDX-License-Identifier: Apache-2.0 */
/*
 * When a host-to-GPU batch of pinned pieces takes the link kernel
 * (kernels/link_copy.cu, a warp a piece) and when the batch kernel: the
 * link kernel only on all the link's CTAs, for pieces of 4 KiB or more on
 * average, and where no warp would carry more than twice its share of the
 * bytes. Each layout is checked against a model written here from those
 * rules and the kernel's dealing (piece i to slot i % P2PT_LINK_SLOTS, slot
 * s to warp s % warps), not from the library's sums: explain names the
 * kernel the model picks and, for the batch kernel, why (the CTAs left, the
 * mean piece, or the heaviest warp's ratio); over the fake driver the
 * launch is of that kernel's entry; on a GPU every layout is byte-exact,
 * guards included. Handles: tma on the built-in link of 8 CTAs, under a
 * CTA cap of 3 and an SM budget of 2; auto; auto with a table whose link is
 * 12 CTAs (96 warps, which do not divide the slots: some warps are dealt
 * two slots, some one). Layouts: equal 4 KiB pieces; one piece in 32 of 1
 * MiB (all on two warps); 160 pieces of 64 KiB; one in 64 of 64 KiB among
 * 256-byte ones (a small mean); 4,096 of 16 KiB whose first is 600 KiB
 * (under auto, passed to the copy engine first); and blocks whose big
 * layers land on the same warps, whose slots the pass sums a layer at a
 * time.
 */
#include <limits.h>

#include "auto_test.h"
#include "batch_test.h"

/* The h2d link's CTAs in the built-in tables (the fake driver's H100 and
 * the GPU machines'). */
#define LINK_H2D_CTAS 8

enum { POOL = 80 << 20 };

static CUstream new_stream(void)
{
    CUstream s;
    GT_CHECK(tcu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

/* What the model picks, and the heaviest warp's bytes over its share. */
enum pick { LINK, NARROW, SMALL, UNEVEN };
struct model {
    enum pick pick;
    double heavy;
    unsigned cap, most; /* the link's CTAs; the most a launch may take */
};

/* `n` pieces of `bytes[i]` across a link of `cap` CTAs, launches of at most
 * `most`. */
static struct model model_of(const uint64_t *bytes, size_t n, unsigned cap, unsigned most)
{
    struct model m = {LINK, 0, cap, most};
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += bytes[i];
    if (most < cap) {
        m.pick = NARROW;
        return m;
    }
    if (total / n < 4096) {
        m.pick = SMALL;
        return m;
    }
    const size_t warps_a_cta = P2PT_LINK_THREADS / 32;
    size_t ctas = (n + warps_a_cta - 1) / warps_a_cta;
    ctas = ctas < cap ? ctas : cap;
    ctas = ctas < P2PT_LINK_SLOTS / warps_a_cta ? ctas : P2PT_LINK_SLOTS / warps_a_cta;
    const size_t warps = ctas * warps_a_cta;
    uint64_t load[P2PT_LINK_SLOTS] = {0}, heaviest = 0;
    for (size_t i = 0; i < n; i++)
        load[(i % P2PT_LINK_SLOTS) % warps] += bytes[i];
    for (size_t w = 0; w < warps; w++)
        heaviest = load[w] > heaviest ? load[w] : heaviest;
    m.heavy = (double)heaviest * (double)warps / (double)total;
    m.pick = m.heavy <= 2.0 ? LINK : UNEVEN;
    return m;
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

/* Explain's words for a batch the model picks `m` for. */
static void expect_kernel(const char *reason, struct model m, uint64_t mean, const char *what)
{
    char want[128] = "";
    switch (m.pick) {
    case LINK:
        snprintf(want, sizeof(want), "through the link kernel");
        break;
    case NARROW:
        snprintf(want, sizeof(want), "leaves %u of the link's %u CTAs", m.most, m.cap);
        break;
    case SMALL:
        snprintf(want, sizeof(want), "pieces of %llu bytes on average",
                 (unsigned long long)mean);
        break;
    case UNEVEN:
        snprintf(want, sizeof(want), "carry %.1fx its share", m.heavy);
        break;
    }
    cr_expect(strstr(reason, want) != NULL &&
                  (m.pick == LINK) == (strstr(reason, "through the batch kernel") == NULL),
              "%s (model %d, %.2f): expected \"%s\": %s", what, (int)m.pick, m.heavy, want,
              reason);
}

/* Over the fake driver, the entry the last launch ran, on no more CTAs
 * than the link's and the handle's. */
static void expect_launch(struct model m, const char *what)
{
    if (!gt_on_fake_driver())
        return;
    char name[64];
    unsigned grid = 0;
    bt_fake_last_launch(name, sizeof(name), &grid);
    cr_expect_str_eq(name, m.pick == LINK ? "p2pt_link_copy" : "p2pt_batch_copy_ring", "%s",
                     what);
    cr_expect_leq(grid, m.cap < m.most ? m.cap : m.most, "%s: a grid of %u", what, grid);
}

/* A table for auto whose host link to the GPU is `ctas` CTAs (the rest as
 * the tests need: tma for every batch); its path in `path`. */
static void link_table(unsigned ctas, char path[64])
{
    char text[256];
    const int cc = device_cc(0);
    snprintf(text, sizeof(text),
             "p2pt-auto 1\narch sm_%d\ncopy local 0 tma\ncopy push 0 ce\ncopy pull 0 ce\n"
             "batch 0 tma\nbatch h2d 0 tma\nbatch d2h 0 tma\nlink h2d %u\nlink d2h 3\n",
             cc, ctas);
    table_file(path, text);
}

/* Each layout on a handle of `engine` with `options`, across a link of
 * `cap` CTAs, launches of at most `most`. Under auto the route waits for
 * the pass (the built-in tables' `batch h2d` lists hold two engines) and
 * every layout's mean sends it to tma: a layout whose first piece is
 * larger than the tables' tma band (1 MiB, 600 KiB) is passed into the
 * copy engine's descriptors first, and the slots are summed from them when
 * tma is chosen. */
static void descriptor_layouts(const char *engine, const char *options, unsigned cap,
                               unsigned most)
{
    struct gt_buf gpu = gt_alloc(POOL), host = gt_alloc_host(POOL);
    uint64_t *bytes = calloc(4096, sizeof(*bytes));
    p2pt_copy_desc *d = calloc(4096, sizeof(*d));
    cr_assert(bytes && d);
    CUstream s = new_stream();
    gt_fill(&host, 31);
    for (int k = 0; k < 5; k++) {
        size_t n = 0, at = 0;
        uint64_t total = 0;
        layout_sizes(k, bytes, &n);
        struct bt_rng r = {57 + (uint64_t)k};
        for (size_t i = 0; i < n; i++) {
            /* Co-aligned at a random offset, a gap of poison after each. */
            at = (at + 15) / 16 * 16 + bt_next(&r) % 16;
            d[i] = (p2pt_copy_desc){(void *)(uintptr_t)(gpu.ptr + at),
                                    (const void *)(uintptr_t)(host.ptr + at), bytes[i]};
            at += bytes[i] + 16;
            total += bytes[i];
        }
        cr_assert_lt(at, (size_t)POOL, "layout %d fits its pool", k);
        const struct model m = model_of(bytes, n, cap, most);
        char what[160];
        snprintf(what, sizeof(what), "layout %d (%zu pieces), %s, %s", k, n, engine,
                 options ? options : "defaults");
        p2pt_handle *h = gt_handle_opts(engine, options);
        p2pt_choice c;
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        GT_OK(p2pt_explain_batch(h, d, n, s, &c));
        expect_kernel(c.reason, m, total / n, what);
        unsigned char *src_host = bt_host_copy(&host);
        gt_poison(&gpu);
        GT_OK(p2pt_copy_batch_async(h, d, n, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_launch(m, what);
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

static void every_handle(void)
{
    descriptor_layouts("tma", NULL, LINK_H2D_CTAS, UINT_MAX);
    descriptor_layouts("tma", "P2P_TRANSPORT_MAX_CTAS=3", LINK_H2D_CTAS, 3);
    descriptor_layouts("tma", "P2P_TRANSPORT_SM_BUDGET=2", LINK_H2D_CTAS, 2);
    descriptor_layouts("auto", NULL, LINK_H2D_CTAS, UINT_MAX);
    char path[64], options[96];
    link_table(12, path);
    snprintf(options, sizeof(options), "P2P_TRANSPORT_AUTO_TABLE=%s", path);
    descriptor_layouts("auto", options, 12, UINT_MAX);
    unlink(path);
}

Test(link_dealing_fake, the_link_kernel_takes_only_batches_it_suits)
{
    gt_use_fake_driver();
    every_handle();
}

Test(link_dealing_gpu, the_link_kernel_takes_only_batches_it_suits)
{
    gt_use_gpu();
    every_handle();
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
        const struct model m = model_of(bytes, layers * rows, LINK_H2D_CTAS, UINT_MAX);
        uint64_t total = 0;
        for (size_t i = 0; i < layers * rows; i++)
            total += bytes[i];
        char what[64];
        snprintf(what, sizeof(what), "blocks: %zu layers of %zu rows", layers, rows);
        p2pt_handle *h = gt_handle("tma");
        p2pt_choice ch;
        memset(&ch, 0, sizeof(ch));
        ch.size = sizeof(ch);
        GT_OK(p2pt_explain_blocks(h, ls, layers, map, rows, s, &ch));
        expect_kernel(ch.reason, m, total / (layers * rows), what);
        unsigned char *src_host = bt_host_copy(&host);
        gt_poison(&gpu);
        GT_OK(p2pt_copy_blocks_async(h, ls, layers, map, rows, s));
        GT_CHECK(tcu.cuStreamSynchronize(s));
        expect_launch(m, what);
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

Test(link_dealing_fake, blocks_take_the_link_kernel_only_where_it_suits_them)
{
    gt_use_fake_driver();
    block_layouts();
}

Test(link_dealing_gpu, blocks_take_the_link_kernel_only_where_it_suits_them)
{
    gt_use_gpu();
    block_layouts();
}
